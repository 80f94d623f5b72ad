/* CUDA graphs (train.cuda_graphs; docs/cuda-backend.md, "The step as a CUDA
 * graph"):
 *  1. CUDA's stream-capture rules, on the runtime itself: captured work runs
 *     only when the graph is launched, once per launch; in global mode
 *     cudaMalloc fails and invalidates the capture, in relaxed mode it is
 *     allowed; synchronising the capturing stream fails and invalidates it;
 *     cudaGraphExecUpdate accepts the same nodes with new parameters or another
 *     kernel and refuses another node count.  On a GPU this checks the
 *     emulation's stand-in against CUDA; under the emulation, the stand-in.
 *  2. The backend's graph_begin/graph_end/graph_replay (2 graphs kept): a
 *     kept fingerprint is launched again without a capture; a new one takes
 *     a free slot, else the family's least recently used graph, updated in
 *     place when it has the same kernels (and it then runs on the new
 *     pointers and shapes, also when replayed), built anew otherwise; a graph
 *     is not replayed once the backend's scratch has moved, nor when the
 *     scratch grew inside its capture; a structure that changes at every step
 *     makes the backend give graphs up, and a host transfer inside a captured
 *     step stops the process with a message instead of being captured.
 *  3. (--kernels, a fresh backend) a capture of other kernels (cuBLASLt's for
 *     another shape) is not put into a kept graph by cudaGraphExecUpdate.
 *  4. Cross-stream capture (the side stream's weight gradients): a stream that
 *     waits for an event of the capture joins it and must be joined back
 *     (else cudaErrorStreamCaptureUnjoined); the backend's gemm with .side
 *     reads its operands as they were when it was queued and has run at
 *     be->join, eagerly and in a captured step (an operand overwritten right
 *     after the join: the emulation runs side work as late as it may;
 *     --side, a fresh backend).
 *  5. Programmatic dependent launch (kernels/ll_cuda_common.cuh): three of ll's kernels
 *     captured in a row are joined by programmatic edges where ll_cuda_pdl_launch() says so
 *     (compute capability 9.0+), by default edges with ll_cuda_pdl(0); the graph computes the
 *     same either way.
 * Skips (77) without a device. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "ll_cuda.h"
#include "../../src/backend/cuda/cuda_internal.h" /* ll_cuda_scratch */
#include "../util/testutil.h"

#define NELEM 4099 /* elements: not a multiple of any block size */

static void fill(float *h, float v) {
    for (int i = 0; i < NELEM; i++) h[i] = v + (float)(i % 7);
}
/* max |dev - want * (v + i % 7)| */
static double off_by(ll_backend *be, const float *dev, float want, float v) {
    static float h[NELEM];
    be->download(be, h, dev, sizeof h);
    double worst = 0;
    for (int i = 0; i < NELEM; i++) {
        const double e = (double)h[i] - (double)want * (v + (float)(i % 7));
        if (e > worst || -e > worst) worst = e > 0 ? e : -e;
    }
    return worst;
}

