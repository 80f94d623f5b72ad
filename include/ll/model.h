/* The encoder-decoder Transformer.  Parameters live in one flat buffer and
 * gradients in a mirror of it (llm.c style); every tensor is named in a table
 * (for checkpoints and the optimizer).  Forward saves what backward needs in
 * an arena; backward replays exactly what forward ran.  The model calls ops
 * through an ll_backend and never knows which backend runs. */
#ifndef LL_MODEL_H
#define LL_MODEL_H

#include "ll/backend.h"
#include "ll/config.h"
#include "ll/data.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int C, F, H;     /* d_model, ffn_dim, heads */
    int Le, Ld;      /* encoder / decoder layers */
    int V;           /* vocabulary */
    int max_pos;
    int post_norm;   /* 0: pre-norm (+ final LN), 1: post-norm */
    int share_all;   /* encoder embedding == decoder embedding */
    int tie_output;  /* output projection == decoder embedding */
    real dropout, attn_dropout, act_dropout;
    real label_smoothing; /* training loss; 0 = plain cross-entropy */
    int latent_enc, latent_dec; /* layer logits for latent depth (src/model/latent.c) */
    int latent_rows;            /* rows of logits: languages, training pairs (per_pair), or 1 when shared */
    int latent_per_pair;        /* latent.posterior per_pair: rows are training pairs */
    /* DLCL (Wang et al. 2019; src/model/dlcl.c) */
    int dlcl_enc, dlcl_dec;
    int dlcl_init_one;          /* init W = 1 instead of the 1/(r+1) average */
    int dlcl_learnable;         /* 0: W fixed at its init (the ablations) */
    int dlcl_ln;                /* layer norm on entries (pre-norm) / combined rows (post-norm) */
    int dlcl_norm_embed;        /* pre-norm: also normalise the embedding entry y_0 */
    int rezero;                 /* ReZero: no layer norms, y = x + alpha_l Sub(x), alpha_l learnable from 0 */
} ll_hparams;



typedef struct {
    char name[64];
    size_t offset, numel;
    int ndim;
    int64_t shape[2];
    int no_decay; /* biases and norms (weight decay is decoupled and usually 0) */
} ll_param;

/* Offsets (in reals) of one layer's tensors in the flat buffer; 0 = absent. */
typedef struct {
    size_t ln1_w, ln1_b, qkv_w, qkv_b, o_w, o_b; /* self-attention */
    size_t ln2_w, ln2_b, cq_w, cq_b, ckv_w, ckv_b, co_w, co_b; /* cross-attention (decoder) */
    size_t ln3_w, ln3_b, fc1_w, fc1_b, fc2_w, fc2_b; /* FFN (ln3 in decoder, ln2 in encoder) */
} ll_layer_offsets;

struct ll_fwd_state; /* saved activations (src/model/model_internal.h) */

/* Per-layer control of the residual branches, set by the caller before a
 * forward (defaults: gate 1, nothing skipped).  Methods above the model use it:
 * latent depth (gate = z_l, all sub-layers of the layer), LayerDrop (skip),
 * cross-attention drop (skip_cross).  The gate is a scalar in backend memory
 * (so sampling it on the device costs no host round-trip); when dgate is set,
 * the backward adds dL/dgate, summed over the layer's sub-layers, to it.
 * skip/skip_cross change which ops run, so they are host decisions (drawn
 * from Philox on the host: no transfer either). */
typedef struct {
    const real *gate;   /* backend scalar; NULL = 1 */
    real *dgate;        /* backend accumulator of dL/dgate; NULL = not computed */
    uint8_t skip;       /* layer is the identity: not computed at all */
    uint8_t skip_cross; /* decoder: only the self-attention path (no cross-attention) */
    uint8_t off;        /* latent layer dropped at inference (z = 0): see ll_layer_off */
    /* LayerDrop / cross-attention drop inside a CUDA graph (ll_model.drop_conds):
     * may_skip(_cross), set once by the trainer, say the decision varies from
     * step to step; run_at/cross_at are then !skip / !skip_cross as bytes in
     * backend memory (uploaded with each batch), read by the graph's conditional
     * nodes, so that one graph serves every draw (NULL: not uploaded) */
    uint8_t may_skip, may_skip_cross;
    const uint8_t *run_at, *cross_at;
} ll_layer_ctl;

