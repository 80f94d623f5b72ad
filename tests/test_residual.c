/* The fused residual ops (backend.h residual_fwd / residual_bwd) against the
 * op sequences they replace in layers.c, on the CPU fp32 and bf16 backends:
 *   forward:  dropout_fwd(s), then add or add_gated(y, x, s, g1, g2);
 *   backward: copy or acc(dx, ds), dot_acc(dg1, ds, s, g2),
 *             dot_acc(dg2, ds, s, g1), scale_gated(ds), dropout_bwd(ds, mask)
 *             with the mask forward's dropout_fwd stored.
 * Every combination of gates (none, one, both, a gate of exactly 1), dropout
 * (off, 0.3), dx mode (none, copy, accumulate), offsets not on a Philox
 * block or chunk and lengths not a multiple of 8.  y, s, ds and dx must be
 * bit-identical (the same float operations on every element); dg1 and dg2
 * within 1e-6 relative: both are one double sum rounded to fp32, but the
 * fused op splits the sum between threads along Philox chunks, not along
 * elements, so the double partial sums are added in another order (a
 * difference of ~1e-16 relative before the rounding to fp32). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "util/testutil.h"

#define DG_TOL 1e-6

/* n activations of be's dtype with values lo + (hi - lo) u (u Philox uniforms) */
static ll_act *act_rand(ll_backend *be, size_t n, uint64_t seed, float lo, float hi) {
    float *f = malloc(n * sizeof *f);
    ll_philox r;
    ll_philox_init(&r, seed, 5, 1);
    for (size_t i = 0; i < n; i++) f[i] = lo + (hi - lo) * ll_philox_uniform(&r, i);
    ll_act *a = be->alloc(be, n * ll_act_size(be));
    be->convert(be, a, be->act, f, LL_F32, n);
    free(f);
    return a;
}
static ll_act *act_dup(ll_backend *be, const ll_act *a, size_t n) {
    ll_act *d = be->alloc(be, n * ll_act_size(be));
    be->copy(be, d, a, n * ll_act_size(be));
    return d;
}
/* index of the first differing element, or -1 */
static long first_diff(const ll_backend *be, const ll_act *a, const ll_act *b, size_t n) {
    const size_t w = ll_act_size(be);
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)a + i * w, (const char *)b + i * w, w)) return (long)i;
    return -1;
}

static void one_case(ll_backend *be, size_t n, uint64_t off, real p, int gates, int dx_mode) {
    real gv1 = 0.7f, gv2 = 1.3f;
    if (gates == 4) gv1 = 1; /* a gate of exactly 1: scale_gated leaves ds alone */
    const real *g1 = (gates & 1) || gates == 4 ? &gv1 : NULL, *g2 = (gates & 2) ? &gv2 : NULL;
    ll_philox rng;
    ll_philox_init(&rng, 42, LL_RNG_DROPOUT, 9);
    const ll_philox *r = p > 0 ? &rng : NULL;
    char what[160];
    snprintf(what, sizeof what, "%s n=%zu off=%llu p=%g gates=%d dx_mode=%d", ll_dtype_str(be->act), n,
             (unsigned long long)off, (double)p, gates, dx_mode);

    /* forward: the old sequence on (y0, s0), the fused op on (y1, s1); also y aliasing x */
    ll_act *x = act_rand(be, n, 1, -2, 2), *s0 = act_rand(be, n, 2, -1, 1), *s1 = act_dup(be, s0, n);
    ll_act *y0 = act_rand(be, n, 3, 0, 1), *y1 = act_dup(be, y0, n), *x2 = act_dup(be, x, n), *s2 = act_dup(be, s0, n);
    uint8_t *mask = malloc(n);
    if (p > 0) be->dropout_fwd(be, s0, mask, n, p, r, off);
    if (!g1 && !g2)
        be->add(be, y0, x, s0, n);
    else
        be->add_gated(be, y0, x, s0, g1, g2, n);
    be->residual_fwd(be, y1, s1, x, g1, g2, n, p, r, off);
    be->residual_fwd(be, x2, s2, x2, g1, g2, n, p, r, off);
    long d;
    CHECK_MSG((d = first_diff(be, s0, s1, n)) < 0, "residual_fwd %s: s differs at %ld", what, d);
    CHECK_MSG((d = first_diff(be, y0, y1, n)) < 0, "residual_fwd %s: y differs at %ld", what, d);
    CHECK_MSG((d = first_diff(be, y0, x2, n)) < 0, "residual_fwd %s, y = x: y differs at %ld", what, d);

    /* backward on the forward's dropped s */
    ll_act *ds0 = act_rand(be, n, 4, -1, 1), *ds1 = act_dup(be, ds0, n);
    ll_act *dx0 = act_rand(be, n, 5, -1, 1), *dx1 = act_dup(be, dx0, n);
    real dga0[2] = {0.25f, -0.5f}, dga1[2] = {0.25f, -0.5f};
    if (dx_mode == LL_RES_COPY) be->copy(be, dx0, ds0, n * ll_act_size(be));
    if (dx_mode == LL_RES_ACC) be->acc(be, dx0, ds0, n);
    if (g1) be->dot_acc(be, &dga0[0], ds0, s0, n, g2);
    if (g2) be->dot_acc(be, &dga0[1], ds0, s0, n, g1);
    if (g1 || g2) be->scale_gated(be, ds0, g1, g2, n);
    if (p > 0) be->dropout_bwd(be, ds0, mask, n, p);
    be->residual_bwd(be, ds1, dx_mode == LL_RES_NONE ? NULL : dx1, dx_mode, s1, g1 ? &dga1[0] : NULL,
                     g2 ? &dga1[1] : NULL, g1, g2, n, p, r, off);
    CHECK_MSG((d = first_diff(be, ds0, ds1, n)) < 0, "residual_bwd %s: ds differs at %ld", what, d);
    CHECK_MSG((d = first_diff(be, dx0, dx1, n)) < 0, "residual_bwd %s: dx differs at %ld", what, d);
    for (int k = 0; k < 2; k++)
        CHECK_MSG(fabs((double)dga1[k] - dga0[k]) <= DG_TOL * fabs((double)dga0[k]),
                  "residual_bwd %s: gate gradient %d %.9g, unfused %.9g", what, k + 1, (double)dga1[k],
                  (double)dga0[k]);
    ll_act *bufs[] = {x, s0, s1, y0, y1, x2, s2, ds0, ds1, dx0, dx1};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->free(be, bufs[i]);
    free(mask);
}

