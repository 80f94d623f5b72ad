/* llshortlist's map (include/ll/shortlist.h): IBM Model 1 (Brown et al. 1993) over the
 * prepared training pairs, in sentencepiece pieces, as Marian's lexical shortlists take their
 * probabilities from a word aligner (fast_align is Model 2 with a diagonal prior; without word
 * order, Model 1 ranks a source piece's translations nearly as well, which is all a
 * shortlist needs).
 *
 * p(t | s) lives in one open-addressing table over the co-occurring (s, t) pairs; the first
 * EM round from uniform is the pairs' co-occurrence counts weighted 1 / (|s| + 1), gathered
 * while the table is built; each later round re-reads the corpus, threads dividing the target
 * pieces among them (em_round), so the map is the same bits on any thread count. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "ll/data.h"
#include "ll/shortlist.h"

typedef struct {
    uint64_t key; /* s * (V + 1) + t + 1; 0: empty */
    double p, c;  /* p(t | s); this round's expected count */
} pair_slot;

typedef struct {
    pair_slot *a;
    size_t cap, n; /* cap a power of two */
    int V;         /* vocabulary; source id V is NULL */
} pair_table;

static size_t slot_of(const pair_table *h, uint64_t key) {
    uint64_t x = key * 0x9e3779b97f4a7c15ull;
    size_t i = (size_t)(x ^ (x >> 29)) & (h->cap - 1);
    while (h->a[i].key && h->a[i].key != key) i = (i + 1) & (h->cap - 1);
    return i;
}

static void grow(pair_table *h) {
    pair_table g = {.cap = h->cap ? h->cap * 2 : 1 << 16, .V = h->V};
    g.a = ll_calloc(g.cap, sizeof(pair_slot));
    for (size_t i = 0; i < h->cap; i++)
        if (h->a[i].key) g.a[slot_of(&g, h->a[i].key)] = h->a[i], g.n++;
    free(h->a);
    *h = g;
}

static uint64_t pair_key(const pair_table *h, int s, int t) { return (uint64_t)s * (uint64_t)(h->V + 1) + (uint64_t)t + 1; }

/* Tokens a sentence contributes: not BOS, pad or EOS (EOS ends every sentence; the search
 * always has it). */
static int content(int32_t id) { return id != LL_BOS && id != LL_PAD && id != LL_EOS; }

/* Sentences used of a corpus. */
static int used_sents(const ll_tokfile *f, long max_sents) {
    return max_sents > 0 && max_sents < f->n_sents ? (int)max_sents : f->n_sents;
}

/* Round 1: every co-occurring pair into the table with count 1 / (|s| + 1) per co-occurrence. */
static void first_round(pair_table *h, const ll_dataset *d, const uint8_t *use, long max_sents, double *tgt_freq) {
    for (int p = 0; p < d->n_pairs; p++) {
        if (!use[p]) continue;
        const ll_tokfile *fs = &d->pairs[p].src, *ft = &d->pairs[p].tgt;
        for (int i = 0, n = used_sents(fs, max_sents); i < n; i++) {
            const int32_t *xs = fs->tokens + fs->offsets[i], *xt = ft->tokens + ft->offsets[i];
            const int ls = ll_tokfile_len(fs, i), lt = ll_tokfile_len(ft, i);
            int n_s = 1;
            for (int a = 0; a < ls; a++) n_s += content(xs[a]);
            for (int b = 0; b < lt; b++) {
                if (!content(xt[b])) continue;
                tgt_freq[xt[b]] += 1;
                for (int a = -1; a < ls; a++) {
                    if (a >= 0 && !content(xs[a])) continue;
                    if (2 * (h->n + 1) > h->cap) grow(h);
                    const uint64_t key = pair_key(h, a < 0 ? h->V : xs[a], xt[b]);
                    pair_slot *e = &h->a[slot_of(h, key)];
                    if (!e->key) e->key = key, h->n++;
                    e->c += 1.0 / n_s;
                }
            }
        }
    }
}

/* M step: p = c / (sum of c over s's pairs); counts cleared. */
static void normalize(pair_table *h, double *tot) {
    memset(tot, 0, sizeof(double) * (size_t)(h->V + 1));
    for (size_t i = 0; i < h->cap; i++)
        if (h->a[i].key) tot[(h->a[i].key - 1) / (uint64_t)(h->V + 1)] += h->a[i].c;
    for (size_t i = 0; i < h->cap; i++) {
        pair_slot *e = &h->a[i];
        if (!e->key) continue;
        const double t = tot[(e->key - 1) / (uint64_t)(h->V + 1)];
        e->p = t > 0 ? e->c / t : 0;
        e->c = 0;
    }
}

