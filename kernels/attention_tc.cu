/* Attention forward on tensor cores (bf16 q, k, v and out; fp32 softmax and
 * lse), the flash-attention loop with nvcuda::wmma tiles.
 *
 * Same contract, masks and dropout bits as attention_fwd_kernel
 * (kernels/attention.cu), which remains the path for fp32, for head sizes
 * that are not a multiple of 16 and for devices without bf16 WMMA.  One
 * difference in rounding: the dropped probabilities enter P V as bf16 (the
 * tensor cores' input type) split in two, P = hi + lo with hi = bf16(P) and
 * lo = bf16(P - hi), and P V = hi V + lo V: P keeps ~16 bits where one bf16
 * would keep 8, so the output stays as close to the SIMT kernel's fp32 P as
 * the CPU's bf16 backend is (one bf16 P moved a training step's gradients
 * past the bf16 noise floor of tests/gpu/test_step_cuda.c; flash attention
 * rounds P once).  The second product is half as much tensor-core work again
 * in a kernel that is bound by its loads and softmax at NMT lengths.
 *
 * Work layout: a block of W warps (4 for Dh <= 64, else 2: shared memory
 * stays within 48 KiB) owns W * 16 query rows of one (sentence, head); each
 * warp owns 16 rows.  Per key tile of 32 rows (K and V staged as bf16 for the
 * block):
 *   S = Q K^T                       two 16x16 WMMA tiles per warp -> shared fp32
 *   online softmax on S             lane pair (2r, 2r+1) owns row r, 16 keys each;
 *                                   dropout bits 8 per Philox block
 *   O = alpha O + hi V + lo V        O lives in shared fp32: the lanes rescale its
 *                                   rows, WMMA loads it as the accumulator, adds
 *                                   P V and stores it back
 * and at the end out = O / l, lse = m + log l.  Nothing of size Tq x Tk
 * touches global memory. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention_common.cuh"
#include "wmma_tile.cuh"

#define TC_KT 32      /* keys per tile */
#define TC_MAX_WARPS 4
#define TC_THREADS 128 /* TC_MAX_WARPS warps */

static int tc_warps(int Dh) { return Dh <= 64 ? 4 : 2; }

/* shared memory: sK, sV [TC_KT][Dh] and sQ [W*16][Dh] bf16; per warp sS [16][TC_KT]
 * fp32, sO [16][Dh] fp32, sP [2][16][TC_KT] bf16 (hi, lo); every region a multiple
 * of 32 bytes, 48 KiB at Dh 64 (4 warps) and 128 (2 warps) */
static __host__ __device__ size_t tc_warp_floats(int Dh) {
    return (size_t)LL_WT * TC_KT + (size_t)LL_WT * Dh + LL_WT * TC_KT;
}
static size_t tc_smem(int Dh, int W) {
    return sizeof(__nv_bfloat16) * ((size_t)2 * TC_KT * Dh + (size_t)W * LL_WT * Dh) +
           sizeof(float) * W * tc_warp_floats(Dh);
}

/* rows r0..r0+n-1 of a bf16 [*, stride] matrix into s[rows][Dh]; rows past n zero.  16-byte
 * loads where g and stride allow (the model's packed q/k/v always do; Dh is a multiple of 16),
 * threads `t0, t0 + nt, ...` of the block (a warp: its lanes) */
static __device__ __forceinline__ void stage_rows(__nv_bfloat16 *s, int rows, const __nv_bfloat16 *g, int stride,
                                                  int r0, int n, int Dh, int t0, int nt) {
    if ((uintptr_t)g % 16 == 0 && stride % 8 == 0) {
        const int V = Dh / 8; /* 8 bf16 per uint4 */
        for (int e = t0; e < rows * V; e += nt) {
            const int r = e / V, v = e % V;
            const uint4 z = make_uint4(0, 0, 0, 0);
            *(uint4 *)(s + (size_t)r * Dh + v * 8) = r < n ? *(const uint4 *)(g + (size_t)(r0 + r) * stride + v * 8) : z;
        }
        return;
    }
    for (int e = t0; e < rows * Dh; e += nt) {
        const int r = e / Dh, d = e % Dh;
        s[e] = r < n ? g[(size_t)(r0 + r) * stride + d] : __float2bfloat16_rn(0.0f);
    }
}
static __device__ __forceinline__ void stage_bf16(__nv_bfloat16 *s, int rows, const __nv_bfloat16 *g, int stride,
                                                  int r0, int n, int Dh) {
    stage_rows(s, rows, g, stride, r0, n, Dh, threadIdx.x, blockDim.x);
}

