/* Pointwise ops: ReLU, dropout, the residual adds and the gated forms
 * (cpu_backend.c / cpu_step.c semantics).  The bias ops left the op table for
 * gemm's epilogues; their fallback kernels are in gemm_epi.cu.
 *
 * Every kernel is a template over the activation type T (float, bf16) with
 * fp32 math, a grid-stride loop (any n, grids capped at LL_GRID_CAP blocks)
 * and size_t indices.  y may alias a (each element is read before it is
 * written by the same thread), so no __restrict__ on those pointers. */
#include "layernorm_row.cuh" /* (the 16-byte loads) */
#include "ll_cuda_common.cuh"
#include "philox.cuh"

#define EW_THREADS 256

/* ---- ReLU -------------------------------------------------------------------------------- */

template <typename T> static __global__ void relu_fwd_kernel(T *x, size_t n) {
    LL_PDL_ENTER();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = ll_ld(x + i);
        ll_st(x + i, v > 0.0f ? v : 0.0f);
    }
}

/* CPU: dy = y > 0 ? dy : 0 (NaN y gives 0 too).  The FFN's backward on every layer (ReLU masks are
 * off by default): 8 elements per thread, 16-byte loads and stores where dy and y are 16-byte
 * aligned (the model's buffers are), one element at a time otherwise and at the tail. */
template <typename T> static __global__ void relu_bwd_kernel(T *dy, const T *y, size_t n) {
    LL_PDL_ENTER();
    const int vec = (uintptr_t)dy % 16 == 0 && (uintptr_t)y % 16 == 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n + 7) / 8;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t e0 = i * 8;
        if (vec && e0 + 8 <= n) {
            float d[8], v[8];
            ll_ld8v(dy + e0, d);
            ll_ld8v(y + e0, v);
#pragma unroll
            for (int j = 0; j < 8; j++) d[j] = v[j] > 0.0f ? d[j] : 0.0f;
            ll_st8v(dy + e0, d); /* (a kept value goes back unchanged: T -> fp32 -> T is exact) */
            continue;
        }
        for (size_t e = e0; e < e0 + 8 && e < n; e++)
            if (!(ll_ld(y + e) > 0.0f)) ll_st(dy + e, 0.0f);
    }
}

