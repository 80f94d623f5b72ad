/* Internal to src/data: raw-text reading and validation, the manifest and the
 * hash that ties prepared data to its inputs. */
#ifndef LL_DATA_INTERNAL_H
#define LL_DATA_INTERNAL_H

#include <stdio.h>
#include <sys/types.h>

#include "ll/config.h"
#include "ll/data.h"

#define LL_MANIFEST_FILE "manifest.txt"
#define LL_SPM_FILE "spm.model"
#define LL_MANIFEST_FORMAT 1

/* ---- text.c: raw text lines ---- */
typedef struct {
    FILE *f;
    const char *path;
    char *buf;
    size_t cap;
    int64_t lineno; /* 1-based number of the line last returned */
} ll_linereader;

int ll_lr_open(ll_linereader *r, const char *path); /* -1 + errbuf */
/* Next line without "\n" / "\r\n"; its length, -1 at end of file, -2 on a read error (errbuf). */
ssize_t ll_lr_next(ll_linereader *r, char **line);
void ll_lr_close(ll_linereader *r);
/* 0-based offset of the first byte that is not valid UTF-8 (or is NUL), else -1. */
ssize_t ll_utf8_invalid(const char *s, size_t n);
/* Read a whole corpus file: count lines, hash the content and validate it
 * ("path:LINE: invalid UTF-8 at byte N", "path: empty corpus").  -1 + errbuf. */
int ll_scan_text(const char *path, int64_t *lines, uint64_t *hash);
/* Content hash of any file (the spm model). -1 + errbuf. */
int ll_hash_file(const char *path, uint64_t *hash);

/* ---- manifest.c ---- */
/* A raw input as last seen: lets ll_data_is_prepared skip re-hashing unchanged files. */
typedef struct {
    char path[LL_PATH_MAX];
    int64_t size, mtime_ns;
    uint64_t hash;
} ll_input_stamp;

int ll_stat_stamp(const char *path, int64_t *size, int64_t *mtime_ns); /* -1 + errbuf */
int ll_lang_ok(const char *lang);
/* "<split>.<i>.<src>-<tgt>.<side>.bin" */
void ll_corpus_file_name(char *out, size_t n, const char *split, int index, const char *src, const char *tgt,
                         const char *side);
/* Hash of everything prepared data depends on: per-corpus file hashes
 * (train src,tgt,... then valid), the spm model's hash (0 = trained) and the data settings. */
uint64_t ll_data_hash(const ll_config *cfg, const uint64_t *corpus_hashes, uint64_t spm_hash);
int ll_manifest_write(const char *path, const ll_data_info *info, const ll_input_stamp *in, int n_in);
/* *in is malloc'd (may be NULL when n_in = 0). */
int ll_manifest_read(const char *data_dir, ll_data_info *info, ll_input_stamp **in, int *n_in);

/* ---- spm_samples.c ---- */
/* data.spm_samples segmentations of train corpus k, sampled from the model, into stage (the files
 * ll_corpus_files names after the standard two, which must be there); the sentences are the ones
 * the standard files kept.  Each file's draws depend on (k, sample, side) alone, never on the
 * thread count: the same bytes on every run.  -1 + errbuf. */
int ll_write_samples(const ll_config *cfg, const ll_spm *spm, const ll_data_info *info, const char *stage, int k);

#endif
