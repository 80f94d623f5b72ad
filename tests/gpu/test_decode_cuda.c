/* The decoding ops on CUDA against the CPU backend: copy_rows (strided KV-cache
 * write), reorder_rows (moved rows only, rows may repeat) and beam_topk
 * (exactly the same candidates, scores and order, with ties, NaN, -inf, dead
 * rows and the three length modes, at V = 32003 and at k = 64); then a whole
 * beam search on a random model gives the same hypotheses on both backends,
 * every gemm of it one fused cuBLASLt matmul (ll_backend_gemm_fallbacks; in
 * fp32 and, on the GPU alone, in bf16), and its hypotheses scored as
 * references (forced decoding) get the search's token scores; diverse beam
 * search and diverse siblings search find the same lists on both; sampling draws the same tokens on both; an ensemble of two models searches alike on both; so do beam search and sampling over a vocabulary shortlist.  Skips (77) without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "ll/decode.h"
#include "ll/model.h"
#include "ll/shortlist.h"
#include "ll_cuda.h"
#include "../util/testutil.h"
#include "gpu_util.h"

static void *put(ll_backend *be, const void *host, size_t bytes) {
    void *p = be->alloc(be, bytes);
    be->upload(be, p, host, bytes);
    return p;
}

static void test_rows(ll_backend *cpu, ll_backend *gpu) {
    enum { R = 7, N = 300, STRIDE = 517 };
    const size_t nb = (size_t)R * STRIDE;
    float *buf = ll_malloc(nb * sizeof(float)), *scratch = ll_malloc((size_t)R * N * sizeof(float));
    float *got = ll_malloc(nb * sizeof(float));
    for (size_t i = 0; i < nb; i++) buf[i] = (float)i * 0.5f;
    const int from[R] = {3, 3, 0, 6, 4, 1, 2};
    float *B = put(gpu, buf, nb * sizeof(float)), *S = gpu->alloc(gpu, (size_t)R * N * sizeof(float));
    int *F = put(gpu, from, sizeof from);
    cpu->reorder_rows(cpu, (ll_act *)buf, (ll_act *)scratch, from, R, N, STRIDE);
    gpu->reorder_rows(gpu, (ll_act *)B, (ll_act *)S, F, R, N, STRIDE);
    gpu->download(gpu, got, B, nb * sizeof(float));
    CHECK_MSG(!memcmp(got, buf, nb * sizeof(float)), "reorder_rows differs from the CPU");
    float *src = ll_malloc((size_t)R * 3 * N * sizeof(float));
    for (size_t i = 0; i < (size_t)R * 3 * N; i++) src[i] = -(float)i;
    float *SRC = put(gpu, src, (size_t)R * 3 * N * sizeof(float));
    cpu->copy_rows(cpu, (ll_act *)(buf + 5), STRIDE, (const ll_act *)(src + N), 3 * N, R, 2 * N / 3, NULL, 0);
    gpu->copy_rows(gpu, (ll_act *)(B + 5), STRIDE, (const ll_act *)(SRC + N), 3 * N, R, 2 * N / 3, NULL, 0);
    gpu->download(gpu, got, B, nb * sizeof(float));
    CHECK_MSG(!memcmp(got, buf, nb * sizeof(float)), "copy_rows differs from the CPU");
    gpu->free(gpu, B), gpu->free(gpu, S), gpu->free(gpu, F), gpu->free(gpu, SRC);
    free(buf), free(scratch), free(got), free(src);
}

static void test_topk(ll_backend *cpu, ll_backend *gpu, int G, int beam, int V, int k) {
    const size_t nl = (size_t)G * beam * V, nk = (size_t)G * k;
    float *logp = ll_malloc(nl * sizeof(float));
    double *cum = ll_malloc((size_t)G * beam * sizeof(double));
    uint8_t *mode = ll_malloc(G);
    ll_philox r;
    ll_philox_init(&r, 9, 10, (uint32_t)(V + k));
    for (size_t i = 0; i < nl; i++) {
        logp[i] = -(float)ll_philox_below(&r, i, 64) / 8; /* many ties */
        if (ll_philox_below(&r, nl + i, 997) == 0) logp[i] = NAN;
        if (ll_philox_below(&r, 2 * nl + i, 991) == 0) logp[i] = -INFINITY;
    }
    for (int i = 0; i < G * beam; i++) cum[i] = i % 5 == 4 ? -INFINITY : -(double)ll_philox_below(&r, 3 * nl + i, 7) / 3;
    for (int g = 0; g < G; g++) mode[g] = (uint8_t)(g % 3 == 2 ? 3 : g % 2);
    double *s_cpu = ll_malloc(nk * sizeof(double)), *s_gpu = ll_malloc(nk * sizeof(double));
    float *l_cpu = ll_malloc(nk * sizeof(float)), *l_gpu = ll_malloc(nk * sizeof(float));
    int32_t *f_cpu = ll_malloc(nk * sizeof(int32_t)), *f_gpu = ll_malloc(nk * sizeof(int32_t));
    cpu->beam_topk(cpu, s_cpu, l_cpu, f_cpu, (const ll_act *)logp, cum, mode, G, beam, V, k, 1, 0, LL_PAD, LL_BOS, LL_EOS);
    float *LP = put(gpu, logp, nl * sizeof(float));
    double *CUM = put(gpu, cum, (size_t)G * beam * sizeof(double)), *S = gpu->alloc(gpu, nk * sizeof(double));
    uint8_t *MODE = put(gpu, mode, G);
    float *L = gpu->alloc(gpu, nk * sizeof(float));
    int32_t *F = gpu->alloc(gpu, nk * sizeof(int32_t));
    gpu->beam_topk(gpu, S, L, F, (const ll_act *)LP, CUM, MODE, G, beam, V, k, 1, 0, LL_PAD, LL_BOS, LL_EOS);
    gpu->download(gpu, s_gpu, S, nk * sizeof(double));
    gpu->download(gpu, l_gpu, L, nk * sizeof(float));
    gpu->download(gpu, f_gpu, F, nk * sizeof(int32_t));
    CHECK_MSG(!memcmp(f_cpu, f_gpu, nk * sizeof(int32_t)) && !memcmp(s_cpu, s_gpu, nk * sizeof(double)) &&
                  !memcmp(l_cpu, l_gpu, nk * sizeof(float)),
              "beam_topk G=%d beam=%d V=%d k=%d differs from the CPU", G, beam, V, k);
    gpu->free(gpu, LP), gpu->free(gpu, CUM), gpu->free(gpu, S), gpu->free(gpu, MODE), gpu->free(gpu, L);
    gpu->free(gpu, F);
    free(logp), free(cum), free(mode), free(s_cpu), free(s_gpu), free(l_cpu), free(l_gpu), free(f_cpu), free(f_gpu);
}

