/* The deep-decoder paper's ALD loss (reference-spec §0.3, §3.3): sources
 * corrupted with UNK at ratios gamma (positive) and 1 - gamma (negative);
 * G = mean over target positions of the top decoder states (after the final
 * LN, before the output projection); the clean pass is the anchor:
 *   J = -log( e^{s+} / (e^{s+} + e^{s-}) ),  s = cos(G, G*) / tau.
 * Choices (docs/methods.md): no in-batch negatives, gradients flow into all
 * three passes (no stop-gradient), the loss is weight * ntokens * mean over
 * sentences so that after the trainer's division by ntokens it is a mean. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

void ll_unk_corrupt(const ll_model *m, const ll_batch *b, uint64_t seed, uint64_t step, int32_t *light, int32_t *heavy) {
    const int B = b->B, S = b->S;
    int32_t *x[2] = {light, heavy};
    for (int i = 0; i < 2; i++) memcpy(x[i], b->src, sizeof(int32_t) * (size_t)B * S);
    ll_philox r;
    ll_philox_init(&r, seed, LL_RNG_UNK, (uint32_t)step);
    int *perm = ll_malloc(sizeof(int) * (S + 1));
    uint64_t ctr = 0;
    for (int s = 0; s < B; s++) {
        int n = b->src_len[s] - 1; /* real tokens: EOS stays */
        if (n <= 0) continue;
        double gamma = m->obj.ald_p * ll_philox_uniform(&r, ctr++);
        for (int i = 0; i < n; i++) perm[i] = i;
        for (int i = n - 1; i > 0; i--) { /* Fisher-Yates: positions in random order */
            int j = (int)ll_philox_below(&r, ctr++, (uint32_t)(i + 1)), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        int k[2] = {(int)lround(gamma * n), (int)lround((1 - gamma) * n)};
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < k[i]; j++) x[i][s * S + perm[j]] = LL_UNK;
    }
    free(perm);
}

void ll_ald_loss(ll_model *m, const ll_batch *b, const ll_dev_batch *db, ll_act *const *hs, ll_act **dh) {
    ll_backend *be = m->be;
    const int B = b->B, C = m->hp.C, T = b->T;
    real *G = ll_fbuf(m, 3 * (size_t)B * C), *dG = dh ? ll_fbuf(m, 3 * (size_t)B * C) : NULL; /* fp32 */
    for (int i = 0; i < 3; i++) be->ald_pool(be, G + (size_t)i * B * C, hs[i], db->tgt_len, B, T, C);
    be->ald_loss(be, dG, m->stats + LL_ST_ALD, G, B, C, m->obj.ald_tau, db->ald_w);
    if (dh)
        for (int i = 0; i < 3; i++) {
            dh[i] = ll_buf(m, (size_t)B * T * C);
            be->ald_unpool(be, dh[i], dG + (size_t)i * B * C, db->tgt_len, B, T, C);
        }
}
