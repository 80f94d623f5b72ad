/* CUDA graphs of the emulation (tests only; docs/cuda-emulation.md): stream capture,
 * conditional nodes, instantiation, update, launch.
 *
 * A capturing stream records its work into the graph instead of queueing it; a
 * launch queues the graph's nodes in order.  The capture rules CUDA enforces
 * live in emu_runtime.cc (what invalidates a capture); cudaGraphExecUpdate
 * takes nodes of the same types in the same order (a kernel node may get
 * another kernel, grid or arguments) and refuses another node count or type.
 * Stricter than CUDA, as an H100 behaved: a launch of a graph updated to a
 * kernel of another cluster shape, or to another kernel where either has
 * clusters (the emulated cuBLASLt's may), faults (swapped_kernel).
 * LL_CUDA_EMU_GRAPH_UPDATE=refuse refuses every update (compute-sanitizer did).
 *
 * Graphs are node lists in an order that respects the dependencies: a node
 * goes right after the last node it depends on (the end, for a chain).  So a
 * node captured without depending on a conditional node added by
 * cudaGraphAddNode (cudaStreamUpdateCaptureDependencies forgotten) runs before
 * that conditional here, as it may on a GPU.  Cross-stream capture: a stream
 * that waits for an event recorded in a capture joins it (a fork), the
 * capturing stream waiting for an event of that stream joins it back, and
 * cudaStreamEndCapture refuses work not joined back (cudaErrorStreamCaptureUnjoined);
 * an executable runs the joined streams' nodes as late as their dependents
 * allow (exec_order).
 *
 * Conditional nodes (IF with one or two bodies; CUDA 12.4 / 12.8): handles
 * belong to a graph and serve nodes in it or in its bodies; every handle must
 * serve a node by instantiation (CUDA: "may cause instantiation to fail"; the
 * emulation always fails).  Bodies hold kernels, copies, memsets and
 * conditionals only: a host function captured into one invalidates its capture
 * and every capture of the graphs above it.  An executable graph keeps its own
 * copy of the bodies and its own values (a graph with a conditional node has one
 * executable at a time, as an H100 answered); a launch first resets the handles made
 * with cudaGraphCondAssignDefault, and a conditional node runs, in stream
 * order, the body its value selects.  cudaGraphSetConditional (from a kernel)
 * outside a graph launch, or with a handle the launched graph does not have,
 * stops the process. */
#include <cuda.h> /* (the driver's kernel-node types: cudaGetDriverEntryPointByVersion) */
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "emu_internal.h"

