/* The bf16 CPU backend (train.precision: bf16): activations, their gradients
 * and the weight copy are bf16 in memory, everything else is `real`.
 *
 * Why it exists: the CUDA backend stores activations in bf16, and the logic
 * around that (bf16 weight copies refreshed from fp32 masters by Adam, fp32
 * statistics, fp32 loss and gradient accumulation, rounding of every stored
 * activation) must be tested in CI, where there is no GPU.  Speed is not the
 * point (bench/RESULTS.md, Session 5, has the measurement).
 *
 * How: each op converts its bf16 operands to fp32 scratch, runs the fp32
 * backend's code on them and rounds what it writes back to bf16 (round to
 * nearest even), so the arithmetic is the fp32 reference's and only storage
 * differs -- the same contract a bf16 CUDA kernel has (load bf16, compute in
 * fp32, store bf16).  Scratch is per thread (the CPU team's workers run ops
 * concurrently) and grow-only, so the hot path does not allocate once warm.
 * Strided operands (attention's q/k/v inside one qkv buffer) are converted
 * and written back by rows of their own columns only, so writing dq cannot
 * clobber dk next to it.
 *
 * gemm converts A and B and calls sgemm.  OpenBLAS has cblas_sbgemm (bf16 in,
 * fp32 out), but Debian's 0.3.21 build does not export it (no BUILD_BFLOAT16),
 * and this host has no avx512_bf16, where sbgemm's generic kernel is slower
 * than converting and using the tuned sgemm (docs/cuda-backend.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

typedef uint16_t bf16;

/* ---- per-thread scratch ---- */
enum { SLOTS = 10 };
static _Thread_local struct {
    real *p;
    size_t n;
} g_scratch[SLOTS];

static real *scratch(int slot, size_t n) {
    if (n > g_scratch[slot].n) {
        free(g_scratch[slot].p);
        g_scratch[slot].p = ll_aligned_alloc((n + 16) * sizeof(real));
        g_scratch[slot].n = n;
    }
    return g_scratch[slot].p;
}

static int nthreads(size_t n) { return n >= (1u << 15) ? ll_threads_here() : 1; }

/* rows x cols at row stride ld (elements) between bf16 and real */
static void to_real2(real *d, const bf16 *s, size_t rows, size_t cols, size_t ld) {
    if (cols == ld) { /* contiguous: one flat loop */
        const size_t n = rows * cols;
#pragma omp parallel for simd schedule(static) num_threads(nthreads(n))
        for (size_t i = 0; i < n; i++) d[i] = ll_bf16_to_f32(s[i]);
        return;
    }
#pragma omp parallel for schedule(static) num_threads(nthreads(rows * cols))
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) d[r * ld + c] = ll_bf16_to_f32(s[r * ld + c]);
}

static void to_bf16_2(bf16 *d, const real *s, size_t rows, size_t cols, size_t ld) {
    if (cols == ld) {
        const size_t n = rows * cols;
#pragma omp parallel for simd schedule(static) num_threads(nthreads(n))
        for (size_t i = 0; i < n; i++) d[i] = ll_f32_to_bf16((float)s[i]);
        return;
    }
#pragma omp parallel for schedule(static) num_threads(nthreads(rows * cols))
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) d[r * ld + c] = ll_f32_to_bf16((float)s[r * ld + c]);
}

static size_t span(size_t rows, size_t cols, size_t ld) { return rows ? (rows - 1) * ld + cols : 0; }

/* bf16 operand -> real scratch (same layout) */
static real *in2(int slot, const ll_act *p, size_t rows, size_t cols, size_t ld) {
    real *s = scratch(slot, span(rows, cols, ld));
    to_real2(s, (const bf16 *)p, rows, cols, ld);
    return s;
}
static real *in1(int slot, const ll_act *p, size_t n) { return in2(slot, p, 1, n, n); }
static void back2(ll_act *p, const real *s, size_t rows, size_t cols, size_t ld) {
    to_bf16_2((bf16 *)p, s, rows, cols, ld);
}
static void back1(ll_act *p, const real *s, size_t n) { back2(p, s, 1, n, n); }
#define R(p) ((ll_act *)(p)) /* real scratch handed to an fp32 op */

