/* Inference linear layers on pre-packed weights: Y[M,N] = X[M,K] W^T + b.
 *
 * Why: in incremental decoding every step multiplies a few dozen rows by
 * every weight matrix of the decoder.  OpenBLAS repacks the whole weight
 * matrix on every such call (sgemm_incopy was 14% of greedy decoding time),
 * and it has no pre-packed interface.  Decoding weights do not change, so we
 * pack each matrix once per decode into 32-column panels ([N/32][K][32],
 * zero-padded) and run an AVX-512 12x32 register-blocked kernel over them,
 * with the bias folded into the accumulators' initial value; without
 * AVX-512, an AVX2 + FMA 6x16 kernel over each panel's two halves.
 *
 * Every output row is summed in the same order (k = 0..K-1, one FMA chain per
 * element) whatever M is and whichever rows share its 12-row block, so a
 * sentence decodes to the same bits alone or in a batch, and the AVX2 kernel
 * gives the AVX-512 kernel's bits.
 *
 * The kernels carry a target attribute, so they compile whatever -march says;
 * on a CPU without AVX-512 or AVX2 + FMA (ll_cpu_avx512 and ll_cpu_avx2 0,
 * also under LL_CPU_KERNELS=generic), on other architectures and in the
 * double-precision test build linear_pack returns NULL and callers fall back
 * to gemm.  int8 weights (lldecode --precision int8) are packed by cpu_linear_int8.c, on
 * any CPU; linear_packed and linear_unpack tell the kinds apart by their first member. */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

#define NR 32 /* panel width: two zmm registers */
#define MR 12 /* rows per register block: 24 accumulators */

typedef struct {
    int tag; /* LL_PACK_FP32 */
    int avx512; /* which kernel runs it: AVX-512, else AVX2 (fixed when packed) */
    int N, K, panels;
    float *data; /* [panels][K][NR] */
} packed_weight;

#if defined(__x86_64__) && !defined(LL_REAL_DOUBLE)
#include <immintrin.h>
#define HAVE_KERNEL 1
/* (every function with AVX-512 code has avx512 in its name: tests/cli/test_portable_isa.sh) */
#define AVX512_FMA __attribute__((target("avx512f,fma")))

/* C rows r < m (m <= R) of columns n0..n0+nvalid: A rows at a[r] (rows >= m
 * repeat the last valid row; their results are not stored).  R is a
 * compile-time 12 or 4: the loops unroll and the 2R accumulators live in
 * registers.  Each element is one FMA chain over k = 0..K-1 from the bias,
 * whatever R, so a row gets the same bits in either kernel. */