static __global__ void __launch_bounds__(TC_THREADS)
    attention_fwd_tc_kernel(attn_args a, __nv_bfloat16 *__restrict__ out, float *__restrict__ lse) {
#ifdef LL_WMMA_BF16
    using namespace nvcuda;
    LL_DYN_SHARED(float4, smem); /* float4: 16-byte aligned (a launch's dynamic block starts 128-aligned) */
    const int Dh = a.Dh, C = a.H * Dh, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int W = blockDim.x / WARP, BQ = W * LL_WT;
    const int b = a.b0 + (int)blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ;
    __nv_bfloat16 *sK = (__nv_bfloat16 *)smem, *sV = sK + TC_KT * Dh, *sQall = sV + TC_KT * Dh;
    float *sS = (float *)(sQall + (size_t)BQ * Dh) + (size_t)warp * tc_warp_floats(Dh);
    float *sO = sS + LL_WT * TC_KT;
    __nv_bfloat16 *sP = (__nv_bfloat16 *)(sO + LL_WT * Dh), *sQ = sQall + (size_t)warp * LL_WT * Dh;

    const int lim = key_limit(a, b);
    const int qn = min(BQ, a.Tq - q0);
    const int kmax = row_limit(a, lim, q0 + qn - 1); /* the block's widest row */
    const int wq = min(LL_WT, a.Tq - q0 - warp * LL_WT);     /* the warp's rows (<= 0: none) */
    const int wmax = wq > 0 ? row_limit(a, lim, q0 + warp * LL_WT + wq - 1) : 0;
    /* lane pair (2r, 2r+1): row r, keys half*16.. of each tile, columns half*Dh/2.. of O */
    const int r = lane >> 1, half = lane & 1, i = q0 + warp * LL_WT + r;
    const int n = i < a.Tq ? row_limit(a, lim, i) : 0;
    float m = -INFINITY, l = 0.0f;
    attn_keep_cache kc;

    stage_bf16(sQall, BQ, (const __nv_bfloat16 *)a.q + (size_t)b * a.Tq * a.q_stride + h * Dh, a.q_stride, q0, qn,
               Dh);
    for (int e = lane; e < LL_WT * Dh; e += WARP) sO[e] = 0.0f;
    const __nv_bfloat16 *kb = (const __nv_bfloat16 *)a.k + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    const __nv_bfloat16 *vb = (const __nv_bfloat16 *)a.v + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    for (int kt = 0; kt < kmax; kt += TC_KT) {
        __syncthreads(); /* the previous tile consumed (and sQ staged, sO cleared) */
        stage_bf16(sK, TC_KT, kb, a.kv_stride, kt, min(TC_KT, kmax - kt), Dh);
        stage_bf16(sV, TC_KT, vb, a.kv_stride, kt, min(TC_KT, kmax - kt), Dh);
        __syncthreads();
        if (kt >= wmax) continue; /* warp-uniform: no row of the warp sees these keys */
        for (int jt = 0; jt < TC_KT; jt += LL_WT) { /* S = Q K^T (K's rows are B's columns) */
            ll_wmma_acc acc;
            wmma::fill_fragment(acc, 0.0f);
            ll_wmma_tile_product<wmma::col_major>(acc, sQ, Dh, sK + (size_t)jt * Dh, Dh, 1, Dh);
            wmma::store_matrix_sync(sS + jt, acc, TC_KT, wmma::mem_row_major);
        }
        __syncwarp(); /* the warp's stores of S before each lane reads its row */
        const int c0 = half * LL_WT;
        float s[LL_WT], tmax = -INFINITY;
#pragma unroll
        for (int c = 0; c < LL_WT; c++) {
            const int j = kt + c0 + c;
            s[c] = j < n ? sS[r * TC_KT + c0 + c] * a.scale : -INFINITY;
            tmax = fmaxf(tmax, s[c]);
        }
        const float mn = fmaxf(m, fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1)));
        /* a row with no visible key so far keeps m = -inf, O = 0 and l = 0 */
        const float alpha = mn == -INFINITY ? 1.0f : __expf(m - mn); /* 0 on the first visible tile */
        float psum = 0.0f;
