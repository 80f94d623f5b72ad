/* The CUDA backend, host side: an ll_backend whose buffers are device memory
 * and whose ops are enqueued on one stream per backend.
 *
 * impl holds the device id, a non-blocking cudaStream_t, a cuBLAS handle bound
 * to that stream, and a grow-only device scratch buffer for ops that need
 * temporary space (the layernorm dw/db reduction).  All work is ordered on the
 * stream; download() and sync() are the only points where the host waits
 * (upload() also waits, so the caller may reuse its host buffer at once).
 *
 * Ops not written yet stay NULL, so ll_backend_missing() names the first one
 * the model would need.  Compiled only into ll_cuda (float build with
 * LL_WITH_CUDA); src/backend/backend.c stubs ll_backend_cuda and
 * ll_cuda_device_count in builds without CUDA. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "cuda_internal.h"
#include "ll_cuda.h"

#ifdef LL_REAL_DOUBLE
#error "the CUDA backend is float-only; it must not be compiled into the LL_REAL_DOUBLE build"
#endif
_Static_assert(sizeof(real) == sizeof(float), "CUDA backend expects real == float");

#define LL_CUDA_MAX_DEVICES 64

typedef struct {
    int device;
    cudaStream_t stream;
    cublasHandle_t cublas;
    float *scratch; /* device, grow-only */
    size_t scratch_bytes;
} cuda_impl;

static void cuda_check(cudaError_t e, const char *what, const char *file, int line) {
    if (e != cudaSuccess) ll_die("CUDA error at %s:%d (%s): %s", file, line, what, cudaGetErrorString(e));
}
#define CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)

static const char *cublas_status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
    }
}
static void cublas_check(cublasStatus_t s, const char *what, const char *file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        ll_die("cuBLAS error at %s:%d (%s): %s (%d)", file, line, what, cublas_status_name(s), (int)s);
}
#define CUBLAS_CHECK(call) cublas_check((call), #call, __FILE__, __LINE__)

static cuda_impl *impl_of(ll_backend *be) { return (cuda_impl *)be->impl; }

/* Make the backend's device current for the calling thread (cheap when it already is). */
static cuda_impl *enter(ll_backend *be) {
    cuda_impl *im = impl_of(be);
    CUDA_CHECK(cudaSetDevice(im->device));
    return im;
}

/* ---- device count ------------------------------------------------------------ */

int ll_cuda_device_count(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver / no device: clear the error, report none */
        return 0;
    }
    return n < 0 ? 0 : n;
}

/* ---- memory ------------------------------------------------------------------ */

static void *cu_alloc(ll_backend *be, size_t bytes) {
    cuda_impl *im = enter(be);
    void *p = NULL;
    if (bytes == 0) bytes = 1; /* a unique, freeable pointer, as malloc(0) may not give one */
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        ll_die("CUDA out of memory on device %d: cannot allocate %zu bytes (%zu of %zu bytes free): %s; lower "
               "data.max_tokens (or data.max_len), or raise train.update_freq to keep the batch; lltrain --dry-run "
               "prints what a step needs",
               im->device, bytes, free_b, total_b, cudaGetErrorString(e));
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, im->stream));
    return p;
}

static void cu_free(ll_backend *be, void *p) {
    if (!p) return;
    cuda_impl *im = enter(be);
    /* work still queued on the stream may use p */
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
    CUDA_CHECK(cudaFree(p));
}

static void cu_upload(ll_backend *be, void *dst, const void *host_src, size_t bytes) {
    if (bytes == 0) return;
    cuda_impl *im = enter(be);
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, im->stream));
    /* the caller may free or reuse host_src as soon as we return */
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
}

static void cu_download(ll_backend *be, void *host_dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    cuda_impl *im = enter(be);
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, im->stream));
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
}

static void cu_memset0(ll_backend *be, void *p, size_t bytes) {
    if (bytes == 0) return;
    cuda_impl *im = enter(be);
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, im->stream));
}

static void cu_copy(ll_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    cuda_impl *im = enter(be);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, im->stream));
}

static void cu_sync(ll_backend *be) {
    cuda_impl *im = enter(be);
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
}

/* Device scratch of at least `bytes`, valid until the next call (stream-ordered). */
static float *scratch(cuda_impl *im, size_t bytes) {
    if (bytes <= im->scratch_bytes) return im->scratch;
    if (im->scratch) {
        CUDA_CHECK(cudaStreamSynchronize(im->stream));
        CUDA_CHECK(cudaFree(im->scratch));
        im->scratch = NULL;
        im->scratch_bytes = 0;
    }
    size_t want = bytes + bytes / 2; /* grow geometrically */
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, want);
    if (e != cudaSuccess) ll_die("CUDA out of memory on device %d: scratch of %zu bytes", im->device, want);
    im->scratch = (float *)p;
    im->scratch_bytes = want;
    return im->scratch;
}

/* ---- gemm -----------------------------------------------------------------------
 * Row-major C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C.  A row-major matrix
 * with leading dimension ld is, to column-major cuBLAS, its transpose with the
 * same ld, so we compute C^T = op(B)^T op(A)^T: swap the operands and M/N, keep
 * the transpose flags.  fp32 math (no TF32) until the mixed-precision issue. */
static void cu_gemm(ll_backend *be, int trans_a, int trans_b, int M, int N, int K, real alpha, const real *A,
                    int lda, const real *B, int ldb, real beta, real *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    cuda_impl *im = enter(be);
    float a = (float)alpha, b = (float)beta;
    CUBLAS_CHECK(cublasSgemm(im->cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                             N, M, K, &a, B, ldb, A, lda, &b, C, ldc));
}

/* ---- layer norm -------------------------------------------------------------- */

