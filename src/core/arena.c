/* Bump allocator for per-step activations: one big block, reset each step, so
 * every saved activation is accounted for and nothing is malloc'd in the loop. */
#include "ll/core.h"

#include <stdlib.h>

void ll_arena_init(ll_arena *a, size_t cap) {
    a->base = cap ? ll_aligned_alloc(cap) : NULL;
    a->cap = cap;
    a->used = a->peak = 0;
}

void *ll_arena_alloc(ll_arena *a, size_t bytes) {
    size_t off = (a->used + 63) & ~(size_t)63;
    if (off + bytes > a->cap)
        ll_die("activation arena full: need %zu more bytes (capacity %zu MiB); lower data.max_tokens",
               off + bytes - a->cap, a->cap >> 20);
    a->used = off + bytes;
    if (a->used > a->peak) a->peak = a->used;
    return a->base + off;
}

void ll_arena_reset(ll_arena *a) { a->used = 0; }

void ll_arena_free(ll_arena *a) {
    free(a->base);
    a->base = NULL;
    a->cap = a->used = 0;
}
