/* sgemm_peak: OpenBLAS cblas_sgemm throughput on square and NMT-shaped
 * matrices, the practical fp32 matmul ceiling for the CPU training benchmark.
 *
 * Build:  gcc -O3 -march=native bench/sgemm_peak.c \
 *             $(pkg-config --cflags --libs openblas) -o build/sgemm_peak
 * Run:    build/sgemm_peak [--threads N] [--reps R] [--min-time S] [--core]
 *         (--core: print only the OpenBLAS kernel set in use, e.g. "Haswell", and exit;
 *          OPENBLAS_CORETYPE=<name> overrides OpenBLAS' CPU detection)
 *
 * Each shape is C[M,N] = op(A) op(B), row-major, 2*M*N*K flops.  For each
 * shape we run at least --reps timed calls and keep going until --min-time
 * seconds have been spent, and report the BEST single-call rate (after one
 * untimed warm-up call).  The last line is machine-readable:
 *     RESULT sgemm peak_gflops=<max over shapes> threads=<n>
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Declared by OpenBLAS' cblas.h, repeated here in case a generic cblas.h is found first. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char *openblas_get_config(void);
char *openblas_get_corename(void);

typedef struct {
    int M, K, N;
    int ta, tb; /* transpose A / B (as stored in memory) */
    const char *what;
} shape;

static const shape SHAPES[] = {
    /* forward: activations [tokens, in] x W^T -> [tokens, out] (nn.Linear: B = W stored [out,in], transposed) */
    {4096, 256, 768, 0, 1, "fwd self-attn qkv  [4096x256]x[256x768]"},
    {4096, 256, 256, 0, 1, "fwd attn out proj  [4096x256]x[256x256]"},
    {4096, 256, 1024, 0, 1, "fwd ffn fc1        [4096x256]x[256x1024]"},
    {4096, 1024, 256, 0, 1, "fwd ffn fc2        [4096x1024]x[1024x256]"},
    {4096, 256, 8000, 0, 1, "fwd output proj    [4096x256]x[256x8000]"},
    /* backward: dX = dY W  and  dW = dY^T X */
    {4096, 8000, 256, 0, 0, "bwd dX output proj [4096x8000]x[8000x256]"},
    {8000, 4096, 256, 1, 0, "bwd dW output proj [8000x4096]x[4096x256]"},
    {768, 4096, 256, 1, 0, "bwd dW qkv         [768x4096]x[4096x256]"},
    {1024, 4096, 256, 1, 0, "bwd dW fc1         [1024x4096]x[4096x256]"},
    /* per-head attention scores are tiny batched GEMMs; one representative */
    {32, 64, 32, 0, 1, "attn scores (1 head) [32x64]x[64x32]"},
    /* square reference */
    {2048, 2048, 2048, 0, 0, "square             [2048x2048]x[2048x2048]"},
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *alloc_rand(size_t n, unsigned *seed) {
    float *p = NULL;
    if (posix_memalign((void **)&p, 64, n * sizeof(float)) != 0 || !p) {
        fprintf(stderr, "sgemm_peak: out of memory (%zu floats)\n", n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 1664525u + 1013904223u;
        p[i] = (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return p;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 5;
    double min_time = 0.3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc)
            min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--core")) {
            printf("%s\n", openblas_get_corename());
            return 0;
        } else {
            fprintf(stderr, "usage: %s [--threads N] [--reps R] [--min-time SECONDS] [--core]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1) threads = 1;
    if (reps < 1) reps = 1;
    openblas_set_num_threads(threads);
    printf("OpenBLAS config: %s\n", openblas_get_config());
    printf("OpenBLAS core:   %s, threads: %d\n", openblas_get_corename(), openblas_get_num_threads());
    printf("%-44s %6s %6s %6s %10s %10s\n", "shape (MxK x KxN)", "M", "K", "N", "best_ms", "GFLOP/s");

    unsigned seed = 12345u;
    double peak = 0.0;
    int bad = 0;
    int nshapes = (int)(sizeof SHAPES / sizeof SHAPES[0]);
    for (int s = 0; s < nshapes; s++) {
        const shape *sh = &SHAPES[s];
        int M = sh->M, K = sh->K, N = sh->N;
        float *A = alloc_rand((size_t)M * K, &seed);
        float *B = alloc_rand((size_t)K * N, &seed);
        float *C = alloc_rand((size_t)M * N, &seed);
        /* stored shapes: A is [M,K] or [K,M] (ta); B is [K,N] or [N,K] (tb) */
        int lda = sh->ta ? M : K;
        int ldb = sh->tb ? K : N;
        enum CBLAS_TRANSPOSE TA = sh->ta ? CblasTrans : CblasNoTrans;
        enum CBLAS_TRANSPOSE TB = sh->tb ? CblasTrans : CblasNoTrans;
        double flops = 2.0 * M * N * K;

        cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N); /* warm-up */
        double best = 1e30, spent = 0.0;
        int done = 0;
        while (done < reps || spent < min_time) {
            double t0 = now_s();
            cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
            double dt = now_s() - t0;
            if (dt < best) best = dt;
            spent += dt;
            done++;
            if (done > 100000) break;
        }
        /* spot-check a few entries against a double-precision dot product */
        double maxrel = 0.0;
        for (int c = 0; c < 16; c++) {
            seed = seed * 1664525u + 1013904223u;
            int i = (int)(seed % (unsigned)M);
            seed = seed * 1664525u + 1013904223u;
            int j = (int)(seed % (unsigned)N);
            double ref = 0.0, mag = 0.0;
            for (int k = 0; k < K; k++) {
                double a = sh->ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = sh->tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                ref += a * b;
                mag += a < 0 ? -a * (b < 0 ? -b : b) : a * (b < 0 ? -b : b);
            }
            double err = C[(size_t)i * N + j] - ref;
            if (err < 0) err = -err;
            double rel = err / (mag > 1e-30 ? mag : 1e-30);
            if (rel > maxrel) maxrel = rel;
        }
        if (maxrel > 1e-4) {
            printf("CHECK FAILED for %s: max relative error %.3g\n", sh->what, maxrel);
            bad++;
        }
        double gf = flops / best * 1e-9;
        if (gf > peak) peak = gf;
        printf("%-44s %6d %6d %6d %10.3f %10.1f\n", sh->what, M, K, N, best * 1e3, gf);
        fflush(stdout);
        free(A);
        free(B);
        free(C);
    }
    printf("RESULT sgemm peak_gflops=%.1f threads=%d core=%s%s\n", peak, threads, openblas_get_corename(),
           bad ? " CHECK_FAILED" : "");
    return bad ? 1 : 0;
}
