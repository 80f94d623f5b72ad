/* Op-table wrappers for the pointwise ops (kernels/elementwise.cu): bias,
 * ReLU, dropout, adds, scaling and the gated residual forms.  fp32 today
 * (real == float); the launchers take a dtype, so bf16 activations are a
 * change of LL_CUDA_F32 below once the op table carries types. */
#include "cuda_internal.h"

static void cu_bias_fwd(ll_backend *be, real *y, const real *b, int N, int C) {
    LL_CU(ll_cuda_bias_fwd(ll_cuda_enter(be), LL_CUDA_F32, y, b, N, C));
}

static void cu_bias_set(ll_backend *be, real *y, const real *b, int N, int C) {
    LL_CU(ll_cuda_bias_set(ll_cuda_enter(be), LL_CUDA_F32, y, b, N, C));
}

static void cu_bias_bwd(ll_backend *be, real *db, const real *dy, int N, int C) {
    cudaStream_t s = ll_cuda_enter(be);
    size_t nb = ll_cuda_bias_bwd_scratch_bytes(N, C);
    if (!nb) return;
    LL_CU(ll_cuda_bias_bwd(s, LL_CUDA_F32, db, dy, N, C, ll_cuda_scratch(be, nb)));
}

static void cu_relu_fwd(ll_backend *be, real *x, size_t n) {
    LL_CU(ll_cuda_relu_fwd(ll_cuda_enter(be), LL_CUDA_F32, x, n));
}

static void cu_relu_bwd(ll_backend *be, real *dy, const real *y, size_t n) {
    LL_CU(ll_cuda_relu_bwd(ll_cuda_enter(be), LL_CUDA_F32, dy, y, n));
}

static void cu_dropout_fwd(ll_backend *be, real *x, uint8_t *mask, size_t n, real p, const ll_philox *rng,
                           uint64_t offset) {
    cudaStream_t s = ll_cuda_enter(be);
    if (p > 0 && !rng) ll_die("dropout_fwd: p = %g needs a Philox stream", (double)p);
    ll_philox r = {{0, 0}, {0, 0}};
    if (rng) r = *rng; /* by value into the kernel's arguments */
    LL_CU(ll_cuda_dropout_fwd(s, LL_CUDA_F32, x, mask, n, p, r, offset));
}

static void cu_dropout_bwd(ll_backend *be, real *dx, const uint8_t *mask, size_t n, real p) {
    LL_CU(ll_cuda_dropout_bwd(ll_cuda_enter(be), LL_CUDA_F32, dx, mask, n, p));
}

static void cu_add(ll_backend *be, real *y, const real *a, const real *b, size_t n) {
    LL_CU(ll_cuda_add(ll_cuda_enter(be), LL_CUDA_F32, y, a, b, n));
}

static void cu_add_scaled(ll_backend *be, real *y, const real *a, const real *b, real alpha, size_t n) {
    LL_CU(ll_cuda_add_scaled(ll_cuda_enter(be), LL_CUDA_F32, y, a, b, alpha, n));
}

static void cu_acc(ll_backend *be, real *dst, const real *src, size_t n) {
    LL_CU(ll_cuda_acc(ll_cuda_enter(be), LL_CUDA_F32, dst, src, n));
}

static void cu_scale(ll_backend *be, real *x, real s, size_t n) {
    LL_CU(ll_cuda_scale(ll_cuda_enter(be), LL_CUDA_F32, x, s, n));
}

static void cu_add_gated(ll_backend *be, real *y, const real *a, const real *b, const real *g1, const real *g2,
                         size_t n) {
    LL_CU(ll_cuda_add_gated(ll_cuda_enter(be), LL_CUDA_F32, y, a, b, g1, g2, n));
}

static void cu_scale_gated(ll_backend *be, real *x, const real *g1, const real *g2, size_t n) {
    LL_CU(ll_cuda_scale_gated(ll_cuda_enter(be), LL_CUDA_F32, x, g1, g2, n));
}

void ll_cuda_register_elementwise(ll_backend *be) {
    be->bias_fwd = cu_bias_fwd;
    be->bias_bwd = cu_bias_bwd;
    be->bias_set = cu_bias_set;
    be->relu_fwd = cu_relu_fwd;
    be->relu_bwd = cu_relu_bwd;
    be->dropout_fwd = cu_dropout_fwd;
    be->dropout_bwd = cu_dropout_bwd;
    be->add = cu_add;
    be->add_scaled = cu_add_scaled;
    be->acc = cu_acc;
    be->scale = cu_scale;
    be->add_gated = cu_add_gated;
    be->scale_gated = cu_scale_gated;
}
