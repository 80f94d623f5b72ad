/* Losses over the vocabulary (cpu_loss.c semantics): label-smoothed
 * cross-entropy fused with its gradient, DDR's symmetric KL and its gradient,
 * and log-softmax for decoding.
 *
 * One block per row of V logits.  Softmax statistics use the online
 * (running max, running sum) form per thread, merged over the block in a fixed
 * tree; pass 2 recomputes exp and writes the result in place.  Per-row loss
 * terms (double) go to scratch and one block adds them in a fixed order into
 * the stats slots, so the loss is bit-reproducible (no atomics). */
#include "ll_cuda_common.cuh"

#define LOSS_THREADS 512
#define FIN_THREADS 256

/* ---- label-smoothed cross-entropy ----------------------------------------------------------
 * fairseq: q[y] = 1-eps, q[v != y] = eps_i = eps/(V-1); loss = (1-eps-eps_i) nll + eps_i smooth
 * with smooth = V lse - sum_v x_v; grad = gs (softmax - q); pad rows: 0, no loss. */
template <typename T>
static __global__ void __launch_bounds__(LOSS_THREADS)
    xent_kernel(T *__restrict__ logits, const int32_t *__restrict__ target, int N, int V, double conf, double eps_i,
                int pad, float grad_scale, double *__restrict__ rowloss) {
    LL_PDL_ENTER();
    __shared__ ll_msum shm[LL_WARP];
    __shared__ double shd[LL_WARP];
    const int row = blockIdx.x, y = target[row];
    T *x = logits + (size_t)row * V;
    if (y == pad) {
        for (int v = threadIdx.x; v < V; v += blockDim.x) ll_st(x + v, 0.0f);
        if (threadIdx.x == 0) rowloss[row] = rowloss[(size_t)N + row] = 0.0;
        return;
    }
    /* read x[y] before any barrier: pass 2 overwrites it */
    const float xy = ll_ld(x + y);
    ll_msum st = {-INFINITY, 0.0f};
    float sx = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const float xv = ll_ld(x + v);
        st = ll_msum_add(st, xv);
        sx += xv;
    }
    st = ll_block_msum(st, shm);
    const double sumx = ll_block_sum((double)sx, shd);
    if (threadIdx.x == 0) {
        const double lse = (double)st.m + log((double)st.s);
        const double nll = lse - (double)xy, smooth = (double)V * lse - sumx;
        rowloss[row] = conf * nll + eps_i * smooth;
        rowloss[(size_t)N + row] = nll;
    }
    /* cpu: x = (gs / sum) e + (-gs eps_i); x[y] -= gs (1 - eps - eps_i) */
    const float a = grad_scale / st.s, b = -grad_scale * (float)eps_i;
    const float cy = grad_scale * (float)conf;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float g = a * __expf(ll_ld(x + v) - st.m) + b;
        if (v == y) g -= cy;
        ll_st(x + v, g);
    }
}

/* acc[0] += sum rowloss[0..N), acc[1] += sum rowloss[N..2N) (nparts 2), or
 * acc[0] += mul * sum rowloss[0..N) (nparts 1). */
static __global__ void __launch_bounds__(FIN_THREADS)
    rows_finish(const double *__restrict__ rowloss, int N, int nparts, double mul, double *acc) {
    LL_PDL_ENTER();
    __shared__ double sh[LL_WARP];
    for (int k = 0; k < nparts; k++) {
        const double tot = ll_block_sum_array(rowloss + (size_t)k * N, N, sh);
        if (threadIdx.x == 0) acc[k] += nparts == 1 ? mul * tot : tot;
    }
}

extern "C" size_t ll_cuda_loss_scratch_bytes(int N) { return (size_t)(N > 0 ? N : 1) * 2 * sizeof(double); }

