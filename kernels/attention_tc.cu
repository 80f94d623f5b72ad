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
 * Tq x Tk touches global memory. */
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
static int tc_warps(int Dh, int rows) {
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
static __host__ __device__ size_t tc_tile_bytes(int Dh, int W) {
    return sizeof(__nv_bfloat16) * (size_t)(2 * TC_KT + W * LL_WT) * (Dh + TC_PAD);
}
static __host__ __device__ bool tc_fwd_alias(int Dh, int Tk) { return Tk <= TC_KT && Dh >= 64; }
static __host__ __device__ size_t tc_smem(int Dh, int W, bool alias = false) {
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

/* The forward.  O lives in accumulator fragments (registers) across the key tiles, which
 * their opaque layout allows only without the online softmax's per-row rescale: so the rows'
 * maxima come first, from a pass of S = Q K^T over the key tiles, unless one tile holds
 * every key (NMT's usual case: then that tile gives them, and the arithmetic is the online
 * loop's, bit for bit). */
template <int NF>
static __global__ void __launch_bounds__(TC_THREADS, 4) /* <= 128 registers: 8 blocks of 2 warps per SM */
    attention_fwd_tc_kernel(attn_args a, __nv_bfloat16 *__restrict__ out, float *__restrict__ lse) {
    LL_PDL_ENTER();
#ifdef LL_WMMA_BF16
    using namespace nvcuda;
    LL_DYN_SHARED(float4, smem); /* float4: 16-byte aligned (a launch's dynamic block starts 128-aligned) */
    const int Dh = NF * LL_WT, ld = Dh + TC_PAD, C = a.H * Dh, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int W = blockDim.x / WARP, BQ = W * LL_WT;
    const int b = a.b0 + (int)blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ;
    __nv_bfloat16 *sK = (__nv_bfloat16 *)smem, *sV = sK + TC_KT * ld, *sQall = sV + TC_KT * ld;
    __nv_bfloat16 *sQ = sQall + (size_t)warp * LL_WT * ld;
    const bool alias = tc_fwd_alias(Dh, a.Tk); /* S and P in the warp's Q rows (tc_smem) */
    float *sS = alias ? (float *)sQ
                      : (float *)((char *)smem + tc_smem(Dh, W) - (size_t)(W - warp) * TC_WARP_BYTES);
    /* P hi [16][pld] and lo at +plo: over S's rows, or after S */
    __nv_bfloat16 *sP = alias ? (__nv_bfloat16 *)sS : (__nv_bfloat16 *)(sS + LL_WT * TC_SLD);
    const int pld = alias ? 2 * TC_SLD : TC_PLD, plo = alias ? TC_KT : LL_WT * TC_PLD;

    const int lim = key_limit(a, b);
    const int qn = min(BQ, a.Tq - q0);
    const int kmax = row_limit(a, lim, q0 + qn - 1); /* the block's widest row */
    const int wq = min(LL_WT, a.Tq - q0 - warp * LL_WT);     /* the warp's rows (<= 0: none) */
    const int wmax = wq > 0 ? row_limit(a, lim, q0 + warp * LL_WT + wq - 1) : 0;
    /* lane pair (2r, 2r+1): row r, keys half*16.. of each tile */
    const int r = lane >> 1, half = lane & 1, i = q0 + warp * LL_WT + r, c0 = half * LL_WT;
    const int n = i < a.Tq ? row_limit(a, lim, i) : 0;
    const bool one = kmax <= TC_KT; /* one key tile: its maxima are the rows' */
    float m = -INFINITY, l = 0.0f;
    attn_keep_cache kc;
    ll_wmma_acc o[NF];
#pragma unroll
    for (int e = 0; e < NF; e++) wmma::fill_fragment(o[e], 0.0f);

    stage_bf16(sQall, ld, BQ, (const __nv_bfloat16 *)a.q + (size_t)b * a.Tq * a.q_stride + h * Dh, a.q_stride, q0,
               qn, Dh);
    const __nv_bfloat16 *kb = (const __nv_bfloat16 *)a.k + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    const __nv_bfloat16 *vb = (const __nv_bfloat16 *)a.v + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    for (int pass = one ? 1 : 0; pass < 2; pass++) /* 0: the rows' maxima; 1: P and O */
        for (int kt = 0; kt < kmax; kt += TC_KT) {
            __syncthreads(); /* the previous tile consumed (and sQ staged) */
            stage_bf16(sK, ld, TC_KT, kb, a.kv_stride, kt, min(TC_KT, kmax - kt), Dh);
            if (pass) stage_bf16(sV, ld, TC_KT, vb, a.kv_stride, kt, min(TC_KT, kmax - kt), Dh);
            __syncthreads();
            if (kt >= wmax) continue;        /* warp-uniform: no row of the warp sees these keys */
            product_abt_both(sS, TC_SLD, sQ, sK, ld, Dh); /* S = Q K^T */
            __syncwarp(); /* the warp's stores of S before each lane reads its row */
            float s[LL_WT], tmax = -INFINITY;
#pragma unroll
            for (int c = 0; c < LL_WT; c++) {
                const int j = kt + c0 + c;
                s[c] = j < n ? sS[r * TC_SLD + c0 + c] * a.scale : -INFINITY;
                tmax = fmaxf(tmax, s[c]);
            }
            if (!pass || one) m = fmaxf(m, fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1)));
            if (!pass) {
                __syncwarp(); /* S read before the next tile's product overwrites it */
                continue;
            }
            /* a row with no visible key keeps m = -inf, O = 0 and l = 0 */
            if (alias) __syncwarp(); /* the lane pair's reads of its S row before P's stores over it */
            float psum = 0.0f;
#pragma unroll
            for (int c = 0; c < LL_WT; c++) {
                const int j = kt + c0 + c;
                float p = j < n ? __expf(s[c] - m) : 0.0f;
                psum += p;
                if (a.drop && j < n) p = kc.keep(a, b, h, i, j) ? p * a.keep_scale : 0.0f;
                const __nv_bfloat16 hi = __float2bfloat16_rn(p);
                sP[r * pld + c0 + c] = hi;
                sP[plo + r * pld + c0 + c] = __float2bfloat16_rn(p - __bfloat162float(hi));
            }
            l += psum + __shfl_xor_sync(0xffffffffu, psum, 1);
            __syncwarp();                                    /* P before the tensor cores read it */
            /* O += hi V + lo V */
            acc_split_product<NF, wmma::row_major>(o, sP, pld, plo, sV, ld);
            __syncwarp(); /* the tensor cores' loads of P and S before the next tile's stores */
        }
    /* out = O / l through an fp32 staging in the tiles' bytes (every warp is done with them);
     * 32 lanes per row segment, each row's 1 / l from its lane pair */
    __syncthreads();
    float *st = (float *)smem + (size_t)warp * LL_WT * (Dh + 4);
#pragma unroll
    for (int e = 0; e < NF; e++) wmma::store_matrix_sync(st + e * LL_WT, o[e], Dh + 4, wmma::mem_row_major);
    __syncwarp();
    const float inv = l > 0.0f ? 1.0f / l : 0.0f; /* no visible key: out 0 */
    store_rows<NF>(st, Dh + 4, out + (size_t)b * a.Tq * C + h * Dh, C, q0 + warp * LL_WT, a.Tq, lane, inv);
    if (i < a.Tq && lse && half == 0) lse[((size_t)b * a.H + h) * a.Tq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
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
static __host__ __device__ size_t tc_dq_warp_bytes(int Dh) {
    return sizeof(__nv_bfloat16) * 2 * LL_WT * (size_t)(Dh + TC_PAD) + TC_WARP_BYTES;
}
static size_t tc_dq_smem(int Dh, int W) {
    return sizeof(__nv_bfloat16) * 2 * TC_KT * (size_t)(Dh + TC_PAD) + (size_t)W * tc_dq_warp_bytes(Dh);
}

template <int NF>
static __global__ void __launch_bounds__(TC_THREADS)
    attention_dq_tc_kernel(attn_args a, __nv_bfloat16 *__restrict__ dq, const __nv_bfloat16 *__restrict__ out,
                           const __nv_bfloat16 *__restrict__ dout, const float *__restrict__ lse) {
    LL_PDL_ENTER();
#ifdef LL_WMMA_BF16
    LL_DYN_SHARED(float4, smem);
    const int Dh = NF * LL_WT, ld = Dh + TC_PAD, C = a.H * Dh, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int W = blockDim.x / WARP, BQ = W * LL_WT;
    const int b = a.b0 + (int)blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ, w0 = q0 + warp * LL_WT;
    __nv_bfloat16 *sK = (__nv_bfloat16 *)smem, *sV = sK + TC_KT * ld;
    char *wb = (char *)(sV + TC_KT * ld) + (size_t)warp * tc_dq_warp_bytes(Dh);
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)wb, *sG = sQ + LL_WT * ld;
    float *sS = (float *)(sG + LL_WT * ld);
    __nv_bfloat16 *sDS = (__nv_bfloat16 *)(sS + LL_WT * TC_SLD);

    const int lim = key_limit(a, b);
    const int qn = min(BQ, a.Tq - q0);
    const int kmax = row_limit(a, lim, q0 + qn - 1);
    const int wq = min(LL_WT, a.Tq - w0);
    const int wmax = wq > 0 ? row_limit(a, lim, w0 + wq - 1) : 0;
    const int r = lane >> 1, half = lane & 1, i = w0 + r;
    const int n = i < a.Tq ? row_limit(a, lim, i) : 0;
    stage_warp(sQ, ld, (const __nv_bfloat16 *)a.q + (size_t)b * a.Tq * a.q_stride + h * Dh, a.q_stride, w0,
               max(wq, 0), Dh, lane);
    stage_warp(sG, ld, dout + (size_t)b * a.Tq * C + h * Dh, C, w0, max(wq, 0), Dh, lane);
    float D = 0.0f, L = 0.0f;
    if (i < a.Tq) {
        const __nv_bfloat16 *orow = out + ((size_t)b * a.Tq + i) * C + h * Dh + half * (Dh / 2);
        const __nv_bfloat16 *grow = dout + ((size_t)b * a.Tq + i) * C + h * Dh + half * (Dh / 2);
        D = half_row_dot<NF>(grow, orow);
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
        stage_bf16(sK, ld, TC_KT, kb, a.kv_stride, kt, min(TC_KT, kmax - kt), Dh);
        stage_bf16(sV, ld, TC_KT, vb, a.kv_stride, kt, min(TC_KT, kmax - kt), Dh);
        __syncthreads();
        if (kt >= wmax) continue;                 /* warp-uniform */
        product_abt(sS, TC_SLD, sQ, sK, ld, Dh); /* S = Q K^T */
        __syncwarp();
        const int c0 = half * LL_WT;
        float p[LL_WT];
        unsigned keep = 0xffffu;
#pragma unroll
        for (int c = 0; c < LL_WT; c++) {
            const int j = kt + c0 + c;
            p[c] = j < n ? __expf(sS[r * TC_SLD + c0 + c] * a.scale - L) : 0.0f;
            if (a.drop && j < n && !kc.keep(a, b, h, i, j)) keep &= ~(1u << c);
        }
        __syncwarp();                            /* S read before dP overwrites it */
        product_abt(sS, TC_SLD, sG, sV, ld, Dh); /* dP = dO V^T */
        __syncwarp();
#pragma unroll
        for (int c = 0; c < LL_WT; c++) {
            float dp = sS[r * TC_SLD + c0 + c];
            if (a.drop) dp = (keep >> c) & 1u ? dp * a.keep_scale : 0.0f;
            split_store(sDS, r * TC_PLD + c0 + c, LL_WT * TC_PLD, p[c] * (dp - D) * a.scale);
        }
        __syncwarp();
        acc_split_product<NF, nvcuda::wmma::row_major>(acc, sDS, TC_PLD, LL_WT * TC_PLD, sK, ld); /* dQ += dS K */
    }
    write_acc<NF>(acc, (float *)wb, dq + (size_t)b * a.Tq * a.q_stride + h * Dh, a.q_stride, w0, a.Tq, lane);
#else
    (void)a, (void)dq, (void)out, (void)dout, (void)lse;
#endif
}

/* dkv: sK, sV [W*16][ld] and sQ, sG [TC_QT][ld] bf16; per warp sS [16][TC_SLD] fp32 and sPD
 * [2][16][TC_PLD] bf16; sL, sD, sN [TC_QT] (sK and sV become the fp32 staging at the end) */
static size_t tc_dkv_smem(int Dh, int W) {
    return sizeof(__nv_bfloat16) * ((size_t)2 * W * LL_WT + (size_t)2 * TC_QT) * (Dh + TC_PAD) +
           (size_t)W * TC_WARP_BYTES + 3 * TC_QT * sizeof(float);
}

template <int NF>
static __global__ void __launch_bounds__(TC_THREADS)
    attention_dkv_tc_kernel(attn_args a, __nv_bfloat16 *__restrict__ dk, __nv_bfloat16 *__restrict__ dv,
                            const __nv_bfloat16 *__restrict__ out, const __nv_bfloat16 *__restrict__ dout,
                            const float *__restrict__ lse) {
    LL_PDL_ENTER();
#ifdef LL_WMMA_BF16
    LL_DYN_SHARED(float4, smem);
    const int Dh = NF * LL_WT, ld = Dh + TC_PAD, C = a.H * Dh, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int W = blockDim.x / WARP, BK = W * LL_WT;
    const int b = a.b0 + (int)blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * BK, wk0 = j0 + warp * LL_WT;
    __nv_bfloat16 *sK = (__nv_bfloat16 *)smem, *sV = sK + BK * ld, *sQ = sV + BK * ld, *sG = sQ + TC_QT * ld;
    char *wall = (char *)(sG + TC_QT * ld);
    float *sS = (float *)(wall + (size_t)warp * TC_WARP_BYTES);
    __nv_bfloat16 *sPD = (__nv_bfloat16 *)(sS + LL_WT * TC_SLD);
    float *sL = (float *)(wall + (size_t)W * TC_WARP_BYTES), *sD = sL + TC_QT;
    int *sN = (int *)(sD + TC_QT);

    const int lim = key_limit(a, b);
    const __nv_bfloat16 *kb = (const __nv_bfloat16 *)a.k + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    const __nv_bfloat16 *vb = (const __nv_bfloat16 *)a.v + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    stage_bf16(sK, ld, BK, kb, a.kv_stride, j0, min(BK, a.Tk - j0), Dh);
    stage_bf16(sV, ld, BK, vb, a.kv_stride, j0, min(BK, a.Tk - j0), Dh);
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
        stage_bf16(sQ, ld, TC_QT, qb, a.q_stride, it, qn, Dh);
        stage_bf16(sG, ld, TC_QT, gb, C, it, qn, Dh);
        query_tile_stats(a, b, h, lim, it, TC_QT, gb, out, lse, sD, sL, sN, warp, W, lane);
        __syncthreads();
        if (wk0 >= sN[qn - 1]) continue; /* warp-uniform: no query of the tile sees the warp's keys */
        product_abt(sS, TC_SLD, sK + (size_t)warp * LL_WT * ld, sQ, ld, Dh); /* S^T = K Q^T */
        __syncwarp();
        const int i = it + lane, N = sN[lane];
        const float Li = sL[lane], Di = sD[lane];
        float p[LL_WT];
        unsigned keep = 0xffffu;
#pragma unroll
        for (int rr = 0; rr < LL_WT; rr++) {
            const int j = wk0 + rr;
            p[rr] = j < N ? __expf(sS[rr * TC_SLD + lane] * a.scale - Li) : 0.0f;
            if (a.drop && j < N && !kc.keep(a, b, h, i, j)) keep &= ~(1u << rr);
            split_store(sPD, rr * TC_PLD + lane, LL_WT * TC_PLD, (keep >> rr) & 1u ? p[rr] * a.keep_scale : 0.0f);
        }
        __syncwarp();
        /* dV += P^T dO (P dropped) */
        acc_split_product<NF, nvcuda::wmma::row_major>(gv, sPD, TC_PLD, LL_WT * TC_PLD, sG, ld);
        product_abt(sS, TC_SLD, sV + (size_t)warp * LL_WT * ld, sG, ld, Dh); /* dP^T = V dO^T */
        __syncwarp(); /* also: the dV product's loads of P before dS overwrites it */
#pragma unroll
        for (int rr = 0; rr < LL_WT; rr++) {
            float dp = sS[rr * TC_SLD + lane];
            if (a.drop) dp = (keep >> rr) & 1u ? dp * a.keep_scale : 0.0f;
            split_store(sPD, rr * TC_PLD + lane, LL_WT * TC_PLD, p[rr] * (dp - Di) * a.scale);
        }
        __syncwarp();
        acc_split_product<NF, nvcuda::wmma::row_major>(gk, sPD, TC_PLD, LL_WT * TC_PLD, sQ, ld); /* dK += dS^T Q */
    }
    __syncthreads(); /* every warp is done with sK and sV: they become the staging */
    float *st = (float *)sK + (size_t)warp * LL_WT * (Dh + 4);
    write_acc<NF>(gk, st, dk + (size_t)b * a.Tk * a.kv_stride + h * Dh, a.kv_stride, wk0, a.Tk, lane);
    write_acc<NF>(gv, st, dv + (size_t)b * a.Tk * a.kv_stride + h * Dh, a.kv_stride, wk0, a.Tk, lane);
#else
    (void)a, (void)dk, (void)dv, (void)out, (void)dout, (void)lse;
#endif
}

