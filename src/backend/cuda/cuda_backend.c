/* The CUDA backend, host side: an ll_backend whose buffers are device memory
 * and whose ops are enqueued on one stream per device.
 *
 * impl holds the device id, a non-blocking cudaStream_t and a grow-only device
 * scratch buffer for ops that need temporary space.  All work is ordered on
 * the stream; download() and sync() are the only points where the host waits
 * (upload() also waits, so the caller may reuse its host buffer at once).
 *
 * Two backend objects per device, one per activation dtype (fp32, bf16), share
 * that impl: models of both dtypes coexist in a process (the tests compare
 * them), and sharing the stream keeps their work ordered and the scratch safe.
 * Every op dispatches on be->act to the fp32 or bf16 instance of its kernel.
 *
 * This file has the memory ops, convert, layer norm and attention; the other
 * ops are registered from cuda_ops_*.c and cuda_gemm_lt.c, the step as a CUDA
 * graph from cuda_graph.c (cuda_impl.h: the state the two share).  Compiled only into
 * ll_cuda (float build with LL_WITH_CUDA); src/backend/backend.c stubs
 * ll_backend_cuda* and ll_cuda_device_count in builds without CUDA. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "cuda_impl.h"
#include "ll_cuda.h"

#ifdef LL_REAL_DOUBLE
#error "the CUDA backend is float-only; it must not be compiled into the LL_REAL_DOUBLE build"
#endif
_Static_assert(sizeof(real) == sizeof(float), "CUDA backend expects real == float");

#define LL_CUDA_MAX_DEVICES 64

int ll_cuda_env_on(const char *name, int *cached) {
    if (*cached < 0) {
        const char *v = getenv(name);
        *cached = !(v && !strcmp(v, "0"));
    }
    return *cached;
}

int ll_cuda_sync_checking(void) {
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("LL_CUDA_SYNC_CHECK");
        on = v && *v && strcmp(v, "0");
    }
    return on;
}

void ll_cuda_sync_check(const char *what, const char *file, int line) {
    if (!ll_cuda_sync_checking()) return;
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess)
        ll_die("CUDA error after %s (%s:%d; LL_CUDA_SYNC_CHECK=1 synchronises after every op: this op or work it "
               "queued failed): %s",
               what, file, line, cudaGetErrorString(e));
}

#define CUDA_CHECK(call) LL_CU(call)

/* Inside a captured step a host transfer or wait would happen once, at the
 * capture, not at each launch of the graph: a bug in the caller, never data. */
static void no_capture(cuda_impl *im, const char *what) {
    if (im->graph.capturing)
        ll_die("CUDA backend: %s inside a step captured as a CUDA graph (between graph_begin and graph_end); "
               "train.cuda_graphs: false runs the step without graphs",
               what);
}

/* Make the backend's device current for the calling thread (cheap when it already is). */
cuda_impl *ll_cuda_impl_enter(ll_backend *be) {
    cuda_impl *im = ll_cuda_impl(be);
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
    cuda_impl *im = ll_cuda_impl_enter(be);
    void *p = NULL;
    if (bytes == 0) bytes = 1; /* a unique, freeable pointer, as malloc(0) may not give one */
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        ll_die("CUDA out of memory on device %d: cannot allocate %zu bytes (%zu of %zu bytes free): %s; lower "
               "data.max_tokens (or data.max_len), or raise train.update_freq to keep the batch; set "
               "train.checkpoint_activations true (each layer recomputed in the backward: a fifth or less of the "
               "activations) or train.precision bf16; lltrain --dry-run prints what a step needs",
               im->device, bytes, free_b, total_b, cudaGetErrorString(e));
    }
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, im->stream));
    return p;
}

static void cu_free(ll_backend *be, void *p) {
    if (!p) return;
    cuda_impl *im = ll_cuda_impl_enter(be);
    no_capture(im, "free");
    ll_cuda_side_join(be);
    /* work still queued on the stream may use p */
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
    CUDA_CHECK(cudaFree(p));
}

