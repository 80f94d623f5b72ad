/* Every op of the backend table, CUDA against the CPU reference, on the same
 * random inputs uploaded to each (tests/gpu/parity.h has the harness and the
 * tolerances; say which one an output uses and why), in the activation dtype
 * LL_PARITY_PRECISION names: fp32 (default; the CPU backend against the fp32
 * CUDA backend) or bf16 (the bf16 CPU backend -- fp32 arithmetic on the same
 * bf16 inputs -- against the bf16 CUDA backend, every float output within
 * TOL_BF16 = 1e-2, exact ones exact).
 *
 * What it checks, op by op (one helper t_<op> each, so that a change of an
 * op's interface stays local):
 *  - outputs within tolerance, odd sizes (N not a multiple of any block size,
 *    V = 32003, C = 1000, n = 2^20 + 3);
 *  - gemm: every transpose pair with padded leading dimensions, each epilogue
 *    (NONE, BIAS, BIAS_RELU, BGRAD over rows and over columns), beta 0 and 1,
 *    activation-dtype C and fp32 C from activation-dtype A, B (weight
 *    gradients); convert: fp32 <-> bf16 with ties, NaN, Inf, overflow;
 *  - random ops give identical bits: dropout masks, attention dropout and the
 *    fused residual ops' redrawn dropout (through the outputs: one flipped
 *    bit is an O(1) error), latent_sample's hard gates,
 *    all from the same Philox stream and offset;
 *  - accumulate vs overwrite: outputs that accumulate (every *_bwd, acc,
 *    stats slots, ...) start from random values, outputs that are overwritten
 *    start as NaN (an element left unwritten shows);
 *  - statistics slots are doubles in backend memory, accumulated (+=);
 *  - decoding ops (test_ops_cuda_decode.h): copy_rows, reorder_rows,
 *    beam_topk and sample_draw's tokens exactly (tests/gpu/test_decode_cuda.c adds a whole beam search
 *    and its own fp32 cases).
 * A table op the CUDA backend lacks (NULL) FAILS, and so does an op of the
 * table this file has no test for.  Optional ops (NULL allowed by the
 * contract: linear_pack/packed/unpack) are reported as not offered.
 * Prints PASS/FAIL per op with the worst error / tolerance ratio.
 * Skips (77) without a GPU; LL_PARITY_SELFTEST=1 runs CPU against CPU and
 * LL_PARITY_BREAK=<op> breaks one op of the second CPU backend (must fail). */
#include "parity.h"

/* element-wise ops: 2^20 + 3 elements, not a multiple of any block size; LL_GPU_TEST_SMALL=1 (the
 * emulation's sanitizer builds, where these independent threads have nothing to race on and the
 * size only costs time): 2^16 + 3, still many blocks */
static size_t g_n1m = ((size_t)1 << 20) + 3;
#define N1M g_n1m
#define BOTH for (int s = 0; s < 2; s++)
#define BE pb_be[s]

static void philox(ll_philox *r, uint32_t stream, uint32_t sub) { ll_philox_init(r, 1234, stream, sub); }

/* ---- memory ---- */
static void t_memory(void) {
    const size_t n = N1M;
    real *h = pb_rand(n, -1, 1);
    pbuf b = pb_new(h, n * sizeof(real)); /* alloc + upload */
    BOTH BE->sync(BE);
    pb_cmp("upload/download round trip", &b, n, 0);
    real *back = pb_get(&b, DUT);
    CHECK_MSG(!memcmp(back, h, n * sizeof(real)), "%s: round trip changed bits", pb_op);
    pbuf z = pb_new(NULL, 4099); /* alloc is zeroed */
    pb_cmp_exact("fresh allocation (zeroed)", &z);
    free(back), free(h), pb_free(&b), pb_free(&z);
}
static void t_memset0(void) {
    pbuf b = pb_rand_buf(N1M, -1, 1);
    BOTH BE->memset0(BE, F(b, s) + 3, 1001 * sizeof(real));
    pb_cmp_exact("memset0 of an unaligned range", &b);
    pb_free(&b);
}
static void t_copy(void) {
    pbuf a = pb_rand_buf(N1M, -1, 1), b = pb_rand_buf(N1M, -1, 1);
    BOTH BE->copy(BE, F(b, s) + 5, F(a, s) + 1, (N1M - 7) * sizeof(real));
    pb_cmp_exact("device-to-device copy at odd offsets", &b);
    pb_free(&a), pb_free(&b);
}
/* fp32 -> bf16 (round to nearest even, NaN stays NaN with any payload,
 * overflow to Inf) and back (exact), in every mode: the weight-copy refresh and logits to fp32 */
static void t_convert(void) {
    const size_t n = N1M;
    float *h = ll_malloc(n * sizeof(float));
    ll_philox r;
    philox(&r, 60, 1);
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = ll_philox_u32(&r, i);
        float f = (float)(ll_philox_uniform(&r, n + i) * 8 - 4) * ldexpf(1, (int)(u % 64) - 32);
        if (i % 7 == 3) { /* exactly half-way between two bf16 values: ties to even */
            uint32_t b;
            memcpy(&b, &f, 4);
            b = (b & 0xFFFF0000u) | 0x8000u;
            memcpy(&f, &b, 4);
        }
        h[i] = f;
    }
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 3.4e38f /* rounds to Inf */, 1e-40f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) h[i * 1001] = special[i];
    pbuf f32 = pb_new(h, n * sizeof(float)), b16 = pb_new(NULL, n * sizeof(uint16_t));
    b16.dt = LL_BF16;
    BOTH BE->convert(BE, b16.d[s], LL_BF16, f32.d[s], LL_F32, n);
    pb_cmp_exact_nan("fp32 -> bf16 (bits; NaN as NaN)", &b16);
    pbuf back = pb_poison(n);
    back.dt = LL_F32;
    BOTH BE->convert(BE, back.d[s], LL_F32, b16.d[s], LL_BF16, n - 1); /* the last element stays NaN */
    pb_cmp_exact_nan("bf16 -> fp32 (bits; NaN as NaN)", &back);
    BOTH BE->convert(BE, F(back, s), LL_REAL_DTYPE, F(f32, s), LL_REAL_DTYPE, 1001); /* same dtype: a copy */
    pb_cmp_exact("same dtype (a copy)", &back);
    free(h), pb_free(&f32), pb_free(&b16), pb_free(&back);
}

