/* Writing configs out (dump, single values, --help-config, the Markdown
 * reference) and the cross-field checks of ll_config_validate. */
#define _GNU_SOURCE
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ll/config.h"
#include "ll/core.h"
#include "schema.h"

static int in_section(const ll_cfg_key *k, const char *section) {
    size_t n = strlen(section);
    return !strncmp(k->name, section, n) && k->name[n] == '.';
}

char *ll_config_diff(const ll_config *a, const ll_config *b, int json, const char *const *skip, int *n_diff) {
    ll_sbuf out = {0};
    int n = 0;
    ll_sb_printf(&out, "%s", json ? "{" : "");
    for (int i = 0; i < ll_cfg_nkeys; i++) {
        const ll_cfg_key *k = &ll_cfg_keys[i];
        int skipped = 0;
        for (int j = 0; skip && skip[j]; j++) skipped |= !strcmp(skip[j], k->name);
        if (skipped) continue;
        ll_sbuf x = {0}, y = {0};
        ll_cfg_format_value(&x, k, a);
        ll_cfg_format_value(&y, k, b);
        if (strcmp(x.p ? x.p : "", y.p ? y.p : "")) {
            if (json) { /* the values as config text, in JSON strings */
                ll_sb_printf(&out, "%s\"%s\":[", n ? "," : "", k->name);
                for (int s = 0; s < 2; s++) {
                    ll_sb_printf(&out, "%s\"", s ? "," : "");
                    for (const char *c = s ? y.p : x.p; c && *c; c++)
                        ll_sb_printf(&out, *c == '"' || *c == '\\' ? "\\%c" : (unsigned char)*c < 0x20 ? "\\u%04x" : "%c",
                                     *c);
                    ll_sb_printf(&out, "\"");
                }
                ll_sb_printf(&out, "]");
            } else {
                ll_sb_printf(&out, "%s%s %s -> %s", n ? "; " : "", k->name, x.p ? x.p : "", y.p ? y.p : "");
            }
            n++;
        }
        free(x.p);
        free(y.p);
    }
    ll_sb_printf(&out, "%s", json ? "}" : "");
    if (n_diff) *n_diff = n;
    return out.p;
}

char *ll_config_dump(const ll_config *c) {
    ll_sbuf b = {0};
    ll_sb_printf(&b, "# ll config: every key, as used (corpus paths already resolved)\n");
    for (int s = 0; s < ll_cfg_nsections; s++) {
        const char *sec = ll_cfg_sections[s].name;
        ll_sb_printf(&b, "%s:\n", sec);
        for (int i = 0; i < ll_cfg_nkeys; i++) {
            const ll_cfg_key *k = &ll_cfg_keys[i];
            if (!in_section(k, sec)) continue;
            const char *key = k->name + strlen(sec) + 1;
            int n = k->type == LL_CFG_CORPORA ? *(const int *)((const char *)c + k->count_offset) : 0;
            if (n > 0) { /* block list: one corpus per line reads better than one long flow list */
                const ll_corpus_cfg *cc = ll_cfg_cfield(c, k);
                ll_sb_printf(&b, "  %s:\n", key);
                for (int j = 0; j < n; j++) {
                    ll_sb_printf(&b, "    - ");
                    ll_cfg_format_corpus(&b, &cc[j]);
                    ll_sb_printf(&b, "\n");
                }
                continue;
            }
            ll_sb_printf(&b, "  %s: ", key);
            ll_cfg_format_value(&b, k, c);
            ll_sb_printf(&b, "\n");
        }
    }
    return b.p;
}

char *ll_config_get(const ll_config *c, const char *key) {
    int i = ll_cfg_find(key);
    if (i < 0) {
        ll_fail("unknown config key '%s'", key);
        return NULL;
    }
    ll_sbuf b = {0};
    ll_cfg_format_value(&b, &ll_cfg_keys[i], c);
    return b.p;
}

static const char *default_text(const ll_cfg_key *k) {
    return k->type == LL_CFG_STRING && !k->def[0] ? "\"\"" : k->def;
}

void ll_config_print_help(FILE *out) {
    fprintf(out, "Config keys (YAML sections; override any scalar with --set section.key=value):\n");
    for (int s = 0; s < ll_cfg_nsections; s++) {
        fprintf(out, "\n%s:  %s\n", ll_cfg_sections[s].name, ll_cfg_sections[s].help);
        for (int i = 0; i < ll_cfg_nkeys; i++) {
            const ll_cfg_key *k = &ll_cfg_keys[i];
            if (!in_section(k, ll_cfg_sections[s].name)) continue;
            char range[256];
            ll_cfg_range_text(k, range, sizeof range);
            fprintf(out, "  %-34s %-7s default %-14s %s\n      %s\n", k->name, ll_cfg_type_name(k->type),
                    default_text(k), range, k->help);
        }
    }
}

