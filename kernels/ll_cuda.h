/* C declarations of the CUDA kernel launchers (the .cu files in kernels/), of the
 * cuBLASLt matmul (src/backend/cuda/cuda_gemm_lt.c) and of the few CUDA-only host
 * helpers of src/backend/cuda/cuda_backend.c.
 *
 * Only code built into ll_cuda (and GPU tests, which link it through ll_model)
 * includes this header.  Activations are fp32 or bf16 (ll_cuda_dtype, per
 * launcher); everything else is fp32 (double for the stats slots).  The CUDA
 * backend is never compiled into the double-precision (LL_REAL_DOUBLE) build.
 *
 * Launchers enqueue work on `stream` and return cudaGetLastError() of their
 * launches (cudaSuccess when nothing was launched because the size is zero;
 * cudaErrorInvalidValue for an unknown dtype or missing scratch); they never
 * synchronise and never allocate: an op that needs temporary memory takes a
 * `scratch` pointer of the size its *_scratch_bytes() function names. */
#ifndef LL_CUDA_H
#define LL_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "ll/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- element types -------------------------------------------------------------
 * The launchers below take activation tensors as void pointers plus an
 * ll_cuda_dtype (fp32 or bf16): each kernel is a template over the element type
 * with fp32 math inside, instantiated for both, so switching an op to bf16
 * activations is a change of the dtype argument.  Parameters, their gradients,
 * Adam moments, gates and statistics stay fp32 (double for the stats slots)
 * whatever the activations' type; the exception is the embedding table,
 * which embed_fwd reads in the activations' type (the weight copy, like the
 * matmul weights; ll_backend's p_act).  The fp32 layer norm and attention
 * launchers just below predate this; their _dt variants take a dtype (the op
 * table uses those). */
typedef enum { LL_CUDA_F32 = 0, LL_CUDA_BF16 = 1 } ll_cuda_dtype;

/* ---- layernorm (kernels/layernorm.cu) ----------------------------------------
 * Same semantics as ll_backend.layernorm_fwd/bwd (eps 1e-5, biased variance,
 * fp32 statistics).  mean/rstd may be NULL in forward (inference); any of
 * dx/dw/db may be NULL in backward (that gradient is skipped).  Backward
 * ACCUMULATES into dx, dw, db.  dw/db are reduced deterministically (no
 * atomics) through `scratch`, which must hold
 * ll_cuda_layernorm_bwd_scratch_floats(N, C) floats of device memory. */
cudaError_t ll_cuda_layernorm_fwd(cudaStream_t stream, float *out, float *mean, float *rstd, const float *x,
                                  const float *w, const float *b, int N, int C);
size_t ll_cuda_layernorm_bwd_scratch_floats(int N, int C);
cudaError_t ll_cuda_layernorm_bwd(cudaStream_t stream, float *dx, float *dw, float *db, float *scratch,
                                  const float *dout, const float *x, const float *w, const float *mean,
                                  const float *rstd, int N, int C);
/* The same with activations (out, x; dx, dout) of type t: the kernels are
 * templated; w, b, dw, db, mean, rstd stay fp32. */
cudaError_t ll_cuda_layernorm_fwd_dt(cudaStream_t stream, ll_cuda_dtype t, void *out, float *mean, float *rstd,
                                     const void *x, const float *w, const float *b, int N, int C);
cudaError_t ll_cuda_layernorm_bwd_dt(cudaStream_t stream, ll_cuda_dtype t, void *dx, float *dw, float *db,
                                     float *scratch, const void *dout, const void *x, const float *w,
                                     const float *mean, const float *rstd, int N, int C);
/* ll_cuda_layernorm_bwd_dt in two: dx and dw/db's partials in scratch, then (on any stream
 * ordered after them, with the same scratch, N and C) dw += and db += their column sums. */
cudaError_t ll_cuda_layernorm_bwd_parts_dt(cudaStream_t stream, ll_cuda_dtype t, void *dx, float *dw, float *db,
                                           float *scratch, const void *dout, const void *x, const float *w,
                                           const float *mean, const float *rstd, int N, int C);
cudaError_t ll_cuda_layernorm_bwd_finish(cudaStream_t stream, float *dw, float *db, const float *scratch, int N,
                                         int C);

