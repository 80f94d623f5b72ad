/* The CUDA backend against the CPU reference backend: layernorm forward and
 * backward (accumulating gradients), gemm in all four transpose combinations
 * (row-major, with padded leading dimensions), and the Philox stream bit for
 * bit.  Every buffer goes through the op interface (alloc/upload/download), so
 * this also shows the interface carries device memory and a stream.
 * Skips (77) when there is no CUDA device. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "ll_cuda.h"
#include "../util/testutil.h"
#include "gpu_util.h"

#define A_(p) ((ll_act *)(p)) /* fp32 activations */

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static float frand(void) { /* uniform [-1, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static float *host_rand(size_t n, float lo, float hi) {
    float *p = ll_malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * 0.5f * (frand() + 1.0f);
    return p;
}

/* A buffer on backend `be` holding a copy of host[0..n). */
static real *put(ll_backend *be, const float *host, size_t n) {
    real *p = be->alloc(be, n * sizeof(real));
    be->upload(be, p, host, n * sizeof(real));
    return p;
}
static float *get(ll_backend *be, const real *p, size_t n) {
    float *h = ll_malloc(n * sizeof(float) + 1);
    be->download(be, h, p, n * sizeof(real));
    return h;
}

#define TOL 1e-4

static void compare(const char *what, int N, int C, ll_backend *cpu, const real *pc, ll_backend *gpu,
                    const real *pg, size_t n) {
    float *a = get(cpu, pc, n), *b = get(gpu, pg, n);
    double e = gpu_rel_err(b, a, n);
    CHECK_MSG(e <= TOL, "%s (N=%d C=%d): relative error %.3g > %.1g", what, N, C, e, TOL);
    if (ll_verbosity > 1) fprintf(stderr, "  %s N=%d C=%d err %.3g\n", what, N, C, e);
    free(a);
    free(b);
}

static void test_layernorm(ll_backend *cpu, ll_backend *gpu, int N, int C) {
    size_t nx = (size_t)N * C;
    float *x = ll_malloc(nx * sizeof(float));
    for (int r = 0; r < N; r++) { /* per-row offset and spread: the statistics matter */
        float off = 3.0f * frand(), spread = 0.1f + 2.0f * (frand() + 1.0f);
        for (int c = 0; c < C; c++) x[(size_t)r * C + c] = off + spread * frand();
    }
    float *w = host_rand(C, 0.5f, 1.5f), *b = host_rand(C, -0.5f, 0.5f);
    float *dout = host_rand(nx, -1, 1), *dx0 = host_rand(nx, -1, 1);
    float *dw0 = host_rand(C, -1, 1), *db0 = host_rand(C, -1, 1);

    ll_backend *be[2] = {cpu, gpu};
    real *out[2], *mean[2], *rstd[2], *dx[2], *dw[2], *db[2];
    real *X[2], *W[2], *B[2], *DOUT[2];
    for (int k = 0; k < 2; k++) {
        ll_backend *e = be[k];
        X[k] = put(e, x, nx);
        W[k] = put(e, w, C);
        B[k] = put(e, b, C);
        DOUT[k] = put(e, dout, nx);
        out[k] = e->alloc(e, nx * sizeof(real));
        mean[k] = e->alloc(e, (size_t)N * sizeof(real));
        rstd[k] = e->alloc(e, (size_t)N * sizeof(real));
        dx[k] = put(e, dx0, nx); /* nonzero: backward must accumulate */
        dw[k] = put(e, dw0, C);
        db[k] = put(e, db0, C);
        e->layernorm_fwd(e, A_(out[k]), mean[k], rstd[k], A_(X[k]), W[k], B[k], N, C);
        e->layernorm_bwd(e, A_(dx[k]), dw[k], db[k], A_(DOUT[k]), A_(X[k]), W[k], mean[k], rstd[k], N, C);
        e->sync(e);
    }
    compare("layernorm out", N, C, cpu, out[0], gpu, out[1], nx);
    compare("layernorm mean", N, C, cpu, mean[0], gpu, mean[1], N);
    compare("layernorm rstd", N, C, cpu, rstd[0], gpu, rstd[1], N);
    compare("layernorm dx", N, C, cpu, dx[0], gpu, dx[1], nx);
    compare("layernorm dw", N, C, cpu, dw[0], gpu, dw[1], C);
    compare("layernorm db", N, C, cpu, db[0], gpu, db[1], C);

    /* The GPU reduction of dw/db is deterministic: a second identical backward
     * from the same start gives the same bits. */
    {
        real *dw2 = put(gpu, dw0, C), *db2 = put(gpu, db0, C), *dx2 = gpu->alloc(gpu, nx * sizeof(real));
        gpu->layernorm_bwd(gpu, A_(dx2), dw2, db2, A_(DOUT[1]), A_(X[1]), W[1], mean[1], rstd[1], N, C);
        float *a = get(gpu, dw[1], C), *a2 = get(gpu, dw2, C);
        float *c = get(gpu, db[1], C), *c2 = get(gpu, db2, C);
        CHECK_MSG(!memcmp(a, a2, C * sizeof(float)) && !memcmp(c, c2, C * sizeof(float)),
                  "layernorm dw/db not bit-reproducible (N=%d C=%d)", N, C);
        free(a), free(a2), free(c), free(c2);
        gpu->free(gpu, dw2);
        gpu->free(gpu, db2);
        gpu->free(gpu, dx2);
    }

    for (int k = 0; k < 2; k++) {
        ll_backend *e = be[k];
        real *bufs[] = {X[k], W[k], B[k], DOUT[k], out[k], mean[k], rstd[k], dx[k], dw[k], db[k]};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) e->free(e, bufs[i]);
    }
    free(x), free(w), free(b), free(dout), free(dx0), free(dw0), free(db0);
}

