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
 * ops are registered from cuda_ops_*.c and cuda_gemm_lt.c.  Compiled only into
 * ll_cuda (float build with LL_WITH_CUDA); src/backend/backend.c stubs
 * ll_backend_cuda* and ll_cuda_device_count in builds without CUDA. */
#include <cuda_runtime_api.h>
#include <pthread.h>
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

/* Uploads up to this size go through pinned staging buffers, asynchronously;
 * larger ones (checkpoints, embeddings) copy synchronously from the caller's
 * memory, as before. */
#define STAGE_MAX ((size_t)64 << 20)
#define STAGE_SLOTS 2
/* executable graphs kept, one per step fingerprint, least recently used out
 * (LL_CUDA_GRAPHS_KEPT: fewer, 1 to GRAPH_CACHE) */
#define GRAPH_CACHE 32
#define GRAPH_RETIRED 16
#define COND_MAX 8 /* conditionals nested in a captured step */
/* graphs off for good when more than GRAPH_BUILT_MAX of the last GRAPH_WINDOW steps had a layer
 * structure no kept graph has (LayerDrop): building a graph costs more than launching its kernels
 * one by one.  (A new batch shape of a known structure is no such step: its graph is kept.) */
#define GRAPH_WINDOW 16
#define GRAPH_BUILT_MAX 8

typedef struct {
    float *p; /* device, grow-only */
    size_t bytes;
} cuda_scratch;

typedef struct {
    int device;
    cudaStream_t stream; /* where ops queue now: the device's stream, a conditional body's, or the side's */
    int lane;            /* 0, or 1 while an op queues on the side stream (cuda_side.c): its own scratch */
    /* [lane]: ops on the two streams may run at once; [2 + slot]: the side's slots (ll_cuda_side_slot) */
    cuda_scratch scratch[2 + LL_CUDA_SIDE_SLOTS];
    unsigned *ticket; /* device, 0 between launches: residual_bwd's last-block counter (ll_cuda_ticket) */
    /* pinned upload staging, a ring: a slot is reused once its copy has run */
    struct {
        void *host; /* cudaMallocHost, grow-only */
        size_t cap;
        cudaEvent_t done;
        int used;
    } stage[STAGE_SLOTS];
    int stage_next;
    pthread_mutex_t stage_mu;
    /* download_start/finish: one copy in flight into pinned memory */
    struct {
        void *host; /* cudaMallocHost, grow-only */
        size_t cap, bytes;
        cudaEvent_t done;
        int pending;
    } late;
    /* graph_begin/graph_end (the training step as a CUDA graph) */
    struct {
        int capturing;
        int off;              /* given up (GRAPH_BUILT_MAX): graph_begin says no */
        uint32_t new_mask;  /* the last GRAPH_WINDOW steps: bit set = a structure no graph had */
        struct {
            uint64_t fp, family, used;
            uint64_t mem_gen; /* of the backend buffers the graph uses (the scratch) */
            uint64_t kernels; /* graph_kernels() of the graph in exec (0: unknown, never updated) */
            cudaGraphExec_t exec;
        } cache[GRAPH_CACHE];
        uint64_t clock, steps;
        uint64_t mem_gen; /* +1 whenever the scratch moves: kept graphs point at the old one */
        /* scratch buffers outgrown during a capture: the graph still uses them */
        void *retired[GRAPH_RETIRED];
        int n_retired;
        ll_graph_stats st;
        /* cond_if: the bodies being captured, each on its own stream (the ops
         * queue on im->stream, which is the innermost body's meanwhile) */
        struct {
            cudaStream_t parent, body;
            cudaGraph_t bodies[2];
            int in_else;
        } cond[COND_MAX];
        cudaStream_t cond_streams[COND_MAX]; /* created on first use, one per depth */
        int cond_depth, had_cond;
        int spoiled; /* a conditional could not be built: graph_end discards the capture */
        char spoil_why[160];
    } graph;
} cuda_impl;

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

