/* Latent layers (Li et al. 2020, reference-spec §0.1/§1.2): each layer l of a
 * latent stack is gated by z_l, drawn once per forward from the 2-way
 * Gumbel-Softmax over logits (a_l, 0), i.e. z = sigmoid((a + g1 - g2) / tau);
 * hard samples are 1[z_soft > 0.5] with the straight-through gradient of the
 * soft sample.  The gate multiplies every residual branch of the layer (via
 * ll_layer_ctl), so dL/dz_l is the layer's dgate and dL/da_l = dgate dz/da.
 * Samples, gates and their gradients stay in backend memory (backend ops
 * latent_sample / latent_grad); only inference set-up reads logits. */
#include <math.h>
#include <string.h>

#include "ll/latent.h"
#include "model_internal.h"

static ll_layer_ctl *ctl_of(ll_model *m, int stack) { return stack ? m->dec_ctl : m->enc_ctl; }
static int layers_of(const ll_model *m, int stack) { return stack ? m->hp.Ld : m->hp.Le; }

int ll_latent_on(const ll_model *m, int stack) { return m->latent_logits[stack] != 0; }

void ll_latent_logits(ll_model *m, int stack, int row, real *out) {
    const int L = layers_of(m, stack);
    m->be->download(m->be, out, m->params + m->latent_logits[stack] + (size_t)row * L, sizeof(real) * L);
}

static ll_philox gumbel_rng(uint64_t seed, int stack, int row, uint32_t counter) {
    ll_philox r;
    ll_philox_init(&r, seed, LL_RNG_GUMBEL | (uint32_t)(stack << 8) | (uint32_t)row << 9, counter);
    return r;
}

void ll_latent_sample(ll_model *m, int stack, int row, uint64_t seed, uint64_t rng_step, real tau, int hard) {
    const int L = layers_of(m, stack);
    if (L > 4096) ll_die("latent depth supports at most 4096 layers per stack");
    const ll_philox r = gumbel_rng(seed, stack, row, (uint32_t)rng_step);
    real *z = m->latent_z[stack] + (size_t)row * L, *dzda = m->latent_dzda[stack] + (size_t)row * L;
    m->be->latent_sample(m->be, z, dzda, m->params + m->latent_logits[stack] + (size_t)row * L, L, &r, tau, hard);
    ll_layer_ctl *ctl = ctl_of(m, stack);
    for (int l = 0; l < L; l++) { /* the gates point at the samples: nothing comes back to the host */
        ctl[l].gate = z + l;
        ctl[l].dgate = m->dgate_buf[stack] + l;
        ctl[l].skip = ctl[l].off = 0;
    }
}

void ll_latent_backward(ll_model *m, int stack, int row) {
    const int L = layers_of(m, stack);
    m->be->latent_grad(m->be, m->grads + m->latent_logits[stack] + (size_t)row * L, m->dgate_buf[stack],
                       m->latent_dzda[stack] + (size_t)row * L, L);
}

/* Gates of one stack at inference; `draw` keys the sample mode's draw.  A
 * layer with z = 0 is off (ll_layer_off), not skipped: that is what training
 * computes at z = 0 for every norm (post-norm keeps its layer norms, DLCL
 * takes the layer's input as its entry), and it is still not computed.  Soft
 * gates q stay on the backend; hard and sampled decisions choose which layers
 * run, so the host reads q (set-up time, not per training step). */
static void apply_inference(ll_model *m, int stack, uint64_t draw) {
    const int L = layers_of(m, stack), row = m->latent_inf[stack].row, mode = m->latent_inf[stack].mode;
    ll_layer_ctl *ctl = ctl_of(m, stack);
    if (mode == LL_LATENT_SOFT) { /* z = q */
        m->be->latent_q(m->be, m->gate_buf[stack], m->params + m->latent_logits[stack] + (size_t)row * L, L);
        for (int l = 0; l < L; l++) ctl[l] = (ll_layer_ctl){.gate = m->gate_buf[stack] + l};
        return;
    }
    real a[4096];
    ll_latent_logits(m, stack, row, a);
    /* stream 0xffffffff: never a training step's; counter (draw, layer) */
    const ll_philox r = gumbel_rng(m->latent_inf[stack].seed, stack, row, 0xffffffffu);
    for (int l = 0; l < L; l++) {
        const double q = ll_latent_q(a[l]);
        int on;
        if (mode == LL_LATENT_SAMPLE) /* the reference's stochastic hard draw, one per batch */
            on = ll_philox_uniform(&r, draw * (uint64_t)L + (uint64_t)l) < q;
        else /* hard: used iff q >= threshold */
            on = q >= m->latent_inf[stack].threshold;
        ctl[l] = (ll_layer_ctl){.off = !on};
    }
}

void ll_latent_set_inference(ll_model *m, int stack, int row, int mode, real threshold, uint64_t seed) {
    if (!ll_latent_on(m, stack)) return;
    m->latent_inf[stack].mode = mode;
    m->latent_inf[stack].row = row;
    m->latent_inf[stack].threshold = threshold;
    m->latent_inf[stack].seed = seed;
    apply_inference(m, stack, 0);
}

void ll_latent_inference_draw(ll_model *m, uint64_t draw) {
    for (int s = 0; s < 2; s++)
        if (ll_latent_on(m, s) && m->latent_inf[s].mode == LL_LATENT_SAMPLE) apply_inference(m, s, draw);
    for (int j = 0; j < m->n_ens; j++) ll_latent_inference_draw(m->ens[j], draw); /* an ensemble's other models */
}

double ll_latent_expected_depth(ll_model *m, int stack, int row) {
    const int L = layers_of(m, stack);
    real a[4096];
    ll_latent_logits(m, stack, row, a);
    double e = 0;
    for (int l = 0; l < L; l++) e += ll_latent_q(a[l]);
    return e;
}

int ll_latent_mode(const char *s) {
    return !strcmp(s, "soft") ? LL_LATENT_SOFT : !strcmp(s, "sample") ? LL_LATENT_SAMPLE : LL_LATENT_HARD;
}

int ll_latent_row(const ll_model *m, int lang) {
    if (m->hp.latent_rows <= 1 || lang < 0) return 0;
    return lang < m->hp.latent_rows ? lang : 0;
}
