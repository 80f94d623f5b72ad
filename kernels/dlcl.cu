/* DLCL (dynamic linear combination of layers): one op per row of the weight
 * matrix W, however long the row (cpu_step.c).
 *
 * The k entry pointers arrive as a HOST array; they are copied into a struct
 * passed by value as a kernel parameter (LL_CUDA_DLCL_CHUNK = 64 pointers, 512
 * bytes), so there is no device upload, no allocation and no sync.  A longer
 * row runs in several launches of 64: weighted_sum's later chunks add to y
 * (fp32) or to an fp32 scratch row rounded to bf16 by the last chunk (bf16),
 * which keeps the CPU's summation order (j ascending, one fp32 accumulator per
 * element, one rounding) exactly.  The weights w[j] are fp32 device scalars
 * (a row of W), staged in shared memory per block. */
#include "reduce.cuh"

#define DL_THREADS 256

struct dl_mut_ptrs {
    void *p[LL_CUDA_DLCL_CHUNK];
};

/* first: y = sum_{j<k} w[j] xs[j]; else y = acc + sum_{j<k} w[j] xs[j] (acc may
 * be y; an fp32 accumulator between the chunks of a bf16 row, so the sum is
 * rounded to bf16 once, as on the CPU) */
template <typename T, typename A, typename O>
static __global__ void __launch_bounds__(DL_THREADS)
    weighted_sum_kernel(O *y, const A *acc_in, red_ptrs xs, const float *__restrict__ w, int k, int first,
                        size_t n) {
    LL_PDL_ENTER();
    __shared__ float ws[LL_CUDA_DLCL_CHUNK];
    if (threadIdx.x < k) ws[threadIdx.x] = w[threadIdx.x];
    __syncthreads();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float acc;
        int j = 0;
        if (first) {
            acc = ws[0] * ll_ld((const T *)xs.p[0] + i);
            j = 1;
        } else {
            acc = ll_ld(acc_in + i);
        }
        /* an explicit fma per term, as the CPU's loop rounds (not left to the
         * compiler's contraction, which may leave a chain of multiply-adds) */
        for (; j < k; j++) acc = fmaf(ws[j], ll_ld((const T *)xs.p[j] + i), acc);
        ll_st(y + i, acc);
    }
}

/* ys[j] += w[j] x for j < k */
template <typename T>
static __global__ void __launch_bounds__(DL_THREADS)
    weighted_scatter_kernel(dl_mut_ptrs ys, const float *__restrict__ w, const T *x, int k, size_t n) {
    LL_PDL_ENTER();
    __shared__ float ws[LL_CUDA_DLCL_CHUNK];
    if (threadIdx.x < k) ws[threadIdx.x] = w[threadIdx.x];
    __syncthreads();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float xi = ll_ld(x + i);
        for (int j = 0; j < k; j++) {
            T *yj = (T *)ys.p[j] + i;
            ll_st(yj, ll_ld(yj) + ws[j] * xi);
        }
    }
}

/* Stage 2 of dots_acc: block j adds its partials in order, dst[j] += (float)sum. */
static __global__ void __launch_bounds__(RED_THREADS)
    dots_finish(const double *__restrict__ part, int G, float *__restrict__ dst) {
    LL_PDL_ENTER();
    __shared__ double sh[LL_WARP];
    const double total = ll_block_sum_array(part + (size_t)blockIdx.x * RED_MAX_BLOCKS, G, sh);
    if (threadIdx.x == 0) dst[blockIdx.x] += (float)total;
}

extern "C" size_t ll_cuda_weighted_sum_scratch_bytes(ll_cuda_dtype t, int k, size_t n) {
    return t == LL_CUDA_BF16 && k > LL_CUDA_DLCL_CHUNK ? n * sizeof(float) : 0;
}

