/* Incremental decoding with a key/value cache (fairseq's incremental_state).
 * A step runs the training code itself -- the same stack, blocks and DLCL
 * (transformer.c, layers.c, dlcl.c) with dropout off -- on one position per
 * row, with an ll_inc in the pass: self-attention appends to the cache and
 * attends over it, cross-attention reads keys/values projected once per
 * sentence, and linear layers use weights packed once per decode.
 * tests/gradcheck/test_decode_cache.c checks it against full recomputation.
 *
 * Host <-> backend per step: one upload (tokens, key lengths, a pending beam
 * reorder, and for ll_decode_step_topk the row scores and length modes) and
 * one download (the log-probabilities, or only k candidates per sentence). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

/* Entries of a packed array: the decoder's layers and the output projection; with int8 also
 * the encoder's layers and each decoder layer's cross-attention keys and values (after them:
 * enc_packed, ckv_packed). */
static int packed_count(const ll_model *m, int q8) {
    const ll_hparams *hp = &m->hp;
    return hp->Ld * LL_DEC_PACKED + 1 + (q8 ? hp->Le * LL_DEC_PACKED + hp->Ld : 0);
}
/* (an array's count sits before its first entry: what it was packed for, whatever
 * m->decode_int8 says by the time it is read or freed) */
static int packed_n(void *const *pk) { return (int)(uintptr_t)pk[-1]; }
static void *const *enc_packed(const ll_model *m, void *const *pk) {
    return pk && packed_n(pk) == packed_count(m, 1) ? pk + m->hp.Ld * LL_DEC_PACKED + 1 : NULL;
}
static const void *ckv_packed(const ll_model *m, void *const *pk, int l) {
    return pk && packed_n(pk) == packed_count(m, 1) ? pk[(m->hp.Ld + m->hp.Le) * LL_DEC_PACKED + 1 + l] : NULL;
}

/* Decoder weights packed once per decode: every step multiplies a few rows
 * by all of them (cpu_linear_packed.c explains why this pays).  With int8 the
 * encoder's and the cross-attention keys' and values' too: once per batch,
 * but in int8 the many rows go 2-4 times as fast as OpenBLAS's fp32. */
static void **pack_decoder(ll_model *m) {
    const ll_hparams *hp = &m->hp;
    const int C = hp->C, n = packed_count(m, m->decode_int8);
    void **pk = (void **)ll_calloc(n + 1, sizeof(void *)) + 1;
    pk[-1] = (void *)(uintptr_t)n;
    ll_backend *be = m->be;
    const char *env = getenv("LL_DECODE_PACKED"); /* "0": plain gemm, for A/B benchmarks */
    const int q8 = m->decode_int8;
    if (q8 && (!be->linear_pack || (env && !strcmp(env, "0"))))
        ll_die("decode: int8 weights need the CPU backend's packed linear layers (fp32 activations%s)",
               env && !strcmp(env, "0") ? "; LL_DECODE_PACKED=0 turns them off" : "");
    if (!be->linear_pack || (env && !strcmp(env, "0"))) return pk;
    for (int l = 0; l < hp->Ld; l++) {
        if (m->dec_ctl[l].skip || ll_layer_off(&m->dec_ctl[l])) continue;
        const ll_layer_offsets *L = &m->dec[l];
        void **p = pk + (size_t)l * LL_DEC_PACKED;
        p[PK_QKV] = be->linear_pack(be, m->params + L->qkv_w, 3 * C, C, q8);
        p[PK_O] = be->linear_pack(be, m->params + L->o_w, C, C, q8);
        if (!m->dec_ctl[l].skip_cross) {
            p[PK_CQ] = be->linear_pack(be, m->params + L->cq_w, C, C, q8);
            p[PK_CO] = be->linear_pack(be, m->params + L->co_w, C, C, q8);
        }
        p[PK_FC1] = be->linear_pack(be, m->params + L->fc1_w, hp->F, C, q8);
        p[PK_FC2] = be->linear_pack(be, m->params + L->fc2_w, C, hp->F, q8);
    }
    void **out = pk + hp->Ld * LL_DEC_PACKED;
    *out = be->linear_pack(be, m->params + m->out_proj, hp->V, C, q8);
    if (q8 && !*out) ll_die("decode: this backend has no int8 linear layers (the CPU backend, fp32)");
    for (int l = 0; q8 && l < hp->Le; l++) {
        if (m->enc_ctl[l].skip || ll_layer_off(&m->enc_ctl[l])) continue;
        const ll_layer_offsets *L = &m->enc[l];
        void **p = out + 1 + (size_t)l * LL_DEC_PACKED;
        p[PK_QKV] = be->linear_pack(be, m->params + L->qkv_w, 3 * C, C, q8);
        p[PK_O] = be->linear_pack(be, m->params + L->o_w, C, C, q8);
        p[PK_FC1] = be->linear_pack(be, m->params + L->fc1_w, hp->F, C, q8);
        p[PK_FC2] = be->linear_pack(be, m->params + L->fc2_w, C, hp->F, q8);
    }
    for (int l = 0; q8 && l < hp->Ld; l++)
        if (!(m->dec_ctl[l].skip || m->dec_ctl[l].skip_cross || ll_layer_off(&m->dec_ctl[l])))
            out[1 + (size_t)hp->Le * LL_DEC_PACKED + l] = be->linear_pack(be, m->params + m->dec[l].ckv_w, 2 * C, C, q8);
    return pk;
}

