/* Matmuls through cuBLASLt: ll_cuda_gemm_lt (kernels/ll_cuda.h has the
 * contract) and the backend's gemm op (fp32 and bf16 operands, epilogues) on
 * top of it.
 *
 * Row-major to column-major.  A row-major matrix with leading dimension ld is,
 * to column-major cuBLASLt, its transpose with the same ld.  So for the
 * row-major C = op(A) op(B) we ask cuBLASLt for C^T = op(B)^T op(A)^T: its
 * "A" is our B (transposed iff trans_b), its "B" is our A (iff trans_a), its
 * D is [N rows, M columns] with ld ldc.  In that frame a bias of length N is
 * cuBLASLt's per-row bias (broadcast over its columns = our rows), our BGRAD_A
 * (sum of op(A) over K, length M) is its BGRADB, and our BGRAD_B its BGRADA.
 *
 * Cache.  Building a matmul descriptor, three layouts and running the
 * heuristic costs tens of microseconds, so the result is kept per key (shape,
 * transposes, leading dimensions, types, epilogue, math mode and the pointers'
 * alignment, which the heuristic's algorithm choice depends on).  Training
 * meets a bounded set of shapes (bucketed batches); past LT_CACHE_MAX entries
 * the cache is flushed and refilled.  The heuristic is deterministic for a key,
 * so the same shapes run the same algorithms and a resumed run on the same GPU
 * type repeats the bits.  A mutex guards the cache and the per-call pointer
 * attribute (bias) of a cached descriptor.
 *
 * State lives per device (the backend is one per device for the process), set
 * up by ll_cuda_register_gemm_lt() when the backend is built: the cuBLASLt
 * handle and the 32 MiB workspace (llm.c's size; enough for split-K on H100),
 * so no call allocates. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define LT_MAX_DEVICES 64
#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define LT_CACHE_MAX 4096
#define LT_BUCKETS 8192 /* power of two, > LT_CACHE_MAX: open addressing stays short */

typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc;
    int at, bt, ct, bias_t, epi, math;
    int align_a, align_b, align_c, align_bias;
    int aux_ld, align_aux; /* the ReLU bitmask (RELU_AUX_BIAS, DRELU) */
} lt_key;

typedef struct {
    int used;
    cublasStatus_t status; /* not SUCCESS: a remembered failure (no algorithm), no handles */
    lt_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc; /* C and D share lc (same type and shape) */
    cublasLtMatmulAlgo_t algo;
} lt_entry;

typedef struct {
    int slot; /* in tab */
    float beta;
} lt_pending;

typedef struct {
    cublasLtHandle_t lt;
    void *workspace;
    cudaStream_t side; /* the side stream (cuda_side.c), once it exists: it has its own workspace */
    void *workspace_side;
    pthread_mutex_t mu;
    lt_entry *tab; /* LT_BUCKETS */
    int count;
    ll_cuda_math default_math; /* of the fp32 gemm op */
    cublasHandle_t blas;       /* the op's fallback when cuBLASLt has no algorithm */
    int warned, warned_epi;    /* warn once per device: no algorithm / an epilogue refused */
    atomic_uint_fast64_t fallbacks; /* gemm op calls not run as one fused cuBLASLt matmul */
    int tune;                       /* LL_CUDA_GEMM_TUNE: candidates timed per new key (0: the heuristic's first) */
    lt_pending *pending;            /* keys met during a capture, tuned when it ends */
    int n_pending, cap_pending;
    uint64_t tuned, switched;
    int bgrad_split; /* the bias gradient by its kernel after a plain dW product (LL_CUDA_BGRAD_EPILOGUE=1: not) */
} lt_state;

static lt_state *g_lt[LT_MAX_DEVICES];

/* the workspace of the stream a product runs on: two products on two streams may run at once */
static void *workspace_of(const lt_state *st, cudaStream_t s) {
    return st->side && s == st->side ? st->workspace_side : st->workspace;
}

static lt_state *state_of(ll_backend *be) {
    int dev = ll_cuda_device(be);
    if (dev < 0 || dev >= LT_MAX_DEVICES || !g_lt[dev]) ll_die("cuBLASLt is not set up for CUDA device %d", dev);
    return g_lt[dev];
}

static cudaDataType_t cuda_type(ll_cuda_dtype t) { return t == LL_CUDA_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/* Largest power of two (<= 256) dividing the address: what the heuristic is told. */
static int ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a & (uintptr_t)(al - 1))) al >>= 1;
    return al;
}

static uint64_t key_hash(const lt_key *k) {
    const unsigned char *b = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void entry_destroy(lt_entry *e) {
    if (!e->used || e->status != CUBLAS_STATUS_SUCCESS) {
        memset(e, 0, sizeof *e);
        return;
    }
    cublasLtMatrixLayoutDestroy(e->la);
    cublasLtMatrixLayoutDestroy(e->lb);
    cublasLtMatrixLayoutDestroy(e->lc);
    cublasLtMatmulDescDestroy(e->op);
    memset(e, 0, sizeof *e);
}

static void cache_flush(lt_state *st) {
    for (int i = 0; i < LT_BUCKETS; i++) entry_destroy(&st->tab[i]);
    st->count = 0;
    st->n_pending = 0; /* (their entries are gone) */
}

#define LT_TRY(call)                                                                                                 \
    do {                                                                                                             \
        cublasStatus_t s_ = (call);                                                                                  \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                           \
            status = s_;                                                                                             \
            goto fail;                                                                                               \
        }                                                                                                            \
    } while (0)

/* Build descriptor, layouts and algorithm for key k into e (e->used on success): the heuristic's
 * first choice; res (when not NULL): its first n_res candidates, *n_got of them returned. */
