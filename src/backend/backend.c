/* Backend selection and completeness check. */
#include "ll/backend.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

const char *ll_backend_missing(const ll_backend *be) {
#define NEED(op) \
    if (!be->op) return #op;
    NEED(alloc) NEED(free) NEED(upload) NEED(download) NEED(memset0) NEED(copy) NEED(sync) NEED(convert) NEED(gemm)
    NEED(layernorm_fwd) NEED(layernorm_bwd) NEED(embed_fwd) NEED(embed_bwd)
    NEED(relu_fwd) NEED(relu_bwd) NEED(dropout_fwd) NEED(dropout_bwd) NEED(add) NEED(add_scaled) NEED(acc)
    NEED(add_gated) NEED(scale_gated) NEED(dot_acc) NEED(residual_fwd) NEED(residual_bwd) NEED(residual_ln_fwd) NEED(weighted_sum) NEED(weighted_scatter) NEED(dots_acc)
    NEED(latent_sample) NEED(latent_grad) NEED(latent_kl) NEED(latent_lk) NEED(latent_depth) NEED(latent_q)
    NEED(ald_pool) NEED(ald_loss) NEED(ald_unpool) NEED(sumsq) NEED(grad_finish) NEED(spike_check)
    NEED(attention_fwd) NEED(attention_bwd) NEED(xent_fwd_bwd) NEED(sym_kl) NEED(log_softmax) NEED(pick_logp) NEED(ensemble_mix) NEED(add_col) NEED(fill_at) NEED(expand_cols) NEED(adam) NEED(ema)
    NEED(copy_rows) NEED(reorder_rows) NEED(beam_topk) NEED(sample_draw) NEED(attention_cached) NEED(beam_ancestry) NEED(attn_align) NEED(attn_probs) NEED(align_argmax)
#undef NEED
    return NULL;
}

#if defined(LL_WITH_CUDA) && !defined(LL_REAL_DOUBLE)
#include "ll_cuda.h"
int ll_backend_set_tf32(ll_backend *be, int on) {
    if (!be || strcmp(be->name, "cuda") != 0) return 0;
    ll_cuda_gemm_set_math(be, on ? LL_CUDA_MATH_TF32 : LL_CUDA_MATH_EXACT);
    return 1;
}
uint64_t ll_backend_gemm_fallbacks(ll_backend *be) {
    return be && !strcmp(be->name, "cuda") ? ll_cuda_gemm_fallbacks(be) : 0;
}
uint64_t ll_backend_side_gemms(ll_backend *be) {
    return be && !strcmp(be->name, "cuda") ? ll_cuda_side_gemms(be) : 0;
}
uint64_t ll_backend_side_ln_finishes(ll_backend *be) {
    return be && !strcmp(be->name, "cuda") ? ll_cuda_side_finishes(be) : 0;
}
int ll_backend_pdl(ll_backend *be) {
    return be && !strcmp(be->name, "cuda") ? ll_cuda_pdl_launch() : 0;
}
int ll_backend_graphs_kept(ll_backend *be) {
    return be && !strcmp(be->name, "cuda") ? ll_cuda_graphs_kept() : 0;
}
int ll_backend_gemm_survey(ll_backend *be, const ll_gemm_desc *g, int max, int reps, ll_gemm_algo_time *out) {
    return be && !strcmp(be->name, "cuda") ? ll_cuda_gemm_survey(be, g, max, reps, out) : 0;
}
void ll_backend_gemm_tune_stats(ll_backend *be, uint64_t *tuned, uint64_t *switched) {
    *tuned = *switched = 0;
    if (be && !strcmp(be->name, "cuda")) ll_cuda_gemm_tune_stats(be, tuned, switched);
}
#else
uint64_t ll_backend_gemm_fallbacks(ll_backend *be) {
    (void)be;
    return 0;
}
uint64_t ll_backend_side_gemms(ll_backend *be) {
    (void)be;
    return 0;
}
uint64_t ll_backend_side_ln_finishes(ll_backend *be) {
    (void)be;
    return 0;
}
int ll_backend_pdl(ll_backend *be) {
    (void)be;
    return 0;
}
int ll_backend_graphs_kept(ll_backend *be) {
    (void)be;
    return 0;
}
int ll_backend_gemm_survey(ll_backend *be, const ll_gemm_desc *g, int max, int reps, ll_gemm_algo_time *out) {
    (void)be, (void)g, (void)max, (void)reps, (void)out;
    return 0;
}
void ll_backend_gemm_tune_stats(ll_backend *be, uint64_t *tuned, uint64_t *switched) {
    (void)be;
    *tuned = *switched = 0;
}
int ll_backend_set_tf32(ll_backend *be, int on) {
    (void)be, (void)on;
    return 0;
}
#endif

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

/* train.device / lldecode --device: "cpu", "cuda" (GPU `gpu`; an error when
 * there is none or the backend of dtype `act` is incomplete) or "auto" (that
 * GPU when present and complete, else the CPU, saying why). */
ll_backend *ll_backend_select(const char *device, ll_dtype act, int gpu, const char *setting) {
    if (!strcmp(device, "cpu")) return ll_backend_cpu_precision(act);
    const int automatic = !strcmp(device, "auto");
    if (!automatic && strcmp(device, "cuda"))
        return ll_fail("%s %s: expected auto, cpu or cuda", setting, device), NULL;
    const int n = ll_cuda_device_count();
    ll_backend *cb = n > gpu ? ll_backend_cuda_precision(gpu, act) : NULL;
    const char *missing = cb ? ll_backend_missing(cb) : NULL;
    if (cb && !missing) {
#ifdef LL_CUDA_EMU /* the CPU emulation of CUDA (tests only, tests/cuda_emu) */
        ll_log("%s %s: CUDA device %d (%d present), %s activations: EMULATED on the CPU (LL_CUDA_EMU test build), "
               "not a GPU",
               setting, device, gpu, n, ll_dtype_str(act));
#else
        ll_log("%s %s: CUDA device %d (%d present), %s activations", setting, device, gpu, n, ll_dtype_str(act));
#endif
        return cb;
    }
    char why[512];
    if (n == 0)
        snprintf(why, sizeof why, "no CUDA device is available (no GPU, no NVIDIA driver, or ll was built without CUDA)");
    else if (n <= gpu)
        snprintf(why, sizeof why, "no CUDA device %d (%d present: one rank per GPU)", gpu, n);
    else if (!cb)
        snprintf(why, sizeof why, "%s", ll_errbuf());
    else
        snprintf(why, sizeof why, "the %s CUDA backend does not implement op '%s'", ll_dtype_str(act), missing);
    if (!automatic || (n > 0 && n <= gpu)) /* auto with too few GPUs: no rank on the CPU beside GPU ranks */
        return ll_fail("%s %s: %s; use cpu%s", setting, device, why, automatic ? "" : " (or auto)"), NULL;
    ll_log("%s auto: %s: using the CPU (%s activations)", setting, why, ll_dtype_str(act));
    return ll_backend_cpu_precision(act);
}

void ll_graph_stats_add(ll_graph_stats *acc, const ll_graph_stats *b, const ll_graph_stats *a) {
    acc->captures += b->captures - a->captures, acc->nodes += b->nodes - a->nodes;
    acc->updates += b->updates - a->updates, acc->instantiations += b->instantiations - a->instantiations;
    acc->replays += b->replays - a->replays, acc->launches += b->launches - a->launches;
    acc->conditionals += b->conditionals - a->conditionals, acc->tune_drops += b->tune_drops - a->tune_drops;
    acc->refusals += b->refusals - a->refusals, acc->unnamed += b->unnamed - a->unnamed;
}
