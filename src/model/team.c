/* Data parallelism over CPU threads: a batch is cut into one slice of
 * sentences per worker; each worker runs forward and backward of its slice
 * single-threaded on its own replica (own activations and gradient buffer),
 * and the gradients are summed into the model's.  This is the in-process
 * form of the data parallelism the NCCL trainer will do across GPUs.
 *
 * Why: on a 2-core machine, splitting every op over both cores costs a
 * barrier per op (thousands per step), and each barrier waits for the slower
 * core; independent workers have one join per step (bench/RESULTS.md).
 *
 * Same math as one worker: every slice keeps the batch's padded lengths, and
 * ll_batch.row0 offsets its dropout draws so that each sentence gets the
 * masks it would get in the whole batch.  Only the summation order of the
 * gradients differs (tests/gradcheck/test_team.c). */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

struct ll_step_team {
    int n;
    ll_model **rep; /* rep[0] = the model itself */
};

int ll_step_team_supported(const ll_model *m) {
    /* latent depth keeps per-model host state (samples, dz/da); ALD's
     * contrastive loss compares sentences across the whole batch */
    return !m->hp.latent_enc && !m->hp.latent_dec && m->obj.ald_weight <= 0;
}

ll_step_team *ll_step_team_new(ll_model *m, int workers) {
    /* CPU threads only: the workers' statistics are summed on the host */
    if (workers < 2 || !ll_step_team_supported(m) || !ll_backend_is_cpu(m->be)) return NULL;
    ll_step_team *t = ll_calloc(1, sizeof *t);
    t->n = workers;
    t->rep = ll_calloc(workers, sizeof(ll_model *));
    t->rep[0] = m;
    for (int w = 1; w < workers; w++) {
        ll_model *r = ll_model_replica(m);
        r->grads = m->be->alloc(m->be, m->n_params * sizeof(real)); /* zeroed */
        if (m->obj.ddr_dec_ctl) r->obj.ddr_dec_ctl = ll_calloc(m->hp.Ld ? m->hp.Ld : 1, sizeof(ll_layer_ctl));
        t->rep[w] = r;
    }
    return t;
}

void ll_step_team_free(ll_step_team *t) {
    if (!t) return;
    for (int w = 1; w < t->n; w++) ll_model_free(t->rep[w]);
    free(t->rep);
    free(t);
}

int ll_step_team_size(const ll_step_team *t) { return t ? t->n : 1; }

/* Sentences [b0, b1) of b, as a batch of its own. */
static ll_batch slice(const ll_batch *b, int b0, int b1) {
    ll_batch s = *b;
    s.B = b1 - b0;
    s.src = b->src + (size_t)b0 * b->S;
    s.tgt_in = b->tgt_in + (size_t)b0 * b->T;
    s.tgt_out = b->tgt_out + (size_t)b0 * b->T;
    s.src_len = b->src_len + b0;
    s.tgt_len = b->tgt_len + b0;
    s.ids = b->ids ? b->ids + b0 : NULL;
    s.row0 = b->row0 + b0;
    s.n_src_tokens = s.n_tgt_tokens = 0;
    for (int i = 0; i < s.B; i++) {
        s.n_src_tokens += s.src_len[i];
        s.n_tgt_tokens += s.tgt_len[i];
    }
    return s;
}

/* Point a replica's gradient accumulators at its own buffers (the controls
 * were copied from the model, whose dgate buffers the workers must not share). */
static void own_dgates(ll_model *r, ll_layer_ctl *ctl, int stack, int L) {
    for (int l = 0; l < L; l++)
        if (ctl[l].dgate) ctl[l].dgate = r->dgate_buf[stack] + l;
}

void ll_model_step_team(ll_model *m, ll_step_team *t, const ll_batch *b, uint64_t seed, uint64_t rng_step,
                        ll_loss_stats *out) {
    const int n = t ? (t->n < b->B ? t->n : b->B) : 1;
    if (n < 2) {
        ll_model_step(m, b, seed, rng_step, 1, out);
        return;
    }
    if (out) ll_model_stats_zero(m);
    const int Le = m->hp.Le ? m->hp.Le : 1, Ld = m->hp.Ld ? m->hp.Ld : 1;
    for (int w = 1; w < n; w++) { /* this step's layer controls (LayerDrop, CAD draws) */
        ll_model *r = t->rep[w];
        memcpy(r->enc_ctl, m->enc_ctl, sizeof(ll_layer_ctl) * Le);
        memcpy(r->dec_ctl, m->dec_ctl, sizeof(ll_layer_ctl) * Ld);
        own_dgates(r, r->enc_ctl, 0, m->hp.Le);
        own_dgates(r, r->dec_ctl, 1, m->hp.Ld);
        if (m->obj.ddr_dec_ctl) {
            memcpy(r->obj.ddr_dec_ctl, m->obj.ddr_dec_ctl, sizeof(ll_layer_ctl) * Ld);
            own_dgates(r, r->obj.ddr_dec_ctl, 1, m->hp.Ld);
        }
        ll_model_stats_zero(r);
    }
    const int saved = ll_workers_begin(); /* ops inside a worker run single-threaded */
#pragma omp parallel for schedule(static, 1) num_threads(n)
    for (int w = 0; w < n; w++) {
        const ll_batch s = slice(b, (int)((long)b->B * w / n), (int)((long)b->B * (w + 1) / n));
        ll_model_step(t->rep[w], &s, seed, rng_step, 1, NULL); /* worker 0 is m: into m->stats */
    }
    ll_workers_end(saved);
    /* the team runs on the CPU backends only: gradients, dgates and stats are
     * host memory, in real whatever the activation dtype */
    for (int w = 1; w < n; w++) {
        ll_model *r = t->rep[w];
        real *g = m->grads;
        const real *rg = r->grads;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < m->n_params; i++) g[i] += rg[i];
        ll_model_zero_grads(r);
        for (int s = 0; s < 2; s++)
            for (int l = 0; l <= (s ? m->hp.Ld : m->hp.Le); l++) m->dgate_buf[s][l] += r->dgate_buf[s][l];
        for (int k = 0; k < LL_ST_ADAM_T; k++) m->stats[k] += r->stats[k];
    }
    if (out) {
        double st[LL_ST_N];
        ll_model_stats_read(m, st, NULL);
        ll_loss_from_stats(st, b->n_tgt_tokens, out);
    }
}
