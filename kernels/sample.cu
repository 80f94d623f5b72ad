/* sample_draw (lldecode --sampling; contract: include/ll/backend.h; the CPU
 * reference: src/backend/cpu/cpu_sample.c): one block per row, in double.
 *
 * The CPU keeps its top-k in a heap and sorts the nucleus with qsort; here
 * both are ranks in one total order, (score desc, token asc), found by a
 * radix select over a 96-bit key (the score's 64 orderable bits, then the
 * inverted index): the top-k are the keys at or above the k-th's; the
 * nucleus walks the candidates by weight in chunks of SAMPLE_CHUNK ranks,
 * each chunk gathered by its bounding keys and sorted in shared memory (a
 * bitonic sort), usually one chunk.  The sums that decide a draw are
 * defined term by term (include/ll/backend.h): sums over tokens in blocks of
 * LL_SAMPLE_SUM_BLOCK, which the threads add side by side before one thread
 * adds the blocks' sums in order (and walks one block), and the nucleus's
 * kept weight in rank order by one thread; so both backends add the same
 * numbers in the same order, and the tokens are the CPU's up to the last bit
 * of exp (the emulation's exp is the host's: equal there).  One thread's
 * serial work is then ~V / 64 additions for unrestricted sampling (32k
 * tokens: ~500), not V. */
#include <math.h>

#include "ll_cuda_common.cuh"

#define SAMPLE_THREADS 512
#define SAMPLE_CHUNK 1024 /* nucleus ranks sorted at a time (12 KiB of shared memory) */
#define SAMPLE_BLOCKS 256 /* at most: rows beyond it loop (the scratch is per block) */
#define SAMPLE_SCRATCH_MAX (128u << 20) /* fewer blocks where a large vocabulary would need more */
#define WARP 32

typedef struct {
    uint64_t hi; /* the score's orderable bits */
    uint32_t lo; /* ~index: the lower index ranks higher */
} key96;

static __device__ __forceinline__ bool key_less(key96 a, key96 b) { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo); }

static __device__ __forceinline__ uint64_t dbits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static __device__ __forceinline__ double bits_d(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}
/* monotonic: a < b (as doubles, -0 == +0) <=> okey(a) < okey(b) */
static __device__ __forceinline__ uint64_t okey(double x) {
    uint64_t u = dbits(x);
    if (u << 1 == 0) u = 0; /* -0 as +0: the CPU ranks them equal, then by index */
    return (u >> 63) ? ~u : u | 0x8000000000000000ull;
}

typedef struct {
    unsigned hist[256];
    unsigned rank, dig;
} select_smem;

/* The key of rank `rank` (0: the highest) among the i < n for which f(i, &key) holds (all keys
 * distinct; rank < their count).  Twelve passes of 8 bits, most significant first: a histogram
 * of the digit among the keys that share the digits chosen so far, then the digit holding the
 * rank.  Every thread of the block calls it; every thread gets the key. */
template <typename F>
static __device__ key96 radix_select(const F &f, int n, unsigned rank, select_smem *sm) {
    uint64_t phi = 0, mhi = 0;
    uint32_t plo = 0, mlo = 0;
    for (int d = 0; d < 12; d++) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) sm->hist[b] = 0;
        __syncthreads();
        const int shift = d < 8 ? 56 - 8 * d : 24 - 8 * (d - 8);
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            key96 k;
            if (!f(i, &k) || (k.hi & mhi) != phi || (k.lo & mlo) != plo) continue;
            const unsigned dig = d < 8 ? (unsigned)(k.hi >> shift) & 255u : (k.lo >> shift) & 255u;
            atomicAdd(&sm->hist[dig], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned r = rank, b = 255;
            for (; b > 0 && r >= sm->hist[b]; b--) r -= sm->hist[b];
            sm->rank = r, sm->dig = b;
        }
        __syncthreads();
        rank = sm->rank;
        const unsigned b = sm->dig;
        if (d < 8)
            phi |= (uint64_t)b << shift, mhi |= (uint64_t)255 << shift;
        else
            plo |= b << shift, mlo |= 255u << shift;
        /* (thread 0 writes rank/dig again only after the next pass's two barriers) */
    }
    return key96{phi, plo};
}

