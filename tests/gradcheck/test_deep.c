/* DLCL, ReZero, cross-attention drop, LayerDrop, DDR and ALD:
 *  - DLCL with the layer norms off and W = the residual special case
 *    (W[r][r] = 1, others 0) reproduces the plain stack exactly;
 *  - cached decoding equals full recomputation with DLCL and ReZero;
 *  - CAD / LayerDrop drop frequencies, the drop depth, inference behaviour;
 *  - DDR is 0 for identical passes; ALD's value on a hand-worked case and its
 *    gradient against finite differences. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/model/model_internal.h"
#include "../util/testutil.h"
#include "gradcheck.h"

static ll_hparams base(void) {
    return (ll_hparams){.C = 8, .F = 12, .H = 2, .Le = 3, .Ld = 3, .V = 23, .max_pos = 64, .share_all = 1,
                        .tie_output = 1, .dropout = 0.2, .label_smoothing = 0.1};
}

static void test_dlcl_residual(int post) {
    ll_hparams hp = base();
    hp.post_norm = post;
    ll_model *plain = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(plain, 4);
    hp.dlcl_enc = hp.dlcl_dec = 1;
    hp.dlcl_learnable = 1;
    hp.dlcl_ln = 0;
    ll_model *dl = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(dl, 4);
    /* same shared parameters by name; W = identity (the residual special case) */
    for (int t = 0; t < plain->n_table; t++) {
        const ll_param *p = &plain->table[t], *q = ll_model_find(dl, p->name);
        CHECK(q != NULL);
        if (q) memcpy(dl->params + q->offset, plain->params + p->offset, p->numel * sizeof(real));
    }
    for (int s = 0; s < 2; s++) {
        int L1 = (s ? hp.Ld : hp.Le) + 1;
        for (int r = 0; r < L1; r++)
            for (int k = 0; k < L1; k++) dl->params[dl->dlcl_w[s] + r * L1 + k] = r == k;
    }
    ll_batch b;
    gc_make_batch(&b, 3, 6, 5, hp.V, 8);
    double a = ll_model_loss(plain, &b, 3, 9, 1), c = ll_model_loss(dl, &b, 3, 9, 1);
    CHECK_MSG(a == c, "%s: DLCL residual special case %.17g vs plain %.17g", post ? "post" : "pre", c, a);
    gc_free_batch(&b);
    ll_model_free(plain);
    ll_model_free(dl);
}

static void test_decode_cache(ll_hparams hp, const char *label) {
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 3);
    for (int t = 0; t < m->n_table; t++) { /* non-trivial alphas / weights */
        const ll_param *p = &m->table[t];
        if (strstr(p->name, "rezero_alpha") || strstr(p->name, "dlcl_weights"))
            for (size_t i = 0; i < p->numel; i++) m->params[p->offset + i] += 0.4 + 0.1 * (double)(i % 5);
    }
    ll_batch b;
    gc_make_batch(&b, 2, 6, 5, hp.V, 5);
    const int V = hp.V;
    real *full = malloc(sizeof(real) * b.B * b.T * V);
    memcpy(full, ll_model_logprobs(m, &b), sizeof(real) * b.B * b.T * V);
    ll_dec_state *d = ll_decode_begin(m, b.src, b.src_len, b.B, b.S, 1, b.T + 1);
    real *logp = malloc(sizeof(real) * b.B * V);
    int32_t prev[2];
    double worst = 0;
    for (int t = 0; t < b.T; t++) {
        for (int n = 0; n < b.B; n++) prev[n] = b.tgt_in[n * b.T + t];
        ll_decode_step(m, d, prev, logp);
        for (int n = 0; n < b.B; n++)
            if (t < b.tgt_len[n])
                for (int v = 0; v < V; v++)
                    worst = fmax(worst, fabs(logp[n * V + v] - full[((size_t)n * b.T + t) * V + v]));
    }
    CHECK_MSG(worst < 1e-10, "%s: cached decoding differs by %g", label, worst);
    ll_decode_end(m, d);
    free(full);
    free(logp);
    gc_free_batch(&b);
    ll_model_free(m);
}

