/* LayerDrop and cross-attention drop as data (ll_model.drop_conds): the
 * skipped layers and branches are queued as conditionals (backend cond_if /
 * cond_else / cond_end), so that one CUDA graph serves every draw.  On the CPU
 * backend, through the fingerprinting wrapper, which queues only the host's
 * branch of each conditional:
 *  - the wrapper: the host's branch runs, the other does not (nested too),
 *    alloc runs in both; a shadow run hashes both branches and the flag's
 *    address, not its value;
 *  - a training step queued that way equals the step whose skipped ops are
 *    not queued at all (loss and every gradient), for pre-norm, post-norm,
 *    ReZero and DLCL models with LayerDrop in both stacks, cross-attention
 *    drop and DDR's second decoder pass with draws of its own;
 *  - its shadow runs hash the same whatever the draws (a kept graph is
 *    replayed), and differ from the ones without conditionals. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/config.h"
#include "ll/model.h"
#include "gradcheck/gradcheck.h"
#include "util/testutil.h"
#include "util/toy_config.h"

static void test_wrapper(void) {
    ll_backend *cpu = ll_backend_cpu(), *fp = ll_backend_fingerprint(cpu);
    CHECK(fp != NULL && fp->cond_if && fp->cond_else && fp->cond_end);
    float *buf = cpu->alloc(cpu, 64 * sizeof(float));
    uint8_t *flag = cpu->alloc(cpu, 16);
    ll_backend_fingerprint_shadow(fp, 0);
    for (int run = 0; run < 2; run++) {
        for (int i = 0; i < 8; i++) buf[i] = 1;
        fp->cond_if(fp, flag, run);
        fp->memset0(fp, buf, sizeof(float)); /* buf[0]: the if branch */
        fp->cond_if(fp, flag + 1, 1);        /* nested: its if branch runs when the outer one does */
        fp->memset0(fp, buf + 1, sizeof(float));
        fp->cond_else(fp);
        fp->memset0(fp, buf + 2, sizeof(float));
        fp->cond_end(fp);
        float *p = fp->alloc(fp, 64); /* memory in either branch */
        CHECK(p != NULL);
        fp->free(fp, p);
        fp->cond_else(fp);
        fp->memset0(fp, buf + 3, sizeof(float)); /* buf[3]: the else branch */
        fp->cond_end(fp);
        fp->memset0(fp, buf + 4, sizeof(float)); /* after the conditional: always */
        CHECK_MSG(buf[0] == (run ? 0 : 1) && buf[1] == (run ? 0 : 1) && buf[2] == 1 && buf[3] == (run ? 1 : 0) &&
                      buf[4] == 0,
                  "host branch %d: %g %g %g %g %g", run, buf[0], buf[1], buf[2], buf[3], buf[4]);
    }
    ll_backend_fingerprint_shadow(fp, 1);
    uint64_t h[3];
    for (int i = 0; i < 3; i++) {
        ll_backend_fingerprint_take(fp);
        fp->cond_if(fp, flag + (i == 2), i == 1);
        fp->memset0(fp, buf, 4);
        fp->cond_else(fp);
        fp->memset0(fp, buf + 1, 4);
        fp->cond_end(fp);
        h[i] = ll_backend_fingerprint_take(fp);
    }
    CHECK_MSG(h[0] == h[1], "a conditional hashes its host branch");
    CHECK_MSG(h[0] != h[2], "a conditional's flag address is not in the hash");
    buf[5] = 1;
    fp->cond_if(fp, flag, 0);
    fp->memset0(fp, buf + 5, 4);
    fp->cond_end(fp);
    CHECK_MSG(buf[5] == 1, "a shadow run ran an op inside a conditional");
    cpu->free(cpu, flag);
    cpu->free(cpu, buf);
    ll_backend_counting_free(fp);
}