/* block-wide max of x (NaN never wins: each thread's x is a max seeded with -inf) */
static __device__ double block_max(double x, double *red) {
    for (int d = WARP / 2; d > 0; d >>= 1) {
        const double y = __shfl_down_sync(0xffffffffu, x, d);
        if (y > x) x = y;
    }
    if (threadIdx.x % WARP == 0) red[threadIdx.x / WARP] = x;
    __syncthreads();
    double m = red[0];
    for (int w = 1; w < (int)blockDim.x / WARP; w++)
        if (red[w] > m) m = red[w];
    __syncthreads();
    return m;
}

/* block-wide exclusive prefix of c in thread order; *total the sum */
static __device__ int block_scan(int c, int *red, int *total) {
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    int x = c;
    for (int d = 1; d < WARP; d <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane == WARP - 1) red[warp] = x;
    __syncthreads();
    int before = 0, all = 0;
    for (int w = 0; w < (int)blockDim.x / WARP; w++) {
        if (w < warp) before += red[w];
        all += red[w];
    }
    __syncthreads();
    *total = all;
    return before + x - c;
}

/* bsum[j] = w[j*B .. (j+1)*B) summed in order, B = LL_SAMPLE_SUM_BLOCK, by the block's threads side
 * by side; then a barrier */
static __device__ void block_sums(const double *w, int n, double *bsum) {
    const int nb = (n + LL_SAMPLE_SUM_BLOCK - 1) / LL_SAMPLE_SUM_BLOCK;
    for (int j = threadIdx.x; j < nb; j += blockDim.x) {
        const int e = (j + 1) * LL_SAMPLE_SUM_BLOCK < n ? (j + 1) * LL_SAMPLE_SUM_BLOCK : n;
        double b = 0;
        for (int i = j * LL_SAMPLE_SUM_BLOCK; i < e; i++) b += w[i];
        bsum[j] = b;
    }
    __syncthreads();
}
/* (one thread) the blocks' sums in order */
static __device__ double sum_blocks(const double *bsum, int n) {
    double t = 0;
    for (int j = 0; j < (n + LL_SAMPLE_SUM_BLOCK - 1) / LL_SAMPLE_SUM_BLOCK; j++) t += bsum[j];
    return t;
}

/* Descending bitonic sort of P (a power of 2) keys in shared memory. */
static __device__ void bitonic_desc(uint64_t *hi, uint32_t *lo, int P) {
    for (int k = 2; k <= P; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < P; i += blockDim.x) {
                const int l = i ^ j;
                if (l <= i) continue;
                const key96 a = {hi[i], lo[i]}, b = {hi[l], lo[l]};
                if ((i & k) == 0 ? key_less(a, b) : key_less(b, a)) hi[i] = b.hi, lo[i] = b.lo, hi[l] = a.hi, lo[l] = a.lo;
            }
            __syncthreads();
        }
}

typedef struct {
    select_smem sel;
    double red_d[SAMPLE_THREADS / WARP];
    int red_i[SAMPLE_THREADS / WARP];
    uint64_t ck_hi[SAMPLE_CHUNK];
    uint32_t ck_lo[SAMPLE_CHUNK];
    double total, kept;
    key96 thr;
    unsigned slot;
    int tok, done;
} sample_smem;