namespace ll_emu {

graph_values *g_graph_running;

namespace {
uint64_t g_graph_launches;
unsigned long long g_capture_ids, g_handle_ids = 0x5eed0000ull; /* not 0 or 1: a value is no handle */

cudaError_t err(cudaError_t e) {
    set_last_error(e);
    return e;
}

/* where in g a node depending on deps goes: right after the last of them */
size_t position_after(const CUgraph_st *g, const cudaGraphNode_t *deps, size_t n) {
    if (n == 1 && !g->nodes.empty() && g->nodes.back().id == deps[0]) return g->nodes.size(); /* a chain */
    size_t pos = 0;
    for (size_t i = 0; i < g->nodes.size(); i++)
        for (size_t k = 0; k < n; k++)
            if (g->nodes[i].id == deps[k]) pos = std::max(pos, i + 1);
    return pos;
}
CUgraphNode_st *insert_node(CUgraph_st *g, CUgraph_st::node n, size_t pos, const cudaGraphNode_t *deps, size_t nd) {
    g->ids.emplace_back(new CUgraphNode_st{g});
    n.id = g->ids.back().get();
    n.deps.assign(deps, deps + nd);
    g->nodes.insert(g->nodes.begin() + (long)pos, std::move(n));
    return g->ids.back().get();
}
/* 0 when deps are distinct nodes of g with default edges */
cudaError_t check_deps(const CUgraph_st *g, const cudaGraphNode_t *deps, const cudaGraphEdgeData *data, size_t n) {
    if (n && !deps) return cudaErrorInvalidValue;
    for (size_t i = 0; i < n; i++) {
        if (!deps[i] || deps[i]->graph != g) return cudaErrorInvalidValue;
        for (size_t k = 0; k < i; k++)
            if (deps[k] == deps[i]) return cudaErrorInvalidValue;
        static const cudaGraphEdgeData zero = {};
        if (data && memcmp(&data[i], &zero, sizeof zero)) return cudaErrorInvalidValue; /* (not modelled) */
    }
    return cudaSuccess;
}
const CUgraph_st *capturing_in(const CUgraph_st *g) {
    if (g->capturer) return g;
    for (const auto &n : g->nodes)
        if (n.cond)
            for (unsigned i = 0; i < n.cond->size; i++)
                if (const CUgraph_st *b = capturing_in(n.cond->body[i].get())) return b;
    return nullptr;
}
/* The order an executable runs g's nodes in: the nodes captured on a stream that joined the
 * capture (a side stream) as late as their dependents allow, the others in their order.  So a
 * side node runs after every node that does not wait for it: a join placed after an op that
 * overwrites the side node's inputs, or reads its outputs, gives a wrong value here, as it may on
 * a GPU. */
std::vector<size_t> exec_order(const CUgraph_st &g) {
    const size_t n = g.nodes.size();
    std::map<const CUgraphNode_st *, size_t> at;
    for (size_t i = 0; i < n; i++) at[g.nodes[i].id] = i;
    std::vector<std::vector<size_t>> deps(n);
    std::vector<size_t> waiting(n, 0); /* dependents not yet placed */
    for (size_t i = 0; i < n; i++)
        for (const CUgraphNode_st *d : g.nodes[i].deps) {
            auto it = at.find(d);
            if (it == at.end()) fail("a graph node depends on a node of another graph (emulation defect)");
            deps[i].push_back(it->second);
            waiting[it->second]++;
        }
    std::set<size_t> side, main; /* placeable: every dependent placed */
    for (size_t i = 0; i < n; i++)
        if (!waiting[i]) (g.nodes[i].side ? side : main).insert(i);
    std::vector<size_t> rev;
    while (!side.empty() || !main.empty()) { /* from the back: a side node whenever one may go there */
        std::set<size_t> &from = side.empty() ? main : side;
        const size_t i = *from.rbegin();
        from.erase(i);
        rev.push_back(i);
        for (size_t d : deps[i])
            if (!--waiting[d]) (g.nodes[d].side ? side : main).insert(d);
    }
    if (rev.size() != n) fail("a graph with a dependency cycle (emulation defect)");
    return std::vector<size_t>(rev.rbegin(), rev.rend());
}
/* An executable copy (the graph may be changed or destroyed after instantiation), in exec_order. */
std::shared_ptr<CUgraph_st> clone(const CUgraph_st &g, CUgraph_st *parent) {
    auto c = std::make_shared<CUgraph_st>();
    c->parent = parent;
    c->handles = g.handles;
    const std::vector<size_t> order = exec_order(g);
    std::vector<int> pos(order.size());
    for (size_t k = 0; k < order.size(); k++) pos[order[k]] = (int)k;
    std::map<const CUgraphNode_st *, int> at;
    for (size_t i = 0; i < g.nodes.size(); i++) at[g.nodes[i].id] = pos[i];
    for (size_t k : order) {
        const CUgraph_st::node &n = g.nodes[k];
        CUgraph_st::node m{n.what, n.func, n.fn, n.kind, nullptr, nullptr};
        m.cluster = n.cluster;
        m.side = n.side;
        m.pdl = n.pdl;
        for (const CUgraphNode_st *d : n.deps) m.dep_idx.push_back(at[d]);
        std::sort(m.dep_idx.begin(), m.dep_idx.end());
        if (n.cond) {
            m.cond = std::make_shared<CUgraph_st::cond_part>(*n.cond);
            for (unsigned i = 0; i < n.cond->size; i++) {
                m.cond->body[i] = clone(*n.cond->body[i], c.get());
                m.cond->out[i] = m.cond->body[i].get();
            }
        }
        c->nodes.push_back(std::move(m));
    }
    return c;
}
/* What instantiation requires of g and its bodies; collects the handles and those in use. */
cudaError_t check_tree(const CUgraph_st &g, bool body, std::vector<graph_values::def> &defs,
                       std::vector<cudaGraphConditionalHandle> &used) {
    if (g.broken) return cudaErrorInvalidValue; /* a body whose capture was invalidated */
    if (g.capturer) return cudaErrorInvalidValue;
    defs.insert(defs.end(), g.handles.begin(), g.handles.end());
    for (const auto &n : g.nodes) {
        if (body && n.kind == NODE_HOST) return cudaErrorNotSupported;
        if (!n.cond) continue;
        used.push_back(n.cond->handle);
        for (unsigned i = 0; i < n.cond->size; i++)
            if (cudaError_t e = check_tree(*n.cond->body[i], true, defs, used)) return e;
    }
    return cudaSuccess;
}
cudaError_t make_values(const CUgraph_st &g, std::shared_ptr<graph_values> *out) {
    auto v = std::make_shared<graph_values>();
    std::vector<cudaGraphConditionalHandle> used;
    if (cudaError_t e = check_tree(g, false, v->defs, used)) return e;
    for (const auto &d : v->defs) {
        if (std::find(used.begin(), used.end(), d.h) == used.end()) return cudaErrorInvalidValue; /* serves no node */
        v->value.emplace_back(d.h, d.value);
    }
    std::sort(v->value.begin(), v->value.end());
    *out = v;
    return cudaSuccess;
}
unsigned *value_of(graph_values *v, cudaGraphConditionalHandle h) {
    auto it = std::lower_bound(v->value.begin(), v->value.end(), std::make_pair(h, 0u));
    return it != v->value.end() && it->first == h ? &it->second : nullptr;
}
void run_nodes(const CUgraph_st &g);
/* A conditional node, when the nodes before it have run. */
void run_cond(const CUgraph_st::cond_part &c) {
    const unsigned *v = g_graph_running ? value_of(g_graph_running, c.handle) : nullptr;
    if (!v) fail("a conditional node runs without its handle's value (emulation defect)");
    if (*v) run_nodes(*c.body[0]);
    else if (c.size == 2) run_nodes(*c.body[1]);
}
void run_nodes(const CUgraph_st &g) {
    for (const auto &n : g.nodes) {
        if (n.cond) run_cond(*n.cond);
        else n.fn();
    }
}
/* node kinds and edges as cudaGraphExecUpdate compares them (two executable copies), recursively
 * through bodies */
cudaGraphExecUpdateResult match(const CUgraph_st &a, const CUgraph_st &b) {
    if (a.nodes.size() != b.nodes.size()) return cudaGraphExecUpdateErrorTopologyChanged;
    for (size_t i = 0; i < a.nodes.size(); i++) {
        const auto &x = a.nodes[i], &y = b.nodes[i];
        if (x.dep_idx != y.dep_idx) return cudaGraphExecUpdateErrorTopologyChanged;
        if (x.kind != y.kind) return cudaGraphExecUpdateErrorNodeTypeChanged;
        if (x.pdl != y.pdl) return cudaGraphExecUpdateErrorTopologyChanged; /* its edges' types changed */
        if (!x.cond) continue;
        if (x.cond->type != y.cond->type || x.cond->size != y.cond->size)
            return cudaGraphExecUpdateErrorParametersChanged; /* "changing node parameters is not supported" */
        for (unsigned k = 0; k < x.cond->size; k++)
            if (cudaGraphExecUpdateResult r = match(*x.cond->body[k], *y.cond->body[k])) return r;
    }
    return cudaGraphExecUpdateSuccess;
}
/* The first kernel node of b (paired with a's in order, as match() pairs them) that cudaGraphExecUpdate
 * may take but an H100 did not survive: another cluster shape, or another kernel where either has
 * clusters (fp32 training with TF32 faulted, "an illegal instruction", after cuBLASLt's kernels of
 * one shape were updated to another's, 2026-11-28; a kernel swap without clusters ran right:
 * tests/gpu/test_graph_cuda.c); "" when there is none. */
std::string swapped_kernel(const CUgraph_st &a, const CUgraph_st &b) {
    for (size_t i = 0; i < a.nodes.size() && i < b.nodes.size(); i++) {
        const auto &x = a.nodes[i], &y = b.nodes[i];
        if (x.cond && y.cond) {
            for (unsigned k = 0; k < x.cond->size && k < y.cond->size; k++) {
                std::string w = swapped_kernel(*x.cond->body[k], *y.cond->body[k]);
                if (!w.empty()) return w;
            }
            continue;
        }
        if (x.kind != NODE_KERNEL || y.kind != NODE_KERNEL) continue;
        const bool other = x.func != y.func || strcmp(x.what, y.what);
        if (x.cluster != y.cluster || (other && (x.cluster > 1 || y.cluster > 1)))
            return std::string(x.what) + " (cluster " + std::to_string(x.cluster) + ") to " + y.what + " (cluster " +
                   std::to_string(y.cluster) + ") at node " + std::to_string(i);
    }
    return "";
}
/* a node handle's node in its graph */
const CUgraph_st::node *node_of(cudaGraphNode_t id) {
    if (!id || !id->graph) return nullptr;
    for (const auto &n : id->graph->nodes)
        if (n.id == id) return &n;
    return nullptr;
}
bool has_cond(const CUgraph_st &g) {
    for (const auto &n : g.nodes)
        if (n.cond) return true;
    return false;
}
} // namespace

int node_kind_of(const char *what, const void *func) {
    if (func) return NODE_KERNEL;
    if (!strncmp(what, "cudaMemcpy", 10)) return NODE_COPY;
    if (!strncmp(what, "cudaMemset", 10)) return NODE_MEMSET;
    if (!strcmp(what, "cudaLaunchHostFunc")) return NODE_HOST;
    return NODE_KERNEL; /* a library's work (a matmul, a sort, a collective) is kernels */
}

void capture_node(CUstream_st *st, CUgraph_st::node n) {
    if (st->cap_broken) return;
    CUgraph_st *g = st->cap;
    n.side = st->cap_forked;
    if (n.kind == NODE_KERNEL) n.priority = st->priority;
    CUgraphNode_st *id = insert_node(g, std::move(n), position_after(g, st->cap_deps.data(), st->cap_deps.size()),
                                     st->cap_deps.data(), st->cap_deps.size());
    st->cap_deps.assign(1, id);
}

} // namespace ll_emu

