/* Backend selection and completeness check. */
#include "ll/backend.h"

#include <stddef.h>

const char *ll_backend_missing(const ll_backend *be) {
#define NEED(op) \
    if (!be->op) return #op;
    NEED(alloc) NEED(free) NEED(upload) NEED(download) NEED(memset0) NEED(copy) NEED(sync) NEED(convert) NEED(gemm)
    NEED(layernorm_fwd) NEED(layernorm_bwd) NEED(embed_fwd) NEED(embed_bwd)
    NEED(relu_fwd) NEED(relu_bwd) NEED(dropout_fwd) NEED(dropout_bwd) NEED(add) NEED(add_scaled) NEED(acc)
    NEED(add_gated) NEED(scale_gated) NEED(dot_acc) NEED(weighted_sum) NEED(weighted_scatter) NEED(dots_acc)
    NEED(latent_sample) NEED(latent_grad) NEED(latent_kl) NEED(latent_lk) NEED(latent_depth) NEED(latent_q)
    NEED(ald_pool) NEED(ald_loss) NEED(ald_unpool) NEED(sumsq) NEED(grad_finish)
    NEED(attention_fwd) NEED(attention_bwd) NEED(xent_fwd_bwd) NEED(sym_kl) NEED(log_softmax) NEED(adam)
    NEED(copy_rows) NEED(reorder_rows) NEED(beam_topk)
#undef NEED
    return NULL;
}

#if !defined(LL_WITH_CUDA) || defined(LL_REAL_DOUBLE)
/* Built without CUDA (or the double-precision test build): no devices. */
ll_backend *ll_backend_cuda(int device) {
    (void)device;
    ll_fail("this build of ll has no CUDA backend (configure with -DLL_CUDA=ON on a machine with nvcc)");
    return NULL;
}
ll_backend *ll_backend_cuda_precision(int device, ll_dtype act) {
    (void)act;
    return ll_backend_cuda(device);
}
int ll_cuda_device_count(void) { return 0; }
#endif
