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
/* Train a joint unigram model on the given text files (empty lines ignored);
 * writes <prefix>.model atomically.  lang_tags become user-defined pieces with
 * ids 4, 5, ...  Reproducible: fixed thread count (2) and spm's fixed sampling
 * seed; `seed` goes to sentencepiece's generator (unused by unigram training
 * in spm 0.1.97; llprep passes a constant).  Logging is silenced.  -1 + errbuf. */
int ll_spm_train(const char *const *files, int n_files, const char *model_prefix, int vocab_size,
                 const char *const *lang_tags, int n_tags, uint64_t seed);
ll_spm *ll_spm_load(const char *model_path);                      /* NULL + errbuf */
ll_spm *ll_spm_load_bytes(const void *proto, size_t n);           /* from a checkpoint */
void ll_spm_free(ll_spm *s);
int ll_spm_vocab_size(const ll_spm *s);
int ll_spm_piece_id(const ll_spm *s, const char *piece);          /* -1 if absent */
const char *ll_spm_id_piece(const ll_spm *s, int id);              /* NULL if out of range */
/* Encode one line into ids (no EOS); returns count, or -1 on failure.  *ids is
 * realloc'd to *cap elements as needed.  Safe to call from several threads. */
int ll_spm_encode(const ll_spm *s, const char *text, int32_t **ids, int *cap);
/* Subword regularization: a segmentation drawn from the model's distribution (unigram: all
 * segmentations x with probability ~ P(x)^alpha, Kudo 2018; BPE: BPE-dropout with probability
 * alpha), sentencepiece's SampleEncode with nbest -1.  Draws come from the calling thread's own
 * generator, which ll_spm_sample_thread_init seeds once: call it first in a thread that has never
 * used sentencepiece's generator (a new one), so that the draws are a function of the seed and
 * the thread's texts alone.  Encode returns -1 in a thread not seeded; init -1 + errbuf. */
int ll_spm_sample_thread_init(const ll_spm *s, uint32_t seed);
int ll_spm_sample_encode(const ll_spm *s, const char *text, float alpha, int32_t **ids, int *cap);
/* Decode ids to a malloc'd string.  Control ids (bos/pad/eos), ids outside the
 * vocabulary and language-tag pieces "<2xx>" are dropped. */
char *ll_spm_decode(const ll_spm *s, const int32_t *ids, int n);
/* The serialized model proto (for storing in checkpoints). */
const void *ll_spm_proto(const ll_spm *s, size_t *n);
/* The model's special ids (prepare checks they are 0/1/2/3). */
void ll_spm_special_ids(const ll_spm *s, int *bos, int *pad, int *eos, int *unk);

#define LL_BOS 0
#define LL_PAD 1
#define LL_EOS 2
#define LL_UNK 3

/* ---- binarised corpus (one file per side per corpus, read by mmap) ----
 * Layout (little-endian, see docs/data.md): a 64-byte header {magic "LLTOKENS",
 * u32 version, u32 header size, u64 n_sents, u64 n_tokens, u64 checksum, 24
 * reserved bytes}, then int32 tokens[n_tokens], zero padding to 8 bytes,
 * u64 offsets[n_sents+1] (offsets[i] = first token of sentence i) and
 * u64 lines[n_sents] (0-based line of the sentence in the raw text file). */
typedef struct {
    int n_sents;
    const uint64_t *offsets; /* [n_sents+1] into tokens */
    const int32_t *tokens;   /* each sentence ends with EOS */
    const uint64_t *lines;   /* [n_sents]: 0-based line number in the raw text */
    uint64_t n_tokens, checksum;
    void *map;
    size_t map_len;
} ll_tokfile;

/* Maps the file and validates magic, version, sizes and offsets (O(n_sents)). */
int ll_tokfile_open(ll_tokfile *f, const char *path); /* -1 + errbuf "path: what is wrong" */
void ll_tokfile_close(ll_tokfile *f);
/* Full check: checksum, every sentence ends with EOS, 0 <= id < vocab (vocab <= 0: skip the range check). */
int ll_tokfile_verify(const ll_tokfile *f, const char *path, int vocab); /* -1 + errbuf */
static inline int ll_tokfile_len(const ll_tokfile *f, int i) { return (int)(f->offsets[i + 1] - f->offsets[i]); }

/* Writer (atomic: nothing appears at `path` until ll_tokfile_commit succeeds). */
typedef struct ll_tokfile_writer ll_tokfile_writer;
ll_tokfile_writer *ll_tokfile_create(const char *path); /* NULL + errbuf */
/* Append one sentence; `ids` must already end with EOS (n >= 1).  line = raw 0-based line. */
int ll_tokfile_append(ll_tokfile_writer *w, const int32_t *ids, int n, uint64_t line);
int ll_tokfile_commit(ll_tokfile_writer *w); /* writes offsets + header, renames; frees w */
void ll_tokfile_abort(ll_tokfile_writer *w); /* removes the temporary; frees w */

