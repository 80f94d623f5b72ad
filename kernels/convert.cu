/* ll_backend.convert on device buffers: dst[i] = src[i] between fp32, bf16 and
 * fp64.  Every value passes through fp32, which is cpu_convert's arithmetic
 * (fp64 -> bf16 rounds to fp32 first there too), so the bits match the CPU:
 * widening is exact and narrowing to bf16 rounds to nearest even
 * (__float2bfloat16_rn).  NaN stays NaN (the payload may differ from the CPU's). */
#include "ll_cuda_common.cuh"

#define CV_THREADS 256

static __device__ __forceinline__ float cv_ld(const double *p) { return (float)*p; }
static __device__ __forceinline__ float cv_ld(const float *p) { return *p; }
static __device__ __forceinline__ float cv_ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
static __device__ __forceinline__ void cv_st(double *p, float v) { *p = (double)v; }
static __device__ __forceinline__ void cv_st(float *p, float v) { *p = v; }
static __device__ __forceinline__ void cv_st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

template <typename D, typename S>
static __global__ void convert_kernel(D *__restrict__ dst, const S *__restrict__ src, size_t n) {
    LL_PDL_ENTER();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        cv_st(dst + i, cv_ld(src + i));
}

template <typename D, typename S> static cudaError_t convert_as(cudaStream_t s, void *dst, const void *src, size_t n) {
    LL_LAUNCH(ll_grid(n, CV_THREADS), CV_THREADS, 0, s, convert_kernel<D, S>)((D *)dst, (const S *)src, n);
    return cudaGetLastError();
}

template <typename D> static cudaError_t convert_to(cudaStream_t s, void *dst, const void *src, ll_dtype st, size_t n) {
    switch (st) {
    case LL_F32: return convert_as<D, float>(s, dst, src, n);
    case LL_BF16: return convert_as<D, __nv_bfloat16>(s, dst, src, n);
    case LL_F64: return convert_as<D, double>(s, dst, src, n);
    }
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t ll_cuda_convert(cudaStream_t s, void *dst, ll_dtype dt, const void *src, ll_dtype st,
                                       size_t n) {
    if (n == 0) return cudaSuccess;
    if (dt == st) /* a copy; the op allows dst == src */
        return dst == src ? cudaSuccess
                          : cudaMemcpyAsync(dst, src, n * ll_dtype_bytes(dt), cudaMemcpyDeviceToDevice, s);
    switch (dt) {
    case LL_F32: return convert_to<float>(s, dst, src, st, n);
    case LL_BF16: return convert_to<__nv_bfloat16>(s, dst, src, st, n);
    case LL_F64: return convert_to<double>(s, dst, src, st, n);
    }
    return cudaErrorInvalidValue;
}
