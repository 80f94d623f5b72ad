/* Latent depth on the model side (src/model/latent.c) and its losses
 * (src/train/latent_loss.c).  Stacks: 0 encoder, 1 decoder. */
#ifndef LL_LATENT_H
#define LL_LATENT_H

#include "ll/config.h"
#include "ll/model.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { LL_LATENT_HARD = 0, LL_LATENT_SOFT = 1, LL_LATENT_SAMPLE = 2 };

int ll_latent_on(const ll_model *m, int stack);
/* The logits a[row, 0..L) of a stack (host copy). */
void ll_latent_logits(ll_model *m, int stack, int row, real *out);
/* One Gumbel draw per layer for the next forward of `row` (keyed by rng_step),
 * on the backend: z and dz/da of the row, and the stack's gates point at z. */
void ll_latent_sample(ll_model *m, int stack, int row, uint64_t seed, uint64_t rng_step, real tau, int hard);
/* After the backward of that forward: d a[row] += dgate * dz/da (backend op). */
void ll_latent_backward(ll_model *m, int stack, int row);
/* Inference gates from q = sigmoid(a[row]).  A dropped layer is off
 * (ll_layer_off: not computed, and equal to training's z = 0 for every norm).
 * The settings are kept on the model for ll_latent_inference_draw. */
void ll_latent_set_inference(ll_model *m, int stack, int row, int mode, real threshold, uint64_t seed);
/* Sample mode: redraw both stacks' gates for batch `draw` (Philox keyed by
 * seed, stack, row and draw, so reruns repeat); no-op in hard/soft mode.
 * Decoding and validation call it once per batch. */
void ll_latent_inference_draw(ll_model *m, uint64_t draw);
double ll_latent_expected_depth(ll_model *m, int stack, int row);
/* Mode from the config string ("hard" | "soft" | "sample"). */
int ll_latent_mode(const char *s);
/* Row of a language for a stack: its index, or 0 when the posterior is shared. */
int ll_latent_row(const ll_model *m, int lang);
/* Row of a stack for a language pair (config language indices), following
 * latent.posterior (src/model/latent_rows.c): per_language the stack's
 * language, per_pair the first training pair with these languages, shared 0.
 * -1 when the model has no row for it (an unknown language or pair). */
int ll_latent_pair_row(const ll_hparams *hp, const ll_config *cfg, int stack, int src_lang, int tgt_lang);
/* "es", "es-en" (per_pair) or "shared": the row's name in logs. */
const char *ll_latent_row_name(const ll_hparams *hp, const ll_config *cfg, int row, char *buf, size_t n);

/* ---- losses (src/train/latent_loss.c) ----
 * Backend ops: both add their gradient w.r.t. the logits into m->grads,
 * scaled like the summed NLL (weight * ntokens), and their weighted value to
 * the stats buffer (LL_ST_KL, LL_ST_LK); nothing is read back. */
typedef struct {
    const ll_config *cfg;
    ll_latent_prior prior[2];               /* per stack: its rows and prior (for the ops) */
    uint8_t sampled[2][LL_LATENT_MAX_ROWS]; /* rows sampled at least once (reference KL) */
} ll_latent_ctx;

void ll_latent_ctx_init(ll_latent_ctx *c, const ll_config *cfg, const ll_model *m);
/* Hard straight-through samples at this update (latent.soft_select false
 * and past latent.soft_update), else soft ones. */
int ll_latent_hard_samples(const ll_config *cfg, long update);
/* KL weight beta * ramp at an update (never negative). */
double ll_latent_kl_weight(const ll_config *cfg, long update);
double ll_latent_lk_weight(const ll_config *cfg, long update);
/* beta * ntokens * KL(q_row || prior) for one language batch; the KL is the
 * mean over the stack's layers unless latent.kl_reduce is sum. */
void ll_latent_kl(ll_model *m, ll_latent_ctx *c, int stack, int row, long update, long ntokens);
/* lambda * ramp * ntokens_total * L_K over the samples of all active rows this update. */
void ll_latent_lk(ll_model *m, ll_latent_ctx *c, int stack, long update, long ntokens_total);
/* E[L] of both stacks into LL_ST_DEPTH_ENC / LL_ST_DEPTH_DEC (for the log). */
void ll_latent_depth(ll_model *m, ll_latent_ctx *c);
/* Utilisation u_l = mean over active rows of the samples z [rows, L] (host copy). */
void ll_latent_utilisation(const ll_latent_ctx *c, int stack, const real *z, double *u);

#ifdef __cplusplus
}
#endif
#endif
