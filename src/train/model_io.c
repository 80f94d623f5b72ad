/* Model and training-state (de)serialisation on top of the checkpoint format. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/train.h"

#ifdef LL_REAL_DOUBLE
#define REAL_DT LL_DT_F64
#else
#define REAL_DT LL_DT_F32
#endif

static real *to_host(ll_model *m, const real *dev, size_t n) {
    real *h = ll_malloc(n * sizeof(real));
    m->be->download(m->be, h, dev, n * sizeof(real));
    return h;
}

int ll_model_save(const char *path, ll_model *m, const char *config_text, const void *vocab, size_t vocab_len,
                  const ll_train_state *ts) {
    int cap = m->n_table + 16, n = 0;
    ll_tensor_ref *t = ll_calloc(cap, sizeof *t);
    /* train.ema_decay: the model tensors are the moving average (what is decoded,
     * averaged, pruned or fine-tuned), the raw weights optim.params (resume) */
    const real *ema = ts && ts->opt->ema ? ts->opt->ema : NULL;
    real *params = to_host(m, ema ? ema : m->params, m->n_params), *raw = NULL;
    for (int i = 0; i < m->n_table; i++) {
        const ll_param *p = &m->table[i];
        t[n++] = (ll_tensor_ref){.name = p->name, .dtype = REAL_DT, .ndim = p->ndim,
                                 .shape = {p->shape[0], p->shape[1]}, .data = params + p->offset,
                                 .nbytes = p->numel * sizeof(real)};
    }
    real *mh = NULL, *vh = NULL;
    double *spike = NULL;
    int64_t ints[8 + 2 * LL_MAX_CORPORA], extra[8] = {0};
    memset(ints, 0, sizeof ints);
    double best = 0;
    if (ts) {
        mh = to_host(m, ts->opt->m, m->n_params);
        vh = to_host(m, ts->opt->v, m->n_params);
        ints[0] = ts->opt->t;
        ints[1] = ts->update;
        ints[2] = ts->epoch;
        ints[3] = ts->batch_pos;
        ints[4] = ts->bad_valids;
        ints[5] = (int64_t)m->n_params;
        ints[6] = ts->opt->t_phi;
        ints[7] = ts->n_streams;
        for (int i = 0; i < 2 * ts->n_streams && i < 2 * LL_MAX_CORPORA; i++) ints[8 + i] = ts->stream_pos[i];
        best = ts->best_valid;
        int64_t np = (int64_t)m->n_params;
        t[n++] = (ll_tensor_ref){.name = "optim.adam_m", .dtype = REAL_DT, .ndim = 1, .shape = {np}, .data = mh,
                                 .nbytes = m->n_params * sizeof(real)};
        t[n++] = (ll_tensor_ref){.name = "optim.adam_v", .dtype = REAL_DT, .ndim = 1, .shape = {np}, .data = vh,
                                 .nbytes = m->n_params * sizeof(real)};
        t[n++] = (ll_tensor_ref){.name = "state.counters", .dtype = LL_DT_I64, .ndim = 1, .shape = {8 + 2 * LL_MAX_CORPORA},
                                 .data = ints, .nbytes = sizeof ints};
        t[n++] = (ll_tensor_ref){.name = "state.best_valid", .dtype = LL_DT_F64, .ndim = 1, .shape = {1},
                                 .data = &best, .nbytes = sizeof best};
        /* added after format 1 shipped: readers treat its absence as "unknown" */
        extra[0] = ts->best_update;
        extra[1] = ts->finished;
        extra[2] = ts->metrics_records;
        extra[3] = (int64_t)ts->data_hash; /* 0: unknown (before issue 28) */
        extra[4] = ts->lr_shrinks;         /* (0 in files from before train.lr_shrink) */
        extra[5] = ts->plateau_bad;
        t[n++] = (ll_tensor_ref){.name = "state.extra", .dtype = LL_DT_I64, .ndim = 1, .shape = {8}, .data = extra,
                                 .nbytes = sizeof extra};
        t[n++] = (ll_tensor_ref){.name = "state.log_acc", .dtype = LL_DT_F64, .ndim = 1, .shape = {LL_LOG_ACC},
                                 .data = ts->log_acc, .nbytes = sizeof ts->log_acc};
        if (ts->opt->spike) { /* train.spike_zscore_*: the detector's window, for --resume */
            const size_t len = ll_adam_spike_len(ts->opt);
            spike = ll_malloc(len * sizeof(double));
            ll_adam_spike_get(ts->opt, m, spike);
            t[n++] = (ll_tensor_ref){.name = "optim.spike", .dtype = LL_DT_F64, .ndim = 1, .shape = {(int64_t)len},
                                     .data = spike, .nbytes = len * sizeof(double)};
        }
        if (ema) {
            raw = to_host(m, m->params, m->n_params);
            t[n++] = (ll_tensor_ref){.name = "optim.params", .dtype = REAL_DT, .ndim = 1, .shape = {np}, .data = raw,
                                     .nbytes = m->n_params * sizeof(real)};
        }
    }
    ll_ckpt_contents c = {.config_text = config_text, .vocab = vocab, .vocab_len = vocab_len, .tensors = t,
                          .n_tensors = n};
    int rc = ll_ckpt_write(path, &c);
    free(t);
    free(params);
    free(raw);
    free(mh);
    free(vh);
    free(spike);
    return rc;
}

