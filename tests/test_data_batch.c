/* Batching: token budget, padding and BOS/EOS layout, every sentence once per
 * epoch, seeded order, exact resume with seek, validation order, and the pair
 * proportions of temperature / uniform sampling and of corpus weights.  Uses synthetic token files
 * (no sentencepiece), so lengths are controlled. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "ll/data.h"
#include "util/testutil.h"

/* One side of a pair: n sentences with lengths 1..maxlen (EOS included), tokens
 * encoding (sentence, position) so misplaced tokens are detected. */
static void write_side(const char *path, int n, int maxlen, uint32_t seed, int side) {
    ll_tokfile_writer *w = ll_tokfile_create(path);
    int32_t buf[512];
    uint32_t s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        int len = 1 + (int)((s >> 8) % (uint32_t)maxlen);
        for (int j = 0; j < len - 1; j++) buf[j] = 10 + (i * 7 + j * 3 + side) % 1000;
        buf[len - 1] = LL_EOS;
        ll_tokfile_append(w, buf, len, (uint64_t)i);
    }
    if (ll_tokfile_commit(w) != 0) {
        fprintf(stderr, "%s\n", ll_errbuf());
        exit(1);
    }
}

/* Pairs of 600, 120 and 24 sentences; pair 1 uses a language tag. */
static const int NSENT[3] = {600, 120, 24};

static void make_dataset(ll_dataset *d, const char *tmp) {
    memset(d, 0, sizeof *d);
    d->n_langs = 3;
    strcpy(d->langs[0], "en");
    strcpy(d->langs[1], "es");
    strcpy(d->langs[2], "de");
    for (int p = 0; p < 3; p++) {
        char a[512], b[512];
        snprintf(a, sizeof a, "%s/p%d.src.bin", tmp, p);
        snprintf(b, sizeof b, "%s/p%d.tgt.bin", tmp, p);
        write_side(a, NSENT[p], 40, 11u + (uint32_t)p, 0);
        write_side(b, NSENT[p], 50, 97u + (uint32_t)p, 1);
        ll_pair_data *pd = &d->pairs[p];
        if (ll_tokfile_open(&pd->src, a) || ll_tokfile_open(&pd->tgt, b)) {
            fprintf(stderr, "%s\n", ll_errbuf());
            exit(1);
        }
        pd->src_lang = 0;
        pd->tgt_lang = 1 + p % 2;
        pd->tgt_tag = p == 1 ? 7 : -1;
        d->n_pairs++;
    }
}

/* A batch as a hash: compares sequences of batches cheaply. */
static uint64_t batch_hash(const ll_batch *b) {
    uint64_t h = ll_fnv1a64(&b->pair, sizeof b->pair, LL_FNV_INIT);
    h = ll_fnv1a64(b->ids, sizeof(int) * (size_t)b->B, h);
    h = ll_fnv1a64(b->src, sizeof(int32_t) * (size_t)b->B * (size_t)b->S, h);
    return ll_fnv1a64(b->tgt_in, sizeof(int32_t) * (size_t)b->B * (size_t)b->T, h);
}

/* round l up to a multiple of pad */
static int round_up(int l, int pad) { return (l + pad - 1) / pad * pad; }

/* b's layout; pad: its lengths padded up to a multiple of pad (ll_batcher_pad_to) */
static int check_batch_pad(const ll_dataset *d, const ll_batch *b, int max_tokens, int pad) {
    int bad = 0;
    const ll_pair_data *pd = &d->pairs[b->pair];
    bad += !(b->B >= 1 && (b->B == 1 || b->B * (b->S > b->T ? b->S : b->T) <= max_tokens));
    bad += b->src_lang != pd->src_lang || b->tgt_lang != pd->tgt_lang;
    int ms = 0, mt = 0, ns = 0, nt = 0;
    int32_t bos = pd->tgt_tag >= 0 ? pd->tgt_tag : LL_EOS;
    for (int i = 0; i < b->B; i++) {
        int id = b->ids[i], ls = b->src_len[i], lt = b->tgt_len[i];
        bad += ls != ll_tokfile_len(&pd->src, id) || lt != ll_tokfile_len(&pd->tgt, id);
        const int32_t *xs = pd->src.tokens + pd->src.offsets[id], *ys = pd->tgt.tokens + pd->tgt.offsets[id];
        const int32_t *s = b->src + (size_t)i * b->S, *ti = b->tgt_in + (size_t)i * b->T,
                      *to = b->tgt_out + (size_t)i * b->T;
        for (int j = 0; j < b->S; j++) bad += s[j] != (j < ls ? xs[j] : LL_PAD);
        bad += s[ls - 1] != LL_EOS;
        for (int j = 0; j < b->T; j++) {
            bad += to[j] != (j < lt ? ys[j] : LL_PAD);
            bad += ti[j] != (j == 0 ? bos : j < lt ? ys[j - 1] : LL_PAD);
        }
        bad += to[lt - 1] != LL_EOS;
        ms = ls > ms ? ls : ms;
        mt = lt > mt ? lt : mt;
        ns += ls;
        nt += lt;
    }
    bad += round_up(ms, pad) != b->S || round_up(mt, pad) != b->T || ns != b->n_src_tokens || nt != b->n_tgt_tokens;
    return bad;
}
static int check_batch(const ll_dataset *d, const ll_batch *b, int max_tokens) { return check_batch_pad(d, b, max_tokens, 1); }