/* ---- gemm: every transpose pair, padded leading dimensions, beta 0 and 1, every epilogue ---- */
static const char *epi_name[] = {"NONE", "BIAS", "BIAS_RELU", "BGRAD"};
/* C in c_type (the activation dtype, or fp32 for a weight gradient); A, B in the activation dtype; the
 * bias in the activation dtype (the model's) or, with real_bias, in `real`; bgrad_set: BGRAD writes
 * the sums over bgrad's (random) values instead of adding */
static void gemm_case_b(int ta, int tb, int M, int N, int K, real alpha, real beta, ll_epilogue epi, ll_dtype c_type,
                        int real_bias, int bgrad_set, int pad) {
    const int lda = (ta ? M : K) + 3 * pad, ldb = (tb ? K : N) + pad, ldc = N + 5 * pad;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    const ll_dtype bias_t = real_bias ? LL_REAL_DTYPE : pb_act;
    pbuf A = pb_rand_act(na, -1, 1), B = pb_rand_act(nb, -1, 1);
    pbuf bias = real_bias ? pb_rand_buf(N, -1, 1) : pb_rand_act(N, -1, 1);
    pbuf bg = pb_rand_buf(M, -1, 1);
    real *hc = pb_rand(nc, -1, 1);
    pbuf C = pb_new_dt(hc, nc, c_type);
    BOTH {
        const ll_gemm_desc g = {.trans_a = ta, .trans_b = tb, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta,
                                .A = A.d[s], .a_type = pb_act, .lda = lda, .B = B.d[s], .b_type = pb_act, .ldb = ldb,
                                .C = C.d[s], .c_type = c_type, .ldc = ldc, .epi = epi, .bias = bias.d[s],
                                .bias_type = bias_t, .bgrad = F(bg, s), .bgrad_set = bgrad_set};
        BE->gemm(BE, &g);
    }
    char what[128];
    snprintf(what, sizeof what, "C %s (ta %d tb %d M %d N %d K %d beta %g, %s, %s bias)", ll_dtype_str(c_type), ta, tb,
             M, N, K, (double)beta, epi_name[epi], ll_dtype_str(bias_t));
    pb_cmp(what, &C, nc, TOL_RED); /* K-term dot products; the padding columns must be untouched */
    if (epi == LL_EPI_BGRAD)
        pb_cmp(bgrad_set ? "bgrad (set): sums of op(A) over K" : "bgrad (accumulated): sums of op(A) over K", &bg, M,
               TOL_RED);
    free(hc), pb_free(&A), pb_free(&B), pb_free(&C), pb_free(&bias), pb_free(&bg);
}
static void gemm_case(int ta, int tb, int M, int N, int K, real alpha, real beta, ll_epilogue epi, ll_dtype c_type) {
    gemm_case_b(ta, tb, M, N, K, alpha, beta, epi, c_type, 0, 0, 1);
}
/* The FFN's ReLU backward in the matmuls (LL_EPI_BIAS_RELU_AUX, then LL_EPI_DRELU; CUDA only, where
 * relu_mask_bytes is offered): H = relu(X W1^T + b) writing the mask, dH = G W2 (* relu'(H)), against
 * the reference's BIAS_RELU, plain product and relu_bwd.  The mask starts as 0x55 garbage, so a DRELU
 * that read a mask cuBLASLt did not write shows.  Under the emulation, refuse (LL_CUDA_EMU_LT_REFUSE,
 * read per call) is set around the forward (fwd_refuse) or the backward (bwd_refuse): the fallbacks
 * must give the same numbers, and be counted. */
