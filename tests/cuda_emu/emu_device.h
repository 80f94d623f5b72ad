/* CUDA device code as host C++: force-included (-include) into every
 * kernels/ *.cu file of the emulated build (-DLL_CUDA_EMU=ON, tests only).
 *
 * The real CUDA headers give the types (dim3, __nv_bfloat16 with its host
 * conversions, cudaError_t); this header adds what only nvcc knows: the
 * built-in indices, __syncthreads and the warp shuffles (rendezvous points of
 * the fiber scheduler in emu_sched.cc), the fast-math intrinsics, static
 * __shared__ arrays (found by their tag and refilled with NaN bytes for
 * every block), and the launch object behind kernels/'s LL_LAUNCH macro.  Nothing
 * here is a GPU: results are those of the host's IEEE arithmetic (see
 * docs/cuda-emulation.md). */
#ifndef LL_CUDA_EMU_DEVICE_H
#define LL_CUDA_EMU_DEVICE_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

/* Files built with -ftz=false say so (cmake/cuda_emu.cmake); the rest are
 * built with --use_fast_math, which flushes fp32 subnormals: the emulation
 * sets the CPU's FTZ/DAZ bits while their kernels run. */
#ifndef LL_EMU_FTZ
#define LL_EMU_FTZ 1
#endif

namespace ll_emu {

struct thread_ctx {
    uint3 tid;
    int lin;  /* linear thread index in the block */
    int lane; /* lin % 32 */
    int warp; /* lin / 32 */
    int pdl_waited; /* passed LL_PDL_ENTER in this block */
};
struct block_ctx {
    uint3 bid;
    dim3 bdim, gdim;
    void *dyn; /* this block's dynamic shared memory (exactly the launch's size) */
};
extern thread_ctx *cur;
extern block_ctx blk;

void syncthreads(const char *file, int line);
/* [p, p + bytes) must lie in the block's shared memory (its dynamic area or a static __shared__
 * array): a load that names the .shared state space (kernels/wmma_tile.cuh's ll_wmma_load_shared)
 * reads something else on a GPU when given another address; else the process stops */
void check_shared(const void *p, size_t bytes, const char *what, const char *file, int line);
/* One warp-synchronous exchange: every lane of `mask` posts `val` and the lane
 * it reads (src); returns val of lane src once all of mask has arrived. */
uint64_t warp_exchange(unsigned mask, uint64_t val, int src, const char *what, const char *file, int line);

struct launch_desc {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    const char *name, *file;
    int line;
    size_t param_bytes;
    int ftz;
    const void *func; /* the kernel (a graph node's identity) */
    int pdl;          /* launched with programmatic stream serialization (ll_cuda_pdl_launch()) */
};
cudaError_t launch(const launch_desc &d, std::function<void()> body);

template <typename... P> struct launcher {
    void (*k)(P...);
    launch_desc d;
    void operator()(P... a) {
        /* the arguments are converted to the parameters' types at the launch and
         * copied into the queued work, as into a GPU's parameter block */
        auto args = std::make_shared<std::tuple<std::decay_t<P>...>>(a...);
        d.param_bytes = (sizeof(std::decay_t<P>) + ... + (size_t)0);
        void (*kk)(P...) = k;
        (void)launch(d, [kk, args]() { std::apply(kk, *args); });
    }
};
template <typename... P>
static inline launcher<P...> make_launcher(void (*k)(P...), dim3 g, dim3 b, size_t smem, cudaStream_t s, int pdl,
                                           const char *name, const char *file, int line, int ftz) {
    return launcher<P...>{k, launch_desc{g, b, smem, s, name, file, line, 0, ftz, reinterpret_cast<const void *>(k),
                                         pdl}};
}
/* LL_PDL_ENTER (griddepcontrol.wait + launch_dependents): grids run one at a time here, so
 * nothing to wait for; the thread is marked as having waited (a grid launched with the
 * attribute whose threads never do stops the process: on a GPU it could read its inputs before
 * the kernel before it wrote them) */
static inline void pdl_enter() {
    cur->pdl_waited = 1;
}

template <typename T> static inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type over 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <typename T> static inline T from_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}
/* Source lanes as PTX's shfl modes compute them (width: a power of two <= 32;
 * a source outside the caller's segment reads the caller's own value). */
template <typename T> static inline T shfl(const char *f, int l, unsigned m, T v, int src, int width = 32) {
    const int lane = cur->lane, base = lane & ~(width - 1);
    return from_bits<T>(warp_exchange(m, to_bits(v), base + (src & (width - 1)), "__shfl_sync", f, l));
}
template <typename T> static inline T shfl_xor(const char *f, int l, unsigned m, T v, int x, int width = 32) {
    const int lane = cur->lane;
    int s = lane ^ x;
    if ((s & ~(width - 1)) != (lane & ~(width - 1))) s = lane;
    return from_bits<T>(warp_exchange(m, to_bits(v), s, "__shfl_xor_sync", f, l));
}
template <typename T> static inline T shfl_down(const char *f, int l, unsigned m, T v, unsigned d, int width = 32) {
    const int lane = cur->lane;
    const int s = (lane & (width - 1)) + (int)d >= width ? lane : lane + (int)d;
    return from_bits<T>(warp_exchange(m, to_bits(v), s, "__shfl_down_sync", f, l));
}
template <typename T> static inline T shfl_up(const char *f, int l, unsigned m, T v, unsigned d, int width = 32) {
    const int lane = cur->lane;
    const int s = (lane & (width - 1)) < (int)d ? lane : lane - (int)d;
    return from_bits<T>(warp_exchange(m, to_bits(v), s, "__shfl_up_sync", f, l));
}
static inline void syncwarp(const char *f, int l, unsigned m = 0xffffffffu) {
    (void)warp_exchange(m, 0, cur->lane, "__syncwarp", f, l);
}
static inline unsigned ballot(const char *f, int l, unsigned m, int pred) {
    /* every lane of m posts its predicate; each reads them all through 32 exchanges */
    unsigned r = 0;
    for (int s = 0; s < 32; s++)
        if (m >> s & 1) r |= (unsigned)warp_exchange(m, pred ? 1u : 0u, s, "__ballot_sync", f, l) << s;
    return r;
}

} // namespace ll_emu

