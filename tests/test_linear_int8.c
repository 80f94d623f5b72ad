/* The CPU backend's int8 linear layers (linear_pack(.., int8 = 1), lldecode --precision int8)
 * against their contract written out here independently (src/backend/cpu/cpu_linear_int8.c):
 * each row of W and of X scaled by 127 / its max |.|, rounded (ties to even) and clamped to
 * +-127; exact int32 sums; y = fmaf(acc, inv_sa * inv_sw, b).  Bit for bit, with every kernel
 * this CPU can run (AVX-512 VNNI, AVX2, portable C: ll_cpu_int8_isa lowered in turn), for
 * shapes with partial panels, K not a multiple of 4, row-block remainders, with and without a
 * bias; a zero row gives the bias, a row holding NaN or an infinity gives NaN; padding columns
 * of Y stay; a row alone gives the bits it gets in a batch; and the result stays within the
 * quantisation's error of the fp32 product (relative error below 1.5%). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "util/testutil.h"

#define A_(p) ((ll_act *)(p))

/* the contract's quantisation of one row */
static float q_row(const float *x, int K, int *q) {
    float amax = 0;
    for (int k = 0; k < K; k++) {
        if (isnan(x[k]) || isinf(x[k])) {
            for (int j = 0; j < K; j++) q[j] = 0;
            return NAN;
        }
        if (fabsf(x[k]) > amax) amax = fabsf(x[k]);
    }
    if (amax == 0) {
        for (int k = 0; k < K; k++) q[k] = 0;
        return 0;
    }
    const float s = 127.0f / amax;
    for (int k = 0; k < K; k++) {
        const float v = rintf(x[k] * s);
        q[k] = v > 127 ? 127 : v < -127 ? -127 : (int)v;
    }
    return amax / 127.0f;
}

