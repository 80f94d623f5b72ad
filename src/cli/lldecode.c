/* lldecode: translate text with a trained model by beam search, or score
 * given translations (--score-reference).
 *
 *   lldecode --model M [--model M2 ...] [--beam K] [--lenpen A] [--input F|-] [--output F|-] [--nbest N]
 *            [--max-len-a A] [--max-len-b B] [--min-len L] [--diverse-beam-groups G]
 *            [--diverse-beam-strength S] [--diversity-rate R] [--max-tokens T] [--max-sentences S]
 *            [--format text|fairseq] [--raw-ids] [--alignment] [--target-lang L] [--precision fp32|bf16|int8]
 *            [--threads N]
 *            [--inter-threads W] [--device auto|cpu|cuda] [--quiet]
 *   lldecode --model M --input SRC --score-reference REF [--lenpen A] [--format text|fairseq] ...
 *
 * --model given again decodes with an ensemble (ll_model_ensemble); --unkpen, --prefix,
 * --sampling and the rest are in usage() below.
 *
 * One output line per input line in text format (docs/decoding.md has the
 * formats).  --output is written atomically, so an error leaves no file (a
 * FIFO or device is written directly, never replaced: ll_atomic_open).
 * Errors: one line on stderr, exit status 1. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ll/checkpoint.h"
#include "ll/config.h"
#include "ll/core.h"
#include "ll/decode.h"
#include "ll/eval.h"
#include "ll/shortlist.h"
#include "ll/train.h"

#include "decode_io.h"
#include "decode_lang.h"

enum { MAX_MODELS = 16 }; /* an ensemble's models at most */

static void usage(FILE *out) {
    fprintf(out,
            "usage: lldecode --model FILE [--model FILE2 ...] [options]\n"
            "  --model FILE       the model; given again, an ensemble: each step averages the models'\n"
            "                     probabilities (fairseq's --path A:B; one vocabulary, up to %d models)\n"
            "  --weights W1,W2,.. an ensemble's mixture weights, one per --model in order (positive;\n"
            "                     normalised): each step's p = sum W_i p_i / sum W_i (default: equal)\n"
            "  --beam K           beam size (default: the model's decode.beam, else 5); 1 = greedy\n"
            "  --lenpen A         length penalty: score = logprob / len^A (default: decode.lenpen, else 1.0)\n"
            "  --input F|-        source text, one sentence per line (default: stdin)\n"
            "  --output F|-       translations (default: stdout); a regular file is written atomically,\n"
            "                     a FIFO or device directly, a symlink's target atomically\n"
            "  --nbest N          hypotheses per sentence, N <= beam (default 1)\n"
            "  --max-len-a A      max output length = A * src_len + B, src_len incl. EOS (default 0)\n"
            "  --max-len-b B      (default 200); capped at model.max_positions - 1\n"
            "  --min-len L        EOS is not allowed before step L (default 1)\n"
            "  --diverse-beam-groups G  diverse beam search (fairseq's; Vijayakumar et al. 2018): the beam's\n"
            "                     rows in G groups (G divides --beam), each step ranked one group after\n"
            "                     another, a token's score less S x its uses by the earlier groups that\n"
            "                     step; the scores printed include the penalties, as fairseq's\n"
            "  --diverse-beam-strength S  that penalty S (default 0.5)\n"
            "  --diversity-rate R  diverse siblings search (fairseq's; Li et al. 2016): each hypothesis's\n"
            "                     own 2 x beam best extensions, the i-th scored R x i lower, before the\n"
            "                     beam's pick (default 0: off); the printed scores include it\n"
            "  --unkpen P         subtract P from <unk>'s log-probability at every step (fairseq's\n"
            "                     --unkpen; default 0; 1e9: never <unk>)\n"
            "  --no-repeat-ngram-size N  no n-gram of N pieces twice in a translation (fairseq's; the\n"
            "                     decoder's start token counts; 1: no piece twice; default 0: off)\n"
            "  --max-tokens T     source tokens per batch, padded (default 4096)\n"
            "  --max-sentences S  sentences per batch (default 256 / beam)\n"
            "  --buffer-size N    lines read, translated and written together (default 20000; sorted by\n"
            "                     length and batched within them); 1: each line as it arrives (interactive)\n"
            "  --format F         text (default) or fairseq (S-/H-/D-/P- lines, base-2 scores)\n"
            "  --raw-ids          read and write space-separated token ids instead of text\n"
            "  --sampling         draw translations from the model instead of searching (back-translation):\n"
            "                     --beam K draws per sentence (default 1), the --nbest best of them printed\n"
            "  --sampling-topk K  with --sampling: among the K most probable tokens only (default 0: all)\n"
            "  --sampling-topp P  with --sampling: then among the most probable holding P of their\n"
            "                     probability (nucleus sampling; default 1: all)\n"
            "  --temperature T    with --sampling: from softmax(log p / T) (default 1)\n"
            "  --seed N           with --sampling: the draws' seed (default 1); line i's draws are keyed\n"
            "                     by N and i, not by its batch (the same up to floating-point rounding)\n"
            "  --prefix F         target prefixes, one per input line (an empty line: none): each\n"
            "                     translation begins with its line's, forced (CTranslate2's target_prefix)\n"
            "  --shortlist F      a vocabulary shortlist (CTranslate2's vocabulary map; llshortlist writes\n"
            "                     one): each batch decodes over the tokens its sources' rules list,\n"
            "                     normalized among them (faster output layer; see docs/decoding.md)\n"
            "  --score-reference R  score the translations in R (one per input line) instead of\n"
            "                     searching: each line's log-probability (base 2) / len^lenpen, the\n"
            "                     score the search would give it; --format fairseq adds P- token scores\n"
            "  --alignment        hard alignments (the last decoder layer's cross-attention, summed over\n"
            "                     heads): \"translation ||| s-t ...\" with word positions, or sentencepiece\n"
            "                     piece positions with --raw-ids and in --format fairseq's A- lines\n"
            "  --target-lang L    target language (models with language tags)\n"
            "  --source-lang L    source language (multilingual latent-depth models)\n"
            "  --latent-inference hard|soft|sample   override latent.inference; --threshold Q overrides latent.threshold\n"
            "  --precision P      fp32 (default), bf16 (activations, as train.precision) or int8 (the\n"
            "                     CPU's linear layers on int8 weights, CTranslate2's int8: each weight\n"
            "                     row and activation row scaled to +-127; attention and norms fp32)\n"
            "  --threads N        CPU threads (default: OMP_NUM_THREADS, else all cores)\n"
            "  --inter-threads W  batches decoded at once, one thread each (at most --threads;\n"
            "                     default = threads; 1 = one batch at a time, ops threaded)\n"
            "  --device D         cpu (default), cuda (GPU 0; an error without one) or auto (GPU 0 when\n"
            "                     there is one and the CUDA backend is complete, else the CPU); a model\n"
            "                     file is fp32 on the host, whichever device trained it\n"
            "  --no-cuda-graphs   on a GPU, run each search step's kernels one by one instead of as a\n"
            "                     CUDA graph (one per batch shape, replayed every step)\n"
            "  --quiet            no summary or warnings on stderr\n",
            MAX_MODELS);
}

