/* llprep: validate and binarise the corpora of a config (sentencepiece model,
 * token files, manifest in data.dir) and print what was prepared.
 *
 *   llprep --config FILE [--set section.key=value ...] [--quiet] [--if-needed]
 *
 * --if-needed: nothing to do when data.dir already holds what these inputs and
 * settings give (the manifest's check lltrain makes before training: the
 * inputs' recorded size, mtime and hash, the data settings, the output files);
 * scripts that prepare once before several runs call it so.
 *
 * Errors are one line on stderr and exit status 1; nothing new is left in data.dir. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ll/config.h"
#include "ll/core.h"
#include "ll/data.h"

static void usage(FILE *out) {
    fprintf(out, "usage: llprep --config FILE [--set section.key=value ...] [--quiet] [--if-needed]\n"
                 "       llprep --help-config   (every config key with its default)\n"
                 "Trains (or copies data.spm_model) the sentencepiece model and binarises data.train\n"
                 "and data.valid into data.dir.  --if-needed: only when data.dir is not up to date.\n"
                 "See docs/data.md.\n");
}

int main(int argc, char **argv) {
    ll_set_progname("llprep");
    ll_args_no_repeats(argc, argv, "--set");
    const char *cfg_path = NULL;
    const char *sets[256];
    int n_sets = 0, quiet = 0, if_needed = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--help-config")) {
            ll_config_print_help(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc)
            cfg_path = argv[++i];
        else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            if (n_sets == 256) ll_die("too many --set options");
            sets[n_sets++] = argv[++i];
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q"))
            quiet = 1;
        else if (!strcmp(argv[i], "--if-needed"))
            if_needed = 1;
        else
            ll_die("unknown or incomplete argument '%s' (usage: llprep --config FILE [--set k=v ...])", argv[i]);
    }
    if (!cfg_path) ll_die("--config FILE is required (usage: llprep --config FILE [--set k=v ...])");

    ll_config cfg;
    if (ll_config_load(&cfg, cfg_path) != 0) ll_die("%s", ll_errbuf());
    for (int i = 0; i < n_sets; i++)
        if (ll_config_set(&cfg, sets[i]) != 0) ll_die("%s", ll_errbuf());
    if (ll_config_validate(&cfg) != 0) ll_die("%s", ll_errbuf());

    ll_data_lock lock; /* (held to the read-back: nobody prepares this data.dir in between) */
    if (ll_data_lock_take(&lock, cfg.data_dir) != 0) ll_die("%s", ll_errbuf());
    double t0 = ll_now();
    if (if_needed && ll_data_is_prepared(&cfg)) {
        ll_data_lock_release(&lock, 0);
        if (!quiet) printf("%s is up to date: nothing to do\n", cfg.data_dir);
        ll_config_free(&cfg);
        return 0;
    }
    if (ll_prepare_data(&cfg) != 0) {
        ll_data_lock_release(&lock, 1);
        ll_die("%s", ll_errbuf());
    }
    ll_data_info info;
    int bad = ll_data_info_read(&info, cfg.data_dir) != 0;
    uint64_t sampled[2] = {0}, standard[2] = {0}; /* tokens of the sampled segmentations, and of theirs */
    for (int v = 0; v < 2 && !bad; v++) { /* read back what was written: ids, EOS, checksums (one pass) */
        ll_dataset d;
        bad = ll_dataset_open(&d, &cfg, v ? "valid" : "train") != 0;
        for (int p = 0; !bad && p < d.n_pairs; p++)
            for (int k = 0; k < 2 * d.pairs[p].n_samples; k++) {
                if (!(d.pairs[p].sample_sides >> (k % 2) & 1)) continue;
                sampled[k % 2] += d.pairs[p].samples[k].n_tokens;
                standard[k % 2] += k % 2 ? d.pairs[p].tgt.n_tokens : d.pairs[p].src.n_tokens;
            }
        if (!bad) ll_dataset_close(&d);
    }
    ll_data_lock_release(&lock, 0);
    if (bad) ll_die("%s", ll_errbuf());
    if (quiet) {
        ll_config_free(&cfg);
        return 0;
    }

    printf("prepared %s in %.1f s\n", cfg.data_dir, ll_now() - t0);
    printf("  vocab: %d pieces (%s/%s)%s\n", info.vocab_size, cfg.data_dir, info.spm_file,
           cfg.spm_model[0] ? ", copied from data.spm_model" : "");
    printf("  languages:");
    for (int i = 0; i < info.n_langs; i++) printf(" %s", info.langs[i]);
    printf("; target-language tags: %s\n", info.lang_tags ? "on" : "off");
    int64_t sents[2] = {0}, toks[2] = {0}, skipped[2] = {0};
    int pairs[2] = {0};
    for (int i = 0; i < info.n_corpora; i++) {
        const ll_corpus_info *c = &info.corpora[i];
        int v = !strcmp(c->split, "valid");
        printf("  %s.%d %s-%s: %" PRId64 " lines, %" PRId64 " pairs, %" PRId64 " + %" PRId64 " tokens; skipped %" PRId64
               " empty, %" PRId64 " longer than data.max_len",
               c->split, c->index, info.langs[c->src_lang], info.langs[c->tgt_lang], c->raw_lines, c->n_sents,
               c->src_tokens, c->tgt_tokens, c->skipped_empty, c->skipped_long);
        if (c->skipped_ratio > 0)
            printf(", %" PRId64 " with a length ratio above data.max_len_ratio %g", c->skipped_ratio,
                   (double)cfg.max_len_ratio);
        if (c->tgt_tag >= 0) printf("; tag <2%s>=%d", info.langs[c->tgt_lang], c->tgt_tag);
        if (c->index >= 0 && c->index < (v ? cfg.n_valid : cfg.n_train)) {
            const ll_corpus_cfg *cc = v ? &cfg.valid[c->index] : &cfg.train[c->index];
            if (cc->src_tag[0]) printf("; source tag %s", cc->src_tag);
        }
        putchar('\n');
        pairs[v]++;
        sents[v] += c->n_sents;
        toks[v] += c->src_tokens + c->tgt_tokens;
        skipped[v] += c->skipped_empty + c->skipped_long + c->skipped_ratio;
    }
    for (int v = 0; v < 2; v++)
        if (pairs[v])
            printf("  %s total: %d corpora, %" PRId64 " sentence pairs, %" PRId64 " tokens, %" PRId64
                   " lines skipped\n",
                   v ? "valid" : "train", pairs[v], sents[v], toks[v], skipped[v]);
    if (info.spm_samples > 0)
        printf("  subword regularization: %d sampled segmentations of each train corpus (data.spm_alpha %g), one per "
               "epoch: %.2fx the standard tokens on the source side, %.2fx on the target side%s\n",
               info.spm_samples, (double)info.spm_alpha, standard[0] ? (double)sampled[0] / (double)standard[0] : 1,
               standard[1] ? (double)sampled[1] / (double)standard[1] : 1,
               info.spm_sides == 1 ? " (not sampled)" : info.spm_sides == 2 ? " (the source side not sampled)" : "");
    ll_config_free(&cfg);
    return 0;
}
