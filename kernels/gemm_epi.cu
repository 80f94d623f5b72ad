/* The gemm op's epilogues as separate kernels: the fallback for when cuBLASLt
 * refuses an epilogue (a bias pointer it cannot take, a type/transpose
 * combination without an epilogue kernel) and the K = 0 case, which cuBLASLt
 * does not run at all.  src/backend/cuda/cuda_gemm_lt.c decides when.
 *
 * Both kernels are templates over the element type of the matrix they read
 * (fp32 or bf16) with fp32 math; the bias is fp32 or bf16 (the model's comes
 * from the weight copy, in C's dtype), the bias gradient fp32.
 *
 * bias_grad reduces without atomics, so a resumed run repeats the bits:
 *  - column sums (bgrad[c] += sum_r X[r, c]; the weight-gradient gemm with
 *    trans_a, A = dY^T stored as dY [K, M]): col_sum.cuh's scheme (shared
 *    with the layer norm's dw/db), stage 1 sums a chunk of rows per block into
 *    partials [R, cols] (with 16-byte loads where X allows), stage 2 adds the
 *    R partials of a column over 8 threads in a fixed order;
 *  - row sums (bgrad[r] += sum_c X[r, c]; A stored [M, K]): one warp per row,
 *    lanes stride over the columns, then the warp tree. */
#include "col_sum.cuh"

#define EPI_THREADS 256

/* C[m, n] = relu?(mul * C[m, n] + bias[n]) for m < M, n < N, rows at stride ldc.
 * mul == 0 does not read C (BLAS: beta 0 ignores C, so a NaN there must not
 * survive); mul == 1 is exact (1 * x == x). */
template <typename T, typename Tb>
static __global__ void gemm_epi_kernel(T *C, int ldc, int M, int N, float mul, const Tb *__restrict__ bias,
                                       int relu) {
    LL_PDL_ENTER();
    const size_t total = (size_t)M * N;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int m = (int)(i / (size_t)N), n = (int)(i % (size_t)N);
        T *p = C + (size_t)m * ldc + n;
        float v = mul == 0.0f ? 0.0f : mul * ll_ld(p);
        if (bias) v += ll_ld(bias + n);
        if (relu) v = v > 0.0f ? v : 0.0f;
        ll_st(p, v);
    }
}

