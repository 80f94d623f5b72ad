/* ALD (reference-spec §3.3): mean-pooling of the top decoder states over each
 * sentence's target positions, the contrastive loss on the pooled vectors of
 * the clean, light and heavy passes with its gradient, and the un-pooling of
 * that gradient (cpu_ald.c arithmetic: double sums, the same formulas).
 *
 * ald_loss: one block per sentence (deterministic block sums in double); the
 * per-sentence softplus terms go to scratch and one block adds them in order
 * into the stats slot. */
#include "ll_cuda_common.cuh"

#define ALD_THREADS 256

/* G[s, c] = mean over t < len[s] of h[s, t, c]; one thread per (s, c), t in order (the CPU's order). */
template <typename T>
static __global__ void ald_pool_kernel(float *__restrict__ G, const T *__restrict__ h, const int *__restrict__ len,
                                       int T_, int C) {
    LL_PDL_ENTER();
    const int s = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int n = len[s];
    double acc = 0;
    for (int t = 0; t < n; t++) acc += ll_ld(h + ((size_t)s * T_ + t) * C + c);
    G[(size_t)s * C + c] = (float)(acc / (n > 0 ? n : 1));
}

static __global__ void __launch_bounds__(ALD_THREADS)
    ald_loss_kernel(float *__restrict__ dG, const float *__restrict__ G, int B, int C, double tau, const double *__restrict__ wp,
                    double *__restrict__ rowloss) {
    LL_PDL_ENTER();
    __shared__ double sh[LL_WARP];
    const int s = blockIdx.x;
    const float *g0 = G + (size_t)s * C, *g1 = G + ((size_t)B + s) * C, *g2 = G + ((size_t)2 * B + s) * C;
    double q0 = 0, q1 = 0, q2 = 0, d1 = 0, d2 = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const double a = g0[c], b = g1[c], e = g2[c];
        q0 += a * a;
        q1 += b * b;
        q2 += e * e;
        d1 += a * b;
        d2 += a * e;
    }
    q0 = ll_block_sum(q0, sh);
    q1 = ll_block_sum(q1, sh);
    q2 = ll_block_sum(q2, sh);
    d1 = ll_block_sum(d1, sh);
    d2 = ll_block_sum(d2, sh);
    const double n0 = sqrt(q0), n1 = sqrt(q1), n2 = sqrt(q2);
    const double cos1 = d1 / fmax(n0 * n1, 1e-8), cos2 = d2 / fmax(n0 * n2, 1e-8);
    const double delta = (cos2 - cos1) / tau; /* s- - s+ */
    if (threadIdx.x == 0) rowloss[s] = delta > 0 ? delta + log1p(exp(-delta)) : log1p(exp(delta)); /* softplus */
    if (!dG) return;
    const double w = *wp;
    const double sg = 1 / (1 + exp(-delta));
    const double ds1 = -sg / tau, ds2 = sg / tau;
    const double den1 = fmax(n0 * n1, 1e-8), den2 = fmax(n0 * n2, 1e-8);
    const double nn0 = fmax(n0 * n0, 1e-16), nn1 = fmax(n1 * n1, 1e-16), nn2 = fmax(n2 * n2, 1e-16);
    float *o0 = dG + (size_t)s * C, *o1 = dG + ((size_t)B + s) * C, *o2 = dG + ((size_t)2 * B + s) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const double a = g0[c], b = g1[c], e = g2[c];
        /* cpu: dG zeroed, then d0 += term(i=1), di += ..., d0 += term(i=2), ... (fp32 adds) */
        float v0 = 0.0f;
        v0 += (float)(w * ds1 * (b / den1 - cos1 * a / nn0));
        o1[c] = 0.0f + (float)(w * ds1 * (a / den1 - cos1 * b / nn1));
        v0 += (float)(w * ds2 * (e / den2 - cos2 * a / nn0));
        o2[c] = 0.0f + (float)(w * ds2 * (a / den2 - cos2 * e / nn2));
        o0[c] = v0;
    }
}

static __global__ void __launch_bounds__(ALD_THREADS)
    ald_finish(const double *__restrict__ rowloss, int B, const double *__restrict__ w, double *acc) {
    LL_PDL_ENTER();
    __shared__ double sh[LL_WARP];
    const double tot = ll_block_sum_array(rowloss, B, sh);
    if (threadIdx.x == 0) *acc += *w * tot;
}

template <typename T>
static __global__ void ald_unpool_kernel(T *__restrict__ dh, const float *__restrict__ dG, const int *__restrict__ len,
                                         int B, int T_, int C) {
    LL_PDL_ENTER();
    const size_t total = (size_t)B * T_ * C;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % (size_t)C);
        const size_t st = i / (size_t)C;
        const int t = (int)(st % (size_t)T_), s = (int)(st / (size_t)T_);
        const int n = len[s];
        ll_st(dh + i, t < n ? __fdiv_rn(dG[(size_t)s * C + c], (float)n) : 0.0f);
    }
}

extern "C" size_t ll_cuda_ald_scratch_bytes(int B) { return (size_t)(B > 0 ? B : 1) * sizeof(double); }

extern "C" cudaError_t ll_cuda_ald_pool(cudaStream_t s, ll_cuda_dtype t, float *G, const void *h, const int *len,
                                        int B, int T, int C) {
    if (B <= 0 || C <= 0) return cudaSuccess;
    if (B > 65535) return cudaErrorInvalidValue; /* grid.y */
    dim3 grid((unsigned)((C + ALD_THREADS - 1) / ALD_THREADS), (unsigned)B);
    LL_DISPATCH(t, E, LL_LAUNCH(grid, ALD_THREADS, 0, s, ald_pool_kernel<E>)(G, (const E *)h, len, T, C);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_ald_loss(cudaStream_t s, float *dG, double *acc, const float *G, int B, int C,
                                        float tau, const double *w, void *scratch) {
    if (B <= 0) return cudaSuccess;
    if (!scratch) return cudaErrorInvalidValue;
    double *rowloss = (double *)scratch;
    LL_LAUNCH((unsigned)B, ALD_THREADS, 0, s, ald_loss_kernel)(dG, G, B, C, (double)tau, w, rowloss);
    LL_CHECK_LAUNCH();
    LL_LAUNCH(1, ALD_THREADS, 0, s, ald_finish)(rowloss, B, w, acc);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_ald_unpool(cudaStream_t s, ll_cuda_dtype t, void *dh, const float *dG, const int *len,
                                          int B, int T, int C) {
    if (B <= 0 || T <= 0 || C <= 0) return cudaSuccess;
    const size_t total = (size_t)B * T * C;
    LL_DISPATCH(t, E, LL_LAUNCH(ll_grid(total, ALD_THREADS), ALD_THREADS, 0, s, ald_unpool_kernel<E>)((E *)dh, dG, len, B, T,
                                                                                              C);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}
