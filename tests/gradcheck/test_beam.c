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
 *   8. forced decoding (ll_score_ids): each n-best hypothesis scored as a
 *      reference gets the search's token scores, however it is batched;
 *   9. sampling (ll_sample_search): draws follow the model's distribution
 *      (tempered, top-k), their scores are the forced ones, and a sentence's
 *      draws do not depend on its batch or the worker count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/testutil.h"
#include "ll/decode.h"
#include "ll/model.h"

/* Score tolerance: double build, rounding only; fp32 build (f32_test_beam),
 * the fast decoding paths sum in another order than the forced reference. */
#define TOL (sizeof(real) == 8 ? 1e-9 : 2e-5)
#define PTOL (sizeof(real) == 8 ? 1e-6 : 2e-5)

static ll_model *toy(int V, int max_pos, uint64_t seed) {
    ll_hparams hp = {.C = 8, .F = 16, .H = 2, .Le = 1, .Ld = 2, .V = V, .max_pos = max_pos, .share_all = 1,
                     .tie_output = 1};
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, seed);
    /* sharpen the output distribution so that searches disagree with greedy */
    for (size_t i = 0; i < (size_t)V * 8; i++) m->params[m->out_proj + i] *= 2.5;
    return m;
}

/* A random source of length sl (EOS included) over ids 4..V-1. */
static void rand_src(int32_t *s, int sl, int V, uint64_t seed) {
    ll_philox r;
    ll_philox_init(&r, seed, 7, 0);
    for (int t = 0; t < sl - 1; t++) s[t] = 4 + (int)ll_philox_below(&r, t, V - 4);
    s[sl - 1] = LL_EOS;
}

/* B random sources in rows of 7 (padded): sentence i has min + (i * len[0] + len[1]) % len[2]
 * tokens (EOS included), drawn with seed key + i. */
static void rand_batch(int32_t *src, int *sl, int B, int V, int min, const int len[3], uint64_t key) {
    for (int i = 0; i < B; i++) {
        sl[i] = min + (i * len[0] + len[1]) % len[2];
        rand_src(src + i * 7, sl[i], V, key + i);
        for (int t = sl[i]; t < 7; t++) src[i * 7 + t] = LL_PAD;
    }
}

/* Log-probs of n target sequences ys[i] (lens[i] tokens) after `bos`, all
 * teacher-forced in one batch: lp[i][t] = log p(ys[i][t] | bos ys[i][<t]).
 * With want_next: also the distribution after the full sequence (next[i*V..]). */
static void forced(ll_model *m, const int32_t *src, int sl, int32_t bos, int32_t *const *ys, const int *lens, int n,
                   double **lp, double *next) {
    const int V = m->hp.V;
    int T = 1;
    for (int i = 0; i < n; i++)
        if (lens[i] + 1 > T) T = lens[i] + 1;
    ll_batch b = {.B = n, .S = sl, .T = T};
    b.src = calloc((size_t)n * sl, sizeof(int32_t));
    b.tgt_in = calloc((size_t)n * T, sizeof(int32_t));
    b.tgt_out = calloc((size_t)n * T, sizeof(int32_t));
    b.src_len = calloc(n, sizeof(int));
    b.tgt_len = calloc(n, sizeof(int));
    for (int i = 0; i < n; i++) {
        memcpy(b.src + (size_t)i * sl, src, sizeof(int32_t) * sl);
        b.src_len[i] = sl;
        b.tgt_len[i] = lens[i] + 1;
        for (int t = 0; t < T; t++) {
            b.tgt_in[i * T + t] = t == 0 ? bos : t <= lens[i] ? ys[i][t - 1] : LL_PAD;
            b.tgt_out[i * T + t] = t < lens[i] ? ys[i][t] : t == lens[i] ? LL_EOS : LL_PAD;
        }
        b.n_src_tokens += sl;
        b.n_tgt_tokens += lens[i] + 1;
    }
    const real *L = ll_model_logprobs(m, &b);
    for (int i = 0; i < n; i++) {
        for (int t = 0; t < lens[i]; t++) lp[i][t] = L[((size_t)i * T + t) * V + ys[i][t]];
        if (next)
            for (int v = 0; v < V; v++) next[(size_t)i * V + v] = L[((size_t)i * T + lens[i]) * V + v];
    }
    free(b.src);
    free(b.tgt_in);
    free(b.tgt_out);
    free(b.src_len);
    free(b.tgt_len);
}

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
        for (int r = 0; r < K; r++)
            for (int v = 0; v < V; v++) {
                double *x = &next[r * V + v];
                if (isnan(*x) || v == LL_PAD || v == LL_BOS) *x = -INFINITY;
                if (step >= max_len && v != LL_EOS) *x = -INFINITY;
                if (step < min_len && v == LL_EOS) *x = -INFINITY;
            }
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

