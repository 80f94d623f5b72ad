/* Layer norm over the last dimension C, forward and backward, fp32.
 *
 * Mirrors the CPU op of ll_backend (include/ll/backend.h):
 *   forward   mean = sum(x)/C, var = sum((x-mean)^2)/C, rstd = 1/sqrt(var + 1e-5),
 *             out = (x - mean) * rstd * w + b; mean/rstd saved per row.
 *   backward  norm = (x - mean) * rstd, dnorm = w * dout,
 *             dx += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd,
 *             dw += sum_rows(dout * norm), db += sum_rows(dout).
 *
 * Forward and dx: one warp per row (lanes stride over C, any C works).
 * dw/db: a deterministic two-stage column reduction (no atomics), so results
 * are bit-reproducible run to run: stage 1 sums a chunk of rows per block into
 * a partial [R, C] in scratch, stage 2 adds the R partials in a fixed order.
 * With dx wanted too and C <= LL_CUDA_LN_BWD_FUSED_MAX_C, stage 1 is the dx
 * kernel itself (layernorm_bwd_fused_kernel: each warp keeps its rows' column
 * sums in shared memory, the block adds its warps' in order): dout and x are
 * read once, and a layer norm's backward is 2 launches instead of 3.
 *
 * Templated over the activation type (fp32, bf16) like the other kernel
 * files; ll_cuda_layernorm_fwd/bwd are the fp32 instances. */
#include "col_sum.cuh"
#include "layernorm_row.cuh"

#define WARP 32
#define ROWS_PER_BLOCK 8 /* warps per block in the row kernels */

/* Activations (x, out, dout, dx) are of type T (fp32 or bf16); the parameters
 * w, b, their gradients and mean/rstd stay fp32, the math is fp32. */
static __device__ __forceinline__ float warp_sum(float v) { return ll_warp_sum(v); }

template <typename T>
static __global__ void layernorm_fwd_kernel(T *__restrict__ out, float *__restrict__ mean,
                                            float *__restrict__ rstd, const T *__restrict__ x,
                                            const float *__restrict__ w, const float *__restrict__ b, int N,
                                            int C) {
    LL_PDL_ENTER();
    int lane = threadIdx.x % WARP;
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    if (row >= N) return; /* whole warp leaves together */
    ll_layernorm_row(out + (size_t)row * C, mean, rstd, x + (size_t)row * C, w, b, row, C, lane);
}

/* the forward with the row in registers (ll_layernorm_row_vec) */
template <typename T, int NB>
static __global__ void layernorm_fwd_vec_kernel(T *__restrict__ out, float *__restrict__ mean,
                                                float *__restrict__ rstd, const T *__restrict__ x,
                                                const float *__restrict__ w, const float *__restrict__ b, int N,
                                                int C) {
    LL_PDL_ENTER();
    const int lane = threadIdx.x % WARP, row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    if (row >= N) return; /* whole warp leaves together */
    const size_t r0 = (size_t)row * C;
    float v[NB * 8];
#pragma unroll
    for (int k = 0; k < NB; k++) {
        const int c = (lane + WARP * k) * 8;
        if (c < C) ll_ld8_any(x + r0 + c, v + 8 * k);
    }
    ll_layernorm_row_vec<T, NB>(out + r0, mean, rstd, v, w, b, row, C, lane);
}

template <typename T>
static __global__ void layernorm_bwd_dx_kernel(T *__restrict__ dx, const T *__restrict__ dout,
                                               const T *__restrict__ x, const float *__restrict__ w,
                                               const float *__restrict__ mean, const float *__restrict__ rstd,
                                               int N, int C) {
    LL_PDL_ENTER();
    int lane = threadIdx.x % WARP;
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    if (row >= N) return;
    const T *xr = x + (size_t)row * C, *dr = dout + (size_t)row * C;
    T *dxr = dx + (size_t)row * C;
    float m = mean[row], rs = rstd[row];

    float s1 = 0.0f, s2 = 0.0f; /* sum(dnorm), sum(dnorm * norm) */
    for (int c = lane; c < C; c += WARP) {
        float norm = (ll_ld(xr + c) - m) * rs;
        float dn = w[c] * ll_ld(dr + c);
        s1 += dn;
        s2 += dn * norm;
    }
    float dn_mean = warp_sum(s1) / (float)C;
    float dnn_mean = warp_sum(s2) / (float)C;

    for (int c = lane; c < C; c += WARP) {
        float norm = (ll_ld(xr + c) - m) * rs;
        float dn = w[c] * ll_ld(dr + c);
        ll_st(dxr + c, ll_ld(dxr + c) + (dn - dn_mean - norm * dnn_mean) * rs);
    }
}

