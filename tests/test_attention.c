/* The fp32 CPU attention (flash style: out + lse, backward recomputes) against
 * a plain double-precision softmax reference, which draws its dropout bits
 * independently by the rule documented in include/ll/backend.h:
 *   element (b, h, i, j) keeps iff half-word e = rng_offset + ((b*H+h)*Tq+i)*Tk+j
 *   of the Philox stream (bits 16*(e&1).. of word e>>1) >= round(p * 65536).
 * Covers padding (including a sentence with no keys), causal masks with
 * Tk >= Tq, cross attention, several query tiles, dropout at a nonzero
 * offset, a batch slice with its row offset, the few-query decoding path
 * (with the head sizes of its AVX-512 kernel), and attention_cached (keys
 * through per-row ancestry tables).
 * The gradient checks (tests/gradcheck/test_ops.c) run the double build, which
 * takes the scalar loops; this runs the vectorised ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "util/testutil.h"

#define A_(p) ((ll_act *)(p)) /* host test buffers in the activation dtype (real) */

typedef struct {
    int B, Tq, Tk, H, Dh, causal;
    float p;
    uint64_t off;
    const int *klen;
    const ll_philox *rng;
} shape;

static int keep_bit(const shape *s, int b, int h, int i, int j) {
    if (s->p <= 0) return 1;
    const uint64_t e = s->off + (((uint64_t)b * s->H + h) * s->Tq + i) * s->Tk + j;
    const uint32_t half = (ll_philox_u32(s->rng, e >> 1) >> (16 * (e & 1))) & 0xffff;
    return half >= (uint32_t)lround(s->p * 65536.0);
}

static int visible(const shape *s, int b, int i) {
    int n = s->klen ? s->klen[b] : s->Tk;
    if (n > s->Tk) n = s->Tk;
    if (s->causal && i + (s->Tk - s->Tq) + 1 < n) n = i + (s->Tk - s->Tq) + 1;
    return n < 0 ? 0 : n;
}

/* Double reference of forward (out, lse) and backward (dq, dk, dv), the
 * textbook way: explicit probabilities, dS = P (dP - rowsum(P dP)). */
static void reference(const shape *s, const float *q, int qs, const float *k, const float *v, int kvs,
                      const float *dout, double *out, double *lse, double *dq, double *dk, double *dv) {
    const int C = s->H * s->Dh, Tk = s->Tk;
    const double scale = 1 / sqrt((double)s->Dh), ks = 1 / (1 - (double)s->p);
    double *P = malloc(sizeof(double) * Tk), *dP = malloc(sizeof(double) * Tk);
    memset(dq, 0, sizeof(double) * s->B * s->Tq * C);
    memset(dk, 0, sizeof(double) * s->B * Tk * C);
    memset(dv, 0, sizeof(double) * s->B * Tk * C);
    for (int b = 0; b < s->B; b++)
        for (int h = 0; h < s->H; h++)
            for (int i = 0; i < s->Tq; i++) {
                const int n = visible(s, b, i);
                const float *qi = q + ((size_t)b * s->Tq + i) * qs + h * s->Dh;
                const float *gi = dout + ((size_t)b * s->Tq + i) * C + h * s->Dh;
                double *oi = out + ((size_t)b * s->Tq + i) * C + h * s->Dh;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    double d = 0;
                    for (int e = 0; e < s->Dh; e++) d += (double)qi[e] * k[((size_t)b * Tk + j) * kvs + h * s->Dh + e];
                    P[j] = d * scale;
                    mx = fmax(mx, P[j]);
                }
                for (int j = 0; j < n; j++) sum += exp(P[j] - mx);
                lse[((size_t)b * s->H + h) * s->Tq + i] = n ? mx + log(sum) : -INFINITY;
                for (int e = 0; e < s->Dh; e++) oi[e] = 0;
                double dot = 0;
                for (int j = 0; j < n; j++) {
                    P[j] = exp(P[j] - mx) / sum;
                    const double kp = keep_bit(s, b, h, i, j) ? ks : 0;
                    const float *vj = v + ((size_t)b * Tk + j) * kvs + h * s->Dh;
                    double g = 0;
                    for (int e = 0; e < s->Dh; e++) {
                        oi[e] += P[j] * kp * vj[e];
                        dv[((size_t)b * Tk + j) * C + h * s->Dh + e] += P[j] * kp * gi[e];
                        g += (double)gi[e] * vj[e];
                    }
                    dP[j] = g * kp;
                    dot += P[j] * dP[j];
                }
                for (int j = 0; j < n; j++) {
                    const double dS = P[j] * (dP[j] - dot) * scale;
                    for (int e = 0; e < s->Dh; e++) {
                        dq[((size_t)b * s->Tq + i) * C + h * s->Dh + e] +=
                            dS * k[((size_t)b * Tk + j) * kvs + h * s->Dh + e];
                        dk[((size_t)b * Tk + j) * C + h * s->Dh + e] += dS * qi[e];
                    }
                }
            }
    free(P), free(dP);
}