static int same_hypo(const ll_hypo *a, const ll_hypo *b, double tol) {
    if (a->len != b->len || memcmp(a->tokens, b->tokens, sizeof(int32_t) * a->len)) return 0;
    if (fabs(a->score - b->score) > tol) return 0;
    for (int t = 0; t < a->len; t++)
        if (fabs(a->pos_scores[t] - b->pos_scores[t]) > PTOL) return 0; /* stored as float */
    return 1;
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

/* ---- 8. forced decoding --------------------------------------------------------- */
/* Every hypothesis of an n-best search, scored as a reference by the teacher-forced forward
 * (ll_score_ids), gets the token scores the search gave it (a KV-cached step per token: no
 * code shared), with a language tag as BOS; in one batch per pair, in few batches, and on two
 * batch workers.  Plus the edge pairs: a source and a reference of EOS alone. */
static void test_score(void) {
    const int V = 14, B = 5, beam = 4;
    ll_model *m = toy(V, 24, 31);
    int32_t src[B * 7];
    int sl[B];
    rand_batch(src, sl, B, V, 2, (const int[3]){3, 1, 6}, 900);
    ll_search_opts o;
    ll_search_opts_default(&o);
    o.beam = o.nbest = beam;
    o.max_len_b = 9;
    o.lenpen = 0.7;
    o.bos = 5; /* as a language tag would be */
    ll_nbest res[B];
    ll_beam_search(m, src, sl, B, 7, &o, res);
    enum { MAXP = B * 4 + 2 };
    const int32_t *ps[MAXP], *pt[MAXP];
    int psl[MAXP], ptl[MAXP], np = 0;
    const ll_hypo *hy[MAXP];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < res[b].n; h++) {
            ps[np] = src + b * 7, psl[np] = sl[b];
            pt[np] = res[b].h[h].tokens, ptl[np] = res[b].h[h].len;
            hy[np++] = &res[b].h[h];
        }
    const int32_t eos[1] = {LL_EOS};
    ps[np] = eos, psl[np] = 1, pt[np] = src + 7, ptl[np] = sl[1], hy[np++] = NULL; /* empty source */
    ps[np] = src, psl[np] = sl[0], pt[np] = eos, ptl[np] = 1, hy[np++] = NULL;      /* empty reference */
    CHECK(np > 3 * B);
    float *pos[3][MAXP];
    const int max_tokens[3] = {1, 30, 4096}, inter[3] = {1, 1, 2};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < np; i++) pos[k][i] = malloc(sizeof(float) * ptl[i]);
        ll_score_opts so = {.max_tokens = max_tokens[k], .inter_threads = inter[k], .bos = o.bos};
        ll_translate_stats st;
        ll_set_threads(inter[k]);
        ll_score_ids(m, ps, psl, pt, ptl, np, &so, pos[k], &st);
        ll_set_threads(1);
        CHECK(st.sents == np);
        if (k == 0) CHECK_MSG(st.batches == np, "max_tokens 1: %ld batches for %d pairs", st.batches, np);
        if (k == 1) CHECK_MSG(st.batches > 1 && st.batches < np / 2, "max_tokens 30: %ld batches", st.batches);
    }
    double worst = 0;
    for (int i = 0; i < np; i++) {
        for (int k = 0; k < 3; k++) {
            double sum = 0;
            for (int t = 0; t < ptl[i]; t++) {
                sum += pos[k][i][t];
                CHECK_MSG(pos[k][i][t] <= 0 && isfinite(pos[k][i][t]), "pair %d token %d: %g", i, t, pos[k][i][t]);
                if (k) CHECK_NEAR(pos[k][i][t], pos[0][i][t], PTOL);
                if (hy[i]) {
                    CHECK_NEAR(pos[k][i][t], hy[i]->pos_scores[t], PTOL);
                    worst = fmax(worst, fabs(pos[k][i][t] - hy[i]->pos_scores[t]));
                }
            }
            if (hy[i]) CHECK_NEAR(sum / pow(ptl[i], o.lenpen), hy[i]->score, PTOL * ptl[i]); /* (float scores) */
        }
    }
    /* another BOS is another model input: the scores must move */
    float *other[MAXP];
    for (int i = 0; i < np; i++) other[i] = malloc(sizeof(float) * ptl[i]);
    ll_score_opts so = {.max_tokens = 4096, .bos = LL_EOS};
    ll_score_ids(m, ps, psl, pt, ptl, np, &so, other, NULL);
    int moved = 0;
    for (int i = 0; i < np; i++) moved += fabsf(other[i][0] - pos[0][i][0]) > 1e-3f;
    CHECK_MSG(moved > np / 2, "the BOS token changed only %d of %d first-token scores", moved, np);
    fprintf(stderr, "score: %d pairs, worst token score difference from the search %.3g\n", np, worst);
    for (int i = 0; i < np; i++) {
        free(other[i]);
        for (int k = 0; k < 3; k++) free(pos[k][i]);
    }
    for (int b = 0; b < B; b++) ll_nbest_free(&res[b]);
    ll_model_free(m);
}