/* z = 0 (a latent layer dropped at inference, a host decision): the
 * layer's branches are off and not computed.  This is exactly what
 * training computes at z = 0: pre-norm/ReZero give the identity, post-norm
 * still applies the layer's norms, and in a DLCL stack the layer's entry is
 * its input (docs/methods.md).  skip, by contrast, is LayerDrop's identity. */
static inline int ll_layer_off(const ll_layer_ctl *c) { return c && c->off; }

/* Training objectives beyond label-smoothed CE, computed by ll_model_step
 * when training (set by the trainer; all off by default). */
typedef struct {
    real ddr_alpha;  /* DDR: decoder run twice, alpha * symmetric KL of the two outputs (0 = off) */
    real ald_weight; /* ALD: contrastive loss over UNK-corrupted sources (0 = off) */
    real ald_p;      /* gamma ~ U[0, ald_p) */
    real ald_tau;    /* temperature of the cosine similarities */
    /* decoder layer controls for the second DDR pass (independent drop-net draws); NULL = same */
    ll_layer_ctl *ddr_dec_ctl;
} ll_objective;

typedef struct ll_model {
    ll_hparams hp;
    ll_backend *be;
    real *params, *grads; /* device buffers, n_params each: fp32 master weights and their gradients */
    /* the weights in the activation dtype, same offsets as params: what
     * matmuls and embeddings read.  Aliases params when the activation dtype
     * is real's; else Adam refreshes it (ll_model_refresh_weights after
     * anything else writes params). */
    ll_act *wact;
    size_t n_params;
    ll_param *table;
    int n_table;
    size_t enc_emb, dec_emb, out_proj;         /* offsets (aliases when shared) */
    size_t enc_ln_w, enc_ln_b, dec_ln_w, dec_ln_b; /* final layer norms (pre-norm) */
    ll_layer_offsets *enc, *dec;
    ll_layer_ctl *enc_ctl, *dec_ctl; /* [Le], [Ld] */
    /* latent depth: logits [rows, L] per stack (0 = absent), stored last in the
     * flat buffer so [phi_offset, n_params) is exactly the logits */
    size_t latent_logits[2];
    size_t phi_offset;
    real *latent_z[2], *latent_dzda[2]; /* backend [rows, L]: last sample per row and dz/da */
    real *gate_buf[2], *dgate_buf[2];   /* backend [L]: explicit gates (ll_model_set_gate), dL/dgate */
    struct { int mode, row; real threshold; uint64_t seed; } latent_inf[2]; /* ll_latent_set_inference */
    size_t dlcl_w[2];   /* [L+1, L+1] learnable weights (0 = fixed or absent) */
    size_t *dlcl_ln[2]; /* [2 * (L+1)] LN weight/bias offsets per entry/row */
    real *dlcl_fixed[2]; /* backend [L+1, L+1] when not learnable */
    /* per-update statistics (LL_ST_* in ll/backend.h), backend memory; then a
     * snapshot area (ll_model_snapshot) read in the same download */
    double *stats;
    size_t snap_bytes;
    double stats_late[LL_ST_N]; /* ll_model_stats_start's copy where the backend has no download_start */
    size_t *rezero_alpha[2]; /* [L] offsets of the ReZero scalars */
    ll_objective obj;
    real *pos_table; /* [max_pos + 2, C] sinusoids on the device */
    ll_arena arena; /* activations: backend memory */
    ll_arena meta;  /* per-step host metadata (block records, pointer lists) */
    struct ll_fwd_state *st;
    const struct ll_model *replica_of; /* set on replicas (ll_model_replica) */
    void **dec_packed;                 /* ll_decode_pack: shared packed decoder weights */
    struct ll_model **workers;         /* ll_model_workers: decoding replicas kept across calls */
    int n_workers;
    /* ll_model_ensemble: the other members of an ensemble this model decodes with (owned; on a
     * worker replica, the members' replicas of the same worker) */
    struct ll_model **ens;
    int n_ens;
    /* ensemble_mix's offsets: ens_b[j] = log(w_{j+1} / w_0) for member j, ens_c = log(sum w / w_0)
     * (equal weights: 0 and log(n_ens + 1)); owned by the first model, shared by its replicas */
    double *ens_b, ens_c;
    /* ll_decode_begin's backend buffers (caches, log-probabilities), kept
     * between decodes so that the next batch finds them warm; one decode at
     * a time per model (dec_busy) */
    void *dec_mem;
    size_t dec_mem_cap;
    int dec_busy;
    /* Data parallelism (src/train/dist_train.c): when set, a training backward
     * calls it as soon as gradients are final, so their reduction can start
     * while the rest of the backward runs: (LL_GRAD_LAYER, stack, l) after
     * layer l's backward in the last pass over that stack (not in a DLCL
     * stack, whose weights every layer writes), (LL_GRAD_DEC, 1, -1) after the
     * last decoder pass (decoder, output projection), (LL_GRAD_ENC, 0, -1)
     * after the last encoder pass (encoder; a shared embedding).  DDR's second
     * decoder pass and ALD's extra passes are before the calls they concern. */
    void (*grad_hook)(void *ctx, int what, int stack, int layer);
    void *grad_hook_ctx;
    /* Tests: each residual sum and the layer norm that reads it as two ops
     * (the reference for backend residual_ln_fwd, which does both in one) */
    int unfused_ln;
    /* Activation checkpointing (train.checkpoint_activations; the trainer sets it): a training
     * forward keeps each layer's input only, and the backward recomputes the layer's forward
     * (the same ops, dropout bits included) just before its backward */
    int recompute;
    /* Training steps (forward + backward of a batch) as one CUDA graph each
     * where the backend has graph_begin (the trainer sets it: train.cuda_graphs) */
    int graphs;
    ll_backend *graph_fp; /* the fingerprinting wrapper of be those steps run on (transformer.c) */
    /* LayerDrop and cross-attention drop as data in those graphs: the layers and
     * branches whose ctl says may_skip(_cross) are queued with both outcomes
     * (backend cond_if: the branch, or its identity) and the step's draws are
     * uploaded with the batch, so a kept graph is replayed whatever they are.
     * 1: while graphs are on (the trainer sets it); 2: also without graphs
     * (tests: the same ops, the host's branch only); 0: skipped ops not queued */
    int drop_conds;
    int cond_active; /* set while a training step runs that way (transformer.c) */
    /* Beam-search steps as CUDA graphs (src/model/infer.c): 0 where the backend
     * has graphs (unless LL_CUDA_DECODE_GRAPHS=0), -1 never (lldecode
     * --no-cuda-graphs), 2 tests: the graphed path's ops and compaction policy,
     * run through the fingerprinting wrapper without a graph */
    int decode_graphs;
    /* A decode's linear layers (the encoder's, the cross-attention keys' and values', the
     * decoder steps' and the output projection) on int8 weights (lldecode --precision int8; the
     * backend's linear_pack, CPU only): set before the decode packs them */
    int decode_int8;
    ll_graph_stats dec_graph_st; /* the backend's graph counts that came from search steps */
    /* [n_table]: the tensor's gradient is still zero since ll_model_zero_grads
     * (NULL: unknown), so a linear layer's first weight/bias gradient of the
     * update overwrites it (beta 0, BGRAD set) instead of adding */
    uint8_t *grad_fresh;
} ll_model;
enum { LL_GRAD_DEC = 1, LL_GRAD_ENC = 2, LL_GRAD_LAYER = 8 };

