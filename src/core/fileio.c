/* Atomic file output (temp + fsync + rename + directory fsync) and whole-file reads. */
#define _GNU_SOURCE
#include "ll/core.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Live temporaries, so that a SIGINT/SIGTERM/SIGHUP removes them before the
 * process dies (a killed lldecode left "out.txt.tmp.<pid>" behind).  Slots are
 * claimed by the main thread; the handler only reads them. */
enum { MAX_TEMPS = 32, TEMP_CAP = 4200 };
static char g_temps[MAX_TEMPS][TEMP_CAP];
static volatile sig_atomic_t g_temp_used[MAX_TEMPS];

static void temp_track(const char *tmp) {
    for (int i = 0; i < MAX_TEMPS; i++)
        if (!g_temp_used[i] && strlen(tmp) < TEMP_CAP) {
            memcpy(g_temps[i], tmp, strlen(tmp) + 1);
            g_temp_used[i] = 1;
            return;
        }
}

static void temp_untrack(const char *tmp) {
    for (int i = 0; i < MAX_TEMPS; i++)
        if (g_temp_used[i] && !strcmp(g_temps[i], tmp)) {
            g_temp_used[i] = 0;
            return;
        }
}

/* A staging directory (llprep's, flat: files only), emptied and removed by the handler too. */
static char g_stage_dir[TEMP_CAP];
static volatile sig_atomic_t g_stage_used;

void ll_signal_cleanup_file(const char *path, int on) {
    if (on)
        temp_track(path);
    else
        temp_untrack(path);
}

void ll_signal_cleanup_dir(const char *dir, int on) {
    g_stage_used = 0;
    if (on && strlen(dir) < TEMP_CAP) {
        memcpy(g_stage_dir, dir, strlen(dir) + 1);
        g_stage_used = 1;
    }
}

/* In the signal handler: async-signal-safe calls only (no opendir/readdir: they allocate), so
 * the entries come from the getdents64 system call itself. */
static void remove_flat_dir_in_handler(const char *dir) {
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    _Alignas(8) char buf[4096];
    long n;
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0)
        for (long off = 0; off < n;) {
            const char *name = buf + off + 19; /* d_ino 8, d_off 8, d_reclen 2, d_type 1 */
            unsigned short reclen;
            memcpy(&reclen, buf + off + 16, sizeof reclen);
            if (strcmp(name, ".") && strcmp(name, "..")) unlinkat(fd, name, 0);
            off += reclen;
        }
    close(fd);
    rmdir(dir);
}

static void on_fatal_signal(int sig) {
    for (int i = 0; i < MAX_TEMPS; i++)
        if (g_temp_used[i]) unlink(g_temps[i]);
    if (g_stage_used) remove_flat_dir_in_handler(g_stage_dir);
    signal(sig, SIG_DFL);
    raise(sig); /* dies of the signal, as it would have */
}

void ll_remove_temps_on_signals(void) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        static struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL) continue; /* nohup's SIG_IGN stays */
        static struct sigaction sa; /* static, not memset: -march=native's AVX-512 stores stop valgrind */
        sa.sa_handler = on_fatal_signal;
        sigfillset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* /dev/stdout, /dev/fd/N, /proc/self/fd/N: an already open descriptor the
 * caller means to write into, whatever file it is; never replaced. */
static int is_fd_alias(const char *path) {
    return !strcmp(path, "/dev/stdout") || !strcmp(path, "/dev/stderr") || !strncmp(path, "/dev/fd/", 8) ||
           !strncmp(path, "/proc/self/fd/", 14);
}

/* Only a regular file (or nothing) at path gets temp + rename: renaming over a
 * FIFO, a device or a symlink would replace it with a regular file.  FIFOs,
 * character devices, sockets and descriptor aliases are written directly
 * (streaming; af->tmp stays NULL); a symlink to a regular file is followed and
 * its target replaced atomically (the link stays); a dangling symlink, a
 * directory or a block device is refused. */
