/* Latent depth (reference-spec §1.2-§1.5): Gumbel-sigmoid samples of the
 * layer gates, their straight-through gradient, the KL to the prior, the
 * target-depth loss L_K, E[L] and the soft inference gates.
 *
 * O(rows x L) work each (rows <= 128, L <= 4096), once per forward or update:
 * one small launch per op, written to mirror cpu_latent.c's arithmetic (double
 * where the CPU uses double; the CPU's fp32 sigmoid with IEEE-rounded
 * intrinsics, so --use_fast_math changes nothing).  Sums over l that the CPU
 * does in sequence are done by one thread in the same order, so they are the
 * CPU's bits up to the last ulp of the libm functions.  The prior struct is a
 * kernel argument (by value, ~160 bytes). */
#include "ll_cuda_common.cuh"
#include "philox.cuh"

#define LAT_THREADS 256

static __device__ __forceinline__ double lat_q(double a) { return 1 / (1 + exp(-a)); } /* ll_latent_q */

/* cpu: static real sigm(real x) { return 1 / (1 + expf(-x)); } -- expf by a rounded double exp */
static __device__ __forceinline__ float lat_sigm(float x) {
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, (float)exp(-(double)x)));
}

static __global__ void latent_sample_kernel(float *__restrict__ z, float *__restrict__ dzda,
                                            const float *__restrict__ a, int L, ll_philox rng, float tau, int hard) {
    LL_PDL_ENTER();
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= L) return;
    const double g1 = -log(-log((double)ll_philox_uniform_dev(rng, 2 * (uint64_t)l)));
    const double g2 = -log(-log((double)ll_philox_uniform_dev(rng, 2 * (uint64_t)l + 1)));
    const float soft = lat_sigm((float)(((double)a[l] + g1 - g2) / (double)tau));
    z[l] = hard ? (soft > 0.5f ? 1.0f : 0.0f) : soft; /* strictly > 0.5, as the CPU */
    dzda[l] = __fdiv_rn(__fmul_rn(soft, __fsub_rn(1.0f, soft)), tau);
}

static __global__ void latent_grad_kernel(float *__restrict__ dl, const float *__restrict__ dgate,
                                          const float *__restrict__ dzda, int L) {
    LL_PDL_ENTER();
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l < L) dl[l] += dgate[l] * dzda[l];
}

static __global__ void latent_q_kernel(float *__restrict__ q, const float *__restrict__ a, int L) {
    LL_PDL_ENTER();
    const int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l < L) q[l] = (float)lat_q((double)a[l]);
}

/* The prior p[l] into sp[0..L) (cpu_latent.c prior()); all threads call it. */
static __device__ void lat_prior(const ll_latent_prior &pr, const float *logits, const float *z, int use_samples,
                                 double *sp, double *tot_sh) {
    const int L = pr.L;
    for (int l = threadIdx.x; l < L; l += blockDim.x) {
        double p = 0;
        if (!pr.prior_agg) {
            p = pr.prior_p;
        } else {
            for (int r = 0; r < pr.rows; r++) {
                if (!pr.active[r]) continue;
                p += use_samples ? (double)z[(size_t)r * L + l] : lat_q((double)logits[(size_t)r * L + l]);
            }
        }
        sp[l] = p;
    }
    __syncthreads();
    if (!pr.prior_agg) return;
    if (pr.agg_across_layers) {
        if (threadIdx.x == 0) {
            double tot = 0;
            for (int l = 0; l < L; l++) tot += sp[l];
            *tot_sh = tot;
        }
        __syncthreads();
        const double tot = *tot_sh;
        for (int l = threadIdx.x; l < L; l += blockDim.x) sp[l] = tot > 0 ? sp[l] / tot : 1.0 / L;
    } else {
        for (int l = threadIdx.x; l < L; l += blockDim.x) sp[l] /= pr.n_active ? pr.n_active : 1;
    }
    __syncthreads();
}

/* Dynamic shared memory: L doubles (32 KiB at L = 4096). */
static __global__ void __launch_bounds__(LAT_THREADS)
    latent_kl_kernel(float *__restrict__ dlogits, double *acc, const float *__restrict__ logits,
                     const float *__restrict__ z, const float *__restrict__ dzda, ll_latent_prior pr, int row,
                     int reference, double w) {
    LL_PDL_ENTER();
    LL_DYN_SHARED(double, sp);
    __shared__ double tot_sh;
    const int L = pr.L;
    lat_prior(pr, logits, z, reference, sp, &tot_sh);
    float *g = dlogits + (size_t)row * L;
    for (int l = threadIdx.x; l < L; l += blockDim.x) {
        double term;
        if (reference) {
            const double s = z[(size_t)row * L + l], lp = log(sp[l] + 1e-7);
            term = s * (log(s + 1e-7) - lp);
            const double ds = log(s + 1e-7) + s / (s + 1e-7) - lp;
            g[l] += (float)(w * ds / L * (double)dzda[(size_t)row * L + l]);
        } else {
            const double a = logits[(size_t)row * L + l];
            const double q = lat_q(a), pl = fmin(fmax(sp[l], 1e-6), 1 - 1e-6);
            const double qc = fmin(fmax(q, 1e-12), 1 - 1e-12);
            term = qc * log(qc / pl) + (1 - qc) * log((1 - qc) / (1 - pl));
            g[l] += (float)(w * (a - log(pl / (1 - pl))) * q * (1 - q));
        }
        sp[l] = term; /* only this thread reads sp[l] above */
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double kl = 0;
        for (int l = 0; l < L; l++) kl += sp[l];
        if (reference) kl /= L;
        *acc += w * kl;
    }
}

