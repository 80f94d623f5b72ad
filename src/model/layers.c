/* Residual blocks (self-attention, cross-attention, FFN), pre- or post-norm,
 * forward and backward.  Pre-norm: y = x + drop(Sub(LN(x))).
 * Post-norm: y = LN(x + drop(Sub(x))). */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

ll_act *ll_buf(ll_model *m, size_t n) { return ll_arena_alloc_act(&m->arena, ACT_BYTES(m, n)); }
real *ll_fbuf(ll_model *m, size_t n) { return ll_arena_alloc(&m->arena, n * sizeof(real)); }

ll_act *ll_zeros(ll_model *m, size_t n) {
    ll_act *p = ll_buf(m, n);
    m->be->memset0(m->be, p, ACT_BYTES(m, n));
    return p;
}

void ll_site_rng(ll_philox *r, const ll_pass *p, int layer, int site) {
    uint32_t id = ((uint32_t)(p->stack * 4096 + layer) * 8 + site);
    ll_philox_init(r, p->seed, LL_RNG_DROPOUT | (id << 4), (uint32_t)p->rng_step);
    if (p->rng_step_at) { /* the same stream, its step read when drawn */
        r->ctr_hi[1] = 0;
        r->ctr_hi1_at = p->rng_step_at;
    }
}

ll_gemm_desc ll_gemm_xwt(const ll_model *m, ll_act *y, const ll_act *x, int N, int in, int out, size_t w) {
    const ll_dtype t = m->be->act;
    return (ll_gemm_desc){.trans_b = 1, .M = N, .N = out, .K = in, .alpha = 1, .A = x, .a_type = t, .lda = in,
                          .B = ACT(m, m->wact, w), .b_type = t, .ldb = in, .C = y, .c_type = t, .ldc = out};
}

/* relu_mask (NULL: none): the ReLU's mask written for the backward's DRELU (relu_mask_bytes).
 * side: may run beside the ops after it until be->join (ll_gemm_desc.side) */
static void linear_fwd(ll_model *m, ll_act *y, const ll_act *x, int N, int in, int out, size_t w, size_t b, int relu,
                       void *relu_mask, int side) {
    ll_gemm_desc g = ll_gemm_xwt(m, y, x, N, in, out, w);
    g.side = side;
    if (b) {
        g.epi = relu ? (relu_mask ? LL_EPI_BIAS_RELU_AUX : LL_EPI_BIAS_RELU) : LL_EPI_BIAS;
        g.aux = relu ? relu_mask : NULL;
        /* the bias from the weight copy, in C's dtype: cuBLASLt fuses no other
         * (with bf16 the sum is fp32 + the exactly widened bf16 bias, one rounding) */
        g.bias = ACT(m, m->wact, b);
        g.bias_type = m->be->act;
    } else if (relu) {
        ll_die("linear layer: ReLU without a bias");
    }
    m->be->gemm(m->be, &g);
}

void ll_linear_fwd(ll_model *m, ll_act *y, const ll_act *x, int N, int in, int out, size_t w, size_t b, int relu) {
    linear_fwd(m, y, x, N, in, out, w, b, relu, NULL, 0);
}

/* relu_mask (NULL: none): dx is then also multiplied by the ReLU's gradient (DRELU; dx_beta 0),
 * from the mask or else from relu_y, the ReLU's output.  side (SIDE_*): the weight gradient (and
 * dx) may run beside the ops after it until be->join (the stack driver's, after a group of layers:
 * nothing in a layer's backward, nor in the next layers' of its group, writes dy or x after their
 * weight gradients, nor touches those gradients; transformer.c keeps the group's temporaries) */