static void cuda_check(cudaError_t e, const char *what, const char *file, int line) {
    if (e != cudaSuccess) ll_die("CUDA error at %s:%d (%s): %s", file, line, what, cudaGetErrorString(e));
    ll_cuda_sync_check(what, file, line);
}
#define CUDA_CHECK(call) cuda_check((call), #call, __FILE__, __LINE__)

static cuda_impl *impl_of(ll_backend *be) { return (cuda_impl *)be->impl; }

/* Inside a captured step a host transfer or wait would happen once, at the
 * capture, not at each launch of the graph: a bug in the caller, never data. */
static void no_capture(cuda_impl *im, const char *what) {
    if (im->graph.capturing)
        ll_die("CUDA backend: %s inside a step captured as a CUDA graph (between graph_begin and graph_end); "
               "train.cuda_graphs: false runs the step without graphs",
               what);
}

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
    cuda_impl *im = enter(be);
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
    cuda_impl *im = enter(be);
    no_capture(im, "download");
    ll_cuda_side_join(be);
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, im->stream));
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
}

static void cu_download_start(ll_backend *be, const void *src, size_t bytes) {
    cuda_impl *im = enter(be);
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
    cuda_impl *im = enter(be);
    no_capture(im, "download_finish");
    if (!im->late.pending || bytes > im->late.bytes)
        ll_die("CUDA backend: download_finish of %zu bytes without a download_start of as many", bytes);
    CUDA_CHECK(cudaEventSynchronize(im->late.done));
    memcpy(host_dst, im->late.host, bytes);
    im->late.pending = 0;
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
    cuda_impl *im = enter(be);
    CUDA_CHECK(ll_cuda_convert(im->stream, dst, dt, src, st, n));
}

/* ---- layer norm (kernels/layernorm.cu) ------------------------------------------ */

static void cu_layernorm_fwd(ll_backend *be, ll_act *out, real *mean, real *rstd, const ll_act *x, const real *w,
                             const real *b, int N, int C) {
    cuda_impl *im = enter(be);
    CUDA_CHECK(ll_cuda_layernorm_fwd_dt(im->stream, ll_cuda_act(be), out, mean, rstd, x, w, b, N, C));
}

