/* The residual branch of a block in one pass each way (backend.h
 * residual_fwd / residual_bwd; cpu_residual.c is the reference).
 *
 * One thread per Philox block (4 words = 8 half-words = 8 consecutive
 * elements, the dropout rule of elementwise.cu), so each block is generated
 * once forward and once backward: no mask is stored.  When the element
 * offset is a multiple of 8 and every pointer is 16-byte aligned (the model's
 * buffers are), a block's 8 elements move as 16-byte vectors (one for bf16,
 * two for fp32); partial blocks at the ends take the scalar path.
 *
 * Intermediates the unfused ops stored (the dropped s, the gated ds) are
 * rounded to T exactly there, so fused and unfused results are equal.
 *
 * Backward runs one wave of blocks, each an equal share of the Philox
 * blocks.  Its dot product <ds, s> (the gate gradients) is in double: one
 * partial per block, a grid that depends on n, offset and the device only, summed
 * in index order (reduce.cuh's scheme) by the block that finishes last: each
 * block takes a ticket from a counter (one atomic add, after a fence that
 * publishes its partial), the one with the last ticket adds the partials and
 * puts the counter back to 0 for the next launch.  Which block that is does
 * not change the sum's order, so results are reproducible; one launch. */
#include <string.h>

#include "layernorm_row.cuh"
#include "philox.cuh"
#include "reduce.cuh"

#define RES_THREADS 256
#define RLN_ROWS 8 /* residual_ln_fwd: rows (warps) per block */
#define RES_MAX_PARTS 1024 /* partials of the dot: the grid's cap when one is taken */

template <typename T> static __device__ __forceinline__ float rnd(float v);
template <> __device__ __forceinline__ float rnd<float>(float v) { return v; }
template <> __device__ __forceinline__ float rnd<__nv_bfloat16>(float v) {
    return __bfloat162float(__float2bfloat16_rn(v));
}

/* 8 elements at p (16-byte aligned) to/from fp32.  The emulation copies
 * bytes (host C++ forbids reading T through uint4); nvcc gets vector loads. */
template <typename T> static __device__ __forceinline__ void ld8(const T *p, float v[8]) {
    alignas(16) T e[8];
#ifdef LL_CUDA_EMU
    memcpy(e, p, sizeof e);
#else
#pragma unroll
    for (int w = 0; w < (int)(sizeof e / 16); w++) reinterpret_cast<uint4 *>(e)[w] = reinterpret_cast<const uint4 *>(p)[w];
#endif
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = ll_ld(e + k);
}
template <typename T> static __device__ __forceinline__ void st8(T *p, const float v[8]) {
    alignas(16) T e[8];
#pragma unroll
    for (int k = 0; k < 8; k++) ll_st(e + k, v[k]);
#ifdef LL_CUDA_EMU
    memcpy(p, e, sizeof e);
#else
#pragma unroll
    for (int w = 0; w < (int)(sizeof e / 16); w++) reinterpret_cast<uint4 *>(p)[w] = reinterpret_cast<const uint4 *>(e)[w];
#endif
}

struct res_args {
    size_t n;
    uint64_t offset, nblk; /* elements offset..offset+n; Philox blocks they touch */
    uint32_t thr;          /* keep iff half-word >= thr */
    float scale;           /* 1 / (1 - p) */
    int drop, vec;         /* p > 0; 16-byte vectors allowed */
    uint64_t share, extra; /* backward: Philox blocks per block of the grid, and the first `extra` blocks' one more */
    ll_philox r;
};

/* Keep bits of Philox block blk (all ones without dropout). */
static __device__ __forceinline__ unsigned keep_bits(const res_args &a, uint64_t blk) {
    if (!a.drop) return 0xffu;
    uint32_t w[4];
    ll_philox_block_dev(a.r, blk, w);
    unsigned k = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) k |= (unsigned)(((w[j >> 1] >> (16 * (j & 1))) & 0xffffu) >= a.thr) << j;
    return k;
}

/* Forward of 8 elements in fp32 with their keep bits: s dropped (rounded to T, as stored), then
 * y = x + g s (gated) or x + s.  The fused multiply-add is written out: a compiler may contract
 * x + g s in one kernel and not in another (clang did, in the emulation), and residual_ln_fwd
 * must give residual_fwd's bits */
template <typename T>
static __device__ __forceinline__ void fwd8(float sv[8], const float xv[8], float yv[8], unsigned keep, int gated,
                                            float g, const res_args &a) {
#pragma unroll
    for (int j = 0; j < 8; j++) {
        if (a.drop) sv[j] = rnd<T>((keep >> j & 1) ? sv[j] * a.scale : 0.0f);
        yv[j] = gated ? fmaf(g, sv[j], xv[j]) : xv[j] + sv[j];
    }
}

