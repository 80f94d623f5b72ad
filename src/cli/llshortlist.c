/* llshortlist: a vocabulary shortlist for lldecode --shortlist, from the prepared training data.
 *
 *   llshortlist (--config FILE [--set section.key=value ...] | --data DIR) --output MAP
 *               [--per-source N] [--frequent N] [--iterations N] [--min-prob P]
 *               [--max-sentences N] [--source-lang L] [--target-lang L] [--threads N] [--quiet]
 *
 * IBM Model 1 translation probabilities between the corpora's sentencepiece pieces
 * (src/data/shortlist_build.c), written as CTranslate2's vocabulary map (include/ll/shortlist.h).
 * Errors are one line on stderr and exit status 1; MAP is written atomically. */
#include <stdio.h>
#include <string.h>

#include "ll/config.h"
#include "ll/core.h"
#include "ll/data.h"
#include "ll/shortlist.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: llshortlist (--config FILE [--set section.key=value ...] | --data DIR) --output MAP\n"
            "                   [--per-source N] [--frequent N] [--iterations N] [--min-prob P]\n"
            "                   [--max-sentences N] [--source-lang L] [--target-lang L] [--threads N] [--quiet]\n"
            "Writes a vocabulary shortlist for lldecode --shortlist from the prepared training pairs\n"
            "(llprep) of the config's data.dir, or of DIR: IBM Model 1 probabilities p(target piece |\n"
            "source piece), and for each source piece its --per-source most probable target pieces\n"
            "(default 25) with p >= --min-prob (default 0.001), plus the --frequent most frequent\n"
            "target pieces for every batch (default 100).  --iterations EM rounds (default 5);\n"
            "--max-sentences N: the first N pairs of each corpus only (0: all); --source-lang and\n"
            "--target-lang: the corpora of those languages only (a multilingual model's map per target\n"
            "language).  See docs/decoding.md.\n");
}

static long int_arg(const char *flag, const char *v, long lo, long hi) {
    long x;
    if (ll_parse_long(flag, v, lo, hi, &x)) ll_die("%s", ll_errbuf());
    return x;
}

int main(int argc, char **argv) {
    ll_set_progname("llshortlist");
    ll_args_no_repeats(argc, argv, "--set");
    const char *cfg_path = NULL, *data = NULL, *output = NULL, *sets[256];
    int n_sets = 0, quiet = 0;
    long threads = 0;
    ll_shortlist_build_opts o = {.per_source = 25, .frequent = 100, .iterations = 5, .min_prob = 1e-3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            quiet = 1;
            continue;
        }
        if (!v) ll_die("unknown or incomplete argument '%s' (see llshortlist --help)", a);
        i++;
        if (!strcmp(a, "--config"))
            cfg_path = v;
        else if (!strcmp(a, "--set")) {
            if (n_sets == 256) ll_die("too many --set options");
            sets[n_sets++] = v;
        } else if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--output"))
            output = v;
        else if (!strcmp(a, "--source-lang"))
            o.src_lang = v;
        else if (!strcmp(a, "--target-lang"))
            o.tgt_lang = v;
        else if (!strcmp(a, "--per-source"))
            o.per_source = (int)int_arg(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--frequent"))
            o.frequent = (int)int_arg(a, v, 0, 1 << 24);
        else if (!strcmp(a, "--iterations"))
            o.iterations = (int)int_arg(a, v, 1, 100);
        else if (!strcmp(a, "--max-sentences"))
            o.max_sents = int_arg(a, v, 0, (long)1 << 40);
        else if (!strcmp(a, "--threads"))
            threads = int_arg(a, v, 1, 4096);
        else if (!strcmp(a, "--min-prob")) {
            if (ll_parse_double(a, v, 0, 0.999999, &o.min_prob)) ll_die("%s", ll_errbuf());
        } else
            ll_die("unknown argument '%s' (see llshortlist --help)", a);
    }
    if (!cfg_path == !data) ll_die("one of --config FILE or --data DIR is required (see llshortlist --help)");
    if (n_sets && !cfg_path) ll_die("--set: changes a --config, but there is none");
    if (!output) ll_die("--output MAP is required (see llshortlist --help)");
    ll_set_threads(threads > 0 ? (int)threads : ll_default_threads());

    ll_config cfg;
    if (cfg_path) {
        if (ll_config_load(&cfg, cfg_path) != 0) ll_die("%s", ll_errbuf());
        for (int i = 0; i < n_sets; i++)
            if (ll_config_set(&cfg, sets[i]) != 0) ll_die("%s", ll_errbuf());
        if (ll_config_validate(&cfg) != 0) ll_die("%s", ll_errbuf());
        data = cfg.data_dir;
    }
    ll_data_lock lock; /* (nobody prepares data.dir again while it is read) */
    if (ll_data_lock_take(&lock, data) != 0) ll_die("%s", ll_errbuf());
    if (cfg_path && !ll_data_is_prepared(&cfg)) {
        ll_data_lock_release(&lock, 0);
        ll_die("%s: not prepared for %s (run llprep --config %s first)", data, cfg_path, cfg_path);
    }
    const int rc = ll_shortlist_build(data, output, &o, quiet ? NULL : stderr);
    ll_data_lock_release(&lock, 0);
    if (rc != 0) ll_die("%s", ll_errbuf());
    if (cfg_path) ll_config_free(&cfg);
    return 0;
}