/* A prepared pair: src/tgt token files plus language ids. */
typedef struct {
    ll_tokfile src, tgt;
    int n_samples;          /* data.spm_samples: training batches read these instead of src/tgt */
    int sample_sides;       /* which sides are sampled: bit 0 source, bit 1 target; the other reads src/tgt */
    ll_tokfile *samples;    /* [2 * n_samples]: sample k's source at 2k, its target at 2k + 1 (unsampled
                               sides left closed) */
    int src_lang, tgt_lang; /* index into ll_dataset.langs */
    int tgt_tag;            /* token id of the target-language tag, or -1 */
} ll_pair_data;

typedef struct {
    int n_pairs;
    ll_pair_data pairs[LL_MAX_CORPORA];
    int vocab_size; /* the manifest's; every token id was checked against it */
    int n_langs;
    char langs[LL_MAX_CORPORA * 2][LL_LANG_MAX];
} ll_dataset;

/* llprep: train/load the spm model, binarise cfg->train and cfg->valid into
 * cfg->data_dir.  Validates the raw text (line counts, UTF-8, empty corpus, long lines).
 * Writes everything atomically; on error nothing new is left in data_dir.
 * Layout: data_dir/spm.model, data_dir/{train,valid}.<i>.<src>-<tgt>.{src,tgt}.bin,
 * data_dir/manifest.txt (written last; see docs/data.md). */
int ll_prepare_data(const ll_config *cfg);
/* 1 when data_dir/manifest.txt matches cfg (same raw file contents, corpora,
 * languages and data settings), else 0.  Cheap when the raw files' size and
 * mtime are unchanged; otherwise re-hashes their contents. */
int ll_data_is_prepared(const ll_config *cfg);
/* data_dir's lock (an fcntl lock on data_dir/.lldata.lock, a file that exists while it is held):
 * one preparation at a time, and no other llprep or lltrain replaces the files between the check
 * that they are current (or their preparation) and their opening.  Take creates data_dir when
 * missing and waits while another process holds the lock (saying once which PID); release with
 * failed = 1 also removes the directories take created (when nothing else is in them), so a failed
 * first preparation leaves no trace.  Take returns 0, or -1 with ll_errbuf set. */
typedef struct {
    int fd; /* held while >= 0 */
    char dir[LL_PATH_MAX];
    char created[LL_PATH_MAX]; /* topmost directory take created, "" if none */
} ll_data_lock;
int ll_data_lock_take(ll_data_lock *l, const char *data_dir);
void ll_data_lock_release(ll_data_lock *l, int failed);

/* What the manifest records (llprep's summary, lltrain's log). */
typedef struct {
    char split[8];            /* "train" | "valid" */
    int index;                /* position in data.train / data.valid */
    int src_lang, tgt_lang;   /* index into ll_data_info.langs */
    int tgt_tag;              /* target-language tag id, or -1 */
    int64_t raw_lines;        /* lines in each raw file */
    int64_t n_sents;          /* pairs kept */
    int64_t src_tokens, tgt_tokens; /* incl. EOS */
    int64_t skipped_empty, skipped_long;
    int64_t skipped_ratio;    /* training pairs beyond data.max_len_ratio */
    char src_file[64], tgt_file[64]; /* names inside data_dir */
} ll_corpus_info;

typedef struct {
    uint64_t hash;            /* of the raw inputs + data settings */
    int vocab_size;           /* of the sentencepiece model */
    int lang_tags;            /* 1 when target-language tags are used */
    char spm_file[64];        /* name inside data_dir ("spm.model") */
    int n_langs;
    char langs[LL_MAX_CORPORA * 2][LL_LANG_MAX];
    int spm_samples;          /* sampled segmentations of each train corpus (data.spm_samples) */
    float spm_alpha;
    int spm_sides;            /* which sides they cover: bit 0 source, bit 1 target (data.spm_sample_sides) */
    int n_corpora;            /* train corpora first, then valid */
    ll_corpus_info corpora[LL_MAX_CORPORA * 2];
} ll_data_info;

int ll_data_info_read(ll_data_info *info, const char *data_dir); /* -1 + errbuf */
/* The files of corpus i inside data_dir: its source and target, then (train corpora) each sampled
 * segmentation's sampled sides, "train.0.en-es.s1.src.bin" ...; returns how many (at most
 * LL_CORPUS_FILES).  kinds (may be NULL) gets each file's (sample k, side t) as 2k + t, k from 0,
 * or -1 for the standard files. */
#define LL_CORPUS_FILES (2 + 2 * 64)
int ll_corpus_files(const ll_data_info *info, int i, char (*names)[64], int *kinds);
/* "both" | "source" | "target" as spm_sides bits, 0 if none of them */
int ll_spm_sides_mask(const char *sides);

/* Open the prepared split ("train" or "valid"); a split with no corpora gives n_pairs = 0.
 * Verifies every token file in full (ll_tokfile_verify against the manifest's
 * vocabulary: one pass over the tokens), so a corrupt id never reaches a model. */
