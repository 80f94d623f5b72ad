/* What cuBLASLt's ReLU bitmask looks like: cuBLASLt's DRELU epilogue reads the
 * mask that its RELU_AUX epilogue wrote, one bit per element, but the
 * documentation does not give the bits' order.  ll's FFN uses the two
 * epilogues without reading a bit itself (src/backend/cuda/cuda_relu_mask.c:
 * where cuBLASLt wrote no mask, the backward uses the ReLU's output), so the
 * order is a record here, for any kernel that would one day write or read a
 * mask of its own.  (ll's own check of the two epilogues is the backend's
 * start-up probe and gpu_test_ops_cuda's gemm.)  On bf16 operands and output (the
 * model's FFN), column-major as cuBLASLt sees it:
 *  1. D = relu(A B + bias) with RELU_AUX_BIAS and the mask's leading dimension
 *     ld (bits): the mask's bits are decoded under candidate orders and the
 *     one that agrees with the signs of A B + bias (computed here in double;
 *     values too close to 0 to be sure of are left out) is printed;
 *  2. DRELU on another product with that mask: D2 = (A2 B2) where the bit is
 *     set, else 0, compared with the host.
 * A refused epilogue is reported, not failed (the backend then keeps the
 * separate ReLU backward).  Fails when cuBLASLt runs the
 * epilogue but no candidate order explains the mask, or DRELU's result is
 * wrong.  Skips (77) without a CUDA device. */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "gpu_util.h"

enum { M = 256, N = 8, K = 16 }; /* D is M x N, column-major; ld of the mask = M bits */

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float frand(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* n bf16 values, random; their exact values back in f */
static void *dev_bf16(int n, float *f) {
    uint16_t *h = ll_malloc((size_t)n * 2);
    for (int i = 0; i < n; i++) {
        h[i] = ll_f32_to_bf16(frand());
        f[i] = ll_bf16_to_f32(h[i]);
    }
    void *d = NULL;
    if (cudaMalloc(&d, (size_t)n * 2) != cudaSuccess || cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice))
        ll_die("relu-mask: cudaMalloc/cudaMemcpy failed");
    free(h);
    return d;
}

/* C = A B (+ bias) in double, column-major */
static void host_gemm(double *c, const float *a, const float *b, const float *bias) {
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            double s = bias ? bias[i] : 0.0;
            for (int k = 0; k < K; k++) s += (double)a[i + k * M] * b[k + j * K];
            c[i + j * M] = s;
        }
}

/* One matmul with epilogue epi (bias and mask pointers as it needs); the cublasStatus_t */
static int run(cublasLtHandle_t lt, cublasLtEpilogue_t epi, const void *A, const void *B, void *D, const void *bias,
               void *mask) {
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const int64_t aux_ld = M;
    const cudaDataType_t bt = CUDA_R_16BF;
    cublasStatus_t s = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!s) s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (!s && bias) s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
    if (!s && bias) s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (!s) s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &mask, sizeof mask);
    if (!s) s = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld);
    if (!s) s = cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, M, K, M);
    if (!s) s = cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, N, K);
    if (!s) s = cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, M, N, M);
    if (!s) s = cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    if (!s) s = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &res, &got);
    if (!s && got < 1) s = CUBLAS_STATUS_NOT_SUPPORTED;
    const float one = 1, zero = 0;
    if (!s) s = cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, D, ld, D, ld, &res.algo, NULL, 0, 0);
    if (!s && cudaDeviceSynchronize() != cudaSuccess) ll_die("relu-mask: the matmul failed on the device");
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (op) cublasLtMatmulDescDestroy(op);
    return (int)s;
}

/* Candidate orders of bit (row r, column c) in the mask bytes */
static int bit_lsb(const uint8_t *m, int r, int c) { const int i = r + c * M; return m[i >> 3] >> (i & 7) & 1; }
static int bit_msb(const uint8_t *m, int r, int c) { const int i = r + c * M; return m[i >> 3] >> (7 - (i & 7)) & 1; }
static int bit_rows(const uint8_t *m, int r, int c) { const int i = c + r * N; return m[i >> 3] >> (i & 7) & 1; }