enum { SIDE_DW = 1, SIDE_DX = 2 };
static void linear_bwd(ll_model *m, void *dx, ll_dtype dx_type, real dx_beta, const ll_act *dy, const ll_act *x,
                       int N, int in, int out, size_t w, size_t b, void *relu_mask, const ll_act *relu_y, int side) {
    ll_backend *be = m->be;
    const ll_dtype t = be->act;
    if (dx) { /* dx[N,in] = dy[N,out] W[out,in] */
        const ll_gemm_desc g = {.M = N, .N = in, .K = out, .alpha = 1, .beta = dx_beta, .A = dy, .a_type = t,
                                .lda = out, .B = ACT(m, m->wact, w), .b_type = t, .ldb = in, .C = dx,
                                .c_type = dx_type, .ldc = in, .epi = relu_mask ? LL_EPI_DRELU : LL_EPI_NONE,
                                .aux = relu_mask, .relu_y = relu_mask ? relu_y : NULL, .side = !!(side & SIDE_DX)};
        be->gemm(be, &g);
    }
    /* dW[out,in] += dy^T x in fp32; the bias gradient (column sums of dy) in the epilogue.  The
     * update's first contribution to a zeroed gradient (ll_model_zero_grads) is written, not added */
    const int fresh_w = ll_model_grad_take_fresh(m, w), fresh_b = b && ll_model_grad_take_fresh(m, b);
    const ll_gemm_desc g = {.trans_a = 1, .M = out, .N = in, .K = N, .alpha = 1, .beta = fresh_w ? 0 : 1, .A = dy,
                            .a_type = t, .lda = out, .B = x, .b_type = t, .ldb = in, .C = m->grads + w,
                            .c_type = LL_REAL_DTYPE, .ldc = in, .epi = b ? LL_EPI_BGRAD : LL_EPI_NONE,
                            .bgrad = b ? m->grads + b : NULL, .bgrad_set = fresh_b, .side = !!(side & SIDE_DW)};
    be->gemm(be, &g);
}

void ll_linear_bwd(ll_model *m, ll_act *dx, real dx_beta, const ll_act *dy, const ll_act *x, int N, int in, int out,
                   size_t w, size_t b) {
    linear_bwd(m, dx, m->be->act, dx_beta, dy, x, N, in, out, w, b, NULL, NULL, SIDE_DW);
}

/* inside a layer's backward: the weight gradient on the side (linear_bwd) */
static void layer_linear_bwd(ll_model *m, ll_act *dx, real dx_beta, const ll_act *dy, const ll_act *x, int N, int in,
                             int out, size_t w, size_t b) {
    linear_bwd(m, dx, m->be->act, dx_beta, dy, x, N, in, out, w, b, NULL, NULL, SIDE_DW);
}

static uint8_t *mask_buf(ll_model *m, size_t n) { return ll_arena_alloc(&m->arena, n); }

/* ---- sub-layers: s = Sub(in), in/s are [N, C] ---- */

/* A sub-layer's linear map (relu: then ReLU); in incremental decoding (and a
 * decode's int8 encoder pass) through the layer's packed weight when the
 * backend packed one. */
static void sub_linear(ll_model *m, const ll_pass *p, int layer, int slot, ll_act *y, const ll_act *x, int N, int in,
                       int out, size_t w, size_t b, int relu) {
    void *const *pks = p->inc ? p->inc->packed : p->packed;
    const void *pk = pks ? pks[(size_t)layer * LL_DEC_PACKED + slot] : NULL;
    if (!pk) {
        ll_linear_fwd(m, y, x, N, in, out, w, b, relu);
        return;
    }
    /* packed kernels exist for fp32 activations only (the CPU backend), where
     * the weight copy is the master: its bias is the bias of C's dtype */
    m->be->linear_packed(m->be, y, out, x, in, pk, b ? m->params + b : NULL, N);
    if (relu) m->be->relu_fwd(m->be, y, (size_t)N * out);
}

