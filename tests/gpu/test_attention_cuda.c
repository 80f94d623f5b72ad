/* CUDA attention (kernels/attention.cu) against the CPU backend on the same
 * inputs and Philox key: forward (out, lse) and backward (dq, dk, dv) with
 * key padding (a sentence with no keys included), causal masks with Tk >= Tq,
 * cross attention, several query/key tiles, head sizes 16..128 (48: not a
 * multiple of 32), dropout at a nonzero offset (a flipped mask bit would show
 * as an O(1) error), and strided q/k/v as the model passes them.  Backward
 * runs twice and must give the same bits (no atomics), and must overwrite
 * gradient buffers that start as garbage.
 * bf16 (run_bf16): the tensor-core forward and backward
 * (kernels/attention_tc.cu) and the SIMT ones on bf16 q/k/v/dout, each
 * against the CPU on the same bf16 values, within bf16 tolerance (a flipped
 * dropout bit is still an O(1/Tk) error, far above it), repeatable bit for
 * bit, gradients overwritten; the two paths must differ somewhere (other
 * sums), so the switch is seen to switch.
 * Skips (77) without a GPU. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "ll_cuda.h"
#include "../util/testutil.h"
#include "gpu_util.h"

#define A_(p) ((ll_act *)(p)) /* fp32 activations */

#define TOL 1e-4

static float *put(ll_backend *be, const void *host, size_t bytes) {
    float *p = be->alloc(be, bytes);
    be->upload(be, p, host, bytes);
    return p;
}
static float *get(ll_backend *be, const float *p, size_t n) {
    float *h = ll_malloc(n * sizeof(float) + 1);
    be->download(be, h, p, n * sizeof(float));
    return h;
}

/* Max |got - ref| / (|ref| + max(1, rms(ref))) over the Dh columns of each
 * head in rows of stride ld (the other columns are not the op's); -inf must
 * match exactly. */
static double rel_err(const float *got, const float *ref, size_t rows, int ld, int cols) {
    double ss = 0, worst = 0;
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            if (isfinite(ref[r * ld + c])) ss += (double)ref[r * ld + c] * ref[r * ld + c];
    double scale = rows ? sqrt(ss / (double)(rows * cols)) : 0;
    if (scale < 1) scale = 1;
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const float g = got[r * ld + c], f = ref[r * ld + c];
            double e = isinf(f) ? (g == f ? 0 : INFINITY) : fabs((double)g - f) / (fabs(f) + scale);
            if (!(e <= worst)) worst = e; /* NaN propagates */
        }
    return worst;
}
/* the larger of two errors, NaN when either is (fmax would drop a NaN) */
static double worst(double a, double b) { return a >= b || isnan(a) ? a : b; }