ll_model *ll_model_new(const ll_hparams *hp, ll_backend *be);
/* ll_model_new in two steps: the parameter table alone (no parameter,
 * gradient or position buffers), so a model file can be checked against it
 * before a crafted config makes the loader allocate terabytes; then the
 * buffers.  ll_model_free takes either. */
ll_model *ll_model_plan(const ll_hparams *hp, ll_backend *be);
void ll_model_alloc(ll_model *m);
void ll_model_free(ll_model *m); /* also frees a replica (its own parts only) */
/* A replica for another thread: the same parameters (not copied, so they must
 * not change while it lives) with its own activation arena, forward state and
 * layer controls (copied from m).  Inference only: it has no gradients. */
ll_model *ll_model_replica(const ll_model *m);
/* n replicas of m kept by m (freed with it), brought up to date with m's
 * current state (layer controls, packed weights) at every call, so that
 * repeated decoding reuses their warm activation arenas instead of building
 * and first-touching new ones.  m must not be a replica. */
ll_model **ll_model_workers(ll_model *m, int n);
/* Frees what decoding keeps between calls (the workers, the cache buffer):
 * the trainer calls it after validation decoding, so that the memory is not
 * held through training.  The next decode allocates again. */
void ll_model_decode_release(ll_model *m);
void ll_hparams_from_config(ll_hparams *hp, const ll_config *cfg, int vocab_size);
/* fairseq initialisation (reference-spec §4), deterministic in seed. */
void ll_model_init(ll_model *m, uint64_t seed);
/* Refresh the activation-dtype weight copy from the fp32 master (a convert
 * op; nothing when it aliases).  Call after writing m->params other than
 * through Adam (loading a model or checkpoint, averaging, pruning). */
