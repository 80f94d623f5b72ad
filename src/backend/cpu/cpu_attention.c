/* Multi-head scaled dot-product attention on the CPU, one (batch, head) pair
 * per task.  Probabilities are saved before dropout (softmax backward needs
 * them) together with the dropout mask. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

static int key_limit(const int *key_len, int b, int Tk) {
    int n = key_len ? key_len[b] : Tk;
    return n < Tk ? n : Tk;
}

void cpu_attention_fwd(ll_backend *be, real *out, real *probs, uint8_t *pmask, const real *q, int q_stride,
                       const real *k, const real *v, int kv_stride, const int *key_len, int B, int Tq, int Tk,
                       int H, int Dh, int causal, real attn_dropout, const ll_philox *rng) {
    (void)be;
    const real scale = 1 / sqrt((real)Dh);
    const int C = H * Dh;
    const size_t per_bh = (size_t)Tq * Tk;
    if (attn_dropout > 0) cpu_dropout_mask(pmask, (size_t)B * H * per_bh, attn_dropout, rng, 0);
    const real keep_scale = attn_dropout > 0 ? 1 / (1 - attn_dropout) : 1;
    /* With causal masking the query at position i sees keys 0..i + (Tk - Tq)
     * (Tk > Tq happens in incremental decoding). */
    const int causal_shift = Tk - Tq;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int klim = key_limit(key_len, b, Tk);
            real *P = probs + ((size_t)b * H + h) * per_bh;
            const uint8_t *M = attn_dropout > 0 ? pmask + ((size_t)b * H + h) * per_bh : NULL;
            for (int i = 0; i < Tq; i++) {
                const real *qi = q + ((size_t)b * Tq + i) * q_stride + h * Dh;
                real *Pi = P + (size_t)i * Tk;
                int lim = klim;
                if (causal && i + causal_shift + 1 < lim) lim = i + causal_shift + 1;
                real mx = -INFINITY;
                for (int j = 0; j < lim; j++) {
                    const real *kj = k + ((size_t)b * Tk + j) * kv_stride + h * Dh;
                    real s = 0;
#pragma omp simd reduction(+ : s)
                    for (int d = 0; d < Dh; d++) s += qi[d] * kj[d];
                    s *= scale;
                    Pi[j] = s;
                    if (s > mx) mx = s;
                }
                real sum = 0;
                for (int j = 0; j < lim; j++) {
                    Pi[j] = rexp(Pi[j] - mx);
                    sum += Pi[j];
                }
                real inv = lim > 0 ? 1 / sum : 0;
                for (int j = 0; j < lim; j++) Pi[j] *= inv;
                for (int j = lim; j < Tk; j++) Pi[j] = 0;
                real *o = out + ((size_t)b * Tq + i) * C + h * Dh;
                memset(o, 0, sizeof(real) * Dh);
                for (int j = 0; j < lim; j++) {
                    real p = Pi[j];
                    if (M) p = M[(size_t)i * Tk + j] ? p * keep_scale : 0;
                    if (p == 0) continue;
                    const real *vj = v + ((size_t)b * Tk + j) * kv_stride + h * Dh;
#pragma omp simd
                    for (int d = 0; d < Dh; d++) o[d] += p * vj[d];
                }
            }
        }
}

void cpu_attention_bwd(ll_backend *be, real *dq, real *dk, real *dv, const real *dout, const real *probs,
                       const uint8_t *pmask, const real *q, int q_stride, const real *k, const real *v,
                       int kv_stride, int B, int Tq, int Tk, int H, int Dh, real attn_dropout) {
    (void)be;
    const real scale = 1 / sqrt((real)Dh);
    const int C = H * Dh;
    const size_t per_bh = (size_t)Tq * Tk;
    const real keep_scale = attn_dropout > 0 ? 1 / (1 - attn_dropout) : 1;
#pragma omp parallel
    {
        real *dP = ll_aligned_alloc(sizeof(real) * Tk);
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                const real *P = probs + ((size_t)b * H + h) * per_bh;
                const uint8_t *M = attn_dropout > 0 ? pmask + ((size_t)b * H + h) * per_bh : NULL;
                for (int i = 0; i < Tq; i++) {
                    const real *Pi = P + (size_t)i * Tk;
                    const real *go = dout + ((size_t)b * Tq + i) * C + h * Dh;
                    const real *qi = q + ((size_t)b * Tq + i) * q_stride + h * Dh;
                    real *dqi = dq + ((size_t)b * Tq + i) * q_stride + h * Dh;
                    /* dP_ij = dropout'(go . v_j); dv_j += p~_ij go.  Masked keys have P = 0. */
                    real dot = 0;
                    for (int j = 0; j < Tk; j++) {
                        if (Pi[j] == 0) {
                            dP[j] = 0;
                            continue;
                        }
                        real m = M ? (M[(size_t)i * Tk + j] ? keep_scale : 0) : 1;
                        const real *vj = v + ((size_t)b * Tk + j) * kv_stride + h * Dh;
                        real *dvj = dv + ((size_t)b * Tk + j) * kv_stride + h * Dh;
                        real g = 0;
                        if (m != 0) {
                            real pm = Pi[j] * m;
#pragma omp simd reduction(+ : g)
                            for (int d = 0; d < Dh; d++) {
                                g += go[d] * vj[d];
                                dvj[d] += pm * go[d];
                            }
                        }
                        dP[j] = g * m;
                        dot += Pi[j] * dP[j];
                    }
                    /* softmax backward, then the scaled dot product. */
                    for (int j = 0; j < Tk; j++) {
                        if (Pi[j] == 0) continue;
                        real ds = Pi[j] * (dP[j] - dot) * scale;
                        const real *kj = k + ((size_t)b * Tk + j) * kv_stride + h * Dh;
                        real *dkj = dk + ((size_t)b * Tk + j) * kv_stride + h * Dh;
#pragma omp simd
                        for (int d = 0; d < Dh; d++) {
                            dqi[d] += ds * kj[d];
                            dkj[d] += ds * qi[d];
                        }
                    }
                }
            }
        free(dP);
    }
}
