/* The beam tests' toy model, random sources, teacher-forced reference scores and hypothesis
 * comparison (test_beam.c, test_sample.c, test_diverse.c), in the double build (grad_) and
 * fp32 (f32_). */
#ifndef LL_BEAM_TOY_H
#define LL_BEAM_TOY_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/decode.h"
#include "ll/model.h"

/* Score tolerance: double build, rounding only; fp32 build (f32_test_beam),
 * the fast decoding paths sum in another order than the forced reference. */
#define TOL (sizeof(real) == 8 ? 1e-9 : 2e-5)
#define PTOL (sizeof(real) == 8 ? 1e-6 : 2e-5)

static inline ll_model *toy(int V, int max_pos, uint64_t seed) {
    ll_hparams hp = {.C = 8, .F = 16, .H = 2, .Le = 1, .Ld = 2, .V = V, .max_pos = max_pos, .share_all = 1,
                     .tie_output = 1};
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, seed);
    /* sharpen the output distribution so that searches disagree with greedy */
    for (size_t i = 0; i < (size_t)V * 8; i++) m->params[m->out_proj + i] *= 2.5;
    return m;
}

/* A random source of length sl (EOS included) over ids 4..V-1. */
static inline void rand_src(int32_t *s, int sl, int V, uint64_t seed) {
    ll_philox r;
    ll_philox_init(&r, seed, 7, 0);
    for (int t = 0; t < sl - 1; t++) s[t] = 4 + (int)ll_philox_below(&r, t, V - 4);
    s[sl - 1] = LL_EOS;
}

/* B random sources in rows of 7 (padded): sentence i has min + (i * len[0] + len[1]) % len[2]
 * tokens (EOS included), drawn with seed key + i. */
static inline void rand_batch(int32_t *src, int *sl, int B, int V, int min, const int len[3], uint64_t key) {
    for (int i = 0; i < B; i++) {
        sl[i] = min + (i * len[0] + len[1]) % len[2];
        rand_src(src + i * 7, sl[i], V, key + i);
        for (int t = sl[i]; t < 7; t++) src[i * 7 + t] = LL_PAD;
    }
}

static inline int same_hypo(const ll_hypo *a, const ll_hypo *b, double tol) {
    if (a->len != b->len || memcmp(a->tokens, b->tokens, sizeof(int32_t) * a->len)) return 0;
    if (fabs(a->score - b->score) > tol) return 0;
    for (int t = 0; t < a->len; t++)
        if (fabs(a->pos_scores[t] - b->pos_scores[t]) > PTOL) return 0; /* stored as float */
    return 1;
}

/* Log-probs of n target sequences ys[i] (lens[i] tokens) after `bos`, all
 * teacher-forced in one batch: lp[i][t] = log p(ys[i][t] | bos ys[i][<t]).
 * With want_next: also the distribution after the full sequence (next[i*V..]). */
static inline void forced(ll_model *m, const int32_t *src, int sl, int32_t bos, int32_t *const *ys, const int *lens, int n,
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

/* fairseq's masks on a step's log-probabilities next[rows * V]: pad, BOS and NaN -inf; at max_len
 * everything but EOS; EOS before min_len (the references of test_beam.c and test_diverse.c). */
static inline void fairseq_masks(double *next, int rows, int V, int step, int max_len, int min_len) {
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < V; v++) {
            double *x = &next[r * V + v];
            if (isnan(*x) || v == LL_PAD || v == LL_BOS) *x = -INFINITY;
            if (step >= max_len && v != LL_EOS) *x = -INFINITY;
            if (step < min_len && v == LL_EOS) *x = -INFINITY;
        }
}

#endif
