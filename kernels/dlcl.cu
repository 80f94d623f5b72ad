/* DLCL (dynamic linear combination of layers): one op per row of the weight
 * matrix W, however long the row (cpu_step.c).
 *
 * The k entry pointers arrive as a HOST array; they are copied into a struct
 * passed by value as a kernel parameter (LL_CUDA_DLCL_CHUNK = 64 pointers, 512
 * bytes), so there is no device upload, no allocation and no sync.  A longer
 * row runs in several launches of 64: weighted_sum's later chunks add to y,
 * which for fp32 keeps the CPU's summation order (j ascending, one fp32
 * accumulator per element) exactly.  The weights w[j] are fp32 device scalars
 * (a row of W), staged in shared memory per block. */
#include "reduce.cuh"

#define DL_THREADS 256

struct dl_mut_ptrs {
    void *p[LL_CUDA_DLCL_CHUNK];
};

/* first: y = sum_{j<k} w[j] xs[j]; else y += sum_{j<k} w[j] xs[j] */
template <typename T>
static __global__ void __launch_bounds__(DL_THREADS)
    weighted_sum_kernel(T *__restrict__ y, red_ptrs xs, const float *__restrict__ w, int k, int first, size_t n) {
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
            acc = ll_ld(y + i);
        }
        for (; j < k; j++) acc += ws[j] * ll_ld((const T *)xs.p[j] + i);
        ll_st(y + i, acc);
    }
}

/* ys[j] += w[j] x for j < k */
template <typename T>
static __global__ void __launch_bounds__(DL_THREADS)
    weighted_scatter_kernel(dl_mut_ptrs ys, const float *__restrict__ w, const T *x, int k, size_t n) {
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
    __shared__ double sh[LL_WARP];
    const double total = ll_block_sum_array(part + (size_t)blockIdx.x * RED_MAX_BLOCKS, G, sh);
    if (threadIdx.x == 0) dst[blockIdx.x] += (float)total;
}

extern "C" cudaError_t ll_cuda_weighted_sum(cudaStream_t s, ll_cuda_dtype t, void *y, const void *const *xs,
                                            const float *w, int k, size_t n) {
    if (n == 0 || k <= 0) return cudaSuccess;
    for (int j0 = 0; j0 < k; j0 += LL_CUDA_DLCL_CHUNK) {
        const int kc = k - j0 < LL_CUDA_DLCL_CHUNK ? k - j0 : LL_CUDA_DLCL_CHUNK;
        red_ptrs p = {};
        for (int j = 0; j < kc; j++) p.p[j] = xs[j0 + j];
        LL_DISPATCH(t, T, LL_LAUNCH(ll_grid(n, DL_THREADS), DL_THREADS, 0, s, weighted_sum_kernel<T>)(
                              (T *)y, p, w + j0, kc, j0 == 0, n);)
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
