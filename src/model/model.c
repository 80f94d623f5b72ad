/* Model construction: the parameter table, the flat buffers, fairseq's
 * initialisation, sinusoidal positions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

void ll_hparams_from_config(ll_hparams *hp, const ll_config *cfg, int vocab_size) {
    memset(hp, 0, sizeof *hp);
    hp->C = cfg->d_model;
    hp->F = cfg->ffn_dim;
    hp->H = cfg->heads;
    hp->Le = cfg->enc_layers;
    hp->Ld = cfg->dec_layers;
    hp->V = vocab_size;
    hp->max_pos = cfg->max_positions;
    hp->post_norm = strcmp(cfg->norm, "post") == 0;
    hp->rezero = strcmp(cfg->norm, "rezero") == 0;
    hp->dlcl_enc = cfg->dlcl_enc;
    hp->dlcl_dec = cfg->dlcl_dec;
    hp->dlcl_init_one = strcmp(cfg->dlcl_init, "one") == 0;
    hp->dlcl_learnable = cfg->dlcl_learnable;
    hp->dlcl_ln = cfg->dlcl_ln;
    hp->dlcl_norm_embed = cfg->dlcl_norm_embed;
    hp->share_all = cfg->share_all_embeddings;
    hp->tie_output = cfg->tie_output;
    hp->dropout = cfg->dropout;
    hp->attn_dropout = cfg->attn_dropout;
    hp->act_dropout = cfg->act_dropout;
    hp->label_smoothing = cfg->label_smoothing;
    hp->latent_enc = cfg->latent_enc;
    hp->latent_dec = cfg->latent_dec;
    hp->latent_per_pair = ll_config_latent_per_pair(cfg);
    hp->latent_rows = strcmp(cfg->latent_posterior, "shared") == 0 ? 1
                      : hp->latent_per_pair                       ? cfg->n_train
                                                                  : ll_config_langs(cfg, NULL);
    if (hp->latent_rows < 1) hp->latent_rows = 1;
}

/* Tensors are 64-byte aligned in the flat buffer; offset 0 is reserved so that
 * 0 can mean "absent" in ll_layer_offsets.  The same offsets index the bf16
 * weight copy, where they are 32-byte aligned: cuBLASLt's bias epilogue reads
 * biases from there and takes none under 16 bytes (cuda_gemm_lt.c). */
#define ALIGN_REALS (64 / sizeof(real))
_Static_assert(ALIGN_REALS * 2 % 16 == 0, "parameter offsets must stay 16-byte aligned in a bf16 weight copy");