struct CUgraphExec_st {
    std::shared_ptr<CUgraph_st> root; /* the executable copy */
    std::shared_ptr<ll_emu::graph_values> vals;
    std::shared_ptr<int> live; /* the live executables of the graph it was instantiated from */
    std::string swapped;       /* an update gave a kernel node a kernel of another cluster shape */
    ~CUgraphExec_st() {
        if (live) --*live;
    }
};

using namespace ll_emu;

#define LOCK std::lock_guard<std::recursive_mutex> lk_(emu_mutex())

extern "C" {

/* Device side: the value of h for the graph launch running this kernel. */
void cudaGraphSetConditional(cudaGraphConditionalHandle h, unsigned int value) {
    if (!g_graph_running)
        fail("cudaGraphSetConditional(handle %#llx) in a kernel that is not part of a graph launch", h);
    unsigned *v = value_of(g_graph_running, h);
    if (!v) fail("cudaGraphSetConditional(handle %#llx): not a handle of the graph being launched", h);
    *v = value;
}

static cudaError_t begin_capture(CUstream_st *s, CUgraph_st *g, bool owned, const cudaGraphNode_t *deps,
                                 size_t n, cudaStreamCaptureMode mode) {
    s->cap = g;
    s->cap_owned = owned;
    s->cap_mode = mode;
    s->cap_broken = NULL;
    s->cap_thread = thread_self();
    s->cap_id = ++g_capture_ids;
    s->cap_deps.assign(deps, deps + n);
    g->capturer = s;
    return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    LOCK;
    if (!s) return err(cudaErrorStreamCaptureUnsupported); /* not the legacy stream */
    if (s->cap) return err(cudaErrorIllegalState);
    return begin_capture(s, new CUgraph_st(), true, NULL, 0, mode);
}
/* Capture into an existing graph (a conditional body): one capture into a graph at a time. */
cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g, const cudaGraphNode_t *deps,
                                          const cudaGraphEdgeData *data, size_t n, cudaStreamCaptureMode mode) {
    LOCK;
    if (!s) return err(cudaErrorStreamCaptureUnsupported);
    if (!g) return err(cudaErrorInvalidValue);
    if (s->cap || g->capturer) return err(cudaErrorIllegalState);
    if (cudaError_t e = check_deps(g, deps, data, n)) return err(e);
    return begin_capture(s, g, false, deps, n, mode);
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    LOCK;
    *g = NULL;
    if (!s || !s->cap) return err(cudaErrorIllegalState);
    if (s->cap_mode != cudaStreamCaptureModeRelaxed && s->cap_thread != thread_self())
        return err(cudaErrorStreamCaptureWrongThread);
    CUgraph_st *graph = s->cap;
    if (s->cap_forked) return err(cudaErrorStreamCaptureUnmatched); /* (not the stream that began it) */
    /* the streams that joined the capture: their last nodes must be waited for by this stream's
     * (CUDA: cudaErrorStreamCaptureUnjoined); they stop capturing with it */
    const char *unjoined = NULL;
    std::set<const CUgraphNode_st *> before(s->cap_deps.begin(), s->cap_deps.end());
    std::vector<const CUgraphNode_st *> todo(s->cap_deps.begin(), s->cap_deps.end());
    while (!todo.empty()) {
        const CUgraph_st::node *n = node_of(const_cast<cudaGraphNode_t>(todo.back()));
        todo.pop_back();
        if (n)
            for (const CUgraphNode_st *d : n->deps)
                if (before.insert(d).second) todo.push_back(d);
    }
    for (CUstream_st *t : streams_capturing(graph)) {
        if (t == s) continue;
        for (cudaGraphNode_t d : t->cap_deps)
            if (!before.count(d)) unjoined = "work of a stream that joined the capture was not waited for";
        if (t->cap_broken && !s->cap_broken) break_capture(s, t->cap_broken);
        t->cap = NULL;
        t->cap_forked = false;
        t->cap_deps.clear();
    }
    if (unjoined) break_capture(s, unjoined);
    graph->capturer = NULL;
    s->cap = NULL;
    s->cap_deps.clear();
    if (const CUgraph_st *b = capturing_in(graph))
        fail("cudaStreamEndCapture of a graph while stream %p still captures into its conditional body %p",
             (void *)b->capturer, (const void *)b);
    if (s->cap_broken) { /* the capture is lost (a body stays its node's, unusable); the stream is usable again */
        if (s->cap_owned) delete graph;
        return err(unjoined ? cudaErrorStreamCaptureUnjoined : cudaErrorStreamCaptureInvalidated);
    }
    *g = graph;
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *status) {
    LOCK;
    CUstream_st *st = stream_of(s);
    *status = !st->cap ? cudaStreamCaptureStatusNone
              : st->cap_broken ? cudaStreamCaptureStatusInvalidated
                               : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}
