/* The bf16 CPU backend (train.precision: bf16) against the fp32 one.
 *
 * 1. Every op that takes activations, on the same inputs (random values
 *    rounded to bf16 first, so both backends see identical numbers): the bf16
 *    result must be within OP_TOL relative error (max |bf16 - fp32| / max
 *    |fp32|) of the fp32 result.  bf16 keeps 8 significant bits, so rounding
 *    one stored output costs at most 2^-9 ~ 0.2%; OP_TOL = 1e-2 leaves room for
 *    a rounded intermediate (attention's out, layer norm's input) and catches
 *    any wrong operand or stride, which gives errors of order 1.
 * 2. A full training step (forward, backward) of small models of every
 *    method -- pre-norm, post-norm + DLCL, latent depth, CAD + DDR + ALD,
 *    ReZero + LayerDrop -- in bf16 and fp32 from the same initial weights:
 *    the loss within STEP_LOSS_TOL relative, the weight gradient with cosine
 *    similarity > STEP_COS and relative L2 error < STEP_L2.
 * 3. Adam keeps the bf16 weight copy equal to the rounded fp32 master, bit
 *    for bit, and leaves the fp32 backend's (aliased) copy alone.
 * 4. gemm's bias in bf16 (the model's, from the weight copy) gives the same
 *    bits as the same values in fp32; the encoder-output gradient of a
 *    64-layer decoder (with DDR: 128 terms) is summed in fp32, not bf16. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gradcheck/gradcheck.h"
#include "ll/latent.h"
#include "ll/model.h"
#include "ll/train.h"
#include "util/testutil.h"

#define OP_TOL 1e-2
#define STEP_LOSS_TOL 1e-2
#define STEP_COS 0.99
#define STEP_L2 0.1

static ll_backend *F, *H;

/* ---- paired buffers: fp32 values that are exactly representable in bf16 ---- */
typedef struct {
    float *f;
    uint16_t *h;
    size_t n;
} pair;

static pair mk(size_t n, uint64_t seed, float lo, float hi) {
    pair p = {ll_aligned_alloc(n * sizeof(float) + 64), ll_aligned_alloc(n * sizeof(uint16_t) + 64), n};
    ll_philox r;
    ll_philox_init(&r, seed, 77, 0);
    for (size_t i = 0; i < n; i++) {
        p.h[i] = ll_f32_to_bf16(lo + (hi - lo) * ll_philox_uniform(&r, i));
        p.f[i] = ll_bf16_to_f32(p.h[i]);
    }
    return p;
}
static pair zeros(size_t n) { return mk(n, 0, 0, 0); }
static void pfree(pair *p) { free(p->f), free(p->h); }
#define AF(p) ((ll_act *)(p).f)
#define AH(p) ((ll_act *)(p).h)

/* max |bf16 - fp32| / max |fp32| over elements [0, n) (stride: rows of cols) */
static double rel(const pair *p, size_t rows, size_t cols, size_t ld) {
    double d = 0, s = 0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            const size_t i = r * ld + c;
            d = fmax(d, fabs((double)ll_bf16_to_f32(p->h[i]) - p->f[i]));
            s = fmax(s, fabs((double)p->f[i]));
        }
    return s > 0 ? d / s : d;
}
static double rel1(const pair *p) { return rel(p, 1, p->n, p->n); }
static double relv(const float *a, const float *b, size_t n) { /* fp32 outputs of both */
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i])), s = fmax(s, fabs((double)b[i]));
    return s > 0 ? d / s : d;
}
#define OP_OK(name, e) CHECK_MSG((e) < OP_TOL, "%s: bf16 vs fp32 relative error %.3g >= %g", name, (double)(e), OP_TOL)

