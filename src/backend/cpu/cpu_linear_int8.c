/* int8 inference linear layers (lldecode --precision int8): Y[M,N] = X[M,K] W^T + b with W and X
 * quantised to int8, CTranslate2's int8 scheme (its docs/quantization.md).
 *
 * Why: a decoding step multiplies a few hundred rows by every decoder weight matrix; int8
 * weights are a quarter of fp32's bytes, and an int8 multiply-add instruction does 4 (VNNI) or 2
 * (AVX2) products per 32-bit lane where an fp32 FMA does one.
 *
 * The numbers (one definition for every instruction set):
 *  - weights, once per decode: row n of W scaled by 127 / max|W[n,:]|, rounded to the nearest
 *    integer (ties to even), clamped to [-127, 127]; inv_sw[n] = max|W[n,:]| / 127;
 *  - activations, each call: row m of X likewise (inv_sa[m]);
 *  - acc[m,n] = sum_k qx[m,k] qw[n,k] in int32, exactly (|acc| <= K * 127^2, below 2^31 for
 *    K < 133,000), so the kernels may add in any order;
 *  - y[m,n] = fmaf((float)acc, inv_sa[m] * inv_sw[n], b[n]) (b 0 without a bias).
 * So the AVX-512 VNNI, AVX2 and portable C kernels give the same bits (tested), and a row's
 * result does not depend on the others in its batch.
 *
 * Kernels (chosen once, ll_cpu_int8_isa, src/core/cpu_isa.c): AVX-512 VNNI vpdpbusd takes
 * unsigned bytes on one side, so it multiplies qx + 128 and subtracts 128 * the column sums of qw;
 * AVX2 vpmaddubsw would saturate on (qx + 128) * qw pairs, so it multiplies |qx| by qw with
 * qx's sign (pairs at most 2 * 127^2 < 2^15); portable C loops elsewhere. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

#define NR 32 /* output columns per panel */
#define MR 8  /* rows per register block (the AVX-512 kernel: 16 accumulators) */

typedef struct {
    int tag; /* LL_PACK_INT8 (cpu_linear_packed dispatches on it) */
    int N, K, K4, panels;
    int8_t *w;      /* [panels][K4][NR][4]: column j of a panel holds qw[n0 + j, 4 k4 .. 4 k4 + 3] */
    float *inv_sw;  /* [panels * NR], 0 past N */
    int32_t *csum;  /* [panels * NR] sum_k qw[n, k] (VNNI's correction) */
    float *zero;    /* [panels * NR] zeros: the bias when there is none */
} packed_q8;

/* Row x[0..K) into q[0..4 K4) (zero-padded); returns inv_s = max|x| / 127 (0 for a zero row,
 * NaN with every q 0 when x holds a NaN or an infinity: the output is then NaN, as fp32's). */
static float quantize_row(const float *x, int K, int K4, int8_t *q) {
    float amax = 0;
    int bad = 0;
    for (int k = 0; k < K; k++) {
        const float a = fabsf(x[k]);
        bad |= !(a < INFINITY); /* NaN, infinity */
        amax = a > amax ? a : amax;
    }
    memset(q, 0, (size_t)K4 * 4);
    if (bad) return NAN;
    if (amax == 0) return 0;
    const float s = 127.0f / amax;
    for (int k = 0; k < K; k++) {
        float v = nearbyintf(x[k] * s);
        v = v > 127 ? 127 : v < -127 ? -127 : v;
        q[k] = (int8_t)v;
    }
    return amax / 127.0f;
}

#if defined(__x86_64__)
#include <immintrin.h>
/* quantize_row in AVX-512: the same max, products, rounding (to nearest even) and clamps, so the
 * same bytes (tested against the contract with and without it) */
