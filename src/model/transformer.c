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
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

/* ---- stacks ---- */

static ll_act *embed(ll_model *m, ll_stack_run *r) {
    ll_backend *be = m->be;
    const ll_pass *p = &r->p;
    const int C = m->hp.C, N = p->B * p->T;
    const size_t emb = r->stack ? m->dec_emb : m->enc_emb;
    ll_act *x = ll_buf(m, (size_t)N * C);
    /* positions start at pad + 1 = 2, as in fairseq (incremental decoding: the step's position) */
    be->embed_fwd(be, x, r->tok, ACT(m, m->wact, emb), m->pos_table, LL_PAD + 1, p->inc ? p->inc->t : NULL,
                  sqrt((real)C), N, p->T, C, LL_PAD);
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
    r->blocks = ll_arena_alloc(&m->meta, sizeof(ll_block) * (r->L * r->per_layer + 1));
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

static int has_final_ln(const ll_model *m) { return !m->hp.post_norm && !m->hp.rezero; }

ll_act *ll_stack_run_fwd(ll_model *m, ll_stack_run *r) {
    const int C = m->hp.C, N = r->p.B * r->p.T;
    r->x0 = embed(m, r);
    r->final_done = 0;
    /* across layers only here: DLCL feeds each layer a combination, and a forward that
     * releases each layer's temporaries would free what the next layer reads */
    r->fuse_across =
        !ll_dlcl_on(m, r->stack) && !ll_layer_releases(&r->p) && !ll_layer_recomputes(m, &r->p) && has_final_ln(m);
    for (int l = 0; l < r->L; l++) /* a conditional layer's ops stay inside its branches */
        if (ll_cond_layer(m, r->blocks[l * r->per_layer].ctl)) r->fuse_across = 0;
    if (ll_dlcl_on(m, r->stack)) {
        r->top = ll_dlcl_stack_fwd(m, r);
    } else {
        ll_act *x = r->x0;
        if (ll_layer_releases(&r->p) && r->L > 0) {
            /* forward only: outputs alternate between two buffers */
            ll_act *pp[2] = {ll_buf(m, (size_t)N * C), ll_buf(m, (size_t)N * C)};
            for (int l = 0; l < r->L; l++) x = ll_layer_fwd_into(m, r, l, x, pp[l & 1]);
        } else if (ll_layer_recomputes(m, &r->p)) {
            /* activation checkpointing: every layer's input kept, its temporaries not */
            r->in = ll_arena_alloc(&m->meta, sizeof(ll_act *) * (r->L + 1));
            for (int l = 0; l < r->L; l++) {
                r->in[l] = x;
                x = ll_layer_fwd_into(m, r, l, x, ll_buf(m, (size_t)N * C));
            }
        } else {
            for (int l = 0; l < r->L; l++) x = ll_layer_fwd(m, r, l, x);
        }
        r->top = x;
    }
    if (r->final_done) return r->out; /* the last residual sum's op computed the final LN */
    r->out = r->top;
    if (has_final_ln(m)) {
        size_t w = r->stack ? m->dec_ln_w : m->enc_ln_w, b = r->stack ? m->dec_ln_b : m->enc_ln_b;
        r->out = ll_buf(m, (size_t)N * C);
        r->mean = ll_fbuf(m, N);
        r->rstd = ll_fbuf(m, N);
        m->be->layernorm_fwd(m->be, r->out, r->mean, r->rstd, r->top, m->params + w, m->params + b, N, C);
    }
    return r->out;
}

void ll_stack_run_bwd(ll_model *m, ll_stack_run *r, ll_act *dout) {
    ll_backend *be = m->be;
    const int C = m->hp.C, N = r->p.B * r->p.T;
    const size_t n = (size_t)N * C;
    ll_act *dtop = dout;
    if (has_final_ln(m)) {
        size_t w = r->stack ? m->dec_ln_w : m->enc_ln_w, b = r->stack ? m->dec_ln_b : m->enc_ln_b;
        dtop = ll_zeros(m, n);
        be->layernorm_bwd(be, dtop, m->grads + w, m->grads + b, dout, r->top, m->params + w, r->mean, r->rstd, N, C);
    }
    ll_act *dx0;
    if (ll_dlcl_on(m, r->stack)) {
        dx0 = ll_zeros(m, n);
        ll_dlcl_stack_bwd(m, r, dtop, dx0);
    } else {
        dx0 = ll_buf(m, n);
        /* Layers go in groups of ll_layer_join_every: one be->join at a group's end, so the weight
         * gradients beside the chain (ll_gemm_desc.side) overlap the next layers' backwards, not
         * only the rest of their own.  Until that join a group's layers keep their temporaries
         * and the gradients they read: the gradient between layers is a temporary inside a group,
         * and a group's last layer writes it into one of two buffers that alternate between
         * groups (the next group reads it, the one after overwrites it).  The gradient hook (the
         * reductions of data parallelism) hears of a layer once its group joined. */
        const int every = ll_layer_join_every(m);
        ll_act *pp[2] = {ll_buf(m, n), r->L > 1 ? ll_buf(m, n) : NULL};
        ll_act *dy = dtop;
        ll_arena_mark mk = ll_arena_get_mark(&m->arena);
        int in_group = 0, groups = 0;
        for (int l = r->L - 1; l >= 0; l--) {
            if (in_group == 0) mk = ll_arena_get_mark(&m->arena);
            const int ends = ++in_group == every || l == 0;
            ll_act *dx = l == 0 ? dx0 : ends ? pp[groups & 1] : ll_buf(m, n);
            if (ll_layer_recomputes(m, &r->p)) ll_layer_fwd(m, r, l, r->in[l]); /* its temporaries again */
            ll_layer_bwd(m, r, l, dy, dx); /* overwrites dx */
            if (ends) {
                if (be->join) be->join(be);
                ll_arena_release(&m->arena, mk);
                for (int k = l + in_group - 1; k >= l && r->last_pass && m->grad_hook; k--)
                    m->grad_hook(m->grad_hook_ctx, LL_GRAD_LAYER, r->stack, k);
                in_group = 0;
                groups++;
            }
            dy = dx;
        }
        if (r->L == 0) be->copy(be, dx0, dtop, ACT_BYTES(m, n));
    }
    /* (the layers joined; with none, the tied output projection's gradient beside: ll_linear_bwd) */
    if (be->join) be->join(be);
    if (r->emb_mask) be->dropout_bwd(be, dx0, r->emb_mask, n, m->hp.dropout);
    const size_t emb = r->stack ? m->dec_emb : m->enc_emb;
    ll_model_grad_take_fresh(m, emb); /* a tied output projection's matmul must add to this, not overwrite it */
    be->embed_bwd(be, m->grads + emb, dx0, r->tok, sqrt((real)C), N, C, LL_PAD);
}

/* ---- passes ---- */

static ll_pass enc_pass(const ll_batch *b, const ll_dev_batch *db, uint64_t seed, uint64_t step, int train,
                        int grad) {
    return (ll_pass){.B = b->B, .T = b->S, .S = b->S, .self_len = db->src_len, .src_len = db->src_len,
                     .train = train, .no_grad = !grad, .seed = seed, .rng_step = step, .rng_step_at = db->rng_step,
                     .stack = 0, .row0 = b->row0};
}

static ll_pass dec_pass(const ll_batch *b, const ll_dev_batch *db, uint64_t seed, uint64_t step, int train,
                        int grad, const ll_act *enc_out) {
    return (ll_pass){.B = b->B, .T = b->T, .S = b->S, .self_len = db->tgt_len, .src_len = db->src_len,
                     .enc_out = enc_out, .train = train, .no_grad = !grad, .seed = seed, .rng_step = step,
                     .rng_step_at = db->rng_step, .stack = 1,
                     .row0 = b->row0};
}

/* Pack the batch on the host and upload it in one transfer (arena memory):
 * the step's scalars (ll_dev_batch), the tokens, the lengths. */
#define BATCH_HEAD 16 /* double ald_w, uint32 rng step, 4 bytes of padding; then the draws */

/* With drop_conds, the step's LayerDrop and cross-attention drop draws follow
 * the head: per layer of each control array, the bytes !skip and !skip_cross,
 * which the graph's conditionals read (ll_layer_ctl.run_at/cross_at). */
static ll_layer_ctl *draw_ctls(ll_model *m, int i, int *L) {
    *L = i ? m->hp.Ld : m->hp.Le;
    return i == 0 ? m->enc_ctl : i == 1 ? m->dec_ctl : m->obj.ddr_dec_ctl;
}
static size_t draws_bytes(const ll_model *m) {
    if (!m->drop_conds) return 0;
    const size_t n = 2 * ((size_t)m->hp.Le + m->hp.Ld + (m->obj.ddr_dec_ctl ? m->hp.Ld : 0));
    return (n + 15) & ~(size_t)15;
}
static void draws_write(ll_model *m, uint8_t *h) {
    for (int i = 0, L; i < 3; i++) {
        const ll_layer_ctl *c = draw_ctls(m, i, &L);
        for (int l = 0; c && l < L; l++, h += 2) h[0] = !c[l].skip, h[1] = !c[l].skip_cross;
    }
}
static void draws_point(ll_model *m, const uint8_t *d) {
    for (int i = 0, L; i < 3; i++) {
        ll_layer_ctl *c = draw_ctls(m, i, &L);
        for (int l = 0; c && l < L; l++, d += 2) {
            c[l].run_at = c[l].may_skip ? d : NULL;
            c[l].cross_at = c[l].may_skip_cross ? d + 1 : NULL;
        }
    }
}
ll_dev_batch ll_batch_upload(ll_model *m, const ll_batch *b, int ald, uint64_t seed, uint64_t step) {
    const size_t ns = (size_t)b->B * b->S, nt = (size_t)b->B * b->T;
    const size_t ntok = ns + 2 * nt + (ald ? 2 * ns : 0);
    const size_t head = BATCH_HEAD + draws_bytes(m);
    const size_t bytes = head + sizeof(int32_t) * ntok + 2 * sizeof(int) * (size_t)b->B;
    ll_fwd_state *st = m->st;
    if (st->stage_cap < bytes) {
        st->stage = ll_realloc(st->stage, bytes);
        st->stage_cap = bytes;
    }
    const double ald_w = b->B > 0 ? m->obj.ald_weight * b->n_tgt_tokens / (double)b->B : 0;
    const uint32_t rng_step = (uint32_t)step;
    memset(st->stage, 0, head);
    memcpy(st->stage, &ald_w, sizeof ald_w);
    memcpy((char *)st->stage + sizeof ald_w, &rng_step, sizeof rng_step);
    if (m->drop_conds) draws_write(m, (uint8_t *)st->stage + BATCH_HEAD);
    int32_t *h = (int32_t *)((char *)st->stage + head);
    memcpy(h, b->src, sizeof(int32_t) * ns);
    memcpy(h + ns, b->tgt_in, sizeof(int32_t) * nt);
    memcpy(h + ns + nt, b->tgt_out, sizeof(int32_t) * nt);
    if (ald) ll_unk_corrupt(m, b, seed, step, h + ns + 2 * nt, h + 2 * ns + 2 * nt);
    int *lens = (int *)(h + ntok);
    memcpy(lens, b->src_len, sizeof(int) * b->B);
    memcpy(lens + b->B, b->tgt_len, sizeof(int) * b->B);
    char *d = ll_arena_alloc(&m->arena, bytes);
    m->be->upload(m->be, d, st->stage, bytes);
    if (m->drop_conds) draws_point(m, (const uint8_t *)d + BATCH_HEAD);
    const int32_t *t = (const int32_t *)(d + head);
    const int *l = (const int *)(t + ntok);
    return (ll_dev_batch){.src = t, .tgt_in = t + ns, .tgt_out = t + ns + nt,
                          .ald_src = {ald ? t + ns + 2 * nt : NULL, ald ? t + 2 * ns + 2 * nt : NULL},
                          .src_len = l, .tgt_len = l + b->B, .rng_step = (const uint32_t *)(d + sizeof ald_w),
                          .ald_w = (const double *)d};
}

static ll_act *project(ll_model *m, const ll_act *h, int N) {
    ll_act *logits = ll_buf(m, (size_t)N * m->hp.V);
    const ll_gemm_desc g = ll_gemm_xwt(m, logits, h, N, m->hp.C, m->hp.V, m->out_proj);
    m->be->gemm(m->be, &g);
    return logits;
}

/* d h = dlogits E; dE += dlogits^T h.  Returns d h (fresh buffer). */
static ll_act *project_bwd(ll_model *m, const ll_act *dlogits, const ll_act *h, int N) {
    const int C = m->hp.C, V = m->hp.V;
    ll_act *dh = ll_buf(m, (size_t)N * C);
    ll_linear_bwd(m, dh, 0, dlogits, h, N, C, V, m->out_proj, 0);
    return dh;
}

/* Distinct seeds for the extra passes, so their dropout masks are independent. */
#define SEED_DDR 0x9E3779B97F4A7C15ULL
#define SEED_ALD_POS 0xD1B54A32D192ED03ULL
#define SEED_ALD_NEG 0x8CB92BA72F3D8DD7ULL

/* d(encoder output) is summed over every decoder layer's cross-attention (64
 * to 128 terms in a deep model, DDR included): an fp32 accumulator, rounded
 * once to the activation dtype here, where the encoder's backward reads it. */
static real *enc_grad_acc(ll_model *m, const ll_batch *b) {
    const size_t n = (size_t)b->B * b->S * m->hp.C;
    real *d = ll_fbuf(m, n);
    m->be->memset0(m->be, d, n * sizeof(real));
    return d;
}
static ll_act *enc_grad_act(ll_model *m, real *d, const ll_batch *b) {
    if (ll_act_is_real(m->be)) return (ll_act *)d;
    const size_t n = (size_t)b->B * b->S * m->hp.C;
    ll_act *a = ll_buf(m, n);
    m->be->convert(m->be, a, m->be->act, d, LL_REAL_DTYPE, n);
    return a;
}

/* dL/dgate accumulators (the DDR pass's controls share them): cleared per backward. */
static void zero_dgates(ll_model *m) {
    for (int s = 0; s < 2; s++)
        m->be->memset0(m->be, m->dgate_buf[s], (size_t)((s ? m->hp.Ld : m->hp.Le) + 1) * sizeof(real));
}

/* A step's family (FNV-1a): what decides its sequence of ops besides the model
 * and the shapes -- the objectives and which blocks run.  A new step's graph is
 * updated into a kept graph of its family (CUDA updates a graph whose nodes
 * have the same types in the same order, whatever their kernels and arguments);
 * the fingerprint (run_graph) says whether a kept graph is the step itself. */
static uint64_t ctl_bits(const ll_model *m, const ll_layer_ctl *c) {
    /* a draw queued as a conditional is data, not structure */
    const int skip = c->skip && !ll_cond_layer(m, c), cross = c->skip_cross && !(m->cond_active && c->cross_at);
    return (uint64_t)(skip | cross << 1 | c->off << 2 | (c->gate != NULL) << 3 | (c->dgate != NULL) << 4);
}
static uint64_t step_key(const ll_model *m, int ddr, int ald) {
    uint64_t h = 1469598103934665603ull;
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
    MIX(ddr), MIX(ald);
    for (int l = 0; l < m->hp.Le; l++) MIX(ctl_bits(m, &m->enc_ctl[l]));
    for (int l = 0; l < m->hp.Ld; l++) MIX(ctl_bits(m, &m->dec_ctl[l]));
    for (int l = 0; m->obj.ddr_dec_ctl && l < m->hp.Ld; l++) MIX(ctl_bits(m, &m->obj.ddr_dec_ctl[l]));
#undef MIX
    return h;
}

/* The ops of a step on the uploaded batch db (forward, and backward when
 * do_backward); losses into m->stats.  No host transfer: one CUDA graph. */
static void run_ops(ll_model *m, const ll_batch *b, const ll_dev_batch *dbp, uint64_t seed, uint64_t step, int train,
                    int do_backward) {
    ll_backend *be = m->be;
    ll_fwd_state *st = m->st;
    const int Nt = b->B * b->T, V = m->hp.V, C = m->hp.C;
    const int ddr = train && m->obj.ddr_alpha > 0, ald = train && m->obj.ald_weight > 0;
    const ll_dev_batch db = *dbp;

    /* clean pass */
    ll_pass pe = enc_pass(b, &db, seed, step, train, do_backward);
    ll_stack_run_init(m, &st->enc[0], 0, &pe, db.src);
    ll_act *enc_out = ll_stack_run_fwd(m, &st->enc[0]);
    ll_pass pd = dec_pass(b, &db, seed, step, train, do_backward, enc_out);
    ll_stack_run_init(m, &st->dec[0], 1, &pd, db.tgt_in);
    ll_act *h0 = ll_stack_run_fwd(m, &st->dec[0]);
    ll_act *lg0 = st->logits[0] = project(m, h0, Nt);
    ll_act *lp0 = NULL, *lp1 = NULL, *h1 = NULL, *lg1 = NULL;
    if (ddr) {
        ll_pass pd1 = dec_pass(b, &db, seed ^ SEED_DDR, step, train, do_backward, enc_out);
        pd1.ctl = m->obj.ddr_dec_ctl;
        ll_stack_run_init(m, &st->dec[1], 1, &pd1, db.tgt_in);
        h1 = ll_stack_run_fwd(m, &st->dec[1]);
        lg1 = st->logits[1] = project(m, h1, Nt);
        lp0 = ll_buf(m, (size_t)Nt * V);
        lp1 = ll_buf(m, (size_t)Nt * V);
        be->copy(be, lp0, lg0, ACT_BYTES(m, (size_t)Nt * V));
        be->copy(be, lp1, lg1, ACT_BYTES(m, (size_t)Nt * V));
        be->log_softmax(be, lp0, Nt, V);
        be->log_softmax(be, lp1, Nt, V);
    }
    be->xent_fwd_bwd(be, lg0, db.tgt_out, Nt, V, m->hp.label_smoothing, LL_PAD, 1, m->stats + LL_ST_LOSS);
    if (ddr) { /* R-Drop: CE on both copies + alpha * symmetric KL */
        be->xent_fwd_bwd(be, lg1, db.tgt_out, Nt, V, m->hp.label_smoothing, LL_PAD, 1, m->stats + LL_ST_CE2);
        be->sym_kl(be, lp0, lp1, lg0, lg1, db.tgt_out, Nt, V, LL_PAD, m->obj.ddr_alpha, m->stats + LL_ST_DDR);
    }
    ll_act *dh_ald[3] = {NULL, NULL, NULL};
    if (ald) {
        /* corrupted sources (uploaded with the batch): light (gamma) and heavy (1 - gamma) UNK replacement */
        ll_act *hs[3] = {h0, NULL, NULL};
        const uint64_t seeds[2] = {seed ^ SEED_ALD_POS, seed ^ SEED_ALD_NEG};
        for (int i = 0; i < 2; i++) {
            ll_pass e = enc_pass(b, &db, seeds[i], step, train, do_backward);
            ll_stack_run_init(m, &st->enc[1 + i], 0, &e, db.ald_src[i]);
            ll_act *eo = ll_stack_run_fwd(m, &st->enc[1 + i]);
            ll_pass d = dec_pass(b, &db, seeds[i], step, train, do_backward, eo);
            ll_stack_run_init(m, &st->dec[2 + i], 1, &d, db.tgt_in);
            hs[1 + i] = ll_stack_run_fwd(m, &st->dec[2 + i]);
        }
        ll_ald_loss(m, b, &db, hs, do_backward ? dh_ald : NULL);
    }
    if (!do_backward) return;

    zero_dgates(m);
    for (int i = 0; i < 4; i++) st->dec[i].last_pass = i == (ald ? 3 : ddr ? 1 : 0); /* per-layer grad hooks */
    for (int i = 0; i < 3; i++) st->enc[i].last_pass = i == (ald ? 2 : 0);
    real *d_enc = enc_grad_acc(m, b);
    ll_act *dh = project_bwd(m, lg0, h0, Nt);
    if (dh_ald[0]) be->acc(be, dh, dh_ald[0], (size_t)Nt * C);
    st->dec[0].p.d_enc_out = d_enc;
    ll_stack_run_bwd(m, &st->dec[0], dh);
    if (ddr) {
        ll_act *dh1 = project_bwd(m, lg1, h1, Nt);
        st->dec[1].p.d_enc_out = d_enc;
        ll_stack_run_bwd(m, &st->dec[1], dh1);
    }
    if (!ald && m->grad_hook) m->grad_hook(m->grad_hook_ctx, LL_GRAD_DEC, 1, -1); /* the last decoder pass is done */
    ll_stack_run_bwd(m, &st->enc[0], enc_grad_act(m, d_enc, b));
    for (int i = 0; ald && i < 2; i++) {
        real *de = enc_grad_acc(m, b);
        st->dec[2 + i].p.d_enc_out = de;
        ll_stack_run_bwd(m, &st->dec[2 + i], dh_ald[1 + i]);
        if (i == 1 && m->grad_hook) m->grad_hook(m->grad_hook_ctx, LL_GRAD_DEC, 1, -1);
        ll_stack_run_bwd(m, &st->enc[1 + i], enc_grad_act(m, de, b));
    }
    if (m->grad_hook) m->grad_hook(m->grad_hook_ctx, LL_GRAD_ENC, 0, -1);
}

/* run_ops on the fingerprinting wrapper (shadow: hashed, not run); its hash. */
static uint64_t run_hashed(ll_model *m, ll_backend *be, int shadow, const ll_batch *b, const ll_dev_batch *db,
                           uint64_t seed, uint64_t step, int train) {
    ll_backend_fingerprint_shadow(m->graph_fp, shadow);
    ll_backend_fingerprint_take(m->graph_fp);
    m->be = m->graph_fp;
    run_ops(m, b, db, seed, step, train, 1);
    m->be = be;
    return ll_backend_fingerprint_take(m->graph_fp);
}

/* A training step as a CUDA graph.  First a shadow run: the host side of the
 * step with its ops hashed, not run (the Philox step and the batch-dependent
 * scalars are in backend memory, so the ops of two steps of the same shape
 * and structure are the same).  A kept graph of that hash is launched as it
 * is; otherwise the host state the shadow run changed is put back and the
 * step is captured.  0: done; -1: graphs are off, run the ops as queued. */
static int run_graph(ll_model *m, const ll_batch *b, const ll_dev_batch *db, uint64_t seed, uint64_t step,
                     int train) {
    ll_backend *be = m->be;
    const int ddr = train && m->obj.ddr_alpha > 0, ald = train && m->obj.ald_weight > 0;
    if (!m->graph_fp && !(m->graph_fp = ll_backend_fingerprint(be))) ll_die("out of memory");
    const ll_arena_mark act = ll_arena_get_mark(&m->arena), meta = ll_arena_get_mark(&m->meta);
    uint8_t *fresh = NULL;
    if (m->grad_fresh) {
        fresh = ll_malloc((size_t)m->n_table);
        memcpy(fresh, m->grad_fresh, (size_t)m->n_table);
    }
    int rc = be->graph_replay(be, run_hashed(m, be, 1, b, db, seed, step, train));
    if (rc != 0) { /* the state before the shadow run */
        ll_arena_release(&m->arena, act);
        ll_arena_release(&m->meta, meta);
        if (fresh) memcpy(m->grad_fresh, fresh, (size_t)m->n_table);
    }
    if (rc == 1) {
        rc = be->graph_begin(be);
        if (rc == 0) {
            const uint64_t fp = run_hashed(m, be, 0, b, db, seed, step, train);
            rc = be->graph_end(be, fp, step_key(m, ddr, ald));
        }
        if (rc != 0) { /* nothing ran: the state before the capture, and the ops as queued */
            ll_arena_release(&m->arena, act);
            ll_arena_release(&m->meta, meta);
            if (fresh) memcpy(m->grad_fresh, fresh, (size_t)m->n_table);
            rc = -1;
        }
    }
    free(fresh);
    if (rc < 0) { /* off for good: no more shadow runs, and skipped ops are not queued */
        m->graphs = 0;
        if (m->drop_conds == 1) m->drop_conds = 0;
    }
    return rc;
}

/* Forward (and backward when do_backward) of one batch; losses into m->stats. */
static void run(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t step, int train, int do_backward) {
    const int ald = train && m->obj.ald_weight > 0;
    ll_arena_reset(&m->arena);
    ll_arena_reset(&m->meta);
    const ll_dev_batch db = ll_batch_upload(m, b, ald, seed, step);
    /* from here on no host transfer: the rest can be one CUDA graph */
    m->cond_active = train && do_backward && m->drop_conds;
    if (do_backward && m->graphs && m->be->graph_begin && m->be->graph_replay &&
        run_graph(m, b, &db, seed, step, train) == 0) {
        m->cond_active = 0;
        return;
    }
    m->cond_active = train && do_backward && m->drop_conds; /* (graphs gone off: drop_conds 1 is cleared) */
    if (m->cond_active) { /* the graph's ops, each conditional's host branch run (the wrapper drops the other) */
        ll_backend *be = m->be;
        if (!m->graph_fp && !(m->graph_fp = ll_backend_fingerprint(be))) ll_die("out of memory");
        run_hashed(m, be, 0, b, &db, seed, step, train);
        m->cond_active = 0;
        return;
    }
    run_ops(m, b, &db, seed, step, train, do_backward);
}

void ll_loss_from_stats(const double *st, long ntokens, ll_loss_stats *out) {
    *out = (ll_loss_stats){.loss = st[LL_ST_LOSS], .nll = st[LL_ST_NLL], .ntokens = ntokens, .ce2 = st[LL_ST_CE2],
                           .ddr = st[LL_ST_DDR], .ald = st[LL_ST_ALD]};
}

void ll_model_step(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t rng_step, int train,
                   ll_loss_stats *out) {
    if (out) ll_model_stats_zero(m);
    run(m, b, seed, rng_step, train, train);
    if (out) {
        double st[LL_ST_N];
        ll_model_stats_read(m, st, NULL);
        ll_loss_from_stats(st, b->n_tgt_tokens, out);
    }
}

double ll_model_loss(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t rng_step, int train) {
    double st[LL_ST_N];
    ll_model_stats_zero(m);
    run(m, b, seed, rng_step, train, 0);
    ll_model_stats_read(m, st, NULL);
    return st[LL_ST_LOSS] + st[LL_ST_CE2] + st[LL_ST_DDR] + st[LL_ST_ALD];
}

/* The teacher-forced forward without dropout: log-probabilities [B*T, V] in the activation dtype. */
static ll_act *forced_logprobs(ll_model *m, const ll_batch *b, ll_dev_batch *db) {
    ll_fwd_state *st = m->st;
    ll_arena_reset(&m->arena);
    ll_arena_reset(&m->meta);
    *db = ll_batch_upload(m, b, 0, 0, 0);
    ll_pass pe = enc_pass(b, db, 0, 0, 0, 0);
    ll_stack_run_init(m, &st->enc[0], 0, &pe, db->src);
    ll_act *enc_out = ll_stack_run_fwd(m, &st->enc[0]);
    ll_pass pd = dec_pass(b, db, 0, 0, 0, 0, enc_out);
    ll_stack_run_init(m, &st->dec[0], 1, &pd, db->tgt_in);
    ll_act *h = ll_stack_run_fwd(m, &st->dec[0]);
    ll_act *logits = project(m, h, b->B * b->T);
    m->be->log_softmax(m->be, logits, b->B * b->T, m->hp.V);
    return logits;
}

/* forced_logprobs of m, mixed with its ensemble members' (ll_model_ensemble) as a decode step mixes them */
static ll_act *forced_logprobs_ens(ll_model *m, const ll_batch *b, ll_dev_batch *db) {
    ll_act *logp = forced_logprobs(m, b, db);
    for (int j = 0; j < m->n_ens; j++) {
        ll_dev_batch dj;
        const ll_act *lj = forced_logprobs(m->ens[j], b, &dj); /* (in the member's own arena) */
        m->be->ensemble_mix(m->be, logp, lj, (size_t)b->B * b->T * m->hp.V, m->ens_b[j], j == m->n_ens - 1 ? m->ens_c : 0);
    }
    return logp;
}

real *ll_model_logprobs(ll_model *m, const ll_batch *b) {
    ll_dev_batch db;
    ll_act *logp = forced_logprobs_ens(m, b, &db);
    if (ll_act_is_real(m->be)) return (real *)logp;
    const size_t n = (size_t)b->B * b->T * m->hp.V;
    real *lp = ll_fbuf(m, n); /* the caller reads reals */
    m->be->convert(m->be, lp, LL_REAL_DTYPE, logp, m->be->act, n);
    return lp;
}

void ll_model_token_logprobs(ll_model *m, const ll_batch *b, real *out) {
    ll_dev_batch db;
    ll_act *logp = forced_logprobs_ens(m, b, &db);
    const int N = b->B * b->T;
    real *picked = ll_fbuf(m, N);
    m->be->pick_logp(m->be, picked, logp, db.tgt_out, N, m->hp.V, LL_PAD);
    m->be->download(m->be, out, picked, sizeof(real) * N);
}
