/* The CPU backend's vectorised fp32 paths against simple references (the
 * gradient checks run the double build, which takes the scalar loops):
 *   - Philox4x32-10 known-answer vectors (Random123's kat_vectors), and the
 *     16-block vector generator (AVX-512, AVX2) == the scalar one, across a 2^32 carry;
 *   - dropout masks == the documented half-word rule, for unaligned offsets
 *     and lengths, and dropout_fwd applies exactly that mask;
 *   - label-smoothed cross-entropy (loss, nll and gradient) and log-softmax
 *     against double-precision formulas, with vocabulary tails and padding,
 *     and the beam top-k, in each vector form the CPU runs (AVX-512, AVX2) and
 *     the plain loops;
 *   - Adam (fairseq's update, with weight decay), sumsq and bias_set against
 *     double-precision loops;
 *   - the decoding row ops: reorder_rows against a plain gather, and
 *     beam_ancestry against the cache reorders it replaces;
 *   - attn_align (decoding's hard alignment) against a double-precision loop, and an
 *     ensemble's: attn_probs (written, then added) and align_argmax;
 *   - pick_logp (forced decoding's token scores) in fp32 and bf16 storage;
 *   - ensemble_mix (an ensemble's log-probabilities) against log(e^a + e^(b + w)) - c in long double;
 *   - add_col (--unkpen) moves one column of every row, nothing else.
 *   - fill_at (--no-repeat-ngram-size) sets the listed elements (repeats too), nothing else.
 *   - expand_cols (--shortlist) places each row's K values at their columns, fill elsewhere,
 *     rows past `rows` untouched.
 * Attention has its own test (test_attention.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "util/testutil.h"

#define A_(p) ((ll_act *)(p)) /* host test buffers in the activation dtype (real) */

/* the CPU backend's mask-only draw (attention dropout, per tile), private to it */
void cpu_dropout_mask(uint8_t *mask, size_t n, real p, const ll_philox *rng, uint64_t offset);

static void test_philox(void) {
    /* (counter words 0..3, key words 0..1) -> output, from Random123 kat_vectors */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
         0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
         0x24126ea1},
    };
    for (int t = 0; t < 3; t++) {
        ll_philox r;
        ll_philox_init(&r, (uint64_t)kat[t][5] << 32 | kat[t][4], kat[t][2], kat[t][3]);
        uint32_t o[4];
        ll_philox_block(&r, (uint64_t)kat[t][1] << 32 | kat[t][0], o);
        for (int w = 0; w < 4; w++) CHECK_MSG(o[w] == kat[t][6 + w], "kat %d word %d: %08x", t, w, o[w]);
    }
    ll_philox r;
    ll_philox_init(&r, 0x123456789abcdefull, 7, 99);
    /* (a low word that wraps inside a pass of 16, of 8, or between the AVX2 form's two passes) */
    const uint64_t starts[] = {0,           16,           12345,         0xfffffff8ull,
                               0xfffffffcull, 0xfffffff4ull, 0x1fffffff0ull, 0xfffffffffffffff0ull};
    for (size_t s = 0; s < sizeof starts / sizeof starts[0]; s++) {
        uint32_t v[64], o[4];
        ll_philox_blocks16(&r, starts[s], v);
        for (int i = 0; i < 16; i++) {
            ll_philox_block(&r, starts[s] + i, o);
            CHECK_MSG(!memcmp(o, v + 4 * i, sizeof o), "blocks16 from %llu: block %d differs",
                      (unsigned long long)starts[s], i);
        }
    }
}

static void test_dropout(void) {
    ll_backend *be = ll_backend_cpu();
    ll_philox r;
    ll_philox_init(&r, 11, LL_RNG_DROPOUT, 3);
    const float p = 0.3f;
    const uint32_t thr = (uint32_t)lround(p * 65536.0);
    const size_t ns[] = {1, 7, 128, 129, 1000, 70001};
    const uint64_t offs[] = {0, 3, 128, 1001, 1ull << 33};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof offs / sizeof offs[0]; b++) {
            const size_t n = ns[a];
            const uint64_t off = offs[b];
            uint8_t *mask = malloc(n), *mask2 = malloc(n + 2);
            float *x = malloc(sizeof(float) * n);
            for (size_t i = 0; i < n; i++) x[i] = 1 + (float)(i % 5);
            mask2[n] = mask2[n + 1] = 0xAB;
            be->dropout_fwd(be, A_(x), mask, n, p, &r, off);
            size_t bad = 0, badx = 0, kept = 0;
            for (size_t i = 0; i < n; i++) {
                const uint64_t h = off + i;
                const uint32_t word = ll_philox_u32(&r, h >> 1);
                const int keep = ((word >> (16 * (h & 1))) & 0xffff) >= thr;
                bad += mask[i] != keep;
                const float want = keep ? (1 + (float)(i % 5)) / (1 - p) : 0;
                badx += fabsf(x[i] - want) > 1e-6f * want;
                kept += keep;
            }
            CHECK_MSG(bad == 0 && badx == 0, "dropout n=%zu offset=%llu: %zu mask / %zu value mismatches", n,
                      (unsigned long long)off, bad, badx);
            if (n > 10000) CHECK_NEAR((double)kept / n, 1 - p, 0.01);
            /* the mask-only path (attention dropout) draws the same mask */
            cpu_dropout_mask(mask2, n, p, &r, off);
            CHECK(!memcmp(mask, mask2, n) && mask2[n] == 0xAB);
            free(mask), free(mask2), free(x);
        }
}

