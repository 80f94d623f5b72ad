/* The op interface.  Model code calls ops through an ll_backend table on
 * buffers that live on the backend's device; it never knows which backend
 * runs.  The CPU backend (src/backend/cpu) is the readable reference; the CUDA
 * backend (src/backend/cuda + kernels/) implements ops on device memory and a
 * stream.  An op a backend lacks is NULL: ll_backend_missing() names it.
 *
 * Conventions (llm.c style):
 *  - row-major matrices; activations are [rows, C] with rows = B*T (batch-major).
 *  - every *_bwd op ACCUMULATES (+=) into its gradient outputs; callers zero
 *    gradient buffers once per update.  Exception: attention_bwd overwrites
 *    (its outputs are activation gradients, fresh per call).
 *  - random ops take an ll_philox stream and an element offset, so the same
 *    element gets the same random number on every backend; an op that needs
 *    the numbers again (attention_bwd) redraws them from the same stream.
 *  - saved statistics (layer norm mean/rstd, attention lse) are `real`: fp32
 *    in the product build, double in the LL_REAL_DOUBLE gradient-check build;
 *    they stay fp32 when activations move to bf16.
 *  - no op returns a value to the host: losses, norms and other reductions
 *    ACCUMULATE (+=) into double slots of a small statistics buffer in backend
 *    memory (LL_ST_*), which the trainer downloads once per update. */
#ifndef LL_BACKEND_H
#define LL_BACKEND_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ll/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ll_backend ll_backend;

/* q(z_l = 1) = sigmoid(a_l) of a latent-depth logit: the one definition that
 * inference gates, llprune, logging and the KL all use (in double, so a
 * threshold decision is the same everywhere). */
static inline double ll_latent_q(double a) { return 1 / (1 + exp(-a)); }

/* A stack's latent-depth prior and the rows (languages) it trains
 * (src/train/latent_loss.c fills it from the config). */
#define LL_LATENT_MAX_ROWS 128
typedef struct {
    int L, rows;                        /* layers; rows of the [rows, L] logits and samples */
    int n_active;                       /* rows in use */
    uint8_t active[LL_LATENT_MAX_ROWS]; /* 1 for a row of a training language */
    int prior_agg;         /* 1: aggregated posterior of the active rows; 0: Beta(a,b) with mean prior_p */
    int agg_across_layers; /* aggregated prior normalised across layers (else averaged over rows) */
    double prior_p;
} ll_latent_prior;

/* sample_draw's settings (lldecode --sampling-topk, --sampling-topp,
 * --temperature, --unkpen) and the special tokens it never draws (pad, bos;
 * eos as a row's mode allows) or penalises (unk). */
typedef struct {
    int topk;                /* 0 (or >= V): every token */
    double topp;             /* in (0, 1): nucleus; 0 or 1: none */
    double temperature;      /* > 0 */
    double unkpen;           /* subtracted from unk's tempered score, after the softmax */
    int pad, bos, eos, unk;
} ll_sample_params;

/* sample_draw's sums over tokens: blocks of this many consecutive terms, each block summed in
 * order, then the blocks' sums in order (a GPU adds the blocks side by side, and the CPU the
 * same numbers in the same order). */
#define LL_SAMPLE_SUM_BLOCK 64

/* One row's draw: u uniform in [0, 1); mode bit 0: eos allowed, bit 1: eos
 * only (the length limit), bit 2: no draw (a finished row: tok -1, lq 0);
 * forced >= 0: that token (a target prefix's); ban[ban0 .. ban0 + n_ban):
 * tokens never drawn (--no-repeat-ngram-size). */
typedef struct {
    double u;
    int32_t mode, forced, ban0, n_ban;
} ll_sample_row;

/* Slots of the per-update statistics buffer (double, backend memory).  Slots
 * before LL_ST_ADAM_T are zeroed at the start of every update; the Adam step
 * counts persist (the optimizer op reads them, grad_finish advances them). */
enum {
    LL_ST_LOSS,      /* summed label-smoothed CE of the clean pass (nats) */
    LL_ST_NLL,       /* summed NLL of the clean pass */
    LL_ST_CE2,       /* DDR: summed CE of the second decoder pass */
    LL_ST_NLL2,      /* DDR: its NLL */
    LL_ST_DDR,       /* DDR: alpha/2 * summed symmetric KL */
    LL_ST_ALD,       /* ALD: weight * ntokens * mean contrastive loss */
    LL_ST_KL,        /* latent depth: weighted KL(q || prior) */
    LL_ST_LK,        /* latent depth: weighted L_K */
    LL_ST_GSUMSQ,    /* sum of squares of the accumulated (unscaled) gradient */
    LL_ST_GNORM,     /* grad_finish: norm of the scaled gradient, before clipping */
    LL_ST_GMUL,      /* grad_finish: what Adam multiplies the gradient by (scale * clip coefficient) */
    LL_ST_SKIP,      /* grad_finish: 1 when the update is skipped (non-finite loss or gradient) */
    LL_ST_DEPTH_ENC, /* latent depth: E[L] of the encoder (mean over its active rows) */
    LL_ST_DEPTH_DEC, /* latent depth: E[L] of the decoder */
    LL_ST_SPIKE,     /* spike_check: 1 when the update is a loss or gradient-norm spike (grad_finish skips it) */
    LL_ST_Z_LOSS,    /* spike_check: the per-token loss's z-score against the window (NaN until it is full) */
    LL_ST_Z_GNORM,   /* spike_check: the gradient norm's z-score */
    LL_ST_ADAM_T,    /* Adam steps of Theta taken (persistent) */
    LL_ST_ADAM_T_PHI,/* Adam steps of the latent logits taken (persistent) */
    LL_ST_N
};

/* ---- element types ----------------------------------------------------------
 * Activations, activation gradients and the copy of the weights that matmuls
 * read are in the backend's activation dtype (be->act): fp32 on the CPU by
 * default, bf16 with train.precision: bf16 (CPU and CUDA), fp64 in the
 * gradient-check build.  Everything else is `real`: master weights, weight
 * gradients, Adam moments, saved statistics (layer-norm mean/rstd, attention
 * lse), scalars in backend memory (gates, ReZero alphas, DLCL weights, latent
 * logits and samples), ALD's pooled vectors; reductions go to double stats.
 * ll_act is an incomplete type on purpose: an ll_act * cannot be indexed or
 * mixed up with a real * without a cast, so model code that forgets which
 * dtype a buffer has does not compile.  Address element i with ll_act_at. */
typedef enum { LL_F32, LL_BF16, LL_F64 } ll_dtype;
typedef struct ll_act ll_act;
static inline size_t ll_dtype_bytes(ll_dtype t) { return t == LL_BF16 ? 2 : t == LL_F64 ? 8 : 4; }
static inline const char *ll_dtype_str(ll_dtype t) { return t == LL_BF16 ? "bf16" : t == LL_F64 ? "fp64" : "fp32"; }
#ifdef LL_REAL_DOUBLE
#define LL_REAL_DTYPE LL_F64
#else
#define LL_REAL_DTYPE LL_F32
#endif

