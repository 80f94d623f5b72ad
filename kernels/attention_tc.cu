/* Attention on tensor cores, the forward (kernels/attention_tc.cuh says how; the backward:
 * attention_tc_bwd.cu, attention_tc_bwd1.cu), and the switch between tensor cores and the SIMT
 * kernels. */
#include "attention_tc.cuh"

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