/* Fails when gemm calls of `what` on gpu fell back from one fused cuBLASLt
 * matmul (LL_CUDA_EMU_LT_REFUSE forces that on purpose: then they must show). */
static void check_fallbacks(ll_backend *gpu, uint64_t since, const char *what) {
    const uint64_t n = ll_backend_gemm_fallbacks(gpu) - since;
    const char *forced = getenv("LL_CUDA_EMU_LT_REFUSE");
    if (forced && *forced)
        CHECK_MSG(n > 0, "%s: LL_CUDA_EMU_LT_REFUSE=%s, but no gemm call was counted as a fallback", what, forced);
    else
        CHECK_MSG(n == 0, "%s: %llu gemm calls fell back from one fused cuBLASLt matmul (LL_CUDA_EMU_VERBOSE=1: why)",
                  what, (unsigned long long)n);
}

/* The search above ran its steps as CUDA graphs: most of them replays of a
 * kept graph, and the same hypotheses, bit for bit, as the same search with
 * each step's ops queued one by one (decode_graphs 2: the same compaction). */
static void check_graphs(ll_model *mg, const int32_t *src, const int *len, int B, int S, const ll_search_opts *o,
                         const ll_nbest *og, const ll_graph_stats *g0, const ll_graph_stats *g1, const char *what) {
    const uint64_t launches = g1->launches - g0->launches, replays = g1->replays - g0->replays;
    fprintf(stderr, "%s: %llu steps as graphs, %llu of them replays (%llu captures, %llu updated in place)\n", what,
            (unsigned long long)launches, (unsigned long long)replays, (unsigned long long)(g1->captures - g0->captures),
            (unsigned long long)(g1->updates - g0->updates));
    CHECK_MSG(launches >= 8 && replays * 2 > launches, "%s: %llu of %llu graph launches were replays", what,
              (unsigned long long)replays, (unsigned long long)launches);
    ll_nbest *oe = ll_calloc(B, sizeof *oe);
    mg->decode_graphs = 2;
    ll_beam_search(mg, src, len, B, S, o, oe);
    mg->decode_graphs = 0;
    int same = 1;
    for (int b = 0; b < B; b++) {
        same &= oe[b].n == og[b].n;
        for (int i = 0; same && i < oe[b].n; i++)
            same &= oe[b].h[i].len == og[b].h[i].len && oe[b].h[i].score == og[b].h[i].score &&
                    !memcmp(oe[b].h[i].tokens, og[b].h[i].tokens, sizeof(int32_t) * oe[b].h[i].len) &&
                    !memcmp(oe[b].h[i].pos_scores, og[b].h[i].pos_scores, sizeof(float) * oe[b].h[i].len) &&
                    (!o->align || !memcmp(oe[b].h[i].align, og[b].h[i].align, sizeof(int32_t) * oe[b].h[i].len));
        ll_nbest_free(&oe[b]);
    }
    free(oe);
    CHECK_MSG(same, "%s: the steps as CUDA graphs give other hypotheses than the same ops run one by one", what);
}