static pbuf int_act(size_t n, int half) { /* {-1, 0, 1}, or with half {-1.5, ..., 1.5} */
    real *h = pb_rand(n, -1.5, 1.5);
    for (size_t i = 0; i < n; i++) h[i] = half ? floor(h[i] + 1.5) - 1.5 + (h[i] > 0) : round(h[i]);
    pbuf b = pb_new_act(h, n);
    free(h);
    return b;
}
static void relu_mask_case(int M, int F, int K, int K2, const char *fwd_refuse, const char *bwd_refuse) {
    const size_t nh = (size_t)M * F, mb = pb_be[DUT]->relu_mask_bytes(pb_be[DUT], M, F);
    /* integers and half-integer biases: both sides' H exact and no pre-activation 0, so relu'(H) is the
     * same on both (random reals near 0 would flip it by rounding, an O(1) difference in dH) */
    pbuf X = int_act((size_t)M * K, 0), W1 = int_act((size_t)F * K, 0), b = int_act(F, 1);
    pbuf G = pb_rand_act((size_t)M * K2, -1, 1), W2 = pb_rand_act((size_t)K2 * F, -1, 1);
    pbuf H = pb_poison_act(nh), dH = pb_poison_act(nh);
    unsigned char *garbage = ll_malloc(mb ? mb : 1);
    memset(garbage, 0x55, mb);
    pbuf mask = pb_new(garbage, mb);
    free(garbage);
#ifdef LL_CUDA_EMU
    const uint64_t fb0 = ll_backend_gemm_fallbacks(pb_be[DUT]);
#endif
    BOTH {
        const int dut = s == DUT;
        ll_gemm_desc f = {.trans_b = 1, .M = M, .N = F, .K = K, .alpha = 1, .A = X.d[s], .a_type = pb_act, .lda = K,
                          .B = W1.d[s], .b_type = pb_act, .ldb = K, .C = H.d[s], .c_type = pb_act, .ldc = F,
                          .epi = dut ? LL_EPI_BIAS_RELU_AUX : LL_EPI_BIAS_RELU, .bias = b.d[s], .bias_type = pb_act,
                          .aux = dut ? mask.d[s] : NULL};
        if (dut && fwd_refuse) setenv("LL_CUDA_EMU_LT_REFUSE", fwd_refuse, 1);
        BE->gemm(BE, &f);
        unsetenv("LL_CUDA_EMU_LT_REFUSE");
        ll_gemm_desc g = {.M = M, .N = F, .K = K2, .alpha = 1, .A = G.d[s], .a_type = pb_act, .lda = K2, .B = W2.d[s],
                          .b_type = pb_act, .ldb = F, .C = dH.d[s], .c_type = pb_act, .ldc = F,
                          .epi = dut ? LL_EPI_DRELU : LL_EPI_NONE, .aux = dut ? mask.d[s] : NULL,
                          .relu_y = dut ? H.d[s] : NULL};
        if (dut && bwd_refuse) setenv("LL_CUDA_EMU_LT_REFUSE", bwd_refuse, 1);
        BE->gemm(BE, &g);
        unsetenv("LL_CUDA_EMU_LT_REFUSE");
        if (!dut) BE->relu_bwd(BE, dH.d[s], H.d[s], nh);
    }
    char what[160];
    snprintf(what, sizeof what, "ReLU mask: H = relu(X W1^T + b), M %d F %d K %d (forward refused: %s)", M, F, K,
             fwd_refuse ? fwd_refuse : "no");
    pb_cmp(what, &H, nh, TOL_RED);
    snprintf(what, sizeof what, "ReLU mask: dH = G W2 * relu'(H), K %d (backward refused: %s)", K2,
             bwd_refuse ? bwd_refuse : "no");
    pb_cmp(what, &dH, nh, TOL_RED);
#ifdef LL_CUDA_EMU
    /* (a DRELU after a refused forward is a plain product and relu_bwd by design: no fallback) */
    const uint64_t fb = ll_backend_gemm_fallbacks(pb_be[DUT]) - fb0,
                   want = (fwd_refuse != NULL) + (bwd_refuse != NULL && !fwd_refuse);
    CHECK_MSG(fb == want, "ReLU mask (M %d F %d): %llu gemm fallbacks counted, %llu refused", M, F,
              (unsigned long long)fb, (unsigned long long)want);
#endif
    pb_free(&X), pb_free(&W1), pb_free(&b), pb_free(&G), pb_free(&W2), pb_free(&H), pb_free(&dH), pb_free(&mask);
}
static void t_gemm_relu_mask(void) {
    if (!pb_be[DUT]->relu_mask_bytes) {
        printf("(gemm: %s offers no ReLU masks: LL_EPI_BIAS_RELU_AUX / DRELU not tested)\n", pb_be[DUT]->name);
        return;
    }
    const char *forced = getenv("LL_CUDA_EMU_LT_REFUSE");
    if (forced && *forced) return; /* (the probe passed, so no refusal is forced for the whole run) */
    relu_mask_case(37, 1000, 129, 65, NULL, NULL); /* F not a multiple of 128: the mask's padded rows */
    relu_mask_case(64, 256, 64, 32, NULL, NULL);
#ifdef LL_CUDA_EMU
    relu_mask_case(29, 300, 40, 24, "relu_mask", NULL); /* forward refused: no mask; DRELU runs on H */
    relu_mask_case(31, 300, 40, 24, NULL, "relu_mask"); /* mask written, DRELU refused: relu_bwd on H */
    relu_mask_case(33, 300, 40, 24, "relu_mask", "relu_mask");
#endif
}
static void t_gemm(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) gemm_case(ta, tb, 37, 1000, 129, 0.7f, ta == tb ? 1 : 0, LL_EPI_NONE, pb_act);
    gemm_case(0, 1, 1, 32003, 64, 1, 0, LL_EPI_NONE, pb_act); /* one decoding row against the output projection */
    gemm_case(0, 1, 37, 1000, 129, 1, 0, LL_EPI_BIAS, pb_act);       /* linear forward: C = X W^T + b */
    gemm_case(0, 1, 37, 1000, 129, 1, 1, LL_EPI_BIAS, pb_act);       /* accumulated: C += X W^T, then + b */
    gemm_case(0, 1, 37, 999, 130, 1, 0, LL_EPI_BIAS_RELU, pb_act);   /* FFN fc1 */
    gemm_case_b(0, 1, 37, 999, 130, 1, 0, LL_EPI_BIAS_RELU, pb_act, 1, 0, 1); /* a bias in real (bf16: not fused) */
    gemm_case(1, 0, 64, 96, 4099, 1, 1, LL_EPI_NONE, LL_REAL_DTYPE); /* weight gradient: long K, fp32 C */
    gemm_case(1, 0, 96, 64, 1001, 1, 1, LL_EPI_BGRAD, LL_REAL_DTYPE); /* dW = dY^T X with the bias gradient */
    gemm_case(0, 0, 96, 64, 1001, 1, 1, LL_EPI_BGRAD, LL_REAL_DTYPE); /* BGRAD over rows of A */
    gemm_case(1, 1, 33, 17, 257, 0.5f, 1, LL_EPI_BGRAD, LL_REAL_DTYPE);
    /* an update's first weight gradient (ll_model_zero_grads): dW and the bias gradient written */
    gemm_case_b(1, 0, 96, 64, 1001, 1, 0, LL_EPI_BGRAD, LL_REAL_DTYPE, 0, 1, 1);
    gemm_case_b(0, 0, 96, 64, 1001, 1, 0, LL_EPI_BGRAD, LL_REAL_DTYPE, 0, 1, 1);
    /* rows without padding (the model's dW): the bias gradient's column sums with 16-byte loads where
     * its kernel runs (LL_CUDA_BGRAD_EPILOGUE=0, a refused epilogue), over several 256-column tiles */
    gemm_case_b(1, 0, 520, 64, 1001, 1, 1, LL_EPI_BGRAD, LL_REAL_DTYPE, 0, 0, 0);
    t_gemm_relu_mask();
}

