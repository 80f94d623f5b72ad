/* Incremental-decoding kernels: the reorder of KV-cache rows (compaction),
 * the rows' ancestry tables, self-attention through them, and the beam
 * search's top-k over the vocabulary (contracts: include/ll/backend.h,
 * copy_rows / reorder_rows / beam_ancestry / attention_cached / beam_topk / attn_align;
 * the CPU references are src/backend/cpu/cpu_decode.c and cpu_attention.c).  copy_rows is one
 * cudaMemcpy2DAsync (src/backend/cuda/cuda_ops_decode.c) unless its destination
 * offset is read on the device (a decoding step in a CUDA graph): then a kernel.
 *
 * beam_topk: one block per sentence.  Each thread scans a strided share of the
 * sentence's beam x V candidates in increasing (row, token) order and keeps
 * its own sorted top k; then k rounds of a block-wide arg-max over the
 * threads' heads, ranked by (score desc, flat index asc), pop the winners in
 * order.  The result is exactly the CPU's stable top-k (ties to the lower
 * index), with no atomics.  The log-probabilities are fp32 or bf16 (template
 * T, the activation dtype); scores are double and lp fp32 in both, so a bf16
 * model ranks the widened bf16 values exactly as the CPU's bf16 backend. */
#include <limits.h>
#include <math.h>

#include "col_sum.cuh" /* (ll_ld16: 16-byte loads) */
#include "ll_cuda_common.cuh"

/* a top-k group's block: 1024 threads, since a group is one block (ll_decode_bench's 128 sentences
 * fill 128 of an H200's 132 SMs; 30 registers a thread) */
#define TOPK_THREADS 1024
#define WARP 32

/* ---- reorder_rows ---------------------------------------------------------------- */

/* Moved rows only: pass 0 gathers the sources into scratch, pass 1 writes them back,
 * so a row overwritten early is still read correctly.  In bytes: any dtype. */
static __global__ void reorder_pass(unsigned char *__restrict__ buf, unsigned char *__restrict__ scratch,
                                    const int *__restrict__ from, int rows, size_t n, size_t stride, int pass) {
    LL_PDL_ENTER();
    for (int r = blockIdx.y; r < rows; r += gridDim.y) { /* (rows beyond grid.y's 65,535 too) */
        const int f = from[r];
        if (f == r) continue;
        for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (size_t)gridDim.x * blockDim.x) {
            if (pass == 0)
                scratch[(size_t)r * n + j] = buf[(size_t)f * stride + j];
            else
                buf[(size_t)r * stride + j] = scratch[(size_t)r * n + j];
        }
    }
}

