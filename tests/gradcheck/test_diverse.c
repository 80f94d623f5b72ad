/* Diverse beam search (ll_search_opts.diverse_groups, lldecode --diverse-beam-groups) against a
 * literal transcription of fairseq's SequenceGenerator._generate with DiverseBeamSearch, scored by
 * ll_model_logprobs (full teacher-forced recomputation, no KV cache, no top-k op), in double
 * precision (grad_test_diverse) and in fp32 with the fast decoding paths (f32_test_diverse):
 *   1. every hypothesis, score and positional score of the n-best list equals the reference's,
 *      for several beams, group counts and strengths (one negative), lenpens and min lengths,
 *      batched with eager and lazy compaction;
 *   2. the groups and their penalties matter: the same beams without groups, and the same
 *      groups without the penalty, give other n-best lists;
 *   3. one group is plain beam search;
 *   1 again with groups short of candidates (few tokens, no bigram twice): their -inf fillers
 *      rank before other groups' candidates and take rows, dead from then on;
 *   4. an ensemble of a model with copies of itself searches as the model alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/testutil.h"
#include "beam_toy.h"
#include "ll/decode.h"
#include "ll/model.h"

enum { MAXK = 16 };
static int live_after; /* reference(): live rows taken after a filler took one (its row dead) */

typedef struct {
    double s;
    int row, tok; /* tok -1: fairseq's -inf filler */
    double lp;    /* the penalised log-prob: the step's share of the score */
} dc;
static int dc_cmp(const void *a, const void *b) {
    const dc *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? 1 : -1;
    return x->row != y->row ? x->row - y->row : x->tok - y->tok;
}

/* One sentence.  Per step, lprobs masked (pad, bos, NaN; EOS before min_len; only EOS at
 * max_len), then for group g = 0..G-1: its rows (g, g + G, ..; at step 0 row g alone, all rows
 * being one), lprobs - strength * (uses of the token among the earlier groups' candidates), plus
 * the row's score, the top 2 * K / G (-inf fillers when short), their tokens counted; the groups'
 * lists interleaved by rank; EOS with a finite score among the first K finalized, the first K
 * others continue.  fairseq also counts its fillers' tokens (whichever -inf entries torch.topk
 * returns); ll and this reference count real candidates only. */
