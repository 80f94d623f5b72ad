/* Decoding: beam search over the model's incremental decoding API
 * (src/decode/beam.c) and batched translation of whole inputs
 * (src/decode/translate.c).  The search follows fairseq's SequenceGenerator
 * with BeamSearch (reference-spec §7); docs/decoding.md describes it. */
#ifndef LL_DECODE_H
#define LL_DECODE_H

#include <stdint.h>

#include "ll/config.h"
#include "ll/data.h"
#include "ll/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- beam search (src/decode/beam.c) ---- */
typedef struct {
    int beam;         /* hypotheses kept per sentence, >= 1; 1 is greedy search */
    double lenpen;    /* final score = sum of log-probs / len^lenpen */
    double max_len_a; /* max_len = min(int(a * src_len + b), max_positions - 1) */
    int max_len_b;    /*   with src_len the sentence's own length including EOS */
    int min_len;      /* EOS is forbidden at steps < min_len (clamped to max_len) */
    int nbest;        /* hypotheses returned per sentence, 1..beam */
    int32_t bos;      /* first decoder input: LL_EOS, or the target-language tag */
    int align;        /* 1: each hypothesis gets its hard alignment (ll_decode_align_on) */
    double unkpen;    /* subtracted from <unk>'s log-probability at every step, after the model
                         (fairseq's --unkpen: scores include it; 0: none) */
    int no_repeat_ngram; /* > 0: no n-gram of this size twice in a hypothesis (fairseq's
                            --no-repeat-ngram-size; its start token counts, a target prefix's
                            forced tokens are never banned); also in sampling.  0: off */
    /* Diverse beam search (fairseq's DiverseBeamSearch, Vijayakumar et al. 2018): with
     * diverse_groups G > 1 (G divides beam), row b of a sentence is in group b % G; each step the
     * groups are ranked one after another, group g's candidates scored less diverse_strength
     * times the uses of their token among the earlier groups' 2 * beam / G candidates; the
     * candidates interleaved by rank (rank 0 of every group, then rank 1, ..), then finalized and
     * continued as in beam search.  The penalties stay in the scores (fairseq's).  Not with
     * sampling or a prefix.  0, 1: off. */
    int diverse_groups;
    double diverse_strength;
    /* Diverse siblings search (fairseq's --diversity-rate, DiverseSiblingsSearch, Li et al. 2016):
     * > 0: from step 1 on, each row's candidates are its own top 2 * beam, the i-th best of them
     * scored less diversity_rate * i (i from 1), and the sentence's 2 * beam best of those go on
     * as in beam search; the penalties stay in the scores (fairseq's).  Not with diverse_groups
     * or sampling.  0: off (the same as beam search). */
    double diversity_rate;
    /* Sampling (fairseq's --sampling, Marian's --output-sampling): each of a sentence's `beam`
     * rows draws its own translation, token by token, from the model's distribution
     * (ll_sample_search); nbest of them come back, best score first. */
    int sampling;
    int topk;           /* sampling: among the topk most probable tokens only (0: all) */
    double topp;        /* sampling: then among the most probable of those holding topp of their
                           probability, the one crossing it included (0 or 1: all) */
    double temperature; /* sampling: from softmax(log p / temperature) (1: the model's own) */
    uint64_t seed;      /* sampling: sentence i draws with key (seed, keys[i]) */
    const uint64_t *keys; /* [B] per-sentence keys (NULL: i), so a sentence's samples do not
                             depend on its batch (ll_translate_ids passes draw_base + input index) */
    /* Target prefixes (fairseq's --prefix-size, CTranslate2's target_prefix): sentence i's
     * translations begin with prefix[i][0 .. prefix_len[i]) (no EOS, pad or BOS), forced and
     * scored as the model gives them; its max length is at least prefix_len[i] + 1.  NULL: none. */
    const int32_t *const *prefix;
    const int *prefix_len;
    /* A vocabulary shortlist (lldecode --shortlist, include/ll/shortlist.h): each batch searches
     * or samples among its candidates only, normalized among themselves.  NULL: the vocabulary. */
    const struct ll_shortlist *shortlist;
} ll_search_opts;

/* fairseq's defaults: beam 5, lenpen 1, max_len 0*src+200, min_len 1, nbest 1, bos EOS. */
void ll_search_opts_default(ll_search_opts *o);

typedef struct {
    int32_t *tokens;   /* [len] generated tokens; the last one is EOS */
    float *pos_scores; /* [len] natural-log probability of each token */
    int len;           /* generated tokens including EOS */
    double score;      /* sum(pos_scores) / len^lenpen, natural log */
    int32_t *align;    /* [len] with ll_search_opts.align, else NULL: the source position
                          (0-based, its EOS left out; -1: none) each token's step attended to most */
} ll_hypo;

typedef struct {
    int n;     /* hypotheses, best first; 0 only for empty input (or nothing could finish) */
    ll_hypo *h;
} ll_nbest;

/* Search step budget of one sentence: the highest step index (EOS forced there). */
int ll_search_max_len(const ll_model *m, const ll_search_opts *o, int src_len);

/* Decode B sentences together: src [B*S] right-padded with LL_PAD, src_len[i]
 * counts EOS.  Fills out[B] (release each with ll_nbest_free).  Sentences
 * that finish are dropped from the batch (ll_decode_compact), so the cost
 * follows the sentences still being searched (steps as CUDA graphs: once
 * ll_decode_compact_wanted says so; until then they ride along as dead rows).  CPU backend: src and the
 * per-step buffers are host memory. */
void ll_beam_search(ll_model *m, const int32_t *src, const int *src_len, int B, int S, const ll_search_opts *o,
                    ll_nbest *out);
