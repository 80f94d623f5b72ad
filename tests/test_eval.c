/* BLEU / chrF / TER against sacreBLEU 2.6.0 (docs/eval.md).
 *
 * Vector sources:
 *  - sacreBLEU's own test suite, test/test_bleu.py, test_chrf.py and
 *    test_sentence_bleu.py of the sacrebleu-2.6.0 sdist (`pip download
 *    sacrebleu==2.6.0 --no-binary :all:`), with their tolerances; cases that
 *    need max_ngram_order != 4 are left out;
 *  - the README's Python API examples (corpus BLEU/chrF, nrefs:var);
 *  - "generated" blocks: printed by tests/data/eval/make_vectors.py under
 *    sacrebleu 2.6.0, Python 3.11.7 (scores are repr() doubles, checked to 1e-9
 *    so another libm's last-bit exp/log differences do not matter; the shell test
 *    tests/cli/test_eval_sacrebleu.sh checks bit-identity against the live package). */
#include <stdlib.h>
#include <string.h>

#include "../src/eval/eval_internal.h" /* white-box: tokenizer and lower() */
#include "ll/core.h"
#include "ll/eval.h"
#include "util/testutil.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- generated: Tokenizer13a()(s) ---- */
static const char *const tok_vec[][2] = {
    {"Hello, world!", "Hello , world !"},
    {"1,000.50 dollars", "1,000.50 dollars"},
    {"3.14 and 2.5.", "3.14 and 2.5 ."},
    {"pages 10-20, a-b 5- -6", "pages 10 - 20 , a-b 5 - -6"},
    {"e.g. U.S.A.", "e . g . U . S . A ."},
    {"&quot;x&quot; &amp;lt; &lt;b&gt; AT&amp;T", "\" x \" < < b > AT & T"},
    {"a<skipped>b <skipped>", "ab"},
    {"line-\nbreak\nhere", "linebreak here"},
    {"tab\there\xc2\xa0nbsp\xe3\x80\x80ideo", "tab here nbsp ideo"},
    {"我们今天很好。", "我们今天很好。"},
    {"مرحبا، ١٢٣.", "مرحبا، ١٢٣ ."},
    {"😀.👍🏽,x", "😀 . 👍🏽 , x"},
    {"(hi) [x] {y} ~z^ `q` |p|", "( hi ) [ x ] { y } ~ z ^ ` q ` | p |"},
    {"don't 'quote'", "don't 'quote'"},
    {"..,,.!?", ". . , , . ! ?"},
    {".5 5. ,5 5, a.b 1.b a.1", ". 5 5 . , 5 5 , a . b 1 . b a . 1"},
    {"$5 €10 50% #1 @me", "$ 5 €10 50 % # 1 @ me"},
    {"  ", ""},
    {"", ""},
    {"x\x1cy\xc2\x85z\xe2\x80\xa8w", "x y z w"},
    {"\xe2\x80\x8bzw \xef\xbb\xbf" "bom", "\xe2\x80\x8bzw \xef\xbb\xbf" "bom"},
    {"5-5-5 a--b 1--2", "5 - 5 - 5 a--b 1 - -2"},
};

/* ---- generated: TokenizerZh()(s) (tokenizer_zh.py, sacrebleu 2.6.0) ---- */
static const char *const zh_vec[][2] = {
    {" .5\xe5\x85\x83", ".5 \xe5\x85\x83"},
    {"3.", "3."},
    {"\xe6\x88\x91\xe4\xbb\xac\xe4\xbb\x8a\xe5\xa4\xa9\xe5\xbe\x88\xe5\xa5\xbd\xe3\x80\x82", "\xe6\x88\x91 \xe4\xbb\xac \xe4\xbb\x8a \xe5\xa4\xa9 \xe5\xbe\x88 \xe5\xa5\xbd \xe3\x80\x82"},
    {"\xe4\xbb\xb7\xe6\xa0\xbc\xe6\x98\xaf" "1,000.50\xe5\x85\x83\xe3\x80\x82", "\xe4\xbb\xb7 \xe6\xa0\xbc \xe6\x98\xaf 1,000.50 \xe5\x85\x83 \xe3\x80\x82"},
    {"\xe3\x80\x80\xe4\xb8\xad\xe6\x96\x87 ,x", "\xe4\xb8\xad \xe6\x96\x87 , x"},
    {"a\xe2\x80\x80" "b\xe2\x80\x81" "c", "a b c"},
    {"\xe2\x80\xa6" "end", "\xe2\x80\xa6 end"},
    {"\xe2\xa9\xad\xe2\xa9\xae\xe2\xbe\x80\xe2\xbe\x81\xe2\xbe\xa1\xe2\xbe\xa2", "\xe2\xa9\xad \xe2\xa9\xae \xe2\xbe\x80 \xe2\xbe\x81 \xe2\xbe\xa1 \xe2\xbe\xa2"},
    {"\xf0\xa0\x80\x80 \xf0\xaf\xa0\x80", "\xf0\xa0\x80\x80 \xf0\xaf\xa0\x80"},
    {"Hello, world!", "Hello , world !"},
    {"e.g. U.S.A.", "e . g . U . S . A ."},
    {"\xef\xbd\xb6\xef\xbe\x80\xef\xbd\xb6\xef\xbe\x85\xef\xbc\x91\xef\xbc\x92\xef\xbc\x93", "\xef\xbd\xb6 \xef\xbe\x80 \xef\xbd\xb6 \xef\xbe\x85 \xef\xbc\x91 \xef\xbc\x92 \xef\xbc\x93"},
    {"1-2\xe7\xab\xa0", "1 - 2 \xe7\xab\xa0"},
    {"&amp; <skipped>", "& amp ; < skipped >"},
    {"\xc2\xa0x.\xc2\xa0", "x ."},
    {"a\xe2\xa9\xad" "b", "a \xe2\xa9\xad b"},
    {"a\xe2\xa9\xae" "b", "a\xe2\xa9\xae" "b"},
    {"a\xe2\xbe\x80" "b", "a \xe2\xbe\x80 b"},
    {"a\xe2\xbe\x81" "b", "a \xe2\xbe\x81 b"},
    {"a\xe2\xbe\xa1" "b", "a \xe2\xbe\xa1 b"},
    {"a\xe2\xbe\xa2" "b", "a \xe2\xbe\xa2 b"},
    {"a\xe9\xbe\xbc" "b", "a\xe9\xbe\xbc" "b"},
    {"a\xf0\xa0\x80\x81" "b", "a\xf0\xa0\x80\x81" "b"},
    {"\xe4\xb6\xb5\xe4\xb6\xb6\xe9\xbe\xbb\xe9\xbe\xbc\xef\xa8\xad\xef\xa8\xae", "\xe4\xb6\xb5 \xe4\xb6\xb6 \xe9\xbe\xbb \xe9\xbe\xbc \xef\xa8\xad \xef\xa8\xae"},
};
/* ---- generated: TokenizerV14International()(s) (tokenizer_intl.py, sacrebleu 2.6.0) ---- */
static const char *const intl_vec[][2] = {
    {"Hello, world!", "Hello , world !"},
    {"1,000.50 dollars in 2019.", "1,000.50 dollars in 2019."},
    {"\xc2\xbfQu\xc3\xa9? \xc2\xa1S\xc3\xad!", "\xc2\xbf Qu\xc3\xa9 ? \xc2\xa1 S\xc3\xad !"},
    {"\xc2\xab\xc3\xa9t\xc3\xa9\xc2\xbb \xe2\x80\x94 5\xe2\x82\xac, 10% \xc2\xa9", "\xc2\xab \xc3\xa9t\xc3\xa9 \xc2\xbb \xe2\x80\x94 5 \xe2\x82\xac , 10 % \xc2\xa9"},
    {"a-b x/y e.g. U.S.", "a - b x / y e . g . U . S ."},
    {"\xd9\xa3\xd9\xab\xd9\xa1\xd9\xa4 \xd8\x8c\xd8\x9f", "\xd9\xa3\xd9\xab\xd9\xa1\xd9\xa4 \xd8\x8c \xd8\x9f"},
    {"\xe3\x80\x8c\xe5\xbc\x95\xe7\x94\xa8\xe3\x80\x8d\xe3\x80\x82", "\xe3\x80\x8c \xe5\xbc\x95\xe7\x94\xa8 \xe3\x80\x8d \xe3\x80\x82"},
    {"x\xc2\xb2+y\xc2\xb2=z\xc2\xb2", "x\xc2\xb2 + y\xc2\xb2 = z\xc2\xb2"},
    {"don't $5 ^_^", "don ' t $ 5 ^ _ ^"},
    {".5 5. (3)", ".5 5 . ( 3)"},
};
/* ---- generated: TokenizerChar()(s) ---- */
static const char *const char_vec[][2] = {
    {"\xe6\x88\x91\xe4\xbb\xac \xe5\xa5\xbd", "\xe6\x88\x91 \xe4\xbb\xac   \xe5\xa5\xbd"},
    {"a b", "a   b"},
    {"", ""},
    {"\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", "\xf0\x9f\x98\x80 \xf0\x9f\x91\x8d \xf0\x9f\x8f\xbd"},
    {"e\xcc\x81.", "e \xcc\x81 ."},
    {"  x", "    x"},
};

