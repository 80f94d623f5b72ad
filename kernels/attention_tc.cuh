/* Attention on tensor cores (bf16 q, k, v, out and gradients; fp32 softmax
 * and lse): the flash-attention loop with nvcuda::wmma tiles, forward and
 * backward.
 *
 * Same contract, masks and dropout bits as the SIMT kernels
 * (kernels/attention.cu), which remain the path for fp32, for head sizes
 * that are not a multiple of 16 and for devices without bf16 WMMA.  One
 * difference in rounding: the dropped probabilities (and dS) enter the
 * tensor cores as bf16 split in two, P = hi + lo with hi = bf16(P) and
 * lo = bf16(P - hi), and P V = hi V + lo V: P keeps ~16 bits where one bf16
 * would keep 8, so the output stays as close to the SIMT kernel's fp32 P as
 * the CPU's bf16 backend is (one bf16 P moved a training step's gradients
 * past the bf16 noise floor of tests/gpu/test_step_cuda.c; flash attention
 * rounds P once).
 *
 * Forward: a block of up to 4 warps (2 for Dh > 64) owns 16 query rows per
 * warp of one (sentence, head).  Per key tile of 32 rows (K and V staged as
 * bf16 for the block, rows padded against bank conflicts):
 *   S = Q K^T                       two 16x16 WMMA tiles per warp -> shared fp32
 *   softmax on S                    lane pair (2r, 2r+1) owns row r, 16 keys each;
 *                                   dropout bits 8 per Philox block
 *   O += hi V + lo V                O in accumulator fragments (registers)
 * with the rows' maxima found first when a row has several key tiles (the
 * fragments' layout is opaque: no per-row rescale), and at the end
 * out = O / l, lse = m + log l.  Backward: one kernel per (sentence, head)
 * when queries and keys fit one tile, else two (dq; dk/dv).  Nothing of size
 * Tq x Tk touches global memory.
 *
 * This header holds what the three files share (tile geometry, staging, the WMMA products, the
 * launch over Dh / 16): kernels/attention_tc.cu has the forward, attention_tc_bwd.cu the
 * two-kernel backward and the dispatch, attention_tc_bwd1.cu the one-kernel backward.  Three
 * translation units, as each instantiates its kernels for 8 head sizes: the one file took 85 s
 * of a 2-core CI build under ASan, and again for every mutant of tests/cuda_emu/mutants.sh in it. */
#ifndef LL_ATTENTION_TC_CUH
#define LL_ATTENTION_TC_CUH
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "attention_common.cuh"
#include "wmma_tile.cuh"

#define TC_KT 32      /* keys per tile */
#define TC_MAX_WARPS 4
#define TC_THREADS 128 /* TC_MAX_WARPS warps */
/* Row strides in shared memory, padded so that a warp's accesses spread over the 32 banks:
 * bf16 tiles of Dh columns take Dh + TC_PAD (consecutive rows 16 bytes apart in bank space,
 * so the tensor cores' 8-row loads are conflict-free), S tiles of 32 fp32 TC_SLD, P and dS
 * tiles of 32 bf16 TC_PLD; fp32 staging of 16 x Dh accumulators Dh + 4.  Each stride keeps
 * WMMA's rules (a multiple of 16 bytes; tiles start 32-byte aligned). */
#define TC_PAD 8
#define TC_SLD (TC_KT + 4)
#define TC_PLD (TC_KT + 8)
#define TC_WARP_BYTES (LL_WT * TC_SLD * 4 + 2 * LL_WT * TC_PLD * 2) /* sS fp32 + sP hi/lo bf16 */

/* warps per block: 16 query rows each, at most 4 (Dh <= 64) or 2 (shared memory), no more
 * than the rows need (a warp without rows would only hold shared memory) */
static inline int tc_warps(int Dh, int rows) {
    const int w = Dh <= 64 ? 4 : 2, need = (rows + LL_WT - 1) / LL_WT;
    return need < w ? (need > 0 ? need : 1) : w;
}

