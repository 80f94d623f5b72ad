/* sacreBLEU's tokenizers for text without spaces between words: BLEU's `zh`
 * (tokenizers/tokenizer_zh.py) and `char` (tokenizer_char.py), and TER's Asian
 * support (tokenizer_ter.py, --ter-asian-support).  Each works on code points, as
 * Python's str does (ll_ev_decode's view: an invalid byte is one character). */
#include <stdlib.h>
#include <string.h>

#include "eval_internal.h"
#include "ll/core.h"

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 256;
        b->p = ll_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

typedef struct {
    uint32_t lo, hi;
} range;

static int in(const range *r, int n, uint32_t c) {
    for (int i = 0; i < n; i++)
        if (c >= r[i].lo && c <= r[i].hi) return 1;
    return 0;
}

/* TokenizerZh._UCODE_RANGES as Python compares them.  Two of its bounds are
 * written with five hex digits ('\u20000', '\u2a6d6', '\u2f800', '\u2fa1d'),
 * which Python reads as a four-digit escape and a digit or letter: two-character
 * strings.  A single character c then satisfies '\u2000' '0' <= c <= '\u2a6d' '6'
 * exactly when U+2000 < c <= U+2A6D (most of the BMP's punctuation, symbols and
 * arrows, not Extension B), and likewise U+2F80 < c <= U+2FA1.  sacreBLEU's
 * scores follow those ranges, so these do too. */
static const range zh_ranges[] = {
    {0x3400, 0x4DB5}, {0x4E00, 0x9FA5}, {0x9FA6, 0x9FBB}, {0xF900, 0xFA2D}, {0xFA30, 0xFA6A},
    {0xFA70, 0xFAD9}, {0x2001, 0x2A6D}, {0x2F81, 0x2FA1}, {0xFF00, 0xFFEF}, {0x2E80, 0x2EFF},
    {0x3000, 0x303F}, {0x31C0, 0x31EF}, {0x2F00, 0x2FDF}, {0x2FF0, 0x2FFF}, {0x3100, 0x312F},
    {0x31A0, 0x31BF}, {0xFE10, 0xFE1F}, {0xFE30, 0xFE4F}, {0x2600, 0x26FF}, {0x2700, 0x27BF},
    {0x3200, 0x32FF}, {0x3300, 0x33FF},
};

int ll_ev_is_zh_char(uint32_t c) { return in(zh_ranges, (int)(sizeof zh_ranges / sizeof *zh_ranges), c); }

/* Python's str.strip() bounds: [*b, *e) */
static void strip(const unsigned char *s, size_t n, size_t *b, size_t *e) {
    size_t i = 0, first = n, end = 0;
    while (i < n) {
        const size_t at = i;
        if (!ll_ev_is_space(ll_ev_decode(s, n, &i))) {
            if (first == n) first = at;
            end = i;
        }
    }
    *b = first < n ? first : 0;
    *e = first < n ? end : 0;
}

char *ll_ev_tokzh(const char *s, size_t n, size_t *out_n) {
    /* line.strip(); each Chinese character c becomes " c "; then TokenizerRegexp */
    const unsigned char *u = (const unsigned char *)s;
    size_t b, e;
    strip(u, n, &b, &e);
    buf o = {0};
    put(&o, "", 0);
    for (size_t i = b; i < e;) {
        const size_t at = i;
        const uint32_t c = ll_ev_decode(u, e, &i);
        if (ll_ev_is_zh_char(c)) put(&o, " ", 1);
        put(&o, s + at, i - at);
        if (ll_ev_is_zh_char(c)) put(&o, " ", 1);
    }
    char *t = ll_ev_tok_regexp(o.p, o.n, out_n);
    free(o.p);
    return t;
}

char *ll_ev_tokchar(const char *s, size_t n, size_t *out_n) {
    /* " ".join(char for char in line) */
    const unsigned char *u = (const unsigned char *)s;
    buf o = {0};
    put(&o, "", 0);
    for (size_t i = 0; i < n;) {
        const size_t at = i;
        ll_ev_decode(u, n, &i);
        if (at) put(&o, " ", 1);
        put(&o, s + at, i - at);
    }
    *out_n = o.n;
    return o.p;
}

/* _normalize_asian's character classes.  Its hiragana, katakana and katakana-extension rules,
 * (^|^[...])([...]+)(?=$|^[...]), match only a line made of that script alone from its first
 * character; the tokenizer runs them after _normalize_general_and_western has put a space in
 * front of the line, so they never match, and they are left out. */
static const range asian_split[] = {
    {0x4E00, 0x9FFF}, {0x3400, 0x4DBF}, {0x31C0, 0x31EF}, {0x2E80, 0x2EFF},
    {0x3300, 0x33FF}, {0xF900, 0xFAFF}, {0xFE30, 0xFE4F}, {0x3200, 0x3F22},
};
/* TercomTokenizer.ASIAN_PUNCT and FULL_WIDTH_PUNCT */
static const range asian_punct[] = {
    {0x3001, 0x3002}, {0x3008, 0x3011}, {0x3014, 0x301F}, {0xFF61, 0xFF65}, {0x30FB, 0x30FB},
    {0xFF0E, 0xFF0E}, {0xFF0C, 0xFF0C}, {0xFF1F, 0xFF1F}, {0xFF1A, 0xFF1A}, {0xFF1B, 0xFF1B},
    {0xFF01, 0xFF02}, {0xFF08, 0xFF09},
};
#define N_OF(a) ((int)(sizeof a / sizeof *a))

char *ll_ev_ter_asian(const char *s, int split, int drop_punct) {
    /* split: _normalize_asian (each character of its classes and of the punctuation padded with
     * spaces); drop_punct: _remove_asian_punct.  The result is split on whitespace afterwards, so
     * one space on each side is what every chain of re.sub calls amounts to. */
    const unsigned char *u = (const unsigned char *)s;
    const size_t n = strlen(s);
    buf o = {0};
    put(&o, "", 0);
    for (size_t i = 0; i < n;) {
        const size_t at = i;
        const uint32_t c = ll_ev_decode(u, n, &i);
        const int punct = in(asian_punct, N_OF(asian_punct), c);
        if (drop_punct && punct) { /* " c " with c removed, or c removed */
            if (split) put(&o, " ", 1);
            continue;
        }
        const int pad = split && (punct || in(asian_split, N_OF(asian_split), c));
        if (pad) put(&o, " ", 1);
        put(&o, s + at, i - at);
        if (pad) put(&o, " ", 1);
    }
    return o.p;
}
