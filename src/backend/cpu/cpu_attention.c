/* Flash-style multi-head attention on the CPU.
 *
 * Forward saves only the log-sum-exp of each query row (lse, [B, H, Tq]);
 * backward recomputes the probabilities P = exp(S - lse) tile by tile and
 * redraws the dropout mask from Philox, so no [B, H, Tq, Tk] buffer outlives
 * a call.  One (batch, head) pair per task; inside a task, query tiles of up
 * to QT rows go through small single-threaded gemms (S = Q K^T, O = P V and
 * the transposes in backward), which beat hand loops by several times.  Per
 * thread scratch is QT x Tk. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "fixed_sum.h"
#include "vecmath.h"

#ifdef LL_REAL_DOUBLE
#define GEMM cblas_dgemm
#else
#define GEMM cblas_sgemm
#endif

enum { QT = 64 }; /* query rows per tile: bounds the scratch, keeps a tile in L2 */

static int key_limit(const int *key_len, int b, int Tk) {
    int n = key_len ? key_len[b] : Tk;
    return n < Tk ? (n > 0 ? n : 0) : Tk;
}

/* Keys a query row may see: padding limit, and with causal masking positions
 * 0..i + (Tk - Tq) (Tk > Tq happens in incremental decoding). */
static int row_limit(int lim, int causal, int i, int Tq, int Tk) {
    if (causal && i + (Tk - Tq) + 1 < lim) return i + (Tk - Tq) + 1 > 0 ? i + (Tk - Tq) + 1 : 0;
    return lim;
}

/* Keep bits of query rows i0..i0+rows of (b, h): in the dropout index space
 * ((b*H + h)*Tq + i)*Tk + j these rows are one contiguous run (row stride Tk). */
static void tile_mask(uint8_t *M, int b, int h, int i0, int rows, int H, int Tq, int Tk, real p,
                      const ll_philox *rng, uint64_t rng_offset) {
    const uint64_t first = rng_offset + (((uint64_t)b * H + h) * Tq + i0) * Tk;
    cpu_dropout_mask(M, (size_t)rows * Tk, p, rng, first);
}

/* Offset of key j: own row at `stride` per position, or through the row's
 * ancestry (attention_cached); anc is a constant NULL in the other callers,
 * so the inlined loops carry no lookup. */
#define KEY_AT(j) ((anc ? (size_t)anc[j] * row_stride : 0) + (size_t)(j) * stride)

#ifdef LL_VEC16 /* vecmath.h: x86, float */
/* One query of attention_few_queries for Dh = 16 * NC: the query and the
 * output accumulators stay in registers for the whole key loop (the plain
 * loop keeps o in memory, a store-to-load chain per key, and gcc reduces
 * every score through a spilled vector).  Same arithmetic otherwise; the
 * loop is then bound by reading the caches (software prefetch measured no
 * gain).  Taken when ll_cpu_avx512 says so (run-time dispatch). */
LL_AVX512 static inline __attribute__((always_inline)) real one_head_avx512(real *o, const real *qi, const real *kb,
                                                                  const real *vb, size_t stride, int lim, real scale,
                                                                  real *P, const int NC, const int *anc,
                                                                  size_t row_stride) {
    __m512 q[8], acc[8];
    for (int c = 0; c < NC; c++) q[c] = _mm512_loadu_ps(qi + 16 * c);
    real mx = -INFINITY;
    for (int j = 0; j < lim; j++) {
        const real *kj = kb + KEY_AT(j);
        __m512 a = _mm512_mul_ps(q[0], _mm512_loadu_ps(kj));
        for (int c = 1; c < NC; c++) a = _mm512_fmadd_ps(q[c], _mm512_loadu_ps(kj + 16 * c), a);
        const real sj = _mm512_reduce_add_ps(a) * scale;
        P[j] = sj;
        mx = sj > mx ? sj : mx;
    }
    const real sum = ll_row_exp_inplace_avx512(P, lim, mx, NULL);
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int j = 0; j < lim; j++) {
        const real *vj = vb + KEY_AT(j);
        const __m512 p = _mm512_set1_ps(P[j] / sum);
        for (int c = 0; c < NC; c++) acc[c] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vj + 16 * c), acc[c]);
    }
    for (int c = 0; c < NC; c++) _mm512_storeu_ps(o + 16 * c, acc[c]);
    return mx + rlog(sum);
}
/* Dh = 32, 64 or 128 (one_head_fast); keys at j * stride (anc NULL) or
 * through the row's ancestry: two callers, so the NULL folds away in one */
