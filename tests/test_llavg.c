/* llavg averages model tensors elementwise, keeps config/vocab of the first
 * input, drops optimizer state, and refuses inputs whose tensors differ. */
#include <stdlib.h>
#include <string.h>

#include "ll/checkpoint.h"
#include "ll/core.h"
#include "util/testutil.h"

static char *write_ckpt(const char *dir, const char *name, float base, int rows, const char *cfg) {
    float w[6], m[2] = {9, 9};
    double d[2] = {base, 2 * base};
    for (int i = 0; i < 6; i++) w[i] = base + i;
    ll_tensor_ref t[3] = {
        {.name = "enc.embed", .dtype = LL_DT_F32, .ndim = 2, .shape = {rows, 6 / rows}, .data = w, .nbytes = sizeof w},
        {.name = "dec.final_ln.bias", .dtype = LL_DT_F64, .ndim = 1, .shape = {2}, .data = d, .nbytes = sizeof d},
        {.name = "optim.adam_m", .dtype = LL_DT_F32, .ndim = 1, .shape = {2}, .data = m, .nbytes = sizeof m},
    };
    char *path = malloc(512);
    snprintf(path, 512, "%s/%s", dir, name);
    ll_ckpt_contents c = {.config_text = cfg, .vocab = "V", .vocab_len = 1, .tensors = t, .n_tensors = 3};
    if (ll_ckpt_write(path, &c)) {
        fprintf(stderr, "%s\n", ll_errbuf());
        exit(1);
    }
    return path;
}

int main(void) {
    const char *dir = tu_tmpdir();
    char *a = write_ckpt(dir, "checkpoint_10.llm", 1, 2, "first"), *b = write_ckpt(dir, "checkpoint_20.llm", 3, 2, "second");
    char cmd[2048], out[600];
    snprintf(out, sizeof out, "%s/avg.llm", dir);
    snprintf(cmd, sizeof cmd, "%s/llavg --output %s %s %s 2>/dev/null", tu_binary_dir(), out, b, a);
    CHECK(system(cmd) == 0);
    ll_ckpt *k = ll_ckpt_open(out);
    CHECK(k != NULL);
    if (k) {
        const ll_tensor_ref *e = ll_ckpt_find(k, "enc.embed"), *l = ll_ckpt_find(k, "dec.final_ln.bias");
        CHECK(e && l && !ll_ckpt_find(k, "optim.adam_m"));
        if (e) CHECK_NEAR(((const float *)e->data)[5], (6 + 8) / 2.0, 1e-6);
        if (l) CHECK_NEAR(((const double *)l->data)[1], 4.0, 1e-12);
        CHECK(strcmp(ll_ckpt_config_text(k), "second") == 0); /* from the first input */
        ll_ckpt_close(k);
    }
    /* --dir --last picks the newest numbered checkpoints */
    snprintf(cmd, sizeof cmd, "%s/llavg --output %s/avg2.llm --dir %s --last 2 2>/dev/null", tu_binary_dir(), dir, dir);
    CHECK(system(cmd) == 0);
    /* mismatched shapes: error, nothing written */
    char *c = write_ckpt(dir, "odd.llm", 5, 3, "third");
    snprintf(cmd, sizeof cmd, "%s/llavg --output %s/bad.llm %s %s 2>%s/err", tu_binary_dir(), dir, a, c, dir);
    CHECK(system(cmd) != 0);
    snprintf(cmd, sizeof cmd, "%s/bad.llm", dir);
    CHECK(fopen(cmd, "rb") == NULL);
    snprintf(cmd, sizeof cmd, "grep -q 'differs in shape' %s/err", dir);
    CHECK(system(cmd) == 0);
    free(a);
    free(b);
    free(c);
    return tu_finish("test_llavg");
}
