/* Private interface between the pieces of the CUDA emulation (tests/cuda_emu):
 * the fiber scheduler (emu_sched.cc), the runtime's streams and memory
 * (emu_runtime.cc), cuBLASLt/cuBLAS (emu_blas.cc) and NCCL (emu_nccl.cc). */
#ifndef LL_CUDA_EMU_INTERNAL_H
#define LL_CUDA_EMU_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "emu_device.h"

#if defined(__SANITIZE_ADDRESS__)
#define LL_EMU_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__)
#define LL_EMU_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LL_EMU_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define LL_EMU_TSAN 1
#endif
#endif

namespace ll_emu {

/* Report a defect the emulation found (in a kernel: with kernel, block,
 * thread and source line) and stop the process with status 1. */
[[noreturn]] void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void set_last_error(cudaError_t e);

/* Run one kernel's whole grid now, on the calling thread (emu_sched.cc). */
void run_grid(const launch_desc &d, const std::function<void()> &body);

/* Stream work (emu_runtime.cc): queued, run in order at a synchronisation. */
/* During a stream capture the work is recorded into the graph instead (func: a
 * kernel's function, which a graph update must find unchanged). */
/* pdl: a kernel launched with programmatic stream serialization (its edges from kernel nodes
 * are then programmatic, as CUDA captures them) */
void enqueue(cudaStream_t s, const char *what, std::function<void()> fn, const void *func = nullptr,
             unsigned cluster = 1, bool pdl = false);
/* A kernel fault now (a sticky error, seen at the next synchronisation, as on a GPU), told on stderr. */
void fault(cudaError_t e, const char *why);
/* At the start of queued work: LL_CUDA_EMU_FAULT's injected fault for a kernel of this name, or
 * an earlier fault; true: the work must not run (the error is sticky, as on a GPU). */
bool faulted(const char *name, const char *file, int line);
/* The device allocation containing [p, p + n), or 0 when p is not device memory;
 * 2 when p is device memory but the range runs past its allocation. */
int device_range(const void *p, size_t n);
int current_device();
/* Environment switches (LL_CUDA_EMU_*), read once. */
const char *env(const char *name);

/* ---- streams, events and graphs (emu_runtime.cc; graphs in emu_graph.cc) ---------- */
/* the device's stream priorities (an H100's range: cudaDeviceGetStreamPriorityRange) */
#define EMU_PRIORITY_GREATEST (-5)
enum node_kind { NODE_KERNEL, NODE_COPY, NODE_MEMSET, NODE_HOST, NODE_COND };
/* an executable graph's conditional values (shared with its queued nodes, which may run
 * after cudaGraphExecDestroy); only the thread running the queues touches them, under the lock */
struct graph_values {
    struct def {
        cudaGraphConditionalHandle h;
        unsigned value, flags;
    };
    std::vector<def> defs;
    std::vector<std::pair<cudaGraphConditionalHandle, unsigned>> value; /* sorted by handle */
};
/* the values of the graph launch whose node runs now (NULL outside one): cudaGraphSetConditional's */
extern graph_values *g_graph_running;
std::recursive_mutex &emu_mutex();
const void *thread_self(); /* names the calling thread */
void note_queued();        /* this thread queued work (it drives the queues when it polls) */

} // namespace ll_emu

struct CUgraphNode_st {
    CUgraph_st *graph;
};
/* A graph: its nodes in an order that respects their dependencies (a capture on one stream
 * is a chain; a node that depends on fewer goes right after its last dependency). */
struct CUgraph_st {
    struct cond_part {
        cudaGraphConditionalHandle handle;
        cudaGraphConditionalNodeType type;
        unsigned size;
        std::shared_ptr<CUgraph_st> body[2]; /* owned by the node */
        cudaGraph_t out[2];                  /* phGraph_out: valid while the node lives */
    };
    struct node {
        const char *what;
        const void *func; /* the kernel of a kernel node ll launched, else NULL */
        std::function<void()> fn;
        int kind;
        CUgraphNode_st *id; /* its handle (owned by ids); NULL in an executable copy */
        std::shared_ptr<cond_part> cond;
        unsigned cluster = 1; /* a kernel's cluster shape (blocks in x): cuBLASLt's may have 2 */
        std::vector<CUgraphNode_st *> deps = {}; /* what it waits for (ids of the same graph; not in an executable copy) */
        std::vector<int> dep_idx = {};     /* an executable copy's: the same, as indices into its nodes */
        bool side = false; /* captured on a stream that joined the capture by waiting for one of its events */
        int priority = 0;  /* a kernel's: its capturing stream's (CUDA copies it into the node) */
        bool pdl = false;  /* launched with programmatic stream serialization: programmatic edges from kernels */
    };
    std::vector<node> nodes;
    std::vector<std::unique_ptr<CUgraphNode_st>> ids;
    CUgraph_st *parent = nullptr; /* a conditional body: the graph of its node */
    std::vector<ll_emu::graph_values::def> handles; /* created on this graph */
    CUstream_st *capturer = nullptr;                /* the stream capturing into it */
    const char *broken = nullptr;                   /* a capture into it was invalidated */
    std::shared_ptr<int> live = std::make_shared<int>(0); /* its executables (cudaGraphInstantiate) */
};
struct CUstream_st {
    struct item {
        const char *what;
        std::function<void()> fn;
        CUstream_st *wait_stream; /* a wait for an event: run that stream up to wait_seq first */
        uint64_t wait_seq;
        std::shared_ptr<ll_emu::graph_values> vals; /* a graph launch's node: its exec's values */
    };
    int device;
    int priority = 0; /* cudaStreamCreateWithPriority's, in [EMU_PRIORITY_GREATEST, 0]; not modelled in time */
    std::deque<item> q;
    uint64_t queued, done; /* items ever queued / run */
    /* stream capture (cudaStreamBeginCapture[ToGraph]): work goes into cap instead of q */
    CUgraph_st *cap;
    bool cap_owned; /* cap was made by cudaStreamBeginCapture (lost with an invalidated capture) */
    cudaStreamCaptureMode cap_mode;
    const char *cap_broken; /* what invalidated the capture, NULL while it is valid */
    const void *cap_thread; /* the capturing thread (the address of a thread_local) */
    unsigned long long cap_id;
    std::vector<cudaGraphNode_t> cap_deps; /* what the next captured node depends on */
    bool cap_forked; /* joined another stream's capture by waiting for an event recorded in it */
    std::vector<cudaGraphEdgeData> cap_edges;
};
struct CUevent_st {
    CUstream_st *stream; /* of the last record, NULL before one */
    uint64_t seq;        /* complete when stream->done >= seq */
    CUgraph_st *cap;     /* last recorded inside this capture (NULL: an ordinary record) */
    std::vector<cudaGraphNode_t> cap_deps; /* ... after these nodes (a stream waiting for it depends on them) */
};

namespace ll_emu {
CUstream_st *stream_of(cudaStream_t s);
void break_capture(CUstream_st *s, const char *why);
std::vector<CUstream_st *> streams_capturing(const CUgraph_st *g); /* (the one that began it and those that joined) */
/* Record a node captured on st into its graph, after the stream's dependencies (emu_graph.cc). */
void capture_node(CUstream_st *st, CUgraph_st::node n);
int node_kind_of(const char *what, const void *func);
} // namespace ll_emu

#endif
