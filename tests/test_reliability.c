/* Library-level reliability checks (issue 13, docs/reliability.md): a
 * non-finite gradient skips the Adam step without touching anything; forged
 * training state is refused; stale temporaries of dead writers are removed and
 * live ones kept; metrics logs are cut back to the resumed update; the newest
 * usable checkpoint is picked, past corrupt ones; the atomic writer streams
 * into FIFOs. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ll/data.h"
#include "ll/train.h"
#include "util/testutil.h"

static ll_hparams tiny_hp(void) {
    ll_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.C = 8, hp.F = 16, hp.H = 2, hp.Le = 1, hp.Ld = 1, hp.V = 12, hp.max_pos = 32;
    hp.share_all = hp.tie_output = 1;
    hp.latent_rows = 1;
    return hp;
}

static ll_config tiny_cfg(void) {
    ll_config c;
    ll_config_defaults(&c);
    return c;
}

static char *path_in(const char *dir, const char *name) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

/* ---- a NaN/Inf gradient leaves parameters, moments and step counts alone ---- */
/* One optimizer update as the trainer runs it: per-update stats cleared, the
 * step queued, the stats read (the gradient norm; the step counts synced). */
static double adam_update(ll_adam *o, ll_model *m, double lr, double lr_phi, double scale, double clip) {
    double st[LL_ST_N];
    ll_model_stats_zero(m);
    ll_adam_step(o, m, lr, lr_phi, scale, clip);
    ll_model_stats_read(m, st, NULL);
    ll_adam_sync(o, st);
    return st[LL_ST_SKIP] != 0 ? NAN : st[LL_ST_GNORM];
}

static void test_adam_skip(void) {
    ll_hparams hp = tiny_hp();
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 1);
    ll_config cfg = tiny_cfg();
    ll_adam o;
    ll_adam_init(&o, m, &cfg);
    const size_t n = m->n_params, bytes = n * sizeof(real);
    for (size_t i = 0; i < n; i++) m->grads[i] = (real)((i % 7) - 3) * 1e-3f;
    CHECK(isfinite(adam_update(&o, m, 1e-3, -1, 1.0, 0)) && o.t == 1); /* one good step: moments non-zero */
    real *p0 = malloc(bytes), *m0 = malloc(bytes), *v0 = malloc(bytes);
    memcpy(p0, m->params, bytes);
    memcpy(m0, o.m, bytes);
    memcpy(v0, o.v, bytes);
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < n; i++) m->grads[i] = 1e-3f;
        m->grads[n / 2] = bad[k];
        double g = adam_update(&o, m, 1e-3, 1e-3, 0.5, 1.0);
        CHECK_MSG(!isfinite(g), "gradient norm %g for a %g gradient", g, (double)bad[k]);
        CHECK(o.t == 1 && o.t_phi == 0);
        CHECK(!memcmp(p0, m->params, bytes) && !memcmp(m0, o.m, bytes) && !memcmp(v0, o.v, bytes));
    }
    free(p0);
    free(m0);
    free(v0);
    ll_adam_free(&o, m);
    ll_model_free(m);
    ll_config_free(&cfg);
}

/* ---- forged training state ---- */
static void expect_refused(const char *dir, ll_model *m, ll_train_state *ts, const char *why) {
    char *p = path_in(dir, "forged.llm");
    CHECK(ll_model_save(p, m, "", NULL, 0, ts) == 0);
    ll_ckpt *k = ll_ckpt_open(p);
    CHECK(k != NULL);
    ll_adam o2;
    ll_config cfg = tiny_cfg();
    ll_adam_init(&o2, m, &cfg);
    ll_train_state got = {.opt = &o2};
    int rc = k ? ll_train_state_load(&got, k, m, p) : -1;
    CHECK_MSG(rc == -1, "forged state (%s) accepted", why);
    if (rc == -1) CHECK_CONTAINS(ll_errbuf(), why);
    ll_ckpt_close(k);
    ll_adam_free(&o2, m);
    ll_config_free(&cfg);
    free(p);
}

