/* Private model structures: saved activations and the per-block functions. */
#ifndef LL_MODEL_INTERNAL_H
#define LL_MODEL_INTERNAL_H

#include "ll/model.h"

typedef enum { SUB_SELF, SUB_CROSS, SUB_FFN } ll_sub_kind;
enum { BLOCK_RUN = 0, BLOCK_IDENTITY = 1, BLOCK_OFF = 2, BLOCK_COND = 3 };

/* Dropout sites: each gets its own Philox stream, so masks do not depend on
 * the order in which ops run (and match across backends). */
enum { SITE_EMB = 0, SITE_SELF = 1, SITE_SELF_PROBS = 2, SITE_CROSS = 3, SITE_CROSS_PROBS = 4, SITE_ACT = 5, SITE_FFN = 6 };

/* A pre-norm layer norm that the block before computes together with its
 * residual sum (backend residual_ln_fwd): where its output and statistics go,
 * and the flag that tells the consumer they are there. */
typedef struct {
    size_t w, b; /* parameter offsets */
    ll_act **u;
    real **mean, **rstd;
    int *done;
} ll_ln_target;

/* One residual block: x -> y with a sub-layer (attention or FFN), pre- or post-norm. */
typedef struct {
    ll_sub_kind kind;
    size_t ln_w, ln_b;
    const ll_layer_offsets *L;
    ll_layer_ctl *ctl; /* the layer's gate/skip (shared by its blocks) */
    size_t alpha;      /* ReZero: offset of the layer's learnable scale (0 = none, and then LN as usual) */
    int mode;          /* set by forward: BLOCK_RUN, BLOCK_IDENTITY (layer skipped), BLOCK_OFF (branch off),
                        * BLOCK_COND (both queued as a conditional: cross-attention drop in a graph) */
    int n_rows;        /* B * T of the forward */
    ll_act *y_into;    /* set by the caller: y goes there (the output of a conditional layer) */
    /* activations (ll_act: the backend's activation dtype); statistics are real */
    ll_act *s;       /* sub-layer output after dropout (for dgate) */
    const ll_act *x; /* input (owned by the previous block) */
    ll_act *u;       /* pre-norm: LN(x), the sub-layer input */
    ll_act *a;       /* post-norm: x + drop(s), the LN input */
    ll_act *y;       /* output */
    real *mean, *rstd;
    /* dropout of the sub-layer output: rate (0: none), stream and element
     * offset, so backward redraws the bits instead of keeping a mask */
    real drop_p;
    ll_philox drop_rng;
    uint64_t drop_off;
    /* attention: ctx is its output, lse its softmax statistics [B, H, T]
     * (backward recomputes the probabilities and redraws the dropout mask
     * from attn_rng) */
    ll_act *qkv, *q, *kv, *ctx;
    int kv_ready; /* kv queued beside the layer's self-attention block (ll_layer_fwd): join before reading */
    real *lse;
    ll_philox attn_rng;
    /* FFN */
    ll_act *h;         /* fc1 output after ReLU (and activation dropout, in place) */
    uint8_t *amask;    /* activation dropout's mask */
    void *relu_mask;   /* the ReLU's mask for the backward's DRELU (be->relu_mask_bytes), or NULL */
    /* pre-norm fusion (ll_layer_fwd): next_ln, the layer norm that consumes y
     * (the next running block's, or the stack's final one), computed with the
     * residual sum; ln_done, this block's own LN(x) was computed that way */
    ll_ln_target next_ln;
    int has_next_ln, ln_done;
} ll_block;

/* LayerDrop and cross-attention drop queued as conditionals (ll_model.drop_conds):
 * in a step that runs that way, for a layer / cross-attention block whose draw
 * varies and was uploaded. */
static inline int ll_cond_layer(const ll_model *m, const ll_layer_ctl *c) {
    return m->cond_active && c && c->may_skip && c->run_at;
}
static inline int ll_cond_cross(const ll_model *m, const ll_block *k) {
    return m->cond_active && k->kind == SUB_CROSS && k->ctl && k->ctl->may_skip_cross && k->ctl->cross_at;
}

