/* Beam search (src/decode/beam.c) against independent references, in double
 * precision (grad_test_beam) and in fp32 with the fast decoding paths (f32_test_beam).
 * The references score with ll_model_logprobs (full teacher-forced
 * recomputation, no KV cache), so they share no code with the search:
 *   1. a beam wide enough to hold every candidate finds every sequence, with
 *      the exhaustive scores and the exhaustive optimum (4 lenpens, 3 inits);
 *   2. a literal transcription of fairseq's step (top 2*beam with -inf
 *      fillers, full sort) gives the same hypotheses for small beams;
 *   3. batched decoding == one sentence at a time, in input order, and with
 *      two concurrent batch workers (inter_threads);
 *   4. greedy (beam 1) == the argmax chain;
 *   5. n-best lists: order, scores, positional scores;
 *   6. min_len / max_len / max_positions limits;
 *   7. the decoder's first token: language tags from the config;
 *   8. target prefixes: exhaustive with a prefix; mixed batches, searched and sampled.
 * Forced decoding and sampling: test_sample.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/testutil.h"
#include "beam_toy.h"
#include "ll/decode.h"
#include "ll/model.h"





static double sum(const double *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    return s;
}

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* ---- 1. exhaustive search --------------------------------------------------- */
static void test_exhaustive(void) {
    const int V = 7, max_len = 3; /* free tokens: UNK(3), 4, 5, 6 */
    for (int seed = 1; seed <= 3; seed++) {
        ll_model *m = toy(V, 16, seed);
        const double lenpens[] = {0, 1, 0.6, 1.5};
        for (int min_len = 0; min_len <= 1; min_len++) {
            /* every w EOS with min_len <= |w| <= max_len */
            int32_t *ys[100];
            int lens[100], n = 0;
            for (int L = min_len; L <= max_len; L++) {
                int count = 1;
                for (int t = 0; t < L; t++) count *= 4;
                for (int c = 0; c < count; c++, n++) {
                    ys[n] = malloc(sizeof(int32_t) * (L + 1));
                    for (int t = 0, x = c; t < L; t++, x /= 4) ys[n][t] = 3 + x % 4;
                    ys[n][L] = LL_EOS;
                    lens[n] = L + 1;
                }
            }
            double *lp[100];
            for (int i = 0; i < n; i++) lp[i] = malloc(sizeof(double) * lens[i]);
            const int sl[2] = {5, 3};
            int32_t src[2 * 5];
            rand_src(src, 5, V, seed * 10 + 1);
            rand_src(src + 5, 3, V, seed * 10 + 2);
            for (int t = 3; t < 5; t++) src[5 + t] = LL_PAD;
            for (int li = 0; li < 4; li++) {
                ll_search_opts o;
                ll_search_opts_default(&o);
                /* wide enough for every candidate of every step (<= 80) and never
                 * reaching `beam` finalized hypotheses before max_len */
                o.beam = o.nbest = 100;
                o.lenpen = lenpens[li];
                o.max_len_b = max_len;
                o.min_len = min_len;
                ll_nbest out[2];
                ll_beam_search(m, src, sl, 2, 5, &o, out);
                for (int s = 0; s < 2; s++) {
                    forced(m, src + 5 * s, sl[s], LL_EOS, ys, lens, n, lp, NULL);
                    double *want = malloc(sizeof(double) * n), *got = malloc(sizeof(double) * n);
                    int best = 0;
                    for (int i = 0; i < n; i++) {
                        want[i] = sum(lp[i], lens[i]) / pow(lens[i], o.lenpen);
                        if (want[i] > want[best]) best = i;
                    }
                    CHECK_MSG(out[s].n == n, "seed %d lenpen %g min_len %d: %d hypotheses, %d sequences exist", seed,
                              o.lenpen, min_len, out[s].n, n);
                    if (out[s].n == n) {
                        for (int i = 0; i < n; i++) got[i] = out[s].h[i].score;
                        qsort(want, n, sizeof(double), cmp_desc);
                        double worst = 0;
                        for (int i = 0; i < n; i++) worst = fmax(worst, fabs(got[i] - want[i]));
                        CHECK_MSG(worst < TOL, "seed %d lenpen %g: sorted scores differ by %g", seed, o.lenpen,
                                  worst);
                        const ll_hypo *h = &out[s].h[0];
                        CHECK_MSG(h->len == lens[best] && !memcmp(h->tokens, ys[best], sizeof(int32_t) * h->len),
                                  "seed %d lenpen %g sentence %d: the best hypothesis is not the exhaustive optimum",
                                  seed, o.lenpen, s);
                    }
                    free(want);
                    free(got);
                    ll_nbest_free(&out[s]);
                }
            }
            for (int i = 0; i < n; i++) {
                free(ys[i]);
                free(lp[i]);
            }
        }
        ll_model_free(m);
    }
}