/* Hashes of one epoch's batches; returns their number. */
static int epoch_hashes(ll_batcher *it, ll_batch *b, uint64_t *out, int cap) {
    int n = 0;
    while (ll_batcher_next(it, b)) {
        if (n < cap) out[n] = batch_hash(b);
        n++;
    }
    return n;
}

static void test_size_sampling(const ll_dataset *d) {
    const int MT = 300;
    ll_batcher *it = ll_batcher_new(d, MT, 5, 1);
    int N = ll_batcher_n_batches(it);
    CHECK(N == ll_batcher_pair_batches(it, 0) + ll_batcher_pair_batches(it, 1) + ll_batcher_pair_batches(it, 2));
    CHECK(N > 20);
    ll_batch b = {0};
    uint64_t *h1 = calloc((size_t)N, 8), *h2 = calloc((size_t)N, 8), *h3 = calloc((size_t)N, 8);
    for (int epoch = 1; epoch <= 2; epoch++) {
        int64_t e, pos;
        ll_batcher_state(it, &e, &pos);
        CHECK(e == epoch && pos == 0);
        char *seen[3];
        for (int p = 0; p < 3; p++) seen[p] = calloc((size_t)NSENT[p], 1);
        int n = 0, bad = 0, pairs_seen = 0, last_pair = -1, switches = 0;
        while (ll_batcher_next(it, &b)) {
            bad += check_batch(d, &b, MT);
            for (int i = 0; i < b.B; i++) seen[b.pair][b.ids[i]]++;
            (epoch == 1 ? h1 : h2)[n] = batch_hash(&b);
            pairs_seen |= 1 << b.pair;
            switches += last_pair >= 0 && b.pair != last_pair;
            last_pair = b.pair;
            n++;
        }
        CHECK(n == N);
        CHECK_MSG(bad == 0, "epoch %d: %d layout errors", epoch, bad);
        CHECK(pairs_seen == 7);
        CHECK(switches > 3); /* pairs interleaved, not one after the other */
        int once = 1;
        for (int p = 0; p < 3; p++)
            for (int i = 0; i < NSENT[p]; i++) once &= seen[p][i] == 1;
        CHECK_MSG(once, "epoch %d: not every sentence exactly once", epoch);
        for (int p = 0; p < 3; p++) free(seen[p]);
    }
    /* epoch 2 has the same batches in another order */
    CHECK(memcmp(h1, h2, 8 * (size_t)N) != 0);
    uint64_t x1 = 0, x2 = 0;
    for (int i = 0; i < N; i++) {
        x1 += h1[i];
        x2 += h2[i];
    }
    CHECK(x1 == x2);

    /* same seed: same sequence; another seed: another one */
    ll_batcher *same = ll_batcher_new(d, MT, 5, 1), *other = ll_batcher_new(d, MT, 6, 1);
    CHECK(epoch_hashes(same, &b, h3, N) == N && memcmp(h1, h3, 8 * (size_t)N) == 0);
    CHECK(epoch_hashes(other, &b, h3, N) == ll_batcher_n_batches(other) && memcmp(h1, h3, 8 * (size_t)N) != 0);

    /* resume: a fresh batcher seeked to a saved state continues identically, across the epoch end */
    ll_batcher_seek(same, 1, 0);
    for (int i = 0; i < N - 5; i++) ll_batcher_next(same, &b);
    int64_t e, pos;
    ll_batcher_state(same, &e, &pos);
    CHECK(e == 1 && pos == N - 5);
    ll_batcher *resumed = ll_batcher_new(d, MT, 5, 1);
    ll_batcher_seek(resumed, e, pos);
    ll_batch b2 = {0};
    int diff = 0, ends_a = 0, ends_b = 0;
    for (int i = 0; i < 40; i++) {
        int ra = ll_batcher_next(same, &b), rb = ll_batcher_next(resumed, &b2);
        diff += ra != rb || (ra && batch_hash(&b) != batch_hash(&b2));
        ends_a += !ra;
        ends_b += !rb;
    }
    CHECK(diff == 0 && ends_a == 1 && ends_b == 1);
    ll_batcher_state(resumed, &e, &pos);
    CHECK(e == 2 && pos == 34);
    /* and mid-epoch 3 after running through epoch 2 */
    ll_batcher_seek(same, 3, 17);
    ll_batcher_seek(resumed, 3, 17);
    for (int i = 0; i < 10; i++) {
        ll_batcher_next(same, &b);
        ll_batcher_next(resumed, &b2);
        diff += batch_hash(&b) != batch_hash(&b2);
    }
    CHECK(diff == 0);
    ll_batch_free(&b2);
    CHECK(b2.src == NULL && b2.ids == NULL);
    ll_batcher_free(resumed);
    ll_batcher_free(same);
    ll_batcher_free(other);
    ll_batcher_free(it);
    ll_batch_free(&b);
    free(h1);
    free(h2);
    free(h3);
}

