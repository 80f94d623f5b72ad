/* Vocabulary shortlists (lldecode --shortlist; CTranslate2's vocabulary map, Marian's lexical
 * shortlist): each batch is decoded over only the target tokens its source sentences make
 * likely, so the output projection and softmax of every step cost K x C instead of V x C.
 *
 * The file is CTranslate2's vocabulary map: one rule per line,
 *     <source n-gram>\t<target token> <target token> ...
 * pieces of the model's sentencepiece vocabulary separated by single spaces; a rule whose
 * source n-gram is empty lists tokens every batch may produce.  llshortlist writes one from
 * the prepared training data (src/data/shortlist_build.c); docs/decoding.md#shortlists. */
#ifndef LL_SHORTLIST_H
#define LL_SHORTLIST_H

#include <stdint.h>
#include <stdio.h>

#include "ll/data.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LL_SHORTLIST_MAX_NGRAM 8

typedef struct ll_shortlist ll_shortlist;

/* Read a vocabulary map against the model's vocabulary (src/decode/shortlist.c).  Every piece
 * must be in it: NULL + errbuf "path:line: ..." otherwise (a map made for another
 * sentencepiece model), also for a line without a tab or an n-gram longer than
 * LL_SHORTLIST_MAX_NGRAM.  Rules with the same n-gram add up. */
ll_shortlist *ll_shortlist_load(const char *path, const ll_spm *spm);
void ll_shortlist_free(ll_shortlist *s);
/* A map built in code: an empty one over a vocabulary of V, and a rule added (n = 0: tokens
 * always listed); 0, or -1 + errbuf (an id outside the vocabulary, an n-gram too long). */
ll_shortlist *ll_shortlist_new(int V);
int ll_shortlist_add(ll_shortlist *s, const int32_t *ngram, int n, const int32_t *tgt, int n_tgt);
/* Rules and the target tokens of the empty n-gram (for lldecode's log line). */
int ll_shortlist_rules(const ll_shortlist *s);
int ll_shortlist_fixed(const ll_shortlist *s);
/* Batches given candidates so far and their candidates in all (counted by ll_search_shortlist,
 * from any thread): lldecode's summary prints the mean. */
void ll_shortlist_usage(const ll_shortlist *s, long *batches, long *candidates);

/* The candidates of one batch into out (room for the vocabulary size), ascending; returns
 * their count K: BOS, EOS and UNK, the empty n-gram's tokens, the targets of every n-gram of
 * the B source sentences (src [B*S], row b's first src_len[b] tokens), and each sentence's
 * target prefix (prefix may be NULL). */
int ll_shortlist_candidates(const ll_shortlist *s, const int32_t *src, const int *src_len, int B, int S,
                            const int32_t *const *prefix, const int *prefix_len, int32_t *out);

/* llshortlist (src/data/shortlist_build.c): IBM Model 1 translation probabilities p(t | s)
 * over the prepared training pairs of data_dir (both directions' pairs as they are, a NULL
 * source token added), `iterations` EM rounds from uniform; writes the map to path
 * (atomically): the `frequent` most frequent target tokens under the empty n-gram, then
 * for each source token its best `per_source` targets with p >= min_prob, most probable
 * first.  max_sents > 0: only the first max_sents pairs of each corpus; src_lang, tgt_lang
 * (NULL: any) only the corpora of those languages (a multilingual model's map per target
 * language).  Prints progress to log (NULL: quiet).  0, or -1 + errbuf. */
typedef struct {
    int per_source, frequent, iterations;
    double min_prob;
    long max_sents;
    const char *src_lang, *tgt_lang;
} ll_shortlist_build_opts;
int ll_shortlist_build(const char *data_dir, const char *path, const ll_shortlist_build_opts *o, FILE *log);

#ifdef __cplusplus
}
#endif

#endif
