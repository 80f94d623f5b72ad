/* sacreBLEU's `intl` tokenizer (tokenizers/tokenizer_intl.py, mteval-v14.pl's international
 * tokenization): three regex substitutions on code points, with the Unicode classes of the
 * `regex` module (unicat_tab.c),
 *     (\P{N})(\p{P})  ->  \1 \2_        punctuation after a non-number
 *     (\p{P})(\P{N})  ->  _\1 \2        punctuation before a non-number
 *     (\p{S})         ->  _\1_          every symbol
 * each one's matches found left to right without overlap (re.sub), then ' '.join(line.split()).
 * So a separator between digits stays ("1,000.5"), and, as in mteval-v14, a number's final
 * period too ("in 2019." keeps "2019."). */
#include <stdlib.h>
#include <string.h>

#include "eval_internal.h"
#include "ll/core.h"

typedef struct {
    uint32_t *c;
    size_t n, cap;
} cps;

static void push(cps *v, uint32_t c) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 64;
        v->c = ll_realloc(v->c, v->cap * sizeof *v->c);
    }
    v->c[v->n++] = c;
}

static int is_n(uint32_t c) { return ll_ev_in_ranges(ll_cat_number, ll_cat_number_n, c); }
static int is_p(uint32_t c) { return ll_ev_in_ranges(ll_cat_punct, ll_cat_punct_n, c); }
static int is_s(uint32_t c) { return ll_ev_in_ranges(ll_cat_symbol, ll_cat_symbol_n, c); }

/* One two-character rule: at i, a match consumes i and i + 1 and the scan goes on at i + 2.
 * after_p: (\P{N})(\p{P}) -> "\1 \2 "; else (\p{P})(\P{N}) -> " \1 \2". */
static cps pair_rule(const cps *in, int after_p) {
    cps o = {0};
    for (size_t i = 0; i < in->n;) {
        if (i + 1 < in->n) {
            const uint32_t a = in->c[i], b = in->c[i + 1];
            if (after_p && !is_n(a) && is_p(b)) {
                push(&o, a), push(&o, ' '), push(&o, b), push(&o, ' ');
                i += 2;
                continue;
            }
            if (!after_p && is_p(a) && !is_n(b)) {
                push(&o, ' '), push(&o, a), push(&o, ' '), push(&o, b);
                i += 2;
                continue;
            }
        }
        push(&o, in->c[i++]);
    }
    return o;
}

char *ll_ev_tokintl(const char *s, size_t n, size_t *out_n) {
    const unsigned char *u = (const unsigned char *)s;
    cps a = {0};
    for (size_t i = 0; i < n;) push(&a, ll_ev_decode(u, n, &i));
    cps b = pair_rule(&a, 1);
    free(a.c);
    cps c = pair_rule(&b, 0);
    free(b.c);
    /* (\p{S}) -> " \1 ", then the code points back to UTF-8 */
    char *t = ll_malloc(4 * 3 * c.n + 1);
    size_t len = 0;
    for (size_t i = 0; i < c.n; i++) {
        const int sym = is_s(c.c[i]);
        if (sym) t[len++] = ' ';
        len += ll_ev_encode(c.c[i], t + len);
        if (sym) t[len++] = ' ';
    }
    t[len] = 0;
    free(c.c);
    char *out = ll_ev_join_split(t, len, out_n); /* ' '.join(line.split()) */
    free(t);
    return out;
}
