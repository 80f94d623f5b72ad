/* Finite-difference checks (double precision) of every backend op's backward:
 * layer norm, attention (causal, padded keys, cross, dropout, one query, several
 * query tiles), label-smoothed
 * cross-entropy, embedding, linear (gemm + bias), relu, dropout.  Each uses the
 * scalar L = sum(r * out) with fixed random r. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/testutil.h"
#include "gradcheck.h"
#include "ll/backend.h"

#define A_(p) ((ll_act *)(p)) /* host test buffers: act is real's dtype here */
#define T_ LL_REAL_DTYPE

static ll_backend *be;

/* The test's buffers live until the end; they are tracked and freed there so
 * LeakSanitizer (LL_SANITIZE builds) checks the ops, not this scaffolding. */
static void *g_bufs[256];
static int g_nbufs;
static void *track(void *p) {
    if (g_nbufs < (int)(sizeof g_bufs / sizeof *g_bufs)) g_bufs[g_nbufs++] = p;
    return p;
}
#define calloc(n, s) track(calloc(n, s))
#define malloc(n) track(malloc(n))

static void fill(real *x, size_t n, uint32_t stream, double scale) {
    ll_philox r;
    ll_philox_init(&r, 1234, 50, stream);
    for (size_t i = 0; i < n; i++) x[i] = scale * (2 * ll_philox_uniform(&r, i) - 1);
}
static real *rnd(size_t n, uint32_t stream) {
    real *x = calloc(n, sizeof(real));
    fill(x, n, stream, 1.0);
    return x;
}
static double dot(const real *a, const real *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Generic checker: f(ctx) returns L; analytic gradient g of variable x. */
typedef double (*loss_fn)(void *ctx);
static void fd_check(const char *what, loss_fn f, void *ctx, real *x, const real *g, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i += (n > 64 ? n / 64 : 1)) {
        double s = x[i], h = 1e-6;
        x[i] = s + h;
        double lp = f(ctx);
        x[i] = s - h;
        double lm = f(ctx);
        x[i] = s;
        double num = (lp - lm) / (2 * h);
        double e = fabs(num - g[i]) / (fabs(num) + fabs(g[i]) + 1e-4);
        if (e > worst) worst = e;
        CHECK_MSG(e < 1e-6, "%s[%zu]: analytic %.10g numeric %.10g", what, i, g[i], num);
    }
    fprintf(stderr, "  %-28s worst rel err %.2e\n", what, worst);
}

/* ---- layer norm ---- */
typedef struct {
    int N, C;
    real *x, *w, *b, *r, *out, *mean, *rstd;
} ln_ctx;
static double ln_loss(void *p) {
    ln_ctx *c = p;
    be->layernorm_fwd(be, A_(c->out), c->mean, c->rstd, A_(c->x), c->w, c->b, c->N, c->C);
    return dot(c->out, c->r, (size_t)c->N * c->C);
}
static void test_layernorm(void) {
    ln_ctx c = {.N = 5, .C = 13};
    size_t n = (size_t)c.N * c.C;
    c.x = rnd(n, 1), c.w = rnd(c.C, 2), c.b = rnd(c.C, 3), c.r = rnd(n, 4);
    c.out = calloc(n, sizeof(real)), c.mean = calloc(c.N, sizeof(real)), c.rstd = calloc(c.N, sizeof(real));
    real *dx = calloc(n, sizeof(real)), *dw = calloc(c.C, sizeof(real)), *db = calloc(c.C, sizeof(real));
    ln_loss(&c);
    be->layernorm_bwd(be, A_(dx), dw, db, A_(c.r), A_(c.x), c.w, c.mean, c.rstd, c.N, c.C);
    fd_check("layernorm dx", ln_loss, &c, c.x, dx, n);
    fd_check("layernorm dw", ln_loss, &c, c.w, dw, c.C);
    fd_check("layernorm db", ln_loss, &c, c.b, db, c.C);
    /* accumulation: a second backward doubles the gradients */
    real *dx2 = calloc(n, sizeof(real));
    memcpy(dx2, dx, n * sizeof(real));
    be->layernorm_bwd(be, A_(dx2), dw, db, A_(c.r), A_(c.x), c.w, c.mean, c.rstd, c.N, c.C);
    CHECK_NEAR(dx2[3], 2 * dx[3], 1e-12);
}