/* E step of a later round; returns the corpus log-likelihood per target token (natural log).
 * Thread k of n takes the target pieces t with t % n == k in every sentence: each count has one
 * writer, adding in corpus order, so the map does not depend on the thread count. */
static double em_round(pair_table *h, const ll_dataset *d, const uint8_t *use, long max_sents) {
    double ll = 0, n_tok = 0;
    for (int p = 0; p < d->n_pairs; p++) {
        if (!use[p]) continue;
        const ll_tokfile *fs = &d->pairs[p].src, *ft = &d->pairs[p].tgt;
        const int n = used_sents(fs, max_sents);
        int max_ls = 0;
        for (int i = 0; i < n; i++)
            if (ll_tokfile_len(fs, i) > max_ls) max_ls = ll_tokfile_len(fs, i);
#pragma omp parallel reduction(+ : ll, n_tok)
        {
            const int nt = omp_get_num_threads(), me = omp_get_thread_num();
            size_t *slot = ll_malloc(sizeof(size_t) * ((size_t)max_ls + 1)); /* a target piece's pairs */
            for (int i = 0; i < n; i++) {
                const int32_t *xs = fs->tokens + fs->offsets[i], *xt = ft->tokens + ft->offsets[i];
                const int ls = ll_tokfile_len(fs, i), lt = ll_tokfile_len(ft, i);
                int n_s = 1;
                for (int a = 0; a < ls; a++) n_s += content(xs[a]);
                for (int b = 0; b < lt; b++) {
                    if (!content(xt[b]) || xt[b] % nt != me) continue;
                    double den = 0;
                    int k = 0;
                    for (int a = -1; a < ls; a++) {
                        if (a >= 0 && !content(xs[a])) continue;
                        slot[k] = slot_of(h, pair_key(h, a < 0 ? h->V : xs[a], xt[b]));
                        den += h->a[slot[k++]].p;
                    }
                    if (den <= 0) continue;
                    ll += log(den / n_s), n_tok += 1;
                    for (int j = 0; j < k; j++) h->a[slot[j]].c += h->a[slot[j]].p / den;
                }
            }
            free(slot);
        }
    }
    return n_tok > 0 ? ll / n_tok : 0;
}

typedef struct {
    int t;
    double p;
} cand;

static int by_p_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    return x->p < y->p ? 1 : x->p > y->p ? -1 : x->t - y->t;
}

/* A piece the map can carry: no space, tab or line break in it. */
static const char *piece(const ll_spm *spm, int id) {
    const char *s = ll_spm_id_piece(spm, id);
    return s && *s && !strpbrk(s, " \t\r\n") ? s : NULL;
}

static int write_map(const pair_table *h, const double *tgt_freq, const ll_spm *spm, const char *path,
                     const ll_shortlist_build_opts *o, long *rules) {
    const int V = h->V;
    /* the pairs grouped by source (counting sort), each group by p */
    size_t *start = ll_calloc((size_t)V + 2, sizeof(size_t));
    for (size_t i = 0; i < h->cap; i++)
        if (h->a[i].key) start[(h->a[i].key - 1) / (uint64_t)(V + 1) + 1]++;
    for (int s = 0; s <= V; s++) start[s + 1] += start[s];
    cand *c = ll_malloc(sizeof(cand) * (h->n ? h->n : 1));
    size_t *fill = ll_malloc(sizeof(size_t) * ((size_t)V + 1));
    memcpy(fill, start, sizeof(size_t) * ((size_t)V + 1));
    for (size_t i = 0; i < h->cap; i++)
        if (h->a[i].key) {
            const uint64_t s = (h->a[i].key - 1) / (uint64_t)(V + 1);
            c[fill[s]++] = (cand){.t = (int)((h->a[i].key - 1) % (uint64_t)(V + 1)), .p = h->a[i].p};
        }
    free(fill);
    cand *freq = ll_malloc(sizeof(cand) * (size_t)V);
    for (int t = 0; t < V; t++) freq[t] = (cand){.t = t, .p = tgt_freq[t]};
    qsort(freq, (size_t)V, sizeof(cand), by_p_desc);

    ll_atomic_file af;
    if (ll_atomic_open(&af, path)) {
        free(start), free(c), free(freq);
        return -1;
    }
    FILE *f = af.f;
    int first = 1;
    for (int j = 0; j < V && j < o->frequent && freq[j].p > 0; j++) { /* the empty n-gram: always */
        const char *pc = piece(spm, freq[j].t);
        if (pc) fprintf(f, "%s%s", first ? "\t" : " ", pc), first = 0;
    }
    if (!first) fputc('\n', f);
    *rules = 0;
    for (int s = 0; s < V; s++) { /* (not NULL's) */
        const char *ps = piece(spm, s);
        if (!ps || start[s] == start[s + 1]) continue;
        qsort(c + start[s], start[s + 1] - start[s], sizeof(cand), by_p_desc);
        int n = 0;
        for (size_t j = start[s]; j < start[s + 1] && n < o->per_source && c[j].p >= o->min_prob; j++) {
            const char *pt = piece(spm, c[j].t);
            if (!pt) continue;
            if (n++)
                fprintf(f, " %s", pt);
            else
                fprintf(f, "%s\t%s", ps, pt);
        }
        if (n) fputc('\n', f), (*rules)++;
    }
    free(start), free(c), free(freq);
    if (ferror(f)) {
        ll_atomic_abort(&af);
        return ll_fail("%s: write error", path);
    }
    return ll_atomic_commit(&af);
}

