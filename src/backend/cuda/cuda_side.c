/* The side stream: weight-gradient matmuls beside the backward's chain
 * (docs/cuda-backend.md, "The side stream").
 *
 * Nothing reads a weight gradient dW = dY^T X before the optimizer, and ll64's
 * run at 200-340 TFLOP/s alone on an H100 (512 x 512 outputs over K = 8192: a
 * few dozen tiles for 132 SMs).  The model queues them with ll_gemm_desc.side
 * and calls be->join where the buffers they read are about to be reused (after
 * each group of 4 layers' backward: ll_layer_join_every; in the forward, the
 * cross attention's keys and values before it reads them).  Here such a gemm runs on a second stream of
 * the device: it waits for an event recorded on the device's stream after
 * everything queued so far (its inputs), and join makes the device's stream wait
 * for all the side has.  Meanwhile the input-gradient products, attention and
 * layer norms of the layer go on.  Inside a captured step the two are a fork
 * and a join of the graph: edges, no nodes, no launches.
 *
 * The layer norm backward's column-sum finish (dw, db from the row kernel's
 * partials) is off the chain too: while the side is open (a weight gradient
 * queued since the last join, so inside a stack's layers, whose join follows)
 * it runs there, its partials in one of LL_CUDA_SIDE_SLOTS slots of scratch of
 * their own (the next layer norm's row kernel must not overwrite them before the
 * finish ran); the slots are free again at the join, and a group of layers
 * that wants more joins early.
 *
 * Priorities: the device's stream (and the conditional bodies' capture
 * streams) run at the device's greatest stream priority, the side at its least,
 * so the block scheduler serves the chain first and the side fills what is
 * left (a wave's tail, a small grid).  Captured kernel nodes keep their
 * stream's priority, and executable graphs are instantiated with
 * cudaGraphInstantiateFlagUseNodePriority so that they run by them.
 * LL_CUDA_STREAM_PRIORITY=0: every stream at the default priority (A/B).
 *
 * The side has its own cuBLASLt workspace and scratch (the bias-gradient
 * epilogue's).  Not inside a conditional body (captured on one stream): there
 * the gemm runs in order.  LL_CUDA_SIDE_STREAM=0 runs every gemm in order (the
 * A/B of the benchmark).  The backend joins by itself before every host wait
 * and capture boundary, so a caller that never joins is only slower. */
#include "cuda_internal.h"

#define SIDE_DEVICES 64

typedef struct {
    cudaStream_t stream; /* created on first use */
    cudaEvent_t fork, join;
    cudaStream_t from; /* the stream the op forked from (restored by side_end) */
    int open;          /* work queued on the side since the last join */
    int on;            /* an op queues on the side now */
    int slots;         /* slots handed out since the last join (ll_cuda_side_slot) */
    uint64_t gemms;    /* ran on the side (ll_backend_side_gemms) */
    uint64_t finishes; /* layer norms' finishes that ran there (ll_backend_side_ln_finishes) */
} side_state;

static side_state g_side[SIDE_DEVICES];

static side_state *side_of(ll_backend *be) {
    const int d = ll_cuda_device(be);
    if (d < 0 || d >= SIDE_DEVICES) ll_die("CUDA backend: device %d out of the side stream's range", d);
    return &g_side[d];
}

LL_CUDA_ENV_SWITCH(side_wanted, "LL_CUDA_SIDE_STREAM")
LL_CUDA_ENV_SWITCH(priorities_wanted, "LL_CUDA_STREAM_PRIORITY")

cudaError_t ll_cuda_stream_create(cudaStream_t *s, int side) {
    int least = 0, greatest = 0;
    if (priorities_wanted()) {
        cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
        if (e != cudaSuccess) return e;
    }
    return cudaStreamCreateWithPriority(s, cudaStreamNonBlocking, side ? least : greatest);
}

unsigned ll_cuda_graph_instantiate_flags(void) {
    return priorities_wanted() ? cudaGraphInstantiateFlagUseNodePriority : 0;
}

int ll_cuda_side_begin(ll_backend *be, int gemm) {
    if (!side_wanted() || ll_cuda_cond_depth(be) > 0) return 0;
    side_state *s = side_of(be);
    if (s->on) ll_die("CUDA backend: a side op inside a side op");
    cudaStream_t from = ll_cuda_enter(be);
    if (!s->stream) {
        LL_CU(ll_cuda_stream_create(&s->stream, 1));
        LL_CU(cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming));
        LL_CU(cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming));
        if (ll_cuda_gemm_lt_side(be, s->stream) != 0) ll_die("%s", ll_errbuf());
    }
    LL_CU(cudaEventRecord(s->fork, from));
    LL_CU(cudaStreamWaitEvent(s->stream, s->fork, 0));
    s->from = from;
    s->on = 1;
    s->open = 1;
    if (gemm)
        s->gemms++;
    else
        s->finishes++;
    ll_cuda_set_lane(be, s->stream, 1);
    return 1;
}

void ll_cuda_side_end(ll_backend *be) {
    side_state *s = side_of(be);
    if (!s->on) return;
    s->on = 0;
    ll_cuda_set_lane(be, s->from, 0);
}

int ll_cuda_side_on(ll_backend *be) { return side_of(be)->on; }
cudaStream_t ll_cuda_side_stream(ll_backend *be) { return side_of(be)->stream; }
uint64_t ll_cuda_side_gemms(ll_backend *be) { return side_of(be)->gemms; }
uint64_t ll_cuda_side_finishes(ll_backend *be) { return side_of(be)->finishes; }

int ll_cuda_side_slot(ll_backend *be) {
    if (!side_wanted() || ll_cuda_cond_depth(be) > 0) return -1;
    side_state *s = side_of(be);
    if (!s->open || s->on) return -1; /* (no join promised: in order) */
    if (s->slots == LL_CUDA_SIDE_SLOTS) { /* every slot may still be read there */
        ll_cuda_side_join(be);
        return -1;
    }
    return s->slots++;
}

void ll_cuda_side_join(ll_backend *be) {
    side_state *s = side_of(be);
    if (!s->open) return;
    if (s->on) ll_die("CUDA backend: join inside a side op");
    LL_CU(cudaEventRecord(s->join, s->stream));
    LL_CU(cudaStreamWaitEvent(ll_cuda_enter(be), s->join, 0));
    s->open = 0;
    s->slots = 0;
}