/* ---- layer norm ---- */
static const int ln_sizes[][2] = {{333, 1000}, {64, 512}, {5, 7}};
static void t_layernorm_fwd(void) {
    for (int k = 0; k < 3; k++) {
        const int N = ln_sizes[k][0], C = ln_sizes[k][1];
        pbuf x = pb_rand_act((size_t)N * C, 2, 4); /* an offset mean stresses the variance */
        pbuf w = pb_rand_buf(C, 0.5, 1.5), b = pb_rand_buf(C, -0.5, 0.5);
        pbuf out = pb_poison_act((size_t)N * C), mean = pb_poison(N), rstd = pb_poison(N);
        BOTH BE->layernorm_fwd(BE, A(out, s), F(mean, s), F(rstd, s), A(x, s), F(w, s), F(b, s), N, C);
        pb_cmp("out", &out, (size_t)N * C, TOL_RED); /* mean and variance: sums over C */
        pb_cmp("mean", &mean, N, TOL_RED);
        pb_cmp("rstd", &rstd, N, TOL_RED);
        pb_free(&x), pb_free(&w), pb_free(&b), pb_free(&out), pb_free(&mean), pb_free(&rstd);
    }
}
static void t_layernorm_bwd(void) {
    for (int k = 0; k < 3; k++) {
        const int N = ln_sizes[k][0], C = ln_sizes[k][1];
        const size_t nc = (size_t)N * C;
        pbuf x = pb_rand_act(nc, -2, 3), w = pb_rand_buf(C, 0.5, 1.5), b = pb_rand_buf(C, -1, 1);
        pbuf out = pb_new_act(NULL, nc), mean = pb_new(NULL, N * sizeof(real)), rstd = pb_new(NULL, N * sizeof(real));
        ll_backend *ref = pb_be[REF]; /* the saved statistics: the reference's, the same on both sides */
        ref->layernorm_fwd(ref, A(out, REF), F(mean, REF), F(rstd, REF), A(x, REF), F(w, REF), F(b, REF), N, C);
        pb_from_ref(&mean), pb_from_ref(&rstd);
        pbuf dout = pb_rand_act(nc, -1, 1);
        pbuf dx = pb_rand_act(nc, -1, 1), dw = pb_rand_buf(C, -1, 1), db = pb_rand_buf(C, -1, 1); /* accumulate */
        BOTH BE->layernorm_bwd(BE, A(dx, s), F(dw, s), F(db, s), A(dout, s), A(x, s), F(w, s), F(mean, s),
                               F(rstd, s), N, C);
        pb_cmp("dx (accumulated)", &dx, nc, TOL_RED); /* row sums over C */
        pb_cmp("dw (accumulated)", &dw, C, TOL_RED);  /* column sums over N */
        pb_cmp("db (accumulated)", &db, C, TOL_RED);
        pb_free(&x), pb_free(&w), pb_free(&b), pb_free(&out), pb_free(&mean), pb_free(&rstd), pb_free(&dout),
            pb_free(&dx), pb_free(&dw), pb_free(&db);
    }
}

/* ---- embeddings ---- */
static int32_t *tokens(int n, int V, int pad_every) {
    ll_philox r;
    philox(&r, 50, (uint32_t)n);
    int32_t *t = ll_malloc(sizeof(int32_t) * n);
    for (int i = 0; i < n; i++) t[i] = (pad_every && i % pad_every == pad_every - 1) ? 1 : (int32_t)ll_philox_below(&r, i, V);
    return t;
}
static void t_embed_fwd(void) {
    const int V = 32003, C = 200, maxpos = 64;
    pbuf emb = pb_rand_act((size_t)V * C, -1, 1), pos = pb_rand_buf((size_t)(maxpos + 2) * C, -1, 1);
    /* B, T, pos_offset, of it read on the device: training; one decoding step */
    const int shapes[2][4] = {{7, 13, 3, 0}, {9, 1, 17, 15}};
    for (int k = 0; k < 2; k++) {
        const int N = shapes[k][0] * shapes[k][1], T = shapes[k][1], off = shapes[k][2], at = shapes[k][3];
        int32_t *ht = tokens(N, V, 5); /* every 5th row is pad (id 1): a zero row */
        pbuf tok = pb_new(ht, N * sizeof(int32_t)), out = pb_poison_act((size_t)N * C), pat = pb_new(&at, sizeof at);
        BOTH BE->embed_fwd(BE, A(out, s), I32(tok, s), A(emb, s), F(pos, s), off - at, at ? INT(pat, s) : NULL,
                           sqrtf((float)C), N, T, C, 1);
        pb_cmp("out", &out, (size_t)N * C, TOL_EW);
        free(ht), pb_free(&tok), pb_free(&out), pb_free(&pat);
    }
    pb_free(&emb), pb_free(&pos);
}
static void t_embed_bwd(void) {
    const int V = 50, C = 1000, N = 501; /* ~10 rows per token: the scatter must add them all */
    int32_t *ht = tokens(N, V, 7);
    pbuf tok = pb_new(ht, N * sizeof(int32_t)), dout = pb_rand_act((size_t)N * C, -1, 1);
    pbuf demb = pb_rand_buf((size_t)V * C, -1, 1);
    BOTH BE->embed_bwd(BE, F(demb, s), A(dout, s), I32(tok, s), 22.5f, N, C, 1);
    pb_cmp("demb (accumulated)", &demb, (size_t)V * C, TOL_RED); /* a token's rows summed in another order (atomics) */
    free(ht), pb_free(&tok), pb_free(&dout), pb_free(&demb);
}

/* ---- relu, dropout ---- */
static void t_relu_fwd(void) {
    pbuf x = pb_rand_act(N1M, -1, 1);
    BOTH BE->relu_fwd(BE, A(x, s), N1M);
    pb_cmp("x (in place)", &x, N1M, 0);
    pb_free(&x);
}
static void t_relu_bwd(void) {
    real *hy = pb_rand(N1M, -1, 1);
    for (size_t i = 0; i < N1M; i++) hy[i] = hy[i] > 0 ? hy[i] : 0;
    pbuf y = pb_new_act(hy, N1M), dy = pb_rand_act(N1M, -1, 1);
    BOTH BE->relu_bwd(BE, A(dy, s), A(y, s), N1M);
    pb_cmp("dy (in place)", &dy, N1M, 0);
    /* one element in: unaligned dy and y (the element path); then y alone */
    BOTH {
        const size_t e = ll_act_size(BE);
        BE->relu_bwd(BE, (ll_act *)((char *)A(dy, s) + e), (const ll_act *)((char *)A(y, s) + e), N1M - 1);
        BE->relu_bwd(BE, A(dy, s), (const ll_act *)((char *)A(y, s) + e), N1M - 1);
    }
    pb_cmp("dy (unaligned)", &dy, N1M, 0);
    free(hy), pb_free(&y), pb_free(&dy);
}
static void t_dropout_fwd(void) {
    const real ps[3] = {0.1f, 0.5f, 0};
    const uint64_t offs[3] = {12347, 0, 99}; /* an odd offset starts in the middle of a Philox word */
    for (int k = 0; k < 3; k++) {
        ll_philox rng;
        philox(&rng, LL_RNG_DROPOUT, 7 + k);
        pbuf x = pb_rand_act(N1M, -1, 1), mask = pb_new(NULL, N1M);
        BOTH BE->memset0(BE, mask.d[s], N1M);
        BOTH BE->dropout_fwd(BE, A(x, s), U8(mask, s), N1M, ps[k], &rng, offs[k]);
        char what[64];
        snprintf(what, sizeof what, "mask (p %g, offset %llu)", (double)ps[k], (unsigned long long)offs[k]);
        pb_cmp_exact(what, &mask);
        pb_cmp("x (in place)", &x, N1M, TOL_EW);
        pb_free(&x), pb_free(&mask);
    }
}
static void t_dropout_bwd(void) {
    ll_philox rng;
    philox(&rng, LL_RNG_DROPOUT, 3);
    uint8_t *hm = ll_malloc(N1M);
    for (size_t i = 0; i < N1M; i++) hm[i] = (ll_philox_u32(&rng, i) & 7) != 0;
    pbuf mask = pb_new(hm, N1M), dx = pb_rand_act(N1M, -1, 1);
    BOTH BE->dropout_bwd(BE, A(dx, s), U8(mask, s), N1M, 0.125f);
    pb_cmp("dx (in place)", &dx, N1M, TOL_EW);
    free(hm), pb_free(&mask), pb_free(&dx);
}