/* Forced decoding on m's backend: each hypothesis of res scored as a reference (ll_score_ids, the
 * teacher-forced forward and pick_logp) gets the search's token scores, within tol. */
static void check_scores(ll_model *m, const int32_t *src, const int *len, int B, int S, const ll_search_opts *o,
                         const ll_nbest *res, double tol, const char *what) {
    const int32_t *ps[64], *pt[64];
    int psl[64], ptl[64], np = 0;
    float *pos[64];
    const ll_hypo *hy[64];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < res[b].n && np < 64; h++, np++) {
            ps[np] = src + b * S, psl[np] = len[b], hy[np] = &res[b].h[h];
            pt[np] = hy[np]->tokens, ptl[np] = hy[np]->len;
            pos[np] = malloc(sizeof(float) * ptl[np]);
        }
    const uint64_t f0 = ll_backend_gemm_fallbacks(m->be);
    ll_score_opts so = {.max_tokens = 4 * S, .bos = o->bos}; /* a few batches */
    ll_translate_stats st;
    ll_score_ids(m, ps, psl, pt, ptl, np, &so, pos, &st);
    char w[96];
    snprintf(w, sizeof w, "%s, scored as references", what);
    check_fallbacks(m->be, f0, w);
    double worst = 0;
    for (int i = 0; i < np; i++) {
        for (int t = 0; t < ptl[i]; t++) /* (the search's <unk> scores include --unkpen) */
            worst = fmax(worst, fabs(pos[i][t] - (pt[i][t] == LL_UNK ? o->unkpen : 0) - hy[i]->pos_scores[t]));
        free(pos[i]);
    }
    fprintf(stderr, "%s: %d pairs in %ld batches, worst token score difference from the search %.3g\n", w, np,
            st.batches, worst);
    CHECK_MSG(np >= B && st.batches > 1 && worst <= tol,
              "%s: %d pairs in %ld batches, worst token score difference from the search %.3g (tol %.3g)", w, np,
              st.batches, worst, tol);
}

/* The searches' model and sources: sentence b has 3 + b tokens (EOS last), right-padded to S. */
static const ll_hparams search_hp = {.C = 32, .F = 64, .H = 4, .Le = 2, .Ld = 2, .V = 97, .max_pos = 64,
                                     .share_all = 1, .tie_output = 1};
static void search_sources(int32_t *src, int *len, int B, int S, uint64_t seed) {
    ll_philox r;
    ll_philox_init(&r, seed, 3, 0);
    for (int b = 0; b < B; b++) {
        len[b] = 3 + b;
        for (int t = 0; t < S; t++)
            src[b * S + t] = t < len[b] - 1   ? 4 + (int)ll_philox_below(&r, b * S + t, search_hp.V - 4)
                             : t == len[b] - 1 ? LL_EOS
                                               : LL_PAD;
    }
}

