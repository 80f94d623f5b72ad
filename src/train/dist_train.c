/* Data-parallel training (ll/dist_train.h): gradient buckets started from the
 * backward, the statistics reduction, and ZeRO-1 sharding of Adam. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/dist_train.h"
#ifdef LL_WITH_NCCL /* the one place that knows how ll was built */
#include "../dist/nccl/dist_nccl.h"
#endif

/* When gradients are final: after a layer's backward in the last pass over
 * its stack (a layer class), after the decoder's last backward pass (the
 * decoder's other tensors), after the encoder's (which also writes a shared
 * embedding), or at the end of the update (latent logits: the gates'
 * gradients, KL, L_K). */
enum { CLS_DEC = LL_GRAD_DEC, CLS_ENC = LL_GRAD_ENC, CLS_PHI = 4, CLS_LAYER = 8 };
#define LAYER_CLS(stack, l) (CLS_LAYER + (stack) * 65536 + (l))

/* A run of tensors of one class in the flat buffer. */
typedef struct {
    size_t lo, hi;
    int cls, ready;
    int b0, b1; /* the buckets it overlaps: [b0, b1] */
} segment;

typedef struct {
    size_t lo, n;     /* elements [lo, lo + n) of the flat gradient */
    int phi;          /* the latent logits (never sharded) */
    int segs, pending; /* segments it overlaps; those not final yet this update */
    size_t *counts;   /* ZeRO: [world] block sizes */
    size_t own_lo;    /* ZeRO: this rank's block: [lo + own_lo, + own_n) */
    size_t own_n, shard_off; /* its place in the shard buffers */
    ll_dist_req req;
    int started;
} bucket;

struct ll_dist_train {
    ll_dist *d;
    int on;           /* collectives other than the single-process ones (even one rank: dist.backend mpi / nccl) */
    ll_model *m;
    ll_adam *opt;
    int zero;
    bucket *b;
    int nb;
    segment *seg;
    int nseg;
    ll_dist_req stats_req;
    /* ZeRO-1: this rank's moments and reduced gradient, packed over its blocks;
     * the logits' [phi, n) moments are kept whole on every rank */
    real *m_sh, *v_sh, *g_sh, *m_phi, *v_phi;
    size_t shard_n;
    size_t saved;
    double wait_s; /* seconds spent waiting for collectives (the exposed communication) */
};

static ll_dist_dtype real_type(void) { return sizeof(real) == sizeof(double) ? LL_DIST_F64 : LL_DIST_F32; }

ll_dist *ll_dist_for_backend(ll_dist *host, ll_backend *be, int nccl) {
    if (!nccl && (!strcmp(be->name, "cpu") || host->world == 1)) return host;
#ifdef LL_WITH_NCCL
    if (!strcmp(be->name, "cuda")) return ll_dist_nccl_new(host, be);
#endif
    if (nccl && strcmp(be->name, "cuda")) {
        ll_fail("dist.backend nccl needs train.device=cuda");
        return NULL;
    }
    ll_fail("train.device=%s %s needs NCCL: rebuild with CUDA and NCCL (docs/distributed.md)", be->name,
            nccl ? "with dist.backend nccl" : "with several ranks");
    return NULL;
}

static int stack_of(int cls) { return cls >= CLS_LAYER ? (cls - CLS_LAYER) / 65536 : cls == CLS_DEC; }

static int class_of(const ll_model *m, size_t off, const char *name) {
    if (off >= m->phi_offset) return CLS_PHI;
    const int dec = !strncmp(name, "dec.", 4);
    int l;
    /* a layer's own tensors (not in a DLCL stack: its weights are written by every layer) */
    if (sscanf(name + 4, "layers.%d.", &l) == 1 && !(dec ? m->hp.dlcl_dec : m->hp.dlcl_enc)) return LAYER_CLS(dec, l);
    return dec ? CLS_DEC : CLS_ENC;
}

/* Segments: maximal runs of one class over [0, n_params) (padding between
 * tensors goes with the next one).  Buckets: consecutive pieces of at most
 * `cap` elements, never mixing the latent logits with the rest; a bucket is
 * reduced once every segment it overlaps is final. */
