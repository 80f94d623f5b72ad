/* llprune: export a compact model.
 *
 *   llprune --model M --threshold 0.5 [--lang L] --output M2
 *       latent depth: keep the layers whose selection probability q(z_l=1) =
 *       sigmoid(a_l) is >= threshold.  With --lang, the rows of that language
 *       decide and the latent parameters are dropped; without it (multilingual)
 *       the union over languages is kept together with the per-language gates
 *       of the kept layers, so each language still skips what it does not use.
 *   llprune --model M --enc-layers-to-keep 0,2,4 [--dec-layers-to-keep ...] --output M2
 *       LayerDrop-style pruning to an explicit subset (fairseq's layers_to_keep).
 *
 * The output is an ordinary model file (fewer layers, renumbered) that
 * lldecode loads like any other; its output equals the full model's
 * deterministic (hard-gated) inference.  Prints the kept layers and the
 * parameter and FLOP savings.
 *
 * DLCL stacks: a dropped latent layer's entry is its input (docs/methods.md),
 * a linear combination of earlier entries, so it is folded into the weights
 * of the rows that read it and the pruned stack computes the same.  Refused,
 * because no smaller model computes the same: dropping latent layers of a
 * post-norm model (z = 0 still applies the layer norms) and dropping layers
 * of a DLCL stack with --*-layers-to-keep (LayerDrop's entry is LN(input)).
 * Also refused: a threshold that keeps no layer of a latent stack (an empty
 * stack is not a model lldecode can run); the message names the stack, the
 * language and the highest q, i.e. the largest threshold that keeps one. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/checkpoint.h"
#include "ll/config.h"
#include "ll/core.h"
#include "ll/data.h"
#include "ll/latent.h"
#include "ll/model.h"
#include "ll/train.h"

#define MAXL 4096

typedef struct {
    int L, n_keep;
    int keep[MAXL];   /* kept original indices, ascending */
    int latent_out;   /* the output keeps this stack's gates */
} stack_plan;

static int parse_list(const char *s, int L, stack_plan *p, const char *flag) {
    p->n_keep = 0;
    const char *c = s;
    while (*c) {
        char *end;
        errno = 0;
        long v = *c >= '0' && *c <= '9' ? strtol(c, &end, 10) : -1; /* digits only: no sign, no blanks */
        if (v < 0 || errno || v >= L) ll_die("%s: '%s' is not a list of layer indices in 0..%d", flag, s, L - 1);
        if (p->n_keep && v <= p->keep[p->n_keep - 1]) ll_die("%s: indices must be increasing", flag);
        p->keep[p->n_keep++] = (int)v;
        c = *end == ',' ? end + 1 : end;
        if ((*end && *end != ',') || (*end == ',' && !end[1])) /* (a trailing comma: a layer left out?) */
            ll_die("%s: '%s' is not a comma-separated list", flag, s);
    }
    if (p->n_keep == 0) ll_die("%s: keep at least one layer", flag);
    return 0;
}

static const float *logits_of(const ll_ckpt *k, const char *name, int rows, int L, const char *path) {
    const ll_tensor_ref *r = ll_ckpt_find(k, name);
    if (!r) return NULL;
    if (r->dtype != LL_DT_F32 || r->ndim != 2 || r->shape[0] != rows || r->shape[1] != L)
        ll_die("%s: tensor '%s' has an unexpected shape", path, name);
    return r->data;
}

/* Rows of a stack that `lang` selects: its own row, or every row training used. */
static void plan_latent(stack_plan *p, const float *a, int rows, int L, const int *use_row, double thr) {
    p->n_keep = 0;
    for (int l = 0; l < L; l++) {
        int keep = 0;
        for (int r = 0; r < rows; r++)
            if (use_row[r] && ll_latent_q(a[(size_t)r * L + l]) >= thr) keep = 1; /* the q hard inference uses */
        if (keep) p->keep[p->n_keep++] = l;
    }
}

static void print_plan(const char *name, const stack_plan *p) {
    printf("%s: keep %d of %d layers:", name, p->n_keep, p->L);
    for (int i = 0; i < p->n_keep; i++) printf(" %d", p->keep[i]);
    printf("%s\n", p->latent_out ? " (per-language gates kept)" : "");
}