/* ---- attention (kernels/attention.cu) ------------------------------------------
 * ll_backend.attention_fwd/bwd on device buffers (key_len too: [B] ints on the
 * device, or NULL for all keys), same masks, lse and dropout bits as the CPU.
 * p = attention dropout (rng may be NULL when p == 0).  Dh <= 128, else
 * cudaErrorInvalidValue.  Backward overwrites dq, dk, dv (two kernels, no
 * atomics: bit-reproducible). */
cudaError_t ll_cuda_attention_fwd(cudaStream_t stream, float *out, float *lse, const float *q, int q_stride,
                                  const float *k, const float *v, int kv_stride, const int *key_len, int B, int Tq,
                                  int Tk, int H, int Dh, int causal, float p, const ll_philox *rng,
                                  uint64_t rng_offset);
cudaError_t ll_cuda_attention_bwd(cudaStream_t stream, float *dq, float *dk, float *dv, const float *dout,
                                  const float *out, const float *lse, const float *q, int q_stride, const float *k,
                                  const float *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H,
                                  int Dh, int causal, float p, const ll_philox *rng, uint64_t rng_offset);
/* The same with q, k, v, out (dout, dq, dk, dv) of type t (lse fp32): the
 * kernels are templated (fp32 shared memory and math).  The bf16 forward runs
 * on tensor cores (kernels/attention_tc.cu) when the head size is a multiple
 * of 16 and the device has bf16 WMMA (sm_80+); the backward is SIMT. */
cudaError_t ll_cuda_attention_fwd_dt(cudaStream_t stream, ll_cuda_dtype t, void *out, float *lse, const void *q,
                                     int q_stride, const void *k, const void *v, int kv_stride, const int *key_len,
                                     int B, int Tq, int Tk, int H, int Dh, int causal, float p, const ll_philox *rng,
                                     uint64_t rng_offset);
/* Switch the tensor-core forward on (the default, unless LL_CUDA_ATTENTION=simt
 * is in the environment) or off for the whole process; returns whether a bf16
 * call of head size 16 took it before the call. */
int ll_cuda_attention_tensor_cores(int on);
/* The one-kernel bf16 attention backward's warps per block (2 or 4; LL_CUDA_ATTN_BWD1_WARPS,
 * default 4); the same bits either way.  Returns the previous number. */
int ll_cuda_attention_bwd1_warps(int warps);
cudaError_t ll_cuda_attention_bwd_dt(cudaStream_t stream, ll_cuda_dtype t, void *dq, void *dk, void *dv,
                                     const void *dout, const void *out, const float *lse, const void *q, int q_stride,
                                     const void *k, const void *v, int kv_stride, const int *key_len, int B, int Tq,
                                     int Tk, int H, int Dh, int causal, float p, const ll_philox *rng,
                                     uint64_t rng_offset);

/* ---- programmatic dependent launch (kernels/launch.cu, kernels/ll_cuda_common.cuh) ----------
 * Whether ll's kernel launches ask for it now: on where the current device has compute
 * capability 9.0+, unless LL_CUDA_PDL=0 is in the environment or ll_cuda_pdl(0) was called.
 * ll_cuda_pdl(on) switches it for the whole process (1: where the device allows); it returns the
 * setting before the call.  Results are the same either way (every kernel waits first). */
int ll_cuda_pdl_launch(void);
/* executable step graphs kept (src/backend/cuda/cuda_graph.c; LL_CUDA_GRAPHS_KEPT) */
int ll_cuda_graphs_kept(void);
int ll_cuda_pdl(int on);
/* Run once per device when its backend is made (dev_int: one device int of scratch): two kernels
 * in a row with the attribute.  Where a launch is refused or the second reads a wrong value,
 * programmatic dependent launch is switched off for the process and *refused says why (the
 * launch's cudaError_t, or -1 for a wrong value; 0 when it ran or was off).  Returns an error only
 * when the stream itself failed. */
cudaError_t ll_cuda_pdl_probe(cudaStream_t stream, int *dev_int, int *refused);

/* ---- conditional nodes (kernels/graph_cond.cu) ----------------------------------
 * Sets h to (*run != 0) when the kernel runs: the condition of an IF node whose
 * bodies were captured into the graph that launches it. */
cudaError_t ll_cuda_launch_cond_set(cudaStream_t stream, cudaGraphConditionalHandle h, const uint8_t *run);

