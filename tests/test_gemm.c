/* The CPU backend's multi-threaded gemm (row/column chunks, or K slices for
 * weight-gradient shapes) against a naive double-precision reference, for
 * every transpose combination, beta 0 and 1, and padded leading dimensions. */
#include <math.h>
#include <stdlib.h>

#include "ll/backend.h"
#include "util/testutil.h"

static void check(int ta, int tb, int M, int N, int K, float beta) {
    ll_backend *be = ll_backend_cpu();
    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 7;
    size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb), *C = malloc(sizeof(float) * nc);
    double *R = malloc(sizeof(double) * nc);
    ll_philox r;
    ll_philox_init(&r, 5, 6, (uint32_t)(M * 7 + N * 3 + K));
    for (size_t i = 0; i < na; i++) A[i] = 2 * ll_philox_uniform(&r, i) - 1;
    for (size_t i = 0; i < nb; i++) B[i] = 2 * ll_philox_uniform(&r, na + i) - 1;
    for (size_t i = 0; i < nc; i++) R[i] = C[i] = 2 * ll_philox_uniform(&r, na + nb + i) - 1;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                     (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            R[(size_t)i * ldc + j] = 0.5 * s + beta * R[(size_t)i * ldc + j];
        }
    be->gemm(be, ta, tb, M, N, K, 0.5f, A, lda, B, ldb, beta, C, ldc);
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) worst = fmax(worst, fabs(C[(size_t)i * ldc + j] - R[(size_t)i * ldc + j]));
    CHECK_MSG(worst < 1e-3, "gemm ta%d tb%d %dx%dx%d beta %g: max error %g", ta, tb, M, N, K, beta, worst);
    for (int i = 0; i < M; i++) /* padding columns untouched */
        for (int j = N; j < ldc; j++) CHECK(C[(size_t)i * ldc + j] == (float)R[(size_t)i * ldc + j]);
    free(A);
    free(B);
    free(C);
    free(R);
}

int main(void) {
    ll_set_threads(2);
    int shapes[][3] = {{300, 70, 50}, {40, 333, 60}, {37, 29, 2100}, {64, 48, 4096}, {5, 3, 7}, {130, 130, 130}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                check(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 0);
                check(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 1);
            }
    return tu_finish("test_gemm");
}
