/* Multi-head scaled dot-product attention on the CPU.  One (batch, head) pair
 * per task; inside a task the products are small single-threaded gemms
 * (S = Q K^T, O = P V and their transposes in backward), which beat hand loops
 * by several times.  Probabilities are saved before dropout (softmax backward
 * needs them), together with the dropout mask. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "vecmath.h"

#ifdef LL_REAL_DOUBLE
#define GEMM cblas_dgemm
#else
#define GEMM cblas_sgemm
#endif

static int key_limit(const int *key_len, int b, int Tk) {
    int n = key_len ? key_len[b] : Tk;
    return n < Tk ? n : Tk;
}

/* Keys a query row may see: padding limit, and with causal masking positions
 * 0..i + (Tk - Tq) (Tk > Tq happens in incremental decoding). */
static int row_limit(int lim, int causal, int i, int Tq, int Tk) {
    if (causal && i + (Tk - Tq) + 1 < lim) return i + (Tk - Tq) + 1;
    return lim;
}

/* One query per (batch, head) -- incremental decoding: vector loops beat gemm calls here. */
static void attention_one_query(real *out, real *probs, const real *q, int q_stride, const real *k, const real *v,
                                int kv_stride, const int *key_len, int B, int Tk, int H, int Dh) {
    const real scale = 1 / sqrt((real)Dh);
    const int C = H * Dh;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int lim = key_limit(key_len, b, Tk);
            real *P = probs + ((size_t)b * H + h) * Tk;
            const real *qi = q + (size_t)b * q_stride + h * Dh;
            real mx = -INFINITY;
            for (int j = 0; j < lim; j++) {
                const real *kj = k + ((size_t)b * Tk + j) * kv_stride + h * Dh;
                real s = 0;
#pragma omp simd reduction(+ : s)
                for (int d = 0; d < Dh; d++) s += qi[d] * kj[d];
                P[j] = s * scale;
                mx = P[j] > mx ? P[j] : mx;
            }
            const real sum = lim > 0 ? ll_row_exp_inplace(P, lim, mx, NULL) : 0;
            real *o = out + (size_t)b * C + h * Dh;
            for (int d = 0; d < Dh; d++) o[d] = 0;
            for (int j = 0; j < lim; j++) {
                const real p = P[j] / sum, *vj = v + ((size_t)b * Tk + j) * kv_stride + h * Dh;
                P[j] = p;
#pragma omp simd
                for (int d = 0; d < Dh; d++) o[d] += p * vj[d];
            }
            for (int j = lim; j < Tk; j++) P[j] = 0;
        }
}