/* The backward when every query and every key fit one tile of 32 (NMT's short sentences): one
 * block per (sentence, head) computes S, P and dS once for dQ, dK and dV, where the two kernels
 * above recompute them and stage Q, K, V and dO twice (ncu, ll64 on an H100: dq 70 us, dk/dv
 * 74 us per call).  The block's 32 x 32 S, P, dP, dS and its three 32 x Dh outputs are cut in
 * two row tiles, warp w taking row tile w % 2 (query rows of S, P, dS, dQ; keys of dV, dK, P^T
 * and dS^T read as column-major views of the block's P and dS) and, with 4 warps (W, the
 * default), half of it: key tile w / 2 of S and dP, and of the outputs the column tiles
 * w / 2 * ceil(NF / 2)...  Every element is summed in the order of the dq kernel (dQ) and of
 * 2 warps (W = 2: LL_CUDA_ATTN_BWD1_WARPS=2), bit for bit; D_i as the dq kernel's, by each warp
 * of the row tile.  Shared memory: Q, K, V, dO [32][ld] bf16, S then dP [32][TC_SLD] fp32 (each
 * warp's window of it also stages its output tiles), P then dS [2][32][TC_PLD] bf16 (hi, lo):
 * 43.5 KiB at Dh 128, so 5 blocks per multiprocessor: 4 warps give 20 warps there, where 2
 * gave 10 (ncu, ll64 on an H100: 2.5 warps per scheduler, 48% of the stalls waiting for an
 * instruction, 102 us per call). */
