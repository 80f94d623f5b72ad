/* The CUDA runtime of the emulation (tests only; docs/cuda-emulation.md): devices, memory,
 * streams, events, launches.
 *
 * Devices.  LL_CUDA_EMU_DEVICES (default 1) emulated devices, each announced
 * once on stderr as an emulation; their names say "emulated".
 *
 * Memory as a GPU gives it.  cudaMalloc memory is host memory with exactly the
 * requested size (ASan sees one byte past), 256-byte aligned, filled with 0xFF
 * bytes (NaN in fp32, bf16 and fp64) instead of zeros; every allocation is
 * recorded, so copies and memsets are checked against the pointer kinds and
 * the allocation's bounds (cudaErrorInvalidValue, as CUDA returns for a kind
 * that does not match the pointers).  LL_CUDA_EMU_MEM_MB caps the total.
 *
 * Streams are asynchronous.  Every stream operation (kernel, copy, memset,
 * event record, NCCL collective, cuBLASLt matmul) is queued on its stream and
 * runs only when the host synchronises (stream, event, device, cudaFree,
 * cudaEventQuery), in stream order; a stream waiting for an event first runs
 * the other stream up to that event's record.  So a host read without a sync,
 * a host buffer reused before its asynchronous copy ran, or work ordered only
 * by luck across streams gives a wrong value.  Queued work runs on the thread
 * that synchronises, under one global lock.
 *
 * CUDA graphs.  A capturing stream records its work into the graph instead of
 * queueing it; a launch queues the graph's nodes in order.  CUDA's capture
 * rules hold: synchronising or querying the capturing stream, waiting from the
 * host for an event recorded in the capture, or making the capture wait on
 * outside work fails and invalidates it (cudaStreamEndCapture then returns
 * cudaErrorStreamCaptureInvalidated and the work is lost), as do cudaMalloc,
 * cudaFree, host allocations and synchronous copies in global and thread-local
 * mode.  The graph API itself (capture, conditional nodes, instantiation,
 * update, launch) is in emu_graph.cc.
 *
 * Launch limits a GPU enforces are returned as its errors (through
 * cudaGetLastError): more than 1,024 threads per block or a block dimension
 * over (1024, 1024, 64), grid x over 2^31-1, grid y/z over 65,535 and more
 * than 48 KiB of dynamic shared memory (cudaErrorInvalidConfiguration), more
 * than 4 KiB of kernel parameters (cudaErrorInvalidValue). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "emu_internal.h"

namespace ll_emu {

namespace {
/* never destroyed (exit may still find queued work and live allocations, as the backends
 * keep their buffers for the life of the process: reachable for LeakSanitizer) */
std::recursive_mutex &g_mu = *new std::recursive_mutex();
std::map<uintptr_t, size_t> &g_allocs = *new std::map<uintptr_t, size_t>(); /* start -> bytes */
std::map<uintptr_t, size_t> &g_pinned = *new std::map<uintptr_t, size_t>(); /* cudaMallocHost blocks */
size_t g_used;
thread_local cudaError_t t_last = cudaSuccess;
thread_local int t_device = 0;
/* whether this thread has queued work: only such a (host) thread drives the
 * queues when it polls an event; a thread that only watches (NCCL's watchdog)
 * sees "not ready" until a host thread synchronises, as a GPU runs on its own */
thread_local bool t_queues = false;
std::vector<CUstream_st *> &g_streams = *new std::vector<CUstream_st *>();
CUstream_st *g_null[64];
int g_depth;
cudaError_t g_sticky = cudaSuccess; /* a kernel fault: every later call returns it, as on a GPU */

int n_devices() {
    static int n = -1;
    if (n < 0) {
        const char *e = env("LL_CUDA_EMU_DEVICES");
        n = e ? atoi(e) : 1;
        if (n < 0) n = 0;
        if (n > 64) n = 64;
        if (n > 0)
            fprintf(stderr, "cuda-emu: %d CUDA device%s EMULATED on the CPU (LL_CUDA_EMU test build): not a GPU; no "
                            "timing or number from it is a GPU result\n",
                    n, n == 1 ? "" : "s");
    }
    return n;
}