#pragma unroll
        for (int c = 0; c < LL_WT; c++) {
            const int j = kt + c0 + c;
            float p = j < n ? __expf(s[c] - mn) : 0.0f;
            psum += p;
            if (a.drop && j < n) p = kc.keep(a, b, h, i, j) ? p * a.keep_scale : 0.0f;
            const __nv_bfloat16 hi = __float2bfloat16_rn(p);
            sP[r * TC_KT + c0 + c] = hi;
            sP[LL_WT * TC_KT + r * TC_KT + c0 + c] = __float2bfloat16_rn(p - __bfloat162float(hi));
        }
        l = l * alpha + psum + __shfl_xor_sync(0xffffffffu, psum, 1);
        m = mn;
        for (int d = half * (Dh / 2); d < (half + 1) * (Dh / 2); d++) sO[r * Dh + d] *= alpha;
        __syncwarp(); /* P and the rescaled O before the tensor cores read them */
        for (int e = 0; e < Dh; e += LL_WT) { /* O += hi V + lo V */
            ll_wmma_acc acc;
            wmma::load_matrix_sync(acc, sO + e, Dh, wmma::mem_row_major);
            ll_wmma_tile_product<wmma::row_major>(acc, sP, TC_KT, sV + e, Dh, Dh, TC_KT);
            ll_wmma_tile_product<wmma::row_major>(acc, sP + LL_WT * TC_KT, TC_KT, sV + e, Dh, Dh, TC_KT);
            __syncwarp(); /* every lane's loads of this O tile before any lane's store (layouts are opaque) */
            wmma::store_matrix_sync(sO + e, acc, Dh, wmma::mem_row_major);
        }
        __syncwarp(); /* O's stores before the lanes' next rescale */
    }
    __syncwarp(); /* the zeroed O, where no tile ran, before other lanes read it */
    if (i < a.Tq) {
        const float inv = l > 0.0f ? 1.0f / l : 0.0f; /* no visible key: out 0 */
        __nv_bfloat16 *orow = out + ((size_t)b * a.Tq + i) * C + h * Dh;
        for (int d = half * (Dh / 2); d < (half + 1) * (Dh / 2); d++)
            orow[d] = __float2bfloat16_rn(sO[r * Dh + d] * inv);
        if (lse && half == 0) lse[((size_t)b * a.H + h) * a.Tq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
    }
#else
    (void)a, (void)out, (void)lse;
#endif
}

/* ---- backward on tensor cores ----------------------------------------------------
 * Two kernels as on the SIMT path (no atomics: the gradients are bit-
 * reproducible), each product on tensor cores, P and dS split hi + lo as in
 * the forward.  D_i = rowsum(dO_i o O_i) is recomputed by both.
 *  dq:  a warp owns 16 query rows; per key tile of 32: S = Q K^T, dP = dO V^T
 *       (shared fp32), dS = P o (dP - D) / sqrt(Dh) by the lanes (lane pair per
 *       row, 16 consecutive keys each: 8 dropout bits per Philox block), then
 *       dQ += dS K in accumulator fragments that live across the key tiles.
 *  dkv: a warp owns 16 keys; per query tile of 32: S^T = K Q^T and dP^T =
 *       V dO^T, then dV += P^T dO and dK += dS^T Q in accumulator fragments
 *       (a lane per query column, its 16 keys consecutive in the dropout
 *       stream). */

#define TC_QT 32 /* queries per tile of the dkv kernel */

/* split x into bf16 hi + lo at hi[k], hi[k + off] */
static __device__ __forceinline__ void split_store(__nv_bfloat16 *hi, int k, int off, float x) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x);
    hi[k] = h;
    hi[k + off] = __float2bfloat16_rn(x - __bfloat162float(h));
}

/* warp-level: rows r0..r0+n-1 of a bf16 [*, stride] matrix into s[16][Dh], rows past n zero */
static __device__ __forceinline__ void stage_warp(__nv_bfloat16 *s, const __nv_bfloat16 *g, int stride, int r0, int n,
                                                  int Dh, int lane) {
    stage_rows(s, LL_WT, g, stride, r0, n, Dh, lane, WARP);
}

/* acc[e] (+)= A[16, K] M[K, e*16..] for e < NF = Dh/16, A = hi + lo (lo at A + 16 * lda), M
 * row-major.  NF is a template parameter so that the accumulators stay in registers. */
