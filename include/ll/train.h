/* Training: optimizer, learning-rate schedules, gradient clipping and the
 * trainer loop (src/train/). */
#ifndef LL_TRAIN_H
#define LL_TRAIN_H

#include "ll/config.h"
#include "ll/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- learning-rate schedules (reference-spec §5.2) ---- */
typedef struct {
    int kind; /* 0 inverse_sqrt, 1 polynomial */
    double lr, warmup_init_lr, end_lr, power;
    long warmup, total;
} ll_schedule;
void ll_schedule_from_config(ll_schedule *s, const ll_config *cfg);
/* lr for the update that follows `num_updates` completed updates. */
double ll_schedule_lr(const ll_schedule *s, long num_updates);

/* ---- Adam over the flat parameter buffer ---- */
typedef struct {
    real *m, *v; /* device buffers, n_params each */
    long t;      /* updates taken */
    real b1, b2, eps, wd;
} ll_adam;
void ll_adam_init(ll_adam *o, ll_model *model, const ll_config *cfg);
void ll_adam_free(ll_adam *o, ll_model *model);
/* Scale grads by grad_scale, clip to clip_norm (0 = off), step with lr.
 * Returns the gradient norm before clipping (after scaling). */
double ll_adam_step(ll_adam *o, ll_model *model, double lr, double grad_scale, double clip_norm);

#ifdef __cplusplus
}
#endif
#endif