static void test_xent(void) {
    ll_backend *be = ll_backend_cpu();
    const int N = 6, V = 1013, pad = 1;
    const float eps = 0.1f, gs = 0.5f;
    float *x = malloc(sizeof(float) * N * V), *ls = malloc(sizeof(float) * N * V);
    int32_t tgt[6] = {5, 1012, pad, 0, 77, 500};
    ll_philox r;
    ll_philox_init(&r, 3, 4, 5);
    for (int i = 0; i < N * V; i++) ls[i] = x[i] = 12 * ll_philox_uniform(&r, i) - 6 + (i % V == 77 ? 20 : 0);
    double acc[2] = {0.25, 0}; /* the op adds to the slots */
    be->xent_fwd_bwd(be, A_(x), tgt, N, V, eps, pad, gs, acc);
    const double L = acc[0] - 0.25, NL = acc[1];
    double RL = 0, RNL = 0, worst = 0;
    const double eps_i = eps / (V - 1.0);
    for (int n = 0; n < N; n++) {
        const float *z = ls + (size_t)n * V;
        if (tgt[n] == pad) {
            for (int v = 0; v < V; v++) worst = fmax(worst, fabs(x[(size_t)n * V + v]));
            continue;
        }
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, z[v]);
        for (int v = 0; v < V; v++) s += exp(z[v] - mx);
        const double lse = mx + log(s);
        double smooth = 0;
        for (int v = 0; v < V; v++) {
            smooth += lse - z[v];
            const double q = v == tgt[n] ? 1 - eps : eps_i;
            worst = fmax(worst, fabs(x[(size_t)n * V + v] - gs * (exp(z[v] - lse) - q)));
        }
        RL += (1 - eps - eps_i) * (lse - z[tgt[n]]) + eps_i * smooth;
        RNL += lse - z[tgt[n]];
    }
    /* float exp and float row sums over ~1000 logits: a few 1e-6 absolute on entries up to gs */
    CHECK_MSG(worst < 5e-6, "xent gradient max error %g", worst);
    CHECK_NEAR(L, RL, 1e-4 * fabs(RL));
    CHECK_NEAR(NL, RNL, 1e-4 * fabs(RNL));

    memcpy(x, ls, sizeof(float) * N * V);
    be->log_softmax(be, A_(x), N, V);
    worst = 0;
    for (int n = 0; n < N; n++) {
        const float *z = ls + (size_t)n * V;
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, z[v]);
        for (int v = 0; v < V; v++) s += exp(z[v] - mx);
        for (int v = 0; v < V; v++) worst = fmax(worst, fabs(x[(size_t)n * V + v] - (z[v] - mx - log(s))));
    }
    CHECK_MSG(worst < 2e-5, "log_softmax max error %g", worst);
    /* A NaN logit makes its row's loss and log-probabilities NaN, as on the scalar path and on
     * CUDA (__expf(NaN) is NaN): the AVX-512 exp clamped NaN to -87 (its max/min returned the
     * bound) and the row came out finite, so a diverged model's NaN loss could pass unseen */
    for (int i = 0; i < N * V; i++) x[i] = ls[i];
    x[3 * V + 600] = NAN; /* row 3 (target 0) */
    double acc2[2] = {0, 0};
    be->xent_fwd_bwd(be, A_(x), tgt, N, V, eps, pad, gs, acc2);
    CHECK_MSG(isnan(acc2[0]) && isnan(acc2[1]), "a NaN logit gave the loss %g, nll %g", acc2[0], acc2[1]);
    for (int i = 0; i < N * V; i++) x[i] = ls[i];
    x[4 * V + 17] = NAN;
    be->log_softmax(be, A_(x), N, V);
    CHECK_MSG(isnan(x[4 * V]) && isnan(x[4 * V + 900]) && !isnan(x[5 * V]), "log_softmax of a row with a NaN: %g %g (next row %g)",
              x[4 * V], x[4 * V + 900], x[5 * V]);
    free(x), free(ls);
}