extern "C" cudaError_t ll_cuda_xent_fwd_bwd(cudaStream_t s, ll_cuda_dtype t, void *logits, const int32_t *target,
                                            int N, int V, float eps, int pad, float grad_scale, double *acc,
                                            void *scratch) {
    if (N <= 0 || V <= 0) return cudaSuccess;
    if (!scratch) return cudaErrorInvalidValue;
    const double eps_i = V > 1 ? (double)eps / (V - 1) : 0.0;
    /* the CPU's (1 - eps - eps_i): 1 - eps is a float subtraction there (eps is real) */
    const double conf = (double)(1.0f - eps) - eps_i;
    double *rowloss = (double *)scratch;
    LL_DISPATCH(t, T, LL_LAUNCH((unsigned)N, LOSS_THREADS, 0, s, xent_kernel<T>)((T *)logits, target, N, V, conf, eps_i, pad,
                                                                           grad_scale, rowloss);)
    LL_CHECK_LAUNCH();
    LL_LAUNCH(1, FIN_THREADS, 0, s, rows_finish)(rowloss, N, 2, 1.0, acc);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* ---- DDR symmetric KL -----------------------------------------------------------------------
 * d KL(p||q)/dz_p = p (log p - log q - KL(p||q)); d KL(q||p)/dz_p = p - q.
 * Pass 1 in double with a double exp, as the CPU (the KL of two close passes
 * is a small difference of large terms); pass 2 in fp32. */
template <typename T>
static __global__ void __launch_bounds__(LOSS_THREADS)
    sym_kl_kernel(const T *__restrict__ lpa, const T *__restrict__ lpb, T *__restrict__ da, T *__restrict__ db,
                  const int32_t *__restrict__ target, int V, int pad, float h, double *__restrict__ rowkl) {
    LL_PDL_ENTER();
    __shared__ double sh[LL_WARP];
    const int row = blockIdx.x;
    if (target[row] == pad) {
        if (threadIdx.x == 0) rowkl[row] = 0.0;
        return;
    }
    const T *a = lpa + (size_t)row * V, *b = lpb + (size_t)row * V;
    T *ga = da + (size_t)row * V, *gb = db + (size_t)row * V;
    double kab = 0.0, kba = 0.0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const double av = ll_ld(a + v), bv = ll_ld(b + v);
        const double pa = exp(av), pb = exp(bv);
        kab += pa * (av - bv);
        kba += pb * (bv - av);
    }
    kab = ll_block_sum(kab, sh);
    kba = ll_block_sum(kba, sh);
    if (threadIdx.x == 0) rowkl[row] = kab + kba;
    const float fab = (float)kab, fba = (float)kba;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const float av = ll_ld(a + v), bv = ll_ld(b + v);
        const float pa = __expf(av), pb = __expf(bv);
        ll_st(ga + v, ll_ld(ga + v) + h * ((pa - pb) + pa * (av - bv - fab)));
        ll_st(gb + v, ll_ld(gb + v) + h * ((pb - pa) + pb * (bv - av - fba)));
    }
}

