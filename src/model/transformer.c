/* The whole encoder-decoder: embeddings, stacks (plain or DLCL), final norms,
 * output projection and the losses, forward and backward.
 *
 * One training step runs these passes (each a ll_stack_run):
 *   enc[0] -> dec[0]            the clean pass: label-smoothed CE
 *            dec[1]             DDR: the decoder again on enc[0]'s output with
 *                               other dropout/drop-net draws; + alpha * sym. KL
 *   enc[1] -> dec[2], enc[2] -> dec[3]
 *                               ALD: sources with gamma / 1-gamma of the tokens
 *                               replaced by UNK; contrastive loss on pooled states
 * Backward replays exactly what ran (skipped layers, dropped branches). */
#include <math.h>
#include <string.h>

#include "model_internal.h"

/* ---- stacks ---- */

static real *embed(ll_model *m, ll_stack_run *r) {
    ll_backend *be = m->be;
    const ll_pass *p = &r->p;
    const int C = m->hp.C, N = p->B * p->T;
    const size_t emb = r->stack ? m->dec_emb : m->enc_emb;
    real *x = ll_buf(m, (size_t)N * C);
    /* positions start at pad + 1 = 2, as in fairseq */
    be->embed_fwd(be, x, r->tok, m->params + emb, m->pos_table, LL_PAD + 1, sqrt((real)C), N, p->T, C, LL_PAD);
    r->emb_mask = NULL;
    if (p->train && m->hp.dropout > 0) {
        ll_philox rng;
        ll_site_rng(&rng, p, 0, SITE_EMB);
        r->emb_mask = ll_arena_alloc(&m->arena, (size_t)N * C);
        be->dropout_fwd(be, x, r->emb_mask, (size_t)N * C, m->hp.dropout, &rng, (uint64_t)p->row0 * p->T * C);
    }
    return x;
}

void ll_stack_run_init(ll_model *m, ll_stack_run *r, int stack, const ll_pass *p, const int32_t *tok) {
    memset(r, 0, sizeof *r);
    r->p = *p;
    r->p.stack = stack;
    r->stack = stack;
    r->tok = tok;
    r->L = stack ? m->hp.Ld : m->hp.Le;
    r->per_layer = stack ? 3 : 2;
    r->blocks = ll_arena_alloc(&m->arena, sizeof(ll_block) * (r->L * r->per_layer + 1));
    const ll_layer_offsets *layers = stack ? m->dec : m->enc;
    ll_layer_ctl *ctl = stack ? (p->ctl ? p->ctl : m->dec_ctl) : m->enc_ctl;
    for (int l = 0, i = 0; l < r->L; l++) {
        const ll_layer_offsets *L = &layers[l];
        size_t alpha = m->hp.rezero ? m->rezero_alpha[stack][l] : 0;
        r->blocks[i++] =
            (ll_block){.kind = SUB_SELF, .ln_w = L->ln1_w, .ln_b = L->ln1_b, .L = L, .ctl = &ctl[l], .alpha = alpha};
        if (stack)
            r->blocks[i++] = (ll_block){
                .kind = SUB_CROSS, .ln_w = L->ln2_w, .ln_b = L->ln2_b, .L = L, .ctl = &ctl[l], .alpha = alpha};
        r->blocks[i++] =
            (ll_block){.kind = SUB_FFN, .ln_w = L->ln3_w, .ln_b = L->ln3_b, .L = L, .ctl = &ctl[l], .alpha = alpha};
    }
}

real *ll_layer_fwd(ll_model *m, ll_stack_run *r, int l, real *x) {
    for (int j = 0; j < r->per_layer; j++) {
        ll_block *k = &r->blocks[l * r->per_layer + j];
        k->x = x;
        ll_block_fwd(m, k, &r->p, l);
        x = k->y;
    }
    return x;
}