/* ---- element-wise arithmetic ---- */
static void t_add(void) {
    pbuf a = pb_rand_act(N1M, -1, 1), b = pb_rand_act(N1M, -1, 1), y = pb_poison_act(N1M);
    BOTH BE->add(BE, A(y, s), A(a, s), A(b, s), N1M);
    pb_cmp("y = a + b", &y, N1M, TOL_EW);
    BOTH BE->add(BE, A(a, s), A(a, s), A(b, s), N1M);
    pb_cmp("a = a + b (aliased)", &a, N1M, TOL_EW);
    pb_free(&a), pb_free(&b), pb_free(&y);
}
static void t_add_scaled(void) {
    pbuf a = pb_rand_act(N1M, -1, 1), b = pb_rand_act(N1M, -1, 1), y = pb_poison_act(N1M);
    BOTH BE->add_scaled(BE, A(y, s), A(a, s), A(b, s), -0.37f, N1M);
    pb_cmp("y = a + alpha b", &y, N1M, TOL_EW);
    BOTH BE->add_scaled(BE, A(a, s), A(a, s), A(b, s), 2.5f, N1M);
    pb_cmp("a += alpha b (aliased)", &a, N1M, TOL_EW);
    pb_free(&a), pb_free(&b), pb_free(&y);
}
static void t_acc(void) {
    pbuf d = pb_rand_act(N1M, -1, 1), x = pb_rand_act(N1M, -1, 1);
    BOTH BE->acc(BE, A(d, s), A(x, s), N1M);
    pb_cmp("dst (accumulated)", &d, N1M, TOL_EW);
    pb_free(&d), pb_free(&x);
}
static void t_add_gated(void) {
    pbuf g = pb_rand_buf(2, 0.2, 1.3), a = pb_rand_act(N1M, -1, 1), b = pb_rand_act(N1M, -1, 1);
    pbuf y = pb_poison_act(N1M);
    BOTH BE->add_gated(BE, A(y, s), A(a, s), A(b, s), F(g, s), F(g, s) + 1, N1M);
    pb_cmp("y = a + g1 g2 b", &y, N1M, TOL_EW);
    BOTH BE->add_gated(BE, A(a, s), A(a, s), A(b, s), F(g, s), NULL, N1M);
    pb_cmp("a += g1 b (aliased, g2 NULL)", &a, N1M, TOL_EW);
    BOTH BE->add_gated(BE, A(y, s), A(a, s), A(b, s), NULL, NULL, N1M);
    pb_cmp("y = a + b (both gates NULL)", &y, N1M, TOL_EW);
    pb_free(&g), pb_free(&a), pb_free(&b), pb_free(&y);
}
static void t_scale_gated(void) {
    pbuf g = pb_rand_buf(2, 0.2, 1.3), x = pb_rand_act(N1M, -1, 1);
    BOTH BE->scale_gated(BE, A(x, s), F(g, s), F(g, s) + 1, N1M);
    pb_cmp("x *= g1 g2", &x, N1M, TOL_EW);
    BOTH BE->scale_gated(BE, A(x, s), NULL, F(g, s), N1M);
    pb_cmp("x *= g2 (g1 NULL)", &x, N1M, TOL_EW);
    pb_free(&g), pb_free(&x);
}
static void t_dot_acc(void) {
    pbuf a = pb_rand_act(N1M, -1, 1), b = pb_rand_act(N1M, -1, 1), mul = pb_rand_buf(1, 0.5, 2);
    pbuf dst = pb_rand_buf(2, -1, 1);
    BOTH BE->dot_acc(BE, F(dst, s), A(a, s), A(b, s), N1M, F(mul, s));
    BOTH BE->dot_acc(BE, F(dst, s) + 1, A(a, s), A(a, s), N1M - 2, NULL);
    pb_cmp("dst += mul <a, b> (in double)", &dst, 2, TOL_EW);
    pb_free(&a), pb_free(&b), pb_free(&mul), pb_free(&dst);
}

/* ---- the fused residual branch: every gate, dropout and dx mode; aligned
 * (16-byte vectors) and unaligned buffers and offsets.  RN elements (cheap
 * under the sanitizers); one backward case of RN_BIG, more than the gate
 * dot's 1024 blocks of 256 threads x 8 elements cover in one sweep ---- */
