/* The FFN's ReLU backward inside a matmul: cuBLASLt's RELU_AUX_BIAS writes a
 * bitmask of (fc1 output > 0) in the forward, and the backward's dH = dY W2
 * applies it in its DRELU epilogue, so the separate relu_bwd pass (a read of
 * dH and H, a write of dH per FFN layer) disappears.
 *
 * The bitmask's bit order is cuBLASLt's and undocumented, and nothing here
 * depends on it: only cuBLASLt writes and reads a mask.  Where it did not
 * write one (an epilogue refused for a shape: the gemm op's fallback ran the
 * forward), the backward is a plain product plus relu_bwd on the ReLU's
 * output, which the caller always passes (ll_gemm_desc.relu_y).  So the gemm
 * op notes, per mask pointer, whether cuBLASLt wrote it (below).
 *
 * A start-up probe per backend (activation dtype) runs both epilogues on a
 * small product with exact values and compares with the host; the backend
 * offers masks (be->relu_mask_bytes) only when it passed.  Only where
 * LL_CUDA_RELU_MASK=1 asks for them (ll_backend_relu_mask_asked): on an H100
 * the DRELU product ran ~3.7x as long as the plain one and ll64's step was
 * 3 ms slower with masks (bench/RESULTS.md, session 24); the A/B of
 * bench/gpu/run.sh and scripts/gpu_check.sh. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

int ll_cuda_relu_mask_ld(int cols) { return (cols + 127) / 128 * 128; }

static size_t cu_relu_mask_bytes(ll_backend *be, int rows, int cols) {
    (void)be;
    if (rows <= 0 || cols <= 0) return 0;
    return (size_t)ll_cuda_relu_mask_ld(cols) / 8 * (size_t)rows;
}

/* ---- which masks cuBLASLt wrote: pointer -> flag ------------------------------------------
 * Device pointers are unique in the process (unified addressing), so one table serves every
 * device.  A mask matters from its forward to its backward, in one step; a table that grew
 * past NOTES_MAX (pointers that keep changing) is cleared, which at worst sends a DRELU to the
 * plain product + relu_bwd: the same numbers. */
#define NOTES_MAX 65536
typedef struct {
    const void *p;
    int written;
} mask_note;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static mask_note *g_notes;
static int g_n, g_cap, g_hint;

static int find_locked(const void *p) {
    for (int j = 0; j < g_n; j++) { /* from the last hit on: calls come in layer order */
        const int i = (g_hint + j) % g_n;
        if (g_notes[i].p == p) return g_hint = i;
    }
    return -1;
}

void ll_cuda_relu_mask_note(const void *mask, int written) {
    pthread_mutex_lock(&g_mu);
    int i = find_locked(mask);
    if (i < 0) {
        if (g_n == NOTES_MAX) g_n = g_hint = 0;
        if (g_n == g_cap) {
            g_cap = g_cap ? 2 * g_cap : 256;
            g_notes = ll_realloc(g_notes, (size_t)g_cap * sizeof *g_notes);
        }
        i = g_n++;
        g_notes[i].p = mask;
    }
    g_notes[i].written = written;
    pthread_mutex_unlock(&g_mu);
}

int ll_cuda_relu_mask_written(const void *mask) {
    pthread_mutex_lock(&g_mu);
    const int i = find_locked(mask), w = i >= 0 && g_notes[i].written;
    pthread_mutex_unlock(&g_mu);
    return w;
}

/* ---- the probe ----------------------------------------------------------------------------
 * H[R, F] = relu(X[R, K] W1[F, K]^T + b) with RELU_AUX_BIAS, then dH = G[R, K2] W2[K2, F] with
 * DRELU.  Small integers and half-integer biases: every sum is exact in fp32, bf16 and TF32,
 * and no pre-activation is 0 (where "> 0" and ">= 0" would differ harmlessly).  F = 200 is not
 * a multiple of 128, so the mask's padded leading dimension is exercised. */
enum { PR = 48, PF = 200, PK = 32, PK2 = 40 };

static void put(void *dst, ll_cuda_dtype t, size_t i, float v) {
    if (t == LL_CUDA_BF16)
        ((uint16_t *)dst)[i] = ll_f32_to_bf16(v);
    else
        ((float *)dst)[i] = v;
}
static float get(const void *src, ll_cuda_dtype t, size_t i) {
    return t == LL_CUDA_BF16 ? ll_bf16_to_f32(((const uint16_t *)src)[i]) : ((const float *)src)[i];
}

/* LL_CUDA_SYNC_CHECK: a fault in a probe matmul is named as the gemm op names one */
static void check(const ll_cuda_gemm_desc *d) {
    ll_cuda_gemm_sync_check(d, d->epilogue == LL_CUDA_EPI_DRELU ? LL_EPI_DRELU : LL_EPI_BIAS_RELU_AUX,
                            "; the start-up probe of the ReLU-mask epilogues, which LL_CUDA_RELU_MASK=1 asked for");
}

