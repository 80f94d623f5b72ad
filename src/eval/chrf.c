/* chrF and chrF++ as sacreBLEU computes them (metrics/chrf.py): per-order
 * [hyp, ref, match] n-gram counts of the best reference (by sentence F-score)
 * summed over the corpus, then one F-score from the sums. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_internal.h"
#include "ll/core.h"
#include "ll/eval.h"

void ll_chrf_opts_default(ll_chrf_opts *o) {
    memset(o, 0, sizeof *o);
    o->char_order = 6; /* CHRF.CHAR_ORDER */
    o->word_order = 0; /* CHRF.WORD_ORDER */
    o->beta = 2;       /* CHRF.BETA */
}

int ll_chrf_init(ll_chrf_stats *s, const ll_chrf_opts *o) {
    memset(s, 0, sizeof *s);
    if (o)
        s->opts = *o;
    else
        ll_chrf_opts_default(&s->opts);
    const ll_chrf_opts *p = &s->opts;
    if (p->char_order < 0 || p->word_order < 0 || p->char_order + p->word_order < 1 ||
        p->char_order + p->word_order > LL_CHRF_MAX_ORDER)
        return ll_fail("chrF: character order %d + word order %d must be within 1..%d", p->char_order,
                       p->word_order, LL_CHRF_MAX_ORDER);
    if (p->beta < 0) return ll_fail("chrF: beta must be >= 0, got %d", p->beta);
    return 0;
}

/* A product that is rounded before it is added: with -ffp-contract=fast (GCC's
 * default in gnu11 mode) a*b+c could become an FMA and differ from Python. */
static double mul(double a, double b) {
    volatile double p = a * b;
    return p;
}

/* CHRF._compute_f_score, operation by operation. */
static double f_score(const ll_chrf_opts *o, const int64_t *st) {
    const double eps = 1e-16;
    int order = o->char_order + o->word_order;
    double factor = (double)o->beta * o->beta, score = 0.0, avg_prec = 0.0, avg_rec = 0.0;
    int effective_order = 0;
    for (int i = 0; i < order; i++) {
        int64_t n_hyp = st[3 * i], n_ref = st[3 * i + 1], n_match = st[3 * i + 2];
        double prec = n_hyp > 0 ? (double)n_match / (double)n_hyp : eps;
        double rec = n_ref > 0 ? (double)n_match / (double)n_ref : eps;
        double denom = mul(factor, prec) + rec;
        score += denom > 0 ? (1 + factor) * prec * rec / denom : eps;
        if (n_hyp > 0 && n_ref > 0) { /* sacreBLEU < 2.0 style effective order */
            avg_prec += prec;
            avg_rec += rec;
            effective_order++;
        }
    }
    if (o->eps_smoothing) return 100 * score / order;
    if (effective_order == 0) {
        avg_prec = avg_rec = 0.0;
    } else {
        avg_prec /= effective_order;
        avg_rec /= effective_order;
    }
    if (avg_prec + avg_rec != 0) {
        score = (1 + factor) * avg_prec * avg_rec;
        score /= mul(factor, avg_prec) + avg_rec;
        return 100 * score;
    }
    return 0.0;
}

static int is_punct(unsigned char c) { /* string.punctuation */
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
}

/* CHRF._remove_punctuation: split off one leading or trailing ASCII punctuation
 * mark per word.  Bytes suffice: a word of one multi-byte character has no ASCII
 * first or last byte, so it stays whole as len(w) == 1 requires. */
static void words(const char *t, size_t n, ll_ev_spans *out) {
    ll_ev_spans w = {0};
    ll_ev_split(t, n, &w);
    for (int i = 0; i < w.n; i++) {
        const char *p = w.v[i].p;
        uint32_t len = w.v[i].len;
        if (len == 1) {
            ll_ev_spans_push(out, p, 1);
        } else if (is_punct((unsigned char)p[len - 1])) {
            ll_ev_spans_push(out, p, len - 1);
            ll_ev_spans_push(out, p + len - 1, 1);
        } else if (is_punct((unsigned char)p[0])) {
            ll_ev_spans_push(out, p, 1);
            ll_ev_spans_push(out, p + 1, len - 1);
        } else {
            ll_ev_spans_push(out, p, len);
        }
    }
    free(w.v);
}

static int64_t count_ngrams(int len, int n) { return len >= n ? len - n + 1 : 0; }