size_t mem_cap() {
    const char *e = env("LL_CUDA_EMU_MEM_MB");
    return (e && atol(e) > 0 ? (size_t)atol(e) : (size_t)8192) << 20;
}

CUstream_st *null_stream(cudaStream_t s) {
    if (s) return s;
    const int d = t_device;
    if (!g_null[d]) {
        g_null[d] = new CUstream_st();
        g_null[d]->device = d;
        g_streams.push_back(g_null[d]);
    }
    return g_null[d];
}

/* Run s's queued items until `upto` of them have run. */
void drain(CUstream_st *s, uint64_t upto) {
    if (++g_depth > 64) fail("streams wait for each other's events in a cycle: the GPU would hang");
    while (s->done < upto && !s->q.empty()) {
        CUstream_st::item it = std::move(s->q.front());
        s->q.pop_front();
        if (it.wait_stream) {
            drain(it.wait_stream, it.wait_seq);
        } else {
            graph_values *const outer = g_graph_running; /* (a wait may run another stream's graph) */
            g_graph_running = it.vals.get();
            it.fn();
            g_graph_running = outer;
        }
        s->done++;
    }
    g_depth--;
}
void drain_all(int device) {
    for (CUstream_st *s : g_streams)
        if (device < 0 || s->device == device) drain(s, s->queued);
}

/* ---- stream capture's rules, as CUDA enforces them ----------------------------------- */
thread_local char t_self; /* its address names the calling thread */
/* A call CUDA calls potentially unsafe during a capture (it allocates, frees or
 * synchronises outside the graph): it fails, and invalidates the capture, when
 * this thread captures in global or thread-local mode or any thread captures in
 * global mode; relaxed mode allows it. */
cudaError_t unsafe_call(const char *what) {
    bool hit = false;
    for (CUstream_st *s : g_streams)
        if (s->cap && (s->cap_mode == cudaStreamCaptureModeGlobal ||
                       (s->cap_mode == cudaStreamCaptureModeThreadLocal && s->cap_thread == &t_self))) {
            break_capture(s, what);
            hit = true;
        }
    return hit ? (t_last = cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}
/* Whether [p, p + n) lies in one cudaMallocHost block. */
bool pinned(const void *p, size_t n) {
    const uintptr_t a = (uintptr_t)p;
    auto it = g_pinned.upper_bound(a);
    if (it == g_pinned.begin()) return false;
    --it;
    return a + n <= it->first + it->second;
}
/* A copy queued on a capturing stream: its host side must be pinned (the graph
 * reads or writes it at every launch; the emulation is strict here). */
cudaError_t capture_copy(CUstream_st *st, const void *dst, const void *src, size_t dn, size_t sn) {
    if (!st->cap) return cudaSuccess;
    if ((!device_range(dst, dn) && !pinned(dst, dn)) || (!device_range(src, sn) && !pinned(src, sn))) {
        break_capture(st, "a copy to or from pageable host memory");
        return t_last = cudaErrorStreamCaptureUnsupported;
    }
    return cudaSuccess;
}
/* An event last recorded inside a capture cannot be waited for from the host. */
cudaError_t captured_event(CUevent_st *ev, const char *what) {
    if (!ev->cap) return cudaSuccess;
    for (CUstream_st *s : g_streams)
        if (s->cap == ev->cap) break_capture(s, what);
    return t_last = cudaErrorStreamCaptureUnsupported;
}
} // namespace

CUstream_st *stream_of(cudaStream_t s) { return null_stream(s); }
std::vector<CUstream_st *> streams_capturing(const CUgraph_st *g) {
    std::vector<CUstream_st *> v;
    for (CUstream_st *s : g_streams)
        if (s->cap == g) v.push_back(s);
    return v;
}
std::recursive_mutex &emu_mutex() { return g_mu; }
const void *thread_self() { return &t_self; }
void note_queued() { t_queues = true; }
void break_capture(CUstream_st *s, const char *why) {
    if (s->cap_broken) return;
    s->cap_broken = why;
    if (getenv("LL_CUDA_EMU_VERBOSE")) fprintf(stderr, "cuda-emu: stream capture invalidated by %s\n", why);
    /* a stream that joined another's capture: the whole capture is lost (CUDA invalidates the sequence) */
    if (s->cap_forked && s->cap && s->cap->capturer && s->cap->capturer != s) break_capture(s->cap->capturer, why);
    /* a conditional body's capture: the body is unusable, and so is every graph above it
     * (CUDA leaves the parent graph invalid) */
    if (CUgraph_st *g = s->cap; g && g->parent) {
        g->broken = why;
        for (CUgraph_st *a = g->parent; a; a = a->parent)
            for (CUstream_st *t : g_streams)
                if (t->cap == a) break_capture(t, "an invalidated capture into a conditional body");
    }
}