static void unpack_decoder(ll_model *m, void **pk) {
    if (!pk) return;
    for (int i = 0; i < packed_n(pk); i++)
        if (pk[i]) m->be->linear_unpack(m->be, pk[i]);
    free(pk - 1);
}

void ll_decode_pack(ll_model *m) {
    if (!m->dec_packed) m->dec_packed = pack_decoder(m);
    for (int j = 0; j < m->n_ens; j++) ll_decode_pack(m->ens[j]);
}

void ll_decode_unpack(ll_model *m) {
    unpack_decoder(m, m->dec_packed);
    m->dec_packed = NULL;
    for (int j = 0; j < m->n_ens; j++) ll_decode_unpack(m->ens[j]);
}

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Host staging of a step's upload, laid out for alignment: doubles first. */
static char *stage(ll_dec_state *d, size_t bytes) {
    if (d->stage_cap < bytes) {
        d->stage = ll_realloc(d->stage, bytes);
        d->stage_cap = bytes;
    }
    return d->stage;
}

ll_dec_state *ll_decode_begin(ll_model *m, const int32_t *src, const int *src_len, int B, int S, int beam,
                              int max_T) {
    ll_backend *be = m->be;
    const ll_hparams *hp = &m->hp;
    const int C = hp->C, N = B * beam;
    if (m->dec_busy) ll_die("decode: this model is already decoding a batch (one ll_dec_state at a time)");
    m->dec_busy = 1;
    ll_dec_state *d = ll_calloc(1, sizeof *d);
    *d = (ll_dec_state){.N = N, .B = B, .S = S, .beam = beam, .max_T = max_T, .t = 0};
    const char *genv = getenv("LL_CUDA_DECODE_GRAPHS"); /* "0": steps without graphs, for A/B timing */
    d->graphs = m->decode_graphs == 2 ? 2
                : m->decode_graphs == 0 && be->graph_begin && be->graph_replay && !(genv && !strcmp(genv, "0"));
    d->sent_src_len = ll_calloc(B, sizeof(int));
    memcpy(d->sent_src_len, src_len, sizeof(int) * B);
    d->from = ll_calloc(N, sizeof(int));
    d->self_kv = ll_calloc(hp->Ld ? hp->Ld : 1, sizeof(ll_act *));
    d->cross_kv = ll_calloc(hp->Ld ? hp->Ld : 1, sizeof(ll_act *));
    /* the caches and the log-probabilities in one backend buffer the model
     * keeps (grown, never shrunk): the next batch reuses warm memory */
    const size_t b_len = round64(sizeof(int) * B), b_logp = round64(ACT_BYTES(m, (size_t)N * hp->V));
    const size_t b_cross = round64(ACT_BYTES(m, (size_t)B * S * 2 * C));
    const size_t b_self = round64(ACT_BYTES(m, (size_t)N * max_T * 2 * C));
    const size_t b_scratch = round64(ACT_BYTES(m, (size_t)N * (max_T > S ? max_T : S) * 2 * C));
    const size_t b_anc = round64(sizeof(int) * (size_t)N * max_T), b_align = round64(sizeof(int32_t) * N);
    const size_t b_acc = m->n_ens ? round64(sizeof(real) * (size_t)N * S) : 0; /* (an ensemble's alignment) */
    const size_t total =
        b_len + b_logp + (size_t)hp->Ld * (b_cross + b_self) + b_scratch + 2 * b_anc + b_align + b_acc;
    if (m->dec_mem_cap < total) {
        if (m->dec_mem) be->free(be, m->dec_mem);
        m->dec_mem = be->alloc(be, total);
        m->dec_mem_cap = total;
    }
    char *mem = m->dec_mem;
    d->dev_src_len = (int *)mem;
    mem += b_len;
    d->logp = (ll_act *)mem;
    mem += b_logp;
    for (int l = 0; l < hp->Ld; l++) {
        d->cross_kv[l] = (ll_act *)mem;
        d->self_kv[l] = (ll_act *)(mem + b_cross);
        mem += b_cross + b_self;
    }
    d->scratch_kv = (ll_act *)mem;
    mem += b_scratch;
    d->anc = (int *)mem;
    d->anc_scratch = (int *)(mem + b_anc);
    d->align_dev = (int32_t *)(mem + 2 * b_anc);
    d->align_acc = b_acc ? (real *)(mem + 2 * b_anc + b_align) : NULL;
    d->align_layer = -1;
    be->upload(be, d->dev_src_len, src_len, sizeof(int) * B);

    /* encoder: the training forward (stack run) with train = 0 */
    ll_arena_reset(&m->arena);
    ll_arena_reset(&m->meta);
    int32_t *dsrc = ll_arena_alloc(&m->arena, sizeof(int32_t) * (size_t)B * S);
    be->upload(be, dsrc, src, sizeof(int32_t) * (size_t)B * S);
    d->packed = m->dec_packed ? m->dec_packed : (d->own_packed = 1, pack_decoder(m));
    ll_stack_run er;
    ll_pass p = {.B = B, .T = S, .S = S, .self_len = d->dev_src_len, .src_len = d->dev_src_len, .train = 0,
                 .no_grad = 1, .stack = 0, .packed = enc_packed(m, d->packed)};
    ll_stack_run_init(m, &er, 0, &p, dsrc);
    ll_act *enc_out = ll_stack_run_fwd(m, &er);
    /* cross-attention keys/values, projected once per sentence; a sentence's
     * beam rows attend to them together (queries [B, beam]), so they are read
     * once per step instead of once per row */
    for (int l = 0; l < hp->Ld; l++) {
        const ll_layer_offsets *L = &m->dec[l];
        const void *pk = ckv_packed(m, d->packed, l);
        if (pk)
            be->linear_packed(be, d->cross_kv[l], 2 * C, enc_out, C, pk, L->ckv_b ? m->params + L->ckv_b : NULL, B * S);
        else
            ll_linear_fwd(m, d->cross_kv[l], enc_out, B * S, C, 2 * C, L->ckv_w, L->ckv_b, 0);
    }
    ll_arena_reset(&m->arena);
    ll_arena_reset(&m->meta);
    if (m->n_ens) { /* the members encode too; a step runs each model's step (a CUDA graph each), then the mix */
        d->ens = ll_calloc(m->n_ens, sizeof(ll_dec_state *));
        for (int j = 0; j < m->n_ens; j++) {
            d->ens[j] = ll_decode_begin(m->ens[j], src, src_len, B, S, beam, max_T);
            d->ens[j]->graphs = d->graphs; /* (the first model's setting: lldecode --no-cuda-graphs) */
        }
    }
    return d;
}

