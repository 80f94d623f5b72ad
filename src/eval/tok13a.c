/* sacreBLEU's 13a tokenizer (tokenizers/tokenizer_13a.py + tokenizer_re.py),
 * the mteval-v13a.pl tokenization used by WMT.
 *
 * It runs on UTF-8 bytes rather than code points.  That gives the same result
 * as Python's regexes on str: every character class involved is ASCII except
 * [^0-9], and each rule matches exactly two characters, one of them ASCII, so
 * a multi-byte character can only sit on the [^0-9] side; there its lead and
 * continuation bytes are all non-digits and no match can start inside it. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "eval_internal.h"
#include "ll/core.h"

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, char c) {
    if (b->n + 1 >= b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        b->p = ll_realloc(b->p, b->cap);
    }
    b->p[b->n++] = c;
}

/* Python's str.replace(old, new) on a whole buffer (non-overlapping, left to right). */
static buf replace(const char *s, size_t n, const char *old, const char *new_) {
    buf o = {0};
    size_t lo = strlen(old), ln = strlen(new_);
    for (size_t i = 0; i < n;) {
        if (i + lo <= n && memcmp(s + i, old, lo) == 0) {
            for (size_t k = 0; k < ln; k++) put(&o, new_[k]);
            i += lo;
        } else {
            put(&o, s[i++]);
        }
    }
    put(&o, 0);
    o.n--;
    return o;
}

static void replace_in(buf *b, const char *old, const char *new_) {
    if (!memmem(b->p, b->n, old, strlen(old))) return;
    buf o = replace(b->p, b->n, old, new_);
    free(b->p);
    *b = o;
}

static int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* r'([\{-\~\[-\` -\&\(-\+\:-\@\/])' -> r' \1 ' */
static int rule1(unsigned char c) {
    return (c >= 0x7B && c <= 0x7E) || (c >= 0x5B && c <= 0x60) || (c >= 0x20 && c <= 0x26) ||
           (c >= 0x28 && c <= 0x2B) || (c >= 0x3A && c <= 0x40) || c == '/';
}

enum { R_PRE_PUNCT, R_POST_PUNCT, R_DASH };

/* One two-character rule with re.sub semantics: scan left to right; a match at i
 * consumes i and i+1 and the search resumes at i+2. */
static buf pair_rule(const buf *in, int rule) {
    buf o = {0};
    const unsigned char *s = (const unsigned char *)in->p;
    size_t n = in->n;
    for (size_t i = 0; i < n;) {
        if (i + 1 < n) {
            unsigned char a = s[i], b = s[i + 1];
            int pa = a == '.' || a == ',', pb = b == '.' || b == ',';
            if (rule == R_PRE_PUNCT && !is_digit(a) && pb) { /* r'([^0-9])([\.,])' -> r'\1 \2 ' */
                put(&o, (char)a), put(&o, ' '), put(&o, (char)b), put(&o, ' ');
                i += 2;
                continue;
            }
            if (rule == R_POST_PUNCT && pa && !is_digit(b)) { /* r'([\.,])([^0-9])' -> r' \1 \2' */
                put(&o, ' '), put(&o, (char)a), put(&o, ' '), put(&o, (char)b);
                i += 2;
                continue;
            }
            if (rule == R_DASH && is_digit(a) && b == '-') { /* r'([0-9])(-)' -> r'\1 \2 ' */
                put(&o, (char)a), put(&o, ' '), put(&o, '-'), put(&o, ' ');
                i += 2;
                continue;
            }
        }
        put(&o, (char)s[i++]);
    }
    put(&o, 0);
    o.n--;
    return o;
}

/* TokenizerRegexp.__call__: its four rules, then ' '.join(line.split()); consumes t. */
static char *regexp_rules(buf t, size_t *out_n) {
    static const int rules[3] = {R_PRE_PUNCT, R_POST_PUNCT, R_DASH};
    for (int r = 0; r < 3; r++) {
        buf o = pair_rule(&t, rules[r]);
        free(t.p);
        t = o;
    }

    char *out = ll_ev_join_split(t.p, t.n, out_n); /* ' '.join(line.split()) */
    free(t.p);
    return out;
}

/* The first rule, one character at a time, on s[0..n); pad: with a space on each side
 * (13a's f' {line} ') */
static buf rule1_pass(const char *s, size_t n, int pad) {
    buf t = {0};
    for (size_t i = 0; i < n + 2 * (size_t)pad; i++) {
        unsigned char c = pad && (i == 0 || i == n + 1) ? ' ' : (unsigned char)s[i - (size_t)pad];
        if (rule1(c)) {
            put(&t, ' '), put(&t, (char)c), put(&t, ' ');
        } else {
            put(&t, (char)c);
        }
    }
    put(&t, 0);
    t.n--;
    return t;
}

char *ll_ev_tok_regexp(const char *s, size_t n, size_t *out_n) { return regexp_rules(rule1_pass(s, n, 0), out_n); }

char *ll_ev_tok13a(const char *s, size_t n, size_t *out_n) {
    /* language-independent part (Tokenizer13a.__call__) */
    buf b = replace(s, n, "<skipped>", "");
    replace_in(&b, "-\n", "");
    replace_in(&b, "\n", " ");
    if (memchr(b.p, '&', b.n)) {
        replace_in(&b, "&quot;", "\"");
        replace_in(&b, "&amp;", "&");
        replace_in(&b, "&lt;", "<");
        replace_in(&b, "&gt;", ">");
    }
    /* f' {line} ' then TokenizerRegexp */
    buf t = rule1_pass(b.p, b.n, 1);
    free(b.p);
    return regexp_rules(t, out_n);
}
