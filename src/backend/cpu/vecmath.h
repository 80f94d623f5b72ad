/* Vectorised exp and the softmax row loops built on it.
 *
 * Why explicit: glibc's expf is a scalar call, and GCC 12 keeps the softmax
 * loops scalar even around an inlinable `declare simd` polynomial (the
 * cross-entropy exp loop ran at 4.5 ns per element).  On a CPU with AVX-512
 * the row helpers below work on 16 lanes with masked tails, with AVX2 + FMA
 * on 8 (the same exp bits: e * 2^n is exact where AVX-512 scales); otherwise
 * (and in the double-precision test build) they are plain loops over vexp.
 * The choice is made at run time (ll_cpu_avx512, ll_cpu_avx2;
 * src/core/cpu_isa.c): the vector bodies carry target attributes, so they
 * compile whatever -march says.
 *
 * The exp is Cephes' expf: range reduction by ln 2 and a degree-6 polynomial,
 * max relative error ~2e-7 over the clamped range [-87, 88]; NaN gives NaN on
 * both paths, as expf and CUDA's __expf do. */
#ifndef LL_VECMATH_H
#define LL_VECMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ll/core.h"

#ifdef LL_REAL_DOUBLE
#define vexp(x) exp(x)
#else
#pragma omp declare simd
static inline float ll_fast_expf(float x) {
    if (x != x) return x; /* NaN (converting it to an int below would be undefined) */
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float e = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* unsigned: no UB for n < -127 */
    float s;
    memcpy(&s, &bits, sizeof s);
    return e * s;
}
#define vexp(x) ll_fast_expf(x)

/* log x for a positive normal x: Cephes' logf (x = m 2^e, m in [sqrt(1/2), sqrt(2)], a degree-8
 * polynomial in m - 1), max relative error ~1e-7.  For an ensemble's mix (ll_mix_logp). */
#pragma omp declare simd
static inline float ll_fast_logf(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    float e = (float)((int)(bits >> 23) - 127), m;
    bits = (bits & 0x007fffffu) | 0x3f800000u; /* the mantissa in [1, 2) */
    memcpy(&m, &bits, sizeof m);
    if (m > 1.41421356f) m *= 0.5f, e += 1.0f;
    const float t = m - 1.0f, z = t * t;
    float p = 7.0376836292e-2f;
    p = p * t - 1.1514610310e-1f;
    p = p * t + 1.1676998740e-1f;
    p = p * t - 1.2420140846e-1f;
    p = p * t + 1.4249322787e-1f;
    p = p * t - 1.6668057665e-1f;
    p = p * t + 2.0000714765e-1f;
    p = p * t - 2.4999993993e-1f;
    p = p * t + 3.3333331174e-1f;
    float y = p * t * z - 2.12194440e-4f * e - 0.5f * z;
    return t + y + 0.693359375f * e;
}
#endif

/* log(e^a + e^b) - c: two log-probabilities summed as probabilities (an ensemble's); -inf where
 * both are.  fp32: hi + log(1 + e^(lo - hi)) with the fast exp and log (~2e-7 relative). */
#ifdef LL_REAL_DOUBLE
static inline real ll_mix_logp(real a, real b, real c) {
    const real hi = a > b ? a : b, lo = a > b ? b : a;
    return hi == -INFINITY ? -INFINITY : hi + log1p(exp(lo - hi)) - c;
}
#else
#pragma omp declare simd
static inline float ll_mix_logp(float a, float b, float c) {
    const float hi = a > b ? a : b, lo = a > b ? b : a;
    return hi == -INFINITY ? -INFINITY : hi + ll_fast_logf(1.0f + ll_fast_expf(lo - hi)) - c;
}
#endif

#if (defined(__x86_64__) || defined(__i386__)) && !defined(LL_REAL_DOUBLE)
#include <immintrin.h>
#define LL_VEC16 1
#define LL_AVX512 __attribute__((target("avx512f")))

LL_AVX512 static inline __m512 ll_exp16(__m512 x) {
    /* x second: VMAXPS/VMINPS return the second operand when either is NaN, so a NaN goes through
     * as NaN (the bound first had clamped it to -87: a NaN logit's row came out finite) */
    x = _mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_max_ps(_mm512_set1_ps(-87.0f), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                          _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(e, n); /* e * 2^n, exact */
}

static inline __mmask16 ll_tail16(int left) { return left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1); }