const char *env(const char *name) { return getenv(name); }
int current_device() { return t_device; }
void set_last_error(cudaError_t e) { t_last = e; }

bool faulted(const char *name, const char *file, int line) {
    /* LL_CUDA_EMU_FAULT=NAME: kernels whose name contains NAME fault as a
     * GPU kernel does (a sticky error, seen at the next synchronisation) */
    const char *f = env("LL_CUDA_EMU_FAULT");
    if (f && *f && strstr(name, f) && g_sticky == cudaSuccess) {
        fprintf(stderr, "cuda-emu: injected fault in kernel %s (launched at %s:%d; LL_CUDA_EMU_FAULT)\n", name,
                file ? file : "?", line);
        g_sticky = cudaErrorIllegalAddress;
    }
    return g_sticky != cudaSuccess;
}

static uint64_t g_enqueued; /* every stream operation so far, all streams (ll_cuda_emu_stream_ops) */

void fault(cudaError_t e, const char *why) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (g_sticky != cudaSuccess) return;
    fprintf(stderr, "cuda-emu: %s\n", why);
    g_sticky = e;
}

void enqueue(cudaStream_t s, const char *what, std::function<void()> fn, const void *func, unsigned cluster,
             bool pdl) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    g_enqueued++;
    CUstream_st *st = stream_of(s);
    if (st->cap) { /* captured, not run (after an invalidation: dropped, as the graph is lost) */
        CUgraph_st::node n{what, func, std::move(fn), node_kind_of(what, func), NULL, nullptr};
        n.cluster = cluster;
        n.pdl = pdl;
        capture_node(st, std::move(n));
        return;
    }
    st->q.push_back(CUstream_st::item{what, std::move(fn), NULL, 0, nullptr});
    t_queues = true;
    st->queued++;
}

int device_range(const void *p, size_t n) {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    const uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return 0;
    --it;
    if (a >= it->first + (it->second ? it->second : 1)) return 0;
    return a + n <= it->first + it->second ? 1 : 2;
}

/* the __launch_bounds__ maximum of threads per block of the kernel a launch
 * names ("xent_kernel<T>"), 0 when it has none (cmake/cuda_emu_bounds.cmake) */
static unsigned launch_bound(const char *name) {
    static const struct {
        const char *kernel;
        unsigned bound;
    } bounds[] = {
#include "ll_emu_bounds.h"
    };
    size_t n = 0;
    while (name[n] == '_' || (name[n] >= '0' && name[n] <= '9') || (name[n] >= 'a' && name[n] <= 'z') ||
           (name[n] >= 'A' && name[n] <= 'Z'))
        n++;
    for (const auto &b : bounds)
        if (strlen(b.kernel) == n && !strncmp(b.kernel, name, n)) return b.bound;
    return 0;
}

/* LL_CUDA_EMU_PROFILE=1: where the emulation's time goes (per kernel: launches,
 * blocks, threads, seconds), printed at exit; for sizing the emulated tests */
namespace {
struct kprof {
    uint64_t launches, blocks, threads;
    double secs;
};
std::map<std::string, kprof> &g_prof = *new std::map<std::string, kprof>();
void print_profile() {
    std::vector<std::pair<std::string, kprof>> v(g_prof.begin(), g_prof.end());
    std::sort(v.begin(), v.end(), [](const auto &a, const auto &b) { return a.second.secs > b.second.secs; });
    double total = 0;
    for (const auto &k : v) total += k.second.secs;
    fprintf(stderr, "cuda-emu profile: %.2f s in kernels\n%10s %10s %12s %14s  kernel\n", total, "seconds", "launches",
            "blocks", "threads");
    for (const auto &k : v)
        fprintf(stderr, "%10.3f %10llu %12llu %14llu  %s\n", k.second.secs, (unsigned long long)k.second.launches,
                (unsigned long long)k.second.blocks, (unsigned long long)k.second.threads, k.first.c_str());
}
double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
} // namespace