static void test_runtime_rules(ll_backend *be) {
    cudaStream_t s = ll_cuda_stream(be);
    uint8_t *d = be->alloc(be, 64);
    uint8_t h[64];
    be->sync(be);

    /* captured work runs at each launch, not at the capture */
    enum cudaStreamCaptureStatus st;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive);
    CHECK(cudaMemsetAsync(d, 7, 64, s) == cudaSuccess);
    cudaGraph_t g = NULL;
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess && g != NULL);
    CHECK(cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone);
    size_t nodes = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &nodes) == cudaSuccess && nodes == 1);
    be->download(be, h, d, 64);
    CHECK_MSG(h[0] == 0 && h[63] == 0, "captured memset ran at the capture (%d)", h[0]);
    cudaGraphExec_t e = NULL;
    CHECK(cudaGraphInstantiate(&e, g, 0) == cudaSuccess);
    CHECK(cudaGraphLaunch(e, s) == cudaSuccess);
    be->download(be, h, d, 64);
    CHECK_MSG(h[0] == 7 && h[63] == 7, "the launched graph did not run its memset (%d)", h[0]);

    /* an update with the same node and new parameters: the next launch uses them */
    cudaGraph_t g2 = NULL;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaMemsetAsync(d, 9, 64, s) == cudaSuccess);
    CHECK(cudaStreamEndCapture(s, &g2) == cudaSuccess);
    cudaGraphExecUpdateResultInfo info;
    CHECK(cudaGraphExecUpdate(e, g2, &info) == cudaSuccess && info.result == cudaGraphExecUpdateSuccess);
    CHECK(cudaGraphLaunch(e, s) == cudaSuccess);
    be->download(be, h, d, 64);
    CHECK_MSG(h[0] == 9 && h[63] == 9, "the updated graph ran %d %d, not 9 9", h[0], h[63]);
    /* ... and with another node count: refused, the executable graph unchanged */
    cudaGraph_t g3 = NULL;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaMemsetAsync(d, 1, 64, s) == cudaSuccess);
    CHECK(cudaMemsetAsync(d, 2, 16, s) == cudaSuccess);
    CHECK(cudaStreamEndCapture(s, &g3) == cudaSuccess);
    CHECK(cudaGraphExecUpdate(e, g3, &info) != cudaSuccess && info.result != cudaGraphExecUpdateSuccess);
    (void)cudaGetLastError();
    CHECK(cudaMemsetAsync(d, 0, 64, s) == cudaSuccess);
    CHECK(cudaGraphLaunch(e, s) == cudaSuccess);
    be->download(be, h, d, 64);
    CHECK_MSG(h[0] == 9 && h[32] == 9, "a refused update changed the graph (%d %d)", h[0], h[32]);
    CHECK(cudaGraphDestroy(g) == cudaSuccess && cudaGraphDestroy(g2) == cudaSuccess);
    CHECK(cudaGraphDestroy(g3) == cudaSuccess && cudaGraphExecDestroy(e) == cudaSuccess);

    /* a kernel node may get another kernel (CUDA 12: same context, no dynamic parallelism):
     * acc (y += x) updated to add (y = x + x) */
    static float hx[NELEM];
    fill(hx, 1);
    float *x = be->alloc(be, sizeof hx), *y = be->alloc(be, sizeof hx);
    be->upload(be, x, hx, sizeof hx);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    be->acc(be, (ll_act *)y, (const ll_act *)x, NELEM);
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    be->add(be, (ll_act *)y, (const ll_act *)x, (const ll_act *)x, NELEM);
    CHECK(cudaStreamEndCapture(s, &g2) == cudaSuccess);
    CHECK(cudaGraphInstantiate(&e, g, 0) == cudaSuccess);
    CHECK(cudaGraphExecUpdate(e, g2, &info) == cudaSuccess && info.result == cudaGraphExecUpdateSuccess);
    be->memset0(be, y, sizeof hx);
    for (int k = 0; k < 3; k++) CHECK(cudaGraphLaunch(e, s) == cudaSuccess); /* add: 2x; the old acc: 3x */
    CHECK_MSG(off_by(be, y, 2, 1) == 0, "the graph updated to another kernel is off by %g", off_by(be, y, 2, 1));
    CHECK(cudaGraphDestroy(g) == cudaSuccess && cudaGraphDestroy(g2) == cudaSuccess);
    CHECK(cudaGraphExecDestroy(e) == cudaSuccess);
    be->free(be, x);
    be->free(be, y);

    /* global mode: cudaMalloc is refused and the capture is lost; the stream works on */
    void *p = NULL;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaMemsetAsync(d, 3, 64, s) == cudaSuccess);
    CHECK(cudaMalloc(&p, 256) == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated && g == NULL);
    (void)cudaGetLastError();
    be->download(be, h, d, 64);
    CHECK_MSG(h[0] == 9, "work of a lost capture ran (%d)", h[0]);
    /* relaxed mode (the backend's): cudaMalloc is allowed */
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(cudaMalloc(&p, 256) == cudaSuccess);
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess && g != NULL);
    CHECK(cudaGraphDestroy(g) == cudaSuccess && cudaFree(p) == cudaSuccess);
    /* a fork and a join: the side stream's copy reads d after the capture's memset and before the
     * memset after the join */
    cudaStream_t side = NULL, lone = NULL;
    cudaEvent_t fork = NULL, join = NULL;
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
    uint8_t *d2 = be->alloc(be, 64), *d3 = be->alloc(be, 64);
    be->sync(be);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(cudaMemsetAsync(d, 1, 64, s) == cudaSuccess);
    CHECK(cudaEventRecord(fork, s) == cudaSuccess && cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
    CHECK(cudaStreamIsCapturing(side, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive);
    CHECK(cudaMemcpyAsync(d2, d, 64, cudaMemcpyDeviceToDevice, side) == cudaSuccess);
    CHECK(cudaMemsetAsync(d3, 5, 64, s) == cudaSuccess);
    CHECK(cudaEventRecord(join, side) == cudaSuccess && cudaStreamWaitEvent(s, join, 0) == cudaSuccess);
    CHECK(cudaMemsetAsync(d, 9, 64, s) == cudaSuccess);
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess && g != NULL);
    CHECK(cudaStreamIsCapturing(side, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone);
    CHECK(cudaGraphGetNodes(g, NULL, &nodes) == cudaSuccess && nodes == 4);
    CHECK(cudaGraphInstantiate(&e, g, 0) == cudaSuccess && cudaGraphLaunch(e, s) == cudaSuccess);
    be->download(be, h, d2, 64);
    CHECK_MSG(h[0] == 1 && h[63] == 1, "the forked stream's copy read %d, not 1 (the capture's order)", h[0]);
    be->download(be, h, d, 64);
    CHECK_MSG(h[0] == 9, "the node after the join left %d, not 9", h[0]);
    CHECK(cudaGraphDestroy(g) == cudaSuccess && cudaGraphExecDestroy(e) == cudaSuccess);
    /* a fork never joined back: the capture is refused (a stream of its own: CUDA does not say
     * what state it is left in) */
    CHECK(cudaStreamCreateWithFlags(&lone, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(cudaEventRecord(fork, s) == cudaSuccess && cudaStreamWaitEvent(lone, fork, 0) == cudaSuccess);
    CHECK(cudaMemsetAsync(d2, 3, 64, lone) == cudaSuccess);
    const cudaError_t unjoined = cudaStreamEndCapture(s, &g);
    CHECK_MSG(unjoined == cudaErrorStreamCaptureUnjoined && g == NULL, "an unjoined fork: %s",
              cudaGetErrorString(unjoined));
    (void)cudaGetLastError();
    be->download(be, h, d2, 64);
    CHECK_MSG(h[0] == 1, "work of a refused capture ran (%d)", h[0]);
    CHECK(cudaStreamDestroy(side) == cudaSuccess);
    CHECK(cudaEventDestroy(fork) == cudaSuccess && cudaEventDestroy(join) == cudaSuccess);
    be->free(be, d2);
    be->free(be, d3);
    /* synchronising the capturing stream: refused in every mode, the capture lost */
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated && g == NULL);
    (void)cudaGetLastError();
    be->free(be, d);
}

/* y[0..n) += reps x through the backend as a training step runs: the kept graph of the
 * step's fingerprint (here a hash of the arguments) launched again, else graph_begin;
 * acc(y, x, n) reps times; graph_end(fp, family).  2: replayed, 1: captured, 0: graphs
 * said no (then the accs ran as queued). */
static int acc_graph(ll_backend *be, float *y, const float *x, int reps, uint64_t family, size_t n) {
    const uint64_t fp = (((uint64_t)(uintptr_t)y * 31 + (uint64_t)(uintptr_t)x) * 131 + (uint64_t)reps * 7 + n) ^ family << 40;
    if (be->graph_replay(be, fp) == 0) return 2;
    const int graph = be->graph_begin(be) == 0;
    for (int r = 0; r < reps; r++) be->acc(be, (ll_act *)y, (const ll_act *)x, n);
    if (graph) be->graph_end(be, fp, family);
    return graph;
}

static void test_backend(ll_backend *be) {
    static float h[NELEM];
    float *x = be->alloc(be, sizeof h), *y = be->alloc(be, sizeof h), *y2 = be->alloc(be, sizeof h);
    fill(h, 1);
    be->upload(be, x, h, sizeof h);
    ll_graph_stats a, b;
    be->graph_stats(be, &a);
    const uint64_t key = 0x6772617068ull;
    CHECK(acc_graph(be, y, x, 1, key, NELEM) == 1); /* built: y = x */
    CHECK(acc_graph(be, y, x, 1, key, NELEM) == 2); /* replayed: y = 2x */
    CHECK_MSG(off_by(be, y, 2, 1) == 0, "y after a launch and a replay is off by %g", off_by(be, y, 2, 1));
    CHECK(acc_graph(be, y2, x, 1, key, NELEM) == 1); /* another pointer, a free slot: built, y2 = x */
    CHECK(acc_graph(be, y, x, 1, key, NELEM) == 2);  /* the first one still kept: y = 3x */
    CHECK_MSG(off_by(be, y2, 1, 1) == 0 && off_by(be, y, 3, 1) == 0, "two kept graphs mixed up their pointers");
    CHECK(acc_graph(be, y, x, 2, key, NELEM) == 1); /* two nodes, no free slot: the LRU (y2's) rebuilt, y = 5x */
    CHECK_MSG(off_by(be, y, 5, 1) == 0, "y after the rebuilt graph is off by %g", off_by(be, y, 5, 1));
    /* another shape, the same node types: the family's LRU (y, 1 node) updated to a smaller grid, then replayed */
    be->memset0(be, y2, sizeof h);
    CHECK(acc_graph(be, y2, x, 1, key, NELEM / 3) == 1); /* y2[0..N/3) = x, the rest 0 */
    CHECK(acc_graph(be, y2, x, 1, key, NELEM / 3) == 2); /* y2[0..N/3) = 2x */
    be->download(be, h, y2, sizeof h);
    int bad = 0;
    for (int i = 0; i < NELEM; i++) bad += h[i] != (i < NELEM / 3 ? 2 * (1 + (float)(i % 7)) : 0.0f);
    CHECK_MSG(bad == 0, "the graph updated to a third of the elements is wrong in %d of them", bad);
    /* the scratch moves: no kept graph is replayed (they may point at it); the step is captured (updated) */
    ll_cuda_scratch(be, ((size_t)64 << 20) + 12345);
    CHECK(acc_graph(be, y2, x, 1, key, NELEM / 3) == 1); /* y2[0..N/3) = 3x */
    CHECK(acc_graph(be, y2, x, 1, key, NELEM / 3) == 2); /* ... and then replayed: 4x */
    be->graph_stats(be, &b);
    CHECK_MSG(b.captures - a.captures == 5 && b.replays - a.replays == 4 && b.launches - a.launches == 9 &&
                  b.updates - a.updates == 2 && b.instantiations - a.instantiations == 3 && b.nodes - a.nodes == 6,
              "graph stats: %llu captures, %llu replays, %llu launches, %llu updates, %llu built, %llu nodes "
              "(want 5 4 9 2 3 6)",
              (unsigned long long)(b.captures - a.captures), (unsigned long long)(b.replays - a.replays),
              (unsigned long long)(b.launches - a.launches), (unsigned long long)(b.updates - a.updates),
              (unsigned long long)(b.instantiations - a.instantiations), (unsigned long long)(b.nodes - a.nodes));
    /* the scratch grows inside a capture: that graph runs once (the old scratch is freed after it), never again */
    const uint64_t fp9 = 0x5CA7C4ull;
    CHECK(be->graph_begin(be) == 0);
    ll_cuda_scratch(be, ((size_t)128 << 20) + 12345);
    be->acc(be, (ll_act *)y2, (const ll_act *)x, NELEM / 3); /* 5x */
    be->graph_end(be, fp9, key);
    CHECK_MSG(be->graph_replay(be, fp9) == 1, "a graph captured while the scratch grew was kept for replays");
    be->download(be, h, y2, sizeof h);
    bad = 0;
    for (int i = 0; i < NELEM; i++) bad += h[i] != (i < NELEM / 3 ? 5 * (1 + (float)(i % 7)) : 0.0f);
    CHECK_MSG(bad == 0, "after the replays and the scratch moves y2 is wrong in %d elements", bad);

    /* a host transfer inside a captured step: the backend stops with one line (in a fresh
     * process of this program: CUDA does not carry over into a forked child) */
    char self[4096], cmd[4200], msg[2048] = "";
    const ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(sl > 0);
    self[sl > 0 ? sl : 0] = 0;
    snprintf(cmd, sizeof cmd, "'%s' --download-in-capture 2>&1", self);
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t got = 0, r;
    while (p && got + 1 < sizeof msg && (r = fread(msg + got, 1, sizeof msg - 1 - got, p)) > 0) got += r;
    msg[got] = 0;
    const int status = p ? pclose(p) : -1;
    CHECK_MSG(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) != 0,
              "a download inside a capture did not stop the process (%s)", msg);
    CHECK_CONTAINS(msg, "download inside a step captured as a CUDA graph");
    /* a structure that changes at every step: each needs a new graph, and after at most 16
     * steps the backend gives graphs up (graph_begin says no) and the ops run as queued */
    be->memset0(be, y, sizeof h);
    int steps = 0, graphs = 0, total = 0;
    for (; steps < 40; steps++) {
        const int reps = 1 + steps % 3;
        total += reps;
        if (!acc_graph(be, y, x, reps, key + (uint64_t)steps, NELEM)) break;
        graphs++;
    }
    CHECK_MSG(steps < 40 && graphs <= 16, "graphs not given up after %d steps that each needed a new one", graphs);
    for (int k = 0; k < 3; k++) { /* off for good */
        const int reps = 1 + (steps + 1 + k) % 3;
        total += reps;
        CHECK(!acc_graph(be, y, x, reps, key, NELEM));
    }
    CHECK_MSG(off_by(be, y, (float)total, 1) == 0, "the steps with and without graphs did not all run once (off by %g)",
              off_by(be, y, (float)total, 1));
    be->free(be, x);
    be->free(be, y);
    be->free(be, y2);
}

/* C = A B (row-major, fp32; rows x cols, K = 64) through the backend as a training step runs: the kept
 * graph of the step's fingerprint launched again, else graph_begin, gemm, graph_end.  As acc_graph. */
static int gemm_graph(ll_backend *be, float *C, const float *A, const float *B, int rows, int cols, uint64_t family) {
    const uint64_t fp = ((uint64_t)(uintptr_t)C * 31 + (uint64_t)rows * 7 + (uint64_t)cols) ^ family << 40;
    if (be->graph_replay(be, fp) == 0) return 2;
    const int graph = be->graph_begin(be) == 0;
    const ll_gemm_desc g = {.M = rows, .N = cols, .K = 64, .alpha = 1, .A = A, .a_type = LL_F32, .lda = 64, .B = B,
                            .b_type = LL_F32, .ldb = cols, .C = C, .c_type = LL_F32, .ldc = cols, .epi = LL_EPI_NONE};
    be->gemm(be, &g);
    if (graph) be->graph_end(be, fp, family);
    return graph;
}
/* max |C - A B| over rows x cols */
static double gemm_off(ll_backend *be, const float *C, const float *hA, const float *hB, int rows, int cols) {
    float *h = malloc(sizeof *h * (size_t)rows * cols);
    be->download(be, h, C, sizeof *h * (size_t)rows * cols);
    double worst = 0;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double want = 0;
            for (int k = 0; k < 64; k++) want += (double)hA[i * 64 + k] * hB[k * cols + j];
            const double d = fabs(h[(size_t)i * cols + j] - want);
            if (d > worst) worst = d;
        }
    free(h);
    return worst;
}

