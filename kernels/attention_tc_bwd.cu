/* Attention on tensor cores, the backward in two kernels (dq; dk and dv) and the choice of it
 * or the one-kernel backward (attention_tc_bwd1.cu); kernels/attention_tc.cuh says how. */
#include "attention_tc.cuh"

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

cudaError_t ll_attention_bwd_tc(cudaStream_t stream, attn_args a, __nv_bfloat16 *dq, __nv_bfloat16 *dk,
                                __nv_bfloat16 *dv, const __nv_bfloat16 *dout, const __nv_bfloat16 *out,
                                const float *lse) {
    if (ll_cuda_attention_bwd_one_kernel(LL_BF16, a.Tq, a.Tk, a.Dh)) /* one tile each way (backend.h's rule) */
        return ll_attention_bwd1_tc(stream, a, dq, dk, dv, dout, out, lse);
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
