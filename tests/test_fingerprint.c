/* The fingerprinting backend wrapper (ll_backend_fingerprint) that decides
 * whether a kept CUDA graph is a training step's (docs/cuda-backend.md, "The
 * step as a CUDA graph"), on the CPU backend:
 *  - the same ops with the same arguments hash the same; any argument changed
 *    (a pointer, a scalar, a gemm descriptor's field, a Philox stream's word
 *    or its step address, a DLCL pointer list's entry, a latent prior's
 *    field) hashes otherwise;
 *  - a shadow run hashes ops without running them, alloc still runs; a
 *    forward run runs them;
 *  - two training steps of the same shape and structure hash the same (the
 *    Philox step and the ALD weight are read from backend memory), and do
 *    not when the step's shape, a layer's structure or the step's first
 *    gradient contributions (grad_fresh) differ. */
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/config.h"
#include "ll/model.h"
#include "util/testutil.h"
#include "util/toy_config.h"

/* a fixed sequence of ops; `which` changes one argument of it (0: none) */
static uint64_t ops_hash(ll_backend *fp, float *buf, int which) {
    ll_philox r;
    ll_philox_init(&r, 7, 1, 3);
    static const uint32_t step_word[2] = {3, 3};
    if (which == 6) r.ctr_hi[1] = 4;
    if (which == 7) r.ctr_hi1_at = &step_word[0];
    if (which == 8) r.ctr_hi1_at = &step_word[1];
    ll_gemm_desc g = {.M = 2, .N = 3, .K = 4, .alpha = 1, .A = buf, .lda = 4, .B = buf + 8, .ldb = 4, .C = buf + 32,
                      .ldc = 3, .trans_b = 1};
    if (which == 1) g.A = buf + 1;
    if (which == 2) g.beta = 1;
    if (which == 3) g.epi = LL_EPI_BIAS, g.bias = buf + 40;
    if (which == 4) g.M = 1;
    fp->gemm(fp, &g);
    fp->dropout_fwd(fp, (ll_act *)(buf + 64), (uint8_t *)(buf + 80), 16, which == 5 ? 0.25f : 0.5f, &r, 0);
    const ll_act *xs[2] = {(const ll_act *)buf, (const ll_act *)(buf + (which == 9 ? 20 : 16))};
    fp->weighted_sum(fp, (ll_act *)(buf + 96), xs, buf + 112, 2, 8);
    ll_latent_prior pr = {.L = 2, .rows = 1, .n_active = 1, .prior_p = which == 10 ? 0.25 : 0.5};
    pr.active[0] = 1;
    fp->latent_depth(fp, (double *)(buf + 120), buf + 116, &pr);
    if (which == 11) fp->memset0(fp, buf + 124, 4);
    return ll_backend_fingerprint_take(fp);
}

static void test_ops(void) {
    ll_backend *cpu = ll_backend_cpu(), *fp = ll_backend_fingerprint(cpu);
    CHECK(fp != NULL);
    float *buf = cpu->alloc(cpu, 256 * sizeof(float));
    ll_backend_fingerprint_shadow(fp, 1);
    const uint64_t h0 = ops_hash(fp, buf, 0);
    CHECK_MSG(ops_hash(fp, buf, 0) == h0, "the same ops hash differently");
    for (int which = 1; which <= 11; which++)
        CHECK_MSG(ops_hash(fp, buf, which) != h0, "argument change %d is not in the hash", which);
    CHECK(ops_hash(fp, buf, 7) != ops_hash(fp, buf, 8)); /* the step's address, not its value */
    /* shadow: not run (the memset leaves the ones); alloc runs (the memory is usable) */
    for (int i = 0; i < 4; i++) buf[200 + i] = 1;
    fp->memset0(fp, buf + 200, 4 * sizeof(float));
    CHECK(buf[200] == 1 && buf[203] == 1);
    float *p = fp->alloc(fp, 64);
    CHECK(p != NULL);
    if (p) p[15] = 2;
    fp->free(fp, p);
    ll_backend_fingerprint_shadow(fp, 0); /* forward: run */
    fp->memset0(fp, buf + 200, 4 * sizeof(float));
    CHECK(buf[200] == 0 && buf[203] == 0);
    cpu->free(cpu, buf);
    ll_backend_counting_free(fp);
}

