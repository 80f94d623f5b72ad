/* Validation: loss over the prepared validation set (no dropout) and,
 * optionally, BLEU/chrF of the decoded raw validation sources against the raw
 * references (sacreBLEU-compatible, src/eval).  Latent-depth models use their
 * deterministic inference (latent.inference) with each pair's languages. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/decode.h"
#include "ll/dist.h"
#include "ll/eval.h"
#include "ll/latent.h"
#include "ll/train.h"

/* Hard inference with no q(z=1) >= threshold runs none of the stack's layers
 * (soft samples can leave every q just below 0.5): say so once per row, since
 * the scores alone look like a broken model. */
static void warn_empty_stack(ll_model *m, const ll_config *cfg, int s, int row, int mode) {
    static uint8_t warned[2][LL_LATENT_MAX_ROWS];
    if (mode != LL_LATENT_HARD || row >= LL_LATENT_MAX_ROWS || warned[s][row]) return;
    const int L = s ? m->hp.Ld : m->hp.Le;
    real a[4096];
    if (L < 1 || L > 4096) return;
    ll_latent_logits(m, s, row, a);
    double best = 0;
    for (int l = 0; l < L; l++) best = fmax(best, ll_latent_q(a[l]));
    if (best >= cfg->latent_threshold) return;
    warned[s][row] = 1;
    char name[2 * LL_LANG_MAX + 8];
    ll_warn("latent %s row %s: no layer has q(z=1) >= latent.threshold %g (highest %.4f), so hard inference runs "
            "none of its layers; latent.inference soft (z = q) or a lower threshold uses them",
            s ? "decoder" : "encoder", ll_latent_row_name(&m->hp, cfg, row, name, sizeof name),
            (double)cfg->latent_threshold, best);
}

int ll_set_pair_inference(ll_model *m, const ll_config *cfg, int src_lang, int tgt_lang) {
    int mode = ll_latent_mode(cfg->latent_inference);
    for (int s = 0; s < 2; s++) {
        if (!ll_latent_on(m, s)) continue;
        int row = ll_latent_pair_row(&m->hp, cfg, s, src_lang, tgt_lang);
        if (row < 0) {
            char langs[LL_MAX_CORPORA * 4][LL_LANG_MAX];
            const int n = ll_config_langs(cfg, langs);
            return ll_fail("the model has no latent %s row for the pair %s-%s (latent.posterior %s)",
                           s ? "decoder" : "encoder", src_lang >= 0 && src_lang < n ? langs[src_lang] : "?",
                           tgt_lang >= 0 && tgt_lang < n ? langs[tgt_lang] : "?",
                           m->hp.latent_per_pair ? "per_pair" : cfg->latent_posterior);
        }
        ll_latent_set_inference(m, s, row, mode, cfg->latent_threshold, (uint64_t)cfg->seed);
        warn_empty_stack(m, cfg, s, row, mode);
    }
    return 0;
}

/* Several ranks (d->world > 1): rank r computes batch i iff i % world == r and
 * the sums are all-reduced, so every rank gets the same global result. */