int ll_chrf_add(ll_chrf_stats *s, const char *hyp, const char *const *refs, int nrefs) {
    const ll_chrf_opts *o = &s->opts;
    int nr = 0;
    for (int k = 0; k < nrefs; k++) nr += refs[k] != NULL;
    if (nr == 0) return ll_fail("chrF: segment %lld has no reference", (long long)s->n_sents + 1);
    int nc = o->char_order, nw = o->word_order, order = nc + nw;

    char **text = ll_malloc((size_t)(nr + 1) * sizeof *text);
    size_t *tlen = ll_malloc((size_t)(nr + 1) * sizeof *tlen);
    for (int k = 0, j = 0; k <= nrefs; k++) {
        const char *src = k == 0 ? hyp : refs[k - 1];
        if (!src) continue;
        size_t n = strlen(src);
        if (o->lowercase) {
            text[j] = ll_ev_lower(src, n, &tlen[j]);
        } else {
            text[j] = ll_malloc(n + 1);
            memcpy(text[j], src, n + 1);
            tlen[j] = n;
        }
        j++;
    }

    /* character n-grams of ''.join(line.split()) (or the line itself with whitespace) */
    size_t ncp = 0;
    for (int j = 0; j <= nr; j++) ncp += tlen[j];
    uint32_t *cp = ll_malloc((ncp ? ncp : 1) * sizeof *cp);
    ll_ev_seq *cseq = ll_malloc((size_t)(nr + 1) * sizeof *cseq);
    size_t m = 0;
    for (int j = 0; j <= nr; j++) {
        size_t begin = m;
        const unsigned char *u = (const unsigned char *)text[j];
        for (size_t i = 0; i < tlen[j];) {
            uint32_t c = ll_ev_decode(u, tlen[j], &i);
            if (o->whitespace || !ll_ev_is_space(c)) cp[m++] = c;
        }
        cseq[j].sym = cp + begin;
        cseq[j].len = (int)(m - begin);
    }
    int64_t *cmatch = ll_calloc((size_t)(nc ? nc : 1) * (size_t)nr, sizeof *cmatch);
    ll_ev_ngram_match(cseq, nr + 1, nc, cmatch, NULL);

    /* word n-grams for chrF++ */
    ll_ev_seq *wseq = ll_calloc((size_t)(nr + 1), sizeof *wseq);
    int64_t *wmatch = ll_calloc((size_t)(nw ? nw : 1) * (size_t)nr, sizeof *wmatch);
    ll_ev_spans ws = {0};
    uint32_t *wid = NULL;
    if (nw > 0) {
        int *start = ll_malloc((size_t)(nr + 2) * sizeof *start);
        for (int j = 0; j <= nr; j++) {
            start[j] = ws.n;
            words(text[j], tlen[j], &ws);
        }
        start[nr + 1] = ws.n;
        wid = ll_malloc((size_t)(ws.n ? ws.n : 1) * sizeof *wid);
        ll_ev_intern(ws.v, ws.n, wid);
        for (int j = 0; j <= nr; j++) {
            wseq[j].sym = wid + start[j];
            wseq[j].len = start[j + 1] - start[j];
        }
        free(start);
        ll_ev_ngram_match(wseq, nr + 1, nw, wmatch, NULL);
    }

    /* CHRF._compute_segment_statistics: keep the reference with the best F-score
     * (the first one among equals) */
    int64_t cur[3 * LL_CHRF_MAX_ORDER], best[3 * LL_CHRF_MAX_ORDER];
    double best_f = -1.0;
    for (int k = 0; k < nr; k++) {
        for (int i = 0; i < order; i++) {
            int w = i >= nc;
            int n = w ? i - nc + 1 : i + 1;
            const ll_ev_seq *sq = w ? wseq : cseq;
            int64_t h = count_ngrams(sq[0].len, n), r = count_ngrams(sq[k + 1].len, n);
            cur[3 * i] = r > 0 ? h : 0; /* no hits counted when the reference has no such n-gram */
            cur[3 * i + 1] = r;
            cur[3 * i + 2] = (w ? wmatch : cmatch)[(size_t)(n - 1) * (size_t)nr + (size_t)k];
        }
        double f = f_score(o, cur);
        if (f > best_f) {
            best_f = f;
            memcpy(best, cur, (size_t)order * 3 * sizeof *cur);
        }
    }
    if (s->n_sents == 0)
        s->nrefs = nr;
    else if (s->nrefs != nr)
        s->nrefs = -1;
    for (int i = 0; i < 3 * order; i++) s->stats[i] += best[i];
    s->n_sents++;

    for (int j = 0; j <= nr; j++) free(text[j]);
    free(text);
    free(tlen);
    free(cp);
    free(cseq);
    free(cmatch);
    free(wseq);
    free(wmatch);
    free(ws.v);
    free(wid);
    return 0;
}

void ll_chrf_merge(ll_chrf_stats *dst, const ll_chrf_stats *src) {
    if (src->n_sents == 0) return;
    if (dst->n_sents == 0)
        dst->nrefs = src->nrefs;
    else if (dst->nrefs != src->nrefs)
        dst->nrefs = -1;
    for (int i = 0; i < 3 * LL_CHRF_MAX_ORDER; i++) dst->stats[i] += src->stats[i];
    dst->n_sents += src->n_sents;
}

void ll_chrf_compute(const ll_chrf_stats *s, ll_chrf_result *r) {
    memset(r, 0, sizeof *r);
    r->score = f_score(&s->opts, s->stats);
    /* CHRFScore: f'chrF{beta}' + '+' * word_order */
    int len = snprintf(r->name, sizeof r->name, "chrF%d", s->opts.beta);
    for (int i = 0; i < s->opts.word_order && len + 1 < (int)sizeof r->name; i++) r->name[len++] = '+';
    r->name[len] = 0;
}

int ll_chrf_signature(const ll_chrf_stats *s, int short_form, char *buf, size_t n) {
    const ll_chrf_opts *o = &s->opts;
    char nrefs[16];
    if (s->nrefs < 0)
        snprintf(nrefs, sizeof nrefs, "var");
    else
        snprintf(nrefs, sizeof nrefs, "%d", s->nrefs);
    return snprintf(buf, n, "%s:%s|%s:%s|%s:%s|nc:%d|nw:%d|%s:%s|%s:%s", short_form ? "#" : "nrefs", nrefs,
                    short_form ? "c" : "case", o->lowercase ? "lc" : "mixed", short_form ? "e" : "eff",
                    o->eps_smoothing ? "no" : "yes", o->char_order, o->word_order, short_form ? "s" : "space",
                    o->whitespace ? "yes" : "no", short_form ? "v" : "version", LL_SACREBLEU_VERSION);
}

int ll_chrf_format(const ll_chrf_result *r, int width, int score_only, const char *sig, char *buf, size_t n) {
    return ll_ev_format_line(r->name, r->score, width, score_only, sig, NULL, buf, n);
}
