/* DLCL (Wang et al. 2019; reference-spec §0.2, §2): the input of layer r+1 is
 * a learned combination of all earlier layer outputs.  Entries e_k are the
 * embedding output (k = 0) and the layer outputs y_k; rows r = 0..L give
 *   pre-norm:  e_k = LN_k(y_k), in_r = sum_{k<=r} W[r][k] e_k            (Eq. 8)
 *   post-norm: e_k = y_k,      in_r = LN_r(sum_{k<=r} W[r][k] e_k)       (Eq. 9)
 * LN_0 (of y_0 in pre-norm, of row 0 in post-norm) only with
 * dlcl.normalize_embed, the default: the papers' equations include k = 0 and
 * row 0; the reference code never applies it (reference-spec 2.3-2.4).
 * in_r (r < L) feeds layer r; in_L is the stack's output (then the usual final
 * LN in pre-norm).  With the layer norms off and W[r][r] = 1, all else 0, this
 * is exactly the plain residual stack (tests/gradcheck/test_dlcl.c). */
#include <math.h>
#include <string.h>

#include "model_internal.h"

int ll_dlcl_on(const ll_model *m, int stack) { return stack ? m->hp.dlcl_dec : m->hp.dlcl_enc; }

const real *ll_dlcl_weights(const ll_model *m, int stack) {
    return m->dlcl_w[stack] ? m->params + m->dlcl_w[stack] : m->dlcl_fixed[stack];
}

size_t ll_dlcl_ln_w(const ll_model *m, int stack, int k) { return m->dlcl_ln[stack][2 * k]; }
size_t ll_dlcl_ln_b(const ll_model *m, int stack, int k) { return m->dlcl_ln[stack][2 * k + 1]; }

/* Does entry k (pre-norm) / row k (post-norm) have a layer norm? */
static int entry_ln(const ll_model *m, int k) {
    return m->hp.dlcl_ln && !m->hp.post_norm && (k >= 1 || m->hp.dlcl_norm_embed);
}
static int row_ln(const ll_model *m, int r) {
    return m->hp.dlcl_ln && m->hp.post_norm && (r >= 1 || m->hp.dlcl_norm_embed);
}

static ll_act *norm_fwd(ll_model *m, ll_stack_run *r, int k, const ll_act *x, int N) {
    ll_act *y = ll_buf(m, (size_t)N * m->hp.C);
    r->ln_mean[k] = ll_fbuf(m, N);
    r->ln_rstd[k] = ll_fbuf(m, N);
    m->be->layernorm_fwd(m->be, y, r->ln_mean[k], r->ln_rstd[k], x, m->params + ll_dlcl_ln_w(m, r->stack, k),
                         m->params + ll_dlcl_ln_b(m, r->stack, k), N, m->hp.C);
    return y;
}

static void norm_bwd(ll_model *m, ll_stack_run *r, int k, ll_act *dx, const ll_act *dy, const ll_act *x, int N) {
    const int s = r->stack;
    m->be->layernorm_bwd(m->be, dx, m->grads + ll_dlcl_ln_w(m, s, k), m->grads + ll_dlcl_ln_b(m, s, k), dy, x,
                         m->params + ll_dlcl_ln_w(m, s, k), r->ln_mean[k], r->ln_rstd[k], N, m->hp.C);
}

/* Latent depth in a DLCL stack: the layer's gate z also gates its entry,
 * e = in + z (E(y) - in), with `in` the layer's input.  z = 1 is plain DLCL;
 * z = 0 makes the entry the layer's input, so a dropped layer adds no new
 * entry and llprune can fold it into the weights exactly (docs/methods.md). */
static const ll_layer_ctl *layer_ctl(const ll_stack_run *r, int l) { return r->blocks[l * r->per_layer].ctl; }

ll_act *ll_dlcl_gate_entry(ll_model *m, ll_act *e, const ll_act *in, const real *gate, size_t n, ll_act **diff) {
    if (diff) *diff = NULL;
    if (!gate && !diff) return e;
    ll_act *d = ll_buf(m, n);
    m->be->add_scaled(m->be, d, e, in, -1, n); /* E(y) - in */
    if (diff) *diff = d;
    if (!gate) return e; /* z = 1, but dL/dz is wanted */
    ll_act *out = ll_buf(m, n);
    m->be->add_gated(m->be, out, in, d, gate, NULL, n); /* in + z (E(y) - in) */
    return out;
}

/* ent[l+1] from the layer output E(y) (e) and its input (gent: E(y) - in when
 * the gate or its gradient is in play). */
static void gated_entry(ll_model *m, ll_stack_run *r, int l, ll_act *e, size_t n) {
    const ll_layer_ctl *c = layer_ctl(r, l);
    const int grad = c && c->dgate && r->p.train;
    r->ent[l + 1] = ll_dlcl_gate_entry(m, e, r->in[l], c ? c->gate : NULL, n, grad ? &r->gent[l + 1] : NULL);
    if (!grad) r->gent[l + 1] = NULL;
}