static void valid_loss(ll_model *m, const ll_config *cfg, const ll_dataset *valid, ll_valid_result *r, ll_dist *d) {
    ll_batcher *vb = ll_batcher_new(valid, cfg->max_tokens, cfg->seed, 0);
    ll_batch b;
    memset(&b, 0, sizeof b);
    long ntok = 0;
    ll_model_stats_zero(m);
    const uint64_t nmax = cfg->valid_max_batches > 0 ? (uint64_t)cfg->valid_max_batches : UINT64_MAX;
    /* Several corpora: each one's loss as well.  The sums on the backend are read where the batches
     * go from one corpus to the next (the validation batches come corpus by corpus: one read per
     * corpus), and each corpus gets the difference; the totals are read as with one corpus. */
    const int per = cfg->n_valid > 1 && valid->n_pairs == cfg->n_valid;
    double pc[3 * LL_MAX_CORPORA] = {0}, seen[2] = {0, 0}; /* per corpus: loss, nll, tokens */
    int cur = -1;
    for (uint64_t i = 0; i < nmax && ll_batcher_next(vb, &b); i++) {
        if (i % (uint64_t)d->world != (uint64_t)d->rank) continue;
        if (per && b.pair != cur) {
            if (cur >= 0) {
                double st[LL_ST_N];
                ll_model_stats_read(m, st, NULL);
                pc[3 * cur] += st[LL_ST_LOSS] - seen[0], pc[3 * cur + 1] += st[LL_ST_NLL] - seen[1];
                seen[0] = st[LL_ST_LOSS], seen[1] = st[LL_ST_NLL];
            }
            cur = b.pair;
        }
        ll_set_pair_inference(m, cfg, b.src_lang, b.tgt_lang); /* rows exist: ll_config_validate */
        ll_latent_inference_draw(m, i);                          /* sample mode: one draw per batch */
        ll_model_step(m, &b, cfg->seed, 0, 0, NULL);
        ntok += b.n_tgt_tokens;
        if (per) pc[3 * b.pair + 2] += b.n_tgt_tokens;
    }
    ll_batch_free(&b);
    ll_batcher_free(vb);
    if (per) {
        if (cur >= 0) {
            double st[LL_ST_N];
            ll_model_stats_read(m, st, NULL);
            pc[3 * cur] += st[LL_ST_LOSS] - seen[0], pc[3 * cur + 1] += st[LL_ST_NLL] - seen[1];
        }
        if (d->world > 1)
            ll_dist_allreduce_wait(d->host, pc, 3 * (size_t)cfg->n_valid, LL_DIST_F64, 0,
                                   "all-reduce of the validation loss per corpus");
        r->n_corpora = cfg->n_valid;
        for (int k = 0; k < cfg->n_valid; k++) {
            const double t = pc[3 * k + 2] > 0 ? pc[3 * k + 2] : 1;
            r->corpus[k].loss = pc[3 * k] / t / M_LN2;
            r->corpus[k].nll = pc[3 * k + 1] / t / M_LN2;
            r->corpus[k].tokens = (long)pc[3 * k + 2];
        }
    }
    if (d->world > 1) {
        ll_dist_allreduce_wait(d, m->stats, LL_ST_NLL + 1, LL_DIST_F64, 0, "all-reduce of the validation loss");
        ntok = (long)ll_dist_sum_host(d, (double)ntok, "all-reduce of validation tokens");
    }
    double st[LL_ST_N];
    ll_model_stats_read(m, st, NULL);
    r->loss = st[LL_ST_LOSS] / (ntok ? ntok : 1) / M_LN2;
    r->nll = st[LL_ST_NLL] / (ntok ? ntok : 1) / M_LN2;
    r->tokens = ntok;
}

/* Lines of a text file (malloc'd array of malloc'd strings). */
static char **read_lines(const char *path, int *n) {
    size_t len;
    char *text = ll_read_file(path, &len);
    if (!text) return NULL;
    int cap = 1024, k = 0;
    char **lines = ll_malloc(sizeof(char *) * cap);
    char *p = text;
    while (*p) {
        char *e = strchr(p, '\n');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (k == cap) lines = ll_realloc(lines, sizeof(char *) * (cap *= 2));
        lines[k] = ll_malloc(l + 1);
        memcpy(lines[k], p, l);
        lines[k][l] = 0;
        k++;
        p += l + (e ? 1 : 0);
    }
    free(text);
    *n = k;
    return lines;
}

static void free_lines(char **l, int n) {
    for (int i = 0; l && i < n; i++) free(l[i]);
    free(l);
}

/* The n-gram statistics of every rank's sentences, summed (exact: counts). */
static void sum_scores(ll_dist *d, ll_bleu_stats *bs, ll_chrf_stats *cs) {
    enum { NB = 3 + 2 * LL_BLEU_ORDER, NC = 3 * LL_CHRF_MAX_ORDER + 1 };
    double v[NB + NC];
    int k = 0;
    v[k++] = (double)bs->sys_len, v[k++] = (double)bs->ref_len, v[k++] = (double)bs->n_sents;
    for (int i = 0; i < LL_BLEU_ORDER; i++) v[k++] = (double)bs->correct[i], v[k++] = (double)bs->total[i];
    for (int i = 0; i < 3 * LL_CHRF_MAX_ORDER; i++) v[k++] = (double)cs->stats[i];
    v[k++] = (double)cs->n_sents;
    ll_dist_allreduce_wait(d->host, v, (size_t)k, LL_DIST_F64, 0, "all-reduce of validation BLEU statistics");
    k = 0;
    bs->sys_len = (int64_t)v[k++], bs->ref_len = (int64_t)v[k++], bs->n_sents = (int64_t)v[k++];
    for (int i = 0; i < LL_BLEU_ORDER; i++) bs->correct[i] = (int64_t)v[k++], bs->total[i] = (int64_t)v[k++];
    for (int i = 0; i < 3 * LL_CHRF_MAX_ORDER; i++) cs->stats[i] = (int64_t)v[k++];
    cs->n_sents = (int64_t)v[k++];
    if (bs->n_sents > 0 && bs->nrefs == 0) bs->nrefs = 1; /* a rank that decoded nothing */
    if (cs->n_sents > 0 && cs->nrefs == 0) cs->nrefs = 1;
}

