/* Op-table wrappers for the embedding ops (kernels/embed.cu).  out, emb (the
 * weight copy) and dout are in the activation dtype; pos and demb are fp32. */
#include "cuda_internal.h"

static void cu_embed_fwd(ll_backend *be, ll_act *out, const int32_t *tok, const ll_act *emb, const real *pos,
                         int pos_offset, const int *pos_at, real scale, int N, int T, int C, int pad) {
    LL_CU(ll_cuda_embed_fwd(ll_cuda_enter(be), ll_cuda_act(be), out, tok, emb, pos, pos_offset, pos_at, scale, N, T, C,
                            pad));
}

/* Scratch: 3 N ints plus CUB's sort storage (a few N ints): grows with the
 * largest batch's token count. */
static void cu_embed_bwd(ll_backend *be, real *demb, const ll_act *dout, const int32_t *tok, real scale, int N, int C,
                         int pad) {
    cudaStream_t s = ll_cuda_enter(be);
    size_t nb = ll_cuda_embed_bwd_scratch_bytes(N);
    if (!nb) return;
    LL_CU(ll_cuda_embed_bwd(s, ll_cuda_act(be), demb, dout, tok, scale, N, C, pad, ll_cuda_scratch(be, nb), nb));
}

void ll_cuda_register_embed(ll_backend *be) {
    be->embed_fwd = cu_embed_fwd;
    be->embed_bwd = cu_embed_bwd;
}