/* (CUDA 13's signature) outside a capture: status None, nothing else */
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus *status, unsigned long long *id,
                                     cudaGraph_t *graph, const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
                                     size_t *n) {
    LOCK;
    if (!status || (edges && !deps)) return err(cudaErrorInvalidValue);
    CUstream_st *st = stream_of(s);
    *status = !st->cap ? cudaStreamCaptureStatusNone
              : st->cap_broken ? cudaStreamCaptureStatusInvalidated
                               : cudaStreamCaptureStatusActive;
    if (id) *id = st->cap ? st->cap_id : 0;
    if (graph) *graph = st->cap;
    st->cap_edges.assign(st->cap_deps.size(), cudaGraphEdgeData{});
    if (deps) *deps = st->cap && !st->cap_deps.empty() ? st->cap_deps.data() : NULL;
    if (edges) *edges = st->cap && !st->cap_deps.empty() ? st->cap_edges.data() : NULL;
    if (n) *n = st->cap ? st->cap_deps.size() : 0;
    return cudaSuccess;
}
cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t s, cudaGraphNode_t *deps,
                                                const cudaGraphEdgeData *data, size_t n, unsigned int flags) {
    LOCK;
    CUstream_st *st = stream_of(s);
    if (!st->cap) return err(cudaErrorIllegalState);
    if (flags != cudaStreamAddCaptureDependencies && flags != cudaStreamSetCaptureDependencies)
        return err(cudaErrorInvalidValue);
    if (cudaError_t e = check_deps(st->cap, deps, data, n)) return err(e);
    if (st->cap_broken) return err(cudaErrorStreamCaptureInvalidated);
    if (flags == cudaStreamSetCaptureDependencies) st->cap_deps.clear();
    for (size_t i = 0; i < n; i++)
        if (std::find(st->cap_deps.begin(), st->cap_deps.end(), deps[i]) == st->cap_deps.end())
            st->cap_deps.push_back(deps[i]);
    return cudaSuccess;
}

