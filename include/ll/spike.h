/* The spike detector's update (backend op spike_check, backend.h), once for both backends: the CPU
 * op calls it, and so does the CUDA kernel on one thread (kernels/reduce.cu), so the two skip the
 * same updates.  The sums run in slot order and the squares by fma: no contraction the two
 * compilers might choose differently. */
#ifndef LL_SPIKE_H
#define LL_SPIKE_H

#include <math.h>

#include "ll/backend.h"

#ifdef __CUDACC__
#define LL_SPIKE_FN static __host__ __device__ inline
#else
#define LL_SPIKE_FN static inline
#endif

/* x's z-score against w[0..n): population standard deviation; 0 when it is 0 */
LL_SPIKE_FN double ll_spike_z(const double *w, int n, double x) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += w[i];
    const double mean = sum / n;
    double ss = 0;
    for (int i = 0; i < n; i++) {
        const double d = w[i] - mean;
        ss = fma(d, d, ss);
    }
    const double sd = sqrt(ss / n);
    return sd > 0 ? (x - mean) / sd : 0;
}

LL_SPIKE_FN void ll_spike_update(double *st, double *state, int window, double grad_scale, double z_loss,
                                 double z_gnorm) {
    const double loss = st[LL_ST_LOSS] * grad_scale, norm = grad_scale * sqrt(st[LL_ST_GSUMSQ]);
    double *wl = state + 2, *wg = state + 2 + window;
    const int seen = (int)state[0], next = (int)state[1];
    const double zl = seen == window ? ll_spike_z(wl, window, loss) : nan("");
    const double zg = seen == window ? ll_spike_z(wg, window, norm) : nan("");
    st[LL_ST_Z_LOSS] = zl;
    st[LL_ST_Z_GNORM] = zg;
    st[LL_ST_SPIKE] = (z_loss > 0 && zl > z_loss) || (z_gnorm > 0 && zg > z_gnorm);
    if (!isfinite(loss) || !isfinite(norm)) return; /* (a non-finite update never joins the window) */
    wl[next] = loss;
    wg[next] = norm;
    state[1] = next + 1 == window ? 0 : next + 1;
    if (seen < window) state[0] = seen + 1;
}

#endif