void ll_model_refresh_weights(ll_model *m);
const ll_param *ll_model_find(const ll_model *m, const char *name);
/* Parameters proper (n_params also counts alignment padding). */
size_t ll_model_count_params(const ll_model *m);
/* Reset every layer's control to the default (gate 1, nothing skipped). */
void ll_model_reset_ctl(ll_model *m);
/* Gate of layer l of a stack set to the value g (uploaded to gate_buf; for
 * tests and inference set-up, not for the training loop). */
void ll_model_set_gate(ll_model *m, int stack, int l, real g);
/* The current gate value of a layer (downloaded; 1 when it has none). */
real ll_model_gate(ll_model *m, int stack, int l);
/* on: every layer's dgate points at dgate_buf (zeroed by each backward). */
void ll_model_track_dgates(ll_model *m, int on);
/* dL/dgate of a stack's layers after a backward (downloaded). */
void ll_model_dgates(ll_model *m, int stack, double *out);

/* ---- the statistics buffer ----
 * ll_model_stats_zero clears the per-update slots; ll_model_stats_read does
 * the one download per update: LL_ST_N doubles, then (with_snapshot) the
 * snapshot area that ll_model_snapshot filled on the backend. */
void ll_model_stats_zero(ll_model *m);
/* Zero every gradient and remember it: until each tensor is written again, a
 * linear layer's weight-gradient matmul writes instead of adding (no read of
 * the old zeros, and the bias gradient straight from cuBLASLt's epilogue
 * instead of a separate accumulation).  Gradients zeroed any other way are
 * accumulated into as before. */
void ll_model_zero_grads(ll_model *m);
/* (model code) whether the gradient of the tensor at offset off is still
 * zero, and from now on count it written */
int ll_model_grad_take_fresh(ll_model *m, size_t off);
/* Layers of a plain stack whose backwards end in one be->join (the side stream's weight gradients,
 * ll_gemm_desc.side): 1 where the backend has no join, else LL_LAYERS_PER_JOIN (default 4). */
int ll_layer_join_every(const ll_model *m);
void ll_model_stats_read(ll_model *m, double *stats, void *snapshot);
/* The same read in two halves (no snapshot): _start queues the download of the
 * statistics of what is queued so far and returns without waiting (where the
 * backend can: download_start), _finish waits for it.  The training loop reads
 * an update's statistics this way while the next update runs, so the host never
 * drains the device between updates that log nothing. */
void ll_model_stats_start(ll_model *m);
void ll_model_stats_finish(ll_model *m, double *stats);
/* Queue copies of the latent logits and last samples into the snapshot area
 * (layout: per stack with latent layers, logits [rows, L] then z [rows, L]). */
void ll_model_snapshot(ll_model *m);

typedef struct {
    double loss, nll; /* summed over target tokens of the clean pass, natural log */
    long ntokens;
    double ce2;       /* DDR: summed CE of the second decoder pass */
    double ddr;       /* alpha/2 * summed symmetric KL of the two passes (DDR), when on */
    double ald;       /* weight * ntokens * mean contrastive loss (ALD), when on */
} ll_loss_stats;

