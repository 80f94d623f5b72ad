/* Batched translation: sentences sorted by length are cut into batches of at
 * most max_tokens source tokens (padded) and max_sents sentences, searched
 * together, and the results put back in input order.  Also the text side:
 * sentencepiece encoding with truncation, detokenisation, and the choice of
 * the decoder's first token (EOS or a target-language tag). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_internal.h"
#include "ll/decode.h"
#include "ll/latent.h"

typedef struct {
    const int32_t *const *src;
    const int *len;
    const ll_search_opts *so;
    ll_nbest *out;
    uint64_t key_base;
    const int32_t *const *prefix; /* per input sentence (NULL: none) */
    const int *prefix_len;
} search_job;

/* Search one batch on model m (a worker's replica) and file the results. */
static void run_batch(ll_model *m, const ll_len_idx *ord, const ll_batch_span *bs, uint64_t draw, void *ctx) {
    const search_job *j = ctx;
    ll_latent_inference_draw(m, draw); /* sample mode: this batch's own layers (no-op otherwise) */
    const int B = bs->B, S = bs->S;
    int32_t *buf = ll_malloc(sizeof(int32_t) * (size_t)B * S);
    int *blen = ll_malloc(sizeof(int) * B);
    ll_nbest *res = ll_malloc(sizeof(ll_nbest) * B);
    for (int b = 0; b < B; b++) {
        const int i = ord[bs->first + b].idx;
        blen[b] = j->len[i];
        memcpy(buf + (size_t)b * S, j->src[i], sizeof(int32_t) * j->len[i]);
        for (int t = j->len[i]; t < S; t++) buf[(size_t)b * S + t] = LL_PAD;
    }
    /* sampling: each sentence's draws keyed by its place in the input (draw_base + index), not its batch */
    ll_search_opts so = *j->so;
    uint64_t *keys = so.sampling ? ll_malloc(sizeof(uint64_t) * B) : NULL;
    for (int b = 0; keys && b < B; b++) keys[b] = j->key_base + (uint64_t)ord[bs->first + b].idx;
    so.keys = keys;
    const int32_t **pre = j->prefix ? ll_malloc(sizeof(int32_t *) * B) : NULL;
    int *plen = j->prefix ? ll_malloc(sizeof(int) * B) : NULL;
    for (int b = 0; pre && b < B; b++) {
        const int i = ord[bs->first + b].idx;
        pre[b] = j->prefix[i];
        plen[b] = j->prefix_len[i];
    }
    so.prefix = pre;
    so.prefix_len = plen;
    ll_beam_search(m, buf, blen, B, S, &so, res);
    free(keys);
    free(pre);
    free(plen);
    for (int b = 0; b < B; b++) j->out[ord[bs->first + b].idx] = res[b];
    free(buf);
    free(blen);
    free(res);
}

int ll_translate_batch_sents(const ll_translate_opts *o, int V) {
    const int beam = o->search.beam;
    int n = o->max_sents > 0 ? o->max_sents : (256 / beam > 1 ? 256 / beam : 1);
    /* beam_topk numbers a batch's candidates (row * V + token) in an int32: a batch's rows stay below
     * 2^31 / V (ll_beam_search refuses more) */
    const long rows_cap = INT_MAX / V / beam;
    return n > rows_cap ? (rows_cap > 1 ? (int)rows_cap : 1) : n;
}

int ll_batch_workers(int inter_threads) {
    const int t = ll_get_threads(); /* auto: one single-threaded worker per thread */
    return inter_threads > 0 && inter_threads < t ? inter_threads : t;
}

int ll_translate_workers(const ll_translate_opts *o) { return ll_batch_workers(o->inter_threads); }