/* shared memory of the forward: sK, sV [TC_KT][Dh + TC_PAD] and sQ [W*16][Dh + TC_PAD] bf16,
 * then per warp sS [16][TC_SLD] fp32 and sP [2][16][TC_PLD] bf16 (hi, lo); at the end the
 * tiles' bytes hold each warp's fp32 staging of O [16][Dh + 4].  35 KiB at Dh 128 with 2
 * warps (48 KiB before the padding and with O in shared memory).
 *
 * Where every key fits one tile and Dh >= 64 (tc_fwd_alias: NMT's usual case), a warp's S and
 * then its P live in its own rows of sQ, which S = Q K^T is the last to read: 25.5 KiB at Dh 128,
 * so 8 blocks of 2 warps fit a multiprocessor (6 did at 35 KiB: ll64's 1,024 blocks ran in 1.3
 * waves on an H100, ncu 2026-11-27/28).  P's rows then take S's: hi in the first 32 bf16 of a
 * 144-byte row, lo in the next 32 (TC_SLD floats = 72 bf16). */
static inline __host__ __device__ size_t tc_tile_bytes(int Dh, int W) {
    return sizeof(__nv_bfloat16) * (size_t)(2 * TC_KT + W * LL_WT) * (Dh + TC_PAD);
}
static inline __host__ __device__ bool tc_fwd_alias(int Dh, int Tk) { return Tk <= TC_KT && Dh >= 64; }
static inline __host__ __device__ size_t tc_smem(int Dh, int W, bool alias = false) {
    const size_t tiles = tc_tile_bytes(Dh, W), staging = sizeof(float) * (size_t)W * LL_WT * (Dh + 4);
    return (tiles > staging ? tiles : staging) + (alias ? 0 : (size_t)W * TC_WARP_BYTES);
}

/* rows r0..r0+n-1 of a bf16 [*, stride] matrix into s[rows][ld] (Dh columns); rows past n
 * zero.  16-byte loads where g and stride allow (the model's packed q/k/v always do; Dh is a
 * multiple of 16), threads `t0, t0 + nt, ...` of the block (a warp: its lanes) */
static __device__ __forceinline__ void stage_rows(__nv_bfloat16 *s, int ld, int rows, const __nv_bfloat16 *g,
                                                  int stride, int r0, int n, int Dh, int t0, int nt) {
    if ((uintptr_t)g % 16 == 0 && stride % 8 == 0) {
        const int V = Dh / 8; /* 8 bf16 per uint4 */
        for (int e = t0; e < rows * V; e += nt) {
            const int r = e / V, v = e % V;
            const uint4 z = make_uint4(0, 0, 0, 0);
            *(uint4 *)(s + (size_t)r * ld + v * 8) =
                r < n ? *(const uint4 *)(g + (size_t)(r0 + r) * stride + v * 8) : z;
        }
        return;
    }
    for (int e = t0; e < rows * Dh; e += nt) {
        const int r = e / Dh, d = e % Dh;
        s[(size_t)r * ld + d] = r < n ? g[(size_t)(r0 + r) * stride + d] : __float2bfloat16_rn(0.0f);
    }
}
static __device__ __forceinline__ void stage_bf16(__nv_bfloat16 *s, int ld, int rows, const __nv_bfloat16 *g,
                                                  int stride, int r0, int n, int Dh) {
    stage_rows(s, ld, rows, g, stride, r0, n, Dh, threadIdx.x, blockDim.x);
}

/* A warp's 16 x Dh fp32 staging st (row stride lds) into rows r0.. (< rmax) of a bf16 [*, stride]
 * matrix, row r scaled by the value `scale` holds in lane 2r (the forward's 1 / l):
 * a lane converts 8 consecutive values, one 16-byte store where g and stride allow (scalar
 * 2-byte stores, 16 rows apart per lane pair, were 8x the store instructions) */
