/* Incremental decoding with a key/value cache (fairseq's incremental_state):
 * the same math as the training forward with dropout off, one position at a
 * time.  tests/test_decode_cache.c checks it against full recomputation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

static void norm(ll_model *m, ll_act *out, const ll_act *x, size_t w, size_t b, int N) {
    real *mean = ll_fbuf(m, N), *rstd = ll_fbuf(m, N);
    m->be->layernorm_fwd(m->be, out, mean, rstd, x, m->params + w, m->params + b, N, m->hp.C);
}

/* DLCL at one position (dlcl.c has the formulas): entry k and row r. */
static ll_act *dlcl_entry(ll_model *m, int k, ll_act *y, int N) {
    if (!(m->hp.dlcl_ln && !m->hp.post_norm && (k >= 1 || m->hp.dlcl_norm_embed))) return y;
    ll_act *e = ll_buf(m, (size_t)N * m->hp.C);
    norm(m, e, y, ll_dlcl_ln_w(m, 1, k), ll_dlcl_ln_b(m, 1, k), N);
    return e;
}

static ll_act *dlcl_row(ll_model *m, int r, ll_act **ent, int N) {
    const size_t n = (size_t)N * m->hp.C;
    ll_act *c = ll_buf(m, n);
    m->be->weighted_sum(m->be, c, (const ll_act *const *)ent, ll_dlcl_weights(m, 1) + (size_t)r * (m->hp.Ld + 1), r + 1,
                        n);
    if (!(m->hp.dlcl_ln && m->hp.post_norm && r >= 1)) return c;
    ll_act *z = ll_buf(m, n);
    norm(m, z, c, ll_dlcl_ln_w(m, 1, r), ll_dlcl_ln_b(m, 1, r), N);
    return z;
}


/* A decoder layer whose branches are off (z = 0): post-norm applies its three
 * layer norms, pre-norm and ReZero are the identity (layers.c, BLOCK_OFF). */
static ll_act *off_layer(ll_model *m, const ll_layer_offsets *L, ll_act *x, int N) {
    if (!m->hp.post_norm) return x;
    const size_t w[3] = {L->ln1_w, L->ln2_w, L->ln3_w}, b[3] = {L->ln1_b, L->ln2_b, L->ln3_b};
    for (int i = 0; i < 3; i++) {
        ll_act *z = ll_buf(m, (size_t)N * m->hp.C);
        norm(m, z, x, w[i], b[i], N);
        x = z;
    }
    return x;
}

/* Decoder weights packed once per decode: every step multiplies a few rows
 * by all of them (cpu_linear_packed.c explains why this pays). */
enum { PK_QKV, PK_O, PK_CQ, PK_CO, PK_FC1, PK_FC2 };

static void **pack_decoder(ll_model *m) {
    const ll_hparams *hp = &m->hp;
    const int C = hp->C, n = hp->Ld * LL_DEC_PACKED + 1;
    void **pk = ll_calloc(n, sizeof(void *));
    ll_backend *be = m->be;
    const char *env = getenv("LL_DECODE_PACKED"); /* "0": plain gemm, for A/B benchmarks */
    if (!be->linear_pack || (env && !strcmp(env, "0"))) return pk;
    for (int l = 0; l < hp->Ld; l++) {
        if (m->dec_ctl[l].skip || ll_layer_off(&m->dec_ctl[l])) continue;
        const ll_layer_offsets *L = &m->dec[l];
        void **p = pk + (size_t)l * LL_DEC_PACKED;
        p[PK_QKV] = be->linear_pack(be, m->params + L->qkv_w, 3 * C, C);
        p[PK_O] = be->linear_pack(be, m->params + L->o_w, C, C);
        if (!m->dec_ctl[l].skip_cross) {
            p[PK_CQ] = be->linear_pack(be, m->params + L->cq_w, C, C);
            p[PK_CO] = be->linear_pack(be, m->params + L->co_w, C, C);
        }
        p[PK_FC1] = be->linear_pack(be, m->params + L->fc1_w, hp->F, C);
        p[PK_FC2] = be->linear_pack(be, m->params + L->fc2_w, C, hp->F);
    }
    pk[n - 1] = be->linear_pack(be, m->params + m->out_proj, hp->V, C);
    return pk;
}

static void unpack_decoder(ll_model *m, void **pk) {
    if (!pk) return;
    for (int i = 0; i < m->hp.Ld * LL_DEC_PACKED + 1; i++)
        if (pk[i]) m->be->linear_unpack(m->be, pk[i]);
    free(pk);
}

void ll_decode_pack(ll_model *m) {
    if (!m->dec_packed) m->dec_packed = pack_decoder(m);
}