LL_AVX512 static real one_head_plain_avx512(real *o, const real *qi, const real *kb, const real *vb, size_t stride,
                                            int lim, real scale, real *P, int Dh) {
    const int NC = Dh / 16;
    return NC == 4   ? one_head_avx512(o, qi, kb, vb, stride, lim, scale, P, 4, NULL, 0)
           : NC == 2 ? one_head_avx512(o, qi, kb, vb, stride, lim, scale, P, 2, NULL, 0)
                     : one_head_avx512(o, qi, kb, vb, stride, lim, scale, P, 8, NULL, 0);
}
LL_AVX512 static void one_head_anc_avx512(real *o, const real *qi, const real *kb, const real *vb, size_t stride,
                                          int lim, real scale, real *P, int Dh, const int *anc, size_t row_stride) {
    const int NC = Dh / 16;
    if (NC == 4)
        one_head_avx512(o, qi, kb, vb, stride, lim, scale, P, 4, anc, row_stride);
    else if (NC == 2)
        one_head_avx512(o, qi, kb, vb, stride, lim, scale, P, 2, anc, row_stride);
    else
        one_head_avx512(o, qi, kb, vb, stride, lim, scale, P, 8, anc, row_stride);
}

/* The same with AVX2 + FMA for Dh = 8 * NC, NC 4 or 8 (Dh 32, 64: q or the accumulators in 8 ymm
 * registers; 128 would spill them), the exponentials through ll_row_exp_inplace. */
#define LL_AVX2 __attribute__((target("avx2,fma")))
LL_AVX2 static inline __attribute__((always_inline)) real one_head_avx2(real *o, const real *qi, const real *kb,
                                                              const real *vb, size_t stride, int lim, real scale,
                                                              real *P, const int NC, const int *anc,
                                                              size_t row_stride) {
    __m256 q[8], acc[8];
    for (int c = 0; c < NC; c++) q[c] = _mm256_loadu_ps(qi + 8 * c);
    real mx = -INFINITY;
    for (int j = 0; j < lim; j++) {
        const real *kj = kb + KEY_AT(j);
        __m256 a = _mm256_mul_ps(q[0], _mm256_loadu_ps(kj));
        for (int c = 1; c < NC; c++) a = _mm256_fmadd_ps(q[c], _mm256_loadu_ps(kj + 8 * c), a);
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        const real sj = _mm_cvtss_f32(h) * scale;
        P[j] = sj;
        mx = sj > mx ? sj : mx;
    }
    const real sum = ll_row_exp_inplace(P, lim, mx, NULL);
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int j = 0; j < lim; j++) {
        const real *vj = vb + KEY_AT(j);
        const __m256 p = _mm256_set1_ps(P[j] / sum);
        for (int c = 0; c < NC; c++) acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), acc[c]);
    }
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(o + 8 * c, acc[c]);
    return mx + rlog(sum);
}
LL_AVX2 static real one_head_plain_avx2(real *o, const real *qi, const real *kb, const real *vb, size_t stride, int lim,
                                        real scale, real *P, int Dh) {
    return Dh == 64 ? one_head_avx2(o, qi, kb, vb, stride, lim, scale, P, 8, NULL, 0)
                    : one_head_avx2(o, qi, kb, vb, stride, lim, scale, P, 4, NULL, 0);
}
LL_AVX2 static void one_head_anc_avx2(real *o, const real *qi, const real *kb, const real *vb, size_t stride, int lim,
                                      real scale, real *P, int Dh, const int *anc, size_t row_stride) {
    if (Dh == 64)
        one_head_avx2(o, qi, kb, vb, stride, lim, scale, P, 8, anc, row_stride);
    else
        one_head_avx2(o, qi, kb, vb, stride, lim, scale, P, 4, anc, row_stride);
}
/* 2: the AVX-512 form, 1: the AVX2 one, 0: the plain loops */
static int one_head_fast(int Dh) {
    if (ll_cpu_avx512) return Dh == 32 || Dh == 64 || Dh == 128 ? 2 : 0;
    return ll_cpu_avx2 && (Dh == 32 || Dh == 64);
}
#define ONE_HEAD_FAST 1
#else
#define ONE_HEAD_FAST 0
#endif