/* LL_CUDA_EMU_PDL=refuse: every launch with programmatic stream serialization refused */
static bool pdl_refused() {
    static const bool r = [] {
        const char *m = env("LL_CUDA_EMU_PDL");
        return m && !strcmp(m, "refuse");
    }();
    return r;
}

cudaError_t launch(const launch_desc &d, std::function<void()> body) {
    const dim3 g = d.grid, b = d.block;
    const uint64_t threads = (uint64_t)b.x * b.y * b.z;
    cudaError_t e = cudaSuccess;
    if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z || threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64 ||
        g.x > 2147483647u || g.y > 65535 || g.z > 65535 || d.smem > 48 * 1024)
        e = cudaErrorInvalidConfiguration;
    else if (d.param_bytes > 4096)
        e = cudaErrorInvalidValue;
    else if (const unsigned lb = launch_bound(d.name); lb && threads > lb)
        e = cudaErrorLaunchOutOfResources; /* more threads than the kernel was compiled for */
    else if (d.pdl && pdl_refused())
        e = cudaErrorNotSupported; /* LL_CUDA_EMU_PDL=refuse: a driver or sharing mode without it */
    if (e != cudaSuccess) {
        if (env("LL_CUDA_EMU_VERBOSE"))
            fprintf(stderr, "cuda-emu: launch of %s at %s:%d refused: grid (%u,%u,%u) block (%u,%u,%u) smem %zu: %s\n",
                    d.name, d.file, d.line, g.x, g.y, g.z, b.x, b.y, b.z, d.smem, cudaGetErrorString(e));
        t_last = e;
        return e;
    }
    auto body_p = std::make_shared<std::function<void()>>(std::move(body));
    launch_desc dd = d;
    enqueue(d.stream, d.name, [dd, body_p]() {
        if (faulted(dd.name, dd.file, dd.line)) return;
        static const bool prof = env("LL_CUDA_EMU_PROFILE") != nullptr;
        if (!prof) {
            run_grid(dd, *body_p);
            return;
        }
        static std::once_flag once;
        std::call_once(once, [] { atexit(print_profile); });
        const double t0 = now_s();
        run_grid(dd, *body_p);
        std::string name(dd.name);
        name = name.substr(0, name.find('('));
        std::lock_guard<std::recursive_mutex> lk(g_mu);
        kprof &k = g_prof[name];
        const uint64_t nb = (uint64_t)dd.grid.x * dd.grid.y * dd.grid.z;
        k.launches++;
        k.blocks += nb;
        k.threads += nb * dd.block.x * dd.block.y * dd.block.z;
        k.secs += now_s() - t0;
    }, d.func, 1, d.pdl != 0);
    return cudaSuccess;
}

} // namespace ll_emu

using namespace ll_emu;

#define LOCK std::lock_guard<std::recursive_mutex> lk_(g_mu)

