/* CPU backend: memory is host memory, gemm is OpenBLAS, the rest plain C with
 * OpenMP.  This is the readable reference the CUDA backend is tested against. */
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

#ifdef LL_REAL_DOUBLE
#define CBLAS_GEMM cblas_dgemm
#else
#define CBLAS_GEMM cblas_sgemm
#endif

/* This thread's share [c0, c1) of n columns inside a parallel region. */
static void thread_slice(int n, int *c0, int *c1) {
#ifdef _OPENMP
    int nt = omp_get_num_threads(), id = omp_get_thread_num();
#else
    int nt = 1, id = 0;
#endif
    *c0 = (int)((long)n * id / nt);
    *c1 = (int)((long)n * (id + 1) / nt);
}

static void *cpu_alloc(ll_backend *be, size_t bytes) {
    (void)be;
    return ll_aligned_alloc(bytes);
}
static void cpu_free(ll_backend *be, void *p) {
    (void)be;
    free(p);
}
static void cpu_copy(ll_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memcpy(dst, src, bytes);
}
static void cpu_memset0(ll_backend *be, void *p, size_t bytes) {
    (void)be;
    if (bytes < (1u << 20)) {
        if (bytes) memset(p, 0, bytes);
        return;
    }
    /* large buffers (gradients, attention grads): both cores, 4 KiB-aligned chunks */
#pragma omp parallel
    {
        int c0, c1, pages = (int)((bytes + 4095) >> 12);
        thread_slice(pages, &c0, &c1);
        size_t b0 = (size_t)c0 << 12, b1 = (size_t)c1 << 12;
        if (b1 > bytes) b1 = bytes;
        if (b1 > b0) memset((char *)p + b0, 0, b1 - b0);
    }
}
static void cpu_sync(ll_backend *be) { (void)be; }

/* OpenBLAS runs single-threaded (ll_set_threads); we split C over our OpenMP
 * threads instead, so one thread pool serves gemms and element-wise ops and
 * nothing spins between calls (bench/RESULTS.md has the measurements). */
static void gemm_serial(int ta, int tb, int M, int N, int K, real alpha, const real *A, int lda, const real *B,
                        int ldb, real beta, real *C, int ldc) {
    CBLAS_GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A,
               lda, B, ldb, beta, C, ldc);
}

/* Weight-gradient shapes (dW = dY^T X: small M x N, K = tokens): each thread
 * multiplies a slice of K into its own buffer and the slices are summed.  A
 * split over M or N would make every thread pack the whole of the other
 * operand (K x N floats); this split packs each element once. */
static void gemm_split_k(int nt, int ta, int tb, int M, int N, int K, real alpha, const real *A, int lda,
                         const real *B, int ldb, real beta, real *C, int ldc) {
    static _Thread_local real *scratch; /* per thread: decoding workers run gemms concurrently */
    static _Thread_local size_t scratch_n;
    size_t need = (size_t)(nt - 1) * M * N;
    if (need > scratch_n) {
        free(scratch);
        scratch = ll_aligned_alloc(need * sizeof(real));
        scratch_n = need;
    }
    real *const buf = scratch; /* the caller's buffer, shared with the team */
#pragma omp parallel num_threads(nt)
    {
        int id = omp_get_thread_num(), T = omp_get_num_threads();
        int k0 = (int)((long)K * id / T) / 16 * 16, k1 = id == T - 1 ? K : (int)((long)K * (id + 1) / T) / 16 * 16;
        const real *a = ta ? A + (size_t)k0 * lda : A + k0;
        const real *b = tb ? B + k0 : B + (size_t)k0 * ldb;
        if (id == 0)
            gemm_serial(ta, tb, M, N, k1 - k0, alpha, a, lda, b, ldb, beta, C, ldc);
        else
            gemm_serial(ta, tb, M, N, k1 - k0, alpha, a, lda, b, ldb, 0, buf + (size_t)(id - 1) * M * N, N);
#pragma omp barrier
#pragma omp for schedule(static)
        for (int r = 0; r < M; r++)
            for (int t = 1; t < T; t++) {
                const real *src = buf + (size_t)(t - 1) * M * N + (size_t)r * N;
                real *dst = C + (size_t)r * ldc;
                for (int c = 0; c < N; c++) dst[c] += src[c];
            }
    }
}

