/* A backend that counts: every op is forwarded to an inner backend and
 * counted, and host reads (download) and writes (upload) are tallied apart.
 * `lltrain --op-stats` runs on it to show how often a training step crosses
 * between host and backend (the point of the device-ready core: at most one
 * read per update, op calls linear in depth); tests/cli/test_op_count.sh
 * holds the trainer to that.  Counters are atomic: the CPU team's workers
 * share the backend. */
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/core.h"

#define SLOTS (sizeof(ll_backend) / sizeof(void *))
#define COND_MAX 8 /* conditionals nested */

typedef struct {
    void *p;
    size_t n;
} dry_alloc;

typedef struct {
    uint8_t fwd, run, in_else, drops;
} cond_frame;

typedef struct {
    ll_backend be; /* first: the wrapper is handed out as an ll_backend */
    ll_backend *inner;
    ll_op_counts c;
    /* dry mode: ops are counted, not run; alloc hands out address space only */
    int dry;
    int timing; /* ll_backend_timing: each op timed between syncs of the inner backend */
    int fingerprint; /* ll_backend_fingerprint: every op hashed into fp (alloc/free always run) */
    uint64_t fp;
    /* cond_if frames: fwd, the inner backend records both branches; else only the
     * host's branch is forwarded (off > 0 while inside the other one) */
    cond_frame cond[COND_MAX];
    int cond_depth, off;
    uintptr_t next;
    dry_alloc *live;
    size_t n_live, cap_live;
    /* gemm calls by shape (ll_backend_gemm_shapes), under `mu` (the CPU team's workers share it) */
    ll_gemm_shape *shapes;
    int n_shapes, cap_shapes;
    int mu; /* a spin lock (counting is used from plain C, without pthreads) */
} counting;

/* Count the op and its CUDA launches; the backend to run it on, or NULL in dry mode. */
static ll_backend *tick_l(ll_backend *be, size_t off, uint64_t launches) {
    counting *k = (counting *)be;
    if (k->off) return NULL; /* the branch of a conditional the host did not take */
    if (k->fingerprint) return k->dry ? NULL : k->inner; /* (counts unused: no atomics on its path) */
    __atomic_fetch_add(&k->c.per_op[off / sizeof(void *)], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&k->c.calls, 1, __ATOMIC_RELAXED);
    if (launches) {
        __atomic_fetch_add(&k->c.per_op_launches[off / sizeof(void *)], launches, __ATOMIC_RELAXED);
        __atomic_fetch_add(&k->c.launches, launches, __ATOMIC_RELAXED);
    }
    return k->dry ? NULL : k->inner;
}
static ll_backend *tick(ll_backend *be, size_t off) { return tick_l(be, off, 0); }

/* Timing: the inner backend is synchronised before and after the op, so the
 * interval is the op's own execution (slower than a real step, where the
 * device overlaps launches, but it shows where the time goes). */
static double op_start(counting *k, ll_backend *in) {
    if (!k->timing) return 0;
    if (in->sync) in->sync(in);
    return ll_now();
}
static void op_end(counting *k, ll_backend *in, size_t off, double t0) {
    if (!k->timing) return;
    if (in->sync) in->sync(in);
    __atomic_fetch_add(&k->c.per_op_ns[off / sizeof(void *)], (uint64_t)((ll_now() - t0) * 1e9), __ATOMIC_RELAXED);
}

/* ---- fingerprints: every op and its arguments hashed ----
 * Pointers by value (backend memory: where the op reads and writes), scalars
 * by bytes, the descriptors passed by pointer (gemm, Philox stream, latent
 * prior) by content, so two runs of a step with equal hashes issue the same
 * ops with the same arguments (ll_backend_fingerprint). */
static void fp_u64(counting *k, uint64_t v) {
    uint64_t h = (k->fp ^ v) * 0x9E3779B97F4A7C15ull;
    k->fp = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ull;
}
static void fp_raw(counting *k, const void *p, size_t n) {
    const unsigned char *c = p;
    fp_u64(k, n);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = 0;
        memcpy(&v, c + i, n - i < 8 ? n - i : 8);
        fp_u64(k, v);
    }
}
#define FP_PTR(k, p) fp_u64(k, (uint64_t)(uintptr_t)(p))
/* a field added to one of these must be hashed below (else a kept CUDA graph could be replayed
 * for a step that differs in it): the sizes as of the fields hashed, on 64-bit targets */
_Static_assert(sizeof(void *) != 8 || sizeof(ll_gemm_desc) == (sizeof(real) == 4 ? 136 : 144),
               "a new ll_gemm_desc field: hash it in fp_gemm");