static void test_cad_layerdrop(void) {
    ll_layer_ctl ctl[6];
    int count[6] = {0}, n = 20000;
    for (int s = 0; s < n; s++) {
        memset(ctl, 0, sizeof ctl);
        ll_cad_sample(ctl, 6, 0.4, 3, 0.1, 7, s, 0);
        for (int l = 0; l < 6; l++) count[l] += ctl[l].skip_cross;
    }
    for (int l = 0; l < 6; l++) {
        double want = l < 3 ? 0.4 : 0.1;
        CHECK_MSG(fabs((double)count[l] / n - want) < 0.012, "CAD layer %d: rate %.4f, want %.2f", l, (double)count[l] / n, want);
    }
    /* the two DDR passes draw independently; the same pass repeats exactly */
    int differ = 0, same = 1;
    for (int s = 0; s < 200; s++) {
        ll_layer_ctl a[6], b2[6], c[6];
        ll_cad_sample(a, 6, 0.5, 6, 0, 7, s, 0);
        ll_cad_sample(b2, 6, 0.5, 6, 0, 7, s, 1);
        ll_cad_sample(c, 6, 0.5, 6, 0, 7, s, 0);
        for (int l = 0; l < 6; l++) {
            differ += a[l].skip_cross != b2[l].skip_cross;
            same &= a[l].skip_cross == c[l].skip_cross;
        }
    }
    CHECK(differ > 300 && same);
    /* p_net = 1 below the drop depth: always dropped; 0 above: never */
    ll_cad_sample(ctl, 6, 1.0, 2, 0, 7, 3, 0);
    CHECK(ctl[0].skip_cross && ctl[1].skip_cross && !ctl[2].skip_cross && !ctl[5].skip_cross);
    int ld = 0;
    for (int s = 0; s < n; s++) {
        ll_layerdrop_sample(ctl, 6, 0.25, 7, s, 1, 0);
        ld += ctl[2].skip;
    }
    CHECK_NEAR((double)ld / n, 0.25, 0.012);

    /* inference uses every cross-attention: a model whose decoder never drops
     * gives the training-mode forward without drops (checked via logprobs == eval loss path) */
    ll_hparams hp = base();
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 2);
    for (int l = 0; l < hp.Ld; l++) CHECK(!m->dec_ctl[l].skip_cross && !m->dec_ctl[l].skip);
    ll_model_free(m);
}

static void test_ddr_zero(void) {
    ll_hparams hp = base();
    hp.dropout = 0; /* identical passes: no dropout, no drop-net */
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 2);
    m->obj.ddr_alpha = 5;
    ll_batch b;
    gc_make_batch(&b, 3, 5, 4, hp.V, 1);
    ll_loss_stats st;
    ll_model_step(m, &b, 1, 1, 1, &st);
    CHECK_MSG(fabs(st.ddr) < 1e-12, "DDR of identical passes = %g", st.ddr);
    CHECK_NEAR(st.ce2, st.loss, 1e-10 * st.loss);
    m->hp.dropout = 0.3; /* different dropout draws: positive */
    ll_model_step(m, &b, 1, 1, 1, &st);
    CHECK(st.ddr > 0);
    gc_free_batch(&b);
    ll_model_free(m);
}

/* The ALD op's value (stats slot; host memory on the CPU backend). */
static double ald(ll_model *m, const ll_batch *b, const ll_dev_batch *db, ll_act *const *hs, ll_act **dh) {
    m->stats[LL_ST_ALD] = 0;
    ll_ald_loss(m, b, db, hs, dh);
    return m->stats[LL_ST_ALD];
}

/* ALD on a hand-worked case: B = 1, T = 1, C = 2. */
static void test_ald_hand(void) {
    ll_hparams hp = base();
    hp.C = 2;
    hp.H = 1;
    hp.F = 2;
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    m->obj.ald_weight = 1;
    m->obj.ald_tau = 0.5;
    int32_t tok[1] = {5};
    int len[1] = {1};
    ll_batch b = {.B = 1, .S = 1, .T = 1, .tgt_len = len, .src_len = len, .src = tok, .tgt_in = tok, .tgt_out = tok,
                  .n_tgt_tokens = 1};
    real h0[2] = {1, 0}, hp_[2] = {1, 1}, hn[2] = {0, 1};
    ll_act *hs[3] = {(ll_act *)h0, (ll_act *)hp_, (ll_act *)hn}; /* act is real here */
    ll_act *dh[3];
    real *hr[3] = {h0, hp_, hn};
    ll_arena_reset(&m->arena);
    const ll_dev_batch db = ll_batch_upload(m, &b, 0, 0, 0);
    double J = ald(m, &b, &db, hs, dh);
    /* cos+ = 1/sqrt2, cos- = 0: J = -log(e^{1.414/.5... }) = log(1 + exp((0 - 1/sqrt2)/0.5)) */
    double want = log(1 + exp((0 - 1 / sqrt(2.0)) / 0.5));
    CHECK_NEAR(J, want, 1e-12);
    /* gradient against finite differences */
    for (int i = 0; i < 3; i++)
        for (int c = 0; c < 2; c++) {
            real s = hr[i][c], h = 1e-6;
            hr[i][c] = s + h;
            double lp = ald(m, &b, &db, hs, NULL);
            hr[i][c] = s - h;
            double lm = ald(m, &b, &db, hs, NULL);
            hr[i][c] = s;
            CHECK_NEAR(((real *)dh[i])[c], (lp - lm) / (2 * h), 1e-7);
        }
    ll_model_free(m);
}

