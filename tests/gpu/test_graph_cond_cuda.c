/* CUDA graph conditional nodes on the runtime itself (no ll backend): the
 * program the CUDA backend's LayerDrop graphs are built with, run on a GPU and
 * on the emulation (docs/cuda-emulation.md).  A relaxed
 * capture of `main` gets an IF node with two bodies by cudaGraphAddNode; its
 * handle is set by ll_cuda_launch_cond_set (kernels/graph_cond.cu) from a flag
 * in device memory; the bodies are captured on another stream with
 * cudaStreamBeginCaptureToGraph, body 0 with a nested IF of its own.  Checks:
 * one executable graph launched with the flags changed between launches runs
 * the selected bodies (and the work after the node sees their results); the
 * top-level node count; cudaGraphCondAssignDefault resets the value at every
 * launch; two executable graphs of one graph keep separate values;
 * cudaGraphExecUpdate takes an identical capture and refuses a body with
 * another node count; CUDA's argument rules; a host function captured into a
 * body is refused (in a child process: a driver bug, NVBUG 6805256, may crash
 * the process that ends such captures).  A few rules CUDA leaves open ("may
 * fail", undefined) are checked under the emulation only.  Skips (77) without
 * a device. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ll_cuda.h"
#include "../util/testutil.h"

#define NB 64 /* bytes of each result buffer */

static cudaStream_t s_main, s_body, s_nest;
static uint8_t *d_flag, *d_flag2, *d_out, *d_nest, *d_copy, *d_src, *h_flags;
static int emulated;

/* captures one IF node with its handle set from `flag` on `cur` into the graph `cur` captures
 * into; returns the node's bodies (size 1 or 2) */
static cudaGraph_t *add_if(cudaStream_t cur, const uint8_t *flag, unsigned size, unsigned def, unsigned flags,
                           cudaGraphConditionalHandle *hout, int set_after) {
    enum cudaStreamCaptureStatus st;
    cudaGraph_t g = NULL;
    const cudaGraphNode_t *deps = NULL;
    size_t nd = 0;
    cudaGraphConditionalHandle h = 0;
    CHECK(cudaStreamGetCaptureInfo(cur, &st, NULL, &g, &deps, NULL, &nd) == cudaSuccess &&
          st == cudaStreamCaptureStatusActive && g != NULL);
    CHECK(cudaGraphConditionalHandleCreate(&h, g, def, flags) == cudaSuccess);
    if (!set_after) CHECK(ll_cuda_launch_cond_set(cur, h, flag) == cudaSuccess);
    CHECK(cudaStreamGetCaptureInfo(cur, &st, NULL, &g, &deps, NULL, &nd) == cudaSuccess);
    CHECK(set_after || nd == 1);
    struct cudaGraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = h;
    p.conditional.type = cudaGraphCondTypeIf;
    p.conditional.size = size;
    cudaGraphNode_t node = NULL;
    CHECK(cudaGraphAddNode(&node, g, deps, NULL, nd, &p) == cudaSuccess && p.conditional.phGraph_out != NULL);
    CHECK(cudaStreamUpdateCaptureDependencies(cur, &node, NULL, 1, cudaStreamSetCaptureDependencies) == cudaSuccess);
    if (set_after) CHECK(ll_cuda_launch_cond_set(cur, h, flag) == cudaSuccess);
    if (hout) *hout = h;
    return p.conditional.phGraph_out;
}
static void begin_body(cudaStream_t s, cudaGraph_t body) {
    CHECK(cudaStreamBeginCaptureToGraph(s, body, NULL, NULL, 0, cudaStreamCaptureModeRelaxed) == cudaSuccess);
}
static void end_body(cudaStream_t s, cudaGraph_t body) {
    cudaGraph_t g = NULL;
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess && g == body);
}

/* main: out = 0, nest = 0; IF flag { out = 0x11; copy src -> out + 32; IF flag2 { nest = 0x33 }
 * ELSE { nest = 0x44 } } ELSE { out = 0x22 }; copy = out.  extra: body 0 gets one more memset. */