void ll_decode_unpack(ll_model *m) {
    unpack_decoder(m, m->dec_packed);
    m->dec_packed = NULL;
}

/* y = x W^T + b through the packed weight when there is one. */
static void dec_linear(ll_model *m, const void *packed, ll_act *y, const ll_act *x, int N, int in, int out, size_t w,
                       size_t b, int relu) {
    if (!packed) {
        if (b)
            ll_linear_fwd(m, y, x, N, in, out, w, b, relu);
        else { /* the output projection: no bias */
            const ll_gemm_desc g = ll_gemm_xwt(m, y, x, N, in, out, w);
            m->be->gemm(m->be, &g);
        }
        return;
    }
    m->be->linear_packed(m->be, y, out, x, in, packed, b ? m->params + b : NULL, N);
    if (relu) m->be->relu_fwd(m->be, y, (size_t)N * out);
}

ll_dec_state *ll_decode_begin(ll_model *m, const int32_t *src, const int *src_len, int B, int S, int beam,
                              int max_T) {
    ll_backend *be = m->be;
    const ll_hparams *hp = &m->hp;
    const int C = hp->C, N = B * beam;
    ll_dec_state *d = ll_calloc(1, sizeof *d);
    *d = (ll_dec_state){.N = N, .B = B, .S = S, .beam = beam, .max_T = max_T, .t = 0};
    d->sent_src_len = ll_calloc(B, sizeof(int));
    d->key_len = ll_calloc(N, sizeof(int));
    memcpy(d->sent_src_len, src_len, sizeof(int) * B);
    d->self_kv = ll_calloc(hp->Ld ? hp->Ld : 1, sizeof(ll_act *));
    d->cross_kv = ll_calloc(hp->Ld ? hp->Ld : 1, sizeof(ll_act *));

    /* encoder: the training forward (stack run) with train = 0 */
    ll_arena_reset(&m->arena);
    ll_arena_reset(&m->meta);
    ll_stack_run er;
    ll_pass p = {.B = B, .T = S, .S = S, .self_len = src_len, .src_len = src_len, .train = 0, .stack = 0};
    ll_stack_run_init(m, &er, 0, &p, src);
    ll_act *enc_out = ll_stack_run_fwd(m, &er);
    /* cross-attention keys/values, projected once per sentence; a sentence's
     * beam rows attend to them together (queries [B, beam]), so they are read
     * once per step instead of once per row */
    for (int l = 0; l < hp->Ld; l++) {
        const ll_layer_offsets *L = &m->dec[l];
        d->cross_kv[l] = be->alloc(be, ACT_BYTES(m, (size_t)B * S * 2 * C));
        ll_linear_fwd(m, d->cross_kv[l], enc_out, B * S, C, 2 * C, L->ckv_w, L->ckv_b, 0);
        d->self_kv[l] = be->alloc(be, ACT_BYTES(m, (size_t)N * max_T * 2 * C));
    }
    d->scratch_kv = be->alloc(be, ACT_BYTES(m, (size_t)N * (max_T > S ? max_T : S) * 2 * C));
    d->packed = m->dec_packed ? m->dec_packed : (d->own_packed = 1, pack_decoder(m));
    ll_arena_reset(&m->arena);
    ll_arena_reset(&m->meta);
    return d;
}

/* y = x + g Sub(LN(x)) (pre-norm), LN(x + g Sub(x)) (post-norm) or x + g Sub(x)
 * (ReZero, g[1] is alpha); g[] are backend scalars (NULL = 1); s holds Sub's output. */
static ll_act *residual(ll_model *m, const ll_act *x, ll_act *s, const real *const g[2], size_t ln_w, size_t ln_b,
                        int N) {
    ll_act *y = ll_buf(m, (size_t)N * m->hp.C);
    if (!g[0] && !g[1])
        m->be->add(m->be, y, x, s, (size_t)N * m->hp.C);
    else
        m->be->add_gated(m->be, y, x, s, g[0], g[1], (size_t)N * m->hp.C);
    if (m->hp.post_norm) {
        ll_act *z = ll_buf(m, (size_t)N * m->hp.C);
        norm(m, z, y, ln_w, ln_b, N);
        return z;
    }
    return y;
}

static const ll_act *sub_input(ll_model *m, const ll_act *x, size_t ln_w, size_t ln_b, int N) {
    if (m->hp.post_norm || m->hp.rezero) return x;
    ll_act *u = ll_buf(m, (size_t)N * m->hp.C);
    norm(m, u, x, ln_w, ln_b, N);
    return u;
}

