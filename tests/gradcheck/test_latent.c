/* Latent depth: Gumbel sampler statistics and temperature limits, the
 * straight-through gradient to the logits (Eq. 6's chain) against finite
 * differences, KL and L_K values and gradients against hand computation. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/testutil.h"
#include "gradcheck.h"
#include "ll/decode.h"
#include "ll/latent.h"

static double sigm(double x) { return 1 / (1 + exp(-x)); }

static ll_model *make_model(int rows, int latent_enc, int latent_dec) {
    ll_hparams hp = {.C = 8, .F = 12, .H = 2, .Le = 3, .Ld = 4, .V = 23, .max_pos = 32, .share_all = 1,
                     .tie_output = 1, .dropout = 0.1, .label_smoothing = 0.1, .latent_enc = latent_enc,
                     .latent_dec = latent_dec, .latent_rows = rows};
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 5);
    return m;
}

static void set_logits(ll_model *m, int stack, int row, const double *a) {
    int L = stack ? m->hp.Ld : m->hp.Le;
    for (int l = 0; l < L; l++) m->params[m->latent_logits[stack] + (size_t)row * L + l] = a[l];
}

/* The ops add their values to the stats buffer (host memory on the CPU backend). */
static double kl_value(ll_model *m, ll_latent_ctx *c, int stack, int row, long upd, long ntok) {
    m->stats[LL_ST_KL] = 0;
    ll_latent_kl(m, c, stack, row, upd, ntok);
    return m->stats[LL_ST_KL];
}

static double lk(ll_model *m, ll_latent_ctx *c, int stack, long upd, long ntok) {
    m->stats[LL_ST_LK] = 0;
    ll_latent_lk(m, c, stack, upd, ntok);
    return m->stats[LL_ST_LK];
}

static void test_sampler(void) {
    ll_model *m = make_model(1, 0, 1);
    double a[4] = {-2, -0.5, 0.4, 3};
    set_logits(m, 1, 0, a);
    for (int ti = 0; ti < 2; ti++) {
        double tau = ti ? 5.0 : 0.5, freq[4] = {0};
        const int n = 20000;
        for (int s = 0; s < n; s++) {
            ll_latent_sample(m, 1, 0, 3, s, tau, 1);
            for (int l = 0; l < 4; l++) freq[l] += *m->dec_ctl[l].gate;
        }
        /* P(hard z = 1) = sigmoid(a), whatever the temperature */
        for (int l = 0; l < 4; l++)
            CHECK_MSG(fabs(freq[l] / n - sigm(a[l])) < 0.012, "tau %.1f layer %d: freq %.4f vs sigmoid %.4f", tau, l,
                      freq[l] / n, sigm(a[l]));
    }
    /* temperature limits of the soft sample: tau -> 0 discrete, tau -> inf 1/2 */
    int near01 = 0, near_half = 0;
    for (int s = 0; s < 2000; s++) {
        ll_latent_sample(m, 1, 0, 3, s, 0.002, 0);
        for (int l = 0; l < 4; l++) near01 += fmin(*m->dec_ctl[l].gate, 1 - *m->dec_ctl[l].gate) < 0.01;
        ll_latent_sample(m, 1, 0, 3, s, 1e4, 0);
        for (int l = 0; l < 4; l++) near_half += fabs(*m->dec_ctl[l].gate - 0.5) < 0.01;
    }
    CHECK_MSG(near01 > 0.99 * 8000, "tau->0: only %d of 8000 soft samples near 0/1", near01);
    CHECK_MSG(near_half == 8000, "tau->inf: %d of 8000 soft samples near 1/2", near_half);
    /* one draw per layer per forward: the same step gives the same sample */
    ll_latent_sample(m, 1, 0, 3, 77, 1, 0);
    double z0 = *m->dec_ctl[2].gate;
    ll_latent_sample(m, 1, 0, 3, 78, 1, 0);
    ll_latent_sample(m, 1, 0, 3, 77, 1, 0);
    CHECK(*m->dec_ctl[2].gate == z0);
    ll_model_free(m);
}