/* First non-finite element of a host tensor, or -1: a NaN/Inf weight would
 * decode (or train) silently into garbage. */
static long first_nonfinite(const void *data, int dtype, size_t numel) {
    for (size_t i = 0; i < numel; i++) {
        double x = dtype == LL_DT_F64 ? ((const double *)data)[i] : ((const float *)data)[i];
        if (!isfinite(x)) return (long)i;
    }
    return -1;
}

static int copy_in(ll_model *m, real *dst, const ll_tensor_ref *r, size_t numel, const char *path) {
    if (r->nbytes != numel * sizeof(real) || r->dtype != REAL_DT)
        return ll_fail("%s: tensor '%s' has %zu bytes of dtype %d, expected %zu reals", path, r->name, r->nbytes,
                       r->dtype, numel);
    long bad = first_nonfinite(r->data, r->dtype, numel);
    if (bad >= 0)
        return ll_fail("%s: tensor '%s' holds a non-finite value (%g at element %ld)", path, r->name,
                       (double)((const real *)r->data)[bad], bad);
    m->be->upload(m->be, dst, r->data, r->nbytes);
    return 0;
}

static int is_state_tensor(const char *name) { return !strncmp(name, "optim.", 6) || !strncmp(name, "state.", 6); }

static const char *shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* The tensor for table entry p, with the shape and size the model needs; NULL + errbuf. */
static const ll_tensor_ref *find_param(const ll_param *p, const ll_ckpt *k, const char *path) {
    const ll_tensor_ref *r = ll_ckpt_find(k, p->name);
    if (!r) {
        ll_fail("%s: missing tensor '%s'", path, p->name);
        return NULL;
    }
    if (r->ndim != p->ndim || r->shape[0] != p->shape[0] || (p->ndim == 2 && r->shape[1] != p->shape[1])) {
        char has[64], needs[64]; /* each shape with its own rank: [3,0] vs [3] */
        ll_fail("%s: tensor '%s' has shape %s, the model needs %s", path, p->name,
                shape_str(has, sizeof has, r->ndim, r->shape), shape_str(needs, sizeof needs, p->ndim, p->shape));
        return NULL;
    }
    if (r->nbytes != p->numel * sizeof(real) || r->dtype != REAL_DT) {
        ll_fail("%s: tensor '%s' has %zu bytes of dtype %d, expected %zu reals", path, r->name, r->nbytes, r->dtype,
                p->numel);
        return NULL;
    }
    return r;
}

int ll_model_load_params(ll_model *m, const ll_ckpt *k, const char *path) {
    for (int i = 0; i < m->n_table; i++) {
        const ll_param *p = &m->table[i];
        const ll_tensor_ref *r = find_param(p, k, path);
        if (!r || copy_in(m, m->params + p->offset, r, p->numel, path)) return -1; /* copy_in: finite values only */
    }
    /* a tensor the config does not account for means config and weights disagree
     * (e.g. more layers stored than model.enc_layers says) */
    int n_model = 0; /* every table name was found above, so equal counts mean no extra tensor */
    for (int j = 0; j < ll_ckpt_n_tensors(k); j++) n_model += !is_state_tensor(ll_ckpt_tensor(k, j)->name);
    for (int j = 0; n_model != m->n_table && j < ll_ckpt_n_tensors(k); j++) {
        const char *name = ll_ckpt_tensor(k, j)->name;
        if (is_state_tensor(name)) continue;
        int known = 0;
        for (int i = 0; i < m->n_table && !known; i++) known = !strcmp(m->table[i].name, name);
        if (!known)
            return ll_fail("%s: tensor '%s' is not part of the model its config describes (%d+%d layers, d=%d)", path,
                           name, m->hp.Le, m->hp.Ld, m->hp.C);
    }
    ll_model_refresh_weights(m); /* the activation-dtype copy follows the loaded master */
    return 0;
}

