/* Device helpers shared by the kernel files (C++ only, never seen by the C host code).
 *
 * Element types.  Activation kernels are templates over the element type T
 * (float or __nv_bfloat16); they load through ll_ld() into fp32, do their math
 * in fp32 (statistics and reductions in fp32 or double) and store through
 * ll_st().  The C launchers take an ll_cuda_dtype and dispatch with
 * LL_DISPATCH, so moving an op to bf16 activations is a change of the dtype
 * its host wrapper passes, nothing else.
 *
 * Reductions.  Every reduction here is deterministic: a warp tree of
 * __shfl_xor_sync, then the warps' partials in shared memory summed by warp 0
 * in a fixed order.  For a fixed blockDim (every launcher uses a compile-time
 * block size) the bits depend only on the inputs, so a resumed run repeats
 * them.  Grid-wide sums write one partial per block and a second kernel adds
 * the partials in index order (no float atomics anywhere). */
#ifndef LL_CUDA_COMMON_CUH
#define LL_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ll_cuda.h"

#define LL_WARP 32

/* Kernel launches and dynamic shared memory go through these two macros so
 * that the same source also compiles as host C++ in the CPU emulation of
 * CUDA (-DLL_CUDA_EMU=ON, tests/cuda_emu, docs/cuda-emulation.md); nvcc sees exactly the
 * <<<>>> launch and extern __shared__.
 *   LL_LAUNCH(grid, block, smem, stream, kernel)(args...)
 *   LL_DYN_SHARED(T, name);   (T name[] of the launch's dynamic size) */
#ifdef LL_CUDA_EMU
#define LL_LAUNCH(grid, block, smem, stream, ...)                                                                    \
    LL_EMU_LAUNCH(grid, block, smem, stream, ll_cuda_pdl_launch(), __VA_ARGS__)
#define LL_DYN_SHARED(T, name) LL_EMU_DYN_SHARED(T, name)
#else
#define LL_LAUNCH(grid, block, smem, stream, ...)                                                                    \
    ll_kernel_launch<__VA_ARGS__>{dim3(grid), dim3(block), (size_t)(smem), (stream)}
#define LL_DYN_SHARED(T, name) extern __shared__ T name[]
#endif

/* Programmatic dependent launch (Hopper, compute capability 9.0+).  Every kernel of kernels/
 * begins with LL_PDL_ENTER(): wait until the grids it depends on have completed and their writes
 * are visible (griddepcontrol.wait), then let the next kernel of the stream launch
 * (griddepcontrol.launch_dependents).  LL_LAUNCH launches with the programmatic stream
 * serialization attribute where ll_cuda_pdl_launch() and the kernel's code allow it, so the next
 * kernel's blocks are resident when this one ends instead of being launched after it: the gap
 * between two kernels of a chain (~3,950 launches per ll64 step).  The wait is the kernel's first
 * statement, so nothing it reads or writes is touched before its predecessors are done: the same
 * results as an ordinary launch.  Without the attribute (LL_CUDA_PDL=0, an older GPU, code built
 * for an older architecture) both instructions do nothing.  The emulation stops a kernel launched
 * with the attribute whose threads never waited, and tests/cli/test_kernel_sources.sh checks
 * that every kernel's body begins with the wait. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define LL_PDL_ENTER() asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#elif defined(LL_CUDA_EMU)
#define LL_PDL_ENTER() ll_emu::pdl_enter()
#else
#define LL_PDL_ENTER() ((void)0)
#endif

#ifndef LL_CUDA_EMU
#include <type_traits>
/* the kernel's code has LL_PDL_ENTER's instructions: built for compute_90 or later (asked once
 * per kernel; a build for sm_80 alone, run on an H100, has none) */