/* A kept graph is updated in place only with a capture of the same kernels: an H100 faulted ("an
 * illegal instruction") on launches of graphs whose cuBLASLt kernels cudaGraphExecUpdate had
 * swapped for another shape's (fp32 training, 2026-11-28); the emulation's launch of such a graph
 * faults as it did.  A small product and a large one of one family, 2 graphs kept. */
static void test_backend_kernels(ll_backend *be, int emulated) {
    enum { MS = 16, NS = 64, ML = 512, NL = 1024 };
    float *hA = malloc(sizeof *hA * ML * 64), *hB = malloc(sizeof *hB * 64 * NL);
    for (int i = 0; i < ML * 64; i++) hA[i] = (float)((i * 37) % 17) / 8 - 1;
    for (int i = 0; i < 64 * NL; i++) hB[i] = (float)((i * 11) % 13) / 8 - 0.75f;
    float *A = be->alloc(be, sizeof *hA * ML * 64), *B = be->alloc(be, sizeof *hB * 64 * NL);
    float *C1 = be->alloc(be, sizeof(float) * ML * NL), *C2 = be->alloc(be, sizeof(float) * ML * NL);
    be->upload(be, A, hA, sizeof *hA * ML * 64);
    be->upload(be, B, hB, sizeof *hB * 64 * NL);
    const uint64_t fam = 0x6b65726e656cull;
    ll_graph_stats a, b;
    be->graph_stats(be, &a);
    CHECK(gemm_graph(be, C1, A, B, MS, NS, fam) == 1);
    CHECK(gemm_graph(be, C2, A, B, MS, NS, fam) == 1); /* the same kernel, other pointers */
    CHECK(gemm_graph(be, C1, A, B, ML, NL, fam) == 1); /* another shape: on the emulation, another kernel */
    CHECK(gemm_graph(be, C1, A, B, ML, NL, fam) == 2);
    CHECK(gemm_graph(be, C2, A, B, ML, NL, fam) == 1); /* the same kernel as the graph just kept */
    CHECK(gemm_graph(be, C2, A, B, ML, NL, fam) == 2);
    const double e1 = gemm_off(be, C1, hA, hB, ML, NL), e2 = gemm_off(be, C2, hA, hB, ML, NL);
    CHECK_MSG(e1 < 1e-3 && e2 < 1e-3, "the products through updated graphs are off by %g and %g", e1, e2);
    be->graph_stats(be, &b);
    const unsigned long long up = b.updates - a.updates, built = b.instantiations - a.instantiations;
    const unsigned long long unnamed = b.unnamed - a.unnamed;
    printf("graph-kernels: 4 captures of 2 shapes, 2 kept: %llu updated in place, %llu built, %llu of unnamed kernels\n",
           up, built, unnamed);
    /* LL_CUDA_EMU_NO_DRIVER_ENTRY_POINTS=1: the runtime alone, which names no library's kernel (as an
     * H200's did not name cuBLASLt's, 2026-11-28): every capture built anew */
    const char *nd = getenv("LL_CUDA_EMU_NO_DRIVER_ENTRY_POINTS");
    const int no_driver = emulated && nd && *nd && strcmp(nd, "0");
    const char *m = getenv("LL_CUDA_EMU_GRAPH_UPDATE"); /* (=refuse: updates refused, graphs built anew) */
    const int refused = emulated && m && !strcmp(m, "refuse");
    if (no_driver) {
        CHECK_MSG(unnamed == 4 && up == 0 && built == 4,
                  "graph-kernels without the driver's entry points: %llu unnamed, %llu updates, %llu built (want 4, 0, 4)",
                  unnamed, up, built);
    } else {
        /* everywhere else every capture's kernels are named, and the last capture (the shape of the
         * graph kept just before, other pointers) updates it in place: on an H200 the runtime did not
         * name cuBLASLt's kernels and nothing was ever updated */
        CHECK_MSG(unnamed == 0 && up >= (unsigned long long)!refused,
                  "graph-kernels: %llu captures of unnamed kernels, %llu updates (want 0, >= %d)", unnamed, up, !refused);
    }
    /* the emulation's cuBLASLt has one kernel per size class: the large shape's capture finds only the
     * small one's graphs (other kernels) and is built anew; the last capture updates the large one's */
    if (emulated && !no_driver) {
        CHECK_MSG(up == (refused ? 0 : 1) && built == (refused ? 4 : 3),
                  "graph-kernels: %llu updates and %llu built (want %d and %d)", up, built, refused ? 0 : 1,
                  refused ? 4 : 3);
    }
    free(hA);
    free(hB);
    be->free(be, A);
    be->free(be, B);
    be->free(be, C1);
    be->free(be, C2);
}

