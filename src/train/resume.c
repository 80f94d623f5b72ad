/* Resuming a run from its checkpoint directory (docs/reliability.md): pick the
 * newest checkpoint that loads (last, numbered or best, by the update count it
 * stores), falling back past corrupt or unreadable ones with a warning; and
 * cut metrics.jsonl back to the update resumed from. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ll/data.h"
#include "ll/train.h"

typedef struct {
    char *path;
    long update; /* from the file (last/best) or its name (numbered); -1: unreadable */
    int prio;    /* at equal updates: last, then numbered, then best */
    ll_ckpt *k;  /* kept open when it was opened to read the update */
} cand;

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->update != y->update) return x->update > y->update ? -1 : 1;
    return x->prio - y->prio;
}

long ll_ckpt_stored_update(const ll_ckpt *k) {
    const ll_tensor_ref *c = ll_ckpt_find(k, "state.counters");
    if (!c || c->dtype != LL_DT_I64 || c->nbytes < 2 * sizeof(int64_t)) return -1;
    return (long)((const int64_t *)c->data)[1];
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = ll_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int ll_ckpt_dir_has_checkpoint(const char *dir) {
    struct stat st;
    static const char *names[2] = {"checkpoint_last.llm", "checkpoint_best.llm"};
    for (int i = 0; i < 2; i++) {
        char *p = join(dir, names[i]);
        int have = stat(p, &st) == 0;
        free(p);
        if (have) return 1;
    }
    long *u = NULL;
    int n = ll_ckpt_list_numbered(dir, &u);
    free(u);
    return n > 0;
}

/* Load one candidate; -1 + errbuf.  *arch is set when the file is fine but its
 * architecture is not the config's (a user error, not corruption). */
static int try_load(cand *c, ll_model *m, ll_train_state *ts, int *arch) {
    *arch = 0;
    if (!c->k && !(c->k = ll_ckpt_open(c->path))) return -1;
    long u = ll_ckpt_stored_update(c->k);
    if (c->prio == 1 && u != c->update)
        return ll_fail("%s: stores update %ld, not the one its name says", c->path, u);
    ll_config cfg;
    if (ll_config_load_text(&cfg, ll_ckpt_config_text(c->k), c->path)) return -1;
    ll_hparams hp;
    ll_hparams_from_config(&hp, &cfg, m->hp.V);
    ll_config_free(&cfg);
    /* another vocabulary size (the data's sentencepiece model changed): every embedding's shape differs,
     * and so would every older checkpoint's; said as what it is (ll_resume_check compares the pieces) */
    size_t vlen = 0;
    const void *voc = ll_ckpt_vocab(c->k, &vlen);
    ll_spm *spm = voc ? ll_spm_load_bytes(voc, vlen) : NULL;
    const int v_old = spm ? ll_spm_vocab_size(spm) : m->hp.V;
    ll_spm_free(spm);
    if (v_old != m->hp.V) {
        *arch = 1;
        return ll_fail("--resume: %s was trained on a sentencepiece vocabulary of %d pieces, the data's has %d (the "
                       "corpus, data.vocab_size or data.spm_model changed); resume on the data it was trained on, or "
                       "choose another checkpoint.save_dir",
                       c->path, v_old, m->hp.V);
    }
    char what[128];
    if (ll_hparams_arch_diff(&hp, &m->hp, what, sizeof what)) {
        *arch = 1;
        return ll_fail("%s: saved with another architecture than the config's (%s); resume with the config it was "
                       "trained with, or choose another checkpoint.save_dir",
                       c->path, what);
    }
    return ll_model_load_params(m, c->k, c->path) || ll_train_state_load(ts, c->k, m, c->path) ? -1 : 0;
}

int ll_resume_load(const char *dir, ll_model *m, ll_train_state *ts, char *chosen, size_t chosen_len) {
    long *nums = NULL;
    int nn = ll_ckpt_list_numbered(dir, &nums);
    if (nn < 0) {
        if (errno != ENOENT) return -1;
        nn = 0;
    }
    cand *c = ll_calloc((size_t)nn + 2, sizeof *c);
    int n = 0, skipped_last = 0;
    static const char *named[2] = {"checkpoint_last.llm", "checkpoint_best.llm"};
    for (int i = 0; i < 2; i++) {
        char *p = join(dir, named[i]);
        struct stat st;
        if (stat(p, &st) != 0) {
            free(p);
            continue;
        }
        c[n] = (cand){.path = p, .update = -1, .prio = 2 * i, .k = ll_ckpt_open(p)};
        if (c[n].k) c[n].update = ll_ckpt_stored_update(c[n].k);
        if (c[n].update < 0) { /* unreadable: say so (a best is repaired by the trainer) */
            skipped_last |= i == 0;
            if (i == 0 && !c[n].k)
                ll_warn("%s; skipping it", ll_errbuf());
            else if (i == 0)
                ll_warn("%s: training state is missing, corrupt or forged (update count %ld); skipping it", p,
                        c[n].update);
            ll_ckpt_close(c[n].k);
            free(p);
            continue;
        }
        n++;
    }
    for (int i = 0; i < nn; i++) c[n++] = (cand){.path = ll_ckpt_numbered_path(dir, nums[i]), .update = nums[i], .prio = 1};
    free(nums);
    if (n == 0 && skipped_last) { /* (not "does not exist": it does, and blocks a new run there) */
        free(c);
        return ll_fail("%s: no usable checkpoint: checkpoint_last.llm cannot be resumed from (above) and there is no "
                       "other; move it away to start a new run in this directory, or choose another "
                       "checkpoint.save_dir", dir);
    }
    qsort(c, (size_t)n, sizeof *c, cmp_cand);
    int rc = n ? -1 : 0, tried = 0;
    char first_err[1024] = "";
    for (int i = 0; i < n && rc < 0; i++) {
        int arch;
        if (try_load(&c[i], m, ts, &arch) == 0) {
            snprintf(chosen, chosen_len, "%s", c[i].path);
            if (tried || skipped_last)
                ll_warn("resuming from %s (update %ld) instead", c[i].path, ts->update);
            rc = 1;
            break;
        }
        if (arch) break; /* the config changed: falling back would not help */
        if (!tried++) snprintf(first_err, sizeof first_err, "%s", ll_errbuf());
        ll_warn("%s; skipping it", ll_errbuf());
    }
    if (rc < 0 && n && tried == n)
        ll_fail("%s: no usable checkpoint (%d tried; newest: %s)", dir, n, first_err);
    for (int i = 0; i < n; i++) {
        ll_ckpt_close(c[i].k);
        free(c[i].path);
    }
    free(c);
    return rc;
}

/* The metrics log the run saved in `from` wrote: its train.metrics_log, or save_dir's metrics.jsonl
 * (the save_dir of now: a run directory may have moved).  "" when the checkpoint's config is unreadable. */
static void logged_to(const char *from, const ll_config *cfg, char *out, size_t n) {
    out[0] = 0;
    ll_ckpt *k = ll_ckpt_open(from);
    ll_config old;
    if (k && ll_config_load_text(&old, ll_ckpt_config_text(k), from) == 0) {
        if (old.metrics_log[0])
            snprintf(out, n, "%s", old.metrics_log);
        else
            snprintf(out, n, "%s/metrics.jsonl", cfg->save_dir);
        ll_config_free(&old);
    }
    if (k) ll_ckpt_close(k);
}

int ll_metrics_log_check(const char *path, const ll_config *cfg, const char *resumed_from) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return 0;
    static const char head[] = "{\"type\":\"";
    char buf[sizeof head - 1];
    FILE *f = fopen(path, "rb");
    const int ok = f && fread(buf, 1, sizeof buf, f) == sizeof buf && !memcmp(buf, head, sizeof buf);
    if (f) fclose(f);
    if (!ok)
        return ll_fail("train.metrics_log %s: an existing file that is not an ll metrics log (its first line is no "
                       "{\"type\":...} record); refusing to write into it: choose another path", path);
    if (resumed_from) { /* cut back to the checkpoint's records: only the log that run wrote */
        char was[LL_PATH_MAX + 32];
        logged_to(resumed_from, cfg, was, sizeof was);
        if (was[0] && strcmp(was, path) && !ll_same_file(was, path))
            return ll_fail("train.metrics_log %s: not the log this run wrote (%s, when %s was saved) and not empty; "
                           "resuming would cut its records back: remove it or choose a new path",
                           path, was, resumed_from);
        return 0;
    }
    /* a new run replaces the log: within its own save_dir that is its own earlier attempt's (a fresh
     * run into a directory with checkpoints is refused before this), elsewhere perhaps another run's */
    char *dir = ll_strdup(path), *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    struct stat sd, ss;
    const int own = !stat(slash ? (slash == dir ? "/" : dir) : ".", &sd) && !stat(cfg->save_dir, &ss) &&
                    sd.st_dev == ss.st_dev && sd.st_ino == ss.st_ino;
    free(dir);
    if (!own)
        return ll_fail("train.metrics_log %s: an existing metrics log outside checkpoint.save_dir %s (another "
                       "run's?); a new run would overwrite it: remove it or choose another path", path, cfg->save_dir);
    return 0;
}