static void run(ll_backend *cpu, ll_backend *gpu, int B, int Tq, int Tk, int H, int Dh, int causal, float p,
                const int *klen) {
    const int C = H * Dh;
    const size_t nq = (size_t)B * Tq * 3 * C, nkv = (size_t)B * Tk * 2 * C, no = (size_t)B * Tq * C;
    ll_philox r, rng;
    ll_philox_init(&r, 5, 6, (uint32_t)(B * 7 + Tq * 31 + Tk * 131 + Dh));
    ll_philox_init(&rng, 1234, LL_RNG_DROPOUT, 17);
    const uint64_t off = (uint64_t)3 * H * Tq * Tk; /* a slice starting at sentence 3 */
    float *q = ll_malloc(nq * sizeof(float)), *kv = ll_malloc(nkv * sizeof(float)), *g = ll_malloc(no * sizeof(float));
    for (size_t i = 0; i < nq; i++) q[i] = 4 * ll_philox_uniform(&r, i) - 2;
    for (size_t i = 0; i < nkv; i++) kv[i] = 4 * ll_philox_uniform(&r, 10000000 + i) - 2;
    for (size_t i = 0; i < no; i++) g[i] = 2 * ll_philox_uniform(&r, 20000000 + i) - 1;
    float *garbage_q = ll_malloc(nq * sizeof(float)), *garbage_kv = ll_malloc(nkv * sizeof(float));
    for (size_t i = 0; i < nq; i++) garbage_q[i] = NAN;
    for (size_t i = 0; i < nkv; i++) garbage_kv[i] = NAN;

    /* CPU reference (host memory) */
    float *out = ll_malloc(no * sizeof(float)), *lse = ll_malloc((size_t)B * H * Tq * sizeof(float));
    float *dq = ll_malloc(nq * sizeof(float)), *dkv = ll_malloc(nkv * sizeof(float));
    cpu->attention_fwd(cpu, A_(out), lse, A_(q), 3 * C, A_(kv), A_(kv + C), 2 * C, klen, B, Tq, Tk, H, Dh, causal, p,
                       &rng, off);
    cpu->attention_bwd(cpu, A_(dq), A_(dkv), A_(dkv + C), A_(g), A_(out), lse, A_(q), 3 * C, A_(kv), A_(kv + C),
                       2 * C, klen, B, Tq, Tk, H, Dh, causal, p, &rng, off);

    /* GPU: every buffer, key_len included, on the device */
    float *Q = put(gpu, q, nq * sizeof(float)), *KV = put(gpu, kv, nkv * sizeof(float));
    float *G = put(gpu, g, no * sizeof(float)), *O = gpu->alloc(gpu, no * sizeof(float));
    float *L = gpu->alloc(gpu, (size_t)B * H * Tq * sizeof(float));
    float *DQ = put(gpu, garbage_q, nq * sizeof(float)), *DKV = put(gpu, garbage_kv, nkv * sizeof(float));
    int *KL = klen ? (int *)put(gpu, klen, B * sizeof(int)) : NULL;
    gpu->attention_fwd(gpu, A_(O), L, A_(Q), 3 * C, A_(KV), A_(KV + C), 2 * C, KL, B, Tq, Tk, H, Dh, causal, p, &rng,
                       off);
    gpu->attention_bwd(gpu, A_(DQ), A_(DKV), A_(DKV + C), A_(G), A_(O), L, A_(Q), 3 * C, A_(KV), A_(KV + C), 2 * C, KL,
                       B, Tq, Tk, H, Dh, causal, p, &rng, off);
    float *o = get(gpu, O, no), *l = get(gpu, L, (size_t)B * H * Tq), *gq = get(gpu, DQ, nq),
          *gkv = get(gpu, DKV, nkv);
    double e[5] = {rel_err(o, out, (size_t)B * Tq, C, C), rel_err(l, lse, (size_t)B * H * Tq, 1, 1), 0, 0, 0};
    for (int h = 0; h < H; h++) { /* dq/dk/dv per head: the q columns of k and v are not the op's */
        e[2] = worst(e[2], rel_err(gq + h * Dh, dq + h * Dh, (size_t)B * Tq, 3 * C, Dh));
        e[3] = worst(e[3], rel_err(gkv + h * Dh, dkv + h * Dh, (size_t)B * Tk, 2 * C, Dh));
        e[4] = worst(e[4], rel_err(gkv + C + h * Dh, dkv + C + h * Dh, (size_t)B * Tk, 2 * C, Dh));
    }
    CHECK_MSG(e[0] <= TOL && e[1] <= TOL && e[2] <= TOL && e[3] <= TOL && e[4] <= TOL,
              "attention B=%d Tq=%d Tk=%d H=%d Dh=%d causal=%d p=%g: out %.3g lse %.3g dq %.3g dk %.3g dv %.3g", B, Tq,
              Tk, H, Dh, causal, p, e[0], e[1], e[2], e[3], e[4]);
    /* deterministic backward; lse may be NULL in forward */
    gpu->attention_bwd(gpu, A_(DQ), A_(DKV), A_(DKV + C), A_(G), A_(O), L, A_(Q), 3 * C, A_(KV), A_(KV + C), 2 * C, KL,
                       B, Tq, Tk, H, Dh, causal, p, &rng, off);
    float *gq2 = get(gpu, DQ, nq), *gkv2 = get(gpu, DKV, nkv);
    CHECK(!memcmp(gq, gq2, nq * sizeof(float)) && !memcmp(gkv, gkv2, nkv * sizeof(float)));
    gpu->attention_fwd(gpu, A_(O), NULL, A_(Q), 3 * C, A_(KV), A_(KV + C), 2 * C, KL, B, Tq, Tk, H, Dh, causal, p, &rng,
                       off);
    float *o2 = get(gpu, O, no);
    CHECK(!memcmp(o, o2, no * sizeof(float)));

    gpu->free(gpu, Q), gpu->free(gpu, KV), gpu->free(gpu, G), gpu->free(gpu, O), gpu->free(gpu, L);
    gpu->free(gpu, DQ), gpu->free(gpu, DKV), gpu->free(gpu, KL);
    free(q), free(kv), free(g), free(garbage_q), free(garbage_kv), free(out), free(lse), free(dq), free(dkv);
    free(o), free(l), free(gq), free(gkv), free(gq2), free(gkv2), free(o2);
}