static void cu_layernorm_bwd(ll_backend *be, ll_act *dx, real *dw, real *db, const ll_act *dout, const ll_act *x,
                             const real *w, const real *mean, const real *rstd, int N, int C) {
    cuda_impl *im = enter(be);
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

static void cu_attention_fwd(ll_backend *be, ll_act *out, real *lse, const ll_act *q, int q_stride, const ll_act *k,
                             const ll_act *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                             int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset) {
    cuda_impl *im = enter(be);
    CUDA_CHECK(ll_cuda_attention_fwd_dt(im->stream, ll_cuda_act(be), out, lse, q, q_stride, k, v, kv_stride, key_len,
                                        B, Tq, Tk, H, Dh, causal, attn_dropout, rng, rng_offset));
}

static void cu_attention_bwd(ll_backend *be, ll_act *dq, ll_act *dk, ll_act *dv, const ll_act *dout,
                             const ll_act *out, const real *lse, const ll_act *q, int q_stride, const ll_act *k,
                             const ll_act *v, int kv_stride, const int *key_len, int B, int Tq, int Tk, int H, int Dh,
                             int causal, real attn_dropout, const ll_philox *rng, uint64_t rng_offset) {
    cuda_impl *im = enter(be);
    CUDA_CHECK(ll_cuda_attention_bwd_dt(im->stream, ll_cuda_act(be), dq, dk, dv, dout, out, lse, q, q_stride, k, v,
                                        kv_stride, key_len, B, Tq, Tk, H, Dh, causal, attn_dropout, rng,
                                        rng_offset));
}

/* ---- CUDA-only helpers (kernels/ll_cuda.h) ------------------------------------- */

cudaStream_t ll_cuda_stream(ll_backend *be) { return impl_of(be)->stream; }
cudaStream_t ll_cuda_enter(ll_backend *be) { return enter(be)->stream; }
void ll_cuda_set_lane(ll_backend *be, cudaStream_t s, int lane) {
    impl_of(be)->stream = s;
    impl_of(be)->lane = lane;
}
int ll_cuda_cond_depth(ll_backend *be) { return impl_of(be)->graph.cond_depth; }
void *ll_cuda_scratch(ll_backend *be, size_t bytes) { return scratch(impl_of(be), bytes); }
int ll_cuda_device(ll_backend *be) { return impl_of(be)->device; }
unsigned *ll_cuda_ticket(ll_backend *be) { return impl_of(be)->ticket; }

void ll_cuda_check_launch(cudaError_t e, const char *op) {
    if (e != cudaSuccess) ll_die("CUDA error in %s: %s", op, cudaGetErrorString(e));
    ll_cuda_sync_check(op, __FILE__, __LINE__);
}

void ll_cuda_philox_fill_u32(ll_backend *be, uint32_t *dev_out, size_t n, const ll_philox *r, uint64_t offset) {
    cuda_impl *im = enter(be);
    CUDA_CHECK(ll_cuda_launch_philox_u32(im->stream, dev_out, n, *r, offset));
}

void ll_cuda_philox_fill_uniform(ll_backend *be, float *dev_out, size_t n, const ll_philox *r,
                                 uint64_t offset) {
    cuda_impl *im = enter(be);
    CUDA_CHECK(ll_cuda_launch_philox_uniform(im->stream, dev_out, n, *r, offset));
}

/* ---- the step as a CUDA graph ------------------------------------------------------
 * Captured in relaxed mode (the arena and the scratch may still grow inside a
 * step: cudaMalloc is allowed there, the frees wait for the launch), kept per
 * fingerprint.  A step whose fingerprint is kept is launched as it is
 * (graph_replay); a new one is captured and, when no slot is free, applied to
 * the family's least recently used graph (cudaGraphExecUpdate: new pointers,
 * shapes, kernels) or instantiated, then launched on the stream. */

static int graphs_kept(void) {
    static int n = 0;
    if (!n) {
        const char *v = getenv("LL_CUDA_GRAPHS_KEPT");
        n = v && *v ? atoi(v) : GRAPH_CACHE;
        if (n < 1 || n > GRAPH_CACHE) ll_die("LL_CUDA_GRAPHS_KEPT=%s: want 1 to %d", v, GRAPH_CACHE);
    }
    return n;
}

static int cu_graph_begin(ll_backend *be) {
    cuda_impl *im = enter(be);
    if (im->graph.capturing) ll_die("CUDA backend: graph_begin inside a captured step");
    if (im->graph.off || ll_cuda_sync_checking()) return -1; /* (the check synchronises after every op) */
    ll_cuda_side_join(be); /* (a capture may not wait for work outside it) */
    CUDA_CHECK(cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeRelaxed));
    im->graph.capturing = 1;
    im->graph.had_cond = im->graph.spoiled = 0;
    return 0;
}

/* An IF node with an else body in the graph being captured: a one-thread
 * kernel sets its handle from *run when the graph runs, the node follows it,
 * and the ops up to cond_else / cond_end are captured into the two bodies
 * (cudaStreamBeginCaptureToGraph on a stream of this depth).  A CUDA error on
 * the way (a driver without conditional nodes, a body rule) spoils the capture
 * instead of stopping the run: the ops go on into the step's capture as they
 * come, graph_end discards it, and the step runs without a graph. */
static int cond_spoil(cuda_impl *im, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    if (!im->graph.spoiled) snprintf(im->graph.spoil_why, sizeof im->graph.spoil_why, "%s: %s", what, cudaGetErrorString(e));
    im->graph.spoiled = 1;
    return -1;
}
#define COND_TRY(call) cond_spoil(im, (call), #call)