static __global__ void __launch_bounds__(LAT_THREADS)
    latent_lk_kernel(float *__restrict__ dlogits, double *acc, const float *__restrict__ z,
                     const float *__restrict__ dzda, ll_latent_prior pr, int K, int squared, double w) {
    LL_PDL_ENTER();
    LL_DYN_SHARED(double, sp);
    __shared__ double dS_sh;
    const int L = pr.L, na = pr.n_active ? pr.n_active : 1;
    for (int l = threadIdx.x; l < L; l += blockDim.x) {
        double u = 0;
        for (int r = 0; r < pr.rows; r++)
            if (pr.active[r]) u += z[(size_t)r * L + l];
        sp[l] = u / na;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double S = 0;
        for (int l = 0; l < L; l++) S += sp[l];
        const double val = squared ? (S - K) * (S - K) : fabs(S - K);
        dS_sh = squared ? 2 * (S - K) : (S > K ? 1 : S < K ? -1 : 0);
        *acc += w * val;
    }
    __syncthreads();
    const double dS = dS_sh;
    const size_t total = (size_t)pr.rows * L;
    for (size_t i = threadIdx.x; i < total; i += blockDim.x) {
        if (!pr.active[i / L]) continue;
        dlogits[i] += (float)(w * dS / na * (double)dzda[i]);
    }
}

static __global__ void __launch_bounds__(LAT_THREADS)
    latent_depth_kernel(double *acc, const float *__restrict__ logits, ll_latent_prior pr) {
    LL_PDL_ENTER();
    __shared__ double sh[LL_WARP];
    const size_t total = (size_t)pr.rows * pr.L;
    double e = 0;
    for (size_t i = threadIdx.x; i < total; i += blockDim.x)
        if (pr.active[i / pr.L]) e += lat_q((double)logits[i]);
    e = ll_block_sum(e, sh);
    if (threadIdx.x == 0) *acc += e / (pr.n_active ? pr.n_active : 1);
}

static int lat_bad(int L) { return L <= 0 || L > 4096; }
static int prior_bad(const ll_latent_prior *pr) {
    return !pr || lat_bad(pr->L) || pr->rows < 0 || pr->rows > LL_LATENT_MAX_ROWS;
}

extern "C" cudaError_t ll_cuda_latent_sample(cudaStream_t s, float *z, float *dzda, const float *logits, int L,
                                             ll_philox rng, float tau, int hard) {
    if (L <= 0) return cudaSuccess;
    LL_LAUNCH((unsigned)((L + LAT_THREADS - 1) / LAT_THREADS), LAT_THREADS, 0, s, latent_sample_kernel)(z, dzda, logits, L,
                                                                                                 rng, tau, hard);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_latent_grad(cudaStream_t s, float *dlogits, const float *dgate, const float *dzda,
                                           int L) {
    if (L <= 0) return cudaSuccess;
    LL_LAUNCH((unsigned)((L + LAT_THREADS - 1) / LAT_THREADS), LAT_THREADS, 0, s, latent_grad_kernel)(dlogits, dgate, dzda,
                                                                                               L);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_latent_q(cudaStream_t s, float *q, const float *logits, int L) {
    if (L <= 0) return cudaSuccess;
    LL_LAUNCH((unsigned)((L + LAT_THREADS - 1) / LAT_THREADS), LAT_THREADS, 0, s, latent_q_kernel)(q, logits, L);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_latent_kl(cudaStream_t s, float *dlogits, double *acc, const float *logits,
                                         const float *z, const float *dzda, const ll_latent_prior *pr, int row,
                                         int reference, double weight) {
    if (prior_bad(pr) || row < 0 || row >= pr->rows) return cudaErrorInvalidValue;
    LL_LAUNCH(1, LAT_THREADS, (size_t)pr->L * sizeof(double), s, latent_kl_kernel)(dlogits, acc, logits, z, dzda, *pr, row,
                                                                           reference, weight);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_latent_lk(cudaStream_t s, float *dlogits, double *acc, const float *z,
                                         const float *dzda, const ll_latent_prior *pr, int K, int squared,
                                         double weight) {
    if (prior_bad(pr)) return cudaErrorInvalidValue;
    LL_LAUNCH(1, LAT_THREADS, (size_t)pr->L * sizeof(double), s, latent_lk_kernel)(dlogits, acc, z, dzda, *pr, K, squared,
                                                                           weight);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_latent_depth(cudaStream_t s, double *acc, const float *logits,
                                            const ll_latent_prior *pr) {
    if (prior_bad(pr)) return cudaErrorInvalidValue;
    LL_LAUNCH(1, LAT_THREADS, 0, s, latent_depth_kernel)(acc, logits, *pr);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}
