/* Op-table wrappers for the training-step ops: gate reductions (dot_acc),
 * DLCL (kernels/dlcl.cu), the gradient norm and its decisions (sumsq,
 * grad_finish: kernels/reduce.cu) and Adam (kernels/adam.cu).  Scratch: the
 * reductions' block partials, 8 KiB per simultaneous sum (at most 64 for
 * dots_acc: 512 KiB). */
#include "cuda_internal.h"

static void cu_dot_acc(ll_backend *be, real *dst, const real *a, const real *b, size_t n, const real *mul) {
    cudaStream_t s = ll_cuda_enter(be);
    if (n == 0) return;
    LL_CU(ll_cuda_dot_acc(s, LL_CUDA_F32, dst, a, b, n, mul, ll_cuda_scratch(be, ll_cuda_reduce_scratch_bytes(1))));
}

static void cu_sumsq(ll_backend *be, double *acc, const real *x, size_t n) {
    cudaStream_t s = ll_cuda_enter(be);
    if (n == 0) return;
    LL_CU(ll_cuda_sumsq(s, LL_CUDA_F32, acc, x, n, ll_cuda_scratch(be, ll_cuda_reduce_scratch_bytes(1))));
}

static void cu_grad_finish(ll_backend *be, double *stats, double grad_scale, double clip_norm, int phi_step) {
    LL_CU(ll_cuda_grad_finish(ll_cuda_enter(be), stats, grad_scale, clip_norm, phi_step));
}

static void cu_adam(ll_backend *be, real *p, const real *g, real *m, real *v, size_t n, real lr, real b1, real b2,
                    real eps, real wd, const double *stats, int t_slot) {
    LL_CU(ll_cuda_adam(ll_cuda_enter(be), p, g, m, v, n, lr, b1, b2, eps, wd, stats, t_slot, NULL));
}

/* DLCL: xs/ys are host arrays of device pointers; the launchers copy them into
 * kernel arguments (no upload). */
static void cu_weighted_sum(ll_backend *be, real *y, const real *const *xs, const real *w, int k, size_t n) {
    LL_CU(ll_cuda_weighted_sum(ll_cuda_enter(be), LL_CUDA_F32, y, (const void *const *)xs, w, k, n));
}

static void cu_weighted_scatter(ll_backend *be, real *const *ys, const real *w, const real *x, int k, size_t n) {
    LL_CU(ll_cuda_weighted_scatter(ll_cuda_enter(be), LL_CUDA_F32, (void *const *)ys, w, x, k, n));
}

static void cu_dots_acc(ll_backend *be, real *dst, const real *x, const real *const *ys, int k, size_t n) {
    cudaStream_t s = ll_cuda_enter(be);
    if (n == 0 || k <= 0) return;
    int kc = k < LL_CUDA_DLCL_CHUNK ? k : LL_CUDA_DLCL_CHUNK;
    void *sc = ll_cuda_scratch(be, ll_cuda_reduce_scratch_bytes(kc));
    LL_CU(ll_cuda_dots_acc(s, LL_CUDA_F32, dst, x, (const void *const *)ys, k, n, sc));
}

/* Scratch reserved when the backend is built, so that the ops' temporary
 * buffers (a few MB at NMT batch sizes: docs/cuda-backend.md, Scratch) never
 * make it grow -- and allocate -- inside the training loop.  The scratch
 * allocator rounds 16 MiB up to 24 MiB. */
#define LL_CUDA_SCRATCH_RESERVE ((size_t)16 << 20)

void ll_cuda_register_step(ll_backend *be) {
    ll_cuda_enter(be);
    (void)ll_cuda_scratch(be, LL_CUDA_SCRATCH_RESERVE);
    be->dot_acc = cu_dot_acc;
    be->sumsq = cu_sumsq;
    be->grad_finish = cu_grad_finish;
    be->adam = cu_adam;
    be->weighted_sum = cu_weighted_sum;
    be->weighted_scatter = cu_weighted_scatter;
    be->dots_acc = cu_dots_acc;
}
