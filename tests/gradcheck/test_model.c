/* Whole-model finite-difference gradient check in double precision: every
 * parameter tensor is probed (dropout on: the Philox masks are a pure function
 * of the step, so they are identical in every evaluation). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../util/testutil.h"
#include "gradcheck.h"
#include "ll/config.h"
#include "ll/model.h"

/* Layer controls used by latent depth, LayerDrop and cross-attention drop. */
static void set_ctl(ll_model *m) {
    ll_model_set_gate(m, 0, 0, 0.7);
    m->enc_ctl[1].skip = 1;
    ll_model_set_gate(m, 1, 0, 0.35);
    m->dec_ctl[1].skip_cross = 1;
    ll_model_track_dgates(m, 1);
}

/* dL/dgate of every layer against finite differences of the gate. */
static void check_dgate(const char *label, ll_model *m, ll_batch *b) {
    ll_layer_ctl *ctls[2] = {m->enc_ctl, m->dec_ctl};
    int n[2] = {m->hp.Le, m->hp.Ld};
    for (int s = 0; s < 2; s++) {
        double dg[16];
        ll_model_dgates(m, s, dg);
        for (int l = 0; l < n[s]; l++) {
            ll_layer_ctl *c = &ctls[s][l];
            if (c->skip) continue;
            double ana = dg[l], g = ll_model_gate(m, s, l), h = 1e-6;
            ll_model_set_gate(m, s, l, g + h);
            double lp = ll_model_loss(m, b, 5, 3, 1);
            ll_model_set_gate(m, s, l, g - h);
            double lm = ll_model_loss(m, b, 5, 3, 1);
            ll_model_set_gate(m, s, l, g);
            double num = (lp - lm) / (2 * h);
            CHECK_MSG(fabs(num - ana) <= 1e-6 * (fabs(num) + fabs(ana)) + 1e-9, "%s %s layer %d: dgate %.10g, numeric %.10g",
                      label, s ? "dec" : "enc", l, ana, num);
        }
    }
}

static void check_model_obj(const char *label, ll_hparams hp, int ctl, const ll_objective *obj) {
    ll_backend *be = ll_backend_cpu();
    ll_model *m = ll_model_new(&hp, be);
    ll_model_init(m, 7);
    if (obj) m->obj = *obj;
    /* move learnable scalars off their init so every path carries gradient */
    for (int t = 0; t < m->n_table; t++) {
        const ll_param *p = &m->table[t];
        if (strstr(p->name, "rezero_alpha") || strstr(p->name, "dlcl_weights"))
            for (size_t i = 0; i < p->numel; i++) m->params[p->offset + i] += 0.3 + 0.05 * (double)(i % 7);
    }
    if (ctl) set_ctl(m);
    ll_batch b;
    gc_make_batch(&b, 3, 6, 5, hp.V, 11);
    ll_loss_stats st;
    memset(m->grads, 0, m->n_params * sizeof(real));
    ll_model_step(m, &b, 5, 3, 1, &st);
    CHECK(st.ntokens == b.n_tgt_tokens);
    CHECK(isfinite(st.loss) && st.loss > 0);
    double base = ll_model_loss(m, &b, 5, 3, 1);
    double total = st.loss + st.ce2 + st.ddr + st.ald;
    CHECK_NEAR(base, total, 1e-9 * fabs(base));
    if (obj && obj->ddr_alpha > 0) CHECK(st.ddr > 0 && st.ce2 > 0);
    if (obj && obj->ald_weight > 0) CHECK(st.ald > 0);
    /* probe up to 6 entries of every tensor, with the largest gradients among them */
    double worst = 0;
    const char *worst_name = "";
    for (int t = 0; t < m->n_table; t++) {
        const ll_param *p = &m->table[t];
        for (int k = 0; k < 4; k++) {
            size_t i = p->offset + (size_t)((k * 7919u + t * 104729u) % p->numel);
            if (strstr(p->name, "embed") && k < 3) {
                /* make sure a row used by the batch is probed */
                i = p->offset + (size_t)b.src[k] * hp.C + k;
            }
            double saved = m->params[i], h = 1e-5;
            m->params[i] = saved + h;
            double lp = ll_model_loss(m, &b, 5, 3, 1);
            m->params[i] = saved - h;
            double lm = ll_model_loss(m, &b, 5, 3, 1);
            m->params[i] = saved;
            double num = (lp - lm) / (2 * h), ana = m->grads[i];
            /* relative, with an absolute floor for exactly-zero gradients (key biases) */
            double e = fabs(num - ana) / (fabs(num) + fabs(ana) + 1e-3);
            if (e > worst) {
                worst = e;
                worst_name = p->name;
            }
            CHECK_MSG(e < 1e-5, "%s %s[%zu]: analytic %.10g numeric %.10g", label, p->name, i - p->offset, ana, num);
        }
    }
    /* ll_model_step filled dgate; the probes above ran without backward and left it alone */
    if (ctl) check_dgate(label, m, &b);
    fprintf(stderr, "%s: %d tensors, worst relative error %.2e (%s)\n", label, m->n_table, worst, worst_name);
    gc_free_batch(&b);
    ll_model_free(m);
}

