/* Ensembles (ll_model_ensemble: lldecode --model A --model B ...) in double
 * precision (grad_test_ensemble) and in fp32 with the fast decoding paths
 * (f32_test_ensemble):
 *   1. forced decoding with an ensemble (two toy models and one of another
 *      shape) gives each token log(mean of the members' probabilities), the
 *      members scored alone (separate models);
 *   2. every hypothesis of an ensemble's beam search, sampling and prefixed
 *      search gets those token scores (the search's incremental steps, its
 *      reorders and compactions, run on every member), however it is batched
 *      and on two workers;
 *   3. a model in an ensemble with copies of itself searches as it does alone, alignments too;
 *   4. alignments average the models' attention with the mixture's weights (fairseq's average
 *      of the models' head means): with one model's weight 1 and the others' 1e-300 the
 *      ensemble aligns as that model alone, for each of the three (the third has 4 heads
 *      and one decoder layer), in beam search and sampling.
 * 1 and 2 run with equal weights and with mixture weights (lldecode --weights): log(sum_j w_j p_j
 * / sum_j w_j). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/testutil.h"
#include "beam_toy.h"

enum { V = 13, MAXPOS = 24, NM = 3, NS = 8 };
static const uint64_t seeds[NM] = {41, 42, 43};

/* Model j of the ensemble: toy models, the last of another shape (width 16, one decoder layer,
 * a deeper encoder): an ensemble's models share only the vocabulary and max_positions. */
static ll_model *member(int j) {
    if (j < NM - 1) return toy(V, MAXPOS, seeds[j]);
    ll_hparams hp = {.C = 16, .F = 24, .H = 4, .Le = 2, .Ld = 1, .V = V, .max_pos = MAXPOS, .share_all = 1,
                     .tie_output = 1};
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, seeds[j]);
    for (size_t i = 0; i < (size_t)V * 16; i++) m->params[m->out_proj + i] *= 2.0;
    return m;
}

/* The mixture weights of the test running: NULL (equal) or NM of them. */
static const double *g_weights;

/* The three models as an ensemble (the first holds the others). */
static ll_model *ensemble(int n) {
    ll_model *m = member(0), *e[NM];
    for (int j = 1; j < n; j++) e[j - 1] = member(j);
    ll_model_ensemble(m, e, n - 1, g_weights);
    return m;
}

/* Sources of 0 (empty) to 6 tokens. */
static void sources(int32_t **src, int *len) {
    for (int i = 0; i < NS; i++) {
        len[i] = i == 3 ? 0 : 2 + (i * 5) % 6;
        src[i] = malloc(sizeof(int32_t) * 8);
        if (len[i]) rand_src(src[i], len[i], V, 700 + i);
    }
}

/* The members' forced token scores, each model alone, mixed: log(sum_j w_j exp(lp_j) / sum_j w_j). */
static void mixed_reference(const int32_t *src, int slen, const int32_t *tgt, int tlen, int32_t bos, double *out) {
    for (int t = 0; t < tlen; t++) out[t] = 0;
    float *lp = malloc(sizeof(float) * tlen);
    double wsum = 0;
    for (int j = 0; j < NM; j++) wsum += g_weights ? g_weights[j] : 1;
    for (int j = 0; j < NM; j++) {
        ll_model *alone = member(j);
        ll_score_opts so = {.max_tokens = 4096, .bos = bos};
        ll_score_ids(alone, &src, &slen, &tgt, &tlen, 1, &so, &lp, NULL);
        for (int t = 0; t < tlen; t++) out[t] += (g_weights ? g_weights[j] : 1) * exp((double)lp[t]) / wsum;
        ll_model_free(alone);
    }
    for (int t = 0; t < tlen; t++) out[t] = log(out[t]);
    free(lp);
}

/* Hypothesis y of source i: its token scores are the mixed forced ones, and the ensemble's own
 * forced decoding (ll_score_ids on it) agrees. */