/* A few queries per (batch, head), no dropout -- incremental decoding (one
 * query per row of self-attention; a sentence's beam rows against its source
 * in cross-attention): vector loops beat gemm calls here. */
static void attention_few_queries(real *out, real *lse, const real *q, int q_stride, const real *k, const real *v,
                                  int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                                  int causal) {
    const real scale = 1 / sqrt((real)Dh);
    const int C = H * Dh;
#pragma omp parallel
    {
        real *P = ll_aligned_alloc(sizeof(real) * (Tk > 0 ? Tk : 1));
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < Tq; i++) {
                    const int lim = row_limit(key_limit(key_len, b, Tk), causal, i, Tq, Tk);
                    const real *qi = q + ((size_t)b * Tq + i) * q_stride + h * Dh;
                    const real *kb = k + (size_t)b * Tk * kv_stride + h * Dh;
                    const real *vb = v + (size_t)b * Tk * kv_stride + h * Dh;
                    real *o = out + ((size_t)b * Tq + i) * C + h * Dh;
                    real *l = lse ? lse + ((size_t)b * H + h) * Tq + i : NULL;
#if ONE_HEAD_FAST
                    const int fast = lim > 0 ? one_head_fast(Dh) : 0;
                    if (fast) {
                        const real r = fast == 2 ? one_head_plain_avx512(o, qi, kb, vb, kv_stride, lim, scale, P, Dh)
                                                 : one_head_plain_avx2(o, qi, kb, vb, kv_stride, lim, scale, P, Dh);
                        if (l) *l = r;
                        continue;
                    }
#endif
                    real mx = -INFINITY;
                    for (int j = 0; j < lim; j++) {
                        const real *kj = kb + (size_t)j * kv_stride;
                        const real s = ll_dot_fixed(qi, kj, Dh);
                        P[j] = s * scale;
                        mx = P[j] > mx ? P[j] : mx;
                    }
                    const real sum = lim > 0 ? ll_row_exp_inplace(P, lim, mx, NULL) : 0;
                    if (l) *l = lim > 0 ? mx + log(sum) : -INFINITY;
                    for (int d = 0; d < Dh; d++) o[d] = 0;
                    for (int j = 0; j < lim; j++) {
                        const real p = P[j] / sum, *vj = vb + (size_t)j * kv_stride;
#pragma omp simd
                        for (int d = 0; d < Dh; d++) o[d] += p * vj[d];
                    }
                }
        free(P);
    }
}

/* A decoding step's self-attention through the rows' ancestry (contract in
 * include/ll/backend.h): rows of one sentence are consecutive and mostly
 * share their ancestors' cache entries, so after the first row of a sentence
 * the keys come from cache, where reordered copies each came from memory. */