/* Forward of the elements of Philox block blk that lie in half-words [lo, hi)
 * (element i = half-word offset + i): s = dropout(s); y = x + g s (gated) or x + s. */
template <typename T>
static __device__ __forceinline__ void fwd_block(T *y, T *s, const T *x, int gated, float g, const res_args &a,
                                                 uint64_t blk, uint64_t lo, uint64_t hi) {
    const uint64_t h0 = blk << 3;
    const unsigned keep = keep_bits(a, blk);
    if (a.vec && h0 >= lo && h0 + 8 <= hi) {
        const size_t i0 = (size_t)(h0 - a.offset);
        float sv[8], xv[8], yv[8];
        ld8(s + i0, sv);
        ld8(x + i0, xv);
        fwd8<T>(sv, xv, yv, keep, gated, g, a);
        if (a.drop) st8(s + i0, sv);
        st8(y + i0, yv);
        return;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const uint64_t h = h0 + (uint64_t)j;
        if (h < lo || h >= hi) continue;
        const size_t i = (size_t)(h - a.offset);
        float v = ll_ld(s + i);
        if (a.drop) {
            v = rnd<T>((keep >> j & 1) ? v * a.scale : 0.0f);
            ll_st(s + i, v);
        }
        const float xv = ll_ld(x + i);
        ll_st(y + i, gated ? fmaf(g, v, xv) : xv + v); /* (fwd8's arithmetic) */
    }
}

template <typename T>
static __global__ void __launch_bounds__(RES_THREADS)
    residual_fwd_kernel(T *y, T *s, const T *x, const float *g1, const float *g2, res_args a) {
    LL_PDL_ENTER();
    const int gated = g1 || g2;
    const float g = (g1 ? *g1 : 1.0f) * (g2 ? *g2 : 1.0f);
    const uint64_t first = a.offset >> 3, end = a.offset + a.n;
    for (uint64_t bi = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; bi < a.nblk;
         bi += (uint64_t)gridDim.x * blockDim.x)
        fwd_block(y, s, x, gated, g, a, first + bi, a.offset, end);
}

/* Keep bits of half-words h0..h0+7 (any h0: two Philox blocks where h0 is not a multiple of 8) */
static __device__ __forceinline__ unsigned keep8(const res_args &a, uint64_t h0) {
    const unsigned sh = (unsigned)(h0 & 7u), k0 = keep_bits(a, h0 >> 3);
    if (!sh || !a.drop) return k0;
    return ((k0 >> sh) | (keep_bits(a, (h0 >> 3) + 1) << (8 - sh))) & 0xffu;
}
/* residual_fwd then layer norm, a warp per row.
 * NB = 0, the lane-strided row: the lanes take the row's Philox blocks in turn, then (after
 * __syncwarp, which orders the warp's stores before its loads) the row's layer norm reads the sum
 * back -- from cache -- exactly as layernorm_fwd_kernel, so the bits are the unfused ops'.
 * NB > 0, the row in registers (layernorm_row.cuh's ll_layernorm_row_vec; the launcher takes it
 * under ll_ln_vec_nb's rule of C, as the plain layer norm does): lane takes 8-column
 * chunks lane, lane + 32, ... of the row, each its residual forward as fwd_block computes it (same
 * bits; the chunk's dropout bits from one or two Philox blocks), then the layer norm of the
 * rounded y without reading y back. */
template <typename T, int NB>
static __global__ void __launch_bounds__(RLN_ROWS * LL_WARP)
    residual_ln_fwd_kernel(T *y, T *s, const T *x, const float *g1, const float *g2, res_args a, int N, int C,
                           T *u, float *mean, float *rstd, const float *w, const float *b) {
    LL_PDL_ENTER();
    const int lane = (int)(threadIdx.x % LL_WARP), row = (int)(blockIdx.x * RLN_ROWS + threadIdx.x / LL_WARP);
    if (row >= N) return; /* whole warp leaves together */
    const int gated = g1 || g2;
    const float g = (g1 ? *g1 : 1.0f) * (g2 ? *g2 : 1.0f);
    const size_t r0 = (size_t)row * (size_t)C;
    if constexpr (NB == 0) {
        const uint64_t lo = a.offset + r0, hi = lo + (uint64_t)C, first = lo >> 3, nblk = ((hi - 1) >> 3) - first + 1;
        for (uint64_t bi = (uint64_t)lane; bi < nblk; bi += LL_WARP) fwd_block(y, s, x, gated, g, a, first + bi, lo, hi);
        __syncwarp();
        ll_layernorm_row(u + r0, mean, rstd, y + r0, w, b, row, C, lane);
    } else {
        float v[NB * 8];
#pragma unroll
        for (int k = 0; k < NB; k++) {
            const int c = (lane + LL_WARP * k) * 8;
            if (c >= C) continue;
            const size_t i0 = r0 + (size_t)c;
            const unsigned keep = keep8(a, a.offset + i0);
            float sv[8], xv[8], yv[8];
            ll_ld8_any(s + i0, sv);
            ll_ld8_any(x + i0, xv);
            fwd8<T>(sv, xv, yv, keep, gated, g, a);
#pragma unroll
            for (int j = 0; j < 8; j++) v[8 * k + j] = rnd<T>(yv[j]); /* what the plain layer norm would read back */
            if (a.drop) ll_st8_any(s + i0, sv);
            ll_st8_any(y + i0, yv);
        }
        ll_layernorm_row_vec<T, NB>(u + r0, mean, rstd, v, w, b, row, C, lane);
    }
}

