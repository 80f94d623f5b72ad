/* Shared helpers for the double-precision finite-difference tests. */
#ifndef LL_GRADCHECK_H
#define LL_GRADCHECK_H

#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "ll/data.h"

/* A random padded batch: B sentences, source lengths up to S, target up to T. */
static inline void gc_make_batch(ll_batch *b, int B, int S, int T, int V, uint64_t seed) {
    ll_philox r;
    ll_philox_init(&r, seed, 99, 0);
    uint64_t k = 0;
    memset(b, 0, sizeof *b); /* row0 and the language ids: 0, not stack garbage (row0 keys dropout) */
    b->B = B;
    b->S = S;
    b->T = T;
    b->src = calloc((size_t)B * S, sizeof(int32_t));
    b->tgt_in = calloc((size_t)B * T, sizeof(int32_t));
    b->tgt_out = calloc((size_t)B * T, sizeof(int32_t));
    b->src_len = calloc(B, sizeof(int));
    b->tgt_len = calloc(B, sizeof(int));
    b->n_src_tokens = b->n_tgt_tokens = 0;
    for (int i = 0; i < B; i++) {
        int sl = i == 0 ? S : 2 + (int)ll_philox_below(&r, k++, S - 1);
        int tl = i == 0 ? T : 2 + (int)ll_philox_below(&r, k++, T - 1);
        b->src_len[i] = sl;
        b->tgt_len[i] = tl;
        for (int t = 0; t < S; t++)
            b->src[i * S + t] = t < sl - 1 ? 4 + (int)ll_philox_below(&r, k++, V - 4) : t == sl - 1 ? LL_EOS : LL_PAD;
        for (int t = 0; t < T; t++)
            b->tgt_out[i * T + t] =
                t < tl - 1 ? 4 + (int)ll_philox_below(&r, k++, V - 4) : t == tl - 1 ? LL_EOS : LL_PAD;
        for (int t = 0; t < T; t++) b->tgt_in[i * T + t] = t == 0 ? LL_EOS : t < tl ? b->tgt_out[i * T + t - 1] : LL_PAD;
        b->n_src_tokens += sl;
        b->n_tgt_tokens += tl;
    }
}

static inline void gc_free_batch(ll_batch *b) {
    free(b->src);
    free(b->tgt_in);
    free(b->tgt_out);
    free(b->src_len);
    free(b->tgt_len);
}

static inline double gc_relerr(double a, double n) {
    double d = a - n < 0 ? n - a : a - n;
    double s = (a < 0 ? -a : a) + (n < 0 ? -n : n);
    return s < 1e-8 ? d : d / s;
}

#endif
