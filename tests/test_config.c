/* Config module: shipped configs, every load/--set/validate error path with its
 * file:line:col, input-path resolution, dump -> reload round trips, and that
 * docs/config.md matches the schema (LL_UPDATE_CONFIG_DOC=1 rewrites it). */
#define _GNU_SOURCE
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../src/config/schema.h" /* white-box: iterate the schema table */
#include "ll/config.h"
#include "ll/core.h"
#include "util/testutil.h"

/* Fields before `text` hold the whole effective config. */
#define CFG_BYTES offsetof(ll_config, text)

static char *cfg_path(const char *name) {
    static char buf[LL_PATH_MAX];
    snprintf(buf, sizeof buf, "%s/configs/%s", tu_source_dir(), name);
    return buf;
}

static char *canon(const char *path) {
    char *r = realpath(path, NULL);
    if (!r) {
        perror(path);
        exit(1);
    }
    return r;
}

/* Load `text` from <tmp>/t.cfg; returns ll_config_load's rc. */
static int load_str(ll_config *c, const char *text) {
    char *p = tu_write(tu_tmpdir(), "t.cfg", text);
    int rc = ll_config_load(c, p);
    free(p);
    return rc;
}

/* The load must fail with "…/t.cfg:<pos>: …<msg>…" on a single line. */
#define EXPECT_LOAD_ERR(text, pos, msg)                                          \
    do {                                                                         \
        ll_config _c;                                                            \
        CHECK_MSG(load_str(&_c, text) == -1, "loaded: %s", text);                \
        CHECK_CONTAINS(ll_errbuf(), "/t.cfg:" pos ": ");                         \
        CHECK_CONTAINS(ll_errbuf(), msg);                                        \
        CHECK(strchr(ll_errbuf(), '\n') == NULL);                                \
    } while (0)

static void test_defaults(void) {
    ll_config c;
    ll_config_defaults(&c);
    CHECK(c.d_model == 512 && c.ffn_dim == 2048 && c.heads == 8);
    CHECK(c.enc_layers == 6 && c.dec_layers == 6 && c.max_positions == 1024);
    CHECK(!strcmp(c.norm, "pre") && c.share_all_embeddings == 1 && c.tie_output == 1);
    CHECK(c.dropout == 0.1f && c.attn_dropout == 0 && c.act_dropout == 0);
    CHECK(c.vocab_size == 8000 && c.max_tokens == 4096 && c.max_len == 256);
    CHECK(!strcmp(c.long_lines, "skip") && !strcmp(c.lang_tags, "auto"));
    CHECK(!strcmp(c.sampling, "auto") && c.sampling_temperature == 5.0f);
    CHECK(c.seed == 1 && c.threads == 0 && !strcmp(c.optimizer, "adam"));
    CHECK(c.lr == 5e-4f && c.warmup_init_lr == 1e-7f && c.end_lr == 0 && c.power == 1);
    CHECK(c.warmup_updates == 4000 && !strcmp(c.scheduler, "inverse_sqrt"));
    CHECK(c.adam_beta1 == 0.9f && c.adam_beta2 == 0.98f && c.adam_eps == 1e-8f && c.weight_decay == 0);
    CHECK(c.clip_norm == 0 && c.update_freq == 1 && c.label_smoothing == 0.1f);
    CHECK(c.max_updates == 0 && c.max_epochs == 0 && c.valid_interval == 1000 && c.log_interval == 100);
    CHECK(c.metrics_log[0] == 0 && !strcmp(c.device, "cpu"));
    CHECK(!strcmp(c.save_dir, "checkpoints") && c.save_interval == 0 && c.keep_last == 5);
    CHECK(c.beam == 5 && c.lenpen == 1.0f);
    CHECK(c.n_train == 0 && c.n_valid == 0 && c.text == NULL);
    CHECK_MSG(ll_config_validate(&c) == 0, "%s", ll_errbuf());
}