static void test_optimizer_ops(void) {
    ll_backend *be = ll_backend_cpu();
    const size_t n = 100003; /* not a multiple of any vector width or block */
    float *p = malloc(sizeof(float) * n), *g = malloc(sizeof(float) * n), *m = calloc(n, sizeof(float)),
          *v = calloc(n, sizeof(float));
    double *P = malloc(sizeof(double) * n), *M = calloc(n, sizeof(double)), *Vv = calloc(n, sizeof(double));
    ll_philox r;
    ll_philox_init(&r, 21, 22, 23);
    for (size_t i = 0; i < n; i++) P[i] = p[i] = 2 * ll_philox_uniform(&r, i) - 1;
    const double lr = 1e-3, b1 = 0.9, b2 = 0.98, eps = 1e-8, wd = 0.01;
    double worst = 0, st[LL_ST_N] = {0};
    const double gm = 0.5; /* the gradient multiplier Adam reads from the stats (scale x clip) */
    for (long t = 1; t <= 3; t++) {
        for (size_t i = 0; i < n; i++) g[i] = (float)(0.1 * (2 * ll_philox_uniform(&r, t * n + i) - 1));
        st[LL_ST_ADAM_T] = (double)t;
        st[LL_ST_GMUL] = gm;
        be->adam(be, p, NULL, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, st, LL_ST_ADAM_T);
        const double step = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
        for (size_t i = 0; i < n; i++) {
            const double gi = gm * g[i];
            M[i] = b1 * M[i] + (1 - b1) * gi;
            Vv[i] = b2 * Vv[i] + (1 - b2) * gi * gi;
            P[i] -= lr * wd * P[i];
            P[i] -= step * M[i] / (sqrt(Vv[i]) + eps);
            worst = fmax(worst, fabs(p[i] - P[i]));
        }
    }
    CHECK_MSG(worst < 1e-6, "adam max error %g after 3 steps", worst);
    /* a skipped update changes nothing */
    float p0 = p[17], m0 = m[17], v0 = v[17];
    st[LL_ST_SKIP] = 1;
    be->adam(be, p, NULL, g, m, v, n, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, st, LL_ST_ADAM_T);
    CHECK(p[17] == p0 && m[17] == m0 && v[17] == v0);
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)p[i] * p[i];
    double acc = 1.5;
    be->sumsq(be, &acc, p, n);
    CHECK_NEAR(acc - 1.5, ss, 1e-6 * ss);

    /* grad_finish: fairseq's clip coefficient, the skip flag, the step counts */
    double s2[LL_ST_N] = {0};
    s2[LL_ST_GSUMSQ] = 400, s2[LL_ST_LOSS] = 3, s2[LL_ST_ADAM_T] = 7, s2[LL_ST_ADAM_T_PHI] = 2;
    be->grad_finish(be, s2, 0.5, 2.0, 0); /* norm 0.5 * 20 = 10 > 2 */
    CHECK_NEAR(s2[LL_ST_GNORM], 10, 1e-12);
    CHECK_NEAR(s2[LL_ST_GMUL], 0.5 * 2 / (10 + 1e-6), 1e-15);
    CHECK(s2[LL_ST_SKIP] == 0 && s2[LL_ST_ADAM_T] == 8 && s2[LL_ST_ADAM_T_PHI] == 2);
    be->grad_finish(be, s2, 0.5, 20.0, 1); /* below the clip: scale only */
    CHECK(s2[LL_ST_GMUL] == 0.5 && s2[LL_ST_ADAM_T] == 9 && s2[LL_ST_ADAM_T_PHI] == 3);
    s2[LL_ST_GSUMSQ] = NAN;
    be->grad_finish(be, s2, 0.5, 2.0, 1); /* non-finite: skipped, counts unchanged */
    CHECK(s2[LL_ST_SKIP] == 1 && s2[LL_ST_ADAM_T] == 9 && s2[LL_ST_ADAM_T_PHI] == 3);
    s2[LL_ST_GSUMSQ] = 1, s2[LL_ST_LOSS] = INFINITY;
    be->grad_finish(be, s2, 1, 0, 0);
    CHECK(s2[LL_ST_SKIP] == 1);
    s2[LL_ST_LOSS] = 3, s2[LL_ST_SPIKE] = 1; /* a spike (spike_check): skipped, counts unchanged */
    be->grad_finish(be, s2, 1, 0, 1);
    CHECK(s2[LL_ST_SKIP] == 1 && s2[LL_ST_ADAM_T] == 9 && s2[LL_ST_ADAM_T_PHI] == 3);
    s2[LL_ST_SPIKE] = 0;
    be->grad_finish(be, s2, 1, 0, 1);
    CHECK(s2[LL_ST_SKIP] == 0 && s2[LL_ST_ADAM_T] == 10);

    /* spike_check: z-scores against the previous W updates (a two-pass double reference), NaN until
     * the window is full, the thresholds, the ring's wrap, non-finite updates kept out of the window */
    {
        enum { W = 5, U = 40 };
        double state[2 + 2 * W] = {0}, hist_l[U], hist_g[U];
        int nh = 0, spikes = 0;
        for (int u = 0; u < U; u++) {
            double st[LL_ST_N] = {0};
            const double gs = 0.01, ntok_loss = 300 + 40 * sin(u * 1.7) + (u == 23 ? 500 : 0);
            const double gss = u == 31 ? NAN : pow(2 + cos(u * 0.9) + (u == 17 ? 9 : 0), 2) / (gs * gs);
            st[LL_ST_LOSS] = ntok_loss, st[LL_ST_GSUMSQ] = gss;
            be->spike_check(be, st, state, W, gs, 2.0, u < 20 ? 0 : 1.5);
            const double loss = ntok_loss * gs, norm = gs * sqrt(gss);
            double zl = NAN, zg = NAN;
            if (nh >= W) {
                double ml = 0, mg = 0, vl = 0, vg = 0;
                for (int i = nh - W; i < nh; i++) ml += hist_l[i] / W, mg += hist_g[i] / W;
                for (int i = nh - W; i < nh; i++)
                    vl += (hist_l[i] - ml) * (hist_l[i] - ml) / W, vg += (hist_g[i] - mg) * (hist_g[i] - mg) / W;
                zl = (loss - ml) / sqrt(vl), zg = (norm - mg) / sqrt(vg);
            }
            const int want = (zl > 2.0) || (u >= 20 && zg > 1.5);
            CHECK_MSG(nh >= W ? fabs(st[LL_ST_Z_LOSS] - zl) < 1e-9 * fmax(1, fabs(zl)) : isnan(st[LL_ST_Z_LOSS]),
                      "spike_check, update %d: loss z-score %.12g, want %.12g", u, st[LL_ST_Z_LOSS], zl);
            CHECK_MSG(nh >= W ? (isnan(zg) ? isnan(st[LL_ST_Z_GNORM]) : fabs(st[LL_ST_Z_GNORM] - zg) < 1e-9 * fmax(1, fabs(zg)))
                              : isnan(st[LL_ST_Z_GNORM]),
                      "spike_check, update %d: norm z-score %.12g, want %.12g", u, st[LL_ST_Z_GNORM], zg);
            CHECK_MSG(st[LL_ST_SPIKE] == want, "spike_check, update %d: SPIKE %g, want %d (z %g, %g)", u,
                      st[LL_ST_SPIKE], want, zl, zg);
            spikes += want;
            if (isfinite(loss) && isfinite(norm)) hist_l[nh] = loss, hist_g[nh] = norm, nh++;
        }
        CHECK_MSG(spikes >= 2 && (int)state[0] == W && (int)state[1] == (U - 1) % W,
                  "spike_check: %d spikes, state %g %g", spikes, state[0], state[1]);
        /* thresholds off: z-scores still computed, nothing skipped */
        double st[LL_ST_N] = {0};
        st[LL_ST_LOSS] = 1e9, st[LL_ST_GSUMSQ] = 1e9;
        be->spike_check(be, st, state, W, 1, 0, 0);
        CHECK(st[LL_ST_SPIKE] == 0 && st[LL_ST_Z_LOSS] > 100);
    }

    /* ema: the weights' moving average, one fma (the CUDA kernel's bits), d e + (1 - d) p to rounding;
     * decay 0 is the weights; a skipped update leaves it */
    for (int k = 0; k < 4; k++) {
        const float d = k == 0 ? 0.f : k == 1 ? 0.75f : 0.9999f;
        double s3[LL_ST_N] = {0};
        s3[LL_ST_SKIP] = k == 3;
        for (size_t i = 0; i < n; i++) m[i] = 2 * ll_philox_uniform(&r, 7 * n + i) - 1; /* m: the average */
        memcpy(v, m, n * sizeof(float));
        be->ema(be, m, p, n, d, s3);
        size_t off = 0;
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            const float want = k == 3 ? v[i] : fmaf(d, v[i] - p[i], p[i]);
            off += memcmp(&m[i], &want, sizeof want) != 0;
            if (k < 3) worst = fmax(worst, fabs(m[i] - ((double)d * v[i] + (1 - (double)d) * p[i])));
        }
        CHECK_MSG(off == 0, "ema (decay %g%s): %zu of %zu elements are not fma(d, e - p, p)", d,
                  k == 3 ? ", skipped" : "", off, n);
        CHECK_MSG(worst < 3e-7, "ema (decay %g): %g from d e + (1 - d) p", d, worst);
    }

    /* gemm's bias epilogue with beta 0 starts from the bias (K = 0: C = bias exactly) */
    const int N = 5, C = 37;
    float bias[37], y[5 * 37], one = 0;
    for (int c = 0; c < C; c++) bias[c] = (float)c - 3.5f;
    const ll_gemm_desc gd = {.trans_b = 1, .M = N, .N = C, .K = 0, .alpha = 1, .A = &one, .a_type = LL_F32, .lda = 1,
                             .B = &one, .b_type = LL_F32, .ldb = 1, .C = y, .c_type = LL_F32, .ldc = C,
                             .epi = LL_EPI_BIAS, .bias = bias, .bias_type = LL_F32};
    be->gemm(be, &gd);
    for (int i = 0; i < N * C; i++) CHECK(y[i] == bias[i % C]);
    free(p), free(g), free(m), free(v), free(P), free(M), free(Vv);
}