template <typename T>
static __global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_draw_kernel(int32_t *__restrict__ tok_out, double *__restrict__ lq_out, const T *__restrict__ logp,
                       const ll_sample_row *__restrict__ rows_in, const int32_t *__restrict__ ban, int rows, int V,
                       ll_sample_params p, unsigned char *__restrict__ scratch, size_t per_block) {
    LL_PDL_ENTER();
    __shared__ sample_smem sm;
    const int tid = threadIdx.x, nt = blockDim.x;
    double *w = (double *)(scratch + blockIdx.x * per_block);
    double *bsum = w + V; /* [V / LL_SAMPLE_SUM_BLOCK + 1] */
    int *cand = (int *)(bsum + V / LL_SAMPLE_SUM_BLOCK + 1);
    unsigned char *banned = (unsigned char *)(cand + V);
    const bool t1 = p.temperature == 1.0;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const ll_sample_row row = rows_in[r];
        if (row.mode & 4) {
            if (tid == 0) tok_out[r] = -1, lq_out[r] = 0;
            continue;
        }
        const T *lp = logp + (size_t)r * V;
        for (int v = tid; v < V; v += nt) banned[v] = 0;
        __syncthreads();
        for (int i = tid; i < row.n_ban; i += nt) banned[ban[row.ban0 + i]] = 1; /* (repeats: the same byte) */
        __syncthreads();
        const int mode = row.mode;
        /* the CPU's q[v]: tempered (a division, as there), unk penalised, bans -inf */
        auto q0 = [&](int v) { return t1 ? (double)ll_ld(lp + v) : (double)ll_ld(lp + v) / p.temperature; };
        auto q = [&](int v) {
            if (banned[v]) return (double)-INFINITY;
            const double x = q0(v);
            return v == p.unk ? x - p.unkpen : x;
        };
        auto drawable = [&](int v, double qv) {
            return v != p.pad && v != p.bos && (v != p.eos || (mode & 1)) && qv > -INFINITY;
        };
        double mx = -INFINITY, amx = -INFINITY;
        int n_e = 0;
        for (int v = tid; v < V; v += nt) {
            const double a = q0(v), b = q(v);
            if (a > mx) mx = a;
            if (drawable(v, b)) {
                n_e++;
                if (b > amx) amx = b;
            }
        }
        mx = block_max(mx, sm.red_d);
        amx = block_max(amx, sm.red_d);
        int n_drawable;
        block_scan(n_e, sm.red_i, &n_drawable);
        if (tid == 0) sm.tok = row.forced >= 0 ? row.forced : p.eos;
        if (row.forced < 0 && !(mode & 2) && amx > -INFINITY) {
            /* the candidates: the drawable tokens, or their topk best */
            const bool top = p.topk > 0 && p.topk < n_drawable;
            auto qkey = [&](int v, key96 *k) {
                const double b = q(v);
                if (!drawable(v, b)) return false;
                *k = key96{okey(b), ~(uint32_t)v};
                return true;
            };
            const key96 thr = top ? radix_select(qkey, V, (unsigned)p.topk - 1, &sm.sel) : key96{0, 0};
            auto is_cand = [&](int v) {
                key96 k;
                return qkey(v, &k) && (!top || !key_less(k, thr));
            };
            /* compacted in token order: each thread a contiguous span, placed by a block scan */
            const int span = (V + nt - 1) / nt, v0 = tid * span < V ? tid * span : V,
                      v1 = v0 + span < V ? v0 + span : V;
            int c = 0;
            for (int v = v0; v < v1; v++) c += is_cand(v);
            int n;
            int at = block_scan(c, sm.red_i, &n);
            for (int v = v0; v < v1; v++)
                if (is_cand(v)) cand[at] = v, w[at] = exp(q(v) - amx), at++;
            __syncthreads();
            block_sums(w, n, bsum);
            if (tid == 0) sm.total = sum_blocks(bsum, n);
            __syncthreads();
            if (p.topp > 0 && p.topp < 1) { /* nucleus: ranks by (weight desc, position asc), a chunk at a time */
                auto wkey = [&](int i, key96 *k) {
                    *k = key96{dbits(w[i]), ~(uint32_t)i}; /* (w >= 0: its bits are ordered) */
                    return true;
                };
                const double goal = p.topp * sm.total;
                if (tid == 0) sm.kept = 0, sm.done = 0;
                key96 prev = {0, 0};
                for (int r0 = 0;; r0 += SAMPLE_CHUNK) {
                    const int cnt = n - r0 < SAMPLE_CHUNK ? n - r0 : SAMPLE_CHUNK;
                    const key96 lo = radix_select(wkey, n, (unsigned)(r0 + cnt - 1), &sm.sel);
                    int P = 1;
                    while (P < cnt) P <<= 1;
                    if (tid == 0) sm.slot = 0;
                    __syncthreads();
                    for (int i = tid; i < n; i += nt) {
                        key96 k;
                        wkey(i, &k);
                        if (key_less(k, lo) || (r0 > 0 && !key_less(k, prev))) continue;
                        const unsigned s = atomicAdd(&sm.slot, 1u);
                        sm.ck_hi[s] = k.hi, sm.ck_lo[s] = k.lo;
                    }
                    for (int s = cnt + tid; s < P; s += nt) sm.ck_hi[s] = 0, sm.ck_lo[s] = 0; /* below every key */
                    __syncthreads();
                    bitonic_desc(sm.ck_hi, sm.ck_lo, P);
                    if (tid == 0) { /* the CPU's loop: while kept < topp * total, keep the next */
                        double kept = sm.kept;
                        int j = 0;
                        for (; j < cnt && kept < goal; j++) kept += bits_d(sm.ck_hi[j]);
                        if (j > 0) sm.thr = key96{sm.ck_hi[j - 1], sm.ck_lo[j - 1]};
                        sm.kept = kept;
                        sm.done = j < cnt || r0 + cnt == n;
                    }
                    __syncthreads();
                    if (sm.done) break;
                    prev = lo;
                }
                const key96 keep = sm.thr;
                for (int i = tid; i < n; i += nt) {
                    key96 k;
                    wkey(i, &k);
                    if (key_less(k, keep)) w[i] = 0;
                }
                __syncthreads();
                block_sums(w, n, bsum); /* (the kept weights, for the walk) */
                if (tid == 0) sm.total = sm.kept;
            }
            if (tid == 0) { /* the walk, as the CPU's: the block holding the target, then within it */
                const double target = row.u * sm.total;
                int t = -1;
                double P = 0;
                for (int j = 0; t < 0 && j * LL_SAMPLE_SUM_BLOCK < n; j++) {
                    if (P + bsum[j] > target) {
                        const int e = (j + 1) * LL_SAMPLE_SUM_BLOCK < n ? (j + 1) * LL_SAMPLE_SUM_BLOCK : n;
                        double s = 0;
                        for (int i = j * LL_SAMPLE_SUM_BLOCK; i < e; i++) {
                            s += w[i];
                            if (w[i] > 0 && P + s > target) {
                                t = cand[i];
                                break;
                            }
                        }
                    }
                    P += bsum[j];
                }
                for (int i = n - 1; t < 0; i--) /* (rounding: past the last weight, the last kept) */
                    if (w[i] > 0 || i == 0) t = cand[i];
                sm.tok = t;
            }
        }
        __syncthreads();
        const int t = sm.tok;
        if (t1) {
            if (tid == 0) lq_out[r] = (double)ll_ld(lp + t) - (t == p.unk ? p.unkpen : 0);
        } else { /* the tempered normaliser, summed in token order (bans and unkpen left out) */
            for (int v = tid; v < V; v += nt) w[v] = exp(q0(v) - mx);
            __syncthreads();
            block_sums(w, V, bsum);
            if (tid == 0) lq_out[r] = q(t) - (mx + log(sum_blocks(bsum, V)));
        }
        if (tid == 0) tok_out[r] = t;
        __syncthreads(); /* (the next row rewrites banned, w and the shared state) */
    }
}

