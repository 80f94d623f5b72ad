/* The typed op interface on CUDA against the CPU backend of the same
 * activation dtype (ll_backend_cpu_precision):
 *  - both CUDA backends (fp32, bf16) exist, are complete and distinct;
 *  - gemm with every epilogue (NONE, BIAS, BIAS_RELU, BGRAD accumulated),
 *    fp32 and bf16 operands, activation-dtype C and fp32 C with beta 1 (the
 *    weight gradient), padded leading dimensions, K = 0, and a bias / bgrad
 *    pointer off 16-byte alignment (cuBLASLt refuses it: the kernel fallback);
 *    the bias in the activation dtype (the model's) and in fp32 (with bf16 C
 *    cuBLASLt refuses that type: the fallback again); which calls fell back
 *    (ll_backend_gemm_fallbacks): a misaligned bias always, the model's
 *    aligned shapes never (unless LL_CUDA_EMU_LT_REFUSE forces refusals);
 *  - convert between fp32, bf16 and fp64 bit for bit against the host rounding;
 *  - adam's bf16 weight copy equals the rounded fp32 master;
 *  - beam_topk on bf16 log-probabilities equal to the CPU bf16 backend.
 * Skips (77) without a CUDA device. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "ll_cuda.h"
#include "../util/testutil.h"
#include "gpu_util.h"

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static float frand(void) { /* uniform [-1, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static float *host_rand(size_t n) {
    float *p = ll_malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

/* A buffer of n elements of type t on `be` holding host[0..n) (rounded when t is bf16). */
static void *put(ll_backend *be, ll_dtype t, const float *host, size_t n) {
    void *p = be->alloc(be, n * ll_dtype_bytes(t) + 16);
    if (t == LL_BF16) {
        uint16_t *h = ll_malloc(n * 2 + 2);
        for (size_t i = 0; i < n; i++) h[i] = ll_f32_to_bf16(host[i]);
        be->upload(be, p, h, n * 2);
        free(h);
    } else {
        be->upload(be, p, host, n * sizeof(float));
    }
    return p;
}
static float *get(ll_backend *be, ll_dtype t, const void *p, size_t n) {
    float *h = ll_malloc(n * sizeof(float) + 1);
    if (t == LL_BF16) {
        uint16_t *b = ll_malloc(n * 2 + 2);
        be->download(be, b, p, n * 2);
        for (size_t i = 0; i < n; i++) h[i] = ll_bf16_to_f32(b[i]);
        free(b);
    } else {
        be->download(be, h, p, n * sizeof(float));
    }
    return h;
}

/* LL_CUDA_EMU_LT_REFUSE (the emulation's stand-in refusing on purpose) is set */
static int forced_refusals(void) {
    const char *e = getenv("LL_CUDA_EMU_LT_REFUSE");
    return e && *e;
}

/* One gemm on the CPU and the CUDA backend of dtype `act`, C of type ct, the
 * bias of type bias_t.  misalign: bias and bgrad one element past a 16-byte
 * boundary. */