static ll_backend g_bf16;

/* ---- gemm ---- */
static void b_gemm(ll_backend *be, const ll_gemm_desc *g) {
    (void)be;
    if (g->M == 0 || g->N == 0) return;
    if (g->a_type != LL_BF16 || g->b_type != LL_BF16 || (g->c_type != LL_BF16 && g->c_type != LL_REAL_DTYPE))
        ll_die("cpu bf16 gemm: operands %s x %s -> %s", ll_dtype_str(g->a_type), ll_dtype_str(g->b_type),
               ll_dtype_str(g->c_type));
    const real *A = in2(0, g->A, g->trans_a ? g->K : g->M, g->trans_a ? g->M : g->K, g->lda);
    const real *B = in2(1, g->B, g->trans_b ? g->N : g->K, g->trans_b ? g->K : g->N, g->ldb);
    /* the bias (bf16 from the weight copy, or real) widens exactly and joins
     * the fp32 sum before C's one rounding, as cuBLASLt's epilogue */
    const real *bias = NULL;
    if (g->epi == LL_EPI_BIAS || g->epi == LL_EPI_BIAS_RELU) {
        if (g->bias_type == LL_BF16)
            bias = in1(3, g->bias, (size_t)g->N);
        else if (g->bias_type == LL_REAL_DTYPE)
            bias = g->bias;
        else
            ll_die("cpu bf16 gemm: bias is %s (bf16 or %s)", ll_dtype_str(g->bias_type), ll_dtype_str(LL_REAL_DTYPE));
    }
    if (g->c_type != LL_BF16) { /* weight gradient (or the fp32 encoder-output gradient): fp32 C, in place */
        cpu_gemm_real(g, A, B, bias, g->C);
        return;
    }
    real *C = g->beta != 0 ? in2(2, g->C, g->M, g->N, g->ldc) : scratch(2, span(g->M, g->N, g->ldc));
    cpu_gemm_real(g, A, B, bias, C);
    back2(g->C, C, g->M, g->N, g->ldc);
}

/* ---- layer norm, embedding ---- */
static void b_layernorm_fwd(ll_backend *be, ll_act *out, real *mean, real *rstd, const ll_act *x, const real *w,
                            const real *b, int N, int C) {
    const size_t n = (size_t)N * C;
    real *o = scratch(0, n);
    cpu_layernorm_fwd(be, R(o), mean, rstd, R(in1(1, x, n)), w, b, N, C);
    back1(out, o, n);
}

static void b_layernorm_bwd(ll_backend *be, ll_act *dx, real *dw, real *db, const ll_act *dout, const ll_act *x,
                            const real *w, const real *mean, const real *rstd, int N, int C) {
    const size_t n = (size_t)N * C;
    real *d = in1(0, dx, n); /* accumulated into */
    cpu_layernorm_bwd(be, R(d), dw, db, R(in1(1, dout, n)), R(in1(2, x, n)), w, mean, rstd, N, C);
    back1(dx, d, n);
}

/* Direct: converting the whole [V, C] table per call would cost more than the op. */
static void b_embed_fwd(ll_backend *be, ll_act *out, const int32_t *tok, const ll_act *emb, const real *pos,
                        int pos_offset, const int *pos_at, real scale, int N, int T, int C, int pad) {
    (void)be;
    if (pos_at) pos_offset += *pos_at;
    bf16 *o = (bf16 *)out;
    const bf16 *e = (const bf16 *)emb;
#pragma omp parallel for schedule(static) num_threads(nthreads((size_t)N * C))
    for (int r = 0; r < N; r++) {
        bf16 *orow = o + (size_t)r * C;
        if (tok[r] == pad) {
            memset(orow, 0, sizeof(bf16) * C);
            continue;
        }
        const bf16 *er = e + (size_t)tok[r] * C;
        const real *p = pos + (size_t)(r % T + pos_offset) * C;
        for (int c = 0; c < C; c++) orow[c] = ll_f32_to_bf16((float)(scale * ll_bf16_to_f32(er[c]) + p[c]));
    }
}