/* DLCL weights W[r][k] (L+1 rows) of a stack as it is: the tensor, or the fixed init. */
static double *dlcl_weights(const ll_ckpt *k, const ll_config *cfg, int s, int L, const char *path) {
    const int L1 = L + 1;
    double *w = calloc((size_t)L1 * L1, sizeof(double));
    char name[64];
    snprintf(name, sizeof name, "%s.dlcl_weights", s ? "dec" : "enc");
    const ll_tensor_ref *r = ll_ckpt_find(k, name);
    if (cfg->dlcl_learnable && (!r || r->dtype != LL_DT_F32 || r->ndim != 2 || r->shape[0] != L1 || r->shape[1] != L1))
        ll_die("%s: tensor '%s' is missing or not [%d,%d]", path, name, L1, L1);
    for (int i = 0; i < L1; i++)
        for (int j = 0; j <= i; j++)
            w[i * L1 + j] = cfg->dlcl_learnable ? ((const float *)r->data)[i * L1 + j]
                            : !strcmp(cfg->dlcl_init, "one") ? 1.0 : 1.0 / (i + 1);
    return w;
}

/* Fold the dropped layers of a DLCL stack into the weights of the kept rows.
 * Entry k + 1 of a dropped layer k is its input, row k: sum_j W[k][j] e_j, so
 * every entry is a combination coef[k] of the kept entries (0 and the kept
 * layers' outputs), and the new row of kept layer i (or the top) is
 * sum_j W[r][j] coef[j].  Returns the new [n+1, n+1] weights (float). */
static float *dlcl_fold(const double *w, int L, const stack_plan *p) {
    const int L1 = L + 1, n1 = p->n_keep + 1;
    double *coef = calloc((size_t)L1 * n1, sizeof(double));
    int kept_as[MAXL + 1]; /* new entry index of each original entry, -1 if dropped */
    for (int k = 0; k <= L; k++) kept_as[k] = k == 0 ? 0 : -1;
    for (int i = 0; i < p->n_keep; i++) kept_as[p->keep[i] + 1] = i + 1;
    for (int k = 0; k <= L; k++) {
        if (kept_as[k] >= 0) {
            coef[(size_t)k * n1 + kept_as[k]] = 1;
            continue;
        }
        for (int j = 0; j < k; j++) /* entry k = input of layer k - 1 = row k - 1 */
            for (int c = 0; c < n1; c++) coef[(size_t)k * n1 + c] += w[(k - 1) * L1 + j] * coef[(size_t)j * n1 + c];
    }
    float *out = calloc((size_t)n1 * n1, sizeof(float));
    for (int i = 0; i < n1; i++) {
        const int r = i < p->n_keep ? p->keep[i] : L; /* row i's original row */
        for (int c = 0; c < n1; c++) {
            double v = 0;
            for (int j = 0; j <= r; j++) v += w[r * L1 + j] * coef[(size_t)j * n1 + c];
            out[i * n1 + c] = (float)v;
        }
    }
    free(coef);
    return out;
}

/* "enc.dlcl.ln.3.weight" -> stack 0, index 3, rest "weight". */
static int dlcl_ln_of(const char *name, int *stack, const char **rest) {
    int s = !strncmp(name, "enc.dlcl.ln.", 12) ? 0 : !strncmp(name, "dec.dlcl.ln.", 12) ? 1 : -1;
    if (s < 0) return -1;
    char *end;
    long k = strtol(name + 12, &end, 10);
    if (*end != '.') return -1;
    *stack = s;
    *rest = end + 1;
    return (int)k;
}

/* "enc.layers.12.ffn.fc1.weight" -> stack 0, layer 12, rest "ffn.fc1.weight". */
static int layer_of(const char *name, int *stack, const char **rest) {
    int s = !strncmp(name, "enc.layers.", 11) ? 0 : !strncmp(name, "dec.layers.", 11) ? 1 : -1;
    if (s < 0) return -1;
    char *end;
    long l = strtol(name + 11, &end, 10);
    if (*end != '.') return -1;
    *stack = s;
    *rest = end + 1;
    return (int)l;
}