/* Row-major gemm with leading dimensions padded by `pad` columns. */
static void test_gemm(ll_backend *cpu, ll_backend *gpu, int ta, int tb, int M, int N, int K, int pad) {
    int a_rows = ta ? K : M, a_cols = ta ? M : K;
    int b_rows = tb ? N : K, b_cols = tb ? K : N;
    int lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
    size_t na = (size_t)a_rows * lda, nb = (size_t)b_rows * ldb, nc = (size_t)M * ldc;
    float *a = host_rand(na, -1, 1), *b = host_rand(nb, -1, 1), *c = host_rand(nc, -1, 1);
    real alpha = 0.75f, beta = 0.5f;
    real *A[2], *B[2], *Cm[2];
    ll_backend *be[2] = {cpu, gpu};
    for (int k = 0; k < 2; k++) {
        A[k] = put(be[k], a, na);
        B[k] = put(be[k], b, nb);
        Cm[k] = put(be[k], c, nc);
        const ll_gemm_desc g = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta,
                                .A = A[k], .a_type = LL_F32, .lda = lda, .B = B[k], .b_type = LL_F32, .ldb = ldb,
                                .C = Cm[k], .c_type = LL_F32, .ldc = ldc};
        be[k]->gemm(be[k], &g);
    }
    float *rc = get(cpu, Cm[0], nc), *gc = get(gpu, Cm[1], nc);
    /* compare only the M x N logical part; the padding must be untouched */
    float *r2 = ll_malloc((size_t)M * N * sizeof(float) + 1), *g2 = ll_malloc((size_t)M * N * sizeof(float) + 1);
    int pad_ok = 1;
    for (int i = 0; i < M; i++) {
        memcpy(r2 + (size_t)i * N, rc + (size_t)i * ldc, N * sizeof(float));
        memcpy(g2 + (size_t)i * N, gc + (size_t)i * ldc, N * sizeof(float));
        for (int j = N; j < ldc; j++) pad_ok &= gc[(size_t)i * ldc + j] == c[(size_t)i * ldc + j];
    }
    double e = gpu_rel_err(g2, r2, (size_t)M * N);
    CHECK_MSG(e <= TOL, "gemm ta=%d tb=%d M=%d N=%d K=%d pad=%d: relative error %.3g", ta, tb, M, N, K, pad, e);
    CHECK_MSG(pad_ok, "gemm ta=%d tb=%d wrote into the padding of C", ta, tb);
    if (ll_verbosity > 1) fprintf(stderr, "  gemm ta=%d tb=%d M=%d N=%d K=%d err %.3g\n", ta, tb, M, N, K, e);
    for (int k = 0; k < 2; k++) {
        be[k]->free(be[k], A[k]);
        be[k]->free(be[k], B[k]);
        be[k]->free(be[k], Cm[k]);
    }
    free(a), free(b), free(c), free(rc), free(gc), free(r2), free(g2);
}

