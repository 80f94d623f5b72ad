/* The collectives' front door: the single-process implementation, the choice
 * of implementation at start-up and a few blocking helpers (ll/dist.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "ll/dist.h"
#include "dist_internal.h"

static ll_dist_req single_allreduce(ll_dist *d, void *buf, size_t n, ll_dist_dtype t, int avg, const char *what) {
    (void)d, (void)buf, (void)n, (void)t, (void)avg, (void)what;
    return 0;
}

/* world 1: rank 0's block of send is all of it */
static ll_dist_req single_reduce_scatter(ll_dist *d, const void *send, void *recv, const size_t *counts,
                                         ll_dist_dtype t, const char *what) {
    (void)d, (void)what;
    if (send != recv) memmove(recv, send, counts[0] * ll_dist_dtype_size(t));
    return 0;
}

static ll_dist_req single_allgather(ll_dist *d, void *buf, const size_t *counts, ll_dist_dtype t, const char *what) {
    (void)d, (void)buf, (void)counts, (void)t, (void)what;
    return 0;
}

static void single_wait(ll_dist *d, ll_dist_req r) { (void)d, (void)r; }
static void single_poke(ll_dist *d) { (void)d; }
static void single_bcast(ll_dist *d, void *buf, size_t bytes, int root) { (void)d, (void)buf, (void)bytes, (void)root; }
static void single_barrier(ll_dist *d) { (void)d; }
static void single_finalize(ll_dist *d) { (void)d; }

static ll_dist g_single = {
    .name = "single", .rank = 0, .world = 1, .local_rank = 0, .local_size = 1, .device_buffers = 0,
    .host = &g_single, .allreduce = single_allreduce, .reduce_scatter = single_reduce_scatter,
    .allgather = single_allgather, .wait = single_wait, .poke = single_poke, .bcast = single_bcast,
    .barrier = single_barrier, .finalize = single_finalize,
};

ll_dist *ll_dist_single(void) { return &g_single; }

size_t ll_dist_dtype_size(ll_dist_dtype t) { return t == LL_DIST_F64 ? sizeof(double) : sizeof(float); }

/* Launched by mpirun / a PMI launcher (OpenMPI, MPICH/Hydra, Slurm's PMI). */
static int launched_by_mpi(void) {
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int ll_dist_have_mpi(void) { return ll_dist_mpi_built(); }

ll_dist *ll_dist_start(const char *force, double timeout_s) {
    g_single.timeout_s = timeout_s;
    if (!force || !*force) force = "auto";
    if (!strcmp(force, "single")) return &g_single;
    if (!strcmp(force, "nccl")) force = "auto"; /* the ranks as launched; NCCL comes with the CUDA backend */
    if (strcmp(force, "mpi") && strcmp(force, "auto")) ll_die("dist.backend %s: expected auto, single, mpi or nccl", force);
    const int want = !strcmp(force, "mpi") || launched_by_mpi();
    if (!want) return &g_single;
    if (!ll_dist_mpi_built()) {
        if (!strcmp(force, "mpi")) ll_die("dist.backend mpi: this build has no MPI (install libopenmpi-dev and rebuild)");
        const char *w = getenv("OMPI_COMM_WORLD_SIZE");
        if (w && atoi(w) > 1)
            ll_die("started by mpirun with %s ranks, but this build has no MPI: every rank would train alone "
                   "(install libopenmpi-dev and rebuild)", w);
        return &g_single;
    }
    ll_dist *d = ll_dist_mpi_start(timeout_s);
    if (d->world == 1 && strcmp(force, "mpi")) { /* mpirun -np 1: one process, nothing to reduce */
        d->finalize(d);
        return &g_single;
    }
    return d;
}

void ll_dist_allreduce_wait(ll_dist *d, void *buf, size_t n, ll_dist_dtype t, int avg, const char *what) {
    d->wait(d, d->allreduce(d, buf, n, t, avg, what));
}

double ll_dist_sum_host(ll_dist *d, double x, const char *what) {
    ll_dist_allreduce_wait(d->host, &x, 1, LL_DIST_F64, 0, what);
    return x;
}

void ll_dist_abort(ll_dist *d, const char *msg) {
    fprintf(stderr, "lltrain: rank %d: %s\n", d->rank, msg);
    fflush(stderr);
    ll_dist_mpi_abort(d->host);
    exit(1);
}