template <auto K> static inline bool ll_kernel_pdl_code(void) {
    static int known; /* 1 + answer; 0: not asked yet (benign race: same value) */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (!k) {
        cudaFuncAttributes fa;
        k = 1 + (cudaFuncGetAttributes(&fa, reinterpret_cast<const void *>(K)) == cudaSuccess && fa.ptxVersion >= 90);
        if (k == 1) (void)cudaGetLastError();
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k == 2;
}
/* LL_LAUNCH(grid, block, smem, stream, kernel)(args...): the arguments converted to the kernel's
 * parameter types at the call, as <<<>>> converts them (NULL for a pointer) */
template <auto K, typename F = std::remove_pointer_t<decltype(K)>> struct ll_kernel_launch;
template <auto K, typename... P> struct ll_kernel_launch<K, void(P...)> {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    void operator()(P... args) const {
        if (ll_cuda_pdl_launch() && ll_kernel_pdl_code<K>()) {
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = 1;
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = grid;
            cfg.blockDim = block;
            cfg.dynamicSmemBytes = smem;
            cfg.stream = stream;
            cfg.attrs = at;
            cfg.numAttrs = 1;
            (void)cudaLaunchKernelEx(&cfg, K, args...); /* (its error is the last error) */
        } else {
            K<<<grid, block, smem, stream>>>(args...);
        }
    }
};
#endif

/* Return the launch error from a launcher (the convention of ll_cuda.h). */
#define LL_CHECK_LAUNCH()                                                                                            \
    do {                                                                                                             \
        cudaError_t ll_e_ = cudaGetLastError();                                                                      \
        if (ll_e_ != cudaSuccess) return ll_e_;                                                                      \
    } while (0)

/* Instantiate BODY with T = the element type of dtype `dt` (a typedef inside each
 * case); an unknown dtype is an invalid value. */
#define LL_DISPATCH(dt, T, ...)                                                                                      \
    switch (dt) {                                                                                                    \
    case LL_CUDA_F32: {                                                                                              \
        typedef float T;                                                                                             \
        __VA_ARGS__                                                                                                  \
    } break;                                                                                                         \
    case LL_CUDA_BF16: {                                                                                             \
        typedef __nv_bfloat16 T;                                                                                     \
        __VA_ARGS__                                                                                                  \
    } break;                                                                                                         \
    default: return cudaErrorInvalidValue;                                                                           \
    }

static __device__ __forceinline__ float ll_ld(const float *p) { return *p; }
static __device__ __forceinline__ float ll_ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
static __device__ __forceinline__ void ll_st(float *p, float v) { *p = v; }
static __device__ __forceinline__ void ll_st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* Grid for a grid-stride loop over n items: one item per thread up to a cap,
 * so any n (> 2^31 included) is covered and small n launch few blocks. */
#define LL_GRID_CAP 65536u
static inline unsigned ll_grid(size_t n, unsigned threads) {
    size_t g = (n + threads - 1) / threads;
    if (g > LL_GRID_CAP) g = LL_GRID_CAP;
    return g ? (unsigned)g : 1u;
}

/* A process-wide switch read from the environment once: *mode, -1 until then, becomes 0 where the
 * variable `name` equals `off` and 1 otherwise (a test may store 0 or 1 over it; atomics: any
 * host thread may launch).  Returns the switch. */
static inline int ll_env_switch_once(int *mode, const char *name, const char *off) {
    int m = __atomic_load_n(mode, __ATOMIC_RELAXED);
    if (m < 0) {
        const char *e = getenv(name);
        const int fresh = !(e && !strcmp(e, off));
        m = __atomic_compare_exchange_n(mode, &m, fresh, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED) ? fresh : m;
    }
    return m;
}

/* Blocks of `kernel` (`threads` each, `smem` bytes of dynamic shared memory) that the current
 * device holds at once: SMs x blocks per SM, asked once per kernel and device; 0 when the runtime
 * does not say.  A memory-bound grid-stride kernel launched with 1.55 waves of blocks leaves a
 * third of the SMs idle for its last wave (ncu on the H100, residual_bwd, session 24); one wave of
 * equal shares keeps every SM busy to the end.  LL_CUDA_ONE_WAVE=0: 0 (the callers' grids of before). */
#define LL_RESIDENT_DEVICES 16
template <typename K> static inline unsigned ll_resident_blocks(K kernel, int threads, size_t smem) {
    static int cache[LL_RESIDENT_DEVICES]; /* blocks + 1; 0: not asked yet (benign races: same value) */
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    int c = dev >= 0 && dev < LL_RESIDENT_DEVICES ? __atomic_load_n(&cache[dev], __ATOMIC_RELAXED) : 0;
    if (!c) {
        int sms = 0, per = 0;
        const char *e = getenv("LL_CUDA_ONE_WAVE"); /* 0: the grids of before (A/B timing on a GPU) */
        if ((e && !strcmp(e, "0")) ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, smem) != cudaSuccess) {
            (void)cudaGetLastError();
            sms = per = 0;
        }
        c = (sms > 0 && per > 0 ? sms * per : 0) + 1;
        if (dev >= 0 && dev < LL_RESIDENT_DEVICES) __atomic_store_n(&cache[dev], c, __ATOMIC_RELAXED);
    }
    return (unsigned)(c - 1);
}

