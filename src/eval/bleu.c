/* Corpus BLEU as sacreBLEU computes it (metrics/bleu.py, metrics/helpers.py).
 *
 * Floating-point expressions follow the Python source operation by operation
 * (same order, same libm exp/log), so scores come out as the same doubles. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_internal.h"
#include "ll/core.h"
#include "ll/eval.h"

void ll_bleu_opts_default(ll_bleu_opts *o) {
    memset(o, 0, sizeof *o);
    o->tokenize = LL_BLEU_TOK_13A;
    o->smooth = LL_BLEU_SMOOTH_EXP;
    o->smooth_value = -1;
}

void ll_bleu_init(ll_bleu_stats *s, const ll_bleu_opts *o) {
    memset(s, 0, sizeof *s);
    if (o)
        s->opts = *o;
    else
        ll_bleu_opts_default(&s->opts);
}

static const char *const tok_names[] = {"13a", "none", "zh", "char", "intl"};

const char *ll_bleu_tok_name(ll_bleu_tok t) {
    return (unsigned)t < sizeof tok_names / sizeof *tok_names ? tok_names[t] : "?";
}

int ll_bleu_tok_parse(const char *name, ll_bleu_tok *out) {
    for (int i = 0; i < (int)(sizeof tok_names / sizeof *tok_names); i++)
        if (strcmp(name, tok_names[i]) == 0) {
            *out = (ll_bleu_tok)i;
            return 0;
        }
    return -1;
}

/* BLEU._preprocess_segment: lower() if asked, rstrip(), tokenize. */
static char *preprocess(const ll_bleu_opts *o, const char *text, size_t *len) {
    size_t n = strlen(text);
    char *t;
    if (o->lowercase) {
        t = ll_ev_lower(text, n, &n);
    } else {
        t = ll_malloc(n + 1);
        memcpy(t, text, n + 1);
    }
    n = ll_eval_rstrip_len(t, n);
    t[n] = 0;
    if (o->tokenize != LL_BLEU_TOK_NONE) {
        char *tok = o->tokenize == LL_BLEU_TOK_ZH     ? ll_ev_tokzh(t, n, &n)
                    : o->tokenize == LL_BLEU_TOK_CHAR ? ll_ev_tokchar(t, n, &n)
                    : o->tokenize == LL_BLEU_TOK_INTL ? ll_ev_tokintl(t, n, &n)
                                                      : ll_ev_tok13a(t, n, &n);
        free(t);
        t = tok;
    }
    *len = n;
    return t;
}

/* BLEU._get_closest_ref_len: the smaller one wins a tie. */
static int64_t closest_ref_len(int64_t hyp_len, const int64_t *ref_lens, int nr) {
    int64_t best_diff = -1, best = -1;
    for (int k = 0; k < nr; k++) {
        int64_t d = hyp_len > ref_lens[k] ? hyp_len - ref_lens[k] : ref_lens[k] - hyp_len;
        if (best_diff == -1 || d < best_diff) {
            best_diff = d;
            best = ref_lens[k];
        } else if (d == best_diff && ref_lens[k] < best) {
            best = ref_lens[k];
        }
    }
    return best;
}

static void note_nrefs(int *nrefs, int64_t n_sents, int nr) {
    if (n_sents == 0)
        *nrefs = nr;
    else if (*nrefs != nr)
        *nrefs = -1; /* sacreBLEU prints "nrefs:var" */
}

