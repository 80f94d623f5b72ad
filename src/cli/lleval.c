/* lleval: corpus BLEU / chrF of a hypothesis file against one or more
 * references, with sacreBLEU's numbers and output lines (docs/eval.md).
 *
 *   lleval --ref REF [--ref REF2 ...] [--input HYP [HYP2 ...]] [--metrics bleu,chrf] [options]
 *
 * Prints what `sacrebleu REF... -i HYP... -m ... -f text -w 2` prints: one system's
 * scores (with --confidence a bootstrap CI), or several systems' table (with
 * --paired-bs / --paired-ar a significance test against the first).  Errors are
 * one line on stderr and exit status 1. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "ll/eval.h"
#include "eval_table.h"

#define MAX_REFS 64
#define MAX_SYSTEMS 64

static void usage(FILE *out) {
    fprintf(out,
            "usage: lleval --ref REF [--ref REF2 ...] [--input HYP] [options]\n"
            "Scores HYP (default: stdin) like sacreBLEU %s (-f text); see docs/eval.md.\n"
            "  -r, --ref FILE            reference file (repeat for multiple references)\n"
            "  -i, --input FILE [FILE..] hypotheses, one per line ('-' or absent: stdin); several\n"
            "                            files: a table of systems (the first is the baseline)\n"
            "  -m, --metrics LIST        comma-separated: bleu, chrf, ter (default bleu)\n"
            "  -lc, --lowercase          case-insensitive BLEU and chrF (case:lc)\n"
            "  -tok, --tokenize T        BLEU tokenizer: 13a (default), none, zh (Chinese: each\n"
            "                            character a word), char (every character a word), intl\n"
            "                            (Unicode punctuation and symbols split off, mteval-v14)\n"
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
            "  --ter-asian-support       with the two above: CJK characters split off, CJK and\n"
            "                            full-width punctuation removed\n"
            "  -sl, --sentence-level     one score per line (first metric; BLEU with effective order)\n"
            "  -b, --score-only          print only the score\n"
            "  -w, --width N             decimals of the score (default 2; sacrebleu's CLI default is 1)\n"
            "  -sh, --short              short signature\n"
            "  -ci, --confidence         95%% confidence interval by bootstrap resampling\n"
            "  -cin, --confidence-n N    resamples for --confidence (default 1000)\n"
            "  -pbs, --paired-bs         paired bootstrap resampling test of each system against the first\n"
            "  -par, --paired-ar         paired approximate randomization test\n"
            "  -pbsn, --paired-bs-n N    resamples (default 1000)\n"
            "  -parn, --paired-ar-n N    trials (default 10000)\n"
            "The tests draw numpy's random numbers from SACREBLEU_SEED (default 12345; 'none':\n"
            "unseeded), so their numbers are sacreBLEU's.\n",
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

/* ---- statistical tests and several systems ---------------------------------- */

typedef struct {
    ll_sig_metric m;
    const char *name; /* "BLEU", "chrF2", "TER" */
    char sig[LL_EVAL_LINE_MAX];
} metric;

static uint64_t entropy_seed(void) {
    uint64_t seed;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&seed, sizeof seed, 1, f) != 1) ll_die("/dev/urandom: cannot read a seed");
    fclose(f);
    return seed;
}

/* SACREBLEU_SEED as sacreBLEU reads it: an integer (default 12345) or 'none' (then
 * returns 0 and an unpredictable seed).  text: the variable lowercased, which is what
 * --confidence's signature shows. */
