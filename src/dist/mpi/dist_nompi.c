/* A build without MPI: ll_dist_start always gets the single-process collectives. */
#include "ll/core.h"
#include "../dist_internal.h"

int ll_dist_mpi_built(void) { return 0; }
ll_dist *ll_dist_mpi_start(double timeout_s) {
    (void)timeout_s;
    return ll_dist_single();
}
void ll_dist_mpi_abort(ll_dist *host) { (void)host; }
void ll_dist_mpi_bcast_host(ll_dist *host, void *buf, size_t bytes, int root) { (void)host, (void)buf, (void)bytes, (void)root; }