static void sub_fwd(ll_model *m, ll_block *k, const ll_pass *p, int layer, const ll_act *in, ll_act *s) {
    ll_backend *be = m->be;
    const ll_hparams *hp = &m->hp;
    const int C = hp->C, H = hp->H, Dh = C / H, N = p->B * p->T;
    const real ad = p->train ? hp->attn_dropout : 0;
    const ll_layer_offsets *L = k->L;
    ll_philox r;
    switch (k->kind) {
    case SUB_SELF:
        k->qkv = ll_buf(m, (size_t)N * 3 * C);
        sub_linear(m, p, layer, PK_QKV, k->qkv, in, N, C, 3 * C, L->qkv_w, L->qkv_b, 0);
        k->ctx = ll_buf(m, (size_t)N * C);
        if (p->inc) { /* append this position's keys/values, attend over the cache (no backward: no lse) */
            const ll_inc *c = p->inc;
            ll_act *cache = c->self_kv[layer];
            const size_t row = (size_t)c->max_T * 2 * C * c->row_mul;
            be->copy_rows(be, cache, row, ACT(m, k->qkv, C), 3 * C, N, 2 * C, c->t, 2 * C); /* at position t */
            be->attention_cached(be, k->ctx, k->qkv, 3 * C, cache, 2 * C, row, c->anc, c->max_T, 1, c->t, N, H, Dh);
        } else {
            k->lse = ll_fbuf(m, (size_t)p->B * H * p->T);
            ll_site_rng(&k->attn_rng, p, layer, SITE_SELF_PROBS);
            be->attention_fwd(be, k->ctx, k->lse, k->qkv, 3 * C, ACT(m, k->qkv, C), ACT(m, k->qkv, 2 * C), 3 * C,
                              p->self_len, p->B, p->T, p->T, H, Dh, p->stack == 1, ad, &k->attn_rng,
                              (uint64_t)p->row0 * H * p->T * p->T);
        }
        sub_linear(m, p, layer, PK_O, s, k->ctx, N, C, C, L->o_w, L->o_b, 0);
        break;
    case SUB_CROSS: {
        k->q = ll_buf(m, (size_t)N * C);
        sub_linear(m, p, layer, PK_CQ, k->q, in, N, C, C, L->cq_w, L->cq_b, 0);
        k->ctx = ll_buf(m, (size_t)N * C);
        if (p->inc) { /* a sentence's beam rows are its queries, so its keys/values are read once */
            const ll_inc *c = p->inc;
            be->attention_fwd(be, k->ctx, NULL, k->q, C, c->cross_kv[layer], ACT(m, c->cross_kv[layer], C), 2 * C,
                              c->sent_src_len, c->sents, c->beam, p->S, H, Dh, 0, 0, NULL, 0);
            if (c->align_acc && layer == c->align_layer)
                be->attn_probs(be, c->align_acc, c->align_overwrite, c->align_w, k->q, C, c->cross_kv[layer], 2 * C,
                               c->sent_src_len, c->sents, c->beam, p->S, H, Dh);
            else if (c->align && layer == c->align_layer)
                be->attn_align(be, c->align, k->q, C, c->cross_kv[layer], 2 * C, c->sent_src_len, c->sents, c->beam,
                               p->S, H, Dh);
        } else {
            const int Ns = p->B * p->S;
            if (k->kv_ready) { /* queued beside the self-attention block (ll_layer_fwd) */
                k->kv_ready = 0;
                be->join(be);
            } else {
                k->kv = ll_buf(m, (size_t)Ns * 2 * C);
                ll_linear_fwd(m, k->kv, p->enc_out, Ns, C, 2 * C, L->ckv_w, L->ckv_b, 0);
            }
            k->lse = ll_fbuf(m, (size_t)p->B * H * p->T);
            ll_site_rng(&k->attn_rng, p, layer, SITE_CROSS_PROBS);
            be->attention_fwd(be, k->ctx, k->lse, k->q, C, k->kv, ACT(m, k->kv, C), 2 * C, p->src_len, p->B, p->T,
                              p->S, H, Dh, 0, ad, &k->attn_rng, (uint64_t)p->row0 * H * p->T * p->S);
        }
        sub_linear(m, p, layer, PK_CO, s, k->ctx, N, C, C, L->co_w, L->co_b, 0);
        break;
    }
    case SUB_FFN: {
        const int F = hp->F;
        k->h = ll_buf(m, (size_t)N * F);
        /* training on CUDA: the ReLU's mask for the backward's DRELU epilogue (no relu_bwd pass) */
        const size_t mb = p->train && be->relu_mask_bytes ? be->relu_mask_bytes(be, N, F) : 0;
        k->relu_mask = mb ? mask_buf(m, mb) : NULL;
        if (k->relu_mask)
            linear_fwd(m, k->h, in, N, C, F, L->fc1_w, L->fc1_b, 1, k->relu_mask, 0);
        else
            sub_linear(m, p, layer, PK_FC1, k->h, in, N, C, F, L->fc1_w, L->fc1_b, 1); /* bias + ReLU epilogue */
        k->amask = NULL;
        if (p->train && hp->act_dropout > 0) {
            /* in place: h is then also the fc2 input the backward needs; relu_bwd on it is relu_bwd
             * on the ReLU's output where the dropout kept (the scale 1/(1-p) > 1 keeps every positive
             * positive), and dh is 0 where it dropped */
            k->amask = mask_buf(m, (size_t)N * F);
            ll_site_rng(&r, p, layer, SITE_ACT);
            be->dropout_fwd(be, k->h, k->amask, (size_t)N * F, hp->act_dropout, &r, (uint64_t)p->row0 * p->T * F);
        }
        sub_linear(m, p, layer, PK_FC2, s, k->h, N, F, C, L->fc2_w, L->fc2_b, 0);
        break;
    }
    }
}

