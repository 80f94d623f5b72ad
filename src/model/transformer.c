/* The whole encoder-decoder: embeddings, stacks, final norms, output
 * projection and the label-smoothed loss, forward and backward. */
#include <math.h>
#include <string.h>

#include "model_internal.h"

static real *embed(ll_model *m, const ll_pass *p, const int32_t *tok, size_t emb, uint8_t **mask) {
    ll_backend *be = m->be;
    const int C = m->hp.C, N = p->B * p->T;
    real *x = ll_buf(m, (size_t)N * C);
    /* positions start at pad + 1 = 2, as in fairseq */
    be->embed_fwd(be, x, tok, m->params + emb, m->pos_table, LL_PAD + 1, sqrt((real)C), N, p->T, C, LL_PAD);
    *mask = NULL;
    if (p->train && m->hp.dropout > 0) {
        ll_philox r;
        ll_site_rng(&r, p, 0, SITE_EMB);
        *mask = ll_arena_alloc(&m->arena, (size_t)N * C);
        be->dropout_fwd(be, x, *mask, (size_t)N * C, m->hp.dropout, &r, 0);
    }
    return x;
}

/* Run a stack of blocks; returns the top output (before any final LN). */
static real *stack_fwd(ll_model *m, ll_block *blocks, int n_blocks, int per_layer, const ll_pass *p, real *x) {
    for (int i = 0; i < n_blocks; i++) {
        ll_block *k = &blocks[i];
        k->x = x;
        ll_block_fwd(m, k, p, i / per_layer);
        x = k->y;
    }
    return x;
}

static void setup_blocks(ll_block *blocks, const ll_layer_offsets *layers, ll_layer_ctl *ctl, int n_layers,
                         int decoder) {
    int i = 0;
    for (int l = 0; l < n_layers; l++) {
        const ll_layer_offsets *L = &layers[l];
        blocks[i++] = (ll_block){.kind = SUB_SELF, .ln_w = L->ln1_w, .ln_b = L->ln1_b, .L = L, .ctl = &ctl[l]};
        if (decoder)
            blocks[i++] = (ll_block){.kind = SUB_CROSS, .ln_w = L->ln2_w, .ln_b = L->ln2_b, .L = L, .ctl = &ctl[l]};
        blocks[i++] = (ll_block){.kind = SUB_FFN, .ln_w = L->ln3_w, .ln_b = L->ln3_b, .L = L, .ctl = &ctl[l]};
    }
}

static void make_passes(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t rng_step, int train, ll_pass *enc,
                        ll_pass *dec) {
    ll_fwd_state *st = m->st;
    *enc = (ll_pass){.B = b->B, .T = b->S, .S = b->S, .self_len = st->src_len, .src_len = st->src_len,
                     .train = train, .seed = seed, .rng_step = rng_step, .stack = 0};
    *dec = (ll_pass){.B = b->B, .T = b->T, .S = b->S, .self_len = st->tgt_len, .src_len = st->src_len,
                     .train = train, .seed = seed, .rng_step = rng_step, .stack = 1};
}

/* Forward through the logits; returns them ([B*T, V]). */
static real *forward(ll_model *m, const ll_batch *b, ll_pass *enc, ll_pass *dec) {
    ll_backend *be = m->be;
    ll_fwd_state *st = m->st;
    const ll_hparams *hp = &m->hp;
    const int C = hp->C;
    const int Ns = b->B * b->S, Nt = b->B * b->T;

    st->enc_x0 = embed(m, enc, b->src, m->enc_emb, &st->enc_emb_mask);
    st->enc_top = stack_fwd(m, st->enc_blocks, st->n_enc_blocks, 2, enc, st->enc_x0);
    st->enc_out = st->enc_top;
    if (!hp->post_norm) {
        st->enc_out = ll_buf(m, (size_t)Ns * C);
        st->enc_mean = ll_buf(m, Ns);
        st->enc_rstd = ll_buf(m, Ns);
        be->layernorm_fwd(be, st->enc_out, st->enc_mean, st->enc_rstd, st->enc_top, m->params + m->enc_ln_w,
                          m->params + m->enc_ln_b, Ns, C);
    }
    dec->enc_out = st->enc_out;
    st->dec_x0 = embed(m, dec, b->tgt_in, m->dec_emb, &st->dec_emb_mask);
    st->dec_top = stack_fwd(m, st->dec_blocks, st->n_dec_blocks, 3, dec, st->dec_x0);
    st->dec_out = st->dec_top;
    if (!hp->post_norm) {
        st->dec_out = ll_buf(m, (size_t)Nt * C);
        st->dec_mean = ll_buf(m, Nt);
        st->dec_rstd = ll_buf(m, Nt);
        be->layernorm_fwd(be, st->dec_out, st->dec_mean, st->dec_rstd, st->dec_top, m->params + m->dec_ln_w,
                          m->params + m->dec_ln_b, Nt, C);
    }
    st->logits = ll_buf(m, (size_t)Nt * hp->V);
    be->gemm(be, 0, 1, Nt, hp->V, C, 1, st->dec_out, C, m->params + m->out_proj, C, 0, st->logits, hp->V);
    return st->logits;
}

