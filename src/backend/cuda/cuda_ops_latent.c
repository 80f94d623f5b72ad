/* Op-table wrappers for the latent-depth ops (kernels/latent.cu) and ALD
 * (kernels/ald.cu).  The prior is a host struct: the launchers pass it to the
 * kernels by value.  Latent-depth tensors are all fp32; ALD reads/writes the
 * hidden states (h, dh) in the activation dtype, G and dG in fp32.  Scratch:
 * ALD's per-sentence losses (B doubles). */
#include "cuda_internal.h"

static void cu_latent_sample(ll_backend *be, real *z, real *dzda, const real *logits, int L, const ll_philox *rng,
                             real tau, int hard) {
    cudaStream_t s = ll_cuda_enter(be);
    if (!rng) ll_die("latent_sample needs a Philox stream");
    LL_CU(ll_cuda_latent_sample(s, z, dzda, logits, L, *rng, tau, hard));
}

static void cu_latent_grad(ll_backend *be, real *dlogits, const real *dgate, const real *dzda, int L) {
    LL_CU(ll_cuda_latent_grad(ll_cuda_enter(be), dlogits, dgate, dzda, L));
}

static void cu_latent_kl(ll_backend *be, real *dlogits, double *acc, const real *logits, const real *z,
                         const real *dzda, const ll_latent_prior *pr, int row, int reference, double weight) {
    LL_CU(ll_cuda_latent_kl(ll_cuda_enter(be), dlogits, acc, logits, z, dzda, pr, row, reference, weight));
}

static void cu_latent_lk(ll_backend *be, real *dlogits, double *acc, const real *z, const real *dzda,
                         const ll_latent_prior *pr, int K, int squared, double weight) {
    LL_CU(ll_cuda_latent_lk(ll_cuda_enter(be), dlogits, acc, z, dzda, pr, K, squared, weight));
}

static void cu_latent_depth(ll_backend *be, double *acc, const real *logits, const ll_latent_prior *pr) {
    LL_CU(ll_cuda_latent_depth(ll_cuda_enter(be), acc, logits, pr));
}

static void cu_latent_q(ll_backend *be, real *q, const real *logits, int L) {
    LL_CU(ll_cuda_latent_q(ll_cuda_enter(be), q, logits, L));
}

static void cu_ald_pool(ll_backend *be, real *G, const ll_act *h, const int *len, int B, int T, int C) {
    LL_CU(ll_cuda_ald_pool(ll_cuda_enter(be), ll_cuda_act(be), G, h, len, B, T, C));
}

static void cu_ald_loss(ll_backend *be, real *dG, double *acc, const real *G, int B, int C, real tau, const double *w) {
    cudaStream_t s = ll_cuda_enter(be);
    if (B <= 0) return;
    LL_CU(ll_cuda_ald_loss(s, dG, acc, G, B, C, tau, w, ll_cuda_scratch(be, ll_cuda_ald_scratch_bytes(B))));
}

static void cu_ald_unpool(ll_backend *be, ll_act *dh, const real *dG, const int *len, int B, int T, int C) {
    LL_CU(ll_cuda_ald_unpool(ll_cuda_enter(be), ll_cuda_act(be), dh, dG, len, B, T, C));
}

void ll_cuda_register_latent(ll_backend *be) {
    be->latent_sample = cu_latent_sample;
    be->latent_grad = cu_latent_grad;
    be->latent_kl = cu_latent_kl;
    be->latent_lk = cu_latent_lk;
    be->latent_depth = cu_latent_depth;
    be->latent_q = cu_latent_q;
    be->ald_pool = cu_ald_pool;
    be->ald_loss = cu_ald_loss;
    be->ald_unpool = cu_ald_unpool;
}