template <int NF>
static __device__ __forceinline__ void acc_split_product(ll_wmma_acc *acc, const __nv_bfloat16 *A, int lda,
                                                         const __nv_bfloat16 *M, int Dh, int K) {
#ifdef LL_WMMA_BF16
#pragma unroll
    for (int e = 0; e < NF; e++) {
        ll_wmma_tile_product<nvcuda::wmma::row_major>(acc[e], A, lda, M + e * LL_WT, Dh, Dh, K);
        ll_wmma_tile_product<nvcuda::wmma::row_major>(acc[e], A + LL_WT * lda, lda, M + e * LL_WT, Dh, Dh, K);
    }
#else
    (void)acc, (void)A, (void)lda, (void)M, (void)Dh, (void)K;
#endif
}

/* S[16, 32] = A[16, Dh] B[32, Dh]^T into shared fp32 (ld 32) */
static __device__ __forceinline__ void product_abt(float *S, const __nv_bfloat16 *A, const __nv_bfloat16 *B, int Dh) {
#ifdef LL_WMMA_BF16
    for (int jt = 0; jt < 32; jt += LL_WT) {
        ll_wmma_acc acc;
        nvcuda::wmma::fill_fragment(acc, 0.0f);
        ll_wmma_tile_product<nvcuda::wmma::col_major>(acc, A, Dh, B + (size_t)jt * Dh, Dh, 1, Dh);
        nvcuda::wmma::store_matrix_sync(S + jt, acc, 32, nvcuda::wmma::mem_row_major);
    }
#else
    (void)S, (void)A, (void)B, (void)Dh;
#endif
}

/* the warp's accumulators, through its fp32 staging [16][Dh], into rows r0.. (< rmax) of a
 * bf16 [*, stride] matrix */
template <int NF>
static __device__ __forceinline__ void write_acc(const ll_wmma_acc *acc, float *st, __nv_bfloat16 *g, int stride,
                                                 int r0, int rmax, int Dh, int lane) {
#ifdef LL_WMMA_BF16
    __syncwarp(); /* the staging's earlier readers (tensor-core loads) are done */
#pragma unroll
    for (int e = 0; e < NF; e++)
        nvcuda::wmma::store_matrix_sync(st + e * LL_WT, acc[e], Dh, nvcuda::wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < LL_WT * Dh; e += WARP) {
        const int r = e / Dh, d = e % Dh;
        if (r0 + r < rmax) g[(size_t)(r0 + r) * stride + d] = __float2bfloat16_rn(st[e]);
    }
    __syncwarp();
#else
    (void)acc, (void)st, (void)g, (void)stride, (void)r0, (void)rmax, (void)Dh, (void)lane;
#endif
}

static size_t tc_dq_smem(int Dh, int W) {
    return sizeof(__nv_bfloat16) * 2 * TC_KT * Dh + (size_t)W * (64 * Dh + 2 * 2048);
}

template <int NF>
static __global__ void __launch_bounds__(TC_THREADS)
    attention_dq_tc_kernel(attn_args a, __nv_bfloat16 *__restrict__ dq, const __nv_bfloat16 *__restrict__ out,
                           const __nv_bfloat16 *__restrict__ dout, const float *__restrict__ lse) {
#ifdef LL_WMMA_BF16
    LL_DYN_SHARED(float4, smem);
    const int Dh = NF * LL_WT, C = a.H * Dh, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int W = blockDim.x / WARP, BQ = W * LL_WT;
    const int b = a.b0 + (int)blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ, w0 = q0 + warp * LL_WT;
    __nv_bfloat16 *sK = (__nv_bfloat16 *)smem, *sV = sK + TC_KT * Dh;
    char *wb = (char *)(sV + TC_KT * Dh) + (size_t)warp * (64 * Dh + 2 * 2048);
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)wb, *sG = sQ + LL_WT * Dh;
    float *sS = (float *)(sG + LL_WT * Dh);
    __nv_bfloat16 *sDS = (__nv_bfloat16 *)(sS + LL_WT * TC_KT);

    const int lim = key_limit(a, b);
    const int qn = min(BQ, a.Tq - q0);
    const int kmax = row_limit(a, lim, q0 + qn - 1);
    const int wq = min(LL_WT, a.Tq - w0);
    const int wmax = wq > 0 ? row_limit(a, lim, w0 + wq - 1) : 0;
    const int r = lane >> 1, half = lane & 1, i = w0 + r;
    const int n = i < a.Tq ? row_limit(a, lim, i) : 0;
    stage_warp(sQ, (const __nv_bfloat16 *)a.q + (size_t)b * a.Tq * a.q_stride + h * Dh, a.q_stride, w0, max(wq, 0), Dh,
               lane);
    stage_warp(sG, dout + (size_t)b * a.Tq * C + h * Dh, C, w0, max(wq, 0), Dh, lane);
    float D = 0.0f, L = 0.0f;
    if (i < a.Tq) {
        const __nv_bfloat16 *orow = out + ((size_t)b * a.Tq + i) * C + h * Dh;
        const __nv_bfloat16 *grow = dout + ((size_t)b * a.Tq + i) * C + h * Dh;
        for (int d = half * (Dh / 2); d < (half + 1) * (Dh / 2); d++) D += ll_ld(grow + d) * ll_ld(orow + d);
        L = lse[((size_t)b * a.H + h) * a.Tq + i];
    }
    D += __shfl_xor_sync(0xffffffffu, D, 1);
    ll_wmma_acc acc[NF];
