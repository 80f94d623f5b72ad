/* A probe of the tensor-core path (nvcuda::wmma, bf16 in, fp32 out), with its
 * own check against the host: the two products of flash attention on one
 * (sentence, head) tile, S = Q K^T (K read as a column-major B) and then
 * O = bf16(S) V with S passed between the products through shared memory (the
 * first product's tiles loaded from global memory, the second's from shared
 * memory through ll_wmma_load_shared's .shared loads).
 * ll_cuda_wmma_selftest runs it; gpu_test_wmma_cuda calls that on a GPU and on
 * the CPU emulation alike, so the emulation's WMMA (tests/cuda_emu/emu_wmma.h)
 * is held to the hardware's on the next GPU, before a kernel relies on it.
 * bf16 WMMA needs sm_80: on older devices the kernel is empty and the test
 * says so. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wmma_tile.cuh"

#define PT LL_WT /* the WMMA tile: 16 x 16 x 16 */
#define PQ 32    /* query rows: two warps, one row tile each */
#define PK 48    /* keys */
#define PD 64    /* head dimension */
#define PWARPS (PQ / PT)
#define PTHREADS 64 /* PWARPS warps */

/* q [PQ, PD], k [PK, PD], v [PK, PD] bf16 row-major; s [PQ, PK], o [PQ, PD] fp32 */
static __global__ void __launch_bounds__(PTHREADS)
    wmma_probe_kernel(const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v, float *s, float *o,
                      int *ran) {
    LL_PDL_ENTER();
#ifdef LL_WMMA_BF16
    using namespace nvcuda;
    __shared__ __align__(32) float ss[PQ][PK]; /* WMMA pointers: 256-bit aligned */
    __shared__ __align__(32) __nv_bfloat16 sp[PQ][PK];
    __shared__ __align__(32) __nv_bfloat16 sv[PK][PD]; /* V for the second product's .shared loads */
    for (int i = (int)threadIdx.x; i < PK * PD; i += PTHREADS) sv[i / PD][i % PD] = v[i];
    const int w = (int)(threadIdx.x / 32), lane = (int)(threadIdx.x % 32);
    const int r0 = w * PT;
    /* S[r0.., j..] = sum over d of Q[r0.., d..] K[j.., d..]^T */
    for (int j = 0; j < PK; j += PT) {
        ll_wmma_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        /* K^T: K's rows are B's columns */
        ll_wmma_tile_product<wmma::col_major>(acc, q + (size_t)r0 * PD, PD, k + (size_t)j * PD, PD, 1, PD);
        for (int i = 0; i < acc.num_elements; i++) acc.x[i] *= 0.125f; /* the same op on every element */
        wmma::store_matrix_sync(&ss[r0][j], acc, PK, wmma::mem_row_major);
    }
    __syncwarp(); /* the warp's stores before its loads of each other's elements */
    for (int i = lane; i < PT * PK; i += 32) {
        const int r = r0 + i / PK, c = i % PK;
        s[(size_t)r * PK + c] = ss[r][c];
        sp[r][c] = __float2bfloat16_rn(ss[r][c]);
    }
    __syncthreads(); /* the warp's sp rows, and every thread's part of sv */
    /* O[r0.., e..] = sum over j of bf16(S)[r0.., j..] V[j.., e..], both tiles from shared memory
     * (ll_wmma_load_shared, as the attention kernels load theirs; the first product's are global) */
    for (int e = 0; e < PD; e += PT) {
        ll_wmma_acc acc;
        wmma::fill_fragment(acc, 0.0f);
        ll_wmma_tile_product<wmma::row_major, true>(acc, &sp[r0][0], PK, &sv[0][0] + e, PD, PD, PK);
        wmma::store_matrix_sync(o + (size_t)r0 * PD + e, acc, PD, wmma::mem_row_major);
    }
    if (threadIdx.x == 0) *ran = 1;
#else
    (void)q, (void)k, (void)v, (void)s, (void)o, (void)ran;
#endif
}

static float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

