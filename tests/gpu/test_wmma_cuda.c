/* The tensor-core path (kernels/wmma_probe.cu): bf16 WMMA products as flash
 * attention uses them, S = Q K^T and O = bf16(S) V through shared memory,
 * against a host reference.  On a GPU it checks the hardware and the WMMA
 * calls; under the CUDA emulation it checks the emulated nvcuda::wmma
 * (tests/cuda_emu/emu_wmma.h), and the same test on the next GPU holds that
 * emulation to the hardware.  Relative error bound 1e-3 of the largest
 * element: fp32 sums in another order differ by ~1e-6, a wrong layout,
 * transpose or stride by O(1).  Skips (77) without a device; fails on a
 * device without bf16 WMMA (sm_80), where ll's tensor-core kernels cannot run. */
#include <stdio.h>

#include "ll/backend.h"
#include "../util/testutil.h"

double ll_cuda_wmma_selftest(char *msg, size_t msg_size); /* kernels/wmma_probe.cu */

int main(void) {
    if (ll_cuda_device_count() == 0) {
        printf("no CUDA device: skipping\n");
        return 77;
    }
    char msg[256] = "";
    const double err = ll_cuda_wmma_selftest(msg, sizeof msg);
    printf("wmma: %s\n", msg);
    CHECK_MSG(err >= 0, "the WMMA probe did not run: %s", msg);
    CHECK_MSG(err < 1e-3, "WMMA products off by %.3g (relative to the largest element): %s", err, msg);
    return tu_finish("gpu_test_wmma_cuda");
}
