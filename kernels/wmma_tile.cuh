/* Tensor-core tiles through nvcuda::wmma (bf16 in, fp32 accumulate), shared
 * by kernels/wmma_probe.cu and kernels/attention_tc.cu.  The CPU emulation
 * supplies its own nvcuda::wmma (tests/cuda_emu/emu_wmma.h).  bf16 WMMA needs
 * sm_80: LL_WMMA_BF16 is defined where it exists (and in host passes), and a
 * launcher must check the device (ll_wmma_bf16_device) before it relies on a
 * kernel built with it. */
#ifndef LL_WMMA_TILE_CUH
#define LL_WMMA_TILE_CUH

#include "ll_cuda_common.cuh"
#ifndef LL_CUDA_EMU
#include <mma.h>
#endif

#define LL_WT 16 /* the WMMA tile: 16 x 16 x 16 */

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define LL_WMMA_BF16 1
#endif

#ifdef LL_WMMA_BF16
typedef nvcuda::wmma::fragment<nvcuda::wmma::accumulator, LL_WT, LL_WT, LL_WT, float> ll_wmma_acc;

/* acc (+)= A[16, K] B[K, 16] in 16-wide steps (K a multiple of 16): A
 * row-major (lda); B row-major (bstep = ldb) or column-major, its columns the
 * rows of ldb (bstep = 1).  acc is not cleared: fill or load it first.
 * Pointers 256-bit aligned, ld a multiple of 8 elements (WMMA's rules). */
template <typename LB>
static __device__ __forceinline__ void ll_wmma_tile_product(ll_wmma_acc &acc, const __nv_bfloat16 *a, int lda,
                                                            const __nv_bfloat16 *b, int ldb, size_t bstep, int K) {
    using namespace nvcuda;
    for (int kk = 0; kk < K; kk += LL_WT) {
        wmma::fragment<wmma::matrix_a, LL_WT, LL_WT, LL_WT, __nv_bfloat16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, LL_WT, LL_WT, LL_WT, __nv_bfloat16, LB> fb;
        wmma::load_matrix_sync(fa, a + kk, lda);
        wmma::load_matrix_sync(fb, b + (size_t)kk * bstep, ldb);
        wmma::mma_sync(acc, fa, fb, acc);
    }
}
#endif

/* Whether the current device runs bf16 WMMA (compute capability 8.0 or
 * later); asked once per process (every device of a run is the same kind). */
static inline bool ll_wmma_bf16_device(void) {
    static const bool ok = [] {
        int dev = 0;
        cudaDeviceProp p;
        return cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess && p.major >= 8;
    }();
    return ok;
}

#endif
