/* Two-backend parity harness for tests/gpu/test_ops_cuda.c and
 * test_step_cuda.c: buffers that exist once per backend (side 0 = the CPU
 * reference, side 1 = the backend under test), uploaded from one host array,
 * and comparisons of the two sides' results with a stated tolerance.
 *
 * Side 1 is the CUDA backend on a GPU.  With LL_PARITY_SELFTEST=1 it is a
 * second copy of the CPU backend instead, so the harness itself (every op's
 * set-up, the comparisons, the reports) runs and passes on a machine without
 * a GPU; LL_PARITY_BREAK=<op> then swaps that op of side 1 for a wrong
 * version (test_ops_cuda.c), and the test must fail.  ctest runs both.
 *
 * Precision (LL_PARITY_PRECISION=fp32|bf16, default fp32): the activation
 * dtype of both sides.  bf16: side 0 is the bf16 CPU backend
 * (ll_backend_cpu_precision(LL_BF16): fp32 arithmetic on bf16-rounded inputs,
 * outputs rounded to bf16 -- the fp32 reference of a bf16 kernel), side 1
 * the bf16 CUDA backend (ll_backend_cuda_precision(0, LL_BF16)) or, in the self-test, a
 * second bf16 CPU backend.  Every float comparison then uses TOL_BF16.
 *
 * Error measure of a float comparison: max_i |got_i - ref_i| / max(|ref_i|,
 * rms(ref)) -- relative for large elements, relative to the array's scale for
 * elements near zero (so a 1e-9 next to a 1e-30 reference is no failure, an
 * O(1) error anywhere is).  NaN and Inf must match exactly. */
#ifndef LL_TEST_PARITY_H
#define LL_TEST_PARITY_H
#define _POSIX_C_SOURCE 200809L /* fork, execv, waitpid, alarm */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ll/backend.h"
#include "ll/core.h"
#include "../util/testutil.h"

/* Tolerances (fp32):
 *  TOL_EW   element-wise ops and ops whose every output is computed by the same
 *           formula in the same order on both sides (at most a few ulp from
 *           fused multiply-adds or the GPU's exp/log).
 *  TOL_RED  outputs that are sums whose order legitimately differs: a GPU sums
 *           in a tree or with atomics, the CPU in SIMD lanes and threads
 *           (gemm over K, column sums over N rows, layer norm statistics over
 *           C, log-sum-exp over V = 32003).  Float rounding of an n-term sum
 *           grows like sqrt(n) eps relative to the terms' scale: ~2e-6 at
 *           n = 1000, so 1e-5 would be flaky and 1e-4 still catches any
 *           wrong element (those are O(1)).
 *  TOL_ATT  attention, as tests/gpu/test_attention_cuda.c: online softmax
 *           with per-tile rescaling against the CPU's two passes.
 *  TOL_F64  double statistics computed from the same doubles (grad_finish). */
#define TOL_EW 1e-5
#define TOL_RED 1e-4
#define TOL_ATT 1e-4
#define TOL_F64 1e-12
/* bf16 mode (LL_PARITY_PRECISION=bf16): both sides read the same bf16 inputs
 * and compute in fp32, so an output differs by the fp32 differences above
 * plus at most one bf16 rounding step where they straddle a rounding
 * boundary: 2^-8..2^-7 relative to the element (8 significant bits).
 * TOL_BF16 = 1e-2 (the bound, = tests/test_bf16.c's OP_TOL) passes
 * one such step and a kernel that keeps one intermediate in bf16, and fails
 * any wrong element, stride or operand (those are O(1)).  It replaces every
 * nonzero float tolerance of the fp32 mode (fp32 outputs from bf16 inputs
 * included); exact comparisons (tol 0: relu, copies, masks, hard gates,
 * beam candidates) stay exact, and so does TOL_F64 (grad_finish: doubles
 * from doubles, whatever the activations). */
#define TOL_BF16 1e-2