#define RN ((size_t)100003)
static size_t g_rn_big = ((size_t)1 << 21) + 5; /* LL_GPU_TEST_SMALL=1: RN (the sweep is a plain build's check) */
#define RN_BIG g_rn_big
static const char *res_mode[] = {"none", "copy", "acc"};
static void t_residual_fwd(void) {
    pbuf g = pb_rand_buf(2, 0.2, 1.3);
    for (int k = 0; k < 6; k++) {
        const real p = k % 2 ? 0.1f : 0;
        const int gates = k / 2; /* 0: none, 1: g1, 2: both */
        const uint64_t off = k == 3 ? 12347 : 0; /* odd offset: partial Philox blocks, scalar path */
        const size_t e0 = k == 5; /* element 1: buffers off 16-byte alignment */
        ll_philox rng;
        philox(&rng, LL_RNG_DROPOUT, 11 + k);
        pbuf x = pb_rand_act(RN + 1, -1, 1), sub = pb_rand_act(RN + 1, -1, 1), y = pb_poison_act(RN + 1);
        BOTH BE->residual_fwd(BE, AT(y, s, e0), AT(sub, s, e0), AT(x, s, e0), gates ? F(g, s) : NULL,
                              gates == 2 ? F(g, s) + 1 : NULL, RN, p, p > 0 ? &rng : NULL, off);
        char what[96];
        snprintf(what, sizeof what, "s (dropped in place; p %g, offset %llu, element %zu)", (double)p,
                 (unsigned long long)off, e0);
        pb_cmp(what, &sub, RN + 1, TOL_EW); /* one dropout bit drawn differently is an O(1) error */
        snprintf(what, sizeof what, "y = x + g s (%d gates)", gates);
        pb_cmp(what, &y, RN + 1, TOL_EW);
        BOTH BE->residual_fwd(BE, A(x, s), A(sub, s), A(x, s), F(g, s), NULL, RN, p, p > 0 ? &rng : NULL, off);
        pb_cmp("x = x + g s (aliased)", &x, RN, TOL_EW);
        pb_free(&x), pb_free(&sub), pb_free(&y);
    }
    pb_free(&g);
}
/* residual_fwd and the layer norm of the sum in one op: CPU against CUDA, and on
 * each side bit for bit the two ops in sequence (row shapes of the layer norm
 * test: C = 7 puts Philox blocks across rows and takes the lane-strided row; C = 1000 and 512 the
 * row in registers, where an odd offset draws a chunk's dropout bits from two Philox blocks) */
/* a's bytes equal b's from element `at` on */
static int same_bits(const pbuf *a, const pbuf *b, int s, size_t at) {
    char *x = pb_get(a, s), *y = pb_get(b, s);
    const int same = !memcmp(x, y + at * ll_dtype_bytes(b->dt), a->bytes);
    free(x), free(y);
    return same;
}
static void t_residual_ln_fwd(void) {
    pbuf g = pb_rand_buf(2, 0.2, 1.3);
    for (int k = 0; k < 4; k++) {
        const int N = ln_sizes[k % 3][0], C = ln_sizes[k % 3][1];
        const size_t n = (size_t)N * C;
        const real p = k == 1 ? 0 : 0.1f;
        const uint64_t off = k == 3 ? 12347 : k == 0 ? 8000 : 0;
        const real *g1s[2] = {k >= 2 ? F(g, 0) : NULL, k >= 2 ? F(g, 1) : NULL};
        const real *g2s[2] = {k == 3 ? F(g, 0) + 1 : NULL, k == 3 ? F(g, 1) + 1 : NULL};
        ll_philox rng;
        philox(&rng, LL_RNG_DROPOUT, 31 + k);
        /* the two ops' buffers one element off where k is odd: the row-in-registers rule is one of
         * C alone, so another alignment must give the same bits */
        const size_t mo = (size_t)(k & 1);
        pbuf x = pb_rand_act(n, -1, 1), sub = pb_rand_act(n, -1, 1), sub2 = pb_new_act(NULL, n + mo);
        pbuf w = pb_rand_buf(C, 0.5, 1.5), b = pb_rand_buf(C, -0.5, 0.5);
        pbuf y = pb_poison_act(n), u = pb_poison_act(n), mean = pb_poison(N), rstd = pb_poison(N);
        pbuf y2 = pb_poison_act(n + mo), u2 = pb_poison_act(n + mo), mean2 = pb_poison(N), rstd2 = pb_poison(N);
        BOTH BE->copy(BE, AT(sub2, s, mo), A(sub, s), sub.bytes);
        BOTH BE->residual_ln_fwd(BE, A(y, s), A(sub, s), A(x, s), g1s[s], g2s[s], p, p > 0 ? &rng : NULL, off,
                                 A(u, s), F(mean, s), F(rstd, s), F(w, s), F(b, s), N, C);
        char what[96];
        snprintf(what, sizeof what, "s (dropped in place; p %g, offset %llu, %dx%d)", (double)p,
                 (unsigned long long)off, N, C);
        pb_cmp(what, &sub, n, TOL_EW); /* one dropout bit drawn differently is an O(1) error */
        pb_cmp("y = x + g s", &y, n, TOL_EW);
        pb_cmp("u = LN(y)", &u, n, TOL_RED); /* mean and variance: sums over C */
        pb_cmp("mean", &mean, N, TOL_RED);
        pb_cmp("rstd", &rstd, N, TOL_RED);
        BOTH {
            BE->residual_fwd(BE, AT(y2, s, mo), AT(sub2, s, mo), A(x, s), g1s[s], g2s[s], n, p, p > 0 ? &rng : NULL,
                             off);
            BE->layernorm_fwd(BE, AT(u2, s, mo), F(mean2, s), F(rstd2, s), AT(y2, s, mo), F(w, s), F(b, s), N, C);
        }
        for (int s = 0; s < 2; s++)
            CHECK_MSG(same_bits(&sub, &sub2, s, mo) && same_bits(&y, &y2, s, mo) && same_bits(&u, &u2, s, mo) &&
                          same_bits(&mean, &mean2, s, 0) && same_bits(&rstd, &rstd2, s, 0),
                      "residual_ln_fwd on %s (case %d): not the bits of residual_fwd then layernorm_fwd",
                      pb_be[s]->name, k);
        pb_free(&x), pb_free(&sub), pb_free(&sub2), pb_free(&w), pb_free(&b), pb_free(&y), pb_free(&u),
            pb_free(&mean), pb_free(&rstd), pb_free(&y2), pb_free(&u2), pb_free(&mean2), pb_free(&rstd2);
    }
    pb_free(&g);
}
static void t_residual_bwd(void) {
    pbuf g = pb_rand_buf(2, 0.2, 1.3);
    for (int k = 0; k < 9; k++) {
        const int mode = k % 3, gates = k / 3 % 3; /* gates 0: none, 1: g1 (dg1), 2: both (dg1, dg2) */
        const real p = k % 2 ? 0 : 0.1f;
        const uint64_t off = k == 4 ? 99 : 0;
        const size_t e0 = k == 8; /* with dropout, both gates, dx accumulated */
        const size_t rn = k == 6 ? RN_BIG : RN; /* dropout, both gates, no dx: the big one */
        ll_philox rng;
        philox(&rng, LL_RNG_DROPOUT, 21 + k);
        pbuf ds = pb_rand_act(rn + 1, -1, 1), dx = pb_rand_act(rn + 1, -1, 1), sub = pb_rand_act(rn + 1, -1, 1);
        pbuf dg = pb_rand_buf(2, -1, 1);
        BOTH BE->residual_bwd(BE, AT(ds, s, e0), mode ? AT(dx, s, e0) : NULL, mode, AT(sub, s, e0),
                              gates ? F(dg, s) : NULL, gates == 2 ? F(dg, s) + 1 : NULL, gates ? F(g, s) : NULL,
                              gates == 2 ? F(g, s) + 1 : NULL, rn, p, p > 0 ? &rng : NULL, off);
        char what[128];
        snprintf(what, sizeof what, "ds (p %g, offset %llu, element %zu, %d gates)", (double)p,
                 (unsigned long long)off, e0, gates);
        pb_cmp(what, &ds, rn + 1, TOL_EW);
        snprintf(what, sizeof what, "dx (%s)", res_mode[mode]);
        pb_cmp(what, &dx, rn + 1, TOL_EW);
        pb_cmp("dg1, dg2 += gate <ds, s> (in double, accumulated)", &dg, 2, TOL_EW);
        pb_free(&ds), pb_free(&dx), pb_free(&sub), pb_free(&dg);
    }
    pb_free(&g);
}

