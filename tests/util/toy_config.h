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
static inline void tu_toy_model_free(ll_model *m) {
    free(m->obj.ddr_dec_ctl);
    m->obj.ddr_dec_ctl = NULL;
    ll_model_free(m);
}

#endif