/* Two n-best lists alike: the same hypotheses, scores within 1e-4. */
static int oc_same(const ll_nbest *a, const ll_nbest *b) {
    int same = a->n == b->n;
    for (int i = 0; same && i < a->n; i++)
        same = a->h[i].len == b->h[i].len && !memcmp(a->h[i].tokens, b->h[i].tokens, sizeof(int32_t) * a->h[i].len) &&
               fabs(a->h[i].score - b->h[i].score) < 1e-4;
    return same;
}

/* A whole search: same weights on both backends, same n-best lists (cpu NULL:
 * the search on gpu alone, checked for gemm fallbacks only); with align, the
 * hypotheses' alignments (attn_align) the same too, and target prefixes forced;
 * with diverse 1, diverse beam search (2 groups), 2 diverse siblings search
 * (their scores hold the penalties, so forced decoding does not reproduce them). */
static void test_search(ll_backend *cpu, ll_backend *gpu, int align, int diverse) {
    ll_model *mc = cpu ? ll_model_new(&search_hp, cpu) : NULL, *mg = ll_model_new(&search_hp, gpu);
    if (mc) ll_model_init(mc, 4);
    ll_model_init(mg, 4);
    enum { B = 5, S = 9 };
    int32_t src[B * S];
    int len[B];
    search_sources(src, len, B, S, 2);
    ll_search_opts o;
    ll_search_opts_default(&o);
    o.beam = 4;
    o.nbest = 2;
    o.max_len_a = 1; /* sentences end at different steps: lazy compaction, new batch sizes */
    o.max_len_b = 4;
    o.align = align;
    o.unkpen = align ? 0 : -4; /* without alignments, <unk> favoured (the add_col kernel; the scores hold it) */
    o.no_repeat_ngram = align ? 0 : 2; /* and no bigram twice (fill_at, the top-k after the step's graph) */
    o.diverse_groups = diverse == 1 ? 2 : 0, o.diverse_strength = 0.75;
    o.diversity_rate = diverse == 2 ? 0.6 : 0; /* siblings: beam_topk per row */
    /* with alignments, target prefixes too (0, 1 and 2 forced tokens): forced on the first row, their
     * log-probabilities read by pick_logp after the step (graph or not) */
    const int32_t p0[2] = {11, 40}, p2[1] = {7};
    const int32_t *pre[B] = {p0, NULL, p2, NULL, p0};
    const int plen[B] = {2, 0, 1, 0, 1};
    if (align) o.prefix = pre, o.prefix_len = plen;
    ll_nbest oc[B], og[B];
    memset(oc, 0, sizeof oc), memset(og, 0, sizeof og);
    const uint64_t f0 = ll_backend_gemm_fallbacks(gpu);
    ll_graph_stats g0, g1;
    gpu->graph_stats(gpu, &g0);
    ll_beam_search(mg, src, len, B, S, &o, og);
    gpu->graph_stats(gpu, &g1);
    char what[96];
    snprintf(what, sizeof what, "%s search (%s%s)", diverse == 1 ? "diverse beam" : diverse ? "diverse siblings" : "beam",
             ll_dtype_str(gpu->act),
             align ? ", alignments, prefixes" : ", <unk> favoured, no bigram twice");
    if (diverse) { /* the groups mattered: plain beam search finds other lists */
        ll_search_opts o2 = o;
        o2.diverse_groups = 0, o2.diversity_rate = 0;
        ll_nbest ob[B];
        ll_beam_search(mg, src, len, B, S, &o2, ob);
        int differ = 0;
        for (int b = 0; b < B; b++) differ += !oc_same(&ob[b], &og[b]), ll_nbest_free(&ob[b]);
        CHECK_MSG(differ > 0, "%s: the same n-best lists as plain beam search", what);
    }
    if (o.no_repeat_ngram) { /* the bans held, and they mattered: the search without them repeats */
        ll_search_opts o2 = o;
        o2.no_repeat_ngram = 0;
        ll_nbest ob[B];
        ll_beam_search(mg, src, len, B, S, &o2, ob);
        int rep[2] = {0, 0};
        for (int k = 0; k < 2; k++)
            for (int b = 0; b < B; b++)
                for (int i = 0; i < (k ? ob : og)[b].n; i++) {
                    const ll_hypo *y = &(k ? ob : og)[b].h[i];
                    for (int t = 0; t + 1 < y->len; t++)
                        for (int u = t + 1; u + 1 < y->len; u++)
                            rep[k] += y->tokens[t] == y->tokens[u] && y->tokens[t + 1] == y->tokens[u + 1];
                }
        for (int b = 0; b < B; b++) ll_nbest_free(&ob[b]);
        CHECK_MSG(rep[0] == 0 && rep[1] > 0, "%s: %d repeated bigrams with the bans, %d without", what, rep[0], rep[1]);
    }
    for (int b = 0; b < B && align; b++)
        for (int i = 0; i < og[b].n; i++)
            CHECK_MSG(!plen[b] || !memcmp(og[b].h[i].tokens, pre[b], sizeof(int32_t) * plen[b]),
                      "%s: sentence %d lacks its prefix", what, b);
    int unks = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < og[b].n; i++)
            for (int t = 0; t < og[b].h[i].len; t++) unks += og[b].h[i].tokens[t] == LL_UNK;
    CHECK_MSG(!o.unkpen || unks > 0, "%s: --unkpen %g brought no <unk>", what, o.unkpen);
    check_fallbacks(gpu, f0, what);
    check_graphs(mg, src, len, B, S, &o, og, &g0, &g1, what);
    if (!diverse) check_scores(mg, src, len, B, S, &o, og, gpu->act == LL_BF16 ? 0.1 : 1e-4, what);
    if (!mc) {
        int found = 1;
        for (int b = 0; b < B; b++) found &= og[b].n > 0, ll_nbest_free(&og[b]);
        CHECK_MSG(found, "%s: a sentence without a hypothesis", what);
        ll_model_free(mg);
        return;
    }
    ll_beam_search(mc, src, len, B, S, &o, oc);
    int same = 1;
    for (int b = 0; b < B; b++) {
        same &= oc[b].n == og[b].n;
        for (int i = 0; same && i < oc[b].n; i++)
            same &= oc[b].h[i].len == og[b].h[i].len &&
                    !memcmp(oc[b].h[i].tokens, og[b].h[i].tokens, sizeof(int32_t) * oc[b].h[i].len) &&
                    fabs(oc[b].h[i].score - og[b].h[i].score) < 1e-4 &&
                    (!align || !memcmp(oc[b].h[i].align, og[b].h[i].align, sizeof(int32_t) * oc[b].h[i].len));
        ll_nbest_free(&oc[b]), ll_nbest_free(&og[b]);
    }
    CHECK_MSG(same, "%s on CUDA gives other hypotheses than on the CPU", what);
    ll_model_free(mc), ll_model_free(mg);
}