/* C = alpha op(A) op(B) + beta C on real operands, split over our threads. */
static void gemm_real(int ta, int tb, int M, int N, int K, real alpha, const real *A, int lda, const real *B, int ldb,
                      real beta, real *C, int ldc) {
    if (M == 0 || N == 0) return;
    int nt = ll_threads_here(); /* 1 inside a batch worker: one call, one packing */
    if (nt <= 1 || (double)M * N * K < 1e6) {
        gemm_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (K >= 4 * (M > N ? M : N) && K >= 256 * nt) { /* weight gradients: split K instead */
        gemm_split_k(nt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Split the larger of M and N into 2 chunks per thread, handed out
     * dynamically: a thread the hypervisor delays does not stall the other
     * (a static split waits for the slowest half at every gemm). */
    int split_m = M >= N;
    int D = split_m ? M : N, chunks = 2 * nt;
    if (D < 64 * chunks) chunks = nt;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int c = 0; c < chunks; c++) {
        int i0 = (int)((long)D * c / chunks), i1 = (int)((long)D * (c + 1) / chunks);
        if (D >= 64 * chunks) { /* align chunk boundaries for the kernels */
            i0 = i0 / 16 * 16;
            i1 = (i1 == D) ? D : i1 / 16 * 16;
        }
        int n = i1 - i0;
        if (n <= 0) continue;
        if (split_m)
            gemm_serial(ta, tb, n, N, K, alpha, ta ? A + i0 : A + (size_t)i0 * lda, lda, B, ldb, beta,
                        C + (size_t)i0 * ldc, ldc);
        else
            gemm_serial(ta, tb, M, n, K, alpha, A, lda, tb ? B + (size_t)i0 * ldb : B + i0, ldb, beta, C + i0, ldc);
    }
}

static void cpu_embed_fwd(ll_backend *be, ll_act *out_, const int32_t *tok, const ll_act *emb_, const real *pos,
                          int pos_offset, const int *pos_at, real scale, int N, int T, int C, int pad) {
    (void)be;
    if (pos_at) pos_offset += *pos_at;
    real *out = (real *)out_;
    const real *emb = (const real *)emb_;
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        real *o = out + (size_t)r * C;
        if (tok[r] == pad) {
            memset(o, 0, sizeof(real) * C);
            continue;
        }
        const real *e = emb + (size_t)tok[r] * C;
        const real *p = pos + (size_t)(r % T + pos_offset) * C;
        for (int c = 0; c < C; c++) o[c] = scale * e[c] + p[c];
    }
}

static void cpu_embed_bwd(ll_backend *be, real *demb, const ll_act *dout_, const int32_t *tok, real scale, int N,
                          int C, int pad) {
    (void)be;
    const real *dout = (const real *)dout_;
    /* Rows may share a token: parallelise over columns to avoid races. */
#pragma omp parallel
    {
        int c0, c1;
        thread_slice(C, &c0, &c1);
        for (int r = 0; r < N; r++) {
            if (tok[r] == pad) continue;
            real *d = demb + (size_t)tok[r] * C;
            const real *g = dout + (size_t)r * C;
            for (int c = c0; c < c1; c++) d[c] += scale * g[c];
        }
    }
}

/* gemm epilogues on real C (the bf16 backend runs them on its fp32 scratch). */
static void bias_add(real *y, int ldy, const real *b, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        real *yr = y + (size_t)r * ldy;
        for (int c = 0; c < C; c++) yr[c] += b[c];
    }
}

static void bias_set(real *y, int ldy, const real *b, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) memcpy(y + (size_t)r * ldy, b, sizeof(real) * C);
}

/* db[c] += sum_r dy[r, c] (dy [N, C] at row stride ld) */
static void col_sums(real *db, const real *dy, int ld, int N, int C) {
#pragma omp parallel
    {
        int c0, c1;
        thread_slice(C, &c0, &c1);
        for (int r = 0; r < N; r++) {
            const real *g = dy + (size_t)r * ld;
            for (int c = c0; c < c1; c++) db[c] += g[c];
        }
    }
}