#define TC_B1_MAX_WARPS 4
static size_t tc_bwd1_smem(int Dh) {
    return sizeof(__nv_bfloat16) * 4 * TC_KT * (size_t)(Dh + TC_PAD) + TC_KT * TC_SLD * sizeof(float) +
           sizeof(__nv_bfloat16) * 2 * TC_KT * TC_PLD;
}

/* tiles e < ne of the warp's accumulators into rows r0.. (< rmax), columns 16e.. of a bf16
 * [*, stride] matrix, each through st [16][lds] fp32 (the warp's own): a lane converts 8
 * consecutive values of a row, one 16-byte store where g and stride allow */
template <int NA>
static __device__ __forceinline__ void write_acc_tiles(const ll_wmma_acc *acc, int ne, float *st, int lds,
                                                       __nv_bfloat16 *g, int stride, int r0, int rmax, int lane) {
#ifdef LL_WMMA_BF16
    const int r = lane >> 1, c0 = (lane & 1) * 8;
    const bool vec = (uintptr_t)g % 16 == 0 && stride % 8 == 0;
#pragma unroll
    for (int e = 0; e < NA; e++) {
        if (e >= ne) break;
        __syncwarp(); /* the staging's earlier readers are done */
        nvcuda::wmma::store_matrix_sync(st, acc[e], lds, nvcuda::wmma::mem_row_major);
        __syncwarp();
        if (r0 + r < rmax) {
            const float4 x = *(const float4 *)(st + r * lds + c0), y = *(const float4 *)(st + r * lds + c0 + 4);
            union {
                uint4 u;
                __nv_bfloat16 h[8];
            } v;
            v.h[0] = __float2bfloat16_rn(x.x), v.h[1] = __float2bfloat16_rn(x.y);
            v.h[2] = __float2bfloat16_rn(x.z), v.h[3] = __float2bfloat16_rn(x.w);
            v.h[4] = __float2bfloat16_rn(y.x), v.h[5] = __float2bfloat16_rn(y.y);
            v.h[6] = __float2bfloat16_rn(y.z), v.h[7] = __float2bfloat16_rn(y.w);
            __nv_bfloat16 *d = g + (size_t)(r0 + r) * stride + e * LL_WT + c0;
            if (vec)
                *(uint4 *)d = v.u;
            else
                for (int k = 0; k < 8; k++) d[k] = v.h[k];
        }
    }
    __syncwarp();
#else
    (void)acc, (void)ne, (void)st, (void)lds, (void)g, (void)stride, (void)r0, (void)rmax, (void)lane;
#endif
}

