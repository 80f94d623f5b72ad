/* Shared by the fuzz targets (tests/fuzz/fuzz_*.c): a scratch directory on
 * tmpfs when there is one (the loaders take paths, and fsync on tmpfs is
 * free), writing an input there, and a file-descriptor leak check.  The same
 * targets build as libFuzzer binaries (LL_FUZZ=ON, clang) and as plain replay
 * programs (replay_main.c) that run in ctest. */
#ifndef LL_FUZZ_UTIL_H
#define LL_FUZZ_UTIL_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fz_dir[256];

static void fz_cleanup(void) {
    if (!fz_dir[0]) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", fz_dir);
    fz_dir[0] = 0;
}

/* Created on first use, removed at exit. */
static const char *fz_tmpdir(void) {
    if (fz_dir[0]) return fz_dir;
    const char *t = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    snprintf(fz_dir, sizeof fz_dir, "%s/llfuzz.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(fz_dir)) {
        perror("mkdtemp");
        abort();
    }
    atexit(fz_cleanup);
    return fz_dir;
}

/* fz_tmpdir()/name; static buffer per call site is enough for the targets. */
static void fz_path(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", fz_tmpdir(), name); }

static void fz_write(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* The lowest free descriptor number: it grows only if a loader leaked one. */
static int fz_lowest_fd(void) {
    int fd = open("/dev/null", O_RDONLY);
    if (fd >= 0) close(fd);
    return fd;
}

/* Abort (a crash for libFuzzer, a failure for the replay) when descriptors leak. */
static void fz_check_fds(int before, const char *what) {
    int after = fz_lowest_fd();
    if (after != before) {
        fprintf(stderr, "%s leaked a file descriptor (lowest free fd %d -> %d)\n", what, before, after);
        abort();
    }
}

#endif
