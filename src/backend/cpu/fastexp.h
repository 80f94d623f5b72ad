/* A vectorisable exp for softmax-type loops (glibc's expf is a scalar call
 * that blocks `omp simd`).  Cephes' expf: range reduction by ln 2 and a
 * degree-6 polynomial, max relative error ~2e-7 over the clamped range.  The
 * double-precision test build uses exp itself. */
#ifndef LL_FASTEXP_H
#define LL_FASTEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ll/core.h"

#ifdef LL_REAL_DOUBLE
#define vexp(x) exp(x)
#else
#pragma omp declare simd
static inline float ll_fast_expf(float x) {
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float e = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, sizeof s);
    return e * s;
}
#define vexp(x) ll_fast_expf(x)
#endif

#endif