static int read_seed(uint64_t *seed, char *text, size_t n) {
    const char *env = getenv("SACREBLEU_SEED");
    if (!env) env = "12345";
    snprintf(text, n, "%s", env);
    for (char *p = text; *p; p++) *p = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    if (!strcmp(text, "none")) {
        *seed = entropy_seed();
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(env, &end, 10);
    if (!*env || *end || errno || env[0] == '-' || env[0] == '+' || env[0] == ' ')
        ll_die("SACREBLEU_SEED='%s': not a seed (an integer from 0 to 2^64-1, or none)", env);
    *seed = v;
    return 1;
}

/* sacreBLEU's signature with the test's fields after nrefs: "nrefs:1|bs:1000|seed:12345|..." */
static void test_signature(char *sig, size_t n, int short_sig, const char *test, int samples, const char *seed) {
    char rest[LL_EVAL_LINE_MAX], *bar = strchr(sig, '|');
    snprintf(rest, sizeof rest, "%s", bar ? bar + 1 : "");
    if (bar) *bar = 0;
    char head[64];
    snprintf(head, sizeof head, "%s", sig);
    const int w = snprintf(sig, n, "%s|%s:%d|%s:%s|%s", head, test, samples, short_sig ? "rs" : "seed", seed, rest);
    if (w < 0 || (size_t)w >= n) ll_die("signature longer than %zu bytes", n);
}

/* Score.format with a CI: " (μ = 39.78 ± 9.19)" after the score (metrics/base.py) */
static void splice_ci(char *line, size_t n, int score_only, double score, int width, double mean, double ci) {
    char num[64], tail[LL_EVAL_LINE_MAX];
    snprintf(num, sizeof num, "%.*f", width, score);
    char *at = score_only ? line : strstr(line, " = ");
    if (!at) return;
    at += score_only ? 0 : 3;
    if (strncmp(at, num, strlen(num))) return;
    at += strlen(num);
    snprintf(tail, sizeof tail, "%s", at);
    snprintf(at, n - (size_t)(at - line), " (μ = %.*f ± %.*f)%s", width, mean, width, ci, tail);
}

/* every segment's statistics of one system, n x m->k */
static double *segment_stats(const metric *mt, text_file *hyp, text_file *ref, int nrefs) {
    const ll_sig_metric *m = &mt->m;
    double *st = ll_malloc((size_t)hyp->n * (size_t)m->k * sizeof *st);
    const char *seg_refs[MAX_REFS];
    for (long i = 0; i < hyp->n; i++) {
        for (int k = 0; k < nrefs; k++) seg_refs[k] = ref[k].lines[i];
        if (ll_sig_segment(m, hyp->lines[i], seg_refs, nrefs, st + i * m->k) != 0) ll_die("%s", ll_errbuf());
    }
    return st;
}

static char *format_result(const ll_sig_result *r, int width, int show_p) {
    char buf[256];
    int len = snprintf(buf, sizeof buf, "%.*f", width, r->score);
    if (r->has_ci) len += snprintf(buf + len, sizeof buf - (size_t)len, " (%.*f ± %.*f)", width, r->mean, width, r->ci);
    if (show_p) snprintf(buf + len, sizeof buf - (size_t)len, "\n(p = %.4f)%s", r->p, r->p > 0.05 ? "" : "*");
    return ll_strdup(buf);
}

/* Several systems: a table of scores, or (paired) each system tested against the
 * first (sacrebleu.py's multi-system mode and significance.PairedTest). */
static void multi_system(metric *mt, int nm, text_file *sys, int nsys, text_file *ref, int nrefs, int paired,
                         int n_samples, int width, int short_sig) {
    const int ncols = 1 + nm;
    const char **headers = ll_malloc((size_t)ncols * sizeof *headers);
    char **cells = ll_malloc((size_t)ncols * (size_t)nsys * sizeof *cells);
    char **hdr_own = ll_malloc((size_t)nm * sizeof *hdr_own);
    uint64_t seed = 0;
    char seed_text[64];
    const int seeded = read_seed(&seed, seed_text, sizeof seed_text);
    char seed_int[32] = "none"; /* the signature shows str(int(SACREBLEU_SEED)) */
    if (seeded) snprintf(seed_int, sizeof seed_int, "%llu", (unsigned long long)seed);
    headers[0] = "System";
    for (int s = 0; s < nsys; s++) {
        char name[LL_EVAL_LINE_MAX];
        snprintf(name, sizeof name, "%s%s", paired && s == 0 ? "Baseline: " : "", sys[s].name);
        cells[s * ncols] = ll_strdup(name);
    }
    for (int j = 0; j < nm; j++) {
        char h[64];
        snprintf(h, sizeof h, "%s%s", mt[j].name, paired == 1 ? " (μ ± 95% CI)" : "");
        hdr_own[j] = ll_strdup(h);
        headers[1 + j] = hdr_own[j];
        double *base = segment_stats(&mt[j], &sys[0], ref, nrefs);
        for (int s = 0; s < nsys; s++) {
            double *st = s ? segment_stats(&mt[j], &sys[s], ref, nrefs) : base;
            ll_sig_result r = {0};
            if (!paired || (s == 0 && paired == 2)) {
                double *sums = ll_calloc((size_t)mt[j].m.k, sizeof *sums);
                for (long i = 0; i < sys[s].n; i++)
                    for (int c = 0; c < mt[j].m.k; c++) sums[c] += st[i * mt[j].m.k + c];
                r.score = ll_sig_score(&mt[j].m, sums);
                free(sums);
            } else if (s == 0 && paired == 1) { /* the baseline's CI: its own bootstrap, numpy's mean */
                ll_sig_bootstrap(&mt[j].m, base, sys[0].n, n_samples, seed, 1, &r);
            } else {
                /* PairedTest.__call__ passes `self._seed if self._seed else None`: seed 0 draws afresh */
                const uint64_t sseed = seeded && seed ? seed : entropy_seed();
                if (paired == 1)
                    ll_sig_paired_bs(&mt[j].m, base, st, sys[0].n, n_samples, sseed, &r);
                else
                    ll_sig_paired_ar(&mt[j].m, base, st, sys[0].n, n_samples, sseed, &r);
            }
            cells[s * ncols + 1 + j] = format_result(&r, width, paired && s > 0);
            if (st != base) free(st);
        }
        free(base);
        if (paired) test_signature(mt[j].sig, sizeof mt[j].sig, short_sig, paired == 1 ? "bs" : "ar", n_samples, seed_int);
    }
    eval_table_print(stdout, ncols, nsys, headers, (const char *const *)cells);
    putchar('\n');
    if (paired) eval_table_paired_note(stdout, paired == 1, n_samples, cells[0]);
    puts("-----------------\nMetric signatures\n-----------------");
    for (int j = 0; j < nm; j++) printf(" - %-10s %s\n", mt[j].name, mt[j].sig);
    for (int i = 0; i < ncols * nsys; i++) free(cells[i]);
    for (int j = 0; j < nm; j++) free(hdr_own[j]);
    free(cells);
    free(hdr_own);
    free(headers);
}

int main(int argc, char **argv) {
    ll_set_progname("lleval");
    const char *refs[MAX_REFS], *inputs[MAX_SYSTEMS] = {"-"}, *metrics = "bleu";
    int nrefs = 0, ninputs = 1, score_only = 0, width = 2, short_sig = 0, sentence = 0;
    int confidence = 0, confidence_n = 1000, paired_bs = 0, paired_ar = 0, paired_bs_n = 1000, paired_ar_n = 10000;
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
            /* sacreBLEU's nargs='*': the files up to the next option */
            inputs[0] = v;
            ninputs = 1;
            while (i + 1 < argc && (argv[i + 1][0] != '-' || !strcmp(argv[i + 1], "-"))) {
                if (ninputs == MAX_SYSTEMS) ll_die("too many systems (at most %d)", MAX_SYSTEMS);
                inputs[ninputs++] = argv[++i];
            }
        } else if (IS("--metrics", "-m")) {
            NEED();
            metrics = v;
        } else if (IS("--lowercase", "-lc")) {
            bo.lowercase = co.lowercase = 1;
        } else if (IS("--tokenize", "-tok")) {
            NEED();
            if (ll_bleu_tok_parse(v, &bo.tokenize))
                ll_die("unsupported tokenizer '%s' (lleval has " LL_BLEU_TOK_NAMES
                       "; not ja-mecab, ko-mecab, spm)",
                       v);
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
            to.asian_support = 1;
        } else if (IS("--sentence-level", "-sl")) {
            sentence = 1;
        } else if (IS("--score-only", "-b")) {
            score_only = 1;
        } else if (IS("--width", "-w")) {
            NEED();
            width = parse_int(a, v, 0, 40);
        } else if (IS("--short", "-sh")) {
            short_sig = 1;
        } else if (IS("--confidence", "-ci")) {
            confidence = 1;
        } else if (IS("--confidence-n", "-cin")) {
            NEED();
            confidence_n = parse_int(a, v, 1, 10000000);
        } else if (IS("--paired-bs", "-pbs")) {
            paired_bs = 1;
        } else if (IS("--paired-ar", "-par")) {
            paired_ar = 1;
        } else if (IS("--paired-bs-n", "-pbsn")) {
            NEED();
            paired_bs_n = parse_int(a, v, 0, 10000000);
            if (!paired_bs_n) paired_bs_n = 1000; /* sacreBLEU: 0 means the default */
        } else if (IS("--paired-ar-n", "-parn")) {
            NEED();
            paired_ar_n = parse_int(a, v, 0, 10000000);
            if (!paired_ar_n) paired_ar_n = 10000;
        } else {
            ll_die("unknown or incomplete argument '%s' (see lleval --help)", a);
        }
#undef IS
#undef NEED
    }
    if (nrefs == 0) ll_die("at least one --ref FILE is required (see lleval --help)");
    /* standard input once: the second reader would get nothing ("<stdin> has 1 lines but <stdin> has 0") */
    int hyp_stdin = 0;
    for (int s = 0; s < ninputs; s++)
        if (!strcmp(inputs[s], "-") && hyp_stdin++) ll_die("--input -: standard input is already another --input; give files");
    for (int i = 0, n = hyp_stdin; i < nrefs; i++)
        if (!strcmp(refs[i], "-") && n++)
            ll_die("--ref -: standard input is already %s; give files", hyp_stdin ? "the --input" : "another --ref");
    const int paired = paired_bs ? 1 : paired_ar ? 2 : 0;
    /* sacrebleu.py's checks, in its words where it has them */
    if (paired_bs && paired_ar) ll_die("--paired-bs and --paired-ar: give one of the two tests");
    /* a paired test skips a system that is the baseline again; two other systems of one name are refused */
    int nsys = 0;
    for (int s = 0; s < ninputs; s++) {
        int dup = -1;
        for (int t = 0; t < nsys; t++)
            if (!strcmp(inputs[t], inputs[s])) dup = t;
        if (dup == 0 && paired) continue;
        if (dup >= 0) ll_die("'%s' already used to name a system: give each system once", inputs[s]);
        inputs[nsys++] = inputs[s];
    }
    if (sentence && nsys > 1) ll_die("--sentence-level: only one system can be evaluated in sentence-level mode");
    if (sentence && (confidence || paired)) ll_die("--sentence-level: statistical tests are unavailable in sentence-level mode");
    if (paired && nsys == 1) ll_die("paired tests require multiple input systems given to --input (-i)");
    if (nsys > 1 && confidence) ll_die("--confidence: use a paired test (--paired-bs or --paired-ar) for multiple systems");

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

    static text_file sys[MAX_SYSTEMS], ref[MAX_REFS];
    for (int s = 0; s < nsys; s++) load(&sys[s], inputs[s]);
    text_file hyp = sys[0];
    for (int k = 0; k < nrefs; k++) {
        load(&ref[k], refs[k]);
        for (int s = 0; s < nsys; s++)
            if (ref[k].n != sys[s].n)
                ll_die("%s has %ld lines but %s has %ld", sys[s].name, sys[s].n, ref[k].name, ref[k].n);
    }
    for (int s = 0; s < nsys; s++)
        if (sys[s].n == 0) ll_die("%s is empty: no lines to score", sys[s].name);

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
    /* the metrics as the tests see them, in sacreBLEU's order, with their signatures */
    metric mt[3];
    int nm = 0;
    ll_bleu_result br;
    ll_chrf_result cr;
    ll_ter_result tr;
    double scores[3];
    if (use_bleu) {
        ll_bleu_compute(&bs, &br);
        ll_sig_metric_bleu(&mt[nm].m, &bo);
        mt[nm].name = "BLEU";
        ll_bleu_signature(&bs, short_sig, mt[nm].sig, sizeof mt[nm].sig);
        scores[nm++] = br.score;
    }
    if (use_chrf) {
        ll_chrf_compute(&cs, &cr);
        if (ll_sig_metric_chrf(&mt[nm].m, &co) != 0) ll_die("%s", ll_errbuf());
        mt[nm].name = cr.name;
        ll_chrf_signature(&cs, short_sig, mt[nm].sig, sizeof mt[nm].sig);
        scores[nm++] = cr.score;
    }
    if (use_ter) {
        ll_ter_compute(&ts, &tr);
        ll_sig_metric_ter(&mt[nm].m, &to);
        mt[nm].name = "TER";
        ll_ter_signature(&ts, short_sig, mt[nm].sig, sizeof mt[nm].sig);
        scores[nm++] = tr.score;
    }
    if (!sentence && nsys > 1) {
        multi_system(mt, nm, sys, nsys, ref, nrefs, paired, paired == 1 ? paired_bs_n : paired_ar_n, width, short_sig);
    } else if (!sentence) {
        /* --confidence (more than one resample): the signature gains bs and seed, the score its CI */
        uint64_t seed = 0;
        char seed_text[64];
        if (confidence && confidence_n > 1) read_seed(&seed, seed_text, sizeof seed_text);
        for (int j = 0; j < nm; j++) {
            ll_sig_result r = {0};
            if (confidence && confidence_n > 1) {
                double *st = segment_stats(&mt[j], &hyp, ref, nrefs);
                ll_sig_bootstrap(&mt[j].m, st, hyp.n, confidence_n, seed, 0, &r);
                free(st);
                test_signature(mt[j].sig, sizeof mt[j].sig, short_sig, "bs", confidence_n, seed_text);
            }
            if (mt[j].m.kind == LL_SIG_BLEU)
                ll_bleu_format(&br, width, score_only, mt[j].sig, out[j], sizeof out[j]);
            else if (mt[j].m.kind == LL_SIG_CHRF)
                ll_chrf_format(&cr, width, score_only, mt[j].sig, out[j], sizeof out[j]);
            else
                ll_ter_format(&tr, width, score_only, mt[j].sig, out[j], sizeof out[j]);
            if (r.has_ci && r.mean > 0) splice_ci(out[j], sizeof out[j], score_only, scores[j], width, r.mean, r.ci);
        }
        print_results(out, nm);
    }
    if (fflush(stdout) != 0) ll_die("<stdout>: write failed: %s", strerror(errno));
    for (int s = 0; s < nsys; s++) {
        free(sys[s].data);
        free(sys[s].lines);
    }
    for (int k = 0; k < nrefs; k++) {
        free(ref[k].data);
        free(ref[k].lines);
    }
    return 0;
}