/* Step 0 of a beam search needs only each sentence's first row: every row
 * starts from the same (empty) history, so given the same input token they
 * compute the same thing, and beam search keeps only row 0 alive (the others
 * carry cum = -inf).  Then the decoder runs one row per sentence. */
static int root_rows_only(const ll_dec_state *d, const int32_t *prev_tok, const double *cum) {
    if (d->t != 0 || d->beam == 1 || !cum) return 0;
    for (int r = 0; r < d->N; r++)
        if (r % d->beam && (cum[r] != -INFINITY || prev_tok[r] != prev_tok[r - r % d->beam])) return 0;
    return 1;
}

/* A step's upload in backend memory. */
typedef struct {
    const double *cum;    /* [rows] (NULL: none given) */
    const int32_t *tok;   /* [rows] */
    const int *from;      /* [N] the pending reorder (roots: each row's root) */
    const int *t;         /* the step's position */
    const uint8_t *mode;  /* [B], or [N] for a top-k per row (topk_groups) */
} step_in;

/* The top-k's groups: the sentences, or with d->topk_per_row the rows (a step of one row per
 * sentence: the same). */
static int topk_groups(const ll_dec_state *d, int roots) { return roots || !d->topk_per_row ? d->B : d->N; }

/* One upload: [cum rows doubles][tok rows][from N][t][mode bytes, one per top-k group].  roots
 * (root_rows_only): the decoder runs rows' = sentences, row b standing for row
 * b*beam (its cache row; d->logp and cum then hold B rows). */
static step_in step_upload(ll_model *m, ll_dec_state *d, const int32_t *prev_tok, const double *cum,
                           const uint8_t *mode, int roots) {
    const int N = d->N, t = d->t, beam = d->beam;
    const int rows = roots ? d->B : N, mul = roots ? beam : 1;
    if (t >= d->max_T) ll_die("decode: step %d exceeds the cache capacity %d", t, d->max_T);
    if (t + LL_PAD + 1 >= m->hp.max_pos + 2) ll_die("decode: position %d exceeds model.max_positions", t);
    const size_t nc = cum ? (size_t)rows : 0;
    const int groups = topk_groups(d, roots);
    const size_t bytes = sizeof(double) * nc + sizeof(int32_t) * ((size_t)rows + N + 1) + groups;
    char *h = stage(d, bytes);
    double *hc = (double *)h;
    int32_t *ht = (int32_t *)(hc + nc);
    int *hf = (int *)(ht + rows);
    for (int r = 0; r < rows; r++) {
        if (cum) hc[r] = cum[r * mul];
        ht[r] = prev_tok[r * mul];
    }
    /* roots: every row's position 0 is its sentence's first row's (step_ops); no
     * reorder pending: no move (graphs: one kind of step with or without one) */
    for (int r = 0; r < N; r++) hf[r] = roots ? r - r % beam : d->reorder_pending ? d->from[r] : r;
    hf[N] = t;
    for (int g = 0; mode && g < groups; g++) ((uint8_t *)(hf + N + 1))[g] = mode[groups == d->B ? g : g / beam];
    char *dev = ll_arena_alloc(&m->arena, bytes);
    m->be->upload(m->be, dev, h, bytes);
    step_in in = {.cum = cum ? (const double *)dev : NULL, .tok = (const int32_t *)(dev + sizeof(double) * nc)};
    in.from = (const int *)(in.tok + rows);
    in.t = in.from + N;
    in.mode = (const uint8_t *)(in.t + 1);
    return in;
}