static int cu_cond_if(ll_backend *be, const uint8_t *run, int host_run) {
    (void)host_run;
    cuda_impl *im = enter(be);
    if (!im->graph.capturing) return -1; /* the caller queues the host's branch */
    const int d = im->graph.cond_depth;
    if (d == COND_MAX) ll_die("CUDA backend: conditionals nested deeper than %d", COND_MAX);
    im->graph.cond_depth = d + 1;
    im->graph.cond[d].body = NULL; /* (spoiled: both branches go on into the enclosing capture) */
    im->graph.cond[d].in_else = 0;
    im->graph.had_cond = 1;
    ll_cuda_side_join(be); /* (the bodies are captured on one stream each) */
    if (im->graph.spoiled) return 0;
    cudaStream_t cur = im->stream;
    enum cudaStreamCaptureStatus status;
    cudaGraph_t g = NULL;
    const cudaGraphNode_t *deps = NULL;
    size_t n_deps = 0;
    cudaGraphConditionalHandle h;
    if (COND_TRY(cudaStreamGetCaptureInfo(cur, &status, NULL, &g, NULL, NULL, NULL)) ||
        COND_TRY(cudaGraphConditionalHandleCreate(&h, g, 0, cudaGraphCondAssignDefault)) ||
        COND_TRY(ll_cuda_launch_cond_set(cur, h, run)) ||
        COND_TRY(cudaStreamGetCaptureInfo(cur, &status, NULL, &g, &deps, NULL, &n_deps)))
        return 0;
    struct cudaGraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = h;
    p.conditional.type = cudaGraphCondTypeIf;
    p.conditional.size = 2; /* [0] when *run != 0, [1] otherwise */
    cudaGraphNode_t node;
    if (COND_TRY(cudaGraphAddNode(&node, g, deps, NULL, n_deps, &p)) ||
        COND_TRY(cudaStreamUpdateCaptureDependencies(cur, &node, NULL, 1, cudaStreamSetCaptureDependencies)))
        return 0;
    if (!im->graph.cond_streams[d] &&
        COND_TRY(ll_cuda_stream_create(&im->graph.cond_streams[d], 0)))
        return 0;
    if (COND_TRY(cudaStreamBeginCaptureToGraph(im->graph.cond_streams[d], p.conditional.phGraph_out[0], NULL, NULL, 0,
                                               cudaStreamCaptureModeRelaxed)))
        return 0;
    im->graph.cond[d].parent = cur;
    im->graph.cond[d].body = im->graph.cond_streams[d];
    im->graph.cond[d].bodies[0] = p.conditional.phGraph_out[0];
    im->graph.cond[d].bodies[1] = p.conditional.phGraph_out[1];
    im->stream = im->graph.cond[d].body;
    im->graph.st.conditionals++;
    return 0;
}

static void cu_cond_else(ll_backend *be) {
    cuda_impl *im = enter(be);
    const int d = im->graph.cond_depth - 1;
    if (d < 0 || im->graph.cond[d].in_else) ll_die("CUDA backend: cond_else without cond_if");
    im->graph.cond[d].in_else = 1;
    if (!im->graph.cond[d].body) return;
    cudaGraph_t g = NULL;
    if (!COND_TRY(cudaStreamEndCapture(im->graph.cond[d].body, &g)) &&
        !COND_TRY(cudaStreamBeginCaptureToGraph(im->graph.cond[d].body, im->graph.cond[d].bodies[1], NULL, NULL, 0,
                                                cudaStreamCaptureModeRelaxed)))
        return;
    im->stream = im->graph.cond[d].parent; /* the rest of the step into the (spoiled) enclosing capture */
    im->graph.cond[d].body = NULL;
}

