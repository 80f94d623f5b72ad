/* The run's directory: creating it, hard-linking checkpoints, and the checks
 * that keep a run's files its own.
 *
 * One run per checkpoint.save_dir: an fcntl write lock on <save_dir>/.lltrain.lock,
 * held for the process's life.  The kernel drops it when the process dies, so a
 * crash never leaves a stale lock.  The file records the holder's PID: a second
 * lltrain names it, and the next holder learns whose temporaries a killed run
 * may have left (the clean-up removes only those, never a user's file). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ll/checkpoint.h"
#include "ll/config.h"
#include "ll/core.h"
#include "ll/data.h"
#include "ll/dist.h"
#include "ll/train.h"

int ll_mkdir_p(const char *dir) {
    char buf[LL_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST) return ll_fail("%s: cannot create directory: %s", buf, strerror(errno));
            *p = '/';
        }
    if (mkdir(buf, 0777) && errno != EEXIST) return ll_fail("%s: cannot create directory: %s", buf, strerror(errno));
    return 0;
}

/* dst becomes another name of src, atomically (link to a temporary, rename).
 * -1 where links are not possible or dst is a symlink (the caller writes instead). */
int ll_link_over(const char *src, const char *dst) {
    struct stat st;
    if (lstat(dst, &st) == 0 && S_ISLNK(st.st_mode)) return -1;
    char tmp[LL_PATH_MAX + 96];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dst, (long)getpid());
    unlink(tmp);
    if (link(src, tmp) != 0) return -1;
    if (rename(tmp, dst) != 0) {
        unlink(tmp);
        return -1;
    }
    char dir[LL_PATH_MAX + 96];
    snprintf(dir, sizeof dir, "%s", dst);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    int fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY); /* make the new name durable */
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    return 0;
}

int ll_run_lock(const char *save_dir, long *prev_pid, int *removed) {
    char path[LL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/.lltrain.lock", save_dir);
    *prev_pid = 0;
    *removed = 0;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return ll_fail("%s: cannot create the run lock: %s", path, strerror(errno));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_SETLK, &fl) != 0) {
        int e = errno;
        if (e != EAGAIN && e != EACCES) {
            close(fd);
            return ll_fail("%s: cannot lock: %s", path, strerror(e));
        }
        struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        long pid = fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK ? (long)who.l_pid : 0;
        close(fd);
        if (pid > 0)
            return ll_fail("%s: another lltrain (PID %ld) is running with this checkpoint.save_dir; wait for it to "
                           "finish, stop it, or choose another directory", save_dir, pid);
        return ll_fail("%s: another lltrain is running with this checkpoint.save_dir (its lock %s is held)", save_dir,
                       path);
    }
    char old[64] = "";
    ssize_t n = pread(fd, old, sizeof old - 1, 0);
    if (n > 0) {
        old[n] = 0;
        long p;
        if (sscanf(old, "lltrain pid %ld", &p) == 1 && p > 0) *prev_pid = p;
    }
    /* before our PID replaces its: killed here, the next run still knows whose they are */
    if ((*removed = ll_ckpt_clean_stale_temps(save_dir, *prev_pid)) < 0) {
        close(fd);
        return -1;
    }
    char rec[64];
    int len = snprintf(rec, sizeof rec, "lltrain pid %ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, rec, (size_t)len, 0) != len) {
        int e = errno;
        close(fd);
        return ll_fail("%s: cannot write the run lock: %s", path, strerror(e));
    }
    return fd; /* kept open until exit: closing any descriptor of the file would drop the lock */
}

/* --resume checks what the weights mean (ll_resume_check): the vocabulary must
 * be the checkpoint's; changed data and settings are reported. */

/* The first ids whose pieces differ, for the message. */
static void vocab_diff(const void *old, size_t old_len, const void *now, size_t now_len, char *what, size_t n) {
    ll_spm *a = ll_spm_load_bytes(old, old_len), *b = ll_spm_load_bytes(now, now_len);
    if (!a || !b) {
        snprintf(what, n, "the stored sentencepiece model %s", a ? "of this run cannot be loaded" : "cannot be loaded");
    } else {
        const int va = ll_spm_vocab_size(a), vb = ll_spm_vocab_size(b), v = va < vb ? va : vb;
        int differ = 0, first = -1;
        for (int i = 0; i < v; i++)
            if (strcmp(ll_spm_id_piece(a, i), ll_spm_id_piece(b, i))) differ += first < 0 ? (first = i, 1) : 1;
        if (first >= 0)
            snprintf(what, n, "%d of %d ids now mean other pieces (id %d: '%s' was '%s')%s", differ, v, first,
                     ll_spm_id_piece(b, first), ll_spm_id_piece(a, first), va != vb ? "; the sizes differ too" : "");
        else if (va != vb)
            snprintf(what, n, "%d pieces, the checkpoint's %d", vb, va);
        else
            snprintf(what, n, "the same %d pieces, but other scores or normalisation rules", v);
    }
    ll_spm_free(a);
    ll_spm_free(b);
}