/* One element of backward; returns the new ds and adds ds s to *d. */
template <typename T>
static __device__ __forceinline__ float bwd_one(float v, float sv, float *dxv, int dx_mode, int dot, double *d,
                                                float g, int kept, const res_args &a) {
    if (dx_mode == LL_RES_COPY)
        *dxv = v;
    else if (dx_mode == LL_RES_ACC)
        *dxv += v;
    if (dot) *d += (double)v * (double)sv;
    if (g != 1.0f) v = rnd<T>(v * g); /* scale_gated, stored */
    if (a.drop) v = kept ? v * a.scale : 0.0f;
    return v;
}

template <typename T>
static __global__ void __launch_bounds__(RES_THREADS)
    residual_bwd_kernel(T *ds, T *dx, int dx_mode, const T *s, int dot, double *part, unsigned *ticket, float *dg1,
                        float *dg2, const float *g1, const float *g2, res_args a) {
    LL_PDL_ENTER();
    __shared__ double sh[LL_WARP];
    __shared__ int last;
    const float g = (g1 ? *g1 : 1.0f) * (g2 ? *g2 : 1.0f);
    const uint64_t first = a.offset >> 3, end = a.offset + a.n;
    double d = 0.0;
    /* block b: Philox blocks [lo, hi), an equal share (+-1) of them, its threads striding through
     * (the share from the host: a 64-bit division here cost ptxas a stack frame) */
    const uint64_t share = a.share, extra = a.extra, b = blockIdx.x;
    const uint64_t lo = b * share + (b < extra ? b : extra), hi = lo + share + (b < extra ? 1 : 0);
    for (uint64_t bi = lo + threadIdx.x; bi < hi; bi += blockDim.x) {
        const uint64_t blk = first + bi, h0 = blk << 3;
        const unsigned keep = keep_bits(a, blk);
        if (a.vec && h0 >= a.offset && h0 + 8 <= end) {
            const size_t i0 = (size_t)(h0 - a.offset);
            float v[8], sv[8] = {0, 0, 0, 0, 0, 0, 0, 0}, xv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            ld8(ds + i0, v);
            if (dot) ld8(s + i0, sv);
            if (dx_mode == LL_RES_ACC) ld8(dx + i0, xv);
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = bwd_one<T>(v[j], sv[j], &xv[j], dx_mode, dot, &d, g, keep >> j & 1, a);
            if (dx_mode != LL_RES_NONE) st8(dx + i0, xv);
            st8(ds + i0, v);
            continue;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint64_t h = h0 + (uint64_t)j;
            if (h < a.offset || h >= end) continue;
            const size_t i = (size_t)(h - a.offset);
            float xv = dx_mode == LL_RES_ACC ? ll_ld(dx + i) : 0.0f;
            const float v = bwd_one<T>(ll_ld(ds + i), dot ? ll_ld(s + i) : 0.0f, &xv, dx_mode, dot, &d, g,
                                       keep >> j & 1, a);
            if (dx_mode != LL_RES_NONE) ll_st(dx + i, xv);
            ll_st(ds + i, v);
        }
    }
    if (!dot) return; /* uniform over the grid: no thread skips the barriers below alone */
    d = ll_block_sum(d, sh);
    if (threadIdx.x == 0) {
        part[blockIdx.x] = d;
        __threadfence(); /* the partial is visible to every block before the ticket is */
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return; /* (uniform over the block) */
    __threadfence();
    /* the gate gradients from the partials, in index order: cpu_residual_bwd's (real)(d * gate);
     * volatile: the other blocks' partials, never through a stale cache line */
    double t = 0.0;
    for (int i = threadIdx.x; i < (int)gridDim.x; i += blockDim.x) t += ((const volatile double *)part)[i];
    const double total = ll_block_sum(t, sh);
    if (threadIdx.x != 0) return;
    if (dg1) *dg1 += (float)(total * (g2 ? (double)*g2 : 1.0));
    if (dg2) *dg2 += (float)(total * (g1 ? (double)*g1 : 1.0));
    *ticket = 0u; /* for the next launch (ordered after this one on the stream) */
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* host float arithmetic, exactly the CPU's threshold and scale */
static res_args make_args(size_t n, float p, const ll_philox &rng, uint64_t offset, int aligned) {
    res_args a;
    a.n = n;
    a.offset = offset;
    a.nblk = ((offset + n - 1) >> 3) - (offset >> 3) + 1;
    a.drop = p > 0.0f;
    a.thr = a.drop ? (uint32_t)lround((double)p * 65536.0) : 0;
    a.scale = a.drop ? 1.0f / (1.0f - p) : 1.0f;
    a.vec = aligned && (offset & 7) == 0;
    a.share = a.extra = 0;
    a.r = rng;
    return a;
}

extern "C" size_t ll_cuda_residual_scratch_bytes(void) { return RES_MAX_PARTS * sizeof(double); }

extern "C" cudaError_t ll_cuda_residual_fwd(cudaStream_t st, ll_cuda_dtype t, void *y, void *s, const void *x,
                                            const float *g1, const float *g2, size_t n, float p, ll_philox rng,
                                            uint64_t offset) {
    if (n == 0) return cudaSuccess;
    const res_args a = make_args(n, p, rng, offset, aligned16(y) && aligned16(s) && aligned16(x));
    LL_DISPATCH(t, T, LL_LAUNCH(ll_grid(a.nblk, RES_THREADS), RES_THREADS, 0, st, residual_fwd_kernel<T>)(
                          (T *)y, (T *)s, (const T *)x, g1, g2, a);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_residual_ln_fwd(cudaStream_t st, ll_cuda_dtype t, void *y, void *s, const void *x,
                                               const float *g1, const float *g2, float p, ll_philox rng,
                                               uint64_t offset, void *u, float *mean, float *rstd, const float *w,
                                               const float *b, int N, int C) {
    if (N <= 0 || C <= 0) return cudaSuccess;
    const res_args a = make_args((size_t)N * (size_t)C, p, rng, offset, aligned16(y) && aligned16(s) && aligned16(x));
    const unsigned grid = (unsigned)((N + RLN_ROWS - 1) / RLN_ROWS);
    /* (the rule of the plain layer norm's forward, layernorm.cu: both give the same bits) */
    switch (ll_ln_vec_nb(C)) {
#define RLN_VEC(NB)                                                                                                    \
    case NB:                                                                                                           \
        LL_DISPATCH(t, T, LL_LAUNCH(grid, RLN_ROWS * LL_WARP, 0, st, residual_ln_fwd_kernel<T, NB>)(                   \
                              (T *)y, (T *)s, (const T *)x, g1, g2, a, N, C, (T *)u, mean, rstd, w, b);)               \
        break;
        RLN_VEC(1)
        RLN_VEC(2)
        RLN_VEC(3)
        RLN_VEC(4)
#undef RLN_VEC
    default:
        LL_DISPATCH(t, T, LL_LAUNCH(grid, RLN_ROWS * LL_WARP, 0, st, residual_ln_fwd_kernel<T, 0>)(
                              (T *)y, (T *)s, (const T *)x, g1, g2, a, N, C, (T *)u, mean, rstd, w, b);)
    }
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_residual_bwd(cudaStream_t st, ll_cuda_dtype t, void *ds, void *dx, int dx_mode,
                                            const void *s, float *dg1, float *dg2, const float *g1, const float *g2,
                                            size_t n, float p, ll_philox rng, uint64_t offset, void *scratch,
                                            unsigned *ticket) {
    if (n == 0) return cudaSuccess;
    if (dx_mode != LL_RES_NONE && dx_mode != LL_RES_COPY && dx_mode != LL_RES_ACC) return cudaErrorInvalidValue;
    const int dot = dg1 || dg2;
    if (dot && (!scratch || !ticket)) return cudaErrorInvalidValue;
    const int aligned = aligned16(ds) && aligned16(s) && (dx_mode == LL_RES_NONE || aligned16(dx));
    res_args a = make_args(n, p, rng, offset, aligned);
    /* one wave of blocks with equal shares (ll_resident_blocks); a function of n, offset and the
     * device only, so the dot's partials, summed in index order, repeat on that device */
    unsigned G = ll_grid(a.nblk, RES_THREADS);
    unsigned R = 0;
    LL_DISPATCH(t, T, R = ll_resident_blocks(residual_bwd_kernel<T>, RES_THREADS, 0);)
    if (R && G > R) G = R;
    if (dot && G > RES_MAX_PARTS) G = RES_MAX_PARTS;
    a.share = a.nblk / G;
    a.extra = a.nblk % G;
    LL_DISPATCH(t, T, LL_LAUNCH(G, RES_THREADS, 0, st, residual_bwd_kernel<T>)(
                          (T *)ds, (T *)dx, dx_mode, (const T *)s, dot, (double *)scratch, ticket, dg1, dg2, g1, g2,
                          a);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}
