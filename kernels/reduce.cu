/* Reductions into backend scalars: sumsq (the gradient norm's sum of squares,
 * into a double stats slot), dot_acc (gate and ReZero gradients, into an fp32
 * parameter gradient), and grad_finish (norm, clip coefficient, skip flag and
 * Adam step counts, on the stats buffer).  Deterministic two-stage sums
 * (reduce.cuh); the products and sums are in double. */
#include "reduce.cuh"
#include "ll/spike.h"

enum { FIN_SUMSQ, FIN_DOT };

/* Stage 2 for one sum: total of the G partials, applied by thread 0. */
static __global__ void __launch_bounds__(RED_THREADS)
    red_finish(const double *__restrict__ part, int G, int mode, double *acc, float *dst, const float *mul) {
    LL_PDL_ENTER();
    __shared__ double sh[LL_WARP];
    const double total = ll_block_sum_array(part, G, sh);
    if (threadIdx.x != 0) return;
    if (mode == FIN_SUMSQ)
        *acc += total;
    else
        *dst += (float)(total * (mul ? (double)*mul : 1.0)); /* cpu_dot_acc: (real)(s * mul) */
}

extern "C" size_t ll_cuda_reduce_scratch_bytes(int k) {
    return (size_t)(k > 0 ? k : 1) * RED_MAX_BLOCKS * sizeof(double);
}

extern "C" cudaError_t ll_cuda_sumsq(cudaStream_t s, ll_cuda_dtype t, double *acc, const void *x, size_t n,
                                     void *scratch) {
    if (n == 0) return cudaSuccess;
    if (!scratch) return cudaErrorInvalidValue;
    const unsigned G = red_blocks(n);
    red_ptrs none = {};
    LL_DISPATCH(t, T, LL_LAUNCH(dim3(G, 1), RED_THREADS, 0, s, red_partials<T>)((double *)scratch, (const T *)x, none, n, 1);)
    LL_CHECK_LAUNCH();
    LL_LAUNCH(1, RED_THREADS, 0, s, red_finish)((const double *)scratch, (int)G, FIN_SUMSQ, acc, NULL, NULL);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_dot_acc(cudaStream_t s, ll_cuda_dtype t, float *dst, const void *a, const void *b,
                                       size_t n, const float *mul, void *scratch) {
    if (n == 0) {
        /* the CPU still adds (real)(0 * mul) = 0; nothing changes */
        return cudaSuccess;
    }
    if (!scratch) return cudaErrorInvalidValue;
    const unsigned G = red_blocks(n);
    red_ptrs bp = {};
    bp.p[0] = b;
    LL_DISPATCH(t, T, LL_LAUNCH(dim3(G, 1), RED_THREADS, 0, s, red_partials<T>)((double *)scratch, (const T *)a, bp, n, 0);)
    LL_CHECK_LAUNCH();
    LL_LAUNCH(1, RED_THREADS, 0, s, red_finish)((const double *)scratch, (int)G, FIN_DOT, NULL, dst, mul);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* cpu_grad_finish, line for line, on one thread (double math is IEEE on the
 * device: --use_fast_math only touches single precision). */
static __global__ void grad_finish_kernel(double *st, double grad_scale, double clip_norm, int phi_step) {
    LL_PDL_ENTER();
    const double norm = grad_scale * sqrt(st[LL_ST_GSUMSQ]);
    st[LL_ST_GNORM] = norm;
    st[LL_ST_GMUL] = grad_scale * (clip_norm > 0 && norm > clip_norm ? clip_norm / (norm + 1e-6) : 1.0);
    st[LL_ST_SKIP] = !isfinite(norm) || !isfinite(st[LL_ST_LOSS]) || st[LL_ST_SPIKE] != 0;
    if (st[LL_ST_SKIP] != 0) return;
    st[LL_ST_ADAM_T] += 1;
    if (phi_step) st[LL_ST_ADAM_T_PHI] += 1;
}

extern "C" cudaError_t ll_cuda_grad_finish(cudaStream_t s, double *stats, double grad_scale, double clip_norm,
                                           int phi_step) {
    LL_LAUNCH(1, 1, 0, s, grad_finish_kernel)(stats, grad_scale, clip_norm, phi_step);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* spike_check on one thread: ll_spike_update, the CPU op's own function (ll/spike.h) */
static __global__ void spike_check_kernel(double *st, double *state, int window, double grad_scale, double z_loss,
                                          double z_gnorm) {
    LL_PDL_ENTER();
    ll_spike_update(st, state, window, grad_scale, z_loss, z_gnorm);
}

extern "C" cudaError_t ll_cuda_spike_check(cudaStream_t s, double *stats, double *state, int window,
                                           double grad_scale, double z_loss, double z_gnorm) {
    if (window < 1) return cudaErrorInvalidValue;
    LL_LAUNCH(1, 1, 0, s, spike_check_kernel)(stats, state, window, grad_scale, z_loss, z_gnorm);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}