/* Sampling (o->sampling; ll_beam_search calls it): every row of every sentence draws until EOS
 * or its max length; pos_scores are log softmax(log p / temperature) of the drawn tokens (the
 * model's log-probabilities at temperature 1), score = their sum / len^lenpen.  Token t of row j
 * of sentence i draws with Philox (seed, LL_RNG_DECODE_SAMPLE, keys[i]) at counter (j, t). */
void ll_sample_search(ll_model *m, const int32_t *src, const int *src_len, int B, int S, const ll_search_opts *o,
                      ll_nbest *out);
void ll_nbest_free(ll_nbest *r);

/* ---- batched translation (src/decode/translate.c) ---- */
typedef struct {
    ll_search_opts search;
    int max_tokens; /* per batch: sentences * padded source length (one long sentence may exceed it) */
    int max_sents;  /* sentences per batch; 0 = max(1, 256 / beam) */
    int inter_threads; /* batches searched at once, each by one thread on a model
                          replica (CTranslate2's inter_threads), at most the
                          thread count; 0 = auto (= threads), 1 = one batch at
                          a time with every op threaded */
    const int32_t *const *prefix; /* [n] per input sentence, as ll_search_opts.prefix (NULL: none) */
    const int *prefix_len;
    uint64_t draw_base; /* latent.inference sample: batch b of this call draws its layers with
                           key draw_base + b (ll_latent_inference_draw), whichever worker runs it;
                           search.sampling: sentence i draws with key draw_base + i */
} ll_translate_opts;

/* Sentences per batch at most: max_sents (0: 256 / beam), and fewer where
 * sentences x beam x V would pass 2^31 (beam_topk's int32 candidate index). */
int ll_translate_batch_sents(const ll_translate_opts *o, int V);
/* The number of concurrent batch workers ll_translate_ids will use at most. */
int ll_translate_workers(const ll_translate_opts *o);

typedef struct {
    long sents, batches;          /* non-empty sentences decoded */
    long src_tokens, out_tokens;  /* incl. EOS; out_tokens counts the best hypotheses */
    double seconds;               /* wall time of the search */
} ll_translate_stats;

/* Translate n tokenised sentences: src[i] holds len[i] ids ending with EOS
 * (len[i] == 0: empty input, out[i].n = 0).  Sentences are sorted by length
 * and cut into batches; out[] comes back in input order.  st may be NULL. */
void ll_translate_ids(ll_model *m, const int32_t *const *src, const int *len, int n, const ll_translate_opts *o,
                      ll_nbest *out, ll_translate_stats *st);

/* One input chunk from source text to output, in input order.  This is the
 * hook for scoring: best[i] is the detokenised best hypothesis of line i. */
typedef struct {
    int n;
    int32_t **src;   /* [n] source ids incl. EOS after truncation; NULL for an empty line */
    int *src_len;    /* [n] 0 for an empty line */
    ll_nbest *hyps;  /* [n] */
    char **best;     /* [n] detokenised best hypothesis; "" for an empty line */
    int n_truncated; /* lines cut to the model's max_positions */
    int first_truncated; /* 0-based index of the first, -1 if none */
    ll_translate_stats stats;
} ll_translation;

/* Sentencepiece-encode one line and append EOS, keeping at most max_src
 * tokens (EOS included).  A line without pieces (empty, or only spaces)
 * gives 0.  *truncated is set to 1 when pieces were dropped.  -1 + errbuf. */
int ll_encode_line(const ll_spm *spm, const char *line, int max_src, int32_t **ids, int *cap, int *truncated);

/* Encode lines (ll_encode_line with max_src = model max_positions), translate
 * and detokenise.  -1 + errbuf; on success release with ll_translation_free. */
int ll_translate_lines(ll_model *m, const ll_spm *spm, const char *const *lines, int n, const ll_translate_opts *o,
                       ll_translation *t);
/* As above for sources already in t->src / t->src_len / t->n (malloc'd;
 * ownership passes to t): translate and detokenise. */
void ll_translation_run(ll_model *m, const ll_spm *spm, const ll_translate_opts *o, ll_translation *t);
void ll_translation_free(ll_translation *t);

/* The first decoder input for a target language.  Models trained with
 * language tags (data.lang_tags on, or auto with several train target
 * languages) start with "<2L>"; others with EOS.  lang NULL: the only target
 * language; an error lists the choices when there are several.  -1 + errbuf. */
int ll_decode_bos(const ll_config *cfg, const ll_spm *spm, const char *lang, int32_t *bos);

/* ---- forced decoding: scoring given translations (src/decode/score.c) ---- */
typedef struct {
    int max_tokens;    /* per batch: sentences x the longer padded side (source or reference) */
    int max_sents;     /* sentences per batch; 0 = 256 */
    int inter_threads; /* as ll_translate_opts */
    int32_t bos;       /* the decoder's first input: LL_EOS or the target-language tag */
    uint64_t draw_base; /* as ll_translate_opts (latent.inference sample) */
} ll_score_opts;

/* The natural-log probability of each token of the references tgt[i]
 * (tlen[i] >= 1 ids ending with EOS) given the sources src[i] (slen[i] >= 1
 * ids ending with EOS), teacher-forced without dropout as the search's model
 * runs: pos[i] (tlen[i] floats, the caller's) gets them.  Batched and spread
 * over the CPU's batch workers as ll_translate_ids; st may be NULL
 * (out_tokens: reference tokens). */
void ll_score_ids(ll_model *m, const int32_t *const *src, const int *slen, const int32_t *const *tgt, const int *tlen,
                  int n, const ll_score_opts *o, float **pos, ll_translate_stats *st);

#ifdef __cplusplus
}
#endif
#endif