/* The caller may free or reuse host_src as soon as this returns.  Small
 * uploads (the packed batch of every update) are copied into a pinned staging
 * slot and queued: the host does not wait for the GPU, it only waits, rarely,
 * for the copy that last used the slot.  Large ones are synchronous. */
static void cu_upload(ll_backend *be, void *dst, const void *host_src, size_t bytes) {
    if (bytes == 0) return;
    cuda_impl *im = ll_cuda_impl_enter(be);
    no_capture(im, "upload");
    if (bytes > STAGE_MAX) {
        CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, im->stream));
        CUDA_CHECK(cudaStreamSynchronize(im->stream));
        return;
    }
    pthread_mutex_lock(&im->stage_mu);
    const int k = im->stage_next;
    im->stage_next = (k + 1) % STAGE_SLOTS;
    if (im->stage[k].used) CUDA_CHECK(cudaEventSynchronize(im->stage[k].done)); /* its last copy has run */
    if (im->stage[k].cap < bytes) {
        if (im->stage[k].host) CUDA_CHECK(cudaFreeHost(im->stage[k].host));
        im->stage[k].cap = bytes < ((size_t)1 << 20) ? (size_t)1 << 20 : bytes;
        CUDA_CHECK(cudaMallocHost(&im->stage[k].host, im->stage[k].cap));
    }
    memcpy(im->stage[k].host, host_src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, im->stage[k].host, bytes, cudaMemcpyHostToDevice, im->stream));
    CUDA_CHECK(cudaEventRecord(im->stage[k].done, im->stream));
    im->stage[k].used = 1;
    pthread_mutex_unlock(&im->stage_mu);
}

static void cu_download(ll_backend *be, void *host_dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    cuda_impl *im = ll_cuda_impl_enter(be);
    no_capture(im, "download");
    ll_cuda_side_join(be);
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, im->stream));
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
}

static void cu_download_start(ll_backend *be, const void *src, size_t bytes) {
    cuda_impl *im = ll_cuda_impl_enter(be);
    no_capture(im, "download_start");
    ll_cuda_side_join(be);
    if (im->late.pending) ll_die("CUDA backend: download_start while another is in flight (one at a time)");
    if (im->late.cap < bytes) {
        if (im->late.host) CUDA_CHECK(cudaFreeHost(im->late.host));
        im->late.cap = bytes < 4096 ? 4096 : bytes;
        CUDA_CHECK(cudaMallocHost(&im->late.host, im->late.cap));
    }
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(im->late.host, src, bytes, cudaMemcpyDeviceToHost, im->stream));
    CUDA_CHECK(cudaEventRecord(im->late.done, im->stream));
    im->late.bytes = bytes;
    im->late.pending = 1;
}

static void cu_download_finish(ll_backend *be, void *host_dst, size_t bytes) {
    cuda_impl *im = ll_cuda_impl_enter(be);
    no_capture(im, "download_finish");
    if (!im->late.pending || bytes > im->late.bytes)
        ll_die("CUDA backend: download_finish of %zu bytes without a download_start of as many", bytes);
    CUDA_CHECK(cudaEventSynchronize(im->late.done));
    memcpy(host_dst, im->late.host, bytes);
    im->late.pending = 0;
}

static void cu_memset0(ll_backend *be, void *p, size_t bytes) {
    if (bytes == 0) return;
    cuda_impl *im = ll_cuda_impl_enter(be);
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, im->stream));
}

static void cu_copy(ll_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    cuda_impl *im = ll_cuda_impl_enter(be);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, im->stream));
}

static void cu_sync(ll_backend *be) {
    cuda_impl *im = ll_cuda_impl_enter(be);
    no_capture(im, "sync");
    ll_cuda_side_join(be);
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
}

