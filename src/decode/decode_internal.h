/* Shared by translate.c and score.c: sentences sorted by length, cut into
 * batches and run on the CPU's batch workers (one model replica each). */
#ifndef LL_DECODE_INTERNAL_H
#define LL_DECODE_INTERNAL_H

#include <stdint.h>

#include "ll/decode.h"
#include "ll/model.h"

typedef struct {
    int len, idx; /* sort key (padded length it stands for) and input position */
} ll_len_idx;

typedef struct {
    int first, B, S; /* sentences ord[first .. first+B), the longest key among them */
} ll_batch_span;

/* Run one batch on model m (the caller's model or a worker's replica); draw keys its latent sample. */
typedef void (*ll_batch_fn)(ll_model *m, const ll_len_idx *ord, const ll_batch_span *bs, uint64_t draw, void *ctx);

/* Batch workers for inter_threads (0: auto, one per thread; at most the thread count). */
int ll_batch_workers(int inter_threads);

/* Sort ord[ne] by length (ties by position), cut it into batches of at most
 * max_sents sentences and max_tokens = B x the longest key, and run fn over
 * them: on `workers` CPU replicas at once (batches then hold at most
 * ceil(ne / workers) sentences; pack: the replicas share the packed decoder
 * weights), else one after another.  Batch b draws with draw_base + b.
 * Returns the number of batches. */
int ll_run_batches(ll_model *m, ll_len_idx *ord, int ne, int max_sents, int max_tokens, int workers, int pack,
                   uint64_t draw_base, ll_batch_fn fn, void *ctx);

/* Sentence i's step budget with its target prefix (o->prefix): ll_search_max_len, at least the
 * prefix and EOS. */
int ll_search_prefixed_max_len(const ll_model *m, const ll_search_opts *o, int src_len, int i);

/* The tokens that would repeat an n-gram of a hypothesis (start token bos, then gen[0 .. len)) at
 * its next step (fairseq's NGramRepeatBlock; n >= 1), into out (room for len; repeats possible);
 * returns their count. */
int ll_ngram_bans(int32_t bos, const int32_t *gen, int len, int n, int32_t *out);

/* o->shortlist's candidates for this batch set on d (ll_decode_shortlist); nothing without one. */
void ll_search_shortlist(ll_model *m, ll_dec_state *d, const ll_search_opts *o, const int32_t *src, const int *src_len,
                         int B, int S);

/* Sort fin[0..n_fin) by score, best first (stable), keep nbest in out (owning fin), free the rest. */
void ll_search_finish(ll_hypo *fin, int n_fin, int nbest, ll_nbest *out);

#endif