/* din = din_beta * din + dSub/din^T ds (ds may be clobbered). */
static void sub_bwd(ll_model *m, ll_block *k, const ll_pass *p, const ll_act *in, ll_act *ds, ll_act *din,
                    real din_beta) {
    ll_backend *be = m->be;
    const ll_hparams *hp = &m->hp;
    const int C = hp->C, H = hp->H, Dh = C / H, N = p->B * p->T;
    const real ad = p->train ? hp->attn_dropout : 0;
    const ll_layer_offsets *L = k->L;
    switch (k->kind) {
    case SUB_SELF: {
        ll_act *dctx = ll_buf(m, (size_t)N * C);
        layer_linear_bwd(m, dctx, 0, ds, k->ctx, N, C, C, L->o_w, L->o_b);
        ll_act *dqkv = ll_buf(m, (size_t)N * 3 * C); /* attention_bwd overwrites */
        be->attention_bwd(be, dqkv, ACT(m, dqkv, C), ACT(m, dqkv, 2 * C), dctx, k->ctx, k->lse, k->qkv, 3 * C,
                          ACT(m, k->qkv, C), ACT(m, k->qkv, 2 * C), 3 * C, p->self_len, p->B, p->T, p->T, H, Dh,
                          p->stack == 1, ad, &k->attn_rng, (uint64_t)p->row0 * H * p->T * p->T);
        layer_linear_bwd(m, din, din_beta, dqkv, in, N, C, 3 * C, L->qkv_w, L->qkv_b);
        break;
    }
    case SUB_CROSS: {
        const int Ns = p->B * p->S;
        ll_act *dctx = ll_buf(m, (size_t)N * C);
        layer_linear_bwd(m, dctx, 0, ds, k->ctx, N, C, C, L->co_w, L->co_b);
        ll_act *dq = ll_buf(m, (size_t)N * C), *dkv = ll_buf(m, (size_t)Ns * 2 * C);
        be->attention_bwd(be, dq, dkv, ACT(m, dkv, C), dctx, k->ctx, k->lse, k->q, C, k->kv, ACT(m, k->kv, C), 2 * C,
                          p->src_len, p->B, p->T, p->S, H, Dh, 0, ad, &k->attn_rng,
                          (uint64_t)p->row0 * H * p->T * p->S);
        layer_linear_bwd(m, din, din_beta, dq, in, N, C, C, L->cq_w, L->cq_b);
        /* into the fp32 sum over decoder layers (bf16 would round it 64+ times); nothing reads that sum
         * before the encoder's backward, so its product runs beside too (in order with the other
         * layers' on the side stream) */
        linear_bwd(m, p->d_enc_out, LL_REAL_DTYPE, 1, dkv, p->enc_out, Ns, C, 2 * C, L->ckv_w, L->ckv_b, NULL, NULL,
                   SIDE_DW | SIDE_DX);
        break;
    }
    case SUB_FFN: {
        const int F = hp->F;
        ll_act *dh = ll_buf(m, (size_t)N * F);
        /* dh = ds W2 (* relu'(h) in the epilogue where masked: relu' and the dropout's mask are both
         * elementwise 0/1 or 0/scale factors, so their order does not change a bit) */
        linear_bwd(m, dh, be->act, 0, ds, k->h, N, F, C, L->fc2_w, L->fc2_b, k->relu_mask, k->h, SIDE_DW);
        if (k->amask) be->dropout_bwd(be, dh, k->amask, (size_t)N * F, hp->act_dropout);
        if (!k->relu_mask) be->relu_bwd(be, dh, k->h, (size_t)N * F);
        layer_linear_bwd(m, din, din_beta, dh, in, N, C, F, L->fc1_w, L->fc1_b);
        break;
    }
    }
}

static int site_of(ll_sub_kind kind) { return kind == SUB_SELF ? SITE_SELF : kind == SUB_CROSS ? SITE_CROSS : SITE_FFN; }

/* The branch scale is z * alpha: the layer's gate (latent depth) times
 * ReZero's alpha, both scalars in backend memory (NULL = 1). */
static const real *gate_ptr(const ll_block *k) { return k->ctl ? k->ctl->gate : NULL; }
static const real *alpha_ptr(const ll_model *m, const ll_block *k) { return k->alpha ? m->params + k->alpha : NULL; }