/* ---- 9. sampling ------------------------------------------------------------------ */
/* 4000 one-token draws of one sentence (max_len 1) against the first step's distribution:
 * pad, BOS and (min_len 1) EOS never; the rest in proportion to p^(1/temperature), among the
 * topk most probable only; each draw's score the tempered log-probability.  Chi-square bounds
 * (fixed seed: the same draws every run; a wrong distribution exceeds them by far). */
static void test_sampling_dist(void) {
    const int V = 9, n = 4000;
    ll_model *m = toy(V, 16, 17);
    for (size_t i = 0; i < (size_t)V * 8; i++) m->params[m->out_proj + i] *= 0.1; /* a flatter distribution */
    const int sl = 5;
    int32_t src[5];
    rand_src(src, sl, V, 77);
    ll_dec_state *d = ll_decode_begin(m, src, &sl, 1, sl, 1, 2);
    real lp0[9];
    int32_t bos = LL_EOS;
    ll_decode_step(m, d, &bos, lp0);
    ll_decode_end(m, d);
    const double temps[3] = {1, 0.5, 1.7};
    const int topks[3] = {0, 0, 2};
    for (int c = 0; c < 3; c++) {
        ll_search_opts o;
        ll_search_opts_default(&o);
        o.sampling = 1, o.beam = n, o.nbest = n, o.max_len_b = 1, o.temperature = temps[c], o.topk = topks[c];
        o.seed = 11;
        ll_nbest r;
        ll_beam_search(m, src, &sl, 1, sl, &o, &r);
        CHECK_MSG(r.n == n, "sampling: %d of %d draws", r.n, n);
        /* the tempered distribution over the allowed tokens (3..V-1), and its top two */
        double w[9] = {0}, z = 0, zall = 0, mx = -INFINITY;
        for (int v = 0; v < V; v++) mx = fmax(mx, lp0[v] / temps[c]);
        for (int v = 0; v < V; v++) zall += exp(lp0[v] / temps[c] - mx);
        int b1 = -1, b2 = -1;
        for (int v = 3; v < V; v++) {
            if (b1 < 0 || lp0[v] > lp0[b1]) b2 = b1, b1 = v;
            else if (b2 < 0 || lp0[v] > lp0[b2]) b2 = v;
        }
        for (int v = 3; v < V; v++)
            if (!topks[c] || v == b1 || v == b2) z += w[v] = exp(lp0[v] / temps[c] - mx);
        int count[9] = {0};
        for (int h = 0; h < r.n; h++) {
            const ll_hypo *y = &r.h[h];
            CHECK(y->len == 2 && y->tokens[1] == LL_EOS);
            const int v = y->tokens[0];
            count[v]++;
            const double want = lp0[v] / temps[c] - mx - log(zall);
            if (w[v] > 0) CHECK_MSG(fabs(y->pos_scores[0] - want) < 1e-5, "draw %d (token %d): score %g, want %g", h, v,
                                    y->pos_scores[0], want);
            if (h) CHECK(y->score <= r.h[h - 1].score);
        }
        double chi2 = 0;
        int df = -1;
        for (int v = 0; v < V; v++) {
            if (w[v] == 0) {
                CHECK_MSG(count[v] == 0, "sampling (temperature %g, topk %d): token %d drawn %d times", temps[c],
                          topks[c], v, count[v]);
                continue;
            }
            const double e = n * w[v] / z;
            chi2 += (count[v] - e) * (count[v] - e) / e;
            df++;
        }
        fprintf(stderr, "sampling: temperature %g, topk %d: chi-square %.2f (%d degrees of freedom); draws", temps[c],
                topks[c], chi2, df);
        for (int v = 3; v < V; v++) fprintf(stderr, " %d/%.0f", count[v], n * w[v] / z);
        fprintf(stderr, "\n");
        CHECK_MSG(chi2 < 30, "sampling (temperature %g, topk %d): chi-square %.1f over %d degrees of freedom", temps[c],
                  topks[c], chi2, df);
        ll_nbest_free(&r);
    }
    ll_model_free(m);
}

