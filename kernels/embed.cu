/* Token embedding with positions (forward) and its deterministic gradient.
 *
 * Forward: one thread per output element, out[r, c] = scale * emb[tok[r], c] +
 * pos[r % T + pos_offset, c], 0 for pad rows (cpu_embed_fwd).  out and emb (the
 * weight copy) are in the activation dtype; the sinusoids pos stay fp32, as in
 * the op table (the bf16 CPU backend reads them in fp32 too).
 *
 * Backward, deterministic without float atomics (a resumed run must repeat
 * the bits): the op gets no vocabulary size, so instead of bucketing by token
 * the rows are sorted by token with CUB's stable radix sort (keys = token,
 * values = row index; stable, so each token's rows stay in ascending order).
 * Then one block per position of the sorted list: a block whose position
 * starts a run of equal tokens adds that run's rows, in ascending row order,
 * to demb[token]; every other block exits at once.  The order of additions per
 * embedding element is the CPU's (rows ascending), so the result is also the
 * CPU's up to FMA contraction.  A very frequent token is summed by one block
 * (its rows in sequence, 8 rows' loads in flight); fine at NMT batch sizes, the thing
 * to split (with a fixed-order second stage) if profiles say so. */
#include <cub/device/device_radix_sort.cuh>

#include "ll_cuda_common.cuh"

#define EMB_THREADS 256

template <typename T>
static __global__ void embed_fwd_kernel(T *__restrict__ out, const int32_t *__restrict__ tok, const T *__restrict__ emb,
                                        const float *__restrict__ pos, int pos_offset, const int *__restrict__ pos_at,
                                        float scale, int N, int T_, int C, int pad) {
    LL_PDL_ENTER();
    const size_t total = (size_t)N * C;
    if (pos_at) pos_offset += *pos_at;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int r = (int)(i / (size_t)C), c = (int)(i % (size_t)C);
        const int t = tok[r];
        if (t == pad) {
            ll_st(out + i, 0.0f);
            continue;
        }
        const float e = ll_ld(emb + (size_t)t * C + c);
        const float p = pos[(size_t)(r % T_ + pos_offset) * C + c];
        ll_st(out + i, scale * e + p);
    }
}

extern "C" cudaError_t ll_cuda_embed_fwd(cudaStream_t s, ll_cuda_dtype t, void *out, const int32_t *tok,
                                         const void *emb, const float *pos, int pos_offset, const int *pos_at,
                                         float scale, int N, int T, int C, int pad) {
    if (N <= 0 || C <= 0) return cudaSuccess;
    if (T <= 0) return cudaErrorInvalidValue;
    LL_DISPATCH(t, E, LL_LAUNCH(ll_grid((size_t)N * C, EMB_THREADS), EMB_THREADS, 0, s, embed_fwd_kernel<E>)(
                          (E *)out, tok, (const E *)emb, pos, pos_offset, pos_at, scale, N, T, C, pad);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}

/* ---- backward ------------------------------------------------------------------------- */

static __global__ void iota_kernel(int *__restrict__ v, int n) {
    LL_PDL_ENTER();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v[i] = i;
}

/* Block b: if sorted position b starts a run of token t (t != pad), add the
 * run's rows to demb[t].  Threads over columns; the rows are read in order. */
template <typename T>
static __global__ void embed_bwd_runs(float *__restrict__ demb, const T *__restrict__ dout,
                                      const uint32_t *__restrict__ keys, const int *__restrict__ rows, float scale,
                                      int N, int C, int pad) {
    LL_PDL_ENTER();
    const int b = blockIdx.x;
    const uint32_t t = keys[b];
    if ((int32_t)t == pad || (b > 0 && keys[b - 1] == t)) return;
    int e = b + 1;
    while (e < N && keys[e] == t) e++; /* the run is [b, e); every thread finds the same e */
    float *d = demb + (size_t)(int32_t)t * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = d[c];
        /* unrolled: 8 rows' loads in flight at once (the adds stay in row order) */
#pragma unroll 8
        for (int i = b; i < e; i++) acc += scale * ll_ld(dout + (size_t)rows[i] * C + c);
        d[c] = acc;
    }
}

/* Scratch layout (256-byte aligned pieces): keys_out [N] u32, rows_in [N] int,
 * rows_out [N] int, then CUB's temporary storage. */
static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

static size_t cub_temp_bytes(int N) {
    size_t temp = 0;
    /* size query only: CUB computes it on the host without launching anything */
    cub::DeviceRadixSort::SortPairs(NULL, temp, (const uint32_t *)NULL, (uint32_t *)NULL, (const int *)NULL,
                                    (int *)NULL, N, 0, 32);
    return temp;
}

extern "C" size_t ll_cuda_embed_bwd_scratch_bytes(int N) {
    if (N <= 0) return 0;
    return 3 * align256((size_t)N * 4) + align256(cub_temp_bytes(N));
}

extern "C" cudaError_t ll_cuda_embed_bwd(cudaStream_t s, ll_cuda_dtype t, float *demb, const void *dout,
                                         const int32_t *tok, float scale, int N, int C, int pad, void *scratch,
                                         size_t scratch_bytes) {
    if (N <= 0 || C <= 0) return cudaSuccess;
    if (!scratch || scratch_bytes < ll_cuda_embed_bwd_scratch_bytes(N)) return cudaErrorInvalidValue;
    char *p = (char *)scratch;
    uint32_t *keys_out = (uint32_t *)p;
    p += align256((size_t)N * 4);
    int *rows_in = (int *)p;
    p += align256((size_t)N * 4);
    int *rows_out = (int *)p;
    p += align256((size_t)N * 4);
    size_t temp = cub_temp_bytes(N);

    LL_LAUNCH(ll_grid((size_t)N, EMB_THREADS), EMB_THREADS, 0, s, iota_kernel)(rows_in, N);
    LL_CHECK_LAUNCH();
    /* tokens as unsigned keys: any fixed order of the runs works, only the
     * order of rows inside a run matters, and the sort is stable */
    cudaError_t e = cub::DeviceRadixSort::SortPairs(p, temp, (const uint32_t *)tok, keys_out, rows_in, rows_out, N, 0,
                                                    32, s);
    if (e != cudaSuccess) return e;
    LL_CHECK_LAUNCH();
    LL_DISPATCH(t, E, LL_LAUNCH((unsigned)N, EMB_THREADS, 0, s, embed_bwd_runs<E>)(demb, (const E *)dout, keys_out, rows_out,
                                                                            scale, N, C, pad);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}