/* ---- generated: s.lower() ---- */
static const char *const lower_vec[][2] = {
    {"HELLO World", "hello world"},
    {"ΣΊΣΥΦΟΣ ΟΔΟΣ.", "σίσυφος οδος."},
    {"Σ", "σ"},
    {"ΑΣ", "ας"},
    {"ΑΣ'", "ας'"},
    {"Α'Σ'Β", "α'σ'β"},
    {"ΑΣ.Β", "ασ.β"},
    {"İstanbul", "i\xcc\x87stanbul"},
    {"ǅǈǋ ⅫⒶ", "ǆǉǌ ⅻⓐ"},
    {"ΜΆΙΟΣ-", "μάιος-"},
    {"STRASSE ß ẞ", "strasse ß ß"},
    {"ĲSSEL Å Ω K", "ĳssel å ω k"},
    {"A\xcc\x81Σ", "a\xcc\x81ς"},
    {"Σ\xcc\x81 ΑΣ\xcc\x81", "σ\xcc\x81 ας\xcc\x81"},
};

/* ---- generated: corpus scores ---- */
static const char *const corp_unicode_hyp[] = {"Le chat est sur le tapis.", "1,000.50 € — «cher» !",
                                              "我们今天很好。", "", "ΟΔΟΣ İstanbul"};
static const char *const corp_unicode_ref[] = {"Le chat était sur le tapis.", "1,000.50 € - « cher » !",
                                              "我们今天天气很好。", "vide", "οδός istanbul"};
static const char *const corp_multi_hyp[] = {"the cat sat on the mat", "a quick brown fox", "x y z"};
static const char *const corp_multi_ref1[] = {"the cat is on the mat", "the quick brown fox", "x y"};
static const char *const corp_multi_ref2[] = {"there is a cat on the mat", "a fast brown fox", "x y z w"};
static const char *const corp_short_hyp[] = {"a", "b c"};
static const char *const corp_short_ref[] = {"a", "b d"};

typedef struct {
    const char *const *hyps;
    const char *const *refs[3];
    int n, nrefs;
} corpus;

static const corpus corpora[] = {
    {corp_unicode_hyp, {corp_unicode_ref}, 5, 1},
    {corp_multi_hyp, {corp_multi_ref1, corp_multi_ref2}, 3, 2},
    {corp_short_hyp, {corp_short_ref}, 2, 1},
};

static const struct {
    int corpus, lowercase, tok_none, word_order;
    double bleu, chrf;
    const char *bleu_line, *chrf_line;
} corp_vec[] = {
    /* unicode, default */ {0, 0, 0, 0, 26.731321890464393, 59.69733665200416, "BLEU = 26.73 60.0/45.5/25.0/16.7 (BP = 0.819 ratio = 0.833 hyp_len = 15 ref_len = 18)", "chrF2 = 59.70"},
    /* unicode, lc */ {0, 1, 0, 0, 26.731321890464393, 61.10656317471651, "BLEU = 26.73 60.0/45.5/25.0/16.7 (BP = 0.819 ratio = 0.833 hyp_len = 15 ref_len = 18)", "chrF2 = 61.11"},
    /* unicode, none */ {0, 0, 1, 2, 19.293804446447208, 56.20359021284362, "BLEU = 19.29 57.1/40.0/14.3/10.0 (BP = 0.807 ratio = 0.824 hyp_len = 14 ref_len = 17)", "chrF2++ = 56.20"},
    /* multi, default */ {1, 0, 0, 0, 43.13375730026456, 72.04767091780613, "BLEU = 43.13 92.3/70.0/42.9/12.5 (BP = 1.000 ratio = 1.083 hyp_len = 13 ref_len = 12)", "chrF2 = 72.05"},
    /* multi, lc */ {1, 1, 0, 0, 43.13375730026456, 72.04767091780613, "BLEU = 43.13 92.3/70.0/42.9/12.5 (BP = 1.000 ratio = 1.083 hyp_len = 13 ref_len = 12)", "chrF2 = 72.05"},
    /* multi, none */ {1, 0, 1, 2, 43.13375730026456, 72.46403721115165, "BLEU = 43.13 92.3/70.0/42.9/12.5 (BP = 1.000 ratio = 1.083 hyp_len = 13 ref_len = 12)", "chrF2++ = 72.46"},
    /* short, default */ {2, 0, 0, 0, 0.0, 33.33333333333333, "BLEU = 0.00 66.7/50.0/0.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 3 ref_len = 3)", "chrF2 = 33.33"},
    /* short, lc */ {2, 1, 0, 0, 0.0, 33.33333333333333, "BLEU = 0.00 66.7/50.0/0.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 3 ref_len = 3)", "chrF2 = 33.33"},
    /* short, none */ {2, 0, 1, 2, 0.0, 33.33333333333333, "BLEU = 0.00 66.7/50.0/0.0/0.0 (BP = 1.000 ratio = 1.000 hyp_len = 3 ref_len = 3)", "chrF2++ = 33.33"},
};