int ll_resume_check(const char *from, const ll_config *cfg, const void *vocab, size_t vocab_len,
                    const ll_train_state *ts, uint64_t data_hash, int report, char **record) {
    *record = NULL;
    ll_ckpt *k = ll_ckpt_open(from);
    if (!k) return -1;
    size_t old_len;
    const void *old = ll_ckpt_vocab(k, &old_len);
    char spm[LL_PATH_MAX + 32];
    if (cfg->spm_model[0])
        snprintf(spm, sizeof spm, "%s", cfg->spm_model);
    else
        snprintf(spm, sizeof spm, "%s/spm.model", cfg->data_dir);
    if (old_len == 0 && report) {
        ll_warn("%s stores no vocabulary: cannot check that %s is the one it was trained with", from, spm);
    } else if (old_len && (old_len != vocab_len || memcmp(old, vocab, vocab_len))) {
        char what[512];
        vocab_diff(old, old_len, vocab, vocab_len, what, sizeof what);
        ll_ckpt_close(k);
        return ll_fail("--resume: %s is not the sentencepiece model %s was trained with: %s; its weights would read "
                       "the wrong pieces. Resume with the data (data.dir, data.spm_model) of that run, or start "
                       "a new run in another checkpoint.save_dir",
                       spm, from, what);
    }
    ll_config old_cfg;
    char *diff = NULL, *json = NULL;
    int n_diff = 0, n_logged = 0;
    if (ll_config_load_text(&old_cfg, ll_ckpt_config_text(k), from) == 0) {
        /* extending a run (how long it may go) changes nothing of what it computes: printed, not logged,
         * so that a resumed run's files stay those of an uninterrupted one */
        static const char *const length[] = {"train.max_updates", "train.max_epochs", "train.max_minutes", NULL};
        diff = ll_config_diff(&old_cfg, cfg, 0, NULL, &n_diff);
        json = ll_config_diff(&old_cfg, cfg, 1, length, &n_logged);
        ll_config_free(&old_cfg);
    } else {
        ll_warn("%s: its stored config does not load (%s): cannot list what changed", from, ll_errbuf());
    }
    ll_ckpt_close(k);
    const int data_changed = report && ts->data_hash != 0 && ts->data_hash != data_hash;
    if (!report) n_diff = n_logged = 0;
    if (ts->data_hash == 0 && report)
        ll_warn("%s predates the record of its training data: cannot check whether the corpora changed", from);
    if (data_changed)
        fprintf(stderr, "lltrain: the prepared data changed since %s was saved (manifest hash %016llx -> %016llx); "
                "same vocabulary: continuing on the new data\n", from, (unsigned long long)ts->data_hash,
                (unsigned long long)data_hash);
    if (n_diff) fprintf(stderr, "lltrain: resuming with %d changed setting(s): %s\n", n_diff, diff);
    if (n_logged || data_changed) {
        size_t n = strlen(json) + 160;
        *record = ll_malloc(n);
        snprintf(*record, n, "{\"type\":\"resume\",\"update\":%ld,\"data_changed\":%s,\"changes\":%s}", ts->update,
                 data_changed ? "true" : "false", json);
    }
    free(diff);
    free(json);
    return 0;
}

/* Every rank must train what rank 0 trains: rank 0's config text goes to all,
 * and a rank whose own differs names the keys (a different d_model would
 * otherwise surface as a size mismatch in the first collective, a different lr
 * as silently diverging replicas).  Keys that are each rank's own are exempt:
 * its cores, its clock's budget (the ranks agree on when it ends) and its
 * watchdog. */
int ll_config_check_ranks(ll_dist *host, const ll_config *cfg) {
    if (host->world <= 1) return 0;
    static const char *const own[] = {"train.threads", "train.batch_workers", "train.max_minutes", "dist.timeout_s",
                                      NULL};
    char *mine = ll_config_dump(cfg);
    uint64_t len = strlen(mine);
    host->bcast(host, &len, sizeof len, 0);
    char *root = ll_malloc(len + 1);
    if (host->rank == 0) memcpy(root, mine, len);
    host->bcast(host, root, len, 0);
    root[len] = 0;
    int rc = 0;
    if (strcmp(root, mine)) {
        ll_config c0;
        int n = 0;
        if (ll_config_load_text(&c0, root, "rank 0's config") != 0) {
            rc = ll_fail("rank 0's config does not load here (%s): start every rank with the same ll", ll_errbuf());
        } else {
            char *diff = ll_config_diff(&c0, cfg, 0, own, &n);
            if (n)
                rc = ll_fail("the config differs from rank 0's in %d key(s) (rank 0 -> this rank): %s; start every "
                             "rank with the same config and --set options", n, diff);
            free(diff);
            ll_config_free(&c0);
        }
    }
    free(root);
    free(mine);
    return rc;
}