static void test_convert(void) {
    /* round to nearest even at the halfway points, NaN stays NaN */
    CHECK(ll_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(ll_f32_to_bf16(1.00390625f) == 0x3f80);       /* 1 + 2^-8: halfway, even is 1.0 */
    CHECK(ll_f32_to_bf16(1.01171875f) == 0x3f82);       /* 1 + 3 * 2^-8: halfway, even is up */
    CHECK(ll_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81); /* above halfway */
    CHECK(isnan(ll_bf16_to_f32(ll_f32_to_bf16(NAN))));
    CHECK(isinf(ll_bf16_to_f32(ll_f32_to_bf16(INFINITY))));
    const size_t n = 100000; /* the op (parallel) equals the scalar rule */
    pair p = mk(n, 1, -3, 3);
    float *x = malloc(n * sizeof(float));
    uint16_t *h = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) x[i] = p.f[i] * 1.001f;
    H->convert(H, h, LL_BF16, x, LL_F32, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != ll_f32_to_bf16(x[i]);
    CHECK_MSG(bad == 0, "convert: %zu of %zu differ from the scalar rounding", bad, n);
    free(x), free(h), pfree(&p);
}

static void test_gemm(void) {
    for (int epi = 0; epi <= LL_EPI_BIAS_RELU; epi++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const int M = 37, N = 29, K = 53, lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                pair A = mk((size_t)(ta ? K : M) * lda, 2, -1, 1), B = mk((size_t)(tb ? N : K) * ldb, 3, -1, 1);
                pair C = mk((size_t)M * ldc, 4, -1, 1), bias = mk(N, 5, -1, 1);
                for (int beta = 0; beta < 2; beta++) {
                    ll_gemm_desc g = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .alpha = 0.5f,
                                      .beta = (float)beta, .a_type = LL_F32, .lda = lda, .b_type = LL_F32, .ldb = ldb,
                                      .c_type = LL_F32, .ldc = ldc, .epi = epi, .bias = bias.f,
                                      .bias_type = LL_F32};
                    g.A = A.f, g.B = B.f, g.C = C.f;
                    F->gemm(F, &g);
                    /* the bf16 backend with the bias in bf16 (the model's, from the weight copy) and
                     * in fp32: the same values widen exactly, so the same bits */
                    uint16_t *c0 = ll_malloc(sizeof(uint16_t) * (size_t)M * ldc);
                    memcpy(c0, C.h, sizeof(uint16_t) * (size_t)M * ldc);
                    g.A = A.h, g.B = B.h, g.C = c0, g.a_type = g.b_type = g.c_type = LL_BF16;
                    H->gemm(H, &g);
                    g.C = C.h, g.bias = bias.h, g.bias_type = LL_BF16;
                    H->gemm(H, &g);
                    char name[64];
                    snprintf(name, sizeof name, "gemm epi %d ta %d tb %d beta %d", epi, ta, tb, beta);
                    OP_OK(name, rel(&C, M, N, ldc));
                    CHECK_MSG(!memcmp(c0, C.h, sizeof(uint16_t) * (size_t)M * ldc), "%s: a bf16 bias gives other bits "
                              "than the same values in fp32", name);
                    free(c0);
                    /* padding columns untouched */
                    int pad_ok = 1;
                    for (int i = 0; i < M; i++)
                        for (int j = N; j < ldc; j++)
                            pad_ok &= C.h[(size_t)i * ldc + j] == ll_f32_to_bf16(C.f[(size_t)i * ldc + j]);
                    CHECK_MSG(pad_ok, "%s: padding written", name);
                }
                pfree(&A), pfree(&B), pfree(&C), pfree(&bias);
            }
    /* weight gradient: bf16 A, B -> fp32 C (beta 1) with the bias gradient epilogue */
    const int M = 24, N = 40, K = 300;
    pair A = mk((size_t)K * M, 6, -1, 1), B = mk((size_t)K * N, 7, -1, 1);
    float *c32 = calloc((size_t)M * N, sizeof(float)), *c16 = calloc((size_t)M * N, sizeof(float));
    float *b32 = calloc(M, sizeof(float)), *b16 = calloc(M, sizeof(float));
    for (int i = 0; i < M * N; i++) c32[i] = c16[i] = 0.25f * (i % 7);
    ll_gemm_desc g = {.trans_a = 1, .M = M, .N = N, .K = K, .alpha = 1, .beta = 1, .A = A.f, .a_type = LL_F32,
                      .lda = M, .B = B.f, .b_type = LL_F32, .ldb = N, .C = c32, .c_type = LL_F32, .ldc = N,
                      .epi = LL_EPI_BGRAD, .bgrad = b32};
    F->gemm(F, &g);
    g.A = A.h, g.B = B.h, g.a_type = g.b_type = LL_BF16, g.C = c16, g.bgrad = b16;
    H->gemm(H, &g);
    /* same inputs, fp32 output: only the summation may differ */
    CHECK_MSG(relv(c16, c32, (size_t)M * N) < 1e-5 && relv(b16, b32, M) < 1e-5, "weight-gradient gemm %g bgrad %g",
              relv(c16, c32, (size_t)M * N), relv(b16, b32, M));
    double colsum = 0;
    for (int k = 0; k < K; k++) colsum += A.f[(size_t)k * M + 3];
    CHECK_NEAR(b32[3], colsum, 1e-3);
    pfree(&A), pfree(&B), free(c32), free(c16), free(b32), free(b16);
}