extern "C" cudaError_t ll_cuda_weighted_sum(cudaStream_t s, ll_cuda_dtype t, void *y, const void *const *xs,
                                            const float *w, int k, size_t n, void *scratch) {
    if (n == 0 || k <= 0) return cudaSuccess;
    if (ll_cuda_weighted_sum_scratch_bytes(t, k, n) && !scratch) return cudaErrorInvalidValue;
    float *acc = (float *)scratch; /* bf16 rows of several chunks: the fp32 sum until the last chunk */
    for (int j0 = 0; j0 < k; j0 += LL_CUDA_DLCL_CHUNK) {
        const int kc = k - j0 < LL_CUDA_DLCL_CHUNK ? k - j0 : LL_CUDA_DLCL_CHUNK;
        const int first = j0 == 0, last = j0 + kc == k;
        red_ptrs p = {};
        for (int j = 0; j < kc; j++) p.p[j] = xs[j0 + j];
        const unsigned g = ll_grid(n, DL_THREADS);
        if (t == LL_CUDA_F32) {
            LL_LAUNCH(g, DL_THREADS, 0, s, weighted_sum_kernel<float, float, float>)((float *)y, (const float *)y, p,
                                                                                     w + j0, kc, first, n);
        } else if (t != LL_CUDA_BF16) {
            return cudaErrorInvalidValue;
        } else if (first && last) {
            LL_LAUNCH(g, DL_THREADS, 0, s, weighted_sum_kernel<__nv_bfloat16, float, __nv_bfloat16>)(
                (__nv_bfloat16 *)y, NULL, p, w + j0, kc, 1, n);
        } else if (!last) {
            LL_LAUNCH(g, DL_THREADS, 0, s, weighted_sum_kernel<__nv_bfloat16, float, float>)(acc, acc, p, w + j0, kc,
                                                                                             first, n);
        } else {
            LL_LAUNCH(g, DL_THREADS, 0, s, weighted_sum_kernel<__nv_bfloat16, float, __nv_bfloat16>)(
                (__nv_bfloat16 *)y, acc, p, w + j0, kc, 0, n);
        }
        LL_CHECK_LAUNCH();
    }
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_weighted_scatter(cudaStream_t s, ll_cuda_dtype t, void *const *ys, const float *w,
                                                const void *x, int k, size_t n) {
    if (n == 0 || k <= 0) return cudaSuccess;
    for (int j0 = 0; j0 < k; j0 += LL_CUDA_DLCL_CHUNK) {
        const int kc = k - j0 < LL_CUDA_DLCL_CHUNK ? k - j0 : LL_CUDA_DLCL_CHUNK;
        dl_mut_ptrs p = {};
        for (int j = 0; j < kc; j++) p.p[j] = ys[j0 + j];
        LL_DISPATCH(t, T, LL_LAUNCH(ll_grid(n, DL_THREADS), DL_THREADS, 0, s, weighted_scatter_kernel<T>)(
                              p, w + j0, (const T *)x, kc, n);)
        LL_CHECK_LAUNCH();
    }
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_dots_acc(cudaStream_t s, ll_cuda_dtype t, float *dst, const void *x,
                                        const void *const *ys, int k, size_t n, void *scratch) {
    if (n == 0 || k <= 0) return cudaSuccess;
    if (!scratch) return cudaErrorInvalidValue;
    const unsigned G = red_blocks(n);
    /* chunks run one after the other on the stream, so they can share the scratch */
    for (int j0 = 0; j0 < k; j0 += LL_CUDA_DLCL_CHUNK) {
        const int kc = k - j0 < LL_CUDA_DLCL_CHUNK ? k - j0 : LL_CUDA_DLCL_CHUNK;
        red_ptrs p = {};
        for (int j = 0; j < kc; j++) p.p[j] = ys[j0 + j];
        LL_DISPATCH(t, T, LL_LAUNCH(dim3(G, (unsigned)kc), RED_THREADS, 0, s, red_partials<T>)((double *)scratch,
                                                                                         (const T *)x, p, n, 0);)
        LL_CHECK_LAUNCH();
        LL_LAUNCH((unsigned)kc, RED_THREADS, 0, s, dots_finish)((const double *)scratch, (int)G, dst + j0);
        LL_CHECK_LAUNCH();
    }
    return cudaSuccess;
}