/* Two layer norm backwards while the side stream is open (after a side gemm, before the join):
 * their column-sum finishes run there, each on partials of its own, which the other's row kernel
 * must not overwrite (the emulation runs side work as late as the join).  Their dw, db must equal
 * those of the same two in order, after the join, bit for bit. */
enum { LN_N = 100, LN_C = 128 };
typedef struct {
    float *x, *dout, *dx, *w, *b, *y, *mean, *rstd, *dwb[2][2]; /* dwb[side=0 / in order=1][w, b] */
} ln_case;
static void ln_case_new(ll_backend *be, ln_case *k, float seed) {
    static float h[LN_N * LN_C], hw[LN_C];
    const size_t nc = sizeof(float) * LN_N * LN_C, cb = sizeof(float) * LN_C;
    memset(k, 0, sizeof *k);
    k->x = be->alloc(be, nc), k->dout = be->alloc(be, nc), k->dx = be->alloc(be, nc), k->y = be->alloc(be, nc);
    k->w = be->alloc(be, cb), k->b = be->alloc(be, cb);
    k->mean = be->alloc(be, sizeof(float) * LN_N), k->rstd = be->alloc(be, sizeof(float) * LN_N);
    for (int i = 0; i < LN_N * LN_C; i++) h[i] = (float)((i * 29 + (int)seed) % 23) / 7 - 1.5f + seed;
    be->upload(be, k->x, h, nc);
    for (int i = 0; i < LN_N * LN_C; i++) h[i] = (float)((i * 13) % 19) / 9 - 1 - seed / 4;
    be->upload(be, k->dout, h, nc);
    for (int i = 0; i < LN_C; i++) hw[i] = 1 + (float)(i % 5) / 8;
    be->upload(be, k->w, hw, cb);
    be->memset0(be, k->b, cb);
    for (int a = 0; a < 2; a++)
        for (int c = 0; c < 2; c++) k->dwb[a][c] = be->alloc(be, cb);
    be->layernorm_fwd(be, (ll_act *)k->y, k->mean, k->rstd, (const ll_act *)k->x, k->w, k->b, LN_N, LN_C);
}
static void ln_case_bwd(ll_backend *be, ln_case *k, int in_order) {
    be->layernorm_bwd(be, (ll_act *)k->dx, k->dwb[in_order][0], k->dwb[in_order][1], (const ll_act *)k->dout,
                      (const ll_act *)k->x, k->w, k->mean, k->rstd, LN_N, LN_C);
}
static void ln_case_zero(ll_backend *be, ln_case *k) {
    for (int a = 0; a < 2; a++)
        for (int c = 0; c < 2; c++) be->memset0(be, k->dwb[a][c], sizeof(float) * LN_C);
}
static void ln_case_check(ll_backend *be, ln_case *k, const char *what) {
    static float h[2][LN_C];
    for (int c = 0; c < 2; c++) {
        be->download(be, h[0], k->dwb[0][c], sizeof h[0]);
        be->download(be, h[1], k->dwb[1][c], sizeof h[1]);
        int nz = 0;
        for (int i = 0; i < LN_C; i++) nz += h[1][i] != 0;
        CHECK_MSG(nz > LN_C / 2, "side stream (%s): layer norm %s is mostly 0 (%d of %d set)", what, c ? "db" : "dw",
                  nz, LN_C);
        CHECK_MSG(!memcmp(h[0], h[1], sizeof h[0]), "side stream (%s): layer norm %s with the finish beside is not "
                  "that of the same backward in order", what, c ? "db" : "dw");
    }
}
static void ln_case_free(ll_backend *be, ln_case *k) {
    float *p[] = {k->x, k->dout, k->dx, k->w, k->b, k->y, k->mean, k->rstd,
                  k->dwb[0][0], k->dwb[0][1], k->dwb[1][0], k->dwb[1][1]};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++) be->free(be, p[i]);
}