/* ---- helpers ---- */

static void bleu_corpus(const ll_bleu_opts *o, const char *const *hyps, const char *const *const *streams,
                        int nstreams, int n, ll_bleu_stats *s, ll_bleu_result *r) {
    ll_bleu_init(s, o);
    for (int i = 0; i < n; i++) {
        const char *refs[4];
        for (int k = 0; k < nstreams; k++) refs[k] = streams[k][i];
        CHECK(ll_bleu_add(s, hyps[i], refs, nstreams) == 0);
    }
    ll_bleu_compute(s, r);
}

static void chrf_corpus(const ll_chrf_opts *o, const char *const *hyps, const char *const *const *streams,
                        int nstreams, int n, ll_chrf_stats *s, ll_chrf_result *r) {
    CHECK(ll_chrf_init(s, o) == 0);
    for (int i = 0; i < n; i++) {
        const char *refs[4];
        for (int k = 0; k < nstreams; k++) refs[k] = streams[k][i];
        CHECK(ll_chrf_add(s, hyps[i], refs, nstreams) == 0);
    }
    ll_chrf_compute(s, r);
}

/* sacrebleu.raw_corpus_bleu(hyps, [refs], sv): tokenize none, floor smoothing, effective order; score / 100 */
static double raw_corpus_bleu(const char *hyp, const char *ref, double sv, ll_bleu_result *r) {
    ll_bleu_opts o;
    ll_bleu_opts_default(&o);
    o.tokenize = LL_BLEU_TOK_NONE;
    o.smooth = LL_BLEU_SMOOTH_FLOOR;
    o.smooth_value = sv;
    o.effective_order = 1;
    ll_bleu_stats s;
    const char *const hyps[] = {hyp}, *const refs[] = {ref}, *const *const streams[] = {refs};
    bleu_corpus(&o, hyps, streams, 1, 1, &s, r);
    return r->score / 100;
}

/* BLEU.compute_bleu on given statistics */
static double compute_bleu(const int64_t correct[4], const int64_t total[4], int64_t sys_len, int64_t ref_len,
                           ll_bleu_smooth sm, double sv) {
    ll_bleu_opts o;
    ll_bleu_opts_default(&o);
    o.smooth = sm;
    o.smooth_value = sv;
    ll_bleu_stats s;
    ll_bleu_init(&s, &o);
    memcpy(s.correct, correct, sizeof s.correct);
    memcpy(s.total, total, sizeof s.total);
    s.sys_len = sys_len;
    s.ref_len = ref_len;
    ll_bleu_result r;
    ll_bleu_compute(&s, &r);
    return r.score;
}

/* ---- white-box: tokenizer, lower(), UTF-8 ---- */

/* each vec[i][0] tokenized by tok must give vec[i][1] */
static void check_tok(const char *name, char *(*tok)(const char *, size_t, size_t *), const char *const (*vec)[2],
                      int n) {
    for (int i = 0; i < n; i++) {
        size_t len;
        char *t = tok(vec[i][0], strlen(vec[i][0]), &len);
        CHECK_MSG(!strcmp(t, vec[i][1]) && len == strlen(t), "%s(\"%s\") = \"%s\", want \"%s\"", name, vec[i][0], t,
                  vec[i][1]);
        free(t);
    }
}

static void test_tokenizer(void) {
    check_tok("13a", ll_ev_tok13a, tok_vec, N(tok_vec));
    check_tok("zh", ll_ev_tokzh, zh_vec, N(zh_vec));
    check_tok("char", ll_ev_tokchar, char_vec, N(char_vec));
    check_tok("intl", ll_ev_tokintl, intl_vec, N(intl_vec));
    /* the names lleval and the config take, and the signature's */
    for (int t = LL_BLEU_TOK_13A; t <= LL_BLEU_TOK_INTL; t++) {
        ll_bleu_tok back = LL_BLEU_TOK_NONE;
        CHECK(ll_bleu_tok_parse(ll_bleu_tok_name((ll_bleu_tok)t), &back) == 0 && back == (ll_bleu_tok)t);
    }
    ll_bleu_tok none;
    CHECK(ll_bleu_tok_parse("ja-mecab", &none) == -1);
    for (int i = 0; i < N(lower_vec); i++) {
        size_t n;
        char *t = ll_ev_lower(lower_vec[i][0], strlen(lower_vec[i][0]), &n);
        CHECK_MSG(!strcmp(t, lower_vec[i][1]), "lower(\"%s\") = \"%s\", want \"%s\"", lower_vec[i][0], t,
                  lower_vec[i][1]);
        free(t);
    }
    /* Python's strict UTF-8: overlongs, surrogates, > U+10FFFF and truncations fail */
    static const struct {
        const char *s;
        long at;
    } utf8[] = {{"plain ascii", -1}, {"ΣΊΣΥΦΟΣ 我们 😀", -1}, {"ab\xc0\x80", 2}, {"\xed\xa0\x80", 0},
                {"x\xf4\x90\x80\x80", 1}, {"\xe6\x88", 0},     {"ok\xff", 2},     {"\xf0\x9f\x98\x80\x80", 4}};
    for (int i = 0; i < N(utf8); i++) CHECK(ll_utf8_invalid_at(utf8[i].s, strlen(utf8[i].s)) == utf8[i].at);
    const char *ws = "a b\t\xc2\xa0\xe3\x80\x80\x1c\r";
    CHECK(ll_eval_rstrip_len(ws, strlen(ws)) == 3);
    const char *zw = "a\xe2\x80\x8b"; /* ZERO WIDTH SPACE is not whitespace in Python */
    CHECK(ll_eval_rstrip_len(zw, strlen(zw)) == strlen(zw));
}