/* ---- 2. literal fairseq reference ------------------------------------------ */
typedef struct {
    double s;
    int idx; /* row * V + token */
} rc;
static int rc_cmp(const void *a, const void *b) {
    const rc *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? 1 : -1; /* -inf == -inf falls through to the index */
    return x->idx - y->idx;
}

/* One sentence, fairseq's SequenceGenerator._generate + BeamSearch.step
 * transcribed: lprobs masked, top k = min(2*beam, cands-1) of the flattened
 * cumulative scores (-inf included), EOS with a finite score in the first
 * `beam` finalized, the first `beam` others (-inf or not) continue. */
static int reference(ll_model *m, const int32_t *src, int sl, const ll_search_opts *o, ll_hypo *fin) {
    const int V = m->hp.V, K = o->beam, max_len = ll_search_max_len(m, o, sl);
    const int min_len = o->min_len < max_len ? o->min_len : max_len;
    int32_t *tok[64], *ntok[64];
    double *ps[64], *nps[64], cum[64], ncum[64];
    for (int r = 0; r < K; r++) {
        tok[r] = calloc(max_len + 2, sizeof(int32_t));
        ntok[r] = calloc(max_len + 2, sizeof(int32_t));
        ps[r] = calloc(max_len + 2, sizeof(double));
        nps[r] = calloc(max_len + 2, sizeof(double));
        cum[r] = 0;
    }
    double *next = malloc(sizeof(double) * K * V), *lpbuf[64];
    int lens[64];
    for (int r = 0; r < K; r++) lpbuf[r] = malloc(sizeof(double) * (max_len + 2));
    rc *c = malloc(sizeof(rc) * K * V);
    int n_fin = 0;
    for (int step = 0; step <= max_len; step++) {
        for (int r = 0; r < K; r++) lens[r] = step;
        forced(m, src, sl, o->bos, tok, lens, K, lpbuf, next);
        fairseq_masks(next, K, V, step, max_len, min_len);
        const int rows = step == 0 ? 1 : K;
        int nc = 0;
        for (int r = 0; r < rows; r++)
            for (int v = 0; v < V; v++) c[nc++] = (rc){cum[r] + next[r * V + v], r * V + v};
        qsort(c, nc, sizeof(rc), rc_cmp);
        const int k = 2 * K < nc - 1 ? 2 * K : nc - 1;
        int filled = 0;
        for (int q = 0; q < k; q++) {
            const int r = c[q].idx / V, v = c[q].idx % V;
            const int eos = v == LL_EOS && c[q].s != -INFINITY;
            if (eos && q < K && n_fin < K) {
                ll_hypo *h = &fin[n_fin++];
                h->len = step + 1;
                h->tokens = malloc(sizeof(int32_t) * h->len);
                h->pos_scores = malloc(sizeof(float) * h->len);
                for (int t = 0; t < step; t++) h->tokens[t] = tok[r][t], h->pos_scores[t] = ps[r][t];
                h->tokens[step] = LL_EOS;
                h->pos_scores[step] = next[r * V + v];
                h->score = c[q].s / pow(step + 1, o->lenpen);
            }
            if (!eos && filled < K) {
                memcpy(ntok[filled], tok[r], sizeof(int32_t) * step);
                memcpy(nps[filled], ps[r], sizeof(double) * step);
                ntok[filled][step] = v;
                nps[filled][step] = next[r * V + v];
                ncum[filled++] = c[q].s;
            }
        }
        if (n_fin == K) break;
        for (int r = 0; r < K; r++) {
            int32_t *t = tok[r];
            tok[r] = ntok[r];
            ntok[r] = t;
            double *p = ps[r];
            ps[r] = nps[r];
            nps[r] = p;
            cum[r] = ncum[r];
        }
    }
    /* sort by score, ties in order of finalization */
    for (int i = 1; i < n_fin; i++)
        for (int j = i; j > 0 && fin[j - 1].score < fin[j].score; j--) {
            ll_hypo t = fin[j];
            fin[j] = fin[j - 1];
            fin[j - 1] = t;
        }
    for (int r = 0; r < K; r++) {
        free(tok[r]);
        free(ntok[r]);
        free(ps[r]);
        free(nps[r]);
        free(lpbuf[r]);
    }
    free(next);
    free(c);
    return n_fin;
}


/* lazy: finished sentences stay in the batch until a quarter is live (the policy of
 * steps run as CUDA graphs, ll_decode_compact_wanted), else they leave at once */