/* beam_topk against a brute-force reference: every allowed candidate of a
 * group, sorted by score (desc) then (row, token) (asc), first k.  Scores are
 * quantised so ties are common; dead rows, NaN and -inf log-probs, and the
 * three length modes are all exercised. */
typedef struct {
    double s;
    int flat;
} bt_cand;
static int bt_cmp(const void *a, const void *b) {
    const bt_cand *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->flat > y->flat) - (x->flat < y->flat);
}

static void test_beam_topk(void) {
    ll_backend *be = ll_backend_cpu();
    enum { G = 5, BEAM = 3, V = 23, K = 7, PAD = 1, BOS = 0, EOS = 2 };
    real *logp = malloc(sizeof(real) * G * BEAM * V);
    double cum[G * BEAM], score[G * K];
    real lp[G * K];
    int32_t flat[G * K];
    uint8_t mode[G];
    ll_philox r;
    ll_philox_init(&r, 5, 6, 0);
    for (int trial = 0; trial < 20; trial++) {
        for (int i = 0; i < G * BEAM * V; i++) {
            logp[i] = -(real)ll_philox_below(&r, (uint64_t)trial * 100000 + i, 8) / 4; /* ties */
            if (ll_philox_below(&r, (uint64_t)trial * 100000 + 50000 + i, 50) == 0) logp[i] = NAN;
            if (ll_philox_below(&r, (uint64_t)trial * 100000 + 70000 + i, 40) == 0) logp[i] = -INFINITY;
        }
        for (int i = 0; i < G * BEAM; i++)
            cum[i] = ll_philox_below(&r, (uint64_t)trial * 1000 + i, 5) == 0 ? -INFINITY
                                                                            : -(double)ll_philox_below(&r, (uint64_t)trial * 1000 + 500 + i, 4) / 2;
        for (int g = 0; g < G; g++) mode[g] = (uint8_t)((g + trial) % 4 == 3 ? 3 : (g + trial) % 2); /* 0, 1, 3 */
        be->beam_topk(be, score, lp, flat, (const ll_act *)logp, cum, mode, G, BEAM, V, K, 1, 0, PAD, BOS, EOS);
        for (int g = 0; g < G; g++) {
            bt_cand c[BEAM * V];
            int n = 0;
            for (int b = 0; b < BEAM; b++) {
                const int row = g * BEAM + b;
                if (cum[row] == -INFINITY) continue;
                for (int v = 0; v < V; v++) {
                    const double sc = cum[row] + (double)logp[(size_t)row * V + v];
                    if (isnan(sc) || sc == -INFINITY || v == PAD || v == BOS) continue;
                    if (v == EOS && !(mode[g] & 1)) continue;
                    if ((mode[g] & 2) && v != EOS) continue;
                    c[n++] = (bt_cand){sc, row * V + v};
                }
            }
            qsort(c, n, sizeof *c, bt_cmp);
            for (int q = 0; q < K; q++) {
                const int i = g * K + q;
                if (q < n) {
                    CHECK(flat[i] == c[q].flat && score[i] == c[q].s);
                    CHECK(lp[i] == logp[c[q].flat]);
                } else {
                    CHECK(flat[i] == -1 && score[i] == -INFINITY);
                }
            }
        }
    }
    free(logp);
    /* A NaN after the best candidate in its SIMD lane (16, 32 or 48 tokens later, inside the
     * same 64-token chunk): the chunk must not be skipped.  The AVX-512 row max let the NaN
     * replace the lane's running max, so the chunk's max came out below the best and the chunk
     * was skipped: the best candidate was missing (found by the CUDA parity test's inputs). */
    enum { V2 = 200, K2 = 3 };
    real *l2 = malloc(sizeof(real) * 2 * V2);
    const double cum2[2] = {0, 0};
    const uint8_t mode2[1] = {1};
    double s2[K2];
    real lp2[K2];
    int32_t f2[K2];
    int bad = 0;
    for (int best = 0; best < V2; best++)
        for (int d = 16; d < 64; d += 16) {
            if (best % 64 + d >= 64 || best + d >= V2 || best == PAD || best == BOS) continue;
            for (int v = 0; v < V2; v++) l2[v] = -3.0f - 0.001f * (real)v, l2[V2 + v] = -4.0f - 0.001f * (real)v;
            l2[V2 + best] = -0.5f, l2[V2 + best + d] = NAN; /* row 1: the best, then a NaN in its lane */
            be->beam_topk(be, s2, lp2, f2, (const ll_act *)l2, cum2, mode2, 1, 2, V2, K2, 1, 0, PAD, BOS, EOS);
            if (f2[0] != V2 + best && !bad++)
                fprintf(stderr, "  beam_topk: best at token %d of row 1, NaN %d tokens later: first candidate %d, want %d\n",
                        best, d, (int)f2[0], V2 + best);
            CHECK(f2[0] == V2 + best && s2[0] == -0.5);
        }
    free(l2);
}