static size_t add_param(ll_model *m, size_t *cap, const char *name, int64_t rows, int64_t cols, int no_decay) {
    if (m->n_table == (int)*cap) {
        *cap = *cap ? *cap * 2 : 64;
        m->table = ll_realloc(m->table, *cap * sizeof(ll_param));
    }
    ll_param *p = &m->table[m->n_table++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->offset = (m->n_params + ALIGN_REALS - 1) / ALIGN_REALS * ALIGN_REALS;
    p->numel = (size_t)rows * (cols ? cols : 1);
    p->ndim = cols ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols;
    p->no_decay = no_decay;
    m->n_params = p->offset + p->numel;
    return p->offset;
}

static void add_layer(ll_model *m, size_t *cap, const char *prefix, ll_layer_offsets *L, int decoder) {
    const int C = m->hp.C, F = m->hp.F;
    char n[64];
#define P(field, suffix, r, c, nd)                               \
    snprintf(n, sizeof n, "%s.%s", prefix, suffix);              \
    L->field = add_param(m, cap, n, r, c, nd)
    const int ln = !m->hp.rezero; /* ReZero has no layer norms */
    if (ln) {
        P(ln1_w, "self_attn_ln.weight", C, 0, 1);
        P(ln1_b, "self_attn_ln.bias", C, 0, 1);
    }
    P(qkv_w, "self_attn.qkv.weight", 3 * C, C, 0);
    P(qkv_b, "self_attn.qkv.bias", 3 * C, 0, 1);
    P(o_w, "self_attn.out.weight", C, C, 0);
    P(o_b, "self_attn.out.bias", C, 0, 1);
    if (decoder) {
        if (ln) {
            P(ln2_w, "cross_attn_ln.weight", C, 0, 1);
            P(ln2_b, "cross_attn_ln.bias", C, 0, 1);
        }
        P(cq_w, "cross_attn.q.weight", C, C, 0);
        P(cq_b, "cross_attn.q.bias", C, 0, 1);
        P(ckv_w, "cross_attn.kv.weight", 2 * C, C, 0);
        P(ckv_b, "cross_attn.kv.bias", 2 * C, 0, 1);
        P(co_w, "cross_attn.out.weight", C, C, 0);
        P(co_b, "cross_attn.out.bias", C, 0, 1);
    }
    if (ln) {
        P(ln3_w, "ffn_ln.weight", C, 0, 1);
        P(ln3_b, "ffn_ln.bias", C, 0, 1);
    }
    P(fc1_w, "ffn.fc1.weight", F, C, 0);
    P(fc1_b, "ffn.fc1.bias", F, 0, 1);
    P(fc2_w, "ffn.fc2.weight", C, F, 0);
    P(fc2_b, "ffn.fc2.bias", C, 0, 1);
#undef P
}

/* Activations in backend memory (device memory on CUDA), metadata on the host. */
static void *be_mem_alloc(void *ctx, size_t n) { return ((ll_backend *)ctx)->alloc(ctx, n); }
static void be_mem_free(void *ctx, void *p) { ((ll_backend *)ctx)->free(ctx, p); }
static void model_arenas(ll_model *m) {
    ll_arena_init_with(&m->arena, 0, be_mem_alloc, be_mem_free, m->be);
    ll_arena_init(&m->meta, 0);
}

/* DLCL's initial W[r][k] (k <= r): 1, or the average 1/(r+1) of the entries. */
static real dlcl_init_w(const ll_hparams *hp, int r) { return hp->dlcl_init_one ? 1 : (real)1 / (r + 1); }

ll_model *ll_model_plan(const ll_hparams *hp, ll_backend *be) {
    const char *missing = ll_backend_missing(be);
    if (missing) ll_die("backend '%s' does not implement op '%s' yet", be->name, missing);
    ll_model *m = ll_calloc(1, sizeof *m);
    m->hp = *hp;
    m->be = be;
    size_t cap = 0;
    const int C = hp->C, V = hp->V;
    m->n_params = ALIGN_REALS; /* reserve offset 0 */
    m->enc_emb = add_param(m, &cap, "enc.embed", V, C, 0);
    m->dec_emb = hp->share_all ? m->enc_emb : add_param(m, &cap, "dec.embed", V, C, 0);
    m->out_proj = hp->tie_output ? m->dec_emb : add_param(m, &cap, "dec.output_projection", V, C, 0);
    m->enc = ll_calloc(hp->Le ? hp->Le : 1, sizeof(ll_layer_offsets));
    m->dec = ll_calloc(hp->Ld ? hp->Ld : 1, sizeof(ll_layer_offsets));
    char prefix[32];
    for (int l = 0; l < hp->Le; l++) {
        snprintf(prefix, sizeof prefix, "enc.layers.%d", l);
        add_layer(m, &cap, prefix, &m->enc[l], 0);
    }
    for (int l = 0; l < hp->Ld; l++) {
        snprintf(prefix, sizeof prefix, "dec.layers.%d", l);
        add_layer(m, &cap, prefix, &m->dec[l], 1);
    }
    /* DLCL: weights [L+1, L+1] and one layer norm per entry (pre) / row (post) */
    for (int st = 0; st < 2; st++) {
        int on = st ? hp->dlcl_dec : hp->dlcl_enc, L = st ? hp->Ld : hp->Le;
        if (!on) continue;
        const char *pre = st ? "dec" : "enc";
        char n[64];
        if (hp->dlcl_learnable) {
            snprintf(n, sizeof n, "%s.dlcl_weights", pre);
            m->dlcl_w[st] = add_param(m, &cap, n, L + 1, L + 1, 1);
        }
        m->dlcl_ln[st] = ll_calloc(2 * (L + 1), sizeof(size_t));
        for (int k = 0; k <= L && hp->dlcl_ln; k++) {
            snprintf(n, sizeof n, "%s.dlcl.ln.%d.weight", pre, k);
            m->dlcl_ln[st][2 * k] = add_param(m, &cap, n, C, 0, 1);
            snprintf(n, sizeof n, "%s.dlcl.ln.%d.bias", pre, k);
            m->dlcl_ln[st][2 * k + 1] = add_param(m, &cap, n, C, 0, 1);
        }
    }
    /* ReZero: one scalar per layer, initialised to 0 */
    for (int st = 0; st < 2 && hp->rezero; st++) {
        int L = st ? hp->Ld : hp->Le;
        m->rezero_alpha[st] = ll_calloc(L + 1, sizeof(size_t));
        for (int l = 0; l < L; l++) {
            char n[64];
            snprintf(n, sizeof n, "%s.layers.%d.rezero_alpha", st ? "dec" : "enc", l);
            m->rezero_alpha[st][l] = add_param(m, &cap, n, 1, 0, 1);
        }
    }
    if (!hp->post_norm && !hp->rezero) {
        m->enc_ln_w = add_param(m, &cap, "enc.final_ln.weight", C, 0, 1);
        m->enc_ln_b = add_param(m, &cap, "enc.final_ln.bias", C, 0, 1);
        m->dec_ln_w = add_param(m, &cap, "dec.final_ln.weight", C, 0, 1);
        m->dec_ln_b = add_param(m, &cap, "dec.final_ln.bias", C, 0, 1);
    }
    /* latent-depth logits last, so the optimizer can treat [phi_offset, n) apart */
    m->phi_offset = m->n_params;
    if (hp->latent_enc) m->latent_logits[0] = add_param(m, &cap, "enc.latent_logits", hp->latent_rows, hp->Le, 1);
    if (hp->latent_dec) m->latent_logits[1] = add_param(m, &cap, "dec.latent_logits", hp->latent_rows, hp->Ld, 1);
    if (m->phi_offset < m->n_params) m->phi_offset = m->latent_logits[0] ? m->latent_logits[0] : m->latent_logits[1];
    return m;
}

void ll_model_alloc(ll_model *m) {
    ll_backend *be = m->be;
    const ll_hparams *hp = &m->hp;
    const int C = hp->C;
    /* per-stack backend buffers: latent samples, gates, dL/dgate, DLCL's fixed/initial W */
    size_t snap = 0;
    for (int s = 0; s < 2; s++) {
        int L = s ? hp->Ld : hp->Le;
        size_t n = (size_t)(hp->latent_rows > 1 ? hp->latent_rows : 1) * L + 1;
        m->latent_z[s] = be->alloc(be, n * sizeof(real));
        m->latent_dzda[s] = be->alloc(be, n * sizeof(real));
        m->gate_buf[s] = be->alloc(be, (size_t)(L + 1) * sizeof(real));
        m->dgate_buf[s] = be->alloc(be, (size_t)(L + 1) * sizeof(real));
        if (s ? hp->latent_dec : hp->latent_enc) snap += 2 * (size_t)hp->latent_rows * L * sizeof(real);
        if (!(s ? hp->dlcl_dec : hp->dlcl_enc)) continue;
        real *w0 = ll_calloc((size_t)(L + 1) * (L + 1), sizeof(real));
        for (int r = 0; r <= L; r++)
            for (int k = 0; k <= r; k++) w0[r * (L + 1) + k] = dlcl_init_w(hp, r);
        m->dlcl_fixed[s] = be->alloc(be, (size_t)(L + 1) * (L + 1) * sizeof(real));
        be->upload(be, m->dlcl_fixed[s], w0, (size_t)(L + 1) * (L + 1) * sizeof(real));
        free(w0);
    }
    m->snap_bytes = snap;
    m->stats = be->alloc(be, LL_ST_N * sizeof(double) + snap);
    m->params = be->alloc(be, m->n_params * sizeof(real));
    m->grads = be->alloc(be, m->n_params * sizeof(real));
    /* the weight copy matmuls read: the master itself when the dtypes agree */
    m->wact = ll_act_is_real(be) ? (ll_act *)m->params : be->alloc(be, m->n_params * ll_act_size(be));

    /* fairseq sinusoids: [sin(pos f_i), cos(pos f_i)] concatenated, f_i = 10000^(-i/(half-1)). */
    int rows = hp->max_pos + 2, half = C / 2;
    real *pe = ll_calloc((size_t)rows * C, sizeof(real));
    for (int pos = 0; pos < rows; pos++)
        for (int i = 0; i < half; i++) {
            double f = exp(-(double)i * log(10000.0) / (half > 1 ? half - 1 : 1));
            pe[(size_t)pos * C + i] = sin(pos * f);
            pe[(size_t)pos * C + half + i] = cos(pos * f);
        }
    m->pos_table = be->alloc(be, (size_t)rows * C * sizeof(real));
    be->upload(be, m->pos_table, pe, (size_t)rows * C * sizeof(real));
    free(pe);
    model_arenas(m);
    m->st = ll_calloc(1, sizeof(ll_fwd_state));
    m->enc_ctl = ll_calloc(hp->Le ? hp->Le : 1, sizeof(ll_layer_ctl));
    m->dec_ctl = ll_calloc(hp->Ld ? hp->Ld : 1, sizeof(ll_layer_ctl));
    ll_model_reset_ctl(m);
}

ll_model *ll_model_new(const ll_hparams *hp, ll_backend *be) {
    ll_model *m = ll_model_plan(hp, be);
    ll_model_alloc(m);
    return m;
}

void ll_model_reset_ctl(ll_model *m) {
    for (int l = 0; l < m->hp.Le; l++) m->enc_ctl[l] = (ll_layer_ctl){0};
    for (int l = 0; l < m->hp.Ld; l++) m->dec_ctl[l] = (ll_layer_ctl){0};
}

static ll_layer_ctl *ctl_of(ll_model *m, int stack) { return stack ? m->dec_ctl : m->enc_ctl; }

void ll_model_set_gate(ll_model *m, int stack, int l, real g) {
    m->be->upload(m->be, m->gate_buf[stack] + l, &g, sizeof(real));
    ctl_of(m, stack)[l].gate = m->gate_buf[stack] + l;
}

real ll_model_gate(ll_model *m, int stack, int l) {
    real g = 1;
    const real *p = ctl_of(m, stack)[l].gate;
    if (p) m->be->download(m->be, &g, p, sizeof(real));
    return g;
}

void ll_model_track_dgates(ll_model *m, int on) {
    for (int s = 0; s < 2; s++)
        for (int l = 0; l < (s ? m->hp.Ld : m->hp.Le); l++) ctl_of(m, s)[l].dgate = on ? m->dgate_buf[s] + l : NULL;
}

void ll_model_dgates(ll_model *m, int stack, double *out) {
    const int L = stack ? m->hp.Ld : m->hp.Le;
    real tmp[L + 1];
    m->be->download(m->be, tmp, m->dgate_buf[stack], (L + 1) * sizeof(real));
    for (int l = 0; l < L; l++) out[l] = tmp[l];
}

void ll_model_stats_zero(ll_model *m) { m->be->memset0(m->be, m->stats, LL_ST_ADAM_T * sizeof(double)); }

void ll_model_zero_grads(ll_model *m) {
    m->be->memset0(m->be, m->grads, m->n_params * sizeof(real));
    if (!m->grad_fresh) {
        for (int i = 1; i < m->n_table; i++) /* the lookup below bisects the table: sorted, disjoint */
            if (m->table[i].offset < m->table[i - 1].offset + m->table[i - 1].numel) return;
        m->grad_fresh = ll_malloc(m->n_table ? (size_t)m->n_table : 1);
    }
    memset(m->grad_fresh, 1, (size_t)m->n_table);
}

int ll_model_grad_take_fresh(ll_model *m, size_t off) {
    if (!m->grad_fresh) return 0;
    int lo = 0, hi = m->n_table - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        const ll_param *p = &m->table[mid];
        if (off < p->offset) {
            hi = mid - 1;
        } else if (off >= p->offset + p->numel) {
            lo = mid + 1;
        } else {
            const int fresh = off == p->offset && m->grad_fresh[mid];
            m->grad_fresh[mid] = 0;
            return fresh;
        }
    }
    return 0;
}