/* ---- Philox (kernels/philox.cu; device functions in kernels/philox.cuh) -------
 * out[i] = ll_philox_u32(r, offset + i) / ll_philox_uniform(r, offset + i),
 * bit for bit the CPU stream of src/core/rng.c. */
cudaError_t ll_cuda_launch_philox_u32(cudaStream_t stream, uint32_t *out, size_t n, ll_philox r,
                                      uint64_t offset);
cudaError_t ll_cuda_launch_philox_uniform(cudaStream_t stream, float *out, size_t n, ll_philox r,
                                          uint64_t offset);


/* ---- elementwise (kernels/elementwise.cu) ----------------------------------------
 * Semantics of the ll_backend ops of the same name; every pointer is device
 * memory; y may alias a.  Gates g1, g2 are fp32 device scalars (NULL reads as 1). */
cudaError_t ll_cuda_relu_fwd(cudaStream_t s, ll_cuda_dtype t, void *x, size_t n);
cudaError_t ll_cuda_relu_bwd(cudaStream_t s, ll_cuda_dtype t, void *dy, const void *y, size_t n);
/* Dropout with the CPU's half-word rule (cpu_backend.c): element i keeps iff
 * half-word offset + i of rng (bits 16*(h & 1).. of word h >> 1) is >= round(p * 65536). */
cudaError_t ll_cuda_dropout_fwd(cudaStream_t s, ll_cuda_dtype t, void *x, uint8_t *mask, size_t n, float p,
                                ll_philox rng, uint64_t offset);
cudaError_t ll_cuda_dropout_bwd(cudaStream_t s, ll_cuda_dtype t, void *dx, const uint8_t *mask, size_t n, float p);
cudaError_t ll_cuda_add(cudaStream_t s, ll_cuda_dtype t, void *y, const void *a, const void *b, size_t n);
cudaError_t ll_cuda_add_scaled(cudaStream_t s, ll_cuda_dtype t, void *y, const void *a, const void *b, float alpha,
                               size_t n);
cudaError_t ll_cuda_acc(cudaStream_t s, ll_cuda_dtype t, void *dst, const void *src, size_t n);
cudaError_t ll_cuda_add_gated(cudaStream_t s, ll_cuda_dtype t, void *y, const void *a, const void *b,
                              const float *g1, const float *g2, size_t n);
cudaError_t ll_cuda_scale_gated(cudaStream_t s, ll_cuda_dtype t, void *x, const float *g1, const float *g2,
                                size_t n);

/* ---- the residual branch (kernels/residual.cu) ------------------------------------
 * backend.h residual_fwd / residual_bwd with dx_mode LL_RES_*: dropout bits
 * drawn (forward) and redrawn (backward) by the half-word rule above, no mask.
 * residual_bwd's gate gradients (dg1 or dg2 not NULL) take scratch of
 * ll_cuda_residual_scratch_bytes() bytes and a ticket counter, a device
 * unsigned that is 0 and that no concurrent launch shares (the kernel leaves
 * it 0; the backend keeps one per device: ll_cuda_ticket); else NULL is fine. */
size_t ll_cuda_residual_scratch_bytes(void);
cudaError_t ll_cuda_residual_fwd(cudaStream_t s, ll_cuda_dtype t, void *y, void *sub, const void *x, const float *g1,
                                 const float *g2, size_t n, float p, ll_philox rng, uint64_t offset);
/* residual_fwd over N x C, then layer norm of the sum into u (saving mean/rstd): one kernel */
cudaError_t ll_cuda_residual_ln_fwd(cudaStream_t s, ll_cuda_dtype t, void *y, void *sub, const void *x, const float *g1,
                                    const float *g2, float p, ll_philox rng, uint64_t offset, void *u, float *mean,
                                    float *rstd, const float *w, const float *b, int N, int C);
cudaError_t ll_cuda_residual_bwd(cudaStream_t s, ll_cuda_dtype t, void *ds, void *dx, int dx_mode, const void *sub,
                                 float *dg1, float *dg2, const float *g1, const float *g2, size_t n, float p,
                                 ll_philox rng, uint64_t offset, void *scratch, unsigned *ticket);