/* bf16 = the top 16 bits of an fp32; rounding to nearest even (NaN stays a quiet NaN). */
static inline uint16_t ll_f32_to_bf16(float f) {
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1)) >> 16);
}
static inline float ll_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}

/* residual_bwd: what happens to dx. */
enum { LL_RES_NONE, LL_RES_COPY, LL_RES_ACC };

/* gemm epilogues, one to one with cuBLASLt's (CUBLASLT_EPILOGUE_BIAS, _RELU_BIAS, _BGRADx,
 * _RELU_AUX_BIAS, _DRELU). */
typedef enum {
    LL_EPI_NONE,
    LL_EPI_BIAS,      /* C[m, n] += bias[n] after the product (linear layer forward) */
    LL_EPI_BIAS_RELU, /* then C = max(C, 0) (FFN fc1) */
    LL_EPI_BGRAD,     /* also bgrad[m] += sum_k op(A)[m, k] (= with bgrad_set): with A = dY^T of a
                       * weight-gradient gemm dW = dY^T X, the bias gradient (the column sums of dY) */
    /* Only where be->relu_mask_bytes offers masks (training's FFN on CUDA).  The mask is opaque
     * (cuBLASLt's bit order): written by BIAS_RELU_AUX, read by a DRELU whose C has the same
     * [M, N] shape.  The backend knows whether it wrote a mask; where it did not (a refused
     * epilogue), DRELU uses relu_y instead, so results never depend on the bit order. */
    LL_EPI_BIAS_RELU_AUX, /* BIAS_RELU, and (C > 0) into the mask aux */
    LL_EPI_DRELU,         /* C = (op(A) op(B)) * (mask of aux; else relu_y > 0), beta 0, C contiguous
                           * (ldc = N); relu_y: the forward's output, C's layout */
} ll_epilogue;
static inline const char *ll_epilogue_str(ll_epilogue e) {
    static const char *const s[] = {"-", "bias", "relu", "bgrad", "relu+mask", "drelu"};
    return (unsigned)e < sizeof s / sizeof s[0] ? s[e] : "?";
}

/* C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C, row-major, each operand with
 * its own dtype and leading dimension (elements).  Supported combinations:
 * all three in the activation dtype (activations x weight copy), and A, B in
 * the activation dtype with C in `real` (weight gradients, beta 1; also the
 * fp32 encoder-output gradient).  Products accumulate in fp32 (or wider)
 * whatever the operand types.  bias: [N] values of bias_type, either the
 * activation dtype (the model passes the bias from its weight copy: cuBLASLt
 * fuses a bias only when its type is D's) or `real`; it is added to the fp32
 * sum before C's one rounding.  bgrad is the fp32 bias gradient [M] (fp32 C,
 * so again D's type).  In cuBLASLt terms (column-major): swap A/B and M/N,
 * keep the transposes; BGRAD is then BGRADB. */
typedef struct {
    int trans_a, trans_b;
    int M, N, K;
    real alpha, beta;
    const void *A;
    ll_dtype a_type;
    int lda;
    const void *B;
    ll_dtype b_type;
    int ldb;
    void *C;
    ll_dtype c_type;
    int ldc;
    ll_epilogue epi;
    const void *bias;   /* BIAS, BIAS_RELU */
    ll_dtype bias_type; /* of bias: the activation dtype or `real` (LL_F32 = 0 when left out) */
    real *bgrad;        /* BGRAD (accumulated) */
    int bgrad_set;      /* BGRAD: bgrad = the sums instead of += (a gradient known to be zero) */
    int side;           /* may run beside the ops queued after it, up to the next be->join: nothing
                         * writes its operands or touches C and bgrad until then (a weight gradient;
                         * CUDA runs it on a second stream) */
    void *aux;          /* BIAS_RELU_AUX (written), DRELU (read): relu_mask_bytes(M, N) bytes */
    const void *relu_y; /* DRELU: the ReLU's output, where the mask was not written */
} ll_gemm_desc;

/* graph_begin/graph_end/graph_replay so far (a backend's, for logs and tests) */
typedef struct {
    uint64_t captures;       /* graph_end calls */
    uint64_t nodes;          /* nodes in all captured graphs */
    uint64_t updates;        /* an executable graph updated in place */
    uint64_t instantiations; /* ... or built anew */
    uint64_t replays;        /* graph_replay launched a kept graph: no capture */
    uint64_t launches;       /* all graph launches (captured or replayed) */
    uint64_t conditionals;   /* conditional nodes in all captured graphs (cond_if) */
    uint64_t tune_drops;     /* kept graphs dropped: LL_CUDA_GEMM_TUNE switched a matmul's algorithm */
    uint64_t refusals;       /* updates in place the runtime refused (then built anew; counted there too) */
    uint64_t unnamed;        /* captures whose kernels the runtime would not name (never updated in place) */
    uint64_t edges;          /* dependencies between the top-level nodes of all captured graphs */
    uint64_t pdl_edges;      /* ... programmatic ones (a kernel launched with programmatic dependent launch) */
} ll_graph_stats;

struct ll_backend {
    const char *name; /* "cpu" or "cuda" */
    void *impl;       /* backend private state (CUDA: stream, cuBLAS handle) */
    ll_dtype act;     /* activation dtype (see above) */