/* max |got - want| / max(1, max |want|) over rows x cols (got has row stride gs) */
static double err(const float *got, int gs, const double *want, int rows, int cols) {
    double w = 0, m = 1;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) m = fmax(m, fabs(want[(size_t)r * cols + c]));
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) w = fmax(w, fabs(got[(size_t)r * gs + c] - want[(size_t)r * cols + c]));
    return w / m;
}

static void run_dh(int Tq, int Tk, int causal, float p, const int *klen, int B, int Dh) {
    ll_backend *be = ll_backend_cpu();
    const int H = 3, C = H * Dh;
    ll_philox rng;
    ll_philox_init(&rng, 42, LL_RNG_DROPOUT, (uint32_t)(Tq * 1000 + Tk));
    /* a slice that starts at sentence 5 of a larger batch */
    shape s = {B, Tq, Tk, H, Dh, causal, p, (uint64_t)5 * H * Tq * Tk, klen, &rng};
    /* q packed with k, v as in self-attention (row stride 3C); k, v interleaved (2C) */
    const size_t nq = (size_t)B * Tq * C, nk = (size_t)B * Tk * C;
    float *q = malloc(sizeof(float) * nq * 3), *kv = malloc(sizeof(float) * nk * 2), *g = malloc(sizeof(float) * nq);
    ll_philox r;
    ll_philox_init(&r, 8, 9, (uint32_t)(Tq + 7 * Tk));
    for (size_t i = 0; i < nq * 3; i++) q[i] = 4 * ll_philox_uniform(&r, i) - 2;
    for (size_t i = 0; i < nk * 2; i++) kv[i] = 4 * ll_philox_uniform(&r, 1000000 + i) - 2;
    for (size_t i = 0; i < nq; i++) g[i] = 2 * ll_philox_uniform(&r, 2000000 + i) - 1;
    float *out = malloc(sizeof(float) * nq), *lse = malloc(sizeof(float) * B * H * Tq);
    float *dq = malloc(sizeof(float) * nq * 3), *dkv = malloc(sizeof(float) * nk * 2);
    for (size_t i = 0; i < nq * 3; i++) dq[i] = NAN; /* backward must overwrite its columns */
    for (size_t i = 0; i < nk * 2; i++) dkv[i] = NAN;
    double *ro = malloc(sizeof(double) * nq), *rl = malloc(sizeof(double) * B * H * Tq);
    double *rdq = malloc(sizeof(double) * nq), *rdk = malloc(sizeof(double) * nk), *rdv = malloc(sizeof(double) * nk);

    be->attention_fwd(be, A_(out), lse, A_(q), 3 * C, A_(kv), A_(kv + C), 2 * C, klen, B, Tq, Tk, H, Dh, causal, p,
                      &rng, s.off);
    be->attention_bwd(be, A_(dq), A_(dkv), A_(dkv + C), A_(g), A_(out), lse, A_(q), 3 * C, A_(kv), A_(kv + C), 2 * C,
                      klen, B, Tq, Tk, H, Dh, causal, p, &rng, s.off);
    reference(&s, q, 3 * C, kv, kv + C, 2 * C, g, ro, rl, rdq, rdk, rdv);

    double el = 0;
    for (int i = 0; i < B * H * Tq; i++)
        el = fmax(el, isinf(rl[i]) ? (lse[i] == rl[i] ? 0 : INFINITY) : fabs(lse[i] - rl[i]));
    const double eo = err(out, C, ro, B * Tq, C), eq = err(dq, 3 * C, rdq, B * Tq, C);
    const double ek = err(dkv, 2 * C, rdk, B * Tk, C), ev = err(dkv + C, 2 * C, rdv, B * Tk, C);
    CHECK_MSG(eo < 1e-5 && el < 1e-5 && eq < 1e-5 && ek < 1e-5 && ev < 1e-5,
              "attention Tq=%d Tk=%d Dh=%d causal=%d p=%g: out %g lse %g dq %g dk %g dv %g", Tq, Tk, Dh, causal, p, eo,
              el, eq, ek, ev);

    /* lse may be NULL (inference): same out */
    float *out2 = malloc(sizeof(float) * nq);
    be->attention_fwd(be, A_(out2), NULL, A_(q), 3 * C, A_(kv), A_(kv + C), 2 * C, klen, B, Tq, Tk, H, Dh, causal, p,
                      &rng, s.off);
    CHECK(!memcmp(out, out2, sizeof(float) * nq));
    /* sentences 1.. alone, with their row offset, get the same bits */
    if (B > 1) {
        const uint64_t off1 = s.off + (uint64_t)H * Tq * Tk;
        be->attention_fwd(be, A_(out2), NULL, A_(q + (size_t)Tq * 3 * C), 3 * C, A_(kv + (size_t)Tk * 2 * C),
                          A_(kv + (size_t)Tk * 2 * C + C), 2 * C, klen ? klen + 1 : NULL, B - 1, Tq, Tk, H, Dh, causal, p,
                          &rng, off1);
        CHECK_MSG(!memcmp(out + (size_t)Tq * C, out2, sizeof(float) * (B - 1) * Tq * C), "slice Tq=%d Tk=%d p=%g", Tq,
                  Tk, p);
    }
    free(q), free(kv), free(g), free(out), free(out2), free(lse), free(dq), free(dkv);
    free(ro), free(rl), free(rdq), free(rdk), free(rdv);
}