/* ---- gemm epilogues as kernels (kernels/gemm_epi.cu) ------------------------------
 * The fallback of the gemm op when cuBLASLt refuses an epilogue, and its K = 0
 * case.  gemm_epilogue: C[m, n] = relu?(mul * C[m, n] + bias[n]) over M x N at
 * row stride ldc (C of type t; bias [N] of type bias_t or NULL; mul 0 does
 * not read C).
 * bias_grad: by_cols ? bgrad[c] += sum_r X[r, c] (length cols)
 *                    : bgrad[r] += sum_c X[r, c] (length rows)
 * over X [rows, cols] of type t at row stride ld; bgrad fp32, accumulated,
 * deterministic (no atomics); scratch: ll_cuda_bias_grad_scratch_bytes(). */
cudaError_t ll_cuda_gemm_epilogue(cudaStream_t s, ll_cuda_dtype t, void *C, int ldc, int M, int N, float mul,
                                  const void *bias, ll_cuda_dtype bias_t, int relu);
size_t ll_cuda_bias_grad_scratch_bytes(int rows, int cols, int by_cols);
/* set: bgrad = the sums instead of += (a gradient known to be zero: no memset first) */
cudaError_t ll_cuda_bias_grad(cudaStream_t s, ll_cuda_dtype t, float *bgrad, const void *x, int ld, int rows, int cols,
                              int by_cols, int set, void *scratch);

/* ---- conversions (kernels/convert.cu) ----------------------------------------------
 * ll_backend.convert: dst[i] = src[i] for fp32, bf16 and fp64 in any pair,
 * through fp32 like cpu_convert; same types: a device copy. */
cudaError_t ll_cuda_convert(cudaStream_t s, void *dst, ll_dtype dt, const void *src, ll_dtype st, size_t n);

/* ---- embeddings (kernels/embed.cu) -------------------------------------------------
 * embed_fwd: out[r] = scale * emb[tok[r]] + pos[r % T + pos_offset (+ *pos_at)], pad rows 0
 * (out, emb of type t; the sinusoids pos fp32).  embed_bwd: demb (fp32) [tok[r]] += scale * dout[r]
 * for non-pad rows, deterministic: a stable radix sort of the rows by token,
 * then one block per distinct token adds its rows in ascending row order (the
 * CPU's order).  scratch: ll_cuda_embed_bwd_scratch_bytes(N) bytes. */
cudaError_t ll_cuda_embed_fwd(cudaStream_t s, ll_cuda_dtype t, void *out, const int32_t *tok, const void *emb,
                              const float *pos, int pos_offset, const int *pos_at, float scale, int N, int T, int C,
                              int pad);
size_t ll_cuda_embed_bwd_scratch_bytes(int N);
cudaError_t ll_cuda_embed_bwd(cudaStream_t s, ll_cuda_dtype t, float *demb, const void *dout, const int32_t *tok,
                              float scale, int N, int C, int pad, void *scratch, size_t scratch_bytes);

/* ---- reductions into backend scalars (kernels/reduce.cu) ----------------------------
 * Grid-wide sums in double, deterministic: a fixed number of block partials
 * (a function of n only) in `scratch`, then one block adds them in order.
 * scratch: ll_cuda_reduce_scratch_bytes(k) bytes for k simultaneous sums. */
size_t ll_cuda_reduce_scratch_bytes(int k);
/* *acc += sum x^2 (x of type t) */
cudaError_t ll_cuda_sumsq(cudaStream_t s, ll_cuda_dtype t, double *acc, const void *x, size_t n, void *scratch);
/* *dst += (float)((mul ? *mul : 1) * sum a*b), the dot product in double */
cudaError_t ll_cuda_dot_acc(cudaStream_t s, ll_cuda_dtype t, float *dst, const void *a, const void *b, size_t n,
                            const float *mul, void *scratch);
/* grad_finish on the stats buffer (one thread; backend.h has the formulas) */
cudaError_t ll_cuda_grad_finish(cudaStream_t s, double *stats, double grad_scale, double clip_norm, int phi_step);
/* spike_check on the stats buffer and the detector's state (one thread; backend.h) */
cudaError_t ll_cuda_spike_check(cudaStream_t s, double *stats, double *state, int window, double grad_scale,
                                double z_loss, double z_gnorm);

/* ---- DLCL (kernels/dlcl.cu) --------------------------------------------------------
 * xs/ys are HOST arrays of k device pointers; they travel to the kernel by
 * value in its parameter block (LL_CUDA_DLCL_CHUNK pointers per launch, longer
 * lists in several launches), so there is no upload and no sync.  w: k fp32
 * device scalars.  Summation order per element is the CPU's (j ascending).
 * dots_acc: dst[j] += (float)<x, ys[j]> in double; scratch:
 * ll_cuda_reduce_scratch_bytes(min(k, LL_CUDA_DLCL_CHUNK)). */
