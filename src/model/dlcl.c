/* DLCL (Wang et al. 2019; reference-spec §0.2, §2): the input of layer r+1 is
 * a learned combination of all earlier layer outputs.  Entries e_k are the
 * embedding output (k = 0) and the layer outputs y_k; rows r = 0..L give
 *   pre-norm:  e_k = LN_k(y_k) (k >= 1; y_0 only with dlcl.normalize_embed),
 *              in_r = sum_{k<=r} W[r][k] e_k
 *   post-norm: e_k = y_k,  in_r = LN_r(sum_{k<=r} W[r][k] e_k) for r >= 1, in_0 = W[0][0] y_0
 * in_r (r < L) feeds layer r; in_L is the stack's output (then the usual final
 * LN in pre-norm).  With the layer norms off and W[r][r] = 1, all else 0, this
 * is exactly the plain residual stack (tests/gradcheck/test_dlcl.c). */
#include <math.h>
#include <string.h>

#include "model_internal.h"

int ll_dlcl_on(const ll_model *m, int stack) { return stack ? m->hp.dlcl_dec : m->hp.dlcl_enc; }

static int n_layers(const ll_model *m, int stack) { return stack ? m->hp.Ld : m->hp.Le; }

real ll_dlcl_w(const ll_model *m, int stack, int r, int k) {
    const int L1 = n_layers(m, stack) + 1;
    if (!m->dlcl_w[stack]) return m->dlcl_fixed[stack][r * L1 + k];
    real w;
    m->be->download(m->be, &w, m->params + m->dlcl_w[stack] + (size_t)r * L1 + k, sizeof(real));
    return w;
}

size_t ll_dlcl_ln_w(const ll_model *m, int stack, int k) { return m->dlcl_ln[stack][2 * k]; }
size_t ll_dlcl_ln_b(const ll_model *m, int stack, int k) { return m->dlcl_ln[stack][2 * k + 1]; }

/* Does entry k (pre-norm) / row k (post-norm) have a layer norm? */
static int entry_ln(const ll_model *m, int k) {
    return m->hp.dlcl_ln && !m->hp.post_norm && (k >= 1 || m->hp.dlcl_norm_embed);
}
static int row_ln(const ll_model *m, int r) { return m->hp.dlcl_ln && m->hp.post_norm && r >= 1; }

static real *norm_fwd(ll_model *m, ll_stack_run *r, int k, const real *x, int N) {
    real *y = ll_buf(m, (size_t)N * m->hp.C);
    r->ln_mean[k] = ll_buf(m, N);
    r->ln_rstd[k] = ll_buf(m, N);
    m->be->layernorm_fwd(m->be, y, r->ln_mean[k], r->ln_rstd[k], x, m->params + ll_dlcl_ln_w(m, r->stack, k),
                         m->params + ll_dlcl_ln_b(m, r->stack, k), N, m->hp.C);
    return y;
}

static void norm_bwd(ll_model *m, ll_stack_run *r, int k, real *dx, const real *dy, const real *x, int N) {
    const int s = r->stack;
    m->be->layernorm_bwd(m->be, dx, m->grads + ll_dlcl_ln_w(m, s, k), m->grads + ll_dlcl_ln_b(m, s, k), dy, x,
                         m->params + ll_dlcl_ln_w(m, s, k), r->ln_mean[k], r->ln_rstd[k], N, m->hp.C);
}

/* Latent depth in a DLCL stack: the layer's gate z also gates its entry,
 * e = in + z (E(y) - in), with `in` the layer's input.  z = 1 is plain DLCL;
 * z = 0 makes the entry the layer's input, so a dropped layer adds no new
 * entry and llprune can fold it into the weights exactly (docs/methods.md). */
static const ll_layer_ctl *layer_ctl(const ll_stack_run *r, int l) { return r->blocks[l * r->per_layer].ctl; }
static real entry_gate(const ll_stack_run *r, int l) {
    const ll_layer_ctl *c = layer_ctl(r, l);
    return c ? c->gate : 1;
}

/* ent[l+1] from the layer output E(y) (e) and its input. */
static void gated_entry(ll_model *m, ll_stack_run *r, int l, real *e, size_t n) {
    const real z = entry_gate(r, l);
    r->gent[l + 1] = NULL;
    if (z == 1) {
        r->ent[l + 1] = e;
        return;
    }
    r->gent[l + 1] = e;
    real *out = r->ent[l + 1] = ll_buf(m, n);
    m->be->add_scaled(m->be, out, r->in[l], e, z, n);
    m->be->add_scaled(m->be, out, out, r->in[l], -z, n);
}