enum { REF = 0, DUT = 1 }; /* sides: reference (CPU) and device under test */

static ll_backend *pb_be[2];
static ll_dtype pb_act = LL_REAL_DTYPE; /* activation dtype of both sides (LL_PARITY_PRECISION) */
static const char *pb_op = "?"; /* op under test, for messages */
static double pb_worst;          /* worst error ratio (err / tol) of the current op */
static int pb_selftest;
static int pb_quiet; /* a child process (one case): no banners */

static inline int pb_setup(int quiet) {
    pb_quiet = quiet;
    const char *st = getenv("LL_PARITY_SELFTEST"), *pr = getenv("LL_PARITY_PRECISION");
    pb_selftest = st && *st && strcmp(st, "0");
    if (pr && *pr && strcmp(pr, "fp32") && strcmp(pr, "bf16"))
        ll_die("LL_PARITY_PRECISION=%s: expected fp32 or bf16", pr);
    pb_act = pr && !strcmp(pr, "bf16") ? LL_BF16 : LL_REAL_DTYPE;
    pb_be[REF] = ll_backend_cpu_precision(pb_act);
    if (pb_selftest) {
        static ll_backend twin;
        twin = *pb_be[REF];
        twin.name = "cpu-twin";
        pb_be[DUT] = &twin;
        if (!quiet)
            printf("LL_PARITY_SELFTEST: the backend under test is a second CPU backend (%s activations)\n",
                   ll_dtype_str(pb_act));
        return 0;
    }
    if (ll_cuda_device_count() == 0) {
        printf("no CUDA device: skipping (LL_PARITY_SELFTEST=1 runs the harness CPU against CPU)\n");
        return 77;
    }
    pb_be[DUT] = ll_backend_cuda_precision(0, pb_act); /* the CUDA backend with activations in pb_act */
    if (!pb_be[DUT]) {
        fprintf(stderr, "FAIL: ll_backend_cuda_precision(0, %s): %s\n", ll_dtype_str(pb_act), ll_errbuf());
        return 1;
    }
    if (!quiet) printf("backend under test: %s, %s activations\n", pb_be[DUT]->name, ll_dtype_str(pb_be[DUT]->act));
    return 0;
}
/* a float tolerance of the fp32 mode, in the current mode */
static inline double pb_tol(double tol) { return pb_act == LL_BF16 && tol >= TOL_EW && tol < TOL_BF16 ? TOL_BF16 : tol; }

/* ---- buffers ---- */
typedef struct {
    void *d[2];
    size_t bytes;
    ll_dtype dt; /* element type, for comparisons (raw byte buffers: real) */
} pbuf;

static inline pbuf pb_new(const void *host, size_t bytes) {
    pbuf b = {.bytes = bytes, .dt = LL_REAL_DTYPE};
    for (int s = 0; s < 2; s++) {
        b.d[s] = pb_be[s]->alloc(pb_be[s], bytes ? bytes : 1);
        if (host && bytes) pb_be[s]->upload(pb_be[s], b.d[s], host, bytes);
    }
    return b;
}
/* host reals -> n elements of dtype dt (rounded to nearest even), malloc'd */
static inline void *pb_to_dtype(const real *host, size_t n, ll_dtype dt) {
    void *h = ll_malloc(n * ll_dtype_bytes(dt) + 8);
    for (size_t i = 0; i < n; i++) {
        if (dt == LL_BF16) ((uint16_t *)h)[i] = ll_f32_to_bf16((float)host[i]);
        else if (dt == LL_F32) ((float *)h)[i] = (float)host[i];
        else ((double *)h)[i] = (double)host[i];
    }
    return h;
}
/* n elements of dtype dt from host reals (NULL: zeroed) */
static inline pbuf pb_new_dt(const real *host, size_t n, ll_dtype dt) {
    void *h = host ? pb_to_dtype(host, n, dt) : NULL;
    pbuf b = pb_new(h, n * ll_dtype_bytes(dt));
    b.dt = dt;
    free(h);
    return b;
}
/* an activation-dtype buffer (pb_act) */
static inline pbuf pb_new_act(const real *host, size_t n) { return pb_new_dt(host, n, pb_act); }
static inline void pb_set(pbuf *b, const void *host) {
    for (int s = 0; s < 2; s++) pb_be[s]->upload(pb_be[s], b->d[s], host, b->bytes);
}
static inline void pb_free(pbuf *b) {
    for (int s = 0; s < 2; s++)
        if (b->d[s]) pb_be[s]->free(pb_be[s], b->d[s]);
    b->d[0] = b->d[1] = NULL;
}
/* side s's contents, malloc'd */
static inline void *pb_get(const pbuf *b, int s) {
    void *h = ll_malloc(b->bytes + 8);
    pb_be[s]->download(pb_be[s], h, b->d[s], b->bytes);
    return h;
}
/* the reference side's contents copied to the device under test (a CPU
 * result both sides then read, e.g. the saved statistics of a forward) */