/* dL/da through the gates (soft samples, fixed noise) against finite differences. */
static double loss_at(ll_model *m, ll_batch *b, int hard) {
    ll_latent_sample(m, 0, 1, 9, 4, 2.0, hard);
    ll_latent_sample(m, 1, 1, 9, 4, 2.0, hard);
    return ll_model_loss(m, b, 9, 4, 1);
}

static void test_logit_gradient(void) {
    ll_model *m = make_model(2, 1, 1);
    double ae[3] = {0.3, -0.7, 1.1}, ad[4] = {-0.2, 0.9, 0.1, -1.4};
    set_logits(m, 0, 1, ae);
    set_logits(m, 1, 1, ad);
    ll_batch b;
    gc_make_batch(&b, 3, 6, 5, m->hp.V, 2);
    memset(m->grads, 0, m->n_params * sizeof(real));
    ll_latent_sample(m, 0, 1, 9, 4, 2.0, 0);
    ll_latent_sample(m, 1, 1, 9, 4, 2.0, 0);
    ll_loss_stats st;
    ll_model_step(m, &b, 9, 4, 1, &st);
    ll_latent_backward(m, 0, 1);
    ll_latent_backward(m, 1, 1);
    for (int s = 0; s < 2; s++) {
        int L = s ? m->hp.Ld : m->hp.Le;
        for (int l = 0; l < L; l++) {
            size_t i = m->latent_logits[s] + (size_t)1 * L + l;
            double save = m->params[i], h = 1e-6;
            m->params[i] = save + h;
            double lp = loss_at(m, &b, 0);
            m->params[i] = save - h;
            double lm = loss_at(m, &b, 0);
            m->params[i] = save;
            /* absolute floor 1e-8: the central difference's own rounding noise is
             * ~ulp(L) / h, a few 1e-9 here (seen: |num - ana| = 3.3e-9 in about 1
             * run of 20, on main too: the loss's last bits vary between runs) */
            double num = (lp - lm) / (2 * h), ana = m->grads[i];
            CHECK_MSG(fabs(num - ana) <= 1e-6 * (fabs(num) + fabs(ana)) + 1e-8, "stack %d layer %d: dL/da %.10g numeric %.10g",
                      s, l, ana, num);
        }
        /* row 0 was not used: no gradient */
        for (int l = 0; l < L; l++) CHECK(m->grads[m->latent_logits[s] + l] == 0);
    }
    /* hard samples: forward uses 0/1 gates, gradient is the soft sample's (straight-through) */
    ll_latent_sample(m, 1, 1, 9, 4, 2.0, 1);
    for (int l = 0; l < 4; l++) CHECK(*m->dec_ctl[l].gate == 0 || *m->dec_ctl[l].gate == 1);
    gc_free_batch(&b);
    ll_model_free(m);
}

