/* Corpus BLEU and chrF, bit-compatible with sacreBLEU (see docs/eval.md).
 *
 * Scores are computed from sufficient statistics summed over sentences, exactly
 * as sacreBLEU does, so a decoder can add each sentence as it is produced
 * (ll_bleu_add / ll_chrf_add), merge per-thread statistics (ll_*_merge) and
 * compute the corpus score at the end.  The statistics structs are plain values
 * (no heap memory): copy them, zero them with ll_*_init, sum them.
 *
 * Text is UTF-8.  Lines should not contain '\n' (the 13a tokenizer treats one
 * like sacreBLEU does, but a file line never has one).  Bytes that are not
 * valid UTF-8 are each treated as one opaque character (Python would refuse
 * such input; lleval rejects it). */
#ifndef LL_EVAL_H
#define LL_EVAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The sacreBLEU release whose results and signatures this code reproduces;
 * it is the "version:" field of every signature. */
#define LL_SACREBLEU_VERSION "2.6.0"

/* Longest line the ll_*_format and ll_*_signature functions can produce. */
#define LL_EVAL_LINE_MAX 512

/* ---- BLEU -------------------------------------------------------------------- */

#define LL_BLEU_ORDER 4 /* sacreBLEU's MAX_NGRAM_ORDER */

/* sacreBLEU's tokenizers: 13a (WMT's mteval), none, zh (each Chinese character a word, the
 * rest 13a's rules), char (every character a word, for Japanese, Thai and other text without
 * spaces where no tokenizer of its own is given), intl (mteval-v14's international one: Unicode
 * punctuation and symbols split off) */
typedef enum {
    LL_BLEU_TOK_13A = 0,
    LL_BLEU_TOK_NONE = 1,
    LL_BLEU_TOK_ZH = 2,
    LL_BLEU_TOK_CHAR = 3,
    LL_BLEU_TOK_INTL = 4
} ll_bleu_tok;
#define LL_BLEU_TOK_NAMES "13a|none|zh|char|intl"
/* The signature's name of a tokenizer, and its parse (-1 for an unknown name). */
const char *ll_bleu_tok_name(ll_bleu_tok t);
int ll_bleu_tok_parse(const char *name, ll_bleu_tok *out);
typedef enum {
    LL_BLEU_SMOOTH_EXP = 0, /* sacreBLEU default (mteval-v13a "NIST" smoothing) */
    LL_BLEU_SMOOTH_NONE,
    LL_BLEU_SMOOTH_FLOOR, /* smooth_value default 0.1 */
    LL_BLEU_SMOOTH_ADDK,  /* smooth_value default 1 */
} ll_bleu_smooth;

typedef struct {
    int lowercase;         /* case:lc (Python str.lower(), full Unicode) */
    ll_bleu_tok tokenize;  /* tok:13a (default), none, zh, char or intl */
    ll_bleu_smooth smooth; /* smooth:exp (default) */
    double smooth_value;   /* < 0: the method's default */
    int effective_order;   /* eff:yes; sacreBLEU enables it for sentence-level BLEU only */
} ll_bleu_opts;

typedef struct {
    ll_bleu_opts opts;
    int64_t sys_len, ref_len;
    int64_t correct[LL_BLEU_ORDER], total[LL_BLEU_ORDER];
    int64_t n_sents;
    int nrefs; /* references per sentence so far: 0 before the first, -1 if it varied ("var") */
} ll_bleu_stats;

typedef struct {
    double score; /* 0..100 */
    double precisions[LL_BLEU_ORDER];
    double bp, ratio;
    int64_t sys_len, ref_len;
    int64_t correct[LL_BLEU_ORDER], total[LL_BLEU_ORDER];
} ll_bleu_result;

void ll_bleu_opts_default(ll_bleu_opts *o);
void ll_bleu_init(ll_bleu_stats *s, const ll_bleu_opts *o); /* o == NULL: defaults */
/* Adds one segment.  NULL entries of refs are skipped (sacreBLEU's None: a
 * missing reference); returns -1 + ll_errbuf() when no reference is left. */
int ll_bleu_add(ll_bleu_stats *s, const char *hyp, const char *const *refs, int nrefs);
void ll_bleu_merge(ll_bleu_stats *dst, const ll_bleu_stats *src);
void ll_bleu_compute(const ll_bleu_stats *s, ll_bleu_result *r);
/* Sentence-level BLEU the way sacreBLEU's CLI -sl does it: effective order on. */
int ll_bleu_sentence(const ll_bleu_opts *o, const char *hyp, const char *const *refs, int nrefs,
                     ll_bleu_result *r);

