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

void ll_unk_corrupt(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t step, int32_t **light, int32_t **heavy) {
    const int B = b->B, S = b->S;
    int32_t *x[2];
    for (int i = 0; i < 2; i++) {
        x[i] = ll_arena_alloc(&m->arena, sizeof(int32_t) * (size_t)B * S);
        memcpy(x[i], b->src, sizeof(int32_t) * (size_t)B * S);
    }
    ll_philox r;
    ll_philox_init(&r, seed, LL_RNG_UNK, (uint32_t)step);
    int *perm = ll_arena_alloc(&m->arena, sizeof(int) * (S + 1));
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
    *light = x[0];
    *heavy = x[1];
}

/* G[b] = mean over the sentence's target positions of h. */
static void pool(const ll_batch *b, const real *h, int C, double *G) {
    for (int s = 0; s < b->B; s++) {
        double *g = G + (size_t)s * C;
        memset(g, 0, sizeof(double) * C);
        int n = b->tgt_len[s];
        for (int t = 0; t < n; t++)
            for (int c = 0; c < C; c++) g[c] += h[((size_t)s * b->T + t) * C + c];
        for (int c = 0; c < C; c++) g[c] /= n > 0 ? n : 1;
    }
}

double ll_ald_loss(ll_model *m, const ll_batch *b, real *const *hs, real **dh) {
    const int B = b->B, C = m->hp.C, T = b->T;
    const double tau = m->obj.ald_tau, w = m->obj.ald_weight * b->n_tgt_tokens / (double)B;
    /* states are host memory on the CPU backend; the CUDA backend will pool on the device */
    double *G = ll_malloc(sizeof(double) * 3 * (size_t)B * C), *dG = ll_calloc(3 * (size_t)B * C, sizeof(double));
    for (int i = 0; i < 3; i++) pool(b, hs[i], C, G + (size_t)i * B * C);
    double total = 0;
    for (int s = 0; s < B; s++) {
        const double *g[3];
        double norm[3], cosv[3] = {0, 0, 0};
        for (int i = 0; i < 3; i++) {
            g[i] = G + ((size_t)i * B + s) * C;
            double q = 0;
            for (int c = 0; c < C; c++) q += g[i][c] * g[i][c];
            norm[i] = sqrt(q);
        }
        for (int i = 1; i < 3; i++) {
            double d = 0;
            for (int c = 0; c < C; c++) d += g[0][c] * g[i][c];
            cosv[i] = d / fmax(norm[0] * norm[i], 1e-8);
        }
        double delta = (cosv[2] - cosv[1]) / tau;          /* s- - s+ */
        double J = delta > 0 ? delta + log1p(exp(-delta)) : log1p(exp(delta)); /* softplus */
        total += J;
        double sg = 1 / (1 + exp(-delta));                  /* dJ/d delta */
        double ds[3] = {0, -sg / tau, sg / tau};            /* dJ/dcos+ , dJ/dcos- */
        for (int i = 1; i < 3; i++) {
            double den = fmax(norm[0] * norm[i], 1e-8);
            double *d0 = dG + (size_t)s * C, *di = dG + ((size_t)i * B + s) * C;
            for (int c = 0; c < C; c++) {
                /* d cos(a,b)/da = b/(|a||b|) - cos a/|a|^2 */
                d0[c] += w * ds[i] * (g[i][c] / den - cosv[i] * g[0][c] / fmax(norm[0] * norm[0], 1e-16));
                di[c] += w * ds[i] * (g[0][c] / den - cosv[i] * g[i][c] / fmax(norm[i] * norm[i], 1e-16));
            }
        }
    }
    if (dh)
        for (int i = 0; i < 3; i++) { /* un-pool: every target position gets dG / n */
            dh[i] = ll_zeros(m, (size_t)B * T * C);
            for (int s = 0; s < B; s++) {
                int n = b->tgt_len[s];
                for (int t = 0; t < n; t++)
                    for (int c = 0; c < C; c++)
                        dh[i][((size_t)s * T + t) * C + c] = (real)(dG[((size_t)i * B + s) * C + c] / n);
            }
        }
    free(G);
    free(dG);
    return w * total;
}