__attribute__((target("avx512f,avx512bw"))) static float quantize_row_avx512(const float *x, int K, int K4, int8_t *q) {
    __m512 vmax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    const __m512 inf = _mm512_set1_ps(INFINITY);
    for (int k = 0; k < K; k += 16) {
        const __mmask16 m = K - k >= 16 ? 0xffff : (__mmask16)((1u << (K - k)) - 1);
        const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, x + k));
        bad |= _mm512_mask_cmp_ps_mask(m, a, inf, _CMP_NLT_UQ); /* NaN, infinity */
        vmax = _mm512_max_ps(vmax, a);
    }
    memset(q, 0, (size_t)K4 * 4);
    if (bad) return NAN;
    const float amax = _mm512_reduce_max_ps(vmax);
    if (amax == 0) return 0;
    const __m512 s = _mm512_set1_ps(127.0f / amax), hi = _mm512_set1_ps(127), lo = _mm512_set1_ps(-127);
    for (int k = 0; k < K; k += 16) {
        const __mmask16 m = K - k >= 16 ? 0xffff : (__mmask16)((1u << (K - k)) - 1);
        __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), s),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_max_ps(_mm512_min_ps(v, hi), lo);
        _mm512_mask_cvtepi32_storeu_epi8(q + k, m, _mm512_cvtps_epi32(v));
    }
    return amax / 127.0f;
}
#endif

/* ---- portable kernel ---------------------------------------------------------------- */
static void kernel_generic(const packed_q8 *p, int pi, const int8_t *qa, const float *inv_sa, int m, const float *b,
                           float *y, int ldy) {
    const int n0 = pi * NR, nvalid = p->N - n0 < NR ? p->N - n0 : NR, K4 = p->K4;
    const int8_t *wp = p->w + (size_t)pi * K4 * NR * 4;
    for (int r = 0; r < m; r++) {
        const int8_t *a = qa + (size_t)r * K4 * 4;
        for (int j = 0; j < nvalid; j++) {
            int32_t acc = 0;
            for (int k4 = 0; k4 < K4; k4++) {
                const int8_t *w = wp + ((size_t)k4 * NR + j) * 4, *x = a + (size_t)k4 * 4;
                acc += x[0] * w[0] + x[1] * w[1] + x[2] * w[2] + x[3] * w[3];
            }
            y[(size_t)r * ldy + n0 + j] = fmaf((float)acc, inv_sa[r] * p->inv_sw[n0 + j], b[n0 + j]);
        }
    }
}

#if defined(__x86_64__)
#define HAVE_X86 1

/* R rows (R <= MR, a compile-time count; rows >= m repeat the last one, not stored) of one
 * panel: 2 R accumulators of 16 int32 lanes. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static inline __attribute__((always_inline)) void
rows_avx512vnni(const packed_q8 *p, int pi, const int8_t *const *a, const float *inv_sa, int m, const float *b,
                float *y, int ldy, const int R) {
    const int n0 = pi * NR, nvalid = p->N - n0 < NR ? p->N - n0 : NR, K4 = p->K4;
    const int8_t *wp = p->w + (size_t)pi * K4 * NR * 4;
    __m512i acc[MR][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    for (int k4 = 0; k4 < K4; k4++) {
        const __m512i w0 = _mm512_load_si512((const void *)(wp + (size_t)k4 * NR * 4));
        const __m512i w1 = _mm512_load_si512((const void *)(wp + (size_t)k4 * NR * 4 + 64));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            int32_t x4;
            memcpy(&x4, a[r] + (size_t)k4 * 4, 4);
            const __m512i u = _mm512_set1_epi32((int32_t)((uint32_t)x4 ^ 0x80808080u)); /* qx + 128, unsigned */
            acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], u, w0);
            acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], u, w1);
        }
    }
    const __mmask16 m0 = nvalid >= 16 ? 0xffff : (__mmask16)((1u << nvalid) - 1);
    const __mmask16 m1 = nvalid >= 32 ? 0xffff : nvalid <= 16 ? 0 : (__mmask16)((1u << (nvalid - 16)) - 1);
    const __m512i c0 = _mm512_slli_epi32(_mm512_loadu_si512((const void *)(p->csum + n0)), 7);
    const __m512i c1 = _mm512_slli_epi32(_mm512_loadu_si512((const void *)(p->csum + n0 + 16)), 7);
    const __m512 s0 = _mm512_loadu_ps(p->inv_sw + n0), s1 = _mm512_loadu_ps(p->inv_sw + n0 + 16);
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, b + n0), b1 = _mm512_maskz_loadu_ps(m1, b + n0 + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        if (r >= m) break;
        const __m512 sa = _mm512_set1_ps(inv_sa[r]);
        float *yr = y + (size_t)r * ldy + n0;
        const __m512 y0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][0], c0)), _mm512_mul_ps(sa, s0), b0);
        _mm512_mask_storeu_ps(yr, m0, y0);
        if (m1) {
            const __m512 y1 =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][1], c1)), _mm512_mul_ps(sa, s1), b1);
            _mm512_mask_storeu_ps(yr + 16, m1, y1);
        }
    }
}
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
kernel_avx512vnni(const packed_q8 *p, int pi, const int8_t *qa, const float *inv_sa, int m, const float *b, float *y,
                  int ldy) {
    for (int r0 = 0; r0 < m; r0 += MR) {
        const int mm = m - r0 < MR ? m - r0 : MR;
        const int8_t *a[MR];
        for (int r = 0; r < MR; r++) a[r] = qa + (size_t)(r0 + (r < mm ? r : mm - 1)) * p->K4 * 4;
        if (mm > 4)
            rows_avx512vnni(p, pi, a, inv_sa + r0, mm, b, y + (size_t)r0 * ldy, ldy, MR);
        else
            rows_avx512vnni(p, pi, a, inv_sa + r0, mm, b, y + (size_t)r0 * ldy, ldy, 4);
    }
}