void ll_decode_step(ll_model *m, ll_dec_state *d, const int32_t *prev_tok, real *logp) {
    ll_backend *be = m->be;
    const ll_hparams *hp = &m->hp;
    const int C = hp->C, H = hp->H, Dh = C / H, N = d->N, t = d->t;
    if (t >= d->max_T) ll_die("decode: step %d exceeds the cache capacity %d", t, d->max_T);
    if (t + LL_PAD + 1 >= hp->max_pos + 2) ll_die("decode: position %d exceeds model.max_positions", t);
    ll_arena_mark mk = ll_arena_get_mark(&m->arena), mk_meta = ll_arena_get_mark(&m->meta);
    for (int n = 0; n < N; n++) d->key_len[n] = t + 1;
    ll_act *x = ll_buf(m, (size_t)N * C);
    be->embed_fwd(be, x, prev_tok, ACT(m, m->wact, m->dec_emb), m->pos_table, LL_PAD + 1 + t, sqrt((real)C), N, 1, C,
                  LL_PAD);
    ll_act *qkv = ll_buf(m, (size_t)N * 3 * C), *ctx = ll_buf(m, (size_t)N * C), *s = ll_buf(m, (size_t)N * C);
    /* DLCL: entries of this position and the combined input of each layer */
    const int dl = ll_dlcl_on(m, 1);
    ll_act **ent = dl ? ll_arena_alloc(&m->meta, sizeof(ll_act *) * (hp->Ld + 1)) : NULL;
    if (dl) {
        ent[0] = dlcl_entry(m, 0, x, N);
        x = dlcl_row(m, 0, ent, N);
    }
    for (int l = 0; l < hp->Ld; l++) {
        const ll_layer_offsets *L = &m->dec[l];
        const ll_layer_ctl *ctl = &m->dec_ctl[l];
        void *const *pk = d->packed + (size_t)l * LL_DEC_PACKED;
        if (ctl->skip || ll_layer_off(ctl)) { /* not computed; its cache stays unused */
            if (dl) { /* LayerDrop: identity, entry E(x); latent z = 0: the entry is the input */
                ent[l + 1] = ctl->skip ? dlcl_entry(m, l + 1, x, N) : x;
                x = dlcl_row(m, l + 1, ent, N);
            } else if (!ctl->skip) { /* latent z = 0 as training computes it */
                x = off_layer(m, L, x, N);
            }
            continue;
        }
        const ll_act *x_in = x; /* the layer's input (DLCL entry gate) */
        const real *const g[2] = {ctl->gate, hp->rezero ? m->params + m->rezero_alpha[1][l] : NULL};
        /* self-attention over the cache */
        const ll_act *u = sub_input(m, x, L->ln1_w, L->ln1_b, N);
        dec_linear(m, pk[PK_QKV], qkv, u, N, C, 3 * C, L->qkv_w, L->qkv_b, 0);
        ll_act *cache = d->self_kv[l];
        for (int n = 0; n < N; n++)
            be->copy(be, ACT(m, cache, ((size_t)n * d->max_T + t) * 2 * C), ACT(m, qkv, (size_t)n * 3 * C + C),
                     ACT_BYTES(m, 2 * C));
        /* no backward follows: lse NULL */
        be->attention_fwd(be, ctx, NULL, qkv, 3 * C, cache, ACT(m, cache, C), 2 * C, d->key_len, N, 1, d->max_T, H,
                          Dh, 0, 0, NULL, 0);
        dec_linear(m, pk[PK_O], s, ctx, N, C, C, L->o_w, L->o_b, 0);
        x = residual(m, x, s, g, L->ln1_w, L->ln1_b, N);
        /* cross-attention (branch off: pre-norm identity, post-norm LN(x)) */
        if (ctl->skip_cross) {
            if (hp->post_norm) {
                ll_act *z = ll_buf(m, (size_t)N * C);
                norm(m, z, x, L->ln2_w, L->ln2_b, N);
                x = z;
            }
        } else {
            u = sub_input(m, x, L->ln2_w, L->ln2_b, N);
            ll_act *q = ll_buf(m, (size_t)N * C);
            dec_linear(m, pk[PK_CQ], q, u, N, C, C, L->cq_w, L->cq_b, 0);
            be->attention_fwd(be, ctx, NULL, q, C, d->cross_kv[l], ACT(m, d->cross_kv[l], C), 2 * C,
                              d->sent_src_len, d->B, d->beam, d->S, H, Dh, 0, 0, NULL, 0);
            dec_linear(m, pk[PK_CO], s, ctx, N, C, C, L->co_w, L->co_b, 0);
            x = residual(m, x, s, g, L->ln2_w, L->ln2_b, N);
        }
        /* FFN */
        u = sub_input(m, x, L->ln3_w, L->ln3_b, N);
        ll_act *h = ll_buf(m, (size_t)N * hp->F);
        dec_linear(m, pk[PK_FC1], h, u, N, C, hp->F, L->fc1_w, L->fc1_b, 1);
        dec_linear(m, pk[PK_FC2], s, h, N, hp->F, C, L->fc2_w, L->fc2_b, 0);
        x = residual(m, x, s, g, L->ln3_w, L->ln3_b, N);
        if (dl) {
            ent[l + 1] = ll_dlcl_gate_entry(m, dlcl_entry(m, l + 1, x, N), x_in, ctl->gate, (size_t)N * C, NULL);
            x = dlcl_row(m, l + 1, ent, N);
        }
    }
    if (!hp->post_norm && !hp->rezero) {
        ll_act *z = ll_buf(m, (size_t)N * C);
        norm(m, z, x, m->dec_ln_w, m->dec_ln_b, N);
        x = z;
    }
    /* activations in real's dtype: straight into logp; else in the arena, then converted */
    const int direct = ll_act_is_real(be);
    ll_act *lg = direct ? (ll_act *)logp : ll_buf(m, (size_t)N * hp->V);
    dec_linear(m, d->packed[(size_t)hp->Ld * LL_DEC_PACKED], lg, x, N, C, hp->V, m->out_proj, 0, 0);
    be->log_softmax(be, lg, N, hp->V);
    if (!direct) be->convert(be, logp, LL_REAL_DTYPE, lg, be->act, (size_t)N * hp->V);
    d->t++;
    ll_arena_release(&m->arena, mk);
    ll_arena_release(&m->meta, mk_meta);
}