static inline void pb_from_ref(pbuf *b) {
    void *h = pb_get(b, REF);
    pb_be[DUT]->upload(pb_be[DUT], b->d[DUT], h, b->bytes);
    free(h);
}
/* side s's first n elements as doubles, malloc'd */
static inline double *pb_get_f64(const pbuf *b, int s, size_t n) {
    void *h = pb_get(b, s);
    double *v = ll_malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        v[i] = b->dt == LL_BF16 ? ll_bf16_to_f32(((uint16_t *)h)[i])
               : b->dt == LL_F32 ? ((float *)h)[i]
                                 : ((double *)h)[i];
    free(h);
    return v;
}
#define F(b, s) ((real *)(b).d[s])
#define A(b, s) ((ll_act *)(b).d[s])
#define AT(b, s, i) ((ll_act *)((char *)(b).d[s] + (size_t)(i) * ll_dtype_bytes((b).dt))) /* element i */
#define I32(b, s) ((int32_t *)(b).d[s])
#define INT(b, s) ((int *)(b).d[s])
#define U8(b, s) ((uint8_t *)(b).d[s])
#define F64(b, s) ((double *)(b).d[s])

/* ---- host data ---- */
static uint32_t pb_seed = 1;
/* n uniforms in (lo, hi), fresh for every call */
static inline real *pb_rand(size_t n, double lo, double hi) {
    ll_philox r;
    ll_philox_init(&r, 20261122u, 99, pb_seed++);
    real *x = ll_malloc(sizeof(real) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = (real)(lo + (hi - lo) * ll_philox_uniform(&r, i));
    return x;
}
static inline real *pb_fill(size_t n, double v) {
    real *x = ll_malloc(sizeof(real) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = (real)v;
    return x;
}
static inline pbuf pb_rand_buf(size_t n, double lo, double hi) {
    real *h = pb_rand(n, lo, hi);
    pbuf b = pb_new(h, n * sizeof(real));
    free(h);
    return b;
}
/* An output the op must overwrite: NaN on both sides, so an element left unwritten shows. */
static inline pbuf pb_poison(size_t n) {
    real *h = pb_fill(n, NAN);
    pbuf b = pb_new(h, n * sizeof(real));
    free(h);
    return b;
}
/* the same in the activation dtype */
static inline pbuf pb_rand_act(size_t n, double lo, double hi) {
    real *h = pb_rand(n, lo, hi);
    pbuf b = pb_new_act(h, n);
    free(h);
    return b;
}
static inline pbuf pb_poison_act(size_t n) {
    real *h = pb_fill(n, NAN);
    pbuf b = pb_new_act(h, n);
    free(h);
    return b;
}

/* ---- comparisons ---- */
static inline void pb_note(double err, double tol) {
    const double r = tol > 0 ? err / tol : err > 0 || isnan(err) ? INFINITY : 0;
    if (!(r <= pb_worst)) pb_worst = r; /* NaN propagates */
}

/* float arrays (the buffer's dtype): see the error measure above; tol is the
 * fp32 mode's (pb_tol adapts it); returns the error */
static inline double pb_cmp(const char *what, const pbuf *b, size_t n, double tol) {
    tol = pb_tol(tol);
    double *g = pb_get_f64(b, DUT, n), *f = pb_get_f64(b, REF, n);
    double ss = 0;
    size_t nf = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(f[i])) ss += f[i] * f[i], nf++;
    const double rms = nf ? sqrt(ss / (double)nf) : 0;
    double worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double e;
        if (!isfinite(f[i]) || !isfinite(g[i])) {
            e = (isnan(f[i]) && isnan(g[i])) || f[i] == g[i] ? 0 : INFINITY;
        } else {
            double den = fmax(fabs(f[i]), rms);
            e = den > 0 ? fabs(g[i] - f[i]) / den : (g[i] == f[i] ? 0 : INFINITY);
        }
        if (!(e <= worst)) worst = e, wi = i;
    }
    pb_note(worst, tol);
    if (!(worst <= tol)) {
        fprintf(stderr, "  %s: %s: error %.3g > tol %.1g (element %zu of %zu, %s: %s %.9g, cpu %.9g; rms %.3g)\n",
                pb_op, what, worst, tol, wi, n, ll_dtype_str(b->dt), pb_be[DUT]->name, g[wi], f[wi], rms);
        tu_failures++;
    }
    free(g), free(f);
    return worst;
}
/* doubles (statistics slots), relative to max(|ref|, floor) */
static inline void pb_cmp_f64(const char *what, const pbuf *b, size_t n, double tol, double floor) {
    tol = pb_tol(tol);
    double *g = pb_get(b, DUT), *f = pb_get(b, REF);
    for (size_t i = 0; i < n; i++) {
        double e = (!isfinite(f[i]) || !isfinite(g[i]))
                       ? ((isnan(f[i]) && isnan(g[i])) || f[i] == g[i] ? 0 : INFINITY)
                       : fabs(g[i] - f[i]) / fmax(fabs(f[i]), floor);
        pb_note(e, tol);
        if (!(e <= tol)) {
            fprintf(stderr, "  %s: %s[%zu]: error %.3g > tol %.1g (%s %.17g, cpu %.17g)\n", pb_op, what, i, e, tol,
                    pb_be[DUT]->name, g[i], f[i]);
            tu_failures++;
        }
    }
    free(g), free(f);
}
/* bytes that must be identical (dropout masks, hard samples, untouched memory) */
static inline void pb_cmp_exact(const char *what, const pbuf *b) {
    uint8_t *g = pb_get(b, DUT), *f = pb_get(b, REF);
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < b->bytes; i++)
        if (g[i] != f[i] && diff++ == 0) first = i;
    if (diff) {
        fprintf(stderr, "  %s: %s: %zu of %zu bytes differ (first at byte %zu: %s %u, cpu %u)\n", pb_op, what, diff,
                b->bytes, first, pb_be[DUT]->name, g[first], f[first]);
        tu_failures++;
        pb_worst = INFINITY;
    }
    free(g), free(f);
}

