/* One knob for CPU parallelism: OpenMP for our loops, OpenBLAS for gemm. */
#include <stdlib.h>
#include <unistd.h>

#include "ll/core.h"

#ifdef _OPENMP
#include <omp.h>
#endif

extern void openblas_set_num_threads(int);

static int g_threads = 1;

void ll_set_threads(int n) {
    if (n < 1) n = 1;
    g_threads = n;
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    /* OpenBLAS stays single-threaded: cpu_gemm splits work over our OpenMP threads */
    openblas_set_num_threads(1);
}

int ll_get_threads(void) { return g_threads; }

int ll_default_threads(void) {
    const char *e = getenv("OMP_NUM_THREADS"); /* "4" or a nesting list "4,2": the first level */
    if (e) {
        char *end;
        long n = strtol(e, &end, 10);
        if (end != e && n > 0 && n <= 4096 && (*end == 0 || *end == ',')) return (int)n;
    }
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c > 0 ? (int)c : 1;
}

int ll_threads_here(void) {
#ifdef _OPENMP
    if (omp_get_active_level() >= omp_get_max_active_levels()) return 1;
#endif
    return g_threads;
}

int ll_workers_begin(void) {
#ifdef _OPENMP
    const int levels = omp_get_max_active_levels();
    omp_set_max_active_levels(1);
    return levels;
#else
    return 1;
#endif
}

void ll_workers_end(int saved) {
#ifdef _OPENMP
    omp_set_max_active_levels(saved);
#else
    (void)saved;
#endif
}

int ll_worker_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* OpenBLAS 0.3.21 (Debian 12) does not recognise recent Xeons inside some VMs
 * and falls back to its generic "Prescott" SSE3 kernels, 3x slower than the
 * AVX-512 ones.  It reads OPENBLAS_CORETYPE once, when the library loads, so
 * the only fix from inside the program is to set it and re-execute ourselves.
 * Same for OMP_WAIT_POLICY=passive: spinning OpenMP workers steal the cores
 * OpenBLAS's own threads need (measured in bench/RESULTS.md). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char *openblas_get_corename(void);

/* Under valgrind /proc/self/exe is valgrind's tool, which cannot be run
 * directly: re-executing would leave valgrind.  It preloads vgpreload_*.so. */
static int under_valgrind(void) {
    const char *p = getenv("LD_PRELOAD");
    return p && strstr(p, "vgpreload") != NULL;
}

void ll_cpu_setup(char **argv) {
    /* LL_NO_REEXEC=1: never re-execute (debuggers, valgrind, profilers; set the
     * environment by hand then).  The re-executed process gets it too. */
    const char *no = getenv("LL_NO_REEXEC");
    if ((no && *no && strcmp(no, "0") != 0) || under_valgrind()) return;
    int again = 0;
#if defined(__x86_64__)
    /* the core names and the misdetection are x86's; elsewhere OpenBLAS's own choice stands */
    const char *core = openblas_get_corename();
    if (!getenv("OPENBLAS_CORETYPE") && core && (!strcmp(core, "Prescott") || !strcmp(core, "Nehalem")) &&
        __builtin_cpu_supports("avx512f")) {
        setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
        again = 1;
    } else if (!getenv("OPENBLAS_CORETYPE") && core && !strcmp(core, "Prescott") && __builtin_cpu_supports("avx2")) {
        setenv("OPENBLAS_CORETYPE", "Haswell", 1);
        again = 1;
    }
#endif
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        again = 1;
    }
    if (again) {
        setenv("LL_NO_REEXEC", "1", 1);
        execv("/proc/self/exe", argv);
        /* exec failed: carry on with whatever the library picked */
    }
}

const char *ll_blas_core(void) {
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}