static void test_shipped(void) {
    char *configs_dir = canon(cfg_path(""));
    char want[LL_PATH_MAX * 2];
    ll_config c;

    CHECK_MSG(ll_config_load(&c, cfg_path("wmt16_ende_ll64.cfg")) == 0, "%s", ll_errbuf());
    CHECK(c.d_model == 512 && c.ffn_dim == 1024 && c.heads == 4 && c.enc_layers == 64 && c.dec_layers == 64);
    CHECK(c.lr == 1.5e-3f && c.warmup_updates == 8000 && c.warmup_init_lr == 1e-7f && c.max_tokens == 8192);
    CHECK(c.adam_beta1 == 0.9f && c.adam_beta2 == 0.98f && c.adam_eps == 1e-6f && c.label_smoothing == 0.1f);
    CHECK(c.dropout == 0.3f && c.attn_dropout == 0.1f && c.clip_norm == 1.0f && c.beam == 5 && c.lenpen == 1.0f);
    CHECK(!strcmp(c.norm, "pre") && c.share_all_embeddings && c.vocab_size == 32000);
    CHECK(c.n_train == 1 && c.n_valid == 1 && !strcmp(c.train[0].tgt_lang, "de"));
    /* corpus paths: relative to configs/, made absolute; data.dir stays cwd-relative */
    char *root = canon(tu_source_dir());
    snprintf(want, sizeof want, "%s/data/wmt16_ende/raw/train.en", root);
    CHECK_MSG(!strcmp(c.train[0].src, want), "%s vs %s", c.train[0].src, want);
    CHECK(!strcmp(c.data_dir, "data/wmt16_ende/bin"));
    CHECK(c.text && strstr(c.text, "enc_layers: 64") && strstr(c.source, "wmt16_ende_ll64.cfg"));
    CHECK_MSG(ll_config_validate(&c) == 0, "%s", ll_errbuf());
    ll_config_free(&c);

    CHECK_MSG(ll_config_load(&c, cfg_path("bible_quick.cfg")) == 0, "%s", ll_errbuf());
    CHECK(c.d_model == 256 && c.ffn_dim == 1024 && c.heads == 4 && c.enc_layers == 3 && c.dec_layers == 3);
    CHECK(c.vocab_size == 8000 && c.dropout == 0.1f && c.lr == 2e-3f && c.warmup_updates == 200);
    CHECK(c.max_tokens == 4096 && c.log_interval == 20 && c.valid_interval == 100 && c.max_updates == 500);
    CHECK(!strcmp(c.save_dir, "runs/bible_quick") && !strcmp(c.data_dir, "data/bible/bin"));
    snprintf(want, sizeof want, "%s/data/bible/raw/valid.es", root);
    CHECK_MSG(c.n_valid == 1 && !strcmp(c.valid[0].tgt, want), "%s", c.valid[0].tgt);
    CHECK(!strcmp(c.train[0].src_lang, "en") && !strcmp(c.train[0].tgt_lang, "es"));
    CHECK_MSG(ll_config_validate(&c) == 0, "%s", ll_errbuf());
    ll_config_free(&c);

    CHECK_MSG(ll_config_load(&c, cfg_path("tiny_test.cfg")) == 0, "%s", ll_errbuf());
    CHECK(c.d_model == 32 && c.ffn_dim == 64 && c.heads == 2 && c.enc_layers == 2 && c.dec_layers == 2);
    CHECK(c.vocab_size == 100 && c.n_train == 1);
    CHECK_MSG(ll_config_validate(&c) == 0, "%s", ll_errbuf());
    ll_config_free(&c);
    free(root);
    free(configs_dir);
}

