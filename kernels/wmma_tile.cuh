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

/* wmma::load_matrix_sync of a bf16 tile that is in shared memory.  nvcc 13.0 compiles
 * load_matrix_sync's bf16 loads to the generic wmma.load (PTX without a state space) even from
 * a __shared__ array: ptxas then issues four generic 32-bit loads (LD.E) per fragment, through
 * the generic-to-shared path, where the same instruction naming .shared is one ldmatrix
 * (LDSM.16.M88.4; SASS of sm_90, 2026-11-28).  The stores get .shared already.  Same PTX
 * instruction, same fragment: only the state space is named, so p must be in shared memory
 * (the emulation checks every element of the tile). */
#if defined(LL_CUDA_EMU)
template <typename Use, typename L>
static inline void ll_wmma_load_shared(nvcuda::wmma::fragment<Use, LL_WT, LL_WT, LL_WT, __nv_bfloat16, L> &f,
                                       const __nv_bfloat16 *p, unsigned ld, const char *file = __builtin_FILE(),
                                       int line = __builtin_LINE()) {
    nvcuda::wmma::load_matrix_sync_shared(f, p, ld, file, line);
}
#elif defined(__CUDA_ARCH__)
#define LL_WMMA_LOAD_SHARED(USE, LAYOUT, PTX)                                                                        \
    static __device__ __forceinline__ void ll_wmma_load_shared(                                                      \
        nvcuda::wmma::fragment<nvcuda::wmma::USE, LL_WT, LL_WT, LL_WT, __nv_bfloat16, nvcuda::wmma::LAYOUT> &f,       \
        const __nv_bfloat16 *p, unsigned ld) {                                                                       \
        static_assert(sizeof f == 4 * sizeof(unsigned), "a bf16 16x16x16 fragment is 4 registers");                \
        unsigned *r = reinterpret_cast<unsigned *>(&f);                                                              \
        asm volatile(PTX " {%0, %1, %2, %3}, [%4], %5;"                                                              \
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                                                \
                     : "r"((unsigned)__cvta_generic_to_shared(p)), "r"(ld)                                           \
                     : "memory");                                                                                    \
    }
LL_WMMA_LOAD_SHARED(matrix_a, row_major, "wmma.load.a.sync.aligned.row.m16n16k16.shared.bf16")
LL_WMMA_LOAD_SHARED(matrix_a, col_major, "wmma.load.a.sync.aligned.col.m16n16k16.shared.bf16")
LL_WMMA_LOAD_SHARED(matrix_b, row_major, "wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16")
LL_WMMA_LOAD_SHARED(matrix_b, col_major, "wmma.load.b.sync.aligned.col.m16n16k16.shared.bf16")
#undef LL_WMMA_LOAD_SHARED
#else /* nvcc's host pass: never called */
template <typename Use, typename L>
static __device__ __forceinline__ void ll_wmma_load_shared(
    nvcuda::wmma::fragment<Use, LL_WT, LL_WT, LL_WT, __nv_bfloat16, L> &f, const __nv_bfloat16 *p, unsigned ld) {
    nvcuda::wmma::load_matrix_sync(f, p, ld);
}
#endif

/* acc (+)= A[16, K] B[K, 16] in 16-wide steps (K a multiple of 16): A
 * row-major (lda); B row-major (bstep = ldb) or column-major, its columns the
 * rows of ldb (bstep = 1).  acc is not cleared: fill or load it first.
 * Pointers 256-bit aligned, ld a multiple of 8 elements (WMMA's rules).
 * SHARED: both tiles are in shared memory (ll_wmma_load_shared). */
template <typename LB, bool SHARED = false>
static __device__ __forceinline__ void ll_wmma_tile_product(ll_wmma_acc &acc, const __nv_bfloat16 *a, int lda,
                                                            const __nv_bfloat16 *b, int ldb, size_t bstep, int K) {
    using namespace nvcuda;
    for (int kk = 0; kk < K; kk += LL_WT) {
        wmma::fragment<wmma::matrix_a, LL_WT, LL_WT, LL_WT, __nv_bfloat16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, LL_WT, LL_WT, LL_WT, __nv_bfloat16, LB> fb;
        if (SHARED) {
            ll_wmma_load_shared(fa, a + kk, lda);
            ll_wmma_load_shared(fb, b + (size_t)kk * bstep, ldb);
        } else {
            wmma::load_matrix_sync(fa, a + kk, lda);
            wmma::load_matrix_sync(fb, b + (size_t)kk * bstep, ldb);
        }
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