/* Whole draws: the same samples however the sentences are batched (one per batch, few batches,
 * two workers); another seed draws others; every draw's token scores are its forced scores
 * (ll_score_ids), EOS comes no earlier than min_len, and the n-best lists are sorted. */
static void test_sampling_batching(void) {
    const int V = 15, n = 9;
    ll_model *m = toy(V, 40, 8);
    for (size_t i = 0; i < (size_t)V * 8; i++) m->params[m->out_proj + i] *= 0.2; /* varied draws */
    int32_t *src[9];
    int len[9];
    for (int i = 0; i < n; i++) {
        len[i] = i == 4 ? 0 : 2 + (i * 5) % 7;
        src[i] = malloc(sizeof(int32_t) * (len[i] + 1));
        if (len[i]) rand_src(src[i], len[i], V, 600 + i);
    }
    ll_translate_opts o = {.max_tokens = 1000, .draw_base = 40};
    ll_search_opts_default(&o.search);
    o.search.sampling = 1, o.search.beam = 3, o.search.nbest = 3, o.search.max_len_b = 12, o.search.min_len = 2;
    o.search.seed = 5, o.search.temperature = 1.0;
    ll_nbest a[9], b[9], c[9], e[9];
    ll_translate_ids(m, (const int32_t *const *)src, len, n, &o, a, NULL);
    o.max_tokens = 1; /* one sentence per batch */
    ll_translate_ids(m, (const int32_t *const *)src, len, n, &o, b, NULL);
    o.max_tokens = 1000;
    ll_set_threads(2);
    o.inter_threads = 2;
    ll_translate_ids(m, (const int32_t *const *)src, len, n, &o, c, NULL);
    ll_set_threads(1);
    o.inter_threads = 0;
    o.search.seed = 6;
    ll_translate_ids(m, (const int32_t *const *)src, len, n, &o, e, NULL);
    int other = 0, draws = 0;
    for (int i = 0; i < n; i++) {
        int same = a[i].n == b[i].n && a[i].n == c[i].n;
        for (int h = 0; same && h < a[i].n; h++)
            same = same_hypo(&a[i].h[h], &b[i].h[h], TOL) && same_hypo(&a[i].h[h], &c[i].h[h], TOL);
        CHECK_MSG(same, "sentence %d: its draws depend on the batching or the workers", i);
        CHECK(a[i].n == (len[i] ? 3 : 0));
        for (int h = 0; h < a[i].n && h < e[i].n; h++) other += !same_hypo(&a[i].h[h], &e[i].h[h], TOL);
        for (int h = 0; h < a[i].n; h++) {
            const ll_hypo *y = &a[i].h[h];
            draws++;
            if (h) CHECK(y->score <= a[i].h[h - 1].score);
            CHECK_MSG(y->len >= 3 || y->len == 12 + 1, "sentence %d draw %d: EOS at step %d, before min_len 2", i, h,
                      y->len - 1);
            for (int t = 0; t < y->len; t++) CHECK(y->tokens[t] != LL_PAD && y->tokens[t] != LL_BOS);
            float *pos = malloc(sizeof(float) * y->len);
            const int32_t *ps[1] = {src[i]}, *pt[1] = {y->tokens};
            ll_score_opts so = {.max_tokens = 4096, .bos = LL_EOS};
            ll_score_ids(m, ps, &len[i], pt, &y->len, 1, &so, &pos, NULL);
            double sum = 0;
            for (int t = 0; t < y->len; t++) {
                CHECK_NEAR(y->pos_scores[t], pos[t], PTOL);
                sum += pos[t];
            }
            CHECK_NEAR(y->score, sum / y->len, PTOL * y->len);
            free(pos);
        }
        ll_nbest_free(&a[i]), ll_nbest_free(&b[i]), ll_nbest_free(&c[i]), ll_nbest_free(&e[i]);
        free(src[i]);
    }
    CHECK_MSG(other > draws / 2, "another seed changed only %d of %d draws", other, draws);
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
    test_score();
    test_sampling_dist();
    test_sampling_batching();
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