static void run_step(ll_model *m, ll_dec_state *d, const step_in *in, int roots, int k, char *out, int32_t *align);

/* beam_topk's candidates over the step's log-probabilities (d->logp) into out: [score][lp][flat]. */
static void step_topk_ops(ll_model *m, ll_dec_state *d, const step_in *in, int roots, int k, char *out) {
    if (d->unk_pen != 0) /* (in d->logp: a prefix's forced <unk> reads it too, as fairseq's) */
        m->be->add_col(m->be, d->logp, roots ? d->B : d->N, m->hp.V, LL_UNK, -d->unk_pen);
    const int groups = topk_groups(d, roots);
    const size_t nk = (size_t)groups * k, o_lp = nk * sizeof(double), o_flat = o_lp + nk * sizeof(real);
    m->be->beam_topk(m->be, (double *)out, (real *)(out + o_lp), (int32_t *)(out + o_flat), d->logp, in->cum, in->mode,
                     groups, roots || d->topk_per_row ? 1 : d->beam, m->hp.V, k, d->div_groups > 1 ? d->div_groups : 1,
                     d->div_strength, LL_PAD, LL_BOS, LL_EOS);
}

/* The step's ops, no transfer among them (a CUDA graph holds them; the
 * position is read from backend memory, so every step of a shape queues the
 * same ops): the decoder on one position per row, the log-probabilities in
 * d->logp, and with k > 0 beam_topk's candidates into out. */
static void step_ops(ll_model *m, ll_dec_state *d, const step_in *in, int roots, int k, char *out, int32_t *align) {
    ll_backend *be = m->be;
    const ll_hparams *hp = &m->hp;
    const int C = hp->C, N = d->N, beam = d->beam;
    const int rows = roots ? d->B : N, mul = roots ? beam : 1; /* rows run; cache row of row r = r * mul */
    /* the pending reorder moves the rows' ancestry, not their caches; every
     * row writes position t into its own cache row.  As graphs, steps with and
     * without a reorder are one kind (identity moves), so a batch is captured
     * for fewer kinds of step. */
    const int reorder = !roots && (d->reorder_pending || d->graphs);
    be->beam_ancestry(be, d->anc, d->anc_scratch, reorder ? in->from : NULL, N, 0, in->t, d->max_T, beam);
    if (roots) /* entry 0 of every row := its root's (entry 0 of a root is itself) */
        be->beam_ancestry(be, d->anc, d->anc_scratch, in->from, N, 1, NULL, d->max_T, beam);

    ll_inc inc = {.packed = d->packed, .self_kv = d->self_kv, .cross_kv = d->cross_kv, .max_T = d->max_T,
                  .t = in->t, .sents = d->B, .beam = roots ? 1 : beam, .anc = roots ? NULL : d->anc,
                  .row_mul = mul, .sent_src_len = d->dev_src_len, .align = align, .align_layer = d->align_layer,
                  .align_acc = d->acc_to, .align_w = d->acc_w, .align_overwrite = d->acc_over};
    ll_pass p = {.B = rows, .T = 1, .S = d->S, .train = 0, .no_grad = 1, .stack = 1, .inc = &inc};
    ll_stack_run r;
    ll_stack_run_init(m, &r, 1, &p, in->tok);
    const ll_act *x = ll_stack_run_fwd(m, &r);
    /* the output projection (no bias) onto the vocabulary, or onto a shortlist's K tokens (in a
     * buffer of their own, normalized among themselves, then placed in d->logp, the rest -inf) */
    const int K = d->sl_K ? d->sl_K : hp->V;
    ll_act *lg = d->sl_K ? ll_buf(m, (size_t)rows * K) : d->logp;
    const void *pk = d->sl_K ? d->sl_packed : d->packed[(size_t)hp->Ld * LL_DEC_PACKED];
    if (pk) {
        be->linear_packed(be, lg, K, x, C, pk, NULL, rows);
    } else {
        ll_gemm_desc g = ll_gemm_xwt(m, lg, x, rows, C, K, m->out_proj);
        if (d->sl_K) g.B = d->sl_w;
        be->gemm(be, &g);
    }
    be->log_softmax(be, lg, rows, K);
    if (d->sl_K) be->expand_cols(be, d->logp, lg, d->sl_ids, rows, hp->V, K, (real)-INFINITY);
    if (k > 0) step_topk_ops(m, d, in, roots, k, out);
}

/* An ensemble's step (ll_model_ensemble): m's decoder, then each member's on the same rows, their
 * log-probabilities mixed into d->logp (ensemble_mix: log of the (weighted) mean probability), then the top-k.
 * Alignments (fairseq's): each model's attention, averaged over its heads, weighted as the mixture
 * and summed into d->align_acc in its step (attn_probs), then their arg-max (align_argmax). */