void cpu_attention_fwd(ll_backend *be, real *out, real *probs, uint8_t *pmask, const real *q, int q_stride,
                       const real *k, const real *v, int kv_stride, const int *key_len, int B, int Tq, int Tk,
                       int H, int Dh, int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset) {
    (void)be;
    if (Tq == 1 && attn_dropout <= 0) { /* causal is moot with one query at the end */
        attention_one_query(out, probs, q, q_stride, k, v, kv_stride, key_len, B, Tk, H, Dh);
        return;
    }
    const real scale = 1 / sqrt((real)Dh);
    const int C = H * Dh;
    const size_t per_bh = (size_t)Tq * Tk;
    if (attn_dropout > 0) cpu_dropout_mask(pmask, (size_t)B * H * per_bh, attn_dropout, rng, rng_offset);
    const real keep_scale = attn_dropout > 0 ? 1 / (1 - attn_dropout) : 1;
#pragma omp parallel
    {
        real *Pd = attn_dropout > 0 ? ll_aligned_alloc(sizeof(real) * per_bh) : NULL;
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                const int lim = key_limit(key_len, b, Tk);
                real *P = probs + ((size_t)b * H + h) * per_bh;
                const real *qb = q + (size_t)b * Tq * q_stride + h * Dh;
                const real *kb = k + (size_t)b * Tk * kv_stride + h * Dh;
                const real *vb = v + (size_t)b * Tk * kv_stride + h * Dh;
                real *ob = out + (size_t)b * Tq * C + h * Dh;
                if (lim <= 0) {
                    memset(P, 0, sizeof(real) * per_bh);
                    for (int i = 0; i < Tq; i++) memset(ob + (size_t)i * C, 0, sizeof(real) * Dh);
                    continue;
                }
                GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, lim, Dh, scale, qb, q_stride, kb, kv_stride, 0, P,
                     Tk);
                for (int i = 0; i < Tq; i++) {
                    real *Pi = P + (size_t)i * Tk;
                    const int n = row_limit(lim, causal, i, Tq, Tk);
                    if (n > 0) {
                        const real mx = ll_row_max(Pi, n);
                        ll_row_affine(Pi, n, 1 / ll_row_exp_inplace(Pi, n, mx, NULL), 0);
                    }
                    for (int j = n; j < Tk; j++) Pi[j] = 0;
                }
                const real *Puse = P;
                if (Pd) {
                    const uint8_t *M = pmask + ((size_t)b * H + h) * per_bh;
                    for (size_t e = 0; e < per_bh; e++) Pd[e] = M[e] ? P[e] * keep_scale : 0;
                    Puse = Pd;
                }
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, Dh, lim, 1, Puse, Tk, vb, kv_stride, 0, ob, C);
            }
        free(Pd);
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
        real *dP = ll_aligned_alloc(sizeof(real) * per_bh);
        real *Pd = attn_dropout > 0 ? ll_aligned_alloc(sizeof(real) * per_bh) : NULL;
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                const real *P = probs + ((size_t)b * H + h) * per_bh;
                const uint8_t *M = attn_dropout > 0 ? pmask + ((size_t)b * H + h) * per_bh : NULL;
                /* keys beyond the last nonzero column carry no gradient */
                int lim = 0;
                for (int i = 0; i < Tq; i++)
                    for (int j = Tk - 1; j >= lim; j--)
                        if (P[(size_t)i * Tk + j] != 0) {
                            lim = j + 1;
                            break;
                        }
                const real *qb = q + (size_t)b * Tq * q_stride + h * Dh;
                const real *kb = k + (size_t)b * Tk * kv_stride + h * Dh;
                const real *vb = v + (size_t)b * Tk * kv_stride + h * Dh;
                real *dqb = dq + (size_t)b * Tq * q_stride + h * Dh;
                real *dkb = dk + (size_t)b * Tk * kv_stride + h * Dh;
                real *dvb = dv + (size_t)b * Tk * kv_stride + h * Dh;
                const real *go = dout + (size_t)b * Tq * C + h * Dh;
                /* this (b, h) owns its slices of dq, dk, dv: overwrite them, zeros
                 * where no gradient flows (callers need not clear the buffers) */
                for (int j = lim; j < Tk; j++) {
                    memset(dkb + (size_t)j * kv_stride, 0, sizeof(real) * Dh);
                    memset(dvb + (size_t)j * kv_stride, 0, sizeof(real) * Dh);
                }
                if (lim == 0) {
                    for (int i = 0; i < Tq; i++) memset(dqb + (size_t)i * q_stride, 0, sizeof(real) * Dh);
                    continue;
                }
                const real *Puse = P;
                if (Pd) {
                    for (size_t e = 0; e < per_bh; e++) Pd[e] = M[e] ? P[e] * keep_scale : 0;
                    Puse = Pd;
                }
                /* dV = P~^T dO ; dP~ = dO V^T */
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, lim, Dh, Tq, 1, Puse, Tk, go, C, 0, dvb, kv_stride);
                GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, Tq, lim, Dh, 1, go, C, vb, kv_stride, 0, dP, Tk);
                /* through dropout and softmax: dS = P * (dP - sum_j P dP) * scale */
                for (int i = 0; i < Tq; i++) {
                    const real *Pi = P + (size_t)i * Tk;
                    real *dPi = dP + (size_t)i * Tk;
                    if (M) {
                        const uint8_t *Mi = M + (size_t)i * Tk;
                        for (int j = 0; j < lim; j++) dPi[j] = Mi[j] ? dPi[j] * keep_scale : 0;
                    }
                    real dot = 0;
                    for (int j = 0; j < lim; j++) dot += Pi[j] * dPi[j];
                    for (int j = 0; j < lim; j++) dPi[j] = Pi[j] * (dPi[j] - dot) * scale;
                }
                /* dQ = dS K ; dK = dS^T Q */
                GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, Tq, Dh, lim, 1, dP, Tk, kb, kv_stride, 0, dqb,
                     q_stride);
                GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, lim, Dh, Tq, 1, dP, Tk, qb, q_stride, 0, dkb, kv_stride);
            }
        free(dP);
        free(Pd);
    }
}
