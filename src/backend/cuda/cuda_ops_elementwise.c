/* Op-table wrappers for the pointwise ops (kernels/elementwise.cu): ReLU,
 * dropout, the residual adds and the gated forms; the fused residual branch
 * (kernels/residual.cu).  Activations are in the backend's dtype
 * (ll_cuda_act: the fp32 or bf16 instance of each kernel); gates are fp32
 * device scalars. */
#include "cuda_internal.h"

static void cu_relu_fwd(ll_backend *be, ll_act *x, size_t n) {
    LL_CU(ll_cuda_relu_fwd(ll_cuda_enter(be), ll_cuda_act(be), x, n));
}

static void cu_relu_bwd(ll_backend *be, ll_act *dy, const ll_act *y, size_t n) {
    LL_CU(ll_cuda_relu_bwd(ll_cuda_enter(be), ll_cuda_act(be), dy, y, n));
}

static void cu_dropout_fwd(ll_backend *be, ll_act *x, uint8_t *mask, size_t n, real p, const ll_philox *rng,
                           uint64_t offset) {
    cudaStream_t s = ll_cuda_enter(be);
    if (p > 0 && !rng) ll_die("dropout_fwd: p = %g needs a Philox stream", (double)p);
    ll_philox r = {{0, 0}, {0, 0}, NULL};
    if (rng) r = *rng; /* by value into the kernel's arguments */
    LL_CU(ll_cuda_dropout_fwd(s, ll_cuda_act(be), x, mask, n, p, r, offset));
}

static void cu_dropout_bwd(ll_backend *be, ll_act *dx, const uint8_t *mask, size_t n, real p) {
    LL_CU(ll_cuda_dropout_bwd(ll_cuda_enter(be), ll_cuda_act(be), dx, mask, n, p));
}

static void cu_add(ll_backend *be, ll_act *y, const ll_act *a, const ll_act *b, size_t n) {
    LL_CU(ll_cuda_add(ll_cuda_enter(be), ll_cuda_act(be), y, a, b, n));
}

static void cu_add_scaled(ll_backend *be, ll_act *y, const ll_act *a, const ll_act *b, real alpha, size_t n) {
    LL_CU(ll_cuda_add_scaled(ll_cuda_enter(be), ll_cuda_act(be), y, a, b, alpha, n));
}

static void cu_acc(ll_backend *be, ll_act *dst, const ll_act *src, size_t n) {
    LL_CU(ll_cuda_acc(ll_cuda_enter(be), ll_cuda_act(be), dst, src, n));
}

static void cu_add_gated(ll_backend *be, ll_act *y, const ll_act *a, const ll_act *b, const real *g1, const real *g2,
                         size_t n) {
    LL_CU(ll_cuda_add_gated(ll_cuda_enter(be), ll_cuda_act(be), y, a, b, g1, g2, n));
}

static void cu_scale_gated(ll_backend *be, ll_act *x, const real *g1, const real *g2, size_t n) {
    LL_CU(ll_cuda_scale_gated(ll_cuda_enter(be), ll_cuda_act(be), x, g1, g2, n));
}

/* The residual branch (kernels/residual.cu): the Philox stream by value. */
static ll_philox rng_or_zero(const char *op, real p, const ll_philox *rng) {
    if (p > 0 && !rng) ll_die("%s: dropout %g needs a Philox stream", op, (double)p);
    ll_philox r = {{0, 0}, {0, 0}, NULL};
    if (rng) r = *rng;
    return r;
}

static void cu_residual_fwd(ll_backend *be, ll_act *y, ll_act *s, const ll_act *x, const real *g1, const real *g2,
                            size_t n, real p, const ll_philox *rng, uint64_t offset) {
    cudaStream_t st = ll_cuda_enter(be);
    const ll_philox r = rng_or_zero("residual_fwd", p, rng);
    LL_CU(ll_cuda_residual_fwd(st, ll_cuda_act(be), y, s, x, g1, g2, n, p, r, offset));
}

static void cu_residual_ln_fwd(ll_backend *be, ll_act *y, ll_act *s, const ll_act *x, const real *g1, const real *g2,
                               real p, const ll_philox *rng, uint64_t offset, ll_act *u, real *mean, real *rstd,
                               const real *w, const real *b, int N, int C) {
    cudaStream_t st = ll_cuda_enter(be);
    const ll_philox r = rng_or_zero("residual_ln_fwd", p, rng);
    LL_CU(ll_cuda_residual_ln_fwd(st, ll_cuda_act(be), y, s, x, g1, g2, p, r, offset, u, mean, rstd, w, b, N, C));
}

static void cu_residual_bwd(ll_backend *be, ll_act *ds, ll_act *dx, int dx_mode, const ll_act *s, real *dg1,
                            real *dg2, const real *g1, const real *g2, size_t n, real p, const ll_philox *rng,
                            uint64_t offset) {
    cudaStream_t st = ll_cuda_enter(be);
    const ll_philox r = rng_or_zero("residual_bwd", p, rng);
    void *sc = dg1 || dg2 ? ll_cuda_scratch(be, ll_cuda_residual_scratch_bytes()) : NULL;
    LL_CU(ll_cuda_residual_bwd(st, ll_cuda_act(be), ds, dx, dx_mode, s, dg1, dg2, g1, g2, n, p, r, offset, sc,
                               sc ? ll_cuda_ticket(be) : NULL));
}

void ll_cuda_register_elementwise(ll_backend *be) {
    be->residual_fwd = cu_residual_fwd;
    be->residual_bwd = cu_residual_bwd;
    be->residual_ln_fwd = cu_residual_ln_fwd;
    be->relu_fwd = cu_relu_fwd;
    be->relu_bwd = cu_relu_bwd;
    be->dropout_fwd = cu_dropout_fwd;
    be->dropout_bwd = cu_dropout_bwd;
    be->add = cu_add;
    be->add_scaled = cu_add_scaled;
    be->acc = cu_acc;
    be->add_gated = cu_add_gated;
    be->scale_gated = cu_scale_gated;
}