static void test_kl_and_lk(void) {
    ll_model *m = make_model(3, 0, 1);
    ll_config cfg;
    ll_config_defaults(&cfg);
    cfg.latent_dec = 1;
    cfg.latent_soft_update = 0;
    cfg.latent_anneal_updates = 0;
    cfg.latent_beta = 0.5;
    cfg.latent_prior_a = 3;
    cfg.latent_prior_b = 1; /* p = 0.75 */
    cfg.n_train = 2;        /* en->es, en->xx: decoder rows 1 and 2 are active (en is row 0) */
    strcpy(cfg.train[0].src_lang, "en");
    strcpy(cfg.train[0].tgt_lang, "es");
    strcpy(cfg.train[1].src_lang, "en");
    strcpy(cfg.train[1].tgt_lang, "xx");
    ll_latent_ctx c;
    ll_latent_ctx_init(&c, &cfg, m);
    CHECK(c.prior[1].n_active == 2 && c.prior[1].active[1] && c.prior[1].active[2] && !c.prior[1].active[0]);
    double a1[4] = {0.5, -1, 2, 0}, a2[4] = {-0.3, 0.8, 0.1, 1.5};
    set_logits(m, 1, 1, a1);
    set_logits(m, 1, 2, a2);

    /* Beta prior, two-sided Bernoulli KL */
    double want = 0;
    for (int l = 0; l < 4; l++) {
        double q = sigm(a1[l]), p = 0.75;
        want += q * log(q / p) + (1 - q) * log((1 - q) / (1 - p));
    }
    /* default kl_reduce mean: the KL is the mean over the 4 layers (beta on the code's --sparsity-weight
     * scale); sum is Eq. 4 as written.  The gradient checks below run on the default. */
    strcpy(cfg.latent_kl_reduce, "sum");
    CHECK_NEAR(kl_value(m, &c, 1, 1, 10, 7), 0.5 * 7 * want, 1e-10);
    ll_config_defaults(&cfg); /* back to the defaults, keeping the settings above */
    cfg.latent_dec = 1, cfg.latent_soft_update = 0, cfg.latent_anneal_updates = 0, cfg.latent_beta = 0.5;
    cfg.latent_prior_a = 3, cfg.latent_prior_b = 1, cfg.n_train = 2;
    strcpy(cfg.train[0].src_lang, "en"), strcpy(cfg.train[0].tgt_lang, "es");
    strcpy(cfg.train[1].src_lang, "en"), strcpy(cfg.train[1].tgt_lang, "xx");
    CHECK(!strcmp(cfg.latent_kl_reduce, "mean"));
    memset(m->grads, 0, m->n_params * sizeof(real));
    double got = kl_value(m, &c, 1, 1, 10, 7);
    CHECK_NEAR(got, 0.5 * 7 * want / 4, 1e-10);
    double g0[4];
    for (int l = 0; l < 4; l++) g0[l] = m->grads[m->latent_logits[1] + 4 + l];
    for (int l = 0; l < 4; l++) { /* gradient vs finite differences of the value */
        size_t i = m->latent_logits[1] + 4 + l;
        double g = g0[l], s = m->params[i], h = 1e-6;
        m->params[i] = s + h;
        double vp = kl_value(m, &c, 1, 1, 10, 7);
        m->params[i] = s - h;
        double vm = kl_value(m, &c, 1, 1, 10, 7);
        m->params[i] = s;
        CHECK_NEAR(g, (vp - vm) / (2 * h), 1e-6);
    }
    /* KL weight: 0 before soft_update, ramps to beta, never negative */
    cfg.latent_soft_update = 100;
    cfg.latent_anneal_updates = 50;
    CHECK(ll_latent_kl_weight(&cfg, 0) == 0);
    CHECK_NEAR(ll_latent_kl_weight(&cfg, 125), 0.25, 1e-12);
    CHECK_NEAR(ll_latent_kl_weight(&cfg, 1000), 0.5, 1e-12);
    cfg.latent_soft_update = 0;
    cfg.latent_anneal_updates = 0;

    /* aggregated posterior: per-layer mean of q over the active rows */
    strcpy(cfg.latent_prior, "agged_posterior");
    want = 0;
    for (int l = 0; l < 4; l++) {
        double q = sigm(a2[l]), p = (sigm(a1[l]) + sigm(a2[l])) / 2;
        want += q * log(q / p) + (1 - q) * log((1 - q) / (1 - p));
    }
    CHECK_NEAR(kl_value(m, &c, 1, 2, 10, 1), 0.5 * want / 4, 1e-10);

    /* the reference's one-sided KL on hard samples: ~ ln2 * (selected layers) / L */
    strcpy(cfg.latent_prior, "beta");
    cfg.latent_prior_a = cfg.latent_prior_b = 1;
    strcpy(cfg.latent_kl, "reference");
    real *z = m->latent_z[1] + 4;
    z[0] = 1, z[1] = 0, z[2] = 1, z[3] = 1;
    CHECK_NEAR(kl_value(m, &c, 1, 1, 10, 1), 0.5 * 3 * log(2.0) / 4, 1e-5);
    strcpy(cfg.latent_kl, "bernoulli");

    /* L_K = |sum_l u_l - K| with u = mean over languages of the samples; d/dz = lambda sign / N */
    cfg.latent_target_dec = 2;
    cfg.latent_lambda = 0.1;
    cfg.latent_lk_anneal_updates = 0;
    real *z2 = m->latent_z[1] + 8, *d1 = m->latent_dzda[1] + 4, *d2 = m->latent_dzda[1] + 8;
    z2[0] = 0, z2[1] = 1, z2[2] = 1, z2[3] = 0; /* u = (.5,.5,1,.5): sum 2.5 */
    for (int l = 0; l < 4; l++) d1[l] = 0.1 * (l + 1), d2[l] = 0.2;
    memset(m->grads, 0, m->n_params * sizeof(real));
    /* (config floats: lambda = 0.1f) */
    CHECK_NEAR(lk(m, &c, 1, 10, 20), 0.1 * 20 * 0.5, 1e-7);
    CHECK_NEAR(m->grads[m->latent_logits[1] + 4 + 2], 0.1 * 20 * 1.0 / 2 * 0.3, 1e-7);
    CHECK_NEAR(m->grads[m->latent_logits[1] + 8 + 0], 0.1 * 20 * 1.0 / 2 * 0.2, 1e-7);
    strcpy(cfg.latent_lk_form, "squared");
    CHECK_NEAR(lk(m, &c, 1, 10, 1), 0.1 * 0.25, 1e-8);
    cfg.latent_target_dec = -1;
    CHECK(lk(m, &c, 1, 10, 1) == 0);
    ll_model_free(m);
}