static void test_reference(int lazy) {
    const int V = 12, B = 5;
    int checked = 0, beam_beats_greedy = 0;
    for (int seed = 1; seed <= 3; seed++) {
        ll_model *m = toy(V, 32, 100 + seed);
        m->decode_graphs = lazy ? 2 : -1;
        int32_t src[B * 7];
        int sl[B];
        rand_batch(src, sl, B, V, 2, (int[]){3, seed, 6}, seed * 100);
        for (int K = 2; K <= 4; K++) {
            ll_search_opts o;
            ll_search_opts_default(&o);
            o.beam = o.nbest = K;
            o.lenpen = K == 3 ? 0.6 : 1.2;
            o.max_len_a = 0.5;
            o.max_len_b = 3;
            o.min_len = seed == 2 ? 3 : 1;
            ll_nbest out[B];
            ll_beam_search(m, src, sl, B, 7, &o, out);
            for (int i = 0; i < B; i++) {
                ll_hypo want[64];
                int n = reference(m, src + i * 7, sl[i], &o, want);
                CHECK_MSG(out[i].n == n, "seed %d beam %d sentence %d: %d hypotheses, reference %d", seed, K, i,
                          out[i].n, n);
                for (int h = 0; h < n && h < out[i].n; h++)
                    CHECK_MSG(same_hypo(&out[i].h[h], &want[h], TOL),
                              "seed %d beam %d sentence %d: hypothesis %d differs from the reference", seed, K, i, h);
                /* does the search matter here (a non-greedy path wins)? */
                ll_search_opts g = o;
                g.beam = g.nbest = 1;
                ll_nbest gr;
                ll_beam_search(m, src + i * 7, &sl[i], 1, sl[i], &g, &gr);
                if (out[i].n && gr.n && out[i].h[0].score > gr.h[0].score + TOL) beam_beats_greedy++;
                ll_nbest_free(&gr);
                for (int h = 0; h < n; h++) {
                    free(want[h].tokens);
                    free(want[h].pos_scores);
                }
                ll_nbest_free(&out[i]);
                checked++;
            }
        }
        ll_model_free(m);
    }
    fprintf(stderr, "reference (%s compaction): %d searches compared; beam beat greedy in %d\n", lazy ? "lazy" : "eager",
            checked, beam_beats_greedy);
    CHECK_MSG(beam_beats_greedy > 0, "no case where beam search beats greedy: the comparison is too weak");
}

