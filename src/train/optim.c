/* fairseq's Adam (decoupled weight decay), gradient clipping by global norm,
 * and the inverse-sqrt / polynomial / cosine learning-rate schedules. */
#include <fnmatch.h>
#include <math.h>
#include <stdlib.h>
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
    o->steps = ll_malloc(sizeof *o->steps);
    o->steps[0] = (struct ll_adam_range){0, model->phi_offset};
    o->n_steps = model->phi_offset > 0;
    o->frozen = NULL;
    o->n_frozen = 0;
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
    free(o->steps);
    free(o->frozen);
    o->steps = o->frozen = NULL;
    o->n_steps = o->n_frozen = 0;
    o->m = o->v = o->ema = NULL;
    o->spike = NULL;
}

static void push_range(struct ll_adam_range **a, int *n, size_t lo, size_t len) {
    if (!len) return;
    if (*n > 0 && (*a)[*n - 1].lo + (*a)[*n - 1].n == lo) { /* adjacent: one range */
        (*a)[*n - 1].n += len;
        return;
    }
    *a = ll_realloc(*a, sizeof **a * (size_t)(*n + 1));
    (*a)[(*n)++] = (struct ll_adam_range){lo, len};
}

int ll_adam_freeze(ll_adam *o, const ll_model *model, const char *patterns, int verbose) {
    if (!patterns || !patterns[0]) return 0;
    const size_t phi = model->phi_offset;
    uint8_t *frozen = ll_calloc((size_t)model->n_table, 1);
    char *list = ll_strdup(patterns), *save = NULL;
    int rc = 0;
    for (char *p = strtok_r(list, ",", &save); p && !rc; p = strtok_r(NULL, ",", &save)) {
        while (*p == ' ') p++;
        for (char *e = p + strlen(p); e > p && e[-1] == ' ';) *--e = 0;
        if (!*p) continue;
        int hits = 0, latent = 0;
        for (int i = 0; i < model->n_table; i++) {
            if (fnmatch(p, model->table[i].name, 0) != 0) continue;
            if (model->table[i].offset >= phi) {
                latent = 1;
                continue;
            }
            frozen[i] = 1, hits++;
        }
        if (!hits)
            rc = ll_fail("train.freeze: '%s' %s", p,
                         latent ? "matches only the latent-depth logits, which latent.* settings steer"
                                : "matches no parameter (names such as enc.embed, enc.layers.0.ffn.fc1.weight, "
                                  "dec.layers.*.cross_attn.*)");
        else if (latent && verbose)
            ll_warn("train.freeze: '%s' also matches the latent-depth logits: they are left to latent.* settings", p);
    }
    free(list);
    /* the frozen tensors' ranges, then their complement in [0, phi) */
    struct ll_adam_range *fr = NULL, *st = NULL;
    int nf = 0, ns = 0;
    size_t nfrozen = 0, ntensors = 0;
    if (!rc) {
        size_t *lo = ll_malloc(sizeof(size_t) * ((size_t)model->n_table + 1)), k = 0;
        for (int i = 0; i < model->n_table; i++)
            if (frozen[i]) lo[k++] = (size_t)i;
        /* the table is in offset order: ranges come out sorted */
        for (size_t j = 0; j < k; j++) {
            const ll_param *t = &model->table[lo[j]];
            push_range(&fr, &nf, t->offset, t->numel);
            nfrozen += t->numel, ntensors++;
        }
        free(lo);
        size_t at = 0;
        for (int j = 0; j < nf; j++) {
            push_range(&st, &ns, at, fr[j].lo - at);
            at = fr[j].lo + fr[j].n;
        }
        push_range(&st, &ns, at, phi > at ? phi - at : 0);
        int below = 0; /* (the table need not cover [0, phi) without gaps) */
        for (int i = 0; i < model->n_table; i++) below += model->table[i].offset < phi;
        if ((int)ntensors == below)
            rc = ll_fail("train.freeze '%s' freezes every parameter: nothing is left to train", patterns);
    }
    free(frozen);
    if (rc) {
        free(fr), free(st);
        return -1;
    }
    free(o->steps), free(o->frozen);
    o->steps = st, o->n_steps = ns, o->frozen = fr, o->n_frozen = nf;
    if (verbose)
        ll_log("train.freeze: %zu tensors frozen (%.2fM of %.2fM parameters): no Adam step, no weight decay; their "
               "gradients are still computed", ntensors, nfrozen / 1e6, (double)phi / 1e6);
    return 0;
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
    for (int i = 0; i < o->n_frozen; i++) /* train.freeze: out of the norm */
        be->memset0(be, model->grads + o->frozen[i].lo, o->frozen[i].n * sizeof(real));
    /* norm, clip coefficient, skip flag and step counts are decided on the
     * backend (grad_finish); Adam reads them from the stats buffer */
    be->sumsq(be, model->stats + LL_ST_GSUMSQ, model->grads, n);
    ll_adam_spike_check(o, model, grad_scale);
    be->grad_finish(be, model->stats, grad_scale, clip_norm, phi_step);
    /* Adam refreshes the activation-dtype weight copy too (NULL: it aliases the master) */
    ll_act *wa = model->wact != (ll_act *)model->params ? model->wact : NULL;
    for (int i = 0; i < o->n_steps; i++) { /* [0, phi) in one piece unless train.freeze cut it */
        const size_t lo = o->steps[i].lo;
        be->adam(be, model->params + lo, wa ? ll_act_at(be, wa, lo) : NULL, model->grads + lo, o->m + lo, o->v + lo,
                 o->steps[i].n, (real)lr, o->b1, o->b2, o->eps, o->wd, model->stats, LL_ST_ADAM_T);
    }
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
