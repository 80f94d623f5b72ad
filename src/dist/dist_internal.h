/* Between the implementations of ll/dist.h (not for callers). */
#ifndef LL_DIST_INTERNAL_H
#define LL_DIST_INTERNAL_H

#include "ll/dist.h"

size_t ll_dist_dtype_size(ll_dist_dtype t);
/* src/dist/mpi/dist_mpi.c, or the stubs in src/dist/dist_nompi.c */
int ll_dist_mpi_built(void);
ll_dist *ll_dist_mpi_start(double timeout_s);
void ll_dist_mpi_abort(ll_dist *host); /* MPI_Abort when d is MPI; returns otherwise */
/* MPI_Bcast of bytes on the MPI communicator (the NCCL id); d->host must be MPI. */
void ll_dist_mpi_bcast_host(ll_dist *host, void *buf, size_t bytes, int root);

#endif