static void make_batch(ll_batch *b, int B, int S, int T, uint64_t seed) {
    ll_philox r;
    ll_philox_init(&r, seed, 99, 0);
    memset(b, 0, sizeof *b);
    b->B = B, b->S = S, b->T = T;
    b->src = calloc((size_t)B * S, sizeof(int32_t));
    b->tgt_in = calloc((size_t)B * T, sizeof(int32_t));
    b->tgt_out = calloc((size_t)B * T, sizeof(int32_t));
    b->src_len = calloc(B, sizeof(int));
    b->tgt_len = calloc(B, sizeof(int));
    for (int i = 0; i < B; i++) {
        const int sl = 2 + (int)ll_philox_below(&r, 2 * (uint64_t)i, S - 1);
        const int tl = 2 + (int)ll_philox_below(&r, 2 * (uint64_t)i + 1, T - 1);
        b->src_len[i] = sl, b->tgt_len[i] = tl;
        for (int t = 0; t < S; t++) b->src[i * S + t] = t < sl - 1 ? 5 + (t + i) % 20 : t == sl - 1 ? LL_EOS : LL_PAD;
        for (int t = 0; t < T; t++) b->tgt_out[i * T + t] = t < tl - 1 ? 6 + (t * i) % 20 : t == tl - 1 ? LL_EOS : LL_PAD;
        for (int t = 0; t < T; t++) b->tgt_in[i * T + t] = t == 0 ? LL_EOS : t < tl ? b->tgt_out[i * T + t - 1] : LL_PAD;
        b->n_src_tokens += sl, b->n_tgt_tokens += tl;
    }
}

/* a shadow run of a training step of m (as the trainer: gradients zeroed first) */
static uint64_t step_hash(ll_model *m, ll_backend *fp, const ll_batch *b, uint64_t step, int zero) {
    ll_backend *be = m->be;
    if (zero) ll_model_zero_grads(m);
    m->be = fp;
    ll_model_step(m, b, 3, step, 1, NULL);
    m->be = be;
    return ll_backend_fingerprint_take(fp);
}

static void test_steps(void) {
    const char *toy[] = {"model.d_model=16", "model.ffn_dim=32", "model.heads=2", "model.enc_layers=2",
                         "model.dec_layers=2"};
    ll_config cfg;
    if (tu_toy_config(&cfg, "deep_decoder_15_15", toy, 5)) return; /* DDR, ALD, CAD */
    ll_model *m = tu_toy_model(&cfg, 40);
    const ll_hparams hp = m->hp;
    CHECK(cfg.ddr_alpha > 0 && cfg.ald_weight > 0 && hp.dropout > 0);
    ll_backend *fp = ll_backend_fingerprint(m->be);
    ll_backend_fingerprint_shadow(fp, 1);
    ll_batch b1, b2, b3;
    make_batch(&b1, 4, 7, 6, 1);
    make_batch(&b2, 4, 7, 6, 2); /* the same shape, other tokens, lengths and token count */
    make_batch(&b3, 4, 7, 5, 3); /* another shape */
    CHECK(b1.n_tgt_tokens != b2.n_tgt_tokens);
    const uint64_t h1 = step_hash(m, fp, &b1, 10, 1);
    CHECK_MSG(step_hash(m, fp, &b2, 11, 1) == h1, "two steps of the same shape and structure hash differently");
    CHECK_MSG(step_hash(m, fp, &b3, 12, 1) != h1, "another batch shape hashes the same");
    CHECK_MSG(step_hash(m, fp, &b2, 13, 0) != h1, "a step that adds to the update's gradients hashes the same");
    m->dec_ctl[1].skip_cross = 1; /* cross-attention drop */
    CHECK_MSG(step_hash(m, fp, &b2, 14, 1) != h1, "another layer structure hashes the same");
    m->dec_ctl[1].skip_cross = 0;
    CHECK(step_hash(m, fp, &b1, 15, 1) == h1);
    ll_backend_counting_free(fp);
    tu_toy_model_free(m);
    ll_batch_free(&b1), ll_batch_free(&b2), ll_batch_free(&b3);
    ll_config_free(&cfg);
}

int main(void) {
    test_ops();
    test_steps();
    return tu_finish("test_fingerprint");
}