static void cu_layernorm_fwd(ll_backend *be, real *out, real *mean, real *rstd, const real *x, const real *w,
                             const real *b, int N, int C) {
    cuda_impl *im = enter(be);
    CUDA_CHECK(ll_cuda_layernorm_fwd(im->stream, out, mean, rstd, x, w, b, N, C));
}

static void cu_layernorm_bwd(ll_backend *be, real *dx, real *dw, real *db, const real *dout, const real *x,
                             const real *w, const real *mean, const real *rstd, int N, int C) {
    cuda_impl *im = enter(be);
    size_t nf = (dw || db) ? ll_cuda_layernorm_bwd_scratch_floats(N, C) : 0;
    float *s = nf ? scratch(im, nf * sizeof(float)) : NULL;
    CUDA_CHECK(ll_cuda_layernorm_bwd(im->stream, dx, dw, db, s, dout, x, w, mean, rstd, N, C));
}

/* ---- attention (kernels/attention.cu) ------------------------------------------ */

static void cu_attention_fwd(ll_backend *be, real *out, real *lse, const real *q, int q_stride, const real *k,
                             const real *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                             int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset) {
    cuda_impl *im = enter(be);
    CUDA_CHECK(ll_cuda_attention_fwd(im->stream, out, lse, q, q_stride, k, v, kv_stride, key_len, B, Tq, Tk, H, Dh,
                                     causal, attn_dropout, rng, rng_offset));
}

static void cu_attention_bwd(ll_backend *be, real *dq, real *dk, real *dv, const real *dout, const real *out,
                             const real *lse, const real *q, int q_stride, const real *k, const real *v,
                             int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh, int causal,
                             real attn_dropout, const ll_philox *rng, uint64_t rng_offset) {
    cuda_impl *im = enter(be);
    CUDA_CHECK(ll_cuda_attention_bwd(im->stream, dq, dk, dv, dout, out, lse, q, q_stride, k, v, kv_stride, key_len,
                                     B, Tq, Tk, H, Dh, causal, attn_dropout, rng, rng_offset));
}

/* ---- CUDA-only helpers (kernels/ll_cuda.h) ------------------------------------- */

cudaStream_t ll_cuda_stream(ll_backend *be) { return impl_of(be)->stream; }
cudaStream_t ll_cuda_enter(ll_backend *be) { return enter(be)->stream; }
void *ll_cuda_scratch(ll_backend *be, size_t bytes) { return scratch(impl_of(be), bytes); }
int ll_cuda_device(ll_backend *be) { return impl_of(be)->device; }

void ll_cuda_philox_fill_u32(ll_backend *be, uint32_t *dev_out, size_t n, const ll_philox *r, uint64_t offset) {
    cuda_impl *im = enter(be);
    CUDA_CHECK(ll_cuda_launch_philox_u32(im->stream, dev_out, n, *r, offset));
}

void ll_cuda_philox_fill_uniform(ll_backend *be, float *dev_out, size_t n, const ll_philox *r,
                                 uint64_t offset) {
    cuda_impl *im = enter(be);
    CUDA_CHECK(ll_cuda_launch_philox_uniform(im->stream, dev_out, n, *r, offset));
}

/* ---- construction ---------------------------------------------------------------
 * One backend per device, created on first use and kept for the life of the
 * process (like ll_backend_cpu()'s single instance). */

static ll_backend *g_backends[LL_CUDA_MAX_DEVICES];

ll_backend *ll_backend_cuda(int device) {
    int n = ll_cuda_device_count();
    if (n == 0) {
        ll_fail("no CUDA device is available (no GPU, or no NVIDIA driver)");
        return NULL;
    }
    if (device < 0 || device >= n || device >= LL_CUDA_MAX_DEVICES) {
        ll_fail("CUDA device %d does not exist (%d device%s present)", device, n, n == 1 ? "" : "s");
        return NULL;
    }
    if (g_backends[device]) return g_backends[device];

    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        ll_fail("cannot use CUDA device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    cuda_impl *im = ll_calloc(1, sizeof *im);
    im->device = device;
    e = cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(im);
        ll_fail("cannot create a CUDA stream on device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    cublasStatus_t s = cublasCreate(&im->cublas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(im->stream);
        free(im);
        ll_fail("cannot initialise cuBLAS on device %d: %s", device, cublas_status_name(s));
        return NULL;
    }
    CUBLAS_CHECK(cublasSetStream(im->cublas, im->stream));
    /* exact fp32 for now: the reference comparisons with the CPU backend rely on it */
    CUBLAS_CHECK(cublasSetMathMode(im->cublas, CUBLAS_DEFAULT_MATH));

    ll_backend *be = ll_calloc(1, sizeof *be);
    be->name = "cuda";
    be->impl = im;
    be->alloc = cu_alloc;
    be->free = cu_free;
    be->upload = cu_upload;
    be->download = cu_download;
    be->memset0 = cu_memset0;
    be->copy = cu_copy;
    be->sync = cu_sync;
    be->gemm = cu_gemm;
    be->layernorm_fwd = cu_layernorm_fwd;
    be->layernorm_bwd = cu_layernorm_bwd;
    be->attention_fwd = cu_attention_fwd;
    be->attention_bwd = cu_attention_bwd;
    /* the other ops, one registration per file (cuda_ops_*.c); gemm_lt
     * replaces the cublasSgemm gemm above with cuBLASLt */
    ll_cuda_register_elementwise(be);
    ll_cuda_register_embed(be);
    ll_cuda_register_loss(be);
    ll_cuda_register_step(be);
    ll_cuda_register_latent(be);
    if (ll_cuda_register_gemm_lt(be) != 0) return NULL; /* errbuf says why; the half-built backend is leaked */
    g_backends[device] = be;
    return be;
}