void ll_layer_bwd(ll_model *m, ll_stack_run *r, int l, real *dy, real *dx) {
    const size_t n = (size_t)r->p.B * r->p.T * m->hp.C;
    for (int j = r->per_layer - 1; j >= 0; j--) {
        real *d = j == 0 ? dx : ll_buf(m, n);
        ll_block_bwd(m, &r->blocks[l * r->per_layer + j], &r->p, dy, d, 1);
        dy = d;
    }
}

static int has_final_ln(const ll_model *m) { return !m->hp.post_norm && !m->hp.rezero; }

real *ll_stack_run_fwd(ll_model *m, ll_stack_run *r) {
    const int C = m->hp.C, N = r->p.B * r->p.T;
    r->x0 = embed(m, r);
    if (ll_dlcl_on(m, r->stack)) {
        r->top = ll_dlcl_stack_fwd(m, r);
    } else {
        real *x = r->x0;
        for (int l = 0; l < r->L; l++) x = ll_layer_fwd(m, r, l, x);
        r->top = x;
    }
    r->out = r->top;
    if (has_final_ln(m)) {
        size_t w = r->stack ? m->dec_ln_w : m->enc_ln_w, b = r->stack ? m->dec_ln_b : m->enc_ln_b;
        r->out = ll_buf(m, (size_t)N * C);
        r->mean = ll_buf(m, N);
        r->rstd = ll_buf(m, N);
        m->be->layernorm_fwd(m->be, r->out, r->mean, r->rstd, r->top, m->params + w, m->params + b, N, C);
    }
    return r->out;
}

void ll_stack_run_bwd(ll_model *m, ll_stack_run *r, real *dout) {
    ll_backend *be = m->be;
    const int C = m->hp.C, N = r->p.B * r->p.T;
    const size_t n = (size_t)N * C;
    real *dtop = dout;
    if (has_final_ln(m)) {
        size_t w = r->stack ? m->dec_ln_w : m->enc_ln_w, b = r->stack ? m->dec_ln_b : m->enc_ln_b;
        dtop = ll_zeros(m, n);
        be->layernorm_bwd(be, dtop, m->grads + w, m->grads + b, dout, r->top, m->params + w, r->mean, r->rstd, N, C);
    }
    real *dx0;
    if (ll_dlcl_on(m, r->stack)) {
        dx0 = ll_zeros(m, n);
        ll_dlcl_stack_bwd(m, r, dtop, dx0);
    } else {
        dx0 = ll_buf(m, n);
        real *dy = dtop;
        for (int l = r->L - 1; l >= 0; l--) {
            real *dx = l == 0 ? dx0 : ll_buf(m, n);
            ll_layer_bwd(m, r, l, dy, dx); /* overwrites dx */
            dy = dx;
        }
        if (r->L == 0) be->copy(be, dx0, dtop, n * sizeof(real));
    }
    if (r->emb_mask) be->dropout_bwd(be, dx0, r->emb_mask, n, m->hp.dropout);
    be->embed_bwd(be, m->grads + (r->stack ? m->dec_emb : m->enc_emb), dx0, r->tok, sqrt((real)C), N, C, LL_PAD);
}

/* ---- passes ---- */

static ll_pass enc_pass(const ll_batch *b, const int *src_len, uint64_t seed, uint64_t step, int train) {
    return (ll_pass){.B = b->B, .T = b->S, .S = b->S, .self_len = src_len, .src_len = src_len, .train = train,
                     .seed = seed, .rng_step = step, .stack = 0, .row0 = b->row0};
}

static ll_pass dec_pass(const ll_batch *b, uint64_t seed, uint64_t step, int train, const real *enc_out) {
    return (ll_pass){.B = b->B, .T = b->T, .S = b->S, .self_len = b->tgt_len, .src_len = b->src_len,
                     .enc_out = enc_out, .train = train, .seed = seed, .rng_step = step, .stack = 1,
                     .row0 = b->row0};
}