static double check_hypo(ll_model *ens, const int32_t *src, int slen, const ll_hypo *y, int32_t bos, double lenpen,
                         const char *what) {
    double *want = malloc(sizeof(double) * y->len), worst = 0, sum = 0;
    float *lp = malloc(sizeof(float) * y->len);
    mixed_reference(src, slen, y->tokens, y->len, bos, want);
    ll_score_opts so = {.max_tokens = 4096, .bos = bos};
    ll_score_ids(ens, &src, &slen, (const int32_t *const *)&y->tokens, &y->len, 1, &so, &lp, NULL);
    for (int t = 0; t < y->len; t++) {
        CHECK_MSG(fabs(y->pos_scores[t] - want[t]) <= PTOL, "%s: token %d scored %.9g, the members mixed %.9g", what, t,
                  (double)y->pos_scores[t], want[t]);
        CHECK_MSG(fabs(lp[t] - want[t]) <= PTOL, "%s: forced token %d %.9g, the members mixed %.9g", what, t,
                  (double)lp[t], want[t]);
        worst = fmax(worst, fabs(y->pos_scores[t] - want[t]));
        sum += y->pos_scores[t];
    }
    if (lenpen >= 0) CHECK_NEAR(y->score, sum / pow(y->len, lenpen), PTOL * y->len);
    free(want);
    free(lp);
    return worst;
}

/* 1 + 2: searches of every kind, batched three ways. */
static void test_searches(void) {
    ll_model *ens = ensemble(NM);
    int32_t *src[NS];
    int len[NS];
    sources(src, len);
    /* prefixes for the prefixed search: 0-2 tokens */
    int32_t pre_tok[NS][2];
    const int32_t *pre[NS];
    int plen[NS];
    for (int i = 0; i < NS; i++) {
        plen[i] = i % 3;
        pre_tok[i][0] = 4 + i % (V - 4), pre_tok[i][1] = 4 + (3 * i + 1) % (V - 4);
        pre[i] = plen[i] ? pre_tok[i] : NULL;
    }
    double worst = 0;
    long hyps = 0;
    for (int kind = 0; kind < 3; kind++) { /* beam search, sampling, prefixed beam search */
        ll_translate_opts o = {.max_tokens = 1000, .draw_base = 11};
        ll_search_opts_default(&o.search);
        o.search.beam = 4, o.search.nbest = 4, o.search.max_len_b = 9, o.search.lenpen = 0.7, o.search.bos = 6;
        if (kind == 1) o.search.sampling = 1, o.search.beam = 3, o.search.nbest = 3, o.search.seed = 3;
        if (kind == 2) o.prefix = pre, o.prefix_len = plen;
        ll_nbest r[3][NS];
        const int max_tokens[3] = {1000, 1, 1000}, inter[3] = {1, 1, 2};
        for (int k = 0; k < 3; k++) { /* one batch; one sentence per batch; two workers */
            o.max_tokens = max_tokens[k], o.inter_threads = inter[k];
            ll_set_threads(inter[k]);
            ll_translate_ids(ens, (const int32_t *const *)src, len, NS, &o, r[k], NULL);
            ll_set_threads(1);
        }
        for (int i = 0; i < NS; i++) {
            CHECK(r[0][i].n == (len[i] ? o.search.nbest : 0));
            for (int k = 1; k < 3; k++) {
                int same = r[k][i].n == r[0][i].n;
                for (int h = 0; same && h < r[0][i].n; h++) same = same_hypo(&r[0][i].h[h], &r[k][i].h[h], TOL);
                CHECK_MSG(same, "search %d sentence %d: batching %d changed the ensemble's hypotheses", kind, i, k);
            }
            for (int h = 0; h < r[0][i].n; h++) {
                const ll_hypo *y = &r[0][i].h[h];
                char what[64];
                snprintf(what, sizeof what, "search %d sentence %d hypothesis %d", kind, i, h);
                if (kind == 2)
                    for (int t = 0; t < plen[i]; t++) CHECK_MSG(y->tokens[t] == pre[i][t], "%s: prefix lost", what);
                worst = fmax(worst, check_hypo(ens, src[i], len[i], y, o.search.bos, o.search.lenpen, what));
                hyps++;
            }
            for (int k = 0; k < 3; k++) ll_nbest_free(&r[k][i]);
        }
    }
    fprintf(stderr, "ensemble of %d%s: %ld hypotheses (beam, sampling, prefixes), worst token score difference from "
                    "the members mixed %.3g\n",
            NM, g_weights ? " (weights 0.5, 3, 1.5)" : "", hyps, worst);
    for (int i = 0; i < NS; i++) free(src[i]);
    ll_model_free(ens);
}