/* One forward+backward pass on a batch.  Gradients are ACCUMULATED into
 * m->grads as gradients of the summed loss (the trainer divides by the token
 * count of the whole update).  rng_step keys the dropout masks.  With
 * train == 0: no dropout, no backward (validation loss).  The losses are
 * ACCUMULATED into m->stats without a host read when out == NULL (the
 * trainer); with out, the step's own stats are cleared, then read into out. */
void ll_model_step(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t rng_step, int train,
                   ll_loss_stats *out);

/* Data parallelism over threads (src/model/team.c): workers - 1 training
 * replicas; ll_model_step_team cuts a batch into one slice of sentences per
 * worker, runs them at once single-threaded and sums the gradients into
 * m->grads (the same result as ll_model_step up to summation order).  NULL
 * from ll_step_team_new when workers < 2 or the model's objectives need the
 * whole batch in one place (ll_step_team_supported: no latent depth, no
 * ALD).  Make the team after setting m->obj; the parameters are shared. */
typedef struct ll_step_team ll_step_team;
int ll_step_team_supported(const ll_model *m);
ll_step_team *ll_step_team_new(ll_model *m, int workers);
void ll_step_team_free(ll_step_team *t);
int ll_step_team_size(const ll_step_team *t); /* 1 for NULL */
/* Training step (train = 1) on team t (NULL: plain ll_model_step). */
void ll_model_step_team(ll_model *m, ll_step_team *t, const ll_batch *b, uint64_t seed, uint64_t rng_step,
                        ll_loss_stats *out);

/* Forward only, returning the summed loss (used by gradient checks). */
double ll_model_loss(ll_model *m, const ll_batch *b, uint64_t seed, uint64_t rng_step, int train);

/* Training FLOPs of one step on a batch (matmuls + attention, fwd + bwd). */
double ll_model_train_flops(const ll_hparams *hp, long src_tokens, long tgt_tokens, long B, int S, int T);


/* ---- inference (src/model/infer.c) ----
 * Incremental decoding: the encoder runs once; every step feeds one token per
 * hypothesis and appends its self-attention keys/values to a cache; the
 * cross-attention keys/values are projected once.  Hypotheses are rows; each
 * row belongs to one source sentence (row / beam). */
typedef struct ll_dec_state {
    int N, B, S, beam;  /* rows, sentences, padded source length, rows per sentence */
    int max_T, t;       /* cache capacity and steps taken */
    int *sent_src_len;  /* host [B] source length of each sentence */
    int *dev_src_len;   /* backend copy of it */
    ll_act **self_kv;   /* per decoder layer, backend [N * max_T, 2C] (activation dtype) */
    ll_act **cross_kv;  /* per decoder layer, backend [B * S, 2C]: shared by a sentence's beam rows */
    ll_act *scratch_kv; /* backend buffer of compaction's row moves */
    int *anc;           /* backend [N, max_T]: entry (r, j) = the cache row holding position j of
                           hypothesis r; a beam reorder rewrites it, the caches stay put */
    int *anc_scratch;   /* backend [N * max_T] ints for beam_ancestry */
    ll_act *logp;       /* backend [N, V]: log-probabilities of the last step */
    int *from;          /* host [N]: reorder applied by the next step (reorder_pending) */
    int reorder_pending;
    char *stage;        /* host staging of the step's upload */
    size_t stage_cap;
    void **packed;      /* [Ld * LL_DEC_PACKED + 1] weights packed for the backend's
                           linear_packed (NULL entries: use gemm); last = output projection */
    int own_packed;     /* packed by ll_decode_begin (no ll_decode_pack in force) */
    int graphs;         /* steps as CUDA graphs (1), or that path without them (2: ll_model.decode_graphs) */
    int32_t *align_dev; /* backend [N]: each row's hard alignment of the last step (ll_decode_align_on) */
    int logp_rows;      /* rows of d->logp after the last step: N, or B when it ran one row per sentence */
    int align_layer;    /* the decoder layer whose cross-attention gives it; -1: off */
    real *align_acc;    /* an ensemble's: backend [N, S], its models' weighted attention (align_argmax) */
    real *acc_to;       /* this step: this model's attention into acc_to (attn_probs), times acc_w */
    real acc_w;
    int acc_over;       /* (overwrite: the first model) */
    struct ll_dec_state **ens; /* the ensemble members' states (ll_model.ens), stepped with this one */
    real unk_pen;       /* ll_decode_step_topk: subtracted from <unk>'s log-probability before the top-k */
    int div_groups;     /* its top-k: diverse beam search's subgroups (beam_topk; 0, 1: plain) */
    double div_strength; /*  and their penalty per earlier use of a token */
    int topk_per_row;   /* its top-k per row, not per sentence (diverse siblings search), but for
                           a step of one row per sentence */
    const int32_t *ban; /* ll_decode_ban: host [n_ban] flat indices row * V + token, -inf in the next */
    int n_ban;          /* ll_decode_step_topk's log-probabilities before its top-k (then cleared) */
    int sl_K;           /* a vocabulary shortlist (ll_decode_shortlist): K tokens; 0: none */
    int32_t *sl_ids;    /* backend [K] their ids, ascending */
    ll_act *sl_w;       /* backend [K, C] their rows of the output projection (activation dtype) */
    void *sl_packed;    /* those rows packed for linear_packed (NULL: gemm on sl_w) */
} ll_dec_state;
#define LL_DEC_PACKED 6 /* per decoder layer: qkv, o, cq, co, fc1, fc2 */