/* Slots of a decoder layer's packed weights (ll_inc.packed); an encoder layer's (ll_pass.packed)
 * use PK_QKV, PK_O, PK_FC1 and PK_FC2. */
enum { PK_QKV, PK_O, PK_CQ, PK_CO, PK_FC1, PK_FC2 };

/* Incremental decoding (infer.c): the decoder runs one position per row,
 * self-attention over a KV cache it appends to, cross-attention over keys and
 * values projected once per sentence, linear layers through packed weights. */
typedef struct {
    void *const *packed;      /* [Ld * LL_DEC_PACKED + 1] handles (NULL entries: gemm) */
    ll_act *const *self_kv;   /* per layer [rows, max_T, 2C] */
    ll_act *const *cross_kv;  /* per layer [sentences, S, 2C] */
    int max_T;                /* cache capacity */
    const int *t;             /* backend int: this step's position (read by the ops, so that
                                 every step queues the same ops: one CUDA graph) */
    int sents, beam;          /* rows = sents * beam, grouped by sentence */
    const int *anc;           /* backend [rows, max_T]: the cache row holding each position (beam_ancestry);
                                 NULL: each row's own, row r = cache row r * row_mul */
    int row_mul;              /* 1, or beam when step 0 runs one row per sentence */
    const int *sent_src_len;  /* backend [sents] */
    int32_t *align;           /* backend [rows]: the hard alignment of layer align_layer's cross-attention
                                 (attn_align), or NULL */
    int align_layer;
    real *align_acc;          /* instead (an ensemble's model): that layer's probabilities times align_w
                                 into backend [rows, S] (attn_probs; align_overwrite: =, else +=) */
    real align_w;
    int align_overwrite;
} ll_inc;

/* Shape and context shared by the blocks of one forward pass. */
typedef struct {
    int B, T;             /* batch, query length of this stack */
    int S;                /* source length (cross-attention keys) */
    const int *self_len;  /* key lengths for self-attention */
    const int *src_len;   /* key lengths for cross-attention */
    const ll_act *enc_out; /* [B*S, C] (decoder) */
    real *d_enc_out;       /* gradient of enc_out (decoder backward): fp32, every decoder layer adds to it */
    int train;
    int no_grad;          /* forward only (validation, decoding): each layer's temporaries are
                             released after it, so a stack's peak is one layer, not all of them */
    uint64_t seed, rng_step;
    const uint32_t *rng_step_at; /* rng_step in backend memory (the batch upload): what the dropout
                                    streams read, so a replayed CUDA graph draws this step's masks */
    int stack;            /* 0 encoder, 1 decoder */
    ll_layer_ctl *ctl;    /* decoder layer controls for this pass (NULL: the model's) */
    int row0;             /* first sentence of this batch slice in the whole batch: offsets
                             dropout draws so a slice gets the whole batch's masks */
    const ll_inc *inc;    /* incremental decoding (T = 1 per row), else NULL */
    void *const *packed;  /* a decode's encoder pass with int8 weights: the encoder layers' packed
                             weights ([Le * LL_DEC_PACKED], infer.c), else NULL */
} ll_pass;

/* One run of a stack (encoder or decoder) over one batch: embeddings, blocks,
 * DLCL history and the final layer norm, with everything backward needs. */
typedef struct {
    ll_pass p;
    int stack, L;
    ll_block *blocks;           /* L * per_layer */
    int per_layer;
    const int32_t *tok;
    ll_act *x0;                 /* embedding output (after dropout) */
    uint8_t *emb_mask;
    /* DLCL (src/model/dlcl.c): entries e_k (k = 0..L), row inputs in_r, LN stats */
    ll_act **ent, **raw, **comb, **in; /* (in: also a plain stack's layer inputs when it recomputes) */
    ll_act **gent;              /* latent-gated layers: E(y_k) before the entry gate (else NULL) */
    real **ln_mean, **ln_rstd;
    ll_act *top;                /* stack output before the final LN */
    ll_act *out;                /* after the final LN (pre-norm) or == top */
    real *mean, *rstd;
    int fuse_across;            /* the plain stack keeping every layer: a block's residual sum may
                                   feed the next layer's LN, or the final LN, in one op */
    int final_done;             /* the final LN was computed with the last residual sum */
    int last_pass;              /* the update's last backward over this stack: each layer's gradient is
                                   final after its backward (m->grad_hook, per layer; not with DLCL) */
} ll_stack_run;