static void b_embed_bwd(ll_backend *be, real *demb, const ll_act *dout, const int32_t *tok, real scale, int N, int C,
                        int pad) {
    ll_backend_cpu()->embed_bwd(be, demb, R(in1(0, dout, (size_t)N * C)), tok, scale, N, C, pad);
}

/* ---- element-wise ops ---- */
static void b_relu_fwd(ll_backend *be, ll_act *x, size_t n) {
    real *s = in1(0, x, n);
    ll_backend_cpu()->relu_fwd(be, R(s), n);
    back1(x, s, n);
}
static void b_relu_bwd(ll_backend *be, ll_act *dy, const ll_act *y, size_t n) {
    real *s = in1(0, dy, n);
    ll_backend_cpu()->relu_bwd(be, R(s), R(in1(1, y, n)), n);
    back1(dy, s, n);
}
static void b_dropout_fwd(ll_backend *be, ll_act *x, uint8_t *mask, size_t n, real p, const ll_philox *rng,
                          uint64_t offset) {
    if (p <= 0) { /* mask only: x unchanged */
        ll_backend_cpu()->dropout_fwd(be, NULL, mask, n, p, rng, offset);
        return;
    }
    real *s = in1(0, x, n);
    ll_backend_cpu()->dropout_fwd(be, R(s), mask, n, p, rng, offset);
    back1(x, s, n);
}
static void b_dropout_bwd(ll_backend *be, ll_act *dx, const uint8_t *mask, size_t n, real p) {
    if (p <= 0) return;
    real *s = in1(0, dx, n);
    ll_backend_cpu()->dropout_bwd(be, R(s), mask, n, p);
    back1(dx, s, n);
}
static void b_add(ll_backend *be, ll_act *y, const ll_act *a, const ll_act *b, size_t n) {
    real *s = scratch(0, n);
    ll_backend_cpu()->add(be, R(s), R(in1(1, a, n)), R(in1(2, b, n)), n);
    back1(y, s, n);
}
static void b_add_scaled(ll_backend *be, ll_act *y, const ll_act *a, const ll_act *b, real alpha, size_t n) {
    real *s = scratch(0, n);
    ll_backend_cpu()->add_scaled(be, R(s), R(in1(1, a, n)), R(in1(2, b, n)), alpha, n);
    back1(y, s, n);
}
static void b_acc(ll_backend *be, ll_act *dst, const ll_act *src, size_t n) {
    real *s = in1(0, dst, n);
    ll_backend_cpu()->acc(be, R(s), R(in1(1, src, n)), n);
    back1(dst, s, n);
}
static void b_add_gated(ll_backend *be, ll_act *y, const ll_act *a, const ll_act *b, const real *g1, const real *g2,
                        size_t n) {
    real *s = scratch(0, n);
    cpu_add_gated(be, R(s), R(in1(1, a, n)), R(in1(2, b, n)), g1, g2, n);
    back1(y, s, n);
}
static void b_scale_gated(ll_backend *be, ll_act *x, const real *g1, const real *g2, size_t n) {
    if ((g1 ? *g1 : 1) * (g2 ? *g2 : 1) == 1) return; /* as the fp32 op: nothing to round */
    real *s = in1(0, x, n);
    cpu_scale_gated(be, R(s), g1, g2, n);
    back1(x, s, n);
}
static void b_dot_acc(ll_backend *be, real *dst, const ll_act *a, const ll_act *b, size_t n, const real *mul) {
    cpu_dot_acc(be, dst, R(in1(0, a, n)), R(in1(1, b, n)), n, mul);
}

/* The residual branch: bf16 = 1 rounds the intermediates the unfused ops stored. */
static void b_residual_fwd(ll_backend *be, ll_act *y, ll_act *s, const ll_act *x, const real *g1, const real *g2,
                           size_t n, real p, const ll_philox *rng, uint64_t offset) {
    (void)be;
    real *ys = scratch(0, n), *ss = in1(1, s, n);
    cpu_residual_fwd_real(ys, ss, in1(2, x, n), g1, g2, n, p, rng, offset, 1);
    if (p > 0) back1(s, ss, n);
    back1(y, ys, n);
}
static void b_residual_bwd(ll_backend *be, ll_act *ds, ll_act *dx, int dx_mode, const ll_act *s, real *dg1,
                           real *dg2, const real *g1, const real *g2, size_t n, real p, const ll_philox *rng,
                           uint64_t offset) {
    (void)be;
    real *d = in1(0, ds, n), *x = dx_mode == LL_RES_ACC ? in1(1, dx, n) : scratch(1, n);
    cpu_residual_bwd_real(d, x, dx_mode, in1(2, s, n), dg1, dg2, g1, g2, n, p, rng, offset, 1);
    back1(ds, d, n);
    if (dx_mode != LL_RES_NONE) back1(dx, x, n);
}