template <int NF>
static __device__ __forceinline__ void store_rows(const float *st, int lds, __nv_bfloat16 *g, int stride, int r0,
                                                  int rmax, int lane, float scale) {
    constexpr int CH = 2 * NF; /* 8-value chunks per row */
    const bool vec = (uintptr_t)g % 16 == 0 && stride % 8 == 0;
#pragma unroll
    for (int it = 0; it < NF; it++) { /* 16 rows x CH chunks = 32 NF: NF per lane, warp-uniform */
        const int q = lane + WARP * it, rr = q / CH, c = q % CH * 8;
        const float iv = __shfl_sync(0xffffffffu, scale, 2 * rr);
        if (r0 + rr >= rmax) continue;
        const float4 x = *(const float4 *)(st + rr * lds + c), y = *(const float4 *)(st + rr * lds + c + 4);
        union {
            uint4 u;
            __nv_bfloat16 h[8];
        } v;
        v.h[0] = __float2bfloat16_rn(x.x * iv), v.h[1] = __float2bfloat16_rn(x.y * iv);
        v.h[2] = __float2bfloat16_rn(x.z * iv), v.h[3] = __float2bfloat16_rn(x.w * iv);
        v.h[4] = __float2bfloat16_rn(y.x * iv), v.h[5] = __float2bfloat16_rn(y.y * iv);
        v.h[6] = __float2bfloat16_rn(y.z * iv), v.h[7] = __float2bfloat16_rn(y.w * iv);
        __nv_bfloat16 *d = g + (size_t)(r0 + rr) * stride + c;
        if (vec)
            *(uint4 *)d = v.u;
        else
            for (int k = 0; k < 8; k++) d[k] = v.h[k];
    }
}
/* (write_acc below keeps its scalar stores: in the dq and dk/dv kernels, at 178 and 255 registers,
 * this one made ptxas spill 64 bytes in attention_dkv_tc_kernel<8>) */

/* S[16, 16 tiles] (ld lds, fp32, shared) = A[16, Dh] B[16 tiles, Dh]^T, A and B bf16 of row
 * stride ld; tiles 2 (a key tile of 32) or 1 */
static __device__ __forceinline__ void product_abt(float *S, int lds, const __nv_bfloat16 *A,
                                                   const __nv_bfloat16 *B, int ld, int Dh, int tiles = 2) {
#ifdef LL_WMMA_BF16
    for (int jt = 0; jt < tiles * LL_WT; jt += LL_WT) {
        ll_wmma_acc acc;
        nvcuda::wmma::fill_fragment(acc, 0.0f);
        ll_wmma_tile_product<nvcuda::wmma::col_major, true>(acc, A, ld, B + (size_t)jt * ld, ld, 1, Dh);
        nvcuda::wmma::store_matrix_sync(S + jt, acc, lds, nvcuda::wmma::mem_row_major);
    }
#else
    (void)S, (void)lds, (void)A, (void)B, (void)ld, (void)Dh, (void)tiles;
#endif
}

/* product_abt, both tiles computed before either is stored: S may then overwrite A (the
 * forward's S over the warp's own Q rows) */
static __device__ __forceinline__ void product_abt_both(float *S, int lds, const __nv_bfloat16 *A,
                                                        const __nv_bfloat16 *B, int ld, int Dh) {
#ifdef LL_WMMA_BF16
    ll_wmma_acc acc0, acc1;
    nvcuda::wmma::fill_fragment(acc0, 0.0f);
    nvcuda::wmma::fill_fragment(acc1, 0.0f);
    ll_wmma_tile_product<nvcuda::wmma::col_major, true>(acc0, A, ld, B, ld, 1, Dh);
    ll_wmma_tile_product<nvcuda::wmma::col_major, true>(acc1, A, ld, B + (size_t)LL_WT * ld, ld, 1, Dh);
    __syncwarp(); /* every lane's loads of A before the stores */
    nvcuda::wmma::store_matrix_sync(S, acc0, lds, nvcuda::wmma::mem_row_major);
    nvcuda::wmma::store_matrix_sync(S + LL_WT, acc1, lds, nvcuda::wmma::mem_row_major);
#else
    (void)S, (void)lds, (void)A, (void)B, (void)ld, (void)Dh;
#endif
}