void cpu_attention_cached(ll_backend *be, ll_act *out_, const ll_act *q_, int q_stride, const ll_act *kv_,
                          int kv_stride, size_t row_stride, const int *anc_all, int anc_stride, int n_keys,
                          const int *n_at, int rows, int H, int Dh) {
    (void)be;
    if (n_at) n_keys += *n_at;
    real *out = (real *)out_;
    const real *q = (const real *)q_, *kv = (const real *)kv_;
    const real scale = 1 / sqrt((real)Dh);
    const int C = H * Dh;
    const size_t stride = (size_t)kv_stride;
#pragma omp parallel if (rows * H > 1 && (size_t)rows * n_keys * C > 100000)
    {
        real *P = ll_aligned_alloc(sizeof(real) * (n_keys > 0 ? n_keys : 1));
#pragma omp for collapse(2) schedule(static)
        for (int r = 0; r < rows; r++)
            for (int h = 0; h < H; h++) {
                const int *anc = anc_all ? anc_all + (size_t)r * anc_stride : NULL;
                const real *kb = kv + (anc ? 0 : (size_t)r * row_stride) + (size_t)h * Dh, *vb = kb + C;
                const real *qi = q + (size_t)r * q_stride + (size_t)h * Dh;
                real *o = out + (size_t)r * C + (size_t)h * Dh;
                if (n_keys <= 0) {
                    for (int d = 0; d < Dh; d++) o[d] = 0;
                    continue;
                }
#if ONE_HEAD_FAST
                const int fast = one_head_fast(Dh);
                if (fast == 2) {
                    one_head_anc_avx512(o, qi, kb, vb, stride, n_keys, scale, P, Dh, anc, row_stride);
                    continue;
                }
                if (fast) {
                    one_head_anc_avx2(o, qi, kb, vb, stride, n_keys, scale, P, Dh, anc, row_stride);
                    continue;
                }
#endif
                real mx = -INFINITY;
                for (int j = 0; j < n_keys; j++) {
                    const real *kj = kb + KEY_AT(j);
                    const real sc = ll_dot_fixed(qi, kj, Dh);
                    P[j] = sc * scale;
                    mx = P[j] > mx ? P[j] : mx;
                }
                const real sum = ll_row_exp_inplace(P, n_keys, mx, NULL);
                for (int d = 0; d < Dh; d++) o[d] = 0;
                for (int j = 0; j < n_keys; j++) {
                    const real p = P[j] / sum, *vj = vb + KEY_AT(j);
#pragma omp simd
                    for (int d = 0; d < Dh; d++) o[d] += p * vj[d];
                }
            }
        free(P);
    }
}