static void run(int Tq, int Tk, int causal, float p, const int *klen, int B) { run_dh(Tq, Tk, causal, p, klen, B, 16); }

/* attention_cached (a decoding step's self-attention through the rows'
 * ancestry) against a double softmax over the keys the table names */
static void run_cached(int rows, int Dh, int max_T, int n_keys, int with_anc) {
    ll_backend *be = ll_backend_cpu();
    const int H = 3, C = H * Dh, qs = 3 * C;
    const size_t row_stride = (size_t)max_T * 2 * C;
    float *q = malloc(sizeof(float) * rows * qs), *kv = malloc(sizeof(float) * rows * row_stride);
    float *out = malloc(sizeof(float) * rows * C);
    double *want = malloc(sizeof(double) * rows * C), *P = malloc(sizeof(double) * (n_keys + 1));
    int *anc = malloc(sizeof(int) * rows * max_T);
    ll_philox r;
    ll_philox_init(&r, 8, 10, (uint32_t)(rows * 100 + Dh));
    for (int i = 0; i < rows * qs; i++) q[i] = 4 * ll_philox_uniform(&r, i) - 2;
    for (size_t i = 0; i < rows * row_stride; i++) kv[i] = 4 * ll_philox_uniform(&r, 1000000 + i) - 2;
    for (int i = 0; i < rows * max_T; i++) anc[i] = (int)ll_philox_below(&r, 3000000 + i, rows);
    for (int b = 0; b < rows; b++)
        for (int h = 0; h < H; h++) {
            const float *qi = q + (size_t)b * qs + h * Dh;
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < n_keys; j++) {
                const int a = with_anc ? anc[b * max_T + j] : b;
                const float *kj = kv + a * row_stride + (size_t)j * 2 * C + h * Dh;
                double d = 0;
                for (int e = 0; e < Dh; e++) d += (double)qi[e] * kj[e];
                P[j] = d / sqrt((double)Dh);
                mx = fmax(mx, P[j]);
            }
            for (int j = 0; j < n_keys; j++) sum += (P[j] = exp(P[j] - mx));
            for (int e = 0; e < Dh; e++) {
                double o = 0;
                for (int j = 0; j < n_keys; j++) {
                    const int a = with_anc ? anc[b * max_T + j] : b;
                    o += P[j] / sum * kv[a * row_stride + (size_t)j * 2 * C + C + h * Dh + e];
                }
                want[(size_t)b * C + h * Dh + e] = o;
            }
        }
    const int keys_at = n_keys / 2; /* as a decoding step: part of the count read through a pointer */
    be->attention_cached(be, A_(out), A_(q), qs, A_(kv), 2 * C, row_stride, with_anc ? anc : NULL, max_T,
                         n_keys - keys_at, &keys_at, rows, H, Dh);
    const double e = err(out, C, want, rows, C);
    CHECK_MSG(e < 1e-5, "attention_cached rows=%d Dh=%d keys=%d anc=%d: out %g", rows, Dh, n_keys, with_anc, e);
    free(q), free(kv), free(out), free(want), free(P), free(anc);
}

