/* Single-file model/checkpoint format (docs/model-format.md):
 *   header: magic "LLMODEL\0", u32 version, u32 n_sections
 *   config text, vocabulary (sentencepiece proto), tensor index
 *   (name, dtype, ndim, shape, offset, nbytes), 64-byte aligned tensor data,
 *   trailer: FNV-1a 64 checksum of everything before it.
 * Written atomically (temp file, fsync, rename).  Read by mmap; tensor data
 * pointers point into the mapping.  Optimizer and trainer state are ordinary
 * tensors named "optim.*" / "state.*"; a plain model file just omits them. */
#ifndef LL_CHECKPOINT_H
#define LL_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { LL_DT_F32 = 0, LL_DT_F64 = 1, LL_DT_I32 = 2, LL_DT_I64 = 3, LL_DT_U8 = 4, LL_DT_BF16 = 5 };

typedef struct {
    const char *name;
    int dtype;
    int ndim;
    int64_t shape[4];
    const void *data;
    size_t nbytes;
} ll_tensor_ref;

typedef struct {
    const char *config_text;
    const void *vocab;       /* sentencepiece model proto */
    size_t vocab_len;
    const ll_tensor_ref *tensors;
    int n_tensors;
} ll_ckpt_contents;

/* Atomic write.  -1 + errbuf on failure (and nothing is left at path). */
int ll_ckpt_write(const char *path, const ll_ckpt_contents *c);

typedef struct ll_ckpt ll_ckpt;
/* mmap + verify magic, version, bounds and checksum.  NULL + errbuf "path: what is wrong". */
ll_ckpt *ll_ckpt_open(const char *path);
void ll_ckpt_close(ll_ckpt *k);
const char *ll_ckpt_config_text(const ll_ckpt *k);
const void *ll_ckpt_vocab(const ll_ckpt *k, size_t *n);
int ll_ckpt_n_tensors(const ll_ckpt *k);
const ll_tensor_ref *ll_ckpt_tensor(const ll_ckpt *k, int i);
const ll_tensor_ref *ll_ckpt_find(const ll_ckpt *k, const char *name); /* NULL if absent */

/* Checkpoint directory management: checkpoint_last.llm, checkpoint_best.llm,
 * checkpoint_<update>.llm keeping the newest keep_last (0 = keep all). */
int ll_ckpt_prune_numbered(const char *dir, int keep_last);

#ifdef __cplusplus
}
#endif
#endif