int ll_bleu_add(ll_bleu_stats *s, const char *hyp, const char *const *refs, int nrefs) {
    int nr = 0;
    for (int k = 0; k < nrefs; k++) nr += refs[k] != NULL;
    if (nr == 0) return ll_fail("BLEU: segment %lld has no reference", (long long)s->n_sents + 1);

    char **text = ll_malloc((size_t)(nr + 1) * sizeof *text);
    int *start = ll_malloc((size_t)(nr + 2) * sizeof *start);
    ll_ev_spans sp = {0};
    size_t len;
    for (int k = 0, j = 0; k <= nrefs; k++) {
        const char *src = k == 0 ? hyp : refs[k - 1];
        if (!src) continue;
        text[j] = preprocess(&s->opts, src, &len);
        start[j] = sp.n;
        ll_ev_split(text[j], len, &sp); /* helpers.extract_all_word_ngrams: line.split() */
        j++;
    }
    start[nr + 1] = sp.n;

    uint32_t *ids = ll_malloc((size_t)(sp.n ? sp.n : 1) * sizeof *ids);
    ll_ev_intern(sp.v, sp.n, ids);
    ll_ev_seq *seqs = ll_malloc((size_t)(nr + 1) * sizeof *seqs);
    int64_t *ref_lens = ll_malloc((size_t)nr * sizeof *ref_lens);
    for (int j = 0; j <= nr; j++) {
        seqs[j].sym = ids + start[j];
        seqs[j].len = start[j + 1] - start[j];
        if (j) ref_lens[j - 1] = seqs[j].len;
    }
    int64_t best[LL_BLEU_ORDER] = {0};
    ll_ev_ngram_match(seqs, nr + 1, LL_BLEU_ORDER, NULL, best);

    int64_t hyp_len = seqs[0].len;
    note_nrefs(&s->nrefs, s->n_sents, nr);
    s->sys_len += hyp_len;
    s->ref_len += closest_ref_len(hyp_len, ref_lens, nr);
    for (int n = 0; n < LL_BLEU_ORDER; n++) {
        s->correct[n] += best[n];
        if (hyp_len > n) s->total[n] += hyp_len - n;
    }
    s->n_sents++;

    for (int j = 0; j <= nr; j++) free(text[j]);
    free(text);
    free(start);
    free(sp.v);
    free(ids);
    free(seqs);
    free(ref_lens);
    return 0;
}

void ll_bleu_merge(ll_bleu_stats *dst, const ll_bleu_stats *src) {
    if (src->n_sents == 0) return;
    if (dst->n_sents == 0)
        dst->nrefs = src->nrefs;
    else if (dst->nrefs != src->nrefs)
        dst->nrefs = -1;
    dst->sys_len += src->sys_len;
    dst->ref_len += src->ref_len;
    for (int n = 0; n < LL_BLEU_ORDER; n++) {
        dst->correct[n] += src->correct[n];
        dst->total[n] += src->total[n];
    }
    dst->n_sents += src->n_sents;
}

static double default_smooth_value(ll_bleu_smooth m) {
    return m == LL_BLEU_SMOOTH_FLOOR ? 0.1 : m == LL_BLEU_SMOOTH_ADDK ? 1.0 : 0.0;
}

/* utils.my_log: log floored at -9999999999 for zero precisions */
static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

/* BLEU.compute_bleu */
void ll_bleu_compute(const ll_bleu_stats *s, ll_bleu_result *r) {
    const ll_bleu_opts *o = &s->opts;
    memset(r, 0, sizeof *r);
    r->sys_len = s->sys_len;
    r->ref_len = s->ref_len;
    memcpy(r->correct, s->correct, sizeof r->correct);
    memcpy(r->total, s->total, sizeof r->total);
    r->ratio = s->ref_len ? (double)s->sys_len / (double)s->ref_len : 0.0;
    r->bp = 1.0;
    if (s->sys_len < s->ref_len) r->bp = s->sys_len > 0 ? exp(1.0 - (double)s->ref_len / (double)s->sys_len) : 0.0;

    int any = 0;
    for (int n = 0; n < LL_BLEU_ORDER; n++) any |= s->correct[n] != 0;
    if (!any) return; /* early stop (#141): score 0, precisions 0 */

    double sv = o->smooth_value >= 0 ? o->smooth_value : default_smooth_value(o->smooth);
    double correct[LL_BLEU_ORDER], total[LL_BLEU_ORDER];
    for (int n = 0; n < LL_BLEU_ORDER; n++) {
        correct[n] = (double)s->correct[n];
        total[n] = (double)s->total[n];
    }
    double smooth_mteval = 1.0;
    int eff_order = LL_BLEU_ORDER;
    for (int n = 1; n <= LL_BLEU_ORDER; n++) {
        if (o->smooth == LL_BLEU_SMOOTH_ADDK && n > 1) {
            correct[n - 1] += sv;
            total[n - 1] += sv;
        }
        if (total[n - 1] == 0) break;
        if (o->effective_order) eff_order = n;
        if (correct[n - 1] == 0) {
            if (o->smooth == LL_BLEU_SMOOTH_EXP) {
                smooth_mteval *= 2;
                r->precisions[n - 1] = 100. / (smooth_mteval * total[n - 1]);
            } else if (o->smooth == LL_BLEU_SMOOTH_FLOOR) {
                r->precisions[n - 1] = 100. * sv / total[n - 1];
            }
        } else {
            r->precisions[n - 1] = 100. * correct[n - 1] / total[n - 1];
        }
    }
    /* Python's built-in sum(): plain left-to-right addition (Python <= 3.11) */
    double sum = 0.0;
    for (int n = 0; n < eff_order; n++) sum += my_log(r->precisions[n]);
    r->score = r->bp * exp(sum / eff_order);
}