static cublasStatus_t entry_build(lt_state *st, const lt_key *k, const void *epi_ptr, const void *aux_ptr,
                                  lt_entry *e, cublasLtMatmulHeuristicResult_t *res, int n_res, int *n_got) {
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulPreference_t pref = NULL;
    memset(e, 0, sizeof *e);
    const int bf16 = k->at == LL_CUDA_BF16;
    const cublasComputeType_t ct =
        (!bf16 && k->math == LL_CUDA_MATH_TF32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    LT_TRY(cublasLtMatmulDescCreate(&e->op, ct, CUDA_R_32F));
    const cublasOperation_t opa = k->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A is our B */
    const cublasOperation_t opb = k->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    switch (k->epi) {
    case LL_CUDA_EPI_BIAS: epi = CUBLASLT_EPILOGUE_BIAS; break;
    case LL_CUDA_EPI_BIAS_RELU: epi = CUBLASLT_EPILOGUE_RELU_BIAS; break;
    case LL_CUDA_EPI_BGRAD_A: epi = CUBLASLT_EPILOGUE_BGRADB; break; /* our A is its B */
    case LL_CUDA_EPI_BGRAD_B: epi = CUBLASLT_EPILOGUE_BGRADA; break;
    case LL_CUDA_EPI_BIAS_RELU_AUX: epi = CUBLASLT_EPILOGUE_RELU_AUX_BIAS; break;
    case LL_CUDA_EPI_DRELU: epi = CUBLASLT_EPILOGUE_DRELU; break;
    default: break;
    }
    LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (k->aux_ld) { /* the bitmask: its pointer's alignment is read by the heuristic, like the bias's */
        const int64_t ld = k->aux_ld;
        LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
        LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_ptr,
                                              sizeof aux_ptr));
    }
    if (epi_ptr) {
        const cudaDataType_t bt = cuda_type((ll_cuda_dtype)k->bias_t);
        LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        /* the heuristic reads the bias pointer's alignment (cublasLt.h), so it
         * must be set before the choice: this call's pointer, whose alignment
         * class is part of the key (set again per call, same class) */
        LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epi_ptr, sizeof epi_ptr));
    }
    /* column-major layouts of the swapped problem (see the top comment) */
    LT_TRY(cublasLtMatrixLayoutCreate(&e->la, cuda_type((ll_cuda_dtype)k->bt), (uint64_t)(k->tb ? k->K : k->N),
                                      (uint64_t)(k->tb ? k->N : k->K), (int64_t)k->ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&e->lb, cuda_type((ll_cuda_dtype)k->at), (uint64_t)(k->ta ? k->M : k->K),
                                      (uint64_t)(k->ta ? k->K : k->M), (int64_t)k->lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&e->lc, cuda_type((ll_cuda_dtype)k->ct), (uint64_t)k->N, (uint64_t)k->M,
                                      (int64_t)k->ldc));

    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = LT_WORKSPACE_BYTES;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    /* swapped: its A is our B, its B our A */
    const uint32_t al_a = (uint32_t)k->align_b, al_b = (uint32_t)k->align_a, al_c = (uint32_t)k->align_c;
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
    cublasLtMatmulHeuristicResult_t one;
    if (!res) res = &one, n_res = 1;
    int nres = 0;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(st->lt, e->op, e->la, e->lb, e->lc, e->lc, pref, n_res, res, &nres));
    if (nres < 1 || res[0].state != CUBLAS_STATUS_SUCCESS) {
        status = CUBLAS_STATUS_NOT_SUPPORTED;
        goto fail;
    }
    if (n_got) *n_got = nres;
    e->algo = res[0].algo;
    e->key = *k;
    e->used = 1;
    cublasLtMatmulPreferenceDestroy(pref);
    return CUBLAS_STATUS_SUCCESS;
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (e->la) cublasLtMatrixLayoutDestroy(e->la);
    if (e->lb) cublasLtMatrixLayoutDestroy(e->lb);
    if (e->lc) cublasLtMatrixLayoutDestroy(e->lc);
    if (e->op) cublasLtMatmulDescDestroy(e->op);
    memset(e, 0, sizeof *e);
    return status;
}

/* The cached entry for k, built on a miss; NULL with *status on failure.
 * Called with st->mu held. */
static void tune_or_defer(lt_state *st, lt_entry *e, float beta, cudaStream_t s);
static lt_entry *cache_get(lt_state *st, const lt_key *k, const void *epi_ptr, const void *aux_ptr, float beta,
                           cudaStream_t s, cublasStatus_t *status) {
    if (st->count >= LT_CACHE_MAX) cache_flush(st);
    size_t i = (size_t)(key_hash(k) & (LT_BUCKETS - 1));
    lt_entry *e;
    while ((e = &st->tab[i])->used) {
        if (!memcmp(&e->key, k, sizeof *k)) {
            *status = e->status;
            return e->status == CUBLAS_STATUS_SUCCESS ? e : NULL;
        }
        i = (i + 1) & (LT_BUCKETS - 1);
    }
    *status = entry_build(st, k, epi_ptr, aux_ptr, e, NULL, 0, NULL);
    st->count++;
    if (*status == CUBLAS_STATUS_SUCCESS) {
        if (st->tune) tune_or_defer(st, e, beta, s);
        return e;
    }
    /* nothing was launched: whatever the descriptor or the heuristic refused, with whichever
     * status, the caller may fall back (only a failed cublasLtMatmul must not be rerun) */
    *status = CUBLAS_STATUS_NOT_SUPPORTED;
    /* remember "no algorithm" so a caller's fallback path does not rerun the heuristic every call */
    e->used = 1;
    e->status = *status;
    e->key = *k;
    return NULL;
}