_Static_assert(sizeof(void *) != 8 || sizeof(ll_philox) == 24, "a new ll_philox field: hash it in fp_philox");
_Static_assert(sizeof(void *) != 8 || sizeof(ll_latent_prior) == 160, "a new ll_latent_prior field: hash it in fp_prior");
static void fp_gemm(counting *k, const void *px, size_t n) {
    (void)n;
    const ll_gemm_desc *g = *(const ll_gemm_desc *const *)px;
    const int64_t iv[] = {g->trans_a, g->trans_b, g->M, g->N, g->K, g->a_type, g->lda, g->b_type, g->ldb,
                          g->c_type, g->ldc, g->epi, g->bias_type, g->bgrad_set, g->side};
    for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++) fp_u64(k, (uint64_t)iv[i]);
    fp_raw(k, &g->alpha, sizeof g->alpha), fp_raw(k, &g->beta, sizeof g->beta);
    FP_PTR(k, g->A), FP_PTR(k, g->B), FP_PTR(k, g->C), FP_PTR(k, g->bias), FP_PTR(k, g->bgrad);
    FP_PTR(k, g->aux), FP_PTR(k, g->relu_y);
}
static void fp_philox(counting *k, const void *px, size_t n) {
    (void)n;
    const ll_philox *r = *(const ll_philox *const *)px;
    if (!r) return fp_u64(k, 0);
    fp_u64(k, (uint64_t)r->key[0] << 32 | r->key[1]), fp_u64(k, (uint64_t)r->ctr_hi[0] << 32 | r->ctr_hi[1]);
    FP_PTR(k, r->ctr_hi1_at);
}
static void fp_prior(counting *k, const void *px, size_t n) {
    (void)n;
    const ll_latent_prior *p = *(const ll_latent_prior *const *)px;
    if (!p) return fp_u64(k, 0);
    const int64_t iv[] = {p->L, p->rows, p->n_active, p->prior_agg, p->agg_across_layers};
    for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++) fp_u64(k, (uint64_t)iv[i]);
    fp_raw(k, p->active, sizeof p->active), fp_raw(k, &p->prior_p, sizeof p->prior_p);
}
static void fp_sample_params(counting *k, const void *px, size_t n) {
    (void)n;
    const ll_sample_params *p = *(const ll_sample_params *const *)px;
    const int64_t iv[] = {p->topk, p->pad, p->bos, p->eos, p->unk};
    for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++) fp_u64(k, (uint64_t)iv[i]);
    fp_raw(k, &p->topp, sizeof p->topp), fp_raw(k, &p->temperature, sizeof p->temperature);
    fp_raw(k, &p->unkpen, sizeof p->unkpen);
}
static void fp_ptrs(counting *k, const void *const *v, int n) {
    for (int i = 0; i < n; i++) FP_PTR(k, v[i]);
}
/* one argument (an lvalue: the op's parameter) */
#define FP1(x)                                                                                          \
    _Generic((x), const ll_gemm_desc *: fp_gemm, const ll_philox *: fp_philox, const ll_latent_prior *: fp_prior, \
             const ll_sample_params *: fp_sample_params, \
             default: fp_raw)(k_, &(x), sizeof(x));
#define FP_E1(m, x) m(x)
#define FP_E2(m, x, ...) m(x) FP_E1(m, __VA_ARGS__)
#define FP_E3(m, x, ...) m(x) FP_E2(m, __VA_ARGS__)
#define FP_E4(m, x, ...) m(x) FP_E3(m, __VA_ARGS__)
#define FP_E5(m, x, ...) m(x) FP_E4(m, __VA_ARGS__)
#define FP_E6(m, x, ...) m(x) FP_E5(m, __VA_ARGS__)
#define FP_E7(m, x, ...) m(x) FP_E6(m, __VA_ARGS__)
#define FP_E8(m, x, ...) m(x) FP_E7(m, __VA_ARGS__)
#define FP_E9(m, x, ...) m(x) FP_E8(m, __VA_ARGS__)
#define FP_E10(m, x, ...) m(x) FP_E9(m, __VA_ARGS__)
#define FP_E11(m, x, ...) m(x) FP_E10(m, __VA_ARGS__)
#define FP_E12(m, x, ...) m(x) FP_E11(m, __VA_ARGS__)
#define FP_E13(m, x, ...) m(x) FP_E12(m, __VA_ARGS__)
#define FP_E14(m, x, ...) m(x) FP_E13(m, __VA_ARGS__)
#define FP_E15(m, x, ...) m(x) FP_E14(m, __VA_ARGS__)
#define FP_E16(m, x, ...) m(x) FP_E15(m, __VA_ARGS__)
#define FP_E17(m, x, ...) m(x) FP_E16(m, __VA_ARGS__)
#define FP_E18(m, x, ...) m(x) FP_E17(m, __VA_ARGS__)
#define FP_E19(m, x, ...) m(x) FP_E18(m, __VA_ARGS__)
#define FP_E20(m, x, ...) m(x) FP_E19(m, __VA_ARGS__)
#define FP_E21(m, x, ...) m(x) FP_E20(m, __VA_ARGS__)
#define FP_E22(m, x, ...) m(x) FP_E21(m, __VA_ARGS__)
#define FP_E23(m, x, ...) m(x) FP_E22(m, __VA_ARGS__)
#define FP_E24(m, x, ...) m(x) FP_E23(m, __VA_ARGS__)
#define FP_PICK(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, _21, \
                _22, _23, _24, NAME, ...)                                                                    \
    NAME
/* FP_ARGS (inner, a, b, ...): each of the op's arguments (the inner backend included: a constant) */
#define FP_ARGS(...)                                                                                             \
    FP_PICK(__VA_ARGS__, FP_E24, FP_E23, FP_E22, FP_E21, FP_E20, FP_E19, FP_E18, FP_E17, FP_E16, FP_E15, FP_E14, \
            FP_E13, FP_E12, FP_E11, FP_E10, FP_E9, FP_E8, FP_E7, FP_E6, FP_E5, FP_E4, FP_E3, FP_E2, FP_E1)      \
    (FP1, __VA_ARGS__)

/* An op that forwards its arguments; `launches` (an expression of the
 * parameters) is how many stream operations -- kernel launches, async
 * memsets and copies -- the CUDA backend issues for the call, read off the
 * code of src/backend/cuda and kernels/ (docs/cuda-backend.md, "Launches per
 * step").  A cuBLASLt matmul counts as one kernel, CUB's radix sort as CUB_SORT. */
#define CUB_SORT 6 /* onesweep over 32-bit keys: a histogram, 4 digit passes, a memset (CUB's own choice) */
#define OPL(name, launches, params, args) OPLX(name, launches, params, args, )
/* extra: more to hash when fingerprinting (what a pointer argument points to) */
#define OPLX(name, launches, params, args, extra)                                        \
    static void c_##name params {                                                        \
        counting *k_ = (counting *)be;                                                   \
        if (k_->fingerprint) {                                                           \
            fp_u64(k_, offsetof(ll_backend, name));                                      \
            FP_ARGS args extra                                                           \
        }                                                                                \
        ll_backend *in_ = tick_l(be, offsetof(ll_backend, name), (uint64_t)(launches)); \
        if (!in_) return;                                                                \
        const double t0_ = op_start(k_, in_);                                            \
        in_->name args;                                                                  \
        op_end(k_, in_, offsetof(ll_backend, name), t0_);                                \
    }