static void test_load_errors(void) {
    EXPECT_LOAD_ERR("model:\n  d_model: 64\nmodle:\n  heads: 2\n", "3:1", "unknown section 'modle' (did you mean 'model'?)");
    EXPECT_LOAD_ERR("zzzz:\n  a: 1\n", "1:1", "unknown section 'zzzz' (sections: model, data");
    EXPECT_LOAD_ERR("lr: 0.1\n", "1:1", "did you mean 'train.lr'?");
    EXPECT_LOAD_ERR("train:\n  lrr: 0.1\n", "2:3", "unknown key 'train.lrr' (did you mean 'train.lr'?)");
    EXPECT_LOAD_ERR("model:\n  lr: 0.1\n", "2:3", "unknown key 'model.lr' (did you mean 'train.lr'?)");
    EXPECT_LOAD_ERR("train:\n  zzzzzzzz: 1\n", "2:3", "unknown key 'train.zzzzzzzz' (see --help-config");
    EXPECT_LOAD_ERR("model:\n  d_model: abc\n", "2:12", "model.d_model expects an int, got 'abc'");
    EXPECT_LOAD_ERR("model:\n  heads: 1.5\n", "2:10", "model.heads expects an int, got '1.5'");
    EXPECT_LOAD_ERR("train:\n  lr: fast\n", "2:7", "train.lr expects a float, got 'fast'");
    EXPECT_LOAD_ERR("train:\n  lr: .nan\n", "2:7", "train.lr expects a float");
    EXPECT_LOAD_ERR("model:\n  tie_output: maybe\n", "2:15", "model.tie_output expects a bool (true or false), got 'maybe'");
    EXPECT_LOAD_ERR("model:\n  dropout: 1.5\n", "2:12", "model.dropout must be in [0, 1), got 1.5");
    EXPECT_LOAD_ERR("model:\n  enc_layers: -2\n", "2:15", "model.enc_layers must be in [0, 4096], got -2");
    EXPECT_LOAD_ERR("train:\n  warmup_updates: -1\n", "2:19",
                    "train.warmup_updates must be an integer in [0, 2147483647], got -1");
    EXPECT_LOAD_ERR("train:\n  lr: 0\n", "2:7", "train.lr must be in (0, 10], got 0");
    /* issue 28 #6: the type's own limit is in the message; overflow, underflow and a float for an int are caught */
    EXPECT_LOAD_ERR("train:\n  seed: 99999999999\n", "2:9", "train.seed must be an integer in [0, 2147483647], got 99999999999");
    EXPECT_LOAD_ERR("train:\n  seed: 18446744073709551617\n", "2:9", "train.seed must be an integer in [0, 2147483647]");
    EXPECT_LOAD_ERR("train:\n  max_updates: 3000000000\n", "2:16",
                    "train.max_updates must be an integer in [0, 2147483647], got 3000000000");
    EXPECT_LOAD_ERR("data:\n  max_tokens: 1e20\n", "2:15", "data.max_tokens expects an int, got '1e20' (allowed: [1, 2147483647])");
    EXPECT_LOAD_ERR("train:\n  lr: 1e-320\n", "2:7", "train.lr: 1e-320 underflows a float");
    EXPECT_LOAD_ERR("train:\n  lr: 1e-39\n", "2:7", "train.lr: 1e-39 underflows a float");
    EXPECT_LOAD_ERR("train:\n  lr: 1e39\n", "2:7", "train.lr must be in (0, 10], got 1e39");
    EXPECT_LOAD_ERR("model:\n  dropout: 0.1x\n", "2:12", "model.dropout expects a float, got '0.1x'");
    EXPECT_LOAD_ERR("model:\n  norm: mid\n", "2:9", "model.norm must be one of: pre, post, rezero (got 'mid')");
    EXPECT_LOAD_ERR("data:\n  sampling: big\n", "2:13", "one of: auto, temperature, size, uniform, every_pair");
    EXPECT_LOAD_ERR("train:\n  lr: 1e-3\n  lr: 2e-3\n", "3:3", "duplicate key 'train.lr' (first set on line 2)");
    EXPECT_LOAD_ERR("model:\n  heads: 2\ntrain: {}\nmodel:\n  heads: 4\n", "4:1",
                    "duplicate section 'model' (first on line 1)");
    EXPECT_LOAD_ERR("model:\n  d_model: 5: 3\n", "2:13", "YAML syntax error: mapping values are not allowed");
    EXPECT_LOAD_ERR("model:\n  d_model: 512\n heads: 8\n", "3:2", "YAML syntax error: did not find expected key");
    EXPECT_LOAD_ERR("model:\n\td_model: 5\n", "2:1", "(YAML indents with spaces, not tabs)");
    EXPECT_LOAD_ERR("model: {d_model: 5\n", "2:1", "YAML syntax error");
    EXPECT_LOAD_ERR("model:\n  d_model: [1, 2]\n", "2:12", "model.d_model expects an int, got a sequence");
    EXPECT_LOAD_ERR("model: 5\n", "1:8", "section 'model' must be a mapping of keys, got a scalar");
    EXPECT_LOAD_ERR("- model\n", "1:1", "a config is a mapping of sections");
    EXPECT_LOAD_ERR("model:\n  d_model: &w 64\n  ffn_dim: *w\n", "3:12", "YAML aliases (*w) are not supported");
    EXPECT_LOAD_ERR("model: {}\n---\ntrain: {}\n", "2:1", "only one YAML document");
    EXPECT_LOAD_ERR("data:\n  dir: \"\xff\"\n", "2:9", "YAML syntax error");
    /* corpus lists */
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, tgt_lang: es}\n", "3:7", "data.train[0] is missing 'src_lang'");
    EXPECT_LOAD_ERR("data:\n  valid:\n    - {src: a, tgt: b, src_lang: en, tgt_lang: es}\n    - {source: a}\n", "4:8",
                    "unknown key 'source' in data.valid[1] (did you mean 'src'?)");
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, src: b}\n", "3:16", "duplicate key 'data.train.src'");
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, src_lang: 'e n', tgt_lang: es}\n", "3:34",
                    "data.train[0].src_lang: 'e n' is not a language code");
    /* src_tag: a tag such as <BT>, never a language tag or a special piece */
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, src_lang: en, tgt_lang: es, src_tag: BT}\n", "3:61",
                    "data.train[0].src_tag: 'BT' is not a tag such as <BT>");
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, src_lang: en, tgt_lang: es, src_tag: <2es>}\n", "3:61",
                    "data.train[0].src_tag: '<2es>' is not a tag");
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, src_lang: en, tgt_lang: es, src_tag: '<b t>'}\n", "3:61",
                    "is not a tag");
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, src_lang: en, tgt_lang: es, src_tag: <unk>}\n", "3:61",
                    "is not a tag");
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, src_lang: en, tgt_lang: es, src_tags: <BT>}\n", "3:52",
                    "unknown key 'src_tags' in data.train[0] (did you mean 'src_tag'?)");
    /* weight: a number in (0, 1000] */
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, src_lang: en, tgt_lang: es, weight: 0}\n", "3:60",
                    "data.train[0].weight: '0' is not a number in (0, 1000]");
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, src_lang: en, tgt_lang: es, weight: two}\n", "3:60",
                    "data.train[0].weight: 'two' is not a number");
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, src_lang: en, tgt_lang: es, weight: 1e4}\n", "3:60",
                    "is not a number in (0, 1000]");
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, src_lang: en, tgt_lang: es, weight: nan}\n", "3:60",
                    "is not a number");
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: a, tgt: b, src_lang: en, tgt_lang: es, weigth: 2}\n", "3:52",
                    "unknown key 'weigth' in data.train[0] (did you mean 'weight'?)");
    EXPECT_LOAD_ERR("data:\n  train:\n    - {src: '', tgt: b, src_lang: en, tgt_lang: es}\n", "3:13",
                    "data.train[0].src expects a non-empty string");
    EXPECT_LOAD_ERR("data:\n  train: a.en\n", "2:10", "data.train expects a list of {src: ..., tgt: ...");
    EXPECT_LOAD_ERR("data:\n  train:\n    - a.en\n", "3:7", "data.train[0] expects a mapping");
    char big[8192] = "data:\n  train:\n";
    for (int i = 0; i <= LL_MAX_CORPORA; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "    - {src: a%d, tgt: b, src_lang: en, tgt_lang: es}\n", i);
    EXPECT_LOAD_ERR(big, "35:7", "too many data.train entries (at most 32)");

    /* a failed load leaves the struct as it was */
    ll_config c;
    ll_config_defaults(&c);
    c.d_model = 64;
    CHECK(load_str(&c, "model:\n  heads: 4\n  d_model: x\n") == -1);
    CHECK(c.d_model == 64 && c.heads == 8 && c.text == NULL);
    /* missing file */
    CHECK(ll_config_load(&c, "/nonexistent/x.cfg") == -1);
    CHECK_CONTAINS(ll_errbuf(), "/nonexistent/x.cfg");
    /* a NUL byte: refused with its line and column, as the parser's errors */
    {
        char nul_path[LL_PATH_MAX];
        snprintf(nul_path, sizeof nul_path, "%s/nul.cfg", tu_tmpdir());
        static const char nul_text[] = "model:\n  heads: 4\n  d_model: 6\0" "4\n";
        FILE *f = fopen(nul_path, "wb");
        CHECK(f && fwrite(nul_text, 1, sizeof nul_text - 1, f) == sizeof nul_text - 1 && fclose(f) == 0);
        CHECK(ll_config_load(&c, nul_path) == -1);
        CHECK_CONTAINS(ll_errbuf(), "/nul.cfg:3:13: config contains a NUL byte");
    }
    /* load_text uses the given name */
    CHECK(ll_config_load_text(&c, "model:\n  heads: 0\n", "ckpt:config") == -1);
    CHECK_CONTAINS(ll_errbuf(), "ckpt:config:2:10: model.heads must be in [1, 1024], got 0");
}