/* dx (as layernorm_bwd_dx_kernel) and stage 1 of dw/db in one pass: block =
 * chunk blockIdx.x of rows_per_chunk rows, its W warps taking the rows in
 * turn; each warp sums dout * norm and dout per column into its own shared
 * row (a lane owns columns lane, lane + 32, ...), then the block adds the
 * warps' rows in order into pw/pb[chunk * C + col].  W = as many warps as
 * 48 KiB of column sums hold, at most 16 (lnf_warps): fixed per C, so the
 * sums' order, and the bits, are too. */
#define LNF_MAX_THREADS 512
static int lnf_warps(int C) {
    const int w = 48 * 1024 / (2 * (int)sizeof(float) * C);
    return w < LNF_MAX_THREADS / 32 ? w : LNF_MAX_THREADS / 32;
}
template <typename T>
static __global__ void __launch_bounds__(LNF_MAX_THREADS)
    layernorm_bwd_fused_kernel(T *__restrict__ dx, float *__restrict__ pw, float *__restrict__ pb,
                               const T *__restrict__ dout, const T *__restrict__ x, const float *__restrict__ w,
                               const float *__restrict__ mean, const float *__restrict__ rstd, int N, int C,
                               int rows_per_chunk) {
    LL_PDL_ENTER();
    LL_DYN_SHARED(float, sm); /* [2][W][C]: the warps' dw and db sums */
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, W = blockDim.x / WARP;
    float *aw = sm + (size_t)warp * C, *ab = sm + (size_t)(W + warp) * C;
    for (int c = lane; c < C; c += WARP) aw[c] = ab[c] = 0.0f;
    const int r0 = blockIdx.x * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    for (int row = r0 + warp; row < r1; row += W) {
        const T *xr = x + (size_t)row * C, *dr = dout + (size_t)row * C;
        T *dxr = dx + (size_t)row * C;
        const float m = mean[row], rs = rstd[row];
        float s1 = 0.0f, s2 = 0.0f;
        for (int c = lane; c < C; c += WARP) {
            const float d = ll_ld(dr + c), norm = (ll_ld(xr + c) - m) * rs, dn = w[c] * d;
            s1 += dn;
            s2 += dn * norm;
            aw[c] += d * norm; /* the lane's own column: no other lane touches it */
            ab[c] += d;
        }
        const float dn_mean = warp_sum(s1) / (float)C, dnn_mean = warp_sum(s2) / (float)C;
        for (int c = lane; c < C; c += WARP) {
            const float norm = (ll_ld(xr + c) - m) * rs, dn = w[c] * ll_ld(dr + c);
            ll_st(dxr + c, ll_ld(dxr + c) + (dn - dn_mean - norm * dnn_mean) * rs);
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < W; k++) {
            tw += sm[(size_t)k * C + c];
            tb += sm[(size_t)(W + k) * C + c];
        }
        if (pw) pw[(size_t)blockIdx.x * C + c] = tw;
        if (pb) pb[(size_t)blockIdx.x * C + c] = tb;
    }
}

/* The fused backward with 16-byte loads, for rows that split into whole 16-byte vectors over
 * the lanes (C a multiple of 32 * V, V = 8 bf16 or 4 fp32; NV vectors per lane, at most 32
 * values; rows 16-byte aligned): a lane owns columns (lane + 32 k) * V .. + V - 1, keeps its
 * row's x and dout in registers between the two passes, and its columns' dw/db sums in
 * registers across the warp's rows; the block adds its LNB_WARPS warps' sums in order.  Small
 * blocks and chunks (dwdb_rows_per_chunk): ~512 of them fill an H100, where 128 blocks of 12
 * warps ran at 18.8% occupancy and 40.8 us for ll64's 8192 x 512 (ncu, 2026-11-27). */