#define LL_CUDA_DLCL_CHUNK 64
/* weighted_sum: scratch of ll_cuda_weighted_sum_scratch_bytes(t, k, n) bytes (n
 * floats for a bf16 row longer than a chunk, else 0: may be NULL) */
size_t ll_cuda_weighted_sum_scratch_bytes(ll_cuda_dtype t, int k, size_t n);
cudaError_t ll_cuda_weighted_sum(cudaStream_t s, ll_cuda_dtype t, void *y, const void *const *xs, const float *w,
                                 int k, size_t n, void *scratch);
cudaError_t ll_cuda_weighted_scatter(cudaStream_t s, ll_cuda_dtype t, void *const *ys, const float *w,
                                     const void *x, int k, size_t n);
cudaError_t ll_cuda_dots_acc(cudaStream_t s, ll_cuda_dtype t, float *dst, const void *x, const void *const *ys,
                             int k, size_t n, void *scratch);

/* ---- losses (kernels/losses.cu) -----------------------------------------------------
 * One block per row of V logits (online max and sum of exponentials); the
 * per-row loss terms go to `scratch` and one block adds them in row order into
 * the double slots (deterministic).  scratch: ll_cuda_loss_scratch_bytes(N). */
size_t ll_cuda_loss_scratch_bytes(int N);
cudaError_t ll_cuda_xent_fwd_bwd(cudaStream_t s, ll_cuda_dtype t, void *logits, const int32_t *target, int N, int V,
                                 float eps, int pad, float grad_scale, double *acc, void *scratch);
cudaError_t ll_cuda_sym_kl(cudaStream_t s, ll_cuda_dtype t, const void *lpa, const void *lpb, void *da, void *db,
                           const int32_t *target, int N, int V, int pad, float alpha, double *acc, void *scratch);
cudaError_t ll_cuda_log_softmax(cudaStream_t s, ll_cuda_dtype t, void *x, int N, int V);
/* out[i] = logp[i*V + target[i]] (fp32), 0 where target[i] == pad; logp of type t */
cudaError_t ll_cuda_pick_logp(cudaStream_t s, ll_cuda_dtype t, float *out, const void *logp, const int32_t *target,
                              int N, int V, int pad);
/* x[r*V + col] += val for r < rows (a token's log-probability moved: lldecode --unkpen); type t */
cudaError_t ll_cuda_add_col(cudaStream_t s, ll_cuda_dtype t, void *x, int rows, int V, int col, float val);
/* x[idx[i]] = val for i < n (idx in device memory; repeats write the same value) */
cudaError_t ll_cuda_fill_at(cudaStream_t s, ll_cuda_dtype t, void *x, const int32_t *idx, int n, float val);
/* dst[r*V + cols[j]] = src[r*K + j] (copied), the rest of rows r < rows := fill (lldecode --shortlist);
 * cols [K] distinct, device memory; dst and src of type t */
cudaError_t ll_cuda_expand_cols(cudaStream_t s, ll_cuda_dtype t, void *dst, const void *src, const int32_t *cols,
                                int rows, int V, int K, float fill);
/* acc[i] = log(exp(acc[i]) + exp(x[i] + b)) - c in double (an ensemble's log-probabilities, b a
 * member's log weight against the first model's); type t */
cudaError_t ll_cuda_ensemble_mix(cudaStream_t s, ll_cuda_dtype t, void *acc, const void *x, size_t n, double b,
                                 double c);

/* ---- optimizer (kernels/adam.cu) -------------------------------------------------------
 * fairseq Adam on fp32 masters (cpu_adam's arithmetic), reading GMUL, SKIP
 * and the step from the stats buffer on the device.  p_bf16 (may be NULL):
 * also write the updated parameters rounded to bf16 (the bf16 weight copy,
 * as raw __nv_bfloat16 bits). */
cudaError_t ll_cuda_adam(cudaStream_t s, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                         float b2, float eps, float wd, const double *stats, int t_slot, uint16_t *p_bf16);
/* The weights' moving average e = fma(decay, e - p, p) (cpu_ema's arithmetic), skipped with SKIP. */
cudaError_t ll_cuda_ema(cudaStream_t s, float *e, const float *p, size_t n, float decay, const double *stats);