/* ---- sacreBLEU's test suite ---- */

static const char *const readme_refs1[] = {"The dog bit the man.", "It was not unexpected.", "The man bit him first."};
static const char *const readme_refs2[] = {"The dog had bit the man.", "No one was surprised.",
                                           "The man had bitten the dog."};
static const char *const readme_hyps[] = {"The dog bit the man.", "It wasn't surprising.",
                                          "The man had just bitten him."};

static void test_sacrebleu_bleu(void) {
    const double eps = 1e-8; /* test_bleu.py EPSILON */
    ll_bleu_result r;
    ll_bleu_stats s;
    /* test_raw_bleu_cases */
    {
        const char *const h[] = {"this is a test", "another test"}, *const rf[] = {"ref1", "ref2"};
        const char *const *const st[] = {rf};
        ll_bleu_opts o;
        ll_bleu_opts_default(&o);
        o.tokenize = LL_BLEU_TOK_NONE, o.smooth = LL_BLEU_SMOOTH_FLOOR, o.smooth_value = .01, o.effective_order = 1;
        bleu_corpus(&o, h, st, 1, 2, &s, &r);
        CHECK(r.score == 0.0);
    }
    CHECK_NEAR(raw_corpus_bleu("this is a test", "this is a test", .01, &r), 1.0, eps);
    CHECK_NEAR(raw_corpus_bleu("this is a fest", "this is a test", .01, &r), 0.223606797749979, eps);
    /* test_case_effective_order */
    CHECK_NEAR(raw_corpus_bleu("test", "a test", .01, &r), 0.3678794411714425, eps);
    CHECK_NEAR(raw_corpus_bleu("a test", "a test", .01, &r), 1.0, eps);
    CHECK_NEAR(raw_corpus_bleu("a little test", "a test", .01, &r), 0.03218297948685433, eps);
    /* test_case_statistics */
    raw_corpus_bleu("am I am a character sequence", "I am a symbol string sequence a a", .01, &r);
    const int64_t counts[4] = {4, 2, 1, 0}, totals[4] = {6, 5, 4, 3};
    CHECK(!memcmp(r.correct, counts, sizeof counts) && !memcmp(r.total, totals, sizeof totals));
    /* test_offset: floor with 0.0, and with the default 0.1 */
    CHECK_NEAR(raw_corpus_bleu("am I am a character sequence", "I am a symbol string sequence a a", 0.0, &r), 0, eps);
    CHECK_NEAR(raw_corpus_bleu("am I am a character sequence", "I am a symbol string sequence a a", -1, &r),
               0.1555722182, eps);
    /* test_corpus_bleu_cases: the README corpus (two reference streams) */
    const char *const *const st[] = {readme_refs1, readme_refs2};
    ll_bleu_opts o;
    ll_bleu_opts_default(&o);
    bleu_corpus(&o, readme_hyps, st, 2, 3, &s, &r);
    CHECK_NEAR(r.score, 48.530827, 1e-6 + eps);
    const char *const empty[] = {"", "", ""};
    bleu_corpus(&o, empty, st, 2, 3, &s, &r);
    CHECK(r.score == 0.0);
    o.tokenize = LL_BLEU_TOK_NONE;
    bleu_corpus(&o, readme_hyps, st, 2, 3, &s, &r);
    CHECK_NEAR(r.score, 49.1919566, 1e-7 + eps);
    o.tokenize = LL_BLEU_TOK_INTL;
    bleu_corpus(&o, readme_hyps, st, 2, 3, &s, &r);
    CHECK_NEAR(r.score, 43.91623493, 1e-8 + eps);
    ll_bleu_opts_default(&o);
    o.smooth = LL_BLEU_SMOOTH_NONE;
    bleu_corpus(&o, readme_hyps, st, 2, 3, &s, &r);
    CHECK_NEAR(r.score, 48.530827, 1e-6 + eps);
    /* test_case_scoring (smooth 'none') */
    const int64_t c9[4] = {9, 7, 5, 3}, t10[4] = {10, 8, 6, 4};
    CHECK_NEAR(compute_bleu(c9, t10, 11, 11, LL_BLEU_SMOOTH_NONE, -1) / 100, 0.8375922397, eps);
    /* test_case_degenerate_stats (floor) */
    static const struct {
        int64_t c[4], t[4], sys, ref;
        double off;
    } deg[] = {{{0, 0, 0, 0}, {4, 4, 2, 1}, 0, 1, 0.0},   {{0, 0, 0, 0}, {10, 11, 12, 0}, 14, 10, 0.0},
               {{0, 0, 0, 0}, {0, 0, 0, 0}, 0, 0, 0.0},   {{6, 5, 4, 0}, {6, 5, 4, 3}, 6, 6, 0.0},
               {{0, 0, 0, 0}, {0, 0, 0, 0}, 0, 0, 0.1},   {{0, 0, 0, 0}, {0, 0, 0, 0}, 1, 5, 0.01}};
    for (int i = 0; i < N(deg); i++)
        CHECK(compute_bleu(deg[i].c, deg[i].t, deg[i].sys, deg[i].ref, LL_BLEU_SMOOTH_FLOOR, deg[i].off) == 0.0);

    /* test_sentence_bleu.py (effective order on), EPSILON 1e-3 */
    static const struct {
        ll_bleu_smooth sm;
        double sv;
        ll_bleu_tok tok;
        double want;
        int lc;
    } sent[] = {{LL_BLEU_SMOOTH_EXP, -1, LL_BLEU_TOK_13A, 8.493, 0},
                {LL_BLEU_SMOOTH_NONE, -1, LL_BLEU_TOK_13A, 0.0, 0},
                {LL_BLEU_SMOOTH_FLOOR, -1, LL_BLEU_TOK_13A, 4.51688, 0},
                {LL_BLEU_SMOOTH_FLOOR, 0.1, LL_BLEU_TOK_13A, 4.51688, 0},
                {LL_BLEU_SMOOTH_FLOOR, 0.5, LL_BLEU_TOK_13A, 10.10, 0},
                {LL_BLEU_SMOOTH_ADDK, -1, LL_BLEU_TOK_13A, 14.882, 0},
                {LL_BLEU_SMOOTH_ADDK, 1, LL_BLEU_TOK_13A, 14.882, 0},
                {LL_BLEU_SMOOTH_ADDK, 2, LL_BLEU_TOK_13A, 21.389, 0},
                {LL_BLEU_SMOOTH_EXP, -1, LL_BLEU_TOK_NONE, 7.347, 0},
                {LL_BLEU_SMOOTH_EXP, -1, LL_BLEU_TOK_CHAR, 40.8759, 0},
                {LL_BLEU_SMOOTH_EXP, -1, LL_BLEU_TOK_INTL, 8.493, 0},
                {LL_BLEU_SMOOTH_EXP, -1, LL_BLEU_TOK_CHAR, 42.0267, 1}};
    const char *ref98 = "producţia de zahăr brut se exprimă în zahăr alb;";
    const char *sys98 = "Producția de zahăr primă va fi exprimată în ceea ce privește zahărul alb;";
    for (int i = 0; i < N(sent); i++) {
        ll_bleu_opts_default(&o);
        o.smooth = sent[i].sm, o.smooth_value = sent[i].sv;
        o.tokenize = sent[i].tok, o.lowercase = sent[i].lc;
        CHECK(ll_bleu_sentence(&o, sys98, &ref98, 1, &r) == 0);
        CHECK_NEAR(r.score, sent[i].want, 1e-3);
        /* test_cases_zero_bleu (#141): no matches at all is 0 whatever the smoothing */
        const char *ref0 = "okay thanks";
        if (sent[i].tok == LL_BLEU_TOK_13A) CHECK(ll_bleu_sentence(&o, "this is a cat", &ref0, 1, &r) == 0 && r.score == 0.0);
    }
}

