/* numpy's default_rng(seed) as sacreBLEU's statistical tests use it: SeedSequence
 * (numpy/random/bit_generator.pyx), PCG64 (pcg64.h: XSL-RR output, step before
 * output), and Generator.integers / choice for int64 (Lemire's bounded method on
 * 32-bit draws, distributions.c) and bool (one bit of a 32-bit draw at a time).
 * tests/test_eval.c checks the draws against numbers numpy printed. */
#include <stdint.h>

#include "ll/eval.h"

#define INIT_A 0x43b0d7e5u
#define MULT_A 0x931e8875u
#define INIT_B 0x8b51f9ddu
#define MULT_B 0x58f38dedu
#define MIX_MULT_L 0xca01f9ddu
#define MIX_MULT_R 0x4973f715u

static uint32_t hashmix(uint32_t v, uint32_t *hc) {
    v ^= *hc;
    *hc *= MULT_A;
    v *= *hc;
    return v ^ v >> 16;
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = MIX_MULT_L * x - MIX_MULT_R * y;
    return r ^ r >> 16;
}

static unsigned __int128 pcg_mult(void) {
    return (unsigned __int128)2549297995355413924ull << 64 | 4865540595714422341ull;
}

static void step(ll_np_rng *r) { r->state = r->state * pcg_mult() + r->inc; }

void ll_np_rng_seed(ll_np_rng *r, uint64_t seed) {
    /* SeedSequence(seed): the entropy as 32-bit words, padded to the pool size 4 */
    uint32_t ent[4] = {(uint32_t)seed, (uint32_t)(seed >> 32), 0, 0}, pool[4], hc = INIT_A;
    for (int i = 0; i < 4; i++) pool[i] = hashmix(ent[i], &hc);
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++)
            if (s != d) pool[d] = mix(pool[d], hashmix(pool[s], &hc));
    /* generate_state(4, uint64): 8 words, little-endian pairs */
    uint32_t w[8], h = INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t x = pool[i % 4] ^ h;
        h *= MULT_B;
        x *= h;
        w[i] = x ^ x >> 16;
    }
    uint64_t v[4];
    for (int i = 0; i < 4; i++) v[i] = (uint64_t)w[2 * i] | (uint64_t)w[2 * i + 1] << 32;
    /* pcg64_set_seed -> pcg_setseq_128_srandom_r */
    r->inc = ((unsigned __int128)v[2] << 64 | v[3]) << 1 | 1;
    r->state = 0;
    step(r);
    r->state += (unsigned __int128)v[0] << 64 | v[1];
    step(r);
    r->has_u32 = 0;
    r->u32 = 0;
}

uint64_t ll_np_rng_next64(ll_np_rng *r) {
    step(r);
    uint64_t x = (uint64_t)(r->state >> 64) ^ (uint64_t)r->state;
    unsigned rot = (unsigned)(r->state >> 122);
    return x >> rot | x << ((64 - rot) & 63);
}

/* pcg64_next32: the low half of a 64-bit draw, the high half kept for the next call */
uint32_t ll_np_rng_next32(ll_np_rng *r) {
    if (r->has_u32) {
        r->has_u32 = 0;
        return r->u32;
    }
    uint64_t x = ll_np_rng_next64(r);
    r->has_u32 = 1;
    r->u32 = (uint32_t)(x >> 32);
    return (uint32_t)x;
}

/* integers(0, n) for n <= 2^32 - 1 (buffered_bounded_lemire_uint32; n == 1 draws nothing) */
uint32_t ll_np_rng_below(ll_np_rng *r, uint32_t n) {
    if (n <= 1) return 0;
    const uint32_t rng = n - 1;
    uint64_t m = (uint64_t)ll_np_rng_next32(r) * n;
    uint32_t leftover = (uint32_t)m;
    if (leftover < n) {
        const uint32_t threshold = (UINT32_MAX - rng) % n;
        while (leftover < threshold) {
            m = (uint64_t)ll_np_rng_next32(r) * n;
            leftover = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* integers(2, size=..., dtype=bool) in pieces: the bit buffer *b lives for one numpy
 * call (zero it before the first piece), so a call's output can be drawn row by row */
void ll_np_rng_bools(ll_np_rng *r, ll_np_bits *b, unsigned char *out, size_t cnt) {
    for (size_t i = 0; i < cnt; i++) {
        if (!b->bcnt) {
            b->buf = ll_np_rng_next32(r);
            b->bcnt = 31;
        } else {
            b->buf >>= 1;
            b->bcnt--;
        }
        out[i] = b->buf & 1;
    }
}
