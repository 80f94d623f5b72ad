/* Layer norm over the last dimension, eps = 1e-5 (PyTorch/fairseq default).
 * Every sum runs in a fixed order (fixed_sum.h) and the per-thread dw/db
 * partials are added in thread order, so a build's sanitizers, -O level or
 * ISA and the run's thread timing never change the bits. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"
#include "fixed_sum.h"

#define LN_EPS 1e-5

void cpu_layernorm_fwd(ll_backend *be, ll_act *out_, real *mean, real *rstd, const ll_act *x_, const real *w,
                       const real *b, int N, int C) {
    (void)be;
    real *out = (real *)out_;
    const real *x = (const real *)x_;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        const real *xr = x + (size_t)r * C;
        real *o = out + (size_t)r * C;
        const real m = ll_sum_fixed(xr, C) / C;
        const real v = ll_sumsq_dev_fixed(xr, m, C) / C;
        const real s = 1 / sqrt(v + (real)LN_EPS);
        for (int c = 0; c < C; c++) o[c] = ll_fma((xr[c] - m) * s, w[c], b[c]);
        mean[r] = m;
        rstd[r] = s;
    }
}

void cpu_layernorm_bwd(ll_backend *be, ll_act *dx_, real *dw, real *db, const ll_act *dout_, const ll_act *x_,
                       const real *w, const real *mean, const real *rstd, int N, int C) {
    (void)be;
    real *dx = (real *)dx_;
    const real *dout = (const real *)dout_, *x = (const real *)x_;
#ifdef _OPENMP
    const int nt = omp_get_max_threads();
#else
    const int nt = 1;
#endif
    /* per-thread partial sums for dw/db (zeroed), added in thread order below */
    real *part = ll_aligned_alloc(sizeof(real) * 2 * (size_t)C * (size_t)nt);
    int used = 1;
#pragma omp parallel num_threads(nt)
    {
#ifdef _OPENMP
        const int t = omp_get_thread_num();
#pragma omp single
        used = omp_get_num_threads();
#else
        const int t = 0;
#endif
        real *pdw = part + (size_t)t * 2 * C, *pdb = pdw + C;
#pragma omp for schedule(static)
        for (int r = 0; r < N; r++) {
            const real *xr = x + (size_t)r * C, *g = dout + (size_t)r * C;
            real *d = dx + (size_t)r * C;
            const real m = mean[r], s = rstd[r];
            real ag[LL_LANES] = {0}, agx[LL_LANES] = {0};
            for (int c = 0; c < C; c++) {
                const real xh = (xr[c] - m) * s, gw = g[c] * w[c];
                ag[c % LL_LANES] = ll_fma(g[c], w[c], ag[c % LL_LANES]); /* explicit: no contraction choice */
                agx[c % LL_LANES] = ll_fma(gw, xh, agx[c % LL_LANES]);
                pdw[c] = ll_fma(g[c], xh, pdw[c]);
                pdb[c] += g[c];
            }
            const real sum_g = ll_lanes_fold(ag) / C, sum_gx = ll_lanes_fold(agx) / C;
            for (int c = 0; c < C; c++) {
                const real xh = (xr[c] - m) * s;
                const real t = ll_fma(-xh, sum_gx, ll_fma(g[c], w[c], -sum_g));
                d[c] = ll_fma(s, t, d[c]);
            }
        }
    }
    for (int t = 0; t < used; t++) {
        const real *pdw = part + (size_t)t * 2 * C, *pdb = pdw + C;
        for (int c = 0; c < C; c++) {
            dw[c] += pdw[c];
            db[c] += pdb[c];
        }
    }
    free(part);
}