void ll_model_stats_read(ll_model *m, double *stats, void *snapshot) {
    if (!snapshot) {
        m->be->download(m->be, stats, m->stats, LL_ST_N * sizeof(double));
        return;
    }
    /* one transfer for both: the snapshot area follows the slots */
    char *buf = ll_malloc(LL_ST_N * sizeof(double) + m->snap_bytes);
    m->be->download(m->be, buf, m->stats, LL_ST_N * sizeof(double) + m->snap_bytes);
    memcpy(stats, buf, LL_ST_N * sizeof(double));
    memcpy(snapshot, buf + LL_ST_N * sizeof(double), m->snap_bytes);
    free(buf);
}

void ll_model_stats_start(ll_model *m) {
    ll_backend *be = m->be;
    if (be->download_start)
        be->download_start(be, m->stats, LL_ST_N * sizeof(double));
    else
        be->download(be, m->stats_late, m->stats, LL_ST_N * sizeof(double));
}

void ll_model_stats_finish(ll_model *m, double *stats) {
    ll_backend *be = m->be;
    if (be->download_start)
        be->download_finish(be, stats, LL_ST_N * sizeof(double));
    else
        memcpy(stats, m->stats_late, LL_ST_N * sizeof(double));
}

void ll_model_snapshot(ll_model *m) {
    char *dst = (char *)(m->stats + LL_ST_N);
    for (int s = 0; s < 2; s++) {
        if (!m->latent_logits[s]) continue;
        const size_t n = (size_t)m->hp.latent_rows * (s ? m->hp.Ld : m->hp.Le) * sizeof(real);
        m->be->copy(m->be, dst, m->params + m->latent_logits[s], n);
        m->be->copy(m->be, dst + n, m->latent_z[s], n);
        dst += 2 * n;
    }
}

