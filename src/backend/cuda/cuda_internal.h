/* Private declarations shared by the CUDA backend's host files
 * (cuda_backend.c and the cuda_ops_*.c wrappers that adapt the op table's
 * signatures to the kernel launchers of kernels/ll_cuda.h). */
#ifndef LL_CUDA_INTERNAL_H
#define LL_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "ll_cuda.h"

/* The kernels' element type for the backend's activations: the backends are
 * built for fp32 and bf16 only (ll_backend_cuda_precision). */
static inline ll_cuda_dtype ll_cuda_act(const ll_backend *be) {
    return be->act == LL_BF16 ? LL_CUDA_BF16 : LL_CUDA_F32;
}

/* Make the backend's device current (every op starts here) and return its stream. */
cudaStream_t ll_cuda_enter(ll_backend *be);
/* Dies naming the config keys when a head (model.d_model / model.heads) exceeds the attention kernels'
 * 128 dims (they hold a head in registers; the config allows more, which the CPU runs). */
void ll_cuda_head_size_ok(const char *op, int Dh);
/* The backend's grow-only device scratch, at least `bytes`, 256-byte aligned,
 * valid until the next op on the same stream (each lane, the device's stream
 * and the side stream, has its own; a lane's ops are ordered).  Growing
 * synchronises and reallocates: it happens while the first steps meet their
 * largest shapes, then never again (docs/cuda-backend.md lists the users). */
void *ll_cuda_scratch(ll_backend *be, size_t bytes);
/* The device's ticket counter: a device unsigned, 0 between launches (a kernel that takes
 * tickets puts it back: kernels/residual.cu).  One per device: the launches are ordered. */
unsigned *ll_cuda_ticket(ll_backend *be);

/* A switch that is on unless the environment sets it to 0 (A/B timing), read once into *cached
 * (-1 before). */
int ll_cuda_env_on(const char *name, int *cached);
/* static int fn(void): that switch for NAME */
#define LL_CUDA_ENV_SWITCH(fn, NAME)                                                                                 \
    static int fn(void) {                                                                                            \
        static int on_ = -1;                                                                                         \
        return ll_cuda_env_on(NAME, &on_);                                                                           \
    }

/* The side stream (cuda_side.c): a gemm with ll_gemm_desc.side queues between
 * side_begin (1: the ops now queue on the side stream, after everything queued
 * so far on the device's; 0: in order, as usual) and side_end; side_join makes
 * the device's stream wait for all of it (be->join; also before every host wait
 * and capture boundary).  ll_cuda_set_lane switches the stream ops queue on and
 * their scratch (lane 0: the device's stream, 1: the side's).  gemm: 1 for a gemm, 0 for a layer
 * norm's finish (they are counted apart).  ll_cuda_side_slot: a slot of scratch for work the side
 * will read after the device's stream went on (0..LL_CUDA_SIDE_SLOTS-1, free again at the next
 * join), or -1: the side is not open (no join promised) and the work runs in order. */
#define LL_CUDA_SIDE_SLOTS 16 /* a group of 4 decoder layers has 12 layer norms (ll_layer_join_every) */
int ll_cuda_side_begin(ll_backend *be, int gemm);
void ll_cuda_side_end(ll_backend *be);
void ll_cuda_side_join(ll_backend *be);
int ll_cuda_side_on(ll_backend *be); /* between side_begin (1) and side_end */
int ll_cuda_side_slot(ll_backend *be);
cudaStream_t ll_cuda_side_stream(ll_backend *be); /* NULL before its first use (tests) */
/* the flags executable graphs are instantiated with (their nodes run by the captured priorities;
 * ll_cuda_stream_create in ll_cuda.h) */
unsigned ll_cuda_graph_instantiate_flags(void);
void ll_cuda_set_lane(ll_backend *be, cudaStream_t s, int lane);
int ll_cuda_cond_depth(ll_backend *be); /* conditional bodies being captured (a body's capture is one stream) */
/* cuda_gemm_lt.c: the side stream's own cuBLASLt workspace (once per device). 0, or -1 with ll_errbuf() set */
int ll_cuda_gemm_lt_side(ll_backend *be, cudaStream_t side);

/* Debug switch LL_CUDA_SYNC_CHECK=1: after every op (every checked call),
 * synchronise the device and die naming the op if anything failed, so an
 * asynchronous kernel fault is blamed on the op that queued it instead of
 * surfacing at a later download (cuda_backend.c; scripts/gpu_check.sh reruns
 * a failed test with it).  Off: one cached getenv test. */
void ll_cuda_sync_check(const char *what, const char *file, int line);
int ll_cuda_sync_checking(void); /* LL_CUDA_SYNC_CHECK is on: worth describing the op in detail */
static inline void ll_cuda_check_at(cudaError_t e, const char *what, const char *file, int line) {
    if (e != cudaSuccess) ll_die("CUDA error at %s:%d (%s): %s", file, line, what, cudaGetErrorString(e));
    ll_cuda_sync_check(what, file, line);
}
/* Every launcher returns cudaGetLastError() of its launches: checked here. */
#define LL_CU(call) ll_cuda_check_at((call), #call, __FILE__, __LINE__)

/* One registration per file: fills the op table entries the file implements. */
void ll_cuda_register_elementwise(ll_backend *be); /* cuda_ops_elementwise.c */
void ll_cuda_register_embed(ll_backend *be);       /* cuda_ops_embed.c */
void ll_cuda_register_loss(ll_backend *be);        /* cuda_ops_loss.c */
void ll_cuda_register_step(ll_backend *be);        /* cuda_ops_step.c */
void ll_cuda_register_latent(ll_backend *be);      /* cuda_ops_latent.c */
/* cuda_gemm_lt.c: the cuBLASLt handle and workspace (once per device) and the
 * gemm op.  0, or -1 with ll_errbuf() set. */
int ll_cuda_register_gemm_lt(ll_backend *be);
/* LL_CUDA_SYNC_CHECK after a cuBLASLt product: names it (transposes, M/N/K, types, epilogue epi
 * as ll_epilogue numbers it, TF32 or exact; note appended) if the device faulted */
void ll_cuda_gemm_sync_check(const ll_cuda_gemm_desc *d, int epi, const char *note);
/* cuda_relu_mask.c: the ReLU masks of LL_EPI_BIAS_RELU_AUX / LL_EPI_DRELU.  Registration
 * probes cuBLASLt's two epilogues and offers be->relu_mask_bytes when they pass. */
void ll_cuda_register_relu_mask(ll_backend *be);
int ll_cuda_relu_mask_ld(int cols);                       /* the mask's leading dimension, in bits */
void ll_cuda_relu_mask_note(const void *mask, int written); /* did cuBLASLt write this mask */
int ll_cuda_relu_mask_written(const void *mask);

#endif
