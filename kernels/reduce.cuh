/* Deterministic grid-wide dot products in double, shared by reduce.cu (sumsq,
 * dot_acc) and dlcl.cu (dots_acc).
 *
 * Stage 1 (red_partials): blockIdx.y = j picks the pair (a, b[j]); a fixed
 * number of blocks G = red_blocks(n) (a function of n only) each sum a
 * grid-stride slice in double and write one partial, part[j * RED_MAX_BLOCKS +
 * block].  Stage 2 (in the .cu files): one block per j adds its G partials in
 * a fixed order.  No atomics: bit-reproducible for the same n and inputs. */
#ifndef LL_REDUCE_CUH
#define LL_REDUCE_CUH

#include "ll_cuda_common.cuh"

#define RED_THREADS 256
#define RED_MAX_BLOCKS 1024

/* Up to LL_CUDA_DLCL_CHUNK second operands, passed by value in the kernel's
 * parameter block (512 bytes, far below the 4 KiB limit). */
struct red_ptrs {
    const void *p[LL_CUDA_DLCL_CHUNK];
};

static inline unsigned red_blocks(size_t n) {
    size_t g = (n + (size_t)RED_THREADS * 8 - 1) / ((size_t)RED_THREADS * 8);
    if (g > RED_MAX_BLOCKS) g = RED_MAX_BLOCKS;
    return g ? (unsigned)g : 1u;
}

/* b_is_a: sum of squares of a (b ignored). */
template <typename T>
static __global__ void __launch_bounds__(RED_THREADS)
    red_partials(double *__restrict__ part, const T *__restrict__ a, red_ptrs b, size_t n, int b_is_a) {
    LL_PDL_ENTER();
    __shared__ double sh[LL_WARP];
    const T *bj = b_is_a ? a : (const T *)b.p[blockIdx.y];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)ll_ld(a + i) * (double)ll_ld(bj + i);
    s = ll_block_sum(s, sh);
    if (threadIdx.x == 0) part[(size_t)blockIdx.y * RED_MAX_BLOCKS + blockIdx.x] = s;
}

#endif