static void ens_step(ll_model *m, ll_dec_state *d, const step_in *in, const int32_t *prev_tok, int roots, int k,
                     char *out, int32_t *align) {
    if (align) d->acc_to = d->align_acc, d->acc_w = (real)exp(-m->ens_c), d->acc_over = 1;
    run_step(m, d, in, roots, 0, NULL, NULL);
    d->acc_to = NULL;
    const size_t n = (size_t)(roots ? d->B : d->N) * m->hp.V;
    for (int j = 0; j < m->n_ens; j++) {
        ll_model *e = m->ens[j];
        ll_dec_state *de = d->ens[j];
        const ll_arena_mark mk = ll_arena_get_mark(&e->arena), mk_meta = ll_arena_get_mark(&e->meta);
        const step_in ie = step_upload(e, de, prev_tok, NULL, NULL, roots);
        if (align && de->align_layer >= 0) /* (a member without cross-attention adds nothing, as in fairseq) */
            de->acc_to = d->align_acc, de->acc_w = (real)exp(m->ens_b[j] - m->ens_c), de->acc_over = 0;
        run_step(e, de, &ie, roots, 0, NULL, NULL);
        de->acc_to = NULL;
        de->logp_rows = roots ? de->B : de->N;
        m->be->ensemble_mix(m->be, d->logp, de->logp, n, m->ens_b[j], j == m->n_ens - 1 ? m->ens_c : 0);
        ll_arena_release(&e->arena, mk);
        ll_arena_release(&e->meta, mk_meta);
    }
    if (align) m->be->align_argmax(m->be, align, d->align_acc, d->dev_src_len, d->B, roots ? 1 : d->beam, d->S);
    if (k > 0) step_topk_ops(m, d, in, roots, k, out);
}

/* step_ops run through the fingerprinting wrapper (shadow: hashed, not run); their hash. */
static uint64_t step_hashed(ll_model *m, ll_dec_state *d, const step_in *in, int roots, int k, char *out,
                            int32_t *align, int shadow) {
    ll_backend *be = m->be;
    ll_backend_fingerprint_shadow(m->graph_fp, shadow);
    ll_backend_fingerprint_take(m->graph_fp);
    m->be = m->graph_fp;
    step_ops(m, d, in, roots, k, out, align);
    m->be = be;
    return ll_backend_fingerprint_take(m->graph_fp);
}

/* The step as a CUDA graph, as a training step (transformer.c, run_graph): a
 * shadow run hashes its ops; a kept graph of that hash is launched as it is,
 * else the step is captured.  Graphs of one kind of step (the first step or a
 * later one, with or without top-k) are a family: a new batch size updates the
 * kept one in place where no slot is free.  0: done; -1: graphs off, run the ops. */
static int step_graphed(ll_model *m, ll_dec_state *d, const step_in *in, int roots, int k, char *out,
                        int32_t *align) {
    ll_backend *be = m->be;
    if (!m->graph_fp && !(m->graph_fp = ll_backend_fingerprint(be))) ll_die("out of memory");
    const ll_arena_mark act = ll_arena_get_mark(&m->arena), meta = ll_arena_get_mark(&m->meta);
    int rc = be->graph_replay(be, step_hashed(m, d, in, roots, k, out, align, 1));
    if (rc == 0) return 0;
    ll_arena_release(&m->arena, act);
    ll_arena_release(&m->meta, meta);
    if (rc == 1 && be->graph_begin(be) == 0) {
        const uint64_t fp = step_hashed(m, d, in, roots, k, out, align, 0);
        const uint64_t family = 0x6c6c6465636f6465ull ^ (uint64_t)(roots | (k > 0) << 1);
        if (be->graph_end(be, fp, family) == 0) return 0;
        ll_arena_release(&m->arena, act);
        ll_arena_release(&m->meta, meta);
    }
    d->graphs = 0; /* off for this decode: the ops as queued */
    return -1;
}

static void run_step(ll_model *m, ll_dec_state *d, const step_in *in, int roots, int k, char *out, int32_t *align) {
    ll_graph_stats g0, g1;
    const int graphed = d->graphs == 1 && m->be->graph_stats;
    if (graphed) m->be->graph_stats(m->be, &g0);
    if (d->graphs != 1 || step_graphed(m, d, in, roots, k, out, align) != 0) step_ops(m, d, in, roots, k, out, align);
    if (graphed) { /* (the trainer's log tells training steps from search steps) */
        m->be->graph_stats(m->be, &g1);
        ll_graph_stats_add(&m->dec_graph_st, &g1, &g0);
    }
    d->reorder_pending = 0;
    d->t++;
}

const ll_act *ll_decode_step_dev(ll_model *m, ll_dec_state *d, const int32_t *prev_tok) {
    ll_arena_mark mk = ll_arena_get_mark(&m->arena), mk_meta = ll_arena_get_mark(&m->meta);
    const step_in in = step_upload(m, d, prev_tok, NULL, NULL, 0);
    int32_t *align = d->align_layer >= 0 ? d->align_dev : NULL;
    if (m->n_ens)
        ens_step(m, d, &in, prev_tok, 0, 0, NULL, align);
    else
        run_step(m, d, &in, 0, 0, NULL, align);
    d->logp_rows = d->N;
    ll_arena_release(&m->arena, mk);
    ll_arena_release(&m->meta, mk_meta);
    return d->logp;
}