cudaError_t cudaGraphCreate(cudaGraph_t *g, unsigned int flags) {
    LOCK;
    if (!g || flags) return err(cudaErrorInvalidValue);
    *g = new CUgraph_st();
    return cudaSuccess;
}
cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *h, cudaGraph_t g, unsigned int def,
                                             unsigned int flags) {
    LOCK;
    if (!h || !g || (flags & ~(unsigned)cudaGraphCondAssignDefault)) return err(cudaErrorInvalidValue);
    /* a driver older than conditional nodes (CUDA 12.4), for the backend's way around it */
    const char *no = getenv("LL_CUDA_EMU_NO_CONDITIONALS");
    if (no && *no && strcmp(no, "0")) return err(cudaErrorNotSupported);
    *h = ++g_handle_ids;
    g->handles.push_back(graph_values::def{*h, def, flags});
    return cudaSuccess;
}
/* Only conditional nodes (the rest is captured); IF with one or two bodies. */
cudaError_t cudaGraphAddNode(cudaGraphNode_t *node, cudaGraph_t g, const cudaGraphNode_t *deps,
                             const cudaGraphEdgeData *data, size_t n, cudaGraphNodeParams *p) {
    LOCK;
    if (!node || !g || !p) return err(cudaErrorInvalidValue);
    if (p->type != cudaGraphNodeTypeConditional) return err(cudaErrorNotSupported);
    if (cudaError_t e = check_deps(g, deps, data, n)) return err(e);
    cudaConditionalNodeParams &c = p->conditional;
    if (c.type == cudaGraphCondTypeWhile || c.type == cudaGraphCondTypeSwitch) return err(cudaErrorNotSupported);
    if (c.type != cudaGraphCondTypeIf || (c.size != 1 && c.size != 2)) return err(cudaErrorInvalidValue);
    bool known = false; /* the handle: of g or of a graph above it */
    for (const CUgraph_st *a = g; a && !known; a = a->parent)
        for (const auto &d : a->handles) known = known || d.h == c.handle;
    if (!known) return err(cudaErrorInvalidValue);
    auto cp = std::make_shared<CUgraph_st::cond_part>();
    cp->handle = c.handle;
    cp->type = c.type;
    cp->size = c.size;
    for (unsigned i = 0; i < c.size; i++) {
        cp->body[i] = std::make_shared<CUgraph_st>();
        cp->body[i]->parent = g;
        cp->out[i] = cp->body[i].get();
    }
    c.phGraph_out = cp->out;
    *node = insert_node(g, CUgraph_st::node{"conditional node", NULL, nullptr, NODE_COND, NULL, cp},
                        position_after(g, deps, n), deps, n);
    return cudaSuccess;
}
/* the top-level nodes, in order (CUDA: the rest of a longer array NULL, *n the count given) */
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n) {
    LOCK;
    if (!g || !n) return err(cudaErrorInvalidValue);
    if (nodes) {
        size_t k = 0;
        for (; k < *n && k < g->nodes.size(); k++) nodes[k] = g->nodes[k].id;
        for (size_t i = k; i < *n; i++) nodes[i] = NULL;
        *n = k;
        return cudaSuccess;
    }
    *n = g->nodes.size();
    return cudaSuccess;
}
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *t) {
    LOCK;
    const CUgraph_st::node *n = node_of(node);
    if (!n || !t) return err(cudaErrorInvalidValue);
    switch (n->kind) {
    case NODE_KERNEL: *t = cudaGraphNodeTypeKernel; break;
    case NODE_COPY: *t = cudaGraphNodeTypeMemcpy; break;
    case NODE_MEMSET: *t = cudaGraphNodeTypeMemset; break;
    case NODE_HOST: *t = cudaGraphNodeTypeHost; break;
    default: *t = cudaGraphNodeTypeConditional; break;
    }
    return cudaSuccess;
}
/* the edge from node d to node x is programmatic (its type alone; ports are not modelled): a kernel
 * node to a kernel launched with programmatic stream serialization, as CUDA captures it */