extern "C" cudaError_t ll_cuda_gemm_epilogue(cudaStream_t s, ll_cuda_dtype t, void *C, int ldc, int M, int N,
                                             float mul, const void *bias, ll_cuda_dtype bias_t, int relu) {
    if (M <= 0 || N <= 0) return cudaSuccess;
    if (ldc < N) return cudaErrorInvalidValue;
    const size_t total = (size_t)M * N;
    const unsigned grid = ll_grid(total, EPI_THREADS);
    LL_DISPATCH(t, T, LL_DISPATCH(bias_t, Tb, LL_LAUNCH(grid, EPI_THREADS, 0, s, gemm_epi_kernel<T, Tb>)(
                                                  (T *)C, ldc, M, N, mul, (const Tb *)bias, relu);))
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* ---- bias gradient ------------------------------------------------------------------- */

#define BG_TY 8 /* row lanes of a column-sum stage-1 block (32 columns x 8 rows) */
#define BG_THREADS 256 /* LL_WARP * BG_TY */

template <typename T>
static __global__ void col_sum_partial(float *__restrict__ part, const T *__restrict__ x, int ld, int rows, int cols,
                                       int rows_per_chunk) {
    LL_PDL_ENTER();
    __shared__ float sh[BG_TY][LL_WARP + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, col = blockIdx.x * LL_WARP + tx, chunk = blockIdx.y;
    const int r0 = chunk * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
    float a = 0.0f;
    if (col < cols)
        for (int r = r0 + ty; r < r1; r += BG_TY) a += ll_ld(x + (size_t)r * ld + col);
    sh[ty][tx] = a;
    __syncthreads();
    if (ty == 0 && col < cols) {
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < BG_TY; k++) t += sh[k][tx];
        part[(size_t)chunk * cols + col] = t;
    }
}

/* Stage 1 with 16-byte loads (X 16-byte aligned, ld and cols multiples of V): block (32, BG_TY),
 * thread x owns the V columns from (blockIdx.x * 32 + x) * V, y takes the chunk's rows y,
 * y + BG_TY, ...; then the block's thread t writes column t (and t + 256) of its 32 V: the y's sums
 * in order.  Where the scalar kernel read 2 bytes per thread and row, this reads 16. */
template <typename T>
static __global__ void __launch_bounds__(BG_THREADS)
    col_sum_partial_vec(float *__restrict__ part, const T *__restrict__ x, int ld, int rows, int cols,
                        int rows_per_chunk) {
    LL_PDL_ENTER();
    constexpr int V = ll_vec16<T>::V;
    __shared__ float sh[BG_TY][LL_WARP * V + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, c0 = (blockIdx.x * LL_WARP + tx) * V, chunk = blockIdx.y;
    const int r0 = chunk * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
    float a[V];
#pragma unroll
    for (int i = 0; i < V; i++) a[i] = 0.0f;
    if (c0 < cols)
#pragma unroll 4
        for (int r = r0 + ty; r < r1; r += BG_TY) {
            float f[V];
            ll_ld16(x + (size_t)r * ld + c0, f);
#pragma unroll
            for (int i = 0; i < V; i++) a[i] += f[i];
        }
#pragma unroll
    for (int i = 0; i < V; i++) sh[ty][tx * V + i] = a[i];
    __syncthreads();
    for (int c = ty * LL_WARP + tx; c < LL_WARP * V; c += LL_WARP * BG_TY) {
        const int col = blockIdx.x * LL_WARP * V + c;
        if (col >= cols) break;
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < BG_TY; k++) t += sh[k][c];
        part[(size_t)chunk * cols + col] = t;
    }
}
template <typename T>
static bool col_sum_partial_vec_launch(cudaStream_t s, float *part, const T *x, int ld, int rows, int cols, int rpc,
                                       int R) {
    constexpr int V = ll_vec16<T>::V;
    if ((uintptr_t)x % 16 || ld % V || cols % V) return false;
    const dim3 g((unsigned)((cols + LL_WARP * V - 1) / (LL_WARP * V)), (unsigned)R), b(LL_WARP, BG_TY);
    LL_LAUNCH(g, b, 0, s, col_sum_partial_vec<T>)(part, x, ld, rows, cols, rpc);
    return true;
}

template <typename T>
static __global__ void row_sum_kernel(float *__restrict__ db, const T *__restrict__ x, int ld, int rows, int cols,
                                      int set) {
    LL_PDL_ENTER();
    const int lane = threadIdx.x & (LL_WARP - 1);
    const int r = blockIdx.x * (blockDim.x / LL_WARP) + threadIdx.x / LL_WARP;
    if (r >= rows) return; /* whole warps exit together: the shuffle below sees full warps */
    const T *xr = x + (size_t)r * ld;
    float a = 0.0f;
    for (int c = lane; c < cols; c += LL_WARP) a += ll_ld(xr + c);
    a = ll_warp_sum(a);
    if (lane == 0) db[r] = set ? a : db[r] + a;
}

/* At least 64 rows per chunk, at most ~128 chunks (layernorm.cu's rule). */
static int bg_rows_per_chunk(int rows) {
    const int rpc = (rows + 127) / 128;
    return rpc < 64 ? 64 : rpc;
}
static int bg_chunks(int rows) { return (rows + bg_rows_per_chunk(rows) - 1) / bg_rows_per_chunk(rows); }

extern "C" size_t ll_cuda_bias_grad_scratch_bytes(int rows, int cols, int by_cols) {
    if (!by_cols || rows <= 0 || cols <= 0) return 0;
    return (size_t)bg_chunks(rows) * (size_t)cols * sizeof(float);
}

extern "C" cudaError_t ll_cuda_bias_grad(cudaStream_t s, ll_cuda_dtype t, float *bgrad, const void *x, int ld,
                                         int rows, int cols, int by_cols, int set, void *scratch) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    if (ld < cols) return cudaErrorInvalidValue;
    if (!by_cols) {
        const int wpb = EPI_THREADS / LL_WARP;
        LL_DISPATCH(t, T, LL_LAUNCH((unsigned)((rows + wpb - 1) / wpb), EPI_THREADS, 0, s, row_sum_kernel<T>)(
                              bgrad, (const T *)x, ld, rows, cols, set);)
        LL_CHECK_LAUNCH();
        return cudaSuccess;
    }
    if (!scratch) return cudaErrorInvalidValue;
    const int rpc = bg_rows_per_chunk(rows), R = bg_chunks(rows);
    float *part = (float *)scratch;
    dim3 g1((unsigned)((cols + LL_WARP - 1) / LL_WARP), (unsigned)R), b1(LL_WARP, BG_TY);
    LL_DISPATCH(t, T, if (!col_sum_partial_vec_launch<T>(s, part, (const T *)x, ld, rows, cols, rpc, R)) {
        LL_LAUNCH(g1, b1, 0, s, col_sum_partial<T>)(part, (const T *)x, ld, rows, cols, rpc);
    })
    LL_CHECK_LAUNCH();
    col_partials_final_launch(s, NULL, bgrad, NULL, part, R, cols, set);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}