/* a block's scratch: w and the block sums (doubles), cand (ints), the ban flags (bytes) */
static size_t per_block_bytes(int V) {
    return (sizeof(double) * ((size_t)V + V / LL_SAMPLE_SUM_BLOCK + 1) + (sizeof(int) + 1) * (size_t)V + 255) &
           ~(size_t)255;
}

extern "C" int ll_cuda_sample_draw_blocks(int rows, int V) {
    size_t b = SAMPLE_SCRATCH_MAX / per_block_bytes(V);
    if (b > SAMPLE_BLOCKS) b = SAMPLE_BLOCKS;
    if (b > (size_t)rows) b = (size_t)rows;
    return b > 0 ? (int)b : 1;
}

extern "C" size_t ll_cuda_sample_draw_scratch_bytes(int rows, int V) {
    return per_block_bytes(V) * (size_t)ll_cuda_sample_draw_blocks(rows, V);
}

extern "C" cudaError_t ll_cuda_sample_draw(cudaStream_t s, ll_cuda_dtype t, int32_t *tok, double *lq, const void *logp,
                                           const ll_sample_row *row, const int32_t *ban, int rows, int V,
                                           const ll_sample_params *p, void *scratch) {
    if (rows <= 0) return cudaSuccess;
    if (!scratch || V <= 0) return cudaErrorInvalidValue;
    const int blocks = ll_cuda_sample_draw_blocks(rows, V);
    const size_t per = per_block_bytes(V);
    LL_DISPATCH(t, T, LL_LAUNCH(blocks, SAMPLE_THREADS, 0, s, sample_draw_kernel<T>)(
                          tok, lq, (const T *)logp, row, ban, rows, V, *p, (unsigned char *)scratch, per);)
    LL_CHECK_LAUNCH();
    return cudaSuccess;
}