static uint64_t chunks64(int k) { return k > 0 ? (uint64_t)(k + 63) / 64 : 0; } /* LL_CUDA_DLCL_CHUNK entries a launch */
static uint64_t gemm_launches(const ll_gemm_desc *g) {
    if (g->M <= 0 || g->N <= 0) return 0;
    const int bias = g->epi == LL_EPI_BIAS || g->epi == LL_EPI_BIAS_RELU || g->epi == LL_EPI_BIAS_RELU_AUX;
    const int bgrad = g->epi == LL_EPI_BGRAD;
    if (g->K <= 0) return (g->beta != 1 || bias) + (bgrad && g->bgrad_set); /* (+ the memset of bgrad) */
    if (bgrad && !ll_backend_bgrad_epilogue_asked()) /* CUDA's default: the product, the bias-gradient kernel */
        return 1 + (g->trans_a ? 2 : 1); /* (column sums: partials and their finish) */
    return 1 + (bgrad && !g->bgrad_set); /* BGRAD added: into scratch, then an acc into bgrad */
}

/* alloc/free: in dry mode, addresses that are never touched, and the bytes live and at peak */
static void *c_alloc(ll_backend *be, size_t n) {
    counting *k = (counting *)be;
    ll_backend *in = tick_l(be, offsetof(ll_backend, alloc), 1); /* CUDA zeroes it: one memset */
    if (!k->dry) in = k->inner; /* (memory is allocated in either branch of a conditional) */
    if (k->fingerprint) { /* memory is real in a shadow run too: the address goes into the hash */
        void *p = k->inner->alloc(k->inner, n);
        fp_u64(k, offsetof(ll_backend, alloc)), fp_u64(k, n), FP_PTR(k, p);
        return p;
    }
    if (in) return in->alloc(in, n);
    if (k->n_live == k->cap_live) {
        k->cap_live = k->cap_live ? 2 * k->cap_live : 256;
        k->live = ll_realloc(k->live, k->cap_live * sizeof *k->live);
    }
    void *p = (void *)k->next;
    k->next += (n + 4095) & ~(uintptr_t)4095;
    k->live[k->n_live++] = (dry_alloc){p, n};
    k->c.mem_live += n;
    if (k->c.mem_live > k->c.mem_peak) k->c.mem_peak = k->c.mem_live;
    return p;
}
static void c_free(ll_backend *be, void *p) {
    counting *k = (counting *)be;
    ll_backend *in = tick(be, offsetof(ll_backend, free));
    if (!k->dry) in = k->inner;
    if (k->fingerprint) {
        fp_u64(k, offsetof(ll_backend, free)), FP_PTR(k, p);
        in = k->inner;
    }
    if (in) {
        in->free(in, p);
        return;
    }
    for (size_t i = 0; p && i < k->n_live; i++)
        if (k->live[i].p == p) {
            k->c.mem_live -= k->live[i].n;
            k->live[i] = k->live[--k->n_live];
            return;
        }
}
OPL(memset0, n != 0, (ll_backend * be, void *p, size_t n), (((counting *)be)->inner, p, n))
OPL(copy, n != 0, (ll_backend * be, void *d, const void *s, size_t n), (((counting *)be)->inner, d, s, n))
OPL(sync, 0, (ll_backend * be), (((counting *)be)->inner))
OPL(convert, n != 0, (ll_backend * be, void *d, ll_dtype dt, const void *s, ll_dtype st, size_t n),
    (((counting *)be)->inner, d, dt, s, st, n))
/* A gemm's shape: the descriptor without its pointers and alpha (beta: 0 or not) */
static ll_gemm_desc shape_of(const ll_gemm_desc *g) {
    return (ll_gemm_desc){.trans_a = g->trans_a, .trans_b = g->trans_b, .M = g->M, .N = g->N, .K = g->K, .alpha = 1,
                          .beta = g->beta != 0, .a_type = g->a_type, .lda = g->lda, .b_type = g->b_type, .ldb = g->ldb,
                          .c_type = g->c_type, .ldc = g->ldc, .epi = g->epi, .bias_type = g->bias_type,
                          .bgrad_set = g->bgrad_set, .side = g->side};
}
static int same_shape(const ll_gemm_desc *a, const ll_gemm_desc *b) {
    return a->trans_a == b->trans_a && a->trans_b == b->trans_b && a->M == b->M && a->N == b->N && a->K == b->K &&
           a->beta == b->beta && a->a_type == b->a_type && a->lda == b->lda && a->b_type == b->b_type &&
           a->ldb == b->ldb && a->c_type == b->c_type && a->ldc == b->ldc && a->epi == b->epi &&
           a->bias_type == b->bias_type && a->bgrad_set == b->bgrad_set && a->side == b->side;
}
#define GEMM_SHAPES_MAX 4096
static void shapes_lock(counting *k) {
    while (__atomic_exchange_n(&k->mu, 1, __ATOMIC_ACQUIRE)) {
    }
}
static void shapes_unlock(counting *k) { __atomic_store_n(&k->mu, 0, __ATOMIC_RELEASE); }
static void tally_shape(counting *k, const ll_gemm_desc *g, uint64_t ns) {
    const ll_gemm_desc sh = shape_of(g);
    shapes_lock(k);
    int i = 0;
    while (i < k->n_shapes && !same_shape(&k->shapes[i].g, &sh)) i++;
    if (i == k->n_shapes && k->n_shapes < GEMM_SHAPES_MAX) {
        if (k->n_shapes == k->cap_shapes) {
            k->cap_shapes = k->cap_shapes ? 2 * k->cap_shapes : 64;
            k->shapes = ll_realloc(k->shapes, (size_t)k->cap_shapes * sizeof *k->shapes);
        }
        k->shapes[k->n_shapes++] = (ll_gemm_shape){.g = sh};
    }
    if (i < k->n_shapes) { /* (past GEMM_SHAPES_MAX shapes the rest are not tallied) */
        k->shapes[i].calls++;
        k->shapes[i].ns += ns;
    }
    shapes_unlock(k);
}
static void c_gemm(ll_backend *be, const ll_gemm_desc *g) {
    counting *k_ = (counting *)be;
    if (k_->fingerprint) {
        fp_u64(k_, offsetof(ll_backend, gemm));
        FP_ARGS(((counting *)be)->inner, g)
    }
    ll_backend *in = tick_l(be, offsetof(ll_backend, gemm), gemm_launches(g));
    if (k_->fingerprint || k_->off) {
        if (in) in->gemm(in, g);
        return;
    }
    const double t0 = in ? op_start(k_, in) : 0;
    if (in) in->gemm(in, g);
    if (in) op_end(k_, in, offsetof(ll_backend, gemm), t0);
    tally_shape(k_, g, k_->timing && in ? (uint64_t)((ll_now() - t0) * 1e9) : 0);
}
OPL(layernorm_fwd, N > 0,
    (ll_backend * be, ll_act *o, real *mu, real *rs, const ll_act *x, const real *w, const real *b, int N, int C),
    (((counting *)be)->inner, o, mu, rs, x, w, b, N, C))
