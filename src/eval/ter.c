/* TER as sacreBLEU 2.6.0 computes it (metrics/ter.py, metrics/lib_ter.py,
 * tokenizers/tokenizer_ter.py): Tercom's edit distance with shifts, the same
 * beam around the diagonal, the same shift candidates in the same order, the
 * same ranking and the same limits, so every segment gets sacreBLEU's edit
 * count.  sacreBLEU caches edit-distance rows by hypothesis prefix; a row
 * depends only on its prefix (the hypothesis length is fixed within a
 * segment), so computing it again gives the same numbers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval_internal.h"
#include "ll/core.h"
#include "ll/eval.h"

enum { MAX_SHIFT_SIZE = 10, MAX_SHIFT_DIST = 50, BEAM_WIDTH = 25, MAX_SHIFT_CANDIDATES = 1000 };
#define INF_COST ((int64_t)1e16) /* lib_ter._INT_INFINITY */

void ll_ter_opts_default(ll_ter_opts *o) { memset(o, 0, sizeof *o); }

void ll_ter_init(ll_ter_stats *s, const ll_ter_opts *o) {
    memset(s, 0, sizeof *s);
    if (o)
        s->opts = *o;
    else
        ll_ter_opts_default(&s->opts);
}

/* ---- TercomTokenizer ---- */

/* Appends s[0..n) to a growing buffer. */
typedef struct {
    char *p;
    size_t n, cap;
} buf;
static void put(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) b->p = ll_realloc(b->p, b->cap = 2 * (b->n + n + 1));
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void putc1(buf *b, char c) { put(b, &c, 1); }

/* re.sub(pat, rep, s) for a literal pattern; returns the new text (s is freed). */
static char *sub_literal(char *s, const char *pat, const char *rep) {
    buf b = {0};
    const size_t pl = strlen(pat), rl = strlen(rep);
    put(&b, "", 0);
    for (const char *p = s; *p;) {
        if (!strncmp(p, pat, pl)) {
            put(&b, rep, rl);
            p += pl;
        } else {
            putc1(&b, *p++);
        }
    }
    free(s);
    return b.p;
}

