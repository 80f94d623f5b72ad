/* Flash-style multi-head attention, forward and backward (fp32 math; fp32 or
 * bf16 inputs and outputs through the _dt launchers).
 *
 * Same contract as ll_backend.attention_fwd/bwd (include/ll/backend.h): masks
 * by key_len and causal position, lse [B, H, Tq] saved instead of the
 * probabilities, dropout on the probabilities drawn per element (b, h, i, j)
 * from Philox half-word rng_offset + ((b*H + h)*Tq + i)*Tk + j, so the mask is
 * the CPU backend's bit for bit.  Nothing of size Tq x Tk touches global
 * memory.
 *
 * Layout of the work (fp32 math on SIMT cores; the bf16 forward runs on tensor
 * cores where it can: kernels/attention_tc.cu):
 *  - forward: a block of 4 warps owns FWD_ROWS query rows of one (b, h); key/
 *    value tiles of 32 rows are staged in shared memory; a warp runs the
 *    online softmax of its rows with one key per lane for the scores and one
 *    head dimension per lane (Dh <= 128: 4 per lane) for the output.
 *  - backward, two kernels and no atomics, so gradients are bit-reproducible:
 *    dq (blocks over query rows, loop over key tiles) and dk/dv (blocks over
 *    keys, loop over query tiles of 32, one query per lane).  Both recompute
 *    P = exp(s - lse) and the dropout bit; D_i = rowsum(dO_i o O_i).
 * Row strides: q rows q_stride, k/v rows kv_stride, out/dout rows H*Dh. */
#include <math.h>

#include "attention_common.cuh"

/* Stage rows r0..r0+n-1 (n <= rows) of a [*, stride] matrix, columns col..col+Dh,
 * into s[rows][ld]; rows past n are zero. */
template <typename T>
static __device__ __forceinline__ void stage(float *s, int ld, int rows, const T *g, int stride, int r0, int n,
                                             int Dh) {
    for (int e = threadIdx.x; e < rows * Dh; e += blockDim.x) {
        const int r = e / Dh, d = e % Dh;
        s[r * ld + d] = r < n ? ll_ld(g + (size_t)(r0 + r) * stride + d) : 0.0f;
    }
}

/* ---- forward ------------------------------------------------------------------ */

