/* NCCL stand-in over MPI for the CUDA emulation (tests only): each MPI rank is
 * one emulated device; the collectives src/dist/nccl uses (all-reduce sum/avg,
 * reduce, broadcast; fp32, fp64, bytes) are queued on their stream like
 * NCCL's kernels and run as MPI collectives on a duplicate of MPI_COMM_WORLD.
 *
 * A GPU runs a queued collective while the host goes on (even into host MPI
 * calls); an emulated stream runs only when someone synchronises it.  So that
 * a rank blocked in a host collective cannot leave its peer waiting forever in
 * this one, each collective's stream is synchronised as soon as it is queued:
 * that runs the stream's earlier work, and through cudaStreamWaitEvent the
 * compute stream's work up to the event the caller recorded, exactly as far
 * as the events order it (a missing event shows as a reduction of stale
 * data).  With one rank there is no MPI: the collectives are local copies. */
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "emu_internal.h"

#ifdef LL_EMU_MPI
#define OMPI_SKIP_MPICXX 1 /* the C API only */
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

struct ncclComm {
    int rank, nranks, device;
#ifdef LL_EMU_MPI
    MPI_Comm mpi;
#endif
};

namespace {

size_t type_bytes(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
    }
}

#ifdef LL_EMU_MPI
MPI_Datatype mpi_type(ncclDataType_t t) {
    switch (t) {
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    case ncclInt32: return MPI_INT;
    default: return MPI_BYTE;
    }
}
#endif

/* Queue fn on the stream and run everything up to it now (see the top comment). */
ncclResult_t post(cudaStream_t s, const char *what, std::function<void()> fn) {
    if (ll_emu::env("LL_CUDA_EMU_NCCL_HANG")) { /* a collective that never completes (a dead peer) */
        ll_emu::enqueue(s, what, [what]() { ll_emu::fail("%s: LL_CUDA_EMU_NCCL_HANG, yet it ran", what); });
        return ncclSuccess;
    }
    ll_emu::enqueue(s, what, std::move(fn));
    return cudaStreamSynchronize(s) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

int dev_ok(const void *p, size_t n) { return n == 0 || ll_emu::device_range(p, n) == 1; }

} // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (cuda-emu NCCL)";
    case ncclInvalidUsage: return "invalid usage (cuda-emu NCCL)";
    case ncclSystemError: return "system error (cuda-emu NCCL over MPI)";
    default: return "error (cuda-emu NCCL)";
    }
}
ncclResult_t ncclGetVersion(int *v) {
    *v = 0;
    return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "cuda-emu nccl");
    return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    if (strcmp(id.internal, "cuda-emu nccl")) return ncclInvalidArgument;
    if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    ncclComm *c = new ncclComm();
    c->rank = rank;
    c->nranks = nranks;
    c->device = ll_emu::current_device();
    if (nranks > 1) {
#ifdef LL_EMU_MPI
        int init = 0, size = 0, me = -1;
        MPI_Initialized(&init);
        if (!init) return delete c, ncclInvalidUsage;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
        if (size != nranks || me != rank) return delete c, ncclInvalidUsage;
        if (MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi) != MPI_SUCCESS) return delete c, ncclSystemError;
#else
        return delete c, ncclInvalidUsage;
#endif
    }
    *comm = c;
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) {
#ifdef LL_EMU_MPI
    if (c->nranks > 1) MPI_Comm_free(&c->mpi);
#endif
    delete c;
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t c) { return ncclCommDestroy(c); }
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) {
    (void)c;
    *e = ncclSuccess;
    return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t c, int *n) {
    *n = c->nranks;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r) {
    *r = c->rank;
    return ncclSuccess;
}
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t s) {
    const size_t bytes = count * type_bytes(t);
    if (!dev_ok(send, bytes) || !dev_ok(recv, bytes)) return ncclInvalidArgument;
    if ((op != ncclSum && op != ncclAvg) || (t != ncclFloat32 && t != ncclFloat64)) return ncclInvalidArgument;
    return post(s, "ncclAllReduce", [=]() {
        if (c->nranks > 1) {
#ifdef LL_EMU_MPI
            if (MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, mpi_type(t), MPI_SUM, c->mpi) !=
                MPI_SUCCESS)
                ll_emu::fail("ncclAllReduce: MPI_Allreduce failed");
#endif
        } else if (send != recv) {
            memmove(recv, send, bytes);
        }
        if (op == ncclAvg && c->nranks > 1) {
            for (size_t i = 0; i < count; i++)
                if (t == ncclFloat32) ((float *)recv)[i] /= (float)c->nranks;
                else ((double *)recv)[i] /= (double)c->nranks;
        }
    });
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t c, cudaStream_t s) {
    const size_t bytes = count * type_bytes(t);
    if (op != ncclSum || (t != ncclFloat32 && t != ncclFloat64) || root < 0 || root >= c->nranks)
        return ncclInvalidArgument;
    if (!dev_ok(send, bytes) || (c->rank == root && !dev_ok(recv, bytes))) return ncclInvalidArgument;
    return post(s, "ncclReduce", [=]() {
        if (c->nranks > 1) {
#ifdef LL_EMU_MPI
            const void *sb = send == recv && c->rank == root ? MPI_IN_PLACE : send;
            if (MPI_Reduce(sb, recv, (int)count, mpi_type(t), MPI_SUM, root, c->mpi) != MPI_SUCCESS)
                ll_emu::fail("ncclReduce: MPI_Reduce failed");
#endif
        } else if (send != recv) {
            memmove(recv, send, bytes);
        }
    });
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s) {
    const size_t bytes = count * type_bytes(t);
    if (root < 0 || root >= c->nranks || !dev_ok(recv, bytes) || (c->rank == root && !dev_ok(send, bytes)))
        return ncclInvalidArgument;
    return post(s, "ncclBroadcast", [=]() {
        if (c->rank == root && send != recv) memmove(recv, send, bytes);
#ifdef LL_EMU_MPI
        if (c->nranks > 1 && MPI_Bcast(recv, (int)bytes, MPI_BYTE, root, c->mpi) != MPI_SUCCESS)
            ll_emu::fail("ncclBroadcast: MPI_Bcast failed");
#endif
    });
}

} // extern "C"