static int digit(char c) { return c >= '0' && c <= '9'; }
/* [{-~[-` -&(-+:-@/]: the ASCII characters tokenizer_ter pads with spaces */
static int padded(unsigned char c) {
    return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') || (c >= '(' && c <= '+') ||
           (c >= ':' && c <= '@') || c == '/';
}

/* _normalize_general_and_western, one re.sub after another.  Every pattern is ASCII and
 * [^0-9] matches one code point: on UTF-8 bytes the matches and the output are the same. */
static char *normalize_western(char *s) {
    s = sub_literal(s, "\n-", "");
    s = sub_literal(s, "\n", " ");
    s = sub_literal(s, "&quot;", "\"");
    s = sub_literal(s, "&amp;", "&");
    s = sub_literal(s, "&lt;", "<");
    s = sub_literal(s, "&gt;", ">");
    buf b = {0};
    put(&b, " ", 1);
    for (const char *p = s; *p; p++) {
        if (padded((unsigned char)*p)) {
            const char t[3] = {' ', *p, ' '};
            put(&b, t, 3);
        } else {
            putc1(&b, *p);
        }
    }
    put(&b, " ", 1);
    free(s);
    s = sub_literal(b.p, "'s ", " 's ");
    size_t n = strlen(s);
    if (n >= 2 && !strcmp(s + n - 2, "'s")) { /* 's$ -> ' 's' */
        s[n - 2] = 0;
        buf e = {0};
        put(&e, s, n - 2);
        put(&e, " 's", 3);
        free(s);
        s = e.p;
    }
    /* ([^0-9])([\.,]) -> '\1 \2 ', then ([\.,])([^0-9]) -> ' \1 \2', then ([0-9])(-) -> '\1 \2 ':
     * each a left-to-right scan of non-overlapping two-character matches */
    for (int pass = 0; pass < 3; pass++) {
        buf o = {0};
        put(&o, "", 0);
        for (size_t i = 0; s[i];) {
            const char a = s[i], c = s[i + 1];
            int m = 0;
            if (c) {
                if (pass == 0) m = !digit(a) && (c == '.' || c == ',');
                if (pass == 1) m = (a == '.' || a == ',') && !digit(c);
                if (pass == 2) m = digit(a) && c == '-';
            }
            if (!m) {
                putc1(&o, a);
                i++;
                continue;
            }
            if (pass == 1) putc1(&o, ' ');
            putc1(&o, a);
            putc1(&o, ' ');
            putc1(&o, c);
            if (pass != 1) putc1(&o, ' ');
            i += 2;
        }
        free(s);
        s = o.p;
    }
    return s;
}

/* TER._preprocess_segment: rstrip(), then the tokenizer (lower unless case-sensitive, normalize,
 * drop punctuation, ' '.join(split())); malloc'd. */
static char *tokenize(const ll_ter_opts *o, const char *text) {
    size_t n = ll_eval_rstrip_len(text, strlen(text));
    char *s;
    if (n == 0) {
        s = ll_malloc(1);
        s[0] = 0;
        return s;
    }
    if (!o->case_sensitive) {
        s = ll_ev_lower(text, n, &n);
    } else {
        s = ll_malloc(n + 1);
        memcpy(s, text, n);
        s[n] = 0;
    }
    if (o->normalized) s = normalize_western(s);
    if (o->asian_support && (o->normalized || o->no_punct)) { /* _normalize_asian, _remove_asian_punct */
        char *a = ll_ev_ter_asian(s, o->normalized, o->no_punct);
        free(s);
        s = a;
    }
    if (o->no_punct) { /* _remove_punct: [\.,\?:;!\"\(\)] */
        size_t m = 0;
        for (size_t i = 0; s[i]; i++)
            if (!strchr(".,?:;!\"()", s[i])) s[m++] = s[i];
        s[m] = 0;
    }
    ll_ev_spans w = {0};
    ll_ev_split(s, strlen(s), &w);
    buf b = {0};
    put(&b, "", 0);
    for (int i = 0; i < w.n; i++) {
        if (i) putc1(&b, ' ');
        put(&b, w.v[i].p, w.v[i].len);
    }
    free(w.v);
    free(s);
    return b.p;
}

/* ---- lib_ter: the beam edit distance and the shifts ---- */

typedef struct {
    int64_t *prev, *cur;  /* [nr + 1] costs of the last two rows */
    char *ops;            /* the rows' operations, banded: row i's cells [lo[i], hi[i]) from at[i] */
    int *lo, *hi;
    size_t *at, ops_cap;
    int cap_r, cap_h;
    char *trace;          /* [nh + nr] */
    int *align, *ref_err, *hyp_err;
    uint32_t *shifted, *best_words;
} work;

static void work_fit(work *w, int nh, int nr) {
    if (nr + 1 > w->cap_r) {
        w->cap_r = 2 * (nr + 1);
        w->prev = ll_realloc(w->prev, sizeof(int64_t) * w->cap_r);
        w->cur = ll_realloc(w->cur, sizeof(int64_t) * w->cap_r);
        w->align = ll_realloc(w->align, sizeof(int) * w->cap_r);
        w->ref_err = ll_realloc(w->ref_err, sizeof(int) * w->cap_r);
    }
    if (nh + 1 > w->cap_h) {
        w->cap_h = 2 * (nh + 1);
        w->lo = ll_realloc(w->lo, sizeof(int) * w->cap_h);
        w->hi = ll_realloc(w->hi, sizeof(int) * w->cap_h);
        w->at = ll_realloc(w->at, sizeof(size_t) * w->cap_h);
        w->hyp_err = ll_realloc(w->hyp_err, sizeof(int) * w->cap_h);
        w->shifted = ll_realloc(w->shifted, sizeof(uint32_t) * w->cap_h);
        w->best_words = ll_realloc(w->best_words, sizeof(uint32_t) * w->cap_h);
    }
    w->trace = ll_realloc(w->trace, (size_t)nh + nr + 1);
}

static void work_free(work *w) {
    free(w->prev), free(w->cur), free(w->ops), free(w->lo), free(w->hi), free(w->at), free(w->trace);
    free(w->align), free(w->ref_err), free(w->hyp_err), free(w->shifted), free(w->best_words);
}

/* BeamEditDistance._edit_distance of h against r: the distance; with trace, the operations
 * (' ', 's', 'i', 'd') from the start into w->trace (*tn of them). */
static int64_t edit_distance(work *w, const uint32_t *h, int nh, const uint32_t *r, int nr, int trace, int *tn) {
    const double ratio = nh ? (double)nr / nh : 1;
    const int bw = BEAM_WIDTH < ratio / 2 ? (int)ceil(ratio / 2 + BEAM_WIDTH) : BEAM_WIDTH;
    int64_t *prev = w->prev, *cur = w->cur;
    for (int j = 0; j <= nr; j++) prev[j] = j; /* row 0: an insertion per reference word */
    int plo = 0, phi = nr + 1;
    size_t used = 0;
    if (trace) {
        w->lo[0] = 0, w->hi[0] = nr + 1, w->at[0] = 0;
        used = (size_t)nr + 1;
        if (used > w->ops_cap) w->ops = ll_realloc(w->ops, w->ops_cap = 2 * used);
        memset(w->ops, 'i', used);
    }
    for (int i = 1; i <= nh; i++) {
        const int diag = (int)floor(i * ratio);
        const int lo = diag - bw > 0 ? diag - bw : 0;
        const int hi = i == nh ? nr + 1 : diag + bw < nr + 1 ? diag + bw : nr + 1;
        char *op = NULL;
        if (trace) {
            w->lo[i] = lo, w->hi[i] = hi, w->at[i] = used;
            if (used + (size_t)(hi > lo ? hi - lo : 0) > w->ops_cap)
                w->ops = ll_realloc(w->ops, w->ops_cap = 2 * (used + (size_t)(hi > lo ? hi - lo : 0)));
            op = w->ops + used - lo;
            used += (size_t)(hi > lo ? hi - lo : 0);
        }
#define PREV(j) ((j) >= plo && (j) < phi ? prev[j] : INF_COST)
        for (int j = lo; j < hi; j++) {
            int64_t best;
            char bo;
            if (j == 0) {
                best = PREV(0) + 1, bo = 'd';
            } else {
                const int same = h[i - 1] == r[j - 1];
                /* Tercom's preference, as lib_ter orders it: no-op/sub, deletion, insertion */
                const int64_t c[3] = {PREV(j - 1) + !same, PREV(j) + 1, (j - 1 >= lo ? cur[j - 1] : INF_COST) + 1};
                const char o[3] = {same ? ' ' : 's', 'd', 'i'};
                best = INF_COST, bo = 'x';
                for (int k = 0; k < 3; k++)
                    if (best > c[k]) best = c[k], bo = o[k];
            }
            cur[j] = best;
            if (op) op[j] = bo;
        }
#undef PREV
        int64_t *t = prev;
        prev = cur, cur = t, plo = lo, phi = hi;
    }
    const int64_t d = nh == 0 ? nr : prev[nr]; /* (the last row is whole) */
    w->prev = prev, w->cur = cur;
    if (trace) { /* back from (nh, nr), into the end of w->trace */
        int i = nh, j = nr, n = 0;
        char *tr = w->trace + nh + nr;
        while (i > 0 || j > 0) {
            const char o = j >= w->lo[i] && j < w->hi[i] ? w->ops[w->at[i] + (size_t)(j - w->lo[i])] : 'x';
            if (o == 'x') ll_die("TER: the edit distance's trace left its beam (a sacreBLEU error too)");
            *--tr = o, n++;
            if (o == ' ' || o == 's')
                i--, j--;
            else if (o == 'i')
                j--;
            else
                i--;
        }
        memmove(w->trace, tr, (size_t)n);
        *tn = n;
    }
    return d;
}

/* _perform_shift with Python's clamped slices: words[start, start+length) moved to target. */
static void slice(uint32_t *out, int *m, const uint32_t *w, int n, int a, int b) {
    a = a < 0 ? 0 : a > n ? n : a;
    b = b < 0 ? 0 : b > n ? n : b;
    for (int k = a; k < b; k++) out[(*m)++] = w[k];
}
static void perform_shift(const uint32_t *w, int n, int start, int length, int target, uint32_t *out) {
    int m = 0;
    if (target < start) {
        slice(out, &m, w, n, 0, target), slice(out, &m, w, n, start, start + length);
        slice(out, &m, w, n, target, start), slice(out, &m, w, n, start + length, n);
    } else if (target > start + length) {
        slice(out, &m, w, n, 0, start), slice(out, &m, w, n, start + length, target);
        slice(out, &m, w, n, start, start + length), slice(out, &m, w, n, target, n);
    } else {
        slice(out, &m, w, n, 0, start), slice(out, &m, w, n, start + length, length + target);
        slice(out, &m, w, n, start, start + length), slice(out, &m, w, n, length + target, n);
    }
    if (m != n) ll_die("TER: a shift changed the hypothesis length (%d -> %d)", n, m);
}

/* lib_ter._shift: the shift of h that lowers the edit distance most (Tercom's ranking), into
 * w->best_words; returns the gain (0: none).  *checked counts the candidates evaluated. */
static int64_t best_shift(work *w, const uint32_t *h, int nh, const uint32_t *r, int nr, int *checked) {
    int tn;
    const int64_t pre = edit_distance(w, h, nh, r, nr, 1, &tn);
    /* the trace flipped (rewriting the reference into the hypothesis), as an alignment */
    int ph = -1, pr = -1, nhe = 0;
    for (int k = 0; k < tn; k++) {
        const char o = w->trace[k];
        if (o == ' ' || o == 's') {
            ++ph, ++pr;
            w->align[pr] = ph, w->hyp_err[nhe++] = o == 's', w->ref_err[pr] = o == 's';
        } else if (o == 'd') { /* flipped: an insertion into the hypothesis */
            ++ph, w->hyp_err[nhe++] = 1;
        } else { /* 'i', flipped: a deletion */
            ++pr, w->align[pr] = ph, w->ref_err[pr] = 1;
        }
    }
    int found = 0;
    int64_t bgain = 0;
    int blen = 0, bstart = 0, bidx = 0;
    for (int sh = 0; sh < nh; sh++) {
        for (int sr = 0; sr < nr; sr++) {
            if (abs(sr - sh) > MAX_SHIFT_DIST) continue;
            for (int len = 0; h[sh + len] == r[sr + len] && len < MAX_SHIFT_SIZE;) {
                len++;
                /* one (sh, sr, len) of _find_shifted_pairs */
                int herr = 0, rerr = 0;
                for (int k = sh; k < sh + len && k < nh; k++) herr += w->hyp_err[k];
                for (int k = sr; k < sr + len && k < nr; k++) rerr += w->ref_err[k];
                const int skip = herr == 0 || rerr == 0 || (sh <= w->align[sr] && w->align[sr] < sh + len);
                if (!skip) {
                    int prev_idx = -1;
                    for (int off = -1; off < len; off++) {
                        int idx;
                        if (sr + off == -1)
                            idx = 0;
                        else if (sr + off < nr)
                            idx = w->align[sr + off] + 1;
                        else
                            break;
                        if (idx == prev_idx) continue;
                        prev_idx = idx;
                        perform_shift(h, nh, sh, len, idx, w->shifted);
                        const int64_t gain = pre - edit_distance(w, w->shifted, nh, r, nr, 0, NULL);
                        ++*checked;
                        /* (gain, length, -start, -target), the highest first */
                        if (!found || gain > bgain ||
                            (gain == bgain && (len > blen || (len == blen && (-sh > -bstart ||
                                                                               (-sh == -bstart && -idx > -bidx)))))) {
                            found = 1, bgain = gain, blen = len, bstart = sh, bidx = idx;
                            memcpy(w->best_words, w->shifted, sizeof(uint32_t) * nh);
                        }
                    }
                    if (*checked >= MAX_SHIFT_CANDIDATES) goto done;
                }
                if (nh == sh + len || nr == sr + len) break; /* one sequence consumed */
            }
        }
    }
done:
    return found ? bgain : 0;
}

/* lib_ter.translation_edit_rate: edits of hypothesis h against reference r (shifts included). */
static int64_t ter_edits(work *w, const uint32_t *h, int nh, const uint32_t *r, int nr) {
    if (nr == 0) return nh;
    work_fit(w, nh, nr);
    uint32_t *in = ll_malloc(sizeof(uint32_t) * (nh ? nh : 1));
    memcpy(in, h, sizeof(uint32_t) * nh);
    int64_t shifts = 0;
    int checked = 0;
    for (;;) {
        const int64_t delta = best_shift(w, in, nh, r, nr, &checked);
        if (checked >= MAX_SHIFT_CANDIDATES || delta <= 0) break;
        shifts++;
        memcpy(in, w->best_words, sizeof(uint32_t) * nh);
    }
    const int64_t d = edit_distance(w, in, nh, r, nr, 0, NULL);
    free(in);
    return shifts + d;
}

int ll_ter_add(ll_ter_stats *s, const char *hyp, const char *const *refs, int nrefs) {
    int nr = 0;
    for (int k = 0; k < nrefs; k++) nr += refs[k] != NULL;
    if (nr == 0) return ll_fail("TER: segment %lld has no reference", (long long)s->n_sents + 1);
    char **text = ll_malloc(sizeof(char *) * (size_t)(nr + 1));
    ll_ev_spans words = {0};
    int *start = ll_malloc(sizeof(int) * (size_t)(nr + 2));
    for (int k = 0, j = 0; k <= nrefs; k++) {
        const char *src = k == 0 ? hyp : refs[k - 1];
        if (!src) continue;
        text[j] = tokenize(&s->opts, src);
        if (j > 0) { /* sacreBLEU preprocesses a reference twice (Metric._cache_references, then
                      * TER._extract_reference_info): with --ter-normalized that splits "it's" again */
            char *again = tokenize(&s->opts, text[j]);
            free(text[j]);
            text[j] = again;
        }
        start[j] = words.n;
        ll_ev_split(text[j], strlen(text[j]), &words);
        j++;
    }
    start[nr + 1] = words.n;
    uint32_t *id = ll_malloc(sizeof(uint32_t) * (size_t)(words.n ? words.n : 1));
    ll_ev_intern(words.v, words.n, id);
    /* TER._compute_segment_statistics: the fewest edits over the references, their mean length */
    work w = {0};
    int64_t best = INF_COST, ref_words = 0;
    for (int k = 1; k <= nr; k++) {
        const int64_t e = ter_edits(&w, id, start[1], id + start[k], start[k + 1] - start[k]);
        ref_words += start[k + 1] - start[k];
        if (e < best) best = e;
    }
    work_free(&w);
    if (s->n_sents == 0)
        s->nrefs = nr;
    else if (s->nrefs != nr)
        s->nrefs = -1;
    s->edits += best;
    s->ref_len += (double)ref_words / nr;
    s->n_sents++;
    for (int j = 0; j <= nr; j++) free(text[j]);
    free(text);
    free(words.v);
    free(start);
    free(id);
    return 0;
}

void ll_ter_merge(ll_ter_stats *dst, const ll_ter_stats *src) {
    if (src->n_sents == 0) return;
    if (dst->n_sents == 0)
        dst->nrefs = src->nrefs;
    else if (dst->nrefs != src->nrefs)
        dst->nrefs = -1;
    dst->edits += src->edits;
    dst->ref_len += src->ref_len;
    dst->n_sents += src->n_sents;
}

void ll_ter_compute(const ll_ter_stats *s, ll_ter_result *r) {
    /* TER._compute_score_from_stats */
    const double score = s->ref_len > 0 ? (double)s->edits / s->ref_len : s->edits > 0 ? 1.0 : 0.0;
    r->score = 100 * score;
    r->edits = s->edits;
    r->ref_len = s->ref_len;
}

int ll_ter_signature(const ll_ter_stats *s, int short_form, char *buf, size_t n) {
    const ll_ter_opts *o = &s->opts;
    char nrefs[16];
    if (s->nrefs < 0)
        snprintf(nrefs, sizeof nrefs, "var");
    else
        snprintf(nrefs, sizeof nrefs, "%d", s->nrefs);
    return snprintf(buf, n, "%s:%s|%s:%s|%s:tercom|%s:%s|%s:%s|%s:%s|%s:%s", short_form ? "#" : "nrefs", nrefs,
                    short_form ? "c" : "case", o->case_sensitive ? "mixed" : "lc", short_form ? "t" : "tok",
                    short_form ? "nr" : "norm", o->normalized ? "yes" : "no", short_form ? "pn" : "punct",
                    o->no_punct ? "no" : "yes", short_form ? "as" : "asian", o->asian_support ? "yes" : "no",
                    short_form ? "v" : "version",
                    LL_SACREBLEU_VERSION);
}

int ll_ter_format(const ll_ter_result *r, int width, int score_only, const char *sig, char *buf, size_t n) {
    return ll_ev_format_line("TER", r->score, width, score_only, sig, NULL, buf, n);
}
