/* Vocabulary shortlists (lldecode --shortlist):
 *   - a map is read against a real sentencepiece model: the batch's candidates are BOS, EOS,
 *     UNK, the empty n-gram's tokens, every matching unigram and bigram rule (rules of one
 *     n-gram add up), the prefixes, never pad; bad lines fail naming the file and line;
 *   - a decoding step over a shortlist gives each listed token the full step's log-probability
 *     renormalized over the list, -inf to the rest: packed fp32 weights, plain gemm
 *     (LL_DECODE_PACKED=0), int8 weights, bf16 activations, and an ensemble (each model
 *     normalized over the list, then mixed);
 *   - beam search and sampling with a shortlist produce listed tokens only, scored as the
 *     renormalized forced log-probabilities. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck/beam_toy.h"
#include "ll/core.h"
#include "ll/data.h"
#include "ll/decode.h"
#include "ll/shortlist.h"
#include "util/testutil.h"

static ll_spm *spm;
static const char *tmp;

/* Piece k of the test vocabulary's ordinary pieces (id 4 + k), and its id. */
static const char *P(int k) { return ll_spm_id_piece(spm, 4 + k); }
static int piece_id(const char *p) {
    const int id = ll_spm_piece_id(spm, p);
    CHECK_MSG(id >= 0, "piece '%s' missing from the test vocabulary", p);
    return id;
}

/* toy()'s model on the bf16 CPU backend (the same parameters) */
static ll_model *toy_bf16(int V, int max_pos, uint64_t seed) {
    ll_model *f = toy(V, max_pos, seed);
    ll_model *m = ll_model_new(&f->hp, ll_backend_cpu_precision(LL_BF16));
    memcpy(m->params, f->params, sizeof(real) * m->n_params);
    ll_model_refresh_weights(m);
    ll_model_free(f);
    return m;
}

/* A map's candidates for one source sentence of pieces (NULL-terminated), without a prefix. */
static int cands(const ll_shortlist *s, const char *const *src, const int32_t *prefix, int plen, int32_t *out) {
    int32_t ids[16];
    int n = 0;
    while (src[n]) ids[n] = piece_id(src[n]), n++;
    ids[n++] = LL_EOS;
    const int32_t *const pre[1] = {prefix};
    return ll_shortlist_candidates(s, ids, &n, 1, n, prefix ? pre : NULL, &plen, out);
}

static int has(const int32_t *c, int K, int id) {
    for (int j = 0; j < K; j++)
        if (c[j] == id) return 1;
    return 0;
}