/* "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"; short_form
 * gives sacreBLEU's --short abbreviations ("#:1|c:mixed|e:no|tok:13a|s:exp|v:2.6.0"). */
int ll_bleu_signature(const ll_bleu_stats *s, int short_form, char *buf, size_t n);
/* sacreBLEU's Score.format(): "BLEU = 27.35 60.1/34.2/21.0/13.4 (BP = 0.987 ratio = 0.987
 * hyp_len = 12345 ref_len = 12500)", or with sig non-NULL "BLEU|<sig> = 27.35 ..."
 * (the -f text line); width = decimals of the score (sacreBLEU -w); score_only gives
 * "27.35".  Returns the length like snprintf. */
int ll_bleu_format(const ll_bleu_result *r, int width, int score_only, const char *sig, char *buf, size_t n);

/* ---- chrF / chrF++ ----------------------------------------------------------- */

#define LL_CHRF_MAX_ORDER 16 /* char_order + word_order */

typedef struct {
    int char_order;    /* nc, default 6 */
    int word_order;    /* nw, default 0; 2 gives chrF++ */
    int beta;          /* default 2 */
    int lowercase;     /* case:lc */
    int whitespace;    /* space:yes keeps whitespace inside character n-grams */
    int eps_smoothing; /* eff:no; default off = sacreBLEU's effective-order averaging */
} ll_chrf_opts;

typedef struct {
    ll_chrf_opts opts;
    int64_t stats[3 * LL_CHRF_MAX_ORDER]; /* per order: hyp n-grams, ref n-grams, matches */
    int64_t n_sents;
    int nrefs;
} ll_chrf_stats;

typedef struct {
    double score; /* 0..100 */
    char name[32]; /* "chrF2", "chrF2++" */
} ll_chrf_result;

void ll_chrf_opts_default(ll_chrf_opts *o);
/* Returns -1 + ll_errbuf() for orders outside 1..LL_CHRF_MAX_ORDER in total, or beta < 0. */
int ll_chrf_init(ll_chrf_stats *s, const ll_chrf_opts *o); /* o == NULL: defaults */
int ll_chrf_add(ll_chrf_stats *s, const char *hyp, const char *const *refs, int nrefs);
void ll_chrf_merge(ll_chrf_stats *dst, const ll_chrf_stats *src);
void ll_chrf_compute(const ll_chrf_stats *s, ll_chrf_result *r);
/* "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0" */
int ll_chrf_signature(const ll_chrf_stats *s, int short_form, char *buf, size_t n);
/* "chrF2 = 55.12", "chrF2|<sig> = 55.12" or "55.12" */
int ll_chrf_format(const ll_chrf_result *r, int width, int score_only, const char *sig, char *buf, size_t n);

/* ---- TER (Snover et al. 2006; sacreBLEU's Tercom port) ------------------------------- */

typedef struct {
    int case_sensitive; /* case:mixed (default lc: lowercased, as sacreBLEU's TER) */
    int normalized;     /* norm:yes: Tercom's western normalisation and punctuation splitting */
    int no_punct;       /* punct:no: . , ? : ; ! " ( ) removed */
    int asian_support;  /* asian:yes: with normalized, CJK characters and punctuation split off; with
                           no_punct, CJK and full-width punctuation removed too */
} ll_ter_opts;

typedef struct {
    ll_ter_opts opts;
    int64_t edits;  /* per segment the fewest edits over its references (shifts count one each), summed */
    double ref_len; /* per segment the references' mean word count, summed */
    int64_t n_sents;
    int nrefs;
} ll_ter_stats;

typedef struct {
    double score; /* 100 * edits / ref_len (lower is better) */
    int64_t edits;
    double ref_len;
} ll_ter_result;

void ll_ter_opts_default(ll_ter_opts *o);
void ll_ter_init(ll_ter_stats *s, const ll_ter_opts *o); /* o == NULL: defaults */
int ll_ter_add(ll_ter_stats *s, const char *hyp, const char *const *refs, int nrefs);
void ll_ter_merge(ll_ter_stats *dst, const ll_ter_stats *src);
void ll_ter_compute(const ll_ter_stats *s, ll_ter_result *r);
/* "nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:2.6.0" */
int ll_ter_signature(const ll_ter_stats *s, int short_form, char *buf, size_t n);
/* "TER = 55.12", "TER|<sig> = 55.12" or "55.12" */
int ll_ter_format(const ll_ter_result *r, int width, int score_only, const char *sig, char *buf, size_t n);