/* Sampling (ll_sample_search): each backend draws from its step's log-probabilities (sample_draw,
 * a kernel on CUDA), with uniforms keyed by sentence, so the CUDA backend's fp32 steps draw the
 * same tokens as the CPU's (a difference needs a uniform within ~1e-6 of a boundary); all of
 * them, and topk, topp, temperature with --unkpen and no bigram twice (bans on the device). */
static void test_sampling(ll_backend *cpu, ll_backend *gpu) {
    ll_model *mc = ll_model_new(&search_hp, cpu), *mg = ll_model_new(&search_hp, gpu);
    ll_model_init(mc, 6);
    ll_model_init(mg, 6);
    enum { B = 4, S = 8 };
    int32_t src[B * S];
    int len[B];
    search_sources(src, len, B, S, 3);
    for (int c = 0; c < 2; c++) {
        ll_search_opts o;
        ll_search_opts_default(&o);
        o.sampling = 1, o.beam = 3, o.nbest = 3, o.max_len_b = 10, o.seed = 9;
        o.topk = c ? 5 : 0, o.topp = c ? 0.9 : 1.0, o.temperature = c ? 0.8 : 1.0;
        o.unkpen = c ? 1.5 : 0, o.no_repeat_ngram = c ? 2 : 0;
        ll_nbest oc[B], og[B];
        ll_beam_search(mg, src, len, B, S, &o, og);
        ll_beam_search(mc, src, len, B, S, &o, oc);
        int same = 1, tokens = 0;
        for (int b = 0; b < B; b++) {
            same &= oc[b].n == og[b].n && og[b].n == 3;
            for (int i = 0; same && i < oc[b].n; i++) {
                same &= oc[b].h[i].len == og[b].h[i].len &&
                        !memcmp(oc[b].h[i].tokens, og[b].h[i].tokens, sizeof(int32_t) * oc[b].h[i].len) &&
                        fabs(oc[b].h[i].score - og[b].h[i].score) < 1e-4;
                tokens += oc[b].h[i].len;
            }
            ll_nbest_free(&oc[b]), ll_nbest_free(&og[b]);
        }
        fprintf(stderr, "sampling (topk %d, topp %g, temperature %g, unkpen %g, no-repeat %d): %d tokens drawn on each "
                "backend\n", o.topk, o.topp, o.temperature, o.unkpen, o.no_repeat_ngram, tokens);
        CHECK_MSG(same, "sampling (topk %d, temperature %g) on CUDA draws other tokens than on the CPU", o.topk,
                  o.temperature);
    }
    ll_model_free(mc), ll_model_free(mg);
}