static int check(int M, int N, int K, int with_bias, int specials) {
    ll_backend *be = ll_backend_cpu();
    const int ldx = K + 3, ldy = N + 5;
    float *X = malloc(sizeof(float) * (size_t)M * ldx), *W = malloc(sizeof(float) * (size_t)N * K);
    float *bias = malloc(sizeof(float) * N), *Y = malloc(sizeof(float) * (size_t)M * ldy);
    float *R = malloc(sizeof(float) * (size_t)M * N), *Y1 = malloc(sizeof(float) * ldy);
    int *qx = malloc(sizeof(int) * (size_t)M * K), *qw = malloc(sizeof(int) * (size_t)N * K);
    float *sx = malloc(sizeof(float) * M), *sw = malloc(sizeof(float) * N);
    ll_philox r;
    ll_philox_init(&r, 8, 3, (uint32_t)(M * 131 + N * 7 + K));
    uint64_t c = 0;
    for (size_t i = 0; i < (size_t)M * ldx; i++) X[i] = 4 * ll_philox_uniform(&r, c++) - 2;
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = (2 * ll_philox_uniform(&r, c++) - 1) / 8;
    for (int i = 0; i < N; i++) bias[i] = 2 * ll_philox_uniform(&r, c++) - 1;
    if (specials && M > 3) {
        for (int k = 0; k < K; k++) X[(size_t)1 * ldx + k] = 0;  /* a zero row: the bias */
        X[(size_t)2 * ldx + K / 2] = NAN;                       /* NaN: NaN out */
        X[(size_t)3 * ldx] = 127.5f * 3;                        /* a value that rounds to 127 exactly */
    }
    if (specials && N > 2)
        for (int k = 0; k < K; k++) W[(size_t)1 * K + k] = 0; /* a zero weight row */
    for (int m = 0; m < M; m++) sx[m] = q_row(X + (size_t)m * ldx, K, qx + (size_t)m * K);
    for (int n = 0; n < N; n++) sw[n] = q_row(W + (size_t)n * K, K, qw + (size_t)n * K);
    double err2 = 0, ref2 = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int32_t acc = 0;
            for (int k = 0; k < K; k++) acc += qx[(size_t)m * K + k] * qw[(size_t)n * K + k];
            const float b = with_bias ? bias[n] : 0;
            R[(size_t)m * N + n] = fmaf((float)acc, sx[m] * sw[n], b);
            if (isnan(sx[m]) || (specials && m == 3)) continue; /* (row 3's outlier coarsens the rest) */
            double exact = b;
            for (int k = 0; k < K; k++) exact += (double)X[(size_t)m * ldx + k] * W[(size_t)n * K + k];
            err2 += (R[(size_t)m * N + n] - exact) * (R[(size_t)m * N + n] - exact), ref2 += (exact - b) * (exact - b);
        }
    CHECK_MSG(sqrt(err2) <= 0.015 * sqrt(ref2), "int8 %dx%dx%d: relative error %.4f of the fp32 product", M, N, K,
              sqrt(err2 / ref2));
    const int top = ll_cpu_int8_isa;
    int tried = 0;
    for (int isa = top; isa >= LL_INT8_GENERIC; isa--, tried++) {
        ll_cpu_int8_isa = isa;
        void *pk = be->linear_pack(be, W, N, K, 1);
        CHECK_MSG(pk != NULL, "linear_pack int8 %dx%d: NULL", N, K);
        if (!pk) break;
        for (size_t i = 0; i < (size_t)M * ldy; i++) Y[i] = 7;
        be->linear_packed(be, A_(Y), ldy, A_(X), ldx, pk, with_bias ? bias : NULL, M);
        int bad = 0;
        for (int m = 0; m < M; m++) {
            for (int n = 0; n < N; n++) {
                const float y = Y[(size_t)m * ldy + n], want = R[(size_t)m * N + n];
                if (!(y == want || (isnan(y) && isnan(want))) && !bad++)
                    fprintf(stderr, "  int8 %s %dx%dx%d bias %d: y[%d][%d] = %.9g, want %.9g\n", ll_cpu_int8_kernels(), M,
                            N, K, with_bias, m, n, y, want);
            }
            for (int n = N; n < ldy; n++) bad += Y[(size_t)m * ldy + n] != 7;
        }
        CHECK_MSG(!bad, "int8 %s %dx%dx%d bias %d: %d outputs differ from the contract", ll_cpu_int8_kernels(), M, N, K,
                  with_bias, bad);
        for (int i = 0; i < M; i += (M > 13 ? 7 : 1)) { /* a row alone: the same bits */
            be->linear_packed(be, A_(Y1), ldy, A_(X + (size_t)i * ldx), ldx, pk, with_bias ? bias : NULL, 1);
            CHECK_MSG(!memcmp(Y1, Y + (size_t)i * ldy, sizeof(float) * N) || (specials && i == 2),
                      "int8 %s: row %d of %d differs alone", ll_cpu_int8_kernels(), i, M);
        }
        be->linear_unpack(be, pk);
    }
    ll_cpu_int8_isa = top;
    if (specials && M > 3) {
        CHECK(R[(size_t)1 * N + 0] == (with_bias ? bias[0] : 0) && isnan(R[(size_t)2 * N]));
    }
    free(X), free(W), free(bias), free(Y), free(R), free(Y1), free(qx), free(qw), free(sx), free(sw);
    return tried;
}

int main(void) {
    ll_set_threads(2);
    fprintf(stderr, "int8 kernels: %s (and every lower one)\n", ll_cpu_int8_kernels());
    const int shapes[][3] = {{1, 1, 1},     {8, 32, 16},   {9, 33, 17},  {4, 64, 5},     {13, 100, 1024},
                             {320, 70, 3},  {25, 2000, 64}, {3, 31, 7},  {64, 256, 512}, {17, 96, 2048},
                             {2, 4, 130}};
    int runs = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int b = 0; b < 2; b++) runs += check(shapes[s][0], shapes[s][1], shapes[s][2], b, s % 2);
    fprintf(stderr, "%d kernel runs compared with the contract\n", runs);
    /* the double-precision build and other backends: linear_pack(int8) may be NULL (lldecode then refuses) */
    return tu_finish("test_linear_int8");
}