/* ---- statistical tests (sacreBLEU's --confidence, --paired-bs, --paired-ar) ------ */

/* numpy.random.default_rng(seed) (SeedSequence + PCG64): the draws sacreBLEU's tests
 * make, bit for bit (src/eval/np_random.c). */
typedef struct {
    unsigned __int128 state, inc;
    int has_u32; /* PCG64's buffered upper half */
    uint32_t u32;
} ll_np_rng;
typedef struct {
    uint32_t buf;
    int bcnt;
} ll_np_bits; /* the bit buffer of one integers(2, dtype=bool) call: zero it first */
void ll_np_rng_seed(ll_np_rng *r, uint64_t seed);
uint64_t ll_np_rng_next64(ll_np_rng *r);
uint32_t ll_np_rng_next32(ll_np_rng *r);
uint32_t ll_np_rng_below(ll_np_rng *r, uint32_t n); /* integers(0, n), choice(n) */
void ll_np_rng_bools(ll_np_rng *r, ll_np_bits *b, unsigned char *out, size_t cnt);

typedef enum { LL_SIG_BLEU = 0, LL_SIG_CHRF, LL_SIG_TER } ll_sig_kind;

/* One metric as the tests see it: per-segment statistics, summed and scored. */
typedef struct {
    ll_sig_kind kind;
    int k; /* statistics per segment */
    ll_bleu_opts bleu;
    ll_chrf_opts chrf;
    ll_ter_opts ter;
} ll_sig_metric;

void ll_sig_metric_bleu(ll_sig_metric *m, const ll_bleu_opts *o);
int ll_sig_metric_chrf(ll_sig_metric *m, const ll_chrf_opts *o); /* -1 + ll_errbuf() for bad orders */
void ll_sig_metric_ter(ll_sig_metric *m, const ll_ter_opts *o);
/* A segment's statistics in sacreBLEU's order, out[m->k]: BLEU hyp_len, ref_len,
 * correct[4], total[4]; chrF hyp, ref and matching n-grams per order; TER edits,
 * mean reference length.  -1 + ll_errbuf() when no reference is left. */
int ll_sig_segment(const ll_sig_metric *m, const char *hyp, const char *const *refs, int nrefs, double *out);
/* The score of summed statistics, as sacreBLEU computes it from Python numbers. */
double ll_sig_score(const ll_sig_metric *m, const double *sums);

typedef struct {
    double score;    /* the corpus score */
    int has_ci;      /* mean and ci are set */
    double mean, ci; /* bootstrap estimate of the mean, 95% half-width */
    double p;        /* paired tests: the p-value; -1 for the baseline */
} ll_sig_result;

/* stats: n segments x m->k.  Bootstrap resampling (n_samples resamples of the n
 * segments, numpy's choice under `seed`): --confidence (statistics.mean, numpy_mean
 * 0) or a paired test's baseline (numpy's mean, numpy_mean 1).  r->score is set too. */
void ll_sig_bootstrap(const ll_sig_metric *m, const double *stats, long n, int n_samples, uint64_t seed,
                      int numpy_mean, ll_sig_result *r);
/* Paired bootstrap resampling (Koehn 2004, as Moses' script and sacreBLEU): the
 * system's score, mean, CI and p-value against the baseline. */
void ll_sig_paired_bs(const ll_sig_metric *m, const double *base, const double *sys, long n, int n_samples,
                      uint64_t seed, ll_sig_result *r);
/* Paired approximate randomization (Riezler and Maxwell 2005, multeval): the
 * system's score and p-value. */
void ll_sig_paired_ar(const ll_sig_metric *m, const double *base, const double *sys, long n, int n_trials,
                      uint64_t seed, ll_sig_result *r);

/* ---- text helpers shared with lleval ----------------------------------------- */

/* Offset of the first byte that Python's strict UTF-8 decoder rejects, or -1. */
long ll_utf8_invalid_at(const char *s, size_t n);
/* Length of s without trailing (Unicode) whitespace: Python's str.rstrip(). */
size_t ll_eval_rstrip_len(const char *s, size_t n);

#ifdef __cplusplus
}
#endif
#endif