static void test_sacrebleu_chrf(void) {
    /* test_chrf.py test_cases: beta 3, eps smoothing; EPSILON 1e-4 */
    static const struct {
        const char *h, *r;
        double want;
    } eps_cases[] = {
        {"abcdefg", "hijklmnop", 0.0}, {"a", "b", 0.0}, {"", "b", 0.0}, {"", "ref", 0.0}, {"", "reference", 0.0},
        {"aa", "ab", 8.3333}, {"a", "a", 16.6667}, {"a b c", "a b c", 50.0}, {"a b c", "abc", 50.0},
        {" risk assessment must be made of those who are qualified and expertise in the sector - these are the "
         "scientists .",
         "risk assessment has to be undertaken by those who are qualified and expert in that area - that is the "
         "scientists .",
         63.361730},
        {" Die    Beziehung zwischen  Obama und Netanjahu ist nicht gerade  freundlich. ",
         "Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade freundschaftlich.", 64.1302698},
        {"Niemand hat die Absicht, eine Mauer zu errichten", "Niemand hat die Absicht, eine Mauer zu errichten",
         100.0},
    };
    static const struct {
        const char *h, *r;
        double want;
    } eff_cases[] = {{"a", "a", 100.0}, {"", "reference", 0.0}, {"a b c", "a b c", 100.0},
                     {"a b c", "abc", 100.0}, {"", "c", 0.0}, {"aa", "ab", 25.0}};
    ll_chrf_opts o;
    ll_chrf_stats s;
    ll_chrf_result r;
    for (int pass = 0; pass < 2; pass++) {
        int n = pass ? N(eff_cases) : N(eps_cases);
        for (int i = 0; i < n; i++) {
            ll_chrf_opts_default(&o);
            o.beta = 3;
            o.eps_smoothing = !pass;
            const char *h = pass ? eff_cases[i].h : eps_cases[i].h, *rf = pass ? eff_cases[i].r : eps_cases[i].r;
            const char *const *const st[] = {&rf};
            chrf_corpus(&o, &h, st, 1, 1, &s, &r);
            CHECK_NEAR(r.score, pass ? eff_cases[i].want : eps_cases[i].want, 1e-4);
        }
    }
    /* two-sentence corpora: ["a", "b"] vs ["a", "c"] */
    const char *const h2[] = {"a", "b"}, *const r2[] = {"a", "c"}, *const *const st2[] = {r2};
    ll_chrf_opts_default(&o);
    o.beta = 3, o.eps_smoothing = 1;
    chrf_corpus(&o, h2, st2, 1, 2, &s, &r);
    CHECK_NEAR(r.score, 8.3333, 1e-4);
    o.eps_smoothing = 0;
    chrf_corpus(&o, h2, st2, 1, 2, &s, &r);
    CHECK_NEAR(r.score, 50.0, 1e-4);
    /* test_cases_keep_whitespace */
    static const struct {
        const char *h, *r;
        double want;
    } ws_cases[] = {
        {"Die Beziehung zwischen Obama und Netanjahu ist nicht gerade freundlich.",
         "Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade freundschaftlich.", 67.3481606},
        {"risk assessment must be made of those who are qualified and expertise in the sector - these are the "
         "scientists .",
         "risk assessment has to be undertaken by those who are qualified and expert in that area - that is the "
         "scientists .",
         65.2414427},
    };
    for (int i = 0; i < N(ws_cases); i++) {
        ll_chrf_opts_default(&o);
        o.beta = 3, o.whitespace = 1;
        const char *const *const st[] = {&ws_cases[i].r};
        chrf_corpus(&o, &ws_cases[i].h, st, 1, 1, &s, &r);
        CHECK_NEAR(r.score, ws_cases[i].want, 1e-4);
    }
    /* test_sentence_level_chrf: sentence_chrf(eps_smoothing=True), beta 2 */
    static const struct {
        const char *h, *r;
        double want;
    } sl[] = {
        {"Co nás nejvíc trápí, protože lékaři si vybírají, kdo bude žít a kdo zemře.",
         "Nejvíce smutní jsme z toho, že musíme rozhodovat o tom, kdo bude žít a kdo zemře.", 39.14078509},
        {"Nebo prostě nemají vybavení, které by jim pomohlo, uvedli lékaři.",
         "A někdy nemáme ani potřebný materiál, abychom jim pomohli, popsali lékaři.", 31.22557079},
        {"Lapali po dechu, jejich životy skončily dřív, než skutečně začaly.",
         "Lapali po dechu a pak jejich život skončil - dřív, než skutečně mohl začít, připomněli.", 57.15704367},
    };
    for (int i = 0; i < N(sl); i++) {
        ll_chrf_opts_default(&o);
        o.eps_smoothing = 1;
        const char *const *const st[] = {&sl[i].r};
        chrf_corpus(&o, &sl[i].h, st, 1, 1, &s, &r);
        CHECK_NEAR(r.score, sl[i].want, 1e-4);
    }
}