/* r takes m's current state; what r owns (statistics, dL/dgate, arenas,
 * forward state, layer-control arrays) stays r's. */
static void replica_sync(ll_model *r, const ll_model *m) {
    const ll_model own = *r;
    *r = *m; /* shares params, tables and host arrays (read-only while replicas live) */
    r->replica_of = m;
    r->grads = NULL;
    r->grad_hook = NULL; /* only the model whose gradients are reduced calls it */
    r->workers = NULL;
    r->n_workers = 0;
    r->stats = own.stats;
    for (int s = 0; s < 2; s++) r->dgate_buf[s] = own.dgate_buf[s];
    r->arena = own.arena;
    r->meta = own.meta;
    r->st = own.st;
    r->enc_ctl = own.enc_ctl;
    r->dec_ctl = own.dec_ctl;
    r->dec_mem = own.dec_mem;
    r->dec_mem_cap = own.dec_mem_cap;
    r->dec_busy = own.dec_busy;
    r->ens = own.ens; /* its own members' replicas (ll_model_workers) */
    r->n_ens = own.n_ens;
    r->grad_fresh = own.grad_fresh; /* its own gradients' */
    memcpy(r->enc_ctl, m->enc_ctl, sizeof(ll_layer_ctl) * (m->hp.Le ? m->hp.Le : 1));
    memcpy(r->dec_ctl, m->dec_ctl, sizeof(ll_layer_ctl) * (m->hp.Ld ? m->hp.Ld : 1));
}