/* ---- attention ----
 * Flash-style: forward saves out and lse only, backward recomputes the
 * probabilities and redraws the dropout mask from the same Philox stream and
 * offset.  With dropout the key is fixed, so forward is a deterministic
 * function of q, k, v and the loss can be finite-differenced. */
typedef struct {
    int B, Tq, Tk, H, Dh, causal;
    real p;
    uint64_t off;
    real *q, *k, *v, *r, *out, *lse;
    int *klen;
    ll_philox rng;
} at_ctx;
static double at_loss(void *p) {
    at_ctx *c = p;
    int C = c->H * c->Dh;
    be->attention_fwd(be, A_(c->out), c->lse, A_(c->q), C, A_(c->k), A_(c->v), C, c->klen, c->B, c->Tq, c->Tk, c->H, c->Dh,
                      c->causal, c->p, &c->rng, c->off);
    return dot(c->out, c->r, (size_t)c->B * c->Tq * C);
}
static void test_attention(int causal, int Tq, int Tk, real p, const char *label) {
    at_ctx c = {.B = 3, .Tq = Tq, .Tk = Tk, .H = 2, .Dh = 4, .causal = causal, .p = p, .off = 3 * 2 * Tq * Tk};
    int C = c.H * c.Dh;
    size_t nq = (size_t)c.B * Tq * C, nk = (size_t)c.B * Tk * C;
    c.q = rnd(nq, 10), c.k = rnd(nk, 11), c.v = rnd(nk, 12), c.r = rnd(nq, 13);
    c.out = calloc(nq, sizeof(real));
    c.lse = calloc((size_t)c.B * c.H * Tq, sizeof(real));
    int klen[3] = {Tk, Tk - 1, 2};
    c.klen = klen;
    ll_philox_init(&c.rng, 3, 77, 1);
    at_loss(&c);
    real *dq = rnd(nq, 14), *dk = rnd(nk, 15), *dv = rnd(nk, 16); /* garbage: backward must overwrite */
    be->attention_bwd(be, A_(dq), A_(dk), A_(dv), A_(c.r), A_(c.out), c.lse, A_(c.q), C, A_(c.k), A_(c.v), C, c.klen, c.B, Tq, Tk, c.H, c.Dh,
                      causal, p, &c.rng, c.off);
    char name[64];
    snprintf(name, sizeof name, "attn %s dq", label);
    fd_check(name, at_loss, &c, c.q, dq, nq);
    snprintf(name, sizeof name, "attn %s dk", label);
    fd_check(name, at_loss, &c, c.k, dk, nk);
    snprintf(name, sizeof name, "attn %s dv", label);
    fd_check(name, at_loss, &c, c.v, dv, nk);
    /* masked keys get no gradient; lse is the log-sum-exp of the visible scores */
    for (size_t e = ((size_t)2 * Tk + 2) * C; e < nk; e++) CHECK(dk[e] == 0 && dv[e] == 0);
    for (int b = 0; b < c.B; b++)
        for (int h = 0; h < c.H; h++)
            for (int i = 0; i < Tq; i++) {
                int n = klen[b];
                if (causal && i + (Tk - Tq) + 1 < n) n = i + (Tk - Tq) + 1;
                double s = 0;
                for (int j = 0; j < n; j++) {
                    const real *qi = c.q + ((size_t)b * Tq + i) * C + h * c.Dh;
                    const real *kj = c.k + ((size_t)b * Tk + j) * C + h * c.Dh;
                    double e = 0;
                    for (int d = 0; d < c.Dh; d++) e += qi[d] * kj[d];
                    s += exp(e / sqrt((double)c.Dh));
                }
                CHECK_NEAR(c.lse[((size_t)b * c.H + h) * Tq + i], log(s), 1e-12);
            }
    /* the buffers are tracked and freed at the end of main */
}