/* The same bit for bit, except that a NaN matches any NaN (b->dt is fp32 or
 * bf16): the NaN payload is not part of the contract (a GPU's cvt.rn.bf16.f32
 * gives the canonical 0x7FFF, the CPU keeps the quiet payload 0x7FC0). */
static inline void pb_cmp_exact_nan(const char *what, const pbuf *b) {
    uint8_t *g = pb_get(b, DUT), *f = pb_get(b, REF);
    const size_t es = b->dt == LL_BF16 ? 2 : 4;
    size_t diff = 0, first = 0;
    for (size_t i = 0; i + es <= b->bytes; i += es) {
        uint32_t ug = 0, uf = 0;
        memcpy(&ug, g + i, es);
        memcpy(&uf, f + i, es);
        const uint32_t exp = es == 2 ? 0x7F80u : 0x7F800000u, man = es == 2 ? 0x007Fu : 0x007FFFFFu;
        const int ng = (ug & exp) == exp && (ug & man), nf = (uf & exp) == exp && (uf & man);
        if (ug != uf && !(ng && nf) && diff++ == 0) first = i;
    }
    if (diff) {
        fprintf(stderr, "  %s: %s: %zu of %zu elements differ (first at byte %zu: %s %u, cpu %u)\n", pb_op, what, diff,
                b->bytes / es, first, pb_be[DUT]->name, g[first], f[first]);
        tu_failures++;
        pb_worst = INFINITY;
    }
    free(g), free(f);
}