static void test_gemm_b(ll_dtype act, ll_dtype ct, ll_epilogue epi, int ta, int tb, int M, int N, int K, int pad,
                        float beta, int misalign, ll_dtype bias_t) {
    ll_backend *be[2] = {ll_backend_cpu_precision(act), ll_backend_cuda_precision(0, act)};
    const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    const int lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
    const size_t na = (size_t)a_rows * lda + 1, nb = (size_t)b_rows * ldb + 1, nc = (size_t)M * ldc;
    float *a = host_rand(na), *b = host_rand(nb), *c = host_rand(nc), *bias = host_rand((size_t)N + 1),
          *bg = host_rand((size_t)M + 1);
    float *rc[2], *rg[2];
    uint64_t fell_back = 0;
    for (int k = 0; k < 2; k++) {
        void *A = put(be[k], act, a, na), *B = put(be[k], act, b, nb), *C = put(be[k], ct, c, nc);
        char *Bi = put(be[k], bias_t, bias, (size_t)N + 1);
        real *G = put(be[k], LL_F32, bg, (size_t)M + 1);
        const ll_gemm_desc g = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .alpha = 1, .beta = beta,
                                .A = A, .a_type = act, .lda = lda, .B = B, .b_type = act, .ldb = ldb, .C = C,
                                .c_type = ct, .ldc = ldc, .epi = epi, .bias = Bi + misalign * ll_dtype_bytes(bias_t),
                                .bias_type = bias_t, .bgrad = G + misalign};
        const uint64_t f0 = ll_backend_gemm_fallbacks(be[k]);
        be[k]->gemm(be[k], &g);
        if (k == 1) fell_back = ll_backend_gemm_fallbacks(be[k]) - f0;
        rc[k] = get(be[k], ct, C, nc);
        rg[k] = get(be[k], LL_F32, G, (size_t)M + 1);
        be[k]->free(be[k], A), be[k]->free(be[k], B), be[k]->free(be[k], C), be[k]->free(be[k], Bi);
        be[k]->free(be[k], G);
    }
    /* bf16 C: one or two bf16 roundings apart (the fallback rounds after the product and after the bias) */
    const double tol = ct == LL_BF16 ? 1.6e-2 : 1e-4;
    double e = gpu_rel_err(rc[1], rc[0], nc);
    int pad_ok = 1;
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) pad_ok &= rc[1][(size_t)i * ldc + j] == rc[0][(size_t)i * ldc + j];
    CHECK_MSG(e <= tol, "gemm %s x %s -> %s epi %d ta %d tb %d M %d N %d K %d pad %d beta %g misalign %d: error %.3g",
              ll_dtype_str(act), ll_dtype_str(act), ll_dtype_str(ct), (int)epi, ta, tb, M, N, K, pad, (double)beta,
              misalign, e);
    CHECK_MSG(pad_ok, "gemm epi %d wrote into the padding of C", (int)epi);
    double eg = gpu_rel_err(rg[1], rg[0], (size_t)M + 1);
    CHECK_MSG(eg <= 1e-4, "gemm bgrad %s epi %d ta %d M %d K %d misalign %d: error %.3g", ll_dtype_str(act), (int)epi,
              ta, M, K, misalign, eg);
    /* the counter: a misaligned bias is always left to the fallback (cuda_gemm_lt.c); the model's
     * case (aligned, bias in C's type, dimensions multiples of 8) must run fused */
    const int bias_epi = epi == LL_EPI_BIAS || epi == LL_EPI_BIAS_RELU, model_like = !(M % 8 || N % 8 || K % 8);
    if (bias_epi && misalign && K > 0)
        CHECK_MSG(fell_back == 1, "gemm epi %d, bias off 16-byte alignment: %llu fallbacks counted, want 1", (int)epi,
                  (unsigned long long)fell_back);
    /* cuBLASLt 13.0 refuses the bias gradient into an fp32 C with trans_a = 0 (its BGRADB of an
     * untransposed B; cuda_gemm_lt.c): fp32 operands on an H200 (2026-11-26), bf16 operands on an
     * H100 (2026-11-27); into a bf16 C it runs.  The fallback must run, and be counted.  (Asked for
     * only with LL_CUDA_BGRAD_EPILOGUE=1: by default a weight gradient is a plain product and the
     * bias-gradient kernel, never a fallback) */
    const int refused_bgrad = epi == LL_EPI_BGRAD && ct == LL_F32 && !ta && ll_backend_bgrad_epilogue_asked();
    if (refused_bgrad && K > 0 && !misalign)
        CHECK_MSG(fell_back == 1, "gemm %s -> fp32 BGRAD ta 0 M %d N %d K %d: %llu fallbacks counted, want 1",
                  ll_dtype_str(act), M, N, K, (unsigned long long)fell_back);
    if (!forced_refusals() && !misalign && model_like && K > 0 && (!bias_epi || bias_t == ct) && !refused_bgrad)
        CHECK_MSG(fell_back == 0, "gemm %s -> %s epi %d ta %d tb %d M %d N %d K %d: cuBLASLt refused it (fallback)",
                  ll_dtype_str(act), ll_dtype_str(ct), (int)epi, ta, tb, M, N, K);
    free(a), free(b), free(c), free(bias), free(bg);
    for (int k = 0; k < 2; k++) free(rc[k]), free(rg[k]);
}
static void test_gemm(ll_dtype act, ll_dtype ct, ll_epilogue epi, int ta, int tb, int M, int N, int K, int pad,
                      float beta, int misalign) {
    test_gemm_b(act, ct, epi, ta, tb, M, N, K, pad, beta, misalign, act);
}

