/* Host cost of a training step's shadow run (docs/cuda-backend.md, "The step as
 * a CUDA graph"): before launching a kept CUDA graph, ll runs the step's host
 * code with every backend op hashed, not run, to check the graph is the step's.
 * This times that on the CPU, with no device: the model on the dry backend
 * (values never computed), a synthetic batch of B x L tokens, the step first
 * with its ops only counted (the host code alone), then fingerprinted.
 *   ll_graph_shadow_bench --config configs/wmt16_ende_ll64.cfg [--batch 256] [--len 32] [--steps 20]
 * Prints: RESULT ll_graph_shadow model=... ops=... host_ms=... shadow_ms=... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/config.h"
#include "ll/core.h"
#include "ll/model.h"

int main(int argc, char **argv) {
    const char *cfg_path = NULL;
    int B = 256, L = 32, steps = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--config")) cfg_path = argv[i + 1];
        else if (!strcmp(argv[i], "--batch")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--len")) L = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else ll_die("usage: %s --config FILE [--batch B] [--len L] [--steps N]", argv[0]);
    }
    if (!cfg_path || B < 1 || L < 2 || steps < 1) ll_die("usage: %s --config FILE [--batch B] [--len L] [--steps N]", argv[0]);
    ll_config cfg;
    if (ll_config_load(&cfg, cfg_path)) ll_die("%s", ll_errbuf());
    ll_hparams hp;
    ll_hparams_from_config(&hp, &cfg, cfg.vocab_size);
    ll_backend *dry = ll_backend_dry(ll_backend_cpu_precision(LL_BF16));
    ll_model *m = ll_model_new(&hp, dry);
    m->obj = (ll_objective){.ddr_alpha = cfg.ddr_alpha, .ald_weight = cfg.ald_weight, .ald_p = cfg.ald_p,
                            .ald_tau = cfg.ald_tau};
    if (cfg.ddr_alpha > 0) m->obj.ddr_dec_ctl = ll_calloc(hp.Ld ? hp.Ld : 1, sizeof(ll_layer_ctl));
    ll_batch b;
    ll_batch_full(&b, B, L);
    ll_backend *fp = ll_backend_fingerprint(dry);
    double ms[2];
    uint64_t ops = 0, h[2] = {0, 0};
    for (int mode = 0; mode < 2; mode++) { /* 0: counted only; 1: fingerprinted (a shadow run) */
        if (mode) m->be = fp, ll_backend_fingerprint_shadow(fp, 1);
        const uint64_t c0 = ll_backend_counts(dry)->calls;
        double t0 = 0;
        for (int s = 0; s < steps + 2; s++) { /* two to warm up */
            if (s == 2) t0 = ll_now();
            ll_model_zero_grads(m);
            ll_model_step(m, &b, 1, (uint64_t)s, 1, NULL);
            if (mode) h[s & 1] = ll_backend_fingerprint_take(fp);
        }
        ms[mode] = 1e3 * (ll_now() - t0) / steps;
        if (!mode) ops = (ll_backend_counts(dry)->calls - c0) / (uint64_t)(steps + 2);
    }
    /* the Philox step lives in backend memory: every step hashes the same */
    if (h[0] != h[1]) ll_die("two steps of the same shape fingerprint differently: no graph would be replayed");
    printf("RESULT ll_graph_shadow model=%s batch=%dx%d ops=%llu host_ms=%.3f shadow_ms=%.3f\n", cfg_path, B, L,
           (unsigned long long)ops, ms[0], ms[1]);
    ll_batch_free(&b);
    free(m->obj.ddr_dec_ctl);
    m->be = dry;
    ll_model_free(m);
    ll_backend_counting_free(fp);
    ll_backend_counting_free(dry);
    ll_config_free(&cfg);
    return 0;
}
