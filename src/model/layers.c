/* Residual blocks (self-attention, cross-attention, FFN), pre- or post-norm,
 * forward and backward.  Pre-norm: y = x + drop(Sub(LN(x))).
 * Post-norm: y = LN(x + drop(Sub(x))). */
#include <string.h>

#include "model_internal.h"

real *ll_buf(ll_model *m, size_t n) { return ll_arena_alloc_act(&m->arena, n * sizeof(real)); }

real *ll_zeros(ll_model *m, size_t n) {
    real *p = ll_buf(m, n);
    m->be->memset0(m->be, p, n * sizeof(real));
    return p;
}

void ll_site_rng(ll_philox *r, const ll_pass *p, int layer, int site) {
    uint32_t id = ((uint32_t)(p->stack * 4096 + layer) * 8 + site);
    ll_philox_init(r, p->seed, LL_RNG_DROPOUT | (id << 4), (uint32_t)p->rng_step);
}

void ll_linear_fwd(ll_model *m, real *y, const real *x, int N, int in, int out, size_t w, size_t b) {
    ll_backend *be = m->be;
    if (b && be->bias_set) {
        be->bias_set(be, y, m->params + b, N, out);
        be->gemm(be, 0, 1, N, out, in, 1, x, in, m->params + w, in, 1, y, out);
        return;
    }
    be->gemm(be, 0, 1, N, out, in, 1, x, in, m->params + w, in, 0, y, out);
    if (b) be->bias_fwd(be, y, m->params + b, N, out);
}

void ll_linear_bwd(ll_model *m, real *dx, real dx_beta, const real *dy, const real *x, int N, int in, int out,
                   size_t w, size_t b) {
    ll_backend *be = m->be;
    if (dx) be->gemm(be, 0, 0, N, in, out, 1, dy, out, m->params + w, in, dx_beta, dx, in);
    be->gemm(be, 1, 0, out, in, N, 1, dy, out, x, in, 1, m->grads + w, in);
    if (b) be->bias_bwd(be, m->grads + b, dy, N, out);
}

static uint8_t *mask_buf(ll_model *m, size_t n) { return ll_arena_alloc(&m->arena, n); }

/* ---- sub-layers: s = Sub(in), in/s are [N, C] ---- */

/* A sub-layer's linear map; in incremental decoding through the layer's
 * packed weight when the backend packed one. */
static void sub_linear(ll_model *m, const ll_pass *p, int layer, int slot, real *y, const real *x, int N, int in,
                       int out, size_t w, size_t b) {
    const void *pk = p->inc ? p->inc->packed[(size_t)layer * LL_DEC_PACKED + slot] : NULL;
    if (pk)
        m->be->linear_packed(m->be, y, out, x, in, pk, b ? m->params + b : NULL, N);
    else
        ll_linear_fwd(m, y, x, N, in, out, w, b);
}