#define LNB_WARPS 4
template <typename T, int NV>
static __global__ void __launch_bounds__(LNB_WARPS * WARP)
    layernorm_bwd_vec_kernel(T *__restrict__ dx, float *__restrict__ pw, float *__restrict__ pb,
                             const T *__restrict__ dout, const T *__restrict__ x, const float *__restrict__ w,
                             const float *__restrict__ mean, const float *__restrict__ rstd, int N,
                             int rows_per_chunk) {
    LL_PDL_ENTER();
    constexpr int V = ll_vec16<T>::V, E = NV * V, C = E * WARP;
    __shared__ float sw[LNB_WARPS][C], sb[LNB_WARPS][C];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    float aw[E], ab[E];
#pragma unroll
    for (int e = 0; e < E; e++) aw[e] = ab[e] = 0.0f;
    const int r0 = blockIdx.x * rows_per_chunk, r1 = min(N, r0 + rows_per_chunk);
    for (int row = r0 + warp; row < r1; row += LNB_WARPS) {
        const size_t o = (size_t)row * C;
        const float m = mean[row], rs = rstd[row];
        float xn[E], dn[E], s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int col = (lane + WARP * k) * V;
            ll_ld16(x + o + col, xn + k * V);
            ll_ld16(dout + o + col, dn + k * V);
#pragma unroll
            for (int i = 0; i < V; i++) {
                const int e = k * V + i;
                const float d = dn[e], norm = (xn[e] - m) * rs, g = w[col + i] * d;
                s1 += g;
                s2 += g * norm;
                aw[e] += d * norm;
                ab[e] += d;
                xn[e] = norm;
                dn[e] = g;
            }
        }
        const float dn_mean = warp_sum(s1) / (float)C, dnn_mean = warp_sum(s2) / (float)C;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int col = (lane + WARP * k) * V;
            float v[V];
            ll_ld16(dx + o + col, v);
#pragma unroll
            for (int i = 0; i < V; i++) v[i] += (dn[k * V + i] - dn_mean - xn[k * V + i] * dnn_mean) * rs;
            ll_st16(dx + o + col, v);
        }
    }
#pragma unroll
    for (int k = 0; k < NV; k++)
#pragma unroll
        for (int i = 0; i < V; i++) {
            sw[warp][(lane + WARP * k) * V + i] = aw[k * V + i];
            sb[warp][(lane + WARP * k) * V + i] = ab[k * V + i];
        }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float tw = 0.0f, tb = 0.0f;
#pragma unroll
        for (int k = 0; k < LNB_WARPS; k++) {
            tw += sw[k][c];
            tb += sb[k][c];
        }
        if (pw) pw[(size_t)blockIdx.x * C + c] = tw;
        if (pb) pb[(size_t)blockIdx.x * C + c] = tb;
    }
}

/* Stage 1 of dw/db.  Block (32, DWDB_TY): x = column within a 32-column tile,
 * y strides over the rows of chunk blockIdx.y.  Writes partial sums
 * pw/pb[chunk * C + col]. */
#define DWDB_TY 8
template <typename T>
static __global__ void layernorm_bwd_dwdb_partial(float *__restrict__ pw, float *__restrict__ pb,
                                                  const T *__restrict__ dout, const T *__restrict__ x,
                                                  const float *__restrict__ mean, const float *__restrict__ rstd,
                                                  int N, int C, int rows_per_chunk) {
    LL_PDL_ENTER();
    __shared__ float sw[DWDB_TY][WARP + 1], sb[DWDB_TY][WARP + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int col = blockIdx.x * WARP + tx;
    int chunk = blockIdx.y;
    int r0 = chunk * rows_per_chunk;
    int r1 = min(N, r0 + rows_per_chunk);
    float aw = 0.0f, ab = 0.0f;
    if (col < C) {
        for (int r = r0 + ty; r < r1; r += DWDB_TY) {
            size_t i = (size_t)r * C + col;
            float d = ll_ld(dout + i);
            aw += d * ((ll_ld(x + i) - mean[r]) * rstd[r]);
            ab += d;
        }
    }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && col < C) {
        float tw = 0.0f, tb = 0.0f;
#pragma unroll
        for (int k = 0; k < DWDB_TY; k++) {
            tw += sw[k][tx];
            tb += sb[k][tx];
        }
        if (pw) pw[(size_t)chunk * C + col] = tw;
        if (pb) pb[(size_t)chunk * C + col] = tb;
    }
}

/* Rows per chunk of the dw/db reduction: at least 16 rows per block (4 per warp of the fused
 * kernel), at most ~512 chunks: stage 1 has blocks for every multiprocessor several times over,
 * stage 2 (DWDB_TY rows of threads per column) stays short. */
static int dwdb_rows_per_chunk(int N) {
    int rpc = (N + 511) / 512;
    return rpc < 16 ? 16 : rpc;
}
static int dwdb_chunks(int N) {
    int rpc = dwdb_rows_per_chunk(N);
    return (N + rpc - 1) / rpc;
}

extern "C" size_t ll_cuda_layernorm_bwd_scratch_floats(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    return 2 * (size_t)dwdb_chunks(N) * (size_t)C;
}

/* The 16-byte kernel where the shape and the pointers allow it (NV vectors per lane, at most 32
 * values: more would not stay in registers); false: the caller launches the scalar one. */
