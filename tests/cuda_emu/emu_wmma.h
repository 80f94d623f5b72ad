/* nvcuda::wmma (CUDA's mma.h) on the CPU emulation: the warp-level matrix
 * API that tensor-core kernels use, included by emu_device.h.
 *
 * A fragment's layout across the lanes is opaque in CUDA (code may only apply
 * the same operation to every element of x[]), so here every lane holds the
 * whole tile, row by row: num_elements is rows x cols, not the GPU's share of
 * a lane.  The _sync calls are warp rendezvous points with the full mask (all
 * 32 lanes must reach the same call, else the scheduler reports divergence),
 * then, as CUDA documents them, each lane loads or multiplies; a store writes
 * only the lane's share (element i by lane i % 32), so lanes reading each
 * other's stores need a __syncwarp or __syncthreads first, as on a GPU (TSan
 * reports the missing one: cmake/cuda_emu.cmake keeps the vectoriser from
 * turning this loop into a scatter TSan cannot see).  mma_sync adds the exact products of bf16 or fp16
 * elements in fp32, k in order: tensor cores keep fp32 sums too, in an order
 * of their own, so a kernel's tests allow for reordered sums. */
#ifndef LL_CUDA_EMU_WMMA_H
#define LL_CUDA_EMU_WMMA_H

#include <cuda_fp16.h>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct tile_shape;
template <int M, int N, int K> struct tile_shape<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K> struct tile_shape<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K> struct tile_shape<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> class fragment {
  public:
    static constexpr int rows = tile_shape<Use, M, N, K>::rows, cols = tile_shape<Use, M, N, K>::cols;
    static constexpr int num_elements = rows * cols;
    T x[num_elements]; /* (r, c) at x[r * cols + c] on every lane */
};

namespace detail {
inline void rendezvous(const char *what, const char *file, int line) {
    (void)ll_emu::warp_exchange(0xffffffffu, 0, ll_emu::cur->lane, what, file, line);
}
template <typename T> inline float to_f(T v) { return (float)v; }
template <> inline float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> inline float to_f<__half>(__half v) { return __half2float(v); }
} // namespace detail

template <typename Use, int M, int N, int K, typename T, typename L, typename V>
inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, const V &v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = (T)v;
}

/* matrix_a / matrix_b: the layout is the fragment's type */
template <typename Use, int M, int N, int K, typename T, typename L>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm,
                             const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load names its memory layout");
    detail::rendezvous("wmma::load_matrix_sync", file, line);
    const bool rm = std::is_same<L, row_major>::value;
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++) f.x[r * f.cols + c] = rm ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

/* (not CUDA's) the load kernels/wmma_tile.cuh's ll_wmma_load_shared makes with the .shared
 * state space on a GPU: the same load, and every element it reads must be in the block's
 * shared memory */
template <typename Use, int M, int N, int K, typename T, typename L>
inline void load_matrix_sync_shared(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm,
                                    const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    const bool rm = std::is_same<L, row_major>::value;
    const size_t last = rm ? (size_t)(f.rows - 1) * ldm + (size_t)(f.cols - 1) : (size_t)(f.cols - 1) * ldm + (size_t)(f.rows - 1);
    ll_emu::check_shared(p, (last + 1) * sizeof(T), "a .shared WMMA load (ll_wmma_load_shared)", file, line);
    load_matrix_sync(f, p, ldm, file, line);
}

template <int M, int N, int K, typename T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm, layout_t layout,
                             const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    detail::rendezvous("wmma::load_matrix_sync", file, line);
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++)
            f.x[r * f.cols + c] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

template <int M, int N, int K, typename T>
inline void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t layout,
                              const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    detail::rendezvous("wmma::store_matrix_sync", file, line);
    for (int i = ll_emu::cur->lane; i < f.num_elements; i += 32) {
        const int r = i / f.cols, c = i % f.cols;
        p[layout == mem_row_major ? (size_t)r * ldm + c : (size_t)c * ldm + r] = f.x[i];
    }
}