void cpu_attention_fwd(ll_backend *be, ll_act *out_, real *lse, const ll_act *q_, int q_stride, const ll_act *k_,
                       const ll_act *v_, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                       int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset) {
    (void)be;
    real *out = (real *)out_;
    const real *q = (const real *)q_, *k = (const real *)k_, *v = (const real *)v_;
    if (Tq <= 8 && attn_dropout <= 0) {
        attention_few_queries(out, lse, q, q_stride, k, v, kv_stride, key_len, B, Tq, Tk, H, Dh, causal);
        return;
    }
    const real scale = 1 / sqrt((real)Dh);
    const int C = H * Dh, qt = Tq < QT ? Tq : QT;
    const size_t tile = (size_t)qt * (Tk > 0 ? Tk : 1);
    const int drop = attn_dropout > 0;
    const real keep_scale = drop ? 1 / (1 - attn_dropout) : 1;
#pragma omp parallel
    {
        real *P = ll_aligned_alloc(sizeof(real) * tile);
        uint8_t *M = drop ? ll_aligned_alloc(tile) : NULL;
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                const int lim = key_limit(key_len, b, Tk);
                real *lh = lse ? lse + ((size_t)b * H + h) * Tq : NULL;
                for (int i0 = 0; i0 < Tq; i0 += QT) {
                    const int rows = Tq - i0 < QT ? Tq - i0 : QT;
                    const int kl = row_limit(lim, causal, i0 + rows - 1, Tq, Tk); /* widest row of the tile */
                    const real *qb = q + ((size_t)b * Tq + i0) * q_stride + h * Dh;
                    const real *kb = k + (size_t)b * Tk * kv_stride + h * Dh;
                    const real *vb = v + (size_t)b * Tk * kv_stride + h * Dh;
                    real *ob = out + ((size_t)b * Tq + i0) * C + h * Dh;
                    if (kl <= 0) { /* no key visible: out 0, lse = log(0) */
                        for (int i = 0; i < rows; i++) memset(ob + (size_t)i * C, 0, sizeof(real) * Dh);
                        if (lh)
                            for (int i = 0; i < rows; i++) lh[i0 + i] = -INFINITY;
                        continue;
                    }
                    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kl, Dh, scale, qb, q_stride, kb, kv_stride,
                         0, P, kl);
                    if (M) tile_mask(M, b, h, i0, rows, H, Tq, Tk, attn_dropout, rng, rng_offset);
                    for (int i = 0; i < rows; i++) {
                        real *Pi = P + (size_t)i * kl;
                        const int n = row_limit(lim, causal, i0 + i, Tq, Tk);
                        real l = -INFINITY;
                        if (n > 0) {
                            const real mx = ll_row_max(Pi, n), sum = ll_row_exp_inplace(Pi, n, mx, NULL);
                            ll_row_affine(Pi, n, 1 / sum, 0);
                            l = mx + log(sum);
                        }
                        if (lh) lh[i0 + i] = l;
                        for (int j = n; j < kl; j++) Pi[j] = 0;
                        if (M) { /* inverted dropout of the probabilities */
                            const uint8_t *Mi = M + (size_t)i * Tk;
                            for (int j = 0; j < n; j++) Pi[j] = Mi[j] ? Pi[j] * keep_scale : 0;
                        }
                    }
                    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, Dh, kl, 1, P, kl, vb, kv_stride, 0, ob, C);
                }
            }
        free(P);
        free(M);
    }
}

typedef struct {
    real *P, *dP, *Pd; /* scratch, QT x Tk */
    uint8_t *M;
} bwd_scratch;