static void test_validation_order(const ll_dataset *d) {
    ll_batcher *a = ll_batcher_new(d, 200, 1, 0), *c = ll_batcher_new_ex(d, 200, 999, 0, "temperature", 5);
    int N = ll_batcher_n_batches(a);
    ll_batch b = {0};
    uint64_t *h1 = calloc((size_t)N, 8), *h2 = calloc((size_t)N, 8);
    CHECK(epoch_hashes(a, &b, h1, N) == N);
    CHECK(epoch_hashes(c, &b, h2, N) == N);
    CHECK(memcmp(h1, h2, 8 * (size_t)N) == 0);
    CHECK(epoch_hashes(a, &b, h2, N) == N); /* the next epoch too */
    CHECK(memcmp(h1, h2, 8 * (size_t)N) == 0);
    /* pairs in order, each sorted by length */
    int last_pair = 0, ordered = 1, prev_t = 0, n = 0, bad = 0;
    while (ll_batcher_next(a, &b)) {
        ordered &= b.pair >= last_pair;
        if (b.pair != last_pair) prev_t = 0;
        ordered &= b.tgt_len[0] >= prev_t;
        prev_t = b.tgt_len[b.B - 1];
        last_pair = b.pair;
        bad += check_batch(d, &b, 200);
        n++;
    }
    CHECK(ordered && n == N && bad == 0);
    ll_batch_free(&b);
    ll_batcher_free(a);
    ll_batcher_free(c);
    free(h1);
    free(h2);
}

