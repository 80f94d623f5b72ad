/* fairseq's Adam (decoupled weight decay), gradient clipping by global norm,
 * and the inverse-sqrt / polynomial / cosine learning-rate schedules. */
#include <math.h>
#include <string.h>

#include "ll/train.h"

void ll_schedule_from_config(ll_schedule *s, const ll_config *cfg) {
    memset(s, 0, sizeof *s);
    s->kind = !strcmp(cfg->scheduler, "polynomial") ? 1 : !strcmp(cfg->scheduler, "cosine") ? 2 : 0;
    s->lr = cfg->lr;
    s->warmup_init_lr = cfg->warmup_init_lr;
    s->end_lr = cfg->end_lr;
    s->power = cfg->power;
    s->warmup = cfg->warmup_updates;
    s->total = cfg->max_updates;
}

double ll_schedule_lr(const ll_schedule *s, long n) {
    if (s->warmup > 0 && n < s->warmup) {
        /* fairseq: linear from warmup_init_lr to lr (inverse_sqrt, cosine); polynomial_decay warms up from 0 */
        double lr0 = s->kind != 1 ? s->warmup_init_lr : 0;
        return lr0 + n * (s->lr - lr0) / s->warmup;
    }
    if (s->kind == 0) return s->warmup > 0 ? s->lr * sqrt((double)s->warmup) / sqrt((double)(n > 0 ? n : 1)) : s->lr;
    if (s->kind == 2) { /* fairseq's cosine (t_mult 1, one period: max_update - warmup, no lr_shrink): from lr
                           down to end_lr (its min_lr), warming up linearly from warmup_init_lr as inverse_sqrt */
        const long period = s->total - s->warmup, t = n - s->warmup;
        if (period <= 0 || t >= period) return s->end_lr;
        return s->end_lr + 0.5 * (s->lr - s->end_lr) * (1 + cos(M_PI * (double)t / (double)period));
    }
    /* polynomial decay to end_lr at `total` updates */
    if (s->total <= s->warmup || n >= s->total) return s->total > 0 && n >= s->total ? s->end_lr : s->lr;
    double frac = 1.0 - (double)(n - s->warmup) / (double)(s->total - s->warmup);
    return (s->lr - s->end_lr) * pow(frac, s->power) + s->end_lr;
}

void ll_adam_init(ll_adam *o, ll_model *model, const ll_config *cfg) {
    ll_backend *be = model->be;
    o->m = be->alloc(be, model->n_params * sizeof(real));
    o->v = be->alloc(be, model->n_params * sizeof(real));
    o->t = o->t_phi = 0;
    ll_adam_push_steps(o, model);
    o->b1 = cfg->adam_beta1;
    o->b2 = cfg->adam_beta2;
    o->eps = cfg->adam_eps;
    o->wd = cfg->weight_decay;
    o->ema = NULL;
    o->ema_decay = cfg->ema_decay;
    o->ema_start = cfg->ema_start_update;
    if (cfg->ema_decay > 0) { /* fairseq's EMA starts as a copy of the model */
        o->ema = be->alloc(be, model->n_params * sizeof(real));
        be->copy(be, o->ema, model->params, model->n_params * sizeof(real));
    }
    o->spike = NULL;
    o->spike_window = cfg->spike_window;
    o->spike_z_loss = cfg->spike_zscore_loss;
    o->spike_z_gnorm = cfg->spike_zscore_gnorm;
    if (o->spike_z_loss > 0 || o->spike_z_gnorm > 0) /* an empty window (alloc zeroes) */
        o->spike = be->alloc(be, (2 + 2 * (size_t)o->spike_window) * sizeof(double));
}

size_t ll_adam_spike_len(const ll_adam *o) { return o->spike ? 2 + 2 * (size_t)o->spike_window : 0; }

void ll_adam_spike_get(const ll_adam *o, ll_model *model, double *out) {
    if (o->spike) model->be->download(model->be, out, o->spike, ll_adam_spike_len(o) * sizeof(double));
}

void ll_adam_spike_set(ll_adam *o, ll_model *model, const double *in) {
    if (o->spike) model->be->upload(model->be, o->spike, in, ll_adam_spike_len(o) * sizeof(double));
}

void ll_adam_spike_check(ll_adam *o, ll_model *model, double grad_scale) {
    if (o->spike)
        model->be->spike_check(model->be, model->stats, o->spike, o->spike_window, grad_scale, o->spike_z_loss,
                               o->spike_z_gnorm);
}

void ll_adam_free(ll_adam *o, ll_model *model) {
    model->be->free(model->be, o->m);
    model->be->free(model->be, o->v);
    if (o->ema) model->be->free(model->be, o->ema);
    if (o->spike) model->be->free(model->be, o->spike);
    o->m = o->v = o->ema = NULL;
    o->spike = NULL;
}

void ll_adam_ema_step(ll_adam *o, ll_model *model, long update) {
    if (!o->ema) return;
    /* fairseq: decay 0 (a copy) while the update count is below ema_start_update */
    model->be->ema(model->be, o->ema, model->params, model->n_params, update < o->ema_start ? 0 : o->ema_decay,
                   model->stats);
}

void ll_adam_ema_swap(ll_adam *o, ll_model *model, int in) {
    if (!o->ema) return;
    ll_backend *be = model->be;
    const size_t bytes = model->n_params * sizeof(real);
    if (in) {
        be->copy(be, model->grads, model->params, bytes); /* (the next update zeroes the gradients first) */
        be->copy(be, model->params, o->ema, bytes);
    } else {
        be->copy(be, model->params, model->grads, bytes);
    }
    ll_model_refresh_weights(model); /* the activation-dtype copy follows */
}

void ll_adam_step(ll_adam *o, ll_model *model, double lr, double lr_phi, double grad_scale, double clip_norm) {
    ll_backend *be = model->be;
    const size_t n = model->n_params, phi = model->phi_offset;
    const int phi_step = lr_phi >= 0 && phi < n;
    if (!phi_step && phi < n) be->memset0(be, model->grads + phi, (n - phi) * sizeof(real));
    /* norm, clip coefficient, skip flag and step counts are decided on the
     * backend (grad_finish); Adam reads them from the stats buffer */
    be->sumsq(be, model->stats + LL_ST_GSUMSQ, model->grads, n);
    ll_adam_spike_check(o, model, grad_scale);
    be->grad_finish(be, model->stats, grad_scale, clip_norm, phi_step);
    /* Adam refreshes the activation-dtype weight copy too (NULL: it aliases the master) */
    ll_act *wa = model->wact != (ll_act *)model->params ? model->wact : NULL;
    be->adam(be, model->params, wa, model->grads, o->m, o->v, phi, (real)lr, o->b1, o->b2, o->eps, o->wd,
             model->stats, LL_ST_ADAM_T);
    if (phi_step)
        be->adam(be, model->params + phi, wa ? ll_act_at(be, wa, phi) : NULL, model->grads + phi, o->m + phi,
                 o->v + phi, n - phi, (real)lr_phi, o->b1, o->b2, o->eps, 0, model->stats, LL_ST_ADAM_T_PHI);
}

void ll_adam_sync(ll_adam *o, const double *stats) {
    o->t = (long)stats[LL_ST_ADAM_T];
    o->t_phi = (long)stats[LL_ST_ADAM_T_PHI];
}

void ll_adam_push_steps(ll_adam *o, ll_model *model) {
    const double t[2] = {(double)o->t, (double)o->t_phi};
    model->be->upload(model->be, model->stats + LL_ST_ADAM_T, t, sizeof t);
}