static void test_load(void) {
    char text[1024];
    /* P(0), P(1) always; P(2) -> P(10) P(11) (CRLF); an empty line; the bigram P(2) P(3) -> P(12);
     * P(4) -> P(13); P(2) again -> P(14), P(10) (two spaces: one); P(5) -> nothing */
    snprintf(text, sizeof text, "\t%s %s\n%s\t%s %s\r\n\n%s %s\t%s\n%s\t%s\n%s\t%s  %s\n%s\t\n", P(0), P(1), P(2), P(10),
             P(11), P(2), P(3), P(12), P(4), P(13), P(2), P(14), P(10), P(5)); /* P(5): a rule without targets */
    char *path = tu_write(tmp, "map.txt", text);
    ll_shortlist *s = ll_shortlist_load(path, spm);
    CHECK_MSG(s != NULL, "load: %s", ll_errbuf());
    if (!s) return;
    CHECK(ll_shortlist_rules(s) == 5 && ll_shortlist_fixed(s) == 2);
    const int V = ll_spm_vocab_size(spm);
    int32_t *c = malloc(sizeof(int32_t) * V);
    const char *s1[] = {P(2), P(3), P(4), P(5), NULL};
    int K = cands(s, s1, NULL, 0, c);
    const int want[] = {0, 1, 10, 11, 12, 13, 14};
    CHECK_MSG(K == 3 + 7, "candidates of P2 P3 P4: %d, want 10", K);
    for (int i = 0; i < 7; i++) CHECK_MSG(has(c, K, 4 + want[i]), "P(%d) missing", want[i]);
    CHECK(has(c, K, LL_BOS) && has(c, K, LL_EOS) && has(c, K, LL_UNK) && !has(c, K, LL_PAD));
    for (int j = 1; j < K; j++) CHECK_MSG(c[j] > c[j - 1], "candidates not ascending at %d", j);
    const char *s2[] = {P(3), P(2), NULL}; /* no bigram P(2) P(3) here */
    K = cands(s, s2, NULL, 0, c);
    CHECK_MSG(!has(c, K, 4 + 12) && has(c, K, 4 + 10) && K == 3 + 5, "P3 P2: %d candidates, want 8 without the bigram's", K);
    const int32_t pre[2] = {4 + 20, LL_PAD};
    K = cands(s, s2, pre, 2, c);
    CHECK_MSG(has(c, K, pre[0]) && !has(c, K, LL_PAD) && K == 9, "a prefix's tokens: %d candidates", K);
    free(c);
    ll_shortlist_free(s);
    free(path);

    /* bad maps: one line naming the file and the line */
    char b0[128], b1[128], b2[256];
    snprintf(b0, sizeof b0, "%s\t%s\n%s %s\n", P(2), P(10), P(4), P(13));
    snprintf(b1, sizeof b1, "%s\t%s\n\n%s\t%sXQZ\n", P(2), P(10), P(2), P(10));
    snprintf(b2, sizeof b2, "%s %s %s %s %s %s %s %s %s\t%s\n", P(0), P(0), P(0), P(0), P(0), P(0), P(0), P(0), P(0), P(1));
    const struct {
        const char *text, *want;
    } bad[] = {{b0, "map_bad.txt:2: no tab"}, {b1, "map_bad.txt:3: '"}, {b2, "map_bad.txt:1: a source n-gram of 9 pieces"}};
    for (int i = 0; i < 3; i++) {
        char *p = tu_write(tmp, "map_bad.txt", bad[i].text);
        ll_shortlist *b = ll_shortlist_load(p, spm);
        CHECK_MSG(!b && strstr(ll_errbuf(), bad[i].want), "bad map %d: got '%s', want '%s'", i,
                  b ? "(loaded)" : ll_errbuf(), bad[i].want);
        ll_shortlist_free(b);
        free(p);
    }
    CHECK(!ll_shortlist_load("/nonexistent/map", spm));
    /* built in code: ids outside the vocabulary and n-grams too long refused */
    ll_shortlist *b = ll_shortlist_new(V);
    const int32_t ok[2] = {5, 6}, out_of[1] = {V}, long9[9] = {4, 4, 4, 4, 4, 4, 4, 4, 4};
    CHECK(ll_shortlist_add(b, ok, 2, ok, 2) == 0 && ll_shortlist_add(b, NULL, 0, ok, 1) == 0);
    CHECK(ll_shortlist_add(b, ok, 1, out_of, 1) == -1 && strstr(ll_errbuf(), "outside the vocabulary"));
    CHECK(ll_shortlist_add(b, out_of, 1, ok, 1) == -1);
    CHECK(ll_shortlist_add(b, long9, 9, ok, 1) == -1 && strstr(ll_errbuf(), "9 pieces"));
    CHECK(ll_shortlist_rules(b) == 1 && ll_shortlist_fixed(b) == 1);
    ll_shortlist_free(b);
}

/* log-sum-exp of full[ids] */
static double lse(const real *full, const int32_t *ids, int K) {
    double mx = -INFINITY, s = 0;
    for (int j = 0; j < K; j++) mx = fmax(mx, full[ids[j]]);
    for (int j = 0; j < K; j++) s += exp(full[ids[j]] - mx);
    return mx + log(s);
}

/* Run the same teacher-forced steps with and without the shortlist and compare. */
static double step_error(ll_model *m, const int32_t *ids, int K, int *bad_rest) {
    const int V = m->hp.V, B = 2, S = 5, beam = 2, N = B * beam, T = 6;
    int32_t src[2 * 5];
    int sl[2] = {5, 4};
    for (int i = 0; i < B * S; i++) src[i] = 4 + (i * 7) % (V - 4);
    src[4] = LL_EOS, src[8] = LL_EOS, src[9] = LL_PAD;
    real *full = malloc(sizeof(real) * N * V), *part = malloc(sizeof(real) * N * V);
    int32_t prev[4];
    double worst = 0;
    *bad_rest = 0;
    for (int t = 0; t < 4; t++) {
        /* each run replays the same inputs from the start (a model decodes one batch at a time) */
        for (int pass = 0; pass < 2; pass++) {
            ll_dec_state *d = ll_decode_begin(m, src, sl, B, S, beam, T);
            if (pass) ll_decode_shortlist(m, d, ids, K);
            for (int u = 0; u <= t; u++) {
                for (int n = 0; n < N; n++) prev[n] = u == 0 ? LL_EOS : 4 + (n * 5 + u * 3) % (V - 4);
                ll_decode_step(m, d, prev, pass ? part : full);
            }
            ll_decode_end(m, d);
        }
        for (int n = 0; n < N; n++) {
            const real *f = full + (size_t)n * V, *p = part + (size_t)n * V;
            const double z = lse(f, ids, K);
            for (int v = 0, j = 0; v < V; v++) {
                if (j < K && ids[j] == v) {
                    worst = fmax(worst, fabs(p[v] - (f[v] - z)));
                    j++;
                } else if (p[v] != -INFINITY) {
                    (*bad_rest)++;
                }
            }
        }
    }
    free(full), free(part);
    return worst;
}

