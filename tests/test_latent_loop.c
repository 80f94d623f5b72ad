/* Algorithm 2's inner/outer loop: with latent.inner_steps = I, Theta changes
 * at every update and the layer logits exactly every I updates.  And the data
 * per update: data.sampling every_pair (what latent depth uses) advances
 * every pair's stream by one batch per update, also for a static model; a
 * latent run refuses a sampling mode it cannot honour. */
#include <stdlib.h>
#include <string.h>

#include "ll/checkpoint.h"
#include "ll/train.h"
#include "util/testutil.h"

static void set(ll_config *c, const char *kv) {
    if (ll_config_set(c, kv)) {
        fprintf(stderr, "%s\n", ll_errbuf());
        exit(1);
    }
}

int main(void) {
    const char *dir = tu_tmpdir();
    char path[1024], kv[1200];
    snprintf(path, sizeof path, "%s/configs/tiny_latent.cfg", tu_source_dir());
    ll_config cfg;
    if (ll_config_load(&cfg, path)) {
        fprintf(stderr, "%s\n", ll_errbuf());
        return 1;
    }
    snprintf(kv, sizeof kv, "data.dir=%s/bin", dir);
    set(&cfg, kv);
    snprintf(kv, sizeof kv, "checkpoint.save_dir=%s/ck", dir);
    set(&cfg, kv);
    set(&cfg, "train.max_updates=7");
    set(&cfg, "checkpoint.save_interval=1");
    set(&cfg, "checkpoint.keep_last=0");
    set(&cfg, "latent.inner_steps=3");
    set(&cfg, "latent.soft_update=0");
    set(&cfg, "train.valid_interval=100");
    ll_verbosity = 0;
    ll_set_threads(2);
    ll_train_opts o = {0};
    CHECK(ll_train(&cfg, &o) == 0);
    float *prev_a = NULL, *prev_w = NULL;
    size_t na = 0, nw = 0;
    for (int u = 1; u <= 7; u++) {
        snprintf(path, sizeof path, "%s/ck/checkpoint_%d.llm", dir, u);
        ll_ckpt *k = ll_ckpt_open(path);
        CHECK_MSG(k != NULL, "%s", ll_errbuf());
        if (!k) break;
        const ll_tensor_ref *a = ll_ckpt_find(k, "dec.latent_logits");
        const ll_tensor_ref *w = ll_ckpt_find(k, "dec.layers.0.ffn.fc1.weight");
        const ll_tensor_ref *c = ll_ckpt_find(k, "state.counters");
        CHECK(a && w && c);
        if (!a || !w || !c) break;
        const int64_t *ints = c->data;
        CHECK_MSG(ints[6] == u / 3, "update %d: logits stepped %lld times, want %d", u, (long long)ints[6], u / 3);
        CHECK(ints[0] == u);
        if (prev_a) {
            int a_changed = memcmp(prev_a, a->data, na) != 0, w_changed = memcmp(prev_w, w->data, nw) != 0;
            CHECK_MSG(a_changed == (u % 3 == 0), "update %d: logits %s", u, a_changed ? "changed" : "did not change");
            CHECK_MSG(w_changed, "update %d: Theta did not change", u);
        }
        free(prev_a);
        free(prev_w);
        na = a->nbytes;
        nw = w->nbytes;
        prev_a = malloc(na);
        prev_w = malloc(nw);
        memcpy(prev_a, a->data, na);
        memcpy(prev_w, w->data, nw);
        ll_ckpt_close(k);
    }
    free(prev_a);
    free(prev_w);

    /* a static model with every_pair: after update u each of the 2 pair streams is at batch u */
    snprintf(kv, sizeof kv, "checkpoint.save_dir=%s/ck_static", dir);
    set(&cfg, kv);
    set(&cfg, "latent.decoder=false");
    set(&cfg, "data.sampling=every_pair");
    set(&cfg, "train.max_updates=3");
    CHECK(ll_train(&cfg, &o) == 0);
    for (int u = 1; u <= 3; u++) {
        snprintf(path, sizeof path, "%s/ck_static/checkpoint_%d.llm", dir, u);
        ll_ckpt *k = ll_ckpt_open(path);
        const ll_tensor_ref *c = k ? ll_ckpt_find(k, "state.counters") : NULL;
        CHECK_MSG(c != NULL, "%s", ll_errbuf());
        if (!c) break;
        const int64_t *ints = c->data;
        CHECK_MSG(ints[7] == 2 && ints[9] == u && ints[11] == u, "update %d: %lld streams at %lld, %lld", u,
                  (long long)ints[7], (long long)ints[9], (long long)ints[11]);
        ll_ckpt_close(k);
    }
    /* latent depth with temperature sampling over 2 pairs: refused, not silently ignored */
    snprintf(kv, sizeof kv, "checkpoint.save_dir=%s/ck_temp", dir);
    set(&cfg, kv);
    set(&cfg, "latent.decoder=true");
    set(&cfg, "data.sampling=temperature");
    CHECK(ll_train(&cfg, &o) != 0);
    CHECK_CONTAINS(ll_errbuf(), "latent depth needs every_pair");
    ll_config_free(&cfg);
    return tu_finish("test_latent_loop");
}
