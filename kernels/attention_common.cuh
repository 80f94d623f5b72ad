/* What the attention kernels share (kernels/attention.cu: the fp32-math SIMT
 * kernels, every dtype; kernels/attention_tc*.cu: the bf16 forward on tensor
 * cores): the launch arguments, the masks and the dropout bits. */
#ifndef LL_ATTENTION_COMMON_CUH
#define LL_ATTENTION_COMMON_CUH

#include "ll_cuda_common.cuh"
#include "philox.cuh"

#define WARP 32
#define WARPS 4
#define MAX_SLOTS 4 /* head dims per lane: Dh <= 128 */
#define FWD_ROWS_PER_WARP 4
#define DQ_ROWS_PER_WARP 2
#define DKV_KEYS_PER_WARP 2
#define MAX_GRID_Z 65535 /* CUDA's limit on gridDim.z: larger batches launch in slices */

/* q, k, v (and out, dout, dq, dk, dv) are of the kernels' element type T
 * (fp32 or bf16: loaded into fp32 shared memory, fp32 math); lse is fp32. */
struct attn_args {
    const void *q, *k, *v;
    int q_stride, kv_stride;
    const int *key_len; /* device, [B]; NULL: all keys */
    int B, Tq, Tk, H, Dh, causal;
    int b0;          /* first batch entry of this launch: b = b0 + blockIdx.z (gridDim.z <= 65535) */
    float scale;     /* 1 / sqrt(Dh) */
    float keep_scale; /* 1 / (1 - p) */
    uint32_t thr;    /* keep iff half-word >= thr */
    int drop;        /* p > 0 (as the CPU): thr may round to 0 for tiny p, keep_scale still applies */
    ll_philox rng;
    uint64_t rng_offset;
};

static __device__ __forceinline__ float warp_sum(float v) { return ll_warp_sum(v); }
static __device__ __forceinline__ float warp_max(float v) { return ll_warp_max(v); }

static __device__ __forceinline__ int key_limit(const attn_args &a, int b) {
    int n = a.key_len ? a.key_len[b] : a.Tk;
    return n < a.Tk ? (n > 0 ? n : 0) : a.Tk;
}
/* keys query i sees: 0..n-1 (the CPU's row_limit) */
static __device__ __forceinline__ int row_limit(const attn_args &a, int lim, int i) {
    const int c = i + (a.Tk - a.Tq) + 1;
    if (a.causal && c < lim) return c > 0 ? c : 0;
    return lim;
}
/* The dropout rule of dropout_fwd: half-word e of the stream, bits 16*(e&1).. of word e>>1. */
static __device__ __forceinline__ bool keep_bit(const attn_args &a, int b, int h, int i, int j) {
    const uint64_t e = a.rng_offset + (((uint64_t)b * a.H + h) * a.Tq + i) * a.Tk + j;
    const uint32_t w = ll_philox_u32_dev(a.rng, e >> 1);
    return ((w >> (16 * (unsigned)(e & 1))) & 0xffffu) >= a.thr;
}

/* The dk/dv kernels' per-query statistics of a tile of queries it..it+rows-1 (rows past Tq:
 * D 0, L 0, no visible key): D_i = rowsum(dO_i o O_i), lse_i and the row limit, into sD, sL,
 * sN; warp w of W takes rows w, w + W, ...  gb: dout of (b, h), rows of stride H*Dh. */
template <typename T>
static __device__ __forceinline__ void query_tile_stats(const attn_args &a, int b, int h, int lim, int it, int rows,
                                                        const T *gb, const T *out, const float *lse, float *sD,
                                                        float *sL, int *sN, int warp, int W, int lane) {
    const int C = a.H * a.Dh;
    for (int ii = warp; ii < rows; ii += W) {
        const int i = it + ii;
        float t = 0.0f;
        if (i < a.Tq) {
            const T *orow = out + ((size_t)b * a.Tq + i) * C + h * a.Dh;
            for (int d = lane; d < a.Dh; d += WARP) t += ll_ld(gb + (size_t)i * C + d) * ll_ld(orow + d);
        }
        t = warp_sum(t);
        if (lane == 0) {
            sD[ii] = t;
            sL[ii] = i < a.Tq ? lse[((size_t)b * a.H + h) * a.Tq + i] : 0.0f;
            sN[ii] = i < a.Tq ? row_limit(a, lim, i) : 0;
        }
    }
}

/* keep_bit for runs of consecutive elements (one row's keys): the 8 half-words
 * of a Philox block serve 8 elements, so a run of n elements computes about
 * n / 8 blocks instead of n. */
struct attn_keep_cache {
    uint64_t block = ~(uint64_t)0;
    uint32_t w[4] = {0, 0, 0, 0}; /* (set before the first use: block starts at no block) */
    __device__ __forceinline__ bool keep(const attn_args &a, int b, int h, int i, int j) {
        const uint64_t e = a.rng_offset + (((uint64_t)b * a.H + h) * a.Tq + i) * a.Tk + j;
        if (e >> 3 != block) ll_philox_block_dev(a.rng, block = e >> 3, w);
        /* w picked by constant indices: an array indexed at run time would live in local memory */
        const unsigned k = (unsigned)(e >> 1) & 3u;
        const uint32_t x = k == 0 ? w[0] : k == 1 ? w[1] : k == 2 ? w[2] : w[3];
        return ((x >> (16 * (unsigned)(e & 1))) & 0xffffu) >= a.thr;
    }
};

/* The bf16 kernels on tensor cores (kernels/attention_tc*.cu): whether they
 * take a call of head size Dh, and their launchers (a's b0 is their own). */
bool ll_attention_tc_takes(int Dh);
cudaError_t ll_attention_fwd_tc(cudaStream_t stream, attn_args a, __nv_bfloat16 *out, float *lse);
cudaError_t ll_attention_bwd_tc(cudaStream_t stream, attn_args a, __nv_bfloat16 *dq, __nv_bfloat16 *dk,
                                __nv_bfloat16 *dv, const __nv_bfloat16 *dout, const __nv_bfloat16 *out,
                                const float *lse);

#endif
