/* Batch-level random structure decisions, drawn from Philox so they are
 * reproducible and identical across backends: cross-attention drop (Li et al.
 * 2022, reference-spec §0.3/§3.1) and LayerDrop (Fan et al. 2019, §6).  One
 * uniform per layer per forward; `pass` separates the draws of DDR's second
 * decoder pass from the first. */
#include "ll/model.h"

void ll_cad_sample(ll_layer_ctl *ctl, int L, real p_net, int drop_depth, real p_above, uint64_t seed,
                   uint64_t step, int pass) {
    ll_philox r;
    ll_philox_init(&r, seed, LL_RNG_DROPNET | (uint32_t)pass << 8, (uint32_t)step);
    for (int l = 0; l < L; l++) {
        real p = l < drop_depth ? p_net : p_above; /* layers 1..L_dr, counted from the bottom */
        ctl[l].skip_cross = p > 0 && ll_philox_uniform(&r, (uint64_t)l) < p;
    }
}

void ll_layerdrop_sample(ll_layer_ctl *ctl, int L, real p, uint64_t seed, uint64_t step, int stack, int pass) {
    ll_philox r;
    ll_philox_init(&r, seed, LL_RNG_LAYERDROP | (uint32_t)stack << 8 | (uint32_t)pass << 9, (uint32_t)step);
    for (int l = 0; l < L; l++) ctl[l].skip = p > 0 && !(ll_philox_uniform(&r, (uint64_t)l) > p); /* run iff u > p */
}
