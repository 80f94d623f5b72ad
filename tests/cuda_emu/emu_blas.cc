/* A strict cuBLASLt (and cublasGemmEx) stand-in on OpenBLAS, for the CUDA
 * emulation (tests only).
 *
 * Same column-major layouts, transposes, leading dimensions and alpha/beta as
 * cuBLASLt; beta = 0 never reads C (it may be NaN garbage).  Products are
 * OpenBLAS sgemm on fp32 copies of the operands: bf16 operands widen exactly
 * (fp32 accumulation), TF32 compute rounds the inputs to 10 mantissa bits
 * (round to nearest, ties away, as cvt.rna.tf32); then alpha, beta C, the
 * epilogue (BIAS, RELU_BIAS, BGRADA, BGRADB) in fp32 and one rounding of D.
 *
 * Strict: the heuristic refuses what cuBLASLt's documentation says it does not
 * support, so a refused epilogue shows on the CPU: operand types other than
 * fp32/fp32 or bf16/bf16 -> fp32 or bf16, a bias or bias-gradient type other
 * than D's (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: the exceptions are
 * IMMA and FP8 kernels; INVALID_VALUE, as cuBLASLt 13.0 answers on an H200),
 * BGRADB of an untransposed B into an fp32 D (refused there with fp32
 * operands, 2026-11-26, and with bf16 ones on an H100, 2026-11-27), other
 * epilogues, K = 0, leading dimensions below the rows.  The algorithm it returns assumes the alignments it was told (the
 * MIN_ALIGNMENT preferences, default 256 bytes, and the bias pointer's, read
 * at heuristic time: NULL counts as perfectly aligned); a matmul with a less
 * aligned pointer is the misaligned access a GPU would fault on, reported and
 * refused with CUBLAS_STATUS_INVALID_VALUE.
 *
 * A workspace must be device memory of the size given, and is one stream's: a
 * workspace used from two streams that may run at once (a stream that joined a
 * capture by an event counts as its own; a conditional body's capture as the
 * graph's) is reported and refused, as two products could mix their split-K
 * partials on a GPU.
 *
 * LL_CUDA_EMU_LT_REFUSE=epilogue refuses every epilogue, =relu_mask the two
 * of the ReLU mask (RELU_AUX_BIAS, DRELU), =all every matmul,
 * so the callers' fallbacks (kernels/gemm_epi.cu, cublasGemmEx) run too;
 * =fail runs every matmul and then reports CUBLAS_STATUS_EXECUTION_FAILED. */
#include <cblas.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <map>
#include <mutex>
#include <vector>

#include "emu_internal.h"

struct cublasLtContext {
    int magic;
};
struct cublasContext {
    cudaStream_t stream;
    cublasMath_t math;
};

namespace {

struct lt_desc {
    cublasComputeType_t compute;
    cudaDataType scale;
    int ta, tb;
    cublasLtEpilogue_t epi;
    const void *bias;
    int bias_type; /* -1: D's type */
    void *aux;      /* RELU_AUX_BIAS / DRELU: the ReLU bitmask */
    int64_t aux_ld; /* its leading dimension, in bits */
};
struct lt_layout {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};
struct lt_pref {
    uint64_t ws;
    uint32_t align[4]; /* A B C D */
};
enum { ALGO_MAGIC = 0x11e3 };

int ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a & (uintptr_t)(al - 1))) al >>= 1;
    return al;
}
size_t type_bytes(cudaDataType t) { return t == CUDA_R_16BF ? 2 : 4; }
float load(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}
void store(void *p, cudaDataType t, size_t i, float v) {
    if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else ((float *)p)[i] = v;
}
float tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u; /* finite: round, ties away */
    memcpy(&x, &u, 4);
    return x;
}

const char *refuse_mode() {
    const char *e = ll_emu::env("LL_CUDA_EMU_LT_REFUSE");
    return e ? e : "";
}
void verbose(const char *msg) {
    if (ll_emu::env("LL_CUDA_EMU_VERBOSE")) fprintf(stderr, "cuda-emu: cuBLASLt: %s\n", msg);
}