/* n bf16 values at a fresh device buffer's element `mis` (*base: the buffer, to free) */
static uint16_t *put16(ll_backend *be, const uint16_t *host, size_t n, int mis, uint16_t **base) {
    *base = be->alloc(be, (n + 1) * sizeof(uint16_t));
    be->upload(be, *base + mis, host, n * sizeof(uint16_t));
    return *base + mis;
}
/* bf16 inputs (the CPU reference gets the same values as fp32), outputs back as fp32 */
static uint16_t *to_bf16(float *x, size_t n) {
    uint16_t *h = ll_malloc(n * sizeof(uint16_t) + 1);
    for (size_t i = 0; i < n; i++) h[i] = ll_f32_to_bf16(x[i]), x[i] = ll_bf16_to_f32(h[i]);
    return h;
}
static float *get_bf16(ll_backend *be, const void *p, size_t n) {
    uint16_t *h = ll_malloc(n * sizeof(uint16_t) + 1);
    float *f = ll_malloc(n * sizeof(float) + 1);
    be->download(be, h, p, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) f[i] = ll_bf16_to_f32(h[i]);
    free(h);
    return f;
}

#define TOL_BF16 1e-2 /* out: bf16's own rounding is 2^-9 of |out| */
#define TOL_BF16_LSE 1e-5 /* lse: fp32 sums of exact bf16 products */

static int paths_differ; /* the tensor-core and SIMT outputs differed in some case */

/* mis: q, k, v, dout and the outputs one element past a 16-byte boundary (the kernels' scalar
 * staging and stores) */