#pragma unroll
    for (int e = 0; e < NF; e++) nvcuda::wmma::fill_fragment(acc[e], 0.0f);
    attn_keep_cache kc;
    const __nv_bfloat16 *kb = (const __nv_bfloat16 *)a.k + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    const __nv_bfloat16 *vb = (const __nv_bfloat16 *)a.v + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    for (int kt = 0; kt < kmax; kt += TC_KT) {
        __syncthreads(); /* the previous tile consumed */
        stage_bf16(sK, TC_KT, kb, a.kv_stride, kt, min(TC_KT, kmax - kt), Dh);
        stage_bf16(sV, TC_KT, vb, a.kv_stride, kt, min(TC_KT, kmax - kt), Dh);
        __syncthreads();
        if (kt >= wmax) continue; /* warp-uniform */
        product_abt(sS, sQ, sK, Dh); /* S = Q K^T */
        __syncwarp();
        const int c0 = half * LL_WT;
        float p[LL_WT];
        unsigned keep = 0xffffu;
#pragma unroll
        for (int c = 0; c < LL_WT; c++) {
            const int j = kt + c0 + c;
            p[c] = j < n ? __expf(sS[r * TC_KT + c0 + c] * a.scale - L) : 0.0f;
            if (a.drop && j < n && !kc.keep(a, b, h, i, j)) keep &= ~(1u << c);
        }
        __syncwarp(); /* S read before dP overwrites it */
        product_abt(sS, sG, sV, Dh); /* dP = dO V^T */
        __syncwarp();
#pragma unroll
        for (int c = 0; c < LL_WT; c++) {
            float dp = sS[r * TC_KT + c0 + c];
            if (a.drop) dp = (keep >> c) & 1u ? dp * a.keep_scale : 0.0f;
            split_store(sDS, r * TC_KT + c0 + c, LL_WT * TC_KT, p[c] * (dp - D) * a.scale);
        }
        __syncwarp();
        acc_split_product<NF>(acc, sDS, TC_KT, sK, Dh, TC_KT); /* dQ += dS K */
    }
    write_acc<NF>(acc, (float *)wb, dq + (size_t)b * a.Tq * a.q_stride + h * Dh, a.q_stride, w0, a.Tq, Dh, lane);
#else
    (void)a, (void)dq, (void)out, (void)dout, (void)lse;
#endif
}

static size_t tc_dkv_smem(int Dh, int W) {
    return sizeof(__nv_bfloat16) * ((size_t)2 * W * LL_WT * Dh + (size_t)2 * TC_QT * Dh) + (size_t)W * 2 * 2048 +
           3 * TC_QT * sizeof(float);
}

