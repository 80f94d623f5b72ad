/* Column sums without atomics, shared by layernorm.cu (the dw/db of a layer
 * norm's backward) and gemm_epi.cu (the bias gradient of a weight-gradient
 * matmul): stage 1 sums a chunk of rows per block into partials [R, cols],
 * stage 2 (col_partials_final) adds the R partials of each column in a fixed
 * order, so the same shape repeats the same bits.  Also the 16-byte vector
 * loads and stores both use. */
#ifndef LL_COL_SUM_CUH
#define LL_COL_SUM_CUH

#include "ll_cuda_common.cuh"

/* 16-byte vectors of T: 4 fp32 or 8 bf16 values */
template <typename T> struct ll_vec16;
template <> struct ll_vec16<float> {
    static constexpr int V = 4;
};
template <> struct ll_vec16<__nv_bfloat16> {
    static constexpr int V = 8;
};
template <typename T> union ll_pack16 {
    uint4 u;
    T e[ll_vec16<T>::V];
};
/* f[0..V) = p[0..V) in fp32; p 16-byte aligned */
template <typename T> static __device__ __forceinline__ void ll_ld16(const T *p, float *f) {
    ll_pack16<T> v;
    v.u = *(const uint4 *)p;
#pragma unroll
    for (int i = 0; i < ll_vec16<T>::V; i++) f[i] = ll_ld(&v.e[i]);
}
template <typename T> static __device__ __forceinline__ void ll_st16(T *p, const float *f) {
    ll_pack16<T> v;
#pragma unroll
    for (int i = 0; i < ll_vec16<T>::V; i++) ll_st(&v.e[i], f[i]);
    *(uint4 *)p = v.u;
}

/* Stage 2: a[c] += sum_k pa[k, c] for k < R in a fixed order (set: a[c] = the sum), the same for b
 * (a or b may be NULL).
 * Block (32, LL_COLSUM_TY): x = the column within a 32-column tile, y takes the partials y,
 * y + LL_COLSUM_TY, ...; then the y's sums in order.  Grid: (cols + 31) / 32 blocks. */
#define LL_COLSUM_TY 8
static __global__ void col_partials_final(float *__restrict__ a, float *__restrict__ b, const float *__restrict__ pa,
                                          const float *__restrict__ pb, int R, int cols, int set) {
    LL_PDL_ENTER();
    __shared__ float sa[LL_COLSUM_TY][LL_WARP + 1], sb[LL_COLSUM_TY][LL_WARP + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, col = blockIdx.x * LL_WARP + tx;
    float ta = 0.0f, tb = 0.0f;
    if (col < cols)
        for (int k = ty; k < R; k += LL_COLSUM_TY) {
            if (a) ta += pa[(size_t)k * cols + col];
            if (b) tb += pb[(size_t)k * cols + col];
        }
    sa[ty][tx] = ta;
    sb[ty][tx] = tb;
    __syncthreads();
    if (ty || col >= cols) return;
    ta = tb = 0.0f;
#pragma unroll
    for (int k = 0; k < LL_COLSUM_TY; k++) {
        ta += sa[k][tx];
        tb += sb[k][tx];
    }
    if (a) a[col] = set ? ta : a[col] + ta;
    if (b) b[col] = set ? tb : b[col] + tb;
}
static inline void col_partials_final_launch(cudaStream_t s, float *a, float *b, const float *pa, const float *pb,
                                             int R, int cols, int set) {
    LL_LAUNCH((unsigned)((cols + LL_WARP - 1) / LL_WARP), dim3(LL_WARP, LL_COLSUM_TY), 0, s, col_partials_final)(
        a, b, pa, pb, R, cols, set);
}

#endif