static void check_model(const char *label, ll_hparams hp, int ctl) { check_model_obj(label, hp, ctl, NULL); }

/* DLCL by default applies LN_0 as Eq. 8/9 write it: pre-norm LN(y_0) as an
 * entry, post-norm LN(W00 y_0) as the first row.  LN_0's parameters then carry
 * gradient (under the code's behaviour, normalize_embed false, they are
 * unused), and post-norm's first layer input no longer scales with W00. */
static void check_dlcl_ln0_default(int post) {
    ll_config cfg;
    ll_config_defaults(&cfg);
    cfg.d_model = 8, cfg.ffn_dim = 12, cfg.heads = 2, cfg.enc_layers = cfg.dec_layers = 2, cfg.max_positions = 32;
    cfg.dlcl_enc = cfg.dlcl_dec = 1;
    strcpy(cfg.norm, post ? "post" : "pre");
    ll_hparams hp;
    ll_hparams_from_config(&hp, &cfg, 23);
    CHECK_MSG(hp.dlcl_norm_embed, "%s-norm DLCL: LN_0 off by default", post ? "post" : "pre");
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 7);
    ll_batch b;
    gc_make_batch(&b, 3, 6, 5, hp.V, 11);
    ll_loss_stats st;
    memset(m->grads, 0, m->n_params * sizeof(real));
    ll_model_step(m, &b, 5, 3, 1, &st);
    double g = 0;
    for (int i = 0; i < 8; i++) g += fabs(m->grads[m->dlcl_ln[0][0] + i]);
    CHECK_MSG(g > 1e-8, "%s-norm DLCL: LN_0 weight gradient %g", post ? "post" : "pre", g);
    if (post) { /* LN(W00 y_0) is invariant to W00 > 0 (W00 y_0 alone was not) */
        const double l0 = ll_model_loss(m, &b, 5, 3, 0);
        m->params[m->dlcl_w[0]] *= 3;
        CHECK_NEAR(ll_model_loss(m, &b, 5, 3, 0), l0, 1e-9 * fabs(l0));
    }
    gc_free_batch(&b);
    ll_model_free(m);
}

int main(void) {
    ll_set_threads(1); /* tiny shapes: threads only add overhead */
    ll_hparams hp = {.C = 8, .F = 12, .H = 2, .Le = 2, .Ld = 2, .V = 23, .max_pos = 32, .post_norm = 0,
                     .share_all = 1, .tie_output = 1, .dropout = 0.2, .attn_dropout = 0.1, .act_dropout = 0.1,
                     .label_smoothing = 0.1};
    check_model("pre-norm shared", hp, 0);
    check_model("pre-norm gates+skips", hp, 1);
    hp.post_norm = 1;
    hp.share_all = 0;
    hp.tie_output = 0;
    check_model("post-norm untied", hp, 0);
    check_model("post-norm gates+skips", hp, 1);
    hp.post_norm = 0;
    hp.share_all = 0;
    hp.tie_output = 1;
    hp.dropout = hp.attn_dropout = hp.act_dropout = 0;
    hp.label_smoothing = 0;
    check_model("pre-norm no dropout", hp, 0);
    /* DLCL: pre-norm (entries normalised, with the embedding too), post-norm, fixed weights, no LN */
    hp.dropout = 0.2;
    hp.attn_dropout = hp.act_dropout = 0.1;
    hp.label_smoothing = 0.1;
    hp.dlcl_enc = hp.dlcl_dec = 1;
    hp.dlcl_learnable = 1;
    hp.dlcl_ln = 1;
    hp.dlcl_norm_embed = 1;
    check_model("DLCL pre-norm", hp, 1);
    hp.dlcl_norm_embed = 0;
    check_model("DLCL pre-norm, y_0 not normalised (the code)", hp, 0);
    hp.post_norm = 1;
    hp.dlcl_norm_embed = 1;
    check_model("DLCL post-norm, LN of row 0 (Eq. 9)", hp, 1);
    hp.dlcl_norm_embed = 0;
    check_model("DLCL post-norm, row 0 un-normalised (the code)", hp, 0);
    check_dlcl_ln0_default(0);
    check_dlcl_ln0_default(1);
    hp.post_norm = 0;
    hp.dlcl_learnable = 0;
    hp.dlcl_ln = 0;
    check_model("DLCL fixed, no LN", hp, 0);
    hp.dlcl_enc = hp.dlcl_dec = 0;
    hp.rezero = 1;
    check_model("ReZero", hp, 1);
    hp.rezero = 0;
    /* the deep-decoder objectives: DDR (second decoder pass, own drop-net draws) and ALD */
    ll_objective obj = {.ddr_alpha = 0.7, .ald_weight = 0.5, .ald_p = 0.3, .ald_tau = 0.1};
    static ll_layer_ctl ddr_ctl[2] = {{.skip_cross = 1}, {0}};
    obj.ddr_dec_ctl = ddr_ctl;
    check_model_obj("DDR + ALD", hp, 0, &obj);
    hp.dlcl_enc = hp.dlcl_dec = 1;
    hp.dlcl_ln = hp.dlcl_learnable = 1;
    check_model_obj("DLCL + gates + DDR + ALD", hp, 1, &obj);
    return tu_finish("grad_test_model");
}
