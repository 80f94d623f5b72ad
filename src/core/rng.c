/* Philox4x32-10 (Salmon et al. 2011), the generator cuRAND also uses.  Counter
 * words 0,1 = block index, words 2,3 = the stream (purpose, step/layer), key =
 * seed.  kernels/ mirror this exactly so CPU and GPU draw the same numbers. */
#include "ll/core.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void ll_philox_init(ll_philox *r, uint64_t seed, uint32_t a, uint32_t b) {
    r->key[0] = (uint32_t)seed;
    r->key[1] = (uint32_t)(seed >> 32);
    r->ctr_hi[0] = a;
    r->ctr_hi[1] = b;
    r->ctr_hi1_at = NULL;
}

void ll_philox_block(const ll_philox *r, uint64_t block, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = r->ctr_hi[0], c3 = ll_philox_ctr3(r);
    uint32_t k0 = r->key[0], k1 = r->key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* 16 consecutive blocks at once, bit-identical to ll_philox_block: dropout
 * masks draw tens of millions of words per training step, and the scalar
 * generator (two 32x32->64 multiplies per round, 10 rounds) was ~4% of it. */
static void philox_blocks16_generic(const ll_philox *r, uint64_t block0, uint32_t out[64]) {
    for (int i = 0; i < 16; i++) ll_philox_block(r, block0 + (uint64_t)i, out + 4 * i);
}

#if defined(__x86_64__) || defined(__i386__)
/* compiled whatever -march says; taken when the CPU has AVX-512 (ll_cpu_avx512), or AVX2 (ll_cpu_avx2) */
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))

/* hi and lo 32-bit halves of c * m per lane */
AVX512 static inline void mulhilo16(__m512i c, __m512i m, __m512i *hi, __m512i *lo) {
    *lo = _mm512_mullo_epi32(c, m);
    const __m512i even = _mm512_mul_epu32(c, m);                          /* lanes 0,2,..: 64-bit products */
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);    /* lanes 1,3,.. */
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

AVX512 static void philox_blocks16_avx512(const ll_philox *r, uint64_t block0, uint32_t out[64]) {
    /* Lane 4i+j computes block block0 + 4j + i, so that the 4x4 transposes
     * inside each 128-bit lane below leave the 16 blocks in order. */
    const __m512i lane_block = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)block0), lane_block);
    const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, lane_block);
    __m512i c1 = _mm512_mask_add_epi32(_mm512_set1_epi32((int)(uint32_t)(block0 >> 32)), carry,
                                       _mm512_set1_epi32((int)(uint32_t)(block0 >> 32)), _mm512_set1_epi32(1));
    __m512i c2 = _mm512_set1_epi32((int)r->ctr_hi[0]), c3 = _mm512_set1_epi32((int)ll_philox_ctr3(r));
    uint32_t k0 = r->key[0], k1 = r->key[1];
    const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1);
    for (int round = 0; round < 10; round++) {
        __m512i hi0, lo0, hi1, lo1;
        mulhilo16(c0, m0, &hi0, &lo0);
        mulhilo16(c2, m1, &hi1, &lo1);
        c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32((int)k0));
        c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32((int)k1));
        c1 = lo1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    const __m512i a = _mm512_unpacklo_epi32(c0, c1), b = _mm512_unpackhi_epi32(c0, c1);
    const __m512i c = _mm512_unpacklo_epi32(c2, c3), d = _mm512_unpackhi_epi32(c2, c3);
    _mm512_storeu_si512(out, _mm512_unpacklo_epi64(a, c));      /* blocks 0..3 */
    _mm512_storeu_si512(out + 16, _mm512_unpackhi_epi64(a, c)); /* blocks 4..7 */
    _mm512_storeu_si512(out + 32, _mm512_unpacklo_epi64(b, d)); /* blocks 8..11 */
    _mm512_storeu_si512(out + 48, _mm512_unpackhi_epi64(b, d)); /* blocks 12..15 */
}

/* The same with AVX2, 8 blocks per pass: lane 4i+j (i the 128-bit half) computes block block0 + 2j + i */
#define AVX2 __attribute__((target("avx2")))
AVX2 static inline void mulhilo8_avx2(__m256i c, __m256i m, __m256i *hi, __m256i *lo) {
    *lo = _mm256_mullo_epi32(c, m);
    const __m256i even = _mm256_mul_epu32(c, m);
    const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}
AVX2 static void philox_blocks8_avx2(const ll_philox *r, uint64_t block0, uint32_t out[32]) {
    const __m256i lane_block = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7), sign = _mm256_set1_epi32(INT32_MIN);
    __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)block0), lane_block);
    /* the low word wrapped (unsigned c0 < lane_block): carry into the high one (the mask is -1) */
    const __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(lane_block, sign), _mm256_xor_si256(c0, sign));
    __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32((int)(uint32_t)(block0 >> 32)), carry);
    __m256i c2 = _mm256_set1_epi32((int)r->ctr_hi[0]), c3 = _mm256_set1_epi32((int)ll_philox_ctr3(r));
    uint32_t k0 = r->key[0], k1 = r->key[1];
    const __m256i m0 = _mm256_set1_epi32((int)PHILOX_M0), m1 = _mm256_set1_epi32((int)PHILOX_M1);
    for (int round = 0; round < 10; round++) {
        __m256i hi0, lo0, hi1, lo1;
        mulhilo8_avx2(c0, m0, &hi0, &lo0);
        mulhilo8_avx2(c2, m1, &hi1, &lo1);
        c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
        c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
        c1 = lo1;
        c3 = lo0;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    const __m256i a = _mm256_unpacklo_epi32(c0, c1), b = _mm256_unpackhi_epi32(c0, c1);
    const __m256i c = _mm256_unpacklo_epi32(c2, c3), d = _mm256_unpackhi_epi32(c2, c3);
    _mm256_storeu_si256((__m256i *)out, _mm256_unpacklo_epi64(a, c));        /* blocks 0, 1 */
    _mm256_storeu_si256((__m256i *)(out + 8), _mm256_unpackhi_epi64(a, c));  /* blocks 2, 3 */
    _mm256_storeu_si256((__m256i *)(out + 16), _mm256_unpacklo_epi64(b, d)); /* blocks 4, 5 */
    _mm256_storeu_si256((__m256i *)(out + 24), _mm256_unpackhi_epi64(b, d)); /* blocks 6, 7 */
}
#endif

void ll_philox_blocks16(const ll_philox *r, uint64_t block0, uint32_t out[64]) {
#if defined(__x86_64__) || defined(__i386__)
    if (ll_cpu_avx512) {
        philox_blocks16_avx512(r, block0, out);
        return;
    }
    if (ll_cpu_avx2) {
        philox_blocks8_avx2(r, block0, out);
        philox_blocks8_avx2(r, block0 + 8, out + 32);
        return;
    }
#endif
    philox_blocks16_generic(r, block0, out);
}

uint32_t ll_philox_u32(const ll_philox *r, uint64_t i) {
    uint32_t o[4];
    ll_philox_block(r, i >> 2, o);
    return o[i & 3];
}

float ll_philox_uniform(const ll_philox *r, uint64_t i) {
    /* 24 random bits, centred in their bucket: never exactly 0 or 1. */
    return ((ll_philox_u32(r, i) >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

uint32_t ll_philox_below(const ll_philox *r, uint64_t i, uint32_t n) {
    return (uint32_t)(((uint64_t)ll_philox_u32(r, i) * n) >> 32);
}
