/* Layer norm over the last dimension, eps = 1e-5 (PyTorch/fairseq default). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"

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
        real m = 0;
#pragma omp simd reduction(+ : m)
        for (int c = 0; c < C; c++) m += xr[c];
        m /= C;
        real v = 0;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) {
            real d = xr[c] - m;
            v += d * d;
        }
        v /= C;
        real s = 1 / sqrt(v + (real)LN_EPS);
        for (int c = 0; c < C; c++) o[c] = (xr[c] - m) * s * w[c] + b[c];
        mean[r] = m;
        rstd[r] = s;
    }
}

void cpu_layernorm_bwd(ll_backend *be, ll_act *dx_, real *dw, real *db, const ll_act *dout_, const ll_act *x_,
                       const real *w, const real *mean, const real *rstd, int N, int C) {
    (void)be;
    real *dx = (real *)dx_;
    const real *dout = (const real *)dout_, *x = (const real *)x_;
#pragma omp parallel
    {
        /* Per-thread partial sums for dw/db, reduced at the end. */
        real *pdw = ll_aligned_alloc(sizeof(real) * 2 * C), *pdb = pdw + C;
#pragma omp for schedule(static)
        for (int r = 0; r < N; r++) {
            const real *xr = x + (size_t)r * C, *g = dout + (size_t)r * C;
            real *d = dx + (size_t)r * C;
            real m = mean[r], s = rstd[r];
            real sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
            for (int c = 0; c < C; c++) {
                real xh = (xr[c] - m) * s, gw = g[c] * w[c];
                sum_g += gw;
                sum_gx += gw * xh;
                pdw[c] += g[c] * xh;
                pdb[c] += g[c];
            }
            sum_g /= C;
            sum_gx /= C;
            for (int c = 0; c < C; c++) {
                real xh = (xr[c] - m) * s;
                d[c] += s * (g[c] * w[c] - sum_g - xh * sum_gx);
            }
        }
#pragma omp critical
        for (int c = 0; c < C; c++) {
            dw[c] += pdw[c];
            db[c] += pdb[c];
        }
        free(pdw);
    }
}