/* A training step with gradients zeroed first; the loss, the gradients into g. */
static double train_step(ll_model *m, const ll_batch *b, uint64_t step, real *g) {
    ll_model_zero_grads(m);
    ll_loss_stats st;
    ll_model_step(m, b, 3, step, 1, &st);
    m->be->download(m->be, g, m->grads, m->n_params * sizeof(real));
    return st.loss + st.ce2 + st.ddr + st.ald;
}

static void test_model(const char *name, const char *const *extra, int n_extra) {
    const char *toy[] = {"model.d_model=16", "model.ffn_dim=32", "model.heads=2", "model.enc_layers=3",
                         "model.dec_layers=3"};
    ll_config cfg;
    if (tu_toy_config(&cfg, "deep_decoder_15_15", toy, 5)) return; /* DDR, ALD, CAD */
    for (int i = 0; i < n_extra; i++) CHECK_MSG(ll_config_set(&cfg, extra[i]) == 0, "%s: %s", extra[i], ll_errbuf());
    ll_model *m = tu_toy_model(&cfg, 40);
    const ll_hparams hp = m->hp;
    ll_batch b;
    gc_make_batch(&b, 4, 7, 6, hp.V, 1);
    real *g0 = malloc(m->n_params * sizeof(real)), *g1 = malloc(m->n_params * sizeof(real));
    int skipped = 0, ran = 0;
    for (int draw = 0; draw < 4; draw++) {
        tu_drop_draws(m, draw);
        for (int l = 0; l < hp.Ld; l++) skipped += m->dec_ctl[l].skip, ran += !m->dec_ctl[l].skip;
        m->drop_conds = 0;
        const double l0 = train_step(m, &b, 20 + draw, g0);
        m->drop_conds = 2;
        const double l1 = train_step(m, &b, 20 + draw, g1);
        m->drop_conds = 0;
        double gmax = 0, dmax = 0;
        for (size_t i = 0; i < m->n_params; i++) {
            gmax = fmax(gmax, fabs((double)g0[i]));
            dmax = fmax(dmax, fabs((double)g0[i] - (double)g1[i]));
        }
        CHECK_MSG(isfinite(l0) && fabs(l0 - l1) <= 1e-6 * fabs(l0) && dmax <= 1e-6 * gmax,
                  "%s, draw %d: conditionals give loss %.9g, the ops as drawn %.9g; gradients differ by %.3g (largest "
                  "%.3g)",
                  name, draw, l1, l0, dmax, gmax);
    }
    CHECK_MSG(skipped > 0 && ran > 0, "%s: the draws never skip or never run a layer", name);
    /* shadow runs: one hash whatever the draws; another without conditionals */
    ll_backend *fp = ll_backend_fingerprint(m->be), *be = m->be;
    ll_backend_fingerprint_shadow(fp, 1);
    uint64_t h[2], plain[2];
    for (int draw = 0; draw < 2; draw++) {
        tu_drop_draws(m, draw);
        for (int conds = 0; conds < 2; conds++) {
            m->drop_conds = conds ? 2 : 0;
            ll_model_zero_grads(m);
            m->be = fp;
            ll_model_step(m, &b, 3, 30 + draw, 1, NULL);
            m->be = be;
            (conds ? h : plain)[draw] = ll_backend_fingerprint_take(fp);
        }
    }
    m->drop_conds = 0;
    CHECK_MSG(h[0] == h[1], "%s: the conditionals' steps of two draws hash differently", name);
    CHECK_MSG(plain[0] != plain[1] && h[0] != plain[0], "%s: the hash does not see the draws' structure", name);
    ll_backend_counting_free(fp);
    free(g0), free(g1);
    tu_toy_model_free(m);
    gc_free_batch(&b);
    ll_config_free(&cfg);
}

int main(void) {
    test_wrapper();
    test_model("pre-norm", NULL, 0);
    const char *post[] = {"model.norm=post"};
    test_model("post-norm", post, 1);
    const char *rezero[] = {"model.norm=rezero"};
    test_model("ReZero", rezero, 1);
    const char *dlcl[] = {"dlcl.encoder=true", "dlcl.decoder=true"};
    test_model("DLCL", dlcl, 2);
    return tu_finish("test_drop_conds");
}
