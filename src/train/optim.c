/* fairseq's Adam (decoupled weight decay), gradient clipping by global norm,
 * and the inverse-sqrt / polynomial learning-rate schedules. */
#include <math.h>
#include <string.h>

#include "ll/train.h"

void ll_schedule_from_config(ll_schedule *s, const ll_config *cfg) {
    memset(s, 0, sizeof *s);
    s->kind = strcmp(cfg->scheduler, "polynomial") == 0;
    s->lr = cfg->lr;
    s->warmup_init_lr = cfg->warmup_init_lr;
    s->end_lr = cfg->end_lr;
    s->power = cfg->power;
    s->warmup = cfg->warmup_updates;
    s->total = cfg->max_updates;
}

double ll_schedule_lr(const ll_schedule *s, long n) {
    if (s->warmup > 0 && n < s->warmup) {
        /* fairseq: linear from warmup_init_lr to lr; polynomial_decay warms up from 0 */
        double lr0 = s->kind == 0 ? s->warmup_init_lr : 0;
        return lr0 + n * (s->lr - lr0) / s->warmup;
    }
    if (s->kind == 0) return s->warmup > 0 ? s->lr * sqrt((double)s->warmup) / sqrt((double)(n > 0 ? n : 1)) : s->lr;
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
    o->b1 = cfg->adam_beta1;
    o->b2 = cfg->adam_beta2;
    o->eps = cfg->adam_eps;
    o->wd = cfg->weight_decay;
}

void ll_adam_free(ll_adam *o, ll_model *model) {
    model->be->free(model->be, o->m);
    model->be->free(model->be, o->v);
    o->m = o->v = NULL;
}

double ll_adam_step(ll_adam *o, ll_model *model, double lr, double lr_phi, double grad_scale, double clip_norm) {
    ll_backend *be = model->be;
    const size_t n = model->n_params, phi = model->phi_offset;
    if (lr_phi < 0 && phi < n) be->memset0(be, model->grads + phi, (n - phi) * sizeof(real));
    if (grad_scale != 1) be->scale(be, model->grads, (real)grad_scale, n);
    double norm = sqrt(be->sumsq(be, model->grads, n));
    if (!isfinite(norm)) return norm; /* skip: one NaN/Inf would poison parameters and moments for good */
    /* fairseq clip_grad_norm_: coef = min(1, clip / (norm + 1e-6)) */
    if (clip_norm > 0 && norm > clip_norm) be->scale(be, model->grads, (real)(clip_norm / (norm + 1e-6)), n);
    o->t++;
    be->adam(be, model->params, model->grads, o->m, o->v, phi, (real)lr, o->b1, o->b2, o->eps, o->wd, o->t);
    if (lr_phi >= 0 && phi < n) {
        o->t_phi++;
        be->adam(be, model->params + phi, model->grads + phi, o->m + phi, o->v + phi, n - phi, (real)lr_phi, o->b1,
                 o->b2, o->eps, 0, o->t_phi);
    }
    return norm;
}
