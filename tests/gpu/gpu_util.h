/* Shared by the C GPU tests: skip without a GPU, and the relative error they
 * compare CUDA against the CPU with. */
#ifndef LL_TESTS_GPU_UTIL_H
#define LL_TESTS_GPU_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ll/backend.h"

/* Exit 77 (ctest: skipped) when there is no CUDA device. */
static inline void gpu_or_skip(void) {
    if (ll_cuda_device_count() > 0) return;
    printf("no CUDA device: skipping\n");
    exit(77);
}

/* Max over i of |got - ref| / (|ref| + scale), scale = max(1, rms(ref)): a
 * relative error that does not blow up where a long sum cancels to ~0; NaN
 * propagates. */
static inline double gpu_rel_err(const float *got, const float *ref, size_t n) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)ref[i] * ref[i];
    double scale = n ? sqrt(ss / (double)n) : 0.0;
    if (scale < 1.0) scale = 1.0;
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]) / (fabs(ref[i]) + scale);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

#endif