/* A dense fp32 copy of a stored matrix (rows x cols at ld). */
std::vector<float> widen(const void *p, cudaDataType t, uint64_t rows, uint64_t cols, int64_t ld, int round_tf32) {
    std::vector<float> f(rows * cols);
    for (uint64_t j = 0; j < cols; j++)
        for (uint64_t i = 0; i < rows; i++) {
            float v = load(p, t, i + j * (uint64_t)ld);
            f[i + j * rows] = round_tf32 ? tf32(v) : v;
        }
    return f;
}

struct gemm_job {
    int ta, tb, m, n, k;
    float alpha, beta;
    const void *A, *B, *C;
    void *D;
    cudaDataType at, bt, ct, dt, bias_t;
    int64_t lda, ldb, ldc, ldd;
    int tf32;
    cublasLtEpilogue_t epi;
    const void *bias;
    uint8_t *aux;
    int64_t aux_ld;
};

/* The ReLU bitmask's bit of element (i, j): bit i + j * ld, least significant bit of each byte
 * first.  A GUESS: cuBLASLt does not document the order (tests/gpu/test_relu_mask_cuda.c reads
 * it off a GPU).  ll's FFN uses the mask only between these two epilogues, never reading a bit
 * itself (src/backend/cuda/cuda_relu_mask.c), so its results do not depend on the order. */
static size_t mask_bit(int64_t ld, int i, int j) { return (size_t)i + (size_t)j * (size_t)ld; }

/* Runs on the stream: D = epi(alpha op(A) op(B) + beta C). */
void gemm_run(const gemm_job &g) {
    const uint64_t ar = g.ta ? g.k : g.m, ac = g.ta ? g.m : g.k, br = g.tb ? g.n : g.k, bc = g.tb ? g.k : g.n;
    std::vector<float> a = widen(g.A, g.at, ar, ac, g.lda, g.tf32), b = widen(g.B, g.bt, br, bc, g.ldb, g.tf32);
    std::vector<float> t((size_t)g.m * g.n);
    cblas_sgemm(CblasColMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, g.m, g.n, g.k,
                1.0f, a.data(), (int)ar, b.data(), (int)br, 0.0f, t.data(), g.m);
    for (int j = 0; j < g.n; j++)
        for (int i = 0; i < g.m; i++) {
            float v = g.alpha * t[(size_t)i + (size_t)j * g.m];
            if (g.beta != 0.0f) v += g.beta * load(g.C, g.ct, (size_t)i + (size_t)j * g.ldc);
            if (g.epi == CUBLASLT_EPILOGUE_BIAS || g.epi == CUBLASLT_EPILOGUE_RELU_BIAS ||
                g.epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS)
                v += load(g.bias, g.bias_t, i);
            if (g.epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS) { /* the sign into the mask, then the ReLU */
                const size_t bit = mask_bit(g.aux_ld, i, j);
                g.aux[bit >> 3] = (uint8_t)((g.aux[bit >> 3] & ~(1u << (bit & 7))) | (unsigned)(v > 0.0f) << (bit & 7));
            }
            if (g.epi == CUBLASLT_EPILOGUE_DRELU) {
                const size_t bit = mask_bit(g.aux_ld, i, j);
                if (!(g.aux[bit >> 3] >> (bit & 7) & 1)) v = 0.0f;
            }
            if ((g.epi == CUBLASLT_EPILOGUE_RELU_BIAS || g.epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS) && v < 0.0f) v = 0.0f;
            store(g.D, g.dt, (size_t)i + (size_t)j * g.ldd, v);
        }
    if (g.epi == CUBLASLT_EPILOGUE_BGRADA) /* [m]: op(A) summed over k */
        for (int i = 0; i < g.m; i++) {
            float s = 0;
            for (int l = 0; l < g.k; l++) s += g.ta ? a[(size_t)l + (size_t)i * ar] : a[(size_t)i + (size_t)l * ar];
            store((void *)g.bias, g.bias_t, i, s);
        }
    if (g.epi == CUBLASLT_EPILOGUE_BGRADB) /* [n]: op(B) summed over k */
        for (int j = 0; j < g.n; j++) {
            float s = 0;
            for (int l = 0; l < g.k; l++) s += g.tb ? b[(size_t)j + (size_t)l * br] : b[(size_t)l + (size_t)j * br];
            store((void *)g.bias, g.bias_t, j, s);
        }
}