static void test_temperature(const ll_dataset *d) {
    const int MT = 300;
    const float T = 5;
    ll_batcher *it = ll_batcher_new_ex(d, MT, 3, 1, "temperature", T);
    int N = ll_batcher_n_batches(it), nb[3];
    double w[3], W = 0;
    for (int p = 0; p < 3; p++) {
        nb[p] = ll_batcher_pair_batches(it, p);
        w[p] = pow(NSENT[p], 1.0 / T);
        W += w[p];
    }
    ll_batch b = {0};
    for (int epoch = 1; epoch <= 3; epoch++) {
        int count[3] = {0}, n = 0, bad = 0;
        while (ll_batcher_next(it, &b)) {
            count[b.pair]++;
            bad += check_batch(d, &b, MT);
            n++;
        }
        CHECK(n == N && bad == 0);
        for (int p = 0; p < 3; p++) {
            double expect = N * w[p] / W;
            CHECK_MSG(fabs(count[p] - expect) <= 1.0, "epoch %d pair %d: %d batches, expected %.2f", epoch, p, count[p],
                      expect);
        }
        CHECK(count[2] > nb[2]); /* the small pair is up-sampled */
        CHECK(count[0] < nb[0]); /* the large one down-sampled */
    }
    /* a small pair's batches are used evenly: each appears floor or ceil of count/nb times
     * (a batch is identified by its first sentence) */
    ll_batcher_seek(it, 7, 0);
    int *hits = calloc((size_t)NSENT[2], sizeof(int)), c2 = 0, distinct = 0;
    while (ll_batcher_next(it, &b))
        if (b.pair == 2) {
            c2++;
            distinct += hits[b.ids[0]]++ == 0;
        }
    int lo = c2 / nb[2], even = distinct == nb[2];
    for (int i = 0; i < NSENT[2]; i++) even &= hits[i] == 0 || hits[i] == lo || hits[i] == lo + 1;
    CHECK_MSG(even, "small pair batches not used evenly");
    free(hits);
    ll_batcher_free(it);

    /* uniform: equal shares */
    it = ll_batcher_new_ex(d, MT, 3, 1, "uniform", 0);
    int count[3] = {0};
    while (ll_batcher_next(it, &b)) count[b.pair]++;
    for (int p = 0; p < 3; p++) CHECK(fabs(count[p] - N / 3.0) <= 1.0);
    ll_batcher_free(it);

    CHECK(ll_batcher_new_ex(d, MT, 3, 1, "random", 1) == NULL);
    CHECK_CONTAINS(ll_errbuf(), "data.sampling");
    CHECK(ll_batcher_new_ex(d, MT, 3, 1, "temperature", 0) == NULL);
    CHECK(ll_batcher_new(d, 0, 3, 1) == NULL);
    ll_batch_free(&b);
}

/* One epoch: batches per pair, and how often each batch (by its first sentence) came. */
static int epoch_counts(ll_batcher *it, const ll_dataset *d, ll_batch *b, int MT, int *count, int **hits, int *bad) {
    int n = 0;
    for (int p = 0; p < 3; p++) {
        count[p] = 0;
        memset(hits[p], 0, sizeof(int) * (size_t)NSENT[p]);
    }
    while (ll_batcher_next(it, b)) {
        count[b->pair]++;
        hits[b->pair][b->ids[0]]++;
        *bad += check_batch(d, b, MT);
        n++;
    }
    return n;
}

/* data.train[k].weight: size mode reads pair k's batches w times per epoch (a fraction: a random
 * part, another each epoch), temperature and uniform multiply its probability; the epoch holds
 * round(sum w x batches); all weights 1 is exactly the unweighted batcher. */
