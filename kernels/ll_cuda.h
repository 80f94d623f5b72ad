/* C declarations of the CUDA kernel launchers (the .cu files in kernels/) and of the few
 * CUDA-only host helpers of src/backend/cuda/cuda_backend.c.
 *
 * Only code built into ll_cuda (and GPU tests, which link it through ll_model)
 * includes this header.  Everything here works on float: the CUDA backend is
 * never compiled into the double-precision (LL_REAL_DOUBLE) build.
 *
 * Launchers enqueue work on `stream` and return cudaGetLastError() of the
 * launch (cudaSuccess when nothing was launched because the size is zero);
 * they never synchronise. */
#ifndef LL_CUDA_H
#define LL_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "ll/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* ---- Philox (kernels/philox.cu; device functions in kernels/philox.cuh) -------
 * out[i] = ll_philox_u32(r, offset + i) / ll_philox_uniform(r, offset + i),
 * bit for bit the CPU stream of src/core/rng.c. */
cudaError_t ll_cuda_launch_philox_u32(cudaStream_t stream, uint32_t *out, size_t n, ll_philox r,
                                      uint64_t offset);
cudaError_t ll_cuda_launch_philox_uniform(cudaStream_t stream, float *out, size_t n, ll_philox r,
                                          uint64_t offset);

/* ---- incremental decoding (kernels/decode.cu) ------------------------------------
 * ll_backend.reorder_rows / beam_topk on device buffers (from, cum, mode on the
 * device).  beam_topk takes k <= LL_CUDA_TOPK_MAX (beam <= 32 at fairseq's
 * k = 2 * beam) and fewer than 2^31 candidates in all, else
 * cudaErrorInvalidValue. */
#define LL_CUDA_TOPK_MAX 64
/* reorder_rows in bytes (n, stride: bytes per row used / row pitch), any dtype */
cudaError_t ll_cuda_reorder_rows(cudaStream_t stream, void *buf, void *scratch, const int *from, int rows,
                                 size_t n, size_t stride);
cudaError_t ll_cuda_beam_topk(cudaStream_t stream, double *score, float *lp, int32_t *flat, const float *logp,
                              const double *cum, const uint8_t *mode, int groups, int beam, int V, int k, int pad,
                              int bos, int eos);

/* ---- host helpers (src/backend/cuda/cuda_backend.c) ---------------------------
 * `be` must come from ll_backend_cuda(). */
cudaStream_t ll_cuda_stream(ll_backend *be);
int ll_cuda_device(ll_backend *be);
/* Fill device buffer dev_out[0..n) with the Philox words/uniforms of `r` starting
 * at element `offset`, on the backend's stream (asynchronous; download syncs). */
void ll_cuda_philox_fill_u32(ll_backend *be, uint32_t *dev_out, size_t n, const ll_philox *r, uint64_t offset);
void ll_cuda_philox_fill_uniform(ll_backend *be, float *dev_out, size_t n, const ll_philox *r, uint64_t offset);
/* Die with the op's name and CUDA's message when a launcher failed. */
void ll_cuda_check_launch(cudaError_t e, const char *op);
/* src/backend/cuda/cuda_ops_decode.c: copy_rows, reorder_rows, beam_topk */
void ll_cuda_register_decode(ll_backend *be);

#ifdef __cplusplus
}
#endif
#endif