static bool programmatic_edge(const CUgraph_st::node &x, CUgraphNode_st *d) {
    const CUgraph_st::node *dn = node_of(d);
    return x.pdl && x.kind == NODE_KERNEL && dn && dn->kind == NODE_KERNEL;
}
/* every dependency of g's top-level nodes, with its edge data (as cudaGraphNodeGetDependencies) */
cudaError_t cudaGraphGetEdges(cudaGraph_t g, cudaGraphNode_t *from, cudaGraphNode_t *to, cudaGraphEdgeData *data,
                              size_t *n) {
    LOCK;
    if (!g || !n || (!from != !to) || (data && !from)) return err(cudaErrorInvalidValue);
    size_t k = 0;
    for (const auto &x : g->nodes)
        for (CUgraphNode_st *d : x.deps) {
            const bool prog = programmatic_edge(x, d);
            if (from) {
                if (k >= *n) continue;
                if (prog && !data) return err(cudaErrorLossyQuery);
                from[k] = d;
                to[k] = x.id;
                if (data) {
                    data[k] = cudaGraphEdgeData{};
                    if (prog) data[k].type = cudaGraphDependencyTypeProgrammatic;
                }
            }
            k++;
        }
    if (from) {
        for (size_t i = k; i < *n; i++) from[i] = to[i] = NULL;
        if (k > *n) k = *n;
    }
    *n = k;
    return cudaSuccess;
}
/* a node's dependencies with their edge data (programmatic_edge) */
cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *deps, cudaGraphEdgeData *data,
                                         size_t *n) {
    LOCK;
    const CUgraph_st::node *x = node_of(node);
    if (!x || !n) return err(cudaErrorInvalidValue);
    if (!deps) {
        *n = x->deps.size();
        return cudaSuccess;
    }
    size_t k = 0;
    for (; k < *n && k < x->deps.size(); k++) {
        const bool prog = programmatic_edge(*x, x->deps[k]);
        if (prog && !data) return err(cudaErrorLossyQuery); /* CUDA: non-default edge data */
        deps[k] = x->deps[k];
        if (data) {
            data[k] = cudaGraphEdgeData{};
            if (prog) data[k].type = cudaGraphDependencyTypeProgrammatic;
        }
    }
    for (size_t i = k; i < *n; i++) deps[i] = NULL;
    *n = k;
    return cudaSuccess;
}
/* a library's kernel node (cuBLAS, cuBLASLt, NCCL: their own modules, launched through the driver) */
static bool library_node(const CUgraph_st::node &n) {
    return !strncmp(n.what, "cublas", 6) || !strncmp(n.what, "nccl", 4);
}
/* the kernel alone (a library's kernels are told apart by their name; grid and arguments are not
 * modelled).  The runtime names only kernels it launched: for cuBLASLt's, an H200 (CUDA 13.0, driver
 * 580; bench/RESULTS.md, session 30) answered "invalid device function", and so does the emulation
 * for every library's; the driver's cuGraphKernelNodeGetParams (below) names them */
cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, struct cudaKernelNodeParams *p) {
    LOCK;
    const CUgraph_st::node *n = node_of(node);
    if (!n || !p || n->kind != NODE_KERNEL) return err(cudaErrorInvalidValue);
    if (library_node(*n)) return err(cudaErrorInvalidDeviceFunction);
    *p = cudaKernelNodeParams{};
    p->func = (void *)(n->func ? n->func : (const void *)n->what);
    return cudaSuccess;
}
/* the cluster shape and the priority alone */
cudaError_t cudaGraphKernelNodeGetAttribute(cudaGraphNode_t node, cudaKernelNodeAttrID attr, cudaKernelNodeAttrValue *v) {
    LOCK;
    const CUgraph_st::node *n = node_of(node);
    if (!n || !v || n->kind != NODE_KERNEL) return err(cudaErrorInvalidValue);
    *v = cudaKernelNodeAttrValue{};
    if (attr == cudaLaunchAttributePriority) {
        v->priority = n->priority;
        return cudaSuccess;
    }
    if (attr != cudaLaunchAttributeClusterDimension) return err(cudaErrorNotSupported);
    v->clusterDim.x = n->cluster;
    v->clusterDim.y = v->clusterDim.z = 1;
    return cudaSuccess;
}
/* The driver's kernel-node queries, reached through cudaGetDriverEntryPointByVersion (CUDA 12's
 * layouts): every kernel node named, a library's as a CUkernel; they leave the runtime's last error
 * alone.  LL_CUDA_EMU_NO_DRIVER_ENTRY_POINTS=1: the runtime offers none (ll then asks the runtime,
 * which names no library kernel, so no graph with a matmul is updated in place) */
static CUresult drv_kernel_node_params(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v2 *p) {
    LOCK;
    const CUgraph_st::node *n = node_of((cudaGraphNode_t)node);
    if (!n || !p || n->kind != NODE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
    *p = CUDA_KERNEL_NODE_PARAMS_v2{};
    const void *k = n->func ? n->func : (const void *)n->what;
    if (library_node(*n))
        p->kern = (CUkernel)k;
    else
        p->func = (CUfunction)k;
    return CUDA_SUCCESS;
}
static CUresult drv_kernel_node_attribute(CUgraphNode node, CUkernelNodeAttrID attr, CUkernelNodeAttrValue *v) {
    LOCK;
    const CUgraph_st::node *n = node_of((cudaGraphNode_t)node);
    if (!n || !v || n->kind != NODE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
    *v = CUkernelNodeAttrValue{};
    if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
        v->priority = n->priority;
        return CUDA_SUCCESS;
    }
    if (attr != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) return CUDA_ERROR_NOT_SUPPORTED;
    v->clusterDim.x = n->cluster;
    v->clusterDim.y = v->clusterDim.z = 1;
    return CUDA_SUCCESS;
}
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                             unsigned long long flags, enum cudaDriverEntryPointQueryResult *status) {
    if (!symbol || !fn || flags != cudaEnableDefault || version < 12000) return err(cudaErrorInvalidValue);
    const char *no = getenv("LL_CUDA_EMU_NO_DRIVER_ENTRY_POINTS");
    *fn = nullptr;
    if (!(no && *no && strcmp(no, "0"))) {
        if (!strcmp(symbol, "cuGraphKernelNodeGetParams")) *fn = (void *)drv_kernel_node_params;
        if (!strcmp(symbol, "cuGraphKernelNodeGetAttribute")) *fn = (void *)drv_kernel_node_attribute;
    }
    if (status) *status = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}