static void test_convert(ll_backend *gpu) {
    const size_t n = 100003;
    float *x = host_rand(n);
    for (size_t i = 0; i < n; i++) x[i] *= ldexpf(1.0f, (int)(i % 40) - 20); /* 2^-20 .. 2^19 (a shift of 1 by 31+ was undefined) */
    x[0] = INFINITY, x[1] = -INFINITY, x[2] = 0.0f, x[3] = -0.0f, x[4] = 1e-40f, x[5] = 3.0e38f;
    float *d32 = gpu->alloc(gpu, n * 4), *back = gpu->alloc(gpu, n * 4);
    uint16_t *d16 = gpu->alloc(gpu, n * 2);
    double *d64 = gpu->alloc(gpu, n * 8);
    gpu->upload(gpu, d32, x, n * 4);
    gpu->convert(gpu, d16, LL_BF16, d32, LL_F32, n);
    gpu->convert(gpu, back, LL_F32, d16, LL_BF16, n);
    gpu->convert(gpu, d64, LL_F64, d32, LL_F32, n);
    uint16_t *h16 = ll_malloc(n * 2);
    float *hb = ll_malloc(n * 4);
    double *h64 = ll_malloc(n * 8);
    gpu->download(gpu, h16, d16, n * 2);
    gpu->download(gpu, hb, back, n * 4);
    gpu->download(gpu, h64, d64, n * 8);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t want = ll_f32_to_bf16(x[i]);
        const float wb = ll_bf16_to_f32(want);
        bad += h16[i] != want || memcmp(&hb[i], &wb, 4) || h64[i] != (double)x[i];
    }
    CHECK_MSG(bad == 0, "convert fp32/bf16/fp64: %zu of %zu elements differ from the host rounding", bad, n);
    /* fp64 -> bf16 rounds through fp32, as cpu_convert */
    gpu->convert(gpu, d16, LL_BF16, d64, LL_F64, n);
    gpu->download(gpu, h16, d16, n * 2);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += h16[i] != ll_f32_to_bf16((float)h64[i]);
    CHECK_MSG(bad == 0, "convert fp64 -> bf16: %zu elements differ", bad);
    gpu->free(gpu, d32), gpu->free(gpu, back), gpu->free(gpu, d16), gpu->free(gpu, d64);
    free(x), free(h16), free(hb), free(h64);
}

/* Adam on the bf16 backend: the weight copy is the updated master rounded to bf16. */
static void test_adam_copy(ll_backend *gpu) {
    const size_t n = 4099;
    float *p = host_rand(n), *g = host_rand(n);
    double st[LL_ST_N] = {0};
    st[LL_ST_GMUL] = 1, st[LL_ST_ADAM_T] = 1;
    real *P = put(gpu, LL_F32, p, n), *G = put(gpu, LL_F32, g, n);
    real *Mm = gpu->alloc(gpu, n * 4), *V = gpu->alloc(gpu, n * 4);
    ll_act *Pa = gpu->alloc(gpu, n * 2);
    double *S = gpu->alloc(gpu, sizeof st);
    gpu->upload(gpu, S, st, sizeof st);
    gpu->adam(gpu, P, Pa, G, Mm, V, n, 1e-3f, 0.9f, 0.98f, 1e-8f, 0.01f, S, LL_ST_ADAM_T);
    float *hp = get(gpu, LL_F32, P, n);
    uint16_t *ha = ll_malloc(n * 2);
    gpu->download(gpu, ha, Pa, n * 2);
    size_t bad = 0, moved = 0;
    for (size_t i = 0; i < n; i++) bad += ha[i] != ll_f32_to_bf16(hp[i]), moved += hp[i] != p[i];
    CHECK_MSG(bad == 0, "adam: %zu of %zu bf16 weight-copy elements are not the rounded master", bad, n);
    CHECK_MSG(moved > n / 2, "adam: only %zu of %zu weights moved", moved, n);
    gpu->free(gpu, P), gpu->free(gpu, G), gpu->free(gpu, Mm), gpu->free(gpu, V), gpu->free(gpu, Pa), gpu->free(gpu, S);
    free(p), free(g), free(hp), free(ha);
}