template <int NF, int W>
static __global__ void __launch_bounds__(W * WARP, W == 4 ? 5 : 1) /* 4 warps: <= 96 registers, 5 blocks per SM */
    attention_bwd1_tc_kernel(attn_args a, __nv_bfloat16 *__restrict__ dq, __nv_bfloat16 *__restrict__ dk,
                             __nv_bfloat16 *__restrict__ dv, const __nv_bfloat16 *__restrict__ out,
                             const __nv_bfloat16 *__restrict__ dout, const float *__restrict__ lse) {
    LL_PDL_ENTER();
#ifdef LL_WMMA_BF16
    using namespace nvcuda;
    static_assert(W == 2 || W == 4, "2 or 4 warps");
    constexpr int KTW = 4 / W;                      /* 16-key tiles of S and dP per warp */
    constexpr int CPT = KTW * 8;                    /* a lane's keys of its row */
    constexpr int NA = W == 4 ? (NF + 1) / 2 : NF; /* output tiles per warp (at most) */
    LL_DYN_SHARED(float4, smem);
    const int Dh = NF * LL_WT, ld = Dh + TC_PAD, C = a.H * Dh, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int b = a.b0 + (int)blockIdx.z, h = blockIdx.y;
    const int w0 = warp % 2 * LL_WT, part = warp / 2; /* the warp's row tile; its half (4 warps) */
    const int e0 = part * NA, ne = min(NA, NF - e0);   /* its output tiles e0.. (ne may be 0: NF 1) */
    __nv_bfloat16 *sQ = (__nv_bfloat16 *)smem, *sK = sQ + TC_KT * ld, *sV = sK + TC_KT * ld, *sG = sV + TC_KT * ld;
    float *sS = (float *)(sG + TC_KT * ld);
    float *sW = sS + (size_t)w0 * TC_SLD + part * LL_WT; /* the warp's window of S and dP */
    __nv_bfloat16 *sPD = (__nv_bfloat16 *)(sS + TC_KT * TC_SLD);
    const int lo = TC_KT * TC_PLD; /* the lo halves after the 32 hi rows */

    const int lim = key_limit(a, b);
    const int kmax = row_limit(a, lim, a.Tq - 1); /* the widest row */
    const int wq = min(LL_WT, a.Tq - w0);       /* the warp's query rows (<= 0: none) */
    /* lane pair (2r, 2r+1): row i, keys j0.. (CPT of them) of the warp's key tiles */
    const int r = lane >> 1, i = w0 + r, c0 = (lane & 1) * CPT, j0 = part * LL_WT + c0;
    const int n = i < a.Tq ? row_limit(a, lim, i) : 0;
    const __nv_bfloat16 *kb = (const __nv_bfloat16 *)a.k + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    const __nv_bfloat16 *vb = (const __nv_bfloat16 *)a.v + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    stage_bf16(sQ, ld, TC_KT, (const __nv_bfloat16 *)a.q + (size_t)b * a.Tq * a.q_stride + h * Dh, a.q_stride, 0,
               a.Tq, Dh);
    stage_bf16(sK, ld, TC_KT, kb, a.kv_stride, 0, kmax, Dh);
    stage_bf16(sV, ld, TC_KT, vb, a.kv_stride, 0, kmax, Dh);
    stage_bf16(sG, ld, TC_KT, dout + (size_t)b * a.Tq * C + h * Dh, C, 0, a.Tq, Dh);
    float D = 0.0f, L = 0.0f;
    if (i < a.Tq) {
        const size_t row = ((size_t)b * a.Tq + i) * C + h * Dh + (lane & 1) * (Dh / 2);
        D = half_row_dot<NF>(dout + row, out + row);
        L = lse[((size_t)b * a.H + h) * a.Tq + i];
    }
    D += __shfl_xor_sync(0xffffffffu, D, 1);
    __syncthreads();
    /* P (dropped) of the warp's rows and keys, as the dq kernel computes it */
    float p[CPT];
    unsigned keep = 0xffffu;
    attn_keep_cache kc;
    if (wq > 0) {
        product_abt(sW, TC_SLD, sQ + (size_t)w0 * ld, sK + (size_t)part * LL_WT * ld, ld, Dh, KTW); /* S = Q K^T */
        __syncwarp();
    }
#pragma unroll
    for (int c = 0; c < CPT; c++) {
        const int j = j0 + c;
        p[c] = j < n ? __expf(sW[r * TC_SLD + c0 + c] * a.scale - L) : 0.0f;
        if (a.drop && j < n && !kc.keep(a, b, h, i, j)) keep &= ~(1u << c);
        split_store(sPD, i * TC_PLD + j, lo, (keep >> c) & 1u ? p[c] * a.keep_scale : 0.0f);
    }
    __syncthreads(); /* every row's P */
    ll_wmma_acc acc[NA];
#pragma unroll
    for (int e = 0; e < NA; e++) wmma::fill_fragment(acc[e], 0.0f);
    acc_split_product<NA, wmma::col_major>(acc, sPD + w0, TC_PLD, lo, sG + e0 * LL_WT, ld, ne); /* dV = P^T dO */
    write_acc_tiles<NA>(acc, ne, sW, TC_SLD, dv + (size_t)b * a.Tk * a.kv_stride + h * Dh + e0 * LL_WT, a.kv_stride,
                        w0, a.Tk, lane);
    __syncthreads(); /* every warp's reads of P before dS overwrites it */
    if (wq > 0) {
        product_abt(sW, TC_SLD, sG + (size_t)w0 * ld, sV + (size_t)part * LL_WT * ld, ld, Dh, KTW); /* dP = dO V^T */
        __syncwarp();
    }
#pragma unroll
    for (int c = 0; c < CPT; c++) {
        float dp = n > 0 ? sW[r * TC_SLD + c0 + c] : 0.0f;
        if (a.drop) dp = (keep >> c) & 1u ? dp * a.keep_scale : 0.0f;
        split_store(sPD, i * TC_PLD + j0 + c, lo, p[c] * (dp - D) * a.scale);
    }
    __syncthreads(); /* every row's dS */
#pragma unroll
    for (int e = 0; e < NA; e++) wmma::fill_fragment(acc[e], 0.0f);
    acc_split_product<NA, wmma::col_major>(acc, sPD + w0, TC_PLD, lo, sQ + e0 * LL_WT, ld, ne); /* dK = dS^T Q */
    write_acc_tiles<NA>(acc, ne, sW, TC_SLD, dk + (size_t)b * a.Tk * a.kv_stride + h * Dh + e0 * LL_WT, a.kv_stride,
                        w0, a.Tk, lane);
#pragma unroll
    for (int e = 0; e < NA; e++) wmma::fill_fragment(acc[e], 0.0f);
    acc_split_product<NA, wmma::row_major>(acc, sPD + (size_t)w0 * TC_PLD, TC_PLD, lo, sK + e0 * LL_WT, ld,
                                           ne); /* dQ = dS K */
    write_acc_tiles<NA>(acc, ne, sW, TC_SLD, dq + (size_t)b * a.Tq * a.q_stride + h * Dh + e0 * LL_WT, a.q_stride, w0,
                        a.Tq, lane);
#else
    (void)a, (void)dq, (void)dk, (void)dv, (void)out, (void)dout, (void)lse;
#endif
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
    return ll_env_switch_once(&tc_mode, "LL_CUDA_ATTENTION", "simt") && Dh % LL_WT == 0 && Dh <= WARP * MAX_SLOTS && ll_wmma_bf16_device();
}