template <int NF>
static __global__ void __launch_bounds__(TC_THREADS)
    attention_dkv_tc_kernel(attn_args a, __nv_bfloat16 *__restrict__ dk, __nv_bfloat16 *__restrict__ dv,
                            const __nv_bfloat16 *__restrict__ out, const __nv_bfloat16 *__restrict__ dout,
                            const float *__restrict__ lse) {
#ifdef LL_WMMA_BF16
    LL_DYN_SHARED(float4, smem);
    const int Dh = NF * LL_WT, C = a.H * Dh, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int W = blockDim.x / WARP, BK = W * LL_WT;
    const int b = a.b0 + (int)blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * BK, wk0 = j0 + warp * LL_WT;
    __nv_bfloat16 *sK = (__nv_bfloat16 *)smem, *sV = sK + BK * Dh, *sQ = sV + BK * Dh, *sG = sQ + TC_QT * Dh;
    float *sS = (float *)(sG + TC_QT * Dh) + (size_t)warp * 2 * 2048 / sizeof(float);
    __nv_bfloat16 *sPD = (__nv_bfloat16 *)(sS + LL_WT * TC_QT);
    float *sL = (float *)(sG + TC_QT * Dh) + (size_t)W * 2 * 2048 / sizeof(float), *sD = sL + TC_QT;
    int *sN = (int *)(sD + TC_QT);

    const int lim = key_limit(a, b);
    const __nv_bfloat16 *kb = (const __nv_bfloat16 *)a.k + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    const __nv_bfloat16 *vb = (const __nv_bfloat16 *)a.v + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    stage_bf16(sK, BK, kb, a.kv_stride, j0, min(BK, a.Tk - j0), Dh);
    stage_bf16(sV, BK, vb, a.kv_stride, j0, min(BK, a.Tk - j0), Dh);
    ll_wmma_acc gk[NF], gv[NF];
#pragma unroll
    for (int e = 0; e < NF; e++) {
        nvcuda::wmma::fill_fragment(gk[e], 0.0f);
        nvcuda::wmma::fill_fragment(gv[e], 0.0f);
    }
    const int qs = a.causal ? max(0, j0 - (a.Tk - a.Tq)) : 0;
    const int qend = j0 < lim ? a.Tq : 0; /* keys past the padding get no gradient */
    const __nv_bfloat16 *qb = (const __nv_bfloat16 *)a.q + (size_t)b * a.Tq * a.q_stride + h * Dh;
    const __nv_bfloat16 *gb = dout + (size_t)b * a.Tq * C + h * Dh;
    attn_keep_cache kc;
    for (int it = qs; it < qend; it += TC_QT) {
        const int qn = min(TC_QT, a.Tq - it);
        __syncthreads();
        stage_bf16(sQ, TC_QT, qb, a.q_stride, it, qn, Dh);
        stage_bf16(sG, TC_QT, gb, C, it, qn, Dh);
        query_tile_stats(a, b, h, lim, it, TC_QT, gb, out, lse, sD, sL, sN, warp, W, lane);
        __syncthreads();
        if (wk0 >= sN[qn - 1]) continue; /* warp-uniform: no query of the tile sees the warp's keys */
        product_abt(sS, sK + (size_t)warp * LL_WT * Dh, sQ, Dh); /* S^T = K Q^T */
        __syncwarp();
        const int i = it + lane, N = sN[lane];
        const float Li = sL[lane], Di = sD[lane];
        float p[LL_WT];
        unsigned keep = 0xffffu;
#pragma unroll
        for (int rr = 0; rr < LL_WT; rr++) {
            const int j = wk0 + rr;
            p[rr] = j < N ? __expf(sS[rr * TC_QT + lane] * a.scale - Li) : 0.0f;
            if (a.drop && j < N && !kc.keep(a, b, h, i, j)) keep &= ~(1u << rr);
            split_store(sPD, rr * TC_QT + lane, LL_WT * TC_QT, (keep >> rr) & 1u ? p[rr] * a.keep_scale : 0.0f);
        }
        __syncwarp();
        acc_split_product<NF>(gv, sPD, TC_QT, sG, Dh, TC_QT); /* dV += P^T dO (P dropped) */
        product_abt(sS, sV + (size_t)warp * LL_WT * Dh, sG, Dh); /* dP^T = V dO^T */
        __syncwarp(); /* also: the dV product's loads of P before dS overwrites it */
#pragma unroll
        for (int rr = 0; rr < LL_WT; rr++) {
            float dp = sS[rr * TC_QT + lane];
            if (a.drop) dp = (keep >> rr) & 1u ? dp * a.keep_scale : 0.0f;
            split_store(sPD, rr * TC_QT + lane, LL_WT * TC_QT, p[rr] * (dp - Di) * a.scale);
        }
        __syncwarp();
        acc_split_product<NF>(gk, sPD, TC_QT, sQ, Dh, TC_QT); /* dK += dS^T Q */
    }
    __syncthreads(); /* every warp is done with sK and sV: they become the staging */
    float *st = (float *)sK + (size_t)warp * LL_WT * Dh;
    write_acc<NF>(gk, st, dk + (size_t)b * a.Tk * a.kv_stride + h * Dh, a.kv_stride, wk0, a.Tk, Dh, lane);
    write_acc<NF>(gv, st, dv + (size_t)b * a.Tk * a.kv_stride + h * Dh, a.kv_stride, wk0, a.Tk, Dh, lane);
#else
    (void)a, (void)dk, (void)dv, (void)out, (void)dout, (void)lse;
#endif
}