static void test_norm_embed(void) {
    const int N = 50, C = 96, V = 30, T = 10;
    pair x = mk((size_t)N * C, 8, -2, 3), out = zeros((size_t)N * C), dy = mk((size_t)N * C, 9, -1, 1);
    pair dx = mk((size_t)N * C, 10, -1, 1);
    float *w = malloc(C * sizeof(float)), *b = malloc(C * sizeof(float));
    for (int c = 0; c < C; c++) w[c] = 1 + 0.01f * c, b[c] = 0.1f * (c % 5);
    float mf[50], rf[50], mh[50], rh[50];
    F->layernorm_fwd(F, AF(out), mf, rf, AF(x), w, b, N, C);
    H->layernorm_fwd(H, AH(out), mh, rh, AH(x), w, b, N, C);
    OP_OK("layernorm_fwd", rel1(&out));
    CHECK_MSG(relv(mh, mf, N) < 1e-5 && relv(rh, rf, N) < 1e-5, "layernorm statistics are fp32 of the same input");
    float *dwf = calloc(C, sizeof(float)), *dbf = calloc(C, sizeof(float));
    float *dwh = calloc(C, sizeof(float)), *dbh = calloc(C, sizeof(float));
    F->layernorm_bwd(F, AF(dx), dwf, dbf, AF(dy), AF(x), w, mf, rf, N, C);
    H->layernorm_bwd(H, AH(dx), dwh, dbh, AH(dy), AH(x), w, mh, rh, N, C);
    OP_OK("layernorm_bwd dx", rel1(&dx));
    OP_OK("layernorm_bwd dw", relv(dwh, dwf, C));
    OP_OK("layernorm_bwd db", relv(dbh, dbf, C));
    /* embedding */
    pair emb = mk((size_t)V * C, 11, -1, 1), e = zeros((size_t)N * C);
    float *pos = malloc(sizeof(float) * (T + 2) * C);
    for (int i = 0; i < (T + 2) * C; i++) pos[i] = sinf(0.1f * i);
    int32_t tok[50];
    for (int i = 0; i < N; i++) tok[i] = i % 7 == 3 ? LL_PAD : 4 + i % (V - 4);
    const int one = 1; /* position offset 1 + 1 read through a pointer */
    F->embed_fwd(F, AF(e), tok, AF(emb), pos, 1, &one, 3.5f, N, T, C, LL_PAD);
    H->embed_fwd(H, AH(e), tok, AH(emb), pos, 1, &one, 3.5f, N, T, C, LL_PAD);
    OP_OK("embed_fwd", rel1(&e));
    float *gf = calloc((size_t)V * C, sizeof(float)), *gh = calloc((size_t)V * C, sizeof(float));
    F->embed_bwd(F, gf, AF(dy), tok, 3.5f, N, C, LL_PAD);
    H->embed_bwd(H, gh, AH(dy), tok, 3.5f, N, C, LL_PAD);
    OP_OK("embed_bwd", relv(gh, gf, (size_t)V * C));
    pfree(&x), pfree(&out), pfree(&dy), pfree(&dx), pfree(&emb), pfree(&e);
    free(w), free(b), free(dwf), free(dbf), free(dwh), free(dbh), free(pos), free(gf), free(gh);
}

