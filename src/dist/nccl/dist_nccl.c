/* ll/dist.h on NCCL: device buffers of the CUDA backend.  The communicator's
 * id goes from rank 0 to the others through MPI (the host collectives); the
 * reductions run on a stream of their own, after an event recorded on the
 * backend's stream (so a bucket is reduced only once the backward that wrote
 * it has run), and wait() only makes the backend's stream wait for their
 * completion event (cudaStreamWaitEvent): the host goes on queueing the next
 * work (Adam, the ZeRO-1 norm and all-gather, the next batch) while NCCL runs.
 * The watchdog is a helper thread: it polls every reduction in flight and
 * stops the job when one fails or runs past dist.timeout_s.  Uneven
 * reduce-scatter / all-gather (ZeRO-1 shards) are grouped ncclReduce /
 * ncclBroadcast calls, one per rank.  Built only with CUDA and NCCL. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ll/core.h"
#include "ll_cuda.h"
#include "../dist_internal.h"

#define MAX_REQS 1024

/* a slot's state: free; started (its request not waited yet); waited (the
 * backend's stream waits for it; free again once the watchdog sees it done) */
enum { SLOT_FREE, SLOT_STARTED, SLOT_WAITED };

typedef struct {
    ncclComm_t comm;
    cudaStream_t stream, be_stream;
    int device;
    cudaEvent_t ready, done[MAX_REQS];
    const char *what[MAX_REQS];
    int state[MAX_REQS];
    double t0[MAX_REQS];
    int next;
    ll_dist *host;
    pthread_mutex_t mu; /* the slots, shared with the watchdog */
    pthread_t watchdog;
    int stop;
} nccl_impl;

static ncclDataType_t nccl_type(ll_dist_dtype t) { return t == LL_DIST_F64 ? ncclFloat64 : ncclFloat32; }

static void check_nccl(ll_dist *d, ncclResult_t r, const char *what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    char msg[512];
    snprintf(msg, sizeof msg, "NCCL error in %s at update %ld: %s", what, d->update, ncclGetErrorString(r));
    ll_dist_abort(d, msg);
}

static void check_cuda(ll_dist *d, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    char msg[512];
    snprintf(msg, sizeof msg, "CUDA error in %s at update %ld: %s", what, d->update, cudaGetErrorString(e));
    ll_dist_abort(d, msg);
}

/* A free slot (reclaiming finished ones when none is free); its reduction
 * starts after everything queued so far on the backend's stream. */
static int start(ll_dist *d, const char *what) {
    nccl_impl *p = d->impl;
    pthread_mutex_lock(&p->mu);
    int i = -1;
    for (int pass = 0; pass < 2 && i < 0; pass++)
        for (int k = 0; k < MAX_REQS; k++) {
            const int j = (p->next + k) % MAX_REQS;
            if (pass == 1 && p->state[j] == SLOT_WAITED && cudaEventQuery(p->done[j]) == cudaSuccess)
                p->state[j] = SLOT_FREE;
            if (p->state[j] == SLOT_FREE) {
                i = j;
                break;
            }
        }
    if (i < 0) {
        pthread_mutex_unlock(&p->mu);
        ll_dist_abort(d, "more than 1024 NCCL collectives in flight (dist.bucket_mb too small?)");
    }
    p->next = (i + 1) % MAX_REQS;
    p->what[i] = what ? what : "collective";
    p->state[i] = SLOT_STARTED;
    p->t0[i] = ll_now();
    pthread_mutex_unlock(&p->mu);
    check_cuda(d, cudaEventRecord(p->ready, p->be_stream), what);
    check_cuda(d, cudaStreamWaitEvent(p->stream, p->ready, 0), what);
    return i;
}

static ll_dist_req finish_start(ll_dist *d, int i) {
    nccl_impl *p = d->impl;
    check_cuda(d, cudaEventRecord(p->done[i], p->stream), p->what[i]);
    return i;
}

static ll_dist_req nccl_allreduce(ll_dist *d, void *buf, size_t n, ll_dist_dtype t, int avg, const char *what) {
    nccl_impl *p = d->impl;
    int i = start(d, what);
    check_nccl(d, ncclAllReduce(buf, buf, n, nccl_type(t), avg ? ncclAvg : ncclSum, p->comm, p->stream), what);
    return finish_start(d, i);
}

static ll_dist_req nccl_reduce_scatter(ll_dist *d, const void *send, void *recv, const size_t *counts,
                                       ll_dist_dtype t, const char *what) {
    nccl_impl *p = d->impl;
    int i = start(d, what);
    const size_t es = ll_dist_dtype_size(t);
    size_t off = 0;
    check_nccl(d, ncclGroupStart(), what);
    for (int r = 0; r < d->world; r++) {
        check_nccl(d, ncclReduce((const char *)send + off * es, recv, counts[r], nccl_type(t), ncclSum, r, p->comm,
                                 p->stream), what);
        off += counts[r];
    }
    check_nccl(d, ncclGroupEnd(), what);
    return finish_start(d, i);
}

static ll_dist_req nccl_allgather(ll_dist *d, void *buf, const size_t *counts, ll_dist_dtype t, const char *what) {
    nccl_impl *p = d->impl;
    int i = start(d, what);
    const size_t es = ll_dist_dtype_size(t);
    size_t off = 0;
    check_nccl(d, ncclGroupStart(), what);
    for (int r = 0; r < d->world; r++) {
        char *b = (char *)buf + off * es;
        check_nccl(d, ncclBroadcast(b, b, counts[r], nccl_type(t), r, p->comm, p->stream), what);
        off += counts[r];
    }
    check_nccl(d, ncclGroupEnd(), what);
    return finish_start(d, i);
}

