/* Atomic file output (temp + fsync + rename + directory fsync) and whole-file reads. */
#define _GNU_SOURCE
#include "ll/core.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ll_atomic_open(ll_atomic_file *af, const char *path) {
    memset(af, 0, sizeof *af);
    size_t n = strlen(path) + 32;
    af->path = ll_strdup(path);
    af->tmp = ll_malloc(n);
    snprintf(af->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp, "wb");
    if (!af->f) {
        int e = errno;
        free(af->path);
        free(af->tmp);
        af->path = af->tmp = NULL;
        return ll_fail("%s: cannot write: %s", path, strerror(e));
    }
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
    if (fflush(af->f) != 0 || ferror(af->f) || fsync(fileno(af->f)) != 0)
        rc = ll_fail("%s: write failed: %s", af->path, strerror(errno));
    if (fclose(af->f) != 0 && rc == 0) rc = ll_fail("%s: write failed: %s", af->path, strerror(errno));
    af->f = NULL;
    if (rc == 0 && rename(af->tmp, af->path) != 0) rc = ll_fail("%s: rename failed: %s", af->path, strerror(errno));
    if (rc != 0)
        unlink(af->tmp);
    else
        fsync_dir(af->path);
    free(af->path);
    free(af->tmp);
    af->path = af->tmp = NULL;
    return rc;
}

void ll_atomic_abort(ll_atomic_file *af) {
    if (af->f) fclose(af->f);
    if (af->tmp) unlink(af->tmp);
    free(af->path);
    free(af->tmp);
    memset(af, 0, sizeof *af);
}

char *ll_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        ll_fail("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = ll_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = ll_realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        ll_fail("%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}