template <typename T>
static __global__ void attention_fwd_kernel(attn_args a, T *__restrict__ out, float *__restrict__ lse) {
    LL_PDL_ENTER();
    LL_DYN_SHARED(float, sm);
    const int Dh = a.Dh, C = a.H * Dh, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int BQ = WARPS * FWD_ROWS_PER_WARP;
    const int b = a.b0 + (int)blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ;
    float *sQ = sm, *sK = sQ + BQ * Dh, *sV = sK + WARP * (Dh + 1); /* sK padded: lane j reads row j */
    const int lim = key_limit(a, b);
    const int qn = min(BQ, a.Tq - q0);
    const int kmax = row_limit(a, lim, q0 + qn - 1); /* the block's widest row */
    stage(sQ, Dh, BQ, (const T *)a.q + (size_t)b * a.Tq * a.q_stride + h * Dh, a.q_stride, q0, qn, Dh);

    float m[FWD_ROWS_PER_WARP], l[FWD_ROWS_PER_WARP], o[FWD_ROWS_PER_WARP][MAX_SLOTS];
#pragma unroll
    for (int r = 0; r < FWD_ROWS_PER_WARP; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < MAX_SLOTS; c++) o[r][c] = 0.0f;
    }
    const T *kb = (const T *)a.k + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    const T *vb = (const T *)a.v + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    for (int kt = 0; kt < kmax; kt += WARP) {
        __syncthreads(); /* previous tile consumed (and sQ staged) */
        stage(sK, Dh + 1, WARP, kb, a.kv_stride, kt, min(WARP, kmax - kt), Dh);
        stage(sV, Dh, WARP, vb, a.kv_stride, kt, min(WARP, kmax - kt), Dh);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < FWD_ROWS_PER_WARP; r++) {
            const int ri = warp * FWD_ROWS_PER_WARP + r, i = q0 + ri;
            if (i >= a.Tq) break; /* warp-uniform */
            const int n = row_limit(a, lim, i);
            if (kt >= n) continue;
            const int j = kt + lane;
            float s = -INFINITY;
            if (j < n) {
                float d = 0.0f;
                for (int e = 0; e < Dh; e++) d += sQ[ri * Dh + e] * sK[lane * (Dh + 1) + e];
                s = d * a.scale;
            }
            const float mn = fmaxf(m[r], warp_max(s));
            const float p = j < n ? __expf(s - mn) : 0.0f;
            const float alpha = __expf(m[r] - mn); /* 0 on the first tile (m = -inf) */
            l[r] = l[r] * alpha + warp_sum(p);
            m[r] = mn;
            float pd = p;
            if (a.drop && j < n) pd = keep_bit(a, b, h, i, j) ? p * a.keep_scale : 0.0f;
#pragma unroll
            for (int c = 0; c < MAX_SLOTS; c++) o[r][c] *= alpha;
            const int jn = min(WARP, n - kt);
            for (int jj = 0; jj < jn; jj++) {
                const float pj = __shfl_sync(0xffffffffu, pd, jj);
#pragma unroll
                for (int c = 0; c < MAX_SLOTS; c++) {
                    const int d = lane + WARP * c;
                    if (d < Dh) o[r][c] += pj * sV[jj * Dh + d];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < FWD_ROWS_PER_WARP; r++) {
        const int i = q0 + warp * FWD_ROWS_PER_WARP + r;
        if (i >= a.Tq) break;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f; /* no visible key: out 0 */
        T *orow = out + ((size_t)b * a.Tq + i) * C + h * Dh;
#pragma unroll
        for (int c = 0; c < MAX_SLOTS; c++) {
            const int d = lane + WARP * c;
            if (d < Dh) ll_st(orow + d, o[r][c] * inv);
        }
        if (lse && lane == 0) lse[((size_t)b * a.H + h) * a.Tq + i] = l[r] > 0.0f ? m[r] + logf(l[r]) : -INFINITY;
    }
}

/* ---- backward: dq ------------------------------------------------------------- */

template <typename T>
static __global__ void attention_dq_kernel(attn_args a, T *__restrict__ dq, const T *__restrict__ out,
                                           const T *__restrict__ dout, const float *__restrict__ lse) {
    LL_PDL_ENTER();
    LL_DYN_SHARED(float, sm);
    const int Dh = a.Dh, C = a.H * Dh, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int BQ = WARPS * DQ_ROWS_PER_WARP;
    const int b = a.b0 + (int)blockIdx.z, h = blockIdx.y, q0 = blockIdx.x * BQ;
    float *sQ = sm, *sG = sQ + BQ * Dh, *sK = sG + BQ * Dh, *sV = sK + WARP * (Dh + 1);
    const int lim = key_limit(a, b);
    const int qn = min(BQ, a.Tq - q0);
    const int kmax = row_limit(a, lim, q0 + qn - 1);
    stage(sQ, Dh, BQ, (const T *)a.q + (size_t)b * a.Tq * a.q_stride + h * Dh, a.q_stride, q0, qn, Dh);
    stage(sG, Dh, BQ, dout + (size_t)b * a.Tq * C + h * Dh, C, q0, qn, Dh);

    float D[DQ_ROWS_PER_WARP], L[DQ_ROWS_PER_WARP], acc[DQ_ROWS_PER_WARP][MAX_SLOTS];
#pragma unroll
    for (int r = 0; r < DQ_ROWS_PER_WARP; r++) {
        const int i = q0 + warp * DQ_ROWS_PER_WARP + r;
        float t = 0.0f;
        L[r] = 0.0f;
        if (i < a.Tq) {
            const T *orow = out + ((size_t)b * a.Tq + i) * C + h * Dh;
            const T *grow = dout + ((size_t)b * a.Tq + i) * C + h * Dh;
            for (int d = lane; d < Dh; d += WARP) t += ll_ld(grow + d) * ll_ld(orow + d);
            L[r] = lse[((size_t)b * a.H + h) * a.Tq + i];
        }
        D[r] = warp_sum(t); /* rowsum(dO o O): O already holds the dropped probabilities */
#pragma unroll
        for (int c = 0; c < MAX_SLOTS; c++) acc[r][c] = 0.0f;
    }
    const T *kb = (const T *)a.k + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    const T *vb = (const T *)a.v + (size_t)b * a.Tk * a.kv_stride + h * Dh;
    for (int kt = 0; kt < kmax; kt += WARP) {
        __syncthreads();
        stage(sK, Dh + 1, WARP, kb, a.kv_stride, kt, min(WARP, kmax - kt), Dh);
        stage(sV, Dh + 1, WARP, vb, a.kv_stride, kt, min(WARP, kmax - kt), Dh);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < DQ_ROWS_PER_WARP; r++) {
            const int ri = warp * DQ_ROWS_PER_WARP + r, i = q0 + ri;
            if (i >= a.Tq) break;
            const int n = row_limit(a, lim, i);
            if (kt >= n) continue;
            const int j = kt + lane;
            float ds = 0.0f;
            if (j < n) {
                float s = 0.0f, dp = 0.0f;
                for (int e = 0; e < Dh; e++) {
                    s += sQ[ri * Dh + e] * sK[lane * (Dh + 1) + e];
                    dp += sG[ri * Dh + e] * sV[lane * (Dh + 1) + e];
                }
                const float p = __expf(s * a.scale - L[r]);
                if (a.drop) dp = keep_bit(a, b, h, i, j) ? dp * a.keep_scale : 0.0f;
                ds = p * (dp - D[r]) * a.scale;
            }
            const int jn = min(WARP, n - kt);
            for (int jj = 0; jj < jn; jj++) {
                const float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
                for (int c = 0; c < MAX_SLOTS; c++) {
                    const int d = lane + WARP * c;
                    if (d < Dh) acc[r][c] += dsj * sK[jj * (Dh + 1) + d];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < DQ_ROWS_PER_WARP; r++) {
        const int i = q0 + warp * DQ_ROWS_PER_WARP + r;
        if (i >= a.Tq) break;
        T *row = dq + ((size_t)b * a.Tq + i) * a.q_stride + h * Dh; /* overwrite; 0 without keys */
#pragma unroll
        for (int c = 0; c < MAX_SLOTS; c++) {
            const int d = lane + WARP * c;
            if (d < Dh) ll_st(row + d, acc[r][c]);
        }
    }
}

/* ---- backward: dk, dv --------------------------------------------------------- */

template <typename T>
static __global__ void attention_dkv_kernel(attn_args a, T *__restrict__ dk, T *__restrict__ dv,
                                            const T *__restrict__ out, const T *__restrict__ dout,
                                            const float *__restrict__ lse) {
    LL_PDL_ENTER();
    LL_DYN_SHARED(float, sm);
    const int Dh = a.Dh, C = a.H * Dh, lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    const int BK = WARPS * DKV_KEYS_PER_WARP;
    const int b = a.b0 + (int)blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * BK;
    float *sK = sm, *sV = sK + BK * Dh, *sQ = sV + BK * Dh, *sG = sQ + WARP * (Dh + 1);
    float *sL = sG + WARP * (Dh + 1), *sD = sL + WARP;
    int *sN = (int *)(sD + WARP);
    const int lim = key_limit(a, b);
    const int kn = min(BK, a.Tk - j0);
    stage(sK, Dh, BK, (const T *)a.k + (size_t)b * a.Tk * a.kv_stride + h * Dh, a.kv_stride, j0, kn, Dh);
    stage(sV, Dh, BK, (const T *)a.v + (size_t)b * a.Tk * a.kv_stride + h * Dh, a.kv_stride, j0, kn, Dh);

    float gk[DKV_KEYS_PER_WARP][MAX_SLOTS], gv[DKV_KEYS_PER_WARP][MAX_SLOTS];
#pragma unroll
    for (int r = 0; r < DKV_KEYS_PER_WARP; r++)
#pragma unroll
        for (int c = 0; c < MAX_SLOTS; c++) gk[r][c] = gv[r][c] = 0.0f;
    /* causal: query i sees key j0 only from i = j0 - (Tk - Tq) on */
    const int qs = a.causal ? max(0, j0 - (a.Tk - a.Tq)) : 0;
    const int qend = j0 < lim ? a.Tq : 0; /* keys past the padding get no gradient */
    const T *qb = (const T *)a.q + (size_t)b * a.Tq * a.q_stride + h * Dh;
    const T *gb = dout + (size_t)b * a.Tq * C + h * Dh;
    for (int it = qs; it < qend; it += WARP) {
        const int qn = min(WARP, a.Tq - it);
        __syncthreads();
        stage(sQ, Dh + 1, WARP, qb, a.q_stride, it, qn, Dh);
        stage(sG, Dh + 1, WARP, gb, C, it, qn, Dh);
        query_tile_stats(a, b, h, lim, it, WARP, gb, out, lse, sD, sL, sN, warp, WARPS, lane);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < DKV_KEYS_PER_WARP; r++) {
            const int rk = warp * DKV_KEYS_PER_WARP + r, j = j0 + rk;
            if (j >= lim) break; /* warp-uniform */
            const int i = it + lane;
            float pd = 0.0f, ds = 0.0f;
            if (i < a.Tq && j < sN[lane]) {
                float s = 0.0f, dp = 0.0f;
                for (int e = 0; e < Dh; e++) {
                    s += sQ[lane * (Dh + 1) + e] * sK[rk * Dh + e];
                    dp += sG[lane * (Dh + 1) + e] * sV[rk * Dh + e];
                }
                const float p = __expf(s * a.scale - sL[lane]);
                pd = p;
                if (a.drop) {
                    const float ks = keep_bit(a, b, h, i, j) ? a.keep_scale : 0.0f;
                    pd = p * ks;
                    dp *= ks;
                }
                ds = p * (dp - sD[lane]) * a.scale;
            }
            for (int ii = 0; ii < qn; ii++) {
                const float pi = __shfl_sync(0xffffffffu, pd, ii), si = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
                for (int c = 0; c < MAX_SLOTS; c++) {
                    const int d = lane + WARP * c;
                    if (d < Dh) {
                        gv[r][c] += pi * sG[ii * (Dh + 1) + d];
                        gk[r][c] += si * sQ[ii * (Dh + 1) + d];
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < DKV_KEYS_PER_WARP; r++) {
        const int j = j0 + warp * DKV_KEYS_PER_WARP + r;
        if (j >= a.Tk) break;
        T *kr = dk + ((size_t)b * a.Tk + j) * a.kv_stride + h * Dh; /* overwrite; 0 past the padding */
        T *vr = dv + ((size_t)b * a.Tk + j) * a.kv_stride + h * Dh;
#pragma unroll
        for (int c = 0; c < MAX_SLOTS; c++) {
            const int d = lane + WARP * c;
            if (d < Dh) {
                ll_st(kr + d, gk[r][c]);
                ll_st(vr + d, gv[r][c]);
            }
        }
    }
}

/* ---- launchers ------------------------------------------------------------------ */

static cudaError_t make_args(attn_args *a, const void *q, int q_stride, const void *k, const void *v,
                             int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh, int causal,
                             float p, const ll_philox *rng, uint64_t rng_offset) {
    if (Dh < 1 || Dh > WARP * MAX_SLOTS || p < 0 || p >= 1 || (p > 0 && !rng)) return cudaErrorInvalidValue;
    *a = attn_args{};
    a->q = q, a->k = k, a->v = v, a->q_stride = q_stride, a->kv_stride = kv_stride, a->key_len = key_len;
    a->B = B, a->Tq = Tq, a->Tk = Tk, a->H = H, a->Dh = Dh, a->causal = causal;
    a->scale = 1.0f / sqrtf((float)Dh);
    /* the CPU's threshold: round(p * 65536) (lround on a double) */
    a->thr = p > 0 ? (uint32_t)llround((double)p * 65536.0) : 0;
    a->drop = p > 0;
    a->keep_scale = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
    if (rng) a->rng = *rng;
    a->rng_offset = rng_offset;
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_attention_fwd_dt(cudaStream_t stream, ll_cuda_dtype t, void *out, float *lse,
                                                const void *q, int q_stride, const void *k, const void *v,
                                                int kv_stride, const int *key_len, int B, int Tq, int Tk, int H,
                                                int Dh, int causal, float p, const ll_philox *rng,
                                                uint64_t rng_offset) {
    if (B <= 0 || Tq <= 0 || H <= 0) return cudaSuccess;
    attn_args a;
    cudaError_t e = make_args(&a, q, q_stride, k, v, kv_stride, key_len, B, Tq, Tk, H, Dh, causal, p, rng,
                              rng_offset);
    if (e != cudaSuccess) return e;
    if (t == LL_CUDA_BF16 && ll_attention_tc_takes(Dh)) return ll_attention_fwd_tc(stream, a, (__nv_bfloat16 *)out, lse);
    const int BQ = WARPS * FWD_ROWS_PER_WARP;
    const size_t smem = sizeof(float) * ((size_t)BQ * Dh + WARP * (Dh + 1) + WARP * Dh);
    for (a.b0 = 0; a.b0 < B; a.b0 += MAX_GRID_Z) {
        const dim3 grid((Tq + BQ - 1) / BQ, H, (unsigned)(B - a.b0 < MAX_GRID_Z ? B - a.b0 : MAX_GRID_Z));
        LL_DISPATCH(t, T, LL_LAUNCH(grid, WARPS * WARP, smem, stream, attention_fwd_kernel<T>)(a, (T *)out, lse);)
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_attention_bwd_dt(cudaStream_t stream, ll_cuda_dtype t, void *dq, void *dk, void *dv,
                                                const void *dout, const void *out, const float *lse, const void *q,
                                                int q_stride, const void *k, const void *v, int kv_stride,
                                                const int *key_len, int B, int Tq, int Tk, int H, int Dh, int causal,
                                                float p, const ll_philox *rng, uint64_t rng_offset) {
    if (B <= 0 || H <= 0) return cudaSuccess;
    attn_args a;
    cudaError_t e = make_args(&a, q, q_stride, k, v, kv_stride, key_len, B, Tq, Tk, H, Dh, causal, p, rng,
                              rng_offset);
    if (e != cudaSuccess) return e;
    if (t == LL_CUDA_BF16 && ll_attention_tc_takes(Dh))
        return ll_attention_bwd_tc(stream, a, (__nv_bfloat16 *)dq, (__nv_bfloat16 *)dk, (__nv_bfloat16 *)dv,
                                   (const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)out, lse);
    if (Tq > 0) {
        const int BQ = WARPS * DQ_ROWS_PER_WARP;
        const size_t smem = sizeof(float) * (2 * (size_t)BQ * Dh + 2 * WARP * (Dh + 1));
        for (a.b0 = 0; a.b0 < B; a.b0 += MAX_GRID_Z) {
            const dim3 grid((Tq + BQ - 1) / BQ, H, (unsigned)(B - a.b0 < MAX_GRID_Z ? B - a.b0 : MAX_GRID_Z));
            LL_DISPATCH(t, T, LL_LAUNCH(grid, WARPS * WARP, smem, stream, attention_dq_kernel<T>)(
                                  a, (T *)dq, (const T *)out, (const T *)dout, lse);)
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
        }
    }
    if (Tk > 0) {
        const int BK = WARPS * DKV_KEYS_PER_WARP;
        const size_t smem = sizeof(float) * (2 * (size_t)BK * Dh + 2 * WARP * (Dh + 1) + 3 * WARP);
        for (a.b0 = 0; a.b0 < B; a.b0 += MAX_GRID_Z) {
            const dim3 grid((Tk + BK - 1) / BK, H, (unsigned)(B - a.b0 < MAX_GRID_Z ? B - a.b0 : MAX_GRID_Z));
            LL_DISPATCH(t, T, LL_LAUNCH(grid, WARPS * WARP, smem, stream, attention_dkv_kernel<T>)(
                                  a, (T *)dk, (T *)dv, (const T *)out, (const T *)dout, lse);)
            if ((e = cudaGetLastError()) != cudaSuccess) return e;
        }
    }
    return cudaSuccess;
}

/* The fp32 entry points the op table uses today. */
extern "C" cudaError_t ll_cuda_attention_fwd(cudaStream_t stream, float *out, float *lse, const float *q,
                                             int q_stride, const float *k, const float *v, int kv_stride,
                                             const int *key_len, int B, int Tq, int Tk, int H, int Dh, int causal,
                                             float p, const ll_philox *rng, uint64_t rng_offset) {
    return ll_cuda_attention_fwd_dt(stream, LL_CUDA_F32, out, lse, q, q_stride, k, v, kv_stride, key_len, B, Tq, Tk,
                                    H, Dh, causal, p, rng, rng_offset);
}

extern "C" cudaError_t ll_cuda_attention_bwd(cudaStream_t stream, float *dq, float *dk, float *dv,
                                             const float *dout, const float *out, const float *lse, const float *q,
                                             int q_stride, const float *k, const float *v, int kv_stride,
                                             const int *key_len, int B, int Tq, int Tk, int H, int Dh, int causal,
                                             float p, const ll_philox *rng, uint64_t rng_offset) {
    return ll_cuda_attention_bwd_dt(stream, LL_CUDA_F32, dq, dk, dv, dout, out, lse, q, q_stride, k, v, kv_stride,
                                    key_len, B, Tq, Tk, H, Dh, causal, p, rng, rng_offset);
}