/* ---- DLCL: k separate entries, host arrays of backend pointers ---- */
#define DK 7
#define DN ((size_t)100003)
static void dlcl_entries(pbuf *e) {
    for (int j = 0; j < DK; j++) e[j] = pb_rand_act(DN, -1, 1);
}
static void t_weighted_sum(void) {
    pbuf e[DK], w = pb_rand_buf(DK, -1, 1), y = pb_poison_act(DN);
    dlcl_entries(e);
    BOTH {
        const ll_act *xs[DK];
        for (int j = 0; j < DK; j++) xs[j] = A(e[j], s);
        BE->weighted_sum(BE, A(y, s), xs, F(w, s), DK, DN);
    }
    pb_cmp("y = sum_j w_j x_j (overwritten)", &y, DN, TOL_EW);
    BOTH {
        const ll_act *xs[1] = {A(e[0], s)};
        BE->weighted_sum(BE, A(y, s), xs, F(w, s), 1, DN);
    }
    pb_cmp("y = w_0 x_0 (k = 1)", &y, DN, TOL_EW);
    for (int j = 0; j < DK; j++) pb_free(&e[j]);
    pb_free(&w), pb_free(&y);
    /* more entries than CUDA passes in one launch (LL_CUDA_DLCL_CHUNK = 64), on
     * values whose products and partial sums are exact in fp32 (so FMA
     * contraction cannot matter): 5 + 63 * 4 = 257 after 64 entries, + 6 *
     * 0.125 = 257.75, scaled by +-2^e per element; rounded once to bf16 that is
     * 258 (2^e), rounded after 64 entries too it would be 256 (2^e) */
    enum { KL = 70 };
    const size_t nl = 4099;
    real *hw = pb_fill(KL, 1), *hx = ll_malloc(nl * sizeof(real));
    pbuf el[KL], wl = pb_new(hw, KL * sizeof(real)), yl = pb_poison_act(nl);
    for (int j = 0; j < KL; j++) {
        for (size_t i = 0; i < nl; i++)
            hx[i] = (real)ldexp((j == 0 ? 5 : j < 64 ? 4 : 0.125) * (i % 2 ? -1 : 1), (int)(i % 9) - 4);
        el[j] = pb_new_act(hx, nl);
    }
    free(hw), free(hx);
    BOTH {
        const ll_act *xs[KL];
        for (int j = 0; j < KL; j++) xs[j] = A(el[j], s);
        BE->weighted_sum(BE, A(yl, s), xs, F(wl, s), KL, nl);
    }
    pb_cmp_exact("y = sum of 70 exact entries (bits: one rounding)", &yl);
    for (int j = 0; j < KL; j++) pb_free(&el[j]);
    pb_free(&wl), pb_free(&yl);
}
static void t_weighted_scatter(void) {
    pbuf e[DK], w = pb_rand_buf(DK, -1, 1), x = pb_rand_act(DN, -1, 1);
    dlcl_entries(e);
    BOTH {
        ll_act *ys[DK];
        for (int j = 0; j < DK; j++) ys[j] = A(e[j], s);
        BE->weighted_scatter(BE, ys, F(w, s), A(x, s), DK, DN);
    }
    for (int j = 0; j < DK; j++) pb_cmp("ys[j] += w_j x (accumulated)", &e[j], DN, TOL_EW);
    for (int j = 0; j < DK; j++) pb_free(&e[j]);
    pb_free(&w), pb_free(&x);
}
static void t_dots_acc(void) {
    pbuf e[DK], dst = pb_rand_buf(DK, -1, 1), x = pb_rand_act(DN, -1, 1);
    dlcl_entries(e);
    BOTH {
        const ll_act *ys[DK];
        for (int j = 0; j < DK; j++) ys[j] = A(e[j], s);
        BE->dots_acc(BE, F(dst, s), A(x, s), ys, DK, DN);
    }
    pb_cmp("dst[j] += <x, ys[j]> (in double)", &dst, DK, TOL_EW);
    for (int j = 0; j < DK; j++) pb_free(&e[j]);
    pb_free(&dst), pb_free(&x);
}

#include "test_ops_cuda_more.h"   /* latent depth, ALD, statistics, attention, losses, Adam, packed linear */
#include "test_ops_cuda_decode.h" /* copy_rows, reorder_rows, beam_topk, sample_draw, attention_cached, beam_ancestry,
                                     attn_align with attn_probs and align_argmax */

typedef struct {
    const char *name;
    void (*run)(void);
    int optional; /* NULL allowed by the contract */
} op_test;