/* Device scratch sc of at least `bytes` (grown on im->stream) */
static float *scratch_of(cuda_impl *im, cuda_scratch *sc, size_t bytes) {
    if (bytes <= sc->bytes) return sc->p;
    if (sc->p && im->graph.capturing) { /* the recorded ops use it: freed after the launch */
        if (im->graph.n_retired == GRAPH_RETIRED) ll_die("CUDA backend: scratch grew too often in one captured step");
        im->graph.retired[im->graph.n_retired++] = sc->p;
        sc->p = NULL;
        sc->bytes = 0;
    }
    if (sc->p) { /* (only this lane's ops use it, all on im->stream) */
        CUDA_CHECK(cudaStreamSynchronize(im->stream));
        CUDA_CHECK(cudaFree(sc->p));
        sc->p = NULL;
        sc->bytes = 0;
    }
    size_t want = bytes + bytes / 2; /* grow geometrically */
    im->graph.mem_gen++;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, want);
    if (e != cudaSuccess) ll_die("CUDA out of memory on device %d: scratch of %zu bytes", im->device, want);
    sc->p = (float *)p;
    sc->bytes = want;
    return sc->p;
}
/* The lane's scratch of at least `bytes`, valid until the next call (stream-ordered). */
static float *scratch(cuda_impl *im, size_t bytes) { return scratch_of(im, &im->scratch[im->lane], bytes); }

/* ---- convert (kernels/convert.cu) ---------------------------------------------- */

static void cu_convert(ll_backend *be, void *dst, ll_dtype dt, const void *src, ll_dtype st, size_t n) {
    cuda_impl *im = ll_cuda_impl_enter(be);
    CUDA_CHECK(ll_cuda_convert(im->stream, dst, dt, src, st, n));
}

/* ---- layer norm (kernels/layernorm.cu) ------------------------------------------ */

static void cu_layernorm_fwd(ll_backend *be, ll_act *out, real *mean, real *rstd, const ll_act *x, const real *w,
                             const real *b, int N, int C) {
    cuda_impl *im = ll_cuda_impl_enter(be);
    CUDA_CHECK(ll_cuda_layernorm_fwd_dt(im->stream, ll_cuda_act(be), out, mean, rstd, x, w, b, N, C));
}

static void cu_layernorm_bwd(ll_backend *be, ll_act *dx, real *dw, real *db, const ll_act *dout, const ll_act *x,
                             const real *w, const real *mean, const real *rstd, int N, int C) {
    cuda_impl *im = ll_cuda_impl_enter(be);
    size_t nf = (dw || db) ? ll_cuda_layernorm_bwd_scratch_floats(N, C) : 0;
    /* inside a stack's layers the column sums' finish runs beside the chain (cuda_side.c), on
     * partials in a slot of their own: the next layer norm's rows may overwrite the lane's scratch
     * before it ran */
    const int slot = nf ? ll_cuda_side_slot(be) : -1;
    float *s = !nf ? NULL : slot >= 0 ? scratch_of(im, &im->scratch[2 + slot], nf * sizeof(float))
                                      : scratch(im, nf * sizeof(float));
    CUDA_CHECK(ll_cuda_layernorm_bwd_parts_dt(im->stream, ll_cuda_act(be), dx, dw, db, s, dout, x, w, mean, rstd, N,
                                              C));
    if (slot >= 0 && ll_cuda_side_begin(be, 0)) {
        CUDA_CHECK(ll_cuda_layernorm_bwd_finish(im->stream, dw, db, s, N, C)); /* (im->stream: the side's now) */
        ll_cuda_side_end(be);
    } else {
        CUDA_CHECK(ll_cuda_layernorm_bwd_finish(im->stream, dw, db, s, N, C));
    }
}

/* ---- attention (kernels/attention.cu) ------------------------------------------ */

void ll_cuda_head_size_ok(const char *op, int Dh) {
    if (Dh > 128)
        ll_die("%s: head size %d (model.d_model / model.heads) exceeds the CUDA kernels' limit of 128; use more heads",
               op, Dh);
}

static void cu_attention_fwd(ll_backend *be, ll_act *out, real *lse, const ll_act *q, int q_stride, const ll_act *k,
                             const ll_act *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                             int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset) {
    ll_cuda_head_size_ok("attention", Dh);
    cuda_impl *im = ll_cuda_impl_enter(be);
    CUDA_CHECK(ll_cuda_attention_fwd_dt(im->stream, ll_cuda_act(be), out, lse, q, q_stride, k, v, kv_stride, key_len,
                                        B, Tq, Tk, H, Dh, causal, attn_dropout, rng, rng_offset));
}