int ll_dataset_open(ll_dataset *d, const ll_config *cfg, const char *split);
/* Same, given the data directory alone (as the manifest describes it). */
int ll_dataset_open_dir(ll_dataset *d, const char *data_dir, const char *split);
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
    size_t cap_tok, cap_sent; /* allocated sizes (internal to ll_batcher_next) */
    int row0;          /* a slice of a batch (ll_model_step_team): its first sentence's
                          index in the whole batch, which keys its dropout draws; else 0 */
} ll_batch;

/* Start from a zeroed ll_batch (ll_batch b = {0}).  ll_batcher_next reuses and
 * grows the buffers in *b between calls, so pointers from an earlier batch are
 * invalid after the next call; ll_batch_free releases them. */
void ll_batch_free(ll_batch *b);
/* A batch of B sentences of L tokens on both sides, every token EOS, no padding:
 * the largest step of a shape, for the dry run and host-side benchmarks. */
void ll_batch_full(ll_batch *b, int B, int L);

/* Epoch iterator (fairseq-style): within each pair, sentences are sorted by
 * (target length, source length) with a seeded random tie-break and cut
 * greedily into batches with B * max(S, T) <= max_tokens (a sentence longer
 * than that alone forms a batch).  Batch composition is fixed; the order of
 * batches is shuffled every epoch with Philox(seed, LL_RNG_SHUFFLE, epoch).
 * Epochs count from 1; pos = batches already returned in the epoch.  Its
 * state (epoch, pos) is saved in checkpoints.  shuffle = 0 (validation): sort
 * without random tie-break, pairs in order, every batch once.  The dataset
 * must outlive the batcher. */
typedef struct ll_batcher ll_batcher;
ll_batcher *ll_batcher_new(const ll_dataset *d, int max_tokens, uint64_t seed, int shuffle); /* sampling "size" */
/* sampling: "size" (every batch of every pair once per epoch), "temperature"
 * (pair p drawn with probability ~ n_p^(1/temperature), n_p = sentences; small
 * pairs up-sampled, large ones down-sampled; same number of batches per epoch),
 * "uniform" (temperature = infinity).  NULL + errbuf on a bad mode/temperature. */
ll_batcher *ll_batcher_new_ex(const ll_dataset *d, int max_tokens, uint64_t seed, int shuffle,
                              const char *sampling, float temperature);
/* From cfg: data.max_tokens, train.seed, data.sampling, data.sampling_temperature, data.pad_to_multiple. */
ll_batcher *ll_batcher_from_config(const ll_dataset *d, const ll_config *cfg, int shuffle);
/* Batch lengths S and T padded up to a multiple of `multiple` (PAD tokens; the
 * token budget counts them): fewer distinct batch shapes, tensor-core-friendly
 * sizes.  The batches are made again; before the first read only. */
void ll_batcher_pad_to(ll_batcher *it, int multiple);
/* Per-pair weights w[0..n_pairs) in (0, LL_CORPUS_WEIGHT_MAX] (data.train[k].weight; from_config sets
 * them): an epoch has round(sum_k w_k x batches_k) batches, shared out with p_k ~ w_k x (size: batches_k;
 * temperature: n_k^(1/T); uniform: 1), so in size mode pair k's batches come w_k times per epoch (whole
 * passes, then a random subset for the fraction).  Before the first read only; no effect without shuffle. */
void ll_batcher_set_weights(ll_batcher *it, const float *w);
void ll_batcher_free(ll_batcher *it);
int ll_batcher_n_batches(const ll_batcher *it);          /* this epoch's, all pairs */
/* Batches of a given epoch (they differ by epoch when the pairs have sampled segmentations). */
int ll_batcher_epoch_batches(const ll_batcher *it, int64_t epoch);
/* Segmentations read in turn, one per epoch: 1, or the pairs' sampled ones (data.spm_samples). */
int ll_batcher_segmentations(const ll_batcher *it);
/* Distinct batch shapes (sentences, padded S, padded T) of every epoch, all pairs: on CUDA each is
 * one step graph (more than the backend keeps: steps captured again and again). */
int ll_batcher_shapes(const ll_batcher *it);
/* Batches of one pair this epoch (its own batching, before sampling). */
int ll_batcher_pair_batches(const ll_batcher *it, int pair);
/* Fill *b with the next batch; returns 0 at the end of an epoch (then the next call starts epoch+1). */
int ll_batcher_next(ll_batcher *it, ll_batch *b);
void ll_batcher_state(const ll_batcher *it, int64_t *epoch, int64_t *pos);
/* Restore a saved state: the following ll_batcher_next calls return exactly the batches
 * the saved run would have seen.  epoch < 1 is taken as 1; pos is clamped to [0, n_batches]. */
void ll_batcher_seek(ll_batcher *it, int64_t epoch, int64_t pos);

#ifdef __cplusplus
}
#endif
#endif