/* The side stream: C = A B queued with .side after A was written, an unrelated op, be->join, then
 * A overwritten and C2 = A B in order (each stream with its own cuBLASLt workspace: the emulation
 * refuses one shared); C must be the product of the A it was queued after, C2 of the new A.
 * Between the side gemm and the join, two layer norm backwards (above).  Eagerly, then as a
 * captured step (graph 1). */
static void test_backend_side(ll_backend *be) {
    enum { M = 96, N = 80 };
    static float hA0[M * 64], hA1[M * 64], hB[64 * N], hx[NELEM];
    for (int i = 0; i < M * 64; i++) hA0[i] = (float)((i * 37) % 17) / 8 - 1, hA1[i] = -2 * hA0[i] + 1;
    for (int i = 0; i < 64 * N; i++) hB[i] = (float)((i * 11) % 13) / 8 - 0.75f;
    fill(hx, 1);
    float *A = be->alloc(be, sizeof hA0), *A0 = be->alloc(be, sizeof hA0), *A1 = be->alloc(be, sizeof hA1);
    float *B = be->alloc(be, sizeof hB), *C = be->alloc(be, sizeof(float) * M * N);
    float *C2 = be->alloc(be, sizeof(float) * M * N);
    float *x = be->alloc(be, sizeof hx), *y = be->alloc(be, sizeof hx);
    be->upload(be, A0, hA0, sizeof hA0);
    be->upload(be, A1, hA1, sizeof hA1);
    be->upload(be, B, hB, sizeof hB);
    be->upload(be, x, hx, sizeof hx);
    CHECK(be->join != NULL);
    ln_case ln[2];
    ln_case_new(be, &ln[0], 0.25f);
    ln_case_new(be, &ln[1], -0.5f);
    const uint64_t side0 = ll_backend_side_gemms(be), fin0 = ll_backend_side_ln_finishes(be);
    for (int graph = 0; graph < 2 && be->join; graph++) {
        be->memset0(be, A, sizeof hA0);
        be->memset0(be, C, sizeof(float) * M * N);
        be->memset0(be, y, sizeof hx);
        ln_case_zero(be, &ln[0]);
        ln_case_zero(be, &ln[1]);
        be->sync(be);
        const int captured = graph && be->graph_begin(be) == 0;
        be->copy(be, A, A0, sizeof hA0);
        const ll_gemm_desc g = {.M = M, .N = N, .K = 64, .alpha = 1, .A = A, .a_type = LL_F32, .lda = 64, .B = B,
                                .b_type = LL_F32, .ldb = N, .C = C, .c_type = LL_F32, .ldc = N, .epi = LL_EPI_NONE,
                                .side = 1};
        be->gemm(be, &g);
        be->acc(be, (ll_act *)y, (const ll_act *)x, NELEM);
        ln_case_bwd(be, &ln[0], 0);
        ln_case_bwd(be, &ln[1], 0);
        be->join(be);
        ln_case_bwd(be, &ln[0], 1);
        ln_case_bwd(be, &ln[1], 1);
        be->copy(be, A, A1, sizeof hA1);
        ll_gemm_desc g2 = g;
        g2.C = C2;
        g2.side = 0;
        be->gemm(be, &g2);
        if (captured) be->graph_end(be, 0x51de51deull, 0x51de);
        CHECK_MSG(!graph || captured, "the side stream's step was not captured");
        const double e = gemm_off(be, C, hA0, hB, M, N);
        CHECK_MSG(e < 1e-3, "side stream (%s): C is off the product of the A it was queued after by %g",
                  graph ? "captured" : "eager", e);
        const double e2 = gemm_off(be, C2, hA1, hB, M, N);
        CHECK_MSG(e2 < 1e-3, "side stream (%s): the product in order after the join is off by %g",
                  graph ? "captured" : "eager", e2);
        CHECK_MSG(off_by(be, y, 1, 1) == 0, "side stream: the op beside it is off by %g", off_by(be, y, 1, 1));
        ln_case_check(be, &ln[0], graph ? "captured, first" : "eager, first");
        ln_case_check(be, &ln[1], graph ? "captured, second" : "eager, second");
    }
    const char *off = getenv("LL_CUDA_SIDE_STREAM");
    const unsigned long long ran = ll_backend_side_gemms(be) - side0, want = off && !strcmp(off, "0") ? 0 : 2;
    CHECK_MSG(ran == want, "side stream: %llu products ran on it, not %llu", ran, want);
    /* priorities: the device's stream the greatest, the side the least (the default with
     * LL_CUDA_STREAM_PRIORITY=0); a step captured by hand on the device's stream has the chain's
     * kernel (acc) at the greatest and the side's matmul at the least (CUDA copies the capturing
     * stream's priority into each kernel node) */
    if (want) {
        const char *pe = getenv("LL_CUDA_STREAM_PRIORITY");
        const int prio = !(pe && !strcmp(pe, "0"));
        int least = 0, greatest = 0, pm = 1, ps = 1;
        CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest) == cudaSuccess);
        cudaStream_t main_st = ll_cuda_enter(be), side_st = ll_cuda_side_stream(be);
        CHECK(side_st != NULL && cudaStreamGetPriority(main_st, &pm) == cudaSuccess &&
              cudaStreamGetPriority(side_st, &ps) == cudaSuccess);
        CHECK_MSG(pm == (prio ? greatest : 0) && ps == (prio ? least : 0),
                  "stream priorities: device's %d, side %d (range %d..%d, LL_CUDA_STREAM_PRIORITY %s)", pm, ps, least,
                  greatest, pe ? pe : "unset");
        be->sync(be);
        CHECK(cudaStreamBeginCapture(main_st, cudaStreamCaptureModeRelaxed) == cudaSuccess);
        const ll_gemm_desc g = {.M = M, .N = N, .K = 64, .alpha = 1, .A = A, .a_type = LL_F32, .lda = 64, .B = B,
                                .b_type = LL_F32, .ldb = N, .C = C, .c_type = LL_F32, .ldc = N, .epi = LL_EPI_NONE,
                                .side = 1};
        be->gemm(be, &g);
        be->acc(be, (ll_act *)y, (const ll_act *)x, NELEM);
        be->join(be);
        cudaGraph_t cg = NULL;
        CHECK(cudaStreamEndCapture(main_st, &cg) == cudaSuccess && cg);
        size_t nn = 0;
        int at_g = 0, at_l = 0, other = 0;
        if (cg && cudaGraphGetNodes(cg, NULL, &nn) == cudaSuccess && nn) {
            cudaGraphNode_t *nodes = calloc(nn, sizeof *nodes);
            CHECK(cudaGraphGetNodes(cg, nodes, &nn) == cudaSuccess);
            for (size_t i = 0; i < nn; i++) {
                enum cudaGraphNodeType t;
                cudaLaunchAttributeValue v;
                memset(&v, 0, sizeof v);
                if (cudaGraphNodeGetType(nodes[i], &t) != cudaSuccess || t != cudaGraphNodeTypeKernel) continue;
                CHECK(cudaGraphKernelNodeGetAttribute(nodes[i], cudaLaunchAttributePriority, &v) == cudaSuccess);
                if (prio && v.priority == greatest) at_g++;
                else if (prio && v.priority == least) at_l++;
                else if (!prio && v.priority == 0) at_g++, at_l++;
                else other++;
            }
            free(nodes);
        }
        CHECK_MSG(at_g >= 1 && at_l >= 1 && other == 0,
                  "captured kernel nodes' priorities: %d at the device stream's, %d at the side's, %d other", at_g,
                  at_l, other);
        if (cg) CHECK(cudaGraphDestroy(cg) == cudaSuccess);
    }
    const unsigned long long fin = ll_backend_side_ln_finishes(be) - fin0;
    CHECK_MSG(fin == 2 * want, "side stream: %llu layer norm finishes ran on it, not %llu", fin, 2 * want);
    ln_case_free(be, &ln[0]);
    ln_case_free(be, &ln[1]);
    be->free(be, A);
    be->free(be, A0);
    be->free(be, A1);
    be->free(be, B);
    be->free(be, C);
    be->free(be, C2);
    be->free(be, x);
    be->free(be, y);
}