real *ll_dlcl_stack_fwd(ll_model *m, ll_stack_run *r) {
    ll_backend *be = m->be;
    const int L = r->L, N = r->p.B * r->p.T, C = m->hp.C;
    const size_t n = (size_t)N * C;
    r->ent = ll_arena_alloc(&m->arena, sizeof(real *) * (L + 1));
    r->raw = ll_arena_alloc(&m->arena, sizeof(real *) * (L + 1));
    r->comb = ll_arena_alloc(&m->arena, sizeof(real *) * (L + 1));
    r->in = ll_arena_alloc(&m->arena, sizeof(real *) * (L + 1));
    r->ln_mean = ll_arena_alloc(&m->arena, sizeof(real *) * (L + 1));
    r->ln_rstd = ll_arena_alloc(&m->arena, sizeof(real *) * (L + 1));
    r->gent = ll_arena_alloc(&m->arena, sizeof(real *) * (L + 1));
    r->raw[0] = r->x0;
    r->ent[0] = entry_ln(m, 0) ? norm_fwd(m, r, 0, r->x0, N) : r->x0;
    for (int row = 0; row <= L; row++) {
        real *c = r->comb[row] = ll_buf(m, n);
        be->memset0(be, c, n * sizeof(real));
        for (int k = 0; k <= row; k++) {
            real w = ll_dlcl_w(m, r->stack, row, k);
            if (w != 0) be->add_scaled(be, c, c, r->ent[k], w, n);
        }
        r->in[row] = row_ln(m, row) ? norm_fwd(m, r, row, c, N) : c;
        if (row < L && ll_layer_off(layer_ctl(r, row))) { /* latent z = 0 at inference: not computed */
            r->raw[row + 1] = r->ent[row + 1] = r->in[row];
            r->gent[row + 1] = NULL;
        } else if (row < L) {
            r->raw[row + 1] = ll_layer_fwd(m, r, row, r->in[row]);
            gated_entry(m, r, row,
                        entry_ln(m, row + 1) ? norm_fwd(m, r, row + 1, r->raw[row + 1], N) : r->raw[row + 1], n);
        }
    }
    return r->in[L];
}

void ll_dlcl_stack_bwd(ll_model *m, ll_stack_run *r, real *dtop, real *dx0) {
    ll_backend *be = m->be;
    const int L = r->L, N = r->p.B * r->p.T, C = m->hp.C, s = r->stack;
    const size_t n = (size_t)N * C;
    real **dent = ll_arena_alloc(&m->arena, sizeof(real *) * (L + 1));
    for (int k = 0; k <= L; k++) dent[k] = ll_zeros(m, n);
    real *din = dtop;
    for (int row = L; row >= 0; row--) {
        real *dcomb = din;
        if (row_ln(m, row)) {
            dcomb = ll_zeros(m, n);
            norm_bwd(m, r, row, dcomb, din, r->comb[row], N);
        }
        for (int k = 0; k <= row; k++) {
            real w = ll_dlcl_w(m, s, row, k);
            if (w != 0) be->add_scaled(be, dent[k], dent[k], dcomb, w, n);
            if (m->dlcl_w[s]) { /* dW[row][k] = <dcomb, e_k> */
                real *g = m->grads + m->dlcl_w[s] + (size_t)row * (L + 1) + k, gv;
                be->download(be, &gv, g, sizeof(real));
                gv += (real)be->dot(be, dcomb, r->ent[k], n);
                be->upload(be, g, &gv, sizeof(real));
            }
        }
        if (row >= 1 && ll_layer_off(layer_ctl(r, row - 1))) { /* the entry was the input itself */
            din = dent[row];
        } else if (row >= 1) {
            const real z = entry_gate(r, row - 1);
            real *de = dent[row]; /* d E(y) = z d e (entry gate) */
            if (z != 1) {
                de = ll_buf(m, n);
                be->copy(be, de, dent[row], n * sizeof(real));
                be->scale(be, de, z, n);
            }
            real *dy = de;
            if (entry_ln(m, row)) {
                dy = ll_zeros(m, n);
                norm_bwd(m, r, row, dy, de, r->raw[row], N);
            }
            din = ll_buf(m, n);
            ll_layer_bwd(m, r, row - 1, dy, din); /* overwrites din */
            if (z != 1) be->add_scaled(be, din, din, dent[row], 1 - z, n); /* d in += (1 - z) d e */
            ll_layer_ctl *c = r->blocks[(row - 1) * r->per_layer].ctl;
            if (c && c->needs_dgate) { /* dz += <d e, E(y) - in>, also at z = 1 */
                const real *ey = z != 1 ? r->gent[row] : r->ent[row];
                c->dgate += be->dot(be, dent[row], ey, n) - be->dot(be, dent[row], r->in[row - 1], n);
            }
        }
    }
    if (entry_ln(m, 0))
        norm_bwd(m, r, 0, dx0, dent[0], r->x0, N);
    else
        be->acc(be, dx0, dent[0], n);
}