static void run_bf16(ll_backend *cpu, ll_backend *gpu, int B, int Tq, int Tk, int H, int Dh, int causal, float p,
                     const int *klen, int mis) {
    const int C = H * Dh;
    const size_t nq = (size_t)B * Tq * C, nkv = (size_t)B * Tk * 2 * C, no = nq, nl = (size_t)B * H * Tq;
    ll_philox r, rng;
    ll_philox_init(&r, 7, 8, (uint32_t)(B * 7 + Tq * 31 + Tk * 131 + Dh));
    ll_philox_init(&rng, 1234, LL_RNG_DROPOUT, 19);
    const uint64_t off = (uint64_t)5 * H * Tq * Tk + 3; /* odd: a row's keys straddle Philox blocks */
    float *q = ll_malloc(nq * sizeof(float)), *kv = ll_malloc(nkv * sizeof(float)), *g = ll_malloc(no * sizeof(float));
    for (size_t i = 0; i < nq; i++) q[i] = 4 * ll_philox_uniform(&r, i) - 2;
    for (size_t i = 0; i < nkv; i++) kv[i] = 4 * ll_philox_uniform(&r, 10000000 + i) - 2;
    for (size_t i = 0; i < no; i++) g[i] = 2 * ll_philox_uniform(&r, 20000000 + i) - 1;
    uint16_t *hq = to_bf16(q, nq), *hkv = to_bf16(kv, nkv), *hg = to_bf16(g, no);
    float *out = ll_malloc(no * sizeof(float)), *lse = ll_malloc(nl * sizeof(float));
    float *dq = ll_malloc(nq * sizeof(float)), *dkv = ll_malloc(nkv * sizeof(float));
    cpu->attention_fwd(cpu, A_(out), lse, A_(q), C, A_(kv), A_(kv + C), 2 * C, klen, B, Tq, Tk, H, Dh, causal, p, &rng,
                       off);
    cpu->attention_bwd(cpu, A_(dq), A_(dkv), A_(dkv + C), A_(g), A_(out), lse, A_(q), C, A_(kv), A_(kv + C), 2 * C,
                       klen, B, Tq, Tk, H, Dh, causal, p, &rng, off);

    uint16_t *Q0, *KV0, *G0, *O0, *DQ0, *DKV0;
    uint16_t *Q = put16(gpu, hq, nq, mis, &Q0), *KV = put16(gpu, hkv, nkv, mis, &KV0), *G = put16(gpu, hg, no, mis, &G0);
    uint16_t *poison = ll_malloc((nkv > nq ? nkv : nq) * sizeof(uint16_t));
    for (size_t i = 0; i < (nkv > nq ? nkv : nq); i++) poison[i] = 0x7fc1; /* NaN: every element must be written */
    uint16_t *O = put16(gpu, poison, no, mis, &O0), *DQ = put16(gpu, poison, nq, mis, &DQ0);
    uint16_t *DKV = put16(gpu, poison, nkv, mis, &DKV0);
    float *L = gpu->alloc(gpu, nl * sizeof(float));
    int *KL = klen ? (int *)put(gpu, klen, B * sizeof(int)) : NULL;
    float *o[4], *l[4], *gq[4], *gkv[4];
    for (int k = 0; k < 4; k++) { /* tensor cores, tensor cores again, SIMT, tensor cores with a 2-warp backward */
        ll_cuda_attention_tensor_cores(k != 2);
        ll_cuda_attention_bwd1_warps(k == 3 ? 2 : 4);
        cudaStream_t s = ll_cuda_stream(gpu);
        CHECK(ll_cuda_attention_fwd_dt(s, LL_CUDA_BF16, O, L, Q, C, KV, KV + C, 2 * C, KL, B, Tq, Tk, H, Dh,
                                       causal, p, &rng, off) == cudaSuccess);
        CHECK(ll_cuda_attention_bwd_dt(s, LL_CUDA_BF16, DQ, DKV, DKV + C, G, O, L, Q, C, KV,
                                       KV + C, 2 * C, KL, B, Tq, Tk, H, Dh, causal, p, &rng,
                                       off) == cudaSuccess);
        o[k] = get_bf16(gpu, O, no), l[k] = get(gpu, L, nl), gq[k] = get_bf16(gpu, DQ, nq);
        gkv[k] = get_bf16(gpu, DKV, nkv);
        gpu->upload(gpu, DQ, poison, nq * sizeof(uint16_t)); /* the next run must overwrite them again */
        gpu->upload(gpu, DKV, poison, nkv * sizeof(uint16_t));
    }
    ll_cuda_attention_tensor_cores(1);
    ll_cuda_attention_bwd1_warps(4);
    for (int k = 0; k < 3; k += 2) {
        double e[5] = {rel_err(o[k], out, (size_t)B * Tq, C, C), rel_err(l[k], lse, nl, 1, 1),
                       rel_err(gq[k], dq, (size_t)B * Tq, C, C), 0, 0};
        for (int hh = 0; hh < H; hh++) {
            e[3] = worst(e[3], rel_err(gkv[k] + hh * Dh, dkv + hh * Dh, (size_t)B * Tk, 2 * C, Dh));
            e[4] = worst(e[4], rel_err(gkv[k] + C + hh * Dh, dkv + C + hh * Dh, (size_t)B * Tk, 2 * C, Dh));
        }
        CHECK_MSG(e[0] <= TOL_BF16 && e[1] <= TOL_BF16_LSE && e[2] <= TOL_BF16 && e[3] <= TOL_BF16 &&
                      e[4] <= TOL_BF16,
                  "bf16 attention (%s) B=%d Tq=%d Tk=%d H=%d Dh=%d causal=%d p=%g: out %.3g lse %.3g dq %.3g dk %.3g "
                  "dv %.3g",
                  k ? "SIMT" : "tensor cores", B, Tq, Tk, H, Dh, causal, p, e[0], e[1], e[2], e[3], e[4]);
    }
    CHECK_MSG(!memcmp(o[0], o[1], no * sizeof(float)) && !memcmp(gq[0], gq[1], nq * sizeof(float)) &&
                  !memcmp(gkv[0], gkv[1], nkv * sizeof(float)),
              "bf16 attention (tensor cores) not repeatable");
    /* the one-kernel backward (every query and key in one tile) sums in the same order with 2 warps or 4 */
    CHECK_MSG(!memcmp(gq[0], gq[3], nq * sizeof(float)) && !memcmp(gkv[0], gkv[3], nkv * sizeof(float)),
              "bf16 attention backward B=%d Tq=%d Tk=%d H=%d Dh=%d p=%g: 4 warps and 2 give other bits", B, Tq, Tk, H,
              Dh, p);
    if (memcmp(o[0], o[2], no * sizeof(float))) paths_differ |= 1;
    if (memcmp(gq[0], gq[2], nq * sizeof(float)) || memcmp(gkv[0], gkv[2], nkv * sizeof(float))) paths_differ |= 2;
    gpu->free(gpu, Q0), gpu->free(gpu, KV0), gpu->free(gpu, G0), gpu->free(gpu, O0), gpu->free(gpu, L);
    gpu->free(gpu, DQ0), gpu->free(gpu, DKV0), gpu->free(gpu, KL);
    free(q), free(kv), free(g), free(hq), free(hkv), free(hg), free(out), free(lse), free(dq), free(dkv), free(poison);
    for (int k = 0; k < 4; k++) free(o[k]), free(l[k]), free(gq[k]), free(gkv[k]);
}