static void sub_fwd(ll_model *m, ll_block *k, const ll_pass *p, int layer, const real *in, real *s) {
    ll_backend *be = m->be;
    const ll_hparams *hp = &m->hp;
    const int C = hp->C, H = hp->H, Dh = C / H, N = p->B * p->T;
    const real ad = p->train ? hp->attn_dropout : 0;
    const ll_layer_offsets *L = k->L;
    ll_philox r;
    switch (k->kind) {
    case SUB_SELF:
        k->qkv = ll_buf(m, (size_t)N * 3 * C);
        sub_linear(m, p, layer, PK_QKV, k->qkv, in, N, C, 3 * C, L->qkv_w, L->qkv_b);
        k->ctx = ll_buf(m, (size_t)N * C);
        if (p->inc) { /* append this position's keys/values, attend over the cache (no backward: no lse) */
            const ll_inc *c = p->inc;
            real *cache = c->self_kv[layer];
            be->copy_rows(be, cache + (size_t)c->t * 2 * C, (size_t)c->max_T * 2 * C, k->qkv + C, 3 * C, N,
                          2 * C);
            be->attention_fwd(be, k->ctx, NULL, k->qkv, 3 * C, cache, cache + C, 2 * C, c->key_len, N, 1, c->max_T,
                              H, Dh, 0, 0, NULL, 0);
        } else {
            k->lse = ll_buf(m, (size_t)p->B * H * p->T);
            ll_site_rng(&k->attn_rng, p, layer, SITE_SELF_PROBS);
            be->attention_fwd(be, k->ctx, k->lse, k->qkv, 3 * C, k->qkv + C, k->qkv + 2 * C, 3 * C, p->self_len,
                              p->B, p->T, p->T, H, Dh, p->stack == 1, ad, &k->attn_rng,
                              (uint64_t)p->row0 * H * p->T * p->T);
        }
        sub_linear(m, p, layer, PK_O, s, k->ctx, N, C, C, L->o_w, L->o_b);
        break;
    case SUB_CROSS: {
        k->q = ll_buf(m, (size_t)N * C);
        sub_linear(m, p, layer, PK_CQ, k->q, in, N, C, C, L->cq_w, L->cq_b);
        k->ctx = ll_buf(m, (size_t)N * C);
        if (p->inc) { /* a sentence's beam rows are its queries, so its keys/values are read once */
            const ll_inc *c = p->inc;
            be->attention_fwd(be, k->ctx, NULL, k->q, C, c->cross_kv[layer], c->cross_kv[layer] + C, 2 * C,
                              c->sent_src_len, c->sents, c->beam, p->S, H, Dh, 0, 0, NULL, 0);
        } else {
            const int Ns = p->B * p->S;
            k->kv = ll_buf(m, (size_t)Ns * 2 * C);
            ll_linear_fwd(m, k->kv, p->enc_out, Ns, C, 2 * C, L->ckv_w, L->ckv_b);
            k->lse = ll_buf(m, (size_t)p->B * H * p->T);
            ll_site_rng(&k->attn_rng, p, layer, SITE_CROSS_PROBS);
            be->attention_fwd(be, k->ctx, k->lse, k->q, C, k->kv, k->kv + C, 2 * C, p->src_len, p->B, p->T, p->S,
                              H, Dh, 0, ad, &k->attn_rng, (uint64_t)p->row0 * H * p->T * p->S);
        }
        sub_linear(m, p, layer, PK_CO, s, k->ctx, N, C, C, L->co_w, L->co_b);
        break;
    }
    case SUB_FFN: {
        const int F = hp->F;
        k->h = ll_buf(m, (size_t)N * F);
        sub_linear(m, p, layer, PK_FC1, k->h, in, N, C, F, L->fc1_w, L->fc1_b);
        be->relu_fwd(be, k->h, (size_t)N * F);
        k->hd = k->h;
        k->amask = NULL;
        if (p->train && hp->act_dropout > 0) {
            k->hd = ll_buf(m, (size_t)N * F);
            be->copy(be, k->hd, k->h, (size_t)N * F * sizeof(real));
            k->amask = mask_buf(m, (size_t)N * F);
            ll_site_rng(&r, p, layer, SITE_ACT);
            be->dropout_fwd(be, k->hd, k->amask, (size_t)N * F, hp->act_dropout, &r, (uint64_t)p->row0 * p->T * F);
        }
        sub_linear(m, p, layer, PK_FC2, s, k->hd, N, F, C, L->fc2_w, L->fc2_b);
        break;
    }
    }
}