int ll_shortlist_build(const char *data_dir, const char *path, const ll_shortlist_build_opts *o, FILE *log) {
    if (o->per_source < 1 || o->frequent < 0 || o->iterations < 1 || !(o->min_prob >= 0 && o->min_prob < 1))
        return ll_fail("shortlist: per_source >= 1, frequent >= 0, iterations >= 1 and 0 <= min_prob < 1");
    ll_data_info info;
    if (ll_data_info_read(&info, data_dir) != 0) return -1;
    char spm_path[LL_PATH_MAX];
    snprintf(spm_path, sizeof spm_path, "%s/%s", data_dir, info.spm_file);
    ll_spm *spm = ll_spm_load(spm_path);
    if (!spm) return -1;
    ll_dataset d;
    if (ll_dataset_open_dir(&d, data_dir, "train") != 0) {
        ll_spm_free(spm);
        return -1;
    }
    int rc = -1;
    uint8_t use[LL_MAX_CORPORA] = {0};
    char used[512] = "", all[512] = "";
    long n_sents = 0;
    for (int p = 0; p < d.n_pairs; p++) {
        const char *sl = d.langs[d.pairs[p].src_lang], *tl = d.langs[d.pairs[p].tgt_lang];
        use[p] = (!o->src_lang || !strcmp(o->src_lang, sl)) && (!o->tgt_lang || !strcmp(o->tgt_lang, tl));
        const int n = used_sents(&d.pairs[p].src, o->max_sents);
        snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s-%s", p ? ", " : "", sl, tl);
        if (use[p])
            snprintf(used + strlen(used), sizeof used - strlen(used), "%s%s-%s (%d pairs)", n_sents ? ", " : "", sl, tl, n),
                n_sents += n ? n : 1;
    }
    if (!n_sents) {
        ll_fail("%s: no training corpus %s-%s (it has %s)", data_dir, o->src_lang ? o->src_lang : "*",
                o->tgt_lang ? o->tgt_lang : "*", d.n_pairs ? all : "none");
        goto out;
    }
    if (log) fprintf(log, "llshortlist: %s\n", used);
    const double t0 = ll_now();
    pair_table h = {.V = d.vocab_size};
    double *tgt_freq = ll_calloc((size_t)h.V, sizeof(double)), *tot = ll_malloc(sizeof(double) * ((size_t)h.V + 1));
    first_round(&h, &d, use, o->max_sents, tgt_freq);
    normalize(&h, tot);
    if (log) fprintf(log, "llshortlist: %zu co-occurring (source, target) pieces; round 1 (co-occurrence): %.1f s\n", h.n, ll_now() - t0);
    for (int it = 2; it <= o->iterations; it++) {
        const double t1 = ll_now();
        const double ll = em_round(&h, &d, use, o->max_sents);
        normalize(&h, tot);
        if (log) fprintf(log, "llshortlist: round %d: log-likelihood %.4f per target piece (before it), %.1f s\n", it, ll, ll_now() - t1);
    }
    long rules = 0;
    rc = write_map(&h, tgt_freq, spm, path, o, &rules);
    if (rc == 0 && log)
        fprintf(log, "llshortlist: wrote %s: %ld source pieces' rules (at most %d targets each, p >= %g), %d tokens always; %.1f s\n", path,
                rules, o->per_source, o->min_prob, o->frequent, ll_now() - t0);
    free(h.a), free(tgt_freq), free(tot);
out:
    ll_dataset_close(&d);
    ll_spm_free(spm);
    return rc;
}