static const op_test tests[] = {
    {"alloc", t_memory, 0}, {"free", t_memory, 0}, {"upload", t_memory, 0}, {"download", t_memory, 0},
    {"sync", t_memory, 0}, {"memset0", t_memset0, 0}, {"copy", t_copy, 0}, {"convert", t_convert, 0},
    {"gemm", t_gemm, 0}, {"layernorm_fwd", t_layernorm_fwd, 0}, {"layernorm_bwd", t_layernorm_bwd, 0},
    {"embed_fwd", t_embed_fwd, 0}, {"embed_bwd", t_embed_bwd, 0}, {"relu_fwd", t_relu_fwd, 0},
    {"relu_bwd", t_relu_bwd, 0}, {"dropout_fwd", t_dropout_fwd, 0}, {"dropout_bwd", t_dropout_bwd, 0},
    {"add", t_add, 0}, {"add_scaled", t_add_scaled, 0}, {"acc", t_acc, 0}, {"add_gated", t_add_gated, 0},
    {"scale_gated", t_scale_gated, 0}, {"dot_acc", t_dot_acc, 0}, {"residual_fwd", t_residual_fwd, 0},
    {"residual_bwd", t_residual_bwd, 0}, {"residual_ln_fwd", t_residual_ln_fwd, 0}, {"weighted_sum", t_weighted_sum, 0},
    {"weighted_scatter", t_weighted_scatter, 0}, {"dots_acc", t_dots_acc, 0},
    {"latent_sample", t_latent_sample, 0}, {"latent_grad", t_latent_grad, 0}, {"latent_kl", t_latent_kl, 0},
    {"latent_lk", t_latent_lk, 0}, {"latent_depth", t_latent_depth, 0}, {"latent_q", t_latent_q, 0},
    {"ald_pool", t_ald_pool, 0}, {"ald_loss", t_ald_loss, 0}, {"ald_unpool", t_ald_unpool, 0},
    {"sumsq", t_sumsq, 0}, {"grad_finish", t_grad_finish, 0}, {"spike_check", t_spike_check, 0}, {"attention_fwd", t_attention_fwd, 0},
    {"attention_bwd", t_attention_bwd, 0}, {"xent_fwd_bwd", t_xent_fwd_bwd, 0}, {"sym_kl", t_sym_kl, 0},
    {"log_softmax", t_log_softmax, 0}, {"pick_logp", t_pick_logp, 0}, {"ensemble_mix", t_ensemble_mix, 0}, {"add_col", t_add_col, 0}, {"fill_at", t_fill_at, 0}, {"expand_cols", t_expand_cols, 0}, {"copy_rows", t_copy_rows, 0}, {"reorder_rows", t_reorder_rows, 0},
    {"beam_topk", t_beam_topk, 0}, {"sample_draw", t_sample_draw, 0}, {"attention_cached", t_attention_cached, 0},
    {"beam_ancestry", t_beam_ancestry, 0}, {"attn_align", t_attn_align, 0}, {"attn_probs", t_attn_align, 0}, {"align_argmax", t_attn_align, 0}, {"adam", t_adam, 0}, {"ema", t_ema, 0}, {"linear_pack", t_linear_packed, 1},
    {"linear_packed", t_linear_packed, 1}, {"linear_unpack", t_linear_packed, 1},
};

static int slot_set(const ll_backend *be, size_t slot) {
    void *p;
    memcpy(&p, (const char *)be + slot * sizeof(void *), sizeof p);
    return p != NULL;
}

/* The child: one op's test, its PASS/FAIL line; exit 0 or PB_CHECKS_FAILED. */
static int run_one(const char *name) {
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (strcmp(tests[i].name, name)) continue;
        pb_op = name;
        pb_worst = 0;
        const int before = tu_failures;
        const double t0 = ll_now();
        tests[i].run();
        const int ok = tu_failures == before;
        printf("%s  %-18s worst error/tol %.3g  (%.2f s)\n", ok ? "PASS" : "FAIL", name, pb_worst, ll_now() - t0);
        fflush(stdout);
        return ok ? 0 : PB_CHECKS_FAILED;
    }
    ll_die("--op %s: no such test", name);
}

int main(int argc, char **argv) {
    const char *small = getenv("LL_GPU_TEST_SMALL");
    if (small && !strcmp(small, "1")) g_n1m = ((size_t)1 << 16) + 3, g_rn_big = RN;
    const int child = argc == 3 && !strcmp(argv[1], "--op");
    int rc = pb_setup(child);
    if (rc) return child ? 1 : rc;
    pb_break_from_env();
    if (child) return run_one(argv[2]);
    const int fork_each = pb_use_children();
    const size_t nslots = sizeof(ll_backend) / sizeof(void *);
    const size_t nt = sizeof tests / sizeof tests[0];
    int pass = 0, fail = 0, opt = 0;
    for (size_t slot = 0; slot < nslots; slot++) {
        const char *name = ll_backend_op_name(slot);
        if (!strcmp(name, "?")) continue; /* name, impl */
        const op_test *t = NULL;
        for (size_t i = 0; i < nt; i++)
            if (!strcmp(tests[i].name, name)) t = &tests[i];
        if (!t) {
            printf("FAIL  %-18s no parity test in tests/gpu/test_ops_cuda.c: add one\n", name);
            fail++;
            continue;
        }
        if (!slot_set(pb_be[DUT], slot) || !slot_set(pb_be[REF], slot)) {
            if (t->optional) {
                printf("----  %-18s optional op not offered by %s\n", name,
                       slot_set(pb_be[DUT], slot) ? pb_be[REF]->name : pb_be[DUT]->name);
                opt++;
            } else {
                printf("FAIL  %-18s the %s backend lacks this op (NULL)\n", name, pb_be[DUT]->name);
                fail++;
            }
            continue;
        }
        if (t->optional && (!strncmp(name, "linear_", 7) && strcmp(name, "linear_packed"))) {
            printf("(%s: tested with linear_packed)\n", name);
            continue;
        }
        const op_test *first = t; /* ops tested together (one helper): run once, under the table's first name */
        for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
            if (tests[i].run == t->run) {
                first = &tests[i];
                break;
            }
        if (first != t && !t->optional) {
            printf("(%s: tested with %s)\n", name, first->name);
            continue;
        }
        char why[160] = "";
        const int r = fork_each ? pb_child(argv[0], "--op", name, 120, why, sizeof why) : run_one(name) ? 1 : 0;
        if (r < 0) printf("FAIL  %-18s %s\n", name, why);
        r == 0 ? pass++ : fail++;
    }
    printf("ops: %d passed, %d failed, %d optional not offered (backend under test: %s, %s activations)\n", pass, fail,
           opt, pb_be[DUT]->name, ll_dtype_str(pb_act));
    if (fork_each) tu_failures += fail; /* in one process the checks counted them already */
    if (fail && !tu_failures) tu_failures = fail;
    return tu_finish(pb_selftest ? "parity_selftest_ops" : "gpu_test_ops_cuda");
}