int main(void) {
    gpu_or_skip();
    cublasLtHandle_t lt;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) ll_die("relu-mask: cublasLtCreate failed");
    float *a = ll_malloc(M * K * sizeof(float)), *b = ll_malloc(K * N * sizeof(float));
    float *bias = ll_malloc(M * sizeof(float)), *a2 = ll_malloc(M * K * sizeof(float));
    float *b2 = ll_malloc(K * N * sizeof(float));
    void *dA = dev_bf16(M * K, a), *dB = dev_bf16(K * N, b), *dbias = dev_bf16(M, bias);
    void *dA2 = dev_bf16(M * K, a2), *dB2 = dev_bf16(K * N, b2), *dD = NULL, *dmask = NULL;
    const size_t mask_bytes = (size_t)M * N / 8;
    if (cudaMalloc(&dD, (size_t)M * N * 2) != cudaSuccess || cudaMalloc(&dmask, mask_bytes) != cudaSuccess ||
        cudaMemset(dmask, 0xA5, mask_bytes) != cudaSuccess) /* a pattern: bits cuBLASLt leaves show */
        ll_die("relu-mask: cudaMalloc failed");
    int fail = 0;
    const int s1 = run(lt, CUBLASLT_EPILOGUE_RELU_AUX_BIAS, dA, dB, dD, dbias, dmask);
    if (s1) {
        printf("relu-mask: cuBLASLt refused RELU_AUX_BIAS on bf16 (status %d): no fused ReLU backward to build\n", s1);
        return 0;
    }
    uint8_t mask[M * N / 8];
    if (cudaMemcpy(mask, dmask, mask_bytes, cudaMemcpyDeviceToHost) != cudaSuccess) ll_die("relu-mask: download");
    double *pre = ll_malloc(M * N * sizeof(double));
    host_gemm(pre, a, b, bias);
    static const struct {
        const char *name;
        int (*bit)(const uint8_t *, int, int);
    } cand[] = {{"bit r + c * ld, least significant bit of each byte first", bit_lsb},
                {"bit r + c * ld, most significant bit of each byte first", bit_msb},
                {"bit c + r * N (row-major), least significant bit first", bit_rows}};
    int best = -1, best_ok = -1, decided = 0;
    for (int k = 0; k < 3; k++) {
        int ok = 0;
        decided = 0;
        for (int c = 0; c < N; c++)
            for (int r = 0; r < M; r++) {
                const double v = pre[r + c * M];
                if (fabs(v) < 0.05) continue; /* fp32 accumulation may land either side */
                decided++;
                ok += cand[k].bit(mask, r, c) == (v > 0);
            }
        if (ok > best_ok) best_ok = ok, best = k;
    }
    printf("relu-mask: RELU_AUX_BIAS ran (bf16, %d x %d, ld %d bits); the mask agrees with the signs under \"%s\": "
           "%d of %d clear-cut elements\n",
           M, N, M, cand[best].name, best_ok, decided);
    if (best_ok != decided) {
        printf("FAIL relu-mask: no candidate order explains cuBLASLt's mask (first bytes %02x %02x %02x %02x)\n",
               mask[0], mask[1], mask[2], mask[3]);
        fail = 1;
    }
    /* DRELU with that mask: D2 = A2 B2 where the bit is set, else 0 */
    const int s2 = run(lt, CUBLASLT_EPILOGUE_DRELU, dA2, dB2, dD, NULL, dmask);
    if (s2) {
        printf("relu-mask: cuBLASLt refused DRELU on bf16 (status %d)\n", s2);
    } else if (!fail) {
        uint16_t d[M * N];
        if (cudaMemcpy(d, dD, sizeof d, cudaMemcpyDeviceToHost) != cudaSuccess) ll_die("relu-mask: download");
        double *p2 = ll_malloc(M * N * sizeof(double));
        host_gemm(p2, a2, b2, NULL);
        float got[M * N], ref[M * N];
        for (int c = 0; c < N; c++)
            for (int r = 0; r < M; r++) {
                got[r + c * M] = ll_bf16_to_f32(d[r + c * M]);
                ref[r + c * M] = cand[best].bit(mask, r, c) ? (float)p2[r + c * M] : 0.0f;
            }
        const double e = gpu_rel_err(got, ref, M * N);
        printf("relu-mask: DRELU ran with that mask: relative error %.2g against the host (bf16 output)\n", e);
        if (!(e <= 1e-2)) {
            printf("FAIL relu-mask: DRELU's result differs from the mask-applied product\n");
            fail = 1;
        }
        free(p2);
    }
    free(pre), free(a), free(b), free(bias), free(a2), free(b2);
    cudaFree(dA), cudaFree(dB), cudaFree(dbias), cudaFree(dA2), cudaFree(dB2), cudaFree(dD), cudaFree(dmask);
    cublasLtDestroy(lt);
    return fail;
}
