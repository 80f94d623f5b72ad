/* Token-budget batching (fairseq's batch_by_size) and the per-epoch batch
 * plan.  Batches are fixed at construction; only their order (and, with
 * temperature sampling, how often each appears) changes per epoch, and the
 * plan of an epoch is a pure function of (seed, epoch), so seeking to a saved
 * (epoch, pos) replays a run exactly.  With sampled segmentations of the data
 * (data.spm_samples) each one has its batches, and epoch e reads segmentation
 * (e - 1) mod N: still a function of the epoch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "ll/data.h"

enum { SAMPLE_SIZE, SAMPLE_TEMPERATURE, SAMPLE_UNIFORM };

/* Philox stream selectors (stream_b) under LL_RNG_SHUFFLE: epochs use
 * 0..2^31-1, the per-pair length tie-break uses 2^31 + pair (+ LL_MAX_CORPORA x
 * the segmentation). */
#define TIEBREAK_STREAM 0x80000000u

typedef struct {
    int pair, batch;
} plan_entry;

typedef struct {
    int n_batches;
    int *order; /* sentence indices in sorted order */
    int *start; /* [n_batches+1]: batch b is order[start[b] .. start[b+1]) */
} pair_batches;

struct ll_batcher {
    const ll_dataset *d;
    int max_tokens, shuffle, mode;
    int pad_to; /* batch lengths S, T rounded up to a multiple of it (ll_batcher_pad_to) */
    double temperature;
    double weight[LL_MAX_CORPORA]; /* the corpora's data.train[k].weight (ll_batcher_set_weights), else 1 */
    int weighted;                  /* some weight is not 1 */
    uint64_t seed;
    int n_seg;       /* segmentations of the data: 1, or the pairs' sampled ones, one per epoch in turn */
    pair_batches *p; /* [n_seg * n_pairs]: segmentation g's batches of pair k at g * n_pairs + k */
    int *total;      /* [n_seg]: batches per epoch */
    int max_total;
    int64_t epoch, pos;
    plan_entry *plan;
    int64_t plan_epoch; /* epoch `plan` was built for; 0 = none */
};

typedef struct {
    int t, s;
    uint32_t r;
    int idx;
} sort_key;

