/* Latent-depth ops (reference-spec §1.2-§1.5) on backend memory: Gumbel
 * sampling of the layer gates, their straight-through gradient, the KL to the
 * prior, the target-depth loss L_K and E[L].  O(rows x layers) arithmetic
 * each, run once per forward or update; the CUDA backend runs the same
 * formulas in one small kernel each. */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

static real sigm(real x) { return 1 / (1 + rexp(-x)); }

void cpu_latent_sample(ll_backend *be, real *z, real *dzda, const real *a, int L, const ll_philox *rng, real tau,
                       int hard) {
    (void)be;
    for (int l = 0; l < L; l++) {
        /* g1 - g2 ~ Logistic(0,1); the two Gumbels are drawn explicitly, as the reference does */
        double g1 = -log(-log(ll_philox_uniform(rng, 2 * (uint64_t)l)));
        double g2 = -log(-log(ll_philox_uniform(rng, 2 * (uint64_t)l + 1)));
        real soft = sigm((real)((a[l] + g1 - g2) / tau));
        z[l] = hard ? (soft > (real)0.5) : soft; /* strictly > 0.5, as the code */
        dzda[l] = soft * (1 - soft) / tau;         /* straight-through: gradient of the soft sample */
    }
}

void cpu_latent_grad(ll_backend *be, real *dlogits, const real *dgate, const real *dzda, int L) {
    (void)be;
    for (int l = 0; l < L; l++) dlogits[l] += dgate[l] * dzda[l];
}

/* Prior probability of using each layer (stop-gradient): from the samples z
 * (use_samples) or the posteriors q of the active rows, or the Beta mean. */
static void prior(const ll_latent_prior *pr, const real *logits, const real *z, int use_samples, double *p) {
    const int L = pr->L;
    if (!pr->prior_agg) {
        for (int l = 0; l < L; l++) p[l] = pr->prior_p;
        return;
    }
    for (int l = 0; l < L; l++) p[l] = 0;
    for (int r = 0; r < pr->rows; r++) {
        if (!pr->active[r]) continue;
        for (int l = 0; l < L; l++)
            p[l] += use_samples ? z[(size_t)r * L + l] : ll_latent_q(logits[(size_t)r * L + l]);
    }
    if (pr->agg_across_layers) {
        double tot = 0;
        for (int l = 0; l < L; l++) tot += p[l];
        for (int l = 0; l < L; l++) p[l] = tot > 0 ? p[l] / tot : 1.0 / L;
    } else {
        for (int l = 0; l < L; l++) p[l] /= pr->n_active ? pr->n_active : 1;
    }
}

void cpu_latent_kl(ll_backend *be, real *dlogits, double *acc, const real *logits, const real *z, const real *dzda,
                   const ll_latent_prior *pr, int row, int reference, double w) {
    (void)be;
    const int L = pr->L;
    double p[4096], kl = 0; /* L <= 4096: ll_latent_sample checks */
    real *g = dlogits + (size_t)row * L;
    if (reference) {
        prior(pr, logits, z, 1, p);
        const real *zr = z + (size_t)row * L, *dr = dzda + (size_t)row * L;
        for (int l = 0; l < L; l++) {
            double s = zr[l], lp = log(p[l] + 1e-7);
            kl += s * (log(s + 1e-7) - lp);
            double ds = log(s + 1e-7) + s / (s + 1e-7) - lp;
            g[l] += (real)(w * ds / L * dr[l]);
        }
        kl /= L;
    } else {
        prior(pr, logits, z, 0, p);
        const real *a = logits + (size_t)row * L;
        for (int l = 0; l < L; l++) {
            double q = ll_latent_q(a[l]), pl = fmin(fmax(p[l], 1e-6), 1 - 1e-6);
            double qc = fmin(fmax(q, 1e-12), 1 - 1e-12);
            kl += qc * log(qc / pl) + (1 - qc) * log((1 - qc) / (1 - pl));
            /* d/da of the two-sided KL: (a - logit p) q (1 - q) */
            g[l] += (real)(w * (a[l] - log(pl / (1 - pl))) * q * (1 - q));
        }
    }
    *acc += w * kl;
}

void cpu_latent_lk(ll_backend *be, real *dlogits, double *acc, const real *z, const real *dzda,
                   const ll_latent_prior *pr, int K, int squared, double w) {
    (void)be;
    const int L = pr->L, na = pr->n_active ? pr->n_active : 1;
    double S = 0;
    for (int l = 0; l < L; l++) {
        double u = 0;
        for (int r = 0; r < pr->rows; r++)
            if (pr->active[r]) u += z[(size_t)r * L + l];
        S += u / na;
    }
    const double val = squared ? (S - K) * (S - K) : fabs(S - K);
    const double dS = squared ? 2 * (S - K) : (S > K ? 1 : S < K ? -1 : 0);
    for (int r = 0; r < pr->rows; r++) {
        if (!pr->active[r]) continue;
        const real *d = dzda + (size_t)r * L;
        for (int l = 0; l < L; l++) dlogits[(size_t)r * L + l] += (real)(w * dS / na * d[l]);
    }
    *acc += w * val;
}

void cpu_latent_depth(ll_backend *be, double *acc, const real *logits, const ll_latent_prior *pr) {
    (void)be;
    double e = 0;
    for (int r = 0; r < pr->rows; r++)
        if (pr->active[r])
            for (int l = 0; l < pr->L; l++) e += ll_latent_q(logits[(size_t)r * pr->L + l]);
    *acc += e / (pr->n_active ? pr->n_active : 1);
}

void cpu_latent_q(ll_backend *be, real *q, const real *logits, int L) {
    (void)be;
    for (int l = 0; l < L; l++) q[l] = (real)ll_latent_q(logits[l]);
}
