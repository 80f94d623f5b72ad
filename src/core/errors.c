/* Errors, allocation and logging. */
#define _GNU_SOURCE
#include "ll/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <time.h>

static _Thread_local char g_err[2048]; /* per thread: decoding workers */
static const char *g_prog = "ll";
int ll_verbosity = 1;

static volatile int g_died; /* ll_die already reported the failure */

/* At exit: what was printed to stdout must have reached it (a full disk,
 * /dev/full, a closed pipe), else the exit status says so. */
static void check_stdout(void) {
    if (g_died) return;
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return;
    fprintf(stderr, "%s: error: <stdout>: write failed: %s\n", g_prog, errno ? strerror(errno) : "I/O error");
    _exit(1);
}

/* A closed standard descriptor would be taken by the next file opened: lltrain's run lock or
 * metrics log would then receive the console's lines (`lltrain ... >&- 2>&-`).  Each gets
 * /dev/null opened the wrong way round, so that using it still fails as on a closed one (a
 * translation written to a closed stdout is an error at exit, check_stdout). */
static void hold_std_fds(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        const int n = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY); /* the lowest free: fd itself */
        if (n > fd) {
            dup2(n, fd);
            close(n);
        }
    }
}

void ll_set_progname(const char *name) {
    static int registered;
    g_prog = name;
    ll_map_set_tool(name);
    if (!registered++) {
        hold_std_fds();
        /* A printf longer than stdout's buffer (4 KiB on a pipe or file: lldecode --help) writes
         * past it, and when that write fails, its errno is gone by check_stdout's flush ("I/O
         * error" for a full disk).  64 KiB keeps such texts buffered until that flush; a terminal
         * stays line-buffered. */
        static char out_buf[1 << 16];
        if (!isatty(STDOUT_FILENO)) setvbuf(stdout, out_buf, _IOFBF, sizeof out_buf);
        atexit(check_stdout);
        ll_remove_temps_on_signals();
    }
}
const char *ll_errbuf(void) { return g_err; }

int ll_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return -1;
}

/* Sanitizer builds (LL_SANITIZE): a tool stopped by ll_die exits holding what
 * it had allocated.  That is not a leak worth a report (and the report would
 * follow the one-line error), so LeakSanitizer's exit check, which asks this
 * hook, is skipped after ll_die; normal exits are still checked. */
#if defined(__SANITIZE_ADDRESS__)
#define LL_LSAN_HOOK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(leak_sanitizer)
#define LL_LSAN_HOOK 1
#endif
#endif
#ifdef LL_LSAN_HOOK
static volatile int g_dying;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return g_dying; }
#endif

void ll_die(const char *fmt, ...) {
#ifdef LL_LSAN_HOOK
    g_dying = 1;
#endif
    va_list ap;
    g_died = 1;
    fflush(stdout);
    fprintf(stderr, "%s: error: ", g_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

void ll_warn(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s: warning: ", g_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void ll_log(const char *fmt, ...) {
    if (ll_verbosity <= 0) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void *ll_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) ll_die("out of memory allocating %zu bytes", n);
    return p;
}
void *ll_calloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) ll_die("out of memory allocating %zu x %zu bytes", n, sz);
    return p;
}
void *ll_realloc(void *q, size_t n) {
    void *p = realloc(q, n ? n : 1);
    if (!p) ll_die("out of memory reallocating %zu bytes", n);
    return p;
}
char *ll_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ll_malloc(n);
    memcpy(p, s, n);
    return p;
}
void *ll_aligned_alloc(size_t n) {
    size_t sz = (n + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, sz ? sz : 64);
    if (!p) ll_die("out of memory allocating %zu bytes", n);
    memset(p, 0, sz);
    return p;
}

double ll_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

uint64_t ll_fnv1a64(const void *data, size_t n, uint64_t h) {
    /* FNV-1a over 8-byte words where possible: fast enough for 100s of MB. */
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h ^= w;
        h *= 0x100000001b3ULL;
    }
    for (; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
