/* lleval: corpus BLEU / chrF of a hypothesis file against one or more
 * references, with sacreBLEU's numbers and output lines (docs/eval.md).
 *
 *   lleval --ref REF [--ref REF2 ...] [--input HYP] [--metrics bleu,chrf] [options]
 *
 * Prints what `sacrebleu REF... -i HYP -m ... -f text -w 2` prints.  Errors are
 * one line on stderr and exit status 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "ll/eval.h"

#define MAX_REFS 64

static void usage(FILE *out) {
    fprintf(out,
            "usage: lleval --ref REF [--ref REF2 ...] [--input HYP] [options]\n"
            "Scores HYP (default: stdin) like sacreBLEU %s (-f text); see docs/eval.md.\n"
            "  -r, --ref FILE            reference file (repeat for multiple references)\n"
            "  -i, --input FILE          hypotheses, one per line ('-' or absent: stdin)\n"
            "  -m, --metrics LIST        comma-separated: bleu, chrf, ter (default bleu)\n"
            "  -lc, --lowercase          case-insensitive BLEU and chrF (case:lc)\n"
            "  -tok, --tokenize 13a|none BLEU tokenizer (default 13a)\n"
            "  -s, --smooth-method M     exp (default), none, floor, add-k\n"
            "  -sv, --smooth-value X     value for floor (0.1) / add-k (1)\n"
            "  -cc, --chrf-char-order N  default 6\n"
            "  -cw, --chrf-word-order N  default 0; 2 gives chrF++\n"
            "  --chrf-beta N             default 2\n"
            "  --chrf-whitespace         keep whitespace in character n-grams\n"
            "  --chrf-eps-smoothing      chrF++.py-style epsilon smoothing\n"
            "  --ter-case-sensitive      TER keeps case (default: lowercased, as sacreBLEU)\n"
            "  --ter-normalized          TER with Tercom's normalisation (punctuation split off)\n"
            "  --ter-no-punct            TER without . , ? : ; ! \" ( )\n"
            "  -sl, --sentence-level     one score per line (first metric; BLEU with effective order)\n"
            "  -b, --score-only          print only the score\n"
            "  -w, --width N             decimals of the score (default 2; sacrebleu's CLI default is 1)\n"
            "  -sh, --short              short signature\n",
            LL_SACREBLEU_VERSION);
}

typedef struct {
    const char *name;
    char *data;
    char **lines;
    long n;
} text_file;

/* Lines as sacreBLEU reads them: split on '\n' only (open(newline="\n")), each
 * rstrip()ped; strict UTF-8. */
static void load(text_file *f, const char *path) {
    size_t len = 0;
    f->name = path;
    if (!strcmp(path, "-")) f->name = "<stdin>";
    f->data = ll_read_file(strcmp(path, "-") ? path : "/dev/stdin", &len); /* out of memory: an error, not a short read */
    if (!f->data && strcmp(path, "-")) ll_die("%s", ll_errbuf());
    if (!f->data) ll_die("<stdin>%s", ll_errbuf() + strlen("/dev/stdin"));
    long cap = 1024;
    f->lines = ll_malloc((size_t)cap * sizeof *f->lines);
    f->n = 0;
    for (size_t i = 0; i < len;) {
        char *line = f->data + i, *nl = memchr(line, '\n', len - i);
        size_t n = nl ? (size_t)(nl - line) : len - i;
        if (memchr(line, 0, n)) ll_die("%s:%ld: NUL byte in line", f->name, f->n + 1);
        long bad = ll_utf8_invalid_at(line, n);
        if (bad >= 0) ll_die("%s:%ld: invalid UTF-8 at byte %ld of the line", f->name, f->n + 1, bad + 1);
        line[ll_eval_rstrip_len(line, n)] = 0;
        if (f->n == cap) f->lines = ll_realloc(f->lines, (size_t)(cap *= 2) * sizeof *f->lines);
        f->lines[f->n++] = line;
        i += n + 1;
    }
}

static int parse_int(const char *opt, const char *v, long lo, long hi) {
    long x;
    if (ll_parse_long(opt, v, lo, hi, &x)) ll_die("%s", ll_errbuf());
    return (int)x;
}

/* a is the option long_name (or its short alias); an option but --ref given
 * twice, in either spelling, is refused (the later one would win silently) */
static int is_opt(const char *a, const char *long_name, const char *short_name) {
    static const char *seen[64];
    static int n_seen;
    if (strcmp(a, long_name) && !(short_name && !strcmp(a, short_name))) return 0;
    for (int i = 0; i < n_seen; i++)
        if (!strcmp(seen[i], long_name) && strcmp(long_name, "--ref"))
            ll_die("%s%s%s%s is given twice; give it once", long_name, short_name ? " (" : "", short_name ? short_name : "",
                   short_name ? ")" : "");
    if (n_seen < 64) seen[n_seen++] = long_name;
    return 1;
}

