/* Activation checkpointing (ll_model.recompute, train.checkpoint_activations):
 * a training step whose stacks keep only each layer's input, and run each
 * layer's forward again right before its backward, equals the step that keeps
 * every activation: the loss terms, every gradient and dL/dgate, bit for bit,
 * in fp32 and bf16.  Pre-norm, post-norm, ReZero, DLCL and latent-depth
 * models; LayerDrop and cross-attention drop (as drawn, and as the
 * conditionals of a CUDA graph); DDR's second decoder pass and ALD's two
 * corrupted passes.  Its activation peak is lower, and a recompute that drew
 * other dropout bits would fail (a step keyed otherwise differs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/config.h"
#include "ll/latent.h"
#include "ll/model.h"
#include "gradcheck/gradcheck.h"
#include "util/testutil.h"
#include "util/toy_config.h"

/* The tensor holding parameter i (for messages). */
static const char *tensor_of(const ll_model *m, size_t i) {
    for (int t = 0; t < m->n_table; t++)
        if (i >= m->table[t].offset && i < m->table[t].offset + m->table[t].numel) return m->table[t].name;
    return "?";
}

typedef struct {
    double loss[4];
    real *g;
    real dgate[2][8]; /* (models of at most 8 layers a stack) */
    size_t peak;
} step_out;

static void run_step(ll_model *m, const ll_batch *b, uint64_t step, int draw, step_out *o) {
    const int latent = ll_latent_on(m, 0) || ll_latent_on(m, 1);
    if (draw >= 0) tu_drop_draws(m, draw);
    ll_model_zero_grads(m);
    if (latent) {
        ll_model_track_dgates(m, 1);
        for (int s = 0; s < 2; s++)
            if (ll_latent_on(m, s)) ll_latent_sample(m, s, 0, 3, step, 1.0f, 0);
    }
    m->arena.peak = 0;
    ll_loss_stats st;
    ll_model_step(m, b, 3, step, 1, &st);
    o->peak = m->arena.peak;
    o->loss[0] = st.loss, o->loss[1] = st.ce2, o->loss[2] = st.ddr, o->loss[3] = st.ald;
    m->be->download(m->be, o->g, m->grads, m->n_params * sizeof(real));
    memset(o->dgate, 0, sizeof o->dgate);
    for (int s = 0; s < 2; s++) {
        if (!ll_latent_on(m, s)) continue;
        double d[8] = {0};
        ll_model_dgates(m, s, d);
        for (int l = 0; l < 8; l++) o->dgate[s][l] = (real)d[l];
    }
}

/* name: the case; cfg_name/sets: its config; bf16: activations in bf16; conds: the skips as
 * conditionals (drop_conds 2); draws: LayerDrop / CAD draws (else every layer runs). */