static int by_len(const void *a, const void *b) {
    const ll_len_idx *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int ll_run_batches(ll_model *m, ll_len_idx *ord, int ne, int max_sents, int max_tokens, int workers, int pack,
                   uint64_t draw_base, ll_batch_fn fn, void *ctx) {
    /* Sort by length (ties by position) so that a batch pads little. */
    qsort(ord, ne, sizeof *ord, by_len);
    /* Workers (CTranslate2's inter_threads) run whole batches at once, each
     * single-threaded on its own replica: no barrier between them, which on
     * 2 cores beats splitting every op over both.  So that all of them get
     * work, batches hold at most ceil(ne / workers) sentences. */
    if (strcmp(m->be->name, "cpu")) workers = 1; /* one device stream: batches one after another */
    const int asked = workers;
    if (workers > ne) workers = ne > 0 ? ne : 1;
    if (workers > 1 && (ne + workers - 1) / workers < max_sents) max_sents = (ne + workers - 1) / workers;
    ll_batch_span *spans = ll_malloc(sizeof(ll_batch_span) * (ne ? ne : 1));
    int nb = 0;
    for (int p = 0; p < ne;) {
        /* grow the batch while B * S stays within max_tokens (lengths ascend, so S is the last length) */
        int B = 1;
        while (p + B < ne && B < max_sents && (long)(B + 1) * ord[p + B].len <= max_tokens) B++;
        spans[nb++] = (ll_batch_span){p, B, ord[p + B - 1].len};
        p += B;
    }
    if (workers > nb) workers = nb > 0 ? nb : 1;
    if (workers <= 1 && asked > 1 && nb == 1) {
        /* one sentence alone (lldecode --buffer-size 1) with workers asked for: its ops (a beam's
         * rows) are too small to split over threads, which would wake for every op (3x slower
         * measured on 2 threads), so it runs as a worker does, its ops single-threaded */
        const int threads = ll_get_threads();
        ll_set_threads(1);
        fn(m, ord, &spans[0], draw_base, ctx);
        ll_set_threads(threads);
    } else if (workers <= 1) {
        for (int b = 0; b < nb; b++) fn(m, ord, &spans[b], draw_base + b, ctx);
    } else {
        const int packed_here = pack && !m->dec_packed;
        if (pack) ll_decode_pack(m); /* once, shared by the replicas */
        /* replicas kept by m: from the second call on their arenas are warm */
        ll_model **rep = ll_model_workers(m, workers);
        const int saved = ll_workers_begin(); /* ops inside a worker run single-threaded */
        /* longest batches first: the dynamic schedule then ends evenly */
#pragma omp parallel for schedule(dynamic, 1) num_threads(workers)
        for (int b = nb - 1; b >= 0; b--) fn(rep[ll_worker_id()], ord, &spans[b], draw_base + b, ctx);
        ll_workers_end(saved);
        if (packed_here) ll_decode_unpack(m);
    }
    free(spans);
    return nb;
}

void ll_translate_ids(ll_model *m, const int32_t *const *src, const int *len, int n, const ll_translate_opts *o,
                      ll_nbest *out, ll_translate_stats *st) {
    const double t0 = ll_now();
    ll_translate_stats acc = {0};
    int max_sents = ll_translate_batch_sents(o, m->hp.V);
    ll_len_idx *ord = ll_malloc(sizeof(ll_len_idx) * (n ? n : 1));
    int ne = 0;
    for (int i = 0; i < n; i++) {
        out[i] = (ll_nbest){0};
        if (len[i] > 0) {
            ord[ne++] = (ll_len_idx){len[i], i};
            acc.src_tokens += len[i];
        }
    }
    search_job job = {src, len, &o->search, out, o->draw_base, o->prefix, o->prefix_len};
    const int nb = ll_run_batches(m, ord, ne, max_sents, o->max_tokens, ll_translate_workers(o), 1, o->draw_base,
                                  run_batch, &job);
    for (int i = 0; i < n; i++)
        if (out[i].n) acc.out_tokens += out[i].h[0].len;
    acc.sents = ne;
    acc.batches = nb;
    free(ord);
    acc.seconds = ll_now() - t0;
    if (st) *st = acc;
}

/* A line that starts with a source tag of the vocabulary (a corpus's src_tag, such as <BT>) and
 * white space: the tag's id, as llprep puts it before that corpus's sentences; else -1. */
static int32_t leading_tag(const ll_spm *spm, const char **line) {
    const char *s = *line, *e = s[0] == '<' ? strchr(s, '>') : NULL;
    if (!e || e - s + 1 >= LL_TAG_MAX || (e[1] != ' ' && e[1] != '\t')) return -1;
    char tag[LL_TAG_MAX];
    memcpy(tag, s, (size_t)(e - s + 1));
    tag[e - s + 1] = 0;
    const int id = ll_config_src_tag_ok(tag) ? ll_spm_piece_id(spm, tag) : -1;
    if (id >= 0) *line = e + 1;
    return id;
}

int ll_encode_line(const ll_spm *spm, const char *line, int max_src, int32_t **ids, int *cap, int *truncated) {
    *truncated = 0;
    const int32_t tag = leading_tag(spm, &line);
    int n = ll_spm_encode(spm, line, ids, cap);
    if (n < 0) return ll_fail("sentencepiece could not encode the line");
    if (n == 0) return 0; /* (a tag alone: an empty line, as llprep skips it) */
    if (tag >= 0) {
        if (n + 1 > *cap) *ids = ll_realloc(*ids, sizeof(int32_t) * (*cap = n + 1));
        memmove(*ids + 1, *ids, sizeof(int32_t) * (size_t)n);
        (*ids)[0] = tag;
        n++;
    }
    if (n + 1 > max_src) {
        n = max_src - 1; /* keep the first pieces; EOS stays last */
        *truncated = 1;
    }
    if (n + 1 > *cap) *ids = ll_realloc(*ids, sizeof(int32_t) * (*cap = n + 1));
    (*ids)[n] = LL_EOS;
    return n + 1;
}

void ll_translation_run(ll_model *m, const ll_spm *spm, const ll_translate_opts *o, ll_translation *t) {
    t->hyps = ll_calloc(t->n ? t->n : 1, sizeof(ll_nbest));
    ll_translate_ids(m, (const int32_t *const *)t->src, t->src_len, t->n, o, t->hyps, &t->stats);
    t->best = ll_calloc(t->n ? t->n : 1, sizeof(char *));
    for (int i = 0; i < t->n; i++) {
        const ll_nbest *r = &t->hyps[i];
        /* ll_spm_decode drops EOS and language tags */
        t->best[i] = r->n ? ll_spm_decode(spm, r->h[0].tokens, r->h[0].len) : ll_strdup("");
    }
}

int ll_translate_lines(ll_model *m, const ll_spm *spm, const char *const *lines, int n, const ll_translate_opts *o,
                       ll_translation *t) {
    memset(t, 0, sizeof *t);
    t->n = n;
    t->first_truncated = -1;
    t->src = ll_calloc(n ? n : 1, sizeof(int32_t *));
    t->src_len = ll_calloc(n ? n : 1, sizeof(int));
    int32_t *ids = NULL;
    int cap = 0;
    for (int i = 0; i < n; i++) {
        int trunc = 0;
        int len = ll_encode_line(spm, lines[i], m->hp.max_pos, &ids, &cap, &trunc);
        if (len < 0) {
            free(ids);
            ll_fail("line %d: sentencepiece could not encode the line", i + 1);
            ll_translation_free(t);
            return -1;
        }
        if (trunc && t->n_truncated++ == 0) t->first_truncated = i;
        t->src_len[i] = len;
        if (len) {
            t->src[i] = ll_malloc(sizeof(int32_t) * len);
            memcpy(t->src[i], ids, sizeof(int32_t) * len);
        }
    }
    free(ids);
    ll_translation_run(m, spm, o, t);
    return 0;
}

void ll_translation_free(ll_translation *t) {
    for (int i = 0; i < t->n; i++) {
        if (t->src) free(t->src[i]);
        if (t->hyps) ll_nbest_free(&t->hyps[i]);
        if (t->best) free(t->best[i]);
    }
    free(t->src);
    free(t->src_len);
    free(t->hyps);
    free(t->best);
    memset(t, 0, sizeof *t);
}

int ll_decode_bos(const ll_config *cfg, const ll_spm *spm, const char *lang, int32_t *bos) {
    /* distinct train target languages, in order (as llprep assigns the tags) */
    const char *langs[LL_MAX_CORPORA];
    int n = 0;
    for (int i = 0; i < cfg->n_train; i++) {
        int j = 0;
        while (j < n && strcmp(langs[j], cfg->train[i].tgt_lang)) j++;
        if (j == n) langs[n++] = cfg->train[i].tgt_lang;
    }
    const int tags = !strcmp(cfg->lang_tags, "on") || (!strcmp(cfg->lang_tags, "auto") && n > 1);
    char list[LL_MAX_CORPORA * (LL_LANG_MAX + 2)] = "";
    for (int j = 0; j < n; j++) {
        if (j) strcat(list, ", ");
        strcat(list, langs[j]);
    }
    int pick = -1;
    for (int j = 0; lang && j < n; j++)
        if (!strcmp(langs[j], lang)) pick = j;
    if (lang && pick < 0)
        return ll_fail("--target-lang %s: the model translates into %s", lang, n ? list : "(no language recorded)");
    if (!tags) {
        *bos = LL_EOS;
        return 0;
    }
    if (pick < 0 && n != 1) return ll_fail("the model has language tags: choose --target-lang from %s", list);
    if (pick < 0) pick = 0;
    char tag[LL_LANG_MAX + 4];
    snprintf(tag, sizeof tag, "<2%s>", langs[pick]);
    const int id = ll_spm_piece_id(spm, tag);
    if (id < 0) return ll_fail("the model's vocabulary has no language tag %s", tag);
    *bos = id;
    return 0;
}