OPL(layernorm_bwd,
    (N > 0) * (dx && (dw || db) && C <= LL_CUDA_LN_BWD_FUSED_MAX_C ? 2 : (dx != NULL) + 2 * (dw || db)),
    (ll_backend * be, ll_act *dx, real *dw, real *db, const ll_act *dy, const ll_act *x, const real *w,
     const real *mu, const real *rs, int N, int C),
    (((counting *)be)->inner, dx, dw, db, dy, x, w, mu, rs, N, C))
OPL(embed_fwd, N > 0,
    (ll_backend * be, ll_act *o, const int32_t *t, const ll_act *e, const real *p, int po, const int *pat, real s,
     int N, int T, int C, int pad),
    (((counting *)be)->inner, o, t, e, p, po, pat, s, N, T, C, pad))
OPL(embed_bwd, N > 0 ? 2 + CUB_SORT : 0, (ll_backend * be, real *de, const ll_act *d, const int32_t *t, real s, int N, int C, int pad),
    (((counting *)be)->inner, de, d, t, s, N, C, pad))
OPL(relu_fwd, n != 0, (ll_backend * be, ll_act *x, size_t n), (((counting *)be)->inner, x, n))
OPL(relu_bwd, n != 0, (ll_backend * be, ll_act *dy, const ll_act *y, size_t n), (((counting *)be)->inner, dy, y, n))
OPL(dropout_fwd, n != 0, (ll_backend * be, ll_act *x, uint8_t *m, size_t n, real p, const ll_philox *r, uint64_t o),
    (((counting *)be)->inner, x, m, n, p, r, o))
OPL(dropout_bwd, n && p > 0, (ll_backend * be, ll_act *dx, const uint8_t *m, size_t n, real p),
    (((counting *)be)->inner, dx, m, n, p))
OPL(add, n != 0, (ll_backend * be, ll_act *y, const ll_act *a, const ll_act *b, size_t n),
    (((counting *)be)->inner, y, a, b, n))
OPL(add_scaled, n != 0, (ll_backend * be, ll_act *y, const ll_act *a, const ll_act *b, real al, size_t n),
    (((counting *)be)->inner, y, a, b, al, n))
OPL(acc, n != 0, (ll_backend * be, ll_act *d, const ll_act *s, size_t n), (((counting *)be)->inner, d, s, n))
OPL(add_gated, n != 0,
    (ll_backend * be, ll_act *y, const ll_act *a, const ll_act *b, const real *g1, const real *g2, size_t n),
    (((counting *)be)->inner, y, a, b, g1, g2, n))
OPL(scale_gated, n && (g1 || g2), (ll_backend * be, ll_act *x, const real *g1, const real *g2, size_t n),
    (((counting *)be)->inner, x, g1, g2, n))
OPL(dot_acc, 2 * (n != 0), (ll_backend * be, real *d, const ll_act *a, const ll_act *b, size_t n, const real *mul),
    (((counting *)be)->inner, d, a, b, n, mul))
OPL(residual_fwd, n != 0,
    (ll_backend * be, ll_act *y, ll_act *s, const ll_act *x, const real *g1, const real *g2, size_t n, real p,
     const ll_philox *r, uint64_t o),
    (((counting *)be)->inner, y, s, x, g1, g2, n, p, r, o))
OPL(residual_bwd, n != 0,
    (ll_backend * be, ll_act *ds, ll_act *dx, int mode, const ll_act *s, real *dg1, real *dg2, const real *g1,
     const real *g2, size_t n, real p, const ll_philox *r, uint64_t o),
    (((counting *)be)->inner, ds, dx, mode, s, dg1, dg2, g1, g2, n, p, r, o))
OPL(residual_ln_fwd, N > 0,
    (ll_backend * be, ll_act *y, ll_act *s, const ll_act *x, const real *g1, const real *g2, real p,
     const ll_philox *r, uint64_t o, ll_act *u, real *mu, real *rs, const real *w, const real *b, int N, int C),
    (((counting *)be)->inner, y, s, x, g1, g2, p, r, o, u, mu, rs, w, b, N, C))
OPLX(weighted_sum, n ? chunks64(k) : 0, (ll_backend * be, ll_act *y, const ll_act *const *xs, const real *w, int k, size_t n),
    (((counting *)be)->inner, y, xs, w, k, n), fp_ptrs(k_, (const void *const *)xs, k);)
OPLX(weighted_scatter, n ? chunks64(k) : 0, (ll_backend * be, ll_act *const *ys, const real *w, const ll_act *x, int k, size_t n),
    (((counting *)be)->inner, ys, w, x, k, n), fp_ptrs(k_, (const void *const *)ys, k);)
OPLX(dots_acc, n ? 2 * chunks64(k) : 0, (ll_backend * be, real *d, const ll_act *x, const ll_act *const *ys, int k, size_t n),
    (((counting *)be)->inner, d, x, ys, k, n), fp_ptrs(k_, (const void *const *)ys, k);)
