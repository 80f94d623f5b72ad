/* Philox fill kernels: the device stream laid out in memory, so tests can check
 * it against the CPU's ll_philox_u32 / ll_philox_uniform bit for bit. */
#include "ll_cuda_common.cuh"
#include "philox.cuh"

/* One thread per Philox block (4 words); element j of out is word offset + j. */
template <typename T, bool UNIFORM>
static __global__ void philox_fill_kernel(T *out, size_t n, ll_philox r, uint64_t offset) {
    LL_PDL_ENTER();
    uint64_t first_block = offset >> 2;
    uint64_t blk = first_block + (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t end = offset + n; /* one past the last stream element */
    uint64_t e0 = blk << 2;    /* stream element of word 0 of this block */
    if (e0 >= end) return;
    uint32_t w[4];
    ll_philox_block_dev(r, blk, w);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint64_t e = e0 + k;
        if (e < offset || e >= end) continue;
        if (UNIFORM)
            out[e - offset] = (T)ll_philox_word_to_uniform_dev(w[k]);
        else
            out[e - offset] = (T)w[k];
    }
}

template <typename T, bool UNIFORM>
static cudaError_t philox_fill(cudaStream_t stream, T *out, size_t n, ll_philox r, uint64_t offset) {
    if (n == 0) return cudaSuccess;
    uint64_t nblocks = ((offset + n - 1) >> 2) - (offset >> 2) + 1;
    const int threads = 256;
    uint64_t grid = (nblocks + threads - 1) / threads;
    if (grid > 0x7fffffffu) return cudaErrorInvalidValue;
    LL_LAUNCH((unsigned)grid, threads, 0, stream, philox_fill_kernel<T, UNIFORM>)(out, n, r, offset);
    return cudaGetLastError();
}

extern "C" cudaError_t ll_cuda_launch_philox_u32(cudaStream_t stream, uint32_t *out, size_t n, ll_philox r,
                                                 uint64_t offset) {
    return philox_fill<uint32_t, false>(stream, out, n, r, offset);
}

extern "C" cudaError_t ll_cuda_launch_philox_uniform(cudaStream_t stream, float *out, size_t n, ll_philox r,
                                                     uint64_t offset) {
    return philox_fill<float, true>(stream, out, n, r, offset);
}