int ll_bleu_sentence(const ll_bleu_opts *o, const char *hyp, const char *const *refs, int nrefs,
                     ll_bleu_result *r) {
    ll_bleu_stats s;
    ll_bleu_init(&s, o);
    s.opts.effective_order = 1;
    if (ll_bleu_add(&s, hyp, refs, nrefs) != 0) return -1;
    ll_bleu_compute(&s, r);
    return 0;
}

/* ---- formatting (metrics/base.py Score.format / Signature.format) ---- */

int ll_ev_format_line(const char *name, double score, int width, int score_only, const char *sig,
                      const char *verbose, char *buf, size_t n) {
    if (width < 0) width = 0;
    if (score_only) return snprintf(buf, n, "%.*f", width, score);
    return snprintf(buf, n, "%s%s%s = %.*f%s%s", name, sig ? "|" : "", sig ? sig : "", width, score,
                    verbose && verbose[0] ? " " : "", verbose ? verbose : "");
}

int ll_bleu_signature(const ll_bleu_stats *s, int short_form, char *buf, size_t n) {
    static const char *smooth_names[] = {"exp", "none", "floor", "add-k"};
    const ll_bleu_opts *o = &s->opts;
    char smooth[64], nrefs[16];
    if (o->smooth == LL_BLEU_SMOOTH_FLOOR || o->smooth == LL_BLEU_SMOOTH_ADDK) {
        double sv = o->smooth_value >= 0 ? o->smooth_value : default_smooth_value(o->smooth);
        snprintf(smooth, sizeof smooth, "%s[%.2f]", smooth_names[o->smooth], sv);
    } else {
        snprintf(smooth, sizeof smooth, "%s", smooth_names[o->smooth]);
    }
    if (s->nrefs < 0)
        snprintf(nrefs, sizeof nrefs, "var");
    else
        snprintf(nrefs, sizeof nrefs, "%d", s->nrefs);
    return snprintf(buf, n, "%s:%s|%s:%s|%s:%s|tok:%s|%s:%s|%s:%s", short_form ? "#" : "nrefs", nrefs,
                    short_form ? "c" : "case", o->lowercase ? "lc" : "mixed", short_form ? "e" : "eff",
                    o->effective_order ? "yes" : "no", ll_bleu_tok_name(o->tokenize),
                    short_form ? "s" : "smooth", smooth, short_form ? "v" : "version", LL_SACREBLEU_VERSION);
}

int ll_bleu_format(const ll_bleu_result *r, int width, int score_only, const char *sig, char *buf, size_t n) {
    char verbose[LL_EVAL_LINE_MAX];
    /* BLEUScore._verbose: precisions always with one decimal, whatever the width */
    snprintf(verbose, sizeof verbose,
             "%.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)", r->precisions[0],
             r->precisions[1], r->precisions[2], r->precisions[3], r->bp, r->ratio, (long long)r->sys_len,
             (long long)r->ref_len);
    return ll_ev_format_line("BLEU", r->score, width, score_only, sig, verbose, buf, n);
}