OPL(latent_sample, 1,
    (ll_backend * be, real *z, real *dz, const real *a, int L, const ll_philox *r, real tau, int hard),
    (((counting *)be)->inner, z, dz, a, L, r, tau, hard))
OPL(latent_grad, 1, (ll_backend * be, real *dl, const real *dg, const real *dz, int L),
    (((counting *)be)->inner, dl, dg, dz, L))
OPL(latent_kl, 1,
    (ll_backend * be, real *dl, double *acc, const real *a, const real *z, const real *dz, const ll_latent_prior *pr,
     int row, int ref, double w),
    (((counting *)be)->inner, dl, acc, a, z, dz, pr, row, ref, w))
OPL(latent_lk, 1,
    (ll_backend * be, real *dl, double *acc, const real *z, const real *dz, const ll_latent_prior *pr, int K, int sq,
     double w),
    (((counting *)be)->inner, dl, acc, z, dz, pr, K, sq, w))
OPL(latent_depth, 1, (ll_backend * be, double *acc, const real *a, const ll_latent_prior *pr),
    (((counting *)be)->inner, acc, a, pr))
OPL(latent_q, 1, (ll_backend * be, real *q, const real *a, int L), (((counting *)be)->inner, q, a, L))
OPL(ald_pool, 1, (ll_backend * be, real *G, const ll_act *h, const int *len, int B, int T, int C),
    (((counting *)be)->inner, G, h, len, B, T, C))
OPL(ald_loss, 2, (ll_backend * be, real *dG, double *acc, const real *G, int B, int C, real tau, const double *w),
    (((counting *)be)->inner, dG, acc, G, B, C, tau, w))
OPL(ald_unpool, 1, (ll_backend * be, ll_act *dh, const real *dG, const int *len, int B, int T, int C),
    (((counting *)be)->inner, dh, dG, len, B, T, C))
OPL(sumsq, 2 * (n != 0), (ll_backend * be, double *acc, const real *x, size_t n), (((counting *)be)->inner, acc, x, n))
OPL(grad_finish, 1, (ll_backend * be, double *st, double gs, double clip, int phi),
    (((counting *)be)->inner, st, gs, clip, phi))
OPL(spike_check, 1, (ll_backend * be, double *st, double *state, int w, double gs, double zl, double zg),
    (((counting *)be)->inner, st, state, w, gs, zl, zg))
/* kernels/attention_tc.cu's one-kernel backward: the shape rule of backend.h, on a CUDA device
 * (or a dry run standing in for one) whose attention is not switched to SIMT */
static int attention_bwd_one_kernel(ll_backend *be, int Tq, int Tk, int Dh) {
    const char *e = getenv("LL_CUDA_ATTENTION");
    return !(e && !strcmp(e, "simt")) && ll_cuda_attention_bwd_one_kernel(((counting *)be)->inner->act, Tq, Tk, Dh);
}
OPL(attention_fwd, (B + 65534) / 65535,
    (ll_backend * be, ll_act *out, real *lse, const ll_act *q, int qs, const ll_act *k, const ll_act *v, int kvs,
     const int *kl, int B, int Tq, int Tk, int H, int Dh, int causal, real ad, const ll_philox *r, uint64_t ro),
    (((counting *)be)->inner, out, lse, q, qs, k, v, kvs, kl, B, Tq, Tk, H, Dh, causal, ad, r, ro))
OPL(attention_bwd, (attention_bwd_one_kernel(be, Tq, Tk, Dh) ? 1 : 2) * ((B + 65534) / 65535),
    (ll_backend * be, ll_act *dq, ll_act *dk, ll_act *dv, const ll_act *dout, const ll_act *out, const real *lse,
     const ll_act *q, int qs, const ll_act *k, const ll_act *v, int kvs, const int *kl, int B, int Tq, int Tk, int H,
     int Dh, int causal, real ad, const ll_philox *r, uint64_t ro),
    (((counting *)be)->inner, dq, dk, dv, dout, out, lse, q, qs, k, v, kvs, kl, B, Tq, Tk, H, Dh, causal, ad, r, ro))
OPL(xent_fwd_bwd, 2,
    (ll_backend * be, ll_act *x, const int32_t *t, int N, int V, real eps, int pad, real gs, double *acc),
    (((counting *)be)->inner, x, t, N, V, eps, pad, gs, acc))
OPL(sym_kl, 2,
    (ll_backend * be, const ll_act *a, const ll_act *b, ll_act *da, ll_act *db, const int32_t *t, int N, int V,
     int pad, real al, double *acc),
    (((counting *)be)->inner, a, b, da, db, t, N, V, pad, al, acc))
OPL(log_softmax, 1, (ll_backend * be, ll_act *x, int N, int V), (((counting *)be)->inner, x, N, V))
OPL(pick_logp, N > 0,
    (ll_backend * be, real *out, const ll_act *lp, const int32_t *t, int N, int V, int pad),
    (((counting *)be)->inner, out, lp, t, N, V, pad))
OPL(ensemble_mix, n > 0, (ll_backend * be, ll_act *acc, const ll_act *x, size_t n, double b, double c),
    (((counting *)be)->inner, acc, x, n, b, c))
OPL(add_col, rows > 0, (ll_backend * be, ll_act *x, int rows, int V, int col, real val),
    (((counting *)be)->inner, x, rows, V, col, val))
OPL(fill_at, n > 0, (ll_backend * be, ll_act *x, const int32_t *idx, int n, real val),
    (((counting *)be)->inner, x, idx, n, val))
OPL(expand_cols, rows > 0,
    (ll_backend * be, ll_act *d, const ll_act *sr, const int32_t *cols, int rows, int V, int K, real fill),
    (((counting *)be)->inner, d, sr, cols, rows, V, K, fill))
