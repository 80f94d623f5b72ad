/* Exact n-gram counting for BLEU and chrF without hashing.
 *
 * N-grams get dense ids jointly over the hypothesis and all references, order
 * by order: an n-gram's key is (id of its (n-1)-gram prefix, last symbol), one
 * 64-bit integer, so equal keys are exactly equal n-grams (no string compares,
 * no hash collisions to worry about) and each order is one pass over a map. */
#include <stdlib.h>
#include <string.h>

#include "eval_internal.h"
#include "ll/core.h"

typedef struct {
    const char *p;
    uint32_t len, idx;
} str_item;

static int cmp_str(const void *a, const void *b) {
    const str_item *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return memcmp(x->p, y->p, x->len);
}

uint32_t ll_ev_intern(const ll_ev_span *spans, int n, uint32_t *ids) {
    if (n <= 0) return 0;
    str_item *it = ll_malloc((size_t)n * sizeof *it);
    for (int i = 0; i < n; i++) it[i] = (str_item){spans[i].p, spans[i].len, (uint32_t)i};
    qsort(it, (size_t)n, sizeof *it, cmp_str);
    uint32_t id = 0;
    for (int i = 0; i < n; i++) {
        if (i && cmp_str(&it[i - 1], &it[i]) != 0) id++;
        ids[it[i].idx] = id;
    }
    free(it);
    return id + 1;
}

/* Open-addressing map from an n-gram key to its dense id.  Keys are exact
 * n-gram codes, not hashes, so equal keys mean equal n-grams. */
typedef struct {
    uint64_t *keys;
    uint32_t *ids;
    size_t mask;
} key_map;

static uint32_t map_get(key_map *m, uint64_t key, uint32_t *next_id) {
    size_t h = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & m->mask;
    while (m->ids[h] != UINT32_MAX) {
        if (m->keys[h] == key) return m->ids[h];
        h = (h + 1) & m->mask;
    }
    m->keys[h] = key;
    return m->ids[h] = (*next_id)++;
}

void ll_ev_ngram_match(const ll_ev_seq *seqs, int nseq, int max_n, int64_t *each, int64_t *best) {
    if (nseq < 1 || max_n < 1 || seqs[0].len <= 0) return;
    size_t total = 0;
    uint64_t alpha = 1;
    for (int k = 0; k < nseq; k++) {
        total += (size_t)seqs[k].len;
        for (int i = 0; i < seqs[k].len; i++)
            if (seqs[k].sym[i] >= alpha) alpha = (uint64_t)seqs[k].sym[i] + 1;
    }
    size_t cap = 16;
    while (cap < 2 * total) cap *= 2;
    key_map map = {ll_malloc(cap * sizeof *map.keys), ll_malloc(cap * sizeof *map.ids), cap - 1};
    /* rank[slot]: id of the n-gram starting at that window, for the current order */
    uint32_t *rank = ll_malloc(total * sizeof *rank);
    int32_t *cnt = ll_calloc(total * (size_t)nseq, sizeof *cnt);
    int nref = nseq - 1;
    for (int n = 1; n <= max_n && seqs[0].len >= n; n++) {
        memset(map.ids, 0xFF, cap * sizeof *map.ids);
        uint32_t next_id = 0;
        size_t slot0 = 0;
        for (int k = 0; k < nseq; k++) {
            const uint32_t *s = seqs[k].sym;
            for (int i = 0; i + n <= seqs[k].len; i++) {
                size_t slot = slot0 + (size_t)i;
                /* prefix id < total and symbol < alpha: the key is unique per n-gram */
                uint64_t key = n == 1 ? s[i] : (uint64_t)rank[slot] * alpha + s[i + n - 1];
                uint32_t id = map_get(&map, key, &next_id);
                rank[slot] = id; /* read above for this order's key, then replaced */
                cnt[(size_t)id * (size_t)nseq + (size_t)k]++;
            }
            slot0 += (size_t)seqs[k].len;
        }
        for (uint32_t id = 0; id < next_id; id++) {
            int32_t *c = cnt + (size_t)id * (size_t)nseq;
            int64_t h = c[0], mx = 0;
            for (int k = 1; k < nseq; k++) {
                if (each && h) each[(size_t)(n - 1) * (size_t)nref + (size_t)(k - 1)] += h < c[k] ? h : c[k];
                if (c[k] > mx) mx = c[k];
                c[k] = 0;
            }
            if (best && h) best[n - 1] += h < mx ? h : mx;
            c[0] = 0;
        }
    }
    free(cnt);
    free(rank);
    free(map.keys);
    free(map.ids);
}
