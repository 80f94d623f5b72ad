/* Forced decoding and sampling against the beam search and the model, in
 * double precision (grad_test_sample) and in fp32 with the fast decoding
 * paths (f32_test_sample):
 *   1. forced decoding (ll_score_ids): each n-best hypothesis scored as a
 *      reference gets the search's token scores, however it is batched;
 *   2. sampling (ll_sample_search): draws follow the model's distribution
 *      (tempered, top-k), their scores are the forced ones, and a sentence's
 *      draws do not depend on its batch or the worker count;
 *   3. --unkpen: searched and sampled token scores are the forced ones less the
 *      penalty on <unk>, a large penalty keeps <unk> out, a bonus brings it;
 *   4. --no-repeat-ngram-size: the banned tokens are fairseq's NGramRepeatBlock's (its Python loop
 *      transcribed), and beam search and sampling with n = 1..3 give hypotheses without a repeated
 *      n-gram, token scores = forced scores (bans take nothing from the others), prefixes kept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/testutil.h"
#include "beam_toy.h"
#include "../../src/decode/decode_internal.h" /* white-box: ll_ngram_bans */

/* ---- 1. forced decoding --------------------------------------------------------- */
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

/* ---- 2. sampling ------------------------------------------------------------------ */
/* 4000 one-token draws of one sentence (max_len 1) against the first step's distribution:
 * pad, BOS and (min_len 1) EOS never; the rest in proportion to p^(1/temperature), among the
 * topk most probable only, then the most probable holding topp of their mass (nucleus); each
 * draw's score the tempered log-probability over the whole vocabulary.  Chi-square bounds
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
    const double temps[5] = {1, 0.5, 1.7, 1, 0.8}, topps[5] = {1, 1, 1, 0.45, 0.5};
    const int topks[5] = {0, 0, 2, 0, 4};
    for (int c = 0; c < 5; c++) {
        ll_search_opts o;
        ll_search_opts_default(&o);
        o.sampling = 1, o.beam = n, o.nbest = n, o.max_len_b = 1, o.temperature = temps[c], o.topk = topks[c];
        o.topp = topps[c];
        o.seed = 11;
        ll_nbest r;
        ll_beam_search(m, src, &sl, 1, sl, &o, &r);
        CHECK_MSG(r.n == n, "sampling: %d of %d draws", r.n, n);
        /* the tempered distribution over the allowed tokens (3..V-1); the topk best of them (by
         * rank, ties to the lower id); then the most probable of those until topp of their mass */
        double w[9] = {0}, z = 0, zall = 0, mx = -INFINITY;
        for (int v = 0; v < V; v++) mx = fmax(mx, lp0[v] / temps[c]);
        for (int v = 0; v < V; v++) zall += exp(lp0[v] / temps[c] - mx);
        int rank[9], nr = 0; /* allowed tokens, most probable first */
        for (int v = 3; v < V; v++) {
            int at = nr++;
            while (at > 0 && lp0[rank[at - 1]] < lp0[v]) rank[at] = rank[at - 1], at--;
            rank[at] = v;
        }
        if (topks[c] && topks[c] < nr) nr = topks[c];
        double mass = 0, kept = 0;
        for (int i = 0; i < nr; i++) mass += exp(lp0[rank[i]] / temps[c] - mx);
        for (int i = 0; i < nr && kept < topps[c] * mass; i++) {
            kept += w[rank[i]] = exp(lp0[rank[i]] / temps[c] - mx);
            z += w[rank[i]];
        }
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
                CHECK_MSG(count[v] == 0, "sampling (temperature %g, topk %d, topp %g): token %d drawn %d times",
                          temps[c], topks[c], topps[c], v, count[v]);
                continue;
            }
            const double e = n * w[v] / z;
            chi2 += (count[v] - e) * (count[v] - e) / e;
            df++;
        }
        fprintf(stderr, "sampling: temperature %g, topk %d, topp %g: chi-square %.2f (%d degrees of freedom); draws",
                temps[c], topks[c], topps[c], chi2, df);
        for (int v = 3; v < V; v++) fprintf(stderr, " %d/%.0f", count[v], n * w[v] / z);
        fprintf(stderr, "\n");
        CHECK_MSG(chi2 < 30 && df >= 1, "sampling (temperature %g, topk %d, topp %g): chi-square %.1f over %d degrees of freedom",
                  temps[c], topks[c], topps[c], chi2, df);
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

/* ---- 3. <unk> penalty ------------------------------------------------------------- */
/* A toy model that likes <unk> (its output row scaled up): with no penalty some hypotheses hold it;
 * with a penalty of 0.5 every token score of a beam search (on the backend, add_col) and of sampling
 * (on the host) is the forced score less 0.5 where the token is <unk>; 1e9 keeps <unk> out of every
 * hypothesis and -50 puts it first. */