/* beam_topk with diverse beam search's subgroups against a brute-force reference: subgroup s
 * ranks its rows (b % D == s; with one row per group, that row) by cum + logp - strength *
 * (uses of the token in the earlier subgroups' filled slots), one fma, into slots q * D + s.  Tokens
 * 4..9 are every row's favourites, so the penalties decide; both signs of the strength. */
static void test_beam_topk_diverse(void) {
    ll_backend *be = ll_backend_cpu();
    enum { G = 3, V = 19, PAD = 1, BOS = 0, EOS = 2, MAXR = 6, MAXK = 12 };
    const struct {
        int beam, D, k;
        double strength;
    } cs[] = {{6, 3, 12, 0.5}, {1, 4, 8, 0.75}, {4, 4, 8, -0.3}, {4, 2, 8, 2.0}, {2, 2, 12, 0.5}};
    ll_philox r;
    ll_philox_init(&r, 9, 6, 0);
    int penalised = 0;
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const int beam = cs[c].beam, D = cs[c].D, k = cs[c].k, kk = k / D;
        real logp[G * MAXR * V];
        double cum[G * MAXR], score[G * MAXK];
        real lp[G * MAXK];
        int32_t flat[G * MAXK];
        uint8_t mode[G] = {1, 0, 1};
        for (int i = 0; i < G * beam * V; i++) {
            const int v = i % V;
            logp[i] = v >= 4 && v < 10 ? -(real)ll_philox_below(&r, (uint64_t)c * 1000 + i, 4) / 8
                                       : -2 - (real)ll_philox_below(&r, (uint64_t)c * 1000 + i, 8) / 4;
        }
        for (int i = 0; i < G * beam; i++) cum[i] = i % 7 == 5 ? -INFINITY : -(double)(i % 3) / 4;
        be->beam_topk(be, score, lp, flat, (const ll_act *)logp, cum, mode, G, beam, V, k, D, cs[c].strength, PAD, BOS,
                      EOS);
        for (int g = 0; g < G; g++) {
            int used[V] = {0};
            for (int sub = 0; sub < D; sub++) {
                bt_cand cand[MAXR * V];
                int n = 0;
                for (int b = beam == 1 ? 0 : sub; b < beam; b += beam == 1 ? 1 : D) {
                    const int row = g * beam + b;
                    if (cum[row] == -INFINITY) continue;
                    for (int v = 0; v < V; v++) {
                        if (v == PAD || v == BOS || (v == EOS && !(mode[g] & 1))) continue;
                        cand[n++] = (bt_cand){fma(-cs[c].strength, used[v], cum[row] + (double)logp[row * V + v]), row * V + v};
                    }
                }
                qsort(cand, n, sizeof *cand, bt_cmp);
                for (int q = 0; q < kk; q++) {
                    const int i = g * k + q * D + sub;
                    if (q >= n) {
                        CHECK(flat[i] == -1 && score[i] == -INFINITY);
                        continue;
                    }
                    const int v = cand[q].flat % V;
                    CHECK_MSG(flat[i] == cand[q].flat && score[i] == cand[q].s,
                              "beam_topk diverse (beam %d, D %d): group %d slot %d: %d (%g), want %d (%g)", beam, D, g,
                              q * D + sub, (int)flat[i], score[i], cand[q].flat, cand[q].s);
                    CHECK(lp[i] == (real)fma(-cs[c].strength, used[v], (double)logp[cand[q].flat]));
                    penalised += used[v] > 0;
                }
                for (int q = 0; q < kk && q < n; q++) used[cand[q].flat % V]++;
            }
        }
    }
    CHECK_MSG(penalised > 20, "beam_topk diverse: only %d penalised candidates: the test is too weak", penalised);
}

/* copy_rows / reorder_rows: strided copies and an in-place gather (rows may repeat). */
static void test_row_ops(void) {
    ll_backend *be = ll_backend_cpu();
    enum { R = 6, N = 5, STRIDE = 9 };
    real buf[R * STRIDE], orig[R * STRIDE], scratch[R * N], src[R * 4 * N];
    for (int i = 0; i < R * STRIDE; i++) buf[i] = orig[i] = (real)i;
    for (int i = 0; i < R * 4 * N; i++) src[i] = (real)(1000 + i);
    const int from[R] = {2, 2, 0, 3, 5, 1};
    be->reorder_rows(be, (ll_act *)buf, (ll_act *)scratch, from, R, N, STRIDE);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < STRIDE; j++)
            CHECK(buf[r * STRIDE + j] == (j < N ? orig[from[r] * STRIDE + j] : orig[r * STRIDE + j]));
    /* random gathers against a plain one: repeats, cycles, chains, rows that
     * stay; and compactions (the first `rows` rows gather from anywhere in the
     * buffer, sources past `rows` included) */
    srand(7);
    for (int trial = 0; trial < 500; trial++) {
        const int rows = trial % 2 ? R : 1 + rand() % R;
        int fr[R];
        for (int r = 0; r < rows; r++) fr[r] = rand() % 3 == 0 ? r : rand() % (trial % 2 ? rows : R);
        for (int i = 0; i < R * STRIDE; i++) buf[i] = orig[i] = (real)(i + trial);
        be->reorder_rows(be, (ll_act *)buf, (ll_act *)scratch, fr, rows, N, STRIDE);
        for (int r = 0; r < R; r++)
            for (int j = 0; j < STRIDE; j++)
                CHECK(buf[r * STRIDE + j] ==
                      (r < rows && j < N ? orig[fr[r] * STRIDE + j] : orig[r * STRIDE + j]));
    }
    be->copy_rows(be, (ll_act *)(buf + 1), STRIDE, (const ll_act *)(src + 2), 4 * N, R, 3, NULL, 0);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 3; j++) CHECK(buf[r * STRIDE + 1 + j] == src[r * 4 * N + 2 + j]);
    const int at = 2; /* the destination advanced by *at * 3 elements (a decoding step's position) */
    be->copy_rows(be, (ll_act *)buf, STRIDE, (const ll_act *)(src + 1), 4 * N, R, 2, &at, 3);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < 2; j++) CHECK(buf[r * STRIDE + 6 + j] == src[r * 4 * N + 1 + j]);
}