extern "C" cudaError_t ll_cuda_relu_fwd(cudaStream_t s, ll_cuda_dtype t, void *x, size_t n) {
    if (n == 0) return cudaSuccess;
    LL_DISPATCH(t, T, LL_LAUNCH(ll_grid(n, EW_THREADS), EW_THREADS, 0, s, relu_fwd_kernel<T>)((T *)x, n);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_relu_bwd(cudaStream_t s, ll_cuda_dtype t, void *dy, const void *y, size_t n) {
    if (n == 0) return cudaSuccess;
    LL_DISPATCH(t, T, LL_LAUNCH(ll_grid((n + 7) / 8, EW_THREADS), EW_THREADS, 0, s, relu_bwd_kernel<T>)(
                          (T *)dy, (const T *)y, n);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* ---- dropout ------------------------------------------------------------------------------
 * Half-word h = offset + i decides element i: bits 16*(h & 1)..+15 of Philox
 * word h >> 1, kept iff >= thr.  One thread per Philox block (4 words = 8
 * half-words = 8 consecutive elements), so each block is generated once. */
template <typename T>
static __global__ void dropout_fwd_kernel(T *x, uint8_t *__restrict__ mask, size_t n, uint32_t thr, float scale,
                                          ll_philox r, uint64_t offset, uint64_t nblk) {
    LL_PDL_ENTER();
    const uint64_t first = offset >> 3, end = offset + n;
    for (uint64_t bi = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; bi < nblk;
         bi += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t blk = first + bi;
        uint32_t w[4];
        ll_philox_block_dev(r, blk, w);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint64_t h = (blk << 3) + (uint64_t)j;
            if (h < offset || h >= end) continue;
            const uint32_t half = (w[j >> 1] >> (16 * (j & 1))) & 0xffffu;
            const size_t i = (size_t)(h - offset);
            const int keep = half >= thr;
            mask[i] = (uint8_t)keep;
            ll_st(x + i, keep ? ll_ld(x + i) * scale : 0.0f);
        }
    }
}

template <typename T>
static __global__ void dropout_bwd_kernel(T *dx, const uint8_t *__restrict__ mask, size_t n, float scale) {
    LL_PDL_ENTER();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        ll_st(dx + i, mask[i] ? ll_ld(dx + i) * scale : 0.0f);
}

extern "C" cudaError_t ll_cuda_dropout_fwd(cudaStream_t s, ll_cuda_dtype t, void *x, uint8_t *mask, size_t n, float p,
                                           ll_philox rng, uint64_t offset) {
    if (n == 0) return cudaSuccess;
    if (p <= 0.0f) return cudaMemsetAsync(mask, 1, n, s); /* CPU: mask all ones, x untouched */
    /* host float arithmetic, exactly the CPU's threshold and scale */
    const uint32_t thr = (uint32_t)lround((double)p * 65536.0);
    const float scale = 1.0f / (1.0f - p);
    const uint64_t nblk = ((offset + n - 1) >> 3) - (offset >> 3) + 1;
    LL_DISPATCH(t, T, LL_LAUNCH(ll_grid(nblk, EW_THREADS), EW_THREADS, 0, s, dropout_fwd_kernel<T>)(
                          (T *)x, mask, n, thr, scale, rng, offset, nblk);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_dropout_bwd(cudaStream_t s, ll_cuda_dtype t, void *dx, const uint8_t *mask, size_t n,
                                           float p) {
    if (n == 0 || p <= 0.0f) return cudaSuccess;
    const float scale = 1.0f / (1.0f - p);
    LL_DISPATCH(t, T, LL_LAUNCH(ll_grid(n, EW_THREADS), EW_THREADS, 0, s, dropout_bwd_kernel<T>)((T *)dx, mask, n, scale);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* ---- adds, gates ------------------------------------------------------------------
 * One kernel: y = ca * a + cb * b with the gates read on the device.
 *   mode ADD:    y = a + alpha * b       (add: alpha 1; acc: y = a = dst)
 *   mode GATED:  y = a + (*g1)(*g2) * b  (NULL gate = 1)
 *   mode SCALE_GATED: y = (*g1)(*g2) * a */
enum { EW_ADD, EW_ADD_GATED, EW_SCALE_GATED };

template <typename T>
static __global__ void axpby_kernel(T *y, const T *a, const T *b, float alpha, const float *g1, const float *g2,
                                    size_t n, int mode) {
    LL_PDL_ENTER();
    float g = alpha;
    if (mode == EW_ADD_GATED || mode == EW_SCALE_GATED) g = (g1 ? *g1 : 1.0f) * (g2 ? *g2 : 1.0f);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if (mode == EW_SCALE_GATED)
            ll_st(y + i, ll_ld(a + i) * g);
        else if (mode == EW_ADD && g == 1.0f)
            ll_st(y + i, ll_ld(a + i) + ll_ld(b + i)); /* plain add: no multiply, bit-equal to a + b */
        else
            ll_st(y + i, ll_ld(a + i) + g * ll_ld(b + i));
    }
}

static cudaError_t axpby(cudaStream_t s, ll_cuda_dtype t, void *y, const void *a, const void *b, float alpha,
                         const float *g1, const float *g2, size_t n, int mode) {
    if (n == 0) return cudaSuccess;
    LL_DISPATCH(t, T, LL_LAUNCH(ll_grid(n, EW_THREADS), EW_THREADS, 0, s, axpby_kernel<T>)(
                          (T *)y, (const T *)a, (const T *)b, alpha, g1, g2, n, mode);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_add(cudaStream_t s, ll_cuda_dtype t, void *y, const void *a, const void *b, size_t n) {
    return axpby(s, t, y, a, b, 1.0f, NULL, NULL, n, EW_ADD);
}
extern "C" cudaError_t ll_cuda_add_scaled(cudaStream_t s, ll_cuda_dtype t, void *y, const void *a, const void *b,
                                          float alpha, size_t n) {
    return axpby(s, t, y, a, b, alpha, NULL, NULL, n, EW_ADD);
}
extern "C" cudaError_t ll_cuda_acc(cudaStream_t s, ll_cuda_dtype t, void *dst, const void *src, size_t n) {
    return axpby(s, t, dst, dst, src, 1.0f, NULL, NULL, n, EW_ADD);
}
extern "C" cudaError_t ll_cuda_add_gated(cudaStream_t s, ll_cuda_dtype t, void *y, const void *a, const void *b,
                                         const float *g1, const float *g2, size_t n) {
    return axpby(s, t, y, a, b, 1.0f, g1, g2, n, EW_ADD_GATED);
}
extern "C" cudaError_t ll_cuda_scale_gated(cudaStream_t s, ll_cuda_dtype t, void *x, const float *g1, const float *g2,
                                           size_t n) {
    if (!g1 && !g2) return cudaSuccess; /* gate 1: nothing to do (the CPU returns early too) */
    return axpby(s, t, x, x, NULL, 1.0f, g1, g2, n, EW_SCALE_GATED);
}