/* ---- cross-entropy ---- */
typedef struct {
    int N, V;
    real eps;
    real *x, *work;
    int32_t *y;
} ce_ctx;
static double ce_loss(void *p) {
    ce_ctx *c = p;
    memcpy(c->work, c->x, sizeof(real) * c->N * c->V);
    double acc[2] = {0, 0};
    be->xent_fwd_bwd(be, A_(c->work), c->y, c->N, c->V, c->eps, LL_PAD, 1, acc);
    return acc[0];
}
static void test_xent(void) {
    ce_ctx c = {.N = 4, .V = 9, .eps = 0.1};
    size_t n = (size_t)c.N * c.V;
    c.x = rnd(n, 20);
    c.work = calloc(n, sizeof(real));
    int32_t y[4] = {5, LL_PAD, 0, 8};
    c.y = y;
    ce_loss(&c);
    real *g = calloc(n, sizeof(real));
    memcpy(g, c.work, n * sizeof(real));
    fd_check("xent dlogits", ce_loss, &c, c.x, g, n);
    /* value against the formula (reference-spec §5.1) on row 0 */
    double mx = -1e9, s = 0, sum_lp = 0;
    for (int v = 0; v < c.V; v++) mx = fmax(mx, c.x[v]);
    for (int v = 0; v < c.V; v++) s += exp(c.x[v] - mx);
    double lse = mx + log(s);
    for (int v = 0; v < c.V; v++) sum_lp += c.x[v] - lse;
    double nll = lse - c.x[5], epsi = 0.1 / (c.V - 1);
    double want0 = (1 - 0.1 - epsi) * nll + epsi * (-sum_lp);
    double acc[2] = {0, 0};
    real *w = calloc(c.V, sizeof(real));
    memcpy(w, c.x, c.V * sizeof(real));
    be->xent_fwd_bwd(be, A_(w), y, 1, c.V, 0.1, LL_PAD, 1, acc);
    CHECK_NEAR(acc[0], want0, 1e-12);
    CHECK_NEAR(acc[1], nll, 1e-12);
}

