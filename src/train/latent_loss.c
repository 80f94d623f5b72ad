/* Latent-depth losses (reference-spec §0.1, §1.4, §1.5): the KL of each
 * language's posterior against a Beta(a,b) prior or the aggregated posterior,
 * and the target-depth loss L_K, with their annealing ramps.  Everything here
 * is O(languages x layers) host arithmetic; gradients go to the logits. */
#include <math.h>
#include <string.h>

#include "ll/latent.h"

static int layers_of(const ll_model *m, int stack) { return stack ? m->hp.Ld : m->hp.Le; }
static double sigm(double x) { return 1 / (1 + exp(-x)); }
static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

void ll_latent_ctx_init(ll_latent_ctx *c, const ll_config *cfg, const ll_model *m) {
    memset(c, 0, sizeof *c);
    c->cfg = cfg;
    for (int k = 0; k < cfg->n_train; k++) { /* the rows training samples (latent_rows.c) */
        const int sl = ll_config_lang_index(cfg, cfg->train[k].src_lang), tl = ll_config_lang_index(cfg, cfg->train[k].tgt_lang);
        c->active[0][ll_latent_pair_row(&m->hp, cfg, 0, sl, tl)] = c->active[1][ll_latent_pair_row(&m->hp, cfg, 1, sl, tl)] = 1;
    }
    for (int s = 0; s < 2; s++)
        for (int r = 0; r < m->hp.latent_rows; r++) c->n_active[s] += c->active[s][r];
}

double ll_latent_kl_weight(const ll_config *cfg, long t) {
    if (t < cfg->latent_soft_update) return 0;
    if (cfg->latent_anneal_updates <= 0) return cfg->latent_beta;
    return cfg->latent_beta * clamp01((double)(t - cfg->latent_soft_update) / cfg->latent_anneal_updates);
}

double ll_latent_lk_weight(const ll_config *cfg, long t) {
    long start = (long)cfg->latent_soft_update + cfg->latent_anneal_updates;
    if (t < start) return 0;
    if (cfg->latent_lk_anneal_updates <= 0) return cfg->latent_lambda;
    return cfg->latent_lambda * clamp01((double)(t - start) / cfg->latent_lk_anneal_updates);
}

/* Prior probability of using each layer (stop-gradient). */
static void prior(ll_model *m, const ll_latent_ctx *c, int stack, int use_samples, double *p) {
    const ll_config *cfg = c->cfg;
    const int L = layers_of(m, stack);
    if (strcmp(cfg->latent_prior, "agged_posterior") != 0) {
        for (int l = 0; l < L; l++) p[l] = cfg->latent_prior_a / (cfg->latent_prior_a + cfg->latent_prior_b);
        return;
    }
    /* aggregated posterior over the languages of this stack */
    real a[4096];
    for (int l = 0; l < L; l++) p[l] = 0;
    for (int r = 0; r < m->hp.latent_rows; r++) {
        if (!c->active[stack][r]) continue;
        if (use_samples) {
            const real *z = m->latent_z[stack] + (size_t)r * L;
            for (int l = 0; l < L; l++) p[l] += z[l];
        } else {
            ll_latent_logits(m, stack, r, a);
            for (int l = 0; l < L; l++) p[l] += sigm(a[l]);
        }
    }
    if (!strcmp(cfg->latent_agg_norm, "across_layers")) {
        double tot = 0;
        for (int l = 0; l < L; l++) tot += p[l];
        for (int l = 0; l < L; l++) p[l] = tot > 0 ? p[l] / tot : 1.0 / L;
    } else {
        for (int l = 0; l < L; l++) p[l] /= c->n_active[stack] ? c->n_active[stack] : 1;
    }
}

double ll_latent_kl(ll_model *m, ll_latent_ctx *c, int stack, int row, long update, long ntokens) {
    if (!ll_latent_on(m, stack)) return 0;
    c->sampled[stack][row] = 1;
    const ll_config *cfg = c->cfg;
    const double w = ll_latent_kl_weight(cfg, update) * ntokens;
    if (w <= 0) return 0;
    const int L = layers_of(m, stack);
    const int reference = !strcmp(cfg->latent_kl, "reference");
    double p[4096], kl = 0;
    real g[4096];
    if (reference) {
        /* the code skips the aggregated KL until every language has been sampled */
        if (!strcmp(cfg->latent_prior, "agged_posterior"))
            for (int r = 0; r < m->hp.latent_rows; r++)
                if (c->active[stack][r] && !c->sampled[stack][r]) return 0;
        prior(m, c, stack, 1, p);
        const real *z = m->latent_z[stack] + (size_t)row * L, *dzda = m->latent_dzda[stack] + (size_t)row * L;
        for (int l = 0; l < L; l++) {
            double s = z[l], lp = log(p[l] + 1e-7);
            kl += s * (log(s + 1e-7) - lp);
            double ds = log(s + 1e-7) + s / (s + 1e-7) - lp;
            g[l] = (real)(w * ds / L * dzda[l]);
        }
        kl /= L;
    } else {
        prior(m, c, stack, 0, p);
        real a[4096];
        ll_latent_logits(m, stack, row, a);
        for (int l = 0; l < L; l++) {
            double q = sigm(a[l]), pl = fmin(fmax(p[l], 1e-6), 1 - 1e-6);
            double qc = fmin(fmax(q, 1e-12), 1 - 1e-12);
            kl += qc * log(qc / pl) + (1 - qc) * log((1 - qc) / (1 - pl));
            /* d/da of the two-sided KL: (a - logit p) q (1 - q) */
            g[l] = (real)(w * (a[l] - log(pl / (1 - pl))) * q * (1 - q));
        }
    }
    ll_latent_add_grad(m, stack, row, g);
    return w * kl;
}

void ll_latent_utilisation(const ll_model *m, const ll_latent_ctx *c, int stack, double *u) {
    const int L = layers_of(m, stack);
    for (int l = 0; l < L; l++) u[l] = 0;
    for (int r = 0; r < m->hp.latent_rows; r++) {
        if (!c->active[stack][r]) continue;
        const real *z = m->latent_z[stack] + (size_t)r * L;
        for (int l = 0; l < L; l++) u[l] += z[l];
    }
    for (int l = 0; l < L; l++) u[l] /= c->n_active[stack] ? c->n_active[stack] : 1;
}

double ll_latent_lk(ll_model *m, const ll_latent_ctx *c, int stack, long update, long ntokens_total) {
    if (!ll_latent_on(m, stack)) return 0;
    const ll_config *cfg = c->cfg;
    const int K = stack ? cfg->latent_target_dec : cfg->latent_target_enc;
    const double w = ll_latent_lk_weight(cfg, update) * ntokens_total;
    if (K < 0 || w <= 0) return 0;
    const int L = layers_of(m, stack);
    double u[4096], S = 0;
    ll_latent_utilisation(m, c, stack, u);
    for (int l = 0; l < L; l++) S += u[l];
    const int squared = !strcmp(cfg->latent_lk_form, "squared");
    const double val = squared ? (S - K) * (S - K) : fabs(S - K);
    const double dS = squared ? 2 * (S - K) : (S > K ? 1 : S < K ? -1 : 0);
    real g[4096];
    for (int r = 0; r < m->hp.latent_rows; r++) {
        if (!c->active[stack][r]) continue;
        const real *dzda = m->latent_dzda[stack] + (size_t)r * L;
        for (int l = 0; l < L; l++) g[l] = (real)(w * dS / c->n_active[stack] * dzda[l]);
        ll_latent_add_grad(m, stack, r, g);
    }
    return w * val;
}