/* Backward of one stack from d(top) to the embedding table; returns nothing. */
static void stack_and_embed_bwd(ll_model *m, ll_block *blocks, int n_blocks, const ll_pass *p, real *dtop,
                                const int32_t *tok, size_t emb, const uint8_t *emb_mask) {
    ll_backend *be = m->be;
    const int C = m->hp.C, N = p->B * p->T;
    const size_t n = (size_t)N * C;
    real *dy = dtop;
    for (int i = n_blocks - 1; i >= 0; i--) {
        real *dx = ll_zeros(m, n);
        ll_block_bwd(m, &blocks[i], p, dy, dx);
        dy = dx;
    }
    if (emb_mask) be->dropout_bwd(be, dy, emb_mask, n, m->hp.dropout);
    be->embed_bwd(be, m->grads + emb, dy, tok, sqrt((real)C), N, C, LL_PAD);
}

static void prepare(ll_model *m, const ll_batch *b) {
    ll_fwd_state *st = m->st;
    ll_arena_reset(&m->arena);
    st->B = b->B;
    st->S = b->S;
    st->T = b->T;
    st->n_enc_blocks = 2 * m->hp.Le;
    st->n_dec_blocks = 3 * m->hp.Ld;
    st->enc_blocks = ll_arena_alloc(&m->arena, sizeof(ll_block) * (st->n_enc_blocks + 1));
    st->dec_blocks = ll_arena_alloc(&m->arena, sizeof(ll_block) * (st->n_dec_blocks + 1));
    setup_blocks(st->enc_blocks, m->enc, m->enc_ctl, m->hp.Le, 0);
    setup_blocks(st->dec_blocks, m->dec, m->dec_ctl, m->hp.Ld, 1);
    st->src_len = b->src_len;
    st->tgt_len = b->tgt_len;
}

static void backward(ll_model *m, const ll_batch *b, ll_pass *enc, ll_pass *dec) {
    ll_backend *be = m->be;
    ll_fwd_state *st = m->st;
    const ll_hparams *hp = &m->hp;
    const int C = hp->C, Ns = b->B * b->S, Nt = b->B * b->T;
    /* logits = dec_out E^T */
    real *d_dec_out = ll_buf(m, (size_t)Nt * C);
    be->gemm(be, 0, 0, Nt, C, hp->V, 1, st->logits, hp->V, m->params + m->out_proj, C, 0, d_dec_out, C);
    be->gemm(be, 1, 0, hp->V, C, Nt, 1, st->logits, hp->V, st->dec_out, C, 1, m->grads + m->out_proj, C);
    real *d_dec_top = d_dec_out;
    if (!hp->post_norm) {
        d_dec_top = ll_zeros(m, (size_t)Nt * C);
        be->layernorm_bwd(be, d_dec_top, m->grads + m->dec_ln_w, m->grads + m->dec_ln_b, d_dec_out, st->dec_top,
                          m->params + m->dec_ln_w, st->dec_mean, st->dec_rstd, Nt, C);
    }
    real *d_enc_out = ll_zeros(m, (size_t)Ns * C);
    dec->d_enc_out = d_enc_out;
    stack_and_embed_bwd(m, st->dec_blocks, st->n_dec_blocks, dec, d_dec_top, b->tgt_in, m->dec_emb,
                        st->dec_emb_mask);
    real *d_enc_top = d_enc_out;
    if (!hp->post_norm) {
        d_enc_top = ll_zeros(m, (size_t)Ns * C);
        be->layernorm_bwd(be, d_enc_top, m->grads + m->enc_ln_w, m->grads + m->enc_ln_b, d_enc_out, st->enc_top,
                          m->params + m->enc_ln_w, st->enc_mean, st->enc_rstd, Ns, C);
    }
    stack_and_embed_bwd(m, st->enc_blocks, st->n_enc_blocks, enc, d_enc_top, b->src, m->enc_emb,
                        st->enc_emb_mask);
}

/* Forward (and backward when train) of one batch.  Returns summed loss/nll. */
static void run(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t rng_step, int train, int do_backward,
                ll_loss_stats *out) {
    ll_pass enc, dec;
    prepare(m, b);
    make_passes(m, b, seed, rng_step, train, &enc, &dec);
    real *logits = forward(m, b, &enc, &dec);
    double loss = 0, nll = 0;
    m->be->xent_fwd_bwd(m->be, logits, b->tgt_out, b->B * b->T, m->hp.V, m->hp.label_smoothing, LL_PAD, 1, &loss,
                        &nll);
    if (do_backward) {
        for (int l = 0; l < m->hp.Le; l++) m->enc_ctl[l].dgate = 0;
        for (int l = 0; l < m->hp.Ld; l++) m->dec_ctl[l].dgate = 0;
        backward(m, b, &enc, &dec);
    }
    out->loss = loss;
    out->nll = nll;
    out->ntokens = b->n_tgt_tokens;
}

void ll_model_step(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t rng_step, int train,
                   ll_loss_stats *out) {
    run(m, b, seed, rng_step, train, train, out);
}

double ll_model_loss(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t rng_step, int train) {
    ll_loss_stats s;
    run(m, b, seed, rng_step, train, 0, &s);
    return s.loss;
}

real *ll_model_logprobs(ll_model *m, const ll_batch *b) {
    ll_pass enc, dec;
    prepare(m, b);
    make_passes(m, b, 0, 0, 0, &enc, &dec);
    real *logits = forward(m, b, &enc, &dec);
    m->be->log_softmax(m->be, logits, b->B * b->T, m->hp.V);
    return logits;
}
