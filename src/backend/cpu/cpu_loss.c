/* Label-smoothed cross-entropy (fused with its gradient), DDR's symmetric KL, log-softmax. */
#include <math.h>

#include "cpu_internal.h"
#include "vecmath.h"

void cpu_xent_fwd_bwd(ll_backend *be, ll_act *logits_, const int32_t *target, int N, int V, real eps, int pad,
                      real grad_scale, double *acc) {
    (void)be;
    real *logits = (real *)logits_;
    /* fairseq (since 791ab7c2): loss = (1-eps-eps_i)*nll + eps_i*smooth, eps_i = eps/(V-1),
     * i.e. cross-entropy against q[y] = 1-eps, q[v!=y] = eps_i.  Gradient = softmax - q. */
    const double eps_i = V > 1 ? (double)eps / (V - 1) : 0;
    double L = 0, NL = 0;
#pragma omp parallel for reduction(+ : L, NL) schedule(static)
    for (int r = 0; r < N; r++) {
        real *x = logits + (size_t)r * V;
        int y = target[r];
        if (y == pad) {
            for (int v = 0; v < V; v++) x[v] = 0;
            continue;
        }
        const real mx = ll_row_max(x, V);
        real sumx; /* float partial sums; 8k terms keep ~1e-6 relative error */
        const real sum = ll_row_exp_inplace(x, V, mx, &sumx); /* keep exp for the gradient */
        double lse = mx + log(sum);
        /* lp[y] = logit_y - lse; recover logit_y from the stored exp. */
        double ly = log((double)x[y]) + mx;
        double nll = lse - ly;
        double smooth = V * lse - sumx;
        L += (1 - eps - eps_i) * nll + eps_i * smooth;
        NL += nll;
        ll_row_affine(x, V, grad_scale / sum, -grad_scale * (real)eps_i);
        x[y] -= grad_scale * (real)(1 - eps - eps_i);
    }
    acc[0] += L;
    acc[1] += NL;
}

void cpu_sym_kl(ll_backend *be, const ll_act *lpa_, const ll_act *lpb_, ll_act *da_, ll_act *db_,
                const int32_t *target, int N, int V, int pad, real alpha, double *acc) {
    (void)be;
    const real *lpa = (const real *)lpa_, *lpb = (const real *)lpb_;
    real *da = (real *)da_, *db = (real *)db_;
    /* d KL(p||q)/dz_p = p (log p - log q - KL(p||q)); d KL(q||p)/dz_p = p - q. */
    double total = 0;
    const real h = alpha / 2;
#pragma omp parallel for reduction(+ : total) schedule(static)
    for (int r = 0; r < N; r++) {
        if (target[r] == pad) continue;
        const real *a = lpa + (size_t)r * V, *b = lpb + (size_t)r * V;
        real *ga = da + (size_t)r * V, *gb = db + (size_t)r * V;
        double kab = 0, kba = 0;
        for (int v = 0; v < V; v++) {
            double pa = exp(a[v]), pb = exp(b[v]);
            kab += pa * (a[v] - b[v]);
            kba += pb * (b[v] - a[v]);
        }
        for (int v = 0; v < V; v++) {
            real pa = vexp(a[v]), pb = vexp(b[v]);
            ga[v] += h * ((pa - pb) + pa * (a[v] - b[v] - (real)kab));
            gb[v] += h * ((pb - pa) + pb * (b[v] - a[v] - (real)kba));
        }
        total += kab + kba;
    }
    *acc += h * total;
}

void cpu_log_softmax(ll_backend *be, ll_act *x_, int N, int V) {
    (void)be;
    real *x = (real *)x_;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        real *xr = x + (size_t)r * V;
        const real mx = ll_row_max(xr, V);
        const real lse = mx + rlog(ll_row_sum_exp(xr, V, mx));
        ll_row_affine(xr, V, 1, -lse);
    }
}

