/* Internals shared by the BLEU and chrF code: Python-compatible text handling
 * (UTF-8, str.lower(), str.split()), the 13a tokenizer and n-gram matching. */
#ifndef LL_EVAL_INTERNAL_H
#define LL_EVAL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* ---- generated tables (unicase_tab.c) ---- */
typedef struct {
    uint32_t first, last;
    int32_t step, delta; /* step 0: a single code point */
} ll_case_run;
typedef struct {
    uint32_t first, last;
} ll_cp_range;
/* c in one of the n sorted, disjoint ranges r */
int ll_ev_in_ranges(const ll_cp_range *r, int n, uint32_t c);
extern const char ll_unicase_version[];
/* unicat_tab.c: \p{N}, \p{P}, \p{S} of the regex module (sacreBLEU's intl tokenizer) */
extern const char ll_unicat_regex_version[];
extern const ll_cp_range ll_cat_number[], ll_cat_punct[], ll_cat_symbol[];
extern const int ll_cat_number_n, ll_cat_punct_n, ll_cat_symbol_n;
extern const ll_case_run ll_lower_runs[];
extern const int ll_lower_nruns;
extern const ll_cp_range ll_case_ignorable[];
extern const int ll_case_ignorable_n;
extern const ll_cp_range ll_cased[];
extern const int ll_cased_n;

/* ---- text.c ---- */
/* Decodes the code point at s[*i] and advances *i.  A byte that starts no valid
 * UTF-8 sequence decodes to 0xDC00 + byte (Python's surrogateescape), so any
 * input has a lossless code point view. */
uint32_t ll_ev_decode(const unsigned char *s, size_t n, size_t *i);
size_t ll_ev_encode(uint32_t c, char *out); /* up to 4 bytes */
int ll_ev_is_space(uint32_t c);             /* Python str.isspace() */
/* Python str.lower() of s[0..n); malloc'd, NUL-terminated, length in *out_n. */
char *ll_ev_lower(const char *s, size_t n, size_t *out_n);

typedef struct {
    const char *p;
    uint32_t len;
} ll_ev_span;
typedef struct {
    ll_ev_span *v;
    int n, cap;
} ll_ev_spans;
void ll_ev_spans_push(ll_ev_spans *a, const char *p, size_t len);
/* Appends the tokens of Python's s.split() (split on Unicode whitespace). */
void ll_ev_split(const char *s, size_t n, ll_ev_spans *out);
/* Python's ' '.join(s.split()) of s[0..n); malloc'd, length in *out_n. */
char *ll_ev_join_split(const char *s, size_t n, size_t *out_n);

/* ---- tok13a.c ---- */
/* sacreBLEU's Tokenizer13a on s[0..n) (already rstripped); malloc'd result. */
char *ll_ev_tok13a(const char *s, size_t n, size_t *out_n);
/* TokenizerRegexp alone (what TokenizerZh runs after splitting off its characters). */
char *ll_ev_tok_regexp(const char *s, size_t n, size_t *out_n);

/* ---- tok_intl.c ---- */
/* sacreBLEU's TokenizerV14International on s[0..n) (already rstripped); malloc'd. */
char *ll_ev_tokintl(const char *s, size_t n, size_t *out_n);

/* ---- tok_cjk.c ---- */
int ll_ev_is_zh_char(uint32_t c); /* TokenizerZh._is_chinese_char */
/* sacreBLEU's TokenizerZh and TokenizerChar on s[0..n) (already rstripped); malloc'd. */
char *ll_ev_tokzh(const char *s, size_t n, size_t *out_n);
char *ll_ev_tokchar(const char *s, size_t n, size_t *out_n);
/* TER's Asian support on a NUL-terminated line: split = _normalize_asian (with --ter-normalized),
 * drop_punct = _remove_asian_punct (with --ter-no-punct); malloc'd, to be split on whitespace. */
char *ll_ev_ter_asian(const char *s, int split, int drop_punct);

/* ---- ngram.c ---- */
/* Dense ids for byte strings: equal strings get equal ids.  Returns the count. */
uint32_t ll_ev_intern(const ll_ev_span *spans, int n, uint32_t *ids);

typedef struct {
    const uint32_t *sym;
    int len;
} ll_ev_seq;
/* n-gram overlap of seqs[0] (the hypothesis) with seqs[1..nseq-1] for n = 1..max_n.
 * each[(n-1)*(nseq-1) + k-1] += sum over hypothesis n-grams g of min(c_hyp(g), c_k(g));
 * best[n-1] += sum over g of min(c_hyp(g), max_k c_k(g))  (either may be NULL). */
void ll_ev_ngram_match(const ll_ev_seq *seqs, int nseq, int max_n, int64_t *each, int64_t *best);

/* ---- shared formatting (bleu.c) ---- */
int ll_ev_format_line(const char *name, double score, int width, int score_only, const char *sig,
                      const char *verbose, char *buf, size_t n);

#endif
