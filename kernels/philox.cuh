/* Device Philox4x32-10, a bit-for-bit mirror of src/core/rng.c.
 *
 * Layout (identical to the CPU): key = seed (low word, high word); counter
 * words 0,1 = block index (low, high), words 2,3 = the stream selector
 * r.ctr_hi[0..1] (purpose, step/layer).  Element i of a stream is word (i & 3)
 * of block (i >> 2).  The uniform mapping is the CPU's: the top 24 bits,
 * centred in their bucket, so never exactly 0 or 1.
 *
 * Any change here must be made in src/core/rng.c too (and vice versa); the
 * GPU test tests/gpu/test_layernorm_cuda.c checks the two streams are equal. */
#ifndef LL_PHILOX_CUH
#define LL_PHILOX_CUH

#include <stdint.h>

#include "ll/core.h" /* ll_philox */

#define LL_PHILOX_M0 0xD2511F53u
#define LL_PHILOX_M1 0xCD9E8D57u
#define LL_PHILOX_W0 0x9E3779B9u
#define LL_PHILOX_W1 0xBB67AE85u

/* One Philox4x32-10 block: 4 words for counter (block, ctr_hi); word 3 read from
 * device memory when r.ctr_hi1_at is set (the training step, a CUDA graph replays). */
static __device__ __forceinline__ void ll_philox_block_dev(const ll_philox &r, uint64_t block, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = r.ctr_hi[0];
    uint32_t c3 = r.ctr_hi1_at ? *r.ctr_hi1_at : r.ctr_hi[1];
    uint32_t k0 = r.key[0], k1 = r.key[1];
#pragma unroll
    for (int round = 0; round < 10; round++) {
        uint32_t hi0 = __umulhi(LL_PHILOX_M0, c0), lo0 = LL_PHILOX_M0 * c0;
        uint32_t hi1 = __umulhi(LL_PHILOX_M1, c2), lo1 = LL_PHILOX_M1 * c2;
        uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0;
        c1 = lo1;
        c2 = n2;
        c3 = lo0;
        k0 += LL_PHILOX_W0;
        k1 += LL_PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The i-th 32-bit word of the stream (== ll_philox_u32). */
static __device__ __forceinline__ uint32_t ll_philox_u32_dev(const ll_philox &r, uint64_t i) {
    uint32_t o[4];
    ll_philox_block_dev(r, i >> 2, o);
    return o[i & 3];
}

/* Map a word to (0,1) exactly as ll_philox_uniform does.  Written with
 * __fadd_rn/__fmul_rn so no compiler flag (fast math, contraction) can change
 * the rounding: u>>8 < 2^24 converts exactly, the add rounds to nearest even as
 * on the CPU, and the multiply by 2^-24 is exact. */
static __device__ __forceinline__ float ll_philox_word_to_uniform_dev(uint32_t u) {
    return __fmul_rn(__fadd_rn((float)(u >> 8), 0.5f), 1.0f / 16777216.0f);
}

static __device__ __forceinline__ float ll_philox_uniform_dev(const ll_philox &r, uint64_t i) {
    return ll_philox_word_to_uniform_dev(ll_philox_u32_dev(r, i));
}

/* [0,n) (== ll_philox_below). */
static __device__ __forceinline__ uint32_t ll_philox_below_dev(const ll_philox &r, uint64_t i, uint32_t n) {
    return __umulhi(ll_philox_u32_dev(r, i), n);
}

#endif
