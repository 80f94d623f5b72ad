#define _GNU_SOURCE
#include "testutil.h"

#include "ll/core.h"

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

int tu_failures = 0;
static char tu_dir[512];

const char *tu_tmpdir(void) {
    if (!tu_dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(tu_dir, sizeof tu_dir, "%s/lltest.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tu_dir)) {
            perror("mkdtemp");
            exit(1);
        }
    }
    return tu_dir;
}

char *tu_write(const char *dir, const char *name, const char *text) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
    return p;
}

int tu_count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

const char *tu_source_dir(void) {
    const char *s = getenv("LL_SOURCE_DIR");
    return s ? s : ".";
}
const char *tu_binary_dir(void) {
    const char *s = getenv("LL_BINARY_DIR");
    return s ? s : ".";
}

int tu_finish(const char *name) {
    if (tu_dir[0] && !getenv("LL_KEEP_TMP")) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tu_dir);
        if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tu_dir);
    }
    if (tu_failures) {
        fprintf(stderr, "%s: %d check(s) FAILED\n", name, tu_failures);
        return 1;
    }
    fprintf(stderr, "%s: all checks passed\n", name);
    return 0;
}

int tu_cpu_form(int form) {
    static int saved, avx512, avx2;
    if (!saved) { /* the start-up choice, before any call changed it (an AVX-512 CPU runs AVX2 too) */
        saved = 1;
        avx512 = ll_cpu_avx512;
        avx2 = ll_cpu_avx2 || ll_cpu_avx512;
    }
    if (form == TU_FORM_START) {
        ll_cpu_avx512 = avx512;
        ll_cpu_avx2 = avx2 && !avx512;
        return 1;
    }
    if ((form == TU_FORM_AVX512 && !avx512) || (form == TU_FORM_AVX2 && !avx2)) return 0;
    ll_cpu_avx512 = form == TU_FORM_AVX512;
    ll_cpu_avx2 = form == TU_FORM_AVX2;
    return 1;
}
