/* Sampling search (fairseq's --sampling / --sampling-topk / --temperature,
 * Marian's --output-sampling, CTranslate2's sampling_topk): each of a
 * sentence's rows draws its own translation, one token per step, from
 * softmax(log p / temperature), optionally among the topk most probable
 * tokens and then the smallest set of them holding topp of their probability
 * (nucleus sampling, Holtzman et al. 2020).  The back-translations of Edunov
 * et al. (2018) are drawn so.
 *
 * The draw happens on the host from the step's log-probabilities
 * (ll_decode_step), in double precision, with a uniform from a Philox stream
 * keyed by the sentence (not its batch or row), so a sentence's samples are
 * the same however it is batched, on any backend, as far as its
 * log-probabilities are (rounding may differ with the batch: the portable
 * CPU build's OpenBLAS, a GPU).  Rows stay in their lanes
 * (no reorder); a row is finished at its EOS, a sentence when all its rows
 * are.  Scores as in the beam search: pos_scores are the drawn tokens'
 * log-probabilities under the (tempered) model, score = sum / len^lenpen. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode_internal.h"
#include "ll/decode.h"

typedef struct {
    int max_len, min_len, n_fin, done;
    ll_hypo *fin;
    ll_philox rng;
} sample_sent;

/* a uniform in [0, 1) with 53 random bits: words 2c and 2c+1 of the sentence's stream */
static double uniform53(const ll_philox *r, uint64_t c) {
    const uint64_t a = ll_philox_u32(r, 2 * c) >> 5, b = ll_philox_u32(r, 2 * c + 1) >> 6;
    return (double)(a * 67108864.0 + b) / 9007199254740992.0;
}

/* (q, index) ranks above (q2, index2): higher q, ties to the lower index */
static int above(double q, int i, double q2, int i2) { return q > q2 || (q == q2 && i < i2); }