static void test_philox(ll_backend *gpu, uint64_t seed, uint32_t sa, uint32_t sb, uint64_t offset, size_t n) {
    ll_philox r;
    ll_philox_init(&r, seed, sa, sb);
    uint32_t *du = gpu->alloc(gpu, n * sizeof(uint32_t));
    float *df = gpu->alloc(gpu, n * sizeof(float));
    ll_cuda_philox_fill_u32(gpu, du, n, &r, offset);
    ll_cuda_philox_fill_uniform(gpu, df, n, &r, offset);
    uint32_t *hu = ll_malloc(n * sizeof(uint32_t));
    float *hf = ll_malloc(n * sizeof(float));
    gpu->download(gpu, hu, du, n * sizeof(uint32_t));
    gpu->download(gpu, hf, df, n * sizeof(float));
    size_t bad_u = 0, bad_f = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = ll_philox_u32(&r, offset + i);
        float f = ll_philox_uniform(&r, offset + i);
        if (hu[i] != u) {
            if (!bad_u) fprintf(stderr, "philox u32 [%llu]: gpu %08x cpu %08x\n", (unsigned long long)(offset + i),
                                hu[i], u);
            bad_u++;
        }
        if (memcmp(&hf[i], &f, sizeof f)) bad_f++;
    }
    CHECK_MSG(bad_u == 0, "philox u32 seed=%llx offset=%llu: %zu of %zu words differ", (unsigned long long)seed,
              (unsigned long long)offset, bad_u, n);
    CHECK_MSG(bad_f == 0, "philox uniform seed=%llx offset=%llu: %zu of %zu floats differ",
              (unsigned long long)seed, (unsigned long long)offset, bad_f, n);
    gpu->free(gpu, du);
    gpu->free(gpu, df);
    free(hu), free(hf);
}

int main(void) {
    gpu_or_skip();
    ll_backend *cpu = ll_backend_cpu();
    ll_backend *gpu = ll_backend_cuda(0);
    CHECK_MSG(gpu != NULL, "ll_backend_cuda(0): %s", ll_errbuf());
    if (!gpu) return tu_finish("gpu_test_layernorm_cuda");
    CHECK(!strcmp(gpu->name, "cuda"));

    /* C <= LL_CUDA_LN_BWD_FUSED_MAX_C (1536): dx and the dw/db partials in one kernel; above: three */
    static const int shapes[][2] = {{1, 7}, {64, 512}, {333, 1024}, {4096, 256}, {8200, 128}, {5, 33},
                                    {17, 1000}, {130, 1536}, {9, 1537}, {70, 2048}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_layernorm(cpu, gpu, shapes[i][0], shapes[i][1]);

    static const int gshapes[][3] = {{1, 1, 1}, {7, 5, 3}, {37, 53, 29}, {128, 256, 64}, {64, 1000, 512}};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (size_t i = 0; i < sizeof gshapes / sizeof gshapes[0]; i++)
                for (int pad = 0; pad <= 3; pad += 3)
                    test_gemm(cpu, gpu, ta, tb, gshapes[i][0], gshapes[i][1], gshapes[i][2], pad);

    test_philox(gpu, 0, 0, 0, 0, 1);
    test_philox(gpu, 1234, LL_RNG_DROPOUT, 7, 0, 100003);
    test_philox(gpu, 0x0123456789ABCDEFULL, LL_RNG_GUMBEL, 0xFFFFFFFFu, 3, 4097);
    test_philox(gpu, 0xFFFFFFFFFFFFFFFFULL, 42, 1, (1ULL << 34) + 1, 1000);

    return tu_finish("gpu_test_layernorm_cuda");
}