OPL(copy_rows, rows > 0,
    (ll_backend * be, ll_act *d, size_t ds, const ll_act *s, size_t ss, int rows, size_t n, const int *at, size_t ats),
    (((counting *)be)->inner, d, ds, s, ss, rows, n, at, ats))
OPL(reorder_rows, 2 * (rows > 0),
    (ll_backend * be, ll_act *buf, ll_act *scratch, const int *from, int rows, size_t n, size_t stride),
    (((counting *)be)->inner, buf, scratch, from, rows, n, stride))
OPL(beam_topk, 2,
    (ll_backend * be, double *score, real *lp, int32_t *flat, const ll_act *logp, const double *cum,
     const uint8_t *mode, int groups, int beam, int V, int k, int dg, double ds, int pad, int bos, int eos),
    (((counting *)be)->inner, score, lp, flat, logp, cum, mode, groups, beam, V, k, dg, ds, pad, bos, eos))
OPL(sample_draw, rows > 0,
    (ll_backend * be, int32_t *tok, double *lq, const ll_act *logp, const ll_sample_row *row, const int32_t *ban,
     int rows, int V, const ll_sample_params *p),
    (((counting *)be)->inner, tok, lq, logp, row, ban, rows, V, p))
OPL(attention_cached, 1,
    (ll_backend * be, ll_act *out, const ll_act *q, int qs, const ll_act *kv, int kvs, size_t rs, const int *anc,
     int as, int nk, const int *nat, int rows, int H, int Dh),
    (((counting *)be)->inner, out, q, qs, kv, kvs, rs, anc, as, nk, nat, rows, H, Dh))
OPL(beam_ancestry, from ? 2 : 1,
    (ll_backend * be, int *anc, int *scratch, const int *from, int rows, int t, const int *tat, int stride, int group),
    (((counting *)be)->inner, anc, scratch, from, rows, t, tat, stride, group))
OPL(attn_align, 1,
    (ll_backend * be, int32_t *idx, const ll_act *q, int qs, const ll_act *kv, int kvs, const int *kl, int sents,
     int per, int S, int H, int Dh),
    (((counting *)be)->inner, idx, q, qs, kv, kvs, kl, sents, per, S, H, Dh))
OPL(attn_probs, sents * per > 0,
    (ll_backend * be, real *acc, int ow, real w, const ll_act *q, int qs, const ll_act *kv, int kvs, const int *kl,
     int sents, int per, int S, int H, int Dh),
    (((counting *)be)->inner, acc, ow, w, q, qs, kv, kvs, kl, sents, per, S, H, Dh))
OPL(align_argmax, sents * per > 0,
    (ll_backend * be, int32_t *idx, const real *acc, const int *kl, int sents, int per, int S),
    (((counting *)be)->inner, idx, acc, kl, sents, per, S))
OPL(adam, n != 0,
    (ll_backend * be, real *p, ll_act *pa, const real *g, real *m, real *v, size_t n, real lr, real b1, real b2,
     real eps, real wd, const double *st, int slot),
    (((counting *)be)->inner, p, pa, g, m, v, n, lr, b1, b2, eps, wd, st, slot))
OPL(ema, n != 0, (ll_backend * be, real *e, const real *p, size_t n, real decay, const double *st),
    (((counting *)be)->inner, e, p, n, decay, st))
static void *c_linear_pack(ll_backend *be, const real *W, int N, int K, int int8) {
    counting *k_ = (counting *)be;
    if (k_->fingerprint) {
        fp_u64(k_, offsetof(ll_backend, linear_pack));
        FP_ARGS(be, W, N, K, int8)
    }
    ll_backend *in = tick(be, offsetof(ll_backend, linear_pack));
    return in ? in->linear_pack(in, W, N, K, int8) : NULL;
}
OPL(linear_packed, 0,
    (ll_backend * be, ll_act *Y, int ldy, const ll_act *X, int ldx, const void *pk, const real *bias, int M),
    (((counting *)be)->inner, Y, ldy, X, ldx, pk, bias, M))
OPL(linear_unpack, 0, (ll_backend * be, void *pk), (((counting *)be)->inner, pk))

/* Conditionals: hashed by the flag's address (its value is data); forwarded
 * when the inner backend records both branches (a CUDA capture), else only the
 * ops of the host's branch go through. */
static int c_cond_if(ll_backend *be, const uint8_t *run, int host_run) {
    counting *k = (counting *)be;
    if (k->cond_depth == COND_MAX) ll_die("backend: conditionals nested deeper than %d", COND_MAX);
    if (k->fingerprint) fp_u64(k, offsetof(ll_backend, cond_if)), FP_PTR(k, run);
    ll_backend *in = tick_l(be, offsetof(ll_backend, cond_if), 1); /* the condition's kernel (and the node) */
    const int fwd = in && in->cond_if && in->cond_if(in, run, host_run) == 0;
    const int drops = !fwd && !k->dry && !host_run; /* (a shadow run hashes both branches) */
    k->cond[k->cond_depth++] = (cond_frame){.fwd = (uint8_t)fwd, .run = host_run != 0, .drops = (uint8_t)drops};
    k->off += drops;
    return 0;
}
static void c_cond_else(ll_backend *be) {
    counting *k = (counting *)be;
    if (!k->cond_depth || k->cond[k->cond_depth - 1].in_else) ll_die("backend: cond_else without cond_if");
    cond_frame *f = &k->cond[k->cond_depth - 1];
    if (k->fingerprint) fp_u64(k, offsetof(ll_backend, cond_else));
    k->off -= f->drops;
    f->in_else = 1;
    f->drops = !f->fwd && !k->dry && f->run;
    k->off += f->drops;
    if (f->fwd) k->inner->cond_else(k->inner);
}
static void c_cond_end(ll_backend *be) {
    counting *k = (counting *)be;
    if (!k->cond_depth) ll_die("backend: cond_end without cond_if");
    cond_frame *f = &k->cond[--k->cond_depth];
    if (k->fingerprint) fp_u64(k, offsetof(ll_backend, cond_end));
    k->off -= f->drops;
    if (f->fwd) k->inner->cond_end(k->inner);
}