void ll_decode_reorder(ll_model *m, ll_dec_state *d, const int *from) {
    ll_backend *be = m->be;
    /* cross K/V are per sentence, so rows may only move within their sentence */
    for (int n = 0; n < d->N; n++)
        if (from[n] / d->beam != n / d->beam) ll_die("decode: reorder moves row %d across sentences", from[n]);
    const int C = m->hp.C;
    const size_t row = (size_t)d->max_T * 2 * C, used = ACT_BYTES(m, (size_t)d->t * 2 * C);
    /* Only rows that change are copied: first every source row that some moved
     * row reads (into scratch), then the moved rows from scratch. */
    for (int l = 0; l < m->hp.Ld; l++) {
        if (m->dec_ctl[l].skip || ll_layer_off(&m->dec_ctl[l])) continue; /* no cache to keep */
        ll_act *c = d->self_kv[l];
        for (int n = 0; n < d->N; n++)
            if (from[n] != n) be->copy(be, ACT(m, d->scratch_kv, n * row), ACT(m, c, from[n] * row), used);
        for (int n = 0; n < d->N; n++)
            if (from[n] != n) be->copy(be, ACT(m, c, n * row), ACT(m, d->scratch_kv, n * row), used);
    }
}

void ll_decode_end(ll_model *m, ll_dec_state *d) {
    if (!d) return;
    for (int l = 0; l < m->hp.Ld; l++) {
        m->be->free(m->be, d->self_kv[l]);
        m->be->free(m->be, d->cross_kv[l]);
    }
    m->be->free(m->be, d->scratch_kv);
    if (d->own_packed) unpack_decoder(m, d->packed);
    free(d->self_kv);
    free(d->cross_kv);
    free(d->sent_src_len);
    free(d->key_len);
    free(d);
}

void ll_decode_compact(ll_model *m, ll_dec_state *d, const int *keep, int n_keep) {
    ll_backend *be = m->be;
    const int C = m->hp.C, beam = d->beam;
    const size_t srow = (size_t)d->max_T * 2 * C, crow = (size_t)d->S * 2 * C, used = (size_t)d->t * 2 * C;
    for (int j = 0; j < n_keep; j++) {
        const int b = keep[j];
        if (b >= d->B || (j > 0 && b <= keep[j - 1]) || b < j)
            ll_die("decode: compact needs ascending sentence indices below %d", d->B);
        if (b == j) continue;
        /* ascending keep: destination rows lie below their sources, so each copy
         * reads a row that is not overwritten before it is read */
        for (int l = 0; l < m->hp.Ld; l++) {
            be->copy(be, ACT(m, d->cross_kv[l], j * crow), ACT(m, d->cross_kv[l], b * crow), ACT_BYTES(m, crow));
            for (int r = 0; r < beam; r++)
                be->copy(be, ACT(m, d->self_kv[l], (j * beam + r) * srow), ACT(m, d->self_kv[l], (b * beam + r) * srow),
                         ACT_BYTES(m, used));
        }
        d->sent_src_len[j] = d->sent_src_len[b];
    }
    d->B = n_keep;
    d->N = n_keep * beam;
}