/* ---- latent depth (kernels/latent.cu) ------------------------------------------------
 * cpu_latent.c's arithmetic (double where it is double), one small block per
 * op; the prior struct is passed by value. */
cudaError_t ll_cuda_latent_sample(cudaStream_t s, float *z, float *dzda, const float *logits, int L, ll_philox rng,
                                  float tau, int hard);
cudaError_t ll_cuda_latent_grad(cudaStream_t s, float *dlogits, const float *dgate, const float *dzda, int L);
cudaError_t ll_cuda_latent_kl(cudaStream_t s, float *dlogits, double *acc, const float *logits, const float *z,
                              const float *dzda, const ll_latent_prior *pr, int row, int reference, double weight);
cudaError_t ll_cuda_latent_lk(cudaStream_t s, float *dlogits, double *acc, const float *z, const float *dzda,
                              const ll_latent_prior *pr, int K, int squared, double weight);
cudaError_t ll_cuda_latent_depth(cudaStream_t s, double *acc, const float *logits, const ll_latent_prior *pr);
cudaError_t ll_cuda_latent_q(cudaStream_t s, float *q, const float *logits, int L);

/* ---- ALD (kernels/ald.cu) ----------------------------------------------------------------
 * h/dh of type t; G, dG fp32 [*, B, C]; len [B] device ints.  ald_loss: one
 * block per sentence, per-sentence losses summed in order (scratch:
 * ll_cuda_reduce_scratch_bytes(1) + B doubles, see ll_cuda_ald_scratch_bytes). */
size_t ll_cuda_ald_scratch_bytes(int B);
cudaError_t ll_cuda_ald_pool(cudaStream_t s, ll_cuda_dtype t, float *G, const void *h, const int *len, int B, int T,
                             int C);
cudaError_t ll_cuda_ald_loss(cudaStream_t s, float *dG, double *acc, const float *G, int B, int C, float tau, const double *w,
                             void *scratch);
cudaError_t ll_cuda_ald_unpool(cudaStream_t s, ll_cuda_dtype t, void *dh, const float *dG, const int *len, int B,
                               int T, int C);

/* ---- matmul through cuBLASLt (src/backend/cuda/cuda_gemm_lt.c) --------------------------
 * Row-major, ll's convention:
 *   C[M,N] = epilogue(alpha op(A)[M,K] op(B)[K,N] + beta C)
 * op(X) = X^T when trans_x; A is stored [M,K] (trans_a: [K,M]) with leading
 * dimension lda, likewise B ([K,N] / [N,K]) and C [M,N] (ldc >= N).
 * Operands: A and B both fp32 or both bf16; C fp32 or bf16; accumulation is
 * fp32 (CUBLAS_COMPUTE_32F; math = TF32 lets fp32 operands use TF32 tensor
 * cores).  Epilogues:
 *   BIAS       C = alpha AB + beta C + bias[n] (bias [N], bias_type)
 *   BIAS_RELU  C = relu(alpha AB + beta C + bias[n])
 *   BGRAD_A    also bgrad[m] = sum_k op(A)[m,k] (fp32 [M], OVERWRITTEN): the
 *              bias gradient of a linear layer when the gemm is dW = dY^T X
 *              (A = dY, trans_a) -- db = column sums of dY
 *   BGRAD_B    also bgrad[n] = sum_k op(B)[k,n] (fp32 [N], overwritten)
 * Descriptors, layouts and the heuristic's algorithm are cached per shape,
 * types, epilogue and pointer alignment; the 32 MiB workspace is allocated
 * once when the backend is built.  Returns 0 (CUBLAS_STATUS_SUCCESS) or the
 * cublasStatus_t of the failure: CUBLAS_STATUS_NOT_SUPPORTED (15) when
 * cuBLASLt has no algorithm for the combination (e.g. an epilogue with these
 * types/transposes), CUBLAS_STATUS_INVALID_VALUE (7) for a bad descriptor; the
 * caller then falls back (the gemm op: plain matmul + the kernels of
 * kernels/gemm_epi.cu).  Enqueued on
 * the backend's stream, never synchronises. */