/* not an op (no launch: an edge of the step's graph), but the graph's shape: hashed, forwarded */
static void c_join(ll_backend *be) {
    counting *k = (counting *)be;
    if (k->off) return; /* (the branch of a conditional the host did not take) */
    if (k->fingerprint) fp_u64(k, offsetof(ll_backend, join));
    if (k->inner && !k->dry && k->inner->join) k->inner->join(k->inner);
}

/* host transfers: counted apart as well as per op */
static void c_upload(ll_backend *be, void *dst, const void *src, size_t n) {
    counting *k = (counting *)be;
    __atomic_fetch_add(&k->c.uploads, 1, __ATOMIC_RELAXED);
    if (k->fingerprint) fp_u64(k, offsetof(ll_backend, upload)), FP_PTR(k, dst), FP_PTR(k, src), fp_u64(k, n);
    ll_backend *in = tick_l(be, offsetof(ll_backend, upload), n != 0);
    if (in) in->upload(in, dst, src, n);
}
static void c_download(ll_backend *be, void *dst, const void *src, size_t n) {
    counting *k = (counting *)be;
    __atomic_fetch_add(&k->c.downloads, 1, __ATOMIC_RELAXED);
    if (k->fingerprint) fp_u64(k, offsetof(ll_backend, download)), FP_PTR(k, dst), FP_PTR(k, src), fp_u64(k, n);
    ll_backend *in = tick_l(be, offsetof(ll_backend, download), n != 0);
    if (in)
        in->download(in, dst, src, n);
    else
        memset(dst, 0, n); /* dry: the host sees zeros */
}

/* a query, not an op: the inner backend's answer (a dry run's: cuBLASLt's size, as CUDA offers it) */
static size_t c_relu_mask_bytes(ll_backend *be, int rows, int cols) {
    ll_backend *in = ((counting *)be)->inner;
    return in->relu_mask_bytes ? in->relu_mask_bytes(in, rows, cols) : 0;
}
static size_t dry_relu_mask_bytes(ll_backend *be, int rows, int cols) {
    (void)be;
    return rows > 0 && cols > 0 ? (size_t)(cols + 127) / 128 * 16 * (size_t)rows : 0;
}

#define SET(name) w->be.name = in->name ? c_##name : NULL
ll_backend *ll_backend_counting(ll_backend *in) {
    counting *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->inner = in;
    w->be.name = in->name; /* the same kind of memory: callers may treat it as the inner backend */
    w->be.impl = in->impl;
    w->be.act = in->act;
    SET(alloc), SET(free), SET(upload), SET(download), SET(memset0), SET(copy), SET(sync), SET(convert), SET(gemm);
    SET(relu_mask_bytes), SET(join);
    SET(layernorm_fwd), SET(layernorm_bwd), SET(embed_fwd), SET(embed_bwd);
    SET(relu_fwd), SET(relu_bwd), SET(dropout_fwd), SET(dropout_bwd), SET(add), SET(add_scaled);
    SET(acc), SET(add_gated), SET(scale_gated), SET(dot_acc), SET(residual_fwd), SET(residual_bwd);
    SET(residual_ln_fwd);
    SET(weighted_sum);
    SET(weighted_scatter), SET(dots_acc), SET(latent_sample), SET(latent_grad), SET(latent_kl), SET(latent_lk);
    SET(latent_depth), SET(latent_q), SET(ald_pool), SET(ald_loss), SET(ald_unpool), SET(sumsq), SET(grad_finish), SET(spike_check);
    SET(attention_fwd), SET(attention_bwd), SET(xent_fwd_bwd), SET(sym_kl), SET(log_softmax), SET(pick_logp), SET(ensemble_mix), SET(add_col), SET(fill_at), SET(expand_cols), SET(adam), SET(ema);
    SET(copy_rows), SET(reorder_rows), SET(beam_topk), SET(sample_draw), SET(attention_cached), SET(beam_ancestry), SET(attn_align), SET(attn_probs), SET(align_argmax);
    SET(linear_pack), SET(linear_packed), SET(linear_unpack);
    w->be.cond_if = c_cond_if, w->be.cond_else = c_cond_else, w->be.cond_end = c_cond_end; /* (any inner) */
    return &w->be;
}
#undef SET

ll_backend *ll_backend_dry(ll_backend *like) {
    counting *k = (counting *)ll_backend_counting(like);
    if (!k) return NULL;
    k->dry = 1;
    k->next = (uintptr_t)1 << 44; /* far from any host mapping: never dereferenced */
    /* the step as on CUDA: the FFN's ReLU backward in DRELU where LL_CUDA_RELU_MASK=1 asks for it */
    k->be.relu_mask_bytes = ll_backend_relu_mask_asked() ? dry_relu_mask_bytes : NULL;
    /* ... and with CUDA's join, so the stack keeps a group of layers' backward temporaries until
     * one (ll_layer_join_every): the peak memory of a CUDA step */
    k->be.join = c_join;
    return &k->be;
}

ll_backend *ll_backend_fingerprint(ll_backend *inner) {
    counting *k = (counting *)ll_backend_counting(inner);
    if (!k) return NULL;
    k->fingerprint = 1;
    k->next = (uintptr_t)1 << 44; /* (dry mode's alloc is never used: alloc runs on inner) */
    return &k->be;
}
void ll_backend_fingerprint_shadow(ll_backend *be, int shadow) { ((counting *)be)->dry = shadow; }
uint64_t ll_backend_fingerprint_take(ll_backend *be) {
    counting *k = (counting *)be;
    const uint64_t h = k->fp;
    k->fp = 0;
    return h;
}

ll_backend *ll_backend_timing(ll_backend *inner) {
    counting *k = (counting *)ll_backend_counting(inner);
    if (!k) return NULL;
    k->timing = 1;
    return &k->be;
}