/* An ensemble of two models (ll_model_ensemble): each step mixes their log-probabilities with the
 * CUDA ensemble_mix kernel; the same hypotheses as on the CPU, and forced decoding with the
 * ensemble gives the search's token scores (cpu NULL: on gpu alone, bf16). */
static void test_ensemble(ll_backend *cpu, ll_backend *gpu) {
    enum { B = 5, S = 9 };
    ll_nbest out[2][B];
    int32_t src[B * S];
    int len[B];
    search_sources(src, len, B, S, 5);
    ll_search_opts o;
    ll_search_opts_default(&o);
    o.beam = 4, o.nbest = 2, o.max_len_a = 1, o.max_len_b = 4, o.align = 1; /* (the models' attention averaged) */
    char what[64];
    snprintf(what, sizeof what, "ensemble beam search (%s)", ll_dtype_str(gpu->act));
    for (int side = 0; side < 2; side++) {
        ll_backend *be = side ? gpu : cpu;
        if (!be) continue;
        ll_model *m = ll_model_new(&search_hp, be), *e = ll_model_new(&search_hp, be);
        ll_model_init(m, 4);
        ll_model_init(e, 7);
        ll_model_ensemble(m, &e, 1, NULL);
        const uint64_t f0 = ll_backend_gemm_fallbacks(be);
        ll_graph_stats g0, g1;
        if (side) gpu->graph_stats(gpu, &g0);
        ll_beam_search(m, src, len, B, S, &o, out[side]);
        if (side) { /* each model's steps as graphs, the same hypotheses as op by op */
            gpu->graph_stats(gpu, &g1);
            check_graphs(m, src, len, B, S, &o, out[side], &g0, &g1, what);
            check_fallbacks(gpu, f0, what);
            check_scores(m, src, len, B, S, &o, out[side], gpu->act == LL_BF16 ? 0.1 : 1e-4, what);
        }
        ll_model_free(m); /* (and e) */
    }
    int same = 1, found = 1;
    for (int b = 0; b < B; b++) {
        found &= out[1][b].n == 2;
        same &= !cpu || oc_same(&out[0][b], &out[1][b]);
        for (int i = 0; same && cpu && i < out[0][b].n; i++)
            same = !memcmp(out[0][b].h[i].align, out[1][b].h[i].align, sizeof(int32_t) * out[0][b].h[i].len);
        if (cpu) ll_nbest_free(&out[0][b]);
        ll_nbest_free(&out[1][b]);
    }
    CHECK_MSG(found, "%s: a sentence without its 2 hypotheses", what);
    CHECK_MSG(same, "%s on CUDA gives other hypotheses (or alignments) than on the CPU", what);
}

/* A vocabulary shortlist (lldecode --shortlist): the output projection over the listed rows
 * (gathered by the embedding kernel), log-softmax over them, expand_cols to the full rows; beam
 * search and sampling find the same lists on both backends, as graphs and op by op, every
 * token listed (cpu NULL: on gpu alone, bf16). */
