/* ll/dist.h on MPI: host buffers, non-blocking MPI-3 collectives, and the
 * watchdog in wait().
 *
 * Overlap on the CPU: OpenMPI has no progress thread by default, so a started
 * MPI_Iallreduce moves forward only while this rank is inside MPI (wait, poke);
 * small buckets over shared memory finish inside the first MPI_Test, large
 * ones mostly in the final wait (docs/distributed.md). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ll/core.h"
#include "../dist_internal.h"

#define MAX_REQS 8192

typedef struct {
    MPI_Request req[MAX_REQS];
    const char *what[MAX_REQS];
    void *avg_buf[MAX_REQS]; /* allreduce with avg: divide after completion */
    size_t avg_n[MAX_REQS];
    ll_dist_dtype avg_t[MAX_REQS];
    int *rcounts, *displs; /* scratch for the v-collectives, [world] */
    int next;
} mpi_impl;

static MPI_Datatype mpi_type(ll_dist_dtype t) { return t == LL_DIST_F64 ? MPI_DOUBLE : MPI_FLOAT; }

static void check(ll_dist *d, int err, const char *what) {
    if (err == MPI_SUCCESS) return;
    char s[MPI_MAX_ERROR_STRING], msg[MPI_MAX_ERROR_STRING + 256];
    int len = 0;
    MPI_Error_string(err, s, &len);
    snprintf(msg, sizeof msg, "MPI error in %s at update %ld: %s (another rank probably died)", what, d->update, s);
    ll_dist_abort(d, msg);
}

/* A free request slot (slots are reused once waited on). */
static int slot(ll_dist *d, const char *what) {
    mpi_impl *p = d->impl;
    for (int k = 0; k < MAX_REQS; k++) {
        int i = (p->next + k) % MAX_REQS;
        if (p->req[i] == MPI_REQUEST_NULL && !p->what[i]) {
            p->next = (i + 1) % MAX_REQS;
            p->what[i] = what ? what : "collective";
            p->avg_buf[i] = NULL;
            return i;
        }
    }
    ll_dist_abort(d, "more than 8192 collectives in flight (dist.bucket_mb too small?)");
}

static int to_int(ll_dist *d, size_t n) {
    if (n > (size_t)2147483647) ll_dist_abort(d, "a collective of more than 2^31 elements (lower dist.bucket_mb)");
    return (int)n;
}

static ll_dist_req mpi_allreduce(ll_dist *d, void *buf, size_t n, ll_dist_dtype t, int avg, const char *what) {
    mpi_impl *p = d->impl;
    int i = slot(d, what);
    check(d, MPI_Iallreduce(MPI_IN_PLACE, buf, to_int(d, n), mpi_type(t), MPI_SUM, MPI_COMM_WORLD, &p->req[i]), what);
    if (avg) {
        p->avg_buf[i] = buf;
        p->avg_n[i] = n;
        p->avg_t[i] = t;
    }
    return i;
}

static void fill_counts(ll_dist *d, const size_t *counts) {
    mpi_impl *p = d->impl;
    size_t off = 0;
    for (int r = 0; r < d->world; r++) {
        p->rcounts[r] = to_int(d, counts[r]);
        p->displs[r] = to_int(d, off);
        off += counts[r];
    }
}

static ll_dist_req mpi_reduce_scatter(ll_dist *d, const void *send, void *recv, const size_t *counts, ll_dist_dtype t,
                                      const char *what) {
    mpi_impl *p = d->impl;
    fill_counts(d, counts);
    int i = slot(d, what);
    check(d, MPI_Ireduce_scatter(send, recv, p->rcounts, mpi_type(t), MPI_SUM, MPI_COMM_WORLD, &p->req[i]), what);
    return i;
}

static ll_dist_req mpi_allgather(ll_dist *d, void *buf, const size_t *counts, ll_dist_dtype t, const char *what) {
    mpi_impl *p = d->impl;
    fill_counts(d, counts);
    int i = slot(d, what);
    check(d, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, p->rcounts, p->displs, mpi_type(t),
                             MPI_COMM_WORLD, &p->req[i]), what);
    return i;
}

static void nap(long ns) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* The watchdog: poll the request; after timeout_s, name this rank, the
 * operation and the ranks it waits for, and stop the whole job. */