/* The architecture a stored config describes must be buildable: the schema
 * checks each key's range, this the relations between them. */
static int check_arch(const ll_config *c, const char *path) {
    if (c->d_model % c->heads)
        return ll_fail("%s: stored config: model.d_model (%d) is not divisible by model.heads (%d)", path, c->d_model,
                       c->heads);
    if (c->d_model % 2) return ll_fail("%s: stored config: model.d_model (%d) is odd", path, c->d_model);
    if (c->share_all_embeddings && !c->tie_output)
        return ll_fail("%s: stored config: model.share_all_embeddings without model.tie_output", path);
    return 0;
}

int ll_hparams_arch_diff(const ll_hparams *a, const ll_hparams *b, char *what, size_t n) {
#define D(field, name)                                                                     \
    if (a->field != b->field) {                                                            \
        snprintf(what, n, "%s %d vs %d", name, (int)a->field, (int)b->field);              \
        return 1;                                                                          \
    }
    D(C, "model.d_model") D(F, "model.ffn_dim") D(H, "model.heads") D(Le, "model.enc_layers")
    D(Ld, "model.dec_layers") D(V, "vocabulary size") D(max_pos, "model.max_positions") D(post_norm, "post-norm")
    D(rezero, "rezero") D(share_all, "model.share_all_embeddings") D(tie_output, "model.tie_output")
    D(latent_enc, "latent.enc") D(latent_dec, "latent.dec") D(latent_rows, "latent posterior rows")
    D(dlcl_enc, "dlcl.enc") D(dlcl_dec, "dlcl.dec")
    if (a->dlcl_enc || a->dlcl_dec) { /* the DLCL options matter only with DLCL on */
        D(dlcl_init_one, "dlcl.init one") D(dlcl_learnable, "dlcl.learnable") D(dlcl_ln, "dlcl.ln")
        D(dlcl_norm_embed, "dlcl.norm_embed")
    }
#undef D
    return 0;
}

/* The architecture of the model file k (its stored config) against cfg's, both with the file's
 * vocabulary size; -1 + errbuf naming the first difference. */
static int same_arch(const ll_ckpt *k, const char *path, const ll_config *cfg) {
    size_t vlen = 0;
    const void *vocab = ll_ckpt_vocab(k, &vlen);
    ll_spm *spm = vlen ? ll_spm_load_bytes(vocab, vlen) : NULL;
    if (!spm) return ll_fail("%s: no usable vocabulary in the model file", path);
    const int V = ll_spm_vocab_size(spm);
    ll_spm_free(spm);
    ll_config c;
    if (ll_config_load_text(&c, ll_ckpt_config_text(k), path)) return -1; /* (frees what it loaded) */
    int rc = check_arch(&c, path);
    if (rc == 0) {
        ll_hparams a, b;
        char what[160];
        ll_hparams_from_config(&a, cfg, V);
        ll_hparams_from_config(&b, &c, V);
        if (ll_hparams_arch_diff(&a, &b, what, sizeof what))
            rc = ll_fail("%s: train.init_from: another architecture than this config's (%s: the config's, then the "
                         "file's)", path, what);
    }
    ll_config_free(&c);
    return rc;
}

int ll_model_init_from_check(const ll_config *cfg) {
    ll_ckpt *k = ll_ckpt_open(cfg->init_from);
    if (!k) {
        char why[512];
        snprintf(why, sizeof why, "%s", ll_errbuf());
        return ll_fail("train.init_from: %s", why);
    }
    const int rc = same_arch(k, cfg->init_from, cfg);
    ll_ckpt_close(k);
    return rc;
}

int ll_model_init_from(ll_model *m, const char *path, const void *vocab, size_t vocab_len) {
    ll_ckpt *k = ll_ckpt_open(path);
    if (!k) return -1;
    size_t vlen = 0;
    const void *v = ll_ckpt_vocab(k, &vlen);
    if (vlen != vocab_len || memcmp(v, vocab, vlen)) {
        ll_ckpt_close(k);
        return ll_fail("%s: train.init_from: its sentencepiece vocabulary is not this run's (data.spm_model): the "
                       "same ids would mean other pieces", path);
    }
    const int rc = ll_model_load_params(m, k, path); /* (ll_model_init_from_check compared the architectures) */
    ll_ckpt_close(k);
    return rc;
}