static void test_inference(void) {
    ll_model *m = make_model(1, 0, 1);
    double a[4] = {-2, 0, 0.3, -0.01};
    set_logits(m, 1, 0, a);
    ll_latent_set_inference(m, 1, 0, LL_LATENT_HARD, 0.5, 1);
    /* dropped layers are off (gate 0, not computed), not LayerDrop's skip */
    CHECK(ll_layer_off(&m->dec_ctl[0]) && !ll_layer_off(&m->dec_ctl[1]) && !ll_layer_off(&m->dec_ctl[2]) &&
          ll_layer_off(&m->dec_ctl[3]));
    for (int l = 0; l < 4; l++) CHECK(!m->dec_ctl[l].skip);
    ll_latent_set_inference(m, 1, 0, LL_LATENT_SOFT, 0.5, 1);
    CHECK_NEAR(*m->dec_ctl[2].gate, sigm(0.3), 1e-12);
    CHECK(!m->dec_ctl[0].skip);
    CHECK_NEAR(ll_latent_expected_depth(m, 1, 0), sigm(-2) + 0.5 + sigm(0.3) + sigm(-0.01), 1e-12);
    /* q exactly at the threshold: kept (q >= threshold), by the one ll_latent_q */
    double at[4] = {0, 0, 0, 0};
    set_logits(m, 1, 0, at);
    ll_latent_set_inference(m, 1, 0, LL_LATENT_HARD, 0.5, 1);
    for (int l = 0; l < 4; l++) CHECK(!m->dec_ctl[l].skip);
    ll_model_free(m);
}

/* Teacher-forced log-probs and the cached decoder's, [B*T, V] each (decoder
 * rows past a sentence's length are left at 0 in both). */
static void forward_both(ll_model *m, const ll_batch *b, real *full, real *inc) {
    const int V = m->hp.V;
    memcpy(full, ll_model_logprobs(m, b), sizeof(real) * b->B * b->T * V);
    memset(inc, 0, sizeof(real) * b->B * b->T * V);
    ll_dec_state *d = ll_decode_begin(m, b->src, b->src_len, b->B, b->S, 1, b->T + 1);
    real *logp = malloc(sizeof(real) * b->B * V);
    int32_t prev[8];
    for (int t = 0; t < b->T; t++) {
        for (int n = 0; n < b->B; n++) prev[n] = b->tgt_in[n * b->T + t];
        ll_decode_step(m, d, prev, logp);
        for (int n = 0; n < b->B; n++)
            if (t < b->tgt_len[n]) memcpy(inc + ((size_t)n * b->T + t) * V, logp + (size_t)n * V, sizeof(real) * V);
    }
    for (int n = 0; n < b->B; n++)
        for (int t = b->tgt_len[n]; t < b->T; t++) memset(full + ((size_t)n * b->T + t) * V, 0, sizeof(real) * V);
    ll_decode_end(m, d);
    free(logp);
}