int ll_atomic_open(ll_atomic_file *af, const char *path) {
    memset(af, 0, sizeof *af);
    struct stat st, lst;
    int exists = stat(path, &st) == 0;
    if (!exists && errno != ENOENT) return ll_fail("%s: cannot write: %s", path, strerror(errno));
    int is_link = lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode);
    if (exists && (is_fd_alias(path) || S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode))) {
        int fd = open(path, O_WRONLY | O_APPEND | O_NOCTTY | O_CLOEXEC);
        if (fd < 0 || !(af->f = fdopen(fd, "ab"))) {
            int e = errno;
            if (fd >= 0) close(fd);
            return ll_fail("%s: cannot write: %s", path, strerror(e));
        }
        af->path = ll_strdup(path);
        return 0;
    }
    if (exists && S_ISDIR(st.st_mode)) return ll_fail("%s: cannot write: is a directory", path);
    if (exists && !S_ISREG(st.st_mode))
        return ll_fail("%s: not a regular file, FIFO or character device; refusing to replace it", path);
    if (!exists && is_link)
        return ll_fail("%s: dangling symbolic link; refusing to replace it (remove it or create its target)", path);
    char *target = NULL;
    if (is_link && !(target = realpath(path, NULL))) return ll_fail("%s: cannot resolve: %s", path, strerror(errno));
    af->path = target ? target : ll_strdup(path);
    size_t n = strlen(af->path) + 32;
    af->tmp = ll_malloc(n);
    snprintf(af->tmp, n, "%s.tmp.%ld", af->path, (long)getpid());
    af->f = fopen(af->tmp, "wb");
    if (af->f) temp_track(af->tmp);
    if (!af->f) {
        int e = errno;
        free(af->path);
        free(af->tmp);
        af->path = af->tmp = NULL;
        return ll_fail("%s: cannot write: %s", path, strerror(e));
    }
    if (exists) fchmod(fileno(af->f), st.st_mode & 07777); /* the replacement keeps the old permissions */
    return 0;
}

static void fsync_dir(const char *path) {
    char *d = ll_strdup(path);
    int fd = open(dirname(d), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(d);
}

int ll_atomic_commit(ll_atomic_file *af) {
    int rc = 0;
    if (!af->tmp) { /* direct: a FIFO or device cannot be fsynced, only flushed */
        if (fflush(af->f) != 0 || ferror(af->f)) rc = ll_fail("%s: write failed: %s", af->path, strerror(errno));
        if (fclose(af->f) != 0 && rc == 0) rc = ll_fail("%s: write failed: %s", af->path, strerror(errno));
        free(af->path);
        memset(af, 0, sizeof *af);
        return rc;
    }
    if (fflush(af->f) != 0 || ferror(af->f) || fsync(fileno(af->f)) != 0)
        rc = ll_fail("%s: write failed: %s", af->path, strerror(errno));
    if (fclose(af->f) != 0 && rc == 0) rc = ll_fail("%s: write failed: %s", af->path, strerror(errno));
    af->f = NULL;
    if (rc == 0 && rename(af->tmp, af->path) != 0) rc = ll_fail("%s: rename failed: %s", af->path, strerror(errno));
    if (rc != 0)
        unlink(af->tmp);
    else
        fsync_dir(af->path);
    temp_untrack(af->tmp);
    free(af->path);
    free(af->tmp);
    af->path = af->tmp = NULL;
    return rc;
}

void ll_atomic_abort(ll_atomic_file *af) {
    if (af->f) fclose(af->f);
    if (af->tmp) {
        unlink(af->tmp);
        temp_untrack(af->tmp);
    }
    free(af->path);
    free(af->tmp);
    memset(af, 0, sizeof *af);
}

char *ll_read_file_max(const char *path, size_t max, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        ll_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    const char *why = NULL;
    int err = 0;
    for (;;) {
        if (n + 1 >= cap) {
            /* out of memory is an error naming the file, never a short read */
            char *b = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
            if (!b) {
                err = ENOMEM;
                break;
            }
            buf = b;
            cap *= 2;
        }
        if (!buf) {
            err = ENOMEM;
            break;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n > max) {
            why = "too large";
            break;
        }
        if (got == 0) {
            if (ferror(f)) err = errno ? errno : EIO;
            break;
        }
    }
    fclose(f);
    if (why || err) {
        free(buf);
        if (why)
            ll_fail("%s: larger than %zu bytes; refusing to read it (not the file meant?)", path, max);
        else
            ll_fail("%s: read error after %zu bytes: %s", path, n, strerror(err));
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

char *ll_read_file(const char *path, size_t *len) { return ll_read_file_max(path, SIZE_MAX - 1, len); }

int ll_copy_file(const char *from, const char *to) {
    size_t n;
    char *buf = ll_read_file(from, &n);
    if (!buf) return -1;
    ll_atomic_file af;
    int rc = ll_atomic_open(&af, to);
    if (rc == 0) {
        if (fwrite(buf, 1, n, af.f) != n) {
            ll_atomic_abort(&af);
            rc = ll_fail("%s: write failed", to);
        } else
            rc = ll_atomic_commit(&af);
    }
    free(buf);
    return rc;
}
