/* Sums in a fixed order: 16 lane accumulators (element c goes to lane c % 16),
 * folded as a fixed tree, multiply-adds as explicit fma.
 *
 * Why: `#pragma omp simd reduction` lets the compiler pick the order, so the
 * same source summed differently at -O3, under ASan/UBSan/TSan (whose
 * instrumentation changes what the vectoriser does) and per -march; with bf16
 * activations one flipped rounding then moved a whole step's loss (issue 24:
 * the bf16 DLCL step gave 170.8276 under the sanitizers, 170.8028 plain).
 * Here the order is the source's, which a compiler may not reassociate (no
 * -ffast-math), so every build and ISA gives the same bits; the 16
 * independent lanes still vectorise (one zmm, or two ymm). */
#ifndef LL_FIXED_SUM_H
#define LL_FIXED_SUM_H

#include <math.h>

#include "ll/core.h"

#define LL_LANES 16

#ifdef LL_REAL_DOUBLE
#define ll_fma(a, b, c) fma(a, b, c)
#else
#define ll_fma(a, b, c) fmaf(a, b, c)
#endif

/* acc[0] + ... + acc[15] as a fixed tree */
static inline real ll_lanes_fold(real *acc) {
    for (int w = LL_LANES / 2; w > 0; w >>= 1)
        for (int i = 0; i < w; i++) acc[i] += acc[i + w];
    return acc[0];
}

static inline real ll_sum_fixed(const real *x, int n) {
    real acc[LL_LANES] = {0};
    int c0 = 0;
    for (; c0 + LL_LANES <= n; c0 += LL_LANES)
        for (int j = 0; j < LL_LANES; j++) acc[j] += x[c0 + j];
    for (int j = 0; c0 + j < n; j++) acc[j] += x[c0 + j];
    return ll_lanes_fold(acc);
}

/* sum of a[c] b[c] */
static inline real ll_dot_fixed(const real *a, const real *b, int n) {
    real acc[LL_LANES] = {0};
    int c0 = 0;
    for (; c0 + LL_LANES <= n; c0 += LL_LANES)
        for (int j = 0; j < LL_LANES; j++) acc[j] = ll_fma(a[c0 + j], b[c0 + j], acc[j]);
    for (int j = 0; c0 + j < n; j++) acc[j] = ll_fma(a[c0 + j], b[c0 + j], acc[j]);
    return ll_lanes_fold(acc);
}

/* sum of (x[c] - m)^2 */
static inline real ll_sumsq_dev_fixed(const real *x, real m, int n) {
    real acc[LL_LANES] = {0};
    int c0 = 0;
    for (; c0 + LL_LANES <= n; c0 += LL_LANES)
        for (int j = 0; j < LL_LANES; j++) {
            const real d = x[c0 + j] - m;
            acc[j] = ll_fma(d, d, acc[j]);
        }
    for (int j = 0; c0 + j < n; j++) {
        const real d = x[c0 + j] - m;
        acc[j] = ll_fma(d, d, acc[j]);
    }
    return ll_lanes_fold(acc);
}

#endif
