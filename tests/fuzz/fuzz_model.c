/* Fuzz target: the model loader (src/ckpt/checkpoint.c, src/train/model_io.c),
 * what lldecode, llavg, llprune and lltrain --resume run on a model file.
 * The input is a model file.  Random bytes would almost never pass the
 * checksum, so the target first rewrites the header's file size and the
 * trailer's checksum (when the input is long enough to have them): the
 * mutations then reach the index, the stored config, the vocabulary and the
 * model build.  The checksum test itself is a three-line compare. */
#include "fuzz_util.h"
#include "ll/backend.h"
#include "ll/checkpoint.h"
#include "ll/core.h"
#include "ll/train.h"

enum { HEADER = 24, TRAILER = 16 };

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void walk(const ll_ckpt *k) {
    size_t vlen;
    ll_ckpt_vocab(k, &vlen);
    if (strlen(ll_ckpt_config_text(k)) > (size_t)-2) abort();
    for (int i = 0; i < ll_ckpt_n_tensors(k); i++) {
        const ll_tensor_ref *t = ll_ckpt_tensor(k, i);
        if (ll_ckpt_find(k, t->name) != t) abort(); /* names are unique */
        if (t->nbytes) {
            volatile uint8_t x = ((const uint8_t *)t->data)[0];
            x = ((const uint8_t *)t->data)[t->nbytes - 1]; /* inside the mapping */
            (void)x;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 1 << 20) return 0;
    int fd0 = fz_lowest_fd();
    ll_verbosity = 0;
    uint8_t *buf = malloc(size ? size : 1);
    memcpy(buf, data, size);
    if (size >= HEADER + TRAILER) {
        put_u64(buf + 16, size);
        put_u64(buf + size - TRAILER, ll_fnv1a64(buf, size - TRAILER, LL_FNV_INIT));
    }
    char path[300];
    fz_path(path, sizeof path, "in.llm");
    fz_write(path, buf, size);
    free(buf);
    ll_ckpt *k = ll_ckpt_open(path);
    if (k) {
        walk(k);
        ll_config cfg;
        ll_model *m = ll_model_from_file(k, path, ll_backend_cpu(), &cfg);
        if (m) {
            /* lltrain --resume: the optimizer and trainer state */
            ll_adam opt;
            ll_adam_init(&opt, m, &cfg);
            ll_train_state ts = {.opt = &opt};
            ll_train_state_load(&ts, k, m, path);
            ll_adam_free(&opt, m);
            ll_model_free(m);
            ll_config_free(&cfg);
        }
        ll_ckpt_close(k);
    }
    fz_check_fds(fd0, "ll_ckpt_open");
    return 0;
}
