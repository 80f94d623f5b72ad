/* Data pipeline: sentencepiece (C shim over libsentencepiece), binarised
 * corpora read by mmap, token-budget batching with length bucketing and a
 * seeded shuffle, multilingual sampling and language tags. */
#ifndef LL_DATA_H
#define LL_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "ll/config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sentencepiece shim (src/data/spm_shim.cc) ----
 * Special ids follow fairseq: bos=0, pad=1, eos=2, unk=3.  Language tags are
 * user-defined pieces "<2xx>". */
typedef struct ll_spm ll_spm;
/* Train a joint model on the given text files; writes <prefix>.model. -1 + errbuf. */
int ll_spm_train(const char *const *files, int n_files, const char *model_prefix, int vocab_size,
                 const char *const *lang_tags, int n_tags, uint64_t seed);
ll_spm *ll_spm_load(const char *model_path);                      /* NULL + errbuf */
ll_spm *ll_spm_load_bytes(const void *proto, size_t n);           /* from a checkpoint */
void ll_spm_free(ll_spm *s);
int ll_spm_vocab_size(const ll_spm *s);
int ll_spm_piece_id(const ll_spm *s, const char *piece);          /* -1 if absent */
const char *ll_spm_id_piece(const ll_spm *s, int id);
/* Encode one line into ids (no EOS); returns count, or -1 on failure. *ids is realloc'd. */
int ll_spm_encode(const ll_spm *s, const char *text, int32_t **ids, int *cap);
/* Decode ids to a malloc'd string. */
char *ll_spm_decode(const ll_spm *s, const int32_t *ids, int n);
/* The serialized model proto (for storing in checkpoints). */
const void *ll_spm_proto(const ll_spm *s, size_t *n);

#define LL_BOS 0
#define LL_PAD 1
#define LL_EOS 2
#define LL_UNK 3

/* ---- binarised corpus (one file per side per corpus, read by mmap) ---- */
typedef struct {
    int n_sents;
    const uint64_t *offsets; /* [n_sents+1] into tokens */
    const int32_t *tokens;   /* each sentence ends with EOS */
    void *map;
    size_t map_len;
} ll_tokfile;

int ll_tokfile_open(ll_tokfile *f, const char *path); /* -1 + errbuf */
void ll_tokfile_close(ll_tokfile *f);

/* A prepared pair: src/tgt token files plus language ids. */
typedef struct {
    ll_tokfile src, tgt;
    int src_lang, tgt_lang; /* index into ll_dataset.langs */
    int tgt_tag;            /* token id of the target-language tag, or -1 */
} ll_pair_data;

typedef struct {
    int n_pairs;
    ll_pair_data pairs[LL_MAX_CORPORA];
    int n_langs;
    char langs[LL_MAX_CORPORA * 2][LL_LANG_MAX];
} ll_dataset;

/* llprep: train/load the spm model, binarise cfg->train and cfg->valid into
 * cfg->data_dir.  Validates the raw text (line counts, UTF-8, empty corpus, long lines).
 * Writes everything atomically; on error nothing new is left in data_dir. */
int ll_prepare_data(const ll_config *cfg);
/* Open the prepared split ("train" or "valid"). */
int ll_dataset_open(ll_dataset *d, const ll_config *cfg, const char *split);
void ll_dataset_close(ll_dataset *d);

/* ---- batches ---- */
typedef struct {
    int B, S, T;       /* sentences, padded source length, padded target length */
    int32_t *src;      /* [B*S], right-padded with LL_PAD, ends with EOS */
    int32_t *tgt_in;   /* [B*T]: BOS (EOS, or the target-language tag) + y[:-1] */
    int32_t *tgt_out;  /* [B*T]: y including EOS, pad elsewhere */
    int *src_len, *tgt_len;
    int n_src_tokens, n_tgt_tokens; /* non-pad */
    int pair, src_lang, tgt_lang;
    int *ids;          /* sentence index within the pair's corpus */
} ll_batch;

void ll_batch_free(ll_batch *b);

/* Epoch iterator: batches of one pair, grouped by length, shuffled with
 * (seed, epoch).  Its state (epoch, position) is saved in checkpoints. */
typedef struct ll_batcher ll_batcher;
ll_batcher *ll_batcher_new(const ll_dataset *d, int max_tokens, uint64_t seed, int shuffle);
void ll_batcher_free(ll_batcher *it);
int ll_batcher_n_batches(const ll_batcher *it);          /* per epoch, all pairs */
/* Fill *b with the next batch; returns 0 at the end of an epoch (then the next call starts epoch+1). */
int ll_batcher_next(ll_batcher *it, ll_batch *b);
void ll_batcher_state(const ll_batcher *it, int64_t *epoch, int64_t *pos);
void ll_batcher_seek(ll_batcher *it, int64_t epoch, int64_t pos);

#ifdef __cplusplus
}
#endif
#endif