/* db[r] += sum_c x[r, c] (x [N, C] at row stride ld) */
static void row_sums(real *db, const real *x, int ld, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        const real *g = x + (size_t)r * ld;
        real s = 0;
        for (int c = 0; c < C; c++) s += g[c];
        db[r] += s;
    }
}

static void relu_strided(real *y, int ldy, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < N; r++) {
        real *yr = y + (size_t)r * ldy;
        for (int c = 0; c < C; c++) yr[c] = yr[c] > 0 ? yr[c] : 0;
    }
}

/* The gemm op on real operands (the bf16 backend converts to real first and
 * calls this; bias: g->bias as reals).  BIAS with beta 0 starts C from the
 * bias and multiplies with beta 1: one pass over C instead of BLAS zeroing it
 * and a bias pass adding. */
void cpu_gemm_real(const ll_gemm_desc *g, const real *A, const real *B, const real *bias_r, real *C) {
    if (g->epi == LL_EPI_BIAS_RELU_AUX || g->epi == LL_EPI_DRELU) /* (relu_mask_bytes is not offered) */
        ll_die("cpu gemm: the ReLU-mask epilogues are a CUDA backend's (relu_mask_bytes)");
    const int bias = g->epi == LL_EPI_BIAS || g->epi == LL_EPI_BIAS_RELU;
    if (bias && !bias_r) ll_die("cpu gemm: a bias epilogue without a bias");
    real beta = g->beta;
    if (bias && beta == 0) {
        bias_set(C, g->ldc, bias_r, g->M, g->N);
        beta = 1;
    } else if (bias) {
        /* accumulating into C: product first, then the bias (and relu) on the sum */
        gemm_real(g->trans_a, g->trans_b, g->M, g->N, g->K, g->alpha, A, g->lda, B, g->ldb, beta, C, g->ldc);
        bias_add(C, g->ldc, bias_r, g->M, g->N);
        if (g->epi == LL_EPI_BIAS_RELU) relu_strided(C, g->ldc, g->M, g->N);
        return;
    }
    gemm_real(g->trans_a, g->trans_b, g->M, g->N, g->K, g->alpha, A, g->lda, B, g->ldb, beta, C, g->ldc);
    if (g->epi == LL_EPI_BIAS_RELU) relu_strided(C, g->ldc, g->M, g->N);
    if (g->epi == LL_EPI_BGRAD) { /* bgrad[m] += sum_k op(A)[m, k] (bgrad_set: =) */
        if (g->bgrad_set) memset(g->bgrad, 0, sizeof(real) * (size_t)(g->M > 0 ? g->M : 0));
        if (g->trans_a)
            col_sums(g->bgrad, A, g->lda, g->K, g->M); /* A is [K, M] */
        else
            row_sums(g->bgrad, A, g->lda, g->M, g->K);
    }
}

static void cpu_gemm(ll_backend *be, const ll_gemm_desc *g) {
    (void)be;
    if (g->a_type != LL_REAL_DTYPE || g->b_type != LL_REAL_DTYPE || g->c_type != LL_REAL_DTYPE)
        ll_die("cpu gemm: operands %s x %s -> %s on the %s backend", ll_dtype_str(g->a_type),
               ll_dtype_str(g->b_type), ll_dtype_str(g->c_type), ll_dtype_str(be->act));
    const int bias = g->epi == LL_EPI_BIAS || g->epi == LL_EPI_BIAS_RELU;
    if (bias && g->bias_type != LL_REAL_DTYPE)
        ll_die("cpu gemm: bias is %s on the %s backend (its activation dtype)", ll_dtype_str(g->bias_type),
               ll_dtype_str(be->act));
    cpu_gemm_real(g, g->A, g->B, bias ? g->bias : NULL, g->C);
}

static void cpu_relu_fwd(ll_backend *be, ll_act *x_, size_t n) {
    (void)be;
    real *x = (real *)x_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = x[i] > 0 ? x[i] : 0;
}

static void cpu_relu_bwd(ll_backend *be, ll_act *dy_, const ll_act *y_, size_t n) {
    (void)be;
    real *dy = (real *)dy_;
    const real *y = (const real *)y_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dy[i] = y[i] > 0 ? dy[i] : 0;
}