static void test_steps(void) {
    const int V = ll_spm_vocab_size(spm);
    int32_t ids[64];
    int K = 0;
    for (int v = 0; v < V; v++)
        if (v != LL_PAD && (v < 4 || v % 3 == 1)) ids[K++] = v;
    struct {
        const char *label;
        int int8, bf16, unpacked;
        double tol;
    } cases[] = {{"fp32 packed", 0, 0, 0, 2e-5}, {"fp32 gemm", 0, 0, 1, 2e-5}, {"int8", 1, 0, 0, 2e-5},
                 {"bf16", 0, 1, 0, 0.1}}; /* (bf16: two roundings of values near -4, 1/32 each; unnormalized would be ~1 off) */
    for (int c = 0; c < 4; c++) {
        if (cases[c].unpacked) setenv("LL_DECODE_PACKED", "0", 1);
        ll_model *m = cases[c].bf16 ? toy_bf16(V, 32, 11) : toy(V, 32, 11);
        m->decode_int8 = cases[c].int8;
        int bad;
        const double e = step_error(m, ids, K, &bad);
        fprintf(stderr, "%s: max |listed - renormalized full| = %.3g\n", cases[c].label, e);
        CHECK_MSG(e < cases[c].tol, "%s: a listed token's log-probability off by %g", cases[c].label, e);
        CHECK_MSG(bad == 0, "%s: %d unlisted tokens not -inf", cases[c].label, bad);
        ll_model_free(m);
        unsetenv("LL_DECODE_PACKED");
    }
}

/* An ensemble: each member normalized over the list, their probabilities averaged. */
static void test_ensemble(void) {
    const int V = ll_spm_vocab_size(spm), B = 1, S = 4, N = 1;
    int32_t ids[64], src[4] = {9, 17, 30, LL_EOS}, prev = LL_EOS;
    int K = 0, sl = S;
    for (int v = 0; v < V; v++)
        if (v != LL_PAD && (v < 4 || v % 2 == 0)) ids[K++] = v;
    real *l0 = malloc(sizeof(real) * V), *l1 = malloc(sizeof(real) * V), *le = malloc(sizeof(real) * V);
    ll_model *m0 = toy(V, 32, 21), *m1 = toy(V, 32, 22);
    for (int j = 0; j < 2; j++) {
        ll_model *m = j ? m1 : m0;
        ll_dec_state *d = ll_decode_begin(m, src, &sl, B, S, N, 3);
        ll_decode_step(m, d, &prev, j ? l1 : l0);
        ll_decode_end(m, d);
    }
    ll_model *e = toy(V, 32, 21), *e1 = toy(V, 32, 22);
    ll_model_ensemble(e, &e1, 1, NULL);
    ll_dec_state *d = ll_decode_begin(e, src, &sl, B, S, N, 3);
    ll_decode_shortlist(e, d, ids, K);
    ll_decode_step(e, d, &prev, le);
    ll_decode_end(e, d);
    const double z0 = lse(l0, ids, K), z1 = lse(l1, ids, K);
    double worst = 0;
    for (int j = 0; j < K; j++) {
        const int v = ids[j];
        const double want = log(0.5 * exp(l0[v] - z0) + 0.5 * exp(l1[v] - z1));
        worst = fmax(worst, fabs(le[v] - want));
    }
    CHECK_MSG(worst < 2e-5, "ensemble with a shortlist: off by %g", worst);
    ll_model_free(e), ll_model_free(m0), ll_model_free(m1);
    free(l0), free(l1), free(le);
}