/* 3: a model with two copies of itself: log(mean(p, p, p)) = log p, so the same search. */
static void test_copies(void) {
    ll_model *m = toy(V, MAXPOS, seeds[1]), *alone = toy(V, MAXPOS, seeds[1]);
    ll_model *e[2] = {toy(V, MAXPOS, seeds[1]), toy(V, MAXPOS, seeds[1])};
    ll_model_ensemble(m, e, 2, NULL);
    int32_t *src[NS];
    int len[NS];
    sources(src, len);
    ll_translate_opts o = {.max_tokens = 1000};
    ll_search_opts_default(&o.search);
    o.search.beam = 5, o.search.nbest = 5, o.search.max_len_b = 10, o.search.align = 1;
    ll_nbest a[NS], b[NS];
    ll_translate_ids(m, (const int32_t *const *)src, len, NS, &o, a, NULL);
    ll_translate_ids(alone, (const int32_t *const *)src, len, NS, &o, b, NULL);
    for (int i = 0; i < NS; i++) {
        int same = a[i].n == b[i].n;
        for (int h = 0; same && h < a[i].n; h++)
            same = same_hypo(&a[i].h[h], &b[i].h[h], TOL) &&
                   !memcmp(a[i].h[h].align, b[i].h[h].align, sizeof(int32_t) * a[i].h[h].len);
        CHECK_MSG(same, "sentence %d: a model ensembled with its copies searched (or aligned) otherwise than alone", i);
        ll_nbest_free(&a[i]), ll_nbest_free(&b[i]);
        free(src[i]);
    }
    ll_model_free(m);
    ll_model_free(alone);
}

/* 4: the ensemble with model t's weight 1 and the others' 1e-300 aligns as model t alone.  Its
 * search is model t's up to the mixture's rounding, so sentences whose hypothesis came out
 * otherwise are left out (at most one of the NS). */
static void test_alignments(void) {
    int32_t *src[NS];
    int len[NS];
    sources(src, len);
    int compared = 0;
    for (int t = 0; t < NM; t++) {
        double w[NM];
        for (int j = 0; j < NM; j++) w[j] = j == t ? 1 : 1e-300;
        g_weights = w;
        ll_model *ens = ensemble(NM), *alone = member(t);
        g_weights = NULL;
        for (int kind = 0; kind < 2; kind++) { /* beam search, sampling */
            ll_translate_opts o = {.max_tokens = 1000, .draw_base = 5};
            ll_search_opts_default(&o.search);
            o.search.beam = 3, o.search.nbest = 1, o.search.max_len_b = 9, o.search.align = 1;
            if (kind) o.search.sampling = 1, o.search.seed = 2;
            ll_nbest a[NS], b[NS];
            ll_translate_ids(ens, (const int32_t *const *)src, len, NS, &o, a, NULL);
            ll_translate_ids(alone, (const int32_t *const *)src, len, NS, &o, b, NULL);
            int skipped = 0;
            for (int i = 0; i < NS; i++) {
                if (a[i].n && b[i].n && a[i].h[0].len == b[i].h[0].len &&
                    !memcmp(a[i].h[0].tokens, b[i].h[0].tokens, sizeof(int32_t) * a[i].h[0].len)) {
                    CHECK_MSG(!memcmp(a[i].h[0].align, b[i].h[0].align, sizeof(int32_t) * a[i].h[0].len),
                              "model %d weighted 1 (%s), sentence %d: the ensemble aligns otherwise than it alone", t,
                              kind ? "sampling" : "beam search", i);
                    compared++;
                } else {
                    skipped += a[i].n > 0;
                }
                ll_nbest_free(&a[i]), ll_nbest_free(&b[i]);
            }
            CHECK_MSG(skipped <= 1, "model %d weighted 1: %d sentences translated otherwise than by it alone", t,
                      skipped);
        }
        ll_model_free(ens);
        ll_model_free(alone);
    }
    fprintf(stderr, "ensemble alignments: %d translations aligned as their dominant model's alone\n", compared);
    for (int i = 0; i < NS; i++) free(src[i]);
}

int main(void) {
    ll_set_threads(1);
    test_searches();
    static const double weights[NM] = {0.5, 3, 1.5};
    g_weights = weights;
    test_searches();
    g_weights = NULL;
    test_copies();
    test_alignments();
    return tu_finish("test_ensemble");
}