/* The dropout actually drops: about p of the elements, and both passes agree
 * on which (backward redraws the bits, it does not read forward's output). */
static void test_rate(ll_backend *be) {
    const size_t n = 100003;
    ll_philox rng;
    ll_philox_init(&rng, 7, LL_RNG_DROPOUT, 1);
    ll_act *s = act_rand(be, n, 6, 1, 2), *y = act_rand(be, n, 7, 0, 1), *x = act_rand(be, n, 8, 0, 0);
    ll_act *ds = act_rand(be, n, 9, 1, 2);
    be->residual_fwd(be, y, s, x, NULL, NULL, n, 0.3f, &rng, 77);
    be->residual_bwd(be, ds, NULL, LL_RES_NONE, s, NULL, NULL, NULL, NULL, n, 0.3f, &rng, 77);
    float *sf = malloc(n * sizeof *sf), *df = malloc(n * sizeof *df);
    be->convert(be, sf, LL_F32, s, be->act, n);
    be->convert(be, df, LL_F32, ds, be->act, n);
    size_t dropped = 0, disagree = 0;
    for (size_t i = 0; i < n; i++) {
        dropped += sf[i] == 0;
        disagree += (sf[i] == 0) != (df[i] == 0);
    }
    CHECK_NEAR((double)dropped / n, 0.3, 0.01);
    CHECK_MSG(disagree == 0, "%s: %zu elements dropped in one pass only", ll_dtype_str(be->act), disagree);
    free(sf), free(df);
    ll_act *bufs[] = {s, y, x, ds};
    for (size_t i = 0; i < 4; i++) be->free(be, bufs[i]);
}

int main(void) {
    ll_set_threads(2);
    ll_backend *bes[] = {ll_backend_cpu(), ll_backend_cpu_precision(LL_BF16)};
    const size_t ns[] = {1, 13, 1000, 70001};
    const uint64_t offs[] = {0, 5, 1001, 1ull << 33};
    const real ps[] = {0, 0.3f};
    for (int b = 0; b < 2; b++) {
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++)
                for (int q = 0; q < 2; q++)
                    for (int gates = 0; gates < 5; gates++)
                        for (int mode = LL_RES_NONE; mode <= LL_RES_ACC; mode++)
                            one_case(bes[b], ns[a], offs[o], ps[q], gates, mode);
        test_rate(bes[b]);
    }
    return tu_finish("test_residual");
}
