/* The activation arena (src/core/arena.c): allocations are 64-byte aligned
 * and never move; marks release everything after them; a step that outgrew
 * the arena is merged into one block at reset; and a mark / outgrow / release
 * loop before any reset (a forward-only pass layer by layer, decoding step by
 * step) allocates its chained block once, then reuses it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "util/testutil.h"

static int n_alloc, n_free;
static void *count_alloc(void *ctx, size_t n) {
    (void)ctx;
    n_alloc++;
    return ll_aligned_alloc(n);
}
static void count_free(void *ctx, void *p) {
    (void)ctx;
    n_free++;
    free(p);
}

int main(void) {
    ll_arena a;
    ll_arena_init_with(&a, 4096, count_alloc, count_free, NULL);
    CHECK(n_alloc == 1);
    char *p0 = ll_arena_alloc(&a, 100);
    CHECK(((uintptr_t)p0 & 63) == 0);
    memset(p0, 1, 100);

    /* outgrow inside a mark, ten times: one chained block, reused */
    for (int it = 0; it < 10; it++) {
        ll_arena_mark mk = ll_arena_get_mark(&a);
        char *big = ll_arena_alloc(&a, 20000), *more = ll_arena_alloc(&a, 3000);
        CHECK(((uintptr_t)big & 63) == 0 && ((uintptr_t)more & 63) == 0);
        memset(big, 2, 20000);
        memset(more, 3, 3000);
        CHECK_MSG(n_alloc <= 3, "iteration %d: %d block allocations (the released block is not reused)", it,
                  n_alloc);
        ll_arena_release(&a, mk);
        CHECK(a.used == 100);
    }
    const int after_loop = n_alloc;
    CHECK(p0[0] == 1 && p0[99] == 1); /* allocations before the mark never move */

    /* reset merges into one block of the peak; the same loop then allocates nothing */
    ll_arena_reset(&a);
    CHECK(a.cap >= a.peak);
    const int after_reset = n_alloc;
    CHECK(after_reset == after_loop + 1);
    for (int it = 0; it < 5; it++) {
        ll_arena_alloc(&a, 100);
        ll_arena_mark mk = ll_arena_get_mark(&a);
        ll_arena_alloc(&a, 20000);
        ll_arena_alloc(&a, 3000);
        ll_arena_release(&a, mk);
        ll_arena_reset(&a);
    }
    CHECK_MSG(n_alloc == after_reset, "a warm arena allocated %d blocks", n_alloc - after_reset);

    /* a spare too small for a request is not used; everything is freed at the end */
    ll_arena_mark mk = ll_arena_get_mark(&a);
    ll_arena_alloc(&a, a.cap); /* fills the block exactly: the next one chains */
    ll_arena_alloc(&a, 10);
    ll_arena_release(&a, mk);
    ll_arena_alloc(&a, a.cap);
    char *huge = ll_arena_alloc(&a, 1 << 20); /* larger than the spare */
    memset(huge, 4, 1 << 20);
    ll_arena_free(&a);
    CHECK_MSG(n_alloc == n_free, "%d blocks allocated, %d freed", n_alloc, n_free);
    return tu_finish("test_arena");
}