typedef enum {
    LL_CUDA_EPI_NONE = 0,
    LL_CUDA_EPI_BIAS,
    LL_CUDA_EPI_BIAS_RELU,
    LL_CUDA_EPI_BGRAD_A,
    LL_CUDA_EPI_BGRAD_B,
    LL_CUDA_EPI_BIAS_RELU_AUX, /* BIAS_RELU, the ReLU bitmask into aux (cuBLASLt's RELU_AUX_BIAS) */
    LL_CUDA_EPI_DRELU          /* C = product * mask of aux (cuBLASLt's DRELU) */
} ll_cuda_epilogue;
typedef enum { LL_CUDA_MATH_EXACT = 0, LL_CUDA_MATH_TF32 = 1 } ll_cuda_math;
typedef struct {
    int trans_a, trans_b;
    int M, N, K;
    float alpha, beta;
    const void *A;
    ll_cuda_dtype a_type;
    int lda;
    const void *B;
    ll_cuda_dtype b_type;
    int ldb;
    void *C;
    ll_cuda_dtype c_type;
    int ldc;
    ll_cuda_epilogue epilogue;
    const void *bias;        /* BIAS, BIAS_RELU: [N] */
    ll_cuda_dtype bias_type; /* fp32 or bf16; cuBLASLt refuses one other than C's (the caller falls back) */
    float *bgrad;            /* BGRAD_A: [M]; BGRAD_B: [N] */
    ll_cuda_math math;       /* fp32 operands only: EXACT (parity tests) or TF32 */
    void *aux;               /* BIAS_RELU_AUX, DRELU: the bitmask, aux_ld / 8 bytes per row of C */
    int aux_ld;              /* its leading dimension in bits: a multiple of 128, >= N */
} ll_cuda_gemm_desc;
int ll_cuda_gemm_lt(ll_backend *be, const ll_cuda_gemm_desc *d);
/* Math mode of the gemm op's fp32 products on this device (both dtypes'
 * backends): EXACT by default. */
void ll_cuda_gemm_set_math(ll_backend *be, ll_cuda_math m);
/* gemm op calls on this device that fell back from one fused cuBLASLt matmul
 * (ll_backend_gemm_fallbacks). */
uint64_t ll_cuda_gemm_fallbacks(ll_backend *be);
/* gemm op calls on this device that ran on the side stream (ll_backend_side_gemms; cuda_side.c). */
uint64_t ll_cuda_side_gemms(ll_backend *be);
/* layer norm backwards whose column-sum finish ran there (ll_backend_side_ln_finishes). */
uint64_t ll_cuda_side_finishes(ll_backend *be);
/* ll_backend_gemm_survey on this device (include/ll/backend.h has the contract). */
int ll_cuda_gemm_survey(ll_backend *be, const ll_gemm_desc *g, int max, int reps, ll_gemm_algo_time *out);
/* LL_CUDA_GEMM_TUNE=N (2..16; off by default): a matmul shape met for the first time
 * runs the fastest of cuBLASLt's first N candidates, timed once on operands of
 * its own.  Shapes first met inside a graph capture are timed when it ends:
 * tune_pending (called by graph_end) returns how many switched algorithm (the
 * graphs captured with the old ones are then dropped).  _stats: shapes timed
 * and switched so far on the device. */
int ll_cuda_gemm_tune_pending(ll_backend *be);
void ll_cuda_gemm_tune_stats(ll_backend *be, uint64_t *tuned, uint64_t *switched);

/* ---- incremental decoding (kernels/decode.cu) ------------------------------------
 * ll_backend.reorder_rows / beam_topk on device buffers (from, cum, mode on the
 * device).  beam_topk keeps per-thread lists for k <= LL_CUDA_TOPK_MAX (beam
 * <= 32 at fairseq's k = 2 * beam); a larger k runs a kernel that rescans the
 * candidates once per output (same result, any k).  Fewer than 2^31
 * candidates in all, else cudaErrorInvalidValue. */
#define LL_CUDA_TOPK_MAX 64
/* reorder_rows in bytes (n, stride: bytes per row used / row pitch), any dtype */
cudaError_t ll_cuda_reorder_rows(cudaStream_t stream, void *buf, void *scratch, const int *from, int rows,
                                 size_t n, size_t stride);
/* logp [groups*beam, V] of type t (the activation dtype); score, lp, flat as the op */
cudaError_t ll_cuda_beam_topk(cudaStream_t stream, ll_cuda_dtype t, double *score, float *lp, int32_t *flat,
                              const void *logp, const double *cum, const uint8_t *mode, int groups, int beam, int V,
                              int k, int div_groups, double div_strength, int pad, int bos, int eos);