/* acc[e] (+)= op(A)[16, 32] M[32, e*16..] for e < ne <= NF (NF = Dh/16 but for the one-kernel
 * backward's halves), A = hi + lo (lo at A + lo_off), M row-major of row stride ldm: op(A) = A
 * row-major (lda) or, with AL = col_major, the transpose of a row-major [32][lda]
 * (A[j * lda + i]).  The 32: every caller's key or query tile (TC_KT, TC_QT).  NF is a template
 * parameter so that the accumulators stay in registers. */
template <int NF, typename AL>
static __device__ __forceinline__ void acc_split_product(ll_wmma_acc *acc, const __nv_bfloat16 *A, int lda, int lo_off,
                                                         const __nv_bfloat16 *M, int ldm, int ne = NF) {
#ifdef LL_WMMA_BF16
    using namespace nvcuda;
    constexpr bool colA = std::is_same<AL, wmma::col_major>::value;
#pragma unroll
    for (int e = 0; e < NF; e++)
        for (int part = 0; part < 2 && e < ne; part++)
            for (int kk = 0; kk < TC_KT; kk += LL_WT) {
                wmma::fragment<wmma::matrix_a, LL_WT, LL_WT, LL_WT, __nv_bfloat16, AL> fa;
                wmma::fragment<wmma::matrix_b, LL_WT, LL_WT, LL_WT, __nv_bfloat16, wmma::row_major> fb;
                ll_wmma_load_shared(fa, A + part * lo_off + (colA ? (size_t)kk * lda : (size_t)kk), lda);
                ll_wmma_load_shared(fb, M + (size_t)kk * ldm + e * LL_WT, ldm);
                wmma::mma_sync(acc[e], fa, fb, acc[e]);
            }
#else
    (void)acc, (void)A, (void)lda, (void)lo_off, (void)M, (void)ldm, (void)ne;
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
static_assert(TC_QT == TC_KT, "acc_split_product sums over tiles of TC_KT");

/* split x into bf16 hi + lo at hi[k], hi[k + off] */
static __device__ __forceinline__ void split_store(__nv_bfloat16 *hi, int k, int off, float x) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x);
    hi[k] = h;
    hi[k + off] = __float2bfloat16_rn(x - __bfloat162float(h));
}

/* warp-level: rows r0..r0+n-1 of a bf16 [*, stride] matrix into s[16][ld], rows past n zero */
static __device__ __forceinline__ void stage_warp(__nv_bfloat16 *s, int ld, const __nv_bfloat16 *g, int stride,
                                                  int r0, int n, int Dh, int lane) {
    stage_rows(s, ld, LL_WT, g, stride, r0, n, Dh, lane, WARP);
}

/* the warp's accumulators, through its fp32 staging [16][Dh + 4], into rows r0.. (< rmax) of a
 * bf16 [*, stride] matrix */
template <int NF>
static __device__ __forceinline__ void write_acc(const ll_wmma_acc *acc, float *st, __nv_bfloat16 *g, int stride,
                                                 int r0, int rmax, int lane) {
#ifdef LL_WMMA_BF16
    const int Dh = NF * LL_WT;
    __syncwarp(); /* the staging's earlier readers (tensor-core loads) are done */
#pragma unroll
    for (int e = 0; e < NF; e++)
        nvcuda::wmma::store_matrix_sync(st + e * LL_WT, acc[e], Dh + 4, nvcuda::wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < LL_WT * Dh; e += WARP) {
        const int r = e / Dh, d = e % Dh;
        if (r0 + r < rmax) g[(size_t)(r0 + r) * stride + d] = __float2bfloat16_rn(st[r * (Dh + 4) + d]);
    }
    __syncwarp();
#else
    (void)acc, (void)st, (void)g, (void)stride, (void)r0, (void)rmax, (void)lane;
#endif
}