int ll_metrics_lock(const char *path) {
    const int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return ll_fail("%s: cannot write metrics log: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { /* /dev/null, a FIFO: nothing to keep apart */
        close(fd);
        return 0;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return ll_fail("train.metrics_log %s: another lltrain is writing it (its lock is held); give each run its "
                           "own log", path);
        return ll_fail("train.metrics_log %s: cannot lock: %s", path, strerror(e));
    }
    return fd;
}

/* One record's "update", or -1 when it has none. */
static long record_update(const char *line) {
    const char *u = strstr(line, "\"update\":");
    return u ? strtol(u + 9, NULL, 10) : -1;
}

int ll_metrics_truncate(const char *path, long update, int64_t records) {
    size_t len;
    struct stat st;
    if (stat(path, &st) != 0) return errno == ENOENT ? 0 : ll_fail("%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return records > 0 ? (int)records : 0; /* a FIFO or device: nothing to rewrite */
    char *text = ll_read_file(path, &len);
    if (!text) return -1;
    /* whole lines: the first `records`, or those up to the first record past
     * `update`; a torn last line (a kill mid-record) never survives */
    size_t keep = 0;
    int64_t n = 0;
    for (size_t i = 0; i < len && (records < 0 || n < records);) {
        char *nl = memchr(text + i, '\n', len - i);
        if (!nl) break;
        if (records < 0) {
            *nl = 0;
            long u = record_update(text + i);
            *nl = '\n';
            if (u > update) break;
        }
        keep = (size_t)(nl - text) + 1;
        i = keep;
        n++;
    }
    if (records >= 0 && n < records)
        ll_warn("%s holds %lld records, fewer than the %lld it had when the resumed checkpoint was saved", path,
                (long long)n, (long long)records);
    int rc = 0;
    if (keep != len) {
        /* in place: what stays is a prefix, so cutting the rest is one step, and the file stays the one
         * ll_metrics_lock holds (a replacement would be another, unlocked) */
        if (truncate(path, (off_t)keep) != 0) rc = ll_fail("%s: cannot cut the records after update %ld: %s", path,
                                                         update, strerror(errno));
        if (rc == 0) ll_log("%s: dropped %zu bytes written after the checkpoint of update %ld", path, len - keep, update);
    }
    free(text);
    return rc < 0 ? rc : (int)n;
}