/* Completion on the device: the backend's stream waits for the reduction's
 * event; the host does not (the watchdog below frees the slot once it ran). */
static void nccl_wait(ll_dist *d, ll_dist_req r) {
    nccl_impl *p = d->impl;
    if (r < 0 || r >= MAX_REQS) return;
    pthread_mutex_lock(&p->mu);
    const int started = p->state[r] == SLOT_STARTED;
    if (started) p->state[r] = SLOT_WAITED;
    pthread_mutex_unlock(&p->mu);
    if (started) check_cuda(d, cudaStreamWaitEvent(p->be_stream, p->done[r], 0), p->what[r]);
}

/* The watchdog thread: every reduction in flight is polled; a CUDA or
 * communicator error, or one not done after dist.timeout_s, aborts the
 * communicator and stops the job (ll_dist_abort exits every rank). */
static void *watchdog(void *arg) {
    ll_dist *d = arg;
    nccl_impl *p = d->impl;
    cudaSetDevice(p->device); /* the runtime's current device is per thread */
    const struct timespec tick = {0, 1000000}; /* 1 ms */
    for (;;) {
        char msg[512] = "";
        pthread_mutex_lock(&p->mu);
        if (p->stop) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        const double now = ll_now();
        for (int i = 0; i < MAX_REQS && !msg[0]; i++) {
            if (p->state[i] == SLOT_FREE) continue;
            const cudaError_t e = cudaEventQuery(p->done[i]);
            if (e == cudaSuccess) {
                if (p->state[i] == SLOT_WAITED) p->state[i] = SLOT_FREE;
                continue;
            }
            if (e != cudaErrorNotReady)
                snprintf(msg, sizeof msg, "CUDA error in %s at update %ld: %s", p->what[i], d->update,
                         cudaGetErrorString(e));
            else if (d->timeout_s > 0 && now - p->t0[i] > d->timeout_s)
                snprintf(msg, sizeof msg,
                         "%s: NCCL reduction not done after %.0f s (dist.timeout_s) at update %ld: another rank died "
                         "or hangs; stopping the job (restart it with --resume)",
                         p->what[i], d->timeout_s, d->update);
        }
        ncclResult_t ae = ncclSuccess;
        if (!msg[0] && ncclCommGetAsyncError(p->comm, &ae) == ncclSuccess && ae != ncclSuccess && ae != ncclInProgress)
            snprintf(msg, sizeof msg, "NCCL error at update %ld: %s", d->update, ncclGetErrorString(ae));
        pthread_mutex_unlock(&p->mu);
        if (msg[0]) {
            ncclCommAbort(p->comm);
            ll_dist_abort(d, msg);
        }
        nanosleep(&tick, NULL);
    }
}

static void nccl_poke(ll_dist *d) { (void)d; }

static void nccl_bcast(ll_dist *d, void *buf, size_t bytes, int root) {
    nccl_impl *p = d->impl;
    int i = start(d, "broadcast");
    check_nccl(d, ncclBroadcast(buf, buf, bytes, ncclUint8, root, p->comm, p->stream), "broadcast");
    nccl_wait(d, finish_start(d, i));
}

static void nccl_barrier(ll_dist *d) {
    nccl_impl *p = d->impl;
    p->host->barrier(p->host);
}

static void nccl_finalize(ll_dist *d) {
    nccl_impl *p = d->impl;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->watchdog, NULL);
    pthread_mutex_destroy(&p->mu);
    cudaStreamSynchronize(p->stream);
    ncclCommDestroy(p->comm);
    for (int i = 0; i < MAX_REQS; i++) cudaEventDestroy(p->done[i]);
    cudaEventDestroy(p->ready);
    cudaStreamDestroy(p->stream);
    free(p);
    free(d);
}

cudaStream_t ll_dist_nccl_stream(const ll_dist *d) {
    return d && d->name && !strcmp(d->name, "nccl") ? ((const nccl_impl *)d->impl)->stream : NULL;
}

ll_dist *ll_dist_nccl_new(ll_dist *host, ll_backend *be) {
    ll_dist *d = ll_calloc(1, sizeof *d);
    nccl_impl *p = ll_calloc(1, sizeof *p);
    *d = *host;
    d->name = "nccl";
    d->impl = p;
    d->host = host;
    d->device_buffers = 1;
    p->host = host;
    p->be_stream = ll_cuda_stream(be);
    p->device = ll_cuda_device(be);
    pthread_mutex_init(&p->mu, NULL);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (host->rank == 0) check_nccl(d, ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (host->world > 1) ll_dist_mpi_bcast_host(host, &id, sizeof id, 0);
    check_nccl(d, ncclCommInitRank(&p->comm, host->world, id, host->rank), "ncclCommInitRank");
    /* at the backward chain's priority: a layer group's all-reduce must not wait for SMs behind the
     * side stream's weight gradients (the least priority), or it overlaps nothing */
    check_cuda(d, ll_cuda_stream_create(&p->stream, 0), "cudaStreamCreate");
    check_cuda(d, cudaEventCreateWithFlags(&p->ready, cudaEventDisableTiming), "cudaEventCreate");
    for (int i = 0; i < MAX_REQS; i++)
        check_cuda(d, cudaEventCreateWithFlags(&p->done[i], cudaEventDisableTiming), "cudaEventCreate");
    d->allreduce = nccl_allreduce;
    d->reduce_scatter = nccl_reduce_scatter;
    d->allgather = nccl_allgather;
    d->wait = nccl_wait;
    d->poke = nccl_poke;
    d->bcast = nccl_bcast;
    d->barrier = nccl_barrier;
    d->finalize = nccl_finalize;
    if (pthread_create(&p->watchdog, NULL, watchdog, d) != 0) ll_die("cannot start the NCCL watchdog thread");
    return d;
}