/* ---- 3. batched == one by one ---------------------------------------------- */
static void test_batching(void) {
    const int V = 15, n = 13;
    ll_model *m = toy(V, 40, 7);
    int32_t *src[n];
    int len[n];
    for (int i = 0; i < n; i++) {
        len[i] = i == 4 || i == 9 ? 0 : 2 + (i * 7) % 9; /* two empty inputs */
        src[i] = malloc(sizeof(int32_t) * (len[i] + 1));
        if (len[i]) rand_src(src[i], len[i], V, 500 + i);
    }
    ll_translate_opts o = {.max_tokens = 24};
    ll_search_opts_default(&o.search);
    o.search.beam = 3;
    o.search.nbest = 3;
    o.search.max_len_a = 1.2;
    o.search.max_len_b = 2;
    ll_nbest batched[n], workers[n];
    ll_translate_stats st;
    int differs = 0;
    ll_translate_ids(m, (const int32_t *const *)src, len, n, &o, batched, &st);
    CHECK_MSG(st.batches > 1 && st.batches < n - 2, "expected a few multi-sentence batches, got %ld", st.batches);
    CHECK(st.sents == n - 2);
    /* two concurrent batch workers on replicas give the same results */
    ll_set_threads(2);
    o.inter_threads = 2;
    ll_translate_ids(m, (const int32_t *const *)src, len, n, &o, workers, &st);
    ll_set_threads(1);
    o.inter_threads = 0;
    CHECK(st.sents == n - 2);
    for (int i = 0; i < n; i++) {
        int same = workers[i].n == batched[i].n;
        for (int h = 0; same && h < workers[i].n; h++) same = same_hypo(&workers[i].h[h], &batched[i].h[h], TOL);
        CHECK_MSG(same, "sentence %d: two batch workers differ from one", i);
        ll_nbest_free(&workers[i]);
    }
    /* one sentence alone with two workers asked for (lldecode --buffer-size 1): decoded with its
     * ops single-threaded, the same hypotheses, and the thread count given back */
    for (int i = 0; i < n; i++) {
        if (!len[i]) continue;
        ll_nbest alone;
        ll_set_threads(2);
        o.inter_threads = 2;
        ll_translate_ids(m, (const int32_t *const *)&src[i], &len[i], 1, &o, &alone, &st);
        CHECK_MSG(ll_get_threads() == 2, "one sentence's decode left %d threads, not 2", ll_get_threads());
        ll_set_threads(1);
        o.inter_threads = 0;
        int same = st.batches == 1 && alone.n == batched[i].n;
        for (int h = 0; same && h < alone.n; h++) same = same_hypo(&alone.h[h], &batched[i].h[h], TOL);
        CHECK_MSG(same, "sentence %d alone differs from its batch", i);
        ll_nbest_free(&alone);
    }
    /* the workers the model keeps follow it: warm (dirty arenas and caches),
     * then with a decoder layer switched off, then released and rebuilt */
    for (int round = 0; round < 3; round++) {
        if (round == 1) m->dec_ctl[0].skip = 1;
        if (round == 2) ll_model_decode_release(m);
        ll_nbest one_w[n];
        ll_translate_ids(m, (const int32_t *const *)src, len, n, &o, one_w, NULL);
        ll_set_threads(2);
        o.inter_threads = 2;
        ll_translate_ids(m, (const int32_t *const *)src, len, n, &o, workers, NULL);
        ll_set_threads(1);
        o.inter_threads = 0;
        for (int i = 0; i < n; i++) {
            int same = workers[i].n == one_w[i].n;
            for (int h = 0; same && h < workers[i].n; h++) same = same_hypo(&workers[i].h[h], &one_w[i].h[h], TOL);
            CHECK_MSG(same, "round %d, sentence %d: kept batch workers differ from one", round, i);
            if (round == 1 && len[i] && one_w[i].n && batched[i].n) /* the switched-off layer must matter */
                differs += !same_hypo(&one_w[i].h[0], &batched[i].h[0], TOL);
            ll_nbest_free(&workers[i]);
            ll_nbest_free(&one_w[i]);
        }
    }
    CHECK_MSG(differs > 0, "switching decoder layer 0 off changed no translation");
    m->dec_ctl[0].skip = 0;
    for (int i = 0; i < n; i++) {
        if (!len[i]) {
            CHECK_MSG(batched[i].n == 0, "empty input %d got %d hypotheses", i, batched[i].n);
            continue;
        }
        ll_nbest one;
        ll_beam_search(m, src[i], &len[i], 1, len[i], &o.search, &one);
        int same = one.n == batched[i].n;
        for (int h = 0; same && h < one.n; h++) same = same_hypo(&one.h[h], &batched[i].h[h], TOL);
        CHECK_MSG(same, "sentence %d: batched decoding differs from decoding it alone", i);
        ll_nbest_free(&one);
        ll_nbest_free(&batched[i]);
    }
    for (int i = 0; i < n; i++) free(src[i]);
    ll_model_free(m);
}

/* ---- 4. greedy == argmax chain ---------------------------------------------- */
static void test_greedy(void) {
    const int V = 20;
    ll_model *m = toy(V, 32, 11);
    for (int i = 0; i < 6; i++) {
        const int sl = 3 + i;
        int32_t src[16];
        rand_src(src, sl, V, 900 + i);
        ll_search_opts o;
        ll_search_opts_default(&o);
        o.beam = 1;
        o.lenpen = 0.8;
        o.max_len_b = 8;
        o.min_len = i % 3;
        o.bos = i % 2 ? LL_EOS : 5; /* a language-tag-like first token */
        ll_nbest out;
        ll_beam_search(m, src, &sl, 1, sl, &o, &out);
        /* argmax chain by recomputation */
        int32_t y[16];
        double lp[16], next[20];
        int n = 0;
        for (int step = 0;; step++) {
            int32_t *ys[1] = {y};
            double *lps[1] = {lp};
            forced(m, src, sl, o.bos, ys, &n, 1, lps, next);
            int best = -1;
            for (int v = 0; v < V; v++) {
                if (v == LL_PAD || v == LL_BOS || (v == LL_EOS && step < o.min_len)) continue;
                if (step >= o.max_len_b && v != LL_EOS) continue;
                if (best < 0 || next[v] > next[best]) best = v;
            }
            y[n] = best;
            lp[n++] = next[best];
            if (best == LL_EOS) break;
        }
        CHECK_MSG(out.n == 1 && out.h[0].len == n && !memcmp(out.h[0].tokens, y, sizeof(int32_t) * n),
                  "sentence %d: greedy differs from the argmax chain", i);
        if (out.n == 1) {
            CHECK_NEAR(out.h[0].score, sum(lp, n) / pow(n, o.lenpen), TOL);
            for (int t = 0; t < n && t < out.h[0].len; t++) CHECK_NEAR(out.h[0].pos_scores[t], lp[t], PTOL);
        }
        ll_nbest_free(&out);
    }
    ll_model_free(m);
}