ll_model *ll_model_replica(const ll_model *m) {
    ll_model *r = ll_calloc(1, sizeof *r);
    r->stats = m->be->alloc(m->be, LL_ST_N * sizeof(double) + m->snap_bytes);
    for (int s = 0; s < 2; s++) /* its own dL/dgate; the gates themselves are shared */
        r->dgate_buf[s] = m->be->alloc(m->be, (size_t)((s ? m->hp.Ld : m->hp.Le) + 1) * sizeof(real));
    r->be = m->be;
    model_arenas(r);
    r->st = ll_calloc(1, sizeof(ll_fwd_state));
    r->enc_ctl = ll_malloc(sizeof(ll_layer_ctl) * (m->hp.Le ? m->hp.Le : 1));
    r->dec_ctl = ll_malloc(sizeof(ll_layer_ctl) * (m->hp.Ld ? m->hp.Ld : 1));
    replica_sync(r, m);
    return r;
}

void ll_model_decode_release(ll_model *m) {
    if (m->dec_busy) ll_die("ll_model_decode_release: a decode is in progress");
    for (int w = 0; w < m->n_workers; w++) ll_model_free(m->workers[w]);
    free(m->workers);
    m->workers = NULL;
    m->n_workers = 0;
    if (m->dec_mem) m->be->free(m->be, m->dec_mem);
    m->dec_mem = NULL;
    m->dec_mem_cap = 0;
}