static cudaGraph_t build(int extra) {
    cudaGraph_t g = NULL;
    CHECK(cudaStreamBeginCapture(s_main, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(cudaMemsetAsync(d_out, 0, NB, s_main) == cudaSuccess);
    CHECK(cudaMemsetAsync(d_nest, 0, NB, s_main) == cudaSuccess);
    cudaGraph_t *b = add_if(s_main, d_flag, 2, 0, cudaGraphCondAssignDefault, NULL, 0);
    cudaGraph_t b0 = b[0], b1 = b[1];
    begin_body(s_body, b0);
    CHECK(cudaMemsetAsync(d_out, 0x11, NB, s_body) == cudaSuccess);
    CHECK(cudaMemcpyAsync(d_out + 32, d_src, 16, cudaMemcpyDeviceToDevice, s_body) == cudaSuccess);
    if (extra) CHECK(cudaMemsetAsync(d_out + 48, 0x11, 1, s_body) == cudaSuccess);
    cudaGraph_t *nb = add_if(s_body, d_flag2, 2, 0, cudaGraphCondAssignDefault, NULL, 0);
    cudaGraph_t n0 = nb[0], n1 = nb[1];
    begin_body(s_nest, n0);
    CHECK(cudaMemsetAsync(d_nest, 0x33, NB, s_nest) == cudaSuccess);
    end_body(s_nest, n0);
    begin_body(s_nest, n1);
    CHECK(cudaMemsetAsync(d_nest, 0x44, NB, s_nest) == cudaSuccess);
    end_body(s_nest, n1);
    end_body(s_body, b0);
    begin_body(s_body, b1);
    CHECK(cudaMemsetAsync(d_out, 0x22, NB, s_body) == cudaSuccess);
    end_body(s_body, b1);
    CHECK(cudaMemcpyAsync(d_copy, d_out, NB, cudaMemcpyDeviceToDevice, s_main) == cudaSuccess);
    CHECK(cudaStreamEndCapture(s_main, &g) == cudaSuccess && g != NULL);
    return g;
}

/* uploads the flags, launches e and checks what ran; 0 when as expected */
static int run(cudaGraphExec_t e, int f, int f2, const char *what) {
    h_flags[0] = (uint8_t)f;
    h_flags[1] = (uint8_t)f2;
    CHECK(cudaMemcpyAsync(d_flag, h_flags, 1, cudaMemcpyHostToDevice, s_main) == cudaSuccess);
    CHECK(cudaMemcpyAsync(d_flag2, h_flags + 1, 1, cudaMemcpyHostToDevice, s_main) == cudaSuccess);
    CHECK(cudaGraphLaunch(e, s_main) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s_main) == cudaSuccess);
    uint8_t out[NB], nest[NB], copy[NB];
    CHECK(cudaMemcpy(out, d_out, NB, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(cudaMemcpy(nest, d_nest, NB, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(cudaMemcpy(copy, d_copy, NB, cudaMemcpyDeviceToHost) == cudaSuccess);
    const int want = f ? 0x11 : 0x22, want_nest = !f ? 0 : f2 ? 0x33 : 0x44;
    int bad = 0;
    for (int i = 0; i < NB; i++) {
        const int w = f && i >= 32 && i < 48 ? 100 + i - 32 : want; /* body 0's copy of src */
        bad += out[i] != w || copy[i] != w || nest[i] != want_nest;
    }
    CHECK_MSG(!bad, "%s (flags %d %d): %d bytes wrong: out[0] %#x out[32] %d (want %#x, 100), nest[0] %#x (want %#x), "
              "copy[0] %#x", what, f, f2, bad, out[0], out[32], want, nest[0], want_nest, copy[0]);
    return bad;
}

/* main: IF (handle default def, flags) { out = 0x55 }, then the handle set from flag (after the node) */
static cudaGraph_t build_set_after(unsigned def, unsigned flags) {
    cudaGraph_t g = NULL;
    CHECK(cudaStreamBeginCapture(s_main, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    cudaGraph_t *b = add_if(s_main, d_flag, 1, def, flags, NULL, 1);
    cudaGraph_t b0 = b[0];
    begin_body(s_body, b0);
    CHECK(cudaMemsetAsync(d_out, 0x55, NB, s_body) == cudaSuccess);
    end_body(s_body, b0);
    CHECK(cudaStreamEndCapture(s_main, &g) == cudaSuccess && g != NULL);
    return g;
}
/* whether the body of a build_set_after graph ran at a launch of e with flag f (out cleared first) */
static int body_ran(cudaGraphExec_t e, int f) {
    uint8_t out = 0;
    h_flags[0] = (uint8_t)f;
    CHECK(cudaMemset(d_out, 0, NB) == cudaSuccess);
    CHECK(cudaMemcpy(d_flag, h_flags, 1, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(cudaGraphLaunch(e, s_main) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s_main) == cudaSuccess);
    CHECK(cudaMemcpy(&out, d_out, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
    return out == 0x55;
}

static void host_fn(void *p) { (void)p; }

/* child: a host function captured into a body; prints each step's status (a GPU's driver may
 * crash in the later steps) */
static int host_in_body(void) {
    cudaStream_t a, b;
    uint8_t *flag;
    if (cudaStreamCreate(&a) || cudaStreamCreate(&b) || cudaMalloc((void **)&flag, 1)) return 2;
    cudaGraph_t g = NULL, bg = NULL;
    cudaGraphExec_t e = NULL;
    if (cudaStreamBeginCapture(a, cudaStreamCaptureModeRelaxed)) return 2;
    s_main = a;
    cudaGraph_t *bodies = add_if(a, flag, 1, 0, 0, NULL, 0);
    if (tu_failures) return 2;
    if (cudaStreamBeginCaptureToGraph(b, bodies[0], NULL, NULL, 0, cudaStreamCaptureModeRelaxed)) return 2;
    printf("hostfunc %d\n", (int)cudaLaunchHostFunc(b, host_fn, NULL));
    fflush(stdout);
    printf("endbody %d\n", (int)cudaStreamEndCapture(b, &bg));
    fflush(stdout);
    cudaError_t r = cudaStreamEndCapture(a, &g);
    printf("endmain %d\n", (int)r);
    fflush(stdout);
    if (r == cudaSuccess) printf("inst %d\n", (int)cudaGraphInstantiate(&e, g, 0));
    fflush(stdout);
    return 0;
}
/* child: the set kernel launched on a stream, outside any graph (the emulation stops) */
static int set_outside(void) {
    uint8_t *flag;
    if (cudaMalloc((void **)&flag, 1)) return 2;
    ll_cuda_launch_cond_set(0, 0x1234, flag);
    cudaDeviceSynchronize();
    return 0;
}

/* runs this program with arg; its output in buf; returns the exit status (-1: it did not exit) */
static int child(const char *arg, char *buf, size_t n) {
    char self[4096], cmd[4300];
    const ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(sl > 0);
    self[sl > 0 ? sl : 0] = 0;
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", self, arg);
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    size_t got = 0, r;
    while (p && got + 1 < n && (r = fread(buf + got, 1, n - 1 - got, p)) > 0) got += r;
    buf[got] = 0;
    const int st = p ? pclose(p) : -1;
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
static int step(const char *out, const char *name, int *present) {
    const char *q = strstr(out, name);
    *present = q != NULL;
    return q ? atoi(q + strlen(name)) : 0;
}

int main(int argc, char **argv) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("no CUDA device: skipping\n");
        return 77;
    }
    if (argc > 1 && !strcmp(argv[1], "--host-in-body")) return host_in_body();
    if (argc > 1 && !strcmp(argv[1], "--set-outside")) return set_outside();
    struct cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
    emulated = strstr(prop.name, "emulat") != NULL;
    CHECK(cudaStreamCreate(&s_main) == cudaSuccess && cudaStreamCreate(&s_body) == cudaSuccess);
    CHECK(cudaStreamCreate(&s_nest) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d_flag, 1) == cudaSuccess && cudaMalloc((void **)&d_flag2, 1) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d_out, NB) == cudaSuccess && cudaMalloc((void **)&d_nest, NB) == cudaSuccess);
    CHECK(cudaMalloc((void **)&d_copy, NB) == cudaSuccess && cudaMalloc((void **)&d_src, NB) == cudaSuccess);
    CHECK(cudaMallocHost((void **)&h_flags, 2) == cudaSuccess);
    uint8_t src[NB];
    for (int i = 0; i < NB; i++) src[i] = (uint8_t)(100 + i);
    CHECK(cudaMemcpy(d_src, src, NB, cudaMemcpyHostToDevice) == cudaSuccess);

    /* outside a capture: status None */
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusActive;
    CHECK(cudaStreamGetCaptureInfo(s_main, &st, NULL, NULL, NULL, NULL, NULL) == cudaSuccess &&
          st == cudaStreamCaptureStatusNone);

    /* one executable graph, the flags changed between launches */
    cudaGraph_t g = build(0);
    size_t nodes = 0;
    CHECK_MSG(cudaGraphGetNodes(g, NULL, &nodes) == cudaSuccess && nodes == 5,
              "the graph has %zu top-level nodes, not 5 (2 memsets, the set kernel, the IF, the copy)", nodes);
    cudaGraphExec_t e = NULL, e2 = NULL;
    CHECK(cudaGraphInstantiate(&e, g, 0) == cudaSuccess);
    CHECK(cudaGraphDestroy(g) == cudaSuccess); /* the executable graph keeps what it needs */
    run(e, 1, 1, "launch 1");
    run(e, 0, 1, "launch 2");
    run(e, 1, 0, "launch 3");
    run(e, 1, 1, "launch 4");
    run(e, 0, 0, "launch 5");

    /* an update from an identical capture: taken; one with another node count in body 0: refused */
    cudaGraphExecUpdateResultInfo info;
    g = build(0);
    CHECK(cudaGraphExecUpdate(e, g, &info) == cudaSuccess && info.result == cudaGraphExecUpdateSuccess);
    CHECK(cudaGraphDestroy(g) == cudaSuccess);
    run(e, 1, 0, "after an update");
    run(e, 0, 1, "after an update");
    g = build(1);
    CHECK(cudaGraphExecUpdate(e, g, &info) == cudaErrorGraphExecUpdateFailure &&
          info.result != cudaGraphExecUpdateSuccess);
    (void)cudaGetLastError();
    CHECK(cudaGraphDestroy(g) == cudaSuccess);
    run(e, 1, 1, "after a refused update");
    CHECK(cudaGraphExecDestroy(e) == cudaSuccess);

    /* cudaGraphCondAssignDefault: the default at every launch, whatever the kernel after the
     * node set at the launch before */
    g = build_set_after(1, cudaGraphCondAssignDefault);
    CHECK(cudaGraphInstantiate(&e, g, 0) == cudaSuccess);
    CHECK(cudaGraphDestroy(g) == cudaSuccess);
    CHECK_MSG(body_ran(e, 0) && body_ran(e, 0) && body_ran(e, 0), "default 1 not applied at every launch");
    CHECK(cudaGraphExecDestroy(e) == cudaSuccess);
    g = build_set_after(0, cudaGraphCondAssignDefault);
    CHECK(cudaGraphInstantiate(&e, g, 0) == cudaSuccess);
    CHECK(cudaGraphDestroy(g) == cudaSuccess);
    CHECK_MSG(!body_ran(e, 1) && !body_ran(e, 1), "default 0 not applied at every launch");
    CHECK(cudaGraphExecDestroy(e) == cudaSuccess);
    /* one executable graph at a time: an H100 (CUDA 13.0, 2026-11-27) refused a second
     * instantiation of a graph with a conditional node while the first lived (the backend
     * instantiates each capture once) */
    g = build_set_after(0, 0);
    CHECK(cudaGraphInstantiate(&e, g, 0) == cudaSuccess);
    e2 = NULL;
    const cudaError_t second = cudaGraphInstantiate(&e2, g, 0);
    (void)cudaGetLastError();
    CHECK_MSG(second != cudaSuccess, "a second executable graph of a graph with a conditional node");
    if (second == cudaSuccess) CHECK(cudaGraphExecDestroy(e2) == cudaSuccess);
    CHECK(cudaGraphExecDestroy(e) == cudaSuccess);
    const cudaError_t again = cudaGraphInstantiate(&e, g, 0);
    (void)cudaGetLastError();
    printf("graph-cond: a second instantiation while the first lives: %s; after it was destroyed: %s\n",
           cudaGetErrorName(second), cudaGetErrorName(again));
    if (again == cudaSuccess) CHECK(cudaGraphExecDestroy(e) == cudaSuccess);
    CHECK(cudaGraphDestroy(g) == cudaSuccess);
    /* without cudaGraphCondAssignDefault CUDA promises no value at a launch (the backend always
     * sets it): what a GPU does is printed, not required */
    g = build_set_after(0, 0);
    CHECK(cudaGraphInstantiate(&e, g, 0) == cudaSuccess);
    CHECK(cudaGraphDestroy(g) == cudaSuccess);
    const int first_ran = body_ran(e, 1), second_ran = body_ran(e, 0);
    printf("graph-cond: without AssignDefault (default 0), the body ran at launch 1: %d, at launch 2 (after a "
           "launch set 1): %d\n", first_ran, second_ran);
    CHECK(cudaGraphExecDestroy(e) == cudaSuccess);

    /* the API's rules */
    cudaGraph_t pg = NULL;
    cudaGraphConditionalHandle h = 0;
    CHECK(cudaGraphCreate(&pg, 0) == cudaSuccess);
    CHECK(cudaGraphConditionalHandleCreate(&h, pg, 0, 2) == cudaErrorInvalidValue); /* flags: 0 or AssignDefault */
    (void)cudaGetLastError();
    CHECK(cudaGraphConditionalHandleCreate(&h, pg, 0, 0) == cudaSuccess);
    struct cudaGraphNodeParams p;
    memset(&p, 0, sizeof p);
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = h;
    p.conditional.type = cudaGraphCondTypeIf;
    p.conditional.size = 3; /* IF: 1 or 2 bodies */
    cudaGraphNode_t node = NULL;
    CHECK(cudaGraphAddNode(&node, pg, NULL, NULL, 0, &p) == cudaErrorInvalidValue);
    (void)cudaGetLastError();
    p.conditional.size = 1;
    CHECK(cudaGraphAddNode(&node, pg, NULL, NULL, 0, &p) == cudaSuccess);
    if (emulated) {
        /* a handle of the body serves no node above it; a handle serving no node fails the
         * instantiation (CUDA: "may"); two captures into one body at once */
        cudaGraph_t body = p.conditional.phGraph_out[0];
        cudaGraphConditionalHandle hb = 0;
        CHECK(cudaGraphConditionalHandleCreate(&hb, body, 0, 0) == cudaSuccess);
        struct cudaGraphNodeParams q = p;
        q.conditional.handle = hb;
        CHECK(cudaGraphAddNode(&node, pg, NULL, NULL, 0, &q) == cudaErrorInvalidValue);
        (void)cudaGetLastError();
        CHECK(cudaGraphInstantiate(&e, pg, 0) != cudaSuccess);
        (void)cudaGetLastError();
        begin_body(s_body, body);
        CHECK(cudaStreamBeginCaptureToGraph(s_nest, body, NULL, NULL, 0, cudaStreamCaptureModeRelaxed) != cudaSuccess);
        (void)cudaGetLastError();
        end_body(s_body, body);
    }
    CHECK(cudaGraphDestroy(pg) == cudaSuccess);

    /* a host function in a body: the capture or the instantiation fails */
    char out[4096];
    int rc = child("--host-in-body", out, sizeof out), have_host, have_body, have_main, have_inst;
    const int r_host = step(out, "hostfunc ", &have_host), r_body = step(out, "endbody ", &have_body);
    const int r_main = step(out, "endmain ", &have_main), r_inst = step(out, "inst ", &have_inst);
    CHECK_MSG(have_host && have_body && (r_host || r_body || (have_main && r_main) || (have_inst && r_inst)),
              "a host function captured into a conditional body was not refused (exit %d): %s", rc, out);
    if (emulated) /* ... and the capture of the graph above is lost (a GPU's driver may crash there) */
        CHECK_MSG(rc == 0 && r_host == cudaErrorStreamCaptureUnsupported &&
                  r_body == cudaErrorStreamCaptureInvalidated && r_main == cudaErrorStreamCaptureInvalidated,
                  "a host function in a body: %s", out);
    if (emulated) { /* (undefined on a GPU) */
        rc = child("--set-outside", out, sizeof out);
        CHECK_MSG(rc == 1 && strstr(out, "cudaGraphSetConditional") && strstr(out, "not part of a graph launch"),
                  "cudaGraphSetConditional outside a graph launch did not stop the process (exit %d): %s", rc, out);
    }

    CHECK(cudaFreeHost(h_flags) == cudaSuccess);
    CHECK(cudaFree(d_flag) == cudaSuccess && cudaFree(d_flag2) == cudaSuccess && cudaFree(d_out) == cudaSuccess);
    CHECK(cudaFree(d_nest) == cudaSuccess && cudaFree(d_copy) == cudaSuccess && cudaFree(d_src) == cudaSuccess);
    CHECK(cudaStreamDestroy(s_main) == cudaSuccess && cudaStreamDestroy(s_body) == cudaSuccess);
    CHECK(cudaStreamDestroy(s_nest) == cudaSuccess);
    return tu_finish("gpu_test_graph_cond_cuda");
}