/* ll_fast_logf on 16 lanes (positive normal x) */
LL_AVX512 static inline __m512 ll_log16(__m512 x) {
    __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_zero), e = _mm512_getexp_ps(x);
    const __mmask16 big = _mm512_cmp_ps_mask(m, _mm512_set1_ps(1.41421356f), _CMP_GT_OQ);
    m = _mm512_mask_mul_ps(m, big, m, _mm512_set1_ps(0.5f));
    e = _mm512_mask_add_ps(e, big, e, _mm512_set1_ps(1.0f));
    const __m512 t = _mm512_sub_ps(m, _mm512_set1_ps(1.0f)), z = _mm512_mul_ps(t, t);
    __m512 p = _mm512_set1_ps(7.0376836292e-2f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.1514610310e-1f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.1676998740e-1f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.2420140846e-1f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.4249322787e-1f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.6668057665e-1f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(2.0000714765e-1f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-2.4999993993e-1f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(3.3333331174e-1f));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, t), z);
    y = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), y);
    y = _mm512_fmadd_ps(z, _mm512_set1_ps(-0.5f), y);
    return _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), _mm512_add_ps(t, y));
}

/* acc[i] = ll_mix_logp(acc[i], x[i] + b, c) over n elements, 16 lanes */
LL_AVX512 static inline void ll_mix_logp_avx512(float *acc, const float *x, size_t n, float b, float c) {
    const __m512 vc = _mm512_set1_ps(c), vb = _mm512_set1_ps(b), ninf = _mm512_set1_ps(-INFINITY),
                 one = _mm512_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 k = ll_tail16((int)(n - i < 16 ? n - i : 16));
        const __m512 a = _mm512_maskz_loadu_ps(k, acc + i), e = _mm512_add_ps(_mm512_maskz_loadu_ps(k, x + i), vb);
        const __m512 hi = _mm512_max_ps(a, e), lo = _mm512_min_ps(a, e);
        const __m512 l = ll_log16(_mm512_add_ps(one, ll_exp16(_mm512_sub_ps(lo, hi))));
        const __m512 r = _mm512_sub_ps(_mm512_add_ps(hi, l), vc);
        /* both -inf: lo - hi is NaN; the sum's probability is 0 */
        const __mmask16 none = _mm512_cmp_ps_mask(hi, ninf, _CMP_EQ_OQ);
        _mm512_mask_storeu_ps(acc + i, k, _mm512_mask_mov_ps(r, none, ninf));
    }
}

/* (VMAXPS returns its second operand when either is NaN: with the row second, a NaN replaced a
 * lane's running max, so the row's max could come out below its largest element; with the
 * running max second, a NaN is passed over and m never holds one) */
LL_AVX512 static inline real ll_row_max_avx512(const real *x, int n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 16) m = _mm512_max_ps(_mm512_mask_loadu_ps(m, ll_tail16(n - i), x + i), m);
    return _mm512_reduce_max_ps(m);
}

LL_AVX512 static inline real ll_row_exp_inplace_avx512(real *x, int n, real shift, real *sum_in) {
    const __m512 sh = _mm512_set1_ps(shift);
    __m512 s = _mm512_setzero_ps(), si = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 k = ll_tail16(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        const __m512 e = _mm512_maskz_mov_ps(k, ll_exp16(_mm512_sub_ps(v, sh)));
        _mm512_mask_storeu_ps(x + i, k, e);
        s = _mm512_add_ps(s, e);
        si = _mm512_add_ps(si, v);
    }
    if (sum_in) *sum_in = _mm512_reduce_add_ps(si);
    return _mm512_reduce_add_ps(s);
}

LL_AVX512 static inline void ll_row_exp_shift_avx512(real *x, int n, real shift) {
    const __m512 sh = _mm512_set1_ps(shift);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 k = ll_tail16(n - i);
        _mm512_mask_storeu_ps(x + i, k, ll_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), sh)));
    }
}

LL_AVX512 static inline real ll_row_sum_exp_avx512(const real *x, int n, real shift) {
    const __m512 sh = _mm512_set1_ps(shift);
    __m512 s = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 k = ll_tail16(n - i);
        s = _mm512_add_ps(s, _mm512_maskz_mov_ps(k, ll_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), sh))));
    }
    return _mm512_reduce_add_ps(s);
}

LL_AVX512 static inline void ll_row_affine_avx512(real *x, int n, real a, real b) {
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 k = ll_tail16(n - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, x + i), va, vb));
    }
}