static real *project(ll_model *m, const real *h, int N) {
    real *logits = ll_buf(m, (size_t)N * m->hp.V);
    m->be->gemm(m->be, 0, 1, N, m->hp.V, m->hp.C, 1, h, m->hp.C, m->params + m->out_proj, m->hp.C, 0, logits,
                m->hp.V);
    return logits;
}

/* d h = dlogits E; dE += dlogits^T h.  Returns d h (fresh buffer). */
static real *project_bwd(ll_model *m, const real *dlogits, const real *h, int N) {
    ll_backend *be = m->be;
    const int C = m->hp.C, V = m->hp.V;
    real *dh = ll_buf(m, (size_t)N * C);
    be->gemm(be, 0, 0, N, C, V, 1, dlogits, V, m->params + m->out_proj, C, 0, dh, C);
    be->gemm(be, 1, 0, V, C, N, 1, dlogits, V, h, C, 1, m->grads + m->out_proj, C);
    return dh;
}

/* Distinct seeds for the extra passes, so their dropout masks are independent. */
#define SEED_DDR 0x9E3779B97F4A7C15ULL
#define SEED_ALD_POS 0xD1B54A32D192ED03ULL
#define SEED_ALD_NEG 0x8CB92BA72F3D8DD7ULL

static void zero_dgates(ll_model *m) {
    for (int l = 0; l < m->hp.Le; l++) m->enc_ctl[l].dgate = 0;
    for (int l = 0; l < m->hp.Ld; l++) m->dec_ctl[l].dgate = 0;
    if (m->obj.ddr_dec_ctl)
        for (int l = 0; l < m->hp.Ld; l++) m->obj.ddr_dec_ctl[l].dgate = 0;
}

