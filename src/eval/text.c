/* Python str semantics on UTF-8 bytes: decoding, isspace(), lower(), split(),
 * rstrip().  sacreBLEU works on Python str (code points), so these decide
 * where tokens and characters begin and end. */
#include <stdlib.h>
#include <string.h>

#include "eval_internal.h"
#include "ll/core.h"
#include "ll/eval.h"

static int cont(const unsigned char *s, size_t n, size_t i) { return i < n && (s[i] & 0xC0) == 0x80; }

uint32_t ll_ev_decode(const unsigned char *s, size_t n, size_t *i) {
    size_t k = *i;
    unsigned c = s[k];
    if (c < 0x80) {
        *i = k + 1;
        return c;
    }
    /* Python's strict decoder: no overlongs, no surrogates, nothing above U+10FFFF. */
    if (c >= 0xC2 && c <= 0xDF && cont(s, n, k + 1)) {
        *i = k + 2;
        return ((c & 0x1Fu) << 6) | (s[k + 1] & 0x3Fu);
    }
    if (c >= 0xE0 && c <= 0xEF && cont(s, n, k + 1) && cont(s, n, k + 2)) {
        unsigned c1 = s[k + 1];
        if (!(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 > 0x9F)) {
            *i = k + 3;
            return ((c & 0x0Fu) << 12) | ((c1 & 0x3Fu) << 6) | (s[k + 2] & 0x3Fu);
        }
    }
    if (c >= 0xF0 && c <= 0xF4 && cont(s, n, k + 1) && cont(s, n, k + 2) && cont(s, n, k + 3)) {
        unsigned c1 = s[k + 1];
        if (!(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 > 0x8F)) {
            *i = k + 4;
            return ((c & 0x07u) << 18) | ((c1 & 0x3Fu) << 12) | ((s[k + 2] & 0x3Fu) << 6) | (s[k + 3] & 0x3Fu);
        }
    }
    *i = k + 1;
    return 0xDC00u | c;
}

size_t ll_ev_encode(uint32_t c, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (c < 0x80) {
        o[0] = (unsigned char)c;
        return 1;
    }
    if (c >= 0xDC80 && c <= 0xDCFF) { /* an undecodable byte: give it back unchanged */
        o[0] = (unsigned char)(c & 0xFF);
        return 1;
    }
    if (c < 0x800) {
        o[0] = (unsigned char)(0xC0 | (c >> 6));
        o[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (c >> 12));
        o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (c >> 18));
    o[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

int ll_ev_is_space(uint32_t c) {
    /* Exactly the code points for which Python's str.isspace() is true. */
    if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    if (c < 0x85) return 0;
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

long ll_utf8_invalid_at(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t at = i;
        uint32_t c = ll_ev_decode(u, n, &i);
        if (c >= 0xDC80 && c <= 0xDCFF && i == at + 1 && u[at] >= 0x80) return (long)at;
    }
    return -1;
}

size_t ll_eval_rstrip_len(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t end = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c = ll_ev_decode(u, n, &i);
        if (!ll_ev_is_space(c)) end = i;
    }
    return end;
}

/* ---- lower() ---- */

int ll_ev_in_ranges(const ll_cp_range *r, int n, uint32_t c) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (c < r[mid].first)
            hi = mid - 1;
        else if (c > r[mid].last)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

static uint32_t lower1(uint32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    int lo = 0, hi = ll_lower_nruns - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const ll_case_run *r = &ll_lower_runs[mid];
        if (c < r->first)
            hi = mid - 1;
        else if (c > r->last)
            lo = mid + 1;
        else {
            if (r->step == 0 || (c - r->first) % (uint32_t)r->step == 0) return (uint32_t)((int32_t)c + r->delta);
            return c;
        }
    }
    return c;
}

/* CPython's handle_capital_sigma(): U+03A3 becomes final sigma when preceded by
 * a cased letter and not followed by one, skipping case-ignorable characters. */
static uint32_t capital_sigma(const uint32_t *cp, size_t n, size_t i) {
    size_t j = i;
    uint32_t c = 0;
    int found = 0;
    while (j > 0) {
        c = cp[--j];
        if (!ll_ev_in_ranges(ll_case_ignorable, ll_case_ignorable_n, c)) {
            found = 1;
            break;
        }
    }
    int final_sigma = found && ll_ev_in_ranges(ll_cased, ll_cased_n, c);
    if (final_sigma && i + 1 < n) {
        for (j = i + 1; j < n; j++) {
            c = cp[j];
            if (!ll_ev_in_ranges(ll_case_ignorable, ll_case_ignorable_n, c)) break;
        }
        final_sigma = j == n || !ll_ev_in_ranges(ll_cased, ll_cased_n, c);
    }
    return final_sigma ? 0x3C2 : 0x3C3;
}

char *ll_ev_lower(const char *s, size_t n, size_t *out_n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n && u[i] < 0x80) i++;
    if (i == n) { /* ASCII fast path */
        char *o = ll_malloc(n + 1);
        for (size_t k = 0; k < n; k++) o[k] = (char)lower1(u[k]);
        o[n] = 0;
        *out_n = n;
        return o;
    }
    uint32_t *cp = ll_malloc((n + 1) * sizeof *cp);
    size_t m = 0;
    for (i = 0; i < n;) cp[m++] = ll_ev_decode(u, n, &i);
    char *o = ll_malloc(4 * m + 1); /* every lowered code point fits the 4 bytes of the original's slot */
    size_t len = 0;
    for (size_t k = 0; k < m; k++) {
        uint32_t c = cp[k];
        if (c == 0x130) { /* the one multi-character mapping: "i" + COMBINING DOT ABOVE */
            o[len++] = 'i';
            len += ll_ev_encode(0x307, o + len);
        } else if (c == 0x3A3) {
            len += ll_ev_encode(capital_sigma(cp, m, k), o + len);
        } else {
            len += ll_ev_encode(lower1(c), o + len);
        }
    }
    o[len] = 0;
    free(cp);
    *out_n = len;
    return o;
}

/* ---- split() ---- */

void ll_ev_spans_push(ll_ev_spans *a, const char *p, size_t len) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->v = ll_realloc(a->v, (size_t)a->cap * sizeof *a->v);
    }
    a->v[a->n].p = p;
    a->v[a->n].len = (uint32_t)len;
    a->n++;
}

void ll_ev_split(const char *s, size_t n, ll_ev_spans *out) {
    const unsigned char *u = (const unsigned char *)s;
    size_t start = 0;
    int in_tok = 0;
    for (size_t i = 0; i < n;) {
        size_t at = i;
        uint32_t c = u[i] < 0x80 ? u[i++] : ll_ev_decode(u, n, &i);
        if (ll_ev_is_space(c)) {
            if (in_tok) ll_ev_spans_push(out, s + start, at - start);
            in_tok = 0;
        } else if (!in_tok) {
            start = at;
            in_tok = 1;
        }
    }
    if (in_tok) ll_ev_spans_push(out, s + start, n - start);
}

char *ll_ev_join_split(const char *s, size_t n, size_t *out_n) {
    ll_ev_spans sp = {0};
    ll_ev_split(s, n, &sp);
    char *out = ll_malloc(n + 1);
    size_t len = 0;
    for (int i = 0; i < sp.n; i++) {
        if (i) out[len++] = ' ';
        memcpy(out + len, sp.v[i].p, sp.v[i].len);
        len += sp.v[i].len;
    }
    out[len] = 0;
    free(sp.v);
    *out_n = len;
    return out;
}
