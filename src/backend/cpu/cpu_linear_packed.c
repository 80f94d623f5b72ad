/* Inference linear layers on pre-packed weights: Y[M,N] = X[M,K] W^T + b.
 *
 * Why: in incremental decoding every step multiplies a few dozen rows by
 * every weight matrix of the decoder.  OpenBLAS repacks the whole weight
 * matrix on every such call (sgemm_incopy was 14% of greedy decoding time),
 * and it has no pre-packed interface.  Decoding weights do not change, so we
 * pack each matrix once per decode into 32-column panels ([N/32][K][32],
 * zero-padded) and run an AVX-512 12x32 register-blocked kernel over them,
 * with the bias folded into the accumulators' initial value.
 *
 * Every output row is summed in the same order (k = 0..K-1, one FMA chain per
 * element) whatever M is and whichever rows share its 12-row block, so a
 * sentence decodes to the same bits alone or in a batch.
 *
 * Without AVX-512 (or in the double-precision test build) linear_pack returns
 * NULL and callers fall back to gemm. */
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

#define NR 32 /* panel width: two zmm registers */
#define MR 12 /* rows per register block: 24 accumulators */

typedef struct {
    int N, K, panels;
    float *data; /* [panels][K][NR] */
} packed_weight;

#if defined(__x86_64__) && !defined(LL_REAL_DOUBLE)
#include <immintrin.h>
#define HAVE_KERNEL 1

/* C rows r < m (m <= MR) of columns n0..n0+nvalid: A rows at a[r] (rows >= m
 * repeat the last valid row; their results are not stored). */
__attribute__((target("avx512f,fma"))) static void kernel(int K, const float *const a[MR], const float *bp,
                                                          const float *bias, int nvalid, float *c, int ldc,
                                                          int m) {
    const __mmask16 m0 = nvalid >= 16 ? 0xffff : (__mmask16)((1u << nvalid) - 1);
    const __mmask16 m1 = nvalid >= 32 ? 0xffff : nvalid <= 16 ? 0 : (__mmask16)((1u << (nvalid - 16)) - 1);
    __m512 b0i = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 b1i = bias && m1 ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    __m512 c00 = b0i, c01 = b1i, c10 = b0i, c11 = b1i, c20 = b0i, c21 = b1i, c30 = b0i, c31 = b1i;
    __m512 c40 = b0i, c41 = b1i, c50 = b0i, c51 = b1i, c60 = b0i, c61 = b1i, c70 = b0i, c71 = b1i;
    __m512 c80 = b0i, c81 = b1i, c90 = b0i, c91 = b1i, ca0 = b0i, ca1 = b1i, cb0 = b0i, cb1 = b1i;
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3], *a4 = a[4], *a5 = a[5];
    const float *a6 = a[6], *a7 = a[7], *a8 = a[8], *a9 = a[9], *aa = a[10], *ab = a[11];
    for (int k = 0; k < K; k++) {
        const __m512 b0 = _mm512_load_ps(bp + (size_t)k * NR), b1 = _mm512_load_ps(bp + (size_t)k * NR + 16);
#define ROW(cx0, cx1, ax)                                  \
    {                                                      \
        const __m512 s = _mm512_set1_ps(ax[k]);            \
        cx0 = _mm512_fmadd_ps(s, b0, cx0);                 \
        cx1 = _mm512_fmadd_ps(s, b1, cx1);                 \
    }
        ROW(c00, c01, a0) ROW(c10, c11, a1) ROW(c20, c21, a2) ROW(c30, c31, a3)
        ROW(c40, c41, a4) ROW(c50, c51, a5) ROW(c60, c61, a6) ROW(c70, c71, a7)
        ROW(c80, c81, a8) ROW(c90, c91, a9) ROW(ca0, ca1, aa) ROW(cb0, cb1, ab)
#undef ROW
    }
    __m512 acc[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51},
                         {c60, c61}, {c70, c71}, {c80, c81}, {c90, c91}, {ca0, ca1}, {cb0, cb1}};
    for (int r = 0; r < m; r++) {
        float *cr = c + (size_t)r * ldc;
        _mm512_mask_storeu_ps(cr, m0, acc[r][0]);
        if (m1) _mm512_mask_storeu_ps(cr + 16, m1, acc[r][1]);
    }
}