const char *ll_valid_hyp_path(const ll_config *cfg, int k, int best, char *buf, size_t n) {
    snprintf(buf, n, "%s/valid_hyp%s.%d.%s", cfg->save_dir, best ? "_best" : "", k, cfg->valid[k].tgt_lang);
    return buf;
}

/* train.valid_translations: corpus k's ns translations, of which this rank holds lines
 * rank, rank + world, ... (hyp[0..]), in order into its file by rank 0.  Several ranks: the
 * lengths, then the bytes, summed over the ranks (each rank's own places non-zero; doubles hold
 * bytes exactly). */
static int write_translations(const ll_config *cfg, ll_dist *d, int k, int ns, char **hyp) {
    double *len = ll_calloc((size_t)ns + 1, sizeof(double));
    for (int i = d->rank, j = 0; i < ns; i += d->world, j++) len[i] = hyp[j] ? (double)strlen(hyp[j]) : 0;
    if (d->world > 1) ll_dist_allreduce_wait(d->host, len, (size_t)ns, LL_DIST_F64, 0, "all-reduce of translation lengths");
    size_t *off = ll_malloc(((size_t)ns + 1) * sizeof(size_t));
    off[0] = 0;
    for (int i = 0; i < ns; i++) off[i + 1] = off[i] + (size_t)len[i];
    char *text = ll_malloc(off[ns] + 1);
    if (d->world > 1) {
        double *bytes = ll_calloc(off[ns] + 1, sizeof(double));
        for (int i = d->rank, j = 0; i < ns; i += d->world, j++)
            for (size_t c = 0; c < off[i + 1] - off[i]; c++) bytes[off[i] + c] = (unsigned char)hyp[j][c];
        ll_dist_allreduce_wait(d->host, bytes, off[ns], LL_DIST_F64, 0, "all-reduce of translations");
        for (size_t c = 0; c < off[ns]; c++) text[c] = (char)(unsigned char)bytes[c];
        free(bytes);
    } else {
        for (int i = 0; i < ns; i++) memcpy(text + off[i], hyp[i], off[i + 1] - off[i]);
    }
    int rc = 0;
    if (d->rank == 0) {
        char path[LL_PATH_MAX + 64];
        ll_atomic_file af;
        if (ll_atomic_open(&af, ll_valid_hyp_path(cfg, k, 0, path, sizeof path))) {
            rc = -1;
        } else {
            for (int i = 0; i < ns; i++) {
                fwrite(text + off[i], 1, off[i + 1] - off[i], af.f);
                fputc('\n', af.f);
            }
            rc = ll_atomic_commit(&af);
        }
    }
    free(text);
    free(off);
    free(len);
    return rc;
}