extern "C" cudaError_t ll_cuda_reorder_rows(cudaStream_t stream, void *buf, void *scratch, const int *from, int rows,
                                            size_t n, size_t stride) {
    if (rows <= 0 || n == 0) return cudaSuccess;
    const int threads = n < 256 ? 32 * (int)((n + 31) / 32) : 256; /* (short rows: no idle warps) */
    size_t bx = (n + threads - 1) / threads;
    dim3 grid((unsigned)(bx < 64 ? bx : 64), (unsigned)(rows < 65535 ? rows : 65535));
    for (int pass = 0; pass < 2; pass++) {
        LL_LAUNCH(grid, threads, 0, stream, reorder_pass)((unsigned char *)buf, (unsigned char *)scratch, from, rows, n,
                                                      stride, pass);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* ---- copy_rows at a device offset -------------------------------------------------- */

/* words of W bytes (every size and address a multiple of W) */
template <typename W>
static __global__ void copy_rows_at_kernel(unsigned char *__restrict__ dst, size_t dst_stride,
                                           const unsigned char *__restrict__ src, size_t src_stride, size_t n,
                                           int rows, const int *__restrict__ at, size_t at_stride) {
    LL_PDL_ENTER();
    for (int r = blockIdx.y; r < rows; r += gridDim.y) { /* (rows beyond grid.y's 65,535 too) */
        W *d = (W *)(dst + (size_t)*at * at_stride + (size_t)r * dst_stride);
        const W *s = (const W *)(src + (size_t)r * src_stride);
        for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n / sizeof(W);
             j += (size_t)gridDim.x * blockDim.x)
            d[j] = s[j];
    }
}

extern "C" cudaError_t ll_cuda_copy_rows_at(cudaStream_t stream, void *dst, size_t dst_stride, const void *src,
                                            size_t src_stride, int rows, size_t n, const int *at, size_t at_stride) {
    if (rows <= 0 || n == 0) return cudaSuccess;
    const size_t all = (size_t)dst | (size_t)src | dst_stride | src_stride | n | at_stride;
    const size_t w = all % 4 == 0 ? 4 : 1, bx = (n / w + 255) / 256;
    dim3 grid((unsigned)(bx < 64 ? bx : 64), (unsigned)(rows < 65535 ? rows : 65535));
    if (w == 4)
        LL_LAUNCH(grid, 256, 0, stream, copy_rows_at_kernel<uint32_t>)((unsigned char *)dst, dst_stride,
                                                                       (const unsigned char *)src, src_stride, n, rows,
                                                                       at, at_stride);
    else
        LL_LAUNCH(grid, 256, 0, stream, copy_rows_at_kernel<unsigned char>)((unsigned char *)dst, dst_stride,
                                                                            (const unsigned char *)src, src_stride, n,
                                                                            rows, at, at_stride);
    return cudaGetLastError();
}

/* ---- beam_ancestry ---------------------------------------------------------------- */

/* pass 0: scratch[r] = anc[from[r]] + shift; pass 1: back, then entry t = r */
static __global__ void ancestry_pass(int *__restrict__ anc, int *__restrict__ scratch, const int *__restrict__ from,
                                     int rows, int t, const int *__restrict__ t_at, int stride, int group, int pass) {
    LL_PDL_ENTER();
    const int r = blockIdx.x;
    if (t_at) t += *t_at;
    if (from) {
        const int f = from[r], shift = (r / group - f / group) * group;
        for (int j = threadIdx.x; j < t; j += blockDim.x) {
            if (pass == 0)
                scratch[(size_t)r * t + j] = anc[(size_t)f * stride + j] + shift;
            else
                anc[(size_t)r * stride + j] = scratch[(size_t)r * t + j];
        }
    }
    if (pass == 1 && threadIdx.x == 0 && t < stride) anc[(size_t)r * stride + t] = r;
}

extern "C" cudaError_t ll_cuda_beam_ancestry(cudaStream_t stream, int *anc, int *scratch, const int *from, int rows,
                                             int t, const int *t_at, int stride, int group) {
    if (rows <= 0) return cudaSuccess;
    for (int pass = from ? 0 : 1; pass < 2; pass++) {
        LL_LAUNCH(rows, 128, 0, stream, ancestry_pass)(anc, scratch, from, rows, t, t_at, stride, group, pass);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* ---- attention_cached ------------------------------------------------------------ */

/* LL_CUDA_DECODE_ATTN=serial: attention_cached_serial below (A/B timing on a GPU) */
#define CACHED_MAXD 4 /* Dh <= 128 */

/* One warp per (row, head), 32 keys at a time.  Lane j scores key j0 + j over all Dh dims (its
 * ancestry entry, then its key's 16-byte loads against the query in shared memory); an online
 * softmax over the chunks (fp32); then lane d (dims d, d+32, ...) adds p_j v_j over the chunk's
 * keys, whose loads do not wait on each other.  The serial kernel's chain per key (a dependent
 * load, a warp sum) kept beam 5 at 2.2x PyTorch on an H200 (session 30: 640 rows x 8 heads, up
 * to 32 keys).  vec: every key row 16-byte aligned, Dh a multiple of a 16-byte vector. */
template <typename T>
static __global__ void attention_cached_kernel(T *__restrict__ out, const T *__restrict__ q, int q_stride,
                                               const T *__restrict__ kv, int kv_stride, size_t row_stride,
                                               const int *__restrict__ anc, int anc_stride, int n_keys,
                                               const int *__restrict__ n_at, int H, int Dh, float scale, int vec) {
    LL_PDL_ENTER();
    constexpr int V = ll_vec16<T>::V;
    const int r = blockIdx.x, h = blockIdx.y, lane = threadIdx.x, C = H * Dh;
    if (n_at) n_keys += *n_at;
    __shared__ float sq[WARP * CACHED_MAXD];
    for (int d = lane; d < Dh; d += WARP) sq[d] = ll_ld(q + (size_t)r * q_stride + (size_t)h * Dh + d);
    __syncwarp();
    float acc[CACHED_MAXD];
#pragma unroll
    for (int i = 0; i < CACHED_MAXD; i++) acc[i] = 0.0f;
    float mx = -INFINITY, sum = 0.0f;
    for (int j0 = 0; j0 < n_keys; j0 += WARP) {
        const int j = j0 + lane, nj = min(WARP, n_keys - j0);
        const bool valid = j < n_keys;
        const int a = !valid ? 0 : anc ? anc[(size_t)r * anc_stride + j] : r;
        float s = -INFINITY;
        if (valid) {
            const T *kj = kv + (size_t)a * row_stride + (size_t)j * kv_stride + (size_t)h * Dh;
            float t = 0.0f;
            if (vec) {
                for (int d = 0; d < Dh; d += V) {
                    float f[V];
                    ll_ld16(kj + d, f);
#pragma unroll
                    for (int i = 0; i < V; i++) t += sq[d + i] * f[i];
                }
            } else {
                for (int d = 0; d < Dh; d++) t += sq[d] * ll_ld(kj + d);
            }
            s = t * scale;
        }
        float cm = s;
#pragma unroll
        for (int o = WARP / 2; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
        const float m2 = fmaxf(mx, cm), corr = __expf(mx - m2), p = valid ? __expf(s - m2) : 0.0f;
        sum = sum * corr + ll_warp_sum(p);
#pragma unroll
        for (int i = 0; i < CACHED_MAXD; i++) acc[i] *= corr;
#pragma unroll 4
        for (int jj = 0; jj < nj; jj++) {
            const float pj = __shfl_sync(0xffffffffu, p, jj);
            const int aj = __shfl_sync(0xffffffffu, a, jj);
            const T *vj = kv + (size_t)aj * row_stride + (size_t)(j0 + jj) * kv_stride + (size_t)h * Dh + C;
#pragma unroll
            for (int i = 0; i < CACHED_MAXD; i++) {
                const int d = lane + WARP * i;
                if (d < Dh) acc[i] += pj * ll_ld(vj + d);
            }
        }
        mx = m2;
    }
    const float inv = n_keys > 0 ? 1.0f / sum : 0.0f;
    for (int i = 0; i < CACHED_MAXD; i++) {
        const int d = lane + WARP * i;
        if (d < Dh) ll_st(out + (size_t)r * C + (size_t)h * Dh + d, acc[i] * inv);
    }
}

/* The kernel before (LL_CUDA_DECODE_ATTN=serial): one warp per (row, head), lane d holds dims d,
 * d+32, ... of the query and the output; keys in order with an online softmax (fp32), one warp
 * sum per key. */
template <typename T>
static __global__ void attention_cached_serial(T *__restrict__ out, const T *__restrict__ q, int q_stride,
                                               const T *__restrict__ kv, int kv_stride, size_t row_stride,
                                               const int *__restrict__ anc, int anc_stride, int n_keys,
                                               const int *__restrict__ n_at, int H, int Dh, float scale) {
    LL_PDL_ENTER();
    const int r = blockIdx.x, h = blockIdx.y, lane = threadIdx.x, C = H * Dh;
    if (n_at) n_keys += *n_at;
    float qv[CACHED_MAXD], acc[CACHED_MAXD];
    for (int i = 0; i < CACHED_MAXD; i++) {
        const int d = lane + WARP * i;
        qv[i] = d < Dh ? ll_ld(q + (size_t)r * q_stride + (size_t)h * Dh + d) : 0.0f;
        acc[i] = 0.0f;
    }
    float mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j < n_keys; j++) {
        const size_t a = anc ? (size_t)anc[(size_t)r * anc_stride + j] : (size_t)r;
        const T *kj = kv + a * row_stride + (size_t)j * kv_stride + (size_t)h * Dh, *vj = kj + C;
        float s = 0.0f;
        for (int i = 0; i < CACHED_MAXD; i++) {
            const int d = lane + WARP * i;
            if (d < Dh) s += qv[i] * ll_ld(kj + d);
        }
        for (int o = WARP / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        s *= scale;
        const float m2 = fmaxf(mx, s), corr = __expf(mx - m2), p = __expf(s - m2);
        sum = sum * corr + p;
        for (int i = 0; i < CACHED_MAXD; i++) {
            const int d = lane + WARP * i;
            acc[i] = acc[i] * corr + (d < Dh ? p * ll_ld(vj + d) : 0.0f);
        }
        mx = m2;
    }
    const float inv = n_keys > 0 ? 1.0f / sum : 0.0f;
    for (int i = 0; i < CACHED_MAXD; i++) {
        const int d = lane + WARP * i;
        if (d < Dh) ll_st(out + (size_t)r * C + (size_t)h * Dh + d, acc[i] * inv);
    }
}

extern "C" cudaError_t ll_cuda_attention_cached(cudaStream_t stream, ll_cuda_dtype t, void *out, const void *q,
                                                int q_stride, const void *kv, int kv_stride, size_t row_stride,
                                                const int *anc, int anc_stride, int n_keys, const int *n_at, int rows,
                                                int H, int Dh) {
    if (rows <= 0 || H <= 0) return cudaSuccess;
    if (Dh <= 0 || Dh > WARP * CACHED_MAXD || H > 65535) return cudaErrorInvalidValue;
    dim3 grid((unsigned)rows, (unsigned)H);
    /* the scale of full attention (attention.cu) and of the CPU, computed on the
     * host: rsqrtf is an approximation under --use_fast_math */
    const float scale = 1.0f / sqrtf((float)Dh);
    static int chunked = -1;
    if (!ll_env_switch_once(&chunked, "LL_CUDA_DECODE_ATTN", "serial")) {
        LL_DISPATCH(t, T, LL_LAUNCH(grid, WARP, 0, stream, attention_cached_serial<T>)(
                              (T *)out, (const T *)q, q_stride, (const T *)kv, kv_stride, row_stride, anc, anc_stride,
                              n_keys, n_at, H, Dh, scale);)
        return cudaGetLastError();
    }
    const size_t es = t == LL_CUDA_BF16 ? 2 : 4, align = (uintptr_t)kv | row_stride * es | (size_t)kv_stride * es;
    const int vec = (size_t)Dh * es % 16 == 0 && align % 16 == 0;
    LL_DISPATCH(t, T, LL_LAUNCH(grid, WARP, 0, stream, attention_cached_kernel<T>)(
                          (T *)out, (const T *)q, q_stride, (const T *)kv, kv_stride, row_stride, anc, anc_stride,
                          n_keys, n_at, H, Dh, scale, vec);)
    return cudaGetLastError();
}

/* ---- attn_align ------------------------------------------------------------------ */

/* The first maximum of v[j], j < n - 1 (the keys before EOS; n >= 2), over a warp whose lane l
 * reads j = l, l+32, ...: each lane's first maximum, then the warp's (the higher, ties to the
 * lower key).  Every lane returns it. */
static __device__ int warp_first_max(const float *v, int n) {
    const int lane = threadIdx.x % WARP;
    int best = -1;
    float bv = -INFINITY;
    for (int j = lane; j < n - 1; j += WARP)
        if (best < 0 || v[j] > bv) best = j, bv = v[j];
#pragma unroll
    for (int o = WARP / 2; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oj = __shfl_xor_sync(0xffffffffu, best, o);
        if (oj >= 0 && (best < 0 || ov > bv || (ov == bv && oj < best))) best = oj, bv = ov;
    }
    return best;
}

/* One warp per query row (few rows, few keys: latency, not bandwidth).  Lane l owns keys
 * l, l+32, ... of the row's sentence; per head, in order: the scores into shared memory, a warp
 * max and sum, each lane adding its keys' probabilities into its own slots of the head sum (no
 * atomics: the same sums at every run).  Then (acc NULL) the first maximum over the keys before
 * EOS, or (attn_probs) f times the sums written (overwrite) or added to the row of acc. */
template <typename T>
static __global__ void attn_align_kernel(int32_t *__restrict__ idx, float *__restrict__ acc, int overwrite, float f,
                                         const T *__restrict__ q, int q_stride, const T *__restrict__ kv,
                                         int kv_stride, const int *__restrict__ key_len, int per_sent, int S, int H,
                                         int Dh, float scale) {
    LL_PDL_ENTER();
    LL_DYN_SHARED(float, align_smem);
    const int r = blockIdx.x, b = r / per_sent, lane = threadIdx.x, C = H * Dh;
    float *sq = align_smem, *ps = sq + C, *sum = ps + S; /* query [C], scores [S], head sums [S] */
    const int n = min(key_len[b], S);
    if (!acc && n < 2) {
        if (lane == 0) idx[r] = -1;
        return;
    }
    for (int d = lane; d < C; d += WARP) sq[d] = ll_ld(q + (size_t)r * q_stride + d);
    for (int j = lane; j < n; j += WARP) sum[j] = 0.0f;
    __syncwarp();
    for (int h = 0; h < H; h++) {
        float mx = -INFINITY;
        for (int j = lane; j < n; j += WARP) {
            const T *kj = kv + ((size_t)b * S + j) * kv_stride + (size_t)h * Dh;
            float t = 0.0f;
            for (int d = 0; d < Dh; d++) t += sq[h * Dh + d] * ll_ld(kj + d);
            ps[j] = t * scale;
            mx = fmaxf(mx, ps[j]);
        }
#pragma unroll
        for (int o = WARP / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float z = 0.0f;
        for (int j = lane; j < n; j += WARP) z += ps[j] = __expf(ps[j] - mx);
        z = ll_warp_sum(z);
        for (int j = lane; j < n; j += WARP) sum[j] += ps[j] / z;
    }
    if (acc) { /* (a lane's own keys: no barrier needed) */
        float *a = acc + (size_t)r * S;
        for (int j = lane; j < n; j += WARP) a[j] = overwrite ? f * sum[j] : a[j] + f * sum[j];
        return;
    }
    const int best = warp_first_max(sum, n); /* (each lane reads its own keys) */
    if (lane == 0) idx[r] = best;
}

/* align_argmax: a warp per row over its row of acc */
static __global__ void align_argmax_kernel(int32_t *__restrict__ idx, const float *__restrict__ acc,
                                           const int *__restrict__ key_len, int per_sent, int S) {
    LL_PDL_ENTER();
    const int r = blockIdx.x, n = min(key_len[r / per_sent], S);
    const int best = n < 2 ? -1 : warp_first_max(acc + (size_t)r * S, n);
    if (threadIdx.x == 0) idx[r] = best;
}

extern "C" cudaError_t ll_cuda_attn_align(cudaStream_t stream, ll_cuda_dtype t, int32_t *idx, const void *q,
                                          int q_stride, const void *kv, int kv_stride, const int *key_len, int sents,
                                          int per_sent, int S, int H, int Dh) {
    const long rows = (long)sents * per_sent;
    if (rows <= 0 || S <= 0) return cudaSuccess;
    const size_t smem = sizeof(float) * ((size_t)H * Dh + 2 * (size_t)S);
    if (smem > 48 * 1024 || rows > INT_MAX) return cudaErrorInvalidValue;
    const float scale = 1.0f / sqrtf((float)Dh); /* as attention_cached: computed on the host */
    LL_DISPATCH(t, T, LL_LAUNCH((unsigned)rows, WARP, smem, stream, attn_align_kernel<T>)(
                          idx, NULL, 0, 0.0f, (const T *)q, q_stride, (const T *)kv, kv_stride, key_len, per_sent, S,
                          H, Dh, scale);)
    return cudaGetLastError();
}

extern "C" cudaError_t ll_cuda_attn_probs(cudaStream_t stream, ll_cuda_dtype t, float *acc, int overwrite, float w,
                                          const void *q, int q_stride, const void *kv, int kv_stride,
                                          const int *key_len, int sents, int per_sent, int S, int H, int Dh) {
    const long rows = (long)sents * per_sent;
    if (rows <= 0 || S <= 0) return cudaSuccess;
    const size_t smem = sizeof(float) * ((size_t)H * Dh + 2 * (size_t)S);
    if (smem > 48 * 1024 || rows > INT_MAX) return cudaErrorInvalidValue;
    const float scale = 1.0f / sqrtf((float)Dh), f = w / (float)H; /* (f as the CPU's: w / H in fp32) */
    LL_DISPATCH(t, T, LL_LAUNCH((unsigned)rows, WARP, smem, stream, attn_align_kernel<T>)(
                          NULL, acc, overwrite, f, (const T *)q, q_stride, (const T *)kv, kv_stride, key_len,
                          per_sent, S, H, Dh, scale);)
    return cudaGetLastError();
}

extern "C" cudaError_t ll_cuda_align_argmax(cudaStream_t stream, int32_t *idx, const float *acc, const int *key_len,
                                            int sents, int per_sent, int S) {
    const long rows = (long)sents * per_sent;
    if (rows <= 0 || S <= 0) return cudaSuccess;
    if (rows > INT_MAX) return cudaErrorInvalidValue;
    LL_LAUNCH((unsigned)rows, WARP, 0, stream, align_argmax_kernel)(idx, acc, key_len, per_sent, S);
    return cudaGetLastError();
}

/* ---- beam_topk ------------------------------------------------------------------- */

/* a ranks before b */
static __device__ __forceinline__ bool better(double sa, int fa, double sb, int fb) {
    return sa > sb || (sa == sb && fa < fb);
}

/* Tokens excluded from the candidates: pad, bos, eos unless mode bit 1,
 * anything but eos under mode bit 2.  Both top-k kernels rank the same
 * candidates. */
static __device__ __forceinline__ bool topk_excluded(int v, uint8_t md, int pad, int bos, int eos) {
    const bool eos_ok = md & 1, eos_only = md & 2;
    return v == pad || v == bos || (v == eos && !eos_ok) || (eos_only && v != eos);
}

/* Diverse beam search (div_groups D > 1): subgroup `sub` of a group ranks
 * rows first, first + step, .. (beam 1: every subgroup ranks the one row);
 * its penalty for token v is strength times the number of the group's filled
 * slots of subgroups < sub (slot q * D + s, already written: a barrier
 * separates the subgroups) holding v. */
typedef struct {
    const int32_t *slots; /* the group's k output slots (flat indices) */
    int sub, D, kk, V;
    double strength;
} div_pen;
/* x less the penalty of token v: one fma, as the CPU's (no contraction can change it) */
static __device__ __forceinline__ double div_less(const div_pen &p, int v, double x) {
    int c = 0;
    for (int q = 0; q < p.kk; q++)
        for (int s = 0; s < p.sub; s++) {
            const int f = p.slots[q * p.D + s];
            c += f >= 0 && f % p.V == v;
        }
    return fma(-p.strength, (double)c, x);
}

/* One round of a top-k kernel: the block's best (score, flat index) over
 * every thread's candidate (s, f) -- a warp shuffle reduction, then thread 0
 * over the warps -- written to output slot o by thread 0 (lp less its
 * penalty) and left in st->win_s / st->win_f for every thread (after the
 * barrier at the end).  All threads of the block call it. */
typedef struct {
    double ws[TOPK_THREADS / WARP];
    int wf[TOPK_THREADS / WARP];
    double win_s;
    int win_f;
} topk_round_state;
template <typename T>
static __device__ void topk_round(topk_round_state *st, double s, int f, double *score, float *lp_out,
                                  int32_t *flat_out, const T *logp, size_t o, const div_pen &pen) {
    const int tid = threadIdx.x, lane = tid % WARP, warp = tid / WARP, nwarps = blockDim.x / WARP;
    for (int d = WARP / 2; d > 0; d >>= 1) {
        const double s2 = __shfl_down_sync(0xffffffffu, s, d);
        const int f2 = __shfl_down_sync(0xffffffffu, f, d);
        if (better(s2, f2, s, f)) s = s2, f = f2;
    }
    if (lane == 0) st->ws[warp] = s, st->wf[warp] = f;
    __syncthreads();
    if (tid == 0) {
        double bs = st->ws[0];
        int bf = st->wf[0];
        for (int w = 1; w < nwarps; w++)
            if (better(st->ws[w], st->wf[w], bs, bf)) bs = st->ws[w], bf = st->wf[w];
        st->win_s = bs, st->win_f = bf;
        if (bf == INT_MAX) {
            score[o] = -INFINITY, lp_out[o] = 0.0f, flat_out[o] = -1;
        } else {
            const float l = ll_ld(logp + (size_t)bf);
            score[o] = bs, flat_out[o] = bf;
            lp_out[o] = pen.sub > 0 ? (float)div_less(pen, bf % pen.V, (double)l) : l;
        }
    }
    __syncthreads();
}

template <typename T>
static __global__ void __launch_bounds__(TOPK_THREADS)
    beam_topk_kernel(double *__restrict__ score, float *__restrict__ lp_out, int32_t *__restrict__ flat_out,
                     const T *__restrict__ logp, const double *__restrict__ cum, const uint8_t *__restrict__ mode,
                     int beam, int V, int k, int D, double strength, int pad, int bos, int eos) {
    LL_PDL_ENTER();
    const int g = blockIdx.x, tid = threadIdx.x, kk = k / D;
    const uint8_t md = mode[g];
    double ls[LL_CUDA_TOPK_MAX];
    int lf[LL_CUDA_TOPK_MAX];
    __shared__ topk_round_state st;
    for (int sub = 0; sub < D; sub++) {
        const div_pen pen = {flat_out + (size_t)g * k, sub, D, kk, V, strength};
        /* no penalty, or one that only lowers scores: the early test below is exact */
        const bool lowers = sub == 0 || strength >= 0;
        int n = 0;
        /* the candidates row by row, token by token (each thread's in flat order, as ranked), with no
         * 64-bit division per candidate; ls[kk - 1] of a full list kept in a register, since most
         * candidates stop at that test (the list itself lives in local memory) */
        double kth = -INFINITY;
        for (int b = beam == 1 ? 0 : sub; b < beam; b += beam == 1 ? 1 : D) {
            const int r = g * beam + b;
            const double cs = cum[r];
            if (cs == -INFINITY) continue; /* a dead row */
            const T *lr = logp + (size_t)r * V;
            for (int v = tid; v < V; v += blockDim.x) {
                if (topk_excluded(v, md, pad, bos, eos)) continue;
                double sc = cs + (double)ll_ld(lr + v);
                if (!(sc > -INFINITY)) continue; /* NaN, -inf */
                if (lowers && n == kk && !(sc > kth)) continue;
                if (sub > 0) {
                    sc = div_less(pen, v, sc);
                    if (!(sc > -INFINITY) || (n == kk && !(sc > kth))) continue;
                }
                int pos = n < kk ? n++ : kk - 1;
                while (pos > 0 && ls[pos - 1] < sc) { /* strict: earlier (lower index) stays ahead on ties */
                    ls[pos] = ls[pos - 1];
                    lf[pos] = lf[pos - 1];
                    pos--;
                }
                ls[pos] = sc;
                lf[pos] = r * V + v;
                if (n == kk) kth = ls[kk - 1];
            }
        }
        int head = 0;
        for (int q = 0; q < kk; q++) {
            topk_round(&st, head < n ? ls[head] : -INFINITY, head < n ? lf[head] : INT_MAX, score, lp_out, flat_out,
                       logp, (size_t)g * k + (size_t)q * D + sub, pen);
            if (head < n && lf[head] == st.win_f && st.win_f != INT_MAX) head++; /* flat indices are unique */
            __syncthreads(); /* win_* is rewritten next round; the slot is read by the next subgroup */
        }
    }
}

/* k > LL_CUDA_TOPK_MAX (beams over 32): no per-thread lists; round q rescans
 * the candidates for the best one ranked after round q-1's winner (the order
 * `better` is total: score, then flat index), so any k works, in k passes
 * over the group's beam * V scores (large beams are rare; the result is the
 * same as the list kernel's). */
template <typename T>
static __global__ void __launch_bounds__(TOPK_THREADS)
    beam_topk_rescan_kernel(double *__restrict__ score, float *__restrict__ lp_out, int32_t *__restrict__ flat_out,
                            const T *__restrict__ logp, const double *__restrict__ cum, const uint8_t *__restrict__ mode,
                            int beam, int V, int k, int D, double strength, int pad, int bos, int eos) {
    LL_PDL_ENTER();
    const int g = blockIdx.x, tid = threadIdx.x, kk = k / D;
    const uint8_t md = mode[g];
    __shared__ topk_round_state st;
    for (int sub = 0; sub < D; sub++) {
        const div_pen pen = {flat_out + (size_t)g * k, sub, D, kk, V, strength};
        double ps = INFINITY; /* the previous winner: every candidate ranks after (+inf, -1) */
        int pf = -1;
        for (int q = 0; q < kk; q++) {
            double s = -INFINITY;
            int f = INT_MAX;
            for (int b = beam == 1 ? 0 : sub; b < beam; b += beam == 1 ? 1 : D) {
                const int r = g * beam + b;
                const double cs = cum[r];
                if (cs == -INFINITY) continue; /* a dead row */
                for (int v = tid; v < V; v += blockDim.x) {
                    if (topk_excluded(v, md, pad, bos, eos)) continue;
                    double sc = cs + (double)ll_ld(logp + (size_t)r * V + v);
                    if (sub > 0) sc = div_less(pen, v, sc);
                    if (!(sc > -INFINITY)) continue; /* NaN, -inf */
                    const int fl = r * V + v;
                    if (better(ps, pf, sc, fl) && better(sc, fl, s, f)) s = sc, f = fl;
                }
            }
            topk_round(&st, s, f, score, lp_out, flat_out, logp, (size_t)g * k + (size_t)q * D + sub, pen);
            ps = st.win_s, pf = st.win_f;
            __syncthreads(); /* win_* is rewritten next round; the slot is read by the next subgroup */
        }
    }
}

extern "C" cudaError_t ll_cuda_beam_topk(cudaStream_t stream, ll_cuda_dtype t, double *score, float *lp,
                                         int32_t *flat, const void *logp, const double *cum, const uint8_t *mode,
                                         int groups, int beam, int V, int k, int div_groups, double div_strength,
                                         int pad, int bos, int eos) {
    if (groups <= 0 || k <= 0) return cudaSuccess;
    if ((size_t)groups * beam * V > (size_t)INT_MAX) return cudaErrorInvalidValue;
    const int D = div_groups > 1 ? div_groups : 1;
    if (k % D || (beam != 1 && beam % D)) return cudaErrorInvalidValue;
    if (k <= LL_CUDA_TOPK_MAX) {
        LL_DISPATCH(t, T, LL_LAUNCH(groups, TOPK_THREADS, 0, stream, beam_topk_kernel<T>)(
                              score, lp, flat, (const T *)logp, cum, mode, beam, V, k, D, div_strength, pad, bos, eos);)
    } else {
        LL_DISPATCH(t, T, LL_LAUNCH(groups, TOPK_THREADS, 0, stream, beam_topk_rescan_kernel<T>)(
                              score, lp, flat, (const T *)logp, cum, mode, beam, V, k, D, div_strength, pad, bos, eos);)
    }
    return cudaGetLastError();
}
