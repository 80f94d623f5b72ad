/* The CUDA backend's training step as one CUDA graph (docs/cuda-backend.md,
 * "The step as a CUDA graph"): capture, the kept executables and their
 * updates, replay, and LayerDrop / cross-attention drop as conditional nodes.
 * The state is cuda_impl's graph part (cuda_impl.h). */
#include <cuda.h> /* (types only: the driver's functions are reached through the runtime's entry points) */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "cuda_impl.h"
#include "ll_cuda.h"

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

int ll_cuda_graphs_kept(void) { return graphs_kept(); }

static int cu_graph_begin(ll_backend *be) {
    cuda_impl *im = ll_cuda_impl_enter(be);
    if (im->graph.capturing) ll_die("CUDA backend: graph_begin inside a captured step");
    if (im->graph.off || ll_cuda_sync_checking()) return -1; /* (the check synchronises after every op) */
    ll_cuda_side_join(be); /* (a capture may not wait for work outside it) */
    LL_CU(cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeRelaxed));
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
    cuda_impl *im = ll_cuda_impl_enter(be);
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
    cuda_impl *im = ll_cuda_impl_enter(be);
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
    cuda_impl *im = ll_cuda_impl_enter(be);
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
    LL_CU(cudaGraphLaunch(im->graph.cache[slot].exec, im->stream));
    im->graph.st.launches++;
}

/* LL_CUDA_GRAPH_REPLAY=0: every step captured (and updated into its kept graph), for A/B timing */
LL_CUDA_ENV_SWITCH(replay_on, "LL_CUDA_GRAPH_REPLAY")
/* LL_CUDA_GRAPH_UPDATE=0: a new capture never goes into a kept executable by cudaGraphExecUpdate;
 * the slot's executable is destroyed and the capture instantiated anew */
LL_CUDA_ENV_SWITCH(update_on, "LL_CUDA_GRAPH_UPDATE")

/* *edges += the dependencies between g's top-level nodes, *pdl += the programmatic ones (a kernel
 * launched with programmatic dependent launch after a kernel: kernels/ll_cuda_common.cuh); nothing
 * when the runtime does not say.  For the benchmark's RESULT line: on a GPU it shows whether the
 * driver kept the attribute in the step's graph. */
static void graph_edges(cudaGraph_t g, uint64_t *edges, uint64_t *pdl) {
    size_t n = 0; /* (the count alone: no edge data needed) */
    if (cudaGraphGetEdges(g, NULL, NULL, NULL, &n) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    if (!n) return;
    cudaGraphNode_t *from = ll_calloc(2 * n, sizeof *from), *to = from + n;
    cudaGraphEdgeData *data = ll_calloc(n, sizeof *data);
    if (cudaGraphGetEdges(g, from, to, data, &n) == cudaSuccess) {
        *edges += n;
        for (size_t i = 0; i < n; i++) *pdl += data[i].type == cudaGraphDependencyTypeProgrammatic;
    } else {
        (void)cudaGetLastError();
    }
    free(from);
    free(data);
}

/* The driver's cuGraphKernelNodeGetParams (CUDA 12's layout) and cuGraphKernelNodeGetAttribute, found
 * through the runtime (nothing links libcuda itself); NULL where the runtime does not offer them.  The
 * runtime's cudaGraphKernelNodeGetParams names only kernels the runtime launched: for cuBLASLt's it failed
 * with "invalid device function" on an H200 (CUDA 13.0, driver 580; bench/RESULTS.md, session 30), so
 * no graph with a matmul was ever updated in place.  The driver names every kernel node's function. */
typedef CUresult (*node_params_fn)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS_v2 *);
typedef CUresult (*node_attr_fn)(CUgraphNode, CUkernelNodeAttrID, CUkernelNodeAttrValue *);
static node_params_fn drv_params;
static node_attr_fn drv_attr;
static void *driver_fn(const char *name) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        (void)cudaGetLastError(), fn = NULL;
    return fn;
}
static void find_driver_fns(void) {
    drv_params = (node_params_fn)driver_fn("cuGraphKernelNodeGetParams");
    drv_attr = (node_attr_fn)driver_fn("cuGraphKernelNodeGetAttribute");
    if (!drv_params || !drv_attr) drv_params = NULL, drv_attr = NULL;
}

/* what identifies a kernel node's kernel: its function (two words: the driver's function or
 * library kernel), cluster shape and priority; 0 when it is not named */
static int kernel_of(cudaGraphNode_t node, uint64_t out[6]) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, find_driver_fns);
    memset(out, 0, 6 * sizeof *out);
    out[5] = 1; /* the priority where it is not said: outside the range, the same for all */
    if (drv_params) {
        CUDA_KERNEL_NODE_PARAMS_v2 p;
        CUkernelNodeAttrValue cl, pr;
        memset(&p, 0, sizeof p), memset(&cl, 0, sizeof cl), memset(&pr, 0, sizeof pr);
        if (drv_params((CUgraphNode)node, &p) != CUDA_SUCCESS || (!p.func && !p.kern) ||
            drv_attr((CUgraphNode)node, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &cl) != CUDA_SUCCESS)
            return 0;
        out[0] = (uintptr_t)p.func, out[1] = (uintptr_t)p.kern;
        out[2] = cl.clusterDim.x, out[3] = cl.clusterDim.y, out[4] = cl.clusterDim.z;
        if (drv_attr((CUgraphNode)node, CU_LAUNCH_ATTRIBUTE_PRIORITY, &pr) == CUDA_SUCCESS)
            out[5] = (uint64_t)pr.priority;
        return 1;
    }
    struct cudaKernelNodeParams kp;
    cudaLaunchAttributeValue cl, pr;
    memset(&cl, 0, sizeof cl), memset(&pr, 0, sizeof pr);
    if (cudaGraphKernelNodeGetParams(node, &kp) != cudaSuccess || !kp.func ||
        cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributeClusterDimension, &cl) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    out[0] = (uintptr_t)kp.func;
    out[2] = cl.clusterDim.x, out[3] = cl.clusterDim.y, out[4] = cl.clusterDim.z;
    if (cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributePriority, &pr) == cudaSuccess)
        out[5] = (uint64_t)pr.priority;
    else
        (void)cudaGetLastError();
    return 1;
}