/* README "Using SacreBLEU from Python": lines and signatures (version field ours) */
static void test_readme(void) {
    const char *const *const st[] = {readme_refs1, readme_refs2};
    ll_bleu_stats bs;
    ll_bleu_result br;
    char line[LL_EVAL_LINE_MAX], sig[LL_EVAL_LINE_MAX];
    bleu_corpus(NULL, readme_hyps, st, 2, 3, &bs, &br);
    ll_bleu_format(&br, 2, 0, NULL, line, sizeof line);
    CHECK_CONTAINS(line, "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)");
    ll_bleu_signature(&bs, 0, sig, sizeof sig);
    CHECK(!strcmp(sig, "nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:" LL_SACREBLEU_VERSION));
    ll_chrf_stats cs;
    ll_chrf_result cr;
    chrf_corpus(NULL, readme_hyps, st, 2, 3, &cs, &cr);
    ll_chrf_format(&cr, 2, 0, NULL, line, sizeof line);
    CHECK(!strcmp(line, "chrF2 = 59.73"));
    CHECK_NEAR(cr.score, 59.72751782684763, 1e-9); /* generated: repr(CHRF().corpus_score(...).score) */
    CHECK_NEAR(br.score, 48.530827009929865, 1e-9);

    /* Variable number of references: a missing (None/NULL) first reference */
    const char *const refs1_var[] = {NULL, "It was not unexpected.", "The man bit him first."};
    const char *const *const stv[] = {refs1_var, readme_refs2};
    bleu_corpus(NULL, readme_hyps, stv, 2, 3, &bs, &br);
    ll_bleu_format(&br, 2, 0, NULL, line, sizeof line);
    CHECK(!strcmp(line, "BLEU = 29.44 82.4/42.9/27.3/12.5 (BP = 0.889 ratio = 0.895 hyp_len = 17 ref_len = 19)"));
    ll_bleu_signature(&bs, 0, sig, sizeof sig);
    CHECK(!strcmp(sig, "nrefs:var|case:mixed|eff:no|tok:13a|smooth:exp|version:" LL_SACREBLEU_VERSION));
    chrf_corpus(NULL, readme_hyps, stv, 2, 3, &cs, &cr);
    ll_chrf_format(&cr, 2, 0, NULL, line, sizeof line);
    CHECK(!strcmp(line, "chrF2 = 51.70")); /* generated */
}

static void test_generated_corpora(void) {
    for (int i = 0; i < N(corp_vec); i++) {
        const corpus *c = &corpora[corp_vec[i].corpus];
        ll_bleu_opts bo;
        ll_bleu_opts_default(&bo);
        bo.lowercase = corp_vec[i].lowercase;
        bo.tokenize = corp_vec[i].tok_none ? LL_BLEU_TOK_NONE : LL_BLEU_TOK_13A;
        ll_chrf_opts co;
        ll_chrf_opts_default(&co);
        co.lowercase = corp_vec[i].lowercase;
        co.word_order = corp_vec[i].word_order;
        ll_bleu_stats bs;
        ll_bleu_result br;
        ll_chrf_stats cs;
        ll_chrf_result cr;
        bleu_corpus(&bo, c->hyps, c->refs, c->nrefs, c->n, &bs, &br);
        chrf_corpus(&co, c->hyps, c->refs, c->nrefs, c->n, &cs, &cr);
        CHECK_NEAR(br.score, corp_vec[i].bleu, 1e-9);
        CHECK_NEAR(cr.score, corp_vec[i].chrf, 1e-9);
        char line[LL_EVAL_LINE_MAX];
        ll_bleu_format(&br, 2, 0, NULL, line, sizeof line);
        CHECK_MSG(!strcmp(line, corp_vec[i].bleu_line), "vector %d: %s", i, line);
        ll_chrf_format(&cr, 2, 0, NULL, line, sizeof line);
        CHECK_MSG(!strcmp(line, corp_vec[i].chrf_line), "vector %d: %s", i, line);
    }
}

/* ---- API behaviour ---- */

static void test_api(void) {
    char buf[LL_EVAL_LINE_MAX];
    /* merging per-thread statistics equals adding everything to one */
    const char *const *const st[] = {readme_refs1, readme_refs2};
    ll_bleu_stats all, a, b;
    ll_bleu_result r1, r2;
    bleu_corpus(NULL, readme_hyps, st, 2, 3, &all, &r1);
    bleu_corpus(NULL, readme_hyps, st, 2, 1, &a, &r2);
    const char *const *const st_tail[] = {readme_refs1 + 1, readme_refs2 + 1};
    bleu_corpus(NULL, readme_hyps + 1, st_tail, 2, 2, &b, &r2);
    ll_bleu_merge(&a, &b);
    ll_bleu_compute(&a, &r2);
    CHECK(r1.score == r2.score && a.n_sents == 3 && a.nrefs == 2);
    ll_chrf_stats ca, cb, call;
    ll_chrf_result c1, c2;
    chrf_corpus(NULL, readme_hyps, st, 2, 3, &call, &c1);
    chrf_corpus(NULL, readme_hyps, st, 2, 1, &ca, &c2);
    chrf_corpus(NULL, readme_hyps + 1, st_tail, 2, 2, &cb, &c2);
    ll_chrf_merge(&ca, &cb);
    ll_chrf_compute(&ca, &c2);
    CHECK(c1.score == c2.score);

    /* no reference left: an error, not a crash */
    const char *none[] = {NULL};
    CHECK(ll_bleu_add(&a, "x", none, 1) == -1);
    CHECK_CONTAINS(ll_errbuf(), "no reference");
    CHECK(ll_chrf_add(&ca, "x", none, 0) == -1);
    ll_chrf_opts co;
    ll_chrf_opts_default(&co);
    co.char_order = 0;
    CHECK(ll_chrf_init(&ca, &co) == -1);
    co.char_order = 15, co.word_order = 2;
    CHECK(ll_chrf_init(&ca, &co) == -1);
    CHECK_CONTAINS(ll_errbuf(), "1..16");

    /* empty corpus scores 0 */
    ll_bleu_init(&a, NULL);
    ll_bleu_compute(&a, &r1);
    ll_bleu_format(&r1, 2, 0, NULL, buf, sizeof buf);
    CHECK(!strcmp(buf, "BLEU = 0.00 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 0.000 hyp_len = 0 ref_len = 0)"));

    /* signatures: options and --short */
    ll_bleu_opts bo;
    ll_bleu_opts_default(&bo);
    bo.lowercase = 1, bo.tokenize = LL_BLEU_TOK_NONE, bo.smooth = LL_BLEU_SMOOTH_FLOOR;
    ll_bleu_init(&a, &bo);
    a.nrefs = 1;
    ll_bleu_signature(&a, 0, buf, sizeof buf);
    CHECK(!strcmp(buf, "nrefs:1|case:lc|eff:no|tok:none|smooth:floor[0.10]|version:" LL_SACREBLEU_VERSION));
    bo.smooth = LL_BLEU_SMOOTH_ADDK, bo.smooth_value = 2, bo.effective_order = 1;
    ll_bleu_init(&a, &bo);
    a.nrefs = 3;
    ll_bleu_signature(&a, 1, buf, sizeof buf);
    CHECK(!strcmp(buf, "#:3|c:lc|e:yes|tok:none|s:add-k[2.00]|v:" LL_SACREBLEU_VERSION));
    ll_chrf_opts_default(&co);
    co.word_order = 2, co.eps_smoothing = 1, co.whitespace = 1, co.lowercase = 1;
    CHECK(ll_chrf_init(&ca, &co) == 0);
    ca.nrefs = 1;
    ll_chrf_signature(&ca, 0, buf, sizeof buf);
    CHECK(!strcmp(buf, "nrefs:1|case:lc|eff:no|nc:6|nw:2|space:yes|version:" LL_SACREBLEU_VERSION));
    ll_chrf_signature(&ca, 1, buf, sizeof buf);
    CHECK(!strcmp(buf, "#:1|c:lc|e:no|nc:6|nw:2|s:yes|v:" LL_SACREBLEU_VERSION));
    ll_chrf_compute(&ca, &c1);
    CHECK(!strcmp(c1.name, "chrF2++"));

    /* Score.format: width, score-only, signature */
    ll_bleu_result br = {0};
    br.score = 27.345678, br.bp = 1, br.ratio = 1.5;
    ll_bleu_format(&br, 1, 1, NULL, buf, sizeof buf);
    CHECK(!strcmp(buf, "27.3"));
    ll_bleu_format(&br, 0, 1, NULL, buf, sizeof buf);
    CHECK(!strcmp(buf, "27"));
    ll_bleu_format(&br, 2, 0, "SIG", buf, sizeof buf);
    CHECK(!strcmp(buf, "BLEU|SIG = 27.35 0.0/0.0/0.0/0.0 (BP = 1.000 ratio = 1.500 hyp_len = 0 ref_len = 0)"));
}