static void test_shortlist(ll_backend *cpu, ll_backend *gpu) {
    enum { B = 5, S = 9 };
    const int V = search_hp.V;
    ll_shortlist *sl = ll_shortlist_new(V);
    int32_t fixed[24], key, tgt[3];
    int nf = 0;
    for (int v = 4; v < V; v += 5) fixed[nf++] = v;
    CHECK(ll_shortlist_add(sl, NULL, 0, fixed, nf) == 0);
    for (key = 4; key < V; key++) {
        for (int j = 0; j < 3; j++) tgt[j] = 4 + (key * 7 + j * 13) % (V - 4);
        CHECK(ll_shortlist_add(sl, &key, 1, tgt, 3) == 0);
    }
    int32_t src[B * S], *cand = ll_malloc(sizeof(int32_t) * V);
    int len[B];
    search_sources(src, len, B, S, 7);
    const int K = ll_shortlist_candidates(sl, src, len, B, S, NULL, NULL, cand);
    uint8_t listed[128] = {0};
    for (int j = 0; j < K; j++) listed[cand[j]] = 1;
    for (int sampling = 0; sampling < 2; sampling++) {
        ll_search_opts o;
        ll_search_opts_default(&o);
        o.beam = 4, o.nbest = 2, o.max_len_b = 8, o.shortlist = sl, o.sampling = sampling, o.seed = 5;
        char what[96];
        snprintf(what, sizeof what, "%s with a shortlist of %d of %d tokens (%s)", sampling ? "sampling" : "beam search",
                 K, V, ll_dtype_str(gpu->act));
        ll_nbest out[2][B];
        for (int side = 0; side < 2; side++) {
            ll_backend *be = side ? gpu : cpu;
            if (!be) continue;
            ll_model *m = ll_model_new(&search_hp, be);
            ll_model_init(m, 8);
            const uint64_t f0 = ll_backend_gemm_fallbacks(be);
            ll_graph_stats g0, g1;
            if (side) gpu->graph_stats(gpu, &g0);
            ll_beam_search(m, src, len, B, S, &o, out[side]);
            if (side) {
                gpu->graph_stats(gpu, &g1);
                if (!sampling) check_graphs(m, src, len, B, S, &o, out[side], &g0, &g1, what);
                check_fallbacks(gpu, f0, what);
            }
            ll_model_free(m);
        }
        int same = 1, unlisted = 0;
        for (int b = 0; b < B; b++) {
            same &= !cpu || oc_same(&out[0][b], &out[1][b]);
            for (int i = 0; i < out[1][b].n; i++)
                for (int t = 0; t < out[1][b].h[i].len; t++) unlisted += !listed[out[1][b].h[i].tokens[t]];
            if (cpu) ll_nbest_free(&out[0][b]);
            ll_nbest_free(&out[1][b]);
        }
        fprintf(stderr, "%s: %s\n", what, !cpu ? "searched on the GPU alone" : same ? "the same lists on both backends" : "DIFFERENT lists");
        CHECK_MSG(same, "%s on CUDA gives other hypotheses than on the CPU", what);
        CHECK_MSG(unlisted == 0, "%s: %d tokens not in the shortlist", what, unlisted);
    }
    free(cand);
    ll_shortlist_free(sl);
}

int main(void) {
    gpu_or_skip();
    ll_backend *cpu = ll_backend_cpu(), *gpu = ll_backend_cuda(0);
    CHECK_MSG(gpu != NULL, "ll_backend_cuda(0): %s", ll_errbuf());
    if (!gpu) return tu_finish("gpu_test_decode_cuda");
    test_rows(cpu, gpu);
    test_topk(cpu, gpu, 6, 5, 32003, 10);
    test_topk(cpu, gpu, 3, 1, 1000, 1);
    test_topk(cpu, gpu, 2, 32, 301, 64);
    const char *miss = ll_backend_missing(gpu);
    CHECK_MSG(!miss, "the CUDA backend lacks '%s'", miss ? miss : "");
    if (!miss)
        test_search(cpu, gpu, 0, 0), test_search(cpu, gpu, 1, 0), test_search(cpu, gpu, 0, 1), test_search(cpu, gpu, 0, 2),
            test_sampling(cpu, gpu), test_ensemble(cpu, gpu), test_shortlist(cpu, gpu);
    ll_backend *b16 = ll_backend_cuda_precision(0, LL_BF16);
    CHECK_MSG(b16 != NULL, "ll_backend_cuda_precision(0, bf16): %s", ll_errbuf());
    if (b16 && !ll_backend_missing(b16)) {
        test_search(NULL, b16, 1, 0), test_ensemble(NULL, b16), test_shortlist(NULL, b16);
        if (!getenv("LL_GPU_TEST_SMALL")) /* (the diverse searches' bf16 kernels: the ops test has them) */
            test_search(NULL, b16, 0, 1), test_search(NULL, b16, 0, 2);
    }
    return tu_finish("gpu_test_decode_cuda");
}