/* din = din_beta * din + dSub/din^T ds (ds may be clobbered). */
static void sub_bwd(ll_model *m, ll_block *k, const ll_pass *p, const real *in, real *ds, real *din, real din_beta) {
    ll_backend *be = m->be;
    const ll_hparams *hp = &m->hp;
    const int C = hp->C, H = hp->H, Dh = C / H, N = p->B * p->T;
    const real ad = p->train ? hp->attn_dropout : 0;
    const ll_layer_offsets *L = k->L;
    switch (k->kind) {
    case SUB_SELF: {
        real *dctx = ll_buf(m, (size_t)N * C);
        ll_linear_bwd(m, dctx, 0, ds, k->ctx, N, C, C, L->o_w, L->o_b);
        real *dqkv = ll_buf(m, (size_t)N * 3 * C); /* attention_bwd overwrites */
        be->attention_bwd(be, dqkv, dqkv + C, dqkv + 2 * C, dctx, k->ctx, k->lse, k->qkv, 3 * C, k->qkv + C,
                          k->qkv + 2 * C, 3 * C, p->self_len, p->B, p->T, p->T, H, Dh, p->stack == 1, ad, &k->attn_rng,
                          (uint64_t)p->row0 * H * p->T * p->T);
        ll_linear_bwd(m, din, din_beta, dqkv, in, N, C, 3 * C, L->qkv_w, L->qkv_b);
        break;
    }
    case SUB_CROSS: {
        const int Ns = p->B * p->S;
        real *dctx = ll_buf(m, (size_t)N * C);
        ll_linear_bwd(m, dctx, 0, ds, k->ctx, N, C, C, L->co_w, L->co_b);
        real *dq = ll_buf(m, (size_t)N * C), *dkv = ll_buf(m, (size_t)Ns * 2 * C);
        be->attention_bwd(be, dq, dkv, dkv + C, dctx, k->ctx, k->lse, k->q, C, k->kv, k->kv + C, 2 * C, p->src_len,
                          p->B, p->T, p->S, H, Dh, 0, ad, &k->attn_rng, (uint64_t)p->row0 * H * p->T * p->S);
        ll_linear_bwd(m, din, din_beta, dq, in, N, C, C, L->cq_w, L->cq_b);
        ll_linear_bwd(m, p->d_enc_out, 1, dkv, p->enc_out, Ns, C, 2 * C, L->ckv_w, L->ckv_b);
        break;
    }
    case SUB_FFN: {
        const int F = hp->F;
        real *dh = ll_buf(m, (size_t)N * F);
        ll_linear_bwd(m, dh, 0, ds, k->hd, N, F, C, L->fc2_w, L->fc2_b);
        if (k->amask) be->dropout_bwd(be, dh, k->amask, (size_t)N * F, hp->act_dropout);
        be->relu_bwd(be, dh, k->h, (size_t)N * F);
        ll_linear_bwd(m, din, din_beta, dh, in, N, C, F, L->fc1_w, L->fc1_b);
        break;
    }
    }
}

static int site_of(ll_sub_kind kind) { return kind == SUB_SELF ? SITE_SELF : kind == SUB_CROSS ? SITE_CROSS : SITE_FFN; }

/* The branch scale is z * alpha: the layer's gate (latent depth) times
 * ReZero's alpha, both scalars in backend memory (NULL = 1). */
static const real *gate_ptr(const ll_block *k) { return k->ctl ? k->ctl->gate : NULL; }
static const real *alpha_ptr(const ll_model *m, const ll_block *k) { return k->alpha ? m->params + k->alpha : NULL; }

void ll_block_fwd(ll_model *m, ll_block *k, const ll_pass *p, int layer) {
    ll_backend *be = m->be;
    const int C = m->hp.C, N = p->B * p->T;
    const size_t n = (size_t)N * C;
    const ll_layer_ctl *ctl = k->ctl;
    const int post = m->hp.post_norm, rezero = k->alpha != 0;
    k->mode = BLOCK_RUN;
    if (ctl && ctl->skip) { /* the whole layer is the identity (LayerDrop, pruned latent layer) */
        k->mode = BLOCK_IDENTITY;
        k->y = (real *)k->x;
        return;
    }
    k->mean = ll_buf(m, N);
    k->rstd = ll_buf(m, N);
    /* branch off (CAD, or a latent z = 0 at inference): pre/ReZero y = x, post y = LN(x) */
    if (ll_layer_off(ctl) || (ctl && ctl->skip_cross && k->kind == SUB_CROSS)) {
        k->mode = BLOCK_OFF;
        if (!post) {
            k->y = (real *)k->x;
        } else {
            k->a = (real *)k->x;
            k->y = ll_buf(m, n);
            be->layernorm_fwd(be, k->y, k->mean, k->rstd, k->a, m->params + k->ln_w, m->params + k->ln_b, N, C);
        }
        return;
    }
    const real *gate = gate_ptr(k), *alpha = alpha_ptr(m, k);
    k->y = ll_buf(m, n);
    real *s = k->s = ll_buf(m, n);
    if (!post && !rezero) {
        k->u = ll_buf(m, n);
        be->layernorm_fwd(be, k->u, k->mean, k->rstd, k->x, m->params + k->ln_w, m->params + k->ln_b, N, C);
        sub_fwd(m, k, p, layer, k->u, s);
    } else {
        k->u = (real *)k->x;
        sub_fwd(m, k, p, layer, k->x, s);
    }
    k->mask = NULL;
    if (p->train && m->hp.dropout > 0) {
        ll_philox r;
        ll_site_rng(&r, p, layer, site_of(k->kind));
        k->mask = mask_buf(m, n);
        be->dropout_fwd(be, s, k->mask, n, m->hp.dropout, &r, (uint64_t)p->row0 * p->T * m->hp.C);
    }
    real *sum = post ? (k->a = ll_buf(m, n)) : k->y;
    if (!gate && !alpha)
        be->add(be, sum, k->x, s, n);
    else
        be->add_gated(be, sum, k->x, s, gate, alpha, n);
    if (post) be->layernorm_fwd(be, k->y, k->mean, k->rstd, k->a, m->params + k->ln_w, m->params + k->ln_b, N, C);
}