static void test_weights(const ll_dataset *d) {
    const int MT = 300;
    ll_batch b = {0};
    int *hits[3], count[3], bad = 0, nb[3];
    for (int p = 0; p < 3; p++) hits[p] = calloc((size_t)NSENT[p], sizeof(int));

    /* size, weights 2, 1, 0.5 */
    const float w[3] = {2, 1, 0.5f};
    ll_batcher *it = ll_batcher_new(d, MT, 5, 1);
    for (int p = 0; p < 3; p++) nb[p] = ll_batcher_pair_batches(it, p);
    const int plain_n = ll_batcher_n_batches(it);
    ll_batcher_set_weights(it, w);
    const int N = ll_batcher_n_batches(it);
    CHECK_MSG(N == (int)lround(2.0 * nb[0] + nb[1] + 0.5 * nb[2]), "weighted epoch %d batches", N);
    CHECK(ll_batcher_epoch_batches(it, 3) == N && N != plain_n);
    int *first_half = calloc((size_t)NSENT[2], sizeof(int)), other_half = 0;
    for (int epoch = 1; epoch <= 2; epoch++) {
        CHECK(epoch_counts(it, d, &b, MT, count, hits, &bad) == N);
        CHECK(count[0] == 2 * nb[0] && count[1] == nb[1] && abs(2 * count[2] - nb[2]) <= 1);
        int twice = 1, once = 1, at_most_once = 1, used0 = 0;
        for (int i = 0; i < NSENT[0]; i++) twice &= hits[0][i] == 0 || hits[0][i] == 2, used0 += hits[0][i] > 0;
        for (int i = 0; i < NSENT[1]; i++) once &= hits[1][i] <= 1;
        for (int i = 0; i < NSENT[2]; i++) at_most_once &= hits[2][i] <= 1;
        CHECK_MSG(twice && used0 == nb[0], "epoch %d: weight 2 is not every batch twice", epoch);
        CHECK(once && at_most_once);
        for (int i = 0; i < NSENT[2]; i++) {
            if (epoch == 1) first_half[i] = hits[2][i];
            other_half += epoch == 2 && hits[2][i] != first_half[i];
        }
    }
    CHECK_MSG(other_half > 0, "weight 0.5 takes the same half every epoch");
    CHECK(bad == 0);
    /* a seek replays a weighted epoch */
    uint64_t *h1 = calloc((size_t)N, 8), *h2 = calloc((size_t)N, 8);
    ll_batcher_seek(it, 4, 0);
    CHECK(epoch_hashes(it, &b, h1, N) == N);
    ll_batcher *again = ll_batcher_new(d, MT, 5, 1);
    ll_batcher_set_weights(again, w);
    ll_batcher_seek(again, 4, 0);
    CHECK(epoch_hashes(again, &b, h2, N) == N && memcmp(h1, h2, 8 * (size_t)N) == 0);
    CHECK(ll_batcher_shapes(again) == ll_batcher_shapes(it)); /* (the shapes are the batches', weights aside) */
    ll_batcher_free(again);
    ll_batcher_free(it);

    /* weights of 1 change nothing, in size and temperature mode */
    const float ones[3] = {1, 1, 1};
    for (int m = 0; m < 2; m++) {
        const char *mode = m ? "temperature" : "size";
        ll_batcher *a = ll_batcher_new_ex(d, MT, 9, 1, mode, 5), *c = ll_batcher_new_ex(d, MT, 9, 1, mode, 5);
        ll_batcher_set_weights(c, ones);
        const int na = ll_batcher_n_batches(a);
        uint64_t *ha = calloc((size_t)na, 8), *hc = calloc((size_t)na, 8);
        for (int e = 1; e <= 2; e++) {
            CHECK(epoch_hashes(a, &b, ha, na) == na && epoch_hashes(c, &b, hc, na) == na);
            CHECK_MSG(memcmp(ha, hc, 8 * (size_t)na) == 0, "%s: weights of 1 changed epoch %d", mode, e);
        }
        free(ha);
        free(hc);
        ll_batcher_free(a);
        ll_batcher_free(c);
    }

    /* temperature: p_k ~ w_k n_k^(1/T) over an epoch of sum w x batches */
    const float wt[3] = {1, 1, 4};
    it = ll_batcher_new_ex(d, MT, 3, 1, "temperature", 5);
    ll_batcher_set_weights(it, wt);
    const int NT = ll_batcher_n_batches(it);
    CHECK(NT == nb[0] + nb[1] + 4 * nb[2]);
    double q[3], Q = 0;
    for (int p = 0; p < 3; p++) Q += q[p] = wt[p] * pow(NSENT[p], 1.0 / 5);
    CHECK(epoch_counts(it, d, &b, MT, count, hits, &bad) == NT);
    for (int p = 0; p < 3; p++)
        CHECK_MSG(fabs(count[p] - NT * q[p] / Q) <= 1.0, "temperature pair %d: %d batches, expected %.2f", p,
                  count[p], NT * q[p] / Q);
    ll_batcher_free(it);

    /* uniform + weights: fixed ratios 1 : 2 : 3 */
    const float wu[3] = {1, 2, 3};
    it = ll_batcher_new_ex(d, MT, 3, 1, "uniform", 0);
    ll_batcher_set_weights(it, wu);
    const int NU = ll_batcher_n_batches(it);
    CHECK(epoch_counts(it, d, &b, MT, count, hits, &bad) == NU);
    for (int p = 0; p < 3; p++) CHECK_MSG(fabs(count[p] - NU * wu[p] / 6.0) <= 1.0, "uniform pair %d: %d", p, count[p]);
    ll_batcher_free(it);

    /* one pair (temperature, as auto is): weight 3 = three passes per epoch */
    ll_dataset one = *d;
    one.n_pairs = 1;
    one.pairs[0] = d->pairs[2];
    const float w3 = 3;
    it = ll_batcher_new_ex(&one, MT, 3, 1, "temperature", 5);
    const int n1 = ll_batcher_n_batches(it);
    ll_batcher_set_weights(it, &w3);
    CHECK(ll_batcher_n_batches(it) == 3 * n1);
    int n = 0, thrice = 1;
    memset(hits[2], 0, sizeof(int) * (size_t)NSENT[2]);
    while (ll_batcher_next(it, &b)) hits[2][b.ids[0]]++, n++;
    for (int i = 0; i < NSENT[2]; i++) thrice &= hits[2][i] == 0 || hits[2][i] == 3;
    CHECK(n == 3 * n1 && thrice);
    ll_batcher_free(it);

    /* validation (no shuffle): every batch once, weights or not */
    it = ll_batcher_new(d, MT, 5, 0);
    ll_batcher_set_weights(it, w);
    CHECK(ll_batcher_n_batches(it) == plain_n);
    CHECK(epoch_counts(it, d, &b, MT, count, hits, &bad) == plain_n && count[0] == nb[0] && count[2] == nb[2]);
    ll_batcher_free(it);
    CHECK(bad == 0);

    for (int p = 0; p < 3; p++) free(hits[p]);
    free(first_half);
    free(h1);
    free(h2);
    ll_batch_free(&b);
}