static void md_cell(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', out);
        fputc(*s, out);
    }
}

void ll_config_print_markdown(FILE *out) {
    for (int s = 0; s < ll_cfg_nsections; s++) {
        fprintf(out, "### `%s:`\n\n%s\n\n", ll_cfg_sections[s].name, ll_cfg_sections[s].help);
        fprintf(out, "| key | type | default | range / choices | meaning |\n|---|---|---|---|---|\n");
        for (int i = 0; i < ll_cfg_nkeys; i++) {
            const ll_cfg_key *k = &ll_cfg_keys[i];
            if (!in_section(k, ll_cfg_sections[s].name)) continue;
            char range[256];
            ll_cfg_range_text(k, range, sizeof range);
            fprintf(out, "| `%s` | %s | `%s` | ", k->name, ll_cfg_type_name(k->type), default_text(k));
            md_cell(out, range);
            fputs(" | ", out);
            md_cell(out, k->help);
            fputs(" |\n", out);
        }
        fputc('\n', out);
    }
}

/* ---- cross-field validation ------------------------------------------------ */

/* Where the message's first key that the file set (a data.train[i] entry counts) was set:
 * "source:line", else "source". */
static void where_of(const ll_config *c, const char *msg, char *buf, size_t n) {
    snprintf(buf, n, "%s", c->source);
    for (const char *p = msg; *p; p++) {
        if (!islower((unsigned char)*p) || (p > msg && (isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '.')))
            continue;
        size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_.");
        while (len && p[len - 1] == '.') len--; /* a sentence's full stop */
        char key[128];
        if (len >= sizeof key || !memchr(p, '.', len)) continue;
        memcpy(key, p, len);
        key[len] = 0;
        int entry = -1;
        if (p[len] == '[') entry = atoi(p + len + 1);
        char w[LL_PATH_MAX + 16];
        ll_config_where(c, key, entry, w, sizeof w);
        if (strcmp(w, c->source)) {
            snprintf(buf, n, "%s", w);
            return;
        }
    }
}