/* Searches over the list: listed tokens only, each scored as the renormalized forced log-probability. */
static void test_search(void) {
    char text[256];
    snprintf(text, sizeof text, "\t%s %s %s\n%s\t%s %s %s\n%s\t%s %s %s\n", P(0), P(1), P(2), P(5), P(20), P(21),
             P(22), P(6), P(22), P(23), P(24));
    char *path = tu_write(tmp, "map_search.txt", text);
    ll_shortlist *s = ll_shortlist_load(path, spm);
    CHECK_MSG(s != NULL, "load: %s", ll_errbuf());
    if (!s) return;
    const int V = ll_spm_vocab_size(spm), B = 2, S = 4;
    int32_t src[8] = {4 + 5, 4 + 30, LL_EOS, LL_PAD, 4 + 6, 9, 12, LL_EOS};
    int sl[2] = {3, 4};
    int32_t *c = malloc(sizeof(int32_t) * V);
    const int K = ll_shortlist_candidates(s, src, sl, B, S, NULL, NULL, c);
    ll_model *m = toy(V, 32, 5);
    for (int sampling = 0; sampling < 2; sampling++) {
        ll_search_opts o;
        ll_search_opts_default(&o);
        o.beam = 4, o.nbest = 4, o.max_len_b = 6, o.shortlist = s, o.sampling = sampling, o.seed = 3;
        ll_nbest out[2];
        ll_beam_search(m, src, sl, B, S, &o, out);
        int n_h = 0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < out[b].n; h++) {
                const ll_hypo *y = &out[b].h[h];
                n_h++;
                for (int t = 0; t < y->len; t++)
                    CHECK_MSG(has(c, K, y->tokens[t]), "%s: token %d of a hypothesis is not listed",
                              sampling ? "sampling" : "beam", y->tokens[t]);
                /* the forced reference: each step's full log-probabilities renormalized over the list */
                double *lp[1], *next = malloc(sizeof(double) * V);
                real *row = malloc(sizeof(real) * V);
                for (int t = 0; t < y->len; t++) {
                    double dummy[64];
                    lp[0] = dummy;
                    int32_t *ys[1] = {y->tokens};
                    forced(m, src + b * S, sl[b], LL_EOS, ys, &t, 1, lp, next);
                    for (int v = 0; v < V; v++) row[v] = (real)next[v];
                    const double want = next[y->tokens[t]] - lse(row, c, K);
                    CHECK_MSG(fabs(y->pos_scores[t] - want) < 2e-5, "%s: step %d scored %g, want %g",
                              sampling ? "sampling" : "beam", t, y->pos_scores[t], want);
                }
                free(next), free(row);
            }
        CHECK(n_h == (sampling ? 8 : 8));
        for (int b = 0; b < B; b++) ll_nbest_free(&out[b]);
    }
    ll_model_free(m);
    ll_shortlist_free(s);
    free(c), free(path);
}

int main(void) {
    ll_set_threads(2);
    tmp = tu_tmpdir();
    /* 400 lines of words made of 12 syllables: enough distinct pieces for a 64-piece model */
    static const char *syl[] = {"ka", "lo", "mi", "ne", "pu", "ra", "so", "ti", "vu", "xe", "yo", "zu"};
    char *corpus = calloc(1, 64 * 1024);
    uint32_t x = 12345;
    for (int line = 0; line < 400; line++) {
        for (int w = 0; w < 3 + line % 4; w++) {
            if (w) strcat(corpus, " ");
            for (int k = 0; k < 1 + w % 3; k++) {
                x = x * 1103515245u + 12345u;
                strcat(corpus, syl[(x >> 16) % 12]);
            }
        }
        strcat(corpus, "\n");
    }
    char *txt = tu_write(tmp, "corpus.txt", corpus);
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s/spm", tmp);
    const char *files[1] = {txt};
    free(corpus);
    if (ll_spm_train(files, 1, prefix, 64, NULL, 0, 7) != 0) {
        fprintf(stderr, "spm: %s\n", ll_errbuf());
        return 1;
    }
    char model[600];
    snprintf(model, sizeof model, "%s.model", prefix);
    spm = ll_spm_load(model);
    if (!spm) return 1;
    test_load();
    test_steps();
    test_ensemble();
    test_search();
    ll_spm_free(spm);
    free(txt);
    return tu_finish("test_shortlist");
}