/* The AVX2 + FMA forms: 8 lanes, tails through maskload/maskstore (masked lanes neither read nor
 * written).  (every function with AVX2 code has avx2 in its name: tests/cli/test_portable_isa.sh) */
#define LL_AVX2_FMA __attribute__((target("avx2,fma")))

LL_AVX2_FMA static inline __m256i ll_tail8_avx2(int left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
LL_AVX2_FMA static inline float ll_hsum8_avx2(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
/* ll_exp16's steps on 8 lanes; 2^n (n in [-125, 127] after the clamp) built from its exponent bits,
 * and e * 2^n is exact (a normal result), so each lane has ll_exp16's bits */
LL_AVX2_FMA static inline __m256 ll_exp8_avx2(__m256 x) {
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x)); /* (NaN passes, as there) */
    const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
    /* (a NaN lane's n converts to INT_MIN: its scale is garbage, but e is NaN and so is the product) */
    const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(e, _mm256_castsi256_ps(bits));
}

LL_AVX2_FMA static inline real ll_row_max_avx2(const real *x, int n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 8) { /* (the running max second: a NaN is passed over, as in the AVX-512 form) */
        const __m256i k = ll_tail8_avx2(n - i);
        m = _mm256_max_ps(_mm256_blendv_ps(m, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k)), m);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

LL_AVX2_FMA static inline real ll_row_exp_inplace_avx2(real *x, int n, real shift, real *sum_in) {
    const __m256 sh = _mm256_set1_ps(shift);
    __m256 s = _mm256_setzero_ps(), si = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        const __m256i k = ll_tail8_avx2(n - i);
        const __m256 v = _mm256_maskload_ps(x + i, k);
        const __m256 e = _mm256_and_ps(ll_exp8_avx2(_mm256_sub_ps(v, sh)), _mm256_castsi256_ps(k));
        _mm256_maskstore_ps(x + i, k, e);
        s = _mm256_add_ps(s, e);
        si = _mm256_add_ps(si, v);
    }
    if (sum_in) *sum_in = ll_hsum8_avx2(si);
    return ll_hsum8_avx2(s);
}

LL_AVX2_FMA static inline void ll_row_exp_shift_avx2(real *x, int n, real shift) {
    const __m256 sh = _mm256_set1_ps(shift);
    for (int i = 0; i < n; i += 8) {
        const __m256i k = ll_tail8_avx2(n - i);
        _mm256_maskstore_ps(x + i, k, ll_exp8_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), sh)));
    }
}

LL_AVX2_FMA static inline real ll_row_sum_exp_avx2(const real *x, int n, real shift) {
    const __m256 sh = _mm256_set1_ps(shift);
    __m256 s = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        const __m256i k = ll_tail8_avx2(n - i);
        const __m256 e = ll_exp8_avx2(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), sh));
        s = _mm256_add_ps(s, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
    }
    return ll_hsum8_avx2(s);
}

/* ll_log16 on 8 lanes (positive normal x): the exponent and the mantissa in [1, 2) from the bits
 * (what getexp and getmant give a normal number), then its steps: each lane has ll_log16's bits */
LL_AVX2_FMA static inline __m256 ll_log8_avx2(__m256 x) {
    const __m256i bits = _mm256_castps_si256(x);
    __m256 e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(127)));
    __m256 m = _mm256_castsi256_ps(
        _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f800000)));
    const __m256 big = _mm256_cmp_ps(m, _mm256_set1_ps(1.41421356f), _CMP_GT_OQ);
    m = _mm256_blendv_ps(m, _mm256_mul_ps(m, _mm256_set1_ps(0.5f)), big);
    e = _mm256_add_ps(e, _mm256_and_ps(big, _mm256_set1_ps(1.0f)));
    const __m256 t = _mm256_sub_ps(m, _mm256_set1_ps(1.0f)), z = _mm256_mul_ps(t, t);
    __m256 p = _mm256_set1_ps(7.0376836292e-2f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.1514610310e-1f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.1676998740e-1f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.2420140846e-1f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.4249322787e-1f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.6668057665e-1f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(2.0000714765e-1f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-2.4999993993e-1f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(3.3333331174e-1f));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, t), z);
    y = _mm256_fmadd_ps(e, _mm256_set1_ps(-2.12194440e-4f), y);
    y = _mm256_fmadd_ps(z, _mm256_set1_ps(-0.5f), y);
    return _mm256_fmadd_ps(e, _mm256_set1_ps(0.693359375f), _mm256_add_ps(t, y));
}

