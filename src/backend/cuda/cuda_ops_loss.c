/* Op-table wrappers for the vocabulary losses (kernels/losses.cu), logits and
 * log-probabilities in the activation dtype (fp32 math inside).  Scratch:
 * 2 doubles per row (per-row loss terms, summed in order into the stats). */
#include "cuda_internal.h"

static void cu_xent_fwd_bwd(ll_backend *be, ll_act *logits, const int32_t *target, int N, int V, real eps, int pad,
                            real grad_scale, double *acc) {
    cudaStream_t s = ll_cuda_enter(be);
    if (N <= 0 || V <= 0) return;
    void *sc = ll_cuda_scratch(be, ll_cuda_loss_scratch_bytes(N));
    LL_CU(ll_cuda_xent_fwd_bwd(s, ll_cuda_act(be), logits, target, N, V, eps, pad, grad_scale, acc, sc));
}

static void cu_sym_kl(ll_backend *be, const ll_act *lpa, const ll_act *lpb, ll_act *da, ll_act *db,
                      const int32_t *target, int N, int V, int pad, real alpha, double *acc) {
    cudaStream_t s = ll_cuda_enter(be);
    if (N <= 0 || V <= 0) return;
    void *sc = ll_cuda_scratch(be, ll_cuda_loss_scratch_bytes(N));
    LL_CU(ll_cuda_sym_kl(s, ll_cuda_act(be), lpa, lpb, da, db, target, N, V, pad, alpha, acc, sc));
}

static void cu_log_softmax(ll_backend *be, ll_act *x, int N, int V) {
    LL_CU(ll_cuda_log_softmax(ll_cuda_enter(be), ll_cuda_act(be), x, N, V));
}

static void cu_pick_logp(ll_backend *be, real *out, const ll_act *logp, const int32_t *target, int N, int V, int pad) {
    LL_CU(ll_cuda_pick_logp(ll_cuda_enter(be), ll_cuda_act(be), out, logp, target, N, V, pad));
}

static void cu_ensemble_mix(ll_backend *be, ll_act *acc, const ll_act *x, size_t n, double b, double c) {
    LL_CU(ll_cuda_ensemble_mix(ll_cuda_enter(be), ll_cuda_act(be), acc, x, n, b, c));
}

static void cu_add_col(ll_backend *be, ll_act *x, int rows, int V, int col, real val) {
    LL_CU(ll_cuda_add_col(ll_cuda_enter(be), ll_cuda_act(be), x, rows, V, col, (float)val));
}

static void cu_expand_cols(ll_backend *be, ll_act *dst, const ll_act *src, const int32_t *cols, int rows, int V, int K,
                           real fill) {
    LL_CU(ll_cuda_expand_cols(ll_cuda_enter(be), ll_cuda_act(be), dst, src, cols, rows, V, K, (float)fill));
}

static void cu_fill_at(ll_backend *be, ll_act *x, const int32_t *idx, int n, real val) {
    LL_CU(ll_cuda_fill_at(ll_cuda_enter(be), ll_cuda_act(be), x, idx, n, (float)val));
}

void ll_cuda_register_loss(ll_backend *be) {
    be->add_col = cu_add_col;
    be->expand_cols = cu_expand_cols;
    be->fill_at = cu_fill_at;
    be->ensemble_mix = cu_ensemble_mix;
    be->xent_fwd_bwd = cu_xent_fwd_bwd;
    be->sym_kl = cu_sym_kl;
    be->log_softmax = cu_log_softmax;
    be->pick_logp = cu_pick_logp;
}