template <typename T, int NV>
static bool lnb_try(cudaStream_t stream, T *dx, float *pw, float *pb, const T *dout, const T *x, const float *w,
                    const float *mean, const float *rstd, int N, int rpc, int R) {
    if constexpr (NV * ll_vec16<T>::V > 32) {
        (void)stream, (void)dx, (void)pw, (void)pb, (void)dout, (void)x, (void)w, (void)mean, (void)rstd, (void)N;
        (void)rpc, (void)R;
        return false;
    } else {
        LL_LAUNCH(dim3((unsigned)R), dim3(LNB_WARPS * WARP), 0, stream, layernorm_bwd_vec_kernel<T, NV>)(
            dx, pw, pb, dout, x, w, mean, rstd, N, rpc);
        return true;
    }
}
template <typename T>
static bool lnb_vec_launch_t(cudaStream_t stream, T *dx, float *pw, float *pb, const T *dout, const T *x,
                             const float *w, const float *mean, const float *rstd, int N, int C, int rpc, int R) {
    constexpr int V = ll_vec16<T>::V;
    if (C % (WARP * V) || ((uintptr_t)dx | (uintptr_t)dout | (uintptr_t)x) % 16) return false;
    switch (C / (WARP * V)) {
    case 1: return lnb_try<T, 1>(stream, dx, pw, pb, dout, x, w, mean, rstd, N, rpc, R);
    case 2: return lnb_try<T, 2>(stream, dx, pw, pb, dout, x, w, mean, rstd, N, rpc, R);
    case 3: return lnb_try<T, 3>(stream, dx, pw, pb, dout, x, w, mean, rstd, N, rpc, R);
    case 4: return lnb_try<T, 4>(stream, dx, pw, pb, dout, x, w, mean, rstd, N, rpc, R);
    case 6: return lnb_try<T, 6>(stream, dx, pw, pb, dout, x, w, mean, rstd, N, rpc, R);
    case 8: return lnb_try<T, 8>(stream, dx, pw, pb, dout, x, w, mean, rstd, N, rpc, R);
    default: return false;
    }
}
static bool lnb_vec_launch(cudaStream_t stream, ll_cuda_dtype t, void *dx, float *pw, float *pb, const void *dout,
                           const void *x, const float *w, const float *mean, const float *rstd, int N, int C, int rpc,
                           int R) {
    if (t == LL_CUDA_BF16)
        return lnb_vec_launch_t(stream, (__nv_bfloat16 *)dx, pw, pb, (const __nv_bfloat16 *)dout,
                                (const __nv_bfloat16 *)x, w, mean, rstd, N, C, rpc, R);
    if (t == LL_CUDA_F32)
        return lnb_vec_launch_t(stream, (float *)dx, pw, pb, (const float *)dout, (const float *)x, w, mean, rstd, N,
                                C, rpc, R);
    return false;
}

extern "C" cudaError_t ll_cuda_layernorm_fwd_dt(cudaStream_t stream, ll_cuda_dtype t, void *out, float *mean,
                                                float *rstd, const void *x, const float *w, const float *b, int N,
                                                int C) {
    if (N <= 0 || C <= 0) return cudaSuccess;
    unsigned grid = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
    /* (the rule of residual.cu's fused forward: both give the same bits) */
    switch (ll_ln_vec_nb(C)) {
#define LNF_VEC(NB)                                                                                                    \
    case NB:                                                                                                           \
        LL_DISPATCH(t, T, LL_LAUNCH(grid, ROWS_PER_BLOCK * WARP, 0, stream, layernorm_fwd_vec_kernel<T, NB>)(          \
                              (T *)out, mean, rstd, (const T *)x, w, b, N, C);)                                        \
        break;
        LNF_VEC(1)
        LNF_VEC(2)
        LNF_VEC(3)
        LNF_VEC(4)
#undef LNF_VEC
    default:
        LL_DISPATCH(t, T, LL_LAUNCH(grid, ROWS_PER_BLOCK * WARP, 0, stream, layernorm_fwd_kernel<T>)(
                              (T *)out, mean, rstd, (const T *)x, w, b, N, C);)
    }
    return cudaGetLastError();
}

/* dw/db's partials of row chunks, each R x C in scratch (dw's first) */
static void dwdb_partials(float *scratch, float *dw, float *db, int N, int C, float **pw, float **pb) {
    const int R = dwdb_chunks(N);
    *pw = dw ? scratch : NULL;
    *pb = db ? scratch + (size_t)R * C : NULL;
}