#define LL_MAX_RUNS 4
typedef struct ll_fwd_state {
    ll_stack_run enc[LL_MAX_RUNS], dec[LL_MAX_RUNS];
    ll_act *logits[2];          /* [B*T, V] of the clean and the DDR pass, then their gradients */
    char *stage;                /* host staging buffer of the batch upload */
    size_t stage_cap;
} ll_fwd_state;

/* A batch in backend memory: one upload per micro-batch of everything the
 * ops read (tokens, lengths and, for ALD, the corrupted sources). */
typedef struct {
    const int32_t *src, *tgt_in, *tgt_out, *ald_src[2];
    const int *src_len, *tgt_len;
    /* the step's scalars that kernels read from backend memory, not from their arguments,
     * so that a step's ops are the same from step to step (a CUDA graph replays them) */
    const uint32_t *rng_step; /* the dropout streams' step */
    const double *ald_w;      /* ALD weight * target tokens / sentences */
} ll_dev_batch;
/* A step's losses from a stats buffer read. */
void ll_loss_from_stats(const double *st, long ntokens, ll_loss_stats *out);
/* Upload b (ald: with UNK-corrupted sources keyed by seed/step) into the arena. */
ll_dev_batch ll_batch_upload(ll_model *m, const ll_batch *b, int ald, uint64_t seed, uint64_t step);

/* Set up a run; tok are the input tokens ([B*T]), lens the key lengths. */
void ll_stack_run_init(ll_model *m, ll_stack_run *r, int stack, const ll_pass *p, const int32_t *tok);
/* Forward; returns r->out.  enc_out (decoder) is the encoder output it attends to. */
ll_act *ll_stack_run_fwd(ll_model *m, ll_stack_run *r);
/* Backward from d(out); accumulates parameter gradients (and d enc_out via p.d_enc_out). */
void ll_stack_run_bwd(ll_model *m, ll_stack_run *r, ll_act *dout);

/* One layer's blocks, forward (returns y) and backward (dx = ..., overwritten). */
ll_act *ll_layer_fwd(ll_model *m, ll_stack_run *r, int l, ll_act *x);
/* Forward only: the layer's output copied into dst (allocated before the
 * call), its temporaries released at once.  ll_layer_releases: whether a
 * stack driver should use it for this pass (not inside a decoding step,
 * whose one position per row is small and which releases everything). */
ll_act *ll_layer_fwd_into(ll_model *m, ll_stack_run *r, int l, ll_act *x, ll_act *dst);
static inline int ll_layer_releases(const ll_pass *p) { return p->no_grad && !p->inc; }
/* A pass with gradients under activation checkpointing (ll_model.recompute): the stack drivers run
 * each layer with ll_layer_fwd_into, keep its input, and call ll_layer_fwd on it again right
 * before ll_layer_bwd (the layer's temporaries then live until the backward's next join). */
static inline int ll_layer_recomputes(const ll_model *m, const ll_pass *p) {
    return m->recompute && !p->no_grad && !p->inc;
}
/* The weight gradients it queues beside the chain (ll_gemm_desc.side) read its temporaries and dy
 * until the caller's be->join (ll_layer_join_every layers share one; the caller keeps their
 * temporaries and gradient buffers until then). */
void ll_layer_bwd(ll_model *m, ll_stack_run *r, int l, ll_act *dy, ll_act *dx);

/* ---- objectives (objectives.c) ---- */
/* ALD sources (host, into light/heavy [B*S]): a fraction gamma (light) and
 * 1 - gamma (heavy) of each source's tokens (EOS excluded) replaced by UNK,
 * gamma ~ U[0, ald_p) per sentence. */
