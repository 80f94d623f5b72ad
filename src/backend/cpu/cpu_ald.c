/* ALD (reference-spec §3.3) on backend memory: pooling of the top decoder
 * states over each sentence's target positions, the contrastive loss on the
 * pooled vectors with its gradient, and the un-pooling of that gradient. */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

void cpu_ald_pool(ll_backend *be, real *G, const ll_act *h_, const int *len, int B, int T, int C) {
    (void)be;
    const real *h = (const real *)h_;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < B; s++) {
        real *g = G + (size_t)s * C;
        const int n = len[s];
        for (int c = 0; c < C; c++) {
            double acc = 0; /* in double: T terms per column */
            for (int t = 0; t < n; t++) acc += h[((size_t)s * T + t) * C + c];
            g[c] = (real)(acc / (n > 0 ? n : 1));
        }
    }
}

void cpu_ald_loss(ll_backend *be, real *dG, double *acc, const real *G, int B, int C, real tau_r, const double *wp) {
    (void)be;
    const double w = *wp;
    const double tau = tau_r;
    double total = 0;
    if (dG) memset(dG, 0, sizeof(real) * 3 * (size_t)B * C);
    for (int s = 0; s < B; s++) {
        const real *g[3];
        double norm[3], cosv[3] = {0, 0, 0};
        for (int i = 0; i < 3; i++) {
            g[i] = G + ((size_t)i * B + s) * C;
            double q = 0;
            for (int c = 0; c < C; c++) q += (double)g[i][c] * g[i][c];
            norm[i] = sqrt(q);
        }
        for (int i = 1; i < 3; i++) {
            double d = 0;
            for (int c = 0; c < C; c++) d += (double)g[0][c] * g[i][c];
            cosv[i] = d / fmax(norm[0] * norm[i], 1e-8);
        }
        double delta = (cosv[2] - cosv[1]) / tau; /* s- - s+ */
        total += delta > 0 ? delta + log1p(exp(-delta)) : log1p(exp(delta)); /* softplus */
        if (!dG) continue;
        double sg = 1 / (1 + exp(-delta));       /* dJ/d delta */
        double ds[3] = {0, -sg / tau, sg / tau}; /* dJ/dcos+ , dJ/dcos- */
        for (int i = 1; i < 3; i++) {
            double den = fmax(norm[0] * norm[i], 1e-8);
            real *d0 = dG + (size_t)s * C, *di = dG + ((size_t)i * B + s) * C;
            for (int c = 0; c < C; c++) {
                /* d cos(a,b)/da = b/(|a||b|) - cos a/|a|^2 */
                d0[c] += (real)(w * ds[i] * (g[i][c] / den - cosv[i] * g[0][c] / fmax(norm[0] * norm[0], 1e-16)));
                di[c] += (real)(w * ds[i] * (g[0][c] / den - cosv[i] * g[i][c] / fmax(norm[i] * norm[i], 1e-16)));
            }
        }
    }
    *acc += w * total;
}

void cpu_ald_unpool(ll_backend *be, ll_act *dh_, const real *dG, const int *len, int B, int T, int C) {
    (void)be;
    real *dh = (real *)dh_;
#pragma omp parallel for schedule(static)
    for (int s = 0; s < B; s++) {
        const int n = len[s];
        for (int t = 0; t < T; t++) {
            real *d = dh + ((size_t)s * T + t) * C;
            if (t >= n) {
                memset(d, 0, sizeof(real) * C);
                continue;
            }
            for (int c = 0; c < C; c++) d[c] = dG[(size_t)s * C + c] / n;
        }
    }
}