static void cu_attention_bwd(ll_backend *be, ll_act *dq, ll_act *dk, ll_act *dv, const ll_act *dout,
                             const ll_act *out, const real *lse, const ll_act *q, int q_stride, const ll_act *k,
                             const ll_act *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                             int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset) {
    ll_cuda_head_size_ok("attention", Dh);
    cuda_impl *im = ll_cuda_impl_enter(be);
    CUDA_CHECK(ll_cuda_attention_bwd_dt(im->stream, ll_cuda_act(be), dq, dk, dv, dout, out, lse, q, q_stride, k, v,
                                        kv_stride, key_len, B, Tq, Tk, H, Dh, causal, attn_dropout, rng,
                                        rng_offset));
}

/* ---- CUDA-only helpers (kernels/ll_cuda.h) ------------------------------------- */

cudaStream_t ll_cuda_stream(ll_backend *be) { return ll_cuda_impl(be)->stream; }
cudaStream_t ll_cuda_enter(ll_backend *be) { return ll_cuda_impl_enter(be)->stream; }
void ll_cuda_set_lane(ll_backend *be, cudaStream_t s, int lane) {
    ll_cuda_impl(be)->stream = s;
    ll_cuda_impl(be)->lane = lane;
}
int ll_cuda_cond_depth(ll_backend *be) { return ll_cuda_impl(be)->graph.cond_depth; }
void *ll_cuda_scratch(ll_backend *be, size_t bytes) { return scratch(ll_cuda_impl(be), bytes); }
int ll_cuda_device(ll_backend *be) { return ll_cuda_impl(be)->device; }
unsigned *ll_cuda_ticket(ll_backend *be) { return ll_cuda_impl(be)->ticket; }

void ll_cuda_check_launch(cudaError_t e, const char *op) {
    if (e != cudaSuccess) ll_die("CUDA error in %s: %s", op, cudaGetErrorString(e));
    ll_cuda_sync_check(op, __FILE__, __LINE__);
}

void ll_cuda_philox_fill_u32(ll_backend *be, uint32_t *dev_out, size_t n, const ll_philox *r, uint64_t offset) {
    cuda_impl *im = ll_cuda_impl_enter(be);
    CUDA_CHECK(ll_cuda_launch_philox_u32(im->stream, dev_out, n, *r, offset));
}

void ll_cuda_philox_fill_uniform(ll_backend *be, float *dev_out, size_t n, const ll_philox *r,
                                 uint64_t offset) {
    cuda_impl *im = ll_cuda_impl_enter(be);
    CUDA_CHECK(ll_cuda_launch_philox_uniform(im->stream, dev_out, n, *r, offset));
}

/* ---- construction ---------------------------------------------------------------
 * One impl (stream, scratch) per device and one backend per (device, dtype),
 * created on first use and kept for the life of the process (like
 * ll_backend_cpu_precision()'s instances). */

static cuda_impl *g_impls[LL_CUDA_MAX_DEVICES];
static ll_backend *g_backends[LL_CUDA_MAX_DEVICES][2]; /* [device][0: fp32, 1: bf16] */