static void test_load_forms(void) {
    ll_config c;
    /* empty file, comments only, null sections and null strings are fine */
    CHECK_MSG(load_str(&c, "") == 0, "%s", ll_errbuf());
    CHECK(c.d_model == 512 && c.text && c.text[0] == 0);
    ll_config_free(&c);
    CHECK_MSG(load_str(&c, "# nothing\nmodel:\ndata:\n  train:\n  spm_model: ~\ntrain:\n  metrics_log:\n") == 0, "%s",
              ll_errbuf());
    CHECK(c.n_train == 0 && c.spm_model[0] == 0 && c.metrics_log[0] == 0);
    ll_config_free(&c);
    /* bool spellings, quoted scalars, flow style */
    CHECK_MSG(load_str(&c, "model: {tie_output: no, share_all_embeddings: False, d_model: \"64\"}\n"
                           "data: {lang_tags: off, train: []}\n") == 0,
              "%s", ll_errbuf());
    CHECK(c.tie_output == 0 && c.share_all_embeddings == 0 && c.d_model == 64 && !strcmp(c.lang_tags, "off"));
    ll_config_free(&c);

    /* input-path resolution against the config's directory */
    char dir[LL_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/sub", tu_tmpdir());
    CHECK(tu_count_entries(dir) == -1);
    CHECK(mkdir(dir, 0755) == 0);
    char *p = tu_write(dir, "x.cfg",
                       "data:\n  dir: rel/bin\n  spm_model: ./spm/m.model\n  train:\n"
                       "    - {src: a.en, tgt: ../b.es, src_lang: en, tgt_lang: es}\n"
                       "    - {src: /abs/c.en, tgt: ./d/../e.es, src_lang: en, tgt_lang: pt-BR}\n"
                       "checkpoint: {save_dir: out}\n");
    CHECK_MSG(ll_config_load(&c, p) == 0, "%s", ll_errbuf());
    char *croot = canon(tu_tmpdir()), want[LL_PATH_MAX * 2];
    snprintf(want, sizeof want, "%s/sub/a.en", croot);
    CHECK_MSG(!strcmp(c.train[0].src, want), "%s", c.train[0].src);
    snprintf(want, sizeof want, "%s/b.es", croot);
    CHECK_MSG(!strcmp(c.train[0].tgt, want), "%s", c.train[0].tgt);
    CHECK(!strcmp(c.train[1].src, "/abs/c.en"));
    snprintf(want, sizeof want, "%s/sub/d/../e.es", croot); /* only leading ./ and ../ are folded */
    CHECK_MSG(!strcmp(c.train[1].tgt, want), "%s", c.train[1].tgt);
    snprintf(want, sizeof want, "%s/sub/spm/m.model", croot);
    CHECK_MSG(!strcmp(c.spm_model, want), "%s", c.spm_model);
    CHECK(!strcmp(c.data_dir, "rel/bin") && !strcmp(c.save_dir, "out"));
    CHECK(!strcmp(c.train[1].tgt_lang, "pt-BR") && c.n_train == 2);
    CHECK(!c.train[0].src_tag[0] && !c.train[1].src_tag[0]); /* (optional: none) */
    CHECK(!strcmp(c.source, p));
    /* text loaded without a base keeps relative paths */
    ll_config d;
    CHECK(ll_config_load_text(&d, "data:\n  train:\n    - {src: a.en, tgt: b, src_lang: en, tgt_lang: es}\n", "t") == 0);
    CHECK(!strcmp(d.train[0].src, "a.en"));
    ll_config_free(&d);
    CHECK(ll_config_load_text_in(&d, "data:\n  spm_model: ../m\n", "t", "/x/y") == 0);
    CHECK_MSG(!strcmp(d.spm_model, "/x/m"), "%s", d.spm_model);
    ll_config_free(&d);
    ll_config_free(&c);
    free(croot);
    free(p);
}

static void test_set(void) {
    ll_config c;
    ll_config_defaults(&c);
    CHECK(ll_config_set(&c, "model.d_model=64") == 0 && c.d_model == 64);
    CHECK(ll_config_set(&c, "train.lr=2e-4") == 0 && c.lr == 2e-4f);
    CHECK(ll_config_set(&c, "model.tie_output=false") == 0 && c.tie_output == 0);
    CHECK(ll_config_set(&c, "model.norm=post") == 0 && !strcmp(c.norm, "post"));
    CHECK(ll_config_set(&c, "data.dir=/tmp/a b=c") == 0 && !strcmp(c.data_dir, "/tmp/a b=c"));
    CHECK(ll_config_set(&c, "data.spm_model=rel/m.model") == 0 && !strcmp(c.spm_model, "rel/m.model"));
    CHECK(ll_config_set(&c, "train.metrics_log=") == 0 && c.metrics_log[0] == 0);
    CHECK(ll_config_set(&c, "train.device=cuda") == 0 && !strcmp(c.device, "cuda"));

    CHECK(ll_config_set(&c, "train.lr=abc") == -1);
    CHECK_MSG(!strcmp(ll_errbuf(), "--set train.lr=abc: train.lr expects a float, got 'abc'"), "%s", ll_errbuf());
    CHECK(c.lr == 2e-4f);
    CHECK(ll_config_set(&c, "model.heads=2.5") == -1);
    CHECK_CONTAINS(ll_errbuf(), "--set model.heads=2.5: model.heads expects an int, got '2.5'");
    CHECK(ll_config_set(&c, "model.dropout=2") == -1);
    CHECK_CONTAINS(ll_errbuf(), "--set model.dropout=2: model.dropout must be in [0, 1), got 2");
    CHECK(ll_config_set(&c, "model.norm=mid") == -1);
    CHECK_CONTAINS(ll_errbuf(), "must be one of: pre, post, rezero (got 'mid')");
    CHECK(ll_config_set(&c, "model.tie_output=maybe") == -1);
    CHECK_CONTAINS(ll_errbuf(), "expects a bool");
    CHECK(ll_config_set(&c, "train.lrr=1") == -1);
    CHECK_CONTAINS(ll_errbuf(), "--set train.lrr=1: unknown key 'train.lrr' (did you mean 'train.lr'?)");
    CHECK(ll_config_set(&c, "lr=1") == -1);
    CHECK_CONTAINS(ll_errbuf(), "did you mean 'train.lr'?");
    CHECK(ll_config_set(&c, "train.qqqqqqq=1") == -1);
    CHECK_CONTAINS(ll_errbuf(), "unknown key 'train.qqqqqqq'");
    CHECK(ll_config_set(&c, "train.lr") == -1);
    CHECK_CONTAINS(ll_errbuf(), "--set train.lr: expected section.key=value");
    CHECK(ll_config_set(&c, "data.train=a.en") == -1);
    CHECK_CONTAINS(ll_errbuf(), "data.train is a corpus list");
    char longv[LL_PATH_MAX + 32] = "data.dir=";
    memset(longv + 9, 'x', LL_PATH_MAX);
    longv[9 + LL_PATH_MAX] = 0;
    CHECK(ll_config_set(&c, longv) == -1);
    CHECK_CONTAINS(ll_errbuf(), "data.dir is too long");
    CHECK(!strcmp(c.data_dir, "/tmp/a b=c"));
}

static void check_roundtrip(const ll_config *c, const char *what) {
    char *text = ll_config_dump(c);
    ll_config r;
    CHECK_MSG(ll_config_load_text(&r, text, "dump") == 0, "%s: %s", what, ll_errbuf());
    CHECK_MSG(memcmp(c, &r, CFG_BYTES) == 0, "%s: reloaded dump differs\n%s", what, text);
    char *again = ll_config_dump(&r);
    CHECK_MSG(!strcmp(text, again), "%s: dump is not a fixed point", what);
    free(again);
    free(text);
    ll_config_free(&r);
}

static void test_dump(void) {
    char *v0;
    ll_config c;
    ll_config_defaults(&c);
    check_roundtrip(&c, "defaults");
    char *text = ll_config_dump(&c);
    for (int i = 0; i < ll_cfg_nkeys; i++) { /* every key appears, under its section */
        const char *key = strchr(ll_cfg_keys[i].name, '.') + 1;
        char line[128];
        snprintf(line, sizeof line, "\n  %s:", key);
        CHECK_MSG(strstr(text, line) != NULL, "dump lacks %s", ll_cfg_keys[i].name);
    }
    free(text);

    const char *names[] = {"wmt16_ende_ll64.cfg", "bible_quick.cfg", "tiny_test.cfg"};
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(ll_config_load(&c, cfg_path(names[i])) == 0, "%s", ll_errbuf());
        check_roundtrip(&c, names[i]);
        ll_config_free(&c);
    }

    /* awkward strings and floats */
    CHECK_MSG(load_str(&c, "data:\n  dir: \"a \\\"q\\\" \\\\ b: #c\\tx\\u00f1\"\n"
                           "  train:\n    - {src: 'my dir/x.en', tgt: \"y: z.es\", src_lang: en, tgt_lang: es}\n"
                           "    - {src: /p, tgt: /q, src_lang: yes, tgt_lang: 'no', src_tag: <BT>, weight: 0.3}\n"
                           "train: {lr: 0.00123, adam_eps: 1e-9, warmup_init_lr: 3.3e-7, weight_decay: 0.0001}\n"
                           "model: {dropout: 0.15, norm: post}\n") == 0,
              "%s", ll_errbuf());
    CHECK(!strcmp(c.data_dir, "a \"q\" \\ b: #c\tx\xc3\xb1"));
    CHECK(!strcmp(c.train[1].src_lang, "yes"));
    check_roundtrip(&c, "awkward");
    CHECK(!strcmp(c.train[1].src_tag, "<BT>") && !c.train[0].src_tag[0]);
    v0 = ll_config_get(&c, "data.train");
    CHECK_MSG(v0 && strstr(v0, "tgt_lang: no, src_tag: \"<BT>\", weight: 0.3}]"), "%s", v0 ? v0 : "(null)");
    CHECK(c.train[1].weight == 0.3f && ll_corpus_weight(&c.train[0]) == 1.0f); /* (unset: 1, not written) */
    CHECK_MSG(strstr(v0, "tgt_lang: es}, {src:"), "%s", v0);
    free(v0);
    ll_config_set(&c, "train.lr=0.1");
    ll_config_set(&c, "decode.lenpen=0.6");
    check_roundtrip(&c, "after --set");
    char *v = ll_config_get(&c, "train.lr");
    CHECK(v && !strcmp(v, "0.1"));
    free(v);
    v = ll_config_get(&c, "data.valid");
    CHECK(v && !strcmp(v, "[]"));
    free(v);
    v = ll_config_get(&c, "model.norm");
    CHECK(v && !strcmp(v, "post"));
    free(v);
    CHECK(ll_config_get(&c, "model.nope") == NULL);
    ll_config_free(&c);
}

