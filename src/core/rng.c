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
}

void ll_philox_block(const ll_philox *r, uint64_t block, uint32_t out[4]) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = r->ctr_hi[0], c3 = r->ctr_hi[1];
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