static void test_case(const char *name, const char *cfg_name, const char *const *sets, int n_sets, int bf16,
                      int conds, int draws) {
    ll_config cfg;
    if (tu_toy_config(&cfg, cfg_name, sets, n_sets)) return;
    ll_hparams hp;
    ll_hparams_from_config(&hp, &cfg, 40);
    ll_model *m = ll_model_new(&hp, bf16 ? ll_backend_cpu_precision(LL_BF16) : ll_backend_cpu());
    ll_model_init(m, 1);
    if (hp.rezero) { /* alphas away from 0, so the branches matter */
        for (int s = 0; s < 2; s++)
            for (int l = 0; l < (s ? hp.Ld : hp.Le); l++) m->params[m->rezero_alpha[s][l]] = 0.5f;
        ll_model_refresh_weights(m);
    }
    m->obj = (ll_objective){.ddr_alpha = cfg.ddr_alpha, .ald_weight = cfg.ald_weight, .ald_p = cfg.ald_p,
                            .ald_tau = cfg.ald_tau};
    if (cfg.ddr_alpha > 0) m->obj.ddr_dec_ctl = calloc((size_t)hp.Ld, sizeof(ll_layer_ctl));
    m->drop_conds = conds ? 2 : 0;
    ll_batch b;
    gc_make_batch(&b, 4, 7, 6, hp.V, 1);
    step_out o[3];
    for (int i = 0; i < 3; i++) o[i].g = malloc(m->n_params * sizeof(real));
    for (int draw = 0; draw < (draws ? 3 : 1); draw++) {
        const uint64_t step = 20 + draw;
        m->recompute = 0;
        run_step(m, &b, step, draws ? draw : -1, &o[0]);
        m->recompute = 1;
        run_step(m, &b, step, draws ? draw : -1, &o[1]);
        run_step(m, &b, step + 100, draws ? draw : -1, &o[2]); /* other dropout bits */
        m->recompute = 0;
        size_t diff = 0, first = 0;
        double gmax = 0;
        for (size_t i = 0; i < m->n_params; i++) {
            gmax = fmax(gmax, fabs((double)o[0].g[i]));
            if (memcmp(&o[0].g[i], &o[1].g[i], sizeof(real)) && !diff++) first = i;
        }
        CHECK_MSG(isfinite(o[0].loss[0]) && gmax > 0, "%s: loss %g, largest gradient %g", name, o[0].loss[0], gmax);
        CHECK_MSG(!memcmp(o[0].loss, o[1].loss, sizeof o[0].loss),
                  "%s, draw %d: losses (ce, ce2, ddr, ald) %.9g %.9g %.9g %.9g kept, %.9g %.9g %.9g %.9g recomputed",
                  name, draw, o[0].loss[0], o[0].loss[1], o[0].loss[2], o[0].loss[3], o[1].loss[0], o[1].loss[1],
                  o[1].loss[2], o[1].loss[3]);
        CHECK_MSG(diff == 0, "%s, draw %d: %zu of %zu gradients differ (first in %s: %.9g kept, %.9g recomputed)",
                  name, draw, diff, m->n_params, diff ? tensor_of(m, first) : "", diff ? o[0].g[first] : 0,
                  diff ? o[1].g[first] : 0);
        CHECK_MSG(!memcmp(o[0].dgate, o[1].dgate, sizeof o[0].dgate), "%s, draw %d: dL/dgate differs", name, draw);
        CHECK_MSG(o[1].peak < o[0].peak, "%s: activation peak %zu bytes recomputing, %zu keeping everything", name,
                  o[1].peak, o[0].peak);
        /* the test sees dropout: a step keyed otherwise gives other gradients */
        CHECK_MSG(memcmp(o[1].g, o[2].g, m->n_params * sizeof(real)), "%s: another step's dropout, same gradients",
                  name);
    }
    for (int i = 0; i < 3; i++) free(o[i].g);
    free(m->obj.ddr_dec_ctl);
    m->obj.ddr_dec_ctl = NULL;
    ll_model_free(m);
    gc_free_batch(&b);
    ll_config_free(&cfg);
}

int main(void) {
    /* deep_decoder_15_15: pre-norm with cross-attention drop, DDR and ALD, at toy widths */
    const char *dd[] = {"model.d_model=16", "model.ffn_dim=32", "model.heads=2", "model.enc_layers=3",
                        "model.dec_layers=3", "model.attn_dropout=0.1", "model.act_dropout=0.1"};
    test_case("pre-norm, DDR, ALD", "deep_decoder_15_15", dd, 7, 0, 0, 0);
    test_case("pre-norm, LayerDrop and CAD draws", "deep_decoder_15_15", dd, 7, 0, 0, 1);
    test_case("pre-norm, LayerDrop and CAD as conditionals", "deep_decoder_15_15", dd, 7, 0, 1, 1);
    test_case("pre-norm, bf16", "deep_decoder_15_15", dd, 7, 1, 0, 1);
    const char *post[] = {"model.d_model=16", "model.ffn_dim=32", "model.heads=2", "model.enc_layers=3",
                          "model.dec_layers=3", "model.norm=post"};
    test_case("post-norm", "deep_decoder_15_15", post, 6, 0, 0, 1);
    const char *rz[] = {"model.d_model=16", "model.ffn_dim=32", "model.heads=2", "model.enc_layers=3",
                        "model.dec_layers=3", "model.norm=rezero"};
    test_case("ReZero", "deep_decoder_15_15", rz, 6, 0, 0, 1);
    const char *dlcl[] = {"model.d_model=16", "model.ffn_dim=32", "model.heads=2", "model.enc_layers=3",
                          "model.dec_layers=3", "dlcl.encoder=true", "dlcl.decoder=true"};
    test_case("DLCL", "deep_decoder_15_15", dlcl, 7, 0, 0, 1);
    test_case("DLCL, bf16", "deep_decoder_15_15", dlcl, 7, 1, 0, 0);
    const char *lat[] = {"model.d_model=16", "model.ffn_dim=32", "model.enc_layers=3", "latent.encoder=true"};
    test_case("latent depth", "tiny_latent", lat, 4, 0, 0, 0);
    test_case("latent depth, bf16", "tiny_latent", lat, 4, 1, 0, 0);
    const char *lat_dlcl[] = {"model.d_model=16", "model.ffn_dim=32", "model.enc_layers=2", "model.dec_layers=4",
                              "latent.target_layers_dec=2"};
    test_case("latent depth, DLCL, CAD, DDR", "latent_dlcl_cad", lat_dlcl, 5, 0, 0, 0);
    return tu_finish("test_recompute");
}
