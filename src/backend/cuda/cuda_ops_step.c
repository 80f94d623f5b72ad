/* Op-table wrappers for the training-step ops: gate reductions (dot_acc),
 * DLCL (kernels/dlcl.cu), the gradient norm and its decisions (sumsq,
 * grad_finish: kernels/reduce.cu) and Adam (kernels/adam.cu).  Activations
 * (dot_acc's, DLCL's entries) are in the backend's dtype; gates, DLCL
 * weights, gradients and Adam's state are fp32.  Scratch: the
 * reductions' block partials, 8 KiB per simultaneous sum (at most 64 for
 * dots_acc: 512 KiB). */
#include "cuda_internal.h"

static void cu_dot_acc(ll_backend *be, real *dst, const ll_act *a, const ll_act *b, size_t n, const real *mul) {
    cudaStream_t s = ll_cuda_enter(be);
    if (n == 0) return;
    LL_CU(ll_cuda_dot_acc(s, ll_cuda_act(be), dst, a, b, n, mul,
                          ll_cuda_scratch(be, ll_cuda_reduce_scratch_bytes(1))));
}

/* x is an fp32 gradient (the op takes real *), whatever the activations' type */
static void cu_sumsq(ll_backend *be, double *acc, const real *x, size_t n) {
    cudaStream_t s = ll_cuda_enter(be);
    if (n == 0) return;
    LL_CU(ll_cuda_sumsq(s, LL_CUDA_F32, acc, x, n, ll_cuda_scratch(be, ll_cuda_reduce_scratch_bytes(1))));
}

static void cu_grad_finish(ll_backend *be, double *stats, double grad_scale, double clip_norm, int phi_step) {
    LL_CU(ll_cuda_grad_finish(ll_cuda_enter(be), stats, grad_scale, clip_norm, phi_step));
}

/* p_act: the activation-dtype weight copy.  bf16: written by the Adam kernel
 * in the same pass.  fp32 with a separate copy (not used by the model, whose
 * fp32 copy aliases the master, but the op allows it): a device copy after. */
static void cu_adam(ll_backend *be, real *p, ll_act *p_act, const real *g, real *m, real *v, size_t n, real lr,
                    real b1, real b2, real eps, real wd, const double *stats, int t_slot) {
    cudaStream_t s = ll_cuda_enter(be);
    const int bf16 = be->act == LL_BF16 && p_act;
    LL_CU(ll_cuda_adam(s, p, g, m, v, n, lr, b1, b2, eps, wd, stats, t_slot, bf16 ? (uint16_t *)p_act : NULL));
    if (p_act && !bf16 && (void *)p_act != (void *)p && n)
        LL_CU(cudaMemcpyAsync(p_act, p, n * sizeof(real), cudaMemcpyDeviceToDevice, s));
}

static void cu_spike_check(ll_backend *be, double *stats, double *state, int window, double grad_scale, double z_loss,
                           double z_gnorm) {
    LL_CU(ll_cuda_spike_check(ll_cuda_enter(be), stats, state, window, grad_scale, z_loss, z_gnorm));
}

static void cu_ema(ll_backend *be, real *e, const real *p, size_t n, real decay, const double *stats) {
    LL_CU(ll_cuda_ema(ll_cuda_enter(be), e, p, n, decay, stats));
}

/* DLCL: xs/ys are host arrays of device pointers; the launchers copy them into
 * kernel arguments (no upload). */
static void cu_weighted_sum(ll_backend *be, ll_act *y, const ll_act *const *xs, const real *w, int k, size_t n) {
    const size_t sb = ll_cuda_weighted_sum_scratch_bytes(ll_cuda_act(be), k, n);
    LL_CU(ll_cuda_weighted_sum(ll_cuda_enter(be), ll_cuda_act(be), y, (const void *const *)xs, w, k, n,
                               sb ? ll_cuda_scratch(be, sb) : NULL));
}

static void cu_weighted_scatter(ll_backend *be, ll_act *const *ys, const real *w, const ll_act *x, int k, size_t n) {
    LL_CU(ll_cuda_weighted_scatter(ll_cuda_enter(be), ll_cuda_act(be), (void *const *)ys, w, x, k, n));
}

static void cu_dots_acc(ll_backend *be, real *dst, const ll_act *x, const ll_act *const *ys, int k, size_t n) {
    cudaStream_t s = ll_cuda_enter(be);
    if (n == 0 || k <= 0) return;
    int kc = k < LL_CUDA_DLCL_CHUNK ? k : LL_CUDA_DLCL_CHUNK;
    void *sc = ll_cuda_scratch(be, ll_cuda_reduce_scratch_bytes(kc));
    LL_CU(ll_cuda_dots_acc(s, ll_cuda_act(be), dst, x, (const void *const *)ys, k, n, sc));
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
    be->ema = cu_ema;
    be->spike_check = cu_spike_check;
    be->weighted_sum = cu_weighted_sum;
    be->weighted_scatter = cu_weighted_scatter;
    be->dots_acc = cu_dots_acc;
}