/* edges into the kernel nodes of g: programmatic ones (returned) and default ones (*plain) */
static int programmatic_edges(cudaGraph_t g, int *plain) {
    size_t nn = 0;
    int prog = 0;
    *plain = 0;
    if (cudaGraphGetNodes(g, NULL, &nn) != cudaSuccess || !nn) return -1;
    cudaGraphNode_t *nodes = calloc(nn, sizeof *nodes);
    CHECK(cudaGraphGetNodes(g, nodes, &nn) == cudaSuccess);
    for (size_t i = 0; i < nn; i++) {
        enum cudaGraphNodeType t;
        size_t nd = 0;
        if (cudaGraphNodeGetType(nodes[i], &t) != cudaSuccess || t != cudaGraphNodeTypeKernel) continue;
        CHECK(cudaGraphNodeGetDependencies(nodes[i], NULL, NULL, &nd) == cudaSuccess);
        if (!nd) continue;
        cudaGraphNode_t *deps = calloc(nd, sizeof *deps);
        cudaGraphEdgeData *ed = calloc(nd, sizeof *ed);
        CHECK(cudaGraphNodeGetDependencies(nodes[i], deps, ed, &nd) == cudaSuccess);
        for (size_t k = 0; k < nd; k++) {
            if (ed[k].type == cudaGraphDependencyTypeProgrammatic) prog++;
            else (*plain)++;
        }
        free(deps);
        free(ed);
    }
    free(nodes);
    return prog;
}

