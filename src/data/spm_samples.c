/* llprep's sampled segmentations of the training corpora (data.spm_samples, subword
 * regularization): each sampled side of each sample is one token file with the standard
 * file's sentences, written in a thread of its own so that its draws depend on the file alone. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "ll/core.h"

typedef struct {
    const ll_spm *spm;
    const char *raw;       /* the raw text of one side */
    const ll_tokfile *std; /* its standard segmentation: which lines were kept, the fallback */
    int32_t tag;           /* the corpus's source tag before every sentence, or -1 */
    char path[LL_PATH_MAX + 160];
    uint32_t seed;
    float alpha;
    int max_len, rc;
    char err[512];
} sample_task;

/* One side of one sample, in a thread of its own (a new one: ll_spm_sample_thread_init). */
static void *run_sample_task(void *arg) {
    sample_task *T = arg;
    ll_linereader r = {0};
    ll_tokfile_writer *w = NULL;
    int32_t *ids = NULL;
    int cap = 0;
    T->rc = -1;
    if (ll_spm_sample_thread_init(T->spm, T->seed) != 0 || ll_lr_open(&r, T->raw) != 0 ||
        !(w = ll_tokfile_create(T->path)))
        goto out;
    char *text = NULL;
    for (int i = 0; i < T->std->n_sents; i++) {
        const int64_t line = (int64_t)T->std->lines[i]; /* 0-based, ascending */
        while (r.lineno <= line)
            if (ll_lr_next(&r, &text) < 0) {
                ll_fail("%s: line count changed while reading", T->raw);
                goto out;
            }
        int n = ll_spm_sample_encode(T->spm, text, T->alpha, &ids, &cap);
        if (n < 0) {
            ll_fail("%s:%" PRId64 ": sentencepiece sampling failed", T->raw, line + 1);
            goto out;
        }
        const int32_t *keep;
        if (n == 0 || n + (T->tag >= 0) + 1 > T->max_len) { /* the standard segmentation fits (it was kept) */
            keep = T->std->tokens + T->std->offsets[i];
            n = ll_tokfile_len(T->std, i);
        } else {
            if (n + 2 > cap) ids = ll_realloc(ids, sizeof(int32_t) * (size_t)(cap = n + 2));
            if (T->tag >= 0) {
                memmove(ids + 1, ids, sizeof(int32_t) * (size_t)n);
                ids[0] = T->tag;
                n++;
            }
            ids[n++] = LL_EOS;
            keep = ids;
        }
        if (ll_tokfile_append(w, keep, n, (uint64_t)line) != 0) goto out;
    }
    T->rc = ll_tokfile_commit(w);
    w = NULL;
out:
    if (T->rc != 0) snprintf(T->err, sizeof T->err, "%s", ll_errbuf());
    ll_tokfile_abort(w);
    ll_lr_close(&r);
    free(ids);
    return NULL;
}

int ll_write_samples(const ll_config *cfg, const ll_spm *spm, const ll_data_info *info, const char *stage, int k) {
    const ll_corpus_cfg *cc = &cfg->train[k];
    char(*names)[64] = ll_malloc(sizeof *names * LL_CORPUS_FILES);
    int kinds[LL_CORPUS_FILES];
    int nf = ll_corpus_files(info, k, names, kinds), rc = 0;
    ll_tokfile std[2] = {{0}};
    char path[LL_PATH_MAX + 160];
    for (int t = 0; t < 2 && rc == 0; t++) {
        snprintf(path, sizeof path, "%s/%s", stage, names[t]);
        rc = ll_tokfile_open(&std[t], path);
    }
    const int n_tasks = nf - 2, threads = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
    sample_task *tasks = ll_calloc((size_t)(n_tasks > 0 ? n_tasks : 1), sizeof *tasks);
    pthread_t *tid = ll_calloc((size_t)(threads > 0 ? threads : 1), sizeof *tid);
    for (int j = 0; j < n_tasks; j++) {
        sample_task *T = &tasks[j];
        const int side = kinds[j + 2] % 2, sample = kinds[j + 2] / 2 + 1;
        T->spm = spm;
        T->raw = side ? cc->tgt : cc->src;
        T->tag = !side && cc->src_tag[0] ? ll_spm_piece_id(spm, cc->src_tag) : -1;
        T->std = &std[side];
        T->alpha = cfg->spm_alpha;
        T->max_len = cfg->max_len;
        const uint64_t key[3] = {(uint64_t)k, (uint64_t)sample, (uint64_t)side};
        const uint64_t h = ll_fnv1a64(key, sizeof key, LL_FNV_INIT);
        T->seed = (uint32_t)(h ^ (h >> 32));
        snprintf(T->path, sizeof T->path, "%s/%s", stage, names[j + 2]);
    }
    for (int b = 0; b < n_tasks && rc == 0; b += threads) { /* a wave of new threads at a time */
        int started = 0;
        for (int j = b; j < n_tasks && j < b + threads; j++, started++)
            if (pthread_create(&tid[started], NULL, run_sample_task, &tasks[j]) != 0) {
                rc = ll_fail("cannot start a thread to sample segmentations");
                break;
            }
        for (int j = 0; j < started; j++) pthread_join(tid[j], NULL);
        for (int j = b; j < b + started && rc == 0; j++)
            if (tasks[j].rc != 0) rc = ll_fail("%s", tasks[j].err);
    }
    free(tid);
    free(tasks);
    ll_tokfile_close(&std[0]);
    ll_tokfile_close(&std[1]);
    free(names);
    return rc;
}