/* Apply the --set assignments to the defaults; validation must fail naming msg1 and msg2. */
#define EXPECT_INVALID(msg1, msg2, ...)                                            \
    do {                                                                           \
        ll_config _c;                                                              \
        ll_config_defaults(&_c);                                                   \
        const char *_s[] = {__VA_ARGS__, NULL};                                    \
        for (int _i = 0; _s[_i]; _i++) CHECK(ll_config_set(&_c, _s[_i]) == 0);    \
        CHECK_MSG(ll_config_validate(&_c) == -1, "valid: %s", #__VA_ARGS__);      \
        CHECK_CONTAINS(ll_errbuf(), msg1);                                         \
        CHECK_CONTAINS(ll_errbuf(), msg2);                                         \
    } while (0)

static void test_validate(void) {
    EXPECT_INVALID("model.d_model (512)", "model.heads (3)", "model.heads=3");
    EXPECT_INVALID("model.d_model (33) must be even", "", "model.d_model=33", "model.heads=3");
    EXPECT_INVALID("data.max_len (2000)", "model.max_positions (1024)", "data.max_len=2000");
    EXPECT_INVALID("data.max_tokens (100)", "data.max_len (256)", "data.max_tokens=100");
    EXPECT_INVALID("data.max_len_ratio (0.5) must be 0 (off) or at least 1", "", "data.max_len_ratio=0.5");
    EXPECT_INVALID("model.share_all_embeddings", "model.tie_output", "model.tie_output=false");
    EXPECT_INVALID("train.scheduler inverse_sqrt", "train.warmup_updates", "train.warmup_updates=0");
    EXPECT_INVALID("train.warmup_init_lr (0.01)", "train.lr (0.0005)", "train.warmup_init_lr=0.01");
    EXPECT_INVALID("train.scheduler polynomial", "train.max_updates", "train.scheduler=polynomial");
    EXPECT_INVALID("train.warmup_updates (4000)", "train.max_updates (1000)", "train.scheduler=polynomial",
                   "train.max_updates=1000");
    EXPECT_INVALID("train.end_lr (0.001)", "train.lr (0.0005)", "train.scheduler=polynomial",
                   "train.max_updates=10000", "train.end_lr=1e-3");
    {
        ll_config ok;
        ll_config_defaults(&ok);
        CHECK(ll_config_set(&ok, "train.scheduler=polynomial") == 0 && ll_config_set(&ok, "train.max_updates=10000") == 0);
        CHECK_MSG(ll_config_validate(&ok) == 0, "%s", ll_errbuf());
    }

    ll_config c;
    CHECK(load_str(&c, "data:\n  lang_tags: off\n  train:\n"
                       "    - {src: a, tgt: b, src_lang: en, tgt_lang: es}\n"
                       "    - {src: a, tgt: c, src_lang: en, tgt_lang: de}\n") == 0);
    CHECK(ll_config_validate(&c) == -1);
    /* file:line of the first key the file set (data.lang_tags, line 2); each list entry's line */
    CHECK_CONTAINS(ll_errbuf(), "t.cfg:2: data.lang_tags is off but data.train has 2 target languages (es, de)");
    {
        char w[LL_PATH_MAX + 16];
        CHECK_CONTAINS(ll_config_where(&c, "data.train", 1, w, sizeof w), "t.cfg:5");
        CHECK_CONTAINS(ll_config_where(&c, "data.train", 0, w, sizeof w), "t.cfg:4");
        CHECK_CONTAINS(ll_config_where(&c, "data.lang_tags", -1, w, sizeof w), "t.cfg:2");
        CHECK(ll_config_set(&c, "data.lang_tags=off") == 0); /* now --set's: the file and no line */
        CHECK(strstr(ll_config_where(&c, "data.lang_tags", -1, w, sizeof w), "t.cfg:") == NULL &&
              strstr(w, "t.cfg") != NULL);
        CHECK(ll_config_validate(&c) == -1);
        CHECK_CONTAINS(ll_errbuf(), "t.cfg:3: data.lang_tags is off"); /* (data.train's line, the next key) */
    }
    CHECK(ll_config_set(&c, "data.lang_tags=auto") == 0 && ll_config_validate(&c) == 0);
    ll_config_free(&c);
    /* a value's line break (a YAML block scalar) is shown as \n: the message stays one line */
    CHECK(load_str(&c, "model:\n  norm: |\n    pre\n") == -1);
    CHECK_CONTAINS(ll_errbuf(), "(got 'pre\\n')");
    CHECK(strchr(ll_errbuf(), '\n') == NULL);
    /* a check naming a default key first takes the line of the next one the file set */
    CHECK(load_str(&c, "model:\n  dropout: 0.1\n  heads: 3\n") == 0);
    CHECK(ll_config_validate(&c) == -1);
    CHECK_CONTAINS(ll_errbuf(), "t.cfg:3: model.d_model (512) must be divisible by model.heads (3)");
    ll_config_free(&c);
    CHECK(load_str(&c, "data:\n  train:\n"
                       "    - {src: a, tgt: b, src_lang: en, tgt_lang: es}\n"
                       "    - {src: a, tgt: b, src_lang: en, tgt_lang: es}\n") == 0);
    CHECK(ll_config_validate(&c) == -1);
    CHECK_CONTAINS(ll_errbuf(), "data.train[1] repeats data.train[0]");
    CHECK_CONTAINS(ll_errbuf(), "give it a weight");
    ll_config_free(&c);
    /* weights: training corpora only, and not with every_pair sampling */
    CHECK(load_str(&c, "data:\n  train:\n"
                       "    - {src: a, tgt: b, src_lang: en, tgt_lang: es, weight: 3}\n"
                       "  valid:\n"
                       "    - {src: c, tgt: d, src_lang: en, tgt_lang: es, weight: 2}\n") == 0);
    CHECK(ll_config_validate(&c) == -1);
    CHECK_CONTAINS(ll_errbuf(), "t.cfg:5: data.valid[0].weight: weights share out training batches");
    ll_config_free(&c);
    const char *weighted = "data:\n  train:\n"
                           "    - {src: a, tgt: b, src_lang: en, tgt_lang: es}\n"
                           "    - {src: a, tgt: b, src_lang: en, tgt_lang: es, src_tag: <BT>, weight: 0.5}\n";
    CHECK(load_str(&c, weighted) == 0);
    CHECK_MSG(ll_config_validate(&c) == 0, "%s", ll_errbuf());
    const char *modes[] = {"size", "temperature", "uniform"};
    for (int i = 0; i < 3; i++) {
        char kv[64];
        snprintf(kv, sizeof kv, "data.sampling=%s", modes[i]);
        CHECK(ll_config_set(&c, kv) == 0 && ll_config_validate(&c) == 0);
    }
    CHECK(ll_config_set(&c, "data.sampling=every_pair") == 0 && ll_config_validate(&c) == -1);
    CHECK_CONTAINS(ll_errbuf(), "t.cfg:4: data.train[1].weight: data.sampling every_pair takes one batch of every pair");
    CHECK(ll_config_set(&c, "data.sampling=auto") == 0 && ll_config_set(&c, "latent.decoder=true") == 0);
    CHECK(ll_config_validate(&c) == -1);
    CHECK_CONTAINS(ll_errbuf(), "data.sampling auto (every_pair for latent depth)");
    ll_config_free(&c);

    /* latent depth takes one batch of every pair per update: sampling modes do not apply */
    const char *m2o = "data:\n  train:\n"
                      "    - {src: a, tgt: b, src_lang: es, tgt_lang: en}\n"
                      "    - {src: c, tgt: d, src_lang: xx, tgt_lang: en}\n"
                      "  valid:\n    - {src: e, tgt: f, src_lang: es, tgt_lang: en}\n"
                      "latent: {decoder: true}\n";
    CHECK(load_str(&c, m2o) == 0);
    CHECK_MSG(ll_config_validate(&c) == 0, "%s", ll_errbuf()); /* auto */
    const char *bad[] = {"temperature", "size", "uniform"};
    for (int i = 0; i < 3; i++) {
        char kv[64];
        snprintf(kv, sizeof kv, "data.sampling=%s", bad[i]);
        CHECK(ll_config_set(&c, kv) == 0 && ll_config_validate(&c) == -1);
        CHECK_CONTAINS(ll_errbuf(), "does not apply to latent depth");
        CHECK_CONTAINS(ll_errbuf(), bad[i]);
    }
    CHECK(ll_config_set(&c, "data.sampling=every_pair") == 0 && ll_config_validate(&c) == 0);
    CHECK(ll_config_set(&c, "latent.decoder=false") == 0 && ll_config_set(&c, "data.sampling=temperature") == 0 &&
          ll_config_validate(&c) == 0); /* static runs sample as they like */
    /* per_pair rows must cover the validation pairs */
    CHECK(ll_config_set(&c, "latent.decoder=true") == 0 && ll_config_set(&c, "data.sampling=auto") == 0 &&
          ll_config_set(&c, "latent.posterior=per_pair") == 0 && ll_config_validate(&c) == 0);
    snprintf(c.valid[0].src_lang, sizeof c.valid[0].src_lang, "de");
    CHECK(ll_config_validate(&c) == -1);
    CHECK_CONTAINS(ll_errbuf(), "data.valid[0] (de-en) is not a training pair");
    ll_config_free(&c);
}

static void test_schema_and_help(void) {
    for (int i = 0; i < ll_cfg_nkeys; i++) {
        const ll_cfg_key *k = &ll_cfg_keys[i];
        const char *dot = strchr(k->name, '.');
        CHECK_MSG(dot && ll_cfg_find_section(k->name, (size_t)(dot - k->name)) >= 0, "%s: no section row", k->name);
        CHECK_MSG(ll_cfg_find(k->name) == i, "%s listed twice", k->name);
        CHECK_MSG(k->help && k->help[0], "%s: no help", k->name);
    }
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    ll_config_print_help(f);
    fclose(f);
    for (int i = 0; i < ll_cfg_nkeys; i++) CHECK_MSG(strstr(buf, ll_cfg_keys[i].name) != NULL, "help lacks %s", ll_cfg_keys[i].name);
    CHECK_CONTAINS(buf, "model.norm");
    CHECK_CONTAINS(buf, "pre, post");
    CHECK_CONTAINS(buf, "[0, 1)");
    free(buf);
}

/* docs/config.md = hand-written prose + the generated reference between markers. */
static void test_docs(void) {
    static const char *begin = "<!-- BEGIN GENERATED: ll_config_print_markdown -->\n",
                      *end = "<!-- END GENERATED -->";
    char path[LL_PATH_MAX];
    snprintf(path, sizeof path, "%s/docs/config.md", tu_source_dir());
    char *gen = NULL;
    size_t gn = 0;
    FILE *f = open_memstream(&gen, &gn);
    ll_config_print_markdown(f);
    fclose(f);
    size_t len;
    char *doc = ll_read_file(path, &len);
    CHECK_MSG(doc != NULL, "%s", ll_errbuf());
    if (!doc) {
        free(gen);
        return;
    }
    char *b = strstr(doc, begin), *e = b ? strstr(b, end) : NULL;
    CHECK_MSG(b && e, "%s: generated-section markers missing", path);
    if (b && e) {
        b += strlen(begin);
        int same = (size_t)(e - b) == gn && !memcmp(b, gen, gn);
        if (!same && getenv("LL_UPDATE_CONFIG_DOC")) {
            FILE *o = fopen(path, "wb");
            CHECK(o != NULL);
            if (o) {
                fwrite(doc, 1, (size_t)(b - doc), o);
                fwrite(gen, 1, gn, o);
                fputs(e, o);
                fclose(o);
                fprintf(stderr, "rewrote %s\n", path);
            }
        } else {
            CHECK_MSG(same, "%s is out of date with the schema; rerun with LL_UPDATE_CONFIG_DOC=1", path);
        }
    }
    free(doc);
    free(gen);
}

int main(void) {
    test_defaults();
    test_shipped();
    test_load_errors();
    test_load_forms();
    test_set();
    test_dump();
    test_validate();
    test_schema_and_help();
    test_docs();
    return tu_finish("test_config");
}