static double max_diff(const real *a, const real *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs(a[i] - b[i]));
    return w;
}

/* Training's z = 0 must compute what hard inference computes, for every norm
 * and with DLCL: post-norm keeps the layer's norms (LN(x + 0 F(x)) = LN(x)),
 * and a DLCL entry of a z = 0 layer is its input.  The layer norms get random
 * non-identity parameters so that "LN only" and "identity" differ. */
static void test_zero_gate_is_inference(void) {
    static const char *norms[3] = {"pre", "post", "rezero"};
    for (int dl = 0; dl < 2; dl++)
        for (int nm = 0; nm < 3; nm++) {
            ll_hparams hp = {.C = 8, .F = 12, .H = 2, .Le = 3, .Ld = 4, .V = 23, .max_pos = 32, .share_all = 1,
                             .tie_output = 1, .latent_enc = 1, .latent_dec = 1, .latent_rows = 1,
                             .post_norm = nm == 1, .rezero = nm == 2, .dlcl_enc = dl, .dlcl_dec = dl,
                             .dlcl_learnable = 1, .dlcl_ln = 1};
            ll_model *m = ll_model_new(&hp, ll_backend_cpu());
            ll_model_init(m, 5);
            ll_philox r;
            ll_philox_init(&r, 17, 3, 0);
            uint64_t k = 0;
            for (int t = 0; t < m->n_table; t++) {
                const ll_param *p = &m->table[t];
                if (strstr(p->name, "ln") || strstr(p->name, "rezero_alpha") || strstr(p->name, "dlcl_weights"))
                    for (size_t i = 0; i < p->numel; i++) m->params[p->offset + i] += ll_philox_uniform(&r, k++) - 0.3;
            }
            double ae[3] = {1, -1, 0.5}, ad[4] = {-1, 2, -0.5, 1};
            set_logits(m, 0, 0, ae);
            set_logits(m, 1, 0, ad);
            ll_batch b;
            gc_make_batch(&b, 3, 6, 5, hp.V, 2);
            const size_t n = (size_t)b.B * b.T * hp.V;
            real *train_full = malloc(sizeof(real) * n), *train_inc = malloc(sizeof(real) * n);
            real *inf_full = malloc(sizeof(real) * n), *inf_inc = malloc(sizeof(real) * n);
            /* training's gates: hard z = 1[a >= 0], with a gradient wanted (so the layers run) */
            for (int l = 0; l < 3; l++) ll_model_set_gate(m, 0, l, ae[l] >= 0);
            for (int l = 0; l < 4; l++) ll_model_set_gate(m, 1, l, ad[l] >= 0);
            ll_model_track_dgates(m, 1);
            forward_both(m, &b, train_full, train_inc);
            ll_latent_set_inference(m, 0, 0, LL_LATENT_HARD, 0.5, 1);
            ll_latent_set_inference(m, 1, 0, LL_LATENT_HARD, 0.5, 1);
            forward_both(m, &b, inf_full, inf_inc);
            const double d1 = max_diff(train_full, inf_full, n), d2 = max_diff(train_full, inf_inc, n),
                         d3 = max_diff(train_full, train_inc, n);
            /* DLCL: training's z = 1 entry is in + 1 (E - in) on the backend, E up to rounding */
            CHECK_MSG(dl ? d1 < 1e-12 : d1 == 0, "%s-norm%s: z = 0 training forward vs hard inference differ by %g", norms[nm],
                      dl ? " + DLCL" : "", d1);
            CHECK_MSG(d2 < 1e-10 && d3 < 1e-10, "%s-norm%s: cached decoding differs by %g / %g", norms[nm],
                      dl ? " + DLCL" : "", d2, d3);
            /* and the layer norms matter: treating z = 0 as the identity would differ in post-norm */
            if (nm == 1 && !dl) {
                for (int l = 0; l < 4; l++) m->dec_ctl[l] = (ll_layer_ctl){.skip = ad[l] < 0};
                for (int l = 0; l < 3; l++) m->enc_ctl[l] = (ll_layer_ctl){.skip = ae[l] < 0};
                forward_both(m, &b, inf_full, inf_inc);
                CHECK(max_diff(train_full, inf_full, n) > 1e-3);
            }
            free(train_full);
            free(train_inc);
            free(inf_full);
            free(inf_inc);
            gc_free_batch(&b);
            ll_model_free(m);
        }
}

