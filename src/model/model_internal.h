/* Private model structures: saved activations and the per-block functions. */
#ifndef LL_MODEL_INTERNAL_H
#define LL_MODEL_INTERNAL_H

#include "ll/model.h"

typedef enum { SUB_SELF, SUB_CROSS, SUB_FFN } ll_sub_kind;
enum { BLOCK_RUN = 0, BLOCK_IDENTITY = 1, BLOCK_OFF = 2 };

/* Dropout sites: each gets its own Philox stream, so masks do not depend on
 * the order in which ops run (and match across backends). */
enum { SITE_EMB = 0, SITE_SELF = 1, SITE_SELF_PROBS = 2, SITE_CROSS = 3, SITE_CROSS_PROBS = 4, SITE_ACT = 5, SITE_FFN = 6 };

/* One residual block: x -> y with a sub-layer (attention or FFN), pre- or post-norm. */
typedef struct {
    ll_sub_kind kind;
    size_t ln_w, ln_b;
    const ll_layer_offsets *L;
    ll_layer_ctl *ctl; /* the layer's gate/skip (shared by its blocks) */
    int mode;          /* set by forward: BLOCK_RUN, BLOCK_IDENTITY (layer skipped), BLOCK_OFF (branch off) */
    real *s;           /* sub-layer output after dropout (for dgate) */
    const real *x; /* input (owned by the previous block) */
    real *u;       /* pre-norm: LN(x), the sub-layer input */
    real *a;       /* post-norm: x + drop(s), the LN input */
    real *y;       /* output */
    real *mean, *rstd;
    uint8_t *mask; /* dropout of the sub-layer output (NULL: none) */
    /* attention */
    real *qkv, *q, *kv, *ctx, *probs;
    uint8_t *pmask;
    /* FFN */
    real *h, *hd;
    uint8_t *amask;
} ll_block;

/* Shape and context shared by the blocks of one forward pass. */
typedef struct {
    int B, T;             /* batch, query length of this stack */
    int S;                /* source length (cross-attention keys) */
    const int *self_len;  /* key lengths for self-attention */
    const int *src_len;   /* key lengths for cross-attention */
    const real *enc_out;  /* [B*S, C] (decoder) */
    real *d_enc_out;      /* gradient of enc_out (decoder backward) */
    int train;
    uint64_t seed, rng_step;
    int stack;            /* 0 encoder, 1 decoder */
} ll_pass;

typedef struct ll_fwd_state {
    int B, S, T;
    int n_enc_blocks, n_dec_blocks;
    ll_block *enc_blocks, *dec_blocks;
    real *enc_x0, *dec_x0;       /* embeddings after dropout */
    uint8_t *enc_emb_mask, *dec_emb_mask;
    real *enc_top, *dec_top;     /* stack outputs before the final LN */
    real *enc_out, *dec_out;     /* after the final LN (pre-norm) or == top */
    real *enc_mean, *enc_rstd, *dec_mean, *dec_rstd;
    real *logits;                /* [B*T, V], then dlogits */
    int *src_len, *tgt_len;
} ll_fwd_state;

/* Philox stream of a dropout site. */
void ll_site_rng(ll_philox *r, const ll_pass *p, int layer, int site);

void ll_block_fwd(ll_model *m, ll_block *blk, const ll_pass *p, int layer);
/* dx += d(block)/dx^T dy.  dy may be overwritten. */
void ll_block_bwd(ll_model *m, ll_block *blk, const ll_pass *p, real *dy, real *dx);

/* y[N,out] = x[N,in] W^T + b ; backward accumulates dW, db and dx (if non-NULL):
 * dx = dx_beta * dx + dy W, so dx_beta = 0 writes a fresh (uninitialised) buffer. */
void ll_linear_fwd(ll_model *m, real *y, const real *x, int N, int in, int out, size_t w, size_t b);
void ll_linear_bwd(ll_model *m, real *dx, real dx_beta, const real *dy, const real *x, int N, int in, int out,
                   size_t w, size_t b);

real *ll_zeros(ll_model *m, size_t n); /* zeroed arena buffer */
real *ll_buf(ll_model *m, size_t n);   /* uninitialised arena buffer */

#endif