/* train.spike_zscore_*: the detector's window from optim.spike (backend.h spike_check's layout);
 * absent, or kept for another train.spike_window, the window starts empty. */
static int spike_load(ll_adam *o, ll_model *m, const ll_ckpt *k, const char *path) {
    const ll_tensor_ref *r = ll_ckpt_find(k, "optim.spike");
    if (!o->spike) return 0;
    const size_t len = ll_adam_spike_len(o);
    if (!r || r->dtype != LL_DT_F64 || r->nbytes != len * sizeof(double)) {
        ll_log("%s: %s: the spike detector's window starts empty", path,
               r ? "its spike window has another size (train.spike_window)" : "no spike window");
        return 0;
    }
    const double *d = r->data;
    const int w = o->spike_window;
    int ok = d[0] >= 0 && d[0] <= w && d[0] == floor(d[0]) && d[1] >= 0 && d[1] < w && d[1] == floor(d[1]);
    for (size_t i = 2; ok && i < len; i++) ok = isfinite(d[i]);
    if (!ok) return ll_fail("%s: training state is corrupt or forged (spike window)", path);
    ll_adam_spike_set(o, m, d);
    return 0;
}

int ll_train_state_load(ll_train_state *ts, const ll_ckpt *k, ll_model *m, const char *path) {
    const ll_tensor_ref *mm = ll_ckpt_find(k, "optim.adam_m"), *vv = ll_ckpt_find(k, "optim.adam_v");
    const ll_tensor_ref *cc = ll_ckpt_find(k, "state.counters"), *bb = ll_ckpt_find(k, "state.best_valid");
    if (!mm || !vv || !cc || !bb) return ll_fail("%s: not a training checkpoint (no optimizer state)", path);
    if (cc->nbytes != (8 + 2 * LL_MAX_CORPORA) * sizeof(int64_t) || bb->nbytes != sizeof(double))
        return ll_fail("%s: malformed training state", path);
    const int64_t *ints = cc->data;
    if (ints[5] != (int64_t)m->n_params)
        return ll_fail("%s: optimizer state is for %lld parameters, the model has %zu", path, (long long)ints[5],
                       m->n_params);
    /* a forged or corrupt state must not be trusted: counters are bounded by
     * the update count, positions are non-negative, epochs 1-based */
    const char *bad = NULL;
    if (ints[1] < 0 || ints[1] > LONG_MAX / 2)
        bad = "update count";
    else if (ints[0] < 0 || ints[0] > ints[1])
        bad = "Adam step";
    else if (ints[6] < 0 || ints[6] > ints[1])
        bad = "latent Adam step";
    else if (ints[2] < 1 || ints[3] < 0)
        bad = "data position";
    else if (ints[4] < 0)
        bad = "validations without improvement";
    else if (ints[7] < 1 || ints[7] > LL_MAX_CORPORA)
        bad = "number of data streams";
    for (int i = 0; !bad && i < ints[7]; i++)
        if (ints[8 + 2 * i] < 1 || ints[9 + 2 * i] < 0) bad = "data stream position";
    double best;
    memcpy(&best, bb->data, sizeof best);
    if (!bad && isnan(best)) bad = "best validation score";
    const ll_tensor_ref *ex = ll_ckpt_find(k, "state.extra");
    if (ex && (ex->dtype != LL_DT_I64 || ex->nbytes != 8 * sizeof(int64_t)))
        return ll_fail("%s: malformed training state", path);
    const int64_t *extra = ex ? ex->data : NULL;
    if (!bad && extra && (extra[0] < -1 || extra[0] > ints[1] || (extra[1] != 0 && extra[1] != 1)))
        bad = "best checkpoint update";
    if (!bad && extra && (extra[4] < 0 || extra[4] > ints[1] || extra[5] < 0 || extra[5] > ints[1]))
        bad = "learning-rate plateau counters";
    if (bad) return ll_fail("%s: training state is corrupt or forged (%s)", path, bad);
    if (copy_in(m, ts->opt->m, mm, m->n_params, path) || copy_in(m, ts->opt->v, vv, m->n_params, path)) return -1;
    for (size_t i = 0; i < m->n_params; i++) /* second moments are averages of squares */
        if (((const real *)vv->data)[i] < 0)
            return ll_fail("%s: training state is corrupt or forged (negative Adam second moment at %zu)", path, i);
    /* train.ema_decay: the model tensors just loaded are the moving average when
     * the run kept one; its raw weights are optim.params */
    const ll_tensor_ref *raw = ll_ckpt_find(k, "optim.params");
    if (raw) {
        if (ts->opt->ema) m->be->copy(m->be, ts->opt->ema, m->params, m->n_params * sizeof(real));
        if (copy_in(m, m->params, raw, m->n_params, path)) return -1;
        ll_model_refresh_weights(m);
        if (!ts->opt->ema)
            ll_log("%s: the run's moving average of the weights is dropped (train.ema_decay 0 now): training goes on "
                   "from its raw weights", path);
    } else if (ts->opt->ema) {
        m->be->copy(m->be, ts->opt->ema, m->params, m->n_params * sizeof(real));
        ll_log("%s holds no moving average of the weights: train.ema_decay starts one from its weights", path);
    }
    if (spike_load(ts->opt, m, k, path)) return -1;
    ts->opt->t = ints[0];
    ts->update = ints[1];
    ts->epoch = ints[2];
    ts->batch_pos = ints[3];
    ts->bad_valids = ints[4];
    ts->opt->t_phi = ints[6];
    ll_adam_push_steps(ts->opt, m); /* the optimizer op reads the step counts on the backend */
    ts->n_streams = (int)ints[7];
    for (int i = 0; i < 2 * LL_MAX_CORPORA; i++) ts->stream_pos[i] = ints[8 + i];
    const ll_tensor_ref *la = ll_ckpt_find(k, "state.log_acc");
    if (la && la->dtype == LL_DT_F64 && la->nbytes == sizeof ts->log_acc)
        memcpy(ts->log_acc, la->data, sizeof ts->log_acc);
    else
        memset(ts->log_acc, 0, sizeof ts->log_acc);
    ts->best_update = extra ? (long)extra[0] : -1;
    ts->finished = extra ? (int)extra[1] : 0;
    ts->metrics_records = extra && extra[2] >= 0 ? extra[2] : -1;
    ts->data_hash = extra ? (uint64_t)extra[3] : 0;
    ts->lr_shrinks = extra ? extra[4] : 0;
    ts->plateau_bad = extra ? extra[5] : 0;
    memcpy(&ts->best_valid, bb->data, sizeof(double));
    return 0;
}