static int key_cmp(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    if (x->r != y->r) return x->r < y->r ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int imax(int a, int b) { return a > b ? a : b; }
static int seg_of(const ll_batcher *it, int64_t epoch) { return (int)((epoch - 1) % it->n_seg); }
static pair_batches *batches_of(const ll_batcher *it, int seg, int pair) { return &it->p[seg * it->d->n_pairs + pair]; }
/* The token file a segmentation reads: a pair's sampled ones when it has them */
static const ll_tokfile *side_of(const ll_batcher *it, int seg, int pair, int tgt) {
    const ll_pair_data *pd = &it->d->pairs[pair];
    if (pd->n_samples > 0 && (pd->sample_sides >> tgt & 1)) return &pd->samples[2 * (seg % pd->n_samples) + tgt];
    return tgt ? &pd->tgt : &pd->src;
}
/* a batch length as padded: up to a multiple of pad_to */
static int padded(const ll_batcher *it, int l) { return it->pad_to > 1 ? (l + it->pad_to - 1) / it->pad_to * it->pad_to : l; }

/* Sort by (target length, source length, random) and cut greedily under the budget. */
static void make_pair_batches(ll_batcher *it, int seg, int pair) {
    const ll_tokfile *src = side_of(it, seg, pair, 0), *tgt = side_of(it, seg, pair, 1);
    pair_batches *pb = batches_of(it, seg, pair);
    int n = src->n_sents;
    sort_key *k = ll_malloc(sizeof *k * (size_t)(n ? n : 1));
    ll_philox r;
    ll_philox_init(&r, it->seed, LL_RNG_SHUFFLE, TIEBREAK_STREAM + (uint32_t)(pair + LL_MAX_CORPORA * seg));
    for (int i = 0; i < n; i++)
        k[i] = (sort_key){ll_tokfile_len(tgt, i), ll_tokfile_len(src, i),
                          it->shuffle ? ll_philox_u32(&r, (uint64_t)i) : 0, i};
    qsort(k, (size_t)n, sizeof *k, key_cmp);
    pb->order = ll_malloc(sizeof(int) * (size_t)(n ? n : 1));
    pb->start = ll_malloc(sizeof(int) * (size_t)(n + 1));
    pb->n_batches = 0;
    int B = 0, longest = 0;
    for (int i = 0; i < n; i++) {
        int l = padded(it, imax(k[i].s, k[i].t));
        /* padded size if sentence i joins: a batch never exceeds the budget unless it is one sentence */
        if (B > 0 && (int64_t)(B + 1) * imax(longest, l) > it->max_tokens) B = 0;
        if (B == 0) {
            pb->start[pb->n_batches++] = i;
            longest = 0;
        }
        B++;
        longest = imax(longest, l);
        pb->order[i] = k[i].idx;
    }
    pb->start[pb->n_batches] = n;
    free(k);
}

/* An epoch's batches: the sum over pairs of weight x batches (the weighted data's size), at least one
 * when there are any; and the plan's room for the largest epoch. */
static void count_totals(ll_batcher *it) {
    it->max_total = 0;
    for (int g = 0; g < it->n_seg; g++) {
        double sum = 0;
        it->total[g] = 0;
        for (int k = 0; k < it->d->n_pairs; k++) {
            it->total[g] += batches_of(it, g, k)->n_batches;
            sum += it->weight[k] * batches_of(it, g, k)->n_batches;
        }
        if (it->weighted && it->total[g] > 0) it->total[g] = imax(1, (int)llround(sum));
        it->max_total = imax(it->max_total, it->total[g]);
    }
    free(it->plan);
    it->plan = ll_malloc(sizeof(plan_entry) * (size_t)(it->max_total ? it->max_total : 1));
    it->plan_epoch = 0;
}

/* Every segmentation's batches. */
static void make_batches(ll_batcher *it) {
    for (int g = 0; g < it->n_seg; g++)
        for (int k = 0; k < it->d->n_pairs; k++) make_pair_batches(it, g, k);
    count_totals(it);
}

static void free_batches(ll_batcher *it) {
    for (int i = 0; i < it->n_seg * it->d->n_pairs; i++) {
        free(it->p[i].order);
        free(it->p[i].start);
    }
}

ll_batcher *ll_batcher_new_ex(const ll_dataset *d, int max_tokens, uint64_t seed, int shuffle, const char *sampling,
                              float temperature) {
    int mode;
    if (!strcmp(sampling, "size"))
        mode = SAMPLE_SIZE;
    else if (!strcmp(sampling, "temperature") || !strcmp(sampling, "auto")) /* auto: the trainer resolves every_pair */
        mode = SAMPLE_TEMPERATURE;
    else if (!strcmp(sampling, "uniform"))
        mode = SAMPLE_UNIFORM;
    else {
        ll_fail("data.sampling: '%s' is not size, temperature, uniform or auto (every_pair is one iterator per pair)",
                sampling);
        return NULL;
    }
    if (mode == SAMPLE_TEMPERATURE && !(temperature > 0)) {
        ll_fail("data.sampling_temperature: must be > 0, got %g", (double)temperature);
        return NULL;
    }
    if (max_tokens < 1) {
        ll_fail("data.max_tokens: must be >= 1, got %d", max_tokens);
        return NULL;
    }
    ll_batcher *it = ll_calloc(1, sizeof *it);
    it->d = d;
    it->max_tokens = max_tokens;
    it->seed = seed;
    it->shuffle = shuffle;
    it->mode = mode;
    it->temperature = temperature;
    it->pad_to = 1;
    for (int k = 0; k < LL_MAX_CORPORA; k++) it->weight[k] = 1;
    it->n_seg = 1;
    for (int p = 0; p < d->n_pairs; p++) it->n_seg = imax(it->n_seg, d->pairs[p].n_samples);
    it->p = ll_calloc((size_t)(it->n_seg * (d->n_pairs ? d->n_pairs : 1)), sizeof *it->p);
    it->total = ll_calloc((size_t)it->n_seg, sizeof *it->total);
    make_batches(it);
    it->epoch = 1;
    return it;
}

ll_batcher *ll_batcher_new(const ll_dataset *d, int max_tokens, uint64_t seed, int shuffle) {
    return ll_batcher_new_ex(d, max_tokens, seed, shuffle, "size", 1.0f);
}

ll_batcher *ll_batcher_from_config(const ll_dataset *d, const ll_config *cfg, int shuffle) {
    ll_batcher *it = ll_batcher_new_ex(d, cfg->max_tokens, (uint64_t)(uint32_t)cfg->seed, shuffle, cfg->sampling,
                                       cfg->sampling_temperature);
    if (it && cfg->pad_to_multiple > 1) ll_batcher_pad_to(it, cfg->pad_to_multiple);
    if (it && shuffle && d->n_pairs == cfg->n_train) { /* (the training data: its pairs are data.train's) */
        float w[LL_MAX_CORPORA];
        for (int k = 0; k < cfg->n_train; k++) w[k] = ll_corpus_weight(&cfg->train[k]);
        ll_batcher_set_weights(it, w);
    }
    return it;
}

void ll_batcher_set_weights(ll_batcher *it, const float *w) {
    if (it->pos || it->epoch != 1) ll_die("ll_batcher_set_weights: the batcher has been read from");
    it->weighted = 0;
    for (int k = 0; k < it->d->n_pairs; k++) {
        if (!(w[k] > 0) || w[k] > LL_CORPUS_WEIGHT_MAX) ll_die("ll_batcher_set_weights: weight %g of pair %d", (double)w[k], k);
        it->weight[k] = w[k];
        it->weighted |= w[k] != 1.0f;
    }
    if (!it->shuffle) it->weighted = 0; /* validation reads every batch once */
    count_totals(it);
}

void ll_batcher_pad_to(ll_batcher *it, int multiple) {
    if (multiple < 1) ll_die("ll_batcher_pad_to: multiple %d < 1", multiple);
    if (it->pos || it->epoch != 1) ll_die("ll_batcher_pad_to: the batcher has been read from");
    it->pad_to = multiple;
    free_batches(it); /* the batches again, with the padded lengths in the budget */
    make_batches(it);
}

void ll_batcher_free(ll_batcher *it) {
    if (!it) return;
    free_batches(it);
    free(it->p);
    free(it->total);
    free(it->plan);
    free(it);
}

int ll_batcher_n_batches(const ll_batcher *it) { return it->total[seg_of(it, it->epoch)]; }
int ll_batcher_epoch_batches(const ll_batcher *it, int64_t epoch) { return it->total[seg_of(it, epoch < 1 ? 1 : epoch)]; }
int ll_batcher_segmentations(const ll_batcher *it) { return it->n_seg; }
int ll_batcher_pair_batches(const ll_batcher *it, int pair) {
    return batches_of(it, seg_of(it, it->epoch), pair)->n_batches;
}

static int shape_cmp(const void *a, const void *b) {
    const int *x = a, *y = b;
    for (int i = 0; i < 3; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}
int ll_batcher_shapes(const ll_batcher *it) {
    int64_t all = 0;
    for (int i = 0; i < it->n_seg * it->d->n_pairs; i++) all += it->p[i].n_batches; /* (not total: weighted) */
    int *sh = ll_malloc(sizeof(int) * 3 * (size_t)(all ? all : 1)), n = 0;
    for (int g = 0; g < it->n_seg; g++)
        for (int p = 0; p < it->d->n_pairs; p++) {
            const ll_tokfile *src = side_of(it, g, p, 0), *tgt = side_of(it, g, p, 1);
            const pair_batches *pb = batches_of(it, g, p);
            for (int b = 0; b < pb->n_batches; b++, n++) { /* (as fill_batch shapes it) */
                const int *idx = pb->order + pb->start[b];
                int S = 0, T = 0;
                for (int i = 0; i < pb->start[b + 1] - pb->start[b]; i++) {
                    S = imax(S, ll_tokfile_len(src, idx[i]));
                    T = imax(T, ll_tokfile_len(tgt, idx[i]));
                }
                sh[3 * n] = pb->start[b + 1] - pb->start[b], sh[3 * n + 1] = padded(it, S),
                       sh[3 * n + 2] = padded(it, T);
            }
        }
    qsort(sh, (size_t)n, 3 * sizeof(int), shape_cmp);
    int distinct = 0;
    for (int i = 0; i < n; i++) distinct += i == 0 || shape_cmp(sh + 3 * i, sh + 3 * (i - 1)) != 0;
    free(sh);
    return distinct;
}

/* Fisher-Yates over a[0..n) drawing from the stream at *ctr. */
static void shuffle_ints(int *a, int n, const ll_philox *r, uint64_t *ctr) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)ll_philox_below(r, (*ctr)++, (uint32_t)(i + 1));
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* How many batches each pair contributes: total * p_k, p_k ~ weight_k x (size: its batches of segmentation
 * g; temperature: n_k^(1/T), n_k sentences; uniform: 1), rounded by largest remainder so the counts sum to
 * the total. */
static void sample_counts(const ll_batcher *it, int g, int total, int *count) {
    int K = it->d->n_pairs;
    double w[LL_MAX_CORPORA], W = 0, frac[LL_MAX_CORPORA];
    for (int k = 0; k < K; k++) {
        double n = it->d->pairs[k].src.n_sents;
        const int nb = batches_of(it, g, k)->n_batches; /* (none: no share, whatever its weight) */
        w[k] = nb == 0 ? 0 : it->weight[k] * (it->mode == SAMPLE_UNIFORM ? 1.0
                                           : it->mode == SAMPLE_SIZE  ? nb
                                                                                      : pow(n, 1.0 / it->temperature));
        W += w[k];
    }
    int left = total;
    for (int k = 0; k < K; k++) {
        double q = total * w[k] / W;
        count[k] = (int)floor(q);
        frac[k] = q - count[k];
        left -= count[k];
    }
    while (left-- > 0) {
        int best = 0;
        for (int k = 1; k < K; k++)
            if (frac[k] > frac[best]) best = k;
        count[best]++;
        frac[best] = -1;
    }
}

static void build_plan(ll_batcher *it) {
    int K = it->d->n_pairs, n = 0, g = seg_of(it, it->epoch);
    ll_philox r;
    ll_philox_init(&r, it->seed, LL_RNG_SHUFFLE, (uint32_t)(it->epoch & 0x7fffffff));
    uint64_t ctr = 0;
    if (!it->shuffle || (!it->weighted && (it->mode == SAMPLE_SIZE || K == 1))) {
        for (int k = 0; k < K; k++)
            for (int b = 0; b < batches_of(it, g, k)->n_batches; b++) it->plan[n++] = (plan_entry){k, b};
    } else {
        int count[LL_MAX_CORPORA];
        sample_counts(it, g, it->total[g], count);
        for (int k = 0; k < K; k++) {
            /* whole passes over the pair's batches, then a random subset for the remainder */
            int nb = batches_of(it, g, k)->n_batches;
            int *perm = ll_malloc(sizeof(int) * (size_t)nb);
            for (int b = 0; b < nb; b++) perm[b] = b;
            shuffle_ints(perm, nb, &r, &ctr);
            for (int c = 0; c < count[k]; c++) it->plan[n++] = (plan_entry){k, perm[c % nb]};
            free(perm);
        }
    }
    if (it->shuffle)
        for (int i = n - 1; i > 0; i--) {
            int j = (int)ll_philox_below(&r, ctr++, (uint32_t)(i + 1));
            plan_entry t = it->plan[i];
            it->plan[i] = it->plan[j];
            it->plan[j] = t;
        }
    it->plan_epoch = it->epoch;
}

static void fill_batch(const ll_batcher *it, int pair, int batch, ll_batch *b) {
    const ll_pair_data *pd = &it->d->pairs[pair];
    const int g = seg_of(it, it->epoch);
    const ll_tokfile *src = side_of(it, g, pair, 0), *tgt = side_of(it, g, pair, 1);
    const pair_batches *pb = batches_of(it, g, pair);
    const int *idx = pb->order + pb->start[batch];
    int B = pb->start[batch + 1] - pb->start[batch], S = 0, T = 0;
    for (int i = 0; i < B; i++) {
        S = imax(S, ll_tokfile_len(src, idx[i]));
        T = imax(T, ll_tokfile_len(tgt, idx[i]));
    }
    S = padded(it, S), T = padded(it, T);
    size_t need_tok = (size_t)B * (size_t)imax(S, T);
    if (need_tok > b->cap_tok || !b->src) {
        b->cap_tok = need_tok;
        b->src = ll_realloc(b->src, sizeof(int32_t) * need_tok);
        b->tgt_in = ll_realloc(b->tgt_in, sizeof(int32_t) * need_tok);
        b->tgt_out = ll_realloc(b->tgt_out, sizeof(int32_t) * need_tok);
    }
    if ((size_t)B > b->cap_sent || !b->ids) {
        b->cap_sent = (size_t)B;
        b->src_len = ll_realloc(b->src_len, sizeof(int) * (size_t)B);
        b->tgt_len = ll_realloc(b->tgt_len, sizeof(int) * (size_t)B);
        b->ids = ll_realloc(b->ids, sizeof(int) * (size_t)B);
    }
    b->B = B;
    b->S = S;
    b->T = T;
    b->pair = pair;
    b->src_lang = pd->src_lang;
    b->tgt_lang = pd->tgt_lang;
    b->n_src_tokens = b->n_tgt_tokens = 0;
    /* fairseq's prev_output_tokens start with EOS; with language tags, with the tag */
    int32_t bos = pd->tgt_tag >= 0 ? pd->tgt_tag : LL_EOS;
    for (int i = 0; i < B; i++) {
        int id = idx[i], ls = ll_tokfile_len(src, id), lt = ll_tokfile_len(tgt, id);
        const int32_t *xs = src->tokens + src->offsets[id], *ys = tgt->tokens + tgt->offsets[id];
        int32_t *s = b->src + (size_t)i * S, *ti = b->tgt_in + (size_t)i * T, *to = b->tgt_out + (size_t)i * T;
        memcpy(s, xs, sizeof(int32_t) * (size_t)ls);
        for (int j = ls; j < S; j++) s[j] = LL_PAD;
        memcpy(to, ys, sizeof(int32_t) * (size_t)lt);
        ti[0] = bos;
        memcpy(ti + 1, ys, sizeof(int32_t) * (size_t)(lt - 1));
        for (int j = lt; j < T; j++) ti[j] = to[j] = LL_PAD;
        b->src_len[i] = ls;
        b->tgt_len[i] = lt;
        b->ids[i] = id;
        b->n_src_tokens += ls;
        b->n_tgt_tokens += lt;
    }
}

int ll_batcher_next(ll_batcher *it, ll_batch *b) {
    if (it->pos >= ll_batcher_n_batches(it)) {
        it->epoch++;
        it->pos = 0;
        return 0;
    }
    if (it->plan_epoch != it->epoch) build_plan(it);
    plan_entry e = it->plan[it->pos++];
    fill_batch(it, e.pair, e.batch, b);
    return 1;
}

void ll_batcher_state(const ll_batcher *it, int64_t *epoch, int64_t *pos) {
    *epoch = it->epoch;
    *pos = it->pos;
}

void ll_batcher_seek(ll_batcher *it, int64_t epoch, int64_t pos) {
    it->epoch = epoch < 1 ? 1 : epoch;
    const int total = ll_batcher_n_batches(it);
    it->pos = pos < 0 ? 0 : pos > total ? total : pos;
}

void ll_batch_full(ll_batch *b, int B, int L) {
    *b = (ll_batch){.B = B, .S = L, .T = L, .n_src_tokens = (long)B * L, .n_tgt_tokens = (long)B * L};
    b->src = ll_malloc(sizeof(int32_t) * (size_t)B * L);
    b->tgt_in = ll_malloc(sizeof(int32_t) * (size_t)B * L);
    b->tgt_out = ll_malloc(sizeof(int32_t) * (size_t)B * L);
    b->src_len = ll_malloc(sizeof(int) * (size_t)B);
    b->tgt_len = ll_malloc(sizeof(int) * (size_t)B);
    for (int i = 0; i < B; i++) {
        b->src_len[i] = b->tgt_len[i] = L;
        for (size_t t = (size_t)i * L; t < (size_t)(i + 1) * L; t++) b->src[t] = b->tgt_in[t] = b->tgt_out[t] = LL_EOS;
    }
}

void ll_batch_free(ll_batch *b) {
    free(b->src);
    free(b->tgt_in);
    free(b->tgt_out);
    free(b->src_len);
    free(b->tgt_len);
    free(b->ids);
    memset(b, 0, sizeof *b);
}