int main(int argc, char **argv) {
    ll_set_progname("llprune");
    ll_args_no_repeats(argc, argv, NULL);
    const char *model = NULL, *out = NULL, *lang = NULL, *keep_s[2] = {NULL, NULL};
    double thr = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--output") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--threshold") && i + 1 < argc) {
            if (ll_parse_double("--threshold", argv[++i], 0, 1, &thr)) ll_die("%s", ll_errbuf());
        }
        else if (!strcmp(argv[i], "--lang") && i + 1 < argc) lang = argv[++i];
        else if (!strcmp(argv[i], "--enc-layers-to-keep") && i + 1 < argc) keep_s[0] = argv[++i];
        else if (!strcmp(argv[i], "--dec-layers-to-keep") && i + 1 < argc) keep_s[1] = argv[++i];
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: llprune --model M [--threshold 0.5] [--lang L] --output M2\n"
                   "       llprune --model M --enc-layers-to-keep 0,2,4 [--dec-layers-to-keep 0,1] --output M2\n");
            return 0;
        } else
            ll_die("unknown or incomplete argument '%s' (see llprune --help)", argv[i]);
    }
    if (!model || !out) ll_die("--model and --output are required (see llprune --help)");
    if (ll_ckpt_output_ok(out, &model, 1)) ll_die("%s", ll_errbuf());
    const int thr_given = thr >= 0;
    ll_ckpt *k = ll_ckpt_open(model);
    if (!k) ll_die("%s", ll_errbuf());
    ll_model *check = ll_model_from_file(k, model, ll_backend_cpu(), NULL); /* config vs tensors, finite values */
    if (!check) ll_die("%s", ll_errbuf());
    ll_model_free(check);
    ll_config cfg;
    if (ll_config_load_text(&cfg, ll_ckpt_config_text(k), model)) ll_die("%s", ll_errbuf());
    if (thr < 0) thr = cfg.latent_threshold;
    if (!(thr >= 0 && thr <= 1)) ll_die("--threshold must be in [0, 1]");
    size_t vlen;
    const void *vocab = ll_ckpt_vocab(k, &vlen);
    ll_spm *spm = ll_spm_load_bytes(vocab, vlen);
    if (!spm) ll_die("%s: no usable vocabulary", model);
    ll_hparams hp;
    ll_hparams_from_config(&hp, &cfg, ll_spm_vocab_size(spm));

    char langs[LL_MAX_CORPORA * 4][LL_LANG_MAX];
    int n_langs = ll_config_langs(&cfg, langs);
    const int rows = hp.latent_rows;
    stack_plan plan[2] = {{.L = hp.Le}, {.L = hp.Ld}};
    const char *lname[2] = {"enc.latent_logits", "dec.latent_logits"};
    int latent_in[2] = {hp.latent_enc, hp.latent_dec};
    if (thr_given && !(latent_in[0] && !keep_s[0]) && !(latent_in[1] && !keep_s[1]))
        ll_die("--threshold %g: %s has no latent-depth stack to prune by it (%s); --enc-layers-to-keep and "
               "--dec-layers-to-keep choose layers by index",
               thr, model, latent_in[0] || latent_in[1] ? "its latent stacks are given keep lists" : "latent.encoder and latent.decoder are false");
    if (!keep_s[0] && !keep_s[1] && !latent_in[0] && !latent_in[1]) /* (it wrote an identical copy) */
        ll_die("%s: nothing to prune: no latent-depth stack (latent.encoder and latent.decoder are false); "
               "--enc-layers-to-keep and --dec-layers-to-keep choose layers by index", model);
    if (lang && ll_config_lang_index(&cfg, lang) < 0) {
        fprintf(stderr, "llprune: error: --lang %s: the model knows", lang);
        for (int i = 0; i < n_langs; i++) fprintf(stderr, " %s", langs[i]);
        fprintf(stderr, "\n");
        return 1;
    }
    int narrowed = 0, lang_rows = 0; /* --lang: some stack kept its rows only; some stack had rows for it */
    for (int s = 0; s < 2; s++) {
        if (keep_s[s]) {
            parse_list(keep_s[s], plan[s].L, &plan[s], s ? "--dec-layers-to-keep" : "--enc-layers-to-keep");
            plan[s].latent_out = latent_in[s];
            continue;
        }
        if (!latent_in[s]) { /* not latent: keep everything */
            for (int l = 0; l < plan[s].L; l++) plan[s].keep[l] = l;
            plan[s].n_keep = plan[s].L;
            continue;
        }
        const float *a = logits_of(k, lname[s], rows, plan[s].L, model);
        if (!a) ll_die("%s: latent %s without tensor %s", model, s ? "decoder" : "encoder", lname[s]);
        /* rows training used on this side: sources for the encoder, targets for the decoder */
        int use[LL_MAX_CORPORA * 4] = {0}, n_use = 0, sel[LL_MAX_CORPORA * 4] = {0}, n_sel = 0;
        for (int c = 0; c < cfg.n_train; c++) {
            const char *sl = cfg.train[c].src_lang, *tl = cfg.train[c].tgt_lang, *l = s ? tl : sl;
            int r = ll_latent_pair_row(&hp, &cfg, s, ll_config_lang_index(&cfg, sl), ll_config_lang_index(&cfg, tl));
            if (!use[r]) n_use++;
            use[r] = 1;
            /* --lang: its own row; per_pair: the rows of the pairs it takes part in */
            if (lang && (!strcmp(l, lang) || (hp.latent_per_pair && (!strcmp(sl, lang) || !strcmp(tl, lang)))))
                n_sel += !sel[r], sel[r] = 1;
        }
        if (n_sel) { /* the --lang rows decide; with one row its gates are baked in */
            narrowed |= n_sel < n_use; /* other languages' rows left out: the model is L's alone */
            memcpy(use, sel, sizeof use);
            n_use = n_sel;
        }
        lang_rows |= n_sel > 0 || rows == 1;
        plan_latent(&plan[s], a, rows, plan[s].L, use, thr);
        for (int r = 0; r < rows; r++) { /* the posterior of every language this stack uses */
            if (!use[r]) continue;
            char rname[2 * LL_LANG_MAX + 8];
            printf("q(z=1) %s %s:", s ? "decoder" : "encoder", ll_latent_row_name(&hp, &cfg, r, rname, sizeof rname));
            for (int l = 0; l < plan[s].L; l++) printf(" %.4f", ll_latent_q(a[(size_t)r * plan[s].L + l]));
            printf("\n");
        }
        if (plan[s].n_keep == 0 && strcmp(cfg.norm, "post")) { /* no model lldecode runs (post-norm: refused below) */
            int br = -1, bl = 0;
            for (int r = 0; r < rows; r++)
                for (int l = 0; use[r] && l < plan[s].L; l++)
                    if (br < 0 || a[(size_t)r * plan[s].L + l] > a[(size_t)br * plan[s].L + bl]) br = r, bl = l;
            char rname[2 * LL_LANG_MAX + 8];
            ll_die("--threshold %g keeps no %s layer%s%s: the highest q(z=1) is %.4f (%s, layer %d); use a threshold "
                   "<= %.4f to keep at least one layer",
                   thr, s ? "decoder" : "encoder", lang ? " for --lang " : "", lang ? lang : "",
                   ll_latent_q(a[(size_t)br * plan[s].L + bl]), ll_latent_row_name(&hp, &cfg, br, rname, sizeof rname),
                   bl, floor(ll_latent_q(a[(size_t)br * plan[s].L + bl]) * 1e4) / 1e4);
        }
        /* a single language (or a shared posterior): hard gates are exactly "kept or not" */
        plan[s].latent_out = n_use > 1;
    }
    if (lang && !lang_rows) /* (a latent decoder has rows for target languages, a latent encoder for sources) */
        ll_die("--lang %s: no latent stack of %s has a layer posterior for %s (a latent decoder's rows are its target "
               "languages', a latent encoder's its source languages')",
               lang, model, lang);
    /* exactness: what cannot be dropped, and the DLCL folds */
    const int dlcl_in[2] = {cfg.dlcl_enc, cfg.dlcl_dec};
    int any_fold = 0;
    for (int s = 0; s < 2; s++) {
        if (plan[s].n_keep == plan[s].L) continue; /* nothing dropped */
        const char *sn = s ? "decoder" : "encoder";
        if (!keep_s[s] && !strcmp(cfg.norm, "post"))
            ll_die("the %s is post-norm: a latent layer with z = 0 still applies its layer norms, so no smaller "
                   "model computes the same; decode the full model (hard inference runs only those norms)",
                   sn);
        if (keep_s[s] && dlcl_in[s])
            ll_die("--%s-layers-to-keep: the %s uses DLCL, whose rows read every layer's entry (LN of its input "
                   "for a LayerDrop-skipped layer), so dropping layers cannot be exact",
                   s ? "dec" : "enc", sn);
        any_fold |= dlcl_in[s];
    }
    /* fixed DLCL weights of the pruned stack are no longer the init: store them all */
    float *fold[2] = {NULL, NULL};
    int entry_map[2][MAXL + 1];
    for (int s = 0; s < 2; s++) {
        for (int e = 0; e <= plan[s].L; e++) entry_map[s][e] = e == 0 ? 0 : -1;
        for (int i = 0; i < plan[s].n_keep; i++) entry_map[s][plan[s].keep[i] + 1] = i + 1;
        if (!dlcl_in[s] || !(plan[s].n_keep < plan[s].L || (any_fold && !cfg.dlcl_learnable))) continue;
        double *w = dlcl_weights(k, &cfg, s, plan[s].L, model);
        fold[s] = dlcl_fold(w, plan[s].L, &plan[s]);
        free(w);
    }
    const int add_w = any_fold && !cfg.dlcl_learnable; /* weights become tensors */
    const int folded[2] = {fold[0] != NULL, fold[1] != NULL};
    if (add_w) cfg.dlcl_learnable = 1;
    print_plan("encoder", &plan[0]);
    print_plan("decoder", &plan[1]);

    /* the compact model's config */
    cfg.enc_layers = plan[0].n_keep;
    cfg.dec_layers = plan[1].n_keep;
    cfg.latent_threshold = (float)thr; /* the kept gates must decide as they did here */
    if (narrowed) snprintf(cfg.latent_pruned_for, sizeof cfg.latent_pruned_for, "%s", lang);
    if (!strcmp(cfg.latent_posterior, "auto")) /* auto depends on the latent stacks, which may change here */
        snprintf(cfg.latent_posterior, sizeof cfg.latent_posterior, "%s", hp.latent_per_pair ? "per_pair" : "per_language");
    cfg.latent_enc = plan[0].latent_out;
    cfg.latent_dec = plan[1].latent_out;
    char *text = ll_config_dump(&cfg);

    /* tensors: renumber kept layers, slice latent logits, drop optimizer state */
    int nt = ll_ckpt_n_tensors(k), n = 0;
    ll_tensor_ref *t = calloc(nt + 2, sizeof *t);
    char **names = calloc(nt + 2, sizeof(char *));
    void **bufs = calloc(nt + 2, sizeof(void *));
    size_t params_in = 0, params_out = 0;
    int map[2][MAXL];
    for (int s = 0; s < 2; s++) {
        for (int l = 0; l < MAXL; l++) map[s][l] = -1;
        for (int i = 0; i < plan[s].n_keep; i++) map[s][plan[s].keep[i]] = i;
    }
    for (int i = 0; i < nt; i++) {
        const ll_tensor_ref *r = ll_ckpt_tensor(k, i);
        if (!strncmp(r->name, "optim.", 6) || !strncmp(r->name, "state.", 6)) continue;
        size_t numel = r->nbytes / ll_dtype_size(r->dtype);
        params_in += numel;
        int s;
        const char *rest;
        int l = layer_of(r->name, &s, &rest), e;
        if (l < 0 && (e = dlcl_ln_of(r->name, &s, &rest)) >= 0 && folded[s]) { /* pre-norm: entry e's norm */
            if (e > plan[s].L || entry_map[s][e] < 0) continue;
            names[n] = malloc(strlen(r->name) + 16);
            sprintf(names[n], "%s.dlcl.ln.%d.%s", s ? "dec" : "enc", entry_map[s][e], rest);
            t[n] = *r;
            t[n].name = names[n];
        } else if (l < 0 && (!strcmp(r->name, "enc.dlcl_weights") || !strcmp(r->name, "dec.dlcl_weights")) &&
                   fold[r->name[0] == 'd']) {
            s = r->name[0] == 'd';
            t[n] = *r;
            t[n].shape[0] = t[n].shape[1] = plan[s].n_keep + 1;
            t[n].data = bufs[n] = fold[s]; /* freed with bufs */
            t[n].nbytes = sizeof(float) * (plan[s].n_keep + 1) * (plan[s].n_keep + 1);
            fold[s] = NULL;
        } else if (l >= 0) {
            if (map[s][l] < 0) continue;
            names[n] = malloc(strlen(r->name) + 16);
            sprintf(names[n], "%s.layers.%d.%s", s ? "dec" : "enc", map[s][l], rest);
            t[n] = *r;
            t[n].name = names[n];
        } else if (!strcmp(r->name, lname[0]) || !strcmp(r->name, lname[1])) {
            s = !strcmp(r->name, lname[1]);
            if (!plan[s].latent_out) continue;
            float *a = malloc(sizeof(float) * rows * plan[s].n_keep);
            for (int row = 0; row < rows; row++)
                for (int j = 0; j < plan[s].n_keep; j++)
                    a[row * plan[s].n_keep + j] = ((const float *)r->data)[(size_t)row * plan[s].L + plan[s].keep[j]];
            t[n] = *r;
            t[n].shape[1] = plan[s].n_keep;
            t[n].data = bufs[n] = a;
            t[n].nbytes = sizeof(float) * rows * plan[s].n_keep;
        } else {
            t[n] = *r;
        }
        params_out += t[n].nbytes / ll_dtype_size(t[n].dtype);
        n++;
    }
    for (int s = 0; s < 2 && add_w; s++) /* fixed weights that became tensors */
        if (fold[s]) {
            t[n] = (ll_tensor_ref){.name = s ? "dec.dlcl_weights" : "enc.dlcl_weights", .dtype = LL_DT_F32, .ndim = 2,
                                   .shape = {plan[s].n_keep + 1, plan[s].n_keep + 1}, .data = fold[s],
                                   .nbytes = sizeof(float) * (plan[s].n_keep + 1) * (plan[s].n_keep + 1)};
            bufs[n] = fold[s];
            fold[s] = NULL;
            params_out += (size_t)(plan[s].n_keep + 1) * (plan[s].n_keep + 1);
            n++;
        }
    free(fold[0]);
    free(fold[1]);
    ll_ckpt_contents c = {.config_text = text, .vocab = vocab, .vocab_len = vlen, .tensors = t, .n_tensors = n};
    if (ll_ckpt_write(out, &c)) ll_die("%s", ll_errbuf());

    ll_hparams hp2 = hp;
    hp2.Le = cfg.enc_layers;
    hp2.Ld = cfg.dec_layers;
    double f0 = ll_model_train_flops(&hp, 30, 30, 1, 30, 30) / 3, f1 = ll_model_train_flops(&hp2, 30, 30, 1, 30, 30) / 3;
    printf("parameters: %zu -> %zu (%.1f%% fewer)\n", params_in, params_out, 100.0 * (1 - (double)params_out / params_in));
    printf("forward FLOPs for a 30-token pair: %.3g -> %.3g (%.1f%% fewer)\n", f0, f1, 100.0 * (1 - f1 / f0));
    printf("wrote %s\n", out);
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free(bufs[i]);
    }
    free(names);
    free(bufs);
    free(t);
    free(text);
    ll_spm_free(spm);
    ll_config_free(&cfg);
    ll_ckpt_close(k);
    return 0;
}