/* sum_d g[d] o[d] over a lane's half row (NF * 8 values, d ascending), in 16-byte loads where the
 * pointers allow: a lane pair's row is 16 rows away from the next pair's, so scalar loads
 * would touch a sector per lane per value (ncu: dq's L1 was its busiest unit) */
template <int NF>
static __device__ __forceinline__ float half_row_dot(const __nv_bfloat16 *g, const __nv_bfloat16 *o) {
    float D = 0.0f;
    if (((uintptr_t)g | (uintptr_t)o) % 16 == 0) {
#pragma unroll
        for (int v = 0; v < NF; v++) {
            union {
                uint4 u;
                __nv_bfloat16 e[8];
            } gv, ov;
            gv.u = *(const uint4 *)(g + v * 8);
            ov.u = *(const uint4 *)(o + v * 8);
#pragma unroll
            for (int k = 0; k < 8; k++) D += ll_ld(&gv.e[k]) * ll_ld(&ov.e[k]);
        }
        return D;
    }
    for (int d = 0; d < NF * 8; d++) D += ll_ld(g + d) * ll_ld(o + d);
    return D;
}

/* dq: sK, sV [TC_KT][ld] for the block; per warp sQ, sG [16][ld] bf16, sS [16][TC_SLD] fp32,
 * sDS [2][16][TC_PLD] bf16 (the fp32 staging of dQ [16][Dh + 4] fits in them at the end) */
static inline __host__ __device__ size_t tc_dq_warp_bytes(int Dh) {
    return sizeof(__nv_bfloat16) * 2 * LL_WT * (size_t)(Dh + TC_PAD) + TC_WARP_BYTES;
}
static inline size_t tc_dq_smem(int Dh, int W) {
    return sizeof(__nv_bfloat16) * 2 * TC_KT * (size_t)(Dh + TC_PAD) + (size_t)W * tc_dq_warp_bytes(Dh);
}

/* A launch of one of these kernels: batches over 65,535 sentences in slices of gridDim.z (a.b0
 * the slice's first sentence), the kernel instantiated per Dh / 16 (1..8: accumulators in
 * registers); launch(grid, nf) with nf an std::integral_constant of that number */
template <typename L> static cudaError_t tc_launch(attn_args &a, unsigned gx, L &&launch) {
    for (a.b0 = 0; a.b0 < a.B; a.b0 += MAX_GRID_Z) {
        const dim3 grid(gx, a.H, (unsigned)(a.B - a.b0 < MAX_GRID_Z ? a.B - a.b0 : MAX_GRID_Z));
        switch (a.Dh / LL_WT) {
        case 1: launch(grid, std::integral_constant<int, 1>()); break;
        case 2: launch(grid, std::integral_constant<int, 2>()); break;
        case 3: launch(grid, std::integral_constant<int, 3>()); break;
        case 4: launch(grid, std::integral_constant<int, 4>()); break;
        case 5: launch(grid, std::integral_constant<int, 5>()); break;
        case 6: launch(grid, std::integral_constant<int, 6>()); break;
        case 7: launch(grid, std::integral_constant<int, 7>()); break;
        case 8: launch(grid, std::integral_constant<int, 8>()); break;
        default: return cudaErrorInvalidValue;
        }
        LL_CHECK_LAUNCH();
    }
    return cudaSuccess;
}

/* the one-kernel backward (attention_tc_bwd1.cu), which ll_attention_bwd_tc picks where
 * ll_cuda_attention_bwd_one_kernel says every query and key fit one tile */
cudaError_t ll_attention_bwd1_tc(cudaStream_t stream, attn_args a, __nv_bfloat16 *dq, __nv_bfloat16 *dk,
                                 __nv_bfloat16 *dv, const __nv_bfloat16 *dout, const __nv_bfloat16 *out,
                                 const float *lse);

#endif