static void make_buckets(ll_dist_train *dt, size_t cap) {
    const ll_model *m = dt->m;
    const size_t n = m->n_params;
    dt->seg = ll_calloc((size_t)m->n_table + 2, sizeof(segment));
    for (int i = 0; i < m->n_table; i++) {
        int c = class_of(m, m->table[i].offset, m->table[i].name);
        if (dt->nseg && dt->seg[dt->nseg - 1].cls == c) continue;
        dt->seg[dt->nseg] = (segment){.lo = dt->nseg == 0 ? 0 : m->table[i].offset, .cls = c};
        dt->nseg++;
    }
    if (dt->nseg == 0) dt->seg[dt->nseg++] = (segment){.lo = 0, .cls = CLS_ENC};
    if (m->phi_offset < n && dt->seg[dt->nseg - 1].cls != CLS_PHI)
        dt->seg[dt->nseg++] = (segment){.lo = m->phi_offset, .cls = CLS_PHI};
    for (int k = 0; k < dt->nseg; k++) dt->seg[k].hi = k + 1 < dt->nseg ? dt->seg[k + 1].lo : n;
    int cap_b = 16;
    dt->b = ll_calloc((size_t)cap_b, sizeof(bucket));
    for (size_t a = 0; a < n;) {
        const int phi = a >= m->phi_offset;
        size_t hi = phi ? n : m->phi_offset < n ? m->phi_offset : n;
        if (hi - a > cap) hi = a + cap;
        if (dt->nb == cap_b) {
            dt->b = realloc(dt->b, sizeof(bucket) * (size_t)(cap_b *= 2));
            if (!dt->b) ll_die("out of memory");
        }
        dt->b[dt->nb++] = (bucket){.lo = a, .n = hi - a, .phi = phi, .req = -1};
        a = hi;
    }
    for (int k = 0; k < dt->nseg; k++) {
        segment *g = &dt->seg[k];
        g->b0 = -1;
        for (int i = 0; i < dt->nb; i++)
            if (dt->b[i].lo < g->hi && g->lo < dt->b[i].lo + dt->b[i].n) {
                if (g->b0 < 0) g->b0 = i;
                g->b1 = i;
                dt->b[i].segs++;
            }
    }
    for (int i = 0; i < dt->nb; i++) dt->b[i].pending = dt->b[i].segs;
}

/* ZeRO-1 blocks: bucket b's block r has n/world (+1 for the first n % world ranks) elements. */
static void make_shards(ll_dist_train *dt) {
    const int W = dt->d->world, R = dt->d->rank;
    for (int i = 0; i < dt->nb; i++) {
        bucket *b = &dt->b[i];
        if (b->phi) continue;
        b->counts = ll_calloc((size_t)W, sizeof(size_t));
        size_t off = 0;
        for (int r = 0; r < W; r++) {
            b->counts[r] = b->n / (size_t)W + ((size_t)r < b->n % (size_t)W);
            if (r == R) b->own_lo = off;
            off += b->counts[r];
        }
        b->own_n = b->counts[R];
        b->shard_off = dt->shard_n;
        dt->shard_n += b->own_n;
    }
}

ll_dist_train *ll_dist_train_new(ll_dist *d, ll_model *m, ll_adam *opt, const ll_config *cfg) {
    ll_dist_train *dt = ll_calloc(1, sizeof *dt);
    dt->d = d;
    dt->m = m;
    dt->opt = opt;
    dt->stats_req = -1;
    dt->on = strcmp(d->name, "single") != 0;
    if (!dt->on) return dt;
    ll_backend *be = m->be;
    const size_t n = m->n_params, phi = m->phi_offset;
    /* one starting state: rank 0's parameters and moments */
    d->bcast(d, m->params, n * sizeof(real), 0);
    d->bcast(d, opt->m, n * sizeof(real), 0);
    d->bcast(d, opt->v, n * sizeof(real), 0);
    size_t cap = (size_t)((double)cfg->dist_bucket_mb * 1048576.0 / sizeof(float));
    const size_t min_cap = (n + 2047) / 2048; /* at most ~2048 buckets: requests in flight stay bounded */
    if (cap < min_cap) {
        ll_log("dist.bucket_mb %g would cut %zu parameters into more than 2048 buckets: buckets of %zu parameters",
               (double)cfg->dist_bucket_mb, n, min_cap);
        cap = min_cap;
    }
    make_buckets(dt, cap);
    dt->zero = cfg->dist_zero;
    if (!dt->zero) return dt;
    make_shards(dt);
    const size_t sh = dt->shard_n ? dt->shard_n : 1, np = n - phi;
    dt->m_sh = be->alloc(be, sh * sizeof(real));
    dt->v_sh = be->alloc(be, sh * sizeof(real));
    dt->g_sh = be->alloc(be, sh * sizeof(real));
    dt->m_phi = be->alloc(be, (np ? np : 1) * sizeof(real));
    dt->v_phi = be->alloc(be, (np ? np : 1) * sizeof(real));
    for (int i = 0; i < dt->nb; i++) {
        const bucket *b = &dt->b[i];
        if (b->phi || !b->own_n) continue;
        be->copy(be, dt->m_sh + b->shard_off, opt->m + b->lo + b->own_lo, b->own_n * sizeof(real));
        be->copy(be, dt->v_sh + b->shard_off, opt->v + b->lo + b->own_lo, b->own_n * sizeof(real));
    }
    if (np) {
        be->copy(be, dt->m_phi, opt->m + phi, np * sizeof(real));
        be->copy(be, dt->v_phi, opt->v + phi, np * sizeof(real));
    }
    be->free(be, opt->m);
    be->free(be, opt->v);
    opt->m = opt->v = NULL;
    const size_t full = 2 * n, kept = 3 * dt->shard_n + 2 * np;
    dt->saved = full > kept ? (full - kept) * sizeof(real) : 0;
    return dt;
}