/* utils.print_single_results: several lines are right-aligned on their '='. */
static void print_results(char lines[][LL_EVAL_LINE_MAX], int n) {
    if (n == 1) {
        puts(lines[0]);
        return;
    }
    int w = 0, lens[3];
    for (int i = 0; i < n; i++) {
        char *eq = strchr(lines[i], '=');
        lens[i] = eq ? (int)(eq - lines[i]) - 1 : -1;
        if (!eq) puts(lines[i]);
        if (lens[i] > w) w = lens[i];
    }
    for (int i = 0; i < n; i++)
        if (lens[i] >= 0) printf("%*.*s%s\n", w, lens[i], lines[i], lines[i] + lens[i]);
}

int main(int argc, char **argv) {
    ll_set_progname("lleval");
    const char *refs[MAX_REFS], *input = "-", *metrics = "bleu";
    int nrefs = 0, score_only = 0, width = 2, short_sig = 0, sentence = 0;
    ll_bleu_opts bo;
    ll_chrf_opts co;
    ll_ter_opts to;
    ll_bleu_opts_default(&bo);
    ll_chrf_opts_default(&co);
    ll_ter_opts_default(&to);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define IS(l, s) is_opt(a, l, s)
#define NEED()                                                  \
    do {                                                        \
        if (!v) ll_die("%s needs a value (see lleval --help)", a); \
        i++;                                                    \
    } while (0)
        if (IS("--help", "-h")) {
            usage(stdout);
            return 0;
        } else if (IS("--ref", "-r")) {
            NEED();
            if (nrefs == MAX_REFS) ll_die("too many references (at most %d)", MAX_REFS);
            refs[nrefs++] = v;
        } else if (IS("--input", "-i")) {
            NEED();
            input = v;
        } else if (IS("--metrics", "-m")) {
            NEED();
            metrics = v;
        } else if (IS("--lowercase", "-lc")) {
            bo.lowercase = co.lowercase = 1;
        } else if (IS("--tokenize", "-tok")) {
            NEED();
            if (!strcmp(v, "13a"))
                bo.tokenize = LL_BLEU_TOK_13A;
            else if (!strcmp(v, "none"))
                bo.tokenize = LL_BLEU_TOK_NONE;
            else
                ll_die("unsupported tokenizer '%s' (lleval has 13a and none)", v);
        } else if (IS("--smooth-method", "-s")) {
            NEED();
            if (!strcmp(v, "exp"))
                bo.smooth = LL_BLEU_SMOOTH_EXP;
            else if (!strcmp(v, "none"))
                bo.smooth = LL_BLEU_SMOOTH_NONE;
            else if (!strcmp(v, "floor"))
                bo.smooth = LL_BLEU_SMOOTH_FLOOR;
            else if (!strcmp(v, "add-k"))
                bo.smooth = LL_BLEU_SMOOTH_ADDK;
            else
                ll_die("unknown smoothing method '%s' (exp, none, floor, add-k)", v);
        } else if (IS("--smooth-value", "-sv")) {
            NEED();
            if (ll_parse_double(a, v, 0, 1e6, &bo.smooth_value)) ll_die("%s", ll_errbuf());
        } else if (IS("--chrf-char-order", "-cc")) {
            NEED();
            co.char_order = parse_int(a, v, 0, LL_CHRF_MAX_ORDER);
        } else if (IS("--chrf-word-order", "-cw")) {
            NEED();
            co.word_order = parse_int(a, v, 0, LL_CHRF_MAX_ORDER);
        } else if (IS("--chrf-beta", NULL)) {
            NEED();
            co.beta = parse_int(a, v, 0, 1000000);
        } else if (IS("--chrf-whitespace", NULL)) {
            co.whitespace = 1;
        } else if (IS("--chrf-eps-smoothing", NULL)) {
            co.eps_smoothing = 1;
        } else if (IS("--ter-case-sensitive", NULL)) {
            to.case_sensitive = 1;
        } else if (IS("--ter-normalized", NULL)) {
            to.normalized = 1;
        } else if (IS("--ter-no-punct", NULL)) {
            to.no_punct = 1;
        } else if (IS("--ter-asian-support", NULL)) {
            ll_die("--ter-asian-support: not in lleval (sacreBLEU's CJK handling for TER)");
        } else if (IS("--sentence-level", "-sl")) {
            sentence = 1;
        } else if (IS("--score-only", "-b")) {
            score_only = 1;
        } else if (IS("--width", "-w")) {
            NEED();
            width = parse_int(a, v, 0, 40);
        } else if (IS("--short", "-sh")) {
            short_sig = 1;
        } else {
            ll_die("unknown or incomplete argument '%s' (see lleval --help)", a);
        }
#undef IS
#undef NEED
    }
    if (nrefs == 0) ll_die("at least one --ref FILE is required (see lleval --help)");
    /* standard input once: the second reader would get nothing ("<stdin> has 1 lines but <stdin> has 0") */
    const int hyp_stdin = !strcmp(input, "-");
    for (int i = 0, n = hyp_stdin; i < nrefs; i++)
        if (!strcmp(refs[i], "-") && n++)
            ll_die("--ref -: standard input is already %s; give files", hyp_stdin ? "the --input" : "another --ref");

    /* metric list; output order is sacreBLEU's sorted(metrics): BLEU, chrF, TER */
    int use_bleu = 0, use_chrf = 0, use_ter = 0, first = 0;
    for (const char *p = metrics; *p;) {
        size_t n = strcspn(p, ",");
        if (n == 4 && !strncmp(p, "bleu", 4)) {
            use_bleu = 1;
            if (!first) first = 1;
        } else if (n == 4 && !strncmp(p, "chrf", 4)) {
            use_chrf = 1;
            if (!first) first = 2;
        } else if (n == 3 && !strncmp(p, "ter", 3)) {
            use_ter = 1;
            if (!first) first = 3;
        } else if (n) {
            ll_die("unknown metric '%.*s' in --metrics (bleu, chrf, ter)", (int)n, p);
        }
        p += n + (p[n] == ',');
    }
    if (!first) ll_die("--metrics lists no metric (bleu, chrf, ter)");

    ll_bleu_stats bs;
    ll_chrf_stats cs;
    ll_ter_stats ts;
    ll_bleu_init(&bs, &bo);
    ll_ter_init(&ts, &to);
    if (use_chrf && ll_chrf_init(&cs, &co) != 0) ll_die("%s", ll_errbuf());

    text_file hyp, ref[MAX_REFS];
    load(&hyp, input);
    for (int k = 0; k < nrefs; k++) {
        load(&ref[k], refs[k]);
        if (ref[k].n != hyp.n)
            ll_die("%s has %ld lines but %s has %ld", hyp.name, hyp.n, ref[k].name, ref[k].n);
    }
    if (hyp.n == 0) ll_die("%s is empty: no lines to score", hyp.name);

    const char *seg_refs[MAX_REFS];
    char out[3][LL_EVAL_LINE_MAX], sig[LL_EVAL_LINE_MAX];
    for (long i = 0; i < hyp.n; i++) {
        for (int k = 0; k < nrefs; k++) seg_refs[k] = ref[k].lines[i];
        if (sentence) {
            if (first == 1) {
                ll_bleu_result r;
                if (ll_bleu_sentence(&bo, hyp.lines[i], seg_refs, nrefs, &r) != 0) ll_die("%s", ll_errbuf());
                ll_bleu_stats one;
                ll_bleu_init(&one, &bo);
                one.opts.effective_order = 1;
                one.nrefs = nrefs;
                ll_bleu_signature(&one, short_sig, sig, sizeof sig);
                ll_bleu_format(&r, width, score_only, sig, out[0], sizeof out[0]);
            } else if (first == 3) {
                ll_ter_stats one;
                ll_ter_result r;
                ll_ter_init(&one, &to);
                if (ll_ter_add(&one, hyp.lines[i], seg_refs, nrefs) != 0) ll_die("%s", ll_errbuf());
                ll_ter_compute(&one, &r);
                ll_ter_signature(&one, short_sig, sig, sizeof sig);
                ll_ter_format(&r, width, score_only, sig, out[0], sizeof out[0]);
            } else {
                ll_chrf_stats one;
                ll_chrf_result r;
                ll_chrf_init(&one, &co);
                if (ll_chrf_add(&one, hyp.lines[i], seg_refs, nrefs) != 0) ll_die("%s", ll_errbuf());
                ll_chrf_compute(&one, &r);
                ll_chrf_signature(&one, short_sig, sig, sizeof sig);
                ll_chrf_format(&r, width, score_only, sig, out[0], sizeof out[0]);
            }
            puts(out[0]);
            continue;
        }
        if (use_bleu && ll_bleu_add(&bs, hyp.lines[i], seg_refs, nrefs) != 0) ll_die("%s", ll_errbuf());
        if (use_chrf && ll_chrf_add(&cs, hyp.lines[i], seg_refs, nrefs) != 0) ll_die("%s", ll_errbuf());
        if (use_ter && ll_ter_add(&ts, hyp.lines[i], seg_refs, nrefs) != 0) ll_die("%s", ll_errbuf());
    }
    if (!sentence) {
        int n = 0;
        if (use_bleu) {
            ll_bleu_result r;
            ll_bleu_compute(&bs, &r);
            ll_bleu_signature(&bs, short_sig, sig, sizeof sig);
            ll_bleu_format(&r, width, score_only, sig, out[n++], sizeof out[0]);
        }
        if (use_chrf) {
            ll_chrf_result r;
            ll_chrf_compute(&cs, &r);
            ll_chrf_signature(&cs, short_sig, sig, sizeof sig);
            ll_chrf_format(&r, width, score_only, sig, out[n++], sizeof out[0]);
        }
        if (use_ter) {
            ll_ter_result r;
            ll_ter_compute(&ts, &r);
            ll_ter_signature(&ts, short_sig, sig, sizeof sig);
            ll_ter_format(&r, width, score_only, sig, out[n++], sizeof out[0]);
        }
        print_results(out, n);
    }
    if (fflush(stdout) != 0) ll_die("<stdout>: write failed: %s", strerror(errno));
    free(hyp.data);
    free(hyp.lines);
    for (int k = 0; k < nrefs; k++) {
        free(ref[k].data);
        free(ref[k].lines);
    }
    return 0;
}