static void test_unkpen(void) {
    const int V = 12, n = 6;
    ll_model *m = toy(V, 24, 17);
    for (int c = 0; c < 8; c++) m->params[m->out_proj + (size_t)LL_UNK * 8 + c] *= 1.6f;
    int32_t *src[6];
    int len[6];
    for (int i = 0; i < n; i++) {
        len[i] = 2 + (i * 3) % 5;
        src[i] = malloc(sizeof(int32_t) * 8);
        rand_src(src[i], len[i], V, 800 + i);
    }
    const double pens[4] = {0, 0.5, 1e9, -50};
    for (int sampling = 0; sampling < 2; sampling++) {
        int unks[4] = {0};
        for (int pi = 0; pi < 4; pi++) {
            ll_translate_opts o = {.max_tokens = 1000, .draw_base = 3};
            ll_search_opts_default(&o.search);
            o.search.beam = 3, o.search.nbest = 3, o.search.max_len_b = 8, o.search.unkpen = pens[pi];
            o.search.sampling = sampling, o.search.seed = 4;
            ll_nbest r[6];
            ll_translate_ids(m, (const int32_t *const *)src, len, n, &o, r, NULL);
            for (int i = 0; i < n; i++) {
                for (int h = 0; h < r[i].n; h++) {
                    const ll_hypo *y = &r[i].h[h];
                    float *pos = malloc(sizeof(float) * y->len);
                    const int32_t *ps[1] = {src[i]}, *pt[1] = {y->tokens};
                    ll_score_opts so = {.max_tokens = 4096, .bos = LL_EOS};
                    ll_score_ids(m, ps, &len[i], pt, &y->len, 1, &so, &pos, NULL);
                    for (int t = 0; t < y->len; t++) {
                        const int unk = y->tokens[t] == LL_UNK;
                        unks[pi] += unk;
                        if (pi < 2)
                            CHECK_MSG(fabs(y->pos_scores[t] - (pos[t] - (unk ? pens[pi] : 0))) <= PTOL,
                                      "%s, unkpen %g: sentence %d hypothesis %d token %d (%d) scored %g, forced %g",
                                      sampling ? "sampling" : "beam", pens[pi], i, h, t, y->tokens[t],
                                      (double)y->pos_scores[t], (double)pos[t]);
                    }
                    free(pos);
                }
                ll_nbest_free(&r[i]);
            }
        }
        fprintf(stderr, "%s: <unk> tokens in the hypotheses at unkpen 0, 0.5, 1e9, -50: %d %d %d %d\n",
                sampling ? "sampling" : "beam search", unks[0], unks[1], unks[2], unks[3]);
        CHECK_MSG(unks[0] > 0 && unks[1] > 0 && unks[1] < unks[0] && unks[2] == 0 && unks[3] > unks[0],
                  "%s: <unk> counts %d %d %d %d at unkpen 0, 0.5, 1e9, -50", sampling ? "sampling" : "beam", unks[0],
                  unks[1], unks[2], unks[3]);
    }
    for (int i = 0; i < n; i++) free(src[i]);
    ll_model_free(m);
}

/* ---- 4. repeated n-grams ---------------------------------------------------------- */
/* fairseq's NGramRepeatBlock._no_repeat_ngram for one row, transcribed from its Python: tokens =
 * h[0 .. step] (the start token first), ngram_to_check = tokens[-(n-1):] (n = 1: the whole list,
 * which matches no empty slice: nothing banned), for i in range(step + 2 - n): ban tokens[i + n - 1]
 * where tokens[i : i + n - 1] == ngram_to_check. */
static int fairseq_bans(const int32_t *h, int step, int n, int32_t *out) {
    const int L = step + 1, m = n - 1 > 0 ? n - 1 : L; /* len(ngram_to_check) */
    const int32_t *chk = h + L - m;
    int c = 0;
    for (int i = 0; i < step + 2 - n; i++) {
        const int len = i + n - 1 <= L ? n - 1 : L - i; /* len(tokens[i : i + n - 1]) */
        if (len != m) continue;
        if (!memcmp(h + i, chk, sizeof(int32_t) * m)) out[c++] = h[i + n - 1];
    }
    return c;
}

/* The hypothesis (bos, tokens without its final EOS) holds no n-gram twice (n = 1: no generated
 * token twice); returns 1 when it does (a repeat). */
static int has_repeat(int32_t bos, const ll_hypo *y, int n) {
    int32_t h[64];
    int L = 0;
    h[L++] = bos;
    for (int t = 0; t < y->len && y->tokens[t] != LL_EOS; t++) h[L++] = y->tokens[t];
    const int from = n == 1; /* n = 1: the start token is not a generated token */
    for (int i = from; i + n <= L; i++)
        for (int j = i + 1; j + n <= L; j++)
            if (!memcmp(h + i, h + j, sizeof(int32_t) * n)) return 1;
    return 0;
}