/* Many-to-one with latent decoder layers: per_language gives both pairs the
 * target's one row, so the aggregated-posterior KL is KL(q||q) = 0; per_pair
 * gives each pair its own row and the KL is non-zero. */
static void test_per_pair_rows(void) {
    ll_config cfg;
    ll_config_defaults(&cfg);
    cfg.d_model = 8, cfg.ffn_dim = 12, cfg.heads = 2, cfg.enc_layers = 3, cfg.dec_layers = 4, cfg.max_positions = 32;
    cfg.latent_dec = 1;
    cfg.latent_soft_update = 0;
    cfg.latent_anneal_updates = 0;
    strcpy(cfg.latent_prior, "agged_posterior");
    cfg.n_train = 2;
    strcpy(cfg.train[0].src_lang, "es");
    strcpy(cfg.train[0].tgt_lang, "en");
    strcpy(cfg.train[1].src_lang, "xx");
    strcpy(cfg.train[1].tgt_lang, "en");
    const int es = ll_config_lang_index(&cfg, "es"), en = ll_config_lang_index(&cfg, "en"),
              xx = ll_config_lang_index(&cfg, "xx");
    double kl[3];
    CHECK(!strcmp(cfg.latent_posterior, "auto")); /* the default resolves to per_pair here */
    for (int pp = 0; pp < 3; pp++) {
        strcpy(cfg.latent_posterior, pp == 2 ? "auto" : pp ? "per_pair" : "per_language");
        ll_hparams hp;
        ll_hparams_from_config(&hp, &cfg, 23);
        ll_model *m = ll_model_new(&hp, ll_backend_cpu());
        ll_model_init(m, 5);
        const int r0 = ll_latent_pair_row(&m->hp, &cfg, 1, es, en), r1 = ll_latent_pair_row(&m->hp, &cfg, 1, xx, en);
        ll_latent_ctx c;
        ll_latent_ctx_init(&c, &cfg, m);
        CHECK(pp ? (hp.latent_rows == 2 && r0 == 0 && r1 == 1 && c.prior[1].n_active == 2) : (r0 == r1 && c.prior[1].n_active == 1));
        double a0[4] = {1, -1, 0.5, 2}, a1[4] = {-1, 1, 0, -2};
        set_logits(m, 1, r0, a0);
        if (r1 != r0) set_logits(m, 1, r1, a1);
        memset(m->grads, 0, m->n_params * sizeof(real));
        kl[pp] = kl_value(m, &c, 1, r0, 10, 1);
        char name[32];
        if (pp) CHECK(!strcmp(ll_latent_row_name(&m->hp, &cfg, r1, name, sizeof name), "xx-en"));
        ll_model_free(m);
    }
    CHECK_MSG(fabs(kl[0]) < 1e-12, "per_language M2O decoder: aggregated KL %g, expected KL(q||q) = 0", kl[0]);
    CHECK_MSG(kl[1] > 0.1 / 4, "per_pair M2O decoder: aggregated KL %g, expected > 0", kl[1]);
    CHECK_MSG(kl[2] == kl[1], "default (auto) M2O decoder: aggregated KL %g, per_pair %g", kl[2], kl[1]);
    /* auto elsewhere: one-to-many keeps per_language for a latent decoder (a row per target is a row per
     * pair), and gives a latent encoder (one shared source) a row per pair */
    strcpy(cfg.train[1].src_lang, "es");
    strcpy(cfg.train[1].tgt_lang, "xx");
    CHECK(!ll_config_latent_per_pair(&cfg));
    cfg.latent_enc = 1;
    CHECK(ll_config_latent_per_pair(&cfg));
    strcpy(cfg.train[1].tgt_lang, "en"); /* a repeated pair shares its row: nothing to split */
    CHECK(!ll_config_latent_per_pair(&cfg));
}

/* The paper's sampling by default: soft Gumbel samples throughout (Eq. 5);
 * the code's hard straight-through samples after soft_update on request. */