/* ---- 5. n-best lists ---------------------------------------------------------- */
static void test_nbest(void) {
    const int V = 16;
    ll_model *m = toy(V, 32, 21);
    for (int i = 0; i < 4; i++) {
        const int sl = 4 + i;
        int32_t src[16];
        rand_src(src, sl, V, 40 + i);
        ll_search_opts o;
        ll_search_opts_default(&o);
        o.beam = o.nbest = 5;
        o.lenpen = 1.0;
        o.max_len_b = 7;
        ll_nbest all, two;
        ll_beam_search(m, src, &sl, 1, sl, &o, &all);
        o.nbest = 2;
        ll_beam_search(m, src, &sl, 1, sl, &o, &two);
        CHECK_MSG(all.n == 5, "sentence %d: %d of 5 hypotheses", i, all.n);
        CHECK(two.n == 2);
        for (int h = 0; h < two.n && h < all.n; h++) CHECK(same_hypo(&two.h[h], &all.h[h], 0));
        for (int h = 0; h < all.n; h++) {
            const ll_hypo *y = &all.h[h];
            if (h) CHECK_MSG(y->score <= all.h[h - 1].score, "n-best not sorted at %d", h);
            for (int g = 0; g < h; g++)
                CHECK_MSG(y->len != all.h[g].len || memcmp(y->tokens, all.h[g].tokens, sizeof(int32_t) * y->len),
                          "hypotheses %d and %d are equal", g, h);
            CHECK(y->tokens[y->len - 1] == LL_EOS);
            for (int t = 0; t < y->len; t++) CHECK(y->tokens[t] != LL_PAD && y->tokens[t] != LL_BOS);
            double lp[16];
            int32_t *ys[1] = {y->tokens};
            double *lps[1] = {lp};
            forced(m, src, sl, LL_EOS, ys, &y->len, 1, lps, NULL);
            CHECK_NEAR(y->score, sum(lp, y->len) / y->len, TOL);
            for (int t = 0; t < y->len; t++) CHECK_NEAR(y->pos_scores[t], lp[t], PTOL);
        }
        ll_nbest_free(&all);
        ll_nbest_free(&two);
    }
    ll_model_free(m);
}

/* ---- 6. length limits ----------------------------------------------------------- */
static void lengths(ll_model *m, const ll_search_opts *o, int sl, int *lo, int *hi) {
    int32_t src[32];
    rand_src(src, sl, m->hp.V, 77 + sl);
    ll_nbest out;
    ll_beam_search(m, src, &sl, 1, sl, o, &out);
    *lo = 1 << 30;
    *hi = out.n ? 0 : -1;
    for (int h = 0; h < out.n; h++) {
        if (out.h[h].len < *lo) *lo = out.h[h].len;
        if (out.h[h].len > *hi) *hi = out.h[h].len;
        CHECK(out.h[h].tokens[out.h[h].len - 1] == LL_EOS);
    }
    ll_nbest_free(&out);
}

static void test_lengths(void) {
    ll_model *m = toy(10, 6, 31); /* max_positions 6: at most 5 steps + EOS */
    ll_search_opts o;
    ll_search_opts_default(&o);
    o.beam = o.nbest = 3;
    int lo, hi;
    o.min_len = 3;
    lengths(m, &o, 4, &lo, &hi);
    CHECK_MSG(lo >= 4 && hi <= 6, "min_len 3: lengths %d..%d (want 4..6)", lo, hi);
    o.min_len = 1;
    o.max_len_b = 2;
    lengths(m, &o, 4, &lo, &hi);
    CHECK_MSG(lo >= 2 && hi <= 3 && hi > 0, "max_len 2: lengths %d..%d (want 2..3)", lo, hi);
    o.min_len = 2;
    lengths(m, &o, 4, &lo, &hi);
    CHECK_MSG(lo == 3 && hi == 3, "min_len = max_len = 2: lengths %d..%d (want 3)", lo, hi);
    o.min_len = 100; /* clamped to max_len */
    o.max_len_b = 200;
    CHECK(ll_search_max_len(m, &o, 4) == 5);
    lengths(m, &o, 4, &lo, &hi);
    CHECK_MSG(lo == 6 && hi == 6, "max_positions 6: lengths %d..%d (want 6)", lo, hi);
    o.max_len_a = 0.5;
    o.max_len_b = 1;
    CHECK(ll_search_max_len(m, &o, 6) == 4);
    lengths(m, &o, 6, &lo, &hi);
    CHECK_MSG(lo == 5 && hi == 5, "max_len_a 0.5 * 6 + 1: lengths %d..%d (want 5)", lo, hi);
    ll_model_free(m);
}