/* Dropout draws 16 bits per element: element i keeps iff half-word (offset + i)
 * of the Philox stream (low half of word k first) is >= round(p * 65536).  The
 * rate is p to within 1/65536, at half the generator cost of a word each;
 * a CUDA dropout kernel must use the same mapping. */
static uint32_t drop_threshold(real p) { return (uint32_t)lround((double)p * 65536.0); }

/* Chunk c (half-words 128c..128c+127) of dropout over elements
 * offset..offset+n: writes the mask and, when x is given, applies it. */
static void dropout_chunk(uint64_t c, real *x, uint8_t *mask, size_t n, uint32_t thr, real s, const ll_philox *rng,
                          uint64_t offset) {
    uint32_t w[64];
    uint16_t half[128];
    ll_philox_blocks16(rng, c * 16, w);
    for (int j = 0; j < 128; j++) half[j] = (uint16_t)(w[j >> 1] >> (16 * (j & 1)));
    const uint64_t h0 = c * 128;
    const int lo = h0 < offset ? (int)(offset - h0) : 0;
    const int hi = offset + n - h0 < 128 ? (int)(offset + n - h0) : 128;
    uint8_t *mk = mask + (h0 - offset);
    if (x) {
        real *xc = x + (h0 - offset);
        for (int j = lo; j < hi; j++) {
            const int keep = half[j] >= thr;
            mk[j] = (uint8_t)keep;
            xc[j] = keep ? xc[j] * s : 0;
        }
    } else {
        for (int j = lo; j < hi; j++) mk[j] = half[j] >= thr;
    }
}

/* Masks (and, when x is given, applies) elements offset..offset+n of the
 * half-word stream, 128 half-words (16 Philox blocks) per task. */
static void dropout_apply(real *x, uint8_t *mask, size_t n, real p, const ll_philox *rng, uint64_t offset) {
    const uint32_t thr = drop_threshold(p);
    const real s = 1 / (1 - p);
    const uint64_t first = offset / 128, last = (offset + n + 127) / 128;
#pragma omp parallel for schedule(static)
    for (uint64_t c = first; c < last; c++) dropout_chunk(c, x, mask, n, thr, s, rng, offset);
}

void cpu_dropout_mask(uint8_t *mask, size_t n, real p, const ll_philox *rng, uint64_t offset) {
    const uint32_t thr = drop_threshold(p);
    for (uint64_t c = offset / 128, last = (offset + n + 127) / 128; c < last; c++)
        dropout_chunk(c, NULL, mask, n, thr, 0, rng, offset);
}

static void cpu_dropout_fwd(ll_backend *be, ll_act *x_, uint8_t *mask, size_t n, real p, const ll_philox *rng,
                            uint64_t offset) {
    (void)be;
    real *x = (real *)x_;
    if (p <= 0) {
        memset(mask, 1, n);
        return;
    }
    dropout_apply(x, mask, n, p, rng, offset);
}

static void cpu_dropout_bwd(ll_backend *be, ll_act *dx_, const uint8_t *mask, size_t n, real p) {
    (void)be;
    real *dx = (real *)dx_;
    if (p <= 0) return;
    real s = 1 / (1 - p);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dx[i] = mask[i] ? dx[i] * s : 0;
}

