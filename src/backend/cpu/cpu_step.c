/* Ops that keep a training step on the backend: residual branches scaled by
 * scalars that live in backend memory (latent gates, ReZero alphas), their
 * gradients, the gradient norm and clipping decided in the stats buffer, and
 * Adam reading its scale, skip flag and step count from there. */
#include <math.h>

#include "cpu_internal.h"
#include "ll/spike.h"
#include "fixed_sum.h"

static real gate_of(const real *g1, const real *g2) { return (g1 ? *g1 : 1) * (g2 ? *g2 : 1); }

void cpu_add_gated(ll_backend *be, ll_act *y_, const ll_act *a_, const ll_act *b_, const real *g1, const real *g2,
                   size_t n) {
    (void)be;
    real *y = (real *)y_;
    const real *a = (const real *)a_, *b = (const real *)b_;
    const real g = gate_of(g1, g2);
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + g * b[i];
}

void cpu_scale_gated(ll_backend *be, ll_act *x_, const real *g1, const real *g2, size_t n) {
    (void)be;
    real *x = (real *)x_;
    const real g = gate_of(g1, g2);
    if (g == 1) return;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= g;
}

void cpu_dot_acc(ll_backend *be, real *dst, const ll_act *a_, const ll_act *b_, size_t n, const real *mul) {
    (void)be;
    const real *a = (const real *)a_, *b = (const real *)b_;
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    *dst += (real)(s * (mul ? *mul : 1));
}

void cpu_sumsq(ll_backend *be, double *acc, const real *x, size_t n) {
    (void)be;
    /* float partial sums over 4096-element blocks (fixed order), summed in double: vectorises,
     * and the float error stays ~1e-7 relative per block */
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += 4096) {
        const size_t i1 = i0 + 4096 < n ? i0 + 4096 : n;
        s += ll_dot_fixed(x + i0, x + i0, (int)(i1 - i0));
    }
    *acc += s;
}

void cpu_grad_finish(ll_backend *be, double *st, double grad_scale, double clip_norm, int phi_step) {
    (void)be;
    const double norm = grad_scale * sqrt(st[LL_ST_GSUMSQ]);
    st[LL_ST_GNORM] = norm;
    /* fairseq clip_grad_norm_: coef = min(1, clip / (norm + 1e-6)) */
    st[LL_ST_GMUL] = grad_scale * (clip_norm > 0 && norm > clip_norm ? clip_norm / (norm + 1e-6) : 1.0);
    st[LL_ST_SKIP] = !isfinite(norm) || !isfinite(st[LL_ST_LOSS]) || st[LL_ST_SPIKE] != 0;
    if (st[LL_ST_SKIP]) return;
    st[LL_ST_ADAM_T] += 1;
    if (phi_step) st[LL_ST_ADAM_T_PHI] += 1;
}

void cpu_spike_check(ll_backend *be, double *st, double *state, int window, double grad_scale, double z_loss,
                     double z_gnorm) {
    (void)be;
    ll_spike_update(st, state, window, grad_scale, z_loss, z_gnorm);
}

void cpu_adam(ll_backend *be, real *p, ll_act *p_act, const real *g, real *m, real *v, size_t n, real lr, real b1,
              real b2, real eps, real wd, const double *stats, int t_slot) {
    if (stats[LL_ST_SKIP] != 0) return;
    const double t = stats[t_slot];
    /* fairseq adam: decoupled weight decay, eps added to the uncorrected sqrt(v). */
    const real step = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t));
    const real decay = lr * wd, c1 = 1 - b1, c2 = 1 - b2, gm = (real)stats[LL_ST_GMUL];
    /* float arithmetic throughout (sqrtf, not a double sqrt) so the loop vectorises */
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        const real gi = gm * g[i];
        const real mi = b1 * m[i] + c1 * gi, vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const real pi = p[i] - decay * p[i];
        p[i] = pi - step * mi / (rsqrt_(vi) + eps);
    }
    /* the activation-dtype copy, when it is not p itself (bf16: a second pass;
     * fusing it into the loop above would keep the fp32 loop from vectorising as well) */
    if (p_act) cpu_convert(be, p_act, be->act, p, LL_REAL_DTYPE, n);
}

void cpu_ema(ll_backend *be, real *e, const real *p, size_t n, real decay, const double *stats) {
    (void)be;
    if (stats[LL_ST_SKIP] != 0) return;
    /* one fma, as the CUDA kernel: the same bits on both, and p itself when decay is 0 */
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) e[i] = ll_fma(decay, e[i] - p[i], p[i]);
}

/* ---- DLCL: combinations of many entries ---- */

#define CHUNK 2048 /* elements per task: the entries' slices stay in L1/L2 */

void cpu_weighted_sum(ll_backend *be, ll_act *y_, const ll_act *const *xs_, const real *w, int k, size_t n) {
    (void)be;
    real *y = (real *)y_;
    const real *const *xs = (const real *const *)xs_;
#pragma omp parallel for schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        const size_t i1 = i0 + CHUNK < n ? i0 + CHUNK : n;
        const real w0 = w[0];
        const real *x0 = xs[0];
#pragma omp simd
        for (size_t i = i0; i < i1; i++) y[i] = w0 * x0[i];
        for (int j = 1; j < k; j++) {
            const real wj = w[j];
            const real *xj = xs[j];
#pragma omp simd
            for (size_t i = i0; i < i1; i++) y[i] += wj * xj[i];
        }
    }
}

void cpu_weighted_scatter(ll_backend *be, ll_act *const *ys_, const real *w, const ll_act *x_, int k, size_t n) {
    (void)be;
    real *const *ys = (real *const *)ys_;
    const real *x = (const real *)x_;
#pragma omp parallel for schedule(static)
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        const size_t i1 = i0 + CHUNK < n ? i0 + CHUNK : n;
        for (int j = 0; j < k; j++) {
            const real wj = w[j];
            real *yj = ys[j];
#pragma omp simd
            for (size_t i = i0; i < i1; i++) yj[i] += wj * x[i];
        }
    }
}

void cpu_dots_acc(ll_backend *be, real *dst, const ll_act *x_, const ll_act *const *ys_, int k, size_t n) {
    (void)be;
    const real *x = (const real *)x_;
    const real *const *ys = (const real *const *)ys_;
    for (int j = 0; j < k; j++) {
        const real *yj = ys[j];
        double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
        for (size_t i = 0; i < n; i++) s += (double)x[i] * yj[i];
        dst[j] += (real)s;
    }
}