/* The branch off (cross-attention drop, or a latent z = 0 at inference):
 * pre-norm/ReZero y = x, post-norm y = LN(x).  y_into (a conditional's
 * else branch): y is written there, with the layer norm that reads it. */
static void block_off_fwd(ll_model *m, ll_block *k, ll_act *y_into) {
    ll_backend *be = m->be;
    const int C = m->hp.C, N = k->n_rows;
    const size_t n = (size_t)N * C;
    k->mode = BLOCK_OFF;
    if (m->hp.post_norm) {
        k->y = y_into ? y_into : ll_buf(m, n);
        be->layernorm_fwd(be, k->y, k->mean, k->rstd, k->x, m->params + k->ln_w, m->params + k->ln_b, N, C);
        return;
    }
    if (!y_into) {
        k->y = (ll_act *)k->x;
        return;
    }
    k->y = y_into;
    be->copy(be, y_into, k->x, ACT_BYTES(m, n));
    if (k->has_next_ln) { /* what the residual sum's op computes in the other branch */
        const ll_ln_target *t = &k->next_ln;
        be->layernorm_fwd(be, *t->u, *t->mean, *t->rstd, y_into, m->params + t->w, m->params + t->b, N, C);
        *t->done = 1;
    }
}

/* The branch computed: y = x + z alpha drop(Sub(...)) (and its norms).  y_into:
 * y and the next layer norm's buffers are given (a conditional's if branch). */
static void block_run_fwd(ll_model *m, ll_block *k, const ll_pass *p, int layer, ll_act *y_into) {
    ll_backend *be = m->be;
    const int C = m->hp.C, N = k->n_rows;
    const size_t n = (size_t)N * C;
    const int post = m->hp.post_norm, rezero = k->alpha != 0;
    k->mode = BLOCK_RUN;
    const real *gate = gate_ptr(k), *alpha = alpha_ptr(m, k);
    k->y = y_into ? y_into : ll_buf(m, n);
    ll_act *s = k->s = ll_buf(m, n);
    if (!post && !rezero) {
        if (k->ln_done) { /* u, mean, rstd: the previous block's residual_ln_fwd */
            k->ln_done = 0;
        } else {
            k->u = ll_buf(m, n);
            be->layernorm_fwd(be, k->u, k->mean, k->rstd, k->x, m->params + k->ln_w, m->params + k->ln_b, N, C);
        }
        sub_fwd(m, k, p, layer, k->u, s);
    } else {
        k->u = (ll_act *)k->x;
        sub_fwd(m, k, p, layer, k->x, s);
    }
    k->drop_p = p->train ? m->hp.dropout : 0;
    k->drop_off = (uint64_t)p->row0 * p->T * m->hp.C;
    if (k->drop_p > 0) ll_site_rng(&k->drop_rng, p, layer, site_of(k->kind));
    /* sum = x + z alpha drop(s), one pass; s keeps the dropped values for dgate.  Post-norm:
     * its own LN in the same op; pre-norm: the LN that consumes y, when ll_layer_fwd found one */
    const ll_philox *rng = k->drop_p > 0 ? &k->drop_rng : NULL;
    if (post && m->unfused_ln) {
        k->a = ll_buf(m, n);
        be->residual_fwd(be, k->a, s, k->x, gate, alpha, n, k->drop_p, rng, k->drop_off);
        be->layernorm_fwd(be, k->y, k->mean, k->rstd, k->a, m->params + k->ln_w, m->params + k->ln_b, N, C);
    } else if (post) {
        k->a = ll_buf(m, n);
        be->residual_ln_fwd(be, k->a, s, k->x, gate, alpha, k->drop_p, rng, k->drop_off, k->y, k->mean, k->rstd,
                            m->params + k->ln_w, m->params + k->ln_b, N, C);
    } else if (k->has_next_ln) {
        const ll_ln_target *t = &k->next_ln;
        if (!y_into) {
            *t->u = ll_buf(m, n);
            *t->mean = ll_fbuf(m, N);
            *t->rstd = ll_fbuf(m, N);
        }
        be->residual_ln_fwd(be, k->y, s, k->x, gate, alpha, k->drop_p, rng, k->drop_off, *t->u, *t->mean, *t->rstd,
                            m->params + t->w, m->params + t->b, N, C);
        *t->done = 1;
    } else {
        be->residual_fwd(be, k->y, s, k->x, gate, alpha, n, k->drop_p, rng, k->drop_off);
    }
}

