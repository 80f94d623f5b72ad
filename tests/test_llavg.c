/* llavg averages model tensors elementwise, keeps config/vocab of the first
 * input, drops optimizer state, and refuses inputs that are not consistent
 * model files or whose architecture or tensors differ (heads=2 with heads=4,
 * a NaN weight, a config that contradicts the tensors). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/checkpoint.h"
#include "ll/core.h"
#include "util/testutil.h"

static const char *dir;

static int run(const char *fmt, const char *a, const char *b) {
    char args[2048], cmd[4096];
    snprintf(args, sizeof args, fmt, a, b);
    snprintf(cmd, sizeof cmd, "%s/llavg --output %s/out.llm %s 2>%s/err", tu_binary_dir(), dir, args, dir);
    return system(cmd);
}

static int err_has(const char *s) {
    char p[600];
    snprintf(p, sizeof p, "%s/err", dir);
    char *text = ll_read_file(p, NULL);
    int ok = text && strstr(text, s) != NULL;
    if (!ok) fprintf(stderr, "stderr of llavg: %s", text ? text : "(none)\n");
    free(text);
    return ok;
}

static int out_exists(void) {
    char p[600];
    snprintf(p, sizeof p, "%s/out.llm", dir);
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* A tiny real training run; checkpoints every 2 updates, all kept. */
static void train(const char *name, const char *extra) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s/lltrain --config %s/configs/tiny_test.cfg --quiet --set data.dir=%s/bin --set checkpoint.save_dir=%s/%s "
             "--set train.max_updates=4 --set checkpoint.save_interval=2 --set checkpoint.keep_last=0 %s",
             tu_binary_dir(), tu_source_dir(), dir, dir, name, extra);
    if (system(cmd) != 0) {
        fprintf(stderr, "training %s failed\n", name);
        exit(1);
    }
}

/* Copy of `in` with one model tensor element replaced (and, if cfg, another config text). */
static void forge(const char *in, const char *out, const char *tensor, float value, const char *cfg) {
    ll_ckpt *k = ll_ckpt_open(in);
    int n = ll_ckpt_n_tensors(k);
    ll_tensor_ref *t = calloc(n, sizeof *t);
    float *buf = NULL;
    for (int i = 0; i < n; i++) {
        t[i] = *ll_ckpt_tensor(k, i);
        if (tensor && !strcmp(t[i].name, tensor)) {
            buf = malloc(t[i].nbytes);
            memcpy(buf, t[i].data, t[i].nbytes);
            buf[3] = value;
            t[i].data = buf;
        }
    }
    size_t vl;
    const void *v = ll_ckpt_vocab(k, &vl);
    ll_ckpt_contents c = {.config_text = cfg ? cfg : ll_ckpt_config_text(k), .vocab = v, .vocab_len = vl,
                          .tensors = t, .n_tensors = n};
    if (ll_ckpt_write(out, &c)) fprintf(stderr, "%s\n", ll_errbuf());
    free(buf);
    free(t);
    ll_ckpt_close(k);
}

int main(void) {
    dir = tu_tmpdir();
    train("a", "");
    train("h4", "--set model.heads=4");
    char a2[600], a4[600], h4[600], out[600];
    snprintf(a2, sizeof a2, "%s/a/checkpoint_2.llm", dir);
    snprintf(a4, sizeof a4, "%s/a/checkpoint_4.llm", dir);
    snprintf(h4, sizeof h4, "%s/h4/checkpoint_4.llm", dir);
    snprintf(out, sizeof out, "%s/out.llm", dir);

    CHECK(run("%s %s", a4, a2) == 0);
    ll_ckpt *k = ll_ckpt_open(out), *k2 = ll_ckpt_open(a2), *k4 = ll_ckpt_open(a4);
    CHECK(k && k2 && k4);
    if (k && k2 && k4) {
        const ll_tensor_ref *e = ll_ckpt_find(k, "enc.embed"), *e2 = ll_ckpt_find(k2, "enc.embed"),
                            *e4 = ll_ckpt_find(k4, "enc.embed");
        CHECK(e && e2 && e4 && !ll_ckpt_find(k, "optim.adam_m") && !ll_ckpt_find(k, "state.counters"));
        if (e && e2 && e4)
            for (int i = 0; i < 100; i++)
                CHECK_NEAR(((const float *)e->data)[i],
                           ((double)((const float *)e2->data)[i] + ((const float *)e4->data)[i]) / 2, 1e-6);
        CHECK(strcmp(ll_ckpt_config_text(k), ll_ckpt_config_text(k4)) == 0); /* from the first input */
    }
    ll_ckpt_close(k);
    ll_ckpt_close(k2);
    ll_ckpt_close(k4);
    remove(out);
    /* --dir --last picks the newest numbered checkpoints */
    char d[600];
    snprintf(d, sizeof d, "%s/a", dir);
    CHECK(run("--dir %s --last %s", d, "2") == 0);
    remove(out);

    /* same shapes, different heads: refused, nothing written */
    CHECK(run("%s %s", a4, h4) != 0);
    CHECK(err_has("architecture differs") && err_has("model.heads 2 vs 4"));
    CHECK(!out_exists());
    /* a NaN weight: refused with the tensor's name */
    char nan[600];
    snprintf(nan, sizeof nan, "%s/nan.llm", dir);
    forge(a2, nan, "dec.layers.1.ffn.fc1.weight", NAN, NULL);
    CHECK(run("%s %s", a4, nan) != 0);
    CHECK(err_has("nan.llm: tensor 'dec.layers.1.ffn.fc1.weight' holds a non-finite value"));
    CHECK(!out_exists());
    /* a stored config that contradicts the tensors: d_model 32 with heads 3 */
    k = ll_ckpt_open(a2);
    char *cfg = ll_strdup(ll_ckpt_config_text(k));
    ll_ckpt_close(k);
    char *h = strstr(cfg, "heads: 2");
    CHECK(h != NULL);
    if (h) h[7] = '3';
    char bad[600];
    snprintf(bad, sizeof bad, "%s/heads3.llm", dir);
    forge(a2, bad, NULL, 0, cfg);
    CHECK(run("%s %s", a4, bad) != 0);
    CHECK(err_has("heads3.llm: stored config: model.d_model (32) is not divisible by model.heads (3)"));
    free(cfg);
    return tu_finish("test_llavg");
}