static void test_soft_samples_default(void) {
    ll_config cfg;
    ll_config_defaults(&cfg);
    CHECK_MSG(!ll_latent_hard_samples(&cfg, 0) && !ll_latent_hard_samples(&cfg, 1000000),
              "default config trains with hard samples");
    cfg.latent_soft_select = 0; /* the reference's schedule: hard once t > soft_update */
    CHECK(!ll_latent_hard_samples(&cfg, cfg.latent_soft_update));
    CHECK(ll_latent_hard_samples(&cfg, cfg.latent_soft_update + 1));
}

/* latent.inference sample: one draw per batch, keyed by the batch counter:
 * batches differ, a rerun repeats, and decoding does not depend on which
 * worker takes which batch. */
static void test_sample_per_batch(void) {
    ll_model *m = make_model(1, 0, 1); /* logits 0: q = 0.5 */
    ll_latent_set_inference(m, 1, 0, LL_LATENT_SAMPLE, 0.5, 7);
    int pat[16], distinct = 0;
    for (int i = 0; i < 16; i++) {
        ll_latent_inference_draw(m, i);
        pat[i] = 0;
        for (int l = 0; l < 4; l++) pat[i] |= !m->dec_ctl[l].off << l;
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= pat[j] == pat[i];
        distinct += !seen;
    }
    CHECK_MSG(distinct >= 4, "16 batches drew only %d distinct layer sets", distinct);
    for (int i = 15; i >= 0; i--) { /* reruns repeat, in any order */
        ll_latent_inference_draw(m, i);
        int p = 0;
        for (int l = 0; l < 4; l++) p |= !m->dec_ctl[l].off << l;
        CHECK(p == pat[i]);
    }
    ll_latent_set_inference(m, 1, 0, LL_LATENT_HARD, 0.5, 7); /* hard mode ignores draws */
    ll_latent_inference_draw(m, 3);
    for (int l = 0; l < 4; l++) CHECK(!m->dec_ctl[l].off);

    /* decoding: one sentence per batch; 1 or 2 workers give the same, another draw_base not */
    ll_latent_set_inference(m, 1, 0, LL_LATENT_SAMPLE, 0.5, 7);
    enum { NS = 6 };
    int32_t buf[NS][8];
    const int32_t *src[NS];
    int len[NS];
    for (int i = 0; i < NS; i++) {
        len[i] = 2 + i % 4;
        for (int t = 0; t < len[i] - 1; t++) buf[i][t] = 4 + (i * 7 + t * 3) % 19;
        buf[i][len[i] - 1] = LL_EOS;
        src[i] = buf[i];
    }
    ll_translate_opts o = {.max_sents = 1, .inter_threads = 1};
    ll_search_opts_default(&o.search);
    o.search.beam = 2;
    o.search.max_len_b = 6;
    ll_nbest out[3][NS];
    ll_translate_ids(m, src, len, NS, &o, out[0], NULL);
    ll_set_threads(2);
    o.inter_threads = 2;
    ll_translate_ids(m, src, len, NS, &o, out[1], NULL);
    ll_set_threads(1);
    o.draw_base = 1000;
    ll_translate_ids(m, src, len, NS, &o, out[2], NULL);
    int differ = 0;
    for (int i = 0; i < NS; i++) {
        CHECK(out[0][i].n > 0 && out[1][i].n > 0 && out[0][i].h[0].score == out[1][i].h[0].score);
        differ += out[0][i].h[0].score != out[2][i].h[0].score;
        for (int k = 0; k < 3; k++) ll_nbest_free(&out[k][i]);
    }
    CHECK_MSG(differ > 0, "draw_base 0 and 1000 decoded every sentence alike");
    ll_model_free(m);
}

int main(void) {
    ll_set_threads(1); /* tiny shapes: threads only add overhead */
    test_sampler();
    test_logit_gradient();
    test_kl_and_lk();
    test_inference();
    test_zero_gate_is_inference();
    test_sample_per_batch();
    test_per_pair_rows();
    test_soft_samples_default();
    return tu_finish("grad_test_latent");
}