/* ll_mix_logp_avx512 on 8 lanes: acc[i] = ll_mix_logp(acc[i], x[i] + b, c), the same bits */
LL_AVX2_FMA static inline void ll_mix_logp_avx2(float *acc, const float *x, size_t n, float b, float c) {
    const __m256 vc = _mm256_set1_ps(c), vb = _mm256_set1_ps(b), ninf = _mm256_set1_ps(-INFINITY),
                 one = _mm256_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 8) {
        const __m256i k = ll_tail8_avx2((int)(n - i < 8 ? n - i : 8));
        const __m256 a = _mm256_maskload_ps(acc + i, k), e = _mm256_add_ps(_mm256_maskload_ps(x + i, k), vb);
        const __m256 hi = _mm256_max_ps(a, e), lo = _mm256_min_ps(a, e);
        const __m256 l = ll_log8_avx2(_mm256_add_ps(one, ll_exp8_avx2(_mm256_sub_ps(lo, hi))));
        const __m256 r = _mm256_sub_ps(_mm256_add_ps(hi, l), vc);
        /* both -inf: lo - hi is NaN; the sum's probability is 0 */
        _mm256_maskstore_ps(acc + i, k, _mm256_blendv_ps(r, ninf, _mm256_cmp_ps(hi, ninf, _CMP_EQ_OQ)));
    }
}

LL_AVX2_FMA static inline void ll_row_affine_avx2(real *x, int n, real a, real b) {
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
    for (int i = 0; i < n; i += 8) {
        const __m256i k = ll_tail8_avx2(n - i);
        _mm256_maskstore_ps(x + i, k, _mm256_fmadd_ps(_mm256_maskload_ps(x + i, k), va, vb));
    }
}
#endif

/* max of the elements of x[0..n) that are not NaN (-inf when all are): beam_topk skips a chunk
 * of candidates by it, and a softmax's NaN shows in its sum either way.  Both paths alike. */
static inline real ll_row_max(const real *x, int n) {
#ifdef LL_VEC16
    if (ll_cpu_avx512) return ll_row_max_avx512(x, n);
    if (ll_cpu_avx2) return ll_row_max_avx2(x, n);
#endif
    real m = -INFINITY;
    for (int i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* x[i] = exp(x[i] - shift) in place; returns the sum of the new values and,
 * when sum_in is not NULL, stores the sum of the old ones there. */
static inline real ll_row_exp_inplace(real *x, int n, real shift, real *sum_in) {
#ifdef LL_VEC16
    if (ll_cpu_avx512) return ll_row_exp_inplace_avx512(x, n, shift, sum_in);
    if (ll_cpu_avx2) return ll_row_exp_inplace_avx2(x, n, shift, sum_in);
#endif
    real s = 0, si = 0;
    for (int i = 0; i < n; i++) {
        si += x[i];
        x[i] = vexp(x[i] - shift);
        s += x[i];
    }
    if (sum_in) *sum_in = si;
    return s;
}

/* x[i] = exp(x[i] - shift) in place, no sum (attention backward's P = exp(S - lse)) */
static inline void ll_row_exp_shift(real *x, int n, real shift) {
#ifdef LL_VEC16
    if (ll_cpu_avx512) {
        ll_row_exp_shift_avx512(x, n, shift);
        return;
    }
    if (ll_cpu_avx2) {
        ll_row_exp_shift_avx2(x, n, shift);
        return;
    }
#endif
    for (int i = 0; i < n; i++) x[i] = vexp(x[i] - shift);
}

/* sum of exp(x[i] - shift), x unchanged */
static inline real ll_row_sum_exp(const real *x, int n, real shift) {
#ifdef LL_VEC16
    if (ll_cpu_avx512) return ll_row_sum_exp_avx512(x, n, shift);
    if (ll_cpu_avx2) return ll_row_sum_exp_avx2(x, n, shift);
#endif
    real s = 0;
    for (int i = 0; i < n; i++) s += vexp(x[i] - shift);
    return s;
}

/* x[i] = a * x[i] + b */
static inline void ll_row_affine(real *x, int n, real a, real b) {
#ifdef LL_VEC16
    if (ll_cpu_avx512) {
        ll_row_affine_avx512(x, n, a, b);
        return;
    }
    if (ll_cpu_avx2) {
        ll_row_affine_avx2(x, n, a, b);
        return;
    }
#endif
    for (int i = 0; i < n; i++) x[i] = a * x[i] + b;
}

#endif