/* An atomically written --output; removed by the exit handler unless committed. */
static ll_atomic_file g_out;
static int g_out_open;
static void abort_output(void) {
    if (g_out_open) ll_atomic_abort(&g_out);
    g_out_open = 0;
}

static long parse_int(const char *flag, const char *s, long lo, long hi) {
    long v;
    if (ll_parse_long(flag, s, lo, hi, &v)) ll_die("%s", ll_errbuf());
    return v;
}

static double parse_real(const char *flag, const char *s, double lo, double hi) {
    double v;
    if (ll_parse_double(flag, s, lo, hi, &v)) ll_die("%s", ll_errbuf());
    return v;
}

/* --weights W1,W2,...: one positive weight per --model (n of them) */
static void parse_weights(const char *s, int n, double *w) {
    if (n < 2) ll_die("--weights: an ensemble's option, but there is one --model");
    int k = 0;
    for (const char *p = s;; k++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (k == n) ll_die("--weights '%s': more weights than the %d models", s, n);
        char buf[64];
        if (!len || len >= sizeof buf) ll_die("--weights '%s': weight %d is %s", s, k + 1, len ? "too long" : "empty");
        memcpy(buf, p, len);
        buf[len] = 0;
        char flag[32];
        snprintf(flag, sizeof flag, "--weights (weight %d)", k + 1);
        w[k] = parse_real(flag, buf, 0, 1e30);
        if (!(w[k] > 0)) ll_die("--weights '%s': weight %d is %s; each must be positive", s, k + 1, buf);
        if (!e) break;
        p = e + 1;
    }
    if (k + 1 != n) ll_die("--weights '%s': %d weights for %d models", s, k + 1, n);
}

typedef struct {
    const char *models[MAX_MODELS]; /* --model, in order; models[0] leads (its settings and alignments) */
    int n_models;
    const char *model, *input, *output, *format, *target_lang, *source_lang, *latent_mode, *device;
    const char *score_ref;   /* --score-reference */
    const char *weights;     /* --weights, as given */
    const char *prefix;      /* --prefix */
    const char *shortlist;   /* --shortlist */
    int sampling;            /* --sampling */
    long topk;               /* --sampling-topk */
    double topp;             /* --sampling-topp */
    double temperature;      /* --temperature */
    long seed;               /* --seed */
    const char *sample_flag; /* the first of --sampling-topk/-topp, --temperature, --seed given */
    const char *search_flag; /* the first flag given that only the search uses */
    double threshold;
    long beam, nbest, max_len_b, min_len, max_tokens, max_sents, threads, inter_threads;
    long buffer; /* --buffer-size: lines read, translated and written together */
    int bf16; /* --precision bf16 */
    int int8; /* --precision int8 */
    double lenpen, max_len_a, unkpen;
    long no_repeat; /* --no-repeat-ngram-size */
    long div_groups; /* --diverse-beam-groups (0: off) */
    double div_strength; /* --diverse-beam-strength */
    const char *div_flag; /* the first of the two given */
    double div_rate;     /* --diversity-rate (0: off) */
    int raw_ids, quiet, no_graphs, alignment;
} opts;