cudaError_t ll_attention_fwd_tc(cudaStream_t stream, attn_args a, __nv_bfloat16 *out, float *lse) {
    const int W = tc_warps(a.Dh, a.Tq), BQ = W * LL_WT;
    const size_t smem = tc_smem(a.Dh, W, tc_fwd_alias(a.Dh, a.Tk));
    return tc_launch(a, (unsigned)((a.Tq + BQ - 1) / BQ), [&](dim3 grid, auto nf) {
        LL_LAUNCH(grid, W * WARP, smem, stream, attention_fwd_tc_kernel<decltype(nf)::value>)(a, out, lse);
    });
}

/* LL_CUDA_ATTN_BWD1_WARPS=2 (or ll_cuda_attention_bwd1_warps(2)): the one-kernel backward in
 * blocks of 2 warps (the layout before 2026-11-28, same bits), for A/B timing on a GPU and for
 * the test that holds the two to each other; 4 by default */
static int b1_warps; /* 0: not read yet (atomics: any host thread may launch) */
static int bwd1_warps(void) {
    int v = __atomic_load_n(&b1_warps, __ATOMIC_RELAXED);
    if (!v) {
        const char *e = getenv("LL_CUDA_ATTN_BWD1_WARPS");
        int fresh = e && *e ? atoi(e) : 4;
        if (fresh != 2 && fresh != 4) ll_die("LL_CUDA_ATTN_BWD1_WARPS=%s: want 2 or 4", e);
        v = __atomic_compare_exchange_n(&b1_warps, &v, fresh, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED) ? fresh : v;
    }
    return v;
}

