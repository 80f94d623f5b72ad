/* Attention on tensor cores, the one-kernel backward (kernels/attention_tc.cuh says how; the
 * two-kernel one and the choice between them: attention_tc_bwd.cu). */
#include "attention_tc.cuh"

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

cudaError_t ll_attention_bwd1_tc(cudaStream_t stream, attn_args a, __nv_bfloat16 *dq, __nv_bfloat16 *dk,
                                 __nv_bfloat16 *dv, const __nv_bfloat16 *dout, const __nv_bfloat16 *out,
                                 const float *lse) {
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