/* Forward (and backward when do_backward) of one batch. */
static void run(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t step, int train, int do_backward,
                ll_loss_stats *out) {
    ll_backend *be = m->be;
    ll_fwd_state *st = m->st;
    const int Nt = b->B * b->T, V = m->hp.V, C = m->hp.C;
    const int ddr = train && m->obj.ddr_alpha > 0, ald = train && m->obj.ald_weight > 0;
    memset(out, 0, sizeof *out);
    ll_arena_reset(&m->arena);

    /* clean pass */
    ll_pass pe = enc_pass(b, b->src_len, seed, step, train);
    ll_stack_run_init(m, &st->enc[0], 0, &pe, b->src);
    real *enc_out = ll_stack_run_fwd(m, &st->enc[0]);
    ll_pass pd = dec_pass(b, seed, step, train, enc_out);
    ll_stack_run_init(m, &st->dec[0], 1, &pd, b->tgt_in);
    real *h0 = ll_stack_run_fwd(m, &st->dec[0]);
    real *lg0 = st->logits[0] = project(m, h0, Nt);
    real *lp0 = NULL, *lp1 = NULL, *h1 = NULL, *lg1 = NULL;
    if (ddr) {
        ll_pass pd1 = dec_pass(b, seed ^ SEED_DDR, step, train, enc_out);
        pd1.ctl = m->obj.ddr_dec_ctl;
        ll_stack_run_init(m, &st->dec[1], 1, &pd1, b->tgt_in);
        h1 = ll_stack_run_fwd(m, &st->dec[1]);
        lg1 = st->logits[1] = project(m, h1, Nt);
        lp0 = ll_buf(m, (size_t)Nt * V);
        lp1 = ll_buf(m, (size_t)Nt * V);
        be->copy(be, lp0, lg0, sizeof(real) * Nt * V);
        be->copy(be, lp1, lg1, sizeof(real) * Nt * V);
        be->log_softmax(be, lp0, Nt, V);
        be->log_softmax(be, lp1, Nt, V);
    }
    double loss = 0, nll = 0;
    be->xent_fwd_bwd(be, lg0, b->tgt_out, Nt, V, m->hp.label_smoothing, LL_PAD, 1, &loss, &nll);
    out->loss = loss;
    out->nll = nll;
    out->ntokens = b->n_tgt_tokens;
    if (ddr) { /* R-Drop: CE on both copies + alpha * symmetric KL */
        double n1;
        be->xent_fwd_bwd(be, lg1, b->tgt_out, Nt, V, m->hp.label_smoothing, LL_PAD, 1, &out->ce2, &n1);
        out->ddr = be->sym_kl(be, lp0, lp1, lg0, lg1, b->tgt_out, Nt, V, LL_PAD, m->obj.ddr_alpha);
    }
    real *dh_ald[3] = {NULL, NULL, NULL};
    if (ald) {
        /* corrupted sources: light (gamma) and heavy (1 - gamma) UNK replacement */
        int32_t *xs[2];
        ll_unk_corrupt(m, b, seed, step, &xs[0], &xs[1]);
        real *hs[3] = {h0, NULL, NULL};
        const uint64_t seeds[2] = {seed ^ SEED_ALD_POS, seed ^ SEED_ALD_NEG};
        for (int i = 0; i < 2; i++) {
            ll_pass e = enc_pass(b, b->src_len, seeds[i], step, train);
            ll_stack_run_init(m, &st->enc[1 + i], 0, &e, xs[i]);
            real *eo = ll_stack_run_fwd(m, &st->enc[1 + i]);
            ll_pass d = dec_pass(b, seeds[i], step, train, eo);
            ll_stack_run_init(m, &st->dec[2 + i], 1, &d, b->tgt_in);
            hs[1 + i] = ll_stack_run_fwd(m, &st->dec[2 + i]);
        }
        out->ald = ll_ald_loss(m, b, hs, do_backward ? dh_ald : NULL);
    }
    if (!do_backward) return;

    zero_dgates(m);
    real *d_enc = ll_zeros(m, (size_t)b->B * b->S * C);
    real *dh = project_bwd(m, lg0, h0, Nt);
    if (dh_ald[0]) be->acc(be, dh, dh_ald[0], (size_t)Nt * C);
    st->dec[0].p.d_enc_out = d_enc;
    ll_stack_run_bwd(m, &st->dec[0], dh);
    if (ddr) {
        real *dh1 = project_bwd(m, lg1, h1, Nt);
        st->dec[1].p.d_enc_out = d_enc;
        ll_stack_run_bwd(m, &st->dec[1], dh1);
    }
    ll_stack_run_bwd(m, &st->enc[0], d_enc);
    for (int i = 0; ald && i < 2; i++) {
        real *de = ll_zeros(m, (size_t)b->B * b->S * C);
        st->dec[2 + i].p.d_enc_out = de;
        ll_stack_run_bwd(m, &st->dec[2 + i], dh_ald[1 + i]);
        ll_stack_run_bwd(m, &st->enc[1 + i], de);
    }
}

void ll_model_step(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t rng_step, int train,
                   ll_loss_stats *out) {
    run(m, b, seed, rng_step, train, train, out);
}

double ll_model_loss(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t rng_step, int train) {
    ll_loss_stats s;
    run(m, b, seed, rng_step, train, 0, &s);
    return s.loss + s.ce2 + s.ddr + s.ald;
}

real *ll_model_logprobs(ll_model *m, const ll_batch *b) {
    ll_fwd_state *st = m->st;
    ll_arena_reset(&m->arena);
    ll_pass pe = enc_pass(b, b->src_len, 0, 0, 0);
    ll_stack_run_init(m, &st->enc[0], 0, &pe, b->src);
    real *enc_out = ll_stack_run_fwd(m, &st->enc[0]);
    ll_pass pd = dec_pass(b, 0, 0, 0, enc_out);
    ll_stack_run_init(m, &st->dec[0], 1, &pd, b->tgt_in);
    real *h = ll_stack_run_fwd(m, &st->dec[0]);
    real *logits = project(m, h, b->B * b->T);
    m->be->log_softmax(m->be, logits, b->B * b->T, m->hp.V);
    return logits;
}