void ll_model_ensemble(ll_model *m, ll_model **members, int n, const double *weights) {
    if (m->replica_of || m->n_ens) ll_die("ll_model_ensemble: on a replica, or twice");
    for (int j = 0; j < n; j++) {
        const ll_model *e = members[j];
        if (e->be != m->be || e->hp.V != m->hp.V || e->hp.max_pos != m->hp.max_pos || e->replica_of || e->n_ens)
            ll_die("ll_model_ensemble: member %d differs in backend, vocabulary size or max_positions, or is a "
                   "replica or an ensemble", j + 1);
    }
    m->ens = ll_malloc(sizeof(ll_model *) * (n ? n : 1));
    memcpy(m->ens, members, sizeof(ll_model *) * n);
    m->n_ens = n;
    /* the mix keeps the first model's scale: member j enters with w_j / w_0, the sum is divided
     * last; in logs, so that any positive weights (1e-300 beside 1e30) give finite offsets */
    m->ens_b = ll_calloc(n ? n : 1, sizeof(double));
    for (int j = 0; j <= n; j++)
        if (weights && !(weights[j] > 0 && isfinite(weights[j])))
            ll_die("ll_model_ensemble: weight %d (%g) is not a positive number", j + 1, weights[j]);
    double mx = 0; /* log(sum w / w_0) = mx + log(sum exp(b_j - mx)), b_0 = 0 */
    for (int j = 0; j < n; j++) {
        m->ens_b[j] = weights ? log(weights[j + 1]) - log(weights[0]) : 0;
        mx = fmax(mx, m->ens_b[j]);
    }
    double sum = exp(-mx);
    for (int j = 0; j < n; j++) sum += exp(m->ens_b[j] - mx);
    m->ens_c = mx + log(sum);
}

ll_model **ll_model_workers(ll_model *m, int n) {
    if (m->replica_of) ll_die("ll_model_workers: called on a replica");
    if (n > m->n_workers) {
        m->workers = ll_realloc(m->workers, sizeof(ll_model *) * n);
        for (int w = m->n_workers; w < n; w++) m->workers[w] = ll_model_replica(m);
        m->n_workers = n;
    }
    for (int w = 0; w < n; w++) replica_sync(m->workers[w], m);
    for (int j = 0; j < m->n_ens; j++) { /* worker w decodes with the members' worker-w replicas */
        ll_model **mw = ll_model_workers(m->ens[j], n);
        for (int w = 0; w < n; w++) {
            if (!m->workers[w]->ens) m->workers[w]->ens = ll_calloc(m->n_ens, sizeof(ll_model *));
            m->workers[w]->ens[j] = mw[w];
            m->workers[w]->n_ens = m->n_ens;
            m->workers[w]->ens_b = m->ens_b;
            m->workers[w]->ens_c = m->ens_c;
        }
    }
    return m->workers;
}

void ll_model_free(ll_model *m) {
    if (!m) return;
    if (m->replica_of) { /* only what the replica owns */
        if (m->grads) m->be->free(m->be, m->grads);                        /* training replica */
        m->be->free(m->be, m->stats);
        for (int s = 0; s < 2; s++) m->be->free(m->be, m->dgate_buf[s]);
        if (m->obj.ddr_dec_ctl != m->replica_of->obj.ddr_dec_ctl) free(m->obj.ddr_dec_ctl);
        ll_arena_free(&m->arena);
        ll_arena_free(&m->meta);
        if (m->dec_mem) m->be->free(m->be, m->dec_mem);
        free(m->st->stage);
        free(m->st);
        free(m->enc_ctl);
        free(m->dec_ctl);
        free(m->grad_fresh);
        free(m->ens); /* (the members' replicas are their models') */
        free(m);
        return;
    }
    ll_model_decode_release(m);
    ll_decode_unpack(m); /* (the members' too) */
    for (int j = 0; j < m->n_ens; j++) ll_model_free(m->ens[j]);
    free(m->ens);
    free(m->ens_b);
    free(m->enc_ctl);
    free(m->dec_ctl);
    for (int s = 0; s < 2; s++) {
        m->be->free(m->be, m->latent_z[s]);
        m->be->free(m->be, m->latent_dzda[s]);
        m->be->free(m->be, m->gate_buf[s]);
        m->be->free(m->be, m->dgate_buf[s]);
        free(m->dlcl_ln[s]);
        if (m->dlcl_fixed[s]) m->be->free(m->be, m->dlcl_fixed[s]);
        free(m->rezero_alpha[s]);
    }
    if (m->wact && m->wact != (ll_act *)m->params) m->be->free(m->be, m->wact);
    m->be->free(m->be, m->params);
    m->be->free(m->be, m->grads);
    m->be->free(m->be, m->pos_table);
    m->be->free(m->be, m->stats);
    ll_arena_free(&m->arena);
    ll_arena_free(&m->meta);
    if (m->st) free(m->st->stage); /* NULL: planned, never allocated (ll_model_plan) */
    free(m->st);
    free(m->table);
    free(m->grad_fresh);
    ll_backend_counting_free(m->graph_fp);
    free(m->enc);
    free(m->dec);
    free(m);
}