/* Op classes of the profile (what an optimisation would target). */
static const char *op_class(const char *op) {
    static const struct { const char *prefix, *cls; } t[] = {
        {"gemm", "matmul"}, {"linear_", "matmul"}, {"attention", "attention"}, {"layernorm", "layer norm"},
        {"xent", "loss"}, {"sym_kl", "loss"}, {"log_softmax", "loss"}, {"pick_logp", "loss"}, {"ensemble_mix", "loss"}, {"add_col", "loss"}, {"fill_at", "loss"}, {"expand_cols", "loss"}, {"ald_", "loss"}, {"adam", "optimizer"}, {"ema", "optimizer"},
        {"sumsq", "optimizer"}, {"grad_finish", "optimizer"}, {"spike_check", "optimizer"}, {"latent_", "latent depth"}, {"weighted_", "DLCL"},
        {"dots_acc", "DLCL"}, {"embed", "embedding"}, {"upload", "host transfer"}, {"download", "host transfer"},
        {"copy_rows", "decoding"}, {"reorder_rows", "decoding"}, {"beam_topk", "decoding"}, {"sample_draw", "decoding"}, {"beam_ancestry", "decoding"}, {"attn_align", "decoding"}, {"attn_probs", "decoding"}, {"align_argmax", "decoding"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strncmp(op, t[i].prefix, strlen(t[i].prefix))) return t[i].cls;
    return "element-wise"; /* add, acc, dropout, relu, gates, copies, memset, convert */
}

void ll_backend_print_profile(FILE *f, const ll_op_counts *c, double steps) {
    double total = 0, cls_s[32] = {0};
    const char *cls[32];
    int ncls = 0;
    for (size_t i = 0; i < SLOTS; i++) total += c->per_op_ns[i] * 1e-9;
    if (steps <= 0) steps = 1;
    fprintf(f, "%-16s %8s %10s %7s\n", "op", "calls", "ms/step", "share");
    for (size_t i = 0; i < SLOTS; i++) {
        if (!c->per_op[i]) continue;
        const double s = c->per_op_ns[i] * 1e-9;
        const char *name = ll_backend_op_name(i), *k = op_class(name);
        fprintf(f, "%-16s %8.0f %10.3f %6.1f%%\n", name, c->per_op[i] / steps, 1e3 * s / steps,
                total > 0 ? 100 * s / total : 0);
        int j = 0;
        while (j < ncls && strcmp(cls[j], k)) j++;
        if (j == ncls && ncls < 32) cls[ncls++] = k;
        if (j < 32) cls_s[j] += s;
    }
    fprintf(f, "%-16s %19s\n", "class", "ms/step   share");
    for (int j = 0; j < ncls; j++)
        fprintf(f, "%-16s %10.3f %6.1f%%\n", cls[j], 1e3 * cls_s[j] / steps, total > 0 ? 100 * cls_s[j] / total : 0);
    fprintf(f, "%-16s %10.3f (ops timed between syncs)\n", "total", 1e3 * total / steps);
}

static int by_time_then_calls(const void *pa, const void *pb) {
    const ll_gemm_shape *a = pa, *b = pb;
    if (a->ns != b->ns) return a->ns < b->ns ? 1 : -1;
    return a->calls < b->calls ? 1 : a->calls > b->calls ? -1 : 0;
}
int ll_backend_gemm_shapes(ll_backend *be, ll_gemm_shape *out, int max) {
    counting *k = (counting *)be;
    shapes_lock(k);
    const int n = k->n_shapes < max ? k->n_shapes : max;
    ll_gemm_shape *all = ll_malloc((size_t)(k->n_shapes ? k->n_shapes : 1) * sizeof *all);
    memcpy(all, k->shapes, (size_t)k->n_shapes * sizeof *all);
    qsort(all, (size_t)k->n_shapes, sizeof *all, by_time_then_calls);
    memcpy(out, all, (size_t)n * sizeof *out);
    shapes_unlock(k);
    free(all);
    return n;
}
void ll_backend_gemm_shapes_reset(ll_backend *be) {
    counting *k = (counting *)be;
    shapes_lock(k);
    k->n_shapes = 0;
    shapes_unlock(k);
}

void ll_backend_counting_free(ll_backend *be) {
    if (!be) return;
    free(((counting *)be)->shapes);
    free(((counting *)be)->live);
    free(be);
}

ll_op_counts *ll_backend_counts(ll_backend *be) { return &((counting *)be)->c; }

const char *ll_backend_op_name(size_t slot) {
    /* the op names in struct order (slot = offset / sizeof(void *)) */
#define N(name) [offsetof(ll_backend, name) / sizeof(void *)] = #name
    static const char *names[SLOTS] = {
        N(alloc), N(free), N(upload), N(download), N(memset0), N(copy), N(sync), N(convert), N(gemm),
        N(layernorm_fwd), N(layernorm_bwd), N(embed_fwd), N(embed_bwd), N(relu_fwd),
        N(relu_bwd), N(dropout_fwd), N(dropout_bwd), N(add), N(add_scaled), N(acc), N(add_gated),
        N(scale_gated), N(dot_acc), N(residual_fwd), N(residual_bwd), N(residual_ln_fwd), N(weighted_sum), N(weighted_scatter), N(dots_acc), N(latent_sample),
        N(latent_grad), N(latent_kl), N(latent_lk), N(latent_depth), N(latent_q), N(ald_pool), N(ald_loss),
        N(ald_unpool), N(sumsq), N(grad_finish), N(spike_check), N(attention_fwd), N(attention_bwd), N(xent_fwd_bwd), N(sym_kl),
        N(log_softmax), N(pick_logp), N(ensemble_mix), N(add_col), N(fill_at), N(expand_cols), N(copy_rows), N(reorder_rows), N(beam_topk), N(sample_draw), N(attention_cached), N(beam_ancestry), N(attn_align), N(attn_probs), N(align_argmax), N(adam), N(ema), N(linear_pack), N(linear_packed), N(linear_unpack)};
    /* (graph_* and cond_*: the graph's structure, not ops of the parity and profile tables) */
#undef N
    return slot < SLOTS && names[slot] ? names[slot] : "?";
}