/* TER: sentence_score of sacreBLEU 2.6.0 (Python 3.11.7) on pairs that exercise each part: shifts
 * (a block moved, one with a word between), empty sides, case, the double-tokenised reference
 * with --ter-normalized (sacreBLEU's quirk: "it's" split only in the reference), punctuation
 * removal, several references (fewest edits, mean length), Unicode lowercasing. */
static void test_ter(void) {
    static const struct {
        const char *h, *r[3];
        int cs, norm, np;
        double want;
        int64_t edits;
        double ref_len;
        int asian;
    } c[] = {
        {"the man bit the dog .", {"The dog bit the man."}, 0, 0, 0, 60.0, 3, 5.0, 0},
        {"a b c d e f", {"d e f a b c"}, 0, 0, 0, 16.666666666666664, 1, 6.0, 0},
        {"d e f x a b c", {"a b c d e f"}, 0, 0, 0, 33.33333333333333, 2, 6.0, 0},
        {"", {"a reference here"}, 0, 0, 0, 100.0, 3, 3.0, 0},
        {"some words", {""}, 0, 0, 0, 100.0, 2, 0.0, 0},
        {"", {""}, 0, 0, 0, 0.0, 0, 0.0, 0},
        {"It is A Test", {"it is a test"}, 0, 0, 0, 0.0, 0, 4.0, 0},
        {"It is A Test", {"it is a test"}, 1, 0, 0, 75.0, 3, 4.0, 0},
        {"it's\x1c" "don't", {"it's\x1c" "don't"}, 0, 1, 0, 66.66666666666666, 2, 3.0, 0},
        {"Hello, world! (yes)", {"hello world yes"}, 0, 0, 1, 0.0, 0, 3.0, 0},
        {"&quot;AT&amp;T&quot; e.g. 1,000.50 10-20 it's", {"\" at & t \" e . g . 1,000.50 10 - 20 it 's"}, 0, 1, 0,
         0.0, 0, 15.0, 0},
        {"a cat sat on the mat", {"the cat sat on a mat", "a dog sat on the mat", "on the mat a cat sat"}, 0, 0, 0,
         16.666666666666664, 1, 6.0, 0},
        {"\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3 \u0130stanbul STRASSE",
         {"\u03c3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2 i\u0307stanbul strasse"}, 0, 0, 0, 0.0, 0, 3.0, 0},
        /* --ter-asian-support: test_tokenizer_ter.py's two cases (hiragana kept together), the same
         * without it, and CJK punctuation removed with and without the split */
        {"美众院公布对特", {"美 众 院 公 布 对 特"}, 0, 1, 0, 0.0, 0, 7.0, 1},
        {"りの拳銃を持", {"りの 拳 銃 を 持"}, 0, 1, 0, 0.0, 0, 5.0, 1},
        {"美众院公布对特", {"美 众 院 公 布 对 特"}, 0, 1, 0, 100.0, 7, 7.0, 0},
        {"你好，世界。「是」", {"你好 世界 是"}, 0, 0, 1, 100.0, 3, 3.0, 1},
        {"你好，世界。「是」", {"你 好 世 界 是"}, 0, 1, 1, 0.0, 0, 5.0, 1},
    };
    for (int i = 0; i < N(c); i++) {
        ll_ter_opts o = {.case_sensitive = c[i].cs, .normalized = c[i].norm, .no_punct = c[i].np, .asian_support = c[i].asian};
        ll_ter_stats s;
        ll_ter_result r;
        ll_ter_init(&s, &o);
        int nr = 0;
        while (nr < 3 && c[i].r[nr]) nr++;
        CHECK(ll_ter_add(&s, c[i].h, c[i].r, nr) == 0);
        ll_ter_compute(&s, &r);
        CHECK_MSG(r.edits == c[i].edits && r.ref_len == c[i].ref_len && r.score == c[i].want,
                  "TER case %d: %lld edits, ref_len %g, %.17g; sacreBLEU %lld, %g, %.17g", i, (long long)r.edits,
                  r.ref_len, r.score, (long long)c[i].edits, c[i].ref_len, c[i].want);
    }
    /* a corpus: the edits and the mean reference lengths summed, then one ratio */
    ll_ter_stats s;
    ll_ter_result r;
    ll_ter_init(&s, NULL);
    for (int i = 0; i < 3; i++) CHECK(ll_ter_add(&s, c[i].h, c[i].r, 1) == 0);
    ll_ter_compute(&s, &r);
    CHECK(r.edits == 6 && r.ref_len == 17.0);
    CHECK_NEAR(r.score, 100.0 * 6 / 17, 1e-12);
    char sig[256], line[512];
    ll_ter_signature(&s, 0, sig, sizeof sig);
    CHECK(!strcmp(sig, "nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:" LL_SACREBLEU_VERSION));
    ll_ter_format(&r, 2, 0, sig, line, sizeof line);
    CHECK(!strcmp(line, "TER|nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:" LL_SACREBLEU_VERSION
                        " = 35.29"));
}