/* AVX2: R rows of one panel, 4 accumulators of 8 int32 lanes per row. */
__attribute__((target("avx2,fma"))) static inline __attribute__((always_inline)) void
rows_avx2(const packed_q8 *p, int pi, const int8_t *const *a, const float *inv_sa, int m, const float *b, float *y,
          int ldy, const int R) {
    const int n0 = pi * NR, nvalid = p->N - n0 < NR ? p->N - n0 : NR, K4 = p->K4;
    const int8_t *wp = p->w + (size_t)pi * K4 * NR * 4;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i acc[2][4];
#pragma GCC unroll 2
    for (int r = 0; r < R; r++)
        for (int q = 0; q < 4; q++) acc[r][q] = _mm256_setzero_si256();
    for (int k4 = 0; k4 < K4; k4++) {
        __m256i w[4];
        for (int q = 0; q < 4; q++) w[q] = _mm256_load_si256((const __m256i *)(wp + (size_t)k4 * NR * 4 + 32 * q));
#pragma GCC unroll 2
        for (int r = 0; r < R; r++) {
            int32_t x4;
            memcpy(&x4, a[r] + (size_t)k4 * 4, 4);
            const __m256i x = _mm256_set1_epi32(x4), ax = _mm256_abs_epi8(x);
            for (int q = 0; q < 4; q++) {
                const __m256i pr = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(w[q], x)); /* |qx| (qw sign qx) */
                acc[r][q] = _mm256_add_epi32(acc[r][q], _mm256_madd_epi16(pr, ones));
            }
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < R; r++) {
        if (r >= m) break;
        const __m256 sa = _mm256_set1_ps(inv_sa[r]);
        float out[NR];
        for (int q = 0; q < 4; q++) {
            const __m256 s = _mm256_mul_ps(sa, _mm256_loadu_ps(p->inv_sw + n0 + 8 * q));
            _mm256_storeu_ps(out + 8 * q, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][q]), s, _mm256_loadu_ps(b + n0 + 8 * q)));
        }
        memcpy(y + (size_t)r * ldy + n0, out, sizeof(float) * nvalid);
    }
}
__attribute__((target("avx2,fma"))) static void kernel_avx2(const packed_q8 *p, int pi, const int8_t *qa,
                                                            const float *inv_sa, int m, const float *b, float *y,
                                                            int ldy) {
    for (int r0 = 0; r0 < m; r0 += 2) {
        const int mm = m - r0 < 2 ? m - r0 : 2;
        const int8_t *a[2] = {qa + (size_t)r0 * p->K4 * 4, qa + (size_t)(r0 + mm - 1) * p->K4 * 4};
        rows_avx2(p, pi, a, inv_sa + r0, mm, b, y + (size_t)r0 * ldy, ldy, 2);
    }
}
#endif