/* An ensemble (fairseq's EnsembleModel): m decodes with the n models of members beside it, which
 * it then owns (ll_model_free frees them).  Every step runs each model on the same rows and
 * d->logp holds log(mean of their probabilities), or with weights (n + 1 of them, m's first,
 * positive; NULL: equal) log(sum w_i p_i / sum w_i); alignments come from the models' attention,
 * each averaged over its heads, weighted so too (fairseq's average); on a GPU each model's
 * step is a CUDA graph of its own (the mix, the alignment's arg-max and the top-k run after them).  The members must
 * share m's backend, vocabulary size and max_positions, and have their decoding set up (layer
 * gates, latent inference) as m. */
void ll_model_ensemble(ll_model *m, ll_model **members, int n, const double *weights);
/* Encode B sentences (src [B*S], right-padded) and set up `beam` rows per sentence. */
ll_dec_state *ll_decode_begin(ll_model *m, const int32_t *src, const int *src_len, int B, int S, int beam, int max_T);
/* Log-probabilities [N, V] of the next token given each row's previous token
 * (host prev_tok [N]): in backend memory in the activation dtype (d->logp,
 * valid until the next step), or downloaded into a host logp (fp32 whatever
 * the activation dtype: converted when it is not real's). */
const ll_act *ll_decode_step_dev(ll_model *m, ll_dec_state *d, const int32_t *prev_tok);
void ll_decode_step(ll_model *m, ll_dec_state *d, const int32_t *prev_tok, real *logp);
/* A sampling step: the step, then one draw per row on the backend (sample_draw: row [N] and
 * ban [n_ban] on the host, uploaded together; tok and lq [N] read back in one download), so
 * the [N, V] log-probabilities stay where they are. */
void ll_decode_step_sample(ll_model *m, ll_dec_state *d, const int32_t *prev_tok, const ll_sample_row *row,
                           const int32_t *ban, int n_ban, const ll_sample_params *p, int32_t *tok, double *lq);
/* A beam-search step: the step, then per sentence the k best candidates
 * (row, token) by cum[row] + log p (the backend's beam_topk; mode [B]: bit 0
 * eos allowed, bit 1 eos only), read into host score/lp/flat [B * k] (flat =
 * row * V + token, -1 for an empty slot).  With d->topk_per_row, per row
 * instead: [N * k] (a step of one row per sentence, the first: [B * k] as
 * before).  One upload, one download. */
void ll_decode_step_topk(ll_model *m, ll_dec_state *d, const int32_t *prev_tok, const double *cum,
                         const uint8_t *mode, int k, double *score, real *lp, int32_t *flat, int32_t *align);