void ll_unk_corrupt(const ll_model *m, const ll_batch *b, uint64_t seed, uint64_t step, int32_t *light, int32_t *heavy);
/* ALD loss from the top decoder states of the clean, light and heavy passes
 * (hs[0..2], [B*T, C]), on the backend: weight * ntokens * mean_b J_b into
 * LL_ST_ALD and, if dh is non-NULL, the gradients dh[0..2] (arena). */
void ll_ald_loss(ll_model *m, const ll_batch *b, const ll_dev_batch *db, ll_act *const *hs, ll_act **dh);

/* ---- DLCL (dlcl.c) ---- */
int ll_dlcl_on(const ll_model *m, int stack);
/* Latent gate of a DLCL entry: e' = in + z (e - in) (z a backend scalar;
 * NULL = 1: e itself); *diff (if non-NULL) gets e - in for the backward. */
ll_act *ll_dlcl_gate_entry(ll_model *m, ll_act *e, const ll_act *in, const real *gate, size_t n, ll_act **diff);
/* W [L+1, L+1] of a stack in backend memory (the fixed variants included). */
const real *ll_dlcl_weights(const ll_model *m, int stack);
/* Forward of a layered stack with DLCL; x0 = embedding output.  Returns top. */
ll_act *ll_dlcl_stack_fwd(ll_model *m, ll_stack_run *r);
void ll_dlcl_stack_bwd(ll_model *m, ll_stack_run *r, ll_act *dtop, ll_act *dx0);
/* Offsets of entry/row k's layer norm. */
size_t ll_dlcl_ln_w(const ll_model *m, int stack, int k);
size_t ll_dlcl_ln_b(const ll_model *m, int stack, int k);

/* Philox stream of a dropout site. */
void ll_site_rng(ll_philox *r, const ll_pass *p, int layer, int site);

void ll_block_fwd(ll_model *m, ll_block *blk, const ll_pass *p, int layer);
/* dx += d(block)/dx^T dy (dx_fresh: dx = ..., its content is ignored).  dy may be overwritten. */
void ll_block_bwd(ll_model *m, ll_block *blk, const ll_pass *p, ll_act *dy, ll_act *dx, int dx_fresh);

/* y[N,out] = x[N,in] W^T + b (relu: then max(., 0)), one gemm with a bias
 * epilogue reading weight and bias from the weight copy (so the bias has C's
 * dtype, as cuBLASLt's fused epilogue needs); backward accumulates dW and db
 * (one gemm with the BGRAD epilogue, fp32) and dx (if non-NULL):
 * dx = dx_beta * dx + dy W, so dx_beta = 0 writes a fresh (uninitialised)
 * buffer.  The weight gradient may run beside the ops after it (ll_gemm_desc.side: the output
 * projection's, 32000 x 512 x 8192 for ll64, beside the decoder's backward) until the caller's
 * be->join; dy and x must stay as they are until then.  (Inside a layer's backward layers.c's own
 * variant does the same, and takes a `real` dx.) */
void ll_linear_fwd(ll_model *m, ll_act *y, const ll_act *x, int N, int in, int out, size_t w, size_t b, int relu);
void ll_linear_bwd(ll_model *m, ll_act *dx, real dx_beta, const ll_act *dy, const ll_act *x, int N, int in, int out,
                   size_t w, size_t b);
/* The descriptor of y[N,out] (+)= x[N,in] W^T with W the weight copy at offset w. */
ll_gemm_desc ll_gemm_xwt(const ll_model *m, ll_act *y, const ll_act *x, int N, int in, int out, size_t w);

/* Arena buffers of n elements: activation dtype (ll_zeros: zeroed), and real
 * (statistics: layer-norm mean/rstd, attention lse, ALD's pooled vectors). */
ll_act *ll_zeros(ll_model *m, size_t n);
ll_act *ll_buf(ll_model *m, size_t n);
real *ll_fbuf(ll_model *m, size_t n);
/* n activation elements starting at element i of p */
#define ACT(m, p, i) ll_act_at((m)->be, (p), (i))
/* bytes of n activation elements */
#define ACT_BYTES(m, n) ((size_t)(n) * ll_act_size((m)->be))

#endif