static void test_elementwise(void) {
    const size_t n = 70001; /* odd, and past the scratch conversions' parallel threshold */
    pair a = mk(n, 12, -2, 2), b = mk(n, 13, -2, 2), y = zeros(n), x = mk(n, 14, -2, 2), d = mk(n, 15, -1, 1);
    uint8_t *m1 = malloc(n), *m2 = malloc(n);
    ll_philox r;
    ll_philox_init(&r, 3, 4, 5);
    F->relu_fwd(F, AF(x), n), H->relu_fwd(H, AH(x), n);
    OP_OK("relu_fwd", rel1(&x));
    F->relu_bwd(F, AF(d), AF(x), n), H->relu_bwd(H, AH(d), AH(x), n);
    OP_OK("relu_bwd", rel1(&d));
    F->dropout_fwd(F, AF(a), m1, n, 0.3f, &r, 17), H->dropout_fwd(H, AH(a), m2, n, 0.3f, &r, 17);
    CHECK_MSG(!memcmp(m1, m2, n), "dropout masks differ between dtypes");
    OP_OK("dropout_fwd", rel1(&a));
    F->dropout_bwd(F, AF(d), m1, n, 0.3f), H->dropout_bwd(H, AH(d), m2, n, 0.3f);
    OP_OK("dropout_bwd", rel1(&d));
    F->add(F, AF(y), AF(a), AF(b), n), H->add(H, AH(y), AH(a), AH(b), n);
    OP_OK("add", rel1(&y));
    F->add_scaled(F, AF(y), AF(y), AF(b), -0.7f, n), H->add_scaled(H, AH(y), AH(y), AH(b), -0.7f, n); /* aliased */
    OP_OK("add_scaled", rel1(&y));
    F->acc(F, AF(y), AF(a), n), H->acc(H, AH(y), AH(a), n);
    OP_OK("acc", rel1(&y));
    float g1 = 0.75f, g2 = -1.5f;
    F->add_gated(F, AF(y), AF(y), AF(b), &g1, &g2, n), H->add_gated(H, AH(y), AH(y), AH(b), &g1, &g2, n);
    OP_OK("add_gated", rel1(&y));
    F->scale_gated(F, AF(y), &g1, NULL, n), H->scale_gated(H, AH(y), &g1, NULL, n);
    OP_OK("scale_gated", rel1(&y));
    float df = 0.5f, dh = 0.5f;
    F->dot_acc(F, &df, AF(a), AF(b), n, &g2), H->dot_acc(H, &dh, AH(a), AH(b), n, &g2);
    OP_OK("dot_acc", fabs(dh - df) / fabs(df));
    /* DLCL: k entries */
    enum { K = 5 };
    pair e[K];
    ll_act *ef[K], *eh[K];
    float w[K] = {0.2f, -0.5f, 1.0f, 0.3f, 0.25f}, sf[K] = {0}, sh[K] = {0};
    for (int j = 0; j < K; j++) e[j] = mk(n, 20 + j, -1, 1), ef[j] = AF(e[j]), eh[j] = AH(e[j]);
    F->weighted_sum(F, AF(y), (const ll_act *const *)ef, w, K, n);
    H->weighted_sum(H, AH(y), (const ll_act *const *)eh, w, K, n);
    OP_OK("weighted_sum", rel1(&y));
    F->weighted_scatter(F, ef, w, AF(a), K, n), H->weighted_scatter(H, eh, w, AH(a), K, n);
    for (int j = 0; j < K; j++) OP_OK("weighted_scatter", rel1(&e[j]));
    F->dots_acc(F, sf, AF(a), (const ll_act *const *)ef, K, n);
    H->dots_acc(H, sh, AH(a), (const ll_act *const *)eh, K, n);
    OP_OK("dots_acc", relv(sh, sf, K));
    for (int j = 0; j < K; j++) pfree(&e[j]);
    /* ALD pooling */
    const int B = 7, T = 11, C = 33;
    int len[7] = {11, 3, 5, 1, 11, 8, 2};
    pair h = mk((size_t)B * T * C, 30, -1, 1), dhp = zeros((size_t)B * T * C);
    float Gf[7 * 33], Gh[7 * 33];
    F->ald_pool(F, Gf, AF(h), len, B, T, C), H->ald_pool(H, Gh, AH(h), len, B, T, C);
    CHECK_MSG(relv(Gh, Gf, (size_t)B * C) < 1e-5, "ald_pool: the same inputs in fp32 sums");
    F->ald_unpool(F, AF(dhp), Gf, len, B, T, C), H->ald_unpool(H, AH(dhp), Gf, len, B, T, C);
    OP_OK("ald_unpool", rel1(&dhp));
    pfree(&a), pfree(&b), pfree(&y), pfree(&x), pfree(&d), pfree(&h), pfree(&dhp), free(m1), free(m2);
}