/* NULL: passed; else what failed */
static const char *probe(ll_backend *be, ll_cuda_dtype t) {
    const size_t es = t == LL_CUDA_BF16 ? 2 : 4;
    const size_t nx = (size_t)PR * PK, nw1 = (size_t)PF * PK, nb = PF, nh = (size_t)PR * PF, ng = (size_t)PR * PK2,
                 nw2 = (size_t)PK2 * PF, mask = cu_relu_mask_bytes(be, PR, PF);
    /* one allocation, each array 256-byte aligned */
    const size_t off_x = 0, off_w1 = off_x + 256 * ((nx * es + 255) / 256), off_b = off_w1 + 256 * ((nw1 * es + 255) / 256),
                 off_h = off_b + 256 * ((nb * es + 255) / 256), off_g = off_h + 256 * ((nh * es + 255) / 256),
                 off_w2 = off_g + 256 * ((ng * es + 255) / 256), off_dh = off_w2 + 256 * ((nw2 * es + 255) / 256),
                 off_m = off_dh + 256 * ((nh * es + 255) / 256), all = off_m + mask;
    char *host = ll_calloc(1, all), *dev = NULL;
    const char *why = NULL;
    uint32_t r = 12345;
#define NEXT(mod) ((int)((r = r * 1103515245u + 12345u) >> 16) % (mod))
    for (size_t i = 0; i < nx; i++) put(host + off_x, t, i, (float)(NEXT(5) - 2));
    for (size_t i = 0; i < nw1; i++) put(host + off_w1, t, i, (float)(NEXT(3) - 1));
    for (size_t i = 0; i < nb; i++) put(host + off_b, t, i, (float)(NEXT(6) - 3) + 0.5f);
    for (size_t i = 0; i < ng; i++) put(host + off_g, t, i, (float)(NEXT(5) - 2));
    for (size_t i = 0; i < nw2; i++) put(host + off_w2, t, i, (float)(NEXT(3) - 1));
#undef NEXT
    cudaStream_t s = ll_cuda_enter(be);
    /* every copy on the backend's stream: ordered with the matmuls whatever the stream's flags */
    if (cudaMalloc((void **)&dev, all) != cudaSuccess ||
        cudaMemcpyAsync(dev, host, all, cudaMemcpyHostToDevice, s) != cudaSuccess) {
        why = "no device memory for the probe";
        goto done;
    }
    const int aux_ld = ll_cuda_relu_mask_ld(PF);
    const ll_cuda_gemm_desc fwd = {.trans_b = 1, .M = PR, .N = PF, .K = PK, .alpha = 1, .A = dev + off_x, .a_type = t,
                                   .lda = PK, .B = dev + off_w1, .b_type = t, .ldb = PK, .C = dev + off_h, .c_type = t,
                                   .ldc = PF, .epilogue = LL_CUDA_EPI_BIAS_RELU_AUX, .bias = dev + off_b,
                                   .bias_type = t, .aux = dev + off_m, .aux_ld = aux_ld};
    const ll_cuda_gemm_desc bwd = {.M = PR, .N = PF, .K = PK2, .alpha = 1, .A = dev + off_g, .a_type = t, .lda = PK2,
                                   .B = dev + off_w2, .b_type = t, .ldb = PF, .C = dev + off_dh, .c_type = t,
                                   .ldc = PF, .epilogue = LL_CUDA_EPI_DRELU, .aux = dev + off_m, .aux_ld = aux_ld};
    if (ll_cuda_gemm_lt(be, &fwd) != 0) {
        why = "cuBLASLt refused RELU_AUX_BIAS";
        goto done;
    }
    check(&fwd);
    if (ll_cuda_gemm_lt(be, &bwd) != 0) {
        why = "cuBLASLt refused DRELU";
        goto done;
    }
    check(&bwd);
    /* a fault here leaves the context unusable (sticky): no use going on without masks */
    cudaError_t e = cudaMemcpyAsync(host, dev, all, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess)
        ll_die("CUDA error in the start-up probe of cuBLASLt's ReLU-mask epilogues (RELU_AUX_BIAS, DRELU; "
               "which LL_CUDA_RELU_MASK=1 asked for): %s",
               cudaGetErrorString(e));
    for (int i = 0; i < PR && !why; i++)
        for (int j = 0; j < PF; j++) {
            float h = get(host + off_b, t, (size_t)j), d = 0;
            for (int k = 0; k < PK; k++)
                h += get(host + off_x, t, (size_t)i * PK + k) * get(host + off_w1, t, (size_t)j * PK + k);
            for (int k = 0; k < PK2; k++)
                d += get(host + off_g, t, (size_t)i * PK2 + k) * get(host + off_w2, t, (size_t)k * PF + j);
            const float hr = h > 0 ? h : 0, dr = h > 0 ? d : 0;
            if (get(host + off_h, t, (size_t)i * PF + j) != hr) {
                why = "RELU_AUX_BIAS computed another output than bias + ReLU";
                break;
            }
            if (get(host + off_dh, t, (size_t)i * PF + j) != dr) {
                why = "DRELU with RELU_AUX_BIAS's mask differs from the ReLU's gradient";
                break;
            }
        }
done:
    (void)cudaStreamSynchronize(s); /* (a refusal's path: the upload may still read host) */
    if (why) (void)cudaGetLastError();
    cudaFree(dev);
    free(host);
    return why;
}

void ll_cuda_register_relu_mask(ll_backend *be) {
    be->relu_mask_bytes = NULL;
    if (!ll_backend_relu_mask_asked()) return;
    const ll_cuda_dtype t = be->act == LL_BF16 ? LL_CUDA_BF16 : LL_CUDA_F32;
    const char *why = probe(be, t);
    if (why) {
        ll_log("CUDA %s backend: the FFN's ReLU backward stays a separate pass (%s)", ll_dtype_str(be->act), why);
        return;
    }
    be->relu_mask_bytes = cu_relu_mask_bytes;
}
