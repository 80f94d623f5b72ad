/* Layer norm of one row by one warp: the forward of layernorm.cu, shared with
 * the fused residual + layer norm of residual.cu so that both give the same
 * bits (same lanes, same sums, same order).
 *   mean = sum(x)/C, var = sum((x-mean)^2)/C, rstd = 1/sqrt(var + 1e-5),
 *   out = (x - mean) * rstd * w + b; mean/rstd saved when not NULL. */
#pragma once
#include <stdlib.h>
#include <string.h>

#include "col_sum.cuh"
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

/* The row kept in registers (ncu, ll64 on an H100, 2026-11-28: the fused residual + layer norm
 * spent 66% of its stalls waiting for its three passes of 2-byte loads over the row it had just
 * stored, 20 us for 8192 x 512): where C is a multiple of 8 and at most LL_LN_VEC_MAX_NB * 256
 * (ll_ln_vec_nb: a rule of C alone, the same in both kernels, so the fused op and the plain layer
 * norm give the same bits whatever their buffers' alignment), lane owns the 8-column chunks lane,
 * lane + 32, ... (NB of them at most), its values v[8 k + j] of chunk lane + 32 k, and sums them
 * in that order; 16-byte loads and stores where a pointer allows.  Same formulas as
 * ll_layernorm_row, another order of the sums; the fused multiply-adds written out (a compiler's
 * contraction may differ between the two kernels that inline this). */

#define LL_LN_VEC_MAX_NB 4 /* (the launchers instantiate 1..4) */
/* chunks per lane of the row in registers (1..LL_LN_VEC_MAX_NB), 0: the lane-strided row.
 * LL_CUDA_LN_VEC=0: always the lane-strided row (A/B timing on a GPU; read once per process, so
 * both kernels keep one rule) */
static inline int ll_ln_vec_nb(int C) {
    static int on_ = -1; /* (atomics: any host thread may launch) */
    int on = __atomic_load_n(&on_, __ATOMIC_RELAXED);
    if (on < 0) {
        const char *e = getenv("LL_CUDA_LN_VEC");
        on = !(e && !strcmp(e, "0"));
        __atomic_store_n(&on_, on, __ATOMIC_RELAXED);
    }
    if (!on || C <= 0 || C % 8 || C > LL_LN_VEC_MAX_NB * 256) return 0;
    return (C / 8 + LL_WARP - 1) / LL_WARP;
}
/* 8 values at p (16-byte aligned) to fp32, and back */
template <typename T> static __device__ __forceinline__ void ll_ld8v(const T *p, float *f) {
#pragma unroll
    for (int k = 0; k < 8; k += ll_vec16<T>::V) ll_ld16(p + k, f + k);
}
template <typename T> static __device__ __forceinline__ void ll_st8v(T *p, const float *f) {
#pragma unroll
    for (int k = 0; k < 8; k += ll_vec16<T>::V) ll_st16(p + k, f + k);
}
/* the same for any p: 16-byte accesses where p is aligned, else one value at a time */
template <typename T> static __device__ __forceinline__ void ll_ld8_any(const T *p, float *f) {
    if ((uintptr_t)p % 16 == 0) {
        ll_ld8v(p, f);
        return;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) f[j] = ll_ld(p + j);
}
template <typename T> static __device__ __forceinline__ void ll_st8_any(T *p, const float *f) {
    if ((uintptr_t)p % 16 == 0) {
        ll_st8v(p, f);
        return;
    }
#pragma unroll
    for (int j = 0; j < 8; j++) ll_st(p + j, f[j]);
}
template <typename T, int NB>
static __device__ __forceinline__ void ll_layernorm_row_vec(T *__restrict__ outr, float *__restrict__ mean,
                                                            float *__restrict__ rstd, const float *v, const float *w,
                                                            const float *b, int row, int C, int lane) {
    const int nc = C / 8;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < NB; k++)
        if (lane + LL_WARP * k < nc)
#pragma unroll
            for (int j = 0; j < 8; j++) s += v[8 * k + j];
    const float m = ll_warp_sum(s) / (float)C;
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < NB; k++)
        if (lane + LL_WARP * k < nc)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float d = v[8 * k + j] - m;
                q = fmaf(d, d, q);
            }
    const float rs = rsqrtf(ll_warp_sum(q) / (float)C + LL_LN_EPS);
#pragma unroll
    for (int k = 0; k < NB; k++) {
        const int c = (lane + LL_WARP * k) * 8;
        if (c >= C) continue;
        float wv[8], bv[8], o[8];
        ll_ld8_any(w + c, wv);
        ll_ld8_any(b + c, bv);
#pragma unroll
        for (int j = 0; j < 8; j++) o[j] = fmaf((v[8 * k + j] - m) * rs, wv[j], bv[j]);
        ll_st8_any(outr + c, o);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = rs;
    }
}