static void test_attention(void) {
    for (int causal = 0; causal < 2; causal++) {
        const int B = 3, T = 19, S = 23, Hh = 2, Dh = 16, C = Hh * Dh;
        const int Tk = causal ? T : S;
        int klen[3] = {Tk, 7, Tk - 4};
        pair q = mk((size_t)B * T * 3 * C, 40, -2, 2), kv = mk((size_t)B * Tk * 2 * C, 41, -2, 2);
        pair out = zeros((size_t)B * T * C), g = mk((size_t)B * T * C, 42, -1, 1);
        pair dq = mk((size_t)B * T * 3 * C, 43, -9, 9), dkv = mk((size_t)B * Tk * 2 * C, 44, -9, 9);
        float *lf = malloc(sizeof(float) * B * Hh * T), *lh = malloc(sizeof(float) * B * Hh * T);
        ll_philox r;
        ll_philox_init(&r, 8, 9, 10);
        /* q inside a [.., 3C] buffer and k, v inside a [.., 2C] one, as the model lays them out */
        F->attention_fwd(F, AF(out), lf, AF(q), 3 * C, AF(kv), (ll_act *)(kv.f + C), 2 * C, klen, B, T, Tk, Hh, Dh,
                         causal, 0.2f, &r, 99);
        H->attention_fwd(H, AH(out), lh, AH(q), 3 * C, AH(kv), (ll_act *)(kv.h + C), 2 * C, klen, B, T, Tk, Hh, Dh,
                         causal, 0.2f, &r, 99);
        OP_OK("attention_fwd out", rel1(&out));
        CHECK_MSG(relv(lh, lf, (size_t)B * Hh * T) < 1e-5, "attention lse: fp32 of the same inputs");
        F->attention_bwd(F, AF(dq), AF(dkv), (ll_act *)(dkv.f + C), AF(g), AF(out), lf, AF(q), 3 * C, AF(kv),
                         (ll_act *)(kv.f + C), 2 * C, klen, B, T, Tk, Hh, Dh, causal, 0.2f, &r, 99);
        H->attention_bwd(H, AH(dq), AH(dkv), (ll_act *)(dkv.h + C), AH(g), AH(out), lh, AH(q), 3 * C, AH(kv),
                         (ll_act *)(kv.h + C), 2 * C, klen, B, T, Tk, Hh, Dh, causal, 0.2f, &r, 99);
        OP_OK("attention_bwd dq", rel(&dq, (size_t)B * T, C, 3 * C));
        OP_OK("attention_bwd dk", rel(&dkv, (size_t)B * Tk, C, 2 * C));
        const pair dv = {dkv.f + C, dkv.h + C, 0};
        OP_OK("attention_bwd dv", rel(&dv, (size_t)B * Tk, C, 2 * C));
        /* the columns that are not dq's (k, v of the qkv buffer) are left as they were */
        int kept = 1;
        for (size_t i = 0; i < (size_t)B * T; i++)
            for (int c = C; c < 3 * C; c++) kept &= dq.h[i * 3 * C + c] == ll_f32_to_bf16(dq.f[i * 3 * C + c]);
        CHECK_MSG(kept, "attention_bwd (bf16) wrote outside dq's columns");
        pfree(&q), pfree(&kv), pfree(&out), pfree(&g), pfree(&dq), pfree(&dkv), free(lf), free(lh);
    }
}

