/* Latent layers (Li et al. 2020, reference-spec §0.1/§1.2): each layer l of a
 * latent stack is gated by z_l, drawn once per forward from the 2-way
 * Gumbel-Softmax over logits (a_l, 0), i.e. z = sigmoid((a + g1 - g2) / tau);
 * hard samples are 1[z_soft > 0.5] with the straight-through gradient of the
 * soft sample.  The gate multiplies every residual branch of the layer (via
 * ll_layer_ctl), so dL/dz_l is the layer's dgate and dL/da_l = dgate dz/da. */
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

static real sigm(real x) { return 1 / (1 + rexp(-x)); }

void ll_latent_sample(ll_model *m, int stack, int row, uint64_t seed, uint64_t rng_step, real tau, int hard) {
    const int L = layers_of(m, stack);
    real a[4096];
    if (L > 4096) ll_die("latent depth supports at most 4096 layers per stack");
    ll_latent_logits(m, stack, row, a);
    ll_philox r;
    ll_philox_init(&r, seed, LL_RNG_GUMBEL | (uint32_t)(stack << 8) | (uint32_t)row << 9, (uint32_t)rng_step);
    ll_layer_ctl *ctl = ctl_of(m, stack);
    real *z = m->latent_z[stack] + (size_t)row * L, *dzda = m->latent_dzda[stack] + (size_t)row * L;
    for (int l = 0; l < L; l++) {
        /* g1 - g2 ~ Logistic(0,1): log(u) - log(1-u) with one uniform is the same law;
         * we draw the two Gumbels explicitly, as the reference does. */
        double g1 = -log(-log(ll_philox_uniform(&r, 2 * (uint64_t)l)));
        double g2 = -log(-log(ll_philox_uniform(&r, 2 * (uint64_t)l + 1)));
        real soft = sigm((real)((a[l] + g1 - g2) / tau));
        z[l] = hard ? (soft > (real)0.5) : soft; /* strictly > 0.5, as the code */
        dzda[l] = soft * (1 - soft) / tau;         /* straight-through: gradient of the soft sample */
        ctl[l].gate = z[l];
        ctl[l].skip = 0;
        ctl[l].needs_dgate = 1;
    }
}

void ll_latent_backward(ll_model *m, int stack, int row) {
    const int L = layers_of(m, stack);
    real g[4096];
    const ll_layer_ctl *ctl = ctl_of(m, stack);
    const real *dzda = m->latent_dzda[stack] + (size_t)row * L;
    for (int l = 0; l < L; l++) g[l] = (real)ctl[l].dgate * dzda[l];
    ll_latent_add_grad(m, stack, row, g);
}

void ll_latent_add_grad(ll_model *m, int stack, int row, const real *g) {
    const int L = layers_of(m, stack);
    real cur[4096];
    real *dst = m->grads + m->latent_logits[stack] + (size_t)row * L;
    m->be->download(m->be, cur, dst, sizeof(real) * L);
    for (int l = 0; l < L; l++) cur[l] += g[l];
    m->be->upload(m->be, dst, cur, sizeof(real) * L);
}

/* Gates of one stack at inference; `draw` keys the sample mode's draw.  A
 * layer with z = 0 gets gate 0 (ll_layer_off), not skip: that is what
 * training computes at z = 0 for every norm (post-norm keeps its layer norms,
 * DLCL takes the layer's input as its entry), and it is still not computed. */
static void apply_inference(ll_model *m, int stack, uint64_t draw) {
    const int L = layers_of(m, stack), row = m->latent_inf[stack].row, mode = m->latent_inf[stack].mode;
    real a[4096];
    ll_latent_logits(m, stack, row, a);
    ll_layer_ctl *ctl = ctl_of(m, stack);
    ll_philox r; /* stream 0xffffffff: never a training step's; counter (draw, layer) */
    ll_philox_init(&r, m->latent_inf[stack].seed, LL_RNG_GUMBEL | (uint32_t)(stack << 8) | (uint32_t)row << 9,
                   0xffffffffu);
    for (int l = 0; l < L; l++) {
        real q = sigm(a[l]);
        ctl[l].needs_dgate = 0;
        ctl[l].skip_cross = 0;
        ctl[l].skip = 0;
        if (mode == LL_LATENT_SOFT) /* z = q */
            ctl[l].gate = q;
        else if (mode == LL_LATENT_SAMPLE) /* the reference's stochastic hard draw, one per batch */
            ctl[l].gate = ll_philox_uniform(&r, draw * (uint64_t)L + (uint64_t)l) < q;
        else /* hard: used iff q >= threshold */
            ctl[l].gate = q >= m->latent_inf[stack].threshold;
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
}

double ll_latent_expected_depth(ll_model *m, int stack, int row) {
    const int L = layers_of(m, stack);
    real a[4096];
    ll_latent_logits(m, stack, row, a);
    double e = 0;
    for (int l = 0; l < L; l++) e += sigm(a[l]);
    return e;
}

int ll_latent_mode(const char *s) {
    return !strcmp(s, "soft") ? LL_LATENT_SOFT : !strcmp(s, "sample") ? LL_LATENT_SAMPLE : LL_LATENT_HARD;
}

int ll_latent_row(const ll_model *m, int lang) {
    if (m->hp.latent_rows <= 1 || lang < 0) return 0;
    return lang < m->hp.latent_rows ? lang : 0;
}