static void test_budget_edge(const ll_dataset *d) {
    /* a budget below the longest sentence: such sentences travel alone */
    ll_batcher *it = ll_batcher_new(d, 30, 1, 1);
    ll_batch b = {0};
    int bad = 0, singles = 0, n = 0;
    while (ll_batcher_next(it, &b)) {
        bad += check_batch(d, &b, 30);
        singles += b.B == 1 && (b.S > 30 || b.T > 30);
        n++;
    }
    CHECK(bad == 0 && singles > 0 && n == ll_batcher_n_batches(it));
    ll_batcher_free(it);
    ll_batch_free(&b);
}

/* data.pad_to_multiple: lengths padded to a multiple of 8, the budget counting the padding,
 * every sentence once per epoch, and fewer distinct batch shapes than without (as
 * ll_batcher_shapes counts them) */
static int distinct_shapes(ll_batcher *it, ll_batch *b, const ll_dataset *d, int MT, int pad, int *bad, int *sents) {
    int n = 0, shapes[4096][3];
    *bad = *sents = 0;
    while (ll_batcher_next(it, b)) {
        *bad += check_batch_pad(d, b, MT, pad);
        *sents += b->B;
        int k = 0;
        while (k < n && !(shapes[k][0] == b->B && shapes[k][1] == b->S && shapes[k][2] == b->T)) k++;
        if (k == n && n < 4096) shapes[n][0] = b->B, shapes[n][1] = b->S, shapes[n][2] = b->T, n++;
    }
    return n;
}
static void test_pad_to(const ll_dataset *d) {
    const int MT = 300;
    ll_batcher *plain = ll_batcher_new(d, MT, 5, 1), *pad = ll_batcher_new(d, MT, 5, 1);
    ll_batcher_pad_to(pad, 8);
    ll_batch b = {0};
    int bad0, bad8, n0, n8;
    const int s0 = distinct_shapes(plain, &b, d, MT, 1, &bad0, &n0), s8 = distinct_shapes(pad, &b, d, MT, 8, &bad8, &n8);
    CHECK_MSG(bad0 == 0 && bad8 == 0, "layout errors: %d unpadded, %d padded to 8", bad0, bad8);
    CHECK(n0 == NSENT[0] + NSENT[1] + NSENT[2] && n8 == n0);
    CHECK_MSG(s8 < s0, "padding to 8 leaves %d distinct batch shapes, %d without", s8, s0);
    /* ll_batcher_shapes (the trainer's count against the CUDA graphs kept) without reading a batch */
    CHECK_MSG(ll_batcher_shapes(plain) == s0 && ll_batcher_shapes(pad) == s8,
              "ll_batcher_shapes says %d and %d; an epoch's batches have %d and %d", ll_batcher_shapes(plain),
              ll_batcher_shapes(pad), s0, s8);
    printf("batch shapes in an epoch: %d distinct, %d with lengths padded to a multiple of 8\n", s0, s8);
    ll_batch_free(&b);
    ll_batcher_free(plain);
    ll_batcher_free(pad);
}

int main(void) {
    const char *tmp = tu_tmpdir();
    ll_dataset d;
    make_dataset(&d, tmp);
    test_size_sampling(&d);
    test_validation_order(&d);
    test_temperature(&d);
    test_weights(&d);
    test_budget_edge(&d);
    test_pad_to(&d);
    ll_dataset_close(&d);
    return tu_finish("test_data_batch");
}