ll_act *ll_dlcl_stack_fwd(ll_model *m, ll_stack_run *r) {
    ll_backend *be = m->be;
    const int L = r->L, N = r->p.B * r->p.T, C = m->hp.C;
    const size_t n = (size_t)N * C;
    /* pointer lists: host metadata */
    r->ent = ll_arena_alloc(&m->meta, sizeof(ll_act *) * (L + 1));
    r->raw = ll_arena_alloc(&m->meta, sizeof(ll_act *) * (L + 1));
    r->comb = ll_arena_alloc(&m->meta, sizeof(ll_act *) * (L + 1));
    r->in = ll_arena_alloc(&m->meta, sizeof(ll_act *) * (L + 1));
    r->ln_mean = ll_arena_alloc(&m->meta, sizeof(real *) * (L + 1));
    r->ln_rstd = ll_arena_alloc(&m->meta, sizeof(real *) * (L + 1));
    r->gent = ll_arena_alloc(&m->meta, sizeof(ll_act *) * (L + 1));
    r->raw[0] = r->x0;
    r->ent[0] = entry_ln(m, 0) ? norm_fwd(m, r, 0, r->x0, N) : r->x0;
    const real *W = ll_dlcl_weights(m, r->stack);
    for (int row = 0; row <= L; row++) { /* one op per row, reading W[row] on the backend */
        ll_act *c = r->comb[row] = ll_buf(m, n);
        be->weighted_sum(be, c, (const ll_act *const *)r->ent, W + (size_t)row * (L + 1), row + 1, n);
        r->in[row] = row_ln(m, row) ? norm_fwd(m, r, row, c, N) : c;
        if (row < L && ll_layer_off(layer_ctl(r, row))) { /* latent z = 0 at inference: not computed */
            r->raw[row + 1] = r->ent[row + 1] = r->in[row];
            r->gent[row + 1] = NULL;
        } else if (row < L) {
            /* forward only or checkpointing: every output is kept (later rows combine them),
             * temporaries are not */
            r->raw[row + 1] = ll_layer_releases(&r->p) || ll_layer_recomputes(m, &r->p)
                                  ? ll_layer_fwd_into(m, r, row, r->in[row], ll_buf(m, n))
                                  : ll_layer_fwd(m, r, row, r->in[row]);
            gated_entry(m, r, row,
                        entry_ln(m, row + 1) ? norm_fwd(m, r, row + 1, r->raw[row + 1], N) : r->raw[row + 1], n);
        }
    }
    return r->in[L];
}

void ll_dlcl_stack_bwd(ll_model *m, ll_stack_run *r, ll_act *dtop, ll_act *dx0) {
    ll_backend *be = m->be;
    const int L = r->L, N = r->p.B * r->p.T, C = m->hp.C, s = r->stack;
    const size_t n = (size_t)N * C;
    ll_act **dent = ll_arena_alloc(&m->meta, sizeof(ll_act *) * (L + 1));
    for (int k = 0; k <= L; k++) dent[k] = ll_zeros(m, n);
    ll_act *din = dtop;
    const real *W = ll_dlcl_weights(m, s);
    for (int row = L; row >= 0; row--) {
        ll_act *dcomb = din;
        if (row_ln(m, row)) {
            dcomb = ll_zeros(m, n);
            norm_bwd(m, r, row, dcomb, din, r->comb[row], N);
        }
        /* d e_k += W[row][k] dcomb;  dW[row][k] += <dcomb, e_k> */
        be->weighted_scatter(be, dent, W + (size_t)row * (L + 1), dcomb, row + 1, n);
        if (m->dlcl_w[s])
            be->dots_acc(be, m->grads + m->dlcl_w[s] + (size_t)row * (L + 1), dcomb, (const ll_act *const *)r->ent,
                         row + 1, n);
        if (row >= 1 && ll_layer_off(layer_ctl(r, row - 1))) { /* the entry was the input itself */
            din = dent[row];
        } else if (row >= 1) {
            const real *z = layer_ctl(r, row - 1) ? layer_ctl(r, row - 1)->gate : NULL;
            ll_act *de = dent[row]; /* d E(y) = z d e (entry gate) */
            if (z) {
                de = ll_buf(m, n);
                be->copy(be, de, dent[row], ACT_BYTES(m, n));
                be->scale_gated(be, de, z, NULL, n);
            }
            ll_act *dy = de;
            if (entry_ln(m, row)) {
                dy = ll_zeros(m, n);
                norm_bwd(m, r, row, dy, de, r->raw[row], N);
            }
            din = ll_buf(m, n);
            const ll_arena_mark mk = ll_arena_get_mark(&m->arena); /* the layer's temporaries */
            if (ll_layer_recomputes(m, &r->p)) ll_layer_fwd(m, r, row - 1, r->in[row - 1]); /* (checkpointing) */
            ll_layer_bwd(m, r, row - 1, dy, din); /* overwrites din */
            if (be->join) be->join(be); /* (its side gemms read the temporaries released here) */
            ll_arena_release(&m->arena, mk);
            if (z) { /* d in += (1 - z) d e */
                be->acc(be, din, dent[row], n);
                be->add_scaled(be, din, din, de, -1, n);
            }
            ll_layer_ctl *c = r->blocks[(row - 1) * r->per_layer].ctl;
            if (c && c->dgate && r->gent[row]) /* dz += <d e, E(y) - in>, at z = 1 too */
                be->dot_acc(be, c->dgate, dent[row], r->gent[row], n, NULL);
        }
    }
    if (entry_ln(m, 0))
        norm_bwd(m, r, 0, dx0, dent[0], r->x0, N);
    else
        be->acc(be, dx0, dent[0], n);
}