/* beam_topk on bf16 log-probabilities (many exact ties) against the CPU bf16 backend. */
static void test_topk_bf16(void) {
    ll_backend *be[2] = {ll_backend_cpu_precision(LL_BF16), ll_backend_cuda_precision(0, LL_BF16)};
    const int groups = 3, beam = 4, V = 3001, k = 8, rows = groups * beam;
    float *lp = host_rand((size_t)rows * V);
    for (size_t i = 0; i < (size_t)rows * V; i++) lp[i] = -4.0f * (lp[i] + 1.0f);
    double cum[12];
    for (int r = 0; r < rows; r++) cum[r] = r == 5 ? -INFINITY : -0.5 * (r % beam);
    const uint8_t mode[3] = {0, 1, 3};
    double *score[2];
    float *lpo[2];
    int32_t *flat[2];
    for (int j = 0; j < 2; j++) {
        ll_backend *b = be[j];
        void *L = put(b, LL_BF16, lp, (size_t)rows * V);
        double *C = b->alloc(b, sizeof cum), *S = b->alloc(b, sizeof(double) * groups * k);
        uint8_t *Md = b->alloc(b, sizeof mode);
        real *Lo = b->alloc(b, sizeof(real) * groups * k);
        int32_t *F = b->alloc(b, sizeof(int32_t) * groups * k);
        b->upload(b, C, cum, sizeof cum);
        b->upload(b, Md, mode, sizeof mode);
        b->beam_topk(b, S, Lo, F, L, C, Md, groups, beam, V, k, 1, 0, 1, 0, 2);
        score[j] = ll_malloc(sizeof(double) * groups * k);
        lpo[j] = ll_malloc(sizeof(float) * groups * k);
        flat[j] = ll_malloc(sizeof(int32_t) * groups * k);
        b->download(b, score[j], S, sizeof(double) * groups * k);
        b->download(b, lpo[j], Lo, sizeof(float) * groups * k);
        b->download(b, flat[j], F, sizeof(int32_t) * groups * k);
        b->free(b, L), b->free(b, C), b->free(b, S), b->free(b, Md), b->free(b, Lo), b->free(b, F);
    }
    int same = !memcmp(score[0], score[1], sizeof(double) * groups * k) &&
               !memcmp(lpo[0], lpo[1], sizeof(float) * groups * k) &&
               !memcmp(flat[0], flat[1], sizeof(int32_t) * groups * k);
    CHECK_MSG(same, "beam_topk bf16: CUDA differs from the CPU bf16 backend");
    for (int j = 0; j < 2; j++) free(score[j]), free(lpo[j]), free(flat[j]);
    free(lp);
}

int main(void) {
    gpu_or_skip();
    ll_backend *f32 = ll_backend_cuda_precision(0, LL_F32), *b16 = ll_backend_cuda_precision(0, LL_BF16);
    CHECK_MSG(f32 && b16, "ll_backend_cuda_precision: %s", ll_errbuf());
    if (!f32 || !b16) return tu_finish("gpu_test_typed_cuda");
    CHECK(f32 == ll_backend_cuda(0) && f32 != b16);
    CHECK(f32->act == LL_F32 && b16->act == LL_BF16);
    CHECK(ll_backend_missing(f32) == NULL && ll_backend_missing(b16) == NULL);
    CHECK(ll_backend_cuda_precision(0, LL_F64) == NULL);

    static const int shapes[][3] = {{7, 5, 3}, {37, 53, 29}, {128, 256, 64}, {64, 1000, 512}};
    for (int di = 0; di < 2; di++) {
        const ll_dtype act = di ? LL_BF16 : LL_F32;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    for (int mis = 0; mis < 2; mis++) {
                        const int pad = mis ? 3 : 0;
                        /* forward linear layers: C in the activation dtype, beta 0 */
                        test_gemm(act, act, LL_EPI_NONE, ta, tb, M, N, K, pad, 0, mis);
                        test_gemm(act, act, LL_EPI_BIAS, ta, tb, M, N, K, pad, 0, mis);
                        test_gemm(act, act, LL_EPI_BIAS_RELU, ta, tb, M, N, K, pad, 0, mis);
                        if (act == LL_BF16) /* an fp32 bias with bf16 C: not cuBLASLt's, still correct */
                            test_gemm_b(act, act, LL_EPI_BIAS, ta, tb, M, N, K, pad, 0, mis, LL_F32);
                        /* accumulating into C with a bias (the CPU adds it after the product) */
                        test_gemm(act, act, LL_EPI_BIAS, ta, tb, M, N, K, pad, 1, mis);
                        /* weight gradient: fp32 C, beta 1, bias gradient accumulated */
                        test_gemm(act, LL_F32, LL_EPI_BGRAD, ta, tb, M, N, K, pad, 1, mis);
                        test_gemm(act, LL_F32, LL_EPI_NONE, ta, tb, M, N, K, pad, 1, mis);
                    }
        }
        /* K = 0: C = relu?(beta C + bias) */
        test_gemm(act, act, LL_EPI_BIAS_RELU, 0, 0, 9, 17, 0, 2, 0.5f, 0);
        test_gemm(act, LL_F32, LL_EPI_BGRAD, 1, 0, 9, 17, 0, 0, 1, 0);
    }
    test_convert(f32);
    test_adam_copy(b16);
    test_topk_bf16();
    return tu_finish("gpu_test_typed_cuda");
}