void ll_dist_train_free(ll_dist_train *dt) {
    if (!dt) return;
    ll_backend *be = dt->m->be;
    if (dt->zero) {
        be->free(be, dt->m_sh);
        be->free(be, dt->v_sh);
        be->free(be, dt->g_sh);
        be->free(be, dt->m_phi);
        be->free(be, dt->v_phi);
    }
    for (int i = 0; i < dt->nb; i++) free(dt->b[i].counts);
    free(dt->b);
    free(dt->seg);
    free(dt);
}

int ll_dist_train_rank(const ll_dist_train *dt) { return dt ? dt->d->rank : 0; }
int ll_dist_train_world(const ll_dist_train *dt) { return dt ? dt->d->world : 1; }
int ll_dist_train_owns(const ll_dist_train *dt, long job) {
    return !dt || job % dt->d->world == dt->d->rank;
}
size_t ll_dist_train_saved_bytes(const ll_dist_train *dt) { return dt ? dt->saved : 0; }

static void start_bucket(ll_dist_train *dt, bucket *b) {
    if (b->started) return;
    b->started = 1;
    real *g = dt->m->grads + b->lo;
    if (dt->zero && !b->phi)
        b->req = dt->d->reduce_scatter(dt->d, g, dt->g_sh + b->shard_off, b->counts, real_type(),
                                       "reduce-scatter of gradients");
    else
        b->req = dt->d->allreduce(dt->d, g, b->n, real_type(), 0, "all-reduce of gradients");
}

/* Segments of class cls (cls < 0: every segment of stack -cls - 1; CLS_PHI:
 * all) are final: start the buckets that wait for nothing else, last first. */
static void mark(ll_dist_train *dt, int cls) {
    for (int k = dt->nseg - 1; k >= 0; k--) {
        segment *g = &dt->seg[k];
        if (g->ready) continue;
        const int hit = cls == CLS_PHI || (cls < 0 ? g->cls != CLS_PHI && stack_of(g->cls) == -cls - 1 : g->cls == cls);
        if (!hit) continue;
        g->ready = 1;
        for (int i = g->b1; g->b0 >= 0 && i >= g->b0; i--)
            if (--dt->b[i].pending == 0) start_bucket(dt, &dt->b[i]);
    }
}

void ll_dist_train_ready(ll_dist_train *dt, int what) {
    if (!dt || !dt->on) return;
    if (what & CLS_DEC) mark(dt, -2);
    if (what & CLS_ENC) mark(dt, -1);
    if (what & CLS_PHI) mark(dt, CLS_PHI);
    dt->d->poke(dt->d);
}

static void hook(void *ctx, int what, int stack, int layer) {
    ll_dist_train *dt = ctx;
    if (what == LL_GRAD_LAYER) {
        mark(dt, LAYER_CLS(stack, layer));
        dt->d->poke(dt->d); /* MPI: lets started reductions advance between layers */
    } else {
        ll_dist_train_ready(dt, what);
    }
}

void ll_dist_train_arm(ll_dist_train *dt, int on) {
    if (!dt || !dt->on) return;
    dt->m->grad_hook = on ? hook : NULL;
    dt->m->grad_hook_ctx = on ? dt : NULL;
}