/* The same for m <= 4 rows (4 row pointers): a remainder of up to 8 rows
 * takes one or two of these instead of a 12-row block that computes rows it
 * throws away (160 rows: 13 blocks of 12 + 4, where the 12-row kernel did 5%
 * more multiply-adds).  Each element's FMA chain is the 12-row kernel's. */
__attribute__((target("avx512f,fma"))) static void kernel4(int K, const float *const a[4], const float *bp,
                                                           const float *bias, int nvalid, float *c, int ldc, int m) {
    const __mmask16 m0 = nvalid >= 16 ? 0xffff : (__mmask16)((1u << nvalid) - 1);
    const __mmask16 m1 = nvalid >= 32 ? 0xffff : nvalid <= 16 ? 0 : (__mmask16)((1u << (nvalid - 16)) - 1);
    __m512 b0i = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    __m512 b1i = bias && m1 ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
    __m512 c00 = b0i, c01 = b1i, c10 = b0i, c11 = b1i, c20 = b0i, c21 = b1i, c30 = b0i, c31 = b1i;
    const float *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
    for (int k = 0; k < K; k++) {
        const __m512 b0 = _mm512_load_ps(bp + (size_t)k * NR), b1 = _mm512_load_ps(bp + (size_t)k * NR + 16);
#define ROW(cx0, cx1, ax)                                  \
    {                                                      \
        const __m512 s = _mm512_set1_ps(ax[k]);            \
        cx0 = _mm512_fmadd_ps(s, b0, cx0);                 \
        cx1 = _mm512_fmadd_ps(s, b1, cx1);                 \
    }
        ROW(c00, c01, a0) ROW(c10, c11, a1) ROW(c20, c21, a2) ROW(c30, c31, a3)
#undef ROW
    }
    __m512 acc[4][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
    for (int r = 0; r < m; r++) {
        float *cr = c + (size_t)r * ldc;
        _mm512_mask_storeu_ps(cr, m0, acc[r][0]);
        if (m1) _mm512_mask_storeu_ps(cr + 16, m1, acc[r][1]);
    }
}
#endif

void *cpu_linear_pack(ll_backend *be, const real *W, int N, int K) {
    (void)be;
#ifdef HAVE_KERNEL
    if (N <= 0 || K <= 0 || !__builtin_cpu_supports("avx512f")) return NULL;
    packed_weight *p = ll_malloc(sizeof *p);
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
    (void)W, (void)N, (void)K;
    return NULL;
#endif
}

void cpu_linear_packed(ll_backend *be, ll_act *Y_, int ldy, const ll_act *X_, int ldx, const void *packed,
                       const real *bias, int M) {
    (void)be;
    real *Y = (real *)Y_;
    const real *X = (const real *)X_;
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
        for (int r0 = 0; r0 < M;) {
            /* blocks of 12 rows; a remainder of up to 8 rows in blocks of 4 */
            const int left = M - r0, rows = left > 8 ? MR : 4, m = left < rows ? left : rows;
            const float *a[MR];
            for (int r = 0; r < rows; r++) a[r] = X + (size_t)(r0 + (r < m ? r : m - 1)) * ldx;
            if (rows == MR)
                kernel(K, a, bp, bias ? bias + n0 : NULL, nvalid, Y + (size_t)r0 * ldy + n0, ldy, m);
            else
                kernel4(K, a, bp, bias ? bias + n0 : NULL, nvalid, Y + (size_t)r0 * ldy + n0, ldy, m);
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
    free(p->data);
    free(p);
}