/* beam_ancestry against what it replaces: a random beam search (reorders
 * inside sentences, then a compaction) run twice, once moving cache rows with
 * reorder_rows and once only rewriting the ancestry; every position of every
 * hypothesis must read the same value both ways. */
static void test_ancestry(void) {
    ll_backend *be = ll_backend_cpu();
    enum { G = 4, S = 3, ROWS = G * S, T = 7, N = 2 };
    real moved[ROWS * T * N], fixed[ROWS * T * N], scratch[ROWS * T * N];
    int anc[ROWS * T], ascr[ROWS * T], from[ROWS];
    memset(anc, 0xff, sizeof anc);
    srand(11);
    for (int trial = 0; trial < 50; trial++) {
        int rows = ROWS;
        for (int t = 0; t < T; t++) {
            if (t > 0) { /* a reorder: rows repeat and vanish, within each sentence */
                for (int r = 0; r < rows; r++) from[r] = r / G * G + rand() % G;
                be->reorder_rows(be, A_(moved), A_(scratch), from, rows, (size_t)t * N, (size_t)T * N);
            }
            be->beam_ancestry(be, anc, ascr, t > 0 ? from : NULL, rows, trial % 2 ? t : 0, trial % 2 ? NULL : &t, T,
                              G); /* t on the host, or read through a pointer as in a decoding step */
            for (int r = 0; r < rows; r++)
                for (int e = 0; e < N; e++)
                    moved[(r * T + t) * N + e] = fixed[(r * T + t) * N + e] = (real)(trial * 1000 + t * 100 + r * 3 + e);
            if (t == T / 2 && trial % 2) { /* drop sentence 0: the others move down G rows */
                for (int r = 0; r < rows - G; r++) from[r] = r + G;
                be->reorder_rows(be, A_(moved), A_(scratch), from, rows - G, (size_t)(t + 1) * N, (size_t)T * N);
                be->reorder_rows(be, A_(fixed), A_(scratch), from, rows - G, (size_t)(t + 1) * N, (size_t)T * N);
                rows -= G;
                be->beam_ancestry(be, anc, ascr, from, rows, t + 1, NULL, T, G);
            }
            for (int r = 0; r < rows; r++)
                for (int j = 0; j <= t; j++) {
                    const int a = anc[r * T + j];
                    CHECK_MSG(a >= 0 && a < rows && a / G == r / G, "ancestry row %d position %d: %d", r, j, a);
                    for (int e = 0; e < N && a >= 0 && a < rows; e++)
                        CHECK(fixed[(a * T + j) * N + e] == moved[(r * T + j) * N + e]);
                }
        }
    }
}

/* attn_align against a double-precision loop: random queries and keys (a near tie may
 * go either way), a key made the clear favourite, the same favourite at the EOS key
 * (left out: the runner-up wins), identical best keys (the lower wins), one key (-1).
 * The same for an ensemble's path: attn_probs written with weight 0.25 then added with
 * 0.75 (the head mean: sum / H; entries past a sentence's keys untouched), then
 * align_argmax of it. */
static void test_attn_align(void) {
    ll_backend *be = ll_backend_cpu();
    enum { SENTS = 3, PER = 4, S = 9, H = 3, DH = 8, C = H * DH, ROWS = SENTS * PER, QS = C + 5, KVS = 2 * C };
    real q[ROWS * QS], kv[SENTS * S * KVS], acc[ROWS * S];
    int32_t idx[ROWS], idx2[ROWS];
    srand(5);
    for (int trial = 0; trial < 40; trial++) {
        for (int i = 0; i < ROWS * QS; i++) q[i] = (real)(rand() % 2001 - 1000) / 400;
        for (int i = 0; i < SENTS * S * KVS; i++) kv[i] = (real)(rand() % 2001 - 1000) / 400;
        int key_len[SENTS] = {S, 2 + rand() % (S - 1), trial % 4 == 3 ? 1 : 3 + rand() % (S - 2)};
        const int kind = trial % 4, fav = 1 + trial % 3; /* 1: favourite, 2: at EOS, 3: tie */
        for (int b = 0; b < SENTS && kind; b++) {
            if (key_len[b] < 3) continue;
            const int at = kind == 2 ? key_len[b] - 1 : fav % (key_len[b] - 1);
            for (int r = b * PER + 1; r < (b + 1) * PER; r++) /* one query for the sentence's rows */
                memcpy(&q[r * QS], &q[b * PER * QS], sizeof(real) * C);
            for (int e = 0; e < C; e++) kv[(b * S + at) * KVS + e] += 3 * q[b * PER * QS + e]; /* along it */
            if (kind == 3) /* the same key again, later */
                memcpy(&kv[(b * S + key_len[b] - 2) * KVS], &kv[(b * S + at) * KVS], sizeof(real) * C);
        }
        be->attn_align(be, idx, A_(q), QS, A_(kv), KVS, key_len, SENTS, PER, S, H, DH);
        for (int i = 0; i < ROWS * S; i++) acc[i] = 7;
        be->attn_probs(be, acc, 1, (real)0.25, A_(q), QS, A_(kv), KVS, key_len, SENTS, PER, S, H, DH);
        be->attn_probs(be, acc, 0, (real)0.75, A_(q), QS, A_(kv), KVS, key_len, SENTS, PER, S, H, DH);
        be->align_argmax(be, idx2, acc, key_len, SENTS, PER, S);
        for (int r = 0; r < ROWS; r++) {
            const int b = r / PER, n = key_len[b];
            double sum[S] = {0};
            for (int h = 0; h < H; h++) {
                double sc[S], mx = -INFINITY, z = 0;
                for (int j = 0; j < n; j++) {
                    double t = 0;
                    for (int d = 0; d < DH; d++) t += (double)q[r * QS + h * DH + d] * kv[(b * S + j) * KVS + h * DH + d];
                    sc[j] = t / sqrt((double)DH);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < n; j++) z += exp(sc[j] - mx);
                for (int j = 0; j < n; j++) sum[j] += exp(sc[j] - mx) / z;
            }
            int best = n < 2 ? -1 : 0;
            for (int j = 1; j < n - 1; j++)
                if (sum[j] > sum[best]) best = j;
            for (int j = 0; j < S; j++) {
                const double want = j < n ? sum[j] / H : 7;
                CHECK_MSG(fabs(acc[r * S + j] - want) <= 1e-5 * fmax(1, fabs(want)),
                          "attn_probs trial %d row %d key %d: %.9g, want %.9g", trial, r, j, (double)acc[r * S + j], want);
            }
            for (int e = 0; e < 2; e++) {
                const int got = e ? idx2[r] : idx[r];
                const char *op = e ? "attn_probs + align_argmax" : "attn_align";
                const int ok =
                    got == best || (got >= 0 && got < n - 1 && best >= 0 && fabs(sum[got] - sum[best]) < 1e-5);
                CHECK_MSG(ok, "%s trial %d row %d: %d, want %d (%.9g vs %.9g)", op, trial, r, got, best,
                          got >= 0 && got < S ? sum[got] : 0.0, best >= 0 ? sum[best] : 0.0);
                if (kind == 3 && n >= 3 && n - 2 != fav % (n - 1)) /* a tie: the lower key, exactly */
                    CHECK_MSG(got == fav % (n - 1), "%s tie: row %d got %d, want %d", op, r, got, fav % (n - 1));
                if (kind == 2 && n >= 3) CHECK_MSG(got != n - 1, "%s chose EOS (row %d)", op, r);
            }
        }
    }
}