/* Min-heap of the k best (q, index) pairs seen: the root is the worst kept. */
static void heap_down(int *h, const double *q, int n, int at) {
    for (;;) {
        int w = at, l = 2 * at + 1, r = l + 1;
        if (l < n && above(q[h[w]], h[w], q[h[l]], h[l])) w = l;
        if (r < n && above(q[h[w]], h[w], q[h[r]], h[r])) w = r;
        if (w == at) return;
        const int t = h[w];
        h[w] = h[at], h[at] = t, at = w;
    }
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

typedef struct {
    double w;
    int i; /* position in cand */
} weighted;

/* higher weight first; ties to the lower token (cand is in token order, so the lower position) */
static int by_weight(const void *a, const void *b) {
    const weighted *x = a, *y = b;
    if (x->w != y->w) return x->w < y->w ? 1 : -1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Nucleus (top-p): keep the most probable candidates, best first, until their share of the
 * candidates' weight reaches topp (the one that reaches it included); zero the others' w.
 * Returns the kept weight. */
static double nucleus(double *w, int n, double total, double topp, weighted *order) {
    for (int i = 0; i < n; i++) order[i] = (weighted){w[i], i};
    qsort(order, n, sizeof *order, by_weight);
    double kept = 0;
    int k = 0;
    while (k < n && kept < topp * total) kept += order[k++].w;
    for (int i = k; i < n; i++) w[order[i].i] = 0;
    return kept;
}

/* One draw from a row's log-probabilities lp[V] (mode: bit 0 EOS allowed, bit 1 EOS only; pad and
 * BOS never; forced >= 0: that token, a target prefix's).  Returns the token; *lq = its log-probability under softmax(lp / temperature),
 * normalised over the whole vocabulary as fairseq's, less unkpen for <unk> (fairseq subtracts it after
 * the softmax: <unk> is drawn e^-unkpen times as often, the others' scores stay).  ban[n_ban]: tokens
 * never drawn (--no-repeat-ngram-size; like unkpen, after the softmax: fairseq's blocker sets
 * them to -inf, the others' scores stay).  q, w: [V] double scratch; cand: [V] ints. */
static int draw(const real *lp, int V, int mode, int forced, int topk, double topp, double temperature, double unkpen,
                const int32_t *ban, int n_ban, double u, double *lq, double *q, double *w, int *cand,
                weighted *order) {
    const int t1 = temperature == 1.0;
    double mx = -INFINITY, amx = -INFINITY; /* over all tokens (as the model gives them); over the drawable ones */
    for (int v = 0; v < V; v++) {
        q[v] = t1 ? (double)lp[v] : (double)lp[v] / temperature;
        if (q[v] > mx) mx = q[v];
        if (v == LL_UNK) q[v] -= unkpen;
    }
    for (int i = 0; i < n_ban; i++) q[ban[i]] = -INFINITY;
    for (int v = 0; v < V; v++)
        if (q[v] > amx && v != LL_PAD && v != LL_BOS && (v != LL_EOS || (mode & 1))) amx = q[v];
    int tok = forced >= 0 ? forced : LL_EOS; /* at the length limit (mode bit 1), or nothing drawable */
    if (forced < 0 && !(mode & 2) && amx > -INFINITY) {
        int n = 0;
        if (topk > 0 && topk < V) { /* the topk best (ties to the lower id) in a min-heap, then by id */
            for (int v = 0; v < V; v++) {
                if (v == LL_PAD || v == LL_BOS || (v == LL_EOS && !(mode & 1)) || q[v] == -INFINITY) continue;
                if (n < topk) { /* sift up */
                    int at = n++;
                    while (at > 0 && above(q[cand[(at - 1) / 2]], cand[(at - 1) / 2], q[v], v)) {
                        cand[at] = cand[(at - 1) / 2];
                        at = (at - 1) / 2;
                    }
                    cand[at] = v;
                } else if (above(q[v], v, q[cand[0]], cand[0])) {
                    cand[0] = v;
                    heap_down(cand, q, n, 0);
                }
            }
            qsort(cand, n, sizeof(int), cmp_int); /* a fixed order to walk: by token id */
        } else {
            for (int v = 0; v < V; v++)
                if (v != LL_PAD && v != LL_BOS && (v != LL_EOS || (mode & 1)) && q[v] > -INFINITY) cand[n++] = v;
        }
        double total = 0;
        for (int i = 0; i < n; i++) total += w[i] = exp(q[cand[i]] - amx);
        if (topp > 0 && topp < 1) total = nucleus(w, n, total, topp, order);
        const double target = u * total;
        double acc = 0;
        tok = -1;
        for (int i = n - 1; tok < 0; i--) /* (rounding: past the last weight, the last kept) */
            if (w[i] > 0 || i == 0) tok = cand[i];
        for (int i = 0; i < n; i++)
            if (w[i] > 0 && (acc += w[i]) > target) {
                tok = cand[i];
                break;
            }
    }
    if (t1) {
        *lq = (double)lp[tok] - (tok == LL_UNK ? unkpen : 0);
    } else { /* the normaliser of the tempered model, before the penalty */
        double z = 0;
        for (int v = 0; v < V; v++) z += exp((double)lp[v] / temperature - mx); /* (bans and unkpen left out) */
        *lq = q[tok] - (mx + log(z));
    }
    return tok;
}

void ll_sample_search(ll_model *m, const int32_t *src, const int *src_len, int B, int S, const ll_search_opts *o,
                      ll_nbest *out) {
    const int n = o->beam, V = m->hp.V;
    if (n < 1 || o->nbest < 1 || o->nbest > n) ll_die("sampling: need 1 <= nbest (%d) <= samples (%d)", o->nbest, n);
    if (!(o->temperature > 0) || !isfinite(o->temperature) || o->topk < 0 || !(o->topp >= 0 && o->topp <= 1))
        ll_die("sampling: temperature %g (must be > 0), topk %d (>= 0), topp %g (in [0, 1])", o->temperature, o->topk,
               o->topp);
    if (B <= 0) return;
    sample_sent *ss = ll_calloc(B, sizeof *ss);
    int T = 1;
    for (int i = 0; i < B; i++) {
        ss[i].max_len = ll_search_prefixed_max_len(m, o, src_len[i], i);
        ss[i].min_len = o->min_len < ss[i].max_len ? o->min_len : ss[i].max_len;
        ss[i].fin = ll_calloc(n, sizeof(ll_hypo));
        if (ss[i].max_len + 1 > T) T = ss[i].max_len + 1;
        const uint64_t key = o->keys ? o->keys[i] : (uint64_t)i;
        ll_philox_init(&ss[i].rng, o->seed ^ (key >> 32) * 0x9E3779B97F4A7C15ull, LL_RNG_DECODE_SAMPLE, (uint32_t)key);
    }
    const int N0 = B * n;
    ll_dec_state *d = ll_decode_begin(m, src, src_len, B, S, n, T);
    if (o->align && ll_decode_align_on(m, d) < 0) ll_die("alignment: no decoder layer attends to the source");
    int32_t *tok = ll_malloc(sizeof(int32_t) * (size_t)N0 * T), *prev = ll_malloc(sizeof(int32_t) * N0);
    float *ps = ll_malloc(sizeof(float) * (size_t)N0 * T);
    int32_t *al = o->align ? ll_malloc(sizeof(int32_t) * (size_t)N0 * T) : NULL;
    int32_t *step_al = o->align ? ll_malloc(sizeof(int32_t) * N0) : NULL;
    double *cum = ll_calloc(N0, sizeof(double)), *q = ll_malloc(sizeof(double) * 2 * (size_t)V);
    uint8_t *alive = ll_malloc(N0);
    memset(alive, 1, N0);
    real *logp = ll_malloc(sizeof(real) * (size_t)N0 * V);
    weighted *order = o->topp > 0 && o->topp < 1 ? ll_malloc(sizeof(weighted) * V) : NULL;
    int *cand = ll_malloc(sizeof(int) * V), *act = ll_malloc(sizeof(int) * B), *keep = ll_malloc(sizeof(int) * B);
    int32_t *ban = ll_malloc(sizeof(int32_t) * T); /* a row's banned tokens (o->no_repeat_ngram) */
    for (int i = 0; i < B; i++) act[i] = i;
    int nact = B;
    for (int step = 0; nact > 0; step++) {
        const int rows = nact * n;
        for (int r = 0; r < rows; r++) prev[r] = !step ? o->bos : alive[r] ? tok[(size_t)r * T + step - 1] : LL_EOS;
        ll_decode_step(m, d, prev, logp);
        if (al) ll_decode_last_align(m, d, step_al);
        int n_keep = 0;
        for (int j = 0; j < nact; j++) {
            sample_sent *s = &ss[act[j]];
            if (s->done) continue;
            const int mode = (step >= s->min_len) | (step >= s->max_len) << 1;
            for (int b = 0; b < n; b++) {
                const int r = j * n + b;
                if (!alive[r]) continue;
                double lq;
                const double u = uniform53(&s->rng, (uint64_t)b << 25 | (uint64_t)step);
                const int forced = o->prefix && step < o->prefix_len[act[j]] ? o->prefix[act[j]][step] : -1;
                const int n_ban = o->no_repeat_ngram > 0 && forced < 0
                                      ? ll_ngram_bans(o->bos, tok + (size_t)r * T, step, o->no_repeat_ngram, ban)
                                      : 0;
                const int y = draw(logp + (size_t)r * V, V, mode, forced, o->topk, o->topp, o->temperature, o->unkpen,
                                   ban, n_ban, u, &lq, q, q + V, cand, order);
                tok[(size_t)r * T + step] = y;
                ps[(size_t)r * T + step] = (float)lq;
                if (al) al[(size_t)r * T + step] = step_al[r];
                cum[r] += lq;
                if (y != LL_EOS) continue;
                alive[r] = 0;
                ll_hypo *h = &s->fin[s->n_fin++];
                h->len = step + 1;
                h->tokens = ll_malloc(sizeof(int32_t) * h->len);
                h->pos_scores = ll_malloc(sizeof(float) * h->len);
                memcpy(h->tokens, tok + (size_t)r * T, sizeof(int32_t) * h->len);
                memcpy(h->pos_scores, ps + (size_t)r * T, sizeof(float) * h->len);
                if (al) h->align = memcpy(ll_malloc(sizeof(int32_t) * h->len), al + (size_t)r * T, sizeof(int32_t) * h->len);
                h->score = cum[r] / pow(h->len, o->lenpen);
            }
            if (s->n_fin == n) { /* every row ended (EOS is forced at max_len) */
                ll_search_finish(s->fin, s->n_fin, o->nbest, &out[act[j]]);
                s->fin = NULL;
                s->done = 1;
            } else {
                keep[n_keep++] = j;
            }
        }
        if (n_keep == 0) break;
        if (n_keep < nact && ll_decode_compact_wanted(d, n_keep)) {
            ll_decode_compact(m, d, keep, n_keep);
            for (int jj = 0; jj < n_keep; jj++) { /* ascending: in place */
                const int j = keep[jj];
                act[jj] = act[j];
                if (j == jj) continue;
                for (int b = 0; b < n; b++) {
                    const int to = jj * n + b, fr = j * n + b;
                    memcpy(tok + (size_t)to * T, tok + (size_t)fr * T, sizeof(int32_t) * (step + 1));
                    memcpy(ps + (size_t)to * T, ps + (size_t)fr * T, sizeof(float) * (step + 1));
                    if (al) memcpy(al + (size_t)to * T, al + (size_t)fr * T, sizeof(int32_t) * (step + 1));
                    cum[to] = cum[fr];
                    alive[to] = alive[fr];
                }
            }
            nact = n_keep;
        }
    }
    ll_decode_end(m, d);
    for (int i = 0; i < B; i++) free(ss[i].fin);
    free(ss);
    free(tok), free(prev), free(ps), free(al), free(step_al), free(cum), free(q), free(alive), free(logp);
    free(cand), free(act), free(keep), free(order), free(ban);
}
