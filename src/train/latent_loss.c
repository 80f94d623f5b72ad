/* Latent-depth losses (reference-spec §0.1, §1.4, §1.5): the KL of each
 * language's posterior against a Beta(a,b) prior or the aggregated posterior,
 * and the target-depth loss L_K, with their annealing ramps.  The arithmetic
 * runs as backend ops (latent_kl, latent_lk); this file holds the schedule
 * and the per-stack description of rows and prior the ops read. */
#include <math.h>
#include <string.h>

#include "ll/latent.h"

static int layers_of(const ll_model *m, int stack) { return stack ? m->hp.Ld : m->hp.Le; }
static double clamp01(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }

/* The prior's settings, from the config (read at every use: the config is
 * the source of truth). */
static const ll_latent_prior *prior_of(ll_latent_ctx *c, int stack) {
    const ll_config *cfg = c->cfg;
    ll_latent_prior *p = &c->prior[stack];
    p->prior_agg = !strcmp(cfg->latent_prior, "agged_posterior");
    p->agg_across_layers = !strcmp(cfg->latent_agg_norm, "across_layers");
    p->prior_p = cfg->latent_prior_a / (cfg->latent_prior_a + cfg->latent_prior_b);
    return p;
}

void ll_latent_ctx_init(ll_latent_ctx *c, const ll_config *cfg, const ll_model *m) {
    memset(c, 0, sizeof *c);
    c->cfg = cfg;
    if (m->hp.latent_rows > LL_LATENT_MAX_ROWS)
        ll_die("latent depth supports at most %d languages (rows)", LL_LATENT_MAX_ROWS);
    for (int s = 0; s < 2; s++) {
        c->prior[s].L = layers_of(m, s);
        c->prior[s].rows = m->hp.latent_rows;
        prior_of(c, s);
    }
    for (int k = 0; k < cfg->n_train; k++) { /* the rows training samples (latent_rows.c) */
        const int sl = ll_config_lang_index(cfg, cfg->train[k].src_lang), tl = ll_config_lang_index(cfg, cfg->train[k].tgt_lang);
        c->prior[0].active[ll_latent_pair_row(&m->hp, cfg, 0, sl, tl)] = 1;
        c->prior[1].active[ll_latent_pair_row(&m->hp, cfg, 1, sl, tl)] = 1;
    }
    for (int s = 0; s < 2; s++)
        for (int r = 0; r < m->hp.latent_rows; r++) c->prior[s].n_active += c->prior[s].active[r];
}

int ll_latent_hard_samples(const ll_config *cfg, long t) {
    return !cfg->latent_soft_select && t > cfg->latent_soft_update; /* the code's hard_select = (t > soft_update) */
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

void ll_latent_kl(ll_model *m, ll_latent_ctx *c, int stack, int row, long update, long ntokens) {
    if (!ll_latent_on(m, stack)) return;
    c->sampled[stack][row] = 1;
    const ll_config *cfg = c->cfg;
    const ll_latent_prior *pr = prior_of(c, stack);
    const int reference = !strcmp(cfg->latent_kl, "reference");
    /* mean over layers puts beta on the code's --sparsity-weight scale (the reference form divides itself) */
    const double per_layer = !reference && !strcmp(cfg->latent_kl_reduce, "mean") ? 1.0 / pr->L : 1.0;
    const double w = ll_latent_kl_weight(cfg, update) * ntokens * per_layer;
    if (w <= 0) return;
    /* the reference code skips the aggregated KL until every language has been sampled */
    if (reference && pr->prior_agg)
        for (int r = 0; r < pr->rows; r++)
            if (pr->active[r] && !c->sampled[stack][r]) return;
    m->be->latent_kl(m->be, m->grads + m->latent_logits[stack], m->stats + LL_ST_KL,
                     m->params + m->latent_logits[stack], m->latent_z[stack], m->latent_dzda[stack], pr, row, reference,
                     w);
}

void ll_latent_lk(ll_model *m, ll_latent_ctx *c, int stack, long update, long ntokens_total) {
    if (!ll_latent_on(m, stack)) return;
    const ll_config *cfg = c->cfg;
    const int K = stack ? cfg->latent_target_dec : cfg->latent_target_enc;
    const double w = ll_latent_lk_weight(cfg, update) * ntokens_total;
    if (K < 0 || w <= 0) return;
    m->be->latent_lk(m->be, m->grads + m->latent_logits[stack], m->stats + LL_ST_LK, m->latent_z[stack],
                     m->latent_dzda[stack], prior_of(c, stack), K, !strcmp(cfg->latent_lk_form, "squared"), w);
}

void ll_latent_depth(ll_model *m, ll_latent_ctx *c) {
    for (int s = 0; s < 2; s++)
        if (ll_latent_on(m, s))
            m->be->latent_depth(m->be, m->stats + (s ? LL_ST_DEPTH_DEC : LL_ST_DEPTH_ENC),
                                m->params + m->latent_logits[s], prior_of(c, s));
}

void ll_latent_utilisation(const ll_latent_ctx *c, int stack, const real *z, double *u) {
    const ll_latent_prior *pr = &c->prior[stack];
    for (int l = 0; l < pr->L; l++) u[l] = 0;
    for (int r = 0; r < pr->rows; r++) {
        if (!pr->active[r]) continue;
        for (int l = 0; l < pr->L; l++) u[l] += z[(size_t)r * pr->L + l];
    }
    for (int l = 0; l < pr->L; l++) u[l] /= pr->n_active ? pr->n_active : 1;
}