void ll_block_bwd(ll_model *m, ll_block *k, const ll_pass *p, real *dy, real *dx, int dx_fresh) {
    ll_backend *be = m->be;
    const int C = m->hp.C, N = p->B * p->T;
    const size_t n = (size_t)N * C;
    ll_layer_ctl *ctl = k->ctl;
    const int post = m->hp.post_norm, rezero = k->alpha != 0;
    /* dx_fresh: dx holds garbage, so the first contribution is a copy (saves a memset) */
#define FIRST(dst, src) (dx_fresh ? be->copy(be, dst, src, n * sizeof(real)) : be->acc(be, dst, src, n))
    if (k->mode == BLOCK_IDENTITY || (k->mode == BLOCK_OFF && !post)) {
        FIRST(dx, dy);
        return;
    }
    if (k->mode == BLOCK_OFF) {
        if (dx_fresh) be->memset0(be, dx, n * sizeof(real));
        be->layernorm_bwd(be, dx, m->grads + k->ln_w, m->grads + k->ln_b, dy, k->a, m->params + k->ln_w, k->mean,
                          k->rstd, N, C);
        return;
    }
    real *ds; /* gradient of the residual sum x + gate * s */
    if (!post) {
        FIRST(dx, dy); /* residual path */
        ds = dy;
    } else {
        ds = ll_zeros(m, n);
        be->layernorm_bwd(be, ds, m->grads + k->ln_w, m->grads + k->ln_b, dy, k->a, m->params + k->ln_w, k->mean,
                          k->rstd, N, C);
        FIRST(dx, ds);
    }
#undef FIRST
    const real *gate = gate_ptr(k), *alpha = alpha_ptr(m, k);
    /* d(x + z alpha s): dL/dz = alpha <ds, s>, dL/dalpha = z <ds, s> (on the backend) */
    if (ctl && ctl->dgate) be->dot_acc(be, ctl->dgate, ds, k->s, n, alpha);
    if (rezero) be->dot_acc(be, m->grads + k->alpha, ds, k->s, n, gate);
    if (gate || alpha) be->scale_gated(be, ds, gate, alpha, n);
    if (k->mask) be->dropout_bwd(be, ds, k->mask, n, m->hp.dropout);
    if (!post && !rezero) {
        real *du = ll_buf(m, n);
        sub_bwd(m, k, p, k->u, ds, du, 0);
        be->layernorm_bwd(be, dx, m->grads + k->ln_w, m->grads + k->ln_b, du, k->x, m->params + k->ln_w, k->mean,
                          k->rstd, N, C);
    } else {
        sub_bwd(m, k, p, k->x, ds, dx, 1);
    }
}

/* One layer = its blocks in order (self-attention, [cross-attention,] FFN).
 * Here, not in transformer.c, so that the stack drivers (transformer.c and
 * dlcl.c) both call down into layers.c and never into each other. */
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