/* The cache key of d and the epilogue's pointer (bias or bias gradient); not 0: d has no
 * cuBLASLt kernel (NOT_SUPPORTED: the caller falls back) or is invalid */
static int key_of(const ll_cuda_gemm_desc *d, lt_key *kp, const void **epi_out) {
    if (d->M < 0 || d->N < 0 || d->K < 0) return CUBLAS_STATUS_INVALID_VALUE;
    /* K == 0 (C = beta C) and mixed operand types have no cuBLASLt kernel: the caller handles them */
    if (d->K == 0 || d->a_type != d->b_type) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->lda < (d->trans_a ? d->M : d->K) || d->ldb < (d->trans_b ? d->K : d->N) || d->ldc < d->N)
        return CUBLAS_STATUS_INVALID_VALUE;
    const void *epi_ptr = NULL;
    switch (d->epilogue) {
    case LL_CUDA_EPI_NONE: break;
    case LL_CUDA_EPI_BIAS:
    case LL_CUDA_EPI_BIAS_RELU: epi_ptr = d->bias; break;
    case LL_CUDA_EPI_BGRAD_A:
    case LL_CUDA_EPI_BGRAD_B: epi_ptr = d->bgrad; break;
    case LL_CUDA_EPI_BIAS_RELU_AUX: epi_ptr = d->bias; break;
    case LL_CUDA_EPI_DRELU: break;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
    const int aux = d->epilogue == LL_CUDA_EPI_BIAS_RELU_AUX || d->epilogue == LL_CUDA_EPI_DRELU;
    if (d->epilogue != LL_CUDA_EPI_NONE && d->epilogue != LL_CUDA_EPI_DRELU && !epi_ptr)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (aux && (!d->aux || d->aux_ld < d->N || d->aux_ld % 128)) return CUBLAS_STATUS_INVALID_VALUE;
    /* a bias in another type than D's: cublasLt.h allows it for IMMA and FP8 kernels only, and
     * cuBLASLt 13.0 on an H200 answered CUBLAS_STATUS_INVALID_VALUE for bf16 D with an fp32
     * bias (2026-11-26): not asked, left to the fallback */
    if ((d->epilogue == LL_CUDA_EPI_BIAS || d->epilogue == LL_CUDA_EPI_BIAS_RELU ||
         d->epilogue == LL_CUDA_EPI_BIAS_RELU_AUX) &&
        d->bias_type != d->c_type)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* the preferences cannot tell the heuristic the bias vector's alignment, and
     * epilogue kernels load it in vectors: leave an odd one to the fallback */
    if (epi_ptr && ptr_align(epi_ptr) < 16) return CUBLAS_STATUS_NOT_SUPPORTED;

    lt_key k;
    memset(&k, 0, sizeof k); /* hashed and compared bytewise */
    *epi_out = epi_ptr;
    k.ta = !!d->trans_a;
    k.tb = !!d->trans_b;
    k.M = d->M;
    k.N = d->N;
    k.K = d->K;
    k.lda = d->lda;
    k.ldb = d->ldb;
    k.ldc = d->ldc;
    k.at = d->a_type;
    k.bt = d->b_type;
    k.ct = d->c_type;
    k.epi = d->epilogue;
    k.bias_t = !epi_ptr                                                                   ? 0
               : (d->epilogue == LL_CUDA_EPI_BGRAD_A || d->epilogue == LL_CUDA_EPI_BGRAD_B) ? LL_CUDA_F32
                                                                                           : d->bias_type;
    k.math = d->a_type == LL_CUDA_F32 ? d->math : LL_CUDA_MATH_EXACT;
    k.align_a = ptr_align(d->A);
    k.align_b = ptr_align(d->B);
    k.align_c = ptr_align(d->C);
    k.align_bias = epi_ptr ? ptr_align(epi_ptr) : 0;
    k.aux_ld = aux ? d->aux_ld : 0;
    k.align_aux = aux ? ptr_align(d->aux) : 0;
    *kp = k;
    return 0;
}

int ll_cuda_gemm_lt(ll_backend *be, const ll_cuda_gemm_desc *d) {
    cudaStream_t stream = ll_cuda_enter(be);
    if (d->M < 0 || d->N < 0 || d->K < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (d->M == 0 || d->N == 0) return CUBLAS_STATUS_SUCCESS;
    lt_key k;
    const void *epi_ptr = NULL;
    const int kr = key_of(d, &k, &epi_ptr);
    if (kr) return kr;
    lt_state *st = state_of(be);
    pthread_mutex_lock(&st->mu);
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    lt_entry *e = cache_get(st, &k, epi_ptr, d->aux, d->beta, stream, &status);
    if (e) {
        if (epi_ptr)
            status = cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &epi_ptr, sizeof epi_ptr);
        if (k.aux_ld && status == CUBLAS_STATUS_SUCCESS)
            status = cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &d->aux,
                                                    sizeof d->aux);
        if (status == CUBLAS_STATUS_SUCCESS)
            status = cublasLtMatmul(st->lt, e->op, &d->alpha, d->B, e->la, d->A, e->lb, &d->beta, d->C, e->lc, d->C,
                                    e->lc, &e->algo, workspace_of(st, stream), LT_WORKSPACE_BYTES, stream);
    }
    pthread_mutex_unlock(&st->mu);
    return (int)status;
}

