/* The condition of a conditional node of a captured step (CUDA 12.4+; ll uses
 * IF with an else body, 12.8+): one thread reads a run flag the host uploaded
 * with the batch and sets the node's handle, so a kept graph decides at each
 * launch which of its two bodies runs (LayerDrop, cross-attention drop). */
#include "ll_cuda_common.cuh"

static __global__ void __launch_bounds__(32) cond_set_kernel(cudaGraphConditionalHandle h, const uint8_t *run) {
    LL_PDL_ENTER();
    if (threadIdx.x == 0) cudaGraphSetConditional(h, *run ? 1u : 0u);
}

extern "C" cudaError_t ll_cuda_launch_cond_set(cudaStream_t stream, cudaGraphConditionalHandle h,
                                               const uint8_t *run) {
    LL_LAUNCH(1, 32, 0, stream, cond_set_kernel)(h, run);
    return cudaGetLastError();
}
