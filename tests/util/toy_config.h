/* A shipped config with settings on top (toy widths for model-level tests). */
#ifndef LL_TOY_CONFIG_H
#define LL_TOY_CONFIG_H

#include <stdio.h>

#include <stdlib.h>

#include "ll/config.h"
#include "ll/model.h"
#include "testutil.h"

/* configs/NAME.cfg of the source tree, then each of sets ("section.key=value").
 * 0, or -1 after a failed CHECK (cfg is then freed). */
static inline int tu_toy_config(ll_config *cfg, const char *name, const char *const *sets, int n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/configs/%s.cfg", tu_source_dir(), name);
    if (ll_config_load(cfg, path)) {
        CHECK_MSG(0, "%s", ll_errbuf());
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (ll_config_set(cfg, sets[i])) {
            CHECK_MSG(0, "%s: %s", sets[i], ll_errbuf());
            ll_config_free(cfg);
            return -1;
        }
    return 0;
}

/* A model of cfg (vocabulary V) on the CPU backend, initialised with seed 1, with cfg's training
 * objectives (and DDR's own layer controls when DDR is on); free with tu_toy_model_free. */
static inline ll_model *tu_toy_model(const ll_config *cfg, int V) {
    ll_hparams hp;
    ll_hparams_from_config(&hp, cfg, V);
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 1);
    m->obj = (ll_objective){.ddr_alpha = cfg->ddr_alpha, .ald_weight = cfg->ald_weight, .ald_p = cfg->ald_p,
                            .ald_tau = cfg->ald_tau};
    if (cfg->ddr_alpha > 0) m->obj.ddr_dec_ctl = calloc((size_t)(hp.Ld ? hp.Ld : 1), sizeof(ll_layer_ctl));
    return m;
}
/* LayerDrop and cross-attention drop draws number `draw` for every stack (DDR's controls too): 2 bits per
 * layer from a fixed pattern that covers both outcomes and neighbours that differ, every layer marked
 * variable (the conditionals' case: ll_model.drop_conds). */
static inline void tu_drop_draws(ll_model *m, int draw) {
    ll_layer_ctl *c[3] = {m->enc_ctl, m->dec_ctl, m->obj.ddr_dec_ctl};
    for (int s = 0, k = 0; s < 3; s++)
        for (int l = 0; c[s] && l < (s ? m->hp.Ld : m->hp.Le); l++, k++) {
            const unsigned v = (unsigned)(k * 7 + draw * 5 + l * draw) % 5;
            c[s][l].may_skip = 1, c[s][l].may_skip_cross = s > 0;
            c[s][l].skip = v == 1 || v == 4;
            c[s][l].skip_cross = s > 0 && (v == 2 || v == 4);
        }
}
static inline void tu_toy_model_free(ll_model *m) {
    free(m->obj.ddr_dec_ctl);
    m->obj.ddr_dec_ctl = NULL;
    ll_model_free(m);
}

#endif