/* pick_logp reads row i's target column, first and last columns included, and
 * gives 0 on pad rows; the bf16 backend reads its bf16 storage exactly. */
static void test_pick_logp(void) {
    enum { N = 7, V = 11, PAD = 1 };
    real lp[N * V], out[N];
    uint16_t lp16[N * V];
    const int32_t tgt[N] = {0, 10, PAD, 5, 2, PAD, 3};
    for (int i = 0; i < N * V; i++) {
        lp[i] = -(real)(i % 97) / 7 - (real)0.001 * i;
        lp16[i] = ll_f32_to_bf16((float)lp[i]);
    }
    for (int bf = 0; bf < 2; bf++) {
        ll_backend *be = bf ? ll_backend_cpu_precision(LL_BF16) : ll_backend_cpu();
        for (int i = 0; i < N; i++) out[i] = 99;
        be->pick_logp(be, out, bf ? (const ll_act *)lp16 : A_(lp), tgt, N, V, PAD);
        for (int i = 0; i < N; i++) {
            const real want = tgt[i] == PAD ? 0 : bf ? ll_bf16_to_f32(lp16[i * V + tgt[i]]) : lp[i * V + tgt[i]];
            CHECK_MSG(out[i] == want, "pick_logp %s row %d: %g, want %g", bf ? "bf16" : "fp32", i, (double)out[i],
                      (double)want);
        }
    }
}

/* ensemble_mix = log(e^a + e^(b + w)) - c, without overflow for large gaps (e^-800), -inf only where
 * both are -inf, c subtracted once; with a member weight (w = log 0.3) and without; fp32 within
 * rounding, bf16 its storage's rounding of it. */
static void test_ensemble_mix(void) {
    enum { N = 12 };
    const double a[N] = {-1, -2.5, -INFINITY, -INFINITY, -800, 0, -3, -0.7, -20, -1e-3, -50, -4};
    const double b[N] = {-1, -0.5, -INFINITY, -3, -1, -800, -3.01, -INFINITY, -20.5, -7, -49, -4};
    const double c = log(3.0);
    for (int bf = 0; bf < 2; bf++)
        for (int wi = 0; wi < 2; wi++) {
            const double w = wi ? log(0.3) : 0;
            ll_backend *be = bf ? ll_backend_cpu_precision(LL_BF16) : ll_backend_cpu();
            real acc[N], x[N];
            uint16_t acc16[N], x16[N];
            for (int i = 0; i < N; i++) {
                acc[i] = (real)a[i], x[i] = (real)b[i];
                acc16[i] = ll_f32_to_bf16((float)a[i]), x16[i] = ll_f32_to_bf16((float)b[i]);
            }
            be->ensemble_mix(be, bf ? (ll_act *)acc16 : A_(acc), bf ? (const ll_act *)x16 : A_(x), N, w, c);
            for (int i = 0; i < N; i++) {
                const long double ai = bf ? ll_bf16_to_f32(ll_f32_to_bf16((float)a[i])) : (real)a[i];
                const long double bi = bf ? ll_bf16_to_f32(ll_f32_to_bf16((float)b[i])) : (real)b[i];
                const long double want =
                    ai == -INFINITY && bi == -INFINITY ? -INFINITY : logl(expl(ai) + expl(bi + w)) - c;
                const double got = bf ? ll_bf16_to_f32(acc16[i]) : (double)acc[i];
                const double tol = bf ? 4e-3 * fabs((double)want) : 5e-7 * fabs((double)want) + 1e-7;
                CHECK_MSG(isinf((double)want) ? got == (double)want : fabs(got - (double)want) <= tol,
                          "ensemble_mix %s %d: log(e^%g + e^(%g + %g)) - %g = %.9g, want %.9Lg", bf ? "bf16" : "fp32",
                          i, a[i], b[i], w, c, got, want);
            }
        }
}