static void write_chunk(FILE *f, const opts *o, const ll_spm *spm, const ll_translation *t, long first) {
    const double ln2 = log(2.0);
    for (int i = 0; i < t->n; i++) {
        const long id = first + i;
        const ll_nbest *r = &t->hyps[i];
        if (!strcmp(o->format, "fairseq")) {
            fprintf(f, "S-%ld\t", id);
            put_tokens(f, spm, t->src[i], t->src_len[i], o->raw_ids);
            fputc('\n', f);
            if (r->n == 0) fprintf(f, "H-%ld\t%.6f\t\nD-%ld\t%.6f\t\nP-%ld\t\n", id, 0.0, id, 0.0, id);
            if (r->n == 0 && o->alignment) fprintf(f, "A-%ld\t\n", id);
            for (int h = 0; h < r->n; h++) {
                const ll_hypo *y = &r->h[h];
                char *detok = ll_spm_decode(spm, y->tokens, y->len);
                fprintf(f, "H-%ld\t%.6f\t", id, y->score / ln2);
                put_tokens(f, spm, y->tokens, y->len, o->raw_ids);
                fprintf(f, "\nD-%ld\t%.6f\t%s\nP-%ld\t", id, y->score / ln2, detok, id);
                for (int k = 0; k < y->len; k++) fprintf(f, k ? " %.4f" : "%.4f", y->pos_scores[k] / ln2);
                fputc('\n', f);
                if (o->alignment) {
                    fprintf(f, "A-%ld\t", id);
                    put_align(f, spm, t->src[i], t->src_len[i], y, 0);
                    fputc('\n', f);
                }
                free(detok);
            }
        } else if (o->nbest > 1) {
            /* Marian/Moses n-best: "i ||| hypothesis ||| score", score in base 2 */
            if (r->n == 0) fprintf(f, o->alignment ? "%ld |||  |||  ||| %.6f\n" : "%ld |||  ||| %.6f\n", id, 0.0);
            for (int h = 0; h < r->n; h++) {
                const ll_hypo *y = &r->h[h];
                fprintf(f, "%ld ||| ", id);
                if (o->raw_ids) {
                    put_tokens(f, spm, y->tokens, y->len, 1);
                } else {
                    char *detok = ll_spm_decode(spm, y->tokens, y->len);
                    fputs(detok, f);
                    free(detok);
                }
                if (o->alignment) {
                    fputs(" ||| ", f);
                    put_align(f, spm, t->src[i], t->src_len[i], y, !o->raw_ids);
                }
                fprintf(f, " ||| %.6f\n", y->score / ln2);
            }
        } else {
            if (!o->raw_ids)
                fputs(t->best[i], f);
            else if (r->n)
                put_tokens(f, spm, r->h[0].tokens, r->h[0].len, 1);
            if (o->alignment) { /* Marian's "translation ||| alignment" */
                fputs(" ||| ", f);
                if (r->n) put_align(f, spm, t->src[i], t->src_len[i], &r->h[0], !o->raw_ids);
            }
            fputc('\n', f);
        }
    }
}

/* One side of a scored pair: ids ending with EOS.  A source without pieces is EOS alone (scored
 * like any other); the source is cut to max_pos as in a search, a reference never: its score
 * would be another sentence's. */
static int side_ids(const opts *o, const ll_spm *spm, const ll_model *m, const char *line, const char *name,
                    long lineno, int reference, int32_t **ids, int *cap, int *truncated) {
    const int max = reference ? INT_MAX : m->hp.max_pos;
    int n = o->raw_ids ? parse_ids(line, lineno, name, m->hp.V, max, ids, cap, truncated)
                       : ll_encode_line(spm, line, max, ids, cap, truncated);
    if (n < 0) ll_die("%s:%ld: %s", name, lineno, ll_errbuf());
    if (n == 0) {
        if (*cap < 1) *ids = ll_realloc(*ids, sizeof(int32_t) * (*cap = 2));
        (*ids)[0] = LL_EOS;
        n = 1;
    }
    if (reference && n > m->hp.max_pos)
        ll_die("%s:%ld: the reference has %d tokens with EOS; the model's decoder holds at most model.max_positions = "
               "%d",
               name, lineno, n, m->hp.max_pos);
    return n;
}

static int32_t *dup_ids(const int32_t *ids, int n) {
    return memcpy(ll_malloc(sizeof(int32_t) * n), ids, sizeof(int32_t) * n);
}

/* A target prefix (--prefix): pieces or ids without EOS (a final EOS id is dropped); an empty line
 * none.  It must leave the decoder a step for EOS. */
static int prefix_ids(const opts *o, const ll_spm *spm, const ll_model *m, const char *line, const char *name,
                      long lineno, int32_t **ids, int *cap) {
    int tr, n = o->raw_ids ? parse_ids(line, lineno, name, m->hp.V, INT_MAX, ids, cap, &tr)
                           : ll_spm_encode(spm, line, ids, cap);
    if (n < 0) ll_die("%s:%ld: %s", name, lineno, ll_errbuf());
    if (o->raw_ids && n > 0) n--; /* (parse_ids ends the ids with EOS) */
    for (int i = 0; i < n; i++)
        if ((*ids)[i] == LL_BOS)
            ll_die("%s:%ld: the BOS id %d in a prefix", name, lineno, LL_BOS);
    if (n > m->hp.max_pos - 2)
        ll_die("%s:%ld: a prefix of %d tokens leaves no step for EOS (model.max_positions = %d)", name, lineno, n,
               m->hp.max_pos);
    return n;
}

/* --score-reference: the input and the references in step, --buffer-size pairs at a time, scored by
 * forced decoding; one line per pair (text: the score in base 2; fairseq: S/T/H/D/P lines). */