/* numpy's draws (numbers printed by numpy 2.4: PCG64(12345).random_raw(3),
 * default_rng(12345).choice(1000, 8), default_rng(7).choice(3, 8),
 * default_rng(2**32).integers(2, size=40, dtype=bool) then .choice(37, 4),
 * default_rng(2**64 - 1).choice(100000, 3)) */
static void test_np_random(void) {
    ll_np_rng r;
    ll_np_rng_seed(&r, 12345);
    const uint64_t raw[] = {4193609425186963869ull, 5843160025838961886ull, 14708796524633321433ull};
    for (int i = 0; i < 3; i++) CHECK(ll_np_rng_next64(&r) == raw[i]);
    const uint32_t c1000[] = {699, 227, 788, 316, 204, 797, 642, 676}, c3[] = {2, 1, 2, 2, 1, 2, 2, 0};
    ll_np_rng_seed(&r, 12345);
    for (int i = 0; i < 8; i++) CHECK(ll_np_rng_below(&r, 1000) == c1000[i]);
    ll_np_rng_seed(&r, 7);
    for (int i = 0; i < 8; i++) CHECK(ll_np_rng_below(&r, 3) == c3[i]);
    const char *bits = "1010010001101000001101011010000101000111";
    unsigned char b[40];
    ll_np_bits buf = {0, 0};
    ll_np_rng_seed(&r, 4294967296ull);
    ll_np_rng_bools(&r, &buf, b, 13); /* in two pieces: the bit buffer carries over */
    ll_np_rng_bools(&r, &buf, b + 13, 27);
    for (int i = 0; i < 40; i++) CHECK(b[i] == bits[i] - '0');
    const uint32_t c37[] = {36, 20, 11, 29}, c1e5[] = {54796, 68002, 95007};
    for (int i = 0; i < 4; i++) CHECK(ll_np_rng_below(&r, 37) == c37[i]);
    ll_np_rng_seed(&r, UINT64_MAX);
    for (int i = 0; i < 3; i++) CHECK(ll_np_rng_below(&r, 100000) == c1e5[i]);
}

/* sacreBLEU 2.6.0's tests on five sentences, numbers printed by Python (repr):
 * corpus_score(n_bootstrap=200) (Score.estimate_ci: statistics.mean), PairedTest bs
 * 200 (the baseline's mean by numpy: one ulp from statistics.mean for BLEU) and ar 300 */
static void test_signif(void) {
    const char *ref[] = {"The dog bit the man.", "It was not unexpected.", "The man bit him first.",
                         "A cat sat on the mat.", "Nothing else happened here today."};
    const char *s1[] = {"The dog bit the man.", "It wasn't surprising.", "The man had just bitten him.",
                        "The cat sat on a mat.", "Nothing happened today."};
    const char *s2[] = {"A dog bit a man.", "It was unexpected.", "The man bit him first.", "A cat on the mat.",
                        "Nothing else happened."};
    const struct {
        double score, mean, ci, np_mean;                /* s1: --confidence, and as a paired baseline */
        double score2, mean2, ci2, p_bs, p_ar;          /* s2 against s1 */
    } want[3] = {
        {35.40227512523255, 33.37656767994757, 31.09900198267032, 33.37656767994758, 48.79488173370557,
         48.06847859324833, 30.560187105546362, 0.22885572139303484, 0.5182724252491694},
        {51.573658275745885, 51.427188873291016, 19.805875778198242, 51.427188873291016, 70.12613594832004,
         70.46759796142578, 17.39640998840332, 0.11940298507462686, 0.33222591362126247},
        {44.0, 44.87742233276367, 24.782608032226562, 44.87742233276367, 28.000000000000004, 26.902170181274414,
         19.076923370361328, 0.15422885572139303, 0.39867109634551495},
    };
    ll_bleu_opts bo;
    ll_chrf_opts co;
    ll_ter_opts to;
    ll_bleu_opts_default(&bo);
    ll_chrf_opts_default(&co);
    ll_ter_opts_default(&to);
    for (int m = 0; m < 3; m++) {
        ll_sig_metric mt;
        if (m == 0) ll_sig_metric_bleu(&mt, &bo);
        if (m == 1) CHECK(ll_sig_metric_chrf(&mt, &co) == 0);
        if (m == 2) ll_sig_metric_ter(&mt, &to);
        double st1[5 * 18], st2[5 * 18];
        for (int i = 0; i < 5; i++) {
            CHECK(ll_sig_segment(&mt, s1[i], &ref[i], 1, st1 + i * mt.k) == 0);
            CHECK(ll_sig_segment(&mt, s2[i], &ref[i], 1, st2 + i * mt.k) == 0);
        }
        ll_sig_result r;
        ll_sig_bootstrap(&mt, st1, 5, 200, 12345, 0, &r);
        CHECK_MSG(r.score == want[m].score && r.mean == want[m].mean && r.ci == want[m].ci && r.has_ci,
                  "metric %d --confidence: %.17g (%.17g +- %.17g)", m, r.score, r.mean, r.ci);
        ll_sig_bootstrap(&mt, st1, 5, 200, 12345, 1, &r);
        CHECK_MSG(r.mean == want[m].np_mean, "metric %d baseline mean %.17g", m, r.mean);
        ll_sig_paired_bs(&mt, st1, st2, 5, 200, 12345, &r);
        CHECK_MSG(r.score == want[m].score2 && r.mean == want[m].mean2 && r.ci == want[m].ci2 && r.p == want[m].p_bs,
                  "metric %d paired bs: %.17g (%.17g +- %.17g) p %.17g", m, r.score, r.mean, r.ci, r.p);
        ll_sig_paired_ar(&mt, st1, st2, 5, 300, 12345, &r);
        CHECK_MSG(r.score == want[m].score2 && r.p == want[m].p_ar && !r.has_ci, "metric %d paired ar: p %.17g", m, r.p);
        /* a system against itself: no trial exceeds a zero difference */
        ll_sig_paired_ar(&mt, st1, st1, 5, 300, 12345, &r);
        CHECK(r.p == 1.0 / 301);
    }
}

int main(void) {
    test_tokenizer();
    test_ter();
    test_sacrebleu_bleu();
    test_sacrebleu_chrf();
    test_readme();
    test_generated_corpora();
    test_api();
    test_np_random();
    test_signif();
    return tu_finish("test_eval");
}