static cuda_impl *impl_new(int device) {
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        ll_fail("cannot use CUDA device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    cuda_impl *im = ll_calloc(1, sizeof *im);
    im->device = device;
    e = ll_cuda_stream_create(&im->stream, 0); /* (the chain's priority: cuda_side.c) */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        free(im);
        ll_fail("cannot create a CUDA stream on device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    for (int k = 0; k < STAGE_SLOTS; k++)
        if ((e = cudaEventCreateWithFlags(&im->stage[k].done, cudaEventDisableTiming)) != cudaSuccess) {
            (void)cudaGetLastError();
            ll_fail("cannot create a CUDA event on device %d: %s", device, cudaGetErrorString(e));
            return NULL;
        }
    if ((e = cudaEventCreateWithFlags(&im->late.done, cudaEventDisableTiming)) != cudaSuccess) {
        (void)cudaGetLastError();
        ll_fail("cannot create a CUDA event on device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    /* the residual backward's counter (zeroed below); before that, the scratch of the start-up probe
     * of programmatic dependent launch (kernels/launch.cu) */
    if ((e = cudaMalloc((void **)&im->ticket, sizeof *im->ticket)) != cudaSuccess) {
        (void)cudaGetLastError();
        ll_fail("cannot allocate a counter on CUDA device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    int refused = 0;
    if ((e = ll_cuda_pdl_probe(im->stream, (int *)im->ticket, &refused)) != cudaSuccess) {
        (void)cudaGetLastError();
        ll_fail("CUDA device %d failed its first kernels: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    if (refused) {
        (void)cudaGetLastError();
        ll_log("CUDA device %d: programmatic dependent launch %s: kernels launch without it from here "
               "(as with LL_CUDA_PDL=0)",
               device, refused > 0 ? cudaGetErrorString((cudaError_t)refused) : "gave a wrong value");
    }
    if ((e = cudaMemset(im->ticket, 0, sizeof *im->ticket)) != cudaSuccess) {
        (void)cudaGetLastError();
        ll_fail("cannot allocate a counter on CUDA device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    pthread_mutex_init(&im->stage_mu, NULL);
    return im;
}

ll_backend *ll_backend_cuda_precision(int device, ll_dtype act) {
    if (act != LL_F32 && act != LL_BF16) {
        ll_fail("the CUDA backend has fp32 or bf16 activations, not %s", ll_dtype_str(act));
        return NULL;
    }
    int n = ll_cuda_device_count();
    if (n == 0) {
        ll_fail("no CUDA device is available (no GPU, or no NVIDIA driver)");
        return NULL;
    }
    if (device < 0 || device >= n || device >= LL_CUDA_MAX_DEVICES) {
        ll_fail("CUDA device %d does not exist (%d device%s present)", device, n, n == 1 ? "" : "s");
        return NULL;
    }
    const int slot = act == LL_BF16;
    if (g_backends[device][slot]) return g_backends[device][slot];
    if (!g_impls[device] && !(g_impls[device] = impl_new(device))) return NULL;

    ll_backend *be = ll_calloc(1, sizeof *be);
    be->name = "cuda";
    be->impl = g_impls[device];
    be->act = act;
    be->alloc = cu_alloc;
    be->free = cu_free;
    be->upload = cu_upload;
    be->download = cu_download;
    be->memset0 = cu_memset0;
    be->copy = cu_copy;
    be->sync = cu_sync;
    be->download_start = cu_download_start;
    be->download_finish = cu_download_finish;
    ll_cuda_register_graph(be); /* graph_begin/end/replay/stats, cond_if/else/end: cuda_graph.c */
    be->join = ll_cuda_side_join;
    be->convert = cu_convert;
    be->layernorm_fwd = cu_layernorm_fwd;
    be->layernorm_bwd = cu_layernorm_bwd;
    be->attention_fwd = cu_attention_fwd;
    be->attention_bwd = cu_attention_bwd;
    /* the other ops, one registration per file (cuda_ops_*.c, cuda_gemm_lt.c) */
    ll_cuda_register_elementwise(be);
    ll_cuda_register_embed(be);
    ll_cuda_register_loss(be);
    ll_cuda_register_step(be);
    ll_cuda_register_latent(be);
    ll_cuda_register_decode(be);
    if (ll_cuda_register_gemm_lt(be) != 0) { /* errbuf says why */
        free(be);
        return NULL;
    }
    ll_cuda_register_relu_mask(be); /* (after the gemm: it probes cuBLASLt) */
    g_backends[device][slot] = be;
    return be;
}

/* fp32 activations: the parity reference against the CPU backend. */
ll_backend *ll_backend_cuda(int device) { return ll_backend_cuda_precision(device, LL_F32); }