extern "C" cudaError_t ll_cuda_sym_kl(cudaStream_t s, ll_cuda_dtype t, const void *lpa, const void *lpb, void *da,
                                      void *db, const int32_t *target, int N, int V, int pad, float alpha, double *acc,
                                      void *scratch) {
    if (N <= 0 || V <= 0) return cudaSuccess;
    if (!scratch) return cudaErrorInvalidValue;
    const float h = alpha / 2; /* cpu: real h = alpha / 2; *acc += h * total */
    double *rowkl = (double *)scratch;
    LL_DISPATCH(t, T, LL_LAUNCH((unsigned)N, LOSS_THREADS, 0, s, sym_kl_kernel<T>)((const T *)lpa, (const T *)lpb, (T *)da,
                                                                             (T *)db, target, V, pad, h, rowkl);)
    LL_CHECK_LAUNCH();
    LL_LAUNCH(1, FIN_THREADS, 0, s, rows_finish)(rowkl, N, 1, (double)h, acc);
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* ---- log-softmax (decoding) ------------------------------------------------------------------ */
template <typename T>
static __global__ void __launch_bounds__(LOSS_THREADS) log_softmax_kernel(T *__restrict__ x, int V) {
    LL_PDL_ENTER();
    __shared__ ll_msum shm[LL_WARP];
    T *xr = x + (size_t)blockIdx.x * V;
    ll_msum st = {-INFINITY, 0.0f};
    for (int v = threadIdx.x; v < V; v += blockDim.x) st = ll_msum_add(st, ll_ld(xr + v));
    st = ll_block_msum(st, shm);
    const float lse = st.m + (float)log((double)st.s); /* cpu: real lse = mx + logf(sum) (a correctly rounded log) */
    for (int v = threadIdx.x; v < V; v += blockDim.x) ll_st(xr + v, ll_ld(xr + v) - lse);
}

extern "C" cudaError_t ll_cuda_log_softmax(cudaStream_t s, ll_cuda_dtype t, void *x, int N, int V) {
    if (N <= 0 || V <= 0) return cudaSuccess;
    LL_DISPATCH(t, T, LL_LAUNCH((unsigned)N, LOSS_THREADS, 0, s, log_softmax_kernel<T>)((T *)x, V);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* ---- a reference's token scores (forced decoding): one element per row ---------------------- */
template <typename T>
static __global__ void pick_logp_kernel(float *__restrict__ out, const T *__restrict__ logp,
                                        const int32_t *__restrict__ target, int N, int V, int pad) {
    LL_PDL_ENTER();
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= N) return;
    const int t = target[r];
    out[r] = t == pad ? 0.0f : ll_ld(logp + (size_t)r * V + t);
}

extern "C" cudaError_t ll_cuda_pick_logp(cudaStream_t s, ll_cuda_dtype t, float *out, const void *logp,
                                         const int32_t *target, int N, int V, int pad) {
    if (N <= 0) return cudaSuccess;
    const int threads = 256;
    LL_DISPATCH(t, T, LL_LAUNCH((unsigned)((N + threads - 1) / threads), threads, 0, s, pick_logp_kernel<T>)(
                          out, (const T *)logp, target, N, V, pad);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* ---- an ensemble's log-probabilities: log(e^a + e^(x + b)) - c in double (the CPU: fp32, ll_mix_logp) -- */
template <typename T>
static __global__ void ensemble_mix_kernel(T *__restrict__ acc, const T *__restrict__ x, size_t n, double b, double c) {
    LL_PDL_ENTER();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const double a = ll_ld(acc + i), e = (double)ll_ld(x + i) + b, hi = a > e ? a : e, lo = a > e ? e : a;
        ll_st(acc + i, (float)(hi == -INFINITY ? -INFINITY : hi + log1p(exp(lo - hi)) - c));
    }
}

extern "C" cudaError_t ll_cuda_ensemble_mix(cudaStream_t s, ll_cuda_dtype t, void *acc, const void *x, size_t n,
                                            double b, double c) {
    if (n == 0) return cudaSuccess;
    const int threads = 256;
    const size_t want = (n + threads - 1) / threads;
    const unsigned blocks = (unsigned)(want < 65535 ? want : 65535); /* grid-stride beyond */
    LL_DISPATCH(t, T, LL_LAUNCH(blocks, threads, 0, s, ensemble_mix_kernel<T>)((T *)acc, (const T *)x, n, b, c);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* ---- one column moved in every row (lldecode --unkpen): a thread per row ------------------- */
template <typename T>
static __global__ void add_col_kernel(T *__restrict__ x, int rows, int V, int col, float val) {
    LL_PDL_ENTER();
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) ll_st(x + (size_t)r * V + col, ll_ld(x + (size_t)r * V + col) + val);
}

template <typename T>
static __global__ void fill_at_kernel(T *__restrict__ x, const int32_t *__restrict__ idx, int n, float val) {
    LL_PDL_ENTER();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ll_st(x + idx[i], val);
}

extern "C" cudaError_t ll_cuda_fill_at(cudaStream_t s, ll_cuda_dtype t, void *x, const int32_t *idx, int n, float val) {
    if (n <= 0) return cudaSuccess;
    const int threads = 128;
    LL_DISPATCH(t, T, LL_LAUNCH((unsigned)((n + threads - 1) / threads), threads, 0, s, fill_at_kernel<T>)(
                          (T *)x, idx, n, val);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* a shortlist's log-probabilities placed in full rows: a block per row fills it, then scatters (the
 * columns are distinct, so the scatter has no conflicts; the barrier orders it after the fill) */
template <typename T>
static __global__ void expand_cols_kernel(T *__restrict__ dst, const T *__restrict__ src, const int32_t *__restrict__ cols,
                                          int V, int K, float fill) {
    LL_PDL_ENTER();
    T *d = dst + (size_t)blockIdx.x * V;
    const T *s = src + (size_t)blockIdx.x * K;
    for (int v = threadIdx.x; v < V; v += blockDim.x) ll_st(d + v, fill);
    __syncthreads();
    for (int j = threadIdx.x; j < K; j += blockDim.x) d[cols[j]] = s[j];
}

extern "C" cudaError_t ll_cuda_expand_cols(cudaStream_t s, ll_cuda_dtype t, void *dst, const void *src,
                                           const int32_t *cols, int rows, int V, int K, float fill) {
    if (rows <= 0) return cudaSuccess;
    LL_DISPATCH(t, T, LL_LAUNCH((unsigned)rows, 256, 0, s, expand_cols_kernel<T>)((T *)dst, (const T *)src, cols, V,
                                                                                  K, fill);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

extern "C" cudaError_t ll_cuda_add_col(cudaStream_t s, ll_cuda_dtype t, void *x, int rows, int V, int col, float val) {
    if (rows <= 0) return cudaSuccess;
    const int threads = 128;
    LL_DISPATCH(t, T, LL_LAUNCH((unsigned)((rows + threads - 1) / threads), threads, 0, s, add_col_kernel<T>)(
                          (T *)x, rows, V, col, val);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}