extern "C" {

/* Test hook: stream operations (kernels, async copies and memsets, cuBLAS(Lt)
 * matmuls, CUB sorts, NCCL calls) queued so far -- what the counting backend's
 * launch rules (src/backend/counting.c) must predict. */
uint64_t ll_cuda_emu_stream_ops(void) {
    LOCK;
    return g_enqueued;
}

cudaError_t cudaGetDeviceCount(int *count) {
    *count = n_devices();
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= n_devices()) return t_last = cudaErrorInvalidDevice;
    t_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *device) {
    *device = t_device;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device) {
    if (device < 0 || device >= n_devices()) return cudaErrorInvalidDevice;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "ll CUDA emulation %d (emulated on the CPU, not a GPU)", device);
    p->totalGlobalMem = mem_cap();
    p->sharedMemPerBlock = 48 * 1024;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr attr, int device) {
    if (device < 0 || device >= n_devices()) return t_last = cudaErrorInvalidDevice;
    switch (attr) {
    case cudaDevAttrMultiProcessorCount: *v = 1; return cudaSuccess; /* (cudaGetDeviceProperties's) */
    case cudaDevAttrWarpSize: *v = 32; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *v = 1024; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *v = 9; return cudaSuccess; /* (cudaGetDeviceProperties's) */
    case cudaDevAttrComputeCapabilityMinor: *v = 0; return cudaSuccess;
    default: return t_last = cudaErrorInvalidValue; /* not modelled: a caller must not rely on it */
    }
}
/* Blocks per "SM": 2048 threads' worth (at most 8), whatever the kernel's registers: a grid sized
 * by it is a few blocks here, so equal shares of a grid-stride loop run unevenly split. */
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *func, int block, size_t smem,
                                                                   unsigned flags) {
    (void)flags;
    if (!n || !func || block <= 0 || block > 1024 || smem > 227 * 1024) return t_last = cudaErrorInvalidValue;
    *n = 2048 / block < 8 ? 2048 / block : 8;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
    *v = 0; /* no driver */
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    if (g_sticky != cudaSuccess) return g_sticky;
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last; }
const char *cudaGetErrorName(cudaError_t e) { return cudaGetErrorString(e); }
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorIllegalInstruction: return "an illegal instruction was encountered";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureUnjoined: return "capture sequence contains a fork that was not joined to the primary stream";
    case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorGraphExecUpdateFailure: return "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
    default: return "unknown error (cuda-emu)";
    }
}

/* ---- memory ---------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **p, size_t bytes) {
    LOCK;
    *p = NULL;
    if (cudaError_t e = unsafe_call("cudaMalloc")) return e;
    if (g_used + bytes > mem_cap()) return t_last = cudaErrorMemoryAllocation;
    void *m = NULL;
    if (posix_memalign(&m, 256, bytes ? bytes : 1) != 0) return t_last = cudaErrorMemoryAllocation;
    memset(m, 0xFF, bytes); /* a GPU's fresh memory is garbage, not zeros */
    g_allocs[(uintptr_t)m] = bytes;
    g_used += bytes;
    *p = m;
    return cudaSuccess;
}
/* Pinned host memory: host memory here (copies from it are queued like any
 * other: a buffer rewritten before its copy ran gives the wrong values). */
cudaError_t cudaMallocHost(void **p, size_t bytes) {
    LOCK;
    *p = NULL;
    if (cudaError_t e = unsafe_call("cudaMallocHost")) return e;
    void *m = NULL;
    if (posix_memalign(&m, 256, bytes ? bytes : 1) != 0) return t_last = cudaErrorMemoryAllocation;
    memset(m, 0xFF, bytes);
    g_pinned[(uintptr_t)m] = bytes;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void *p) {
    LOCK;
    if (!p) return cudaSuccess;
    if (cudaError_t e = unsafe_call("cudaFreeHost")) return e;
    if (!g_pinned.erase((uintptr_t)p)) return t_last = cudaErrorInvalidValue;
    drain_all(-1); /* as cudaFree: synchronises */
    free(p);
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    LOCK;
    if (!p) return cudaSuccess;
    if (cudaError_t e = unsafe_call("cudaFree")) return e;
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end()) return t_last = cudaErrorInvalidValue;
    drain_all(-1); /* cudaFree synchronises the device */
    g_used -= it->second;
    g_allocs.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    LOCK;
    *total = mem_cap();
    *free_b = mem_cap() - g_used;
    return cudaSuccess;
}