static void score_all(const opts *o, ll_model *m, const ll_spm *spm, int32_t bos, double lenpen, FILE *in,
                      const char *in_name, FILE *out, long *lineno, long *n_trunc, long *first_trunc,
                      ll_translate_stats *total) {
    side_file rf;
    side_open(&rf, o->score_ref, in_name, "translation", o->buffer);
    const char *rname = rf.name;
    char **sl = ll_calloc(o->buffer, sizeof(char *)), **rl = rf.lines;
    char *buf = NULL;
    size_t cap = 0;
    int32_t *ids = NULL;
    int ids_cap = 0;
    const double ln2 = log(2.0);
    ll_score_opts so = {.max_tokens = (int)o->max_tokens, .max_sents = (int)o->max_sents,
                        .inter_threads = (int)o->inter_threads, .bos = bos};
    for (int eof = 0; !eof;) {
        const int n = read_chunk(in, in_name, *lineno, (int)o->buffer, sl, &buf, &cap, &eof);
        if (n == 0) break;
        side_read(&rf, *lineno, n, &buf, &cap);
        int32_t **src = ll_malloc(sizeof(int32_t *) * n), **ref = ll_malloc(sizeof(int32_t *) * n);
        int *slen = ll_malloc(sizeof(int) * n), *rlen = ll_malloc(sizeof(int) * n);
        float **pos = ll_malloc(sizeof(float *) * n);
        for (int i = 0; i < n; i++) {
            int tr;
            slen[i] = side_ids(o, spm, m, sl[i], in_name, *lineno + i + 1, 0, &ids, &ids_cap, &tr);
            src[i] = dup_ids(ids, slen[i]);
            if (tr && (*n_trunc)++ == 0) *first_trunc = *lineno + i + 1;
            rlen[i] = side_ids(o, spm, m, rl[i], rname, *lineno + i + 1, 1, &ids, &ids_cap, &tr);
            ref[i] = dup_ids(ids, rlen[i]);
            pos[i] = ll_malloc(sizeof(float) * rlen[i]);
        }
        so.draw_base = (uint64_t)*lineno;
        ll_translate_stats st;
        ll_score_ids(m, (const int32_t *const *)src, slen, (const int32_t *const *)ref, rlen, n, &so, pos, &st);
        for (int i = 0; i < n; i++) {
            double sum = 0;
            for (int t = 0; t < rlen[i]; t++) sum += pos[i][t];
            const double score = sum / pow(rlen[i], lenpen) / ln2;
            if (strcmp(o->format, "fairseq")) {
                fprintf(out, "%.6f\n", score);
            } else {
                const long id = *lineno + i;
                char *detok = ll_spm_decode(spm, ref[i], rlen[i]);
                fprintf(out, "S-%ld\t", id);
                put_tokens(out, spm, src[i], slen[i], o->raw_ids);
                fprintf(out, "\nT-%ld\t%s", id, rl[i]); /* as given; D- is what was scored */
                fprintf(out, "\nH-%ld\t%.6f\t", id, score);
                put_tokens(out, spm, ref[i], rlen[i], o->raw_ids);
                fprintf(out, "\nD-%ld\t%.6f\t%s\nP-%ld\t", id, score, detok, id);
                for (int t = 0; t < rlen[i]; t++) fprintf(out, t ? " %.4f" : "%.4f", pos[i][t] / ln2);
                fputc('\n', out);
                free(detok);
            }
            free(src[i]);
            free(ref[i]);
            free(pos[i]);
        }
        if (ferror(out) || fflush(out) != 0)
            ll_die("%s: write failed: %s", strcmp(o->output, "-") ? o->output : "<stdout>", strerror(errno));
        for (int i = 0; i < n; i++) {
            free(sl[i]);
            free(rl[i]);
        }
        free(src), free(ref), free(slen), free(rlen), free(pos);
        total->sents += st.sents;
        total->batches += st.batches;
        total->src_tokens += st.src_tokens;
        total->out_tokens += st.out_tokens;
        total->seconds += st.seconds;
        *lineno += n;
    }
    side_close(&rf, *lineno, &buf, &cap);
    free(sl);
    free(buf);
    free(ids);
}

/* One model's languages and layers for this pair (the --source-lang / --target-lang pair, latent
 * depth's inference and --threshold), each of an ensemble's by its own config. */
static void setup_pair(const opts *o, ll_model *m, ll_config *cfg) {
    /* latent depth: the languages' own posteriors decide the layers (latent.inference) */
    if (o->latent_mode) snprintf(cfg->latent_inference, sizeof cfg->latent_inference, "%s", o->latent_mode);
    if (o->threshold >= 0) cfg->latent_threshold = (float)o->threshold;
    const int src_lang = pick_lang(cfg, o->source_lang, 0), tgt_lang = pick_lang(cfg, o->target_lang, 1);
    need_lang(cfg, &m->hp, src_lang, tgt_lang);
    need_pruned_lang(cfg, src_lang, tgt_lang);
    if (ll_set_pair_inference(m, cfg, src_lang, tgt_lang)) ll_die("%s", ll_errbuf());
}