static void cu_cond_end(ll_backend *be) {
    cuda_impl *im = enter(be);
    const int d = im->graph.cond_depth - 1;
    if (d < 0) ll_die("CUDA backend: cond_end without cond_if");
    im->graph.cond_depth = d;
    if (!im->graph.cond[d].body) return;
    cudaGraph_t g = NULL;
    COND_TRY(cudaStreamEndCapture(im->graph.cond[d].body, &g));
    im->stream = im->graph.cond[d].parent;
}
#undef COND_TRY

/* Launch the kept graph of slot for this step; new_structure: no kept graph had its family
 * (the give-up rule). */
static void graph_launch(cuda_impl *im, int slot, int new_structure) {
    im->graph.steps++;
    im->graph.new_mask = im->graph.new_mask << 1 | (uint32_t)new_structure;
    const int recent = __builtin_popcount(im->graph.new_mask & ((1u << GRAPH_WINDOW) - 1));
    if (im->graph.steps >= GRAPH_WINDOW && recent > GRAPH_BUILT_MAX) {
        im->graph.off = 1;
        ll_log("CUDA graphs off from here: %d of the last %d steps had a layer structure no kept graph had (it "
               "changes from step to step, e.g. LayerDrop); kernels are launched one by one",
               recent, GRAPH_WINDOW);
    }
    im->graph.cache[slot].used = ++im->graph.clock;
    CUDA_CHECK(cudaGraphLaunch(im->graph.cache[slot].exec, im->stream));
    im->graph.st.launches++;
}

int ll_cuda_env_on(const char *name, int *cached) {
    if (*cached < 0) {
        const char *v = getenv(name);
        *cached = !(v && !strcmp(v, "0"));
    }
    return *cached;
}
/* LL_CUDA_GRAPH_REPLAY=0: every step captured (and updated into its kept graph), for A/B timing */
static int replay_on(void) {
    static int on = -1;
    return ll_cuda_env_on("LL_CUDA_GRAPH_REPLAY", &on);
}
/* LL_CUDA_GRAPH_UPDATE=0: a new capture never goes into a kept executable by cudaGraphExecUpdate;
 * the slot's executable is destroyed and the capture instantiated anew */
static int update_on(void) {
    static int on = -1;
    return ll_cuda_env_on("LL_CUDA_GRAPH_UPDATE", &on);
}

/* Which kernels a graph launches, in order: a hash of its nodes' types and, for each kernel node,
 * its function, cluster shape and priority; 0 when the runtime does not say (the graph is then never updated
 * in place).  cudaGraphExecUpdate accepts a kernel node whose kernel changed, but an H100
 * (CUDA 13.0, driver 580) then faulted with "an illegal instruction was encountered" (fp32 training
 * with TF32, where cuBLASLt picks other kernels for other shapes; bench/RESULTS.md, session 24), so
 * an executable is updated only with a capture of the same kernels: new pointers, grids and
 * arguments alone. */
static uint64_t graph_kernels(cudaGraph_t g) {
    size_t n = 0;
    if (cudaGraphGetNodes(g, NULL, &n) != cudaSuccess || !n) {
        (void)cudaGetLastError();
        return 0;
    }
    cudaGraphNode_t *nodes = ll_malloc(n * sizeof *nodes);
    uint64_t h = 1469598103934665603ull; /* FNV-1a over 64-bit words */
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
    if (cudaGraphGetNodes(g, nodes, &n) != cudaSuccess) h = 0;
    for (size_t i = 0; h && i < n; i++) {
        enum cudaGraphNodeType t;
        if (cudaGraphNodeGetType(nodes[i], &t) != cudaSuccess) {
            h = 0;
            break;
        }
        MIX(t);
        if (t != cudaGraphNodeTypeKernel) continue;
        struct cudaKernelNodeParams kp;
        cudaLaunchAttributeValue cl;
        memset(&cl, 0, sizeof cl);
        if (cudaGraphKernelNodeGetParams(nodes[i], &kp) != cudaSuccess || !kp.func ||
            cudaGraphKernelNodeGetAttribute(nodes[i], cudaLaunchAttributeClusterDimension, &cl) != cudaSuccess) {
            h = 0;
            break;
        }
        MIX((uintptr_t)kp.func);
        MIX(cl.clusterDim.x), MIX(cl.clusterDim.y), MIX(cl.clusterDim.z);
        /* and its priority (the side stream's work is captured at the least: cuda_side.c) */
        cudaLaunchAttributeValue pr;
        memset(&pr, 0, sizeof pr);
        if (cudaGraphKernelNodeGetAttribute(nodes[i], cudaLaunchAttributePriority, &pr) != cudaSuccess)
            (void)cudaGetLastError(), pr.priority = 1; /* (not said: outside the range, the same for all) */
        MIX(pr.priority);
    }
#undef MIX
    if (!h) (void)cudaGetLastError();
    free(nodes);
    return h;
}

