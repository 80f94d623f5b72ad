/* Collectives between the processes (ranks) of one training job (src/dist).
 *
 * One small interface, three implementations chosen at start-up from how the
 * program was launched (docs/distributed.md):
 *   "single": one process, world size 1; every operation is a no-op.
 *   "mpi":    OpenMPI ranks (mpirun -np N); buffers are host memory, the
 *             reductions are MPI_Iallreduce / MPI_Ireduce_scatter /
 *             MPI_Iallgatherv.
 *   "nccl":   NCCL on device buffers of the CUDA backend, its own stream
 *             ordered by events against the backend's stream; the NCCL id is
 *             broadcast through MPI (src/dist/nccl/).
 * A build without MPI or NCCL gets the same struct with world size 1, so
 * callers never test how ll was built (llm.c's pattern).
 *
 * Every reduction is started (non-blocking) and completed by wait(), which is
 * also the watchdog: a wait that has not completed after timeout_s seconds
 * prints which rank waited, in which operation, and which ranks it waits for,
 * then aborts the whole job (MPI_Abort), so no rank hangs forever behind a
 * dead or stuck one. */
#ifndef LL_DIST_H
#define LL_DIST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LL_DIST_F32, LL_DIST_F64 } ll_dist_dtype;
typedef int ll_dist_req; /* a started operation; complete it with wait() */

typedef struct ll_dist ll_dist;
struct ll_dist {
    const char *name;   /* "single", "mpi" or "nccl" */
    int rank, world;    /* this process and the number of processes */
    int local_rank, local_size; /* on this node (one rank per GPU: local_rank picks the device) */
    int device_buffers; /* 1: buffers are backend (GPU) memory; 0: host memory */
    double timeout_s;   /* watchdog: a wait longer than this stops the job; <= 0: no limit */
    ll_dist *host;      /* collectives on host memory (itself unless device_buffers) */
    void *impl;
    /* Sum (avg: mean over ranks) of n elements of buf on every rank, in place. */
    ll_dist_req (*allreduce)(ll_dist *d, void *buf, size_t n, ll_dist_dtype t, int avg, const char *what);
    /* send holds sum(counts) elements; rank r receives into recv the sum over
     * ranks of send's block r (counts[r] elements at offset counts[0] + ... + counts[r-1]). */
    ll_dist_req (*reduce_scatter)(ll_dist *d, const void *send, void *recv, const size_t *counts, ll_dist_dtype t,
                                  const char *what);
    /* In place: buf holds sum(counts) elements; afterwards every rank holds
     * every rank's block (block r as rank r had it). */
    ll_dist_req (*allgather)(ll_dist *d, void *buf, const size_t *counts, ll_dist_dtype t, const char *what);
    /* Complete a started operation (the watchdog runs here).  NCCL: orders the
     * backend's stream after it (the host does not block). */
    void (*wait)(ll_dist *d, ll_dist_req r);
    /* Let started operations progress (MPI enters its progress engine). */
    void (*poke)(ll_dist *d);
    void (*bcast)(ll_dist *d, void *buf, size_t bytes, int root); /* blocking */
    void (*barrier)(ll_dist *d);                                  /* blocking */
    void (*finalize)(ll_dist *d);                                 /* frees d */
    long update;          /* the training update in progress (for messages) */
};

/* The collectives for this process: MPI when launched by mpirun (or a PMI
 * launcher) with more than one rank, or when force is "mpi"; else single.
 * force: "auto" | "single" | "mpi" | "nccl" (as auto; the trainer then puts
 * NCCL on the CUDA backend, ll/dist_train.h).  Never NULL (exits with one line when
 * MPI was asked for and is not built in). */
ll_dist *ll_dist_start(const char *force, double timeout_s);
/* The single-process collectives (world size 1). */
ll_dist *ll_dist_single(void);
/* 1 when this build has MPI (src/dist/mpi). */
int ll_dist_have_mpi(void);
/* Blocking conveniences. */
void ll_dist_allreduce_wait(ll_dist *d, void *buf, size_t n, ll_dist_dtype t, int avg, const char *what);
/* Sum of one double over ranks (host collectives). */
double ll_dist_sum_host(ll_dist *d, double x, const char *what);
/* Stops every rank of the job: prints "lltrain: rank R: <msg>" and aborts
 * (MPI_Abort, exit status 1). */
void ll_dist_abort(ll_dist *d, const char *msg) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif
#endif