static void cpu_add(ll_backend *be, ll_act *y_, const ll_act *a_, const ll_act *b_, size_t n) {
    (void)be;
    real *y = (real *)y_;
    const real *a = (const real *)a_, *b = (const real *)b_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
static void cpu_add_scaled(ll_backend *be, ll_act *y_, const ll_act *a_, const ll_act *b_, real alpha, size_t n) {
    (void)be;
    real *y = (real *)y_;
    const real *a = (const real *)a_, *b = (const real *)b_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = a[i] + alpha * b[i];
}
static void cpu_acc(ll_backend *be, ll_act *dst_, const ll_act *src_, size_t n) {
    (void)be;
    real *dst = (real *)dst_;
    const real *src = (const real *)src_;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}
/* Conversions between dtypes, in parallel when large. */
void cpu_convert(ll_backend *be, void *dst, ll_dtype dt, const void *src, ll_dtype st, size_t n) {
    (void)be;
    if (dt == st) {
        if (n && dst != src) memcpy(dst, src, n * ll_dtype_bytes(dt));
        return;
    }
    const int nt = n >= (1u << 16) ? ll_threads_here() : 1;
#define CONV(DT, ST, EXPR)                                                          \
    if (dt == DT && st == ST) {                                                     \
        _Pragma("omp parallel for schedule(static) num_threads(nt)")                \
        for (size_t i = 0; i < n; i++) EXPR;                                        \
        return;                                                                     \
    }
    CONV(LL_BF16, LL_F32, ((uint16_t *)dst)[i] = ll_f32_to_bf16(((const float *)src)[i]))
    CONV(LL_F32, LL_BF16, ((float *)dst)[i] = ll_bf16_to_f32(((const uint16_t *)src)[i]))
    CONV(LL_BF16, LL_F64, ((uint16_t *)dst)[i] = ll_f32_to_bf16((float)((const double *)src)[i]))
    CONV(LL_F64, LL_BF16, ((double *)dst)[i] = ll_bf16_to_f32(((const uint16_t *)src)[i]))
    CONV(LL_F32, LL_F64, ((float *)dst)[i] = (float)((const double *)src)[i])
    CONV(LL_F64, LL_F32, ((double *)dst)[i] = ((const float *)src)[i])
#undef CONV
    ll_die("convert: %s to %s", ll_dtype_str(st), ll_dtype_str(dt));
}

static ll_backend g_cpu = {
    .name = "cpu",
    .act = LL_REAL_DTYPE,
    .convert = cpu_convert,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .memset0 = cpu_memset0,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .gemm = cpu_gemm,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .embed_fwd = cpu_embed_fwd,
    .embed_bwd = cpu_embed_bwd,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .add = cpu_add,
    .add_scaled = cpu_add_scaled,
    .add_gated = cpu_add_gated,
    .scale_gated = cpu_scale_gated,
    .dot_acc = cpu_dot_acc,
    .residual_fwd = cpu_residual_fwd,
    .residual_ln_fwd = cpu_residual_ln_fwd,
    .residual_bwd = cpu_residual_bwd,
    .grad_finish = cpu_grad_finish,
    .spike_check = cpu_spike_check,
    .weighted_sum = cpu_weighted_sum,
    .weighted_scatter = cpu_weighted_scatter,
    .dots_acc = cpu_dots_acc,
    .latent_sample = cpu_latent_sample,
    .latent_grad = cpu_latent_grad,
    .latent_kl = cpu_latent_kl,
    .latent_lk = cpu_latent_lk,
    .latent_depth = cpu_latent_depth,
    .latent_q = cpu_latent_q,
    .ald_pool = cpu_ald_pool,
    .ald_loss = cpu_ald_loss,
    .ald_unpool = cpu_ald_unpool,
    .acc = cpu_acc,
    .sumsq = cpu_sumsq,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .xent_fwd_bwd = cpu_xent_fwd_bwd,
    .sym_kl = cpu_sym_kl,
    .log_softmax = cpu_log_softmax,
    .pick_logp = cpu_pick_logp,
    .ensemble_mix = cpu_ensemble_mix,
    .add_col = cpu_add_col,
    .fill_at = cpu_fill_at,
    .expand_cols = cpu_expand_cols,
    .copy_rows = cpu_copy_rows,
    .reorder_rows = cpu_reorder_rows,
    .beam_topk = cpu_beam_topk,
    .sample_draw = cpu_sample_draw,
    .attention_cached = cpu_attention_cached,
    .beam_ancestry = cpu_beam_ancestry,
    .attn_align = cpu_attn_align,
    .attn_probs = cpu_attn_probs,
    .align_argmax = cpu_align_argmax,
    .adam = cpu_adam,
    .ema = cpu_ema,
    .linear_pack = cpu_linear_pack,
    .linear_packed = cpu_linear_packed,
    .linear_unpack = cpu_linear_unpack,
};

ll_backend *ll_backend_cpu(void) { return &g_cpu; }