int ll_dist_train_sync(ll_dist_train *dt, long own_tokens, long global_tokens, int *signal, int *out_of_time) {
    if (!dt || !dt->on) return 0;
    double v[4] = {(double)own_tokens, *signal != 0, (double)*signal, *out_of_time != 0};
    ll_dist *h = dt->d->host;
    h->update = dt->d->update;
    const double t0 = ll_now();
    ll_dist_allreduce_wait(h, v, 4, LL_DIST_F64, 0, "all-reduce of token counts");
    dt->wait_s += ll_now() - t0;
    if (!*signal && v[1] > 0) *signal = (int)(v[2] / v[1] + 0.5); /* another rank's (mpirun sends the same to all) */
    *out_of_time = v[3] > 0;
    if ((long)v[0] != global_tokens)
        return ll_fail("the %d ranks trained %.0f target tokens in update %ld, but the update has %ld: the ranks read "
                       "different data (the same data.dir, config and checkpoint on every node?)",
                       dt->d->world, v[0], dt->d->update + 1, global_tokens);
    return 0;
}

static void wait_all(ll_dist_train *dt) {
    const double t0 = ll_now();
    for (int i = 0; i < dt->nb; i++) {
        bucket *b = &dt->b[i];
        if (b->started) dt->d->wait(dt->d, b->req);
        b->started = 0;
        b->req = -1;
    }
    if (dt->stats_req >= 0) dt->d->wait(dt->d, dt->stats_req);
    dt->stats_req = -1;
    for (int k = 0; k < dt->nseg; k++) dt->seg[k].ready = 0; /* the next update starts again */
    for (int i = 0; i < dt->nb; i++) dt->b[i].pending = dt->b[i].segs;
    dt->wait_s += ll_now() - t0;
}

double ll_dist_train_wait_seconds(const ll_dist_train *dt) { return dt ? dt->wait_s : 0; }

/* [*lo, *hi): the part of range r inside [blo, bhi); 0 when they do not meet */
static int overlap(const struct ll_adam_range *r, size_t blo, size_t bhi, size_t *lo, size_t *hi) {
    *lo = r->lo > blo ? r->lo : blo;
    *hi = r->lo + r->n < bhi ? r->lo + r->n : bhi;
    return *lo < *hi;
}