static int reference(ll_model *m, const int32_t *src, int sl, const ll_search_opts *o, ll_hypo *fin) {
    const int V = m->hp.V, K = o->beam, G = o->diverse_groups > 1 ? o->diverse_groups : 1, kg = 2 * K / G;
    const int max_len = ll_search_max_len(m, o, sl), min_len = o->min_len < max_len ? o->min_len : max_len;
    int32_t *tok[MAXK], *ntok[MAXK];
    double *ps[MAXK], *nps[MAXK], cum[MAXK], ncum[MAXK], *lpbuf[MAXK];
    int lens[MAXK];
    for (int r = 0; r < K; r++) {
        tok[r] = calloc(max_len + 2, sizeof(int32_t)), ntok[r] = calloc(max_len + 2, sizeof(int32_t));
        ps[r] = calloc(max_len + 2, sizeof(double)), nps[r] = calloc(max_len + 2, sizeof(double));
        lpbuf[r] = malloc(sizeof(double) * (max_len + 2));
        cum[r] = 0;
    }
    double *next = malloc(sizeof(double) * K * V);
    int *used = malloc(sizeof(int) * V);
    dc *c = malloc(sizeof(dc) * K * V), cand[2 * MAXK], *sib = malloc(sizeof(dc) * 2 * K * K);
    int n_fin = 0;
    for (int step = 0; step <= max_len; step++) {
        for (int r = 0; r < K; r++) lens[r] = step;
        forced(m, src, sl, o->bos, tok, lens, K, lpbuf, next);
        fairseq_masks(next, K, V, step, max_len, min_len);
        for (int r = 0; r < K; r++) /* no bigram twice (bos first) */
            for (int t = 0; o->no_repeat_ngram == 2 && t < step; t++)
                if ((t ? tok[r][t - 1] : o->bos) == tok[r][step - 1]) next[r * V + tok[r][t]] = -INFINITY;
        for (int v = 0; v < V; v++) used[v] = 0;
        if (o->diversity_rate > 0) { /* DiverseSiblingsSearch (step 0: BeamSearch, row 0) */
            int ns = 0;
            for (int r = 0; r < (step == 0 ? 1 : K); r++) {
                int nc = 0;
                for (int v = 0; v < V; v++) c[nc++] = (dc){cum[r] + next[r * V + v], r, v, next[r * V + v]};
                qsort(c, nc, sizeof *c, dc_cmp);
                for (int i = 0; i < 2 * K && i < nc; i++, ns++) {
                    const double pen = step == 0 ? 0 : o->diversity_rate * (i + 1);
                    sib[ns] = (dc){c[i].s - pen, r, c[i].tok, c[i].lp - pen};
                }
            }
            qsort(sib, ns, sizeof *sib, dc_cmp); /* (ties: row, then rank = token order) */
            for (int q = 0; q < 2 * K; q++) {
                cand[q] = sib[q];
                if (cand[q].s == -INFINITY) cand[q].tok = -1;
            }
        }
        for (int g = 0; g < G && !(o->diversity_rate > 0); g++) {
            int nc = 0;
            for (int r = g; r < (step == 0 ? g + 1 : K); r += G)
                for (int v = 0; v < V; v++) {
                    const double l = next[r * V + v] - o->diverse_strength * used[v];
                    c[nc++] = (dc){cum[r] + l, r, v, l};
                }
            qsort(c, nc, sizeof *c, dc_cmp);
            for (int q = 0; q < kg; q++) {
                dc *d = &cand[q * G + g];
                *d = c[q];
                if (d->s == -INFINITY) d->tok = -1;
                else used[d->tok]++;
            }
        }
        int filled = 0, seen_filler = 0;
        for (int q = 0; q < 2 * K; q++) {
            const dc *d = &cand[q];
            const int eos = d->tok == LL_EOS;
            if (eos && q < K && n_fin < K) {
                ll_hypo *h = &fin[n_fin++];
                h->len = step + 1;
                h->tokens = malloc(sizeof(int32_t) * h->len);
                h->pos_scores = malloc(sizeof(float) * h->len);
                for (int t = 0; t < step; t++) h->tokens[t] = tok[d->row][t], h->pos_scores[t] = (float)ps[d->row][t];
                h->tokens[step] = LL_EOS;
                h->pos_scores[step] = (float)d->lp;
                h->score = d->s / pow(step + 1, o->lenpen);
            }
            if (!eos && filled < K && d->tok >= 0 && seen_filler) live_after++;
            if (!eos && filled < K && d->tok < 0) seen_filler = 1;
            if (!eos && filled < K) {
                const int r = d->tok < 0 ? 0 : d->row; /* (a filler: any history, -inf forever) */
                memcpy(ntok[filled], tok[r], sizeof(int32_t) * step);
                memcpy(nps[filled], ps[r], sizeof(double) * step);
                ntok[filled][step] = d->tok < 0 ? LL_EOS : d->tok;
                nps[filled][step] = d->lp;
                ncum[filled++] = d->s;
            }
        }
        if (n_fin == K) break;
        for (int r = 0; r < K; r++) {
            int32_t *t = tok[r];
            tok[r] = ntok[r], ntok[r] = t;
            double *p = ps[r];
            ps[r] = nps[r], nps[r] = p;
            cum[r] = ncum[r];
        }
    }
    for (int i = 1; i < n_fin; i++) /* by score, ties in order of finalization */
        for (int j = i; j > 0 && fin[j - 1].score < fin[j].score; j--) {
            ll_hypo t = fin[j];
            fin[j] = fin[j - 1], fin[j - 1] = t;
        }
    for (int r = 0; r < K; r++) free(tok[r]), free(ntok[r]), free(ps[r]), free(nps[r]), free(lpbuf[r]);
    free(next), free(used), free(c), free(sib);
    return n_fin;
}

/* the same hypotheses (tokens) in the same order, whatever their scores */
static int same_tokens(const ll_nbest *a, const ll_nbest *b) {
    int same = a->n == b->n;
    for (int i = 0; same && i < a->n; i++)
        same = a->h[i].len == b->h[i].len && !memcmp(a->h[i].tokens, b->h[i].tokens, sizeof(int32_t) * a->h[i].len);
    return same;
}

static int same_list(const ll_nbest *a, const ll_nbest *b) {
    int same = a->n == b->n;
    for (int i = 0; same && i < a->n; i++) same = same_hypo(&a->h[i], &b->h[i], TOL);
    return same;
}

/* The search of B sentences (rows of 7) against reference(), sentence by sentence; returns how
 * many found other hypotheses than plain beam search (the same options without a diverse search);
 * *found (NULL: none) adds the hypotheses. */
