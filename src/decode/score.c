/* Forced decoding: the model's log-probability of given translations
 * (fairseq's --score-reference, Marian's marian-scorer, CTranslate2's
 * score_batch).  Pairs sorted by their longer side are cut into batches and
 * run through the teacher-forced forward (ll_model_token_logprobs): one pass
 * over all positions, where the search takes one step per token. */
#include <stdlib.h>
#include <string.h>

#include "decode_internal.h"
#include "ll/decode.h"
#include "ll/latent.h"

typedef struct {
    const int32_t *const *src, *const *tgt;
    const int *slen, *tlen;
    int32_t bos;
    float **pos;
} score_job;

static void score_batch(ll_model *m, const ll_len_idx *ord, const ll_batch_span *bs, uint64_t draw, void *ctx) {
    const score_job *j = ctx;
    ll_latent_inference_draw(m, draw); /* sample mode: this batch's own layers (no-op otherwise) */
    const int B = bs->B;
    int S = 1, T = 1;
    for (int k = 0; k < B; k++) {
        const int i = ord[bs->first + k].idx;
        if (j->slen[i] > S) S = j->slen[i];
        if (j->tlen[i] > T) T = j->tlen[i];
    }
    ll_batch b = {.B = B, .S = S, .T = T};
    b.src = ll_malloc(sizeof(int32_t) * (size_t)B * S);
    b.tgt_in = ll_malloc(sizeof(int32_t) * (size_t)B * T);
    b.tgt_out = ll_malloc(sizeof(int32_t) * (size_t)B * T);
    b.src_len = ll_malloc(sizeof(int) * B);
    b.tgt_len = ll_malloc(sizeof(int) * B);
    for (int k = 0; k < B; k++) {
        const int i = ord[bs->first + k].idx, sl = j->slen[i], tl = j->tlen[i];
        for (int t = 0; t < S; t++) b.src[(size_t)k * S + t] = t < sl ? j->src[i][t] : LL_PAD;
        for (int t = 0; t < T; t++) {
            /* the decoder reads BOS + y[:-1] and predicts y (EOS last), as in training */
            b.tgt_in[(size_t)k * T + t] = t == 0 ? j->bos : t < tl ? j->tgt[i][t - 1] : LL_PAD;
            b.tgt_out[(size_t)k * T + t] = t < tl ? j->tgt[i][t] : LL_PAD;
        }
        b.src_len[k] = sl;
        b.tgt_len[k] = tl;
        b.n_src_tokens += sl;
        b.n_tgt_tokens += tl;
    }
    real *lp = ll_malloc(sizeof(real) * (size_t)B * T);
    ll_model_token_logprobs(m, &b, lp);
    for (int k = 0; k < B; k++) {
        const int i = ord[bs->first + k].idx;
        for (int t = 0; t < j->tlen[i]; t++) j->pos[i][t] = (float)lp[(size_t)k * T + t];
    }
    free(lp);
    free(b.src);
    free(b.tgt_in);
    free(b.tgt_out);
    free(b.src_len);
    free(b.tgt_len);
}

void ll_score_ids(ll_model *m, const int32_t *const *src, const int *slen, const int32_t *const *tgt, const int *tlen,
                  int n, const ll_score_opts *o, float **pos, ll_translate_stats *st) {
    const double t0 = ll_now();
    ll_translate_stats acc = {0};
    ll_len_idx *ord = ll_malloc(sizeof(ll_len_idx) * (n ? n : 1));
    for (int i = 0; i < n; i++) {
        if (slen[i] < 1 || tlen[i] < 1 || src[i][slen[i] - 1] != LL_EOS || tgt[i][tlen[i] - 1] != LL_EOS ||
            slen[i] > m->hp.max_pos || tlen[i] > m->hp.max_pos)
            ll_die("ll_score_ids: pair %d: source %d and reference %d tokens (each 1..%d, ending with EOS)", i,
                   slen[i], tlen[i], m->hp.max_pos);
        ord[i] = (ll_len_idx){slen[i] > tlen[i] ? slen[i] : tlen[i], i};
        acc.src_tokens += slen[i];
        acc.out_tokens += tlen[i];
    }
    score_job job = {src, tgt, slen, tlen, o->bos, pos};
    acc.batches = ll_run_batches(m, ord, n, o->max_sents > 0 ? o->max_sents : 256, o->max_tokens,
                                 ll_batch_workers(o->inter_threads), 0, o->draw_base, score_batch, &job);
    acc.sents = n;
    free(ord);
    acc.seconds = ll_now() - t0;
    if (st) *st = acc;
}
