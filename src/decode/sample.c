/* Sampling search (fairseq's --sampling / --sampling-topk / --temperature,
 * Marian's --output-sampling, CTranslate2's sampling_topk): each of a
 * sentence's rows draws its own translation, one token per step, from
 * softmax(log p / temperature), optionally among the topk most probable
 * tokens and then the smallest set of them holding topp of their probability
 * (nucleus sampling, Holtzman et al. 2020).  The back-translations of Edunov
 * et al. (2018) are drawn so.
 *
 * The draw happens on the backend, where the step's log-probabilities are
 * (sample_draw through ll_decode_step_sample: a GPU reads back a token and a
 * score per row, not [rows, V]), in double precision, with a uniform drawn
 * here from a Philox stream keyed by the sentence (not its batch or row), so
 * a sentence's samples are the same however it is batched, on any backend, as
 * far as its log-probabilities are (rounding may differ with the batch: the
 * portable CPU build's OpenBLAS, a GPU).  Rows stay in their lanes
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

void ll_sample_search(ll_model *m, const int32_t *src, const int *src_len, int B, int S, const ll_search_opts *o,
                      ll_nbest *out) {
    const int n = o->beam;
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
    ll_search_shortlist(m, d, o, src, src_len, B, S);
    if (o->align && ll_decode_align_on(m, d) < 0) ll_die("alignment: no decoder layer attends to the source");
    int32_t *tok = ll_malloc(sizeof(int32_t) * (size_t)N0 * T), *prev = ll_malloc(sizeof(int32_t) * N0);
    float *ps = ll_malloc(sizeof(float) * (size_t)N0 * T);
    int32_t *al = o->align ? ll_malloc(sizeof(int32_t) * (size_t)N0 * T) : NULL;
    int32_t *step_al = o->align ? ll_malloc(sizeof(int32_t) * N0) : NULL;
    double *cum = ll_calloc(N0, sizeof(double)), *lqs = ll_malloc(sizeof(double) * N0);
    uint8_t *alive = ll_malloc(N0);
    memset(alive, 1, N0);
    int *act = ll_malloc(sizeof(int) * B), *keep = ll_malloc(sizeof(int) * B);
    int32_t *drawn = ll_malloc(sizeof(int32_t) * N0);
    ll_sample_row *row = ll_malloc(sizeof(ll_sample_row) * N0);
    /* the rows' banned tokens (o->no_repeat_ngram), one after another: at most one per earlier step */
    int32_t *ban = o->no_repeat_ngram > 0 ? ll_malloc(sizeof(int32_t) * (size_t)N0 * T) : NULL;
    const ll_sample_params sp = {.topk = o->topk, .topp = o->topp, .temperature = o->temperature,
                                 .unkpen = o->unkpen, .pad = LL_PAD, .bos = LL_BOS, .eos = LL_EOS, .unk = LL_UNK};
    for (int i = 0; i < B; i++) act[i] = i;
    int nact = B;
    for (int step = 0; nact > 0; step++) {
        int n_ban = 0;
        for (int j = 0; j < nact; j++) {
            sample_sent *s = &ss[act[j]];
            const int mode = (step >= s->min_len) | (step >= s->max_len) << 1;
            const int forced = o->prefix && step < o->prefix_len[act[j]] ? o->prefix[act[j]][step] : -1;
            for (int b = 0; b < n; b++) {
                const int r = j * n + b;
                prev[r] = !step ? o->bos : alive[r] ? tok[(size_t)r * T + step - 1] : LL_EOS;
                row[r] = (ll_sample_row){.mode = 4, .forced = -1};
                if (s->done || !alive[r]) continue;
                row[r] = (ll_sample_row){uniform53(&s->rng, (uint64_t)b << 25 | (uint64_t)step), mode, forced, n_ban, 0};
                if (ban && forced < 0)
                    n_ban += row[r].n_ban = ll_ngram_bans(o->bos, tok + (size_t)r * T, step, o->no_repeat_ngram,
                                                         ban + n_ban);
            }
        }
        ll_decode_step_sample(m, d, prev, row, ban, n_ban, &sp, drawn, lqs);
        if (al) ll_decode_last_align(m, d, step_al);
        int n_keep = 0;
        for (int j = 0; j < nact; j++) {
            sample_sent *s = &ss[act[j]];
            if (s->done) continue;
            for (int b = 0; b < n; b++) {
                const int r = j * n + b;
                if (!alive[r]) continue;
                const int y = drawn[r];
                const double lq = lqs[r];
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
    free(tok), free(prev), free(ps), free(al), free(step_al), free(cum), free(lqs), free(alive);
    free(act), free(keep), free(drawn), free(row), free(ban);
}