static int against_reference(ll_model *m, const int32_t *src, const int *sl, int B, const ll_search_opts *o,
                             int *found) {
    ll_nbest out[8], plain[8];
    ll_search_opts p = *o;
    p.diverse_groups = 0, p.diversity_rate = 0;
    ll_beam_search(m, src, sl, B, 7, o, out);
    ll_beam_search(m, src, sl, B, 7, &p, plain);
    int differ = 0;
    for (int i = 0; i < B; i++) {
        ll_hypo want[MAXK];
        const int n = reference(m, src + i * 7, sl[i], o, want);
        ll_nbest w = {n, want};
        CHECK_MSG(same_list(&out[i], &w),
                  "beam %d groups %d strength %g rate %g no-repeat %d sentence %d: the n-best list differs from the "
                  "reference (%d hypotheses, reference %d)",
                  o->beam, o->diverse_groups, o->diverse_strength, o->diversity_rate, o->no_repeat_ngram, i, out[i].n,
                  n);
        differ += !same_tokens(&out[i], &plain[i]);
        if (found) *found += out[i].n;
        for (int h = 0; h < n; h++) free(want[h].tokens), free(want[h].pos_scores);
        ll_nbest_free(&out[i]), ll_nbest_free(&plain[i]);
    }
    return differ;
}

/* 1 + 2 + 3 */
static void test_reference(int lazy) {
    const int V = 13, B = 5;
    const struct {
        int beam, groups;
        double strength, lenpen;
        int min_len;
    } cs[] = {{2, 2, 0.5, 1.0, 1}, {4, 2, 0.5, 0.6, 1}, {4, 4, 1.5, 1.2, 2}, {6, 3, 0.75, 1.0, 1},
              {4, 2, -0.3, 1.0, 1}, {6, 2, 3.0, 0.8, 3}};
    int checked = 0, differ = 0, penalised = 0, unpenalised = 0;
    for (int seed = 1; seed <= 2; seed++) {
        ll_model *m = toy(V, 32, 300 + seed);
        m->decode_graphs = lazy ? 2 : -1;
        int32_t src[B * 7];
        int sl[B];
        rand_batch(src, sl, B, V, 2, (int[]){3, seed, 6}, seed * 300);
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++, checked += B) {
            ll_search_opts o;
            ll_search_opts_default(&o);
            o.beam = o.nbest = cs[k].beam;
            o.diverse_groups = cs[k].groups;
            o.diverse_strength = cs[k].strength;
            o.lenpen = cs[k].lenpen;
            o.min_len = cs[k].min_len;
            o.max_len_a = 0.5;
            o.max_len_b = 4;
            differ += against_reference(m, src, sl, B, &o, NULL);
            ll_nbest one[B], plain[B], z[B];
            ll_search_opts p = o, p1 = o, o0 = o;
            p.diverse_groups = 0, p1.diverse_groups = 1, o0.diverse_strength = 0;
            ll_beam_search(m, src, sl, B, 7, &p, plain);
            ll_beam_search(m, src, sl, B, 7, &p1, one);
            ll_beam_search(m, src, sl, B, 7, &o0, z); /* the same groups without the penalty */
            ll_nbest out[B];
            ll_beam_search(m, src, sl, B, 7, &o, out);
            for (int i = 0; i < B; i++) {
                CHECK_MSG(same_list(&one[i], &plain[i]), "beam %d: one group is not plain beam search", o.beam);
                unpenalised += !same_tokens(&out[i], &z[i]), penalised++;
                ll_nbest_free(&out[i]), ll_nbest_free(&plain[i]), ll_nbest_free(&one[i]), ll_nbest_free(&z[i]);
            }
        }
        ll_model_free(m);
    }
    fprintf(stderr,
            "reference (%s compaction): %d searches compared; %d find other hypotheses than plain beam search, %d of "
            "%d than the same groups without their penalty\n",
            lazy ? "lazy" : "eager", checked, differ, unpenalised, penalised);
    CHECK_MSG(differ > checked / 2, "diverse beam search differs from plain beam search in %d of %d searches only",
              differ, checked);
    CHECK_MSG(unpenalised > penalised / 2, "the penalty changed %d of %d searches only", unpenalised, penalised);
}

/* 1 with groups short of candidates: 3 tokens, no bigram twice (--no-repeat-ngram-size 2), EOS
 * late, so that rows run dry at different steps, a group's -inf fillers rank before other groups'
 * candidates, and the rows they take are dead. */