void cpu_attention_bwd(ll_backend *be, ll_act *dq_, ll_act *dk_, ll_act *dv_, const ll_act *dout_,
                       const ll_act *out_, const real *lse, const ll_act *q_, int q_stride, const ll_act *k_,
                       const ll_act *v_, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                       int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset) {
    (void)be;
    real *dq = (real *)dq_, *dk = (real *)dk_, *dv = (real *)dv_;
    const real *dout = (const real *)dout_, *out = (const real *)out_;
    const real *q = (const real *)q_, *k = (const real *)k_, *v = (const real *)v_;
    const real scale = 1 / sqrt((real)Dh);
    const int C = H * Dh, qt = Tq < QT ? Tq : QT;
    const size_t tile = (size_t)qt * (Tk > 0 ? Tk : 1);
    const int drop = attn_dropout > 0;
    const real keep_scale = drop ? 1 / (1 - attn_dropout) : 1;
    const int ntiles = (Tq + QT - 1) / QT;
#pragma omp parallel
    {
        bwd_scratch w = {ll_aligned_alloc(sizeof(real) * tile), ll_aligned_alloc(sizeof(real) * tile),
                         drop ? ll_aligned_alloc(sizeof(real) * tile) : NULL, drop ? ll_aligned_alloc(tile) : NULL};
#pragma omp for collapse(2) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                const int lim = key_limit(key_len, b, Tk);
                const real *lh = lse + ((size_t)b * H + h) * Tq;
                const real *kb = k + (size_t)b * Tk * kv_stride + h * Dh;
                const real *vb = v + (size_t)b * Tk * kv_stride + h * Dh;
                real *dkb = dk + (size_t)b * Tk * kv_stride + h * Dh;
                real *dvb = dv + (size_t)b * Tk * kv_stride + h * Dh;
                /* this (b, h) owns its slices of dq, dk, dv: overwrite them, zeros
                 * where no gradient flows (callers need not clear the buffers) */
                for (int j = lim; j < Tk; j++) {
                    memset(dkb + (size_t)j * kv_stride, 0, sizeof(real) * Dh);
                    memset(dvb + (size_t)j * kv_stride, 0, sizeof(real) * Dh);
                }
                /* last tile first: its widest row sees all lim keys, so it
                 * initialises dk/dv rows 0..lim-1 (beta 0) and the others add */
                for (int t = ntiles - 1; t >= 0; t--) {
                    const int i0 = t * QT, rows = Tq - i0 < QT ? Tq - i0 : QT;
                    const int kl = row_limit(lim, causal, i0 + rows - 1, Tq, Tk);
                    const real beta = t == ntiles - 1 ? 0 : 1;
                    const real *qb = q + ((size_t)b * Tq + i0) * q_stride + h * Dh;
                    const real *go = dout + ((size_t)b * Tq + i0) * C + h * Dh;
                    const real *ob = out + ((size_t)b * Tq + i0) * C + h * Dh;
                    real *dqb = dq + ((size_t)b * Tq + i0) * q_stride + h * Dh;
                    if (kl <= 0) {
                        for (int i = 0; i < rows; i++) memset(dqb + (size_t)i * q_stride, 0, sizeof(real) * Dh);
                        continue;
                    }
                    real *P = w.P, *dP = w.dP;
                    /* P = exp(scale Q K^T - lse) ; dP~ = dO V^T */
                    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kl, Dh, scale, qb, q_stride, kb, kv_stride,
                         0, P, kl);
                    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kl, Dh, 1, go, C, vb, kv_stride, 0, dP, kl);
                    if (w.M) tile_mask(w.M, b, h, i0, rows, H, Tq, Tk, attn_dropout, rng, rng_offset);
                    for (int i = 0; i < rows; i++) {
                        real *Pi = P + (size_t)i * kl, *dPi = dP + (size_t)i * kl;
                        const int n = row_limit(lim, causal, i0 + i, Tq, Tk);
                        ll_row_exp_shift(Pi, n, lh[i0 + i]);
                        for (int j = n; j < kl; j++) Pi[j] = 0;
                        if (w.M) { /* P~ = P * mask / (1-p) for dV; dP = dP~ * mask / (1-p) */
                            const uint8_t *Mi = w.M + (size_t)i * Tk;
                            real *Pdi = w.Pd + (size_t)i * kl;
                            for (int j = 0; j < kl; j++) {
                                const real ks = j < n && Mi[j] ? keep_scale : 0;
                                Pdi[j] = Pi[j] * ks;
                                dPi[j] *= ks;
                            }
                        }
                        /* softmax backward: dS = P (dP - D) scale, with D = rowsum(dP P) =
                         * rowsum(dO o O) (O already holds the dropped probabilities) */
                        const real *gi = go + (size_t)i * C, *oi = ob + (size_t)i * C;
                        const real D = ll_dot_fixed(gi, oi, Dh);
#pragma omp simd
                        for (int j = 0; j < kl; j++) dPi[j] = Pi[j] * (dPi[j] - D) * scale;
                    }
                    /* dV += P~^T dO ; dQ = dS K ; dK += dS^T Q */
                    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, kl, Dh, rows, 1, w.M ? w.Pd : P, kl, go, C, beta,
                         dvb, kv_stride);
                    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, Dh, kl, 1, dP, kl, kb, kv_stride, 0, dqb,
                         q_stride);
                    GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, kl, Dh, rows, 1, dP, kl, qb, q_stride, beta, dkb,
                         kv_stride);
                }
            }
        free(w.P);
        free(w.dP);
        free(w.Pd);
        free(w.M);
    }
}
