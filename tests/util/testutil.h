/* Minimal test harness: CHECK macros that count failures, temp dirs, and
 * helpers to run a tool and capture its stderr.  A test exits 1 on any failure,
 * 77 to skip. */
#ifndef LL_TESTUTIL_H
#define LL_TESTUTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

extern int tu_failures;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            tu_failures++;                                                          \
        }                                                                           \
    } while (0)

#define CHECK_MSG(cond, ...)                                                         \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                            \
            fputc('\n', stderr);                                                     \
            tu_failures++;                                                           \
        }                                                                            \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                       \
    do {                                                                                            \
        double _a = (a), _b = (b);                                                                  \
        if (!(fabs(_a - _b) <= (tol))) {                                                            \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s=%.10g %s=%.10g tol %.3g\n", __FILE__, __LINE__, \
                    #a, _a, #b, _b, (double)(tol));                                                 \
            tu_failures++;                                                                          \
        }                                                                                           \
    } while (0)

/* CHECK that string s contains substring sub. */
#define CHECK_CONTAINS(s, sub) CHECK_MSG(strstr((s), (sub)) != NULL, "\"%s\" does not contain \"%s\"", (s), (sub))

/* Call at the end of main. */
int tu_finish(const char *name);

/* A fresh empty directory under $TMPDIR (removed by tu_finish unless LL_KEEP_TMP). */
const char *tu_tmpdir(void);
/* Write text to dir/name; returns the malloc'd path. */
char *tu_write(const char *dir, const char *name, const char *text);
/* Number of entries in a directory (excluding . and ..). */
int tu_count_entries(const char *dir);
/* $LL_SOURCE_DIR (or ".") */
const char *tu_source_dir(void);
const char *tu_binary_dir(void);

/* ll's CPU kernel forms (ll_cpu_avx512, ll_cpu_avx2: include/ll/core.h), for the tests that run each
 * one this process can: tu_cpu_form(f) selects form f and returns 1, or returns 0 and changes nothing
 * when the CPU (or LL_CPU_KERNELS) rules it out; TU_FORM_START restores the start-up choice. */
enum { TU_FORM_START = -1, TU_FORM_AVX512, TU_FORM_AVX2, TU_FORM_C, TU_FORMS };
int tu_cpu_form(int form);

#endif
