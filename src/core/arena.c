/* Bump allocator for per-step activations.  Allocations never move: when the
 * current block is full a new block is chained; on reset, if more than one block
 * was used, they are merged into one block of the peak size, so after the first
 * step of a given shape everything lives in one block and nothing is allocated.
 * Blocks chained after a mark and released with it are kept as spares until the
 * next reset: a loop of mark / outgrow / release (layer by layer, decoding step
 * by step, all before the first reset) then allocates once, not every time.
 * The memory may belong to a backend (device memory: ll_arena_init_with); the
 * block descriptors always live on the host, so the arena never touches it. */
#include "ll/core.h"

#include <stdlib.h>

struct ll_arena_block {
    struct ll_arena_block *prev;
    char *mem;
    size_t cap, used;
};

static void *host_alloc(void *ctx, size_t n) {
    (void)ctx;
    return ll_aligned_alloc(n);
}
static void host_free(void *ctx, void *p) {
    (void)ctx;
    free(p);
}

static ll_arena_block *new_block(ll_arena *a, size_t cap, ll_arena_block *prev) {
    ll_arena_block *b = ll_malloc(sizeof *b);
    b->mem = a->mem_alloc(a->ctx, cap);
    b->prev = prev;
    b->cap = cap;
    b->used = 0;
    return b;
}

static void free_block(ll_arena *a, ll_arena_block *b) {
    a->mem_free(a->ctx, b->mem);
    free(b);
}

void ll_arena_init_with(ll_arena *a, size_t cap, void *(*mem_alloc)(void *, size_t), void (*mem_free)(void *, void *),
                        void *ctx) {
    *a = (ll_arena){.mem_alloc = mem_alloc, .mem_free = mem_free, .ctx = ctx};
    a->top = new_block(a, cap ? cap : (1 << 20), NULL);
    a->cap = a->top->cap;
}

void ll_arena_init(ll_arena *a, size_t cap) { ll_arena_init_with(a, cap, host_alloc, host_free, NULL); }

/* A spare of at least `bytes`, unlinked, or NULL. */
static ll_arena_block *take_spare(ll_arena *a, size_t bytes) {
    for (ll_arena_block **p = &a->spare; *p; p = &(*p)->prev)
        if ((*p)->cap >= bytes) {
            ll_arena_block *b = *p;
            *p = b->prev;
            return b;
        }
    return NULL;
}

static void free_spares(ll_arena *a) {
    while (a->spare) {
        ll_arena_block *p = a->spare->prev;
        free_block(a, a->spare);
        a->spare = p;
    }
}

static void *alloc(ll_arena *a, size_t bytes) {
    ll_arena_block *b = a->top;
    size_t off = (b->used + 63) & ~(size_t)63;
    if (off + bytes > b->cap) {
        size_t cap = 2 * b->cap > bytes ? 2 * b->cap : bytes; /* geometric: few blocks before the merge */
        ll_arena_block *s = take_spare(a, bytes);
        if (s) {
            s->prev = b;
            s->used = 0;
            b = a->top = s;
            cap = s->cap;
        } else {
            b = a->top = new_block(a, cap, b);
        }
        a->cap += cap;
        a->grown++;
        off = 0;
    }
    b->used = off + bytes;
    a->used += bytes;
    if (a->used > a->peak) a->peak = a->used;
    return b->mem + off;
}

void *ll_arena_alloc(ll_arena *a, size_t bytes) { return alloc(a, bytes); }

void *ll_arena_alloc_act(ll_arena *a, size_t bytes) {
    void *p = alloc(a, bytes);
    a->used_act += bytes;
    return p;
}

void ll_arena_reset(ll_arena *a) {
    free_spares(a);
    ll_arena_block *b = a->top;
    /* also when the peak's blocks were chained and released inside the step
     * (forward-only passes release each layer): one block of the peak size */
    if (b->prev || a->peak > b->cap) {
        size_t total = 0;
        while (b) {
            ll_arena_block *p = b->prev;
            total += b->cap;
            free_block(a, b);
            b = p;
        }
        /* Room for the peak plus alignment slack. */
        size_t cap = a->peak + a->peak / 16 + 4096;
        if (cap < total) cap = total;
        b = a->top = new_block(a, cap, NULL);
        a->cap = cap;
    }
    b->used = 0;
    a->used = a->used_act = 0;
}

void ll_arena_reserve(ll_arena *a, size_t bytes) {
    ll_arena_reset(a);
    if (a->top->cap >= bytes) return;
    free_block(a, a->top);
    a->top = new_block(a, bytes, NULL);
    a->cap = bytes;
}

void ll_arena_free(ll_arena *a) {
    free_spares(a);
    ll_arena_block *b = a->top;
    while (b) {
        ll_arena_block *p = b->prev;
        free_block(a, b);
        b = p;
    }
    a->top = NULL;
    a->cap = a->used = 0;
}

ll_arena_mark ll_arena_get_mark(const ll_arena *a) {
    return (ll_arena_mark){.block = a->top, .used = a->top->used, .total = a->used, .act = a->used_act};
}

void ll_arena_release(ll_arena *a, ll_arena_mark mk) {
    ll_arena_block *b = a->top;
    while (b != mk.block && b->prev) { /* blocks chained after the mark become spares */
        ll_arena_block *p = b->prev;
        a->cap -= b->cap;
        b->prev = a->spare;
        a->spare = b;
        b = p;
    }
    a->top = b;
    b->used = mk.used;
    a->used = mk.total;
    a->used_act = mk.act;
}