/* Runs the probe on device 0 against a host reference (the same bf16 inputs,
 * double sums, S rounded to bf16 between the products as the kernel does).
 * Returns the larger of the two relative errors (max |diff| / max |ref|), or
 * -1 with msg set: no sm_80 device (the kernel did nothing) or a CUDA error. */
extern "C" double ll_cuda_wmma_selftest(char *msg, size_t msg_size) {
    const size_t nq = (size_t)PQ * PD, nk = (size_t)PK * PD, ns = (size_t)PQ * PK;
    __nv_bfloat16 *h = (__nv_bfloat16 *)malloc(sizeof(__nv_bfloat16) * (nq + 2 * nk));
    float *hs = (float *)malloc(sizeof(float) * (ns + nq));
    uint32_t x = 12345u;
    for (size_t i = 0; i < nq + 2 * nk; i++) { /* uniform in [-1, 1), a fixed LCG: the same inputs everywhere */
        x = x * 1664525u + 1013904223u;
        h[i] = __float2bfloat16_rn((float)(x >> 8) / 8388608.0f - 1.0f);
    }
    void *d = NULL;
    double err = -1;
    const size_t in_bytes = sizeof(__nv_bfloat16) * (nq + 2 * nk), out_bytes = sizeof(float) * (ns + nq);
    cudaError_t e = cudaMalloc(&d, in_bytes + out_bytes + sizeof(int));
    if (e == cudaSuccess) e = cudaMemcpy(d, h, in_bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemset((char *)d + in_bytes + out_bytes, 0, sizeof(int));
    const __nv_bfloat16 *dq = (const __nv_bfloat16 *)d, *dk = dq + nq, *dv = dk + nk;
    float *dso = (float *)((char *)d + in_bytes);
    int *dran = (int *)((char *)d + in_bytes + out_bytes), ran = 0;
    if (e == cudaSuccess) {
        LL_LAUNCH(1, PTHREADS, 0, 0, wmma_probe_kernel)(dq, dk, dv, dso, dso + ns, dran);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(hs, dso, out_bytes, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) e = cudaMemcpy(&ran, dran, sizeof ran, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        snprintf(msg, msg_size, "CUDA error: %s", cudaGetErrorString(e));
    } else if (!ran) {
        snprintf(msg, msg_size, "no bf16 WMMA on this device (sm_80 or later): the probe did not run");
    } else {
        double es = 0, ms = 0, eo = 0, mo = 0;
        float *sp = (float *)malloc(sizeof(float) * ns);
        for (int i = 0; i < PQ; i++)
            for (int j = 0; j < PK; j++) {
                double t = 0;
                for (int c = 0; c < PD; c++)
                    t += (double)__bfloat162float(h[(size_t)i * PD + c]) * __bfloat162float(h[nq + (size_t)j * PD + c]);
                t *= 0.125;
                es = fmax(es, fabs(hs[(size_t)i * PK + j] - t));
                ms = fmax(ms, fabs(t));
                sp[(size_t)i * PK + j] = bf16_round(hs[(size_t)i * PK + j]); /* the kernel's own S, rounded */
            }
        for (int i = 0; i < PQ; i++)
            for (int c = 0; c < PD; c++) {
                double t = 0;
                for (int j = 0; j < PK; j++)
                    t += (double)sp[(size_t)i * PK + j] * __bfloat162float(h[nq + nk + (size_t)j * PD + c]);
                eo = fmax(eo, fabs(hs[ns + (size_t)i * PD + c] - t));
                mo = fmax(mo, fabs(t));
            }
        free(sp);
        err = fmax(es / (ms > 0 ? ms : 1), eo / (mo > 0 ? mo : 1));
        snprintf(msg, msg_size, "S = Q K^T / 8 (%dx%dx%d): error %.3g; O = bf16(S) V (%dx%dx%d): error %.3g", PQ, PK,
                 PD, es / (ms > 0 ? ms : 1), PQ, PD, PK, eo / (mo > 0 ? mo : 1));
    }
    if (d) cudaFree(d);
    free(h), free(hs);
    return err;
}
