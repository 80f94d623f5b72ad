/* gemm_profile: an LD_PRELOAD shim that times every cblas_sgemm call of a
 * program by shape and prints, at exit, calls, seconds, share of all gemm time
 * and GFLOP/s per (transposes, M, N, K).  It shows how fast each gemm runs
 * *inside* training (cold caches, the other core busy), which a standalone
 * sgemm benchmark cannot (bench/RESULTS.md, session 3).
 *
 *   LD_PRELOAD=build/libll_gemm_profile.so LL_NO_REEXEC=1 \
 *     OPENBLAS_CORETYPE=Cooperlake OMP_WAIT_POLICY=passive \
 *     build/ll_train_bench --steps 4
 *
 * LL_NO_REEXEC=1 (with the environment set by hand) keeps ll_cpu_setup from
 * re-executing the program.  LL_GEMM_PROFILE_OUT=FILE writes the table to FILE
 * instead of stderr.  Thread-safe (one lock per call; calls last microseconds
 * to milliseconds). */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
                         const blasint, const blasint, const blasint, const float, const float *, const blasint,
                         const float *, const blasint, const float, float *, const blasint);

#define MAX_SHAPES 4096
typedef struct {
    int ta, tb, M, N, K;
    long calls;
    double seconds;
} shape_stat;

static sgemm_fn g_real;
static shape_stat g_tab[MAX_SHAPES];
static int g_n;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta, const enum CBLAS_TRANSPOSE tb,
                 const blasint M, const blasint N, const blasint K, const float alpha, const float *A,
                 const blasint lda, const float *B, const blasint ldb, const float beta, float *C,
                 const blasint ldc) {
    if (!g_real) g_real = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
    const double t0 = now();
    g_real(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    const double dt = now() - t0;
    const int a = ta == CblasTrans, b = tb == CblasTrans;
    pthread_mutex_lock(&g_mu);
    int i = 0;
    while (i < g_n && !(g_tab[i].ta == a && g_tab[i].tb == b && g_tab[i].M == M && g_tab[i].N == N &&
                        g_tab[i].K == K))
        i++;
    if (i == g_n && g_n < MAX_SHAPES) g_tab[g_n++] = (shape_stat){a, b, M, N, K, 0, 0};
    if (i < g_n) {
        g_tab[i].calls++;
        g_tab[i].seconds += dt;
    }
    pthread_mutex_unlock(&g_mu);
}

static int by_time(const void *x, const void *y) {
    const double a = ((const shape_stat *)x)->seconds, b = ((const shape_stat *)y)->seconds;
    return (a < b) - (a > b);
}

__attribute__((destructor)) static void report(void) {
    if (!g_n) return;
    const char *path = getenv("LL_GEMM_PROFILE_OUT");
    FILE *f = path ? fopen(path, "w") : stderr;
    if (!f) f = stderr;
    qsort(g_tab, (size_t)g_n, sizeof g_tab[0], by_time);
    double total = 0;
    for (int i = 0; i < g_n; i++) total += g_tab[i].seconds;
    fprintf(f, "gemm_profile: op     M     N     K    calls   seconds  share  GFLOP/s (per calling thread)\n");
    for (int i = 0; i < g_n; i++) {
        const shape_stat *s = &g_tab[i];
        fprintf(f, "gemm_profile: %c%c %5d %5d %5d %8ld %9.3f %5.1f%% %8.1f\n", s->ta ? 'T' : 'N', s->tb ? 'T' : 'N',
                s->M, s->N, s->K, s->calls, s->seconds, 100 * s->seconds / total,
                2.0 * s->M * s->N * s->K * s->calls / s->seconds / 1e9);
    }
    fprintf(f, "gemm_profile: total %.3f s of gemm, summed over threads\n", total);
    if (f != stderr) fclose(f);
}