void ll_block_fwd(ll_model *m, ll_block *k, const ll_pass *p, int layer) {
    const int C = m->hp.C, N = p->B * p->T;
    const size_t n = (size_t)N * C;
    const ll_layer_ctl *ctl = k->ctl;
    const int post = m->hp.post_norm, rezero = k->alpha != 0;
    k->n_rows = N;
    k->mode = BLOCK_RUN;
    if (ctl && ctl->skip && !ll_cond_layer(m, ctl)) { /* the whole layer is the identity (LayerDrop, pruned latent layer) */
        k->mode = BLOCK_IDENTITY;
        k->y = (ll_act *)k->x;
        return;
    }
    if (k->ln_done && (post || rezero)) ll_die("internal: a pre-norm LN handed to a post-norm/ReZero block");
    if (!k->ln_done) {
        k->mean = ll_fbuf(m, N);
        k->rstd = ll_fbuf(m, N);
    }
    if (ll_cond_cross(m, k)) { /* both outcomes queued; the uploaded draw picks one at each launch */
        ll_backend *be = m->be;
        ll_act *y = k->y_into ? k->y_into : ll_buf(m, n);
        if (k->has_next_ln) {
            const ll_ln_target *t = &k->next_ln;
            *t->u = ll_buf(m, n);
            *t->mean = ll_fbuf(m, N);
            *t->rstd = ll_fbuf(m, N);
        }
        be->cond_if(be, ctl->cross_at, !ctl->skip_cross);
        block_run_fwd(m, k, p, layer, y);
        be->cond_else(be);
        block_off_fwd(m, k, y);
        be->cond_end(be);
        k->mode = BLOCK_COND;
        k->ln_done = 0;
        return;
    }
    if (ll_layer_off(ctl) || (ctl && ctl->skip_cross && k->kind == SUB_CROSS)) {
        block_off_fwd(m, k, k->y_into);
        return;
    }
    block_run_fwd(m, k, p, layer, k->y_into);
}

/* dx_fresh: dx holds garbage, so the first contribution is a copy (saves a memset) */
static void first(ll_model *m, ll_act *dx, const ll_act *src, size_t n, int dx_fresh) {
    if (dx_fresh)
        m->be->copy(m->be, dx, src, ACT_BYTES(m, n));
    else
        m->be->acc(m->be, dx, src, n);
}

/* Backward of an identity (skipped layer) or a branch that was off. */
static void block_off_bwd(ll_model *m, ll_block *k, ll_act *dy, ll_act *dx, int dx_fresh) {
    ll_backend *be = m->be;
    const int C = m->hp.C, N = k->n_rows;
    const size_t n = (size_t)N * C;
    if (k->mode == BLOCK_IDENTITY || !m->hp.post_norm) {
        first(m, dx, dy, n, dx_fresh);
        return;
    }
    if (dx_fresh) be->memset0(be, dx, ACT_BYTES(m, n));
    be->layernorm_bwd(be, dx, m->grads + k->ln_w, m->grads + k->ln_b, dy, k->x, m->params + k->ln_w, k->mean,
                      k->rstd, N, C);
}

static void block_run_bwd(ll_model *m, ll_block *k, const ll_pass *p, ll_act *dy, ll_act *dx, int dx_fresh) {
    ll_backend *be = m->be;
    const int C = m->hp.C, N = k->n_rows;
    const size_t n = (size_t)N * C;
    ll_layer_ctl *ctl = k->ctl;
    const int post = m->hp.post_norm, rezero = k->alpha != 0;
    ll_act *ds = dy; /* gradient of the residual sum x + z alpha drop(s) */
    if (post) {
        ds = ll_zeros(m, n);
        be->layernorm_bwd(be, ds, m->grads + k->ln_w, m->grads + k->ln_b, dy, k->a, m->params + k->ln_w, k->mean,
                          k->rstd, N, C);
    }
    const real *gate = gate_ptr(k), *alpha = alpha_ptr(m, k);
    /* one pass: dx gets ds (the residual path); dL/dz = alpha <ds, s>, dL/dalpha = z <ds, s>;
     * ds becomes the sub-layer's output gradient (gated, dropout undone with the forward's bits) */
    be->residual_bwd(be, ds, dx, dx_fresh ? LL_RES_COPY : LL_RES_ACC, k->s, ctl ? ctl->dgate : NULL,
                     rezero ? m->grads + k->alpha : NULL, gate, alpha, n, k->drop_p,
                     k->drop_p > 0 ? &k->drop_rng : NULL, k->drop_off);
    if (!post && !rezero) {
        ll_act *du = ll_buf(m, n);
        sub_bwd(m, k, p, k->u, ds, du, 0);
        be->layernorm_bwd(be, dx, m->grads + k->ln_w, m->grads + k->ln_b, du, k->x, m->params + k->ln_w, k->mean,
                          k->rstd, N, C);
    } else {
        sub_bwd(m, k, p, k->x, ds, dx, 1);
    }
}

