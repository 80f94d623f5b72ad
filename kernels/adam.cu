/* fairseq Adam with decoupled weight decay on fp32 master weights
 * (cpu_adam's arithmetic), reading everything that depends on the update's
 * outcome from the stats buffer on the device: SKIP (non-finite loss or
 * gradient: do nothing), GMUL (loss scale times clip coefficient) and the
 * 1-based step count stats[t_slot].  So an update needs no host round-trip.
 *
 * One flat buffer per call (the interface); a multi-tensor form is a later
 * optimisation.  Optionally also writes the updated weights rounded to bf16
 * (the bf16 copy the bf16 matmuls read), in the same pass. */
#include "ll_cuda_common.cuh"

#define ADAM_THREADS 256

static __global__ void __launch_bounds__(ADAM_THREADS)
    adam_kernel(float *__restrict__ p, const float *__restrict__ g, float *__restrict__ m, float *__restrict__ v,
                size_t n, float lr, float b1, float b2, float eps, float wd, const double *__restrict__ stats,
                int t_slot, __nv_bfloat16 *__restrict__ p_bf16) {
    LL_PDL_ENTER();
    if (stats[LL_ST_SKIP] != 0) return;
    const double t = stats[t_slot];
    /* cpu: real step = lr * sqrt(1 - pow(b2, t)) / (1 - pow(b1, t)), evaluated in double;
     * once per thread, amortised by the grid-stride loop */
    const float step = (float)((double)lr * sqrt(1 - pow((double)b2, t)) / (1 - pow((double)b1, t)));
    const float decay = lr * wd, c1 = 1 - b1, c2 = 1 - b2, gm = (float)stats[LL_ST_GMUL];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float gi = gm * g[i];
        const float mi = b1 * m[i] + c1 * gi, vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float pi = p[i] - decay * p[i];
        /* __fsqrt_rn/__fdiv_rn: IEEE rounding whatever --use_fast_math says, as the CPU's sqrtf and / */
        const float pn = pi - __fdiv_rn(step * mi, __fsqrt_rn(vi) + eps);
        p[i] = pn;
        if (p_bf16) p_bf16[i] = __float2bfloat16_rn(pn);
    }
}

/* The weights' moving average: e = fma(decay, e - p, p), as cpu_ema; nothing on a skipped update. */
static __global__ void __launch_bounds__(ADAM_THREADS)
    ema_kernel(float *__restrict__ e, const float *__restrict__ p, size_t n, float decay,
               const double *__restrict__ stats) {
    LL_PDL_ENTER();
    if (stats[LL_ST_SKIP] != 0) return;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        e[i] = fmaf(decay, __fsub_rn(e[i], p[i]), p[i]); /* explicit: no contraction choice */
}

extern "C" cudaError_t ll_cuda_ema(cudaStream_t s, float *e, const float *p, size_t n, float decay,
                                   const double *stats) {
    if (n == 0) return cudaSuccess;
    LL_LAUNCH(ll_grid((n + 3) / 4, ADAM_THREADS), ADAM_THREADS, 0, s, ema_kernel)(e, p, n, decay, stats);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_adam(cudaStream_t s, float *p, const float *g, float *m, float *v, size_t n, float lr,
                                    float b1, float b2, float eps, float wd, const double *stats, int t_slot,
                                    uint16_t *p_bf16) {
    if (n == 0) return cudaSuccess;
    if (t_slot < 0 || t_slot >= LL_ST_N) return cudaErrorInvalidValue;
    /* at most ~4 elements per thread before the cap: the per-thread prologue (two pows) stays cheap */
    LL_LAUNCH(ll_grid((n + 3) / 4, ADAM_THREADS), ADAM_THREADS, 0, s, adam_kernel)(p, g, m, v, n, lr, b1, b2, eps, wd, stats,
                                                                            t_slot, (__nv_bfloat16 *)p_bf16);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}