template <typename F> static __device__ __forceinline__ F ll_warp_sum(F v) {
#pragma unroll
    for (int o = LL_WARP / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float ll_warp_max(float v) {
#pragma unroll
    for (int o = LL_WARP / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to
 * every thread.  sh: shared scratch of 32 F.  Must be called by all threads. */
template <typename F> static __device__ __forceinline__ F ll_block_sum(F v, F *sh) {
    const int lane = threadIdx.x & (LL_WARP - 1), w = threadIdx.x / LL_WARP, nw = blockDim.x / LL_WARP;
    v = ll_warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        F t = lane < nw ? sh[lane] : (F)0;
        t = ll_warp_sum(t);
        if (lane == 0) sh[0] = t;
    }
    __syncthreads();
    return sh[0];
}

/* Online softmax state: running max m and sum s of exp(x - m). */
struct ll_msum {
    float m, s;
};
static __device__ __forceinline__ ll_msum ll_msum_add(ll_msum a, float x) {
    if (x > a.m) {
        a.s = a.s * __expf(a.m - x) + 1.0f; /* a.m = -inf: exp(-inf) = 0 */
        a.m = x;
    } else if (x != -INFINITY) { /* a masked logit adds nothing (and -inf - -inf would be NaN) */
        a.s += __expf(x - a.m);
    }
    return a;
}
static __device__ __forceinline__ ll_msum ll_msum_merge(ll_msum a, ll_msum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return a; /* both empty: avoid exp(-inf - -inf) = NaN */
    ll_msum r;
    r.m = m;
    r.s = a.s * __expf(a.m - m) + b.s * __expf(b.m - m);
    return r;
}
/* Merge over the block (same rules as ll_block_sum); sh: 32 entries. */
static __device__ __forceinline__ ll_msum ll_block_msum(ll_msum v, ll_msum *sh) {
    const int lane = threadIdx.x & (LL_WARP - 1), w = threadIdx.x / LL_WARP, nw = blockDim.x / LL_WARP;
#pragma unroll
    for (int o = LL_WARP / 2; o > 0; o >>= 1) {
        ll_msum u;
        u.m = __shfl_xor_sync(0xffffffffu, v.m, o);
        u.s = __shfl_xor_sync(0xffffffffu, v.s, o);
        v = ll_msum_merge(v, u);
    }
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        ll_msum t = {-INFINITY, 0.0f};
        if (lane < nw) t = sh[lane];
#pragma unroll
        for (int o = LL_WARP / 2; o > 0; o >>= 1) {
            ll_msum u;
            u.m = __shfl_xor_sync(0xffffffffu, t.m, o);
            u.s = __shfl_xor_sync(0xffffffffu, t.s, o);
            t = ll_msum_merge(t, u);
        }
        if (lane == 0) sh[0] = t;
    }
    __syncthreads();
    return sh[0];
}

/* Fixed-order sum of n doubles by one block (blockDim.x threads, strided
 * partials then a block tree): the second stage of the grid-wide reductions. */
static __device__ __forceinline__ double ll_block_sum_array(const double *p, int n, double *sh) {
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += p[i];
    return ll_block_sum(s, sh);
}

#endif
