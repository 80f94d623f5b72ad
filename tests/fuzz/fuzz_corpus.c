/* Fuzz target: the raw-corpus reader, what llprep runs (src/data/text.c,
 * prepare.c, manifest.c): line reading, UTF-8 and NUL checks, line-count
 * checks, sentencepiece encoding, long/empty-line handling, binarising, the
 * manifest, then reading the prepared data back and batching it.
 *
 * Input: one flags byte, then the source text, "|||", the target text (no
 * separator: the target is a copy of the source).  The flags pick the data
 * settings (data.long_lines, data.lang_tags, data.max_len, a validation
 * corpus, one file used as both sides).  A small sentencepiece model is
 * trained once at start-up on tests/data/tiny.
 *
 * Oracles beyond "no crash": a successful preparation reads back as prepared
 * and opens; a failed one leaves nothing behind (data.dir did not exist). */
#define _GNU_SOURCE
#include <ftw.h>
#include <sys/stat.h>

#include "fuzz_util.h"
#include "ll/core.h"
#include "ll/data.h"

#ifndef LL_FUZZ_SOURCE_DIR
#define LL_FUZZ_SOURCE_DIR "."
#endif

static char spm_path[300];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    ll_verbosity = 0;
    ll_set_threads(1);
    const char *src = getenv("LL_SOURCE_DIR");
    if (!src) src = LL_FUZZ_SOURCE_DIR;
    char en[600], es[600], prefix[300];
    snprintf(en, sizeof en, "%s/tests/data/tiny/train.en", src);
    snprintf(es, sizeof es, "%s/tests/data/tiny/train.es", src);
    const char *files[2] = {en, es};
    const char *tags[2] = {"<2es>", "<2en>"};
    fz_path(prefix, sizeof prefix, "spm");
    if (ll_spm_train(files, 2, prefix, 64, tags, 2, 1) != 0) {
        fprintf(stderr, "fuzz_corpus: cannot train the sentencepiece model: %s\n", ll_errbuf());
        exit(1);
    }
    fz_path(spm_path, sizeof spm_path, "spm.model");
    return 0;
}

static int rm_entry(const char *p, const struct stat *st, int type, struct FTW *ftw) {
    (void)st, (void)type, (void)ftw;
    return remove(p);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static void walk_split(const ll_config *cfg, const char *split) {
    ll_dataset d;
    if (ll_dataset_open(&d, cfg, split) != 0) {
        fprintf(stderr, "prepared data does not open (%s): %s\n", split, ll_errbuf());
        abort();
    }
    if (d.n_pairs > 0) {
        ll_batcher *it = ll_batcher_new(&d, 32, 1, 1);
        ll_batch b = {0};
        int n = 0;
        while (ll_batcher_next(it, &b)) n++;
        if (n != ll_batcher_n_batches(it)) abort();
        ll_batch_free(&b);
        ll_batcher_free(it);
    }
    ll_dataset_close(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 1 << 14) return 0;
    if (!spm_path[0]) LLVMFuzzerInitialize(NULL, NULL);
    int fd0 = fz_lowest_fd();
    const uint8_t flags = data[0];
    const char *text = (const char *)data + 1;
    size_t n = size - 1, ns = n, nt_off = 0, nt = n;
    const char *sep = memmem(text, n, "|||", 3);
    if (sep) {
        ns = (size_t)(sep - text);
        nt_off = ns + 3;
        nt = n - nt_off;
    }
    ll_config cfg;
    ll_config_defaults(&cfg);
    char src[300], tgt[300];
    fz_path(src, sizeof src, "src.txt");
    fz_path(tgt, sizeof tgt, "tgt.txt");
    fz_write(src, text, ns);
    fz_write(tgt, text + nt_off, nt);
    fz_path(cfg.data_dir, sizeof cfg.data_dir, "bin");
    nftw(cfg.data_dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    snprintf(cfg.spm_model, sizeof cfg.spm_model, "%s", spm_path);
    cfg.threads = 1;
    static const int max_lens[8] = {2, 3, 5, 8, 16, 32, 64, 1024};
    static const char *const tag_modes[4] = {"auto", "on", "off", "auto"};
    cfg.max_len = max_lens[(flags >> 4) & 7];
    snprintf(cfg.long_lines, sizeof cfg.long_lines, "%s", flags & 1 ? "error" : "skip");
    snprintf(cfg.lang_tags, sizeof cfg.lang_tags, "%s", tag_modes[(flags >> 1) & 3]);
    ll_corpus_cfg cc = {.src_lang = "en", .tgt_lang = "es"};
    snprintf(cc.src, sizeof cc.src, "%s", src);
    snprintf(cc.tgt, sizeof cc.tgt, "%s", flags & 0x80 ? src : tgt);
    cfg.train[cfg.n_train++] = cc;
    if (flags & 8) { /* a validation corpus, the other direction */
        ll_corpus_cfg v = {.src_lang = "es", .tgt_lang = "en"};
        snprintf(v.src, sizeof v.src, "%s", cc.tgt);
        snprintf(v.tgt, sizeof v.tgt, "%s", cc.src);
        cfg.valid[cfg.n_valid++] = v;
    }
    if (ll_prepare_data(&cfg) == 0) {
        if (!ll_data_is_prepared(&cfg)) {
            fprintf(stderr, "freshly prepared data does not read back as prepared\n");
            abort();
        }
        walk_split(&cfg, "train");
        walk_split(&cfg, "valid");
    } else if (exists(cfg.data_dir)) {
        fprintf(stderr, "failed preparation (%s) left %s behind\n", ll_errbuf(), cfg.data_dir);
        abort();
    }
    fz_check_fds(fd0, "ll_prepare_data");
    return 0;
}
