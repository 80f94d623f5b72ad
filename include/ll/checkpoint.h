/* Single-file model/checkpoint format, version 1 (docs/model-format.md):
 *   header: magic "LLMODEL\0", u32 version, u32 flags (0), u64 file size;
 *   config text, vocabulary blob (sentencepiece proto), tensor index
 *   (name, dtype, ndim, shape, offset, nbytes), 64-byte aligned tensor data,
 *   trailer: FNV-1a 64 checksum of everything before it + end magic.
 * Little-endian.  Written atomically (temp file, fsync, rename).  Read by
 * mmap; tensor data pointers point into the mapping, so they stay valid until
 * ll_ckpt_close.  Optimizer and trainer state are ordinary tensors named
 * "optim.*" / "state.*"; a plain model file just omits them. */
#ifndef LL_CHECKPOINT_H
#define LL_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LL_CKPT_VERSION 1
#define LL_CKPT_ALIGN 64        /* every tensor's data offset is a multiple of this */
#define LL_CKPT_MAX_NDIM 4
#define LL_CKPT_MAX_NAME 1024   /* bytes in a tensor name */

enum { LL_DT_F32 = 0, LL_DT_F64 = 1, LL_DT_I32 = 2, LL_DT_I64 = 3, LL_DT_U8 = 4, LL_DT_BF16 = 5 };
#define LL_DT_COUNT 6

size_t ll_dtype_size(int dtype);      /* bytes per element; 0 for an unknown dtype */
const char *ll_dtype_name(int dtype); /* "f32", ...; "?" for an unknown dtype */

/* ndim 0 is a scalar (one element); shape[i] for i >= ndim is ignored.
 * nbytes must equal dtype size * product(shape). */
typedef struct {
    const char *name;
    int dtype;
    int ndim;
    int64_t shape[LL_CKPT_MAX_NDIM];
    const void *data;
    size_t nbytes;
} ll_tensor_ref;

typedef struct {
    const char *config_text; /* NULL = "" */
    const void *vocab;       /* sentencepiece model proto; NULL with vocab_len 0 = none */
    size_t vocab_len;
    const ll_tensor_ref *tensors;
    int n_tensors;
} ll_ckpt_contents;

/* Atomic write.  Validates everything (names unique and non-empty, dtype,
 * ndim, shape, nbytes) before creating any file.  -1 + errbuf on failure; then
 * no temporary is left and whatever was at path before is untouched. */
int ll_ckpt_write(const char *path, const ll_ckpt_contents *c);

typedef struct ll_ckpt ll_ckpt;
/* mmap + verify magic, version, size, checksum and every bound in the index.
 * NULL + errbuf "path: what is wrong" (one line). */
ll_ckpt *ll_ckpt_open(const char *path);
void ll_ckpt_close(ll_ckpt *k); /* NULL is fine */
const char *ll_ckpt_config_text(const ll_ckpt *k); /* NUL-terminated, owned by k */
const void *ll_ckpt_vocab(const ll_ckpt *k, size_t *n); /* NULL + *n = 0 if the file has none */
int ll_ckpt_n_tensors(const ll_ckpt *k);
const ll_tensor_ref *ll_ckpt_tensor(const ll_ckpt *k, int i); /* file order; NULL if out of range */
const ll_tensor_ref *ll_ckpt_find(const ll_ckpt *k, const char *name); /* NULL if absent */

/* Before a tool (llavg, llprune) writes a model file to out: -1 + errbuf when
 * out is one of the n inputs, or an existing checkpoint that holds training
 * state (optimizer or trainer tensors), which a model-only file would replace
 * (its run could no longer resume from it). */
int ll_ckpt_output_ok(const char *out, const char *const *in, int n);

/* Checkpoint directory management: checkpoint_last.llm, checkpoint_best.llm,
 * checkpoint_<update>.llm.  Only names of exactly that form (decimal update,
 * no sign, no leading zeros) count as numbered; nothing else is touched. */

/* Delete all but the keep_last highest-numbered checkpoints (0 = keep all).
 * Returns the number deleted, or -1 + errbuf. */
int ll_ckpt_prune_numbered(const char *dir, int keep_last);
/* Update numbers of the numbered checkpoints in dir, ascending.  Returns the
 * count and sets *updates to a malloc'd array (NULL when the count is 0; free
 * it), or -1 + errbuf. */
int ll_ckpt_list_numbered(const char *dir, long **updates);
/* "dir/checkpoint_<update>.llm", malloc'd. */
char *ll_ckpt_numbered_path(const char *dir, long update);
/* checkpoint.keep_best: "checkpoint_best_<metric>_<value>_<update>.llm" (value "%.4f") into buf;
 * metric "loss" (lower is better), "bleu" or "chrf" (higher is better). */
const char *ll_ckpt_best_name(char *buf, size_t n, const char *metric, double value, long update);
/* How many of dir's best-N checkpoints of `metric` rank before a new one of
 * `value` at `update` (better, or as good and earlier), or -1 + errbuf. */
int ll_ckpt_best_rank(const char *dir, const char *metric, double value, long update);
/* Delete the best-N checkpoints of `metric` past the `keep` best (0: no
 * limit) and those of updates after `after` (-1: none).  Only names of
 * exactly the form above count.  Returns the number deleted, or -1 + errbuf. */
int ll_ckpt_prune_best(const char *dir, const char *metric, int keep, long after);
/* Remove the atomic writer's temporaries ("checkpoint_*.tmp.<pid>",
 * "metrics*.tmp.<pid>") of `writer`, the run that held dir's lock before
 * (ll_run_lock), when that process is gone (a killed run leaves one the size
 * of a checkpoint).  Files of any other pid are a user's: kept.  writer <= 0
 * removes nothing.  Returns the number removed (0 if dir does not exist), or
 * -1 + errbuf. */
int ll_ckpt_clean_stale_temps(const char *dir, long writer);

#ifdef __cplusplus
}
#endif
#endif
