/* Beam search as fairseq's SequenceGenerator + BeamSearch (reference-spec §7).
 *
 * Every step feeds one token per hypothesis row to ll_decode_step_topk.  Per
 * sentence, the top k = 2*beam candidates over beam x V are ranked by
 * cumulative raw log-probability; those ending in EOS within the first `beam`
 * ranks are finalized with score sum/len^lenpen, and the first `beam`
 * non-EOS candidates become the next rows.  A sentence is done once `beam`
 * hypotheses are finalized or at its max length.  Rows that could not be
 * filled (fewer live candidates than `beam`, and rows 1.. at step 0) carry
 * -inf scores: fairseq keeps -inf candidates in such slots, which never
 * finalize or outrank a finite one, so skipping them selects the same set.
 * Finished sentences leave the batch (ll_decode_compact) when
 * ll_decode_compact_wanted says so; until then their rows ride along "dead"
 * (-inf, no candidates), which changes nothing for the others. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "decode_internal.h"
#include "ll/decode.h"

void ll_search_opts_default(ll_search_opts *o) {
    *o = (ll_search_opts){.beam = 5, .lenpen = 1.0, .max_len_a = 0, .max_len_b = 200, .min_len = 1, .nbest = 1,
                          .bos = LL_EOS, .temperature = 1.0, .topp = 1.0};
}

int ll_search_max_len(const ll_model *m, const ll_search_opts *o, int src_len) {
    /* fairseq: int(a * src_len + b), capped so the last position stays inside
     * the positional table.  src_len is the sentence's own length, not the
     * batch's padded one, so results do not depend on how inputs are batched. */
    double want = o->max_len_a * src_len + o->max_len_b;
    int cap = m->hp.max_pos - 1;
    int len = want >= cap ? cap : (int)want;
    return len < 0 ? 0 : len;
}

int ll_search_prefixed_max_len(const ll_model *m, const ll_search_opts *o, int src_len, int i) {
    const int len = ll_search_max_len(m, o, src_len), p = o->prefix ? o->prefix_len[i] : 0;
    if (p > m->hp.max_pos - 2)
        ll_die("search: a target prefix of %d tokens leaves no step for EOS (model.max_positions %d)", p, m->hp.max_pos);
    return len > p ? len : p + 1;
}

void ll_nbest_free(ll_nbest *r) {
    for (int i = 0; i < r->n; i++) {
        free(r->h[i].tokens);
        free(r->h[i].pos_scores);
        free(r->h[i].align);
    }
    free(r->h);
    r->h = NULL;
    r->n = 0;
}

typedef struct {
    double s;   /* cumulative log-prob */
    float lp;   /* this token's log-prob */
    int row;    /* parent row */
    int32_t tok;
} cand;

typedef struct {
    int max_len, min_len;
    int n_fin;
    ll_hypo *fin; /* [beam], in order of finalization */
} sent;

/* Candidates of one sentence from the backend's beam_topk (best first;
 * ties to the lower (row, token) index, as a stable top-k would; pad and BOS
 * never, EOS not before min_len and nothing else at max_len). */
static int take_candidates(const double *score, const real *lp, const int32_t *flat, int V, int k, cand *c) {
    /* an empty slot keeps its rank (tok -1): diverse beam search interleaves its groups'
     * candidates, so one group's empty slots can precede another's; fairseq's rows hold them
     * there (-inf, dead).  In plain beam search they all trail. */
    int n = 0;
    for (int q = 0; q < k; q++) {
        c[q] = flat[q] >= 0 ? (cand){.s = score[q], .lp = (float)lp[q], .row = flat[q] / V, .tok = flat[q] % V}
                            : (cand){.s = -INFINITY, .row = -1, .tok = -1};
        if (flat[q] >= 0) n = q + 1;
    }
    return n;
}

/* Diverse siblings search (fairseq's DiverseSiblingsSearch): the sentence's rows' own top-k
 * lists (beam_topk per row: row after row, each best first, k slots), each candidate's score
 * and log-prob less rate x its rank in its row (1-based; one fma, as beam_topk's penalties), then
 * the k best of them all, ties to the lower (row, token).  Empty slots trail. */
static int sibling_candidates(const double *score, const real *lp, const int32_t *flat, int rows, int V, int k,
                              double rate, cand *all, cand *c) {
    int n = 0;
    for (int i = 0; i < rows * k; i++) {
        if (flat[i] < 0) continue;
        const double rank = i % k + 1;
        all[n++] = (cand){.s = fma(-rate, rank, score[i]), .lp = (float)fma(-rate, rank, (double)lp[i]),
                          .row = flat[i] / V, .tok = flat[i] % V};
    }
    int m = 0;
    for (int i = 0; i < n; i++) { /* insertion into the k best (n is at most rows x k) */
        const cand x = all[i];
        const int idx = x.row * V + x.tok;
        if (m == k && !(x.s > c[k - 1].s || (x.s == c[k - 1].s && idx < c[k - 1].row * V + c[k - 1].tok))) continue;
        int pos = m < k ? m++ : k - 1;
        while (pos > 0 && (c[pos - 1].s < x.s || (c[pos - 1].s == x.s && c[pos - 1].row * V + c[pos - 1].tok > idx))) {
            c[pos] = c[pos - 1];
            pos--;
        }
        c[pos] = x;
    }
    return m;
}