/* flags: 0 or cudaGraphInstantiateFlagUseNodePriority (the nodes' captured priorities; the emulation
 * has no timing to apply them to); others are not what ll asks for */
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags) {
    LOCK;
    if (flags & ~(unsigned long long)cudaGraphInstantiateFlagUseNodePriority) return err(cudaErrorInvalidValue);
    if (!e || !g || g->parent) return err(cudaErrorInvalidValue); /* (a body runs as its node's) */
    std::shared_ptr<graph_values> v;
    if (cudaError_t r = make_values(*g, &v)) return err(r);
    /* a GPU (H100, CUDA 13.0) refused a second executable of a graph with a conditional node while
     * the first lived (the error it gave: tests/gpu/test_graph_cond_cuda.c prints it) */
    if (has_cond(*g) && *g->live > 0) return err(cudaErrorNotSupported);
    *e = new CUgraphExec_st{clone(*g, NULL), v, has_cond(*g) ? g->live : nullptr, std::string()};
    if ((*e)->live) ++*(*e)->live;
    return cudaSuccess;
}
/* The parameters of g's nodes into e when the two have as many nodes of the
 * same types in the same order, conditionals of the same type and size with
 * bodies that match in turn, and the same edges, as CUDA allows (a kernel node
 * may change its kernel, grid and arguments); else e is unchanged and the
 * caller instantiates g anew.  g's handles
 * take the place of e's (CUDA pairs them; their defaults and flags are g's). */
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t e, cudaGraph_t g, cudaGraphExecUpdateResultInfo *info) {
    LOCK;
    if (!e || !g) return err(cudaErrorInvalidValue);
    std::shared_ptr<CUgraph_st> c = clone(*g, NULL);
    cudaGraphExecUpdateResult r = match(*e->root, *c);
    std::shared_ptr<graph_values> v;
    if (r == cudaGraphExecUpdateSuccess && make_values(*g, &v) != cudaSuccess) r = cudaGraphExecUpdateErrorNotSupported;
    /* LL_CUDA_EMU_GRAPH_UPDATE=refuse: every update refused, as compute-sanitizer's memcheck refused
     * ll's on an H100 (error 910, 2026-11-28): the caller must build the graph anew */
    static const bool refuse = [] {
        const char *m = env("LL_CUDA_EMU_GRAPH_UPDATE");
        return m && !strcmp(m, "refuse");
    }();
    if (refuse) r = cudaGraphExecUpdateErrorNotSupported;
    if (info) *info = cudaGraphExecUpdateResultInfo{r, NULL, NULL};
    if (r != cudaGraphExecUpdateSuccess) return err(cudaErrorGraphExecUpdateFailure);
    if (e->swapped.empty()) e->swapped = swapped_kernel(*e->root, *c); /* accepted, as CUDA does; faults at launch */
    e->root = c;
    e->vals = v;
    return cudaSuccess;
}
/* Every node, in order, on s (each a stream operation of its own, as the stream
 * runs them; ll_cuda_emu_stream_ops counted them when they were captured); the
 * handles with cudaGraphCondAssignDefault take their defaults first. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    LOCK;
    if (!e) return err(cudaErrorInvalidValue);
    CUstream_st *st = stream_of(s);
    if (st->cap) {
        if (has_cond(*e->root)) { /* its handles are its own: not copied into another graph */
            break_capture(st, "cudaGraphLaunch of a graph with conditional nodes into a capture");
            return err(cudaErrorStreamCaptureUnsupported);
        }
        for (const CUgraph_st::node &n : e->root->nodes) {
            CUgraph_st::node m{n.what, n.func, n.fn, n.kind, NULL, nullptr};
            m.cluster = n.cluster;
            m.pdl = n.pdl;
            capture_node(st, std::move(m));
        }
        g_graph_launches++;
        return cudaSuccess;
    }
    if (!e->swapped.empty()) { /* as the H100 did: the launch faults (sticky, seen at the next synchronisation) */
        const std::string why = "a graph updated in place from kernel " + e->swapped +
                                " was launched: an H100 faulted so (an illegal instruction; the emulation is strict)";
        st->q.push_back(CUstream_st::item{"graph launch: swapped kernel", [why]() {
                                              fault(cudaErrorIllegalInstruction, why.c_str());
                                          },
                                          NULL, 0, nullptr});
        st->queued++;
    }
    const std::shared_ptr<graph_values> v = e->vals;
    if (!v->defs.empty()) {
        st->q.push_back(CUstream_st::item{"graph launch: conditional defaults", [v]() {
                                              for (const auto &d : v->defs)
                                                  if (d.flags & cudaGraphCondAssignDefault) *value_of(v.get(), d.h) = d.value;
                                          },
                                          NULL, 0, v});
        st->queued++;
    }
    for (const CUgraph_st::node &n : e->root->nodes) {
        std::function<void()> fn = n.fn;
        if (n.cond) fn = [c = n.cond]() { run_cond(*c); };
        st->q.push_back(CUstream_st::item{n.what, std::move(fn), NULL, 0, v});
        st->queued++;
    }
    note_queued();
    g_graph_launches++;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    LOCK;
    delete e; /* (nodes already launched hold what they need) */
    return cudaSuccess;
}
/* A body belongs to its node (destroyed with its graph); a graph still captured into
 * (or one of its bodies) cannot be destroyed. */
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    LOCK;
    if (!g) return err(cudaErrorInvalidValue);
    if (g->parent) return err(cudaErrorInvalidValue);
    if (const CUgraph_st *b = capturing_in(g))
        fail("cudaGraphDestroy of a graph while stream %p captures into it or its body %p", (void *)b->capturer,
             (const void *)b);
    delete g;
    return cudaSuccess;
}

/* Test hook: cudaGraphLaunch calls so far. */
uint64_t ll_cuda_emu_graph_launches(void) {
    LOCK;
    return g_graph_launches;
}

} // extern "C"