static void test_losses(void) {
    const int N = 13, V = 301;
    pair lg = mk((size_t)N * V, 50, -4, 4), lg2 = mk((size_t)N * V, 51, -4, 4);
    int32_t tgt[13];
    for (int i = 0; i < N; i++) tgt[i] = i == 5 ? LL_PAD : 4 + (i * 37) % (V - 4);
    pair la = mk((size_t)N * V, 50, -4, 4), lb = mk((size_t)N * V, 51, -4, 4); /* log_softmax in place */
    F->log_softmax(F, AF(la), N, V), H->log_softmax(H, AH(la), N, V);
    F->log_softmax(F, AF(lb), N, V), H->log_softmax(H, AH(lb), N, V);
    OP_OK("log_softmax", rel1(&la));
    double accf[2] = {0, 0}, acch[2] = {0, 0};
    F->xent_fwd_bwd(F, AF(lg), tgt, N, V, 0.1f, LL_PAD, 0.5f, accf);
    H->xent_fwd_bwd(H, AH(lg), tgt, N, V, 0.1f, LL_PAD, 0.5f, acch);
    OP_OK("xent loss", fabs(acch[0] - accf[0]) / accf[0]);
    OP_OK("xent nll", fabs(acch[1] - accf[1]) / accf[1]);
    OP_OK("xent gradient", rel1(&lg));
    double kf = 0, kh = 0;
    /* the rounded log-probabilities differ between the two backends: give both the bf16 ones */
    for (size_t i = 0; i < la.n; i++) la.f[i] = ll_bf16_to_f32(la.h[i]), lb.f[i] = ll_bf16_to_f32(lb.h[i]);
    F->sym_kl(F, AF(la), AF(lb), AF(lg), AF(lg2), tgt, N, V, LL_PAD, 0.8f, &kf);
    H->sym_kl(H, AH(la), AH(lb), AH(lg), AH(lg2), tgt, N, V, LL_PAD, 0.8f, &kh);
    OP_OK("sym_kl value", fabs(kh - kf) / kf);
    OP_OK("sym_kl da", rel1(&lg));
    OP_OK("sym_kl db", rel1(&lg2));
    pfree(&lg), pfree(&lg2), pfree(&la), pfree(&lb);
}

/* ---- whole steps ---- */
static ll_hparams base(void) {
    return (ll_hparams){.C = 32, .F = 64, .H = 4, .Le = 3, .Ld = 3, .V = 40, .max_pos = 64, .dropout = 0.1,
                        .attn_dropout = 0.1, .act_dropout = 0.1, .label_smoothing = 0.1, .latent_rows = 1};
}

enum { PLAIN, POST_DLCL, LATENT, CAD_DDR_ALD, REZERO_LAYERDROP, N_METHODS };
static const char *method_name[] = {"pre-norm", "post-norm + DLCL", "latent depth", "CAD + DDR + ALD",
                                    "ReZero + LayerDrop"};

static ll_model *make(int method, ll_backend *be) {
    ll_hparams hp = base();
    if (method == POST_DLCL) {
        hp.post_norm = 1;
        hp.dlcl_enc = hp.dlcl_dec = hp.dlcl_learnable = hp.dlcl_ln = 1;
    }
    if (method == LATENT) hp.latent_enc = hp.latent_dec = 1;
    if (method == REZERO_LAYERDROP) hp.rezero = 1;
    ll_model *m = ll_model_new(&hp, be);
    ll_model_init(m, 11);
    if (method == REZERO_LAYERDROP) { /* alphas away from 0, so the branches matter */
        for (int s = 0; s < 2; s++)
            for (int l = 0; l < 3; l++) m->params[m->rezero_alpha[s][l]] = 0.5f;
        ll_model_refresh_weights(m);
        ll_layerdrop_sample(m->dec_ctl, 3, 0.3f, 5, 1, 1, 0);
        m->dec_ctl[1].skip = 1; /* at least one layer dropped */
    }
    if (method == CAD_DDR_ALD) {
        m->obj = (ll_objective){.ddr_alpha = 0.5f, .ald_weight = 0.3f, .ald_p = 0.3f, .ald_tau = 0.5f};
        m->obj.ddr_dec_ctl = ll_calloc(3, sizeof(ll_layer_ctl));
        ll_cad_sample(m->dec_ctl, 3, 0.5f, 2, 0, 5, 1, 0);
        m->dec_ctl[0].skip_cross = 1;
        ll_cad_sample(m->obj.ddr_dec_ctl, 3, 0.5f, 2, 0, 5, 1, 1);
    }
    return m;
}

static void step(ll_model *m, int method, const ll_batch *b, ll_loss_stats *st) {
    if (method == LATENT) {
        ll_model_track_dgates(m, 1);
        for (int s = 0; s < 2; s++) ll_latent_sample(m, s, 0, 3, 1, 1.0f, 0);
    }
    ll_model_step(m, b, 7, 1, 1, st);
    if (method == LATENT)
        for (int s = 0; s < 2; s++) ll_latent_backward(m, s, 0);
}