void *cpu_linear_pack_int8(const float *W, int N, int K) {
    if (N <= 0 || K <= 0 || K > 130000) return NULL; /* (the int32 sums' bound) */
    packed_q8 *p = ll_calloc(1, sizeof *p);
    p->tag = LL_PACK_INT8;
    p->N = N, p->K = K, p->K4 = (K + 3) / 4, p->panels = (N + NR - 1) / NR;
    const size_t cols = (size_t)p->panels * NR;
    p->w = ll_aligned_alloc((size_t)p->panels * p->K4 * NR * 4);
    p->inv_sw = ll_aligned_alloc(sizeof(float) * cols);
    p->csum = ll_aligned_alloc(sizeof(int32_t) * cols);
    p->zero = ll_aligned_alloc(sizeof(float) * cols);
#pragma omp parallel
    {
        int8_t *q = ll_aligned_alloc((size_t)p->K4 * 4);
#pragma omp for schedule(static)
        for (size_t n = 0; n < cols; n++) {
            if (n < (size_t)N)
                p->inv_sw[n] = quantize_row(W + n * K, K, p->K4, q);
            else
                memset(q, 0, (size_t)p->K4 * 4), p->inv_sw[n] = 0;
            int32_t s = 0;
            int8_t *dst = p->w + (n / NR) * (size_t)p->K4 * NR * 4 + (n % NR) * 4;
            for (int k4 = 0; k4 < p->K4; k4++) {
                memcpy(dst + (size_t)k4 * NR * 4, q + 4 * k4, 4);
                s += q[4 * k4] + q[4 * k4 + 1] + q[4 * k4 + 2] + q[4 * k4 + 3];
            }
            p->csum[n] = s, p->zero[n] = 0;
        }
        free(q);
    }
    return p;
}

void cpu_linear_packed_int8(const void *packed, float *Y, int ldy, const float *X, int ldx, const float *bias, int M) {
    const packed_q8 *p = packed;
    if (M <= 0) return;
    const size_t qbytes = ((size_t)M * p->K4 * 4 + 63) & ~(size_t)63;
    int8_t *qa = aligned_alloc(64, qbytes); /* (not zeroed: quantize_row writes every byte) */
    float *inv_sa = ll_malloc(sizeof(float) * M);
    if (!qa) ll_die("out of memory allocating %zu bytes", qbytes);
#ifdef HAVE_X86
    const int isa = ll_cpu_int8_isa;
#endif
#pragma omp parallel for schedule(static) if ((size_t)M * p->K > 65536)
    for (int r = 0; r < M; r++) {
        const float *x = X + (size_t)r * ldx;
        int8_t *q = qa + (size_t)r * p->K4 * 4;
#ifdef HAVE_X86
        if (isa == LL_INT8_AVX512VNNI) {
            inv_sa[r] = quantize_row_avx512(x, p->K, p->K4, q);
            continue;
        }
#endif
        inv_sa[r] = quantize_row(x, p->K, p->K4, q);
    }
    const float *b = bias ? bias : p->zero;
    /* one task per panel: its K * 32 bytes stay in L1/L2 while the rows pass over it */
#pragma omp parallel for schedule(static)
    for (int pi = 0; pi < p->panels; pi++) {
#ifdef HAVE_X86
        if (isa == LL_INT8_AVX512VNNI)
            kernel_avx512vnni(p, pi, qa, inv_sa, M, b, Y, ldy);
        else if (isa == LL_INT8_AVX2 && p->N - pi * NR >= NR) /* (a partial last panel: the C loops) */
            kernel_avx2(p, pi, qa, inv_sa, M, b, Y, ldy);
        else
#endif
            kernel_generic(p, pi, qa, inv_sa, M, b, Y, ldy);
    }
    free(qa);
    free(inv_sa);
}

void cpu_linear_unpack_int8(void *packed) {
    packed_q8 *p = packed;
    free(p->w), free(p->inv_sw), free(p->csum), free(p->zero), free(p);
}