/* ---- 7. first decoder token ------------------------------------------------------ */
static void test_bos(void) {
    const char *dir = tu_tmpdir();
    char text[4096];
    snprintf(text, sizeof text, "%s/tests/data/tiny/train.en", tu_source_dir());
    const char *files[1] = {text};
    const char *tags[2] = {"<2es>", "<2fr>"};
    char prefix[1024];
    snprintf(prefix, sizeof prefix, "%s/spm", dir);
    if (ll_spm_train(files, 1, prefix, 40, tags, 2, 1)) {
        CHECK_MSG(0, "spm training failed: %s", ll_errbuf());
        return;
    }
    snprintf(text, sizeof text, "%s.model", prefix);
    ll_spm *spm = ll_spm_load(text);
    CHECK(spm != NULL);
    if (!spm) return;
    const int es = ll_spm_piece_id(spm, "<2es>"), fr = ll_spm_piece_id(spm, "<2fr>");
    CHECK(es >= 4 && fr >= 4);
    ll_config c;
    const char *two = "data:\n  train:\n    - {src: a.en, tgt: a.es, src_lang: en, tgt_lang: es}\n"
                      "    - {src: a.en, tgt: a.fr, src_lang: en, tgt_lang: fr}\n";
    CHECK(ll_config_load_text(&c, two, "two.cfg") == 0);
    int32_t bos = -1;
    CHECK(ll_decode_bos(&c, spm, "fr", &bos) == 0 && bos == fr);
    CHECK(ll_decode_bos(&c, spm, "es", &bos) == 0 && bos == es);
    CHECK(ll_decode_bos(&c, spm, NULL, &bos) == -1);
    CHECK_CONTAINS(ll_errbuf(), "es, fr");
    CHECK(ll_decode_bos(&c, spm, "de", &bos) == -1);
    CHECK_CONTAINS(ll_errbuf(), "--target-lang de");
    ll_config_free(&c);
    const char *one = "data:\n  lang_tags: \"on\"\n  train:\n    - {src: a.en, tgt: a.es, src_lang: en, tgt_lang: es}\n";
    CHECK(ll_config_load_text(&c, one, "one.cfg") == 0);
    CHECK(ll_decode_bos(&c, spm, NULL, &bos) == 0 && bos == es);
    ll_config_free(&c);
    const char *off = "data:\n  lang_tags: \"off\"\n  train:\n    - {src: a.en, tgt: a.es, src_lang: en, tgt_lang: es}\n"
                      "    - {src: a.en, tgt: a.fr, src_lang: en, tgt_lang: fr}\n";
    CHECK(ll_config_load_text(&c, off, "off.cfg") == 0);
    CHECK(ll_decode_bos(&c, spm, NULL, &bos) == 0 && bos == LL_EOS);
    ll_config_free(&c);
    ll_spm_free(spm);
}

/* ---- alignments: the search's bookkeeping ------------------------------------ */
/* Each hypothesis's alignment (ll_search_opts.align) equals a replay of its tokens on one row
 * (ll_decode_step + ll_decode_last_align), through beam reorders, the first step's shared
 * rows and compaction (eager and lazy); the search itself is the same with and without it. */
