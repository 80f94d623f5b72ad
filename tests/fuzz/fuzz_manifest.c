/* Fuzz target: the prepared-data reader (src/data/manifest.c), what lltrain
 * runs on data.dir: the manifest, then the token files it names, then
 * batching.  The input is the manifest text; the data directory holds four
 * small valid token files (written once at start-up) under the names the
 * seed manifests use, so mutations reach the dataset and batcher code, and
 * ll_data_is_prepared compares it with a config of two small text files. */
#define _GNU_SOURCE
#include <sys/stat.h>

#include "fuzz_util.h"
#include "ll/core.h"
#include "ll/data.h"

static char data_dir[300];
static ll_config cfg; /* for ll_data_is_prepared: one corpus of two small text files */

static void write_tokfile(const char *name, int n_sents, int seed) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", data_dir, name);
    ll_tokfile_writer *w = ll_tokfile_create(path);
    if (!w) abort();
    int32_t ids[8];
    for (int i = 0; i < n_sents; i++) {
        int n = 1 + (i * 7 + seed) % 8;
        for (int j = 0; j < n - 1; j++) ids[j] = 4 + (i + j + seed) % 30;
        ids[n - 1] = LL_EOS;
        if (ll_tokfile_append(w, ids, n, (uint64_t)i) != 0) abort();
    }
    if (ll_tokfile_commit(w) != 0) abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    ll_verbosity = 0;
    fz_path(data_dir, sizeof data_dir, "bin");
    if (mkdir(data_dir, 0777) != 0) abort();
    write_tokfile("train.0.en-es.src.bin", 12, 1);
    write_tokfile("train.0.en-es.tgt.bin", 12, 2);
    write_tokfile("valid.0.en-es.src.bin", 3, 3);
    write_tokfile("valid.0.en-es.tgt.bin", 3, 4);
    /* sampled segmentations (data.spm_samples 2): the standard files' sentences, other tokens */
    write_tokfile("train.0.en-es.s1.src.bin", 12, 5);
    write_tokfile("train.0.en-es.s1.tgt.bin", 12, 6);
    write_tokfile("train.0.en-es.s2.src.bin", 12, 7);
    write_tokfile("train.0.en-es.s2.tgt.bin", 12, 8);
    ll_config_defaults(&cfg);
    snprintf(cfg.data_dir, sizeof cfg.data_dir, "%s", data_dir);
    ll_corpus_cfg cc = {.src_lang = "en", .tgt_lang = "es"};
    fz_path(cc.src, sizeof cc.src, "a.en");
    fz_path(cc.tgt, sizeof cc.tgt, "a.es");
    fz_write(cc.src, "one\ntwo\n", 8);
    fz_write(cc.tgt, "uno\ndos\n", 8);
    cfg.train[cfg.n_train++] = cc;
    return 0;
}

static void walk_split(const char *split) {
    ll_dataset d;
    if (ll_dataset_open_dir(&d, data_dir, split) != 0) return;
    if (d.n_pairs > 0) {
        ll_batcher *it = ll_batcher_new_ex(&d, 16, 1, 1, "temperature", 2.0f);
        if (it) {
            ll_batch b = {0};
            for (int epoch = 0; epoch < 2; epoch++)
                while (ll_batcher_next(it, &b)) {
                }
            ll_batch_free(&b);
            ll_batcher_free(it);
        }
    }
    ll_dataset_close(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 16) return 0;
    if (!data_dir[0]) LLVMFuzzerInitialize(NULL, NULL);
    int fd0 = fz_lowest_fd();
    char path[400];
    snprintf(path, sizeof path, "%s/manifest.txt", data_dir);
    fz_write(path, data, size);
    ll_data_is_prepared(&cfg); /* the input stamps and hashes */
    ll_data_info info;
    if (ll_data_info_read(&info, data_dir) == 0) {
        walk_split("train");
        walk_split("valid");
    }
    fz_check_fds(fd0, "ll_dataset_open_dir");
    return 0;
}