#define threadIdx (ll_emu::cur->tid)
#define blockIdx (ll_emu::blk.bid)
#define blockDim (ll_emu::blk.bdim)
#define gridDim (ll_emu::blk.gdim)

#define __syncthreads() ll_emu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ll_emu::syncwarp(__FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_sync(...) ll_emu::shfl(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) ll_emu::shfl_xor(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) ll_emu::shfl_down(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ll_emu::shfl_up(__FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(m, p) ll_emu::ballot(__FILE__, __LINE__, (m), (p))
#define __any_sync(m, p) (__ballot_sync((m), (p)) != 0u)
#define __all_sync(m, p) (__ballot_sync((m), (p)) == (m))

/* Static __shared__ arrays: one copy per kernel (blocks run one at a time),
 * tagged so that emu_sched.cc finds each in the symbol table and fills it with
 * 0xFF (NaN) bytes before each block; ordinary globals otherwise, so ASan
 * bounds each exactly.  (A linker section would be lost: g++ ignores section
 * attributes in template instances.) */
#undef __shared__
#define __shared__ __attribute__((abi_tag("ll_emu_shared"))) static
/* __launch_bounds__ is checked at launch from a table read off kernels/
 * (cmake/cuda_emu_bounds.cmake): g++ ignores attributes on template instances */
#undef __launch_bounds__
#define __launch_bounds__(...)

/* Fast-math intrinsics: the IEEE-rounded ones are exact host operations (the
 * CPU's FTZ bit models the flush of the fast-math build); the approximate ones
 * use the correctly rounded libm function (a GPU differs in the last ulps). */
namespace ll_emu {
static inline float emu_expf(float x) { return expf(x); }
static inline float emu_logf(float x) { return logf(x); }
static inline float emu_div(float a, float b) { return a / b; }
static inline float emu_mul(float a, float b) { return a * b; }
static inline float emu_add(float a, float b) { return a + b; }
static inline float emu_sub(float a, float b) { return a - b; }
static inline float emu_sqrt(float a) { return sqrtf(a); }
static inline float emu_rsqrt(float a) { return 1.0f / sqrtf(a); }
static inline unsigned emu_umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
template <typename T> static inline T emu_ldg(const T *p) { return *p; }
/* blocks run one at a time, but kernels of other streams may run on other host threads */
static inline unsigned emu_atomic_add(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline void emu_threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
} // namespace ll_emu
/* CUDA's device min/max overloads */
#define LL_EMU_MINMAX(T)                                                                                             \
    static inline T min(T a, T b) { return a < b ? a : b; }                                                          \
    static inline T max(T a, T b) { return a > b ? a : b; }
LL_EMU_MINMAX(int)
LL_EMU_MINMAX(unsigned)
LL_EMU_MINMAX(long)
LL_EMU_MINMAX(unsigned long)
LL_EMU_MINMAX(long long)
LL_EMU_MINMAX(unsigned long long)
#undef LL_EMU_MINMAX
/* (macros: the CUDA headers already declare these names for the device) */
#define __expf(x) ll_emu::emu_expf(x)
#define __logf(x) ll_emu::emu_logf(x)
#define __fdividef(a, b) ll_emu::emu_div((a), (b))
#define __fdiv_rn(a, b) ll_emu::emu_div((a), (b))
#define __fmul_rn(a, b) ll_emu::emu_mul((a), (b))
#define __fadd_rn(a, b) ll_emu::emu_add((a), (b))
#define __fsub_rn(a, b) ll_emu::emu_sub((a), (b))
#define __fsqrt_rn(a) ll_emu::emu_sqrt(a)
#define rsqrtf(a) ll_emu::emu_rsqrt(a)
#define __umulhi(a, b) ll_emu::emu_umulhi((a), (b))
#define __popc(x) __builtin_popcount(x)
#define __ffs(x) __builtin_ffs(x)
#define __ldg(p) ll_emu::emu_ldg(p)
#define atomicAdd(p, v) ll_emu::emu_atomic_add((p), (v))
#define __threadfence() ll_emu::emu_threadfence()

/* kernels/ll_cuda_common.cuh: the launch and dynamic shared memory macros */
#define LL_EMU_LAUNCH(grid, block, smem, stream, pdl, ...)                                                           \
    ll_emu::make_launcher(__VA_ARGS__, dim3(grid), dim3(block), (size_t)(smem), (stream), (pdl), #__VA_ARGS__,        \
                          __FILE__, __LINE__, LL_EMU_FTZ)
#define LL_EMU_DYN_SHARED(T, name) T *const name = (T *)ll_emu::blk.dyn

/* The device runtime's conditional-node call (CUDA declares it for nvcc only): sets the
 * handle's value for the graph launch running the kernel; a kernel outside a graph launch,
 * or a handle of another graph, stops the process (emu_graph.cc). */
extern "C" void cudaGraphSetConditional(cudaGraphConditionalHandle handle, unsigned int value);

#include "emu_wmma.h" /* nvcuda::wmma */

#endif