/* ---- DLCL: direct loops (k entries would need k scratch buffers) ---- */
#define CHUNK 2048
static void b_weighted_sum(ll_backend *be, ll_act *y, const ll_act *const *xs, const real *w, int k, size_t n) {
    (void)be;
#pragma omp parallel for schedule(static) num_threads(nthreads(n * k))
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        const size_t m = i0 + CHUNK < n ? CHUNK : n - i0;
        real acc[CHUNK]; /* fp32 sum, rounded once */
        for (size_t i = 0; i < m; i++) acc[i] = 0;
        for (int j = 0; j < k; j++) {
            const bf16 *x = (const bf16 *)xs[j] + i0;
            const real wj = w[j];
            /* one fma per term (the CUDA kernel's too): the same rounding whether or
             * not a compiler contracts the multiply-add */
            for (size_t i = 0; i < m; i++) acc[i] = fmaf(wj, ll_bf16_to_f32(x[i]), acc[i]);
        }
        bf16 *o = (bf16 *)y + i0;
        for (size_t i = 0; i < m; i++) o[i] = ll_f32_to_bf16((float)acc[i]);
    }
}
static void b_weighted_scatter(ll_backend *be, ll_act *const *ys, const real *w, const ll_act *x, int k, size_t n) {
    (void)be;
    const bf16 *xb = (const bf16 *)x;
#pragma omp parallel for schedule(static) num_threads(nthreads(n * k))
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        const size_t i1 = i0 + CHUNK < n ? i0 + CHUNK : n;
        for (int j = 0; j < k; j++) {
            bf16 *yj = (bf16 *)ys[j];
            const real wj = w[j];
            for (size_t i = i0; i < i1; i++)
                yj[i] = ll_f32_to_bf16((float)(ll_bf16_to_f32(yj[i]) + wj * ll_bf16_to_f32(xb[i])));
        }
    }
}
static void b_dots_acc(ll_backend *be, real *dst, const ll_act *x, const ll_act *const *ys, int k, size_t n) {
    (void)be;
    const bf16 *xb = (const bf16 *)x;
    for (int j = 0; j < k; j++) {
        const bf16 *yj = (const bf16 *)ys[j];
        double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) num_threads(nthreads(n))
        for (size_t i = 0; i < n; i++) s += (double)ll_bf16_to_f32(xb[i]) * ll_bf16_to_f32(yj[i]);
        dst[j] += (real)s;
    }
}

/* ---- ALD ---- */
static void b_ald_pool(ll_backend *be, real *G, const ll_act *h, const int *len, int B, int T, int C) {
    cpu_ald_pool(be, G, R(in1(0, h, (size_t)B * T * C)), len, B, T, C);
}
static void b_ald_unpool(ll_backend *be, ll_act *dh, const real *dG, const int *len, int B, int T, int C) {
    const size_t n = (size_t)B * T * C;
    real *s = scratch(0, n);
    cpu_ald_unpool(be, R(s), dG, len, B, T, C);
    back1(dh, s, n);
}

/* ---- attention: strided operands, rows of H*Dh columns ---- */
static void b_attention_fwd(ll_backend *be, ll_act *out, real *lse, const ll_act *q, int q_stride, const ll_act *k,
                            const ll_act *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                            int causal, real p, const ll_philox *rng, uint64_t rng_offset) {
    const size_t C = (size_t)H * Dh, nq = (size_t)B * Tq, nk = (size_t)B * Tk;
    real *o = scratch(0, nq * C);
    cpu_attention_fwd(be, R(o), lse, R(in2(1, q, nq, C, q_stride)), q_stride, R(in2(2, k, nk, C, kv_stride)),
                      R(in2(3, v, nk, C, kv_stride)), kv_stride, key_len, B, Tq, Tk, H, Dh, causal, p, rng,
                      rng_offset);
    back1(out, o, nq * C);
}