namespace detail {
/* The product is a pure function of the three input tiles, and in a race-free
 * kernel all 32 lanes pass the same tiles: the first lane computes it, the
 * others find their inputs equal, byte for byte, to the cached ones and copy
 * the result (a lane whose tiles differ computes its own; the cache is never
 * wrong, only missed).  Without it, a warp's 32 fibers each multiplied the
 * whole tile, which made the tensor-core kernels the emulation's slowest code.
 * The cache is the emulator's, not the kernel's: it is left out of the
 * sanitizers' view (TSan would see fibers sharing it without any order, and
 * it must not create one between the lanes either). */
#define LL_EMU_UNCHECKED __attribute__((no_sanitize("address", "thread", "undefined")))
LL_EMU_UNCHECKED inline bool same_bytes(const void *x, const void *y, size_t n) {
    const unsigned char *a = (const unsigned char *)x, *b = (const unsigned char *)y;
    uint64_t diff = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t u, v;
        __builtin_memcpy(&u, a + i, 8);
        __builtin_memcpy(&v, b + i, 8);
        diff |= u ^ v;
    }
    for (; i < n; i++) diff |= (uint64_t)(a[i] ^ b[i]);
    return diff == 0;
}
LL_EMU_UNCHECKED inline void copy_bytes(void *d, const void *s, size_t n) {
    unsigned char *o = (unsigned char *)d;
    const unsigned char *in = (const unsigned char *)s;
    for (size_t i = 0; i < n; i++) o[i] = in[i];
}
template <typename A, typename B, typename C> struct mma_memo {
    bool valid;
    A a;
    B b;
    C c, d;
};
/* d = the cached product when a, b and c are the cached inputs */
template <typename A, typename B, typename C>
LL_EMU_UNCHECKED inline bool memo_find(const mma_memo<A, B, C> &m, const A &a, const B &b, const C &c, C &d) {
    if (!m.valid || !same_bytes(&m.a, &a, sizeof a) || !same_bytes(&m.b, &b, sizeof b) ||
        !same_bytes(&m.c, &c, sizeof c))
        return false;
    copy_bytes(&d, &m.d, sizeof d);
    return true;
}
template <typename A, typename B, typename C>
LL_EMU_UNCHECKED inline void memo_keep(mma_memo<A, B, C> &m, const A &a, const B &b, const C &c, const C &d) {
    copy_bytes(&m.a, &a, sizeof a);
    copy_bytes(&m.b, &b, sizeof b);
    copy_bytes(&m.c, &c, sizeof c);
    copy_bytes(&m.d, &d, sizeof d);
    m.valid = true;
}
} // namespace detail

template <int M, int N, int K, typename Ta, typename La, typename Lb, typename Tc>
inline void mma_sync(fragment<accumulator, M, N, K, Tc> &d, const fragment<matrix_a, M, N, K, Ta, La> &a,
                     const fragment<matrix_b, M, N, K, Ta, Lb> &b, const fragment<accumulator, M, N, K, Tc> &c,
                     bool satf = false, const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    (void)satf;
    using A = fragment<matrix_a, M, N, K, Ta, La>;
    using B = fragment<matrix_b, M, N, K, Ta, Lb>;
    using C = fragment<accumulator, M, N, K, Tc>;
    detail::rendezvous("wmma::mma_sync", file, line);
    /* one entry per warp of the block (blocks run one at a time on the host thread) */
    static thread_local detail::mma_memo<A, B, C> memo[32];
    detail::mma_memo<A, B, C> &m = memo[ll_emu::cur->warp & 31];
    if (detail::memo_find(m, a, b, c, d)) return;
    C in_c; /* (d may be c) */
    detail::copy_bytes(&in_c, &c, sizeof c);
    float out[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = (float)c.x[i * N + j];
            for (int k = 0; k < K; k++) s += detail::to_f(a.x[i * K + k]) * detail::to_f(b.x[k * N + j]);
            out[i * N + j] = s;
        }
    for (int i = 0; i < M * N; i++) d.x[i] = (Tc)out[i];
    detail::memo_keep(m, a, b, in_c, d);
}
#undef LL_EMU_UNCHECKED

} // namespace wmma
} // namespace nvcuda

#endif
