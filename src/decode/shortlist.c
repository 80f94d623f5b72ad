/* Vocabulary maps (include/ll/shortlist.h): read against the model's vocabulary, and a
 * batch's candidate tokens.  Rules are kept as token ids in one open-addressing table keyed
 * by the n-gram's hash; rules of the same n-gram are separate entries, all of them found. */
#include <stdlib.h>
#include <string.h>

#include "decode_internal.h"
#include "ll/core.h"
#include "ll/shortlist.h"

typedef struct {
    uint64_t hash;
    uint32_t key, n;      /* the n-gram: keys[key .. key + n) */
    uint32_t tgt, n_tgt;  /* its targets: tgts[tgt .. tgt + n_tgt) */
} rule;

struct ll_shortlist {
    int V, max_n;
    rule *rules;
    int n_rules, cap_rules;
    int32_t *keys, *tgts;
    size_t n_keys, cap_keys, n_tgts, cap_tgts;
    int32_t *fixed; /* the empty n-gram's targets */
    int n_fixed, cap_fixed;
    uint32_t *slot; /* [n_slots] rule index + 1, 0: empty */
    size_t n_slots;
    long used_batches, used_k; /* (atomic counters: batch workers share the map) */
};

static uint64_t ngram_hash(const int32_t *ids, int n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)ids[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return h;
}

static void push_ids(int32_t **a, size_t *n, size_t *cap, const int32_t *ids, size_t k) {
    if (!k) return; /* (ids may be NULL then) */
    if (*n + k > *cap) {
        *cap = (*n + k) * 2 + 64;
        *a = ll_realloc(*a, sizeof(int32_t) * *cap);
    }
    memcpy(*a + *n, ids, sizeof(int32_t) * k);
    *n += k;
}

/* Pieces of one space-separated field into ids (empty fields between spaces skipped). */
static int field_ids(char *f, const ll_spm *spm, int32_t **ids, int *cap, const char *path, long line) {
    int n = 0;
    for (char *save = NULL, *p = strtok_r(f, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
        const int id = ll_spm_piece_id(spm, p);
        if (id < 0) return ll_fail("%s:%ld: '%s' is not a piece of the model's vocabulary (a map for another sentencepiece model?)", path, line, p);
        if (n == *cap) *ids = ll_realloc(*ids, sizeof(int32_t) * (size_t)(*cap = *cap * 2 + 16));
        (*ids)[n++] = id;
    }
    return n;
}

/* The n-gram table at twice the rules (rebuilt as they grow). */
static void index_rules(ll_shortlist *s) {
    free(s->slot);
    s->n_slots = 16;
    while (s->n_slots < 2 * (size_t)s->cap_rules) s->n_slots *= 2;
    s->slot = ll_calloc(s->n_slots, sizeof(uint32_t));
    for (int r = 0; r < s->n_rules; r++) {
        size_t i = s->rules[r].hash & (s->n_slots - 1);
        while (s->slot[i]) i = (i + 1) & (s->n_slots - 1);
        s->slot[i] = (uint32_t)r + 1;
    }
}

ll_shortlist *ll_shortlist_new(int V) {
    ll_shortlist *s = ll_calloc(1, sizeof *s);
    s->V = V;
    index_rules(s);
    return s;
}

int ll_shortlist_add(ll_shortlist *s, const int32_t *ngram, int n, const int32_t *tgt, int n_tgt) {
    if (n < 0 || n > LL_SHORTLIST_MAX_NGRAM || n_tgt < 0)
        return ll_fail("a source n-gram of %d pieces (at most %d)", n, LL_SHORTLIST_MAX_NGRAM);
    for (int i = 0; i < n; i++)
        if (ngram[i] < 0 || ngram[i] >= s->V) return ll_fail("source token %d outside the vocabulary of %d", ngram[i], s->V);
    for (int i = 0; i < n_tgt; i++)
        if (tgt[i] < 0 || tgt[i] >= s->V) return ll_fail("target token %d outside the vocabulary of %d", tgt[i], s->V);
    if (n == 0) {
        size_t nf = (size_t)s->n_fixed, cf = (size_t)s->cap_fixed;
        push_ids(&s->fixed, &nf, &cf, tgt, (size_t)n_tgt);
        s->n_fixed = (int)nf, s->cap_fixed = (int)cf;
        return 0;
    }
    if (s->n_rules == s->cap_rules) {
        s->rules = ll_realloc(s->rules, sizeof(rule) * (size_t)(s->cap_rules = s->cap_rules * 2 + 64));
        index_rules(s);
    }
    const int r = s->n_rules++;
    s->rules[r] = (rule){.hash = ngram_hash(ngram, n), .key = (uint32_t)s->n_keys, .n = (uint32_t)n,
                         .tgt = (uint32_t)s->n_tgts, .n_tgt = (uint32_t)n_tgt};
    push_ids(&s->keys, &s->n_keys, &s->cap_keys, ngram, (size_t)n);
    push_ids(&s->tgts, &s->n_tgts, &s->cap_tgts, tgt, (size_t)n_tgt);
    if (n > s->max_n) s->max_n = n;
    size_t i = s->rules[r].hash & (s->n_slots - 1);
    while (s->slot[i]) i = (i + 1) & (s->n_slots - 1);
    s->slot[i] = (uint32_t)r + 1;
    return 0;
}

ll_shortlist *ll_shortlist_load(const char *path, const ll_spm *spm) {
    size_t len;
    char *text = ll_read_file(path, &len);
    if (!text) return NULL;
    ll_shortlist *s = ll_shortlist_new(ll_spm_vocab_size(spm));
    int32_t *ids = NULL;
    int cap = 0;
    long line = 0;
    for (char *p = text, *next; p < text + len; p = next) {
        char *end = memchr(p, '\n', (size_t)(text + len - p));
        next = end ? end + 1 : text + len;
        if (!end) end = text + len;
        line++;
        if (end > p && end[-1] == '\r') end--;
        *end = 0;
        if (!*p) continue;
        char *tab = strchr(p, '\t');
        if (!tab) {
            ll_fail("%s:%ld: no tab: a rule is '<source n-gram>\\t<target tokens>'", path, line);
            goto fail;
        }
        *tab = 0;
        const int n = field_ids(p, spm, &ids, &cap, path, line);
        if (n < 0) goto fail;
        if (n > LL_SHORTLIST_MAX_NGRAM) {
            ll_fail("%s:%ld: a source n-gram of %d pieces (at most %d)", path, line, n, LL_SHORTLIST_MAX_NGRAM);
            goto fail;
        }
        int32_t key[LL_SHORTLIST_MAX_NGRAM];
        if (n) memcpy(key, ids, sizeof(int32_t) * (size_t)n); /* (ids NULL before a first piece) */
        const int nt = field_ids(tab + 1, spm, &ids, &cap, path, line);
        if (nt < 0) goto fail;
        if (ll_shortlist_add(s, key, n, ids, nt) != 0) goto fail; /* (cannot fail: checked above) */
    }
    free(ids);
    free(text);
    return s;
fail:
    free(ids);
    free(text);
    ll_shortlist_free(s);
    return NULL;
}

void ll_shortlist_free(ll_shortlist *s) {
    if (!s) return;
    free(s->rules), free(s->keys), free(s->tgts), free(s->fixed), free(s->slot);
    free(s);
}

int ll_shortlist_rules(const ll_shortlist *s) { return s->n_rules; }
int ll_shortlist_fixed(const ll_shortlist *s) { return s->n_fixed; }
void ll_shortlist_usage(const ll_shortlist *s, long *batches, long *candidates) {
    *batches = __atomic_load_n(&s->used_batches, __ATOMIC_RELAXED);
    *candidates = __atomic_load_n(&s->used_k, __ATOMIC_RELAXED);
}

static void mark(uint8_t *on, int V, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < V) on[ids[i]] = 1;
}

