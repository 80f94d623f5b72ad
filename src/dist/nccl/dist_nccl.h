/* NCCL collectives on the CUDA backend's device buffers (dist_nccl.c; built
 * only with CUDA and NCCL, when LL_WITH_NCCL is defined).  host: the MPI (or
 * single) collectives that carry the NCCL id; be: the CUDA backend. */
#ifndef LL_DIST_NCCL_H
#define LL_DIST_NCCL_H

#include <cuda_runtime_api.h>

#include "ll/backend.h"
#include "ll/dist.h"

ll_dist *ll_dist_nccl_new(ll_dist *host, ll_backend *be);
/* the stream its collectives run on (tests: its priority); NULL for another ll_dist */
cudaStream_t ll_dist_nccl_stream(const ll_dist *d);

#endif