/* The support rules the heuristic applies; CUBLAS_STATUS_SUCCESS or why not. */
cublasStatus_t supported(const lt_desc *d, const lt_layout *A, const lt_layout *B, const lt_layout *C,
                         const lt_layout *D, const char **why) {
    const char *mode = refuse_mode();
    if (!strcmp(mode, "all")) return *why = "LL_CUDA_EMU_LT_REFUSE=all", CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->epi != CUBLASLT_EPILOGUE_DEFAULT && !strcmp(mode, "epilogue"))
        return *why = "LL_CUDA_EMU_LT_REFUSE=epilogue", CUBLAS_STATUS_NOT_SUPPORTED;
    if ((d->epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || d->epi == CUBLASLT_EPILOGUE_DRELU) && !strcmp(mode, "relu_mask"))
        return *why = "LL_CUDA_EMU_LT_REFUSE=relu_mask", CUBLAS_STATUS_NOT_SUPPORTED;
    if (A->type != B->type || (A->type != CUDA_R_32F && A->type != CUDA_R_16BF))
        return *why = "operand types", CUBLAS_STATUS_NOT_SUPPORTED;
    if (C->type != D->type || (D->type != CUDA_R_32F && D->type != CUDA_R_16BF) ||
        (A->type == CUDA_R_32F && D->type != CUDA_R_32F))
        return *why = "output type", CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->scale != CUDA_R_32F) return *why = "scale type", CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->compute != CUBLAS_COMPUTE_32F && !(d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && A->type == CUDA_R_32F))
        return *why = "compute type", CUBLAS_STATUS_NOT_SUPPORTED;
    switch (d->epi) {
    case CUBLASLT_EPILOGUE_DEFAULT: break;
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB:
        /* as cuBLASLt 13.0 answered on an H200 (2026-11-26): INVALID_VALUE, not NOT_SUPPORTED */
        if (d->bias_type != -1 && d->bias_type != (int)D->type)
            return *why = "bias type differs from D's type (cublasLt.h: only IMMA and FP8 kernels allow that)",
                   CUBLAS_STATUS_INVALID_VALUE;
        /* refused there at every shape tried: a bias gradient of an untransposed B into an fp32 D
         * (fp32 operands on an H200, bf16 ones on an H100; into a bf16 D it runs) */
        if (d->epi == CUBLASLT_EPILOGUE_BGRADB && D->type == CUDA_R_32F && !d->tb)
            return *why = "BGRADB into an fp32 D with transb N (refused by cuBLASLt 13.0 on an H100 and an H200)",
                   CUBLAS_STATUS_NOT_SUPPORTED;
        break;
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DRELU:
        if (d->epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS && d->bias_type != -1 && d->bias_type != (int)D->type)
            return *why = "bias type differs from D's type", CUBLAS_STATUS_INVALID_VALUE;
        if (d->aux_ld < (int64_t)D->rows || d->aux_ld % 128)
            return *why = "the ReLU bitmask's leading dimension (bits) is below D's rows or not a multiple of 128",
                   CUBLAS_STATUS_INVALID_VALUE;
        break;
    default: return *why = "epilogue", CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const uint64_t m = D->rows, n = D->cols, k = d->ta ? A->rows : A->cols;
    if (C->rows != m || C->cols != n || (d->ta ? A->cols : A->rows) != m || (d->tb ? B->rows : B->cols) != n ||
        (d->tb ? B->cols : B->rows) != k)
        return *why = "shapes", CUBLAS_STATUS_INVALID_VALUE;
    if (k == 0) return *why = "K = 0", CUBLAS_STATUS_NOT_SUPPORTED;
    if (A->ld < (int64_t)A->rows || B->ld < (int64_t)B->rows || C->ld < (int64_t)C->rows || D->ld < (int64_t)D->rows)
        return *why = "leading dimension below the rows", CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

int covers(const void *p, const lt_layout *l) {
    return ll_emu::device_range(p, ((l->cols - 1) * (uint64_t)l->ld + l->rows) * type_bytes(l->type)) == 1;
}

/* The stream a product runs on as a GPU would see it: a capture's work runs as its graph, launched
 * on the stream that captures the top graph (a conditional body's capture included); a stream that
 * joined a capture by waiting for one of its events may run beside it, so it is its own. */
const void *ws_lane(cudaStream_t s) {
    CUstream_st *st = ll_emu::stream_of(s);
    if (!st->cap || st->cap_forked) return st;
    const CUgraph_st *g = st->cap;
    while (g->parent) g = g->parent;
    return g->capturer ? (const void *)g->capturer : (const void *)st;
}
/* 0, or a workspace that is no device memory of ws_bytes or serves another stream (reported) */
bool ws_ok(void *ws, size_t ws_bytes, cudaStream_t stream) {
    if (!ws_bytes) return true;
    std::lock_guard<std::recursive_mutex> lk(ll_emu::emu_mutex());
    if (ll_emu::device_range(ws, ws_bytes) != 1) {
        fprintf(stderr, "cuda-emu: cuBLASLt: the workspace %p is not %zu bytes of device memory\n", ws, ws_bytes);
        return false;
    }
    static std::map<const void *, const void *> &owner = *new std::map<const void *, const void *>();
    const void *lane = ws_lane(stream);
    auto it = owner.emplace(ws, lane).first;
    if (it->second != lane) {
        fprintf(stderr,
                "cuda-emu: cuBLASLt: the workspace %p serves two streams that may run at once (a GPU could mix the "
                "two products' split-K partials): one workspace per stream\n",
                ws);
        return false;
    }
    return true;
}

} // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = new cublasLtContext{1};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    *d = (cublasLtMatmulDesc_t) new lt_desc{compute, scale, 0, 0, CUBLASLT_EPILOGUE_DEFAULT, NULL, -1, NULL, 0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete (lt_desc *)d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t dd, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t n) {
    lt_desc *d = (lt_desc *)dd;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        if (n != sizeof(cublasOperation_t)) return CUBLAS_STATUS_INVALID_VALUE;
        cublasOperation_t op;
        memcpy(&op, buf, n);
        if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return CUBLAS_STATUS_NOT_SUPPORTED;
        (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->ta : d->tb) = op == CUBLAS_OP_T;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (n != sizeof(cublasLtEpilogue_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->epi, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (n != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->bias, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (n != sizeof(cudaDataType_t) && n != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->bias_type, buf, sizeof(int32_t));
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if (n != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->aux, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if (n != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->aux_ld, buf, n);
        return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_NOT_SUPPORTED; /* attributes the project does not use */
    }
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    if (ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
    *l = (cublasLtMatrixLayout_t) new lt_layout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete (lt_layout *)l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = (cublasLtMatmulPreference_t) new lt_pref{0, {256, 256, 256, 256}};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete (lt_pref *)p;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pp,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t n) {
    lt_pref *p = (lt_pref *)pp;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
        if (n != 8) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->ws, buf, 8);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
        if (n != 4) return CUBLAS_STATUS_INVALID_VALUE;
        const int i = attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES   ? 0
                      : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES ? 1
                      : attr == CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES ? 2
                                                                           : 3;
        memcpy(&p->align[i], buf, 4);
        return CUBLAS_STATUS_SUCCESS;
    }
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t dd, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                              cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t pp, int want,
                                              cublasLtMatmulHeuristicResult_t *res, int *n) {
    (void)h;
    *n = 0;
    if (want < 1) return CUBLAS_STATUS_INVALID_VALUE;
    const char *why = "";
    cublasStatus_t s = supported((lt_desc *)dd, (lt_layout *)A, (lt_layout *)B, (lt_layout *)C, (lt_layout *)D, &why);
    if (s != CUBLAS_STATUS_SUCCESS) {
        verbose(why);
        return s;
    }
    const lt_desc *d = (lt_desc *)dd;
    const lt_pref *p = (lt_pref *)pp;
    /* up to EMU_ALGOS candidates, as a GPU's heuristic gives several: the same product,
     * told apart by data[6] (what CUBLASLT_ALGO_CONFIG_ID reads) */
    enum { EMU_ALGOS = 3 };
    const int k = want < EMU_ALGOS ? want : EMU_ALGOS;
    for (int j = 0; j < k; j++) {
        cublasLtMatmulHeuristicResult_t *r = &res[j];
        memset(r, 0, sizeof *r);
        r->algo.data[0] = ALGO_MAGIC;
        for (int i = 0; i < 4; i++) r->algo.data[1 + i] = p ? p->align[i] : 256;
        /* the bias pointer as it is now: NULL reads as perfectly aligned */
        r->algo.data[5] = d->bias ? (uint64_t)ptr_align(d->bias) : 256;
        r->algo.data[6] = (uint64_t)j;
        r->state = CUBLAS_STATUS_SUCCESS;
        r->wavesCount = 1.0f;
    }
    *n = k;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *algo,
                                                    cublasLtMatmulAlgoConfigAttributes_t attr, void *buf, size_t n,
                                                    size_t *written) {
    if (!algo || algo->data[0] != ALGO_MAGIC || !buf || n < 4) return CUBLAS_STATUS_INVALID_VALUE;
    uint32_t v = 0;
    switch (attr) {
    case CUBLASLT_ALGO_CONFIG_ID: v = (uint32_t)algo->data[6]; break;
    case CUBLASLT_ALGO_CONFIG_TILE_ID:
    case CUBLASLT_ALGO_CONFIG_STAGES_ID:
    case CUBLASLT_ALGO_CONFIG_SPLITK_NUM:
    case CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING: v = 0; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    memcpy(buf, &v, 4);
    if (written) *written = 4;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t dd, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Al, const void *B, cublasLtMatrixLayout_t Bl, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cl, void *D, cublasLtMatrixLayout_t Dl,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream) {
    (void)h;
    const lt_desc *d = (lt_desc *)dd;
    const lt_layout *a = (lt_layout *)Al, *b = (lt_layout *)Bl, *c = (lt_layout *)Cl, *dl = (lt_layout *)Dl;
    const char *why = "";
    cublasStatus_t s = supported(d, a, b, c, dl, &why);
    if (s != CUBLAS_STATUS_SUCCESS) {
        verbose(why);
        return s;
    }
    if (!algo || algo->data[0] != ALGO_MAGIC) return CUBLAS_STATUS_INVALID_VALUE;
    if (!ws_ok(ws, ws_bytes, stream)) return CUBLAS_STATUS_INVALID_VALUE;
    const void *ptrs[5] = {A, B, C, D, d->bias};
    const char *names[5] = {"A", "B", "C", "D", "bias"};
    for (int i = 0; i < 5; i++) {
        if (i == 4 && d->epi == CUBLASLT_EPILOGUE_DEFAULT) break;
        if ((uint64_t)ptr_align(ptrs[i]) < algo->data[1 + i]) {
            fprintf(stderr,
                    "cuda-emu: cuBLASLt: %s pointer %p is %d-byte aligned, but the algorithm was chosen for %llu-byte "
                    "alignment (a GPU would fault: misaligned address)\n",
                    names[i], ptrs[i], ptr_align(ptrs[i]), (unsigned long long)algo->data[1 + i]);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    if (!covers(A, a) || !covers(B, b) || !covers(D, dl) || (*(const float *)beta != 0.0f && !covers(C, c))) {
        fprintf(stderr, "cuda-emu: cuBLASLt: an operand is not device memory or runs past its allocation\n");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (C != D && (c->ld != dl->ld || c->type != dl->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    gemm_job g;
    g.ta = d->ta;
    g.tb = d->tb;
    g.m = (int)dl->rows;
    g.n = (int)dl->cols;
    g.k = (int)(d->ta ? a->rows : a->cols);
    g.alpha = *(const float *)alpha; /* host pointer mode: read at the call */
    g.beta = *(const float *)beta;
    g.A = A;
    g.B = B;
    g.C = C;
    g.D = D;
    g.at = a->type;
    g.bt = b->type;
    g.ct = c->type;
    g.dt = dl->type;
    g.bias_t = d->bias_type == -1 ? dl->type : (cudaDataType)d->bias_type;
    g.lda = a->ld;
    g.ldb = b->ld;
    g.ldc = c->ld;
    g.ldd = dl->ld;
    g.tf32 = d->compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    g.epi = d->epi;
    g.bias = d->bias;
    g.aux = (uint8_t *)d->aux;
    g.aux_ld = d->aux_ld;
    if (g.epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS || g.epi == CUBLASLT_EPILOGUE_DRELU) {
        const size_t bytes = (mask_bit(g.aux_ld, (int)dl->rows - 1, (int)dl->cols - 1) >> 3) + 1;
        if (!g.aux || ll_emu::device_range(g.aux, bytes) != 1) {
            fprintf(stderr, "cuda-emu: cuBLASLt: the ReLU bitmask is not device memory or runs past its allocation\n");
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    /* The kernel a GPU's cuBLASLt would launch: one per algorithm, compute mode, epilogue and size class
     * (the powers of 2 of M, N and K: another batch shape may get another kernel, as on a GPU, where an
     * H100's fp32 training captured 74 batch shapes and could update only 2 of them in place), some
     * with clusters of 2 blocks (Hopper's) */
    static const char lt_kernels[64] = {0};
    const auto lg = [](int v) { return v > 1 ? 32 - __builtin_clz((unsigned)v - 1) : 0; };
    const unsigned kid = (unsigned)(algo->data[6] * 131u + (unsigned)g.tf32 * 31u + (unsigned)g.epi * 7u +
                                    (unsigned)lg(g.m) * 25u + (unsigned)lg(g.n) * 5u + (unsigned)lg(g.k)) % 64u;
    ll_emu::enqueue(stream, "cublasLtMatmul", [g]() {
        if (!ll_emu::faulted("cublasLtMatmul", "cuBLASLt", 0)) gemm_run(g);
    }, &lt_kernels[kid], 1 + kid % 2);
    /* LL_CUDA_EMU_LT_REFUSE=fail: the matmul is queued, then reported failed
     * (an error after the work started): a caller must not run it again */
    if (!strcmp(refuse_mode(), "fail")) return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "error"; }

/* ---- cuBLAS: the handle and cublasGemmEx (the gemm op's last fallback) -------------------- */

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    *h = new cublasContext{NULL, CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) {
    h->math = m;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B,
                            cudaDataType bt, int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    if (at != bt || (at != CUDA_R_32F && at != CUDA_R_16BF) || (ct != CUDA_R_32F && ct != CUDA_R_16BF) ||
        (at == CUDA_R_32F && ct != CUDA_R_32F) || (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    const lt_layout la{at, (uint64_t)(ta == CUBLAS_OP_T ? k : m), (uint64_t)(ta == CUBLAS_OP_T ? m : k), lda},
        lb{bt, (uint64_t)(tb == CUBLAS_OP_T ? n : k), (uint64_t)(tb == CUBLAS_OP_T ? k : n), ldb},
        lc{ct, (uint64_t)m, (uint64_t)n, ldc};
    if (lda < (int)la.rows || ldb < (int)lb.rows || ldc < m) return CUBLAS_STATUS_INVALID_VALUE;
    const float fb = *(const float *)beta;
    if (k > 0 && (!covers(A, &la) || !covers(B, &lb))) return CUBLAS_STATUS_INVALID_VALUE;
    if (!covers(C, &lc)) return CUBLAS_STATUS_INVALID_VALUE;
    gemm_job g;
    memset(&g, 0, sizeof g);
    g.ta = ta == CUBLAS_OP_T;
    g.tb = tb == CUBLAS_OP_T;
    g.m = m;
    g.n = n;
    g.k = k;
    g.alpha = *(const float *)alpha;
    g.beta = fb;
    g.A = A;
    g.B = B;
    g.C = C;
    g.D = C;
    g.at = at;
    g.bt = bt;
    g.ct = g.dt = ct;
    g.lda = lda;
    g.ldb = ldb;
    g.ldc = g.ldd = ldc;
    g.tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
             (at == CUDA_R_32F && (h->math & CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_TF32_TENSOR_OP_MATH);
    g.epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (k == 0) {
        ll_emu::enqueue(h->stream, "cublasGemmEx", [g]() {
            for (int j = 0; j < g.n; j++)
                for (int i = 0; i < g.m; i++) {
                    const size_t o = (size_t)i + (size_t)j * g.ldc;
                    store(g.D, g.dt, o, g.beta != 0.0f ? g.beta * load(g.C, g.ct, o) : 0.0f);
                }
        });
        return CUBLAS_STATUS_SUCCESS;
    }
    ll_emu::enqueue(h->stream, "cublasGemmEx", [g]() { gemm_run(g); });
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