static void test_steps(void) {
    ll_batch b;
    gc_make_batch(&b, 6, 9, 8, 40, 4);
    for (int method = 0; method < N_METHODS; method++) {
        ll_model *mf = make(method, F), *mh = make(method, H);
        CHECK(mf->wact == (ll_act *)mf->params && mh->wact != (ll_act *)mh->params);
        ll_loss_stats sf, sh;
        step(mf, method, &b, &sf);
        step(mh, method, &b, &sh);
        const double tf = sf.loss + sf.ce2 + sf.ddr + sf.ald, th = sh.loss + sh.ce2 + sh.ddr + sh.ald;
        double dot = 0, nf = 0, nh = 0, diff = 0;
        for (size_t i = 0; i < mf->n_params; i++) {
            const double gf = mf->grads[i], gh = mh->grads[i];
            dot += gf * gh, nf += gf * gf, nh += gh * gh, diff += (gf - gh) * (gf - gh);
        }
        const double cosv = dot / sqrt(nf * nh), l2 = sqrt(diff / nf);
        if (ll_verbosity > 1 || getenv("LL_TEST_VERBOSE"))
            printf("%-20s loss fp32 %.5f bf16 %.5f  grad cosine %.5f rel L2 %.4f\n", method_name[method], tf, th, cosv,
                   l2);
        CHECK_MSG(fabs(th - tf) / tf < STEP_LOSS_TOL, "%s: loss bf16 %.6f fp32 %.6f", method_name[method], th, tf);
        CHECK_MSG(cosv > STEP_COS && l2 < STEP_L2, "%s: gradient cosine %.5f (> %g), rel L2 error %.4f (< %g)",
                  method_name[method], cosv, STEP_COS, l2, STEP_L2);
        if (method == CAD_DDR_ALD) CHECK(sh.ddr > 0 && sh.ald > 0 && sf.ddr > 0 && sf.ald > 0);

        /* Adam refreshes the bf16 weight copy: it equals the rounded master, bit for bit */
        ll_config cfg;
        ll_config_defaults(&cfg);
        ll_adam oh;
        ll_adam_init(&oh, mh, &cfg);
        ll_adam_step(&oh, mh, 1e-3, 1e-3, 1.0 / b.n_tgt_tokens, 1.0);
        const uint16_t *wa = (const uint16_t *)mh->wact;
        size_t bad = 0;
        for (size_t i = 0; i < mh->n_params; i++) bad += wa[i] != ll_f32_to_bf16(mh->params[i]);
        CHECK_MSG(bad == 0, "%s: %zu weight-copy elements are not the rounded master", method_name[method], bad);
        ll_adam_free(&oh, mh);
        ll_config_free(&cfg);
        free(mf->obj.ddr_dec_ctl), free(mh->obj.ddr_dec_ctl);
        ll_model_free(mf), ll_model_free(mh);
    }
    gc_free_batch(&b);
}

/* ---- the encoder-output gradient of a deep decoder ----
 * d(encoder output) is a sum over every decoder layer's cross-attention
 * (64 terms here, 128 with DDR).  A wrapper of the bf16 backend watches the
 * step: each term is a gemm into an fp32 C with beta 1 (the accumulator; a
 * weight gradient has trans_a), which the wrapper also sums exactly in
 * double; the one convert of that accumulator to bf16 (for the encoder's
 * backward) must then read the exact sum to fp32 rounding.  A bf16
 * accumulator (rounded at each of the terms) is ~1e-2 off: the same terms
 * summed with a bf16 rounding after each show that the bound catches it. */
enum { DEEP_LD = 64 };
static ll_backend g_watch;
static struct {
    const void *acc; /* the accumulator (fp32 C of the terms) */
    size_t n;
    double *sum;   /* exact sum of the terms */
    float *sum16;  /* the same terms summed with a bf16 rounding after each */
    int terms, converts;
    double err, err16; /* rel L2 error of the accumulator, of sum16, against sum */
} g_acc;

static double rel_l2(const double *ref, size_t n, const float *x) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) d += (x[i] - ref[i]) * (x[i] - ref[i]), r += ref[i] * ref[i];
    return sqrt(d / r);
}