static void mpi_wait(ll_dist *d, ll_dist_req r) {
    mpi_impl *p = d->impl;
    if (r < 0 || r >= MAX_REQS || !p->what[r]) return;
    double t0 = ll_now(), last = t0;
    long polls = 0;
    for (;;) {
        int done = 0;
        check(d, MPI_Test(&p->req[r], &done, MPI_STATUS_IGNORE), p->what[r]);
        if (done) break;
        if (++polls > 2000) nap(polls > 20000 ? 200000 : 20000); /* spin briefly, then sleep between polls */
        const double now = ll_now();
        if (now - last > 1.0 && now - last > d->timeout_s / 4) t0 += now - last; /* this rank itself was stopped */
        last = now;
        if (d->timeout_s > 0 && now - t0 > d->timeout_s) {
            char msg[512], who[64];
            if (d->world == 2)
                snprintf(who, sizeof who, "rank %d", 1 - d->rank);
            else
                snprintf(who, sizeof who, "one of the other %d ranks", d->world - 1);
            snprintf(msg, sizeof msg,
                     "%s: no answer from %s for %.0f s (dist.timeout_s) at update %ld: it died or hangs; stopping "
                     "the job (restart it with --resume from the last checkpoint)",
                     p->what[r], who, d->timeout_s, d->update);
            ll_dist_abort(d, msg);
        }
    }
    if (p->avg_buf[r]) {
        const size_t n = p->avg_n[r];
        if (p->avg_t[r] == LL_DIST_F64)
            for (size_t k = 0; k < n; k++) ((double *)p->avg_buf[r])[k] /= d->world;
        else
            for (size_t k = 0; k < n; k++) ((float *)p->avg_buf[r])[k] /= (float)d->world;
    }
    p->what[r] = NULL;
    p->req[r] = MPI_REQUEST_NULL;
}

static void mpi_poke(ll_dist *d) {
    int flag;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    (void)d;
}

static void mpi_bcast(ll_dist *d, void *buf, size_t bytes, int root) {
    mpi_impl *p = d->impl;
    int i = slot(d, "broadcast");
    check(d, MPI_Ibcast(buf, to_int(d, bytes), MPI_BYTE, root, MPI_COMM_WORLD, &p->req[i]), "broadcast");
    mpi_wait(d, i);
}

static void mpi_barrier(ll_dist *d) {
    mpi_impl *p = d->impl;
    int i = slot(d, "barrier");
    check(d, MPI_Ibarrier(MPI_COMM_WORLD, &p->req[i]), "barrier");
    mpi_wait(d, i);
}

static void mpi_finalize(ll_dist *d) {
    mpi_impl *p = d->impl;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
    free(p->rcounts);
    free(p->displs);
    free(p);
    free(d);
}

int ll_dist_mpi_built(void) { return 1; }

ll_dist *ll_dist_mpi_start(double timeout_s) {
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        ll_die("MPI_Init failed");
    /* errors come back to check(): one line naming the rank instead of MPI's abort banner */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    ll_dist *d = ll_calloc(1, sizeof *d);
    mpi_impl *p = ll_calloc(1, sizeof *p);
    for (int i = 0; i < MAX_REQS; i++) p->req[i] = MPI_REQUEST_NULL;
    d->name = "mpi";
    d->impl = p;
    d->host = d;
    d->timeout_s = timeout_s;
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->world);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &d->local_rank);
    MPI_Comm_size(local, &d->local_size);
    MPI_Comm_free(&local);
    p->rcounts = ll_calloc((size_t)d->world, sizeof(int));
    p->displs = ll_calloc((size_t)d->world, sizeof(int));
    d->allreduce = mpi_allreduce;
    d->reduce_scatter = mpi_reduce_scatter;
    d->allgather = mpi_allgather;
    d->wait = mpi_wait;
    d->poke = mpi_poke;
    d->bcast = mpi_bcast;
    d->barrier = mpi_barrier;
    d->finalize = mpi_finalize;
    return d;
}

void ll_dist_mpi_abort(ll_dist *host) {
    if (!host || strcmp(host->name, "mpi")) return;
    MPI_Abort(MPI_COMM_WORLD, 1);
}

void ll_dist_mpi_bcast_host(ll_dist *host, void *buf, size_t bytes, int root) { mpi_bcast(host, buf, bytes, root); }