/* Check a copy's pointers against its kind; 0 or the error. */
static cudaError_t check_copy(void *dst, const void *src, size_t dn, size_t sn, cudaMemcpyKind kind) {
    const int dd = device_range(dst, dn), sd = device_range(src, sn);
    if (dd == 2 || sd == 2) return cudaErrorInvalidValue; /* runs past its allocation */
    switch (kind) {
    case cudaMemcpyHostToDevice: return dd && !sd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost: return !dd && sd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice: return dd && sd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyHostToHost: return !dd && !sd ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDefault: return cudaSuccess;
    }
    return cudaErrorInvalidValue;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, n, n, kind);
    if (e != cudaSuccess) return t_last = e;
    {
        LOCK;
        if ((e = capture_copy(stream_of(s), dst, src, n, n)) != cudaSuccess) return e;
    }
    /* the host side is read or written when the copy runs, not now */
    enqueue(s, "cudaMemcpyAsync", [dst, src, n]() { memmove(dst, src, n); });
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    {
        LOCK;
        if (cudaError_t e = unsafe_call("cudaMemcpy")) return e;
    }
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, 0);
    if (e != cudaSuccess) return e;
    return cudaStreamSynchronize(0);
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, cudaMemcpyKind kind, cudaStream_t s) {
    if (width == 0 || height == 0) return cudaSuccess;
    if (width > dpitch || width > spitch) return t_last = cudaErrorInvalidValue;
    cudaError_t e = check_copy(dst, src, dpitch * (height - 1) + width, spitch * (height - 1) + width, kind);
    if (e != cudaSuccess) return t_last = e;
    {
        LOCK;
        e = capture_copy(stream_of(s), dst, src, dpitch * (height - 1) + width, spitch * (height - 1) + width);
        if (e != cudaSuccess) return e;
    }
    enqueue(s, "cudaMemcpy2DAsync", [=]() {
        for (size_t r = 0; r < height; r++) memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    });
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    if (n == 0) return cudaSuccess;
    if (device_range(p, n) != 1) return t_last = cudaErrorInvalidValue;
    enqueue(s, "cudaMemsetAsync", [p, v, n]() { memset(p, v, n); });
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    {
        LOCK;
        if (cudaError_t e = unsafe_call("cudaMemset")) return e;
    }
    cudaError_t e = cudaMemsetAsync(p, v, n, 0);
    return e != cudaSuccess ? e : cudaStreamSynchronize(0);
}

/* ---- streams and events ---------------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    LOCK;
    CUstream_st *st = new CUstream_st();
    st->device = t_device;
    g_streams.push_back(st);
    *s = st;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = EMU_PRIORITY_GREATEST;
    return cudaSuccess;
}
/* a priority outside the range is clamped to it, as CUDA does */
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority) {
    if (cudaError_t e = cudaStreamCreateWithFlags(s, flags)) return e;
    (*s)->priority = priority > 0 ? 0 : priority < EMU_PRIORITY_GREATEST ? EMU_PRIORITY_GREATEST : priority;
    return cudaSuccess;
}
cudaError_t cudaStreamGetPriority(cudaStream_t s, int *priority) {
    LOCK;
    if (!priority) return t_last = cudaErrorInvalidValue;
    *priority = s ? s->priority : 0;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    LOCK;
    CUstream_st *st = stream_of(s);
    if (st->cap) {
        break_capture(st, "cudaStreamSynchronize of the capturing stream");
        return t_last = cudaErrorStreamCaptureUnsupported;
    }
    drain(st, st->queued);
    return g_sticky;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
    LOCK;
    CUstream_st *st = stream_of(s);
    if (st->cap) {
        break_capture(st, "cudaStreamQuery of the capturing stream");
        return t_last = cudaErrorStreamCaptureUnsupported;
    }
    return st->done >= st->queued ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    LOCK;
    if (!s) return cudaErrorInvalidResourceHandle;
    if (s->cap) return t_last = cudaErrorStreamCaptureUnsupported;
    drain(s, s->queued); /* queued work still completes, as on a GPU */
    for (size_t i = 0; i < g_streams.size(); i++)
        if (g_streams[i] == s) g_streams.erase(g_streams.begin() + (long)i);
    delete s;
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    LOCK;
    if (cudaError_t e = unsafe_call("cudaDeviceSynchronize")) return e;
    drain_all(t_device);
    return g_sticky;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
    (void)flags;
    *ev = new CUevent_st();
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    delete ev;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
    LOCK;
    CUstream_st *st = stream_of(s);
    if (st->cap) { /* a node of the capture: only the same capture may wait for it */
        ev->cap = st->cap;
        ev->cap_deps = st->cap_deps;
        return cudaSuccess;
    }
    ev->cap = NULL;
    ev->cap_deps.clear();
    ev->stream = st;
    ev->seq = st->queued; /* the work queued so far */
    return cudaSuccess;
}
/* An event completes when the work before its record has run: here, when the
 * host asks, as if the GPU had been busy until then. */