int ll_shortlist_candidates(const ll_shortlist *s, const int32_t *src, const int *src_len, int B, int S,
                            const int32_t *const *prefix, const int *prefix_len, int32_t *out) {
    const int V = s->V;
    uint8_t *on = ll_calloc((size_t)V, 1);
    const int32_t always[] = {LL_BOS, LL_EOS, LL_UNK};
    mark(on, V, always, 3);
    mark(on, V, s->fixed, (size_t)s->n_fixed);
    for (int b = 0; b < B; b++) {
        const int32_t *x = src + (size_t)b * S;
        for (int i = 0; i < src_len[b]; i++)
            for (int n = 1; n <= s->max_n && i + n <= src_len[b]; n++) {
                const uint64_t h = ngram_hash(x + i, n);
                for (size_t j = h & (s->n_slots - 1); s->slot[j]; j = (j + 1) & (s->n_slots - 1)) {
                    const rule *r = &s->rules[s->slot[j] - 1];
                    if (r->n_tgt && r->hash == h && (int)r->n == n &&
                        !memcmp(s->keys + r->key, x + i, sizeof(int32_t) * (size_t)n))
                        mark(on, V, s->tgts + r->tgt, r->n_tgt); /* (tgts NULL while no rule has targets) */
                }
            }
        if (prefix && prefix[b]) mark(on, V, prefix[b], (size_t)prefix_len[b]);
    }
    on[LL_PAD] = 0; /* never produced */
    int K = 0;
    for (int v = 0; v < V; v++)
        if (on[v]) out[K++] = v;
    free(on);
    return K;
}

void ll_search_shortlist(ll_model *m, ll_dec_state *d, const ll_search_opts *o, const int32_t *src, const int *src_len,
                         int B, int S) {
    const ll_shortlist *s = o->shortlist;
    if (!s) return;
    if (s->V != m->hp.V)
        ll_die("shortlist: read against a vocabulary of %d pieces, the model has %d", s->V, m->hp.V);
    int32_t *ids = ll_malloc(sizeof(int32_t) * (size_t)s->V);
    const int K = ll_shortlist_candidates(s, src, src_len, B, S, o->prefix, o->prefix_len, ids);
    ll_decode_shortlist(m, d, ids, K);
    free(ids);
    ll_shortlist *w = (ll_shortlist *)s; /* (only its counters change) */
    __atomic_add_fetch(&w->used_batches, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&w->used_k, K, __ATOMIC_RELAXED);
}