ll_model *ll_model_from_file(const ll_ckpt *k, const char *path, ll_backend *be, ll_config *cfg_out) {
    ll_config cfg;
    if (ll_config_load_text(&cfg, ll_ckpt_config_text(k), path)) return NULL;
    if (check_arch(&cfg, path)) {
        ll_config_free(&cfg);
        return NULL;
    }
    size_t vlen = 0;
    const void *vocab = ll_ckpt_vocab(k, &vlen);
    ll_spm *spm = vlen ? ll_spm_load_bytes(vocab, vlen) : NULL;
    if (!spm) {
        ll_config_free(&cfg);
        ll_fail("%s: no usable vocabulary in the model file", path);
        return NULL;
    }
    ll_hparams hp;
    ll_hparams_from_config(&hp, &cfg, ll_spm_vocab_size(spm));
    ll_spm_free(spm);
    /* Check the file against the parameter table before allocating: its config
     * alone must not make us allocate what the file does not hold (fuzzing
     * found 13 KB files asking for terabytes).  The position table has no
     * tensor in the file; it may not dwarf the parameters. */
    ll_model *m = ll_model_plan(&hp, be);
    int bad = 0;
    for (int i = 0; i < m->n_table && !bad; i++) bad = !find_param(&m->table[i], k, path);
    const double pos_bytes = ((double)hp.max_pos + 2) * hp.C * sizeof(real);
    if (!bad && pos_bytes > (1 << 28) && pos_bytes > 16.0 * m->n_params * sizeof(real))
        bad = ll_fail("%s: model.max_positions %d x model.d_model %d needs a %.0f MB position table, far more than "
                      "the model's parameters: file is corrupt",
                      path, hp.max_pos, hp.C, pos_bytes / 1e6);
    if (!bad) ll_model_alloc(m);
    if (bad || ll_model_load_params(m, k, path)) {
        ll_model_free(m);
        ll_config_free(&cfg);
        return NULL;
    }
    if (cfg_out)
        *cfg_out = cfg;
    else
        ll_config_free(&cfg);
    return m;
}
