/* CUDA host wrappers of the incremental-decoding ops (kernels/decode.cu):
 * the KV-cache write is one strided cudaMemcpy2DAsync; the reorder, the
 * ancestry tables, the cached self-attention, the beam top-k, the sampling draw and the hard
 * alignment are kernels.  Nothing here synchronises. */
#include <cuda_runtime_api.h>

#include "cuda_internal.h"

/* A copy moves bytes: every activation dtype. */
static void cu_copy_rows(ll_backend *be, ll_act *dst, size_t dst_stride, const ll_act *src, size_t src_stride, int rows,
                         size_t n, const int *at, size_t at_stride) {
    if (rows <= 0 || n == 0) return;
    const size_t e = ll_act_size(be);
    if (at) {
        ll_cuda_check_launch(ll_cuda_copy_rows_at(ll_cuda_enter(be), dst, dst_stride * e, src, src_stride * e, rows,
                                                  n * e, at, at_stride * e),
                             "copy_rows");
        return;
    }
    ll_cuda_check_launch(cudaMemcpy2DAsync(dst, dst_stride * e, src, src_stride * e, n * e, (size_t)rows,
                                           cudaMemcpyDeviceToDevice, ll_cuda_enter(be)),
                         "copy_rows");
}

static void cu_reorder_rows(ll_backend *be, ll_act *buf, ll_act *scratch, const int *from, int rows, size_t n,
                            size_t stride) {
    ll_cuda_check_launch(ll_cuda_reorder_rows(ll_cuda_enter(be), buf, scratch, from, rows, n * ll_act_size(be),
                                              stride * ll_act_size(be)),
                         "reorder_rows");
}

/* logp in the activation dtype: the kernel is templated (fp32 or bf16 loads,
 * double scores), so both backends decode on the GPU; any k (beam) the CLI
 * accepts (above LL_CUDA_TOPK_MAX a slower kernel, same result). */
static void cu_beam_topk(ll_backend *be, double *score, real *lp, int32_t *flat, const ll_act *logp,
                         const double *cum, const uint8_t *mode, int groups, int beam, int V, int k, int div_groups,
                         double div_strength, int pad, int bos, int eos) {
    ll_cuda_check_launch(ll_cuda_beam_topk(ll_cuda_enter(be), ll_cuda_act(be), score, lp, flat, logp, cum, mode, groups,
                                           beam, V, k, div_groups, div_strength, pad, bos, eos),
                         "beam_topk");
}

/* the kernel's scratch from the lane's grow-only device scratch (a block's slice per row it draws) */
static void cu_sample_draw(ll_backend *be, int32_t *tok, double *lq, const ll_act *logp, const ll_sample_row *row,
                           const int32_t *ban, int rows, int V, const ll_sample_params *p) {
    if (rows <= 0) return;
    void *scratch = ll_cuda_scratch(be, ll_cuda_sample_draw_scratch_bytes(rows, V));
    ll_cuda_check_launch(ll_cuda_sample_draw(ll_cuda_enter(be), ll_cuda_act(be), tok, lq, logp, row, ban, rows, V, p,
                                             scratch),
                         "sample_draw");
}

static void cu_attention_cached(ll_backend *be, ll_act *out, const ll_act *q, int q_stride, const ll_act *kv,
                                int kv_stride, size_t row_stride, const int *anc, int anc_stride, int n_keys,
                                const int *n_at, int rows, int H, int Dh) {
    ll_cuda_head_size_ok("attention_cached", Dh);
    ll_cuda_check_launch(ll_cuda_attention_cached(ll_cuda_enter(be), ll_cuda_act(be), out, q, q_stride, kv, kv_stride,
                                                  row_stride, anc, anc_stride, n_keys, n_at, rows, H, Dh),
                         "attention_cached");
}

static void cu_beam_ancestry(ll_backend *be, int *anc, int *scratch, const int *from, int rows, int t,
                             const int *t_at, int stride, int group) {
    ll_cuda_check_launch(ll_cuda_beam_ancestry(ll_cuda_enter(be), anc, scratch, from, rows, t, t_at, stride, group),
                         "beam_ancestry");
}

static void cu_attn_align(ll_backend *be, int32_t *idx, const ll_act *q, int q_stride, const ll_act *kv, int kv_stride,
                          const int *key_len, int sents, int per_sent, int S, int H, int Dh) {
    if (sizeof(float) * ((size_t)H * Dh + 2 * (size_t)S) > 48 * 1024)
        ll_die("--alignment: a model of width %d with %d source positions exceeds the CUDA kernel's 48 KiB of shared "
               "memory", H * Dh, S);
    ll_cuda_check_launch(ll_cuda_attn_align(ll_cuda_enter(be), ll_cuda_act(be), idx, q, q_stride, kv, kv_stride, key_len,
                                            sents, per_sent, S, H, Dh),
                         "attn_align");
}

static void cu_attn_probs(ll_backend *be, real *acc, int overwrite, real w, const ll_act *q, int q_stride,
                          const ll_act *kv, int kv_stride, const int *key_len, int sents, int per_sent, int S, int H,
                          int Dh) {
    if (sizeof(float) * ((size_t)H * Dh + 2 * (size_t)S) > 48 * 1024)
        ll_die("--alignment: a model of width %d with %d source positions exceeds the CUDA kernel's 48 KiB of shared "
               "memory", H * Dh, S);
    ll_cuda_check_launch(ll_cuda_attn_probs(ll_cuda_enter(be), ll_cuda_act(be), acc, overwrite, w, q, q_stride, kv,
                                            kv_stride, key_len, sents, per_sent, S, H, Dh),
                         "attn_probs");
}

static void cu_align_argmax(ll_backend *be, int32_t *idx, const real *acc, const int *key_len, int sents,
                            int per_sent, int S) {
    ll_cuda_check_launch(ll_cuda_align_argmax(ll_cuda_enter(be), idx, acc, key_len, sents, per_sent, S),
                         "align_argmax");
}

void ll_cuda_register_decode(ll_backend *be) {
    be->copy_rows = cu_copy_rows;
    be->reorder_rows = cu_reorder_rows;
    be->beam_topk = cu_beam_topk;
    be->sample_draw = cu_sample_draw;
    be->attention_cached = cu_attention_cached;
    be->beam_ancestry = cu_beam_ancestry;
    be->attn_align = cu_attn_align;
    be->attn_probs = cu_attn_probs;
    be->align_argmax = cu_align_argmax;
}