static void b_attention_bwd(ll_backend *be, ll_act *dq, ll_act *dk, ll_act *dv, const ll_act *dout,
                            const ll_act *out, const real *lse, const ll_act *q, int q_stride, const ll_act *k,
                            const ll_act *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                            int causal, real p, const ll_philox *rng, uint64_t rng_offset) {
    const size_t C = (size_t)H * Dh, nq = (size_t)B * Tq, nk = (size_t)B * Tk;
    real *sq = scratch(0, span(nq, C, q_stride)), *sk = scratch(1, span(nk, C, kv_stride));
    real *sv = scratch(2, span(nk, C, kv_stride));
    cpu_attention_bwd(be, R(sq), R(sk), R(sv), R(in1(3, dout, nq * C)), R(in1(4, out, nq * C)), lse,
                      R(in2(5, q, nq, C, q_stride)), q_stride, R(in2(6, k, nk, C, kv_stride)),
                      R(in2(7, v, nk, C, kv_stride)), kv_stride, key_len, B, Tq, Tk, H, Dh, causal, p, rng,
                      rng_offset);
    back2(dq, sq, nq, C, q_stride); /* overwritten: the heads' columns only */
    back2(dk, sk, nk, C, kv_stride);
    back2(dv, sv, nk, C, kv_stride);
}

/* ---- losses ---- */
static void b_xent_fwd_bwd(ll_backend *be, ll_act *logits, const int32_t *target, int N, int V, real eps, int pad,
                           real grad_scale, double *acc) {
    const size_t n = (size_t)N * V;
    real *s = in1(0, logits, n);
    cpu_xent_fwd_bwd(be, R(s), target, N, V, eps, pad, grad_scale, acc);
    back1(logits, s, n);
}
static void b_sym_kl(ll_backend *be, const ll_act *lpa, const ll_act *lpb, ll_act *da, ll_act *db,
                     const int32_t *target, int N, int V, int pad, real alpha, double *acc) {
    const size_t n = (size_t)N * V;
    real *ga = in1(0, da, n), *gb = in1(1, db, n);
    cpu_sym_kl(be, R(in1(2, lpa, n)), R(in1(3, lpb, n)), R(ga), R(gb), target, N, V, pad, alpha, acc);
    back1(da, ga, n);
    back1(db, gb, n);
}
static void b_log_softmax(ll_backend *be, ll_act *x, int N, int V) {
    const size_t n = (size_t)N * V;
    real *s = in1(0, x, n);
    cpu_log_softmax(be, R(s), N, V);
    back1(x, s, n);
}

/* one element per row: read where it lies */
static void b_pick_logp(ll_backend *be, real *out, const ll_act *logp, const int32_t *target, int N, int V, int pad) {
    (void)be;
    const bf16 *lp = (const bf16 *)logp;
    for (int r = 0; r < N; r++) out[r] = target[r] == pad ? 0 : ll_bf16_to_f32(lp[(size_t)r * V + target[r]]);
}

/* ---- decoding: copy_rows/reorder_rows are dtype-generic copies (inherited) ---- */
static void b_beam_topk(ll_backend *be, double *score, real *lp, int32_t *flat, const ll_act *logp, const double *cum,
                        const uint8_t *mode, int groups, int beam, int V, int k, int dg, double ds, int pad, int bos,
                        int eos) {
    cpu_beam_topk(be, score, lp, flat, R(in1(0, logp, (size_t)groups * beam * V)), cum, mode, groups, beam, V, k, dg,
                  ds, pad, bos, eos);
}

/* the rows widened to fp32 (exactly), then the fp32 draw */
static void b_sample_draw(ll_backend *be, int32_t *tok, double *lq, const ll_act *logp, const ll_sample_row *row,
                          const int32_t *ban, int rows, int V, const ll_sample_params *p) {
    cpu_sample_draw(be, tok, lq, R(in1(0, logp, (size_t)rows * V)), row, ban, rows, V, p);
}