void ll_block_bwd(ll_model *m, ll_block *k, const ll_pass *p, ll_act *dy, ll_act *dx, int dx_fresh) {
    if (k->mode == BLOCK_COND) { /* the branches of the forward's conditional, in the same order */
        ll_backend *be = m->be;
        be->cond_if(be, k->ctl->cross_at, !k->ctl->skip_cross);
        block_run_bwd(m, k, p, dy, dx, dx_fresh);
        be->cond_else(be);
        block_off_bwd(m, k, dy, dx, dx_fresh);
        be->cond_end(be);
        return;
    }
    if (k->mode == BLOCK_IDENTITY || k->mode == BLOCK_OFF) {
        block_off_bwd(m, k, dy, dx, dx_fresh);
        return;
    }
    block_run_bwd(m, k, p, dy, dx, dx_fresh);
}

/* One layer = its blocks in order (self-attention, [cross-attention,] FFN).
 * Here, not in transformer.c, so that the stack drivers (transformer.c and
 * dlcl.c) both call down into layers.c and never into each other. */
/* Pre-norm fusion: does block k, when it runs, compute LN(x) of its input?
 * (Decided by the layer controls alone, which are set before the forward.) */
static int runs_with_ln(const ll_model *m, const ll_block *k) {
    const ll_layer_ctl *ctl = k->ctl;
    if (m->hp.post_norm || k->alpha || ll_layer_off(ctl)) return 0;
    if (ctl && ctl->skip && !ll_cond_layer(m, ctl)) return 0;
    /* a conditional cross-attention block computes its LN when it runs, and its
     * other branch the LN of the block after it */
    return !(ctl && ctl->skip_cross && k->kind == SUB_CROSS && !ll_cond_cross(m, k));
}

/* The layer norm that reads block i's output, if one does directly: the next
 * block that runs (blocks skipped or switched off in between pass x through
 * unchanged in a pre-norm stack), within the layer, or -- when the stack is
 * the plain one keeping every layer -- in later layers, then the final LN. */
static void find_next_ln(const ll_model *m, ll_stack_run *r, int i, int l) {
    ll_block *k = &r->blocks[i];
    k->has_next_ln = 0;
    if (m->hp.post_norm || m->hp.rezero || m->unfused_ln) return;
    const int end = r->fuse_across ? r->L * r->per_layer : (l + 1) * r->per_layer;
    for (int j = i + 1; j < end; j++) {
        ll_block *c = &r->blocks[j];
        if (runs_with_ln(m, c)) {
            k->next_ln = (ll_ln_target){c->ln_w, c->ln_b, &c->u, &c->mean, &c->rstd, &c->ln_done};
            k->has_next_ln = 1;
            return;
        }
    }
    if (r->fuse_across) {
        const int dec = r->stack;
        k->next_ln = (ll_ln_target){dec ? m->dec_ln_w : m->enc_ln_w, dec ? m->dec_ln_b : m->enc_ln_b, &r->out,
                                    &r->mean, &r->rstd, &r->final_done};
        k->has_next_ln = 1;
    }
}

/* Will block k (a cross attention) run as itself, outside a conditional body, with keys and values
 * of its own to compute?  (ll_block_fwd's rules; a backend without join runs everything in order.) */
static int cross_runs_plain(const ll_model *m, const ll_block *k, const ll_pass *p, int cond_layer) {
    const ll_layer_ctl *ctl = k->ctl;
    if (k->kind != SUB_CROSS || p->inc || cond_layer || !m->be->join) return 0;
    if (ctl && (ctl->skip || ctl->skip_cross || ll_layer_off(ctl))) return 0;
    return !ll_cond_cross(m, k);
}

