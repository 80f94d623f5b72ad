/* The CUDA backend's per-device state, shared by cuda_backend.c (memory,
 * scratch, construction) and cuda_graph.c (the step as a CUDA graph); the
 * other files of src/backend/cuda see the backend only through
 * cuda_internal.h's functions. */
#ifndef LL_CUDA_IMPL_H
#define LL_CUDA_IMPL_H

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>

#include "ll/backend.h"
#include "cuda_internal.h"

/* Uploads up to this size go through pinned staging buffers, asynchronously;
 * larger ones (checkpoints, embeddings) copy synchronously from the caller's
 * memory, as before. */
#define STAGE_MAX ((size_t)64 << 20)
#define STAGE_SLOTS 2
/* executable graphs kept, one per step fingerprint, least recently used out
 * (LL_CUDA_GRAPHS_KEPT: fewer, 1 to GRAPH_CACHE).  64: the GPU quick start's batches have 47 shapes
 * per epoch (configs/bible_gpu.cfg), and with 32 kept an H200 captured 3,803 of its 17,609 steps */
#define GRAPH_CACHE 64
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

static inline cuda_impl *ll_cuda_impl(ll_backend *be) { return (cuda_impl *)be->impl; }
/* The backend's impl, its device made current for the calling thread (cheap when it already is). */
cuda_impl *ll_cuda_impl_enter(ll_backend *be);
/* cuda_graph.c: graph_begin/end/replay/stats and cond_if/else/end into the op table */
void ll_cuda_register_graph(ll_backend *be);

#endif