AVX512_FMA static inline __attribute__((always_inline)) void kernel_rows_avx512(int K, const float *const *a,
                                                                              const float *bp, const float *bias,
                                                                              int nvalid, float *c, int ldc, int m,
                                                                              const int R) {
    const __mmask16 m0 = nvalid >= 16 ? 0xffff : (__mmask16)((1u << nvalid) - 1);
    const __mmask16 m1 = nvalid >= 32 ? 0xffff : nvalid <= 16 ? 0 : (__mmask16)((1u << (nvalid - 16)) - 1);
    const __m512 b0i = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 b1i = bias && m1 ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) acc[r][0] = b0i, acc[r][1] = b1i;
    for (int k = 0; k < K; k++) {
        const __m512 b0 = _mm512_load_ps(bp + (size_t)k * NR), b1 = _mm512_load_ps(bp + (size_t)k * NR + 16);
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            const __m512 s = _mm512_set1_ps(a[r][k]);
            acc[r][0] = _mm512_fmadd_ps(s, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(s, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        if (r >= m) break;
        float *cr = c + (size_t)r * ldc;
        _mm512_mask_storeu_ps(cr, m0, acc[r][0]);
        if (m1) _mm512_mask_storeu_ps(cr + 16, m1, acc[r][1]);
    }
}

/* 12-row blocks; a remainder of up to 8 rows takes one or two 4-row blocks
 * instead of a 12-row block computing rows it throws away (160 rows: 13
 * blocks of 12 + 4, where a 12-row block did 5% more multiply-adds). */
AVX512_FMA static void kernel12_avx512(int K, const float *const a[MR], const float *bp, const float *bias,
                                       int nvalid, float *c, int ldc, int m) {
    kernel_rows_avx512(K, a, bp, bias, nvalid, c, ldc, m, MR);
}
AVX512_FMA static void kernel4_avx512(int K, const float *const a[4], const float *bp, const float *bias,
                                      int nvalid, float *c, int ldc, int m) {
    kernel_rows_avx512(K, a, bp, bias, nvalid, c, ldc, m, 4);
}

#define AVX2_FMA __attribute__((target("avx2,fma")))
#define MR2 6 /* AVX2: rows per block over a 16-column half panel: 12 ymm accumulators + 2 loads + 1 broadcast */
/* As kernel_rows_avx512 on the 16 columns of one half of a panel (bp and bias already offset to it,
 * nvalid of them valid, 1..16): the same FMA chain per element, so the same bits. */
AVX2_FMA static inline __attribute__((always_inline)) void kernel_rows_avx2(int K, const float *const *a,
                                                                          const float *bp, const float *bias,
                                                                          int nvalid, float *c, int ldc, int m,
                                                                          const int R) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nvalid), lane);
    const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(nvalid - 8), lane);
    const __m256 b0i = bias ? _mm256_maskload_ps(bias, m0) : _mm256_setzero_ps();
    const __m256 b1i = bias && nvalid > 8 ? _mm256_maskload_ps(bias + 8, m1) : _mm256_setzero_ps();
    __m256 acc[MR2][2];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) acc[r][0] = b0i, acc[r][1] = b1i;
    for (int k = 0; k < K; k++) {
        const __m256 b0 = _mm256_load_ps(bp + (size_t)k * NR), b1 = _mm256_load_ps(bp + (size_t)k * NR + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            const __m256 s = _mm256_broadcast_ss(a[r] + k);
            acc[r][0] = _mm256_fmadd_ps(s, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(s, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        if (r >= m) break;
        float *cr = c + (size_t)r * ldc;
        _mm256_maskstore_ps(cr, m0, acc[r][0]);
        if (nvalid > 8) _mm256_maskstore_ps(cr + 8, m1, acc[r][1]);
    }
}
AVX2_FMA static void kernel6_avx2(int K, const float *const a[MR2], const float *bp, const float *bias, int nvalid,
                                  float *c, int ldc, int m) {
    kernel_rows_avx2(K, a, bp, bias, nvalid, c, ldc, m, MR2);
}
AVX2_FMA static void kernel2_avx2(int K, const float *const a[2], const float *bp, const float *bias, int nvalid,
                                  float *c, int ldc, int m) {
    kernel_rows_avx2(K, a, bp, bias, nvalid, c, ldc, m, 2);
}

/* One panel's rows with the AVX2 kernel: each 16-column half, 6-row blocks (a remainder of up to 4
 * rows in 2-row ones). */
static void panel_avx2(const float *X, int ldx, int M, int K, const float *bp, const float *bias, int nvalid,
                       float *Y, int ldy) {
    for (int h = 0; h < 2 && nvalid > 16 * h; h++) {
        const int nh = nvalid - 16 * h < 16 ? nvalid - 16 * h : 16;
        for (int r0 = 0; r0 < M;) {
            const int left = M - r0, rows = left > 4 ? MR2 : 2, m = left < rows ? left : rows;
            const float *a[MR2];
            for (int r = 0; r < rows; r++) a[r] = X + (size_t)(r0 + (r < m ? r : m - 1)) * ldx;
            float *c = Y + (size_t)r0 * ldy + 16 * h;
            if (rows == MR2)
                kernel6_avx2(K, a, bp + 16 * h, bias ? bias + 16 * h : NULL, nh, c, ldy, m);
            else
                kernel2_avx2(K, a, bp + 16 * h, bias ? bias + 16 * h : NULL, nh, c, ldy, m);
            r0 += m;
        }
    }
}
#endif

void *cpu_linear_pack(ll_backend *be, const real *W, int N, int K, int int8) {
    (void)be;
#ifndef LL_REAL_DOUBLE
    if (int8) return cpu_linear_pack_int8(W, N, K); /* (any CPU: its kernels fall back to C) */
#endif
#ifdef HAVE_KERNEL
    if (N <= 0 || K <= 0 || !(ll_cpu_avx512 || ll_cpu_avx2)) return NULL;
    packed_weight *p = ll_malloc(sizeof *p);
    p->tag = LL_PACK_FP32;
    p->avx512 = ll_cpu_avx512;
    p->N = N;
    p->K = K;
    p->panels = (N + NR - 1) / NR;
    p->data = ll_aligned_alloc(sizeof(float) * (size_t)p->panels * K * NR);
#pragma omp parallel for schedule(static)
    for (int pi = 0; pi < p->panels; pi++) {
        float *dst = p->data + (size_t)pi * K * NR;
        for (int j = 0; j < NR; j++) {
            const int n = pi * NR + j;
            const float *w = W + (size_t)n * K;
            for (int k = 0; k < K; k++) dst[(size_t)k * NR + j] = n < N ? w[k] : 0;
        }
    }
    return p;
#else
    (void)W, (void)N, (void)K, (void)int8;
    return NULL;
#endif
}

void cpu_linear_packed(ll_backend *be, ll_act *Y_, int ldy, const ll_act *X_, int ldx, const void *packed,
                       const real *bias, int M) {
    (void)be;
    real *Y = (real *)Y_;
    const real *X = (const real *)X_;
#ifndef LL_REAL_DOUBLE
    if (*(const int *)packed == LL_PACK_INT8) {
        cpu_linear_packed_int8(packed, Y, ldy, X, ldx, bias, M);
        return;
    }
#endif
#ifdef HAVE_KERNEL
    const packed_weight *p = packed;
    if (M <= 0) return;
    const int K = p->K, N = p->N;
    /* One task per panel: the panel (K*32 floats) stays in L1/L2 while all
     * row blocks pass over it; X (M*K floats) stays in L2. */
#pragma omp parallel for schedule(static)
    for (int pi = 0; pi < p->panels; pi++) {
        const int n0 = pi * NR, nvalid = N - n0 < NR ? N - n0 : NR;
        const float *bp = p->data + (size_t)pi * K * NR;
        if (!p->avx512) {
            panel_avx2(X, ldx, M, K, bp, bias ? bias + n0 : NULL, nvalid, Y + n0, ldy);
            continue;
        }
        for (int r0 = 0; r0 < M;) {
            /* blocks of 12 rows; a remainder of up to 8 rows in blocks of 4 */
            const int left = M - r0, rows = left > 8 ? MR : 4, m = left < rows ? left : rows;
            const float *a[MR];
            for (int r = 0; r < rows; r++) a[r] = X + (size_t)(r0 + (r < m ? r : m - 1)) * ldx;
            if (rows == MR)
                kernel12_avx512(K, a, bp, bias ? bias + n0 : NULL, nvalid, Y + (size_t)r0 * ldy + n0, ldy, m);
            else
                kernel4_avx512(K, a, bp, bias ? bias + n0 : NULL, nvalid, Y + (size_t)r0 * ldy + n0, ldy, m);
            r0 += m;
        }
    }
#else
    (void)Y, (void)ldy, (void)X, (void)ldx, (void)packed, (void)bias, (void)M;
    ll_die("linear_packed: no packed kernel in this build");
#endif
}

void cpu_linear_unpack(ll_backend *be, void *packed) {
    (void)be;
    packed_weight *p = packed;
    if (!p) return;
#ifndef LL_REAL_DOUBLE
    if (p->tag == LL_PACK_INT8) {
        cpu_linear_unpack_int8(packed);
        return;
    }
#endif
    free(p->data);
    free(p);
}