/* ---- one process per case ----
 * Each op (method) runs in a child process (this program re-executed with
 * `flag value`), so a kernel that faults -- a sticky CUDA error poisons the
 * whole context -- or hangs fails its own case only, and the others are still
 * reported.  The child exits 0 (pass), PB_CHECKS_FAILED (its checks failed;
 * it printed why), anything else (ll_die: an error the backend stopped on,
 * printed on stderr) or dies of SIGALRM after timeout_s.  On the CPU
 * (LL_PARITY_SELFTEST) cases run in one process unless LL_PARITY_FORK=1; on a
 * device LL_PARITY_FORK=0 runs them in one (scripts/gpu_check.sh's sanitizer
 * runs: under compute-sanitizer each child's start took ~3 s, and the ~54 ops
 * ran past the step's 150 s on an H200, 2026-11-26). */
static inline int pb_use_children(void) {
    const char *f = getenv("LL_PARITY_FORK");
    if (f && *f) return strcmp(f, "0") != 0;
    return !pb_selftest;
}
#define PB_CHECKS_FAILED 10
static inline int pb_child(const char *self, const char *flag, const char *value, unsigned timeout_s, char *why,
                           size_t why_len) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, why_len, "fork failed");
        return -1;
    }
    if (pid == 0) {
        alarm(timeout_s);
        char *args[] = {(char *)self, (char *)flag, (char *)value, NULL};
        execv(self, args);
        _exit(127);
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    if (WIFEXITED(st) && WEXITSTATUS(st) == PB_CHECKS_FAILED) return 1;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        snprintf(why, why_len, "did not finish in %u s (a hung kernel?)", timeout_s);
    else if (WIFSIGNALED(st))
        snprintf(why, why_len, "the test process died of signal %d", WTERMSIG(st));
    else
        snprintf(why, why_len, "the test process stopped with exit status %d (the error is on stderr above)",
                 WEXITSTATUS(st));
    return -1;
}

/* ---- LL_PARITY_BREAK: wrong ops the harness must catch (in either precision) ---- */
static ll_backend *g_real; /* the unbroken ops */
static inline void brk_acc(ll_backend *be, ll_act *dst, const ll_act *src, size_t n) {
    be->memset0(be, dst, n * ll_act_size(be)); /* overwrites instead of accumulating */
    g_real->acc(be, dst, src, n);
}
static inline void brk_dropout_fwd(ll_backend *be, ll_act *x, uint8_t *mask, size_t n, real p, const ll_philox *rng,
                                   uint64_t offset) {
    g_real->dropout_fwd(be, x, mask, n, p, rng, offset + 1); /* off by one element of the stream */
}
/* fp32 C: rounded to bf16 precision, what TF32/bf16 math would give (the fp32
 * tolerance must catch it); bf16 C (rounded anyway): the last K term dropped
 * (a missed tail tile) */
