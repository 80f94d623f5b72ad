/* CUDA backend smoke test: device discovery, construction errors, zeroed
 * alloc, upload/download round trip, memset0, and that the ops not written
 * yet are reported by ll_backend_missing().  Skips (77) without a device,
 * after checking that ll_backend_cuda() then fails cleanly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "../util/testutil.h"

int main(void) {
    int n = ll_cuda_device_count();
    CHECK(n >= 0);
    if (n == 0) {
        /* without a device the constructor fails with a message, not a crash */
        ll_backend *be = ll_backend_cuda(0);
        CHECK(be == NULL);
        CHECK(ll_errbuf()[0] != '\0');
        if (tu_failures) return tu_finish("gpu_test_gpu_smoke");
        printf("no CUDA device: skipping\n");
        return 77;
    }

    CHECK(ll_backend_cuda(-1) == NULL);
    CHECK(ll_backend_cuda(n) == NULL);
    CHECK_CONTAINS(ll_errbuf(), "does not exist");

    ll_backend *be = ll_backend_cuda(0);
    CHECK_MSG(be != NULL, "ll_backend_cuda(0): %s", ll_errbuf());
    if (!be) return tu_finish("gpu_test_gpu_smoke");
    CHECK(ll_backend_cuda(0) == be); /* one backend per device */
    CHECK(!strcmp(be->name, "cuda"));
    const char *missing = ll_backend_missing(be);
    printf("cuda backend: %d device(s); first missing op: %s\n", n, missing ? missing : "(none)");

    const size_t count = (1u << 20) + 3;
    uint32_t *h = malloc(count * sizeof *h), *back = malloc(count * sizeof *back);
    uint32_t *d = be->alloc(be, count * sizeof *d);
    CHECK(d != NULL);

    /* alloc returns zeroed memory */
    memset(back, 0xAB, count * sizeof *back);
    be->download(be, back, d, count * sizeof *d);
    size_t nonzero = 0;
    for (size_t i = 0; i < count; i++) nonzero += back[i] != 0;
    CHECK_MSG(nonzero == 0, "%zu words of a fresh allocation are not zero", nonzero);

    /* round trip */
    for (size_t i = 0; i < count; i++) h[i] = (uint32_t)(i * 2654435761u);
    be->upload(be, d, h, count * sizeof *h);
    memset(back, 0, count * sizeof *back);
    be->download(be, back, d, count * sizeof *d);
    CHECK(!memcmp(h, back, count * sizeof *h));

    /* memset0 of a middle range, ordered on the stream before the download */
    be->memset0(be, d + 100, 1000 * sizeof *d);
    be->sync(be);
    be->download(be, back, d, count * sizeof *d);
    int ok = 1;
    for (size_t i = 0; i < count; i++) ok &= back[i] == ((i >= 100 && i < 1100) ? 0u : h[i]);
    CHECK(ok);

    /* download in two halves: the copy is ordered on the stream, so a memset queued after
     * download_start does not reach it; the copy is whole when download_finish returns */
    CHECK(be->download_start != NULL && be->download_finish != NULL);
    be->upload(be, d, h, count * sizeof *h);
    be->download_start(be, d, count * sizeof *d);
    be->memset0(be, d, count * sizeof *d);
    memset(back, 0, count * sizeof *back);
    be->download_finish(be, back, count * sizeof *d);
    CHECK(!memcmp(h, back, count * sizeof *h));
    be->download(be, back, d, sizeof *d); /* and the memset ran after it */
    CHECK(back[0] == 0);
    be->download_start(be, d, 4 * sizeof *d); /* a smaller one reuses the pinned buffer */
    be->download_finish(be, back, 4 * sizeof *d);
    CHECK(back[0] == 0 && back[3] == 0);

    be->free(be, d);
    be->free(be, NULL);
    free(h);
    free(back);
    return tu_finish("gpu_test_gpu_smoke");
}