size_t ll_model_count_params(const ll_model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_table; i++) n += m->table[i].numel;
    return n;
}

const ll_param *ll_model_find(const ll_model *m, const char *name) {
    for (int i = 0; i < m->n_table; i++)
        if (strcmp(m->table[i].name, name) == 0) return &m->table[i];
    return NULL;
}

/* ---- initialisation (reference-spec §4) ---- */
static double normal01(const ll_philox *r, uint64_t i) {
    double u1 = ll_philox_uniform(r, 2 * i), u2 = ll_philox_uniform(r, 2 * i + 1);
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

void ll_model_init(ll_model *m, uint64_t seed) {
    const int C = m->hp.C;
    real *host = ll_calloc(m->n_params, sizeof(real));
    for (int t = 0; t < m->n_table; t++) {
        const ll_param *p = &m->table[t];
        real *w = host + p->offset;
        ll_philox r;
        ll_philox_init(&r, seed, LL_RNG_INIT, (uint32_t)t);
        if (strstr(p->name, "embed") || strstr(p->name, "output_projection")) {
            double sd = pow(C, -0.5);
            for (size_t i = 0; i < p->numel; i++) w[i] = sd * normal01(&r, i);
            if (!strstr(p->name, "output_projection")) memset(w + (size_t)LL_PAD * C, 0, sizeof(real) * C);
        } else if (strstr(p->name, "dlcl_weights")) {
            int L1 = (int)p->shape[0];
            for (int r = 0; r < L1; r++)
                for (int k = 0; k < L1; k++) w[(size_t)r * L1 + k] = k <= r ? dlcl_init_w(&m->hp, r) : 0;
        } else if (strstr(p->name, "dlcl.ln.") && ends_with(p->name, ".weight")) {
            for (size_t i = 0; i < p->numel; i++) w[i] = 1;
        } else if (strstr(p->name, "rezero_alpha")) {
            /* 0: every layer starts as the identity */
        } else if (strstr(p->name, "latent_logits")) {
            /* 0: q = 0.5, the uniform prior (reference-spec §1.1) */
        } else if (ends_with(p->name, "ln.weight")) {
            for (size_t i = 0; i < p->numel; i++) w[i] = 1;
        } else if (p->ndim == 2) {
            /* xavier_uniform; fused q/k/v blocks are initialised as separate [C,C]
             * matrices with gain 1/sqrt(2), as fairseq does. */
            int64_t out = p->shape[0], in = p->shape[1];
            int fused = strstr(p->name, "qkv") || strstr(p->name, ".kv.") || strstr(p->name, ".q.");
            double gain = fused ? 1 / sqrt(2.0) : 1.0;
            int64_t fan_out = fused ? C : out;
            double bound = gain * sqrt(6.0 / (double)(in + fan_out));
            for (size_t i = 0; i < p->numel; i++) w[i] = bound * (2 * ll_philox_uniform(&r, i) - 1);
        } /* biases and ln biases stay 0 */
    }
    m->be->upload(m->be, m->params, host, m->n_params * sizeof(real));
    m->be->memset0(m->be, m->grads, m->n_params * sizeof(real));
    ll_model_refresh_weights(m);
    free(host);
}

void ll_model_refresh_weights(ll_model *m) {
    if (m->wact && m->wact != (ll_act *)m->params)
        m->be->convert(m->be, m->wact, m->be->act, m->params, LL_REAL_DTYPE, m->n_params);
}

double ll_model_train_flops(const ll_hparams *hp, long src_tokens, long tgt_tokens, long B, int S, int T) {
    /* 2 FLOPs per multiply-add, x3 for forward + both backward gemms. */
    double C = hp->C, F = hp->F, V = hp->V;
    double enc = (4 * C * C + 2 * C * F) * src_tokens;
    double dec = (4 * C * C + 2 * C * C + 2 * C * F) * tgt_tokens + 2 * C * C * src_tokens; /* + cross kv */
    double out = C * V * tgt_tokens;
    /* scores + weighted values: 2 matmuls of 2*Tq*Tk*C FLOPs each */
    double attn = hp->Le * 4.0 * B * S * S * C + hp->Ld * 4.0 * B * ((double)T * T + (double)T * S) * C;
    return 6 * (hp->Le * enc + hp->Ld * dec + out) + 3 * attn;
}