ll_act *ll_layer_fwd(ll_model *m, ll_stack_run *r, int l, ll_act *x) {
    const ll_layer_ctl *ctl = r->blocks[l * r->per_layer].ctl;
    const size_t n = (size_t)r->p.B * r->p.T * m->hp.C;
    const int cond = ll_cond_layer(m, ctl);
    ll_act *const x_in = x, *y = NULL;
    if (cond) { /* LayerDrop in a graph: the layer, or y = x, chosen by the uploaded draw */
        y = ll_buf(m, n);
        m->be->cond_if(m->be, ctl->run_at, !ctl->skip);
    }
    /* the cross attention's keys and values read the encoder's output alone: queued beside the
     * layer's self-attention block (ll_gemm_desc.side; the CUDA side stream), joined before the
     * cross attention reads them (sub_fwd) */
    for (int j = 1; j < r->per_layer; j++) {
        ll_block *k = &r->blocks[l * r->per_layer + j];
        k->kv_ready = 0;
        if (!cross_runs_plain(m, k, &r->p, cond)) continue;
        const int C = m->hp.C, Ns = r->p.B * r->p.S;
        k->kv = ll_buf(m, (size_t)Ns * 2 * C);
        linear_fwd(m, k->kv, r->p.enc_out, Ns, C, 2 * C, k->L->ckv_w, k->L->ckv_b, 0, NULL, 1);
        k->kv_ready = 1;
    }
    for (int j = 0; j < r->per_layer; j++) {
        ll_block *k = &r->blocks[l * r->per_layer + j];
        k->x = x;
        k->y_into = cond && j == r->per_layer - 1 ? y : NULL;
        find_next_ln(m, r, l * r->per_layer + j, l);
        ll_block_fwd(m, k, &r->p, l);
        x = k->y;
    }
    if (!cond) return x;
    if (x != y) m->be->copy(m->be, y, x, ACT_BYTES(m, n)); /* (the last block's branch was off) */
    m->be->cond_else(m->be);
    m->be->copy(m->be, y, x_in, ACT_BYTES(m, n));
    m->be->cond_end(m->be);
    return y;
}

ll_act *ll_layer_fwd_into(ll_model *m, ll_stack_run *r, int l, ll_act *x, ll_act *dst) {
    const size_t n = (size_t)r->p.B * r->p.T * m->hp.C;
    const ll_arena_mark mk = ll_arena_get_mark(&m->arena), mk_meta = ll_arena_get_mark(&m->meta);
    m->be->copy(m->be, dst, ll_layer_fwd(m, r, l, x), ACT_BYTES(m, n));
    ll_arena_release(&m->arena, mk);
    ll_arena_release(&m->meta, mk_meta);
    return dst;
}

void ll_layer_bwd(ll_model *m, ll_stack_run *r, int l, ll_act *dy, ll_act *dx) {
    const size_t n = (size_t)r->p.B * r->p.T * m->hp.C;
    const ll_layer_ctl *ctl = r->blocks[l * r->per_layer].ctl;
    const int cond = ll_cond_layer(m, ctl);
    ll_act *const dy_in = dy;
    if (cond) m->be->cond_if(m->be, ctl->run_at, !ctl->skip);
    for (int j = r->per_layer - 1; j >= 0; j--) {
        ll_act *d = j == 0 ? dx : ll_buf(m, n);
        ll_block_bwd(m, &r->blocks[l * r->per_layer + j], &r->p, dy, d, 1);
        dy = d;
    }
    if (cond) {
        m->be->cond_else(m->be);
        m->be->copy(m->be, dx, dy_in, ACT_BYTES(m, n));
        m->be->cond_end(m->be);
    }
    /* (no join here: the caller joins before it reuses the layer's temporaries or dy; a backend
     * capturing a conditional's bodies ran its side gemms in order) */
}

int ll_layer_join_every(const ll_model *m) {
    if (!m->be->join) return 1;
    static int every = 0; /* (read once; any thread computes the same) */
    int e = __atomic_load_n(&every, __ATOMIC_RELAXED);
    if (!e) {
        const char *v = getenv("LL_LAYERS_PER_JOIN");
        e = v && *v ? atoi(v) : 4;
        if (e < 1 || e > 64) ll_die("LL_LAYERS_PER_JOIN=%s: want 1 to 64 layers", v);
        __atomic_store_n(&every, e, __ATOMIC_RELAXED);
    }
    return e;
}
