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
 *    they stay fp32 when activations move to bf16. */
#ifndef LL_BACKEND_H
#define LL_BACKEND_H

#include "ll/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ll_backend ll_backend;

struct ll_backend {
    const char *name; /* "cpu" or "cuda" */
    void *impl;       /* backend private state (CUDA: stream, cuBLAS handle) */

    /* memory */
    void *(*alloc)(ll_backend *be, size_t bytes); /* zeroed */
    void (*free)(ll_backend *be, void *p);
    void (*upload)(ll_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(ll_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*memset0)(ll_backend *be, void *p, size_t bytes);
    void (*copy)(ll_backend *be, void *dst, const void *src, size_t bytes); /* device to device */
    void (*sync)(ll_backend *be);

    /* C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op(A) is [M,K]. */
    void (*gemm)(ll_backend *be, int trans_a, int trans_b, int M, int N, int K, real alpha, const real *A,
                 int lda, const real *B, int ldb, real beta, real *C, int ldc);

    /* Layer norm over the last dim C (eps 1e-5); saves mean/rstd [N] for backward. */
    void (*layernorm_fwd)(ll_backend *be, real *out, real *mean, real *rstd, const real *x, const real *w,
                          const real *b, int N, int C);
    void (*layernorm_bwd)(ll_backend *be, real *dx, real *dw, real *db, const real *dout, const real *x,
                          const real *w, const real *mean, const real *rstd, int N, int C);

    /* out[r] = scale * emb[tok[r]] + pos[(r % T) + pos_offset]; rows whose token is pad are zero. */
    void (*embed_fwd)(ll_backend *be, real *out, const int32_t *tok, const real *emb, const real *pos,
                      int pos_offset, real scale, int N, int T, int C, int pad);
    void (*embed_bwd)(ll_backend *be, real *demb, const real *dout, const int32_t *tok, real scale, int N, int C,
                      int pad);

    /* y[r,:] += b (bias add); db += column sums of dy. */
    void (*bias_fwd)(ll_backend *be, real *y, const real *b, int N, int C);
    void (*bias_bwd)(ll_backend *be, real *db, const real *dy, int N, int C);
    /* Optional (NULL: gemm with beta 0, then bias_fwd): y[r,:] = b, so a linear
     * layer's gemm can start from the bias with beta 1 -- one pass over y
     * instead of BLAS zeroing it and a bias pass adding to it. */
    void (*bias_set)(ll_backend *be, real *y, const real *b, int N, int C);

    /* In place: x = relu(x).  Backward: dx = dy * (y > 0), in place on dy. */
    void (*relu_fwd)(ll_backend *be, real *x, size_t n);
    void (*relu_bwd)(ll_backend *be, real *dy, const real *y, size_t n);

    /* In place dropout with inverted scaling; mask[i] = kept.  p == 0 sets mask to all ones.
     * Element i uses Philox word (offset + i). */
    void (*dropout_fwd)(ll_backend *be, real *x, uint8_t *mask, size_t n, real p, const ll_philox *rng,
                        uint64_t offset);
    void (*dropout_bwd)(ll_backend *be, real *dx, const uint8_t *mask, size_t n, real p); /* in place */

    /* y = a + b (may alias a); dst += src. */
    void (*add)(ll_backend *be, real *y, const real *a, const real *b, size_t n);
    /* y = a + alpha * b (may alias a); dot product in double. */
    void (*add_scaled)(ll_backend *be, real *y, const real *a, const real *b, real alpha, size_t n);
    double (*dot)(ll_backend *be, const real *a, const real *b, size_t n);
    void (*acc)(ll_backend *be, real *dst, const real *src, size_t n);
    void (*scale)(ll_backend *be, real *x, real s, size_t n);
    double (*sumsq)(ll_backend *be, const real *x, size_t n);

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
    void (*attention_fwd)(ll_backend *be, real *out, real *lse, const real *q, int q_stride, const real *k,
                          const real *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                          int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset);
    void (*attention_bwd)(ll_backend *be, real *dq, real *dk, real *dv, const real *dout, const real *out,
                          const real *lse, const real *q, int q_stride, const real *k, const real *v, int kv_stride,
                          const int *key_len, int B, int Tq, int Tk, int H, int Dh, int causal, real attn_dropout,
                          const ll_philox *rng, uint64_t rng_offset);

    /* Label-smoothed cross-entropy, fused with its gradient (fairseq's formula:
     * q[y] = 1-eps, q[v != y] = eps/(V-1)).  logits [N,V] are overwritten with
     * grad_scale * (softmax - q) (0 for pad targets).  Returns summed loss and nll
     * (natural log) over non-pad rows. */
    void (*xent_fwd_bwd)(ll_backend *be, real *logits, const int32_t *target, int N, int V, real eps, int pad,
                         real grad_scale, double *loss_sum, double *nll_sum);
    /* DDR: given log-probabilities lpa, lpb [N,V] of two passes, add
     * alpha/2 * d[KL(pa||pb) + KL(pb||pa)]/d(logits) to da and db (rows with a
     * pad target are skipped) and return alpha/2 * the summed symmetric KL. */
    double (*sym_kl)(ll_backend *be, const real *lpa, const real *lpb, real *da, real *db, const int32_t *target,
                     int N, int V, int pad, real alpha);
    /* log-softmax in place (inference). */
    void (*log_softmax)(ll_backend *be, real *x, int N, int V);

    /* fairseq Adam with decoupled weight decay (reference-spec §5.3); t = 1-based step. */
    void (*adam)(ll_backend *be, real *p, const real *g, real *m, real *v, size_t n, real lr, real b1, real b2,
                 real eps, real wd, long t);

    /* Optional (NULL = not offered): inference linear layers on weights packed
     * once into the backend's preferred layout.  linear_pack takes W [N,K]
     * (y = x W^T) and returns a handle, or NULL when it has no fast path (the
     * caller then uses gemm).  linear_packed: Y[M,N] = X[M,K] W^T + bias (bias
     * may be NULL), rows of X and Y at strides ldx and ldy. */
    void *(*linear_pack)(ll_backend *be, const real *W, int N, int K);
    void (*linear_packed)(ll_backend *be, real *Y, int ldy, const real *X, int ldx, const void *packed,
                          const real *bias, int M);
    void (*linear_unpack)(ll_backend *be, void *packed);
};

ll_backend *ll_backend_cpu(void);
/* NULL (with errbuf set) when CUDA was not built in or no device is present. */
ll_backend *ll_backend_cuda(int device);
int ll_cuda_device_count(void); /* 0 when CUDA is not built in or there is no GPU */

/* Name of the first op the model needs that `be` lacks, or NULL when complete. */
const char *ll_backend_missing(const ll_backend *be);

#ifdef __cplusplus
}
#endif
#endif