static void test_alignment(void) {
    const int V = 12, B = 4;
    int compared = 0, moved = 0;
    real *logp = malloc(sizeof(real) * V);
    for (int lazy = 0; lazy < 2; lazy++)
        for (int seed = 1; seed <= 2; seed++) {
            ll_model *m = toy(V, 32, 300 + seed);
            m->decode_graphs = lazy ? 2 : -1;
            int32_t src[B * 7];
            int sl[B];
            rand_batch(src, sl, B, V, 3, (int[]){2, seed, 5}, seed * 50);
            ll_search_opts o;
            ll_search_opts_default(&o);
            o.beam = o.nbest = 3;
            o.max_len_b = 6;
            ll_nbest plain[B], al[B];
            ll_beam_search(m, src, sl, B, 7, &o, plain);
            o.align = 1;
            ll_beam_search(m, src, sl, B, 7, &o, al);
            for (int i = 0; i < B; i++) {
                CHECK_MSG(al[i].n == plain[i].n, "alignment changed the search (sentence %d)", i);
                for (int h = 0; h < al[i].n && h < plain[i].n; h++) {
                    const ll_hypo *y = &al[i].h[h];
                    CHECK_MSG(same_hypo(y, &plain[i].h[h], 0) && !plain[i].h[h].align && y->align,
                              "seed %d sentence %d hypothesis %d: not the search without alignment", seed, i, h);
                    if (!y->align) continue;
                    ll_dec_state *d = ll_decode_begin(m, src + i * 7, &sl[i], 1, sl[i], 1, y->len + 1);
                    CHECK(ll_decode_align_on(m, d) == 1);
                    for (int t = 0; t < y->len; t++) {
                        const int32_t prev = t ? y->tokens[t - 1] : o.bos;
                        int32_t a = -7;
                        ll_decode_step(m, d, &prev, logp);
                        ll_decode_last_align(m, d, &a);
                        CHECK_MSG(a == y->align[t] && a >= 0 && a < sl[i] - 1,
                                  "seed %d sentence %d hypothesis %d token %d: aligned to %d, its replay to %d", seed,
                                  i, h, t, y->align[t], a);
                        moved += t > 0 && a != y->align[0];
                        compared++;
                    }
                    ll_decode_end(m, d);
                }
                ll_nbest_free(&plain[i]);
                ll_nbest_free(&al[i]);
            }
            ll_model_free(m);
        }
    free(logp);
    fprintf(stderr, "alignment: %d tokens replayed (%d not aligned to their first token's position)\n", compared,
            moved);
    CHECK_MSG(compared > 50 && moved > 0, "alignment: too few tokens, or every token on one position");
}

/* ---- 8. target prefixes ------------------------------------------------------------ */
/* A beam wide enough for every candidate, with a forced prefix: it finds exactly the sequences
 * that begin with the prefix, with their exhaustive scores (the prefix's tokens scored too) and
 * the optimum first.  Then a batch mixing prefixes of 0-3 tokens, searched and sampled, equals
 * each sentence alone and on two workers, every output beginning with its prefix. */