/* ensemble_mix: ll_mix_logp (vecmath.h), in chunks over the threads */
void cpu_ensemble_mix(ll_backend *be, ll_act *acc_, const ll_act *x_, size_t n, double b, double c) {
    (void)be;
    real *acc = (real *)acc_;
    const real *x = (const real *)x_;
    enum { CHUNK = 1 << 14 };
    const long chunks = (long)((n + CHUNK - 1) / CHUNK);
#pragma omp parallel for schedule(static) if (chunks > 4)
    for (long k = 0; k < chunks; k++) {
        const size_t i0 = (size_t)k * CHUNK, m = n - i0 < CHUNK ? n - i0 : CHUNK;
#ifdef LL_VEC16
        if (ll_cpu_avx512) {
            ll_mix_logp_avx512(acc + i0, x + i0, m, (float)b, (float)c);
            continue;
        }
        if (ll_cpu_avx2) {
            ll_mix_logp_avx2(acc + i0, x + i0, m, (float)b, (float)c);
            continue;
        }
#endif
        for (size_t i = i0; i < i0 + m; i++) acc[i] = ll_mix_logp(acc[i], x[i] + (real)b, (real)c);
    }
}

void cpu_ensemble_mix_bf16(ll_backend *be, ll_act *acc_, const ll_act *x_, size_t n, double b, double c) {
    (void)be;
    uint16_t *acc = (uint16_t *)acc_;
    const uint16_t *x = (const uint16_t *)x_;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        acc[i] = ll_f32_to_bf16((float)ll_mix_logp(ll_bf16_to_f32(acc[i]), ll_bf16_to_f32(x[i]) + (real)b, (real)c));
}

void cpu_add_col(ll_backend *be, ll_act *x_, int rows, int V, int col, real val) {
    (void)be;
    real *x = (real *)x_;
    for (int r = 0; r < rows; r++) x[(size_t)r * V + col] += val;
}

void cpu_add_col_bf16(ll_backend *be, ll_act *x_, int rows, int V, int col, real val) {
    (void)be;
    uint16_t *x = (uint16_t *)x_;
    for (int r = 0; r < rows; r++) {
        uint16_t *p = x + (size_t)r * V + col;
        *p = ll_f32_to_bf16(ll_bf16_to_f32(*p) + (float)val);
    }
}

void cpu_fill_at(ll_backend *be, ll_act *x_, const int32_t *idx, int n, real val) {
    (void)be;
    real *x = (real *)x_;
    for (int i = 0; i < n; i++) x[idx[i]] = val;
}

void cpu_fill_at_bf16(ll_backend *be, ll_act *x_, const int32_t *idx, int n, real val) {
    (void)be;
    uint16_t *x = (uint16_t *)x_;
    const uint16_t v = ll_f32_to_bf16((float)val);
    for (int i = 0; i < n; i++) x[idx[i]] = v;
}

/* One row at a time: fill, then the shortlist's columns (K << V: the fill is the pass that counts). */
void cpu_expand_cols(ll_backend *be, ll_act *dst_, const ll_act *src_, const int32_t *cols, int rows, int V, int K,
                     real fill) {
    (void)be;
    real *dst = (real *)dst_;
    const real *src = (const real *)src_;
#pragma omp parallel for schedule(static) if ((size_t)rows * V > 65536)
    for (int r = 0; r < rows; r++) {
        real *d = dst + (size_t)r * V;
        const real *s = src + (size_t)r * K;
        for (int v = 0; v < V; v++) d[v] = fill;
        for (int j = 0; j < K; j++) d[cols[j]] = s[j];
    }
}

void cpu_expand_cols_bf16(ll_backend *be, ll_act *dst_, const ll_act *src_, const int32_t *cols, int rows, int V,
                          int K, real fill) {
    (void)be;
    uint16_t *dst = (uint16_t *)dst_;
    const uint16_t *src = (const uint16_t *)src_, f = ll_f32_to_bf16((float)fill);
#pragma omp parallel for schedule(static) if ((size_t)rows * V > 65536)
    for (int r = 0; r < rows; r++) {
        uint16_t *d = dst + (size_t)r * V;
        const uint16_t *s = src + (size_t)r * K;
        for (int v = 0; v < V; v++) d[v] = f;
        for (int j = 0; j < K; j++) d[cols[j]] = s[j];
    }
}

void cpu_pick_logp(ll_backend *be, real *out, const ll_act *logp_, const int32_t *target, int N, int V, int pad) {
    (void)be;
    const real *logp = (const real *)logp_;
    for (int r = 0; r < N; r++) out[r] = target[r] == pad ? 0 : logp[(size_t)r * V + target[r]];
}