void ll_cuda_gemm_set_math(ll_backend *be, ll_cuda_math m) {
    lt_state *st = state_of(be);
    st->default_math = m;
    cublasSetMathMode(st->blas, m == LL_CUDA_MATH_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
}

/* ---- the op ---------------------------------------------------------------------------
 * ll_gemm_desc maps one to one onto ll_cuda_gemm_desc (both row-major; the
 * swap to column-major happens in entry_build): operand dtypes fp32/bf16,
 * BIAS/BIAS_RELU with the bias in its own dtype (the model passes C's, from
 * the weight copy: cuBLASLt fuses no other), BGRAD as BGRAD_A (cuBLASLt's
 * BGRADB; fp32, the type of the weight gradient D).  Two differences need care:
 *  - cuBLASLt OVERWRITES the bias gradient, the op ACCUMULATES (bgrad +=):
 *    the epilogue writes an fp32 [M] vector in scratch, an fp32 acc adds it;
 *  - cuBLASLt may refuse a combination (bias pointer under 16-byte alignment,
 *    an epilogue without a kernel for these types/transposes, K = 0): then a
 *    plain matmul (cuBLASLt, else cublasGemmEx) and the epilogue as kernels
 *    (kernels/gemm_epi.cu), so the op is always correct; warned once and
 *    counted (ll_backend_gemm_fallbacks: the step and decode tests require
 *    none, so a model call that cuBLASLt would refuse shows in CI).
 *    Seen with cuBLASLt 13.0 (gpu_test_typed_cuda; fp32 operands on an H200,
 *    2026-11-26, bf16 ones on an H100, 2026-11-27): BGRAD into an fp32 C
 *    with trans_a = 0 (its BGRADB on an untransposed B) is refused at every
 *    shape tried, into a bf16 C it runs; the model's weight gradients have
 *    trans_a = 1, which runs fused.  The emulation's stand-in refuses the same
 *    (tests/cuda_emu/emu_blas.cc). */

static ll_cuda_dtype op_type(ll_dtype t, const char *which) {
    if (t == LL_F32) return LL_CUDA_F32;
    if (t == LL_BF16) return LL_CUDA_BF16;
    ll_die("cuda gemm: operand %s is %s (fp32 or bf16 only)", which, ll_dtype_str(t));
}

/* The plain product through cuBLAS (no cuBLASLt algorithm): same swapped
 * operands; cublasGemmEx takes fp32 or bf16 A/B with fp32 or bf16 C, fp32 accumulation. */
static void blas_gemm(lt_state *st, cudaStream_t stream, const ll_cuda_gemm_desc *d, int lt_status) {
    if (!st->warned) {
        st->warned = 1;
        ll_warn("cuBLASLt has no algorithm for gemm M %d N %d K %d (ld %d/%d/%d, status %d); using cublasGemmEx for "
                "such shapes",
                d->M, d->N, d->K, d->lda, d->ldb, d->ldc, lt_status);
    }
    const float a = d->alpha, b = d->beta;
    cublasSetStream(st->blas, stream); /* the backend's stream now (a conditional's body has its own) */
    cublasStatus_t bs = cublasGemmEx(st->blas, d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, d->N, d->M, d->K, &a, d->B,
                                     cuda_type(d->b_type), d->ldb, d->A, cuda_type(d->a_type), d->lda, &b, d->C,
                                     cuda_type(d->c_type), d->ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (bs != CUBLAS_STATUS_SUCCESS)
        ll_die("cublasGemmEx failed (status %d; cuBLASLt status %d): trans %d/%d, M %d N %d K %d, ld %d/%d/%d", (int)bs,
               lt_status, d->trans_a, d->trans_b, d->M, d->N, d->K, d->lda, d->ldb, d->ldc);
}

void ll_cuda_gemm_sync_check(const ll_cuda_gemm_desc *d, int epi, const char *note) {
    if (!ll_cuda_sync_checking()) return;
    char what[240];
    const char *ty[2] = {"fp32", "bf16"};
    snprintf(what, sizeof what, "gemm (cuBLASLt: trans %d/%d, M %d N %d K %d, %s x %s -> %s, epilogue %d, %s%s)",
             d->trans_a, d->trans_b, d->M, d->N, d->K, ty[d->a_type == LL_CUDA_BF16], ty[d->b_type == LL_CUDA_BF16],
             ty[d->c_type == LL_CUDA_BF16], epi,
             d->a_type == LL_CUDA_F32 && d->math == LL_CUDA_MATH_TF32 ? "TF32" : "exact fp32 accumulation", note);
    ll_cuda_sync_check(what, __FILE__, __LINE__);
}

static void lt_die(const ll_cuda_gemm_desc *d, int rc) {
    ll_die("cuBLASLt matmul failed (status %d, not 'not supported': no fallback, the product may already have run): "
           "trans %d/%d, M %d N %d K %d, ld %d/%d/%d, epilogue %d",
           rc, d->trans_a, d->trans_b, d->M, d->N, d->K, d->lda, d->ldb, d->ldc, (int)d->epilogue);
}

/* ll_gemm_desc to ll_cuda_gemm_desc (bgrad left NULL: the caller decides where it goes) */
static ll_cuda_gemm_desc cuda_desc_of(const lt_state *st, const ll_gemm_desc *g) {
    const int bias = g->epi == LL_EPI_BIAS || g->epi == LL_EPI_BIAS_RELU || g->epi == LL_EPI_BIAS_RELU_AUX;
    const int bgrad = g->epi == LL_EPI_BGRAD;
    const int aux = g->epi == LL_EPI_BIAS_RELU_AUX || g->epi == LL_EPI_DRELU;
    const ll_cuda_dtype at = op_type(g->a_type, "A"), bt = op_type(g->b_type, "B"), ct = op_type(g->c_type, "C");
    const ll_cuda_dtype biast = bias ? op_type(g->bias_type, "bias") : LL_CUDA_F32;
    if (at != bt) ll_die("cuda gemm: A is %s but B is %s (one operand dtype)", ll_dtype_str(g->a_type),
                         ll_dtype_str(g->b_type));
    return (ll_cuda_gemm_desc){
        .trans_a = g->trans_a,
        .trans_b = g->trans_b,
        .M = g->M,
        .N = g->N,
        .K = g->K,
        .alpha = g->alpha,
        .beta = g->beta,
        .A = g->A,
        .a_type = at,
        .lda = g->lda,
        .B = g->B,
        .b_type = bt,
        .ldb = g->ldb,
        .C = g->C,
        .c_type = ct,
        .ldc = g->ldc,
        .epilogue = g->epi == LL_EPI_BIAS_RELU_AUX ? LL_CUDA_EPI_BIAS_RELU_AUX
                    : g->epi == LL_EPI_DRELU       ? LL_CUDA_EPI_DRELU
                    : bias                         ? (g->epi == LL_EPI_BIAS_RELU ? LL_CUDA_EPI_BIAS_RELU : LL_CUDA_EPI_BIAS)
                    : bgrad                        ? LL_CUDA_EPI_BGRAD_A
                                                   : LL_CUDA_EPI_NONE,
        .bias = bias ? g->bias : NULL,
        .bias_type = biast,
        .math = st->default_math,
        .aux = aux ? g->aux : NULL,
        .aux_ld = aux ? ll_cuda_relu_mask_ld(g->N) : 0,
    };
}

static void gemm_run(ll_backend *be, const ll_gemm_desc *g) {
    const int mask_out = g->epi == LL_EPI_BIAS_RELU_AUX, drelu = g->epi == LL_EPI_DRELU;
    const int bias = g->epi == LL_EPI_BIAS || g->epi == LL_EPI_BIAS_RELU || mask_out;
    const int relu = g->epi == LL_EPI_BIAS_RELU || mask_out;
    const int bgrad = g->epi == LL_EPI_BGRAD;
    if (bias && !g->bias) ll_die("cuda gemm: a bias epilogue without a bias");
    if (bgrad && !g->bgrad) ll_die("cuda gemm: a BGRAD epilogue without bgrad");
    if ((mask_out || drelu) && !g->aux) ll_die("cuda gemm: a ReLU-mask epilogue without the mask");
    if (drelu && (!g->relu_y || g->beta != 0 || g->ldc != g->N))
        ll_die("cuda gemm: DRELU needs the ReLU's output, beta 0 and a contiguous C");
    cudaStream_t s = ll_cuda_enter(be);
    lt_state *st = state_of(be);
    ll_cuda_gemm_desc d = cuda_desc_of(st, g);
    const ll_cuda_dtype at = d.a_type, ct = d.c_type, biast = d.bias_type;
    /* DRELU reads the mask only where cuBLASLt wrote it (else relu_y, after a plain product) */
    const int drelu_kernel = drelu && !ll_cuda_relu_mask_written(g->aux);
    if (drelu_kernel) d.epilogue = LL_CUDA_EPI_NONE, d.aux = NULL, d.aux_ld = 0;
    if (mask_out) ll_cuda_relu_mask_note(g->aux, 0); /* until cuBLASLt has run it */
    if (g->K <= 0) { /* C = relu?(beta C + bias), bgrad += 0: no product, no cuBLASLt kernel (DRELU: C = 0) */
        if (g->beta != 1 || bias)
            LL_CU(ll_cuda_gemm_epilogue(s, ct, g->C, g->ldc, g->M, g->N, g->beta, bias ? g->bias : NULL, biast, relu));
        if (bgrad && g->bgrad_set) LL_CU(cudaMemsetAsync(g->bgrad, 0, sizeof(float) * (size_t)g->M, s));
        return;
    }
    /* cuBLASLt writes the bias gradient: straight into bgrad when it is to be set (a zero
     * gradient), else into scratch and added */
    float *bg_tmp = NULL;
    const int bgrad_split = bgrad && st->bgrad_split; /* (the default: cuBLASLt may split K only without it) */
    if (bgrad_split) d.epilogue = LL_CUDA_EPI_NONE;
    else if (bgrad) d.bgrad = g->bgrad_set ? g->bgrad : (bg_tmp = ll_cuda_scratch(be, sizeof(float) * (size_t)g->M));
    int rc = ll_cuda_gemm_lt(be, &d);
    if (rc == 0 && !bgrad_split) {
        ll_cuda_gemm_sync_check(&d, (int)g->epi, ""); /* (a no-op unless LL_CUDA_SYNC_CHECK) */
        if (bg_tmp) LL_CU(ll_cuda_acc(s, LL_CUDA_F32, g->bgrad, bg_tmp, (size_t)g->M));
        if (mask_out) ll_cuda_relu_mask_note(g->aux, 1);
        if (drelu_kernel) LL_CU(ll_cuda_relu_bwd(s, ct, g->C, g->relu_y, (size_t)g->M * (size_t)g->N));
        return;
    }
    /* only "no algorithm for this" falls back; any other failure may have
     * happened after the matmul started (with beta = 1 a rerun would add twice) */
    if (rc != 0 && rc != CUBLAS_STATUS_NOT_SUPPORTED) lt_die(&d, rc);
    if (rc != 0) atomic_fetch_add_explicit(&st->fallbacks, 1, memory_order_relaxed);
    if (rc != 0 && ll_cuda_side_on(be)) { /* the fallback in order (cuBLAS's workspace is one per handle) */
        ll_cuda_side_end(be);
        s = ll_cuda_enter(be);
    }
    if (rc != 0 && d.epilogue != LL_CUDA_EPI_NONE) { /* refused with the epilogue: plain product, epilogue kernels after */
        if (!st->warned_epi) {
            st->warned_epi = 1;
            ll_warn("cuBLASLt refused gemm epilogue %d (M %d N %d K %d, %s x %s -> %s, bias %s, status %d); using a "
                    "separate kernel for such calls",
                    (int)g->epi, g->M, g->N, g->K, ll_dtype_str(g->a_type), ll_dtype_str(g->b_type),
                    ll_dtype_str(g->c_type), bias ? ll_dtype_str(g->bias_type) : "-", rc);
        }
        d.epilogue = LL_CUDA_EPI_NONE;
        d.bias = NULL;
        d.bgrad = NULL;
        d.aux = NULL;
        d.aux_ld = 0;
        rc = ll_cuda_gemm_lt(be, &d);
        if (rc != 0 && rc != CUBLAS_STATUS_NOT_SUPPORTED) lt_die(&d, rc);
    }
    if (rc != 0) blas_gemm(st, s, &d, rc);
    ll_cuda_sync_check(bgrad_split ? "gemm (dW, then its bias gradient)" : "gemm (fallback)", __FILE__, __LINE__);
    if (bias) LL_CU(ll_cuda_gemm_epilogue(s, ct, g->C, g->ldc, g->M, g->N, 1.0f, g->bias, biast, relu));
    if (drelu) LL_CU(ll_cuda_relu_bwd(s, ct, g->C, g->relu_y, (size_t)g->M * (size_t)g->N));
    if (bgrad) { /* bgrad[m] += sum_k op(A)[m, k]: A stored [K, M] (trans_a: column sums) or [M, K] (row sums) */
        const int by_cols = !!g->trans_a, rows = by_cols ? g->K : g->M, cols = by_cols ? g->M : g->K;
        const size_t nb = ll_cuda_bias_grad_scratch_bytes(rows, cols, by_cols);
        LL_CU(ll_cuda_bias_grad(s, at, g->bgrad, g->A, g->lda, rows, cols, by_cols, g->bgrad_set,
                                nb ? ll_cuda_scratch(be, nb) : NULL));
    }
}

/* A weight gradient (g->side) on the side stream, beside the ops queued after it until be->join */
static void cu_gemm(ll_backend *be, const ll_gemm_desc *g) {
    if (g->M <= 0 || g->N <= 0) return;
    const int side = g->side && ll_cuda_side_begin(be, 1);
    gemm_run(be, g);
    if (side) ll_cuda_side_end(be);
}

/* ---- timing cuBLASLt's candidates: the benchmark's survey and the autotune ----------------
 * Both run a key's first n candidates on operands of their own (one allocation,
 * 256-byte aligned like the arena's; the bias at the key's own alignment, which the
 * heuristic reads off the pointer), every byte 0x3c (~0.0115 in bf16 and fp32:
 * finite, not zero, so the tensor cores do the usual work), each timed with CUDA
 * events over reps calls after two untimed ones.  Never inside a capture. */

static size_t esize(int t) { return t == LL_CUDA_BF16 ? 2 : 4; }
static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

/* microseconds per call; -1: a call failed; -2: the calls ran, the events gave no time (the
 * CUDA emulation refuses timings) */
static double time_algo(lt_state *st, const lt_entry *e, const cublasLtMatmulAlgo_t *algo, const void *A,
                        const void *B, void *C, float beta, int reps, cudaStream_t s, cudaEvent_t ev0,
                        cudaEvent_t ev1) {
    const float alpha = 1;
    for (int i = 0; i < 2 + reps; i++) {
        if (i == 2 && cudaEventRecord(ev0, s) != cudaSuccess) return -1;
        if (cublasLtMatmul(st->lt, e->op, &alpha, B, e->la, A, e->lb, &beta, C, e->lc, C, e->lc, algo,
                           workspace_of(st, s), LT_WORKSPACE_BYTES, s) != CUBLAS_STATUS_SUCCESS)
            return -1;
    }
    float ms = 0;
    if (cudaEventRecord(ev1, s) != cudaSuccess || cudaEventSynchronize(ev1) != cudaSuccess) return -1;
    if (cudaEventElapsedTime(&ms, ev0, ev1) != cudaSuccess) {
        (void)cudaGetLastError();
        return -2;
    }
    return 1e3 * (double)ms / reps;
}

/* Key k's first n candidates into res, their times into us; how many (0: no cuBLASLt algorithm,
 * -1: no memory or a CUDA error). */
static int time_candidates(lt_state *st, const lt_key *k, float beta, int n, int reps, cudaStream_t s,
                           cublasLtMatmulHeuristicResult_t *res, double *us) {
    const size_t na = up256(esize(k->at) * (size_t)(k->ta ? k->K : k->M) * (size_t)k->lda),
                 nb = up256(esize(k->bt) * (size_t)(k->tb ? k->N : k->K) * (size_t)k->ldb),
                 nc = up256(esize(k->ct) * (size_t)k->M * (size_t)k->ldc),
                 ne = up256(256 + 4 * (size_t)(k->M > k->N ? k->M : k->N)),
                 nx = k->aux_ld ? up256(256 + (size_t)k->aux_ld / 8 * (size_t)k->M) : 0, all = na + nb + nc + ne + nx;
    char *buf = NULL;
    if (cudaMalloc((void **)&buf, all) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    cudaEvent_t ev0 = NULL, ev1 = NULL;
    lt_entry e;
    memset(&e, 0, sizeof e);
    int got = -1;
    if (cudaMemsetAsync(buf, 0x3c, all, s) == cudaSuccess && cudaEventCreate(&ev0) == cudaSuccess &&
        cudaEventCreate(&ev1) == cudaSuccess) {
        const void *epi = k->align_bias ? buf + na + nb + nc + (k->align_bias % 256) : NULL;
        const void *aux = k->aux_ld ? buf + na + nb + nc + ne + (k->align_aux % 256) : NULL;
        got = 0;
        if (entry_build(st, k, epi, aux, &e, res, n, &got) != CUBLAS_STATUS_SUCCESS) got = 0;
        for (int j = 0; j < got; j++) {
            us[j] = res[j].state == CUBLAS_STATUS_SUCCESS && res[j].workspaceSize <= LT_WORKSPACE_BYTES
                        ? time_algo(st, &e, &res[j].algo, buf, buf + na, buf + na + nb, beta, reps, s, ev0, ev1)
                        : -1;
            if (us[j] == -1) (void)cudaGetLastError(); /* a candidate that failed: the next may run */
        }
    }
    if (e.used) entry_destroy(&e);
    cudaStreamSynchronize(s);
    if (ev0) cudaEventDestroy(ev0);
    if (ev1) cudaEventDestroy(ev1);
    cudaFree(buf);
    return got;
}

static int capturing(cudaStream_t s) {
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(s, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone;
}

static int algo_attr(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at) {
    uint32_t v = 0; /* (CONFIG_ID is an int32, the others uint32: same size) */
    size_t got = 0;
    return cublasLtMatmulAlgoConfigGetAttribute(a, at, &v, sizeof v, &got) == CUBLAS_STATUS_SUCCESS ? (int)v : -1;
}

int ll_cuda_gemm_survey(ll_backend *be, const ll_gemm_desc *g, int max, int reps, ll_gemm_algo_time *out) {
    if (max > LL_GEMM_SURVEY_MAX) max = LL_GEMM_SURVEY_MAX;
    if (max < 1 || reps < 1 || g->M <= 0 || g->N <= 0 || g->K <= 0) return 0;
    cudaStream_t s = ll_cuda_enter(be);
    if (capturing(s)) return -1;
    lt_state *st = state_of(be);
    ll_cuda_gemm_desc d = cuda_desc_of(st, g);
    /* the key of the product on 256-byte aligned operands (as the arena's); any pointer will do */
    static const float dummy[64] __attribute__((aligned(256)));
    d.A = d.B = d.C = (void *)dummy;
    d.bias = d.bgrad = (float *)dummy;
    if (d.aux_ld) d.aux = (void *)dummy; /* (a shape's descriptor has no pointers) */
    lt_key k;
    const void *epi_ptr = NULL;
    if (key_of(&d, &k, &epi_ptr)) return 0; /* no cuBLASLt kernel for it: the op falls back */
    cublasLtMatmulHeuristicResult_t res[LL_GEMM_SURVEY_MAX];
    double us[LL_GEMM_SURVEY_MAX];
    pthread_mutex_lock(&st->mu); /* (the workspace) */
    const int n = time_candidates(st, &k, g->beta, max, reps, s, res, us);
    pthread_mutex_unlock(&st->mu);
    for (int j = 0; j < n; j++) {
        const cublasLtMatmulAlgo_t *a = &res[j].algo;
        out[j] = (ll_gemm_algo_time){
            .us = us[j],
            .algo_id = algo_attr(a, CUBLASLT_ALGO_CONFIG_ID),
            .tile = algo_attr(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
            .stages = algo_attr(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
            .splitk = algo_attr(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
            .swizzle = algo_attr(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
            .workspace = res[j].workspaceSize,
            .waves = res[j].wavesCount,
        };
    }
    return n;
}

/* LL_CUDA_GEMM_TUNE=N: a new key's algorithm is the fastest of the heuristic's first N (timed
 * as above, 10 calls each), the heuristic's first unless another is 3% faster.  Under
 * a capture the key waits (pending) until the capture ends (ll_cuda_gemm_tune_pending). */
#define TUNE_REPS 10
static int tune_entry(lt_state *st, lt_entry *e, float beta, cudaStream_t s) {
    cublasLtMatmulHeuristicResult_t res[LL_GEMM_SURVEY_MAX];
    double us[LL_GEMM_SURVEY_MAX];
    const int n = time_candidates(st, &e->key, beta, st->tune, TUNE_REPS, s, res, us);
    st->tuned++;
    int best = -1;
    for (int j = 0; j < n; j++)
        if (us[j] > 0 && (best < 0 || us[j] < us[best])) best = j;
#ifdef LL_CUDA_EMU
    /* the emulation gives no times: LL_CUDA_EMU_TUNE_PICK=j takes candidate j, so a test can run
     * the switch (and the graphs captured before it dropped) */
    const char *pick = getenv("LL_CUDA_EMU_TUNE_PICK");
    if (best < 0 && pick && atoi(pick) > 0 && atoi(pick) < n) best = atoi(pick), us[0] = 2, us[best] = 1;
#endif
    /* (the entry has the first choice; one that failed to run is left for any that ran) */
    if (best <= 0 || (us[0] > 0 && !(us[best] < 0.97 * us[0]))) return 0;
    e->algo = res[best].algo;
    st->switched++;
    return 1;
}

static void tune_or_defer(lt_state *st, lt_entry *e, float beta, cudaStream_t s) {
    if (!capturing(s)) {
        tune_entry(st, e, beta, s);
        return;
    }
    if (st->n_pending == st->cap_pending) {
        st->cap_pending = st->cap_pending ? 2 * st->cap_pending : 64;
        st->pending = ll_realloc(st->pending, (size_t)st->cap_pending * sizeof *st->pending);
    }
    st->pending[st->n_pending++] = (lt_pending){(int)(e - st->tab), beta};
}

int ll_cuda_gemm_tune_pending(ll_backend *be) {
    lt_state *st = state_of(be);
    cudaStream_t s = ll_cuda_enter(be);
    int switched = 0;
    pthread_mutex_lock(&st->mu);
    if (st->n_pending && !capturing(s)) {
        for (int i = 0; i < st->n_pending; i++) {
            lt_entry *e = &st->tab[st->pending[i].slot];
            if (e->used && e->status == CUBLAS_STATUS_SUCCESS) switched += tune_entry(st, e, st->pending[i].beta, s);
        }
        st->n_pending = 0;
    }
    pthread_mutex_unlock(&st->mu);
    return switched;
}

void ll_cuda_gemm_tune_stats(ll_backend *be, uint64_t *tuned, uint64_t *switched) {
    lt_state *st = state_of(be);
    pthread_mutex_lock(&st->mu);
    *tuned = st->tuned;
    *switched = st->switched;
    pthread_mutex_unlock(&st->mu);
}

int ll_cuda_gemm_lt_side(ll_backend *be, cudaStream_t side) {
    lt_state *st = state_of(be);
    pthread_mutex_lock(&st->mu);
    if (!st->workspace_side) {
        const cudaError_t e = cudaMalloc(&st->workspace_side, LT_WORKSPACE_BYTES);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st->workspace_side = NULL;
            pthread_mutex_unlock(&st->mu);
            return ll_fail("CUDA device %d: cannot allocate the side stream's 32 MiB cuBLASLt workspace: %s",
                           ll_cuda_device(be), cudaGetErrorString(e));
        }
    }
    st->side = side;
    pthread_mutex_unlock(&st->mu);
    return 0;
}

uint64_t ll_cuda_gemm_fallbacks(ll_backend *be) {
    return (uint64_t)atomic_load_explicit(&state_of(be)->fallbacks, memory_order_relaxed);
}

int ll_cuda_register_gemm_lt(ll_backend *be) {
    int dev = ll_cuda_device(be);
    if (dev < 0 || dev >= LT_MAX_DEVICES) return ll_fail("CUDA device %d: too many devices for cuBLASLt", dev);
    ll_cuda_enter(be);
    if (!g_lt[dev]) {
        lt_state *st = ll_calloc(1, sizeof *st);
        cublasStatus_t s = cublasLtCreate(&st->lt);
        if (s != CUBLAS_STATUS_SUCCESS) {
            free(st);
            return ll_fail("cannot initialise cuBLASLt on device %d (status %d)", dev, (int)s);
        }
        cudaError_t e = cudaMalloc(&st->workspace, LT_WORKSPACE_BYTES);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            cublasLtDestroy(st->lt);
            free(st);
            return ll_fail("CUDA device %d: cannot allocate the 32 MiB cuBLASLt workspace: %s", dev,
                           cudaGetErrorString(e));
        }
        s = cublasCreate(&st->blas);
        if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(st->blas, ll_cuda_stream(be));
        if (s != CUBLAS_STATUS_SUCCESS) {
            cudaFree(st->workspace);
            cublasLtDestroy(st->lt);
            free(st);
            return ll_fail("cannot initialise cuBLAS on device %d (status %d)", dev, (int)s);
        }
        cublasSetMathMode(st->blas, CUBLAS_DEFAULT_MATH); /* exact fp32, like the cuBLASLt path */
        st->tab = ll_calloc(LT_BUCKETS, sizeof *st->tab);
        pthread_mutex_init(&st->mu, NULL);
        st->default_math = LL_CUDA_MATH_EXACT; /* parity with the CPU until a config asks for TF32 */
        const char *tv = getenv("LL_CUDA_GEMM_TUNE");
        if (tv && *tv && strcmp(tv, "0")) {
            char *end = NULL;
            const long n = strtol(tv, &end, 10);
            if (*end || n < 2 || n > LL_GEMM_SURVEY_MAX)
                ll_die("LL_CUDA_GEMM_TUNE=%s: the number of cuBLASLt candidates to time per matmul shape, 2 to %d "
                       "(0: off)",
                       tv, LL_GEMM_SURVEY_MAX);
            st->tune = (int)n;
            ll_log("cuBLASLt autotune (LL_CUDA_GEMM_TUNE=%d): each new matmul shape runs the fastest of the "
                   "heuristic's first %d algorithms (timed once; runs may then differ in the last bits)",
                   st->tune, st->tune);
        }
        const char *bg = getenv("LL_CUDA_BGRAD_EPILOGUE");
        if (bg && *bg && strcmp(bg, "0") && strcmp(bg, "1"))
            ll_die("LL_CUDA_BGRAD_EPILOGUE=%s: want 1 (weight gradients with cuBLASLt's bias-gradient epilogue) or 0 "
                   "(plain products and the bias-gradient kernel: the default)",
                   bg);
        st->bgrad_split = !ll_backend_bgrad_epilogue_asked();
        if (!st->bgrad_split)
            ll_log("LL_CUDA_BGRAD_EPILOGUE=1: weight gradients with cuBLASLt's bias-gradient epilogue (an A/B: "
                   "an H200 ran ll64's step 4.4 ms slower so)");
        g_lt[dev] = st;
    }
    be->gemm = cu_gemm;
    return 0;
}