static void test_pdl(ll_backend *be) {
    static float h[NELEM];
    float *x = be->alloc(be, sizeof h), *y = be->alloc(be, sizeof h);
    fill(h, 1);
    be->upload(be, x, h, sizeof h);
    be->memset0(be, y, sizeof h);
    cudaStream_t st = ll_cuda_enter(be);
    int launches = 0;
    /* (on, then off; only off where it is off already: LL_CUDA_PDL=0, or refused at start-up) */
    for (int on = ll_cuda_pdl_launch(); on >= 0; on--) {
        const int was = ll_cuda_pdl(on), want = ll_cuda_pdl_launch();
        CHECK_MSG(on || !want, "ll_cuda_pdl(0) left programmatic dependent launch on");
        be->sync(be);
        CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed) == cudaSuccess);
        for (int r = 0; r < 3; r++) be->acc(be, (ll_act *)y, (const ll_act *)x, NELEM);
        cudaGraph_t cg = NULL;
        cudaGraphExec_t ge = NULL;
        CHECK(cudaStreamEndCapture(st, &cg) == cudaSuccess && cg);
        if (!cg) break;
        int plain = 0;
        const int prog = programmatic_edges(cg, &plain);
        printf("pdl: %s, %s: %d programmatic and %d default edges between 3 captured kernels\n",
               on ? "on" : "off (ll_cuda_pdl(0))", want ? "launched with the attribute" : "plain launches", prog,
               plain);
        fflush(stdout);
        CHECK_MSG(want ? prog == 2 && plain == 0 : prog == 0 && plain == 2,
                  "pdl %s: %d programmatic and %d default edges, want %d and %d", on ? "on" : "off", prog, plain,
                  want ? 2 : 0, want ? 0 : 2);
        CHECK(cudaGraphInstantiate(&ge, cg, 0) == cudaSuccess);
        CHECK(cudaGraphLaunch(ge, st) == cudaSuccess);
        be->sync(be);
        launches++;
        if (ge) CHECK(cudaGraphExecDestroy(ge) == cudaSuccess);
        CHECK(cudaGraphDestroy(cg) == cudaSuccess);
        ll_cuda_pdl(was);
    }
    CHECK_MSG(off_by(be, y, 3.0f * (float)launches, 1) == 0, "%d launches of 3 captured accs: off by %g", launches,
              off_by(be, y, 3.0f * (float)launches, 1));
    be->free(be, x);
    be->free(be, y);
}

