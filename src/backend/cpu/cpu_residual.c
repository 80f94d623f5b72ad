/* The residual branch of a block, fused (backend.h residual_fwd /
 * residual_bwd): dropout, gate and residual add forward; the copy or
 * accumulation of the residual gradient, the gate dot products, the gate
 * scale and dropout backward.  The arithmetic is that of the unfused ops
 * (dropout_fwd, add/add_gated; copy/acc, dot_acc, scale_gated, dropout_bwd),
 * element by element in the same order, so results are bit-identical to
 * them; only the dot product's double sum is split differently between
 * threads.  Dropout bits come from cpu_dropout_mask (the half-word rule),
 * redrawn in backward instead of stored.
 *
 * Work goes in chunks of 128 half-words of the Philox stream, so a chunk's
 * keep bits are one call of the generator. */
#include <string.h>

#include "cpu_internal.h"

static real gate_of(const real *g1, const real *g2) { return (g1 ? *g1 : 1) * (g2 ? *g2 : 1); }

/* Elements [*i0, *i1) of chunk c of the stream over elements offset..offset+n. */
static void chunk_span(uint64_t c, size_t n, uint64_t offset, size_t *i0, size_t *i1) {
    const uint64_t h0 = c * 128, h1 = h0 + 128;
    *i0 = (size_t)((h0 > offset ? h0 : offset) - offset);
    *i1 = (size_t)((h1 < offset + n ? h1 : offset + n) - offset);
}

static real round_bf16(real v) { return ll_bf16_to_f32(ll_f32_to_bf16((float)v)); }

void cpu_residual_fwd_real(real *y, real *s, const real *x, const real *g1, const real *g2, size_t n, real p,
                           const ll_philox *rng, uint64_t offset, int bf16) {
    if (p > 0 && !rng) ll_die("residual_fwd: dropout %g needs a Philox stream", (double)p);
    const int gated = g1 || g2, drop = p > 0;
    const real g = gate_of(g1, g2), scale = drop ? 1 / (1 - p) : 1;
    const uint64_t first = offset / 128, last = (offset + n + 127) / 128;
#pragma omp parallel for schedule(static)
    for (uint64_t c = first; c < last; c++) {
        size_t i0, i1;
        chunk_span(c, n, offset, &i0, &i1);
        uint8_t keep[128];
        if (drop) cpu_dropout_mask(keep, i1 - i0, p, rng, offset + i0);
        for (size_t i = i0; i < i1; i++) {
            real v = s[i];
            if (drop) { /* dropout_fwd, stored as the activation dtype stores it */
                v = keep[i - i0] ? v * scale : 0;
                if (bf16) v = round_bf16(v);
                s[i] = v;
            }
            y[i] = gated ? x[i] + g * v : x[i] + v; /* add_gated / add */
        }
    }
}

void cpu_residual_bwd_real(real *ds, real *dx, int dx_mode, const real *s, real *dg1, real *dg2, const real *g1,
                           const real *g2, size_t n, real p, const ll_philox *rng, uint64_t offset, int bf16) {
    if (p > 0 && !rng) ll_die("residual_bwd: dropout %g needs a Philox stream", (double)p);
    if (dx_mode != LL_RES_NONE && dx_mode != LL_RES_COPY && dx_mode != LL_RES_ACC)
        ll_die("residual_bwd: dx_mode %d", dx_mode);
    const int drop = p > 0, dot = dg1 || dg2;
    const real g = gate_of(g1, g2), scale = drop ? 1 / (1 - p) : 1;
    const uint64_t first = offset / 128, last = (offset + n + 127) / 128;
    double d = 0;
#pragma omp parallel for reduction(+ : d) schedule(static)
    for (uint64_t c = first; c < last; c++) {
        size_t i0, i1;
        chunk_span(c, n, offset, &i0, &i1);
        uint8_t keep[128];
        if (drop) cpu_dropout_mask(keep, i1 - i0, p, rng, offset + i0);
        for (size_t i = i0; i < i1; i++) {
            real v = ds[i];
            if (dx_mode == LL_RES_COPY)
                dx[i] = v;
            else if (dx_mode == LL_RES_ACC)
                dx[i] += v;
            if (dot) d += (double)v * s[i]; /* dot_acc */
            if (g != 1) { /* scale_gated (gate 1: untouched) */
                v *= g;
                if (bf16) v = round_bf16(v);
            }
            if (drop) v = keep[i - i0] ? v * scale : 0; /* dropout_bwd */
            ds[i] = v;
        }
    }
    /* dot_acc's (real)(s * mul), once per gate, gate 1 before ReZero alpha as layers.c ran them */
    if (dg1) *dg1 += (real)(d * (g2 ? *g2 : 1));
    if (dg2) *dg2 += (real)(d * (g1 ? *g1 : 1));
}

void cpu_residual_fwd(ll_backend *be, ll_act *y, ll_act *s, const ll_act *x, const real *g1, const real *g2,
                      size_t n, real p, const ll_philox *rng, uint64_t offset) {
    (void)be;
    cpu_residual_fwd_real((real *)y, (real *)s, (const real *)x, g1, g2, n, p, rng, offset, 0);
}

/* The CPU backends run the pair as their two ops (through be, so fp32 and
 * bf16 each round as they always do): equal by construction. */
void cpu_residual_ln_fwd(ll_backend *be, ll_act *y, ll_act *s, const ll_act *x, const real *g1, const real *g2, real p,
                         const ll_philox *rng, uint64_t offset, ll_act *u, real *mean, real *rstd, const real *w,
                         const real *b, int N, int C) {
    be->residual_fwd(be, y, s, x, g1, g2, (size_t)N * (size_t)C, p, rng, offset);
    be->layernorm_fwd(be, u, mean, rstd, y, w, b, N, C);
}

void cpu_residual_bwd(ll_backend *be, ll_act *ds, ll_act *dx, int dx_mode, const ll_act *s, real *dg1, real *dg2,
                      const real *g1, const real *g2, size_t n, real p, const ll_philox *rng, uint64_t offset) {
    (void)be;
    cpu_residual_bwd_real((real *)ds, (real *)dx, dx_mode, (const real *)s, dg1, dg2, g1, g2, n, p, rng, offset, 0);
}