/* Which kernels a graph launches, in order: a hash of its nodes' types and, for each kernel node,
 * its function, cluster shape and priority (the side stream's work is captured at the least:
 * cuda_side.c); 0 when the runtime does not say (the graph is then never updated in place).
 * cudaGraphExecUpdate accepts a kernel node whose kernel changed, but an H100 (CUDA 13.0, driver
 * 580) then faulted with "an illegal instruction was encountered" (fp32 training with TF32, where
 * cuBLASLt picks other kernels for other shapes; bench/RESULTS.md, session 24), so an executable
 * is updated only with a capture of the same kernels: new pointers, grids and arguments alone. */
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
        uint64_t k[6];
        if (!kernel_of(nodes[i], k)) {
            h = 0;
            break;
        }
        for (int j = 0; j < 6; j++) MIX(k[j]);
    }
#undef MIX
    if (!h) (void)cudaGetLastError();
    free(nodes);
    return h;
}

static int cu_graph_replay(ll_backend *be, uint64_t fp) {
    cuda_impl *im = ll_cuda_impl_enter(be);
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
    cuda_impl *im = ll_cuda_impl_enter(be);
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
        if (g) LL_CU(cudaGraphDestroy(g));
        for (int i = 0; i < im->graph.n_retired; i++) LL_CU(cudaFree(im->graph.retired[i])); /* (nothing uses them) */
        im->graph.n_retired = 0;
        im->graph.off = 1;
        ll_warn("CUDA graphs off: a step with conditional nodes (LayerDrop / cross-attention drop) could not be "
                "captured (%s); its kernels and the rest run one by one (LL_CUDA_GRAPH_CONDS=0 keeps graphs for "
                "steps of one draw)",
                im->graph.spoil_why);
        return -1;
    }
    size_t nodes = 0;
    LL_CU(cudaGraphGetNodes(g, NULL, &nodes));
    im->graph.st.captures++;
    im->graph.st.nodes += nodes;
    graph_edges(g, &im->graph.st.edges, &im->graph.st.pdl_edges);
    /* the slot: this fingerprint's (its scratch moved), a free one, the family's least recently
     * used of the same kernels, else of any (updated in place only with the same kernels:
     * graph_kernels), else the least recently used */
    const uint64_t kernels = graph_kernels(g);
    im->graph.st.unnamed += !kernels;
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
        LL_CU(cudaGraphExecDestroy(im->graph.cache[slot].exec));
        im->graph.cache[slot].exec = NULL;
    }
    if (im->graph.cache[slot].exec) {
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(im->graph.cache[slot].exec, g, &info) == cudaSuccess) {
            im->graph.st.updates++;
        } else { /* other node types, or the runtime's rules (compute-sanitizer's memcheck refused ll's): built anew */
            (void)cudaGetLastError();
            im->graph.st.refusals++;
            LL_CU(cudaGraphExecDestroy(im->graph.cache[slot].exec));
            im->graph.cache[slot].exec = NULL;
        }
    }
    const int built = !im->graph.cache[slot].exec;
    if (built) {
        LL_CU(cudaGraphInstantiate(&im->graph.cache[slot].exec, g, ll_cuda_graph_instantiate_flags()));
        im->graph.st.instantiations++;
    }
    im->graph.cache[slot].fp = fp;
    im->graph.cache[slot].family = family;
    im->graph.cache[slot].kernels = kernels;
    /* a graph whose ops used a scratch outgrown during the capture (freed below) is launched once, never replayed */
    im->graph.cache[slot].mem_gen = im->graph.n_retired ? ~(uint64_t)0 : im->graph.mem_gen;
    graph_launch(im, slot, same < 0 && fam < 0);
    LL_CU(cudaGraphDestroy(g));
    for (int i = 0; i < im->graph.n_retired; i++) LL_CU(cudaFree(im->graph.retired[i])); /* (waits for the launch) */
    im->graph.n_retired = 0;
    /* LL_CUDA_GEMM_TUNE: the matmul shapes first met in this capture are timed now; where one
     * switched algorithm, the kept graphs (which have the old one) go: the next steps capture anew */
    if (ll_cuda_gemm_tune_pending(be) > 0) {
        LL_CU(cudaStreamSynchronize(im->stream));
        for (int i = 0; i < GRAPH_CACHE; i++)
            if (im->graph.cache[i].exec) {
                LL_CU(cudaGraphExecDestroy(im->graph.cache[i].exec));
                im->graph.cache[i].exec = NULL;
            }
        im->graph.st.tune_drops++;
    }
    return 0;
}

static void cu_graph_stats(ll_backend *be, ll_graph_stats *out) { *out = ll_cuda_impl(be)->graph.st; }

void ll_cuda_register_graph(ll_backend *be) {
    be->graph_begin = cu_graph_begin;
    be->graph_end = cu_graph_end;
    be->graph_replay = cu_graph_replay;
    be->graph_stats = cu_graph_stats;
    be->cond_if = cu_cond_if;
    be->cond_else = cu_cond_else;
    be->cond_end = cu_cond_end;
}