void ll_decode_step(ll_model *m, ll_dec_state *d, const int32_t *prev_tok, real *logp) {
    ll_backend *be = m->be;
    ll_decode_step_dev(m, d, prev_tok);
    const size_t n = (size_t)d->N * m->hp.V;
    if (ll_act_is_real(be)) {
        be->download(be, logp, d->logp, n * sizeof(real));
        return;
    }
    /* converted on the backend, then read (arena memory, released at once) */
    ll_arena_mark mk = ll_arena_get_mark(&m->arena);
    real *f = ll_fbuf(m, n);
    be->convert(be, f, LL_REAL_DTYPE, d->logp, be->act, n);
    be->download(be, logp, f, n * sizeof(real));
    ll_arena_release(&m->arena, mk);
}

void ll_decode_step_sample(ll_model *m, ll_dec_state *d, const int32_t *prev_tok, const ll_sample_row *row,
                           const int32_t *ban, int n_ban, const ll_sample_params *p, int32_t *tok, double *lq) {
    ll_backend *be = m->be;
    const int N = d->N, V = m->hp.V;
    for (int r = 0; r < N; r++) {
        const ll_sample_row *w = &row[r];
        if (w->mode & 4) continue;
        if (w->forced >= V || w->ban0 < 0 || w->n_ban < 0 || w->ban0 > n_ban - w->n_ban)
            ll_die("decode: sampling row %d: forced token %d or bans [%d, +%d) outside the vocabulary or the %d bans",
                   r, w->forced, w->ban0, w->n_ban, n_ban);
        for (int i = 0; i < w->n_ban; i++)
            if (ban[w->ban0 + i] < 0 || ban[w->ban0 + i] >= V)
                ll_die("decode: sampling row %d: banned token %d outside the vocabulary", r, ban[w->ban0 + i]);
    }
    const ll_act *logp = ll_decode_step_dev(m, d, prev_tok);
    ll_arena_mark mk = ll_arena_get_mark(&m->arena);
    /* one upload [rows][bans], one download [lq][tok] (widest first: aligned) */
    const size_t in_bytes = sizeof(ll_sample_row) * (size_t)N + sizeof(int32_t) * (size_t)n_ban;
    const size_t out_bytes = (sizeof(double) + sizeof(int32_t)) * (size_t)N;
    char *h = stage(d, in_bytes > out_bytes ? in_bytes : out_bytes);
    memcpy(h, row, sizeof(ll_sample_row) * (size_t)N);
    if (n_ban) memcpy(h + sizeof(ll_sample_row) * (size_t)N, ban, sizeof(int32_t) * (size_t)n_ban);
    char *in = ll_arena_alloc(&m->arena, in_bytes), *out = ll_arena_alloc(&m->arena, out_bytes);
    be->upload(be, in, h, in_bytes);
    be->sample_draw(be, (int32_t *)(out + sizeof(double) * (size_t)N), (double *)out, logp, (const ll_sample_row *)in,
                    (const int32_t *)(in + sizeof(ll_sample_row) * (size_t)N), N, V, p);
    be->download(be, h, out, out_bytes);
    memcpy(lq, h, sizeof(double) * (size_t)N);
    memcpy(tok, h + sizeof(double) * (size_t)N, sizeof(int32_t) * (size_t)N);
    ll_arena_release(&m->arena, mk);
}

void ll_decode_ban(const ll_model *m, ll_dec_state *d, const int32_t *flat, int n) {
    const long long cells = (long long)d->N * m->hp.V;
    for (int i = 0; i < n; i++)
        if (flat[i] < 0 || flat[i] >= cells)
            ll_die("decode: banned token %d outside the %d rows' log-probabilities", flat[i], d->N);
    d->ban = flat, d->n_ban = n;
}