/* Everything but the column sums' finish: dx, and dw/db's partials in scratch. */
extern "C" cudaError_t ll_cuda_layernorm_bwd_parts_dt(cudaStream_t stream, ll_cuda_dtype t, void *dx, float *dw,
                                                      float *db, float *scratch, const void *dout, const void *x,
                                                      const float *w, const float *mean, const float *rstd, int N,
                                                      int C) {
    if (N <= 0 || C <= 0) return cudaSuccess;
    if (dx && (dw || db) && C <= LL_CUDA_LN_BWD_FUSED_MAX_C) {
        if (!scratch) return cudaErrorInvalidValue;
        int rpc = dwdb_rows_per_chunk(N), R = dwdb_chunks(N);
        float *pw, *pb;
        dwdb_partials(scratch, dw, db, N, C, &pw, &pb);
        if (!lnb_vec_launch(stream, t, dx, pw, pb, dout, x, w, mean, rstd, N, C, rpc, R)) {
            const int W = lnf_warps(C) < LNB_WARPS ? lnf_warps(C) : LNB_WARPS;
            const size_t smem = sizeof(float) * 2 * W * (size_t)C;
            LL_DISPATCH(t, T, LL_LAUNCH((unsigned)R, W * WARP, smem, stream, layernorm_bwd_fused_kernel<T>)(
                                  (T *)dx, pw, pb, (const T *)dout, (const T *)x, w, mean, rstd, N, C, rpc);)
        }
        return cudaGetLastError();
    }
    if (dx) {
        unsigned grid = (unsigned)((N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
        LL_DISPATCH(t, T, LL_LAUNCH(grid, ROWS_PER_BLOCK * WARP, 0, stream, layernorm_bwd_dx_kernel<T>)(
                              (T *)dx, (const T *)dout, (const T *)x, w, mean, rstd, N, C);)
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    if (dw || db) {
        if (!scratch) return cudaErrorInvalidValue;
        int rpc = dwdb_rows_per_chunk(N), R = dwdb_chunks(N);
        float *pw, *pb;
        dwdb_partials(scratch, dw, db, N, C, &pw, &pb);
        dim3 g1((unsigned)((C + WARP - 1) / WARP), (unsigned)R), b1(WARP, DWDB_TY);
        LL_DISPATCH(t, T, LL_LAUNCH(g1, b1, 0, stream, layernorm_bwd_dwdb_partial<T>)(pw, pb, (const T *)dout, (const T *)x,
                                                                              mean, rstd, N, C, rpc);)
        return cudaGetLastError();
    }
    return cudaSuccess;
}

/* The finish: dw += and db += the sums of the partials (in row-chunk order), on any stream ordered
 * after the parts (the CUDA backend runs it beside the chain, on the side stream). */
extern "C" cudaError_t ll_cuda_layernorm_bwd_finish(cudaStream_t stream, float *dw, float *db, const float *scratch,
                                                    int N, int C) {
    if (N <= 0 || C <= 0 || !(dw || db)) return cudaSuccess;
    if (!scratch) return cudaErrorInvalidValue;
    float *pw, *pb;
    dwdb_partials((float *)scratch, dw, db, N, C, &pw, &pb);
    col_partials_final_launch(stream, dw, db, pw, pb, dwdb_chunks(N), C, 0);
    return cudaGetLastError();
}

extern "C" cudaError_t ll_cuda_layernorm_bwd_dt(cudaStream_t stream, ll_cuda_dtype t, void *dx, float *dw,
                                                float *db, float *scratch, const void *dout, const void *x,
                                                const float *w, const float *mean, const float *rstd, int N,
                                                int C) {
    cudaError_t e = ll_cuda_layernorm_bwd_parts_dt(stream, t, dx, dw, db, scratch, dout, x, w, mean, rstd, N, C);
    return e != cudaSuccess ? e : ll_cuda_layernorm_bwd_finish(stream, dw, db, scratch, N, C);
}

/* The fp32 entry points the op table uses today. */
extern "C" cudaError_t ll_cuda_layernorm_fwd(cudaStream_t stream, float *out, float *mean, float *rstd,
                                             const float *x, const float *w, const float *b, int N, int C) {
    return ll_cuda_layernorm_fwd_dt(stream, LL_CUDA_F32, out, mean, rstd, x, w, b, N, C);
}

extern "C" cudaError_t ll_cuda_layernorm_bwd(cudaStream_t stream, float *dx, float *dw, float *db, float *scratch,
                                             const float *dout, const float *x, const float *w, const float *mean,
                                             const float *rstd, int N, int C) {
    return ll_cuda_layernorm_bwd_dt(stream, LL_CUDA_F32, dx, dw, db, scratch, dout, x, w, mean, rstd, N, C);
}
