/* Bump allocator for per-step activations.  Allocations never move: when the
 * current block is full a new block is chained; on reset, if more than one block
 * was used, they are merged into one block of the peak size, so after the first
 * step of a given shape everything lives in one block and nothing is malloc'd. */
#include "ll/core.h"

#include <stdlib.h>

typedef struct block {
    struct block *prev;
    size_t cap, used;
} block;

#define HDR ((sizeof(block) + 63) & ~(size_t)63)

static block *new_block(size_t cap, block *prev) {
    block *b = ll_aligned_alloc(HDR + cap);
    b->prev = prev;
    b->cap = cap;
    b->used = 0;
    return b;
}

void ll_arena_init(ll_arena *a, size_t cap) {
    a->base = (char *)new_block(cap ? cap : (1 << 20), NULL);
    a->cap = cap;
    a->used = a->peak = 0;
}

void *ll_arena_alloc(ll_arena *a, size_t bytes) {
    block *b = (block *)a->base;
    size_t off = (b->used + 63) & ~(size_t)63;
    if (off + bytes > b->cap) {
        size_t cap = b->cap > bytes ? b->cap : bytes;
        b = new_block(cap, b);
        a->base = (char *)b;
        off = 0;
    }
    b->used = off + bytes;
    a->used += bytes;
    if (a->used > a->peak) a->peak = a->used;
    return (char *)b + HDR + off;
}

void ll_arena_reset(ll_arena *a) {
    block *b = (block *)a->base;
    if (b->prev) {
        size_t total = 0;
        while (b) {
            block *p = b->prev;
            total += b->cap;
            free(b);
            b = p;
        }
        /* Room for the peak plus alignment slack. */
        size_t cap = a->peak + a->peak / 16 + 4096;
        if (cap < total) cap = total;
        b = new_block(cap, NULL);
        a->base = (char *)b;
        a->cap = cap;
    }
    b->used = 0;
    a->used = 0;
}

void ll_arena_free(ll_arena *a) {
    block *b = (block *)a->base;
    while (b) {
        block *p = b->prev;
        free(b);
        b = p;
    }
    a->base = NULL;
    a->cap = a->used = 0;
}

ll_arena_mark ll_arena_get_mark(const ll_arena *a) {
    block *b = (block *)a->base;
    return (ll_arena_mark){.block = b, .used = b->used, .total = a->used};
}

void ll_arena_release(ll_arena *a, ll_arena_mark mk) {
    block *b = (block *)a->base;
    while (b != mk.block && b->prev) { /* drop blocks chained after the mark */
        block *p = b->prev;
        free(b);
        b = p;
    }
    a->base = (char *)b;
    b->used = mk.used;
    a->used = mk.total;
}