void ll_dist_train_step(ll_dist_train *dt, double lr, double lr_phi, double grad_scale, double clip_norm) {
    ll_model *m = dt->m;
    if (!dt->on) {
        ll_adam_step(dt->opt, m, lr, lr_phi, grad_scale, clip_norm);
        return;
    }
    ll_dist *d = dt->d;
    ll_dist_train_arm(dt, 0);
    ll_dist_train_ready(dt, CLS_DEC | CLS_ENC | CLS_PHI); /* whatever the hook did not start */
    /* the losses (and KL, L_K) of every rank, before the norm and the skip test read them */
    dt->stats_req = d->allreduce(d, m->stats, LL_ST_LK + 1, LL_DIST_F64, 0, "all-reduce of the loss statistics");
    wait_all(dt);
    if (!dt->zero) {
        ll_adam_step(dt->opt, m, lr, lr_phi, grad_scale, clip_norm);
        return;
    }
    /* ZeRO-1: ll_adam_step on this rank's blocks */
    ll_backend *be = m->be;
    ll_adam *o = dt->opt;
    const size_t n = m->n_params, phi = m->phi_offset;
    const int phi_step = lr_phi >= 0 && phi < n;
    if (!phi_step && phi < n) be->memset0(be, m->grads + phi, (n - phi) * sizeof(real));
    /* train.freeze: the frozen parts of this rank's blocks out of the norm */
    for (int i = 0; i < dt->nb; i++) {
        const bucket *b = &dt->b[i];
        if (b->phi || !b->own_n) continue;
        const size_t blo = b->lo + b->own_lo, bhi = blo + b->own_n;
        size_t lo, hi;
        for (int j = 0; j < o->n_frozen; j++)
            if (overlap(&o->frozen[j], blo, bhi, &lo, &hi))
                be->memset0(be, dt->g_sh + b->shard_off + (lo - blo), (hi - lo) * sizeof(real));
    }
    /* the squared norm: this rank's blocks, plus (rank 0 only: every rank holds them) the logits */
    if (dt->shard_n) be->sumsq(be, m->stats + LL_ST_GSUMSQ, dt->g_sh, dt->shard_n);
    if (d->rank == 0 && phi < n) be->sumsq(be, m->stats + LL_ST_GSUMSQ, m->grads + phi, n - phi);
    ll_dist_allreduce_wait(d, m->stats + LL_ST_GSUMSQ, 1, LL_DIST_F64, 0, "all-reduce of the gradient norm");
    ll_adam_spike_check(o, m, grad_scale); /* (every rank the same statistics: the same decision) */
    be->grad_finish(be, m->stats, grad_scale, clip_norm, phi_step);
    for (int i = 0; i < dt->nb; i++) {
        const bucket *b = &dt->b[i];
        if (b->phi || !b->own_n) continue;
        /* no weight-copy output: other ranks' shards arrive by the all-gather, so the
         * activation-dtype copy is refreshed whole once they are in (below) */
        /* the block's parts that train.freeze left to train (the whole block without it) */
        const size_t blo = b->lo + b->own_lo, bhi = blo + b->own_n;
        size_t lo, hi;
        for (int j = 0; j < o->n_steps; j++) {
            if (!overlap(&o->steps[j], blo, bhi, &lo, &hi)) continue;
            const size_t at = b->shard_off + (lo - blo);
            be->adam(be, m->params + lo, NULL, dt->g_sh + at, dt->m_sh + at, dt->v_sh + at, hi - lo, (real)lr, o->b1,
                     o->b2, o->eps, o->wd, m->stats, LL_ST_ADAM_T);
        }
    }
    if (phi_step)
        be->adam(be, m->params + phi, NULL, m->grads + phi, dt->m_phi, dt->v_phi, n - phi, (real)lr_phi, o->b1,
                 o->b2, o->eps, 0, m->stats, LL_ST_ADAM_T_PHI);
    for (int i = 0; i < dt->nb; i++) {
        bucket *b = &dt->b[i];
        if (b->phi) continue;
        b->req = d->allgather(d, m->params + b->lo, b->counts, real_type(), "all-gather of parameters");
        b->started = 1;
    }
    wait_all(dt);
    ll_model_refresh_weights(m); /* the bf16 weight copy from the gathered masters (no-op when it aliases them) */
}

void ll_dist_train_full_moments(ll_dist_train *dt, int on) {
    if (!dt || !dt->zero) return;
    ll_backend *be = dt->m->be;
    ll_adam *o = dt->opt;
    const size_t n = dt->m->n_params, phi = dt->m->phi_offset;
    if (!on) {
        be->free(be, o->m);
        be->free(be, o->v);
        o->m = o->v = NULL;
        return;
    }
    o->m = be->alloc(be, n * sizeof(real));
    o->v = be->alloc(be, n * sizeof(real));
    real *full[2] = {o->m, o->v}, *sh[2] = {dt->m_sh, dt->v_sh};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < dt->nb; i++) {
            bucket *b = &dt->b[i];
            if (b->phi) continue;
            if (b->own_n) be->copy(be, full[k] + b->lo + b->own_lo, sh[k] + b->shard_off, b->own_n * sizeof(real));
            b->req = dt->d->allgather(dt->d, full[k] + b->lo, b->counts, real_type(), "all-gather of Adam moments");
            b->started = 1;
        }
        wait_all(dt);
    }
    if (phi < n) {
        be->copy(be, o->m + phi, dt->m_phi, (n - phi) * sizeof(real));
        be->copy(be, o->v + phi, dt->v_phi, (n - phi) * sizeof(real));
    }
}

void ll_dist_train_describe(const ll_dist_train *dt, const ll_config *cfg, int micro_steps) {
    if (dt->d->world > 1)
        ll_log("%d ranks (%s collectives, %s), gradient buckets of %g MiB, jobs dealt round-robin; each global "
               "update is %d micro-step(s)", dt->d->world, dt->d->name, dt->zero ? "ZeRO-1" : "replicated Adam",
               (double)cfg->dist_bucket_mb, micro_steps);
    if (dt->zero)
        ll_log("ZeRO-1: Adam moments sharded over %d ranks: %.1f MiB of optimizer state saved per rank", dt->d->world,
               dt->saved / 1048576.0);
    else if (cfg->dist_zero && !dt->on)
        ll_log("dist.zero 1 has no effect in one process (start several ranks with mpirun)");
}
