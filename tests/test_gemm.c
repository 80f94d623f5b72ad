/* The CPU backend's multi-threaded gemm (row/column chunks, or K slices for
 * weight-gradient shapes) against a naive double-precision reference, for
 * every transpose combination, beta 0 and 1, and padded leading dimensions.
 * Also the packed inference linear (linear_pack/linear_packed): against the
 * same reference with and without bias, panel and row-block remainders, and
 * bitwise independence of a row's result from the other rows in the call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "util/testutil.h"

#define A_(p) ((ll_act *)(p)) /* host test buffers in the activation dtype (real) */

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
    const ll_gemm_desc gd = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .alpha = 0.5f, .beta = beta,
                             .A = A, .a_type = LL_F32, .lda = lda, .B = B, .b_type = LL_F32, .ldb = ldb, .C = C,
                             .c_type = LL_F32, .ldc = ldc};
    be->gemm(be, &gd);
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

/* The packed kernel's forms this CPU runs: AVX-512, AVX2 (also on an AVX-512 CPU); they must give the
 * same bits.  first_y: the first form's outputs of the current shape, kept for the next form. */
static float *first_y;
static int n_forms_checked;

static void check_packed(int M, int N, int K, int with_bias) {
    ll_backend *be = ll_backend_cpu();
    const int ldx = K + 3, ldy = N + 5;
    float *X = malloc(sizeof(float) * (size_t)M * ldx), *W = malloc(sizeof(float) * (size_t)N * K);
    float *bias = malloc(sizeof(float) * N), *Y = malloc(sizeof(float) * (size_t)M * ldy);
    float *Y1 = malloc(sizeof(float) * ldy);
    ll_philox r;
    ll_philox_init(&r, 9, 1, (uint32_t)(M * 131 + N * 7 + K));
    uint64_t c = 0;
    for (size_t i = 0; i < (size_t)M * ldx; i++) X[i] = 2 * ll_philox_uniform(&r, c++) - 1;
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = 2 * ll_philox_uniform(&r, c++) - 1;
    for (int i = 0; i < N; i++) bias[i] = 2 * ll_philox_uniform(&r, c++) - 1;
    for (size_t i = 0; i < (size_t)M * ldy; i++) Y[i] = 7; /* sentinel for the padding columns */
    void *pk = be->linear_pack(be, W, N, K, 0);
    if (!pk) { /* no packed kernel here: the model falls back to gemm, nothing to check */
        free(X), free(W), free(bias), free(Y), free(Y1);
        return;
    }
    be->linear_packed(be, A_(Y), ldy, A_(X), ldx, pk, with_bias ? bias : NULL, M);
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = with_bias ? bias[j] : 0;
            for (int k = 0; k < K; k++) s += (double)X[(size_t)i * ldx + k] * W[(size_t)j * K + k];
            worst = fmax(worst, fabs(Y[(size_t)i * ldy + j] - s));
        }
    CHECK_MSG(worst < 1e-4 * sqrt((double)K), "linear_packed %dx%dx%d bias %d: max error %g", M, N, K, with_bias,
              worst);
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldy; j++) CHECK(Y[(size_t)i * ldy + j] == 7);
    /* each row alone gives the same bits as inside the batch */
    for (int i = 0; i < M; i += (M > 13 ? 5 : 1)) {
        be->linear_packed(be, A_(Y1), ldy, A_(X + (size_t)i * ldx), ldx, pk, with_bias ? bias : NULL, 1);
        CHECK_MSG(!memcmp(Y1, Y + (size_t)i * ldy, sizeof(float) * N), "linear_packed row %d of %d differs alone", i,
                  M);
    }
    if (first_y) /* a second form: the first one's bits */
        CHECK_MSG(!memcmp(first_y, Y, sizeof(float) * (size_t)M * ldy), "linear_packed %dx%dx%d bias %d: the %s "
                  "kernel's bits differ from the AVX-512 kernel's", M, N, K, with_bias, ll_cpu_kernels());
    else
        first_y = memcpy(malloc(sizeof(float) * (size_t)M * ldy), Y, sizeof(float) * (size_t)M * ldy);
    n_forms_checked++;
    be->linear_unpack(be, pk);
    free(X), free(W), free(bias), free(Y), free(Y1);
}

int main(void) {
    ll_set_threads(2);
    /* M: 12-row blocks, remainders of 1..8 rows in 4-row blocks, 9..11 in a 12-row one */
    int pshapes[][3] = {{1, 1, 1},    {12, 32, 16},      {13, 33, 17}, {64, 256, 256}, {5, 100, 1024},
                        {320, 70, 3}, {25, 8000, 64},   {9, 40, 20},  {20, 64, 33},   {7, 33, 5}, {160, 96, 256}};
    /* each form the CPU runs, the AVX-512 one first (the flags are read when a matrix is packed) */
    const int avx512 = tu_cpu_form(TU_FORM_AVX512), avx2 = tu_cpu_form(TU_FORM_AVX2), forms = avx512 + avx2;
    tu_cpu_form(TU_FORM_START);
    for (size_t s = 0; s < sizeof pshapes / sizeof pshapes[0]; s++)
        for (int b = 0; b < 2; b++) {
            for (int f = TU_FORM_AVX512; f <= TU_FORM_AVX2; f++)
                if (tu_cpu_form(f)) check_packed(pshapes[s][0], pshapes[s][1], pshapes[s][2], b);
            tu_cpu_form(TU_FORM_START);
            free(first_y);
            first_y = NULL;
        }
    CHECK(n_forms_checked == forms * 2 * (int)(sizeof pshapes / sizeof pshapes[0]));
    fprintf(stderr, "test_gemm: packed linear checked in %d form(s)%s\n", forms,
            forms == 2 ? ", AVX-512 and AVX2 bit for bit" : forms ? (avx512 ? " (AVX-512)" : " (AVX2)") : " (none: no AVX2)");
    int shapes[][3] = {{300, 70, 50}, {40, 333, 60}, {37, 29, 2100}, {64, 48, 4096}, {5, 3, 7}, {130, 130, 130}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                check(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 0);
                check(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 1);
            }
    return tu_finish("test_gemm");
}