int main(int argc, char **argv) {
    ll_cpu_setup(argv);
    ll_set_progname("lldecode");
    ll_args_no_repeats(argc, argv, "--model");
    opts o = {.input = "-", .output = "-", .format = "text", .device = "cpu", .threshold = -1, .beam = -1,
              .nbest = 1, .max_len_b = 200, .min_len = 1, .max_tokens = 4096, .lenpen = NAN, .temperature = 1,
              .seed = 1, .topp = 1, .buffer = 20000, .div_strength = 0.5};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--raw-ids")) {
            o.raw_ids = 1;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            o.quiet = 1;
        } else if (!strcmp(a, "--no-cuda-graphs")) {
            o.no_graphs = 1;
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--alignment")) {
            o.alignment = 1;
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--sampling")) {
            o.sampling = 1;
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!v) {
            ll_die("unknown or incomplete argument '%s' (see lldecode --help)", a);
        } else if (!strcmp(a, "--model")) {
            if (o.n_models == MAX_MODELS) ll_die("--model: an ensemble of at most %d models", MAX_MODELS);
            o.model = o.model ? o.model : v;
            o.models[o.n_models++] = v;
        } else if (!strcmp(a, "--weights")) {
            o.weights = v;
        } else if (!strcmp(a, "--input")) {
            o.input = v;
        } else if (!strcmp(a, "--score-reference")) {
            o.score_ref = v;
        } else if (!strcmp(a, "--prefix")) {
            o.prefix = v;
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--shortlist")) {
            o.shortlist = v;
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--sampling-topk")) {
            o.topk = parse_int(a, v, 0, 1 << 30);
            o.sample_flag = o.sample_flag ? o.sample_flag : a;
        } else if (!strcmp(a, "--sampling-topp")) {
            o.topp = parse_real(a, v, 1e-6, 1);
            o.sample_flag = o.sample_flag ? o.sample_flag : a;
        } else if (!strcmp(a, "--temperature")) {
            o.temperature = parse_real(a, v, 1e-3, 1e3);
            o.sample_flag = o.sample_flag ? o.sample_flag : a;
        } else if (!strcmp(a, "--seed")) {
            o.seed = parse_int(a, v, 0, LONG_MAX);
            o.sample_flag = o.sample_flag ? o.sample_flag : a;
        } else if (!strcmp(a, "--output")) {
            o.output = v;
        } else if (!strcmp(a, "--format")) {
            if (strcmp(v, "text") && strcmp(v, "fairseq")) ll_die("--format: expected text or fairseq, got '%s'", v);
            o.format = v;
        } else if (!strcmp(a, "--device")) {
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda"))
                ll_die("--device: expected auto, cpu or cuda, got '%s'", v);
            o.device = v;
        } else if (!strcmp(a, "--target-lang")) {
            o.target_lang = v;
        } else if (!strcmp(a, "--source-lang")) {
            o.source_lang = v;
        } else if (!strcmp(a, "--latent-inference")) {
            if (strcmp(v, "hard") && strcmp(v, "soft") && strcmp(v, "sample"))
                ll_die("--latent-inference: expected hard, soft or sample, got '%s'", v);
            o.latent_mode = v;
        } else if (!strcmp(a, "--threshold")) {
            o.threshold = parse_real(a, v, 0, 1);
        } else if (!strcmp(a, "--beam")) {
            o.beam = parse_int(a, v, 1, 1024);
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--nbest")) {
            o.nbest = parse_int(a, v, 1, 1024);
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--lenpen")) {
            o.lenpen = parse_real(a, v, -100, 100);
        } else if (!strcmp(a, "--max-len-a")) {
            o.max_len_a = parse_real(a, v, 0, 1e6);
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--max-len-b")) {
            o.max_len_b = parse_int(a, v, 0, 1000000);
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--unkpen")) {
            o.unkpen = parse_real(a, v, -1e9, 1e9);
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--no-repeat-ngram-size")) {
            o.no_repeat = parse_int(a, v, 0, 1024);
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--diverse-beam-groups")) {
            o.div_groups = parse_int(a, v, 1, 1024);
            o.search_flag = o.search_flag ? o.search_flag : a;
            o.div_flag = o.div_flag ? o.div_flag : a;
        } else if (!strcmp(a, "--diverse-beam-strength")) {
            o.div_strength = parse_real(a, v, -1e6, 1e6);
            o.search_flag = o.search_flag ? o.search_flag : a;
            o.div_flag = o.div_flag ? o.div_flag : a;
        } else if (!strcmp(a, "--diversity-rate")) {
            o.div_rate = parse_real(a, v, 0, 1e6);
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--min-len")) {
            o.min_len = parse_int(a, v, 0, 1000000);
            o.search_flag = o.search_flag ? o.search_flag : a;
        } else if (!strcmp(a, "--max-tokens")) {
            o.max_tokens = parse_int(a, v, 1, 1L << 30);
        } else if (!strcmp(a, "--buffer-size")) {
            o.buffer = parse_int(a, v, 1, 1000000);
        } else if (!strcmp(a, "--max-sentences")) {
            o.max_sents = parse_int(a, v, 1, 1L << 20);
        } else if (!strcmp(a, "--precision")) {
            if (strcmp(v, "fp32") && strcmp(v, "bf16") && strcmp(v, "int8"))
                ll_die("--precision takes fp32, bf16 or int8, not '%s'", v);
            o.bf16 = !strcmp(v, "bf16");
            o.int8 = !strcmp(v, "int8");
        } else if (!strcmp(a, "--threads")) {
            o.threads = parse_int(a, v, 0, 4096);
        } else if (!strcmp(a, "--inter-threads")) {
            o.inter_threads = parse_int(a, v, 1, 4096);
        } else {
            ll_die("unknown argument '%s' (see lldecode --help)", a);
        }
        if (strcmp(a, "--raw-ids") && strcmp(a, "--quiet") && strcmp(a, "-q") && strcmp(a, "--no-cuda-graphs") &&
            strcmp(a, "--alignment") && strcmp(a, "--sampling"))
            i++;
    }
    if (!o.model) ll_die("--model FILE is required (see lldecode --help)");
    double weights[MAX_MODELS];
    if (o.weights) parse_weights(o.weights, o.n_models, weights);
    for (int j = 0; j < o.n_models; j++) {
        if (!*o.models[j]) ll_die("--model '': an empty path");
        if (ll_same_file(o.output, o.models[j])) ll_die("--output %s: it is a --model too; refusing to replace it", o.output);
    }
    if (!*o.input || !*o.output) /* (an empty output failed only after decoding everything) */
        ll_die("--%s '': an empty path (- is standard %s)", !*o.input ? "input" : "output",
               !*o.input ? "input" : "output");
    if (ll_same_file(o.output, o.input)) ll_die("--output %s: it is the --input too; refusing to replace it", o.output);
    if (o.sample_flag && !o.sampling) ll_die("%s: a sampling option, without --sampling", o.sample_flag);
    if (o.div_flag && o.sampling) ll_die("%s: diverse beam search, with --sampling (which does not search)", o.div_flag);
    if (o.div_flag && o.prefix) ll_die("%s: diverse beam search does not take a --prefix", o.div_flag);
    if (o.div_flag && !o.div_groups)
        ll_die("--diverse-beam-strength: without --diverse-beam-groups (it alone does nothing)");
    if (o.div_rate > 0 && o.div_flag) /* (fairseq: "Provided Search parameters are mutually exclusive") */
        ll_die("--diversity-rate: diverse siblings search, with %s (one diverse search at a time)", o.div_flag);
    if (o.div_rate > 0 && o.sampling) ll_die("--diversity-rate: diverse siblings search, with --sampling");
    if (o.div_rate > 0 && o.prefix) ll_die("--diversity-rate: diverse siblings search does not take a --prefix");
    if (o.prefix) {
        if (!*o.prefix) ll_die("--prefix '': an empty path (- is standard input)");
        if (!strcmp(o.prefix, "-") && !strcmp(o.input, "-"))
            ll_die("--prefix -: standard input is already the --input; name a file for one of them");
        if (ll_same_file(o.output, o.prefix)) ll_die("--output %s: it is the --prefix too; refusing to replace it", o.output);
    }
    if (o.score_ref) { /* the translations are given: nothing is searched */
        if (o.search_flag) ll_die("%s: a search option, with --score-reference (which searches nothing)", o.search_flag);
        if (!*o.score_ref) ll_die("--score-reference '': an empty path (- is standard input)");
        if (!strcmp(o.score_ref, "-") && !strcmp(o.input, "-"))
            ll_die("--score-reference -: standard input is already the --input; name a file for one of them");
        if (ll_same_file(o.output, o.score_ref))
            ll_die("--output %s: it is the --score-reference too; refusing to replace it", o.output);
    }
    if (o.quiet) ll_verbosity = 0;
    ll_set_threads(o.threads > 0 ? (int)o.threads : ll_default_threads());

    if (o.int8 && strcmp(o.device, "cpu") && strcmp(o.device, "auto")) /* (auto: the CPU) */
        ll_die("--precision int8: the CPU's (CTranslate2's int8 on a GPU is not here yet); not with --device %s",
               o.device);
    if (o.int8 && o.score_ref) /* (forced decoding runs the full forward pass, not the decoder's steps) */
        ll_die("--precision int8: for the search; --score-reference scores in fp32");
    ll_backend *be = ll_backend_select(o.int8 ? "cpu" : o.device, o.bf16 ? LL_BF16 : LL_REAL_DTYPE, 0, "--device");
    if (!be) ll_die("%s", ll_errbuf());
    ll_config cfg, *mcfg = ll_calloc(MAX_MODELS, sizeof(ll_config)); /* (141 KB each: not on the stack) */
    ll_model *mm[MAX_MODELS];
    size_t vlen = 0;
    void *vocab = NULL;
    for (int j = 0; j < o.n_models; j++) {
        ll_ckpt *k = ll_ckpt_open(o.models[j]);
        if (!k) ll_die("%s", ll_errbuf());
        if (!(mm[j] = ll_model_from_file(k, o.models[j], be, &mcfg[j]))) ll_die("%s", ll_errbuf());
        size_t n = 0;
        const void *v = ll_ckpt_vocab(k, &n);
        if (j == 0) {
            vocab = ll_malloc(n ? n : 1), vlen = n;
            if (n) memcpy(vocab, v, n);
        } else if (n != vlen || (n && memcmp(v, vocab, n))) { /* the same ids must mean the same pieces */
            ll_die("--model %s: its sentencepiece vocabulary differs from %s's; an ensemble's models share one",
                   o.models[j], o.model);
        } else if (mm[j]->hp.max_pos != mm[0]->hp.max_pos) {
            ll_die("--model %s: model.max_positions %d, but %s has %d; an ensemble's models need the same", o.models[j],
                   mm[j]->hp.max_pos, o.model, mm[0]->hp.max_pos);
        }
        ll_ckpt_close(k); /* parameters were copied into the model */
    }
    cfg = mcfg[0];
    ll_model *m = mm[0];
    if (o.no_graphs) m->decode_graphs = -1;
    for (int j = 0; j < o.n_models; j++) mm[j]->decode_int8 = o.int8; /* (every member's decoder) */
    ll_spm *spm = ll_spm_load_bytes(vocab, vlen);
    if (!spm) ll_die("%s: no usable vocabulary in the model file", o.model);
    free(vocab);
    ll_shortlist *shortlist = NULL;
    if (o.shortlist && !(shortlist = ll_shortlist_load(o.shortlist, spm))) ll_die("%s", ll_errbuf());

    ll_graph_stats g0 = {0}, g1 = {0}; /* search steps as CUDA graphs (a GPU; not --no-cuda-graphs) */
    if (be->graph_stats) be->graph_stats(be, &g0);
    ll_translate_opts to = {.max_tokens = (int)o.max_tokens, .max_sents = (int)o.max_sents,
                            .inter_threads = (int)o.inter_threads};
    ll_search_opts_default(&to.search);
    /* sampling: one draw per sentence unless --beam asks for more (the model's decode.beam is a search's) */
    to.search.beam = o.beam > 0 ? (int)o.beam : o.sampling ? 1 : cfg.beam > 0 ? cfg.beam : 5;
    to.search.sampling = o.sampling;
    to.search.topk = (int)(o.topk < m->hp.V ? o.topk : 0); /* (K >= V: the whole vocabulary) */
    to.search.topp = o.topp;
    to.search.temperature = o.temperature;
    to.search.seed = (uint64_t)o.seed;
    to.search.lenpen = !isnan(o.lenpen) ? o.lenpen : cfg.lenpen;
    to.search.max_len_a = o.max_len_a;
    to.search.max_len_b = (int)o.max_len_b;
    to.search.min_len = (int)o.min_len;
    to.search.unkpen = o.unkpen;
    to.search.no_repeat_ngram = (int)o.no_repeat;
    to.search.diverse_groups = (int)o.div_groups;
    to.search.diverse_strength = o.div_strength;
    to.search.diversity_rate = o.div_rate;
    if (o.div_groups > 1 && to.search.beam % o.div_groups) /* (fairseq's rule: each group holds beam / G rows) */
        ll_die("--diverse-beam-groups %ld: must divide the beam size %d", o.div_groups, to.search.beam);
    /* EOS waits until --min-len; beyond every output's length limit it would never be allowed, and
     * each translation would run to the limit (fairseq does that silently) */
    if (o.min_len > m->hp.max_pos - 1)
        ll_die("--min-len %ld: above the longest output this model allows (model.max_positions - 1 = %d)", o.min_len,
               m->hp.max_pos - 1);
    if (o.max_len_a == 0 && o.min_len > o.max_len_b)
        ll_die("--min-len %ld: above --max-len-b %ld, every output's length limit when --max-len-a is 0", o.min_len,
               o.max_len_b);
    if (o.nbest > to.search.beam)
        ll_die(o.sampling ? "--nbest %ld: must not exceed the draws per sentence (--beam) %d"
                          : "--nbest %ld: must not exceed the beam size %d",
               o.nbest, to.search.beam);
    if ((long long)to.search.beam * m->hp.V > INT_MAX) /* (beam_topk numbers candidates in an int32) */
        ll_die("--beam %d: beam x the vocabulary (%d pieces) must stay below 2^31", to.search.beam, m->hp.V);
    to.search.nbest = (int)o.nbest;
    to.search.align = o.alignment;
    to.search.shortlist = shortlist;
    if (ll_decode_bos(&cfg, spm, o.target_lang, &to.search.bos)) ll_die("%s", ll_errbuf());
    int latent = 0; /* (in an ensemble, the options are for the models with latent layers) */
    for (int j = 0; j < o.n_models; j++) latent |= mm[j]->hp.latent_enc || mm[j]->hp.latent_dec;
    if ((o.latent_mode || o.threshold >= 0) && !latent)
        ll_die("--%s: %s no latent-depth layers (latent.encoder and latent.decoder are false%s)",
               o.latent_mode ? "latent-inference" : "threshold", o.n_models > 1 ? "no model has" : "the model has",
               cfg.latent_pruned_for[0] ? "; llprune baked its gates in" : "");
    for (int j = 0; j < o.n_models; j++) {
        int32_t bos;
        if (ll_decode_bos(&mcfg[j], spm, o.target_lang, &bos)) ll_die("--model %s: %s", o.models[j], ll_errbuf());
        if (bos != to.search.bos) /* one decoder input for all: a target-language tag, or EOS */
            ll_die("--model %s: its decoder starts with token %d, %s's with %d (one with target-language tags, the "
                   "other without?)", o.models[j], bos, o.model, to.search.bos);
        setup_pair(&o, mm[j], &mcfg[j]);
    }
    cfg = mcfg[0]; /* (setup_pair set its latent inference) */
    if (o.n_models > 1) ll_model_ensemble(m, mm + 1, o.n_models - 1, o.weights ? weights : NULL);

    FILE *in = stdin;
    const char *in_name = strcmp(o.input, "-") ? o.input : "<stdin>";
    if (strcmp(o.input, "-") && !(in = fopen(o.input, "rb"))) ll_die("%s: cannot open: %s", o.input, strerror(errno));
    FILE *out = stdout;
    if (strcmp(o.output, "-")) {
        if (ll_atomic_open(&g_out, o.output)) ll_die("%s", ll_errbuf());
        g_out_open = 1;
        atexit(abort_output);
        out = g_out.f;
    }

    char *line = NULL;
    size_t line_cap = 0;
    char **lines = ll_calloc(o.buffer, sizeof(char *));
    long lineno = 0, n_trunc = 0, first_trunc = -1;
    ll_translate_stats total = {0};
    int32_t *ids = NULL;
    int ids_cap = 0;
    if (o.score_ref) {
        score_all(&o, m, spm, to.search.bos, to.search.lenpen, in, in_name, out, &lineno, &n_trunc, &first_trunc,
                  &total);
    }
    /* --prefix: one target prefix per input line, read in step with it */
    side_file pf = {0};
    if (o.prefix) side_open(&pf, o.prefix, in_name, "prefix (or an empty line)", o.buffer);
    int32_t **pre = pf.f ? ll_calloc(o.buffer, sizeof(int32_t *)) : NULL;
    int *plen = pf.f ? ll_calloc(o.buffer, sizeof(int)) : NULL;
    for (int eof = !!o.score_ref; !eof;) {
        const int n = read_chunk(in, in_name, lineno, (int)o.buffer, lines, &line, &line_cap, &eof);
        if (n == 0) break;
        if (pf.f) {
            side_read(&pf, lineno, n, &line, &line_cap);
            for (int i = 0; i < n; i++) {
                plen[i] = prefix_ids(&o, spm, m, pf.lines[i], pf.name, lineno + i + 1, &ids, &ids_cap);
                pre[i] = plen[i] ? dup_ids(ids, plen[i]) : NULL; /* (ids: NULL before a first prefix) */
                free(pf.lines[i]);
            }
            to.prefix = (const int32_t *const *)pre;
            to.prefix_len = plen;
        }
        ll_translation t;
        to.draw_base = (uint64_t)lineno; /* distinct per batch across chunks (a chunk has <= n batches) */
        if (o.raw_ids) {
            t = (ll_translation){.n = n, .first_truncated = -1};
            t.src = ll_calloc(n, sizeof(int32_t *));
            t.src_len = ll_calloc(n, sizeof(int));
            for (int i = 0; i < n; i++) {
                int tr;
                int len = parse_ids(lines[i], lineno + i + 1, in_name, m->hp.V, m->hp.max_pos, &ids, &ids_cap, &tr);
                if (tr && t.n_truncated++ == 0) t.first_truncated = i;
                t.src_len[i] = len;
                if (len) {
                    t.src[i] = ll_malloc(sizeof(int32_t) * len);
                    memcpy(t.src[i], ids, sizeof(int32_t) * len);
                }
            }
            ll_translation_run(m, spm, &to, &t);
        } else if (ll_translate_lines(m, spm, (const char *const *)lines, n, &to, &t)) {
            ll_die("%s: %s", in_name, ll_errbuf());
        }
        if (t.n_truncated && first_trunc < 0) first_trunc = lineno + t.first_truncated + 1;
        n_trunc += t.n_truncated;
        write_chunk(out, &o, spm, &t, lineno);
        if (ferror(out) || fflush(out) != 0) /* at once, with the reason, not after decoding everything */
            ll_die("%s: write failed: %s", strcmp(o.output, "-") ? o.output : "<stdout>", strerror(errno));
        total.sents += t.stats.sents;
        total.batches += t.stats.batches;
        total.src_tokens += t.stats.src_tokens;
        total.out_tokens += t.stats.out_tokens;
        total.seconds += t.stats.seconds;
        ll_translation_free(&t);
        for (int i = 0; i < n; i++) free(lines[i]);
        for (int i = 0; pre && i < n; i++) free(pre[i]);
        lineno += n;
    }
    if (pf.f) side_close(&pf, lineno, &line, &line_cap);
    free(pre), free(plen);
    if (in != stdin) fclose(in);
    if (g_out_open) {
        g_out_open = 0;
        if (ll_atomic_commit(&g_out)) ll_die("%s", ll_errbuf());
    } else if (fflush(stdout) != 0) {
        ll_die("<stdout>: write error: %s", strerror(errno));
    }
    if (n_trunc && !o.quiet)
        fprintf(stderr, "lldecode: warning: %ld input lines were longer than model.max_positions = %d tokens "
                        "(EOS included) and were truncated (first: line %ld)\n",
                n_trunc, m->hp.max_pos, first_trunc);
    if (!o.quiet && o.score_ref) {
        const double s = total.seconds > 0 ? total.seconds : 1e-9;
        fprintf(stderr, "lldecode: %ld pairs scored in %ld batches: %.2f s, %.1f sentences/s, %.0f reference tokens/s\n",
                total.sents, total.batches, total.seconds, total.sents / s, total.out_tokens / s);
    } else if (!o.quiet) {
        const double s = total.seconds > 0 ? total.seconds : 1e-9;
        char ens[48] = "";
        if (o.n_models > 1) snprintf(ens, sizeof ens, ", an ensemble of %d models", o.n_models);
        if (o.int8) /* (which kernels: the log tells a slow machine's C loops) */
            snprintf(ens + strlen(ens), sizeof ens - strlen(ens), ", int8 (%s)", ll_cpu_int8_kernels());
        fprintf(stderr, "lldecode: %ld lines, %ld sentences in %ld batches, %s %d%s: %.2f s, %.1f sentences/s, "
                        "%.0f target tokens/s\n",
                lineno, total.sents, total.batches, o.sampling ? "draws per sentence" : "beam", to.search.beam, ens,
                total.seconds, total.sents / s, total.out_tokens / s);
        long sb = 0, sk = 0;
        if (shortlist) ll_shortlist_usage(shortlist, &sb, &sk);
        if (sb)
            fprintf(stderr, "lldecode: shortlist %s: %d rules, %d tokens always; %.0f of %d tokens per batch on average\n",
                    o.shortlist, ll_shortlist_rules(shortlist), ll_shortlist_fixed(shortlist), (double)sk / sb, m->hp.V);
        if (be->graph_stats) be->graph_stats(be, &g1);
        if (g1.launches > g0.launches)
            fprintf(stderr, "lldecode: CUDA graphs: %llu search steps launched as graphs, %llu of them replayed as kept "
                            "(--no-cuda-graphs: none)\n",
                    (unsigned long long)(g1.launches - g0.launches), (unsigned long long)(g1.replays - g0.replays));
    }
    free(line);
    free(lines);
    free(ids);
    ll_spm_free(spm);
    ll_shortlist_free(shortlist);
    ll_model_free(m); /* (and the ensemble's other models) */
    for (int j = 0; j < o.n_models; j++) ll_config_free(&mcfg[j]);
    free(mcfg);
    return 0;
}