static void test_no_repeat(void) {
    /* the ban lists: every history of up to 9 tokens over a 3-token alphabet (many repeats) */
    long lists = 0, banned = 0;
    for (int n = 1; n <= 4; n++)
        for (int len = 0; len <= 9; len++)
            for (int code = 0, codes = (int)pow(3, len + 1); code < codes; code++) {
                int32_t h[10], got[10], want[10], none[10];
                for (int i = 0, c = code; i <= len; i++, c /= 3) h[i] = 4 + c % 3;
                const int ng = ll_ngram_bans(h[0], h + 1, len, n, got);
                int nw;
                if (n == 1) /* fairseq's Python bans nothing; ll bans the generated tokens */
                    for (nw = 0; nw < len; nw++) want[nw] = h[1 + nw];
                else
                    nw = fairseq_bans(h, len, n, want);
                CHECK_MSG(n != 1 || fairseq_bans(h, len, n, none) == 0, "fairseq's n = 1 transcription banned");
                int same = ng == nw;
                for (int i = 0; same && i < ng; i++) same = got[i] == want[i];
                CHECK_MSG(same, "n %d, history of %d (code %d): %d bans, fairseq's %d", n, len + 1, code, ng, nw);
                lists++, banned += ng;
            }
    /* searches: a toy model with a 7-token vocabulary repeats itself */
    const int V = 7, ns = 6;
    ll_model *m = toy(V, 24, 23);
    int32_t *src[6], pre_tok[6][2];
    const int32_t *pre[6];
    int len[6], plen[6];
    for (int i = 0; i < ns; i++) {
        len[i] = 2 + (i * 3) % 5;
        src[i] = malloc(sizeof(int32_t) * 8);
        rand_src(src[i], len[i], V, 850 + i);
        plen[i] = i % 3;
        pre_tok[i][0] = 4 + i % 2 * 2, pre_tok[i][1] = pre_tok[i][0]; /* repeats itself (not the bos, 5) */
        pre[i] = plen[i] ? pre_tok[i] : NULL;
    }
    for (int sampling = 0; sampling < 2; sampling++)
        for (int prefixed = 0; prefixed < 2; prefixed++) {
            int repeats[4] = {0}, hyps = 0;
            for (int n = 0; n <= 3; n++) {
                ll_translate_opts o = {.max_tokens = 1000, .draw_base = 5};
                ll_search_opts_default(&o.search);
                o.search.beam = 3, o.search.nbest = 3, o.search.max_len_b = 12;
                o.search.no_repeat_ngram = n, o.search.sampling = sampling, o.search.seed = 9;
                o.search.bos = 5; /* a language tag: the start token counts in n-grams */
                if (prefixed) o.prefix = pre, o.prefix_len = plen;
                ll_nbest r[6];
                ll_translate_ids(m, (const int32_t *const *)src, len, ns, &o, r, NULL);
                for (int i = 0; i < ns; i++) {
                    for (int h = 0; h < r[i].n; h++) {
                        const ll_hypo *y = &r[i].h[h];
                        hyps += n == 0;
                        for (int k = 1; k <= 3; k++) repeats[k] += n == 0 && has_repeat(o.search.bos, y, k);
                        const int p = prefixed ? plen[i] : 0;
                        for (int t = 0; t < p; t++) CHECK_MSG(y->tokens[t] == pre[i][t], "prefix token %d lost", t);
                        if (n > 0 && !(prefixed && p == 2 && n == 1)) /* (a prefix may repeat itself) */
                            CHECK_MSG(!has_repeat(o.search.bos, y, n), "%s, n %d: sentence %d hypothesis %d repeats",
                                      sampling ? "sampling" : "beam", n, i, h);
                        float *pos = malloc(sizeof(float) * y->len);
                        const int32_t *ps[1] = {src[i]}, *pt[1] = {y->tokens};
                        ll_score_opts so = {.max_tokens = 4096, .bos = o.search.bos};
                        ll_score_ids(m, ps, &len[i], pt, &y->len, 1, &so, &pos, NULL);
                        for (int t = 0; t < y->len; t++)
                            CHECK_MSG(fabs(y->pos_scores[t] - pos[t]) <= PTOL,
                                      "%s, n %d: sentence %d hypothesis %d token %d scored %g, forced %g",
                                      sampling ? "sampling" : "beam", n, i, h, t, (double)y->pos_scores[t],
                                      (double)pos[t]);
                        free(pos);
                    }
                    ll_nbest_free(&r[i]);
                }
            }
            fprintf(stderr, "%s%s: %d hypotheses without bans, %d/%d/%d of them repeat a 1/2/3-gram\n",
                    sampling ? "sampling" : "beam search", prefixed ? " with prefixes" : "", hyps, repeats[1],
                    repeats[2], repeats[3]);
            CHECK_MSG(repeats[2] > 0 && repeats[3] > 0, "the toy model repeats no 2- or 3-gram: the test tests nothing");
        }
    fprintf(stderr, "repeated n-grams: %ld ban lists as fairseq's (%ld tokens banned)\n", lists, banned);
    for (int i = 0; i < ns; i++) free(src[i]);
    ll_model_free(m);
}

int main(void) {
    ll_set_threads(1);
    test_score();
    test_sampling_dist();
    test_sampling_batching();
    test_unkpen();
    test_no_repeat();
    return tu_finish("test_sample");
}