/* the cache through the rows' ancestry: every referenced row lies below rows * row_stride */
static void b_attention_cached(ll_backend *be, ll_act *out, const ll_act *q, int q_stride, const ll_act *kv,
                               int kv_stride, size_t row_stride, const int *anc, int anc_stride, int n_keys,
                               const int *n_at, int rows, int H, int Dh) {
    const size_t C = (size_t)H * Dh, nq = (size_t)rows;
    real *o = scratch(0, nq * C);
    cpu_attention_cached(be, R(o), R(in2(1, q, nq, C, q_stride)), q_stride, R(in1(2, kv, (size_t)rows * row_stride)),
                         kv_stride, row_stride, anc, anc_stride, n_keys, n_at, rows, H, Dh);
    back1(out, o, nq * C);
}

/* the keys of every sentence: sents * S rows of kv_stride */
static void b_attn_align(ll_backend *be, int32_t *idx, const ll_act *q, int q_stride, const ll_act *kv, int kv_stride,
                         const int *key_len, int sents, int per_sent, int S, int H, int Dh) {
    const size_t C = (size_t)H * Dh, nq = (size_t)sents * per_sent, nk = (size_t)sents * S;
    cpu_attn_align(be, idx, R(in2(0, q, nq, C, q_stride)), q_stride, R(in2(1, kv, nk, C, kv_stride)), kv_stride,
                   key_len, sents, per_sent, S, H, Dh);
}

static void b_attn_probs(ll_backend *be, real *acc, int overwrite, real w, const ll_act *q, int q_stride,
                         const ll_act *kv, int kv_stride, const int *key_len, int sents, int per_sent, int S, int H,
                         int Dh) {
    const size_t C = (size_t)H * Dh, nq = (size_t)sents * per_sent, nk = (size_t)sents * S;
    cpu_attn_probs(be, acc, overwrite, w, R(in2(0, q, nq, C, q_stride)), q_stride, R(in2(1, kv, nk, C, kv_stride)),
                   kv_stride, key_len, sents, per_sent, S, H, Dh);
}

#define SET(op) g_bf16.op = b_##op
static void init_bf16(void) {
    g_bf16 = *ll_backend_cpu(); /* memory, latent ops, sumsq, grad_finish, adam, convert: as fp32 */
    g_bf16.act = LL_BF16;
    SET(gemm), SET(layernorm_fwd), SET(layernorm_bwd), SET(embed_fwd), SET(embed_bwd), SET(relu_fwd);
    SET(relu_bwd), SET(dropout_fwd), SET(dropout_bwd), SET(add), SET(add_scaled), SET(acc), SET(add_gated);
    SET(scale_gated), SET(dot_acc), SET(residual_fwd), SET(residual_bwd), SET(weighted_sum), SET(weighted_scatter), SET(dots_acc), SET(ald_pool);
    SET(ald_unpool), SET(attention_fwd), SET(attention_bwd), SET(xent_fwd_bwd), SET(sym_kl), SET(log_softmax), SET(pick_logp);
    g_bf16.ensemble_mix = cpu_ensemble_mix_bf16;
    g_bf16.add_col = cpu_add_col_bf16;
    g_bf16.fill_at = cpu_fill_at_bf16;
    g_bf16.expand_cols = cpu_expand_cols_bf16;
    SET(beam_topk), SET(sample_draw), SET(attention_cached), SET(attn_align), SET(attn_probs);
    /* decoding's packed fp32 kernel has no bf16 form: linear layers use gemm */
    g_bf16.linear_pack = NULL;
    g_bf16.linear_packed = NULL;
    g_bf16.linear_unpack = NULL;
}
#undef SET

ll_backend *ll_backend_cpu_precision(ll_dtype act) {
    if (act == LL_REAL_DTYPE) return ll_backend_cpu();
    if (act != LL_BF16) ll_die("the CPU backend has no %s activations in this build", ll_dtype_str(act));
    static int once; /* called from the main thread before any worker starts */
    if (!once) {
        init_bf16();
        once = 1;
    }
    return &g_bf16;
}

int ll_backend_is_cpu(const ll_backend *be) { return be == ll_backend_cpu() || (g_bf16.name && be == &g_bf16); }