static int valid_bleu(ll_model *m, const ll_config *cfg, const ll_spm *spm, ll_valid_result *r, ll_dist *d) {
    ll_bleu_stats bs;
    ll_chrf_stats cs;
    ll_bleu_opts bo;
    ll_bleu_opts_default(&bo);
    if (ll_bleu_tok_parse(cfg->valid_tokenize[0] ? cfg->valid_tokenize : "13a", &bo.tokenize))
        return ll_fail("train.valid_tokenize: unknown tokenizer '%s'", cfg->valid_tokenize);
    ll_bleu_init(&bs, &bo);
    ll_chrf_init(&cs, NULL);
    const int per = cfg->n_valid > 1; /* each corpus's scores too */
    for (int k = 0; k < cfg->n_valid; k++) {
        ll_bleu_stats kbs;
        ll_chrf_stats kcs;
        ll_bleu_init(&kbs, &bo);
        ll_chrf_init(&kcs, NULL);
        const ll_corpus_cfg *c = &cfg->valid[k];
        int ns = 0, nt = 0;
        char **src = read_lines(c->src, &ns), **ref = src ? read_lines(c->tgt, &nt) : NULL;
        if (!src || !ref || ns != nt) {
            free_lines(src, ns);
            free_lines(ref, nt);
            return ref && ns != nt ? ll_fail("%s and %s differ in length", c->src, c->tgt) : -1;
        }
        ll_translate_opts o;
        memset(&o, 0, sizeof o);
        ll_search_opts_default(&o.search);
        o.search.beam = cfg->valid_beam;
        o.search.lenpen = cfg->lenpen;
        o.max_tokens = cfg->max_tokens;
        o.draw_base = (uint64_t)k << 32; /* sample mode: each corpus its own draws */
        if (ll_decode_bos(cfg, spm, c->tgt_lang, &o.search.bos)) {
            free_lines(src, ns);
            free_lines(ref, nt);
            return -1;
        }
        ll_set_pair_inference(m, cfg, ll_config_lang_index(cfg, c->src_lang), ll_config_lang_index(cfg, c->tgt_lang));
        for (int i = 0; c->src_tag[0] && i < ns; i++) { /* the corpus's tag, as lldecode reads a tagged line */
            if (!src[i][0]) continue;
            char *tagged = ll_malloc(strlen(c->src_tag) + strlen(src[i]) + 2);
            sprintf(tagged, "%s %s", c->src_tag, src[i]);
            free(src[i]);
            src[i] = tagged;
        }
        /* several ranks: this rank's lines i % world == rank (the others' are NULL, skipped below) */
        int mine = 0;
        for (int i = 0; i < ns; i++)
            if (i % d->world == d->rank) src[mine] = src[i], ref[mine++] = ref[i];
            else free(src[i]), free(ref[i]);
        ll_translation t;
        int rc = ll_translate_lines(m, spm, (const char *const *)src, mine, &o, &t);
        ll_model_decode_release(m); /* the caches and workers are not kept through training */
        if (!rc)
            for (int i = 0; i < mine; i++) {
                if (!src[i][0] && !ref[i][0]) continue; /* empty pairs carry nothing */
                const char *refs[1] = {ref[i]};
                ll_bleu_add(&bs, t.best[i], refs, 1);
                ll_chrf_add(&cs, t.best[i], refs, 1);
                if (per) ll_bleu_add(&kbs, t.best[i], refs, 1), ll_chrf_add(&kcs, t.best[i], refs, 1);
            }
        const int wrc = !rc && cfg->valid_translations ? write_translations(cfg, d, k, ns, t.best) : 0;
        ns = nt = mine;
        if (!rc) ll_translation_free(&t);
        free_lines(src, ns);
        free_lines(ref, nt);
        if (rc || wrc) return -1;
        if (per) {
            if (d->world > 1) sum_scores(d, &kbs, &kcs);
            ll_bleu_result kbr;
            ll_chrf_result kcr;
            ll_bleu_compute(&kbs, &kbr);
            ll_chrf_compute(&kcs, &kcr);
            r->corpus[k].bleu = kbr.score, r->corpus[k].chrf = kcr.score;
        }
    }
    if (d->world > 1) sum_scores(d, &bs, &cs);
    ll_bleu_result br;
    ll_chrf_result cr;
    ll_bleu_compute(&bs, &br);
    ll_chrf_compute(&cs, &cr);
    r->bleu = br.score;
    r->chrf = cr.score;
    r->have_bleu = 1;
    return 0;
}

void ll_valid_extra(const ll_config *cfg, const ll_valid_result *r, char *buf, size_t n) {
    int k = 0;
    buf[0] = 0;
    if (cfg->valid_max_batches > 0)
        k = snprintf(buf, n, " | first %d batches, %ld tokens", cfg->valid_max_batches, r->tokens);
    if (r->have_bleu && k >= 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, " | bleu %.2f | chrf %.2f", r->bleu, r->chrf);
}

void ll_valid_corpus_line(const ll_config *cfg, const ll_valid_result *r, int k, char *buf, size_t n) {
    const ll_corpus_cfg *c = &cfg->valid[k];
    const char *base = strrchr(c->src, '/');
    int w = snprintf(buf, n, "%s-%s (%s) | loss %.3f | ppl %.2f", c->src_lang, c->tgt_lang, base ? base + 1 : c->src,
                     r->corpus[k].loss, pow(2, r->corpus[k].nll));
    if (r->have_bleu && w >= 0 && (size_t)w < n)
        snprintf(buf + w, n - (size_t)w, " | bleu %.2f | chrf %.2f", r->corpus[k].bleu, r->corpus[k].chrf);
}

int ll_validate(ll_model *m, const ll_config *cfg, const ll_dataset *valid, const ll_spm *spm, ll_valid_result *r) {
    return ll_validate_ranks(m, cfg, valid, spm, r, NULL);
}

int ll_validate_ranks(ll_model *m, const ll_config *cfg, const ll_dataset *valid, const ll_spm *spm,
                      ll_valid_result *r, struct ll_dist *d) {
    if (!d) d = ll_dist_single();
    memset(r, 0, sizeof *r);
    ll_model_reset_ctl(m); /* inference: no LayerDrop, every cross-attention */
    valid_loss(m, cfg, valid, r, d);
    int rc = cfg->valid_bleu ? valid_bleu(m, cfg, spm, r, d) : 0;
    ll_model_reset_ctl(m);
    return rc;
}