static void watch_gemm(ll_backend *be, const ll_gemm_desc *g) {
    (void)be;
    if (g->c_type == LL_REAL_DTYPE && !g->trans_a && g->beta == 1) { /* an encoder-output gradient term */
        const size_t n = (size_t)g->M * g->N;
        if (!g_acc.acc) {
            g_acc.acc = g->C, g_acc.n = n;
            g_acc.sum = calloc(n, sizeof(double)), g_acc.sum16 = calloc(n, sizeof(float));
        }
        CHECK_MSG(g->C == g_acc.acc && n == g_acc.n && g->ldc == g->N, "a second encoder-output accumulator");
        const uint16_t *A = g->A, *B = g->B;
        for (int i = 0; g->C == g_acc.acc && i < g->M; i++)
            for (int j = 0; j < g->N; j++) {
                double t = 0;
                for (int k = 0; k < g->K; k++) {
                    const size_t b = g->trans_b ? (size_t)j * g->ldb + k : (size_t)k * g->ldb + j;
                    t += (double)ll_bf16_to_f32(A[(size_t)i * g->lda + k]) * ll_bf16_to_f32(B[b]);
                }
                const size_t o = (size_t)i * g->N + j;
                g_acc.sum[o] += g->alpha * t;
                g_acc.sum16[o] = ll_bf16_to_f32(ll_f32_to_bf16((float)(g_acc.sum16[o] + g->alpha * t)));
            }
        g_acc.terms++;
    }
    H->gemm(H, g);
}

static void watch_convert(ll_backend *be, void *dst, ll_dtype dt, const void *src, ll_dtype st, size_t n) {
    (void)be;
    if (src && src == g_acc.acc && st == LL_REAL_DTYPE && n == g_acc.n) {
        g_acc.converts++;
        g_acc.err = rel_l2(g_acc.sum, n, src);
        g_acc.err16 = rel_l2(g_acc.sum, n, g_acc.sum16);
    }
    H->convert(H, dst, dt, src, st, n);
}

static void test_deep_decoder(void) {
    g_watch = *H;
    g_watch.gemm = watch_gemm, g_watch.convert = watch_convert;
    ll_hparams hp = base();
    hp.Le = 1, hp.Ld = DEEP_LD;
    ll_model *m = ll_model_new(&hp, &g_watch);
    ll_model_init(m, 11);
    m->obj.ddr_alpha = 0.5f; /* a second decoder pass into the same accumulator */
    m->obj.ddr_dec_ctl = ll_calloc(DEEP_LD, sizeof(ll_layer_ctl));
    ll_batch b;
    gc_make_batch(&b, 6, 9, 8, 40, 4);
    ll_model_step(m, &b, 7, 1, 1, NULL);
    if (ll_verbosity > 1 || getenv("LL_TEST_VERBOSE"))
        printf("encoder-output gradient: %d terms, accumulator error %.3g (bf16 accumulation: %.3g)\n", g_acc.terms,
               g_acc.err, g_acc.err16);
    CHECK_MSG(g_acc.terms == 2 * DEEP_LD, "%d encoder-output gradient terms into an fp32 accumulator, want %d",
              g_acc.terms, 2 * DEEP_LD);
    CHECK_MSG(g_acc.converts == 1, "the fp32 accumulator was converted %d times, want once", g_acc.converts);
    CHECK_MSG(g_acc.err < 1e-5, "the encoder-output gradient is %.3g off the exact sum of its terms", g_acc.err);
    CHECK_MSG(g_acc.err16 > 1e-3, "a bf16 accumulation is only %.3g off: the bound above would not catch it",
              g_acc.err16);
    free(m->obj.ddr_dec_ctl);
    ll_model_free(m);
    gc_free_batch(&b);
    free(g_acc.sum), free(g_acc.sum16);
}

int main(void) {
    ll_set_threads(2);
    F = ll_backend_cpu();
    H = ll_backend_cpu_precision(LL_BF16);
    CHECK(F->act == LL_F32 && H->act == LL_BF16 && ll_backend_cpu_precision(LL_F32) == F);
    CHECK(ll_backend_is_cpu(F) && ll_backend_is_cpu(H));
    test_convert();
    test_gemm();
    test_norm_embed();
    test_elementwise();
    test_attention();
    test_losses();
    test_steps();
    test_deep_decoder();
    return tu_finish("test_bf16");
}