/* the child of test_backend's last check: must die in the download */
static int download_in_capture(void) {
    ll_backend *be = ll_backend_cuda(0);
    if (!be) return 0;
    float *x = be->alloc(be, 64), h[16];
    be->graph_begin(be);
    be->download(be, h, x, sizeof h);
    return 0;
}

int main(int argc, char **argv) {
    setenv("LL_CUDA_GRAPHS_KEPT", "2", 1); /* test_backend's slot choices */
    if (argc > 1 && !strcmp(argv[1], "--download-in-capture")) return download_in_capture();
    if (ll_cuda_device_count() == 0) {
        printf("no CUDA device: skipping\n");
        return 77;
    }
    ll_backend *be = ll_backend_cuda(0);
    CHECK_MSG(be != NULL, "ll_backend_cuda(0): %s", ll_errbuf());
    if (!be) return tu_finish("gpu_test_graph_cuda");
    CHECK(be->graph_begin && be->graph_end && be->graph_replay && be->graph_stats);
    if (argc > 1 && !strcmp(argv[1], "--kernels")) { /* (gpu_test_graph_kernels_cuda: a fresh backend) */
#ifdef LL_CUDA_EMU
        test_backend_kernels(be, 1);
#else
        test_backend_kernels(be, 0);
#endif
        return tu_finish("gpu_test_graph_cuda --kernels");
    }
    if (argc > 1 && !strcmp(argv[1], "--side")) { /* (gpu_test_graph_side_cuda: a fresh backend) */
        test_backend_side(be);
        return tu_finish("gpu_test_graph_cuda --side");
    }
    test_runtime_rules(be);
    test_backend(be);
    test_pdl(be);
    return tu_finish("gpu_test_graph_cuda");
}