/* data.pad_to_multiple: extra PAD columns (S + 3, T + 5) change neither the loss nor any
 * gradient (dropout off: with it on, the padding only moves which draws each element gets),
 * for the plain model and with DLCL, DDR and ALD: pad keys are masked, pad targets ignored,
 * pad rows add zero gradients */
static void pad_batch(const ll_batch *b, ll_batch *p, int dS, int dT) {
    *p = *b;
    p->S = b->S + dS, p->T = b->T + dT;
    p->src = malloc(sizeof(int32_t) * (size_t)p->B * p->S);
    p->tgt_in = malloc(sizeof(int32_t) * (size_t)p->B * p->T);
    p->tgt_out = malloc(sizeof(int32_t) * (size_t)p->B * p->T);
    p->src_len = malloc(sizeof(int) * (size_t)p->B);
    p->tgt_len = malloc(sizeof(int) * (size_t)p->B);
    for (int i = 0; i < b->B; i++) {
        p->src_len[i] = b->src_len[i], p->tgt_len[i] = b->tgt_len[i];
        for (int t = 0; t < p->S; t++) p->src[i * p->S + t] = t < b->S ? b->src[i * b->S + t] : LL_PAD;
        for (int t = 0; t < p->T; t++) {
            p->tgt_in[i * p->T + t] = t < b->T ? b->tgt_in[i * b->T + t] : LL_PAD;
            p->tgt_out[i * p->T + t] = t < b->T ? b->tgt_out[i * b->T + t] : LL_PAD;
        }
    }
}
static void test_padding_inert(int dlcl, int objectives) {
    ll_hparams hp = base();
    hp.dropout = 0;
    hp.dlcl_enc = hp.dlcl_dec = hp.dlcl_learnable = dlcl;
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 5);
    if (objectives) {
        m->obj.ddr_alpha = 2, m->obj.ald_weight = 0.5, m->obj.ald_p = 0.3, m->obj.ald_tau = 0.1;
        m->obj.ddr_dec_ctl = calloc((size_t)hp.Ld, sizeof(ll_layer_ctl));
    }
    ll_batch b, p;
    gc_make_batch(&b, 3, 5, 4, hp.V, 7);
    pad_batch(&b, &p, 3, 5);
    real *g = malloc(sizeof(real) * m->n_params);
    ll_loss_stats s0, s1;
    ll_model_zero_grads(m);
    ll_model_step(m, &b, 1, 2, 1, &s0);
    memcpy(g, m->grads, sizeof(real) * m->n_params);
    ll_model_zero_grads(m);
    ll_model_step(m, &p, 1, 2, 1, &s1);
    double worst = 0, gmax = 0; /* (the matmuls' sums run in another order: rounding, relative to the largest) */
    for (size_t i = 0; i < m->n_params; i++) worst = fmax(worst, fabs(m->grads[i] - g[i])), gmax = fmax(gmax, fabs(g[i]));
    worst /= gmax;
    CHECK_MSG(fabs(s1.loss - s0.loss) <= 1e-12 * fabs(s0.loss) && fabs(s1.ald - s0.ald) <= 1e-12 * fabs(s0.ald) + 1e-15,
              "padding changed the loss: %.17g -> %.17g (ald %.17g -> %.17g)", s0.loss, s1.loss, s0.ald, s1.ald);
    CHECK_MSG(worst <= 1e-13, "padding changed a gradient by %g (relative to the largest)", worst);
    free(g);
    gc_free_batch(&b);
    gc_free_batch(&p);
    free(m->obj.ddr_dec_ctl);
    m->obj.ddr_dec_ctl = NULL;
    ll_model_free(m);
}

int main(void) {
    test_padding_inert(0, 0);
    test_padding_inert(1, 1);
    ll_set_threads(1); /* tiny shapes: threads only add overhead */
    test_dlcl_residual(0);
    test_dlcl_residual(1);
    ll_hparams hp = base();
    hp.dlcl_enc = hp.dlcl_dec = hp.dlcl_learnable = hp.dlcl_ln = 1;
    test_decode_cache(hp, "DLCL pre-norm");
    hp.post_norm = 1;
    test_decode_cache(hp, "DLCL post-norm");
    hp = base();
    hp.rezero = 1;
    test_decode_cache(hp, "ReZero");
    test_cad_layerdrop();
    test_ddr_zero();
    test_ald_hand();
    return tu_finish("grad_test_deep");
}