int main(void) {
    ll_set_threads(2);
    const int kl3[3] = {19, 16, 0}; /* the last sentence has no keys */
    const int kl2[2] = {7, 5};
    const int kl_long[2] = {150, 97};
    for (int d = 0; d < 2; d++) {
        const float p = d ? 0.25f : 0;
        run(5, 19, 0, p, kl3, 3);          /* cross attention */
        run(7, 7, 1, p, kl2, 2);           /* causal self-attention, padded */
        run(3, 9, 1, p, NULL, 2);          /* causal, Tk > Tq (the last 3 positions) */
        run(1, 33, 0, p, NULL, 2);         /* one query */
        run(150, 150, 1, p, kl_long, 2);   /* three query tiles */
        run(100, 40, 0, p, kl_long + 1, 1); /* two tiles of cross attention */
    }
    /* head sizes with the few-query kernels (Tq <= 8, no dropout; AVX-512: 32, 64, 128, AVX2: 32, 64), in
     * each form this CPU runs (the flags are read per call), the plain loops last */
    for (int form = 0; form < TU_FORMS; form++) {
        if (!tu_cpu_form(form)) continue;
        const int dhs[3] = {32, 64, 128};
        for (int i = 0; i < 3; i++) {
            run_dh(5, 19, 0, 0, kl3, 3, dhs[i]);  /* a sentence's beam rows against its source; one sentence without keys */
            run_dh(3, 9, 1, 0, NULL, 2, dhs[i]);  /* causal, Tk > Tq */
            run_dh(1, 33, 0, 0, kl2, 2, dhs[i]);  /* one query, padded */
            run_dh(8, 8, 1, 0, kl2, 2, dhs[i]);   /* causal self-attention, padded */
            run_dh(9, 20, 0, 0, kl3, 3, dhs[i]);  /* past the few-query path: tiles */
        }
        /* decoding's self-attention through ancestry tables: the vector head
         * sizes, a plain-loop one (48), own rows, no key */
        const int dc[4] = {32, 64, 128, 48};
        for (int i = 0; i < 4; i++) {
            run_cached(10, dc[i], 9, 7, 1);
            run_cached(10, dc[i], 9, 9, 0);
        }
        run_cached(4, 64, 3, 0, 1);
    }
    tu_cpu_form(TU_FORM_START);
    return tu_finish("test_attention");
}