/* Tokens banned at the next ll_decode_step_topk (lldecode --no-repeat-ngram-size): flat [n] =
 * row * V + token (repeats allowed; host memory, read by that step) get log-probability -inf
 * before its top-k, and in the log-probabilities it leaves (ll_decode_first_row_logp reads them).
 * That step's top-k then runs outside its CUDA graph (the model's step stays one). */
void ll_decode_ban(const ll_model *m, ll_dec_state *d, const int32_t *flat, int n);
/* Hard alignments (fairseq's --print-alignment): from now on each step also
 * finds, per row, the source position (its EOS left out) that the last
 * decoder layer with a cross-attention in use attends to most, summed over
 * its heads (backend attn_align); ll_decode_step_topk returns them in align
 * [N] (when not NULL), ll_decode_last_align after ll_decode_step.  Returns
 * that layer, or -1 when no decoder layer attends to the source. */
int ll_decode_align_on(ll_model *m, ll_dec_state *d);
/* After a step: the log-probability of token tok[b] at sentence b's first row (a forced token:
 * a target prefix), into host out[B]; tok[b] == LL_PAD gives 0.  The backend's pick_logp on the
 * step's log-probabilities, which stay on the backend. */
void ll_decode_first_row_logp(ll_model *m, ll_dec_state *d, const int32_t *tok, real *out);
void ll_decode_last_align(ll_model *m, ll_dec_state *d, int32_t *align);
/* Reorder rows: new row n takes old row from[n] (beam search); applied at the
 * start of the next step.  Compact (if any) comes first. */
void ll_decode_reorder(ll_model *m, ll_dec_state *d, const int *from);
void ll_decode_end(ll_model *m, ll_dec_state *d);
/* A vocabulary shortlist for this batch (lldecode --shortlist): from now on each step projects
 * onto the K tokens ids (host, ascending, distinct, in the vocabulary, not pad) only, and its
 * log-probabilities are normalized over them; the other tokens get -inf.  Ensemble members
 * too.  Before the first step. */
void ll_decode_shortlist(ll_model *m, ll_dec_state *d, const int32_t *ids, int K);
/* Pack the decoder's weights once for many ll_decode_begin calls (and for
 * replicas made afterwards); without it each decode packs its own.  The
 * parameters must not change until ll_decode_unpack. */
void ll_decode_pack(ll_model *m);
void ll_decode_unpack(ll_model *m);
/* Keep only the sentences keep[0..n_keep) (strictly ascending indices into
 * the current sentences): their rows move to the front and B, N shrink, so
 * later steps skip finished sentences (fairseq drops them from the batch). */
void ll_decode_compact(ll_model *m, ll_dec_state *d, const int *keep, int n_keep);
/* Whether a search should compact now, n_keep of the d->B sentences live:
 * always, except when steps are graphs (d->graphs): a new batch size is a new
 * graph, so finished sentences ride along (their rows at -inf) until only a
 * quarter of the batch is live. */
int ll_decode_compact_wanted(const ll_dec_state *d, int n_keep);

/* ---- random structure (src/model/cad.c) ---- */
/* Cross-attention drop: skip_cross of decoder layer l (0-based) with
 * probability p_net for l < drop_depth, else p_above. */
void ll_cad_sample(ll_layer_ctl *ctl, int L, real p_net, int drop_depth, real p_above, uint64_t seed,
                   uint64_t step, int pass);
/* LayerDrop: skip each layer with probability p (fairseq: run iff u > p). */
void ll_layerdrop_sample(ll_layer_ctl *ctl, int L, real p, uint64_t seed, uint64_t step, int stack, int pass);

/* Teacher-forced log-probabilities [B*T, V] of a batch without dropout
 * (arena memory, valid until the next model call; real, converted from the
 * activation dtype when it differs). */
real *ll_model_logprobs(ll_model *m, const ll_batch *b);
/* The same forward's log-probability of each target token, b->tgt_out[i], into
 * host out[B*T] (0 at pad positions): forced decoding of references.  An ensemble
 * (ll_model_ensemble): log(mean over its models of p(token)). */
void ll_model_token_logprobs(ll_model *m, const ll_batch *b, real *out);

#ifdef __cplusplus
}
#endif
#endif