cudaError_t cudaEventQuery(cudaEvent_t ev) {
    LOCK;
    if (cudaError_t e = captured_event(ev, "cudaEventQuery of an event recorded in the capture")) return e;
    if (ev->stream && ev->stream->done < ev->seq) {
        if (!t_queues) return cudaErrorNotReady; /* a watcher: progress is the host threads' */
        /* first answer "not ready" once for each record, so polling code runs its waiting path */
        static CUevent_st *last_polled;
        static uint64_t last_seq;
        if (last_polled != ev || last_seq != ev->seq) {
            last_polled = ev;
            last_seq = ev->seq;
            return cudaErrorNotReady;
        }
        drain(ev->stream, ev->seq);
    }
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    LOCK;
    if (cudaError_t e = captured_event(ev, "cudaEventSynchronize of an event recorded in the capture")) return e;
    if (ev->stream) drain(ev->stream, ev->seq);
    return g_sticky;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int flags) {
    (void)flags;
    LOCK;
    CUstream_st *st = stream_of(s);
    if (st->cap || ev->cap) { /* a capture depends only on its own work */
        if (st->cap && ev->cap == st->cap) { /* a join: the next node also waits for the event's nodes */
            for (cudaGraphNode_t d : ev->cap_deps)
                if (std::find(st->cap_deps.begin(), st->cap_deps.end(), d) == st->cap_deps.end())
                    st->cap_deps.push_back(d);
            return cudaSuccess;
        }
        /* the stream capturing the event's graph now (none: that capture ended, and the graph
         * may be gone: not dereferenced) */
        const CUstream_st *o = NULL;
        for (CUstream_st *t : g_streams)
            if (ev->cap && t->cap == ev->cap && !t->cap_forked) o = t;
        if (!st->cap && o && !o->cap_broken) {
            /* a fork: st joins the capture (CUDA's cross-stream capture); its work goes into the graph
             * after the event's nodes until the capturing stream waits for it and ends the capture */
            st->cap = ev->cap;
            st->cap_owned = false;
            st->cap_mode = o->cap_mode;
            st->cap_broken = NULL;
            st->cap_thread = o->cap_thread;
            st->cap_id = o->cap_id;
            st->cap_deps = ev->cap_deps;
            st->cap_forked = true;
            return cudaSuccess;
        }
        if (st->cap) break_capture(st, "cudaStreamWaitEvent on work outside the capture");
        return t_last = cudaErrorStreamCaptureIsolation;
    }
    if (!ev->stream) return cudaSuccess; /* never recorded: nothing to wait for */
    /* the wait refers to the record as it is now, even if ev is recorded again */
    st->q.push_back(CUstream_st::item{"cudaStreamWaitEvent", nullptr, ev->stream, ev->seq, nullptr});
    t_queues = true;
    st->queued++;
    return cudaSuccess;
}
/* Timings from an emulation would be mistaken for a GPU's: refused. */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    (void)a;
    (void)b;
    *ms = 0;
    return t_last = cudaErrorInvalidResourceHandle;
}

cudaError_t cudaFuncSetAttribute(const void *f, cudaFuncAttribute attr, int v) {
    (void)f;
    (void)attr;
    (void)v;
    return cudaSuccess;
}

/* A host function: a stream operation; never in a conditional body (CUDA allows only
 * kernels, memsets, copies, empty, child graph and conditional nodes there). */
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data) {
    LOCK;
    CUstream_st *st = stream_of(s);
    if (st->cap && st->cap->parent) {
        break_capture(st, "a host function captured into a conditional body");
        return t_last = cudaErrorStreamCaptureUnsupported;
    }
    enqueue(s, "cudaLaunchHostFunc", [fn, data]() { fn(data); });
    return cudaSuccess;
}

} // extern "C"