/* Sort finalized hypotheses by score, best first (stable: ties keep the
 * order of finalization), keep nbest and free the rest. */
static void finish(sent *s, int nbest, ll_nbest *out) {
    for (int i = 1; i < s->n_fin; i++) {
        ll_hypo h = s->fin[i];
        int j = i;
        while (j > 0 && s->fin[j - 1].score < h.score) {
            s->fin[j] = s->fin[j - 1];
            j--;
        }
        s->fin[j] = h;
    }
    out->n = s->n_fin < nbest ? s->n_fin : nbest;
    for (int i = out->n; i < s->n_fin; i++) {
        free(s->fin[i].tokens);
        free(s->fin[i].pos_scores);
        free(s->fin[i].align);
    }
    out->h = s->fin;
    s->fin = NULL;
}

void ll_search_finish(ll_hypo *fin, int n_fin, int nbest, ll_nbest *out) {
    sent s = {.fin = fin, .n_fin = n_fin};
    finish(&s, nbest, out);
}

void ll_beam_search(ll_model *m, const int32_t *src, const int *src_len, int B, int S, const ll_search_opts *o,
                    ll_nbest *out) {
    if (o->sampling) {
        if (o->diverse_groups > 1 || o->diversity_rate > 0) ll_die("diverse beam search: not with sampling");
        ll_sample_search(m, src, src_len, B, S, o, out);
        return;
    }
    const int beam = o->beam, V = m->hp.V, N = B * beam;
    /* With one row, the best candidate alone decides (EOS finishes the sentence). */
    const int k = beam == 1 ? 1 : 2 * beam;
    if (beam < 1 || o->nbest < 1 || o->nbest > beam) ll_die("beam search: need 1 <= nbest (%d) <= beam (%d)", o->nbest, beam);
    const int div = o->diverse_groups > 1 ? o->diverse_groups : 1;
    if (beam % div) ll_die("diverse beam search: %d groups do not divide the beam size %d", div, beam);
    if (div > 1 && o->prefix) ll_die("diverse beam search: no target prefixes");
    const double rate = o->diversity_rate; /* diverse siblings search: each row's own top-k first */
    if (rate < 0 || (rate > 0 && div > 1)) ll_die("beam search: diversity rate %g with %d groups", rate, div);
    if (rate > 0 && o->prefix) ll_die("diverse siblings search: no target prefixes");
    if (B <= 0) return;
    if ((long long)B * beam * V > INT_MAX) /* (ll_translate_ids keeps its batches below) */
        ll_die("beam search: %d rows (beam %d) x vocabulary %d exceed 2^31 candidates in one batch", N, beam, V);
    sent *ss = ll_calloc(B, sizeof *ss);
    int T = 1; /* history capacity: tokens per row */
    for (int i = 0; i < B; i++) {
        ss[i].max_len = ll_search_prefixed_max_len(m, o, src_len[i], i);
        ss[i].min_len = o->min_len < ss[i].max_len ? o->min_len : ss[i].max_len;
        ss[i].fin = ll_calloc(beam, sizeof(ll_hypo));
        if (ss[i].max_len + 1 > T) T = ss[i].max_len + 1;
    }
    ll_dec_state *d = ll_decode_begin(m, src, src_len, B, S, beam, T);
    ll_search_shortlist(m, d, o, src, src_len, B, S);
    d->unk_pen = (real)o->unkpen;
    d->div_groups = div, d->div_strength = o->diverse_strength;
    d->topk_per_row = rate > 0;
    /* prefix steps: the forced token of each sentence (pad: none) and its log-probability */
    int32_t *force = o->prefix ? ll_malloc(sizeof(int32_t) * B) : NULL;
    real *force_lp = o->prefix ? ll_malloc(sizeof(real) * B) : NULL;
    if (o->align && ll_decode_align_on(m, d) < 0) ll_die("alignment: no decoder layer attends to the source");

    /* Row histories (tokens, per-token log-probs) are double-buffered: a step
     * builds the new rows from their parents. */
    int32_t *tok = ll_malloc(sizeof(int32_t) * N * T), *tok2 = ll_malloc(sizeof(int32_t) * N * T);
    float *ps = ll_malloc(sizeof(float) * N * T), *ps2 = ll_malloc(sizeof(float) * N * T);
    /* with o->align: the rows' alignment histories, as tok; step_al: the step's, per row */
    int32_t *al = NULL, *al2 = NULL, *step_al = NULL;
    if (o->align) {
        al = ll_malloc(sizeof(int32_t) * N * T);
        al2 = ll_malloc(sizeof(int32_t) * N * T);
        step_al = ll_malloc(sizeof(int32_t) * N);
    }
    double *cum = ll_malloc(sizeof(double) * N), *cum2 = ll_malloc(sizeof(double) * N);
    int32_t *prev = ll_malloc(sizeof(int32_t) * N);
    /* per step, per sentence: k candidates from the backend (the [N, V]
     * log-probabilities stay there) */
    const size_t nk = (size_t)(rate > 0 ? N : B) * k; /* (siblings: k per row) */
    double *score = ll_malloc(sizeof(double) * nk);
    real *lp = ll_malloc(sizeof(real) * nk);
    int32_t *flat = ll_malloc(sizeof(int32_t) * nk);
    uint8_t *mode = ll_malloc(B);
    int *from = ll_malloc(sizeof(int) * N), *act = ll_malloc(sizeof(int) * B), *keep = ll_malloc(sizeof(int) * B);
    uint8_t *dead = ll_calloc(B, 1); /* slot j's sentence is finished but still in the batch */
    cand *c = ll_malloc(sizeof(cand) * k), *all = rate > 0 ? ll_malloc(sizeof(cand) * (size_t)beam * k) : NULL;
    /* o->no_repeat_ngram: the step's banned (row, token)s, flat; at most `step` per row */
    int32_t *ban = o->no_repeat_ngram > 0 ? ll_malloc(sizeof(int32_t) * (size_t)N * T) : NULL;
    /* step 0 expands only row 0 of each sentence (all rows are identical) */
    for (int r = 0; r < N; r++) cum[r] = r % beam ? -INFINITY : 0;
    for (int i = 0; i < B; i++) act[i] = i;
    int nact = B;

    for (int step = 0; nact > 0; step++) {
        const int n = nact * beam;
        for (int r = 0; r < n; r++) prev[r] = step ? tok[(size_t)r * T + step - 1] : o->bos;
        for (int j = 0; j < nact; j++)
            mode[j] = (uint8_t)((step >= ss[act[j]].min_len) | (step >= ss[act[j]].max_len) << 1);
        if (ban && step > 0) { /* live rows of sentences past their prefix (forced tokens are never banned) */
            int nb = 0;
            for (int j = 0; j < nact; j++) {
                if (dead[j] || (o->prefix && step < o->prefix_len[act[j]])) continue;
                for (int r = j * beam; r < (j + 1) * beam; r++) {
                    if (cum[r] == -INFINITY) continue;
                    const int nr = ll_ngram_bans(o->bos, tok + (size_t)r * T, step, o->no_repeat_ngram, ban + nb);
                    for (int q = nb; q < nb + nr; q++) ban[q] += r * V;
                    nb += nr;
                }
            }
            if (nb) ll_decode_ban(m, d, ban, nb);
        }
        ll_decode_step_topk(m, d, prev, cum, mode, k, score, lp, flat, step_al);
        int forcing = 0;
        for (int j = 0; force && j < nact; j++)
            forcing |= (force[j] = !dead[j] && step < o->prefix_len[act[j]] ? o->prefix[act[j]][step] : LL_PAD) != LL_PAD;
        if (forcing) ll_decode_first_row_logp(m, d, force, force_lp);
        int n_keep = 0;
        for (int j = 0; j < nact; j++) {
            sent *s = &ss[act[j]];
            const int base = j * beam;
            if (dead[j]) { /* any valid input; -inf: no candidates */
                for (int r = base; r < base + beam; r++) {
                    from[r] = r;
                    tok2[(size_t)r * T + step] = LL_EOS;
                    cum2[r] = -INFINITY;
                }
                continue;
            }
            int nc;
            if (forcing && force[j] != LL_PAD) /* a prefix step: its token, on the sentence's one live row */
                c[0] = (cand){.s = cum[base] + force_lp[j], .lp = (float)force_lp[j], .row = base, .tok = force[j]}, nc = 1;
            else if (rate > 0 && step > 0) /* (step 0 ranks the one first row as beam search) */
                nc = sibling_candidates(score + (size_t)base * k, lp + (size_t)base * k, flat + (size_t)base * k, beam,
                                        V, k, rate, all, c);
            else
                nc = take_candidates(score + (size_t)j * k, lp + (size_t)j * k, flat + (size_t)j * k, V, k, c);
            /* EOS within the first `beam` ranks: finalized (up to beam per sentence) */
            for (int q = 0; q < nc && q < beam; q++) {
                if (c[q].tok != LL_EOS || s->n_fin == beam) continue;
                ll_hypo *h = &s->fin[s->n_fin++];
                h->len = step + 1;
                h->tokens = ll_malloc(sizeof(int32_t) * h->len);
                h->pos_scores = ll_malloc(sizeof(float) * h->len);
                memcpy(h->tokens, tok + (size_t)c[q].row * T, sizeof(int32_t) * step);
                memcpy(h->pos_scores, ps + (size_t)c[q].row * T, sizeof(float) * step);
                h->tokens[step] = LL_EOS;
                h->pos_scores[step] = c[q].lp;
                if (al) {
                    h->align = ll_malloc(sizeof(int32_t) * h->len);
                    memcpy(h->align, al + (size_t)c[q].row * T, sizeof(int32_t) * step);
                    h->align[step] = step_al[c[q].row];
                }
                h->score = c[q].s / pow(step + 1, o->lenpen);
            }
            int done = s->n_fin == beam || step >= s->max_len;
            /* the first `beam` non-EOS candidates continue; EOS beyond rank
             * `beam` is dropped, as in fairseq */
            int filled = 0, live = 0;
            for (int q = 0; !done && q < nc && filled < beam; q++) {
                if (c[q].tok == LL_EOS) continue;
                const int r = base + filled++;
                if (c[q].tok < 0) { /* an empty slot: a dead row */
                    from[r] = r;
                    tok2[(size_t)r * T + step] = LL_EOS;
                    cum2[r] = -INFINITY;
                    continue;
                }
                live++;
                from[r] = c[q].row;
                memcpy(tok2 + (size_t)r * T, tok + (size_t)c[q].row * T, sizeof(int32_t) * step);
                memcpy(ps2 + (size_t)r * T, ps + (size_t)c[q].row * T, sizeof(float) * step);
                tok2[(size_t)r * T + step] = c[q].tok;
                ps2[(size_t)r * T + step] = c[q].lp;
                cum2[r] = c[q].s;
                if (al) {
                    memcpy(al2 + (size_t)r * T, al + (size_t)c[q].row * T, sizeof(int32_t) * step);
                    al2[(size_t)r * T + step] = step_al[c[q].row];
                }
            }
            if (live == 0) done = 1; /* no live row: nothing more can finish */
            for (int r = base + filled; r < base + beam; r++) {
                from[r] = r;
                tok2[(size_t)r * T + step] = LL_EOS; /* any valid input; its output is ignored */
                cum2[r] = -INFINITY;
            }
            if (done) {
                finish(s, o->nbest, &out[act[j]]);
                dead[j] = 1;
            } else
                keep[n_keep++] = j;
        }
        int32_t *ti = tok; tok = tok2; tok2 = ti;
        float *pi = ps; ps = ps2; ps2 = pi;
        double *ci = cum; cum = cum2; cum2 = ci;
        int32_t *ai = al; al = al2; al2 = ai;
        if (n_keep == 0) break;
        if (n_keep < nact && ll_decode_compact_wanted(d, n_keep)) {
            /* drop finished sentences: move the kept rows down (ascending, so in place) */
            ll_decode_compact(m, d, keep, n_keep);
            for (int jj = 0; jj < n_keep; jj++) {
                const int j = keep[jj];
                act[jj] = act[j];
                dead[jj] = 0;
                if (j == jj) continue;
                for (int b = 0; b < beam; b++) {
                    const int to = jj * beam + b, fr = j * beam + b;
                    memcpy(tok + (size_t)to * T, tok + (size_t)fr * T, sizeof(int32_t) * (step + 1));
                    memcpy(ps + (size_t)to * T, ps + (size_t)fr * T, sizeof(float) * (step + 1));
                    if (al) memcpy(al + (size_t)to * T, al + (size_t)fr * T, sizeof(int32_t) * (step + 1));
                    cum[to] = cum[fr];
                    from[to] = from[fr] - fr + to;
                }
            }
            nact = n_keep;
        }
        int moved = 0;
        for (int r = 0; r < nact * beam && !moved; r++) moved = from[r] != r;
        if (moved) ll_decode_reorder(m, d, from);
    }
    ll_decode_end(m, d);
    free(force);
    free(force_lp);
    for (int i = 0; i < B; i++) free(ss[i].fin); /* NULL once handed to out */
    free(ss);
    free(tok);
    free(tok2);
    free(ps);
    free(ps2);
    free(al);
    free(al2);
    free(step_al);
    free(cum);
    free(cum2);
    free(prev);
    free(score);
    free(lp);
    free(flat);
    free(mode);
    free(from);
    free(act);
    free(keep);
    free(dead);
    free(c);
    free(all);
    free(ban);
}