static void test_forged_state(const char *dir) {
    ll_hparams hp = tiny_hp();
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 1);
    ll_config cfg = tiny_cfg();
    ll_adam o;
    ll_adam_init(&o, m, &cfg);
    o.t = 5;
    ll_train_state ok = {.update = 5, .epoch = 1, .batch_pos = 2, .best_valid = INFINITY, .best_update = -1,
                         .n_streams = 1, .stream_pos = {1, 2}, .opt = &o};
    /* the untouched state loads */
    char *p = path_in(dir, "ok.llm");
    CHECK(ll_model_save(p, m, "", NULL, 0, &ok) == 0);
    ll_ckpt *k = ll_ckpt_open(p);
    ll_adam o2;
    ll_adam_init(&o2, m, &cfg);
    ll_train_state got = {.opt = &o2};
    CHECK_MSG(k && ll_train_state_load(&got, k, m, p) == 0, "%s", ll_errbuf());
    CHECK(got.update == 5 && o2.t == 5 && got.best_update == -1 && got.finished == 0);
    ll_ckpt_close(k);
    ll_adam_free(&o2, m);
    free(p);

    ll_train_state f = ok;
    f.update = -3;
    expect_refused(dir, m, &f, "update count");
    f = ok;
    f.batch_pos = -1;
    expect_refused(dir, m, &f, "data position");
    f = ok;
    f.stream_pos[1] = -8;
    expect_refused(dir, m, &f, "data stream position");
    f = ok;
    f.n_streams = 0;
    expect_refused(dir, m, &f, "number of data streams");
    f = ok;
    f.best_valid = NAN;
    expect_refused(dir, m, &f, "best validation score");
    f = ok;
    o.t = -1;
    expect_refused(dir, m, &f, "Adam step");
    o.t = 9; /* more Adam steps than updates */
    expect_refused(dir, m, &f, "Adam step");
    o.t = 5;
    o.v[3] = -1;
    expect_refused(dir, m, &f, "negative Adam second moment");
    o.v[3] = NAN;
    expect_refused(dir, m, &f, "non-finite");
    o.v[3] = 0;
    ll_adam_free(&o, m);
    ll_model_free(m);
    ll_config_free(&cfg);
}

/* ---- stale temporaries: the previous lock holder's removed once it is dead;
 * live writers', other pids' (a user's files) and other names kept ---- */
static void test_stale_temps(const char *dir0) {
    char *dir = path_in(dir0, "temps");
    mkdir(dir, 0777);
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0); /* a pid that is surely dead now */
    pid_t other = fork();
    if (other == 0) _exit(0);
    waitpid(other, NULL, 0);
    char dead[64], live[64], mine[64], user[64];
    snprintf(dead, sizeof dead, "checkpoint_7.llm.tmp.%ld", (long)child);
    snprintf(live, sizeof live, "checkpoint_last.llm.tmp.%ld", (long)getppid());
    snprintf(mine, sizeof mine, "metrics.jsonl.tmp.%ld", (long)getpid());
    snprintf(user, sizeof user, "metrics_notes.tmp.%ld", (long)other); /* dead pid, but not the writer's */
    const char *keep[] = {live, mine, user, "notes.txt.tmp.1", "checkpoint_7.llm", "checkpoint_8.llm.tmp.x1"};
    const int n_keep = (int)(sizeof keep / sizeof keep[0]);
    free(tu_write(dir, dead, "x"));
    for (int i = 0; i < n_keep; i++) free(tu_write(dir, keep[i], "x"));
    CHECK(ll_ckpt_clean_stale_temps(dir, 0) == 0); /* no known writer: nothing is provably ours */
    CHECK(ll_ckpt_clean_stale_temps(dir, (long)getppid()) == 0); /* alive */
    CHECK(ll_ckpt_clean_stale_temps(dir, (long)child) == 1);
    char *p = path_in(dir, dead);
    CHECK(access(p, F_OK) != 0);
    free(p);
    for (int i = 0; i < n_keep; i++) {
        p = path_in(dir, keep[i]);
        CHECK_MSG(access(p, F_OK) == 0, "%s was removed", keep[i]);
        free(p);
    }
    p = path_in(dir0, "no-such-dir");
    CHECK(ll_ckpt_clean_stale_temps(p, (long)child) == 0);
    free(p);
    free(dir);
}