/* ---- embedding + linear + relu + dropout chain ---- */
typedef struct {
    int N, T, C, V, O;
    real *emb, *pos, *w, *bias, *r, *x, *y;
    uint8_t *mask;
    int32_t *tok;
    ll_philox rng;
} ch_ctx;
static double ch_loss(void *p) {
    ch_ctx *c = p;
    be->embed_fwd(be, A_(c->x), c->tok, A_(c->emb), c->pos, 2, NULL, 1.7, c->N, c->T, c->C, LL_PAD);
    /* y = relu(x W^T + b): gemm with the bias+ReLU epilogue */
    const ll_gemm_desc g = {.trans_b = 1, .M = c->N, .N = c->O, .K = c->C, .alpha = 1, .A = c->x, .a_type = T_,
                            .lda = c->C, .B = c->w, .b_type = T_, .ldb = c->C, .C = c->y, .c_type = T_, .ldc = c->O,
                            .epi = LL_EPI_BIAS_RELU, .bias = c->bias, .bias_type = LL_REAL_DTYPE};
    be->gemm(be, &g);
    be->dropout_fwd(be, A_(c->y), c->mask, (size_t)c->N * c->O, 0.3, &c->rng, 5);
    return dot(c->y, c->r, (size_t)c->N * c->O);
}
static void test_chain(void) {
    ch_ctx c = {.N = 6, .T = 3, .C = 5, .V = 7, .O = 4};
    c.emb = rnd((size_t)c.V * c.C, 30), c.pos = rnd((size_t)8 * c.C, 31), c.w = rnd((size_t)c.O * c.C, 32);
    c.bias = rnd(c.O, 33), c.r = rnd((size_t)c.N * c.O, 34);
    c.x = calloc((size_t)c.N * c.C, sizeof(real)), c.y = calloc((size_t)c.N * c.O, sizeof(real));
    c.mask = calloc((size_t)c.N * c.O, 1);
    int32_t tok[6] = {4, 5, LL_PAD, 4, 6, 3};
    c.tok = tok;
    ll_philox_init(&c.rng, 9, 1, 2);
    ch_loss(&c);
    size_t nx = (size_t)c.N * c.C, ny = (size_t)c.N * c.O;
    real *dy = calloc(ny, sizeof(real)), *dx = calloc(nx, sizeof(real));
    real *dw = calloc((size_t)c.O * c.C, sizeof(real)), *db = calloc(c.O, sizeof(real));
    real *demb = calloc((size_t)c.V * c.C, sizeof(real));
    memcpy(dy, c.r, ny * sizeof(real));
    be->dropout_bwd(be, A_(dy), c.mask, ny, 0.3);
    be->relu_bwd(be, A_(dy), A_(c.y), ny);
    /* dW += dy^T x with the bias gradient in the BGRAD epilogue; dx += dy W */
    const ll_gemm_desc gw = {.trans_a = 1, .M = c.O, .N = c.C, .K = c.N, .alpha = 1, .beta = 1, .A = dy, .a_type = T_,
                             .lda = c.O, .B = c.x, .b_type = T_, .ldb = c.C, .C = dw, .c_type = T_, .ldc = c.C,
                             .epi = LL_EPI_BGRAD, .bgrad = db};
    be->gemm(be, &gw);
    const ll_gemm_desc gx = {.M = c.N, .N = c.C, .K = c.O, .alpha = 1, .beta = 1, .A = dy, .a_type = T_, .lda = c.O,
                             .B = c.w, .b_type = T_, .ldb = c.C, .C = dx, .c_type = T_, .ldc = c.C};
    be->gemm(be, &gx);
    be->embed_bwd(be, demb, A_(dx), tok, 1.7, c.N, c.C, LL_PAD);
    fd_check("linear dW", ch_loss, &c, c.w, dw, (size_t)c.O * c.C);
    fd_check("linear db", ch_loss, &c, c.bias, db, c.O);
    fd_check("embedding dE", ch_loss, &c, c.emb, demb, (size_t)c.V * c.C);
    for (int i = 0; i < c.C; i++) CHECK(demb[LL_PAD * c.C + i] == 0);
    /* dropout keeps about 1 - p and the mask is reproducible */
    size_t big = 100000, kept = 0;
    uint8_t *m1 = malloc(big), *m2 = malloc(big);
    real *ones = calloc(big, sizeof(real));
    be->dropout_fwd(be, A_(ones), m1, big, 0.3, &c.rng, 0);
    be->dropout_fwd(be, A_(ones), m2, big, 0.3, &c.rng, 0);
    for (size_t i = 0; i < big; i++) kept += m1[i];
    CHECK(memcmp(m1, m2, big) == 0);
    CHECK_NEAR((double)kept / big, 0.7, 0.01);
}

int main(void) {
    ll_set_threads(1); /* tiny shapes: threads only add overhead */
    be = ll_backend_cpu();
    test_layernorm();
    test_attention(0, 5, 5, 0, "self");
    test_attention(1, 5, 5, 0, "causal");
    test_attention(1, 2, 5, 0, "causal-incremental");
    test_attention(0, 4, 6, 0.25, "cross+dropout");
    test_attention(1, 5, 5, 0.3, "causal+dropout");
    test_attention(0, 1, 6, 0, "one query");
    test_attention(0, 70, 9, 0.2, "query tiles+dropout");
    test_attention(1, 70, 72, 0, "causal query tiles");
    test_xent();
    test_chain();
#undef calloc
#undef malloc
    for (int i = 0; i < g_nbufs; i++) free(g_bufs[i]);
    return tu_finish("grad_test_ops");
}