void ll_decode_step_topk(ll_model *m, ll_dec_state *d, const int32_t *prev_tok, const double *cum,
                         const uint8_t *mode, int k, double *score, real *lp, int32_t *flat, int32_t *align) {
    ll_backend *be = m->be;
    ll_arena_mark mk = ll_arena_get_mark(&m->arena), mk_meta = ll_arena_get_mark(&m->meta);
    const int roots = root_rows_only(d, prev_tok, cum);
    const step_in in = step_upload(m, d, prev_tok, cum, mode, roots);
    /* results in one block, read in one download: [score][lp][flat][align], widest
     * first so each array is aligned (real is double in the gradient-check build) */
    const size_t nk = (size_t)topk_groups(d, roots) * k, rows = roots ? (size_t)d->B : (size_t)d->N;
    const size_t o_lp = nk * sizeof(double), o_flat = o_lp + nk * sizeof(real), o_align = o_flat + nk * sizeof(int32_t);
    const int want_align = align && d->align_layer >= 0;
    const size_t bytes = o_align + (want_align ? rows * sizeof(int32_t) : 0);
    char *out = ll_arena_alloc(&m->arena, bytes);
    /* banned tokens: the step without its top-k (graphed as usual), the bans, then the top-k */
    const int ban = d->n_ban > 0, k_run = ban ? 0 : k;
    if (ban && roots) ll_die("decode: tokens banned at the first step, whose rows stand for their sentences");
    if (m->n_ens)
        ens_step(m, d, &in, prev_tok, roots, k_run, out, want_align ? (int32_t *)(out + o_align) : NULL);
    else
        run_step(m, d, &in, roots, k_run, out, want_align ? (int32_t *)(out + o_align) : NULL);
    if (ban) {
        int32_t *idx = ll_arena_alloc(&m->arena, sizeof(int32_t) * (size_t)d->n_ban);
        be->upload(be, idx, d->ban, sizeof(int32_t) * (size_t)d->n_ban);
        be->fill_at(be, d->logp, idx, d->n_ban, (real)-INFINITY);
        step_topk_ops(m, d, &in, roots, k, out);
        d->ban = NULL, d->n_ban = 0;
    }
    d->logp_rows = (int)rows;
    char *h = stage(d, bytes);
    be->download(be, h, out, bytes);
    memcpy(score, h, nk * sizeof(double));
    memcpy(lp, h + o_lp, nk * sizeof(real));
    memcpy(flat, h + o_flat, nk * sizeof(int32_t));
    if (want_align) /* roots: row b of the step stood for the beam rows of sentence b */
        for (int r = 0; r < d->N; r++) memcpy(&align[r], h + o_align + sizeof(int32_t) * (roots ? r / d->beam : r), 4);
    if (roots) /* row b of the step stood for row b * beam */
        for (size_t i = 0; i < nk; i++)
            if (flat[i] >= 0) flat[i] += (int32_t)((size_t)(flat[i] / m->hp.V) * (d->beam - 1) * m->hp.V);
    ll_arena_release(&m->arena, mk);
    ll_arena_release(&m->meta, mk_meta);
}

int ll_decode_align_on(ll_model *m, ll_dec_state *d) {
    /* the last layer whose cross-attention runs (fairseq: the last layer's, averaged over heads) */
    d->align_layer = -1;
    for (int l = 0; l < m->hp.Ld; l++) {
        const ll_layer_ctl *c = &m->dec_ctl[l];
        if (!(c->skip || c->skip_cross || ll_layer_off(c))) d->align_layer = l;
    }
    for (int j = 0; j < m->n_ens; j++) ll_decode_align_on(m->ens[j], d->ens[j]); /* (ens_step averages them) */
    return d->align_layer;
}

void ll_decode_first_row_logp(ll_model *m, ll_dec_state *d, const int32_t *tok, real *out) {
    ll_backend *be = m->be;
    const int rows = d->logp_rows, per = rows / d->B; /* 1 after a step of one row per sentence */
    ll_arena_mark mk = ll_arena_get_mark(&m->arena);
    int32_t *h = (int32_t *)stage(d, (sizeof(real) + sizeof(int32_t)) * rows); /* tokens up, then reals down */
    for (int r = 0; r < rows; r++) h[r] = r % per ? LL_PAD : tok[r / per];
    int32_t *t = ll_arena_alloc(&m->arena, sizeof(int32_t) * rows);
    be->upload(be, t, h, sizeof(int32_t) * rows);
    real *dev = ll_fbuf(m, rows);
    be->pick_logp(be, dev, d->logp, t, rows, m->hp.V, LL_PAD);
    real *hr = (real *)h;
    be->download(be, hr, dev, sizeof(real) * rows);
    for (int b = 0; b < d->B; b++) out[b] = hr[b * per];
    ll_arena_release(&m->arena, mk);
}

void ll_decode_last_align(ll_model *m, ll_dec_state *d, int32_t *align) {
    if (d->align_layer < 0) ll_die("decode: ll_decode_last_align without ll_decode_align_on");
    m->be->download(m->be, align, d->align_dev, sizeof(int32_t) * d->N);
}

void ll_decode_reorder(ll_model *m, ll_dec_state *d, const int *from) {
    (void)m;
    /* cross K/V are per sentence, so rows may only move within their sentence */
    for (int n = 0; n < d->N; n++)
        if (from[n] / d->beam != n / d->beam) ll_die("decode: reorder moves row %d across sentences", from[n]);
    /* applied by the next step, whose upload carries it */
    memcpy(d->from, from, sizeof(int) * d->N);
    d->reorder_pending = 1;
    for (int j = 0; j < m->n_ens; j++) ll_decode_reorder(m->ens[j], d->ens[j], from);
}