static inline void brk_gemm(ll_backend *be, const ll_gemm_desc *g) {
    if (g->c_type == LL_F32) {
        g_real->gemm(be, g);
        float *C = g->C;
        for (int i = 0; i < g->M; i++)
            for (int j = 0; j < g->N; j++) {
                uint32_t u;
                memcpy(&u, &C[(size_t)i * g->ldc + j], 4);
                u &= 0xFFFF0000u;
                memcpy(&C[(size_t)i * g->ldc + j], &u, 4);
            }
    } else {
        ll_gemm_desc d = *g;
        if (d.K > 1) d.K--;
        g_real->gemm(be, &d);
    }
}
static inline void brk_layernorm_fwd(ll_backend *be, ll_act *out, real *mean, real *rstd, const ll_act *x,
                                     const real *w, const real *b, int N, int C) {
    g_real->layernorm_fwd(be, out, mean, rstd, x, w, b, N > 1 ? N - 1 : N, C); /* misses the last row */
}
/* within every tolerance, but not the bits of the two ops: rstd of row 0 one ulp up */
static inline void brk_residual_ln_fwd(ll_backend *be, ll_act *y, ll_act *s, const ll_act *x, const real *g1,
                                       const real *g2, real p, const ll_philox *rng, uint64_t offset, ll_act *u,
                                       real *mean, real *rstd, const real *w, const real *b, int N, int C) {
    g_real->residual_ln_fwd(be, y, s, x, g1, g2, p, rng, offset, u, mean, rstd, w, b, N, C);
    if (N > 0 && rstd) {
        real r;
        be->download(be, &r, rstd, sizeof r);
        r = nextafterf(r, INFINITY);
        be->upload(be, rstd, &r, sizeof r);
    }
}
static inline void brk_embed_fwd(ll_backend *be, ll_act *out, const int32_t *tok, const ll_act *emb, const real *pos,
                                 int pos_offset, const int *pos_at, real scale, int N, int T, int C, int pad) {
    (void)be, (void)out, (void)tok, (void)emb, (void)pos, (void)pos_offset, (void)pos_at, (void)scale, (void)N, (void)T,
        (void)C, (void)pad;
    ll_die("CUDA error at kernels/embed.cu:1 (simulated by LL_PARITY_BREAK): an illegal memory access");
}
static inline void break_op(ll_backend *dut, const char *op) {
    static ll_backend real_ops;
    real_ops = *dut;
    g_real = &real_ops;
    if (!strcmp(op, "acc")) dut->acc = brk_acc;
    else if (!strcmp(op, "dropout_fwd")) dut->dropout_fwd = brk_dropout_fwd;
    else if (!strcmp(op, "gemm")) dut->gemm = brk_gemm;
    else if (!strcmp(op, "layernorm_fwd")) dut->layernorm_fwd = brk_layernorm_fwd;
    else if (!strcmp(op, "latent_kl")) dut->latent_kl = NULL; /* a missing op */
    else if (!strcmp(op, "residual_ln_fwd")) dut->residual_ln_fwd = brk_residual_ln_fwd; /* bits, not values */
    else if (!strcmp(op, "embed_fwd")) dut->embed_fwd = brk_embed_fwd; /* stops the process (LL_PARITY_FORK=1) */
    else ll_die("LL_PARITY_BREAK=%s: expected acc, dropout_fwd, gemm, layernorm_fwd, latent_kl, residual_ln_fwd or embed_fwd",
                op);
    if (!pb_quiet) printf("LL_PARITY_BREAK: %s of the backend under test is wrong on purpose: this run must fail\n", op);
}
/* LL_PARITY_BREAK=<op> (only with LL_PARITY_SELFTEST=1): break that op of the backend under test */
static inline void pb_break_from_env(void) {
    const char *brk = getenv("LL_PARITY_BREAK");
    if (!brk || !*brk) return;
    if (!pb_selftest) ll_die("LL_PARITY_BREAK needs LL_PARITY_SELFTEST=1");
    break_op(pb_be[DUT], brk);
}

#endif