/* ---- the save_dir lock: a second holder is refused with the first's PID ---- */
static void test_run_lock(const char *dir0) {
    char *dir = path_in(dir0, "locked");
    mkdir(dir, 0777);
    int ready[2], go[2];
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    pid_t child = fork();
    if (child == 0) { /* the first run: holds the lock until told to exit */
        long prev;
        int removed;
        char c = ll_run_lock(dir, &prev, &removed) >= 0 ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) < 0) _exit(2);
        _exit(0);
    }
    char c = 0;
    CHECK(read(ready[0], &c, 1) == 1 && c == 'y');
    long prev = -1;
    int removed = -1;
    CHECK(ll_run_lock(dir, &prev, &removed) < 0);
    char want[64];
    snprintf(want, sizeof want, "(PID %ld)", (long)child);
    CHECK_MSG(strstr(ll_errbuf(), want) && strstr(ll_errbuf(), dir), "message: %s", ll_errbuf());
    CHECK(write(go[1], "x", 1) == 1);
    waitpid(child, NULL, 0); /* the kernel dropped its lock */
    int fd = ll_run_lock(dir, &prev, &removed);
    CHECK_MSG(fd >= 0, "%s", ll_errbuf());
    CHECK(prev == (long)child); /* the previous holder, whose temporaries may be left */
    if (fd >= 0) close(fd);
    for (int i = 0; i < 2; i++) {
        close(ready[i]);
        close(go[i]);
    }
    free(dir);
}

/* ---- metrics.jsonl is cut back to the resumed update ---- */
static void test_metrics_truncate(const char *dir) {
    char *p = tu_write(dir, "metrics.jsonl",
                       "{\"type\":\"train\",\"update\":5}\n{\"type\":\"train\",\"update\":10}\n"
                       "{\"type\":\"valid\",\"update\":10}\n{\"type\":\"train\",\"update\":15}\n"
                       "{\"type\":\"valid\",\"update\":20}\n{\"type\":\"tra");
    CHECK(ll_metrics_truncate(p, 10, -1) == 3);
    char *t = ll_read_file(p, NULL);
    CHECK(t && !strcmp(t, "{\"type\":\"train\",\"update\":5}\n{\"type\":\"train\",\"update\":10}\n"
                          "{\"type\":\"valid\",\"update\":10}\n"));
    free(t);
    CHECK(ll_metrics_truncate(p, 10, -1) == 3); /* nothing more to drop */
    /* with the number of records the log had at the checkpoint: exactly those */
    CHECK(ll_metrics_truncate(p, 99, 1) == 1);
    t = ll_read_file(p, NULL);
    CHECK(t && !strcmp(t, "{\"type\":\"train\",\"update\":5}\n"));
    free(t);
    char *q = path_in(dir, "absent.jsonl");
    CHECK(ll_metrics_truncate(q, 3, -1) == 0);
    free(q);
    free(p);
}