static void test_prefix(void) {
    const int V = 7, max_len = 3;
    ll_model *m = toy(V, 16, 2);
    const int32_t pa[1] = {5}, pb[2] = {4, 6};
    const int32_t *pres[2] = {pa, pb};
    const int plens[2] = {1, 2};
    for (int pi = 0; pi < 2; pi++) {
        const int P = plens[pi];
        int32_t *ys[30];
        int lens[30], n = 0;
        for (int L = 0; L + P <= max_len; L++) {
            int count = 1;
            for (int t = 0; t < L; t++) count *= 4;
            for (int c = 0; c < count; c++, n++) {
                ys[n] = malloc(sizeof(int32_t) * (P + L + 1));
                memcpy(ys[n], pres[pi], sizeof(int32_t) * P);
                for (int t = 0, x = c; t < L; t++, x /= 4) ys[n][P + t] = 3 + x % 4;
                ys[n][P + L] = LL_EOS;
                lens[n] = P + L + 1;
            }
        }
        double *lp[30];
        for (int i = 0; i < n; i++) lp[i] = malloc(sizeof(double) * lens[i]);
        int32_t src[5];
        const int sl = 5;
        rand_src(src, sl, V, 70 + pi);
        forced(m, src, sl, LL_EOS, ys, lens, n, lp, NULL);
        ll_search_opts o;
        ll_search_opts_default(&o);
        o.beam = o.nbest = 40, o.lenpen = 0.8, o.max_len_b = max_len;
        o.prefix = &pres[pi], o.prefix_len = &plens[pi];
        ll_nbest out;
        ll_beam_search(m, src, &sl, 1, sl, &o, &out);
        CHECK_MSG(out.n == n, "prefix of %d: %d hypotheses, %d sequences begin with it", P, out.n, n);
        double *want = malloc(sizeof(double) * n);
        int best = 0;
        for (int i = 0; i < n; i++) {
            want[i] = sum(lp[i], lens[i]) / pow(lens[i], o.lenpen);
            if (want[i] > want[best]) best = i;
        }
        if (out.n == n) {
            double worst = 0;
            qsort(want, n, sizeof(double), cmp_desc);
            for (int i = 0; i < n; i++) {
                worst = fmax(worst, fabs(out.h[i].score - want[i]));
                CHECK_MSG(!memcmp(out.h[i].tokens, pres[pi], sizeof(int32_t) * P), "hypothesis %d lacks the prefix", i);
            }
            CHECK_MSG(worst < TOL, "prefix of %d: sorted scores differ by %g", P, worst);
            CHECK_MSG(out.h[0].len == lens[best] && !memcmp(out.h[0].tokens, ys[best], sizeof(int32_t) * lens[best]),
                      "prefix of %d: the best hypothesis is not the exhaustive optimum", P);
        }
        ll_nbest_free(&out);
        free(want);
        for (int i = 0; i < n; i++) free(ys[i]), free(lp[i]);
    }
    ll_model_free(m);

    /* mixed batches: searched (beam 3) and sampled (3 draws) */
    const int V2 = 15, ns = 6;
    m = toy(V2, 40, 12);
    int32_t *src[6];
    int len[6];
    const int32_t p0[1] = {7}, p2[3] = {9, 4, 11}, p4[2] = {5, 5};
    const int32_t *pre[6] = {p0, NULL, p2, NULL, p4, p0};
    const int plen[6] = {1, 0, 3, 0, 2, 1};
    for (int i = 0; i < ns; i++) {
        len[i] = 3 + (i * 3) % 5;
        src[i] = malloc(sizeof(int32_t) * len[i]);
        rand_src(src[i], len[i], V2, 800 + i);
    }
    for (int sampling = 0; sampling < 2; sampling++) {
        ll_translate_opts o = {.max_tokens = 1000, .prefix = pre, .prefix_len = plen};
        ll_search_opts_default(&o.search);
        o.search.beam = o.search.nbest = 3, o.search.max_len_b = 8, o.search.sampling = sampling, o.search.seed = 3;
        ll_nbest a[6], b[6], c[6];
        ll_translate_ids(m, (const int32_t *const *)src, len, ns, &o, a, NULL);
        ll_set_threads(2);
        o.inter_threads = 2;
        ll_translate_ids(m, (const int32_t *const *)src, len, ns, &o, c, NULL);
        ll_set_threads(1);
        for (int i = 0; i < ns; i++) { /* alone */
            ll_search_opts so = o.search;
            so.prefix = &pre[i], so.prefix_len = &plen[i];
            uint64_t key = (uint64_t)i; /* (ll_translate_ids keys draws by input index) */
            so.keys = &key;
            ll_beam_search(m, src[i], &len[i], 1, len[i], &so, &b[i]);
        }
        for (int i = 0; i < ns; i++) {
            int same = a[i].n == 3 && b[i].n == 3 && c[i].n == 3;
            for (int h = 0; same && h < 3; h++)
                same = same_hypo(&a[i].h[h], &b[i].h[h], TOL) && same_hypo(&a[i].h[h], &c[i].h[h], TOL);
            CHECK_MSG(same, "%s, sentence %d (prefix of %d): batched, alone and on two workers differ",
                      sampling ? "sampling" : "search", i, plen[i]);
            for (int h = 0; h < a[i].n; h++) {
                const ll_hypo *y = &a[i].h[h];
                CHECK_MSG(y->len > plen[i] && (!plen[i] || !memcmp(y->tokens, pre[i], sizeof(int32_t) * plen[i])),
                          "%s, sentence %d: hypothesis %d does not begin with its prefix", sampling ? "sampling" : "search", i, h);
                /* the prefix's tokens are scored as the model gives them */
                float *pos = malloc(sizeof(float) * y->len);
                const int32_t *ps[1] = {src[i]}, *pt[1] = {y->tokens};
                ll_score_opts so = {.max_tokens = 4096, .bos = LL_EOS};
                ll_score_ids(m, ps, &len[i], pt, &y->len, 1, &so, &pos, NULL);
                for (int t = 0; t < y->len; t++) CHECK_NEAR(y->pos_scores[t], pos[t], PTOL);
                free(pos);
            }
            ll_nbest_free(&a[i]), ll_nbest_free(&b[i]), ll_nbest_free(&c[i]);
        }
    }
    for (int i = 0; i < ns; i++) free(src[i]);
    ll_model_free(m);
}

int main(void) {
    ll_set_threads(1);
    test_exhaustive();
    test_reference(0);
    test_reference(1);
    test_batching();
    test_greedy();
    test_nbest();
    test_lengths();
    test_bos();
    test_alignment();
    test_prefix();
    /* batches keep sentences x beam x V below 2^31 (beam_topk's int32 candidate index) */
    ll_translate_opts to = {.max_sents = 1 << 20};
    ll_search_opts_default(&to.search);
    to.search.beam = 12;
    CHECK(ll_translate_batch_sents(&to, 64000) == 2796); /* 2796 * 12 * 64000 < 2^31 <= 2797 * ... */
    CHECK(ll_translate_batch_sents(&to, 100) == 1 << 20);
    to.max_sents = 0;
    CHECK(ll_translate_batch_sents(&to, 64000) == 21); /* 256 / beam */
    to.search.beam = 1024;
    CHECK(ll_translate_batch_sents(&to, 1 << 22) == 1);
    return tu_finish("grad_test_beam");
}