    /* memory */
    void *(*alloc)(ll_backend *be, size_t bytes); /* zeroed */
    void (*free)(ll_backend *be, void *p);
    void (*upload)(ll_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(ll_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*memset0)(ll_backend *be, void *p, size_t bytes);
    void (*copy)(ll_backend *be, void *dst, const void *src, size_t bytes); /* device to device */
    void (*sync)(ll_backend *be);
    /* A download in two halves, so the host can go on queueing work while it
     * runs: download_start queues a copy of bytes from src into a buffer the
     * backend owns (after everything queued so far) and returns at once;
     * download_finish waits for that copy and hands it to host_dst.  One in
     * flight per backend.  NULL where a backend has no such thing (the CPU:
     * its download is a memcpy); ll_model_stats_start/finish fall back. */
    void (*download_start)(ll_backend *be, const void *src, size_t bytes);
    void (*download_finish)(ll_backend *be, void *host_dst, size_t bytes);
    /* A training step as one CUDA graph (optional; NULL: ops run as queued).
     * After graph_begin returns 0, the ops queued are recorded, not run;
     * graph_end makes them a graph and launches it (stream-ordered, the host
     * does not wait).  fp identifies the ops with all their arguments (the
     * step's fingerprint, ll_backend_fingerprint); family the step's structure
     * (which blocks run): a kept graph of the family is updated with the new
     * arguments when its nodes are of the same types, else one is built.
     * Between the two no op may read or write host memory or synchronise
     * (upload, download, sync, free: the backend stops with a message); alloc
     * and memset0 are fine.  -1 from graph_begin: not now (ops run as queued).
     * graph_replay launches the kept graph of fingerprint fp as it is, if there
     * is one and the backend's own buffers it used are still there: 0 launched,
     * 1 none (capture the step), -1 graphs are off for good.  graph_end: 0
     * launched; -1 the capture could not be made a graph (conditional nodes
     * the driver refused): nothing ran, graphs are off, run the ops as queued. */
    int (*graph_begin)(ll_backend *be);
    int (*graph_end)(ll_backend *be, uint64_t fp, uint64_t family);
    int (*graph_replay)(ll_backend *be, uint64_t fp);
    void (*graph_stats)(ll_backend *be, ll_graph_stats *out); /* counts since the device was first used */
    /* Inside a captured step, one of two op sequences chosen at each launch
     * (a CUDA IF node with an else body): the ops queued between cond_if and
     * cond_else run when the byte *run (backend memory) is non-zero, those
     * between cond_else and cond_end when it is zero.  host_run is that byte's
     * value, known to the host: a backend that is not capturing (or has no
     * conditionals) returns -1 and the caller queues only the ops of that
     * branch (ll_backend_fingerprint does).  0: both branches are recorded.
     * Calls nest. */
    int (*cond_if)(ll_backend *be, const uint8_t *run, int host_run);
    void (*cond_else)(ll_backend *be);
    void (*cond_end)(ll_backend *be);
    /* dst[i] = src[i] converted (round to nearest even when narrowing); the
     * master -> weight-copy refresh, logits to fp32 for the host, tests. */
    void (*convert)(ll_backend *be, void *dst, ll_dtype dst_type, const void *src, ll_dtype src_type, size_t n);

    void (*gemm)(ll_backend *be, const ll_gemm_desc *g);
    /* Optional (NULL: every op runs in order): the gemms queued with .side have run before any op
     * queued after this one. */
    void (*join)(ll_backend *be);
    /* Optional (NULL or 0 = not offered): the bytes of a ReLU mask for a gemm's C of [rows, cols]
     * (LL_EPI_BIAS_RELU_AUX / LL_EPI_DRELU: the ReLU's backward fused into the next matmul's
     * epilogue).  CUDA offers it where LL_CUDA_RELU_MASK=1 asks for it (ll_backend_relu_mask_asked)
     * and a start-up probe of cuBLASLt's two epilogues passed. */
    size_t (*relu_mask_bytes)(ll_backend *be, int rows, int cols);

    /* Layer norm over the last dim C (eps 1e-5); saves mean/rstd [N] for backward.
     * w, b: the fp32 master gains/biases; statistics in fp32. */
    void (*layernorm_fwd)(ll_backend *be, ll_act *out, real *mean, real *rstd, const ll_act *x, const real *w,
                          const real *b, int N, int C);
    void (*layernorm_bwd)(ll_backend *be, ll_act *dx, real *dw, real *db, const ll_act *dout, const ll_act *x,
                          const real *w, const real *mean, const real *rstd, int N, int C);

    /* out[r] = scale * emb[tok[r]] + pos[(r % T) + pos_offset + *pos_at]; rows whose token is pad are zero.
     * emb: the weight copy (activation dtype); pos: fp32 sinusoids; demb: fp32 gradient.
     * pos_at (NULL: 0) is an int in backend memory, read when the op runs: a
     * decoding step's position, so that the step's ops are the same at every
     * step (one CUDA graph replayed; src/model/infer.c). */
    void (*embed_fwd)(ll_backend *be, ll_act *out, const int32_t *tok, const ll_act *emb, const real *pos,
                      int pos_offset, const int *pos_at, real scale, int N, int T, int C, int pad);
    void (*embed_bwd)(ll_backend *be, real *demb, const ll_act *dout, const int32_t *tok, real scale, int N, int C,
                      int pad);

    /* In place: x = relu(x) (decoding's packed linear layers; training uses
     * gemm's BIAS_RELU).  Backward: dx = dy * (y > 0), in place on dy. */
    void (*relu_fwd)(ll_backend *be, ll_act *x, size_t n);
    void (*relu_bwd)(ll_backend *be, ll_act *dy, const ll_act *y, size_t n);

    /* In place dropout with inverted scaling; mask[i] = kept.  p == 0 sets mask to all ones.
     * Element i uses dropout half-word (offset + i): bits 16*(e & 1).. of Philox word e >> 1. */
    void (*dropout_fwd)(ll_backend *be, ll_act *x, uint8_t *mask, size_t n, real p, const ll_philox *rng,
                        uint64_t offset);
    void (*dropout_bwd)(ll_backend *be, ll_act *dx, const uint8_t *mask, size_t n, real p); /* in place */

    /* y = a + b (may alias a); dst += src. */
    void (*add)(ll_backend *be, ll_act *y, const ll_act *a, const ll_act *b, size_t n);
    /* y = a + alpha * b (may alias a). */
    void (*add_scaled)(ll_backend *be, ll_act *y, const ll_act *a, const ll_act *b, real alpha, size_t n);
    void (*acc)(ll_backend *be, ll_act *dst, const ll_act *src, size_t n);
    /* Scalars in backend memory (gates, ReZero alphas; NULL reads as 1), so a
     * gated residual needs no host round-trip:
     *   add_gated:   y = a + (*g1) (*g2) b   (y may alias a)
     *   scale_gated: x *= (*g1) (*g2)
     *   dot_acc:     *dst += (*mul) <a, b>   (the dot product in double) */
    void (*add_gated)(ll_backend *be, ll_act *y, const ll_act *a, const ll_act *b, const real *g1, const real *g2,
                      size_t n);
    void (*scale_gated)(ll_backend *be, ll_act *x, const real *g1, const real *g2, size_t n);
    void (*dot_acc)(ll_backend *be, real *dst, const ll_act *a, const ll_act *b, size_t n, const real *mul);
    /* A block's residual branch in one pass each way (layers.c), with gates
     * g1, g2 as above (NULL reads as 1) and dropout rate p drawn from rng at
     * element offset `offset` (dropout_fwd's half-word rule; p 0: no dropout,
     * rng may be NULL).  No mask is stored: backward redraws the same bits.
     *   residual_fwd: s = dropout(s) in place, then y = x + (*g1)(*g2) s with
     *     the s just stored (both gates NULL: y = x + s); y may alias x.
     *     Equal to dropout_fwd then add / add_gated.
     *   residual_bwd: ds is the gradient of y.  In order: dx = ds (dx_mode
     *     LL_RES_COPY), dx += ds (LL_RES_ACC) or nothing (LL_RES_NONE, dx may
     *     be NULL); with d = <ds, s> in double, *dg1 += (real)(d (*g2)) and
     *     *dg2 += (real)(d (*g1)) (each when not NULL); ds *= (*g1)(*g2),
     *     stored (rounded to the activation dtype); then ds = dropout_bwd(ds).
     *     Equal to copy/acc, dot_acc, dot_acc, scale_gated, dropout_bwd. */
    void (*residual_fwd)(ll_backend *be, ll_act *y, ll_act *s, const ll_act *x, const real *g1, const real *g2,
                         size_t n, real p, const ll_philox *rng, uint64_t offset);
    void (*residual_bwd)(ll_backend *be, ll_act *ds, ll_act *dx, int dx_mode, const ll_act *s, real *dg1, real *dg2,
                         const real *g1, const real *g2, size_t n, real p, const ll_philox *rng, uint64_t offset);
    /* residual_ln_fwd: residual_fwd over the N x C rows (n = N C), then
     * layernorm_fwd(u, mean, rstd, y, w, b, N, C) of the sum just stored: the
     * pre-norm hand-over to the next block's layer norm, and post-norm's own.
     * Equal to the two ops in sequence, bit for bit (the CUDA backend does both
     * in one kernel: a warp per row, the row still in cache for its statistics). */
    void (*residual_ln_fwd)(ll_backend *be, ll_act *y, ll_act *s, const ll_act *x, const real *g1, const real *g2,
                            real p, const ll_philox *rng, uint64_t offset, ll_act *u, real *mean, real *rstd,
                            const real *w, const real *b, int N, int C);
    /* DLCL, one op per row of W however long the row: xs/ys are host arrays
     * of k backend pointers, w points at k backend scalars (fp32).
     *   weighted_sum:     y = sum_j w[j] xs[j]
     *   weighted_scatter: ys[j] += w[j] x
     *   dots_acc:         dst[j] += <x, ys[j]>  (in double) */
    void (*weighted_sum)(ll_backend *be, ll_act *y, const ll_act *const *xs, const real *w, int k, size_t n);
    void (*weighted_scatter)(ll_backend *be, ll_act *const *ys, const real *w, const ll_act *x, int k, size_t n);
    void (*dots_acc)(ll_backend *be, real *dst, const ll_act *x, const ll_act *const *ys, int k, size_t n);
    /* Latent depth (reference-spec §1.2-§1.5), one row of [rows, L] at a time.
     * latent_sample: z, dzda [L] from logits a [L]: soft = sigmoid((a + g1 - g2) / tau)
     *   with g = -log(-log u), u1, u2 = Philox uniforms 2l, 2l+1 of rng;
     *   z = hard ? (soft > 0.5) : soft; dzda = soft (1 - soft) / tau (straight-through).
     * latent_grad:  dlogits[l] += dgate[l] dzda[l].
     * latent_kl:    for row `row`, weight * KL(q || prior) into *acc and its
     *   gradient into dlogits ([rows, L]); reference = 1: the reference code's
     *   sample-based KL divided by L (prior from the samples z), else the
     *   analytic two-sided KL of q = sigmoid(a).
     * latent_lk:    weight * |sum_l u_l - K| (squared: (.)^2) with u the mean of
     *   the active rows' samples, into *acc; gradients into every active row.
     * latent_depth: *acc += E[L] = mean over active rows of sum_l q_l.
     * latent_q:     q[l] = sigmoid(a[l]) (soft inference gates). */
    void (*latent_sample)(ll_backend *be, real *z, real *dzda, const real *logits, int L, const ll_philox *rng,
                          real tau, int hard);
    void (*latent_grad)(ll_backend *be, real *dlogits, const real *dgate, const real *dzda, int L);
    void (*latent_kl)(ll_backend *be, real *dlogits, double *acc, const real *logits, const real *z,
                      const real *dzda, const ll_latent_prior *pr, int row, int reference, double weight);
    void (*latent_lk)(ll_backend *be, real *dlogits, double *acc, const real *z, const real *dzda,
                      const ll_latent_prior *pr, int K, int squared, double weight);
    void (*latent_depth)(ll_backend *be, double *acc, const real *logits, const ll_latent_prior *pr);
    void (*latent_q)(ll_backend *be, real *q, const real *logits, int L);
    /* ALD (reference-spec §3.3); len [B] target lengths in backend memory.
     * Pooled vectors G and their gradients are fp32 (reductions).
     * ald_pool:   G[b] = mean over t < len[b] of h[b, t]       (G [B, C], h [B*T, C])
     * ald_loss:   G [3, B, C] = clean, light, heavy; *acc += *w * sum_b softplus((cos(G0,G2) - cos(G0,G1)) / tau);
     *             w in backend memory (the batch's token count is in it: a step's ops stay the same)
     *             dG [3, B, C] = its gradient (overwritten; NULL: none)
     * ald_unpool: dh[b, t] = dG[b] / len[b] for t < len[b], else 0 (overwritten) */
    void (*ald_pool)(ll_backend *be, real *G, const ll_act *h, const int *len, int B, int T, int C);
    void (*ald_loss)(ll_backend *be, real *dG, double *acc, const real *G, int B, int C, real tau, const double *w);
    void (*ald_unpool)(ll_backend *be, ll_act *dh, const real *dG, const int *len, int B, int T, int C);
    /* *acc += sum of x^2 (a stats slot). */
    void (*sumsq)(ll_backend *be, double *acc, const real *x, size_t n);
    /* End of an update's backward, on stats: GNORM = grad_scale * sqrt(GSUMSQ);
     * GMUL = grad_scale * min(1, clip / (GNORM + 1e-6)) (fairseq's
     * clip_grad_norm_; clip <= 0: no clipping); SKIP = 1 when LOSS or GNORM is
     * not finite or SPIKE is set (spike_check); unless skipped, ADAM_T += 1 and (phi_step) ADAM_T_PHI += 1. */
    void (*grad_finish)(ll_backend *be, double *stats, double grad_scale, double clip_norm, int phi_step);
    /* Spike detection (train.spike_zscore_loss / _gnorm; llm.c's outlier detectors), on stats
     * after sumsq and before grad_finish: the update's per-token loss LOSS * grad_scale and its
     * gradient norm grad_scale * sqrt(GSUMSQ) (grad_finish's GNORM), each as a z-score against the
     * previous `window` updates' values kept in state (z = (x - mean) / std, population std, the
     * sums in slot order, squares by fma; 0 when std is 0; NaN until `window` values were seen)
     * into Z_LOSS and Z_GNORM; SPIKE = 1 when a z-score exceeds its threshold (> 0: on), and then
     * grad_finish skips the update.  A finite pair joins the window, a skipped update's too (the
     * window follows a lasting change).  state: [0] values seen (at most window), [1] the next
     * slot, [2, 2 + window) the losses, [2 + window, 2 + 2 window) the norms. */
    void (*spike_check)(ll_backend *be, double *stats, double *state, int window, double grad_scale, double z_loss,
                        double z_gnorm);

    /* Multi-head scaled dot-product attention, flash style: forward keeps one
     * statistic per query row instead of the [B, H, Tq, Tk] probabilities, and
     * backward recomputes them.
     *   q: [B, Tq] rows with row stride q_stride, head h at columns h*Dh..;
     *   k, v: [B, Tk] rows with stride kv_stride;
     *   out: [B*Tq, H*Dh] (stride H*Dh).
     * Masks (backward takes the same ones): query i of sentence b sees key j iff
     * j < key_len[b] (key_len NULL: all Tk) and, when causal, j <= i + (Tk - Tq)
     * (Tk > Tq: the queries are the last Tq positions).  A query that sees no
     * key gets out = 0.
     * lse: [B, H, Tq], log sum_j exp(s_ij) over the visible keys, where
     *   s_ij = q_i . k_j / sqrt(Dh); P_ij = exp(s_ij - lse_i); -INFINITY for a
     *   query that sees no key.  It is `real`: fp32 in the product build (the
     *   rule for saved statistics: fp32, whatever the activations' type), double
     *   in the finite-difference build so the checks stay exact.  Forward may
     *   get lse = NULL when no backward follows (decoding).
     * Dropout (attn_dropout > 0) on the probabilities, inverted scaling:
     *   element (b, h, i, j) of the call uses dropout half-word
     *   e = rng_offset + ((b*H + h)*Tq + i)*Tk + j, i.e. bits 16*(e & 1)..+15
     *   of Philox word e >> 1 of rng (ll_philox_u32(rng, e >> 1)), and is kept
     *   iff that half-word >= round(attn_dropout * 65536) -- dropout_fwd's rule.
     *   A slice of a batch starting at sentence row0 passes
     *   rng_offset = row0*H*Tq*Tk, so element (row0 + b, h, i, j) of the whole
     *   batch draws the same bit; every element's bit is a pure function of its
     *   index, so a GPU kernel draws it without sequential state.
     *   out = (P o keep / (1 - p)) V.
     * attention_bwd: given out, lse and dout, overwrites the heads' columns of
     * dq, dk and dv (zeros where no gradient flows), so they need not be
     * cleared; it uses D_i = rowsum(dout_i o out_i) for the softmax backward. */
    void (*attention_fwd)(ll_backend *be, ll_act *out, real *lse, const ll_act *q, int q_stride, const ll_act *k,
                          const ll_act *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                          int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset);
    void (*attention_bwd)(ll_backend *be, ll_act *dq, ll_act *dk, ll_act *dv, const ll_act *dout, const ll_act *out,
                          const real *lse, const ll_act *q, int q_stride, const ll_act *k, const ll_act *v,
                          int kv_stride,
                          const int *key_len, int B, int Tq, int Tk, int H, int Dh, int causal, real attn_dropout,
                          const ll_philox *rng, uint64_t rng_offset);

    /* Label-smoothed cross-entropy, fused with its gradient (fairseq's formula:
     * q[y] = 1-eps, q[v != y] = eps/(V-1)).  logits [N,V] are overwritten with
     * grad_scale * (softmax - q) (0 for pad targets).  Adds the summed loss and
     * nll (natural log) over non-pad rows to acc[0] and acc[1] (stats slots). */
    void (*xent_fwd_bwd)(ll_backend *be, ll_act *logits, const int32_t *target, int N, int V, real eps, int pad,
                         real grad_scale, double *acc);
    /* DDR: given log-probabilities lpa, lpb [N,V] of two passes, add
     * alpha/2 * d[KL(pa||pb) + KL(pb||pa)]/d(logits) to da and db (rows with a
     * pad target are skipped) and add alpha/2 * the summed symmetric KL to *acc. */
    void (*sym_kl)(ll_backend *be, const ll_act *lpa, const ll_act *lpb, ll_act *da, ll_act *db, const int32_t *target,
                   int N, int V, int pad, real alpha, double *acc);
    /* log-softmax in place (inference). */
    void (*log_softmax)(ll_backend *be, ll_act *x, int N, int V);
    /* pick_logp: out[i] = logp[i*V + target[i]] as real, 0 where target[i]
     * == pad: a reference's token scores (lldecode --score-reference).
     * target and out in backend memory. */
    void (*pick_logp)(ll_backend *be, real *out, const ll_act *logp, const int32_t *target, int N, int V, int pad);
    /* ensemble_mix: acc[i] = log(exp(acc[i]) + exp(x[i] + b)) - c over n elements (-inf where both
     * are -inf; the CPU in fp32 with a fast exp and log, CUDA in double: ~2e-7 relative): an ensemble's members' log-probabilities summed as probabilities,
     * b = log(w_j / w_0) a member's weight against the first model's (0: equal), c = log(sum w / w_0) at the
     * last, their (weighted) average (lldecode --model A --model B [--weights]; fairseq's
     * EnsembleModel).  acc and x in the activation dtype, in backend memory. */
    void (*ensemble_mix)(ll_backend *be, ll_act *acc, const ll_act *x, size_t n, double b, double c);
    /* add_col: x[r*V + col] += val for r < rows (a token's log-probability moved in every row:
     * lldecode --unkpen, as fairseq's lprobs[:, unk] -= unk_penalty).  x in the activation dtype. */
    void (*add_col)(ll_backend *be, ll_act *x, int rows, int V, int col, real val);
    /* fill_at: x[idx[i]] = val for i < n (flat indices, repeats allowed: tokens banned from rows,
     * lldecode --no-repeat-ngram-size as fairseq's NGramRepeatBlock).  idx [n] in backend memory,
     * x in the activation dtype. */
    void (*fill_at)(ll_backend *be, ll_act *x, const int32_t *idx, int n, real val);
    /* expand_cols: dst[r*V + cols[j]] = src[r*K + j], every other element of dst's rows r < rows
     * := fill (a vocabulary shortlist's log-probabilities [rows, K] placed in the full rows
     * [rows, V], the rest -inf: lldecode --shortlist).  cols [K] distinct, in backend memory;
     * dst and src in the activation dtype (src copied bit for bit). */
    void (*expand_cols)(ll_backend *be, ll_act *dst, const ll_act *src, const int32_t *cols, int rows, int V, int K,
                        real fill);
    /* sample_draw: one token per row from the rows' log-probabilities logp
     *   [rows, V] (lldecode --sampling; src/decode/sample.c).  Per row, in
     *   double: q = logp / temperature, q[unk] -= unkpen, q = -inf at the
     *   row's bans; the drawable tokens are those with q > -inf but pad, bos
     *   and eos unless mode bit 0; among them the topk best (ties to the lower
     *   id), then (0 < topp < 1) the fewest of those, most probable first
     *   (weight ties to the lower id), whose weight reaches topp of theirs
     *   (their weights added one by one in that order); weights w = exp(q -
     *   max drawable q); W = their sum (the nucleus: its kept weight), and
     *   tok = the first candidate in token order whose running sum exceeds
     *   u * W (the last one if rounding leaves none).  Sums over tokens run in
     *   blocks of LL_SAMPLE_SUM_BLOCK candidates: the running sum at candidate
     *   i of block j is (the blocks before j, summed in order) + (block j's
     *   terms up to i, in order).  No draw: forced, else
     *   eos under mode bit 1 or with nothing drawable.  lq = the token's
     *   log-probability under softmax(logp / temperature) normalised over every
     *   token (bans and unkpen left out of the normaliser), less unkpen for
     *   unk (temperature 1: logp[tok] less that).  Every sum is defined
     *   term by term, so each backend adds the same numbers in the same
     *   order: CUDA equals the CPU up to exp's last bit.
     *   tok, lq, row [rows] and ban in backend memory; p on the host. */
    void (*sample_draw)(ll_backend *be, int32_t *tok, double *lq, const ll_act *logp, const ll_sample_row *row,
                        const int32_t *ban, int rows, int V, const ll_sample_params *p);

    /* Incremental decoding (src/model/infer.c, src/decode/beam.c).
     * copy_rows: rows x n elements, row i of src (stride src_stride elements)
     *   to row i of dst (stride dst_stride): the KV-cache write of a step;
     *   with at (NULL: none), dst starts *at * at_stride elements further.
     * The `*_at` arguments (NULL: 0) are ints in backend memory, read when the
     *   op runs and added to the host value beside them: the step's position,
     *   so that a step's ops are the same at every step (one CUDA graph).
     * reorder_rows: row r of buf (stride `stride` elements, the first n used)
     *   becomes old row from[r], for r < rows (beam reorder, dropping finished
     *   sentences); from [rows] in backend memory; scratch holds rows * n.
     * beam_topk: rows are grouped `beam` per sentence, groups in a row.  For
     *   each group, the k best candidates (row r, token v) by
     *   cum[r] + logp[r, v] (in double), over rows with cum[r] > -inf: never
     *   pad or bos; eos only when mode[g] & 1 (min length reached); only eos
     *   when mode[g] & 2 (max length).  Best first, ties to the lower
     *   (row, token); NaN never ranks.  Per group k slots: score[g*k + i],
     *   the token's log-prob lp[..] and flat[..] = r * V + v (r the row
     *   index in the whole batch); slots beyond the candidates get score -inf
     *   and flat -1.  cum [groups*beam] and mode [groups] in backend memory.
     *   Buffers and logp in the activation dtype; lp is real.
     *   Diverse beam search (fairseq's DiverseBeamSearch), div_groups D > 1
     *   (D divides k; beam a multiple of D, or 1: every subgroup ranks the one
     *   row): subgroup s of a group ranks its rows b with b % D == s by
     *   fma(-div_strength, c_s(v), cum[r] + logp[r, v]), c_s(v) the number of
     *   this group's filled slots of subgroups < s holding token v; its q-th
     *   best goes to slot q * D + s (k / D each, interleaved), lp the penalised
     *   log-prob fma(-div_strength, c_s(v), logp[r, v]).  D = 1: no penalty.
     * attention_cached: a decoding step's self-attention over the KV cache,
     *   read through per-row ancestry instead of reordered copies (beam
     *   hypotheses share their prefix's cache entries).  Query row r
     *   (q + r*q_stride, H heads of Dh) attends to keys j < n_keys + *n_at: key j at
     *   kv + a*row_stride + j*kv_stride and its value C = H*Dh elements
     *   further, where a = anc[r*anc_stride + j] (anc NULL: a = r).  Softmax
     *   in fp32; no mask beyond n_keys, no dropout, no lse; out [rows, C].
     * beam_ancestry: anc [rows, stride] ints in backend memory; entry (r, j)
     *   is the cache row that holds position j of hypothesis r.  With from
     *   (backend [rows]; NULL: no move), and t += *t_at: entries j < t of row r become those
     *   of old row from[r] plus (r/group - from[r]/group)*group (a compaction
     *   moves a whole sentence's `group` cache rows by that much; a beam
     *   reorder stays inside the group: + 0); then, if t < stride, entry t
     *   of every row = r (the row writes position t itself).  scratch:
     *   rows*t ints.
     * attn_align: a decoding step's hard alignment (fairseq's
     *   --print-alignment): query rows grouped `per_sent` per sentence; row r
     *   (q + r*q_stride, H heads of Dh) attends to its sentence b's keys
     *   j < key_len[b] (kv + (b*S + j)*kv_stride, heads of Dh in a row).
     *   idx[r] = the key j < key_len[b] - 1 (the last key, the source's EOS,
     *   left out) with the highest probability summed over the heads
     *   (softmax of q.k/sqrt(Dh) per head, in fp32), ties to the lower j;
     *   -1 when key_len[b] < 2.  key_len and idx in backend memory.
     * attn_probs: an ensemble's share of the alignment (fairseq averages its
     *   models' attention, each averaged over its heads): the same
     *   probabilities as attn_align, summed over the heads in head order,
     *   times w / H, written (overwrite) or added to acc[r*S + j] for
     *   j < key_len[b]; acc's other entries as they were.  acc real
     *   [rows * S] in backend memory.
     * align_argmax: idx[r] = the key j < key_len[b] - 1 with the highest
     *   acc[r*S + j], ties to the lower j; -1 when key_len[b] < 2 (the last
     *   step of an ensemble's alignment, as attn_align's). */
    void (*copy_rows)(ll_backend *be, ll_act *dst, size_t dst_stride, const ll_act *src, size_t src_stride, int rows,
                      size_t n, const int *at, size_t at_stride);
    void (*reorder_rows)(ll_backend *be, ll_act *buf, ll_act *scratch, const int *from, int rows, size_t n,
                         size_t stride);
    void (*beam_topk)(ll_backend *be, double *score, real *lp, int32_t *flat, const ll_act *logp, const double *cum,
                      const uint8_t *mode, int groups, int beam, int V, int k, int div_groups, double div_strength,
                      int pad, int bos, int eos);
    void (*attention_cached)(ll_backend *be, ll_act *out, const ll_act *q, int q_stride, const ll_act *kv,
                             int kv_stride, size_t row_stride, const int *anc, int anc_stride, int n_keys,
                             const int *n_at, int rows, int H, int Dh);
    void (*beam_ancestry)(ll_backend *be, int *anc, int *scratch, const int *from, int rows, int t, const int *t_at,
                          int stride, int group);
    void (*attn_align)(ll_backend *be, int32_t *idx, const ll_act *q, int q_stride, const ll_act *kv, int kv_stride,
                       const int *key_len, int sents, int per_sent, int S, int H, int Dh);
    void (*attn_probs)(ll_backend *be, real *acc, int overwrite, real w, const ll_act *q, int q_stride,
                       const ll_act *kv, int kv_stride, const int *key_len, int sents, int per_sent, int S, int H,
                       int Dh);
    void (*align_argmax)(ll_backend *be, int32_t *idx, const real *acc, const int *key_len, int sents, int per_sent,
                         int S);

    /* fairseq Adam with decoupled weight decay (reference-spec §5.3) on the
     * gradient times stats[LL_ST_GMUL]; the 1-based step is stats[t_slot]; does
     * nothing when stats[LL_ST_SKIP] is set.  p_act (NULL when the weight copy
     * aliases the master, i.e. act is the dtype of real): the activation-dtype
     * copy of p, refreshed from the updated p in the same pass. */
    void (*adam)(ll_backend *be, real *p, ll_act *p_act, const real *g, real *m, real *v, size_t n, real lr, real b1,
                 real b2, real eps, real wd, const double *stats, int t_slot);
    /* Exponential moving average of the weights (fairseq's --ema-decay, Marian's
     * --exponential-smoothing): e = decay * e + (1 - decay) * p, evaluated as
     * fma(decay, e - p, p) on every backend (decay 0 copies p exactly); does
     * nothing when stats[LL_ST_SKIP] is set, as Adam. */
    void (*ema)(ll_backend *be, real *e, const real *p, size_t n, real decay, const double *stats);

    /* Optional (NULL = not offered): inference linear layers on weights packed
     * once into the backend's preferred layout.  linear_pack takes W [N,K]
     * (y = x W^T, the fp32 master) and returns a handle, or NULL when it has no
     * fast path (the caller then uses gemm; the bf16 CPU backend has none).
     * int8: W and each call's X quantised to int8 (per row, CTranslate2's scheme;
     * src/backend/cpu/cpu_linear_int8.c), NULL where not offered (CUDA, bf16, the
     * double build).  linear_packed: Y[M,N] = X[M,K] W^T + bias (bias
     * may be NULL), rows of X and Y at strides ldx and ldy. */
    void *(*linear_pack)(ll_backend *be, const real *W, int N, int K, int int8);
    void (*linear_packed)(ll_backend *be, ll_act *Y, int ldy, const ll_act *X, int ldx, const void *packed,
                          const real *bias, int M);
    void (*linear_unpack)(ll_backend *be, void *packed);
};


/* Element i of an activation-dtype buffer (byte offset i * the dtype's size);
 * const in, non-const out, like strchr. */
static inline size_t ll_act_size(const ll_backend *be) { return ll_dtype_bytes(be->act); }
static inline ll_act *ll_act_at(const ll_backend *be, const ll_act *p, size_t i) {
    return (ll_act *)((char *)(uintptr_t)p + i * ll_act_size(be));
}
/* Does the activation dtype equal `real` (so an ll_act * may be read as a real *)? */
static inline int ll_act_is_real(const ll_backend *be) { return be->act == LL_REAL_DTYPE; }

/* The CPU backend with activations in the dtype of `real` (one shared instance). */
ll_backend *ll_backend_cpu(void);
/* The CPU backend with activations in `act` (LL_BF16: ops convert to fp32
 * scratch, compute as the fp32 backend does and round back; the dtype of real:
 * ll_backend_cpu()).  One instance per dtype, so models of both coexist. */
ll_backend *ll_backend_cpu_precision(ll_dtype act);
/* 1 for the CPU backends above (not a counting wrapper of one). */
int ll_backend_is_cpu(const ll_backend *be);
/* NULL (with errbuf set) when CUDA was not built in or no device is present.
 * ll_backend_cuda: fp32 activations.  ll_backend_cuda_precision: activations
 * in `act` (LL_F32 or LL_BF16); one instance per (device, dtype), the two of
 * a device sharing its stream, so models of both dtypes coexist. */
ll_backend *ll_backend_cuda(int device);
ll_backend *ll_backend_cuda_precision(int device, ll_dtype act);
int ll_cuda_device_count(void); /* 0 when CUDA is not built in or there is no GPU */
/* train.tf32: fp32 matmuls of a CUDA backend on TF32 tensor cores (on) or
 * exact (off, the backend's default: the parity tests compare exact
 * products).  Returns 1 when it applies (a CUDA backend), 0 elsewhere. */
int ll_backend_set_tf32(ll_backend *be, int on);
/* gemm calls of a CUDA backend's device so far that cuBLASLt did not run as
 * one fused matmul (refused epilogue or product: a plain matmul plus the
 * epilogue as separate kernels, or cublasGemmEx).  0 on other backends.  The
 * step and decode tests require none (docs/cuda-backend.md). */
uint64_t ll_backend_gemm_fallbacks(ll_backend *be);
/* gemm calls of a CUDA backend's device so far that ran on its side stream (ll_gemm_desc.side;
 * 0 elsewhere, and with LL_CUDA_SIDE_STREAM=0). */
uint64_t ll_backend_side_gemms(ll_backend *be);
/* layer norm backwards whose column-sum finish (dw, db) ran on that side stream: those inside a
 * stack's layers, after a weight gradient went there (0 elsewhere). */
uint64_t ll_backend_side_ln_finishes(ll_backend *be);
/* 1 when a CUDA backend launches ll's kernels with programmatic dependent launch now (a device of
 * compute capability 9.0+, not switched off by LL_CUDA_PDL=0); 0 elsewhere. */
int ll_backend_pdl(ll_backend *be);
/* The step graphs a CUDA backend keeps (LL_CUDA_GRAPHS_KEPT, at most 64); 0 elsewhere. */
int ll_backend_graphs_kept(ll_backend *be);
/* LL_CUDA_RELU_MASK=1: the FFN's ReLU backward in cuBLASLt's DRELU epilogue (relu_mask_bytes) on
 * CUDA, and in the dry run's count.  Off by default: on an H100 it made ll64's step 3 ms slower
 * (cuBLASLt's DRELU product took 55 us where the plain one took 15; bench/RESULTS.md, session 24). */
static inline int ll_backend_relu_mask_asked(void) {
    const char *v = getenv("LL_CUDA_RELU_MASK");
    return v && v[0] == '1' && !v[1];
}
/* LL_CUDA_BGRAD_EPILOGUE=1: weight gradients with cuBLASLt's bias-gradient epilogue on CUDA (and in
 * the dry run's count).  Off by default: plain dW products (which cuBLASLt may split over K) and the
 * bias-gradient kernel ran ll64's step 4.4 ms faster on an H200 (bench/RESULTS.md, session 30).
 * LL_CUDA_BGRAD_EPILOGUE=0 is the default; another value stops (ll_backend_bgrad_epilogue_check). */
static inline int ll_backend_bgrad_epilogue_asked(void) {
    const char *v = getenv("LL_CUDA_BGRAD_EPILOGUE");
    return v && v[0] == '1' && !v[1];
}
/* The GPU benchmark's matmul survey (ll_gpu_bench --gemm-survey): for one
 * product of g's shape, types and epilogue (g's pointers unused: the survey
 * allocates its own operands), cuBLASLt's first `max` candidate algorithms,
 * each timed with CUDA events over `reps` calls after two untimed ones.
 * out[0] is the heuristic's first choice, the one the gemm op runs.  Returns
 * how many candidates were filled in: 0 when the backend is not CUDA or
 * cuBLASLt has no algorithm (the op falls back), -1 on a CUDA error (out of
 * memory) or during a graph capture.  Synchronises. */
#define LL_GEMM_SURVEY_MAX 16
typedef struct {
    double us; /* per call; -1: this candidate failed to run; -2: it ran, no timing (the CUDA emulation) */
    int algo_id, tile, stages, splitk, swizzle; /* cuBLASLt's CUBLASLT_ALGO_CONFIG_* (-1: not given) */
    size_t workspace;
    float waves;
} ll_gemm_algo_time;
int ll_backend_gemm_survey(ll_backend *be, const ll_gemm_desc *g, int max, int reps, ll_gemm_algo_time *out);
/* LL_CUDA_GEMM_TUNE=N (a CUDA backend; off by default): each new matmul shape runs
 * the fastest of cuBLASLt's first N candidates, timed once.  Shapes timed and
 * those that switched from the heuristic's first choice so far (0 elsewhere). */
void ll_backend_gemm_tune_stats(ll_backend *be, uint64_t *tuned, uint64_t *switched);
/* acc += b - a, count by count (what happened between two graph_stats reads) */
void ll_graph_stats_add(ll_graph_stats *acc, const ll_graph_stats *b, const ll_graph_stats *a);
/* The backend a setting names (train.device, lldecode --device) with
 * activations in `act` (train.precision, lldecode --precision): "cpu"
 * (ll_backend_cpu_precision(act)); "cuda" (GPU `gpu`, e.g. a rank's local
 * rank: ll_backend_cuda_precision(gpu, act); NULL + errbuf "<setting> cuda:
 * ..." when there is none or it lacks an op); "auto" (that GPU when present
 * and complete, else the CPU).  Logs the choice (ll_log).  Anything else:
 * NULL + errbuf. */
ll_backend *ll_backend_select(const char *device, ll_dtype act, int gpu, const char *setting);

/* A backend that forwards every op to `inner` and counts the calls
 * (src/backend/counting.c; lltrain --op-stats).  ll_backend_dry counts ops
 * without running them and hands out address space it never touches, so a
 * step's memory can be measured at any size (lltrain --dry-run). */
typedef struct {
    uint64_t calls, uploads, downloads;
    /* stream operations (kernels, async copies and memsets) the CUDA backend
     * issues for the counted calls, by rules of counting.c, whatever the
     * inner backend: the dry run's launch estimate on any machine */
    uint64_t launches;
    uint64_t per_op[sizeof(ll_backend) / sizeof(void *)]; /* by slot = field offset / sizeof(void *) */
    uint64_t per_op_launches[sizeof(ll_backend) / sizeof(void *)];
    uint64_t per_op_ns[sizeof(ll_backend) / sizeof(void *)]; /* ll_backend_timing: time inside each op */
    size_t mem_live, mem_peak; /* dry: backend bytes allocated now / at most */
} ll_op_counts;
/* The CUDA layer-norm backward runs dx and the dw/db partials in one kernel
 * up to this width (its per-warp column sums fit 48 KiB of shared memory),
 * then one kernel adds the partials: 2 launches, else 3 (a launch rule of
 * counting.c, kept here so that the rule and kernels/layernorm.cu agree). */
#define LL_CUDA_LN_BWD_FUSED_MAX_C 1536
/* The CUDA bf16 attention backward on tensor cores runs as one kernel (a block per sentence and
 * head) when every query and every key fit one tile of 32, else as two (dq; dk/dv): a launch
 * rule of counting.c, kept here so that the rule and kernels/attention_tc.cu agree.  (The
 * tensor cores also need a bf16 WMMA device and no LL_CUDA_ATTENTION=simt.) */
static inline int ll_cuda_attention_bwd_one_kernel(ll_dtype act, int Tq, int Tk, int Dh) {
    return act == LL_BF16 && Dh % 16 == 0 && Dh <= 128 && Tq > 0 && Tq <= 32 && Tk <= 32;
}
ll_backend *ll_backend_counting(ll_backend *inner);
ll_backend *ll_backend_dry(ll_backend *like);
/* Counting, and each op timed between syncs of `inner` (a profile: slower
 * than a real step, but it shows where the time goes).  The table, per op
 * and per op class, goes to f with ll_backend_print_profile. */
ll_backend *ll_backend_timing(ll_backend *inner);
/* A wrapper that hashes every op with its arguments (pointers by value, the
 * gemm, Philox and prior descriptors by content): two runs of a training step
 * with equal hashes issue the same ops with the same arguments, so the CUDA
 * graph captured from one can be launched for the other.  In a shadow run the
 * ops are hashed, not run (alloc and free still run: their addresses are
 * hashed).  _take returns the hash since the last take and restarts it.
 * Freed with ll_backend_counting_free. */
ll_backend *ll_backend_fingerprint(ll_backend *inner);
void ll_backend_fingerprint_shadow(ll_backend *fingerprint, int shadow);
uint64_t ll_backend_fingerprint_take(ll_backend *fingerprint);
void ll_backend_print_profile(FILE *f, const ll_op_counts *c, double steps);
/* A counting (or timing, or dry) wrapper's gemm calls by shape: g is the
 * descriptor without pointers, alpha 1, beta 0 or 1 (whether C is added);
 * ns the time inside the calls (timing wrappers; else 0).  Fills out with up
 * to max shapes, the most time first (then the most calls); returns how many. */
typedef struct {
    ll_gemm_desc g;
    uint64_t calls, ns;
} ll_gemm_shape;
int ll_backend_gemm_shapes(ll_backend *counting, ll_gemm_shape *out, int max);
void ll_backend_gemm_shapes_reset(ll_backend *counting);
void ll_backend_counting_free(ll_backend *counting_or_dry);
ll_op_counts *ll_backend_counts(ll_backend *counting);
const char *ll_backend_op_name(size_t slot);

/* Name of the first op the model needs that `be` lacks, or NULL when complete. */
const char *ll_backend_missing(const ll_backend *be);

#ifdef __cplusplus
}
#endif
#endif