int main(void) {
    gpu_or_skip();
    ll_backend *cpu = ll_backend_cpu();
    ll_backend *gpu = ll_backend_cuda(0);
    CHECK_MSG(gpu != NULL, "ll_backend_cuda(0): %s", ll_errbuf());
    if (!gpu) return tu_finish("gpu_test_attention_cuda");
    const int kl3[3] = {19, 11, 0}, kl2[2] = {150, 97}, kl4[4] = {33, 1, 20, 33}, kl5[2] = {97, 40};
    for (int d = 0; d < 2; d++) {
        const float p = d ? 0.25f : 0;
        run(cpu, gpu, 3, 5, 19, 2, 16, 0, p, kl3);     /* cross, padded, one sentence without keys */
        run(cpu, gpu, 2, 150, 150, 4, 64, 1, p, kl2);  /* causal self-attention, several tiles */
        run(cpu, gpu, 2, 3, 9, 3, 48, 1, p, NULL);     /* causal, Tk > Tq */
        run(cpu, gpu, 4, 1, 33, 2, 128, 0, p, kl4);    /* one query (decoding), Dh 128 */
        run(cpu, gpu, 2, 70, 40, 4, 32, 0, p, kl5);     /* cross, more queries than keys */
    }
    /* fp32 at the Bible corpus's max_len (256), the shapes of tests/gpu/test_decode_parity.sh's fp32
     * training (d 256, 4 heads), whose GPU run died with "illegal instruction" on an H100 (2026-11-27):
     * causal self-attention and cross-attention, both with padded sentences.  Not in the sanitizer
     * builds of the emulation (LL_GPU_TEST_SMALL), where it costs minutes. */
    if (!getenv("LL_GPU_TEST_SMALL")) {
        const int kl6[2] = {256, 203};
        run(cpu, gpu, 2, 256, 256, 4, 64, 1, 0.1f, kl6);
        run(cpu, gpu, 2, 256, 256, 4, 64, 0, 0, kl6);
    }
    /* bf16: the tensor-core kernels (head sizes multiples of 16) against the CPU and the SIMT path */
    CHECK_MSG(ll_cuda_attention_tensor_cores(1), "the bf16 attention forward does not run on tensor cores here");
    /* LL_GPU_TEST_SMALL (the sanitizer builds of the emulation): 70 tokens, 2 row blocks, 3 key tiles */
    const int T = getenv("LL_GPU_TEST_SMALL") ? 70 : 150;
    const int kl2s[2] = {T, T * 2 / 3}, kl7[3] = {32, 20, 7}, kl8[2] = {25, 13}, kl9[2] = {30, 17};
    for (int d = 0; d < 2; d++) {
        const float p = d ? 0.25f : 0;
        run_bf16(cpu, gpu, 3, 5, 19, 2, 16, 0, p, kl3, 0);    /* cross, padded, one sentence without keys */
        run_bf16(cpu, gpu, 2, T, T, 2, 64, 1, p, kl2s, 0); /* causal self-attention: 3 row blocks, 5 key tiles */
        run_bf16(cpu, gpu, 2, 3, 9, 3, 48, 1, p, NULL, 1);    /* causal, Tk > Tq, Dh 48; unaligned: scalar loads */
        run_bf16(cpu, gpu, 4, 1, 33, 2, 128, 0, p, kl4, 0);   /* one query (decoding), Dh 128: 2 warps */
        run_bf16(cpu, gpu, 2, 70, 40, 2, 80, 0, p, kl5, 1);   /* cross, more queries than keys, Dh 80, unaligned */
        /* every key in one tile and Dh >= 64: the forward keeps S and P in each warp's Q rows */
        run_bf16(cpu, gpu, 3, 32, 32, 2, 128, 1, p, kl7, 0); /* ll64's shape: causal, padded */
        run_bf16(cpu, gpu, 2, 40, 25, 2, 64, 0, p, kl8, 0);  /* cross, Dh 64: 4 warps, 3 of them with rows */
        /* the one-kernel backward with 5 output tiles over 2 warp halves, 16-byte stores */
        run_bf16(cpu, gpu, 2, 20, 30, 3, 80, 0, p, kl9, 0); /* cross in one tile, Dh 80 */
    }
    CHECK_MSG(paths_differ == 3, "bf16 attention: the tensor-core and SIMT %s gave the same bits everywhere",
              paths_differ & 1 ? "backwards" : "forwards");
    /* more sentences than CUDA's gridDim.z limit (65,535): launched in slices (B beam rows in
     * decoding can pass it); LL_GPU_TEST_BIG_BATCH=0 skips it (the sanitizer builds of the CPU
     * emulation of CUDA, where it takes minutes) */
    const char *big = getenv("LL_GPU_TEST_BIG_BATCH");
    if (!big || strcmp(big, "0")) run(cpu, gpu, 65537, 1, 2, 1, 16, 0, 0, NULL);
    /* Dh above the kernels' limit is refused, not miscomputed */
    CHECK(ll_cuda_attention_fwd(ll_cuda_stream(gpu), NULL, NULL, NULL, 129, NULL, NULL, 129, NULL, 1, 1, 1, 1, 129, 0,
                                0, NULL, 0) == cudaErrorInvalidValue);
    return tu_finish("gpu_test_attention_cuda");
}
