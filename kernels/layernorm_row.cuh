/* Layer norm of one row by one warp: the forward of layernorm.cu, shared with
 * the fused residual + layer norm of residual.cu so that both give the same
 * bits (same lanes, same sums, same order).
 *   mean = sum(x)/C, var = sum((x-mean)^2)/C, rstd = 1/sqrt(var + 1e-5),
 *   out = (x - mean) * rstd * w + b; mean/rstd saved when not NULL. */
#pragma once
#include "ll_cuda_common.cuh"

#define LL_LN_EPS 1e-5f

template <typename T>
static __device__ __forceinline__ void ll_layernorm_row(T *__restrict__ outr, float *__restrict__ mean,
                                                        float *__restrict__ rstd, const T *xr, const float *w,
                                                        const float *b, int row, int C, int lane) {
    float s = 0.0f;
    for (int c = lane; c < C; c += LL_WARP) s += ll_ld(xr + c);
    const float m = ll_warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += LL_WARP) {
        const float d = ll_ld(xr + c) - m;
        v += d * d;
    }
    const float rs = rsqrtf(ll_warp_sum(v) / (float)C + LL_LN_EPS);
    for (int c = lane; c < C; c += LL_WARP) ll_st(outr + c, (ll_ld(xr + c) - m) * rs * w[c] + b[c]);
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = rs;
    }
}