static int cu_graph_replay(ll_backend *be, uint64_t fp) {
    cuda_impl *im = enter(be);
    if (im->graph.capturing) ll_die("CUDA backend: graph_replay inside a captured step");
    if (im->graph.off || ll_cuda_sync_checking()) return -1;
    if (!replay_on()) return 1;
    ll_cuda_side_join(be); /* (the graph's nodes are ordered after the device's stream only) */
    for (int i = 0; i < GRAPH_CACHE; i++)
        if (im->graph.cache[i].exec && im->graph.cache[i].fp == fp && im->graph.cache[i].mem_gen == im->graph.mem_gen) {
            im->graph.st.replays++;
            graph_launch(im, i, 0);
            return 0;
        }
    return 1;
}

static int cu_graph_end(ll_backend *be, uint64_t fp, uint64_t family) {
    cuda_impl *im = enter(be);
    if (!im->graph.capturing) ll_die("CUDA backend: graph_end without graph_begin");
    if (im->graph.cond_depth) ll_die("CUDA backend: graph_end inside a conditional (cond_if without cond_end)");
    ll_cuda_side_join(be); /* (CUDA refuses a capture whose side stream was not joined back) */
    im->graph.capturing = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(im->stream, &g);
    if (e != cudaSuccess && !im->graph.had_cond)
        ll_die("CUDA graph capture of a training step failed: %s (train.cuda_graphs: false runs it without graphs)",
               cudaGetErrorString(e));
    if (e != cudaSuccess || im->graph.spoiled) { /* conditional nodes refused: nothing ran, the caller runs the step */
        if (e != cudaSuccess && !im->graph.spoiled)
            snprintf(im->graph.spoil_why, sizeof im->graph.spoil_why, "cudaStreamEndCapture: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        if (g) CUDA_CHECK(cudaGraphDestroy(g));
        for (int i = 0; i < im->graph.n_retired; i++) CUDA_CHECK(cudaFree(im->graph.retired[i])); /* (nothing uses them) */
        im->graph.n_retired = 0;
        im->graph.off = 1;
        ll_warn("CUDA graphs off: a step with conditional nodes (LayerDrop / cross-attention drop) could not be "
                "captured (%s); its kernels and the rest run one by one (LL_CUDA_GRAPH_CONDS=0 keeps graphs for "
                "steps of one draw)",
                im->graph.spoil_why);
        return -1;
    }
    size_t nodes = 0;
    CUDA_CHECK(cudaGraphGetNodes(g, NULL, &nodes));
    im->graph.st.captures++;
    im->graph.st.nodes += nodes;
    /* the slot: this fingerprint's (its scratch moved), a free one, the family's least recently
     * used of the same kernels, else of any (updated in place only with the same kernels:
     * graph_kernels), else the least recently used */
    const uint64_t kernels = graph_kernels(g);
    int same = -1, free_slot = -1, famk = -1, fam = -1, lru = 0;
    for (int i = 0; i < graphs_kept(); i++) {
        if (!im->graph.cache[i].exec) {
            if (free_slot < 0) free_slot = i;
            continue;
        }
        const uint64_t used = im->graph.cache[i].used;
        if (im->graph.cache[i].fp == fp) same = i;
        if (im->graph.cache[i].family == family) {
            if (fam < 0 || used < im->graph.cache[fam].used) fam = i;
            if (kernels && im->graph.cache[i].kernels == kernels && (famk < 0 || used < im->graph.cache[famk].used))
                famk = i;
        }
        if (used < im->graph.cache[lru].used) lru = i; /* (no slot is free when it is used) */
    }
    const int slot = same >= 0 ? same : free_slot >= 0 ? free_slot : famk >= 0 ? famk : fam >= 0 ? fam : lru;
    /* (conditionals' handles are new: such a graph is always built anew) */
    if (im->graph.cache[slot].exec &&
        (im->graph.had_cond || !update_on() || !kernels || kernels != im->graph.cache[slot].kernels)) {
        CUDA_CHECK(cudaGraphExecDestroy(im->graph.cache[slot].exec));
        im->graph.cache[slot].exec = NULL;
    }
    if (im->graph.cache[slot].exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(im->graph.cache[slot].exec, g, &info) == cudaSuccess) {
            im->graph.st.updates++;
        } else { /* other node types, or the runtime's rules (compute-sanitizer's memcheck refused ll's): built anew */
            (void)cudaGetLastError();
            im->graph.st.refusals++;
            CUDA_CHECK(cudaGraphExecDestroy(im->graph.cache[slot].exec));
            im->graph.cache[slot].exec = NULL;
        }
    }
    const int built = !im->graph.cache[slot].exec;
    if (built) {
        CUDA_CHECK(cudaGraphInstantiate(&im->graph.cache[slot].exec, g, ll_cuda_graph_instantiate_flags()));
        im->graph.st.instantiations++;
    }
    im->graph.cache[slot].fp = fp;
    im->graph.cache[slot].family = family;
    im->graph.cache[slot].kernels = kernels;
    /* a graph whose ops used a scratch outgrown during the capture (freed below) is launched once, never replayed */
    im->graph.cache[slot].mem_gen = im->graph.n_retired ? ~(uint64_t)0 : im->graph.mem_gen;
    graph_launch(im, slot, same < 0 && fam < 0);
    CUDA_CHECK(cudaGraphDestroy(g));
    for (int i = 0; i < im->graph.n_retired; i++) CUDA_CHECK(cudaFree(im->graph.retired[i])); /* (waits for the launch) */
    im->graph.n_retired = 0;
    /* LL_CUDA_GEMM_TUNE: the matmul shapes first met in this capture are timed now; where one
     * switched algorithm, the kept graphs (which have the old one) go: the next steps capture anew */
    if (ll_cuda_gemm_tune_pending(be) > 0) {
        CUDA_CHECK(cudaStreamSynchronize(im->stream));
        for (int i = 0; i < GRAPH_CACHE; i++)
            if (im->graph.cache[i].exec) {
                CUDA_CHECK(cudaGraphExecDestroy(im->graph.cache[i].exec));
                im->graph.cache[i].exec = NULL;
            }
        im->graph.st.tune_drops++;
    }
    return 0;
}

static void cu_graph_stats(ll_backend *be, ll_graph_stats *out) { *out = impl_of(be)->graph.st; }

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
    if ((e = cudaMalloc((void **)&im->ticket, sizeof *im->ticket)) != cudaSuccess ||
        (e = cudaMemset(im->ticket, 0, sizeof *im->ticket)) != cudaSuccess) {
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
    be->graph_begin = cu_graph_begin;
    be->graph_end = cu_graph_end;
    be->graph_replay = cu_graph_replay;
    be->graph_stats = cu_graph_stats;
    be->cond_if = cu_cond_if;
    be->cond_else = cu_cond_else;
    be->cond_end = cu_cond_end;
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