/* The tensor-core forward can be switched off (LL_CUDA_ATTENTION=simt in the
 * environment, or ll_cuda_attention_tensor_cores(0)): for A/B timing on a GPU
 * and for tests that hold the two paths to each other. */
static int tc_mode = -1; /* -1: not read yet; 0 off; 1 on (atomics: any host thread may launch) */

extern "C" int ll_cuda_attention_tensor_cores(int on) {
    const int was = ll_attention_tc_takes(LL_WT);
    __atomic_store_n(&tc_mode, on ? 1 : 0, __ATOMIC_RELAXED);
    return was;
}

bool ll_attention_tc_takes(int Dh) {
    int mode = __atomic_load_n(&tc_mode, __ATOMIC_RELAXED);
    if (mode < 0) {
        const char *e = getenv("LL_CUDA_ATTENTION");
        int fresh = !(e && !strcmp(e, "simt"));
        mode = __atomic_compare_exchange_n(&tc_mode, &mode, fresh, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED) ? fresh
                                                                                                              : mode;
    }
    return mode && Dh % LL_WT == 0 && Dh <= WARP * MAX_SLOTS && ll_wmma_bf16_device();
}

cudaError_t ll_attention_fwd_tc(cudaStream_t stream, attn_args a, __nv_bfloat16 *out, float *lse) {
    const int W = tc_warps(a.Dh), BQ = W * LL_WT;
    const size_t smem = tc_smem(a.Dh, W);
    for (a.b0 = 0; a.b0 < a.B; a.b0 += MAX_GRID_Z) {
        const dim3 grid((a.Tq + BQ - 1) / BQ, a.H, (unsigned)(a.B - a.b0 < MAX_GRID_Z ? a.B - a.b0 : MAX_GRID_Z));
        LL_LAUNCH(grid, W * WARP, smem, stream, attention_fwd_tc_kernel)(a, out, lse);
        LL_CHECK_LAUNCH();
    }
    return cudaSuccess;
}

cudaError_t ll_attention_bwd_tc(cudaStream_t stream, attn_args a, __nv_bfloat16 *dq, __nv_bfloat16 *dk,
                                __nv_bfloat16 *dv, const __nv_bfloat16 *dout, const __nv_bfloat16 *out,
                                const float *lse) {
    const int W = tc_warps(a.Dh), R = W * LL_WT;
    for (int pass = 0; pass < 2; pass++) {
        const int rows = pass ? a.Tk : a.Tq;
        if (rows <= 0) continue;
        const size_t smem = pass ? tc_dkv_smem(a.Dh, W) : tc_dq_smem(a.Dh, W);
        for (a.b0 = 0; a.b0 < a.B; a.b0 += MAX_GRID_Z) {
            const dim3 grid((rows + R - 1) / R, a.H, (unsigned)(a.B - a.b0 < MAX_GRID_Z ? a.B - a.b0 : MAX_GRID_Z));
            /* the kernels are instantiated per Dh / 16 (1..8): their accumulators in registers */
#define TC_BWD_CASE(NF)                                                                                              \
    case NF:                                                                                                         \
        if (pass)                                                                                                    \
            LL_LAUNCH(grid, W * WARP, smem, stream, attention_dkv_tc_kernel<NF>)(a, dk, dv, out, dout, lse);         \
        else                                                                                                         \
            LL_LAUNCH(grid, W * WARP, smem, stream, attention_dq_tc_kernel<NF>)(a, dq, out, dout, lse);              \
        break;
            switch (a.Dh / LL_WT) {
                TC_BWD_CASE(1) TC_BWD_CASE(2) TC_BWD_CASE(3) TC_BWD_CASE(4)
                TC_BWD_CASE(5) TC_BWD_CASE(6) TC_BWD_CASE(7) TC_BWD_CASE(8)
            default: return cudaErrorInvalidValue;
            }
#undef TC_BWD_CASE
            LL_CHECK_LAUNCH();
        }
    }
    return cudaSuccess;
}