static int invalid(const ll_config *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int invalid(const ll_config *c, const char *fmt, ...) {
    char msg[1024], where[LL_PATH_MAX + 16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    where_of(c, msg, where, sizeof where);
    return where[0] ? ll_fail("%s: %s", where, msg) : ll_fail("%s", msg);
}

static int check_corpora(const ll_config *c) {
    const char *tgts[LL_MAX_CORPORA];
    int n_tgt = 0;
    for (int i = 0; i < c->n_train; i++) {
        const ll_corpus_cfg *a = &c->train[i];
        for (int j = 0; j < i; j++)
            if (!strcmp(a->src, c->train[j].src) && !strcmp(a->tgt, c->train[j].tgt) &&
                !strcmp(a->src_tag, c->train[j].src_tag)) /* (another tag: other data, e.g. the tagged copy) */
                return invalid(c, "data.train[%d] repeats data.train[%d] (%s); to read a corpus more often, give it a "
                                  "weight",
                               i, j, a->src);
        int known = 0;
        for (int j = 0; j < n_tgt; j++) known |= !strcmp(tgts[j], a->tgt_lang);
        if (!known) tgts[n_tgt++] = a->tgt_lang;
    }
    for (int v = 0; v < c->n_valid; v++)
        if (ll_corpus_weight(&c->valid[v]) != 1.0f)
            return invalid(c, "data.valid[%d].weight: weights share out training batches; a validation corpus is "
                              "read once, whole",
                           v);
    /* every_pair (auto with latent layers): one batch of each pair per update, nothing is shared out */
    const int every_pair = !strcmp(c->sampling, "every_pair") ||
                           ((c->latent_enc || c->latent_dec) && !strcmp(c->sampling, "auto"));
    for (int i = 0; every_pair && i < c->n_train; i++)
        if (ll_corpus_weight(&c->train[i]) != 1.0f)
            return invalid(c,
                           "data.train[%d].weight: data.sampling %s%s takes one batch of every pair per update, so "
                           "there are no shares to weight; use size, temperature or uniform sampling (not with "
                           "latent depth), or drop the weight",
                           i, c->sampling, strcmp(c->sampling, "auto") ? "" : " (every_pair for latent depth)");
    if (n_tgt > 1 && !strcmp(c->lang_tags, "off"))
        return invalid(c,
                       "data.lang_tags is off but data.train has %d target languages (%s, %s%s): the decoder "
                       "could not tell which to produce",
                       n_tgt, tgts[0], tgts[1], n_tgt > 2 ? ", ..." : "");
    return 0;
}

int ll_config_latent_per_pair(const ll_config *c) {
    if (!strcmp(c->latent_posterior, "per_pair")) return 1;
    if (strcmp(c->latent_posterior, "auto")) return 0;
    for (int i = 0; i < c->n_train; i++)
        for (int j = 0; j < i; j++) {
            const ll_corpus_cfg *a = &c->train[i], *b = &c->train[j];
            const int same_src = !strcmp(a->src_lang, b->src_lang), same_tgt = !strcmp(a->tgt_lang, b->tgt_lang);
            if (same_src && same_tgt) continue; /* a repeated pair shares its row anyway */
            if ((c->latent_dec && same_tgt) || (c->latent_enc && same_src)) return 1;
        }
    return 0;
}

/* Latent depth: every update visits one batch of every pair (Algorithm 2,
 * reference-spec 1.6), so there is nothing to sample; and per_pair rows must
 * exist for every pair validation decodes. */
static int check_latent(const ll_config *c) {
    if (!c->latent_enc && !c->latent_dec) return 0;
    if (c->n_train > 1 && strcmp(c->sampling, "auto") && strcmp(c->sampling, "every_pair"))
        return invalid(c,
                       "data.sampling %s does not apply to latent depth: every update takes one batch of every "
                       "language pair (Algorithm 2); use every_pair or auto (and data.sampling: every_pair for a "
                       "static baseline with the same data per update)",
                       c->sampling);
    if (!ll_config_latent_per_pair(c)) return 0;
    for (int v = 0; v < c->n_valid; v++) {
        int found = 0;
        for (int k = 0; k < c->n_train; k++)
            found |= !strcmp(c->valid[v].src_lang, c->train[k].src_lang) && !strcmp(c->valid[v].tgt_lang, c->train[k].tgt_lang);
        if (!found)
            return invalid(c,
                           "latent.posterior %s (per_pair): data.valid[%d] (%s-%s) is not a training pair, so no latent "
                           "row covers it%s",
                           c->latent_posterior, v, c->valid[v].src_lang, c->valid[v].tgt_lang,
                           strcmp(c->latent_posterior, "auto") ? "" : "; set latent.posterior: per_language to share rows by language");
    }
    return 0;
}

int ll_config_validate(const ll_config *c) {
    if (c->d_model % c->heads)
        return invalid(c, "model.d_model (%d) must be divisible by model.heads (%d)", c->d_model, c->heads);
    if (c->d_model % 2)
        return invalid(c, "model.d_model (%d) must be even (sinusoidal positions come in sin/cos pairs)", c->d_model);
    if (c->share_all_embeddings && !c->tie_output)
        return invalid(c, "model.share_all_embeddings: true needs model.tie_output: true (the shared embedding is "
                          "also the output projection)");
    if (c->max_len > c->max_positions)
        return invalid(c, "data.max_len (%d) must be <= model.max_positions (%d)", c->max_len, c->max_positions);
    if (c->max_len_ratio > 0 && c->max_len_ratio < 1)
        return invalid(c, "data.max_len_ratio (%g) must be 0 (off) or at least 1: a pair's longer side over its "
                          "shorter one is never below 1, so every pair would be skipped",
                       (double)c->max_len_ratio);
    if (c->max_tokens < c->max_len)
        return invalid(c, "data.max_tokens (%d) must be >= data.max_len (%d) so the longest sentence fits a batch",
                       c->max_tokens, c->max_len);
    if (c->warmup_updates > 0 && c->warmup_init_lr > c->lr)
        return invalid(c, "train.warmup_init_lr (%g) must be <= train.lr (%g)", (double)c->warmup_init_lr,
                       (double)c->lr);
    if (!strcmp(c->scheduler, "inverse_sqrt") && c->warmup_updates < 1)
        return invalid(c, "train.scheduler inverse_sqrt needs train.warmup_updates >= 1 (its decay is "
                          "lr * sqrt(warmup_updates / step))");
    if (!strcmp(c->scheduler, "polynomial") || !strcmp(c->scheduler, "cosine")) {
        if (c->max_updates < 1)
            return invalid(c, "train.scheduler %s needs train.max_updates > 0 (it reaches train.end_lr there)",
                           c->scheduler);
        if (c->warmup_updates >= c->max_updates)
            return invalid(c, "train.warmup_updates (%d) must be < train.max_updates (%d) for the %s scheduler",
                           c->warmup_updates, c->max_updates, c->scheduler);
        if (c->end_lr > c->lr)
            return invalid(c, "train.end_lr (%g) must be <= train.lr (%g)", (double)c->end_lr, (double)c->lr);
    }
    if (check_corpora(c)) return -1;
    return check_latent(c);
}