extern "C" int ll_cuda_attention_bwd1_warps(int warps) {
    if (warps != 2 && warps != 4) ll_die("ll_cuda_attention_bwd1_warps(%d): want 2 or 4", warps);
    const int was = bwd1_warps();
    __atomic_store_n(&b1_warps, warps, __ATOMIC_RELAXED);
    return was;
}

cudaError_t ll_attention_bwd_tc(cudaStream_t stream, attn_args a, __nv_bfloat16 *dq, __nv_bfloat16 *dk,
                                __nv_bfloat16 *dv, const __nv_bfloat16 *dout, const __nv_bfloat16 *out,
                                const float *lse) {
    if (ll_cuda_attention_bwd_one_kernel(LL_BF16, a.Tq, a.Tk, a.Dh)) { /* one tile each way (backend.h's rule) */
        const size_t smem = tc_bwd1_smem(a.Dh);
        const bool four = bwd1_warps() == 4;
        return tc_launch(a, 1, [&](dim3 grid, auto nf) {
            if (four)
                LL_LAUNCH(grid, 4 * WARP, smem, stream, attention_bwd1_tc_kernel<decltype(nf)::value, 4>)(
                    a, dq, dk, dv, out, dout, lse);
            else
                LL_LAUNCH(grid, 2 * WARP, smem, stream, attention_bwd1_tc_kernel<decltype(nf)::value, 2>)(
                    a, dq, dk, dv, out, dout, lse);
        });
    }
    for (int pass = 0; pass < 2; pass++) {
        const int rows = pass ? a.Tk : a.Tq;
        if (rows <= 0) continue;
        const int W = tc_warps(a.Dh, rows), R = W * LL_WT;
        const size_t smem = pass ? tc_dkv_smem(a.Dh, W) : tc_dq_smem(a.Dh, W);
        const cudaError_t e = tc_launch(a, (unsigned)((rows + R - 1) / R), [&](dim3 grid, auto nf) {
            if (pass)
                LL_LAUNCH(grid, W * WARP, smem, stream, attention_dkv_tc_kernel<decltype(nf)::value>)(a, dk, dv, out,
                                                                                                      dout, lse);
            else
                LL_LAUNCH(grid, W * WARP, smem, stream, attention_dq_tc_kernel<decltype(nf)::value>)(a, dq, out, dout,
                                                                                                     lse);
        });
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
