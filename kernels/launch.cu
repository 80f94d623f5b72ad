/* Whether LL_LAUNCH asks for programmatic dependent launch (kernels/ll_cuda_common.cuh): on a
 * device of compute capability 9.0 or later (Hopper), unless LL_CUDA_PDL=0 is in the environment
 * (A/B timing on a GPU; the launches of before) or a test switched it off. */
#include "ll_cuda_common.cuh"

#define PDL_DEVICES 16
static int pdl_mode = -1;       /* -1: not read yet; 0 off; 1 where the device allows */
static int pdl_cc[PDL_DEVICES]; /* 1 + (major >= 9) per device; 0: not asked yet */

extern "C" int ll_cuda_pdl(int on) {
    const int was = ll_env_switch_once(&pdl_mode, "LL_CUDA_PDL", "0");
    __atomic_store_n(&pdl_mode, on ? 1 : 0, __ATOMIC_RELAXED);
    return was;
}

extern "C" int ll_cuda_pdl_launch(void) {
    if (!ll_env_switch_once(&pdl_mode, "LL_CUDA_PDL", "0")) return 0;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= PDL_DEVICES) {
        (void)cudaGetLastError();
        return 0;
    }
    int c = __atomic_load_n(&pdl_cc[dev], __ATOMIC_RELAXED);
    if (!c) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            major = 0;
        }
        c = 1 + (major >= 9);
        __atomic_store_n(&pdl_cc[dev], c, __ATOMIC_RELAXED);
    }
    return c == 2;
}

/* The start-up probe (ll_cuda.h): two launches in a row, each reading what the one before wrote */
static __global__ void __launch_bounds__(32) pdl_probe_kernel(int *v, int step) {
    LL_PDL_ENTER();
    if (threadIdx.x == 0) *v = *v * 2 + step;
}

extern "C" cudaError_t ll_cuda_pdl_probe(cudaStream_t stream, int *dev_int, int *refused) {
    *refused = 0;
    if (!ll_cuda_pdl_launch()) return cudaSuccess;
    cudaError_t e = cudaMemsetAsync(dev_int, 0, sizeof *dev_int, stream);
    if (e != cudaSuccess) return e;
    LL_LAUNCH(1, 32, 0, stream, pdl_probe_kernel)(dev_int, 1); /* 0 -> 1 */
    e = cudaGetLastError();
    if (e == cudaSuccess) {
        LL_LAUNCH(1, 32, 0, stream, pdl_probe_kernel)(dev_int, 2); /* 1 -> 4 */
        e = cudaGetLastError();
    }
    int h = -1;
    if (e == cudaSuccess) e = cudaMemcpyAsync(&h, dev_int, sizeof h, cudaMemcpyDeviceToHost, stream);
    const cudaError_t s = cudaStreamSynchronize(stream);
    if (e == cudaSuccess && s == cudaSuccess && h == 4) return cudaSuccess;
    if (s != cudaSuccess) return s; /* the device itself failed: not a refusal */
    *refused = e != cudaSuccess ? (int)e : -1;
    ll_cuda_pdl(0);
    return cudaSuccess;
}