/* sample_draw (kernels/sample.cu): a block per row, at most ll_cuda_sample_draw_blocks(rows, V)
 * blocks (256, fewer where their scratch would pass 128 MiB), each with its slice of `scratch`
 * (ll_cuda_sample_draw_scratch_bytes: ~13 bytes per token per block); row, ban, tok, lq on the
 * device, p on the host; logp of type t. */
int ll_cuda_sample_draw_blocks(int rows, int V);
size_t ll_cuda_sample_draw_scratch_bytes(int rows, int V);
cudaError_t ll_cuda_sample_draw(cudaStream_t s, ll_cuda_dtype t, int32_t *tok, double *lq, const void *logp,
                                const ll_sample_row *row, const int32_t *ban, int rows, int V,
                                const ll_sample_params *p, void *scratch);
/* attention_cached (one warp per row and head; Dh <= 128, else
 * cudaErrorInvalidValue) and beam_ancestry, as the ops; q, kv, out of type t.
 * The `*_at` ints (NULL: 0) are read on the device, added to the value beside. */
cudaError_t ll_cuda_attention_cached(cudaStream_t stream, ll_cuda_dtype t, void *out, const void *q, int q_stride,
                                     const void *kv, int kv_stride, size_t row_stride, const int *anc, int anc_stride,
                                     int n_keys, const int *n_at, int rows, int H, int Dh);
cudaError_t ll_cuda_beam_ancestry(cudaStream_t stream, int *anc, int *scratch, const int *from, int rows, int t,
                                  const int *t_at, int stride, int group);
/* attn_align as the op (one warp per row; cudaErrorInvalidValue when the query row and two
 * floats per key exceed 48 KiB of shared memory); q, kv of type t */
cudaError_t ll_cuda_attn_align(cudaStream_t stream, ll_cuda_dtype t, int32_t *idx, const void *q, int q_stride,
                               const void *kv, int kv_stride, const int *key_len, int sents, int per_sent, int S, int H,
                               int Dh);
/* attn_probs and align_argmax as the ops (attn_probs: attn_align's kernel, the same limits) */
cudaError_t ll_cuda_attn_probs(cudaStream_t stream, ll_cuda_dtype t, float *acc, int overwrite, float w, const void *q,
                               int q_stride, const void *kv, int kv_stride, const int *key_len, int sents,
                               int per_sent, int S, int H, int Dh);
cudaError_t ll_cuda_align_argmax(cudaStream_t stream, int32_t *idx, const float *acc, const int *key_len, int sents,
                                 int per_sent, int S);
/* copy_rows with a destination offset read on the device: dst + *at * at_stride
 * (all in bytes); without one, the op is a cudaMemcpy2DAsync */
cudaError_t ll_cuda_copy_rows_at(cudaStream_t stream, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                                 int rows, size_t n, const int *at, size_t at_stride);

/* ---- host helpers (src/backend/cuda/cuda_backend.c) ---------------------------
 * `be` must come from ll_backend_cuda(). */
cudaStream_t ll_cuda_stream(ll_backend *be);
int ll_cuda_device(ll_backend *be);
/* A non-blocking stream of the current device at the greatest stream priority (side 0: the device's
 * stream, conditional bodies, NCCL's collectives) or the least (side 1: the side stream's weight
 * gradients); LL_CUDA_STREAM_PRIORITY=0: the default priority (src/backend/cuda/cuda_side.c). */
cudaError_t ll_cuda_stream_create(cudaStream_t *s, int side);
/* Fill device buffer dev_out[0..n) with the Philox words/uniforms of `r` starting
 * at element `offset`, on the backend's stream (asynchronous; download syncs). */
void ll_cuda_philox_fill_u32(ll_backend *be, uint32_t *dev_out, size_t n, const ll_philox *r, uint64_t offset);
void ll_cuda_philox_fill_uniform(ll_backend *be, float *dev_out, size_t n, const ll_philox *r, uint64_t offset);
/* Die with the op's name and CUDA's message when a launcher failed. */
void ll_cuda_check_launch(cudaError_t e, const char *op);
/* src/backend/cuda/cuda_ops_decode.c: copy_rows, reorder_rows, beam_topk, attention_cached, beam_ancestry,
 * attn_align */
void ll_cuda_register_decode(ll_backend *be);

#ifdef __cplusplus
}
#endif
#endif
