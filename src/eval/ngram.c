/* Exact n-gram counting for BLEU and chrF without hashing.
 *
 * Symbols (token ids or code points) are ranked jointly over the hypothesis and
 * all references; an n-gram's rank is derived from its (n-1)-gram prefix rank
 * and its last symbol, so each order is one sort of 64-bit keys and equal keys
 * are exactly equal n-grams (no collisions, no string compares). */
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

typedef struct {
    uint64_t key;
    uint32_t slot; /* window index in the joint rank array */
    uint32_t seq;
} win;

static int cmp_win(const void *a, const void *b) {
    uint64_t x = ((const win *)a)->key, y = ((const win *)b)->key;
    return x < y ? -1 : x > y;
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
    size_t *off = ll_malloc((size_t)nseq * sizeof *off);
    int64_t *cnt = ll_calloc((size_t)nseq, sizeof *cnt);
    uint32_t *rank = ll_malloc(total * sizeof *rank);
    win *w = ll_malloc(total * sizeof *w);
    for (int k = 0, o = 0; k < nseq; k++) {
        off[k] = (size_t)o;
        o += seqs[k].len;
    }
    int nref = nseq - 1;
    for (int n = 1; n <= max_n && seqs[0].len >= n; n++) {
        size_t m = 0;
        for (int k = 0; k < nseq; k++) {
            const uint32_t *s = seqs[k].sym;
            for (int i = 0; i + n <= seqs[k].len; i++) {
                size_t slot = off[k] + (size_t)i;
                /* prefix rank < total and symbol < alpha: the key is unique per n-gram */
                uint64_t key = n == 1 ? s[i] : (uint64_t)rank[slot] * alpha + s[i + n - 1];
                w[m++] = (win){key, (uint32_t)slot, (uint32_t)k};
            }
        }
        qsort(w, m, sizeof *w, cmp_win);
        uint32_t r = 0;
        for (size_t a = 0; a < m;) {
            size_t b = a;
            while (b < m && w[b].key == w[a].key) {
                cnt[w[b].seq]++;
                rank[w[b].slot] = r; /* keys of this order are built already: overwrite in place */
                b++;
            }
            int64_t h = cnt[0], mx = 0;
            for (int k = 1; k < nseq; k++) {
                int64_t c = cnt[k];
                if (each && h) each[(size_t)(n - 1) * (size_t)nref + (size_t)(k - 1)] += h < c ? h : c;
                if (c > mx) mx = c;
                cnt[k] = 0;
            }
            if (best && h) best[n - 1] += h < mx ? h : mx;
            cnt[0] = 0;
            r++;
            a = b;
        }
    }
    free(w);
    free(rank);
    free(cnt);
    free(off);
}
