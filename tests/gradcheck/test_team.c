/* Thread data parallelism (src/model/team.c): a batch cut into slices for 2
 * or 3 workers gives the loss and gradients of the whole batch in one pass,
 * with dropout on everywhere (embeddings, sub-layers, attention
 * probabilities, FFN activations) and DDR's second decoder pass -- so each
 * slice must draw exactly the whole batch's dropout masks for its rows.
 * Double precision: only the summation order of the gradients differs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/testutil.h"
#include "gradcheck.h"
#include "ll/model.h"

static void check(const char *label, ll_hparams hp, real ddr) {
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 11);
    m->obj.ddr_alpha = ddr;
    ll_layer_ctl ddr_ctl[8];
    if (ddr > 0) {
        m->obj.ddr_dec_ctl = ddr_ctl;
        for (int l = 0; l < hp.Ld; l++) ddr_ctl[l] = (ll_layer_ctl){.skip_cross = l == 0};
    }
    m->dec_ctl[1].skip_cross = 1; /* a CAD draw, copied to the workers */
    ll_batch b;
    gc_make_batch(&b, 7, 6, 5, hp.V, 21);
    const size_t n = m->n_params;
    real *g1 = malloc(sizeof(real) * n);
    ll_loss_stats s1, sw;
    memset(m->grads, 0, sizeof(real) * n);
    ll_model_step(m, &b, 5, 3, 1, &s1);
    memcpy(g1, m->grads, sizeof(real) * n);
    double gmax = 0;
    for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(g1[i]));
    for (int workers = 2; workers <= 3; workers++) {
        ll_step_team *t = ll_step_team_new(m, workers);
        CHECK_MSG(t && ll_step_team_size(t) == workers, "%s: no team of %d", label, workers);
        memset(m->grads, 0, sizeof(real) * n);
        ll_model_step_team(m, t, &b, 5, 3, &sw);
        double worst = 0;
        for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(m->grads[i] - g1[i]));
        fprintf(stderr, "%s, %d workers: loss %.12g vs %.12g, max |dg| %.3g (max |g| %.3g)\n", label, workers,
                sw.loss, s1.loss, worst, gmax);
        CHECK_MSG(fabs(sw.loss - s1.loss) < 1e-10 * fabs(s1.loss), "%s: loss differs with %d workers", label, workers);
        CHECK_MSG(fabs(sw.ce2 + sw.ddr - s1.ce2 - s1.ddr) < 1e-10 * (1 + fabs(s1.ce2)), "%s: DDR terms differ",
                  label);
        CHECK(sw.ntokens == s1.ntokens);
        CHECK_MSG(worst < 1e-10 * gmax, "%s: gradients differ with %d workers by %g", label, workers, worst);
        ll_step_team_free(t);
    }
    /* the whole-batch objectives cannot be split */
    m->obj.ald_weight = 0.5;
    CHECK(!ll_step_team_supported(m) && !ll_step_team_new(m, 2));
    m->obj.ald_weight = 0;
    m->obj.ddr_dec_ctl = NULL;
    free(g1);
    gc_free_batch(&b);
    ll_model_free(m);
}

int main(void) {
    ll_set_threads(2);
    ll_hparams hp = {.C = 16, .F = 24, .H = 4, .Le = 2, .Ld = 3, .V = 31, .max_pos = 64, .share_all = 1,
                     .tie_output = 1, .dropout = 0.3, .attn_dropout = 0.2, .act_dropout = 0.1,
                     .label_smoothing = 0.1};
    check("pre-norm", hp, 0);
    check("pre-norm + DDR", hp, 0.5);
    hp.post_norm = 1;
    check("post-norm", hp, 0);
    hp.post_norm = 0;
    hp.latent_dec = 1;
    hp.latent_rows = 1;
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    CHECK(!ll_step_team_new(m, 2)); /* latent depth: one worker */
    ll_model_free(m);
    return tu_finish("grad_test_team");
}