/* ---- resume picks the newest usable checkpoint ---- */
static void test_resume_pick(const char *dir0) {
    char *dir = path_in(dir0, "ckpts");
    mkdir(dir, 0777);
    ll_hparams hp = tiny_hp();
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 1);
    ll_config cfg = tiny_cfg();
    char *cfg_text = ll_config_dump(&cfg);
    /* the stored config must describe this model: d_model 8, heads 2, 1+1 layers, shared embeddings */
    ll_config c2 = tiny_cfg();
    const char *sets[] = {"model.d_model=8", "model.ffn_dim=16", "model.heads=2", "model.enc_layers=1",
                          "model.dec_layers=1", "model.max_positions=32", "model.share_all_embeddings=true",
                          "model.tie_output=true"};
    for (int i = 0; i < 8; i++) CHECK_MSG(ll_config_set(&c2, sets[i]) == 0, "%s", ll_errbuf());
    free(cfg_text);
    cfg_text = ll_config_dump(&c2);
    ll_adam o;
    ll_adam_init(&o, m, &cfg);
    ll_train_state ts = {.epoch = 1, .best_valid = INFINITY, .best_update = -1, .n_streams = 1, .stream_pos = {1, 0},
                         .opt = &o};
    const long ups[] = {3, 6, 9};
    for (int i = 0; i < 3; i++) {
        ts.update = o.t = ups[i];
        char *p = ll_ckpt_numbered_path(dir, ups[i]);
        CHECK(ll_model_save(p, m, cfg_text, NULL, 0, &ts) == 0);
        free(p);
    }
    char *last = path_in(dir, "checkpoint_last.llm");
    ts.update = o.t = 10;
    CHECK(ll_model_save(last, m, cfg_text, NULL, 0, &ts) == 0);
    ll_train_state got = {.opt = &o};
    char chosen[512];
    CHECK_MSG(ll_resume_load(dir, m, &got, chosen, sizeof chosen) == 1 && got.update == 10, "%s", ll_errbuf());
    CHECK(strstr(chosen, "checkpoint_last.llm") != NULL);
    /* corrupt last and the newest numbered: falls back to checkpoint_6 */
    FILE *f = fopen(last, "r+b");
    fseek(f, 200, SEEK_SET);
    fputc('#', f);
    fclose(f);
    char *n9 = ll_ckpt_numbered_path(dir, 9);
    CHECK(truncate(n9, 100) == 0);
    CHECK(ll_resume_load(dir, m, &got, chosen, sizeof chosen) == 1 && got.update == 6);
    CHECK(strstr(chosen, "checkpoint_6.llm") != NULL);
    /* nothing usable: one error naming the directory */
    char *n3 = ll_ckpt_numbered_path(dir, 3), *n6 = ll_ckpt_numbered_path(dir, 6);
    CHECK(truncate(n3, 10) == 0 && truncate(n6, 10) == 0);
    CHECK(ll_resume_load(dir, m, &got, chosen, sizeof chosen) == -1);
    CHECK_CONTAINS(ll_errbuf(), "no usable checkpoint");
    char *empty = path_in(dir0, "empty");
    mkdir(empty, 0777);
    CHECK(ll_resume_load(empty, m, &got, chosen, sizeof chosen) == 0);
    free(empty);
    free(n3);
    free(n6);
    free(n9);
    free(last);
    free(cfg_text);
    ll_adam_free(&o, m);
    ll_model_free(m);
    ll_config_free(&cfg);
    ll_config_free(&c2);
    free(dir);
}

/* ---- a mapped token file truncated in place: an error naming it, exit 1, not a bare SIGBUS ---- */
static void test_sigbus_names_file(const char *dir) {
    char *p = path_in(dir, "shrinks.bin");
    ll_tokfile_writer *w = ll_tokfile_create(p);
    CHECK(w != NULL);
    int32_t ids[1024];
    for (int i = 0; i < 1024; i++) ids[i] = i == 1023 ? 2 : 5;
    for (int k = 0; k < 16; k++) CHECK(ll_tokfile_append(w, ids, 1024, (uint64_t)k) == 0); /* 64 KB of tokens */
    CHECK(ll_tokfile_commit(w) == 0);
    char *errp = path_in(dir, "sigbus.err");
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        if (!freopen(errp, "w", stderr)) _exit(3);
        ll_set_progname("lltest");
        ll_tokfile f;
        if (ll_tokfile_open(&f, p)) _exit(4);
        if (truncate(p, 4096) != 0) _exit(5);
        volatile int32_t x = f.tokens[f.n_tokens - 1]; /* past the new end: SIGBUS */
        (void)x;
        _exit(6);
    }
    int st = 0;
    waitpid(child, &st, 0);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1, "status %d (signal %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
              WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    char *msg = ll_read_file(errp, NULL);
    CHECK_MSG(msg && strstr(msg, "lltest: error: ") && strstr(msg, "shrinks.bin: the file became shorter while it was "
                                                               "being read"), "stderr: %s", msg ? msg : "(none)");
    free(msg);
    free(errp);
    free(p);
}

int main(void) {
    const char *dir = tu_tmpdir();
    test_adam_skip();
    test_forged_state(dir);
    test_stale_temps(dir);
    test_run_lock(dir);
    test_metrics_truncate(dir);
    test_resume_pick(dir);
    test_sigbus_names_file(dir);
    return tu_finish("test_reliability");
}