static void test_fillers(void) {
    const int V = 6, B = 6;
    ll_model *m = toy(V, 32, 41);
    int32_t src[B * 7];
    int sl[B];
    rand_batch(src, sl, B, V, 3, (int[]){1, 0, 4}, 4100);
    int checked = 0, found = 0;
    live_after = 0;
    const int cs[3][2] = {{4, 2}, {4, 4}, {6, 3}};
    for (int c = 0; c < 3; c++, checked += B) {
        ll_search_opts o;
        ll_search_opts_default(&o);
        o.beam = o.nbest = cs[c][0];
        o.diverse_groups = cs[c][1];
        o.diverse_strength = 6; /* (groups apart, so their rows' bans differ) */
        o.no_repeat_ngram = 2;
        o.min_len = 8;
        o.max_len_b = 14;
        against_reference(m, src, sl, B, &o, &found);
    }
    fprintf(stderr, "short groups: %d searches compared (%d hypotheses); %d rows dead before live ones\n", checked,
            found, live_after);
    CHECK_MSG(live_after > 0 && found > checked, "%d rows dead before live ones, %d hypotheses: the case tests nothing",
              live_after, found);
    ll_model_free(m);
}

/* 5: diverse siblings search against fairseq's DiverseSiblingsSearch transcribed, with eager and
 * lazy compaction, bans (no bigram twice) in some */
static void test_siblings(void) {
    const int V = 13, B = 5;
    const struct {
        int beam;
        double rate, lenpen;
        int min_len, no_repeat;
    } cs[] = {{2, 0.5, 1.0, 1, 0}, {4, 0.3, 0.6, 1, 0}, {4, 1.5, 1.2, 2, 2}, {6, 0.75, 1.0, 1, 0}, {5, 3.0, 0.8, 3, 2},
              {1, 0.5, 1.0, 1, 0}};
    int checked = 0, differ = 0;
    for (int lazy = 0; lazy < 2; lazy++)
        for (int seed = 1; seed <= 2; seed++) {
            ll_model *m = toy(V, 32, 500 + seed);
            m->decode_graphs = lazy ? 2 : -1;
            int32_t src[B * 7];
            int sl[B];
            rand_batch(src, sl, B, V, 2, (int[]){3, seed, 6}, seed * 500);
            for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++, checked += B) {
                ll_search_opts o;
                ll_search_opts_default(&o);
                o.beam = o.nbest = cs[k].beam;
                o.diversity_rate = cs[k].rate;
                o.lenpen = cs[k].lenpen;
                o.min_len = cs[k].min_len;
                o.no_repeat_ngram = cs[k].no_repeat;
                o.max_len_a = 0.5;
                o.max_len_b = 4;
                differ += against_reference(m, src, sl, B, &o, NULL);
            }
            ll_model_free(m);
        }
    fprintf(stderr, "siblings: %d searches compared; %d find other hypotheses than beam search\n", checked, differ);
    CHECK_MSG(differ > checked / 2, "diverse siblings search differs from beam search in %d of %d searches only", differ,
              checked);
}

/* 4: an ensemble of copies: the mixture is the model (up to rounding), so the search is too. */
static void test_ensemble(void) {
    const int V = 13, B = 4;
    ll_model *m = toy(V, 32, 77), *e[2] = {toy(V, 32, 77), toy(V, 32, 77)}, *solo = toy(V, 32, 77);
    ll_model_ensemble(m, e, 2, NULL);
    int32_t src[B * 7];
    int sl[B];
    rand_batch(src, sl, B, V, 2, (int[]){2, 1, 5}, 900);
    ll_search_opts o;
    ll_search_opts_default(&o);
    o.beam = o.nbest = 4;
    o.diverse_groups = 2;
    o.max_len_b = 6;
    ll_nbest a[B], b[B];
    ll_beam_search(m, src, sl, B, 7, &o, a);
    ll_beam_search(solo, src, sl, B, 7, &o, b);
    for (int i = 0; i < B; i++) {
        int same = a[i].n == b[i].n;
        for (int h = 0; same && h < a[i].n; h++)
            same = a[i].h[h].len == b[i].h[h].len &&
                   !memcmp(a[i].h[h].tokens, b[i].h[h].tokens, sizeof(int32_t) * a[i].h[h].len) &&
                   fabs(a[i].h[h].score - b[i].h[h].score) < 1e-5;
        CHECK_MSG(same, "sentence %d: an ensemble of copies searches otherwise than the model alone", i);
        ll_nbest_free(&a[i]), ll_nbest_free(&b[i]);
    }
    ll_model_free(m), ll_model_free(solo);
}

int main(void) {
    ll_set_threads(1);
    test_reference(0);
    test_reference(1);
    test_fillers();
    test_siblings();
    test_ensemble();
    return tu_finish("grad_test_diverse");
}
