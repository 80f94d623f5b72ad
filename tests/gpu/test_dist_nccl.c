/* The NCCL collectives (src/dist/nccl) with one rank on the GPU: all-reduce
 * (sum, avg, f32, f64), reduce-scatter and all-gather leave the data as one
 * rank holds it, and they are ordered against the backend's stream: a scale
 * queued before a reduction is seen by it, one queued after its wait sees its
 * result.  wait() does not block the host (the backend's stream waits), so a
 * reduction left unfinished past dist.timeout_s is stopped by the watchdog
 * thread: `--hang` queues one and sleeps; the emulated test
 * gpu_emu_nccl_watchdog (LL_CUDA_EMU_NCCL_HANG: collectives never run)
 * expects the stop.  The collectives' stream runs at the greatest priority, as the backward's
 * chain (0, the default, with LL_CUDA_STREAM_PRIORITY=0).  Skips (77) without a device or
 * without NCCL in the build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "ll/dist_train.h"
#include "ll_cuda.h"
#include "../../src/dist/nccl/dist_nccl.h"
#include "../util/testutil.h"
#include "gpu_util.h"

int main(int argc, char **argv) {
    gpu_or_skip();
    ll_backend *be = ll_backend_cuda(0);
    CHECK_MSG(be != NULL, "ll_backend_cuda(0): %s", ll_errbuf());
    if (!be) return tu_finish("gpu_test_dist_nccl");
    const int hang = argc > 1 && !strcmp(argv[1], "--hang");
    ll_dist *host = ll_dist_single();
    if (hang) host->timeout_s = 0.3; /* before the watchdog thread starts (it reads it) */
    ll_dist *d = ll_dist_for_backend(host, be, 1);
    if (!d) {
        printf("%s: skipping\n", ll_errbuf());
        return 77;
    }
    CHECK(!strcmp(d->name, "nccl") && d->world == 1 && d->device_buffers);
#ifdef LL_WITH_NCCL /* (else ll_dist_for_backend said no above) */
    {
        const char *pe = getenv("LL_CUDA_STREAM_PRIORITY");
        int least = 0, greatest = 0, pr = 1;
        CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest) == cudaSuccess);
        CHECK(ll_dist_nccl_stream(d) && cudaStreamGetPriority(ll_dist_nccl_stream(d), &pr) == cudaSuccess);
        CHECK_MSG(pr == (pe && !strcmp(pe, "0") ? 0 : greatest), "the NCCL stream's priority is %d (range %d..%d)",
                  pr, least, greatest);
    }
#endif
    if (hang) { /* the watchdog must stop this after 0.3 s */
        float *w = be->alloc(be, sizeof(float) * 16);
        d->wait(d, d->allreduce(d, w, 16, LL_DIST_F32, 0, "test hung reduction"));
        sleep(30);
        printf("gpu_test_dist_nccl --hang: the watchdog did not stop the process\n");
        return 1;
    }
    enum { N = 100003 };
    float *h = ll_malloc(N * sizeof(float)), *g = ll_malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) h[i] = (float)(i % 97) - 48.5f;
    float *x = be->alloc(be, N * sizeof(float)), *y = be->alloc(be, N * sizeof(float));
    be->upload(be, x, h, N * sizeof(float));
    be->add(be, (ll_act *)x, (ll_act *)x, (ll_act *)x, N); /* x *= 2, queued before: the reduction must see it */
    d->wait(d, d->allreduce(d, x, N, LL_DIST_F32, 0, "test sum"));
    d->wait(d, d->allreduce(d, x, N, LL_DIST_F32, 1, "test avg"));
    be->add_scaled(be, (ll_act *)x, (ll_act *)x, (ll_act *)x, -0.5f, N); /* x /= 2, queued after the wait: sees the result */
    be->download(be, g, x, N * sizeof(float));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += g[i] != h[i];
    CHECK_MSG(bad == 0, "%d elements changed by all-reduce", bad);
    size_t counts[1] = {N};
    d->wait(d, d->reduce_scatter(d, x, y, counts, LL_DIST_F32, "test reduce-scatter"));
    d->wait(d, d->allgather(d, y, counts, LL_DIST_F32, "test all-gather"));
    be->download(be, g, y, N * sizeof(float));
    bad = 0;
    for (int i = 0; i < N; i++) bad += g[i] != h[i];
    CHECK_MSG(bad == 0, "%d elements wrong after reduce-scatter + all-gather", bad);
    double st[3] = {1.5, -2, 1e300}, got[3];
    double *ds = be->alloc(be, sizeof st);
    be->upload(be, ds, st, sizeof st);
    d->wait(d, d->allreduce(d, ds, 3, LL_DIST_F64, 0, "test f64"));
    d->bcast(d, ds, sizeof st, 0);
    be->download(be, got, ds, sizeof st);
    CHECK(!memcmp(got, st, sizeof st));
    be->free(be, x);
    be->free(be, y);
    be->free(be, ds);
    free(h);
    free(g);
    d->finalize(d);
    return tu_finish("gpu_test_dist_nccl");
}