/* ensemble_mix's AVX2 form gives the AVX-512 form's bits (where this CPU runs both): 1,001
 * log-probabilities (a tail in either width), gaps from 0 to ~60 */
static void test_ensemble_mix_forms(void) {
    enum { N = 1001 };
    static real a[N], b[N], first[N];
    int have = 0;
    for (int form = TU_FORM_AVX512; form <= TU_FORM_AVX2; form++) {
        if (!tu_cpu_form(form)) continue;
        uint64_t s = 12345;
        for (int i = 0; i < N; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            a[i] = -(real)((s >> 40) % 60000) / 1000;
            b[i] = -(real)((s >> 20) % 60000) / 1000;
        }
        a[7] = b[7] = -INFINITY;
        ll_backend *be = ll_backend_cpu();
        be->ensemble_mix(be, A_(a), A_(b), N, log(0.3), log(2.0));
        if (have)
            CHECK_MSG(!memcmp(a, first, sizeof a), "ensemble_mix: the AVX2 form's bits differ from the AVX-512 form's");
        memcpy(first, a, sizeof a);
        have = 1;
    }
    tu_cpu_form(TU_FORM_START);
}

/* add_col: column col of each row moved by val (bf16: rounded once), every other element as it was. */
static void test_add_col(void) {
    enum { R = 5, V = 9, COL = 3 };
    for (int bf = 0; bf < 2; bf++) {
        ll_backend *be = bf ? ll_backend_cpu_precision(LL_BF16) : ll_backend_cpu();
        real x[R * V], x0[R * V];
        uint16_t h[R * V], h0[R * V];
        for (int i = 0; i < R * V; i++) {
            x[i] = x0[i] = -(real)i / 4;
            h[i] = h0[i] = ll_f32_to_bf16((float)x0[i]);
        }
        be->add_col(be, bf ? (ll_act *)h : A_(x), R, V, COL, (real)-0.75);
        for (int i = 0; i < R * V; i++) {
            const double want = i % V == COL ? (bf ? ll_bf16_to_f32(ll_f32_to_bf16(ll_bf16_to_f32(h0[i]) - 0.75f))
                                                  : (double)(x0[i] - (real)0.75))
                                             : bf ? ll_bf16_to_f32(h0[i]) : (double)x0[i];
            const double got = bf ? ll_bf16_to_f32(h[i]) : (double)x[i];
            CHECK_MSG(got == want, "add_col %s element %d: %g, want %g", bf ? "bf16" : "fp32", i, got, want);
        }
    }
}

/* fill_at: the listed flat indices (one twice) := -inf, every other element as it was. */
static void test_fill_at(void) {
    enum { R = 4, V = 7 };
    const int32_t idx[] = {0, 9, 27, 9, R * V - 1};
    const int n = (int)(sizeof idx / sizeof idx[0]);
    for (int bf = 0; bf < 2; bf++) {
        ll_backend *be = bf ? ll_backend_cpu_precision(LL_BF16) : ll_backend_cpu();
        real x[R * V];
        uint16_t h[R * V];
        for (int i = 0; i < R * V; i++) x[i] = -(real)i / 4, h[i] = ll_f32_to_bf16((float)x[i]);
        be->fill_at(be, bf ? (ll_act *)h : A_(x), idx, n, (real)-INFINITY);
        for (int i = 0; i < R * V; i++) {
            int listed = 0;
            for (int j = 0; j < n; j++) listed |= idx[j] == i;
            const double got = bf ? ll_bf16_to_f32(h[i]) : (double)x[i];
            const double want = listed ? -INFINITY : -(double)i / 4;
            CHECK_MSG(got == want, "fill_at %s element %d: %g, want %g", bf ? "bf16" : "fp32", i, got, want);
        }
    }
}

/* expand_cols: row r's K values at cols (unsorted), fill in every other column, bit for bit;
 * rows past `rows` keep what they held. */
static void test_expand_cols(void) {
    enum { R = 5, V = 11, K = 4, ROWS = 3 };
    const int32_t cols[K] = {7, 0, 10, 3};
    for (int bf = 0; bf < 2; bf++) {
        ll_backend *be = bf ? ll_backend_cpu_precision(LL_BF16) : ll_backend_cpu();
        real x[R * V], src[R * K];
        uint16_t h[R * V], hs[R * K];
        for (int i = 0; i < R * V; i++) x[i] = (real)i, h[i] = ll_f32_to_bf16((float)i);
        for (int i = 0; i < R * K; i++) src[i] = -(real)(i + 1) / 8, hs[i] = ll_f32_to_bf16((float)src[i]);
        be->expand_cols(be, bf ? (ll_act *)h : A_(x), bf ? (const ll_act *)hs : (const ll_act *)src, cols, ROWS, V, K,
                        (real)-INFINITY);
        for (int r = 0; r < R; r++)
            for (int v = 0; v < V; v++) {
                double want = r >= ROWS ? (double)(r * V + v) : -INFINITY;
                for (int j = 0; j < K && r < ROWS; j++)
                    if (cols[j] == v) want = -(double)(r * K + j + 1) / 8;
                const double got = bf ? ll_bf16_to_f32(h[r * V + v]) : (double)x[r * V + v];
                CHECK_MSG(got == want, "expand_cols %s [%d,%d]: %g, want %g", bf ? "bf16" : "fp32", r, v, got, want);
            }
    }
}

int main(void) {
    ll_set_threads(2);
    /* the vector Philox generator and softmax rows (max, exp, sums) in each form this CPU runs:
     * AVX-512, AVX2, plain */
    for (int form = 0; form < TU_FORMS; form++) {
        if (!tu_cpu_form(form)) continue;
        test_philox();
        test_dropout();
        test_xent();
        test_beam_topk();
        test_beam_topk_diverse();
        test_ensemble_mix();
    }
    tu_cpu_form(TU_FORM_START);
    test_optimizer_ops();
    test_row_ops();
    test_ancestry();
    test_attn_align();
    test_pick_logp();
    test_ensemble_mix_forms();
    test_add_col();
    test_fill_at();
    test_expand_cols();
    return tu_finish("test_cpu_kernels");
}