void ll_decode_shortlist(ll_model *m, ll_dec_state *d, const int32_t *ids, int K) {
    ll_backend *be = m->be;
    const int C = m->hp.C;
    if (d->t != 0 || d->sl_K) ll_die("decode: a shortlist is set before the first step, once");
    for (int j = 0; j < K; j++)
        if (ids[j] < 0 || ids[j] >= m->hp.V || ids[j] == LL_PAD || (j > 0 && ids[j] <= ids[j - 1]))
            ll_die("decode: shortlist entry %d (token %d): not ascending, out of the vocabulary or pad", j, ids[j]);
    if (K <= 0) ll_die("decode: an empty shortlist");
    /* one allocation: ids, zero positions, rows; the rows are the output projection's
     * gathered by the embedding lookup (scale 1, zero positions: a plain copy) */
    const size_t b_ids = round64(sizeof(int32_t) * (size_t)K), b_pos = round64(sizeof(real) * (size_t)C);
    char *mem = be->alloc(be, b_ids + b_pos + ACT_BYTES(m, (size_t)K * C));
    d->sl_ids = (int32_t *)mem;
    real *zero = (real *)(mem + b_ids);
    d->sl_w = (ll_act *)(mem + b_ids + b_pos);
    be->upload(be, d->sl_ids, ids, sizeof(int32_t) * (size_t)K);
    real *hz = ll_calloc((size_t)C, sizeof(real));
    be->upload(be, zero, hz, sizeof(real) * (size_t)C);
    free(hz);
    be->embed_fwd(be, d->sl_w, d->sl_ids, ACT(m, m->wact, m->out_proj), zero, 0, NULL, 1, K, 1, C, LL_PAD);
    d->sl_K = K;
    /* packed as the whole projection would be (the CPU's fp32 rows, int8 too) */
    if (d->packed[(size_t)m->hp.Ld * LL_DEC_PACKED])
        d->sl_packed = be->linear_pack(be, (const real *)d->sl_w, K, C, m->decode_int8);
    for (int j = 0; j < m->n_ens; j++) ll_decode_shortlist(m->ens[j], d->ens[j], ids, K);
}

void ll_decode_end(ll_model *m, ll_dec_state *d) {
    if (!d) return;
    if (d->sl_packed) m->be->linear_unpack(m->be, d->sl_packed);
    if (d->sl_ids) m->be->free(m->be, d->sl_ids);
    m->dec_busy = 0; /* the buffers stay with the model (m->dec_mem) */
    for (int j = 0; j < m->n_ens; j++) ll_decode_end(m->ens[j], d->ens[j]);
    free(d->ens);
    if (d->own_packed) unpack_decoder(m, d->packed);
    free(d->self_kv);
    free(d->cross_kv);
    free(d->sent_src_len);
    free(d->from);
    free(d->stage);
    free(d);
}

void ll_decode_compact(ll_model *m, ll_dec_state *d, const int *keep, int n_keep) {
    ll_backend *be = m->be;
    const int C = m->hp.C, beam = d->beam;
    for (int j = 0; j < n_keep; j++) {
        const int b = keep[j];
        if (b >= d->B || (j > 0 && b <= keep[j - 1]) || b < j)
            ll_die("decode: compact needs ascending sentence indices below %d", d->B);
    }
    if (d->reorder_pending) ll_die("decode: compact with a reorder pending (compact first, then reorder)");
    for (int j = 0; j < m->n_ens; j++) ll_decode_compact(m->ens[j], d->ens[j], keep, n_keep);
    /* the moves as reorders: sentences (cross K/V, source lengths), then rows (self K/V) */
    const size_t nrow = (size_t)n_keep * beam;
    int *h = (int *)stage(d, sizeof(int) * (n_keep + nrow + n_keep));
    for (int j = 0; j < n_keep; j++) {
        h[j] = keep[j];
        for (int r = 0; r < beam; r++) h[n_keep + (size_t)j * beam + r] = keep[j] * beam + r;
        h[n_keep + nrow + j] = d->sent_src_len[keep[j]];
    }
    ll_arena_mark mk = ll_arena_get_mark(&m->arena);
    int *dev = ll_arena_alloc(&m->arena, sizeof(int) * (n_keep + nrow));
    be->upload(be, dev, h, sizeof(int) * (n_keep + nrow));
    const size_t srow = (size_t)d->max_T * 2 * C, crow = (size_t)d->S * 2 * C, used = (size_t)d->t * 2 * C;
    for (int l = 0; l < m->hp.Ld; l++) {
        be->reorder_rows(be, d->cross_kv[l], d->scratch_kv, dev, n_keep, crow, crow);
        if (!(m->dec_ctl[l].skip || ll_layer_off(&m->dec_ctl[l])))
            be->reorder_rows(be, d->self_kv[l], d->scratch_kv, dev + n_keep, (int)nrow, used, srow);
    }
    /* the ancestry follows its rows, shifted by as many rows as they moved */
    be->beam_ancestry(be, d->anc, d->anc_scratch, dev + n_keep, (int)nrow, d->t, NULL, d->max_T, beam);
    ll_arena_release(&m->arena, mk);
    for (int j = 0; j < n_keep; j++) d->sent_src_len[j] = h[n_keep + nrow + j];
    be->upload(be, d->dev_src_len, d->sent_src_len, sizeof(int) * n_keep);
    d->B = n_keep;
    d->N = n_keep * beam;
}

/* A quarter: each compaction is a new batch size, so a capture for each kind of step
 * (2-3), while on a GPU a step's time hardly depends on its rows at these sizes (its
 * kernels are small); to be tuned on a GPU (bench/gpu/run.sh's decoding rows). */
int ll_decode_compact_wanted(const ll_dec_state *d, int n_keep) { return !d->graphs || 4 * n_keep <= d->B; }
