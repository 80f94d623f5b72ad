/* Loading configs: the libyaml event stream is walked against the schema
 * (sections -> keys -> scalars, plus corpus lists), and --set overrides.  Every
 * error is one line "name:line:col: message" taken from libyaml's marks. */
#define _GNU_SOURCE
#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "ll/config.h"
#include "ll/core.h"
#include "schema.h"

void ll_config_defaults(ll_config *c) {
    memset(c, 0, sizeof *c);
    char err[512];
    for (int i = 0; i < ll_cfg_nkeys; i++) {
        const ll_cfg_key *k = &ll_cfg_keys[i];
        if (k->type == LL_CFG_CORPORA) continue; /* memset: empty list */
        if (ll_cfg_parse_value(k, k->def, c, err, sizeof err) != 0) ll_die("config schema: bad default: %s", err);
    }
}

void ll_config_free(ll_config *c) {
    free(c->text);
    c->text = NULL;
}

/* ---- the YAML walk ---------------------------------------------------------- */

typedef struct {
    yaml_parser_t parser;
    yaml_event_t ev; /* current event, valid while `have` */
    int have;
    const char *name, *text, *base;
    ll_config *c;
    size_t *seen_line; /* per key: line of first assignment (1-based), 0 = unseen */
} loader;

static int fail_at(const loader *L, yaml_mark_t m, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(const loader *L, yaml_mark_t m, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char one[2 * sizeof msg]; /* one line: a value's line breaks (a YAML block scalar) shown as \n */
    size_t o = 0;
    for (const char *p = msg; *p && o + 3 < sizeof one; p++) {
        if (*p == '\n' || *p == '\r' || *p == '\t')
            one[o++] = '\\', one[o++] = *p == '\n' ? 'n' : *p == '\r' ? 'r' : 't';
        else
            one[o++] = *p;
    }
    one[o] = 0;
    return ll_fail("%s:%zu:%zu: %s", L->name, m.line + 1, m.column + 1, one);
}

static int syntax_error(const loader *L) {
    const yaml_parser_t *p = &L->parser;
    yaml_mark_t m = p->problem_mark;
    if (p->error == YAML_READER_ERROR) { /* reader errors carry only a byte offset */
        m.line = m.column = 0;
        for (size_t i = 0; i < p->problem_offset && L->text[i]; i++) {
            if (L->text[i] == '\n')
                m.line++, m.column = 0;
            else
                m.column++;
        }
    }
    const char *problem = p->problem ? p->problem : "malformed YAML";
    /* libyaml's message for a tab is cryptic; say what is wrong */
    const char *hint = m.index < strlen(L->text) && L->text[m.index] == '\t' ? " (YAML indents with spaces, not tabs)" : "";
    return fail_at(L, m, "YAML syntax error: %s%s%s%s", problem, p->context ? " " : "", p->context ? p->context : "",
                   hint);
}

static int next(loader *L) {
    if (L->have) yaml_event_delete(&L->ev);
    L->have = 0;
    if (!yaml_parser_parse(&L->parser, &L->ev)) return syntax_error(L);
    L->have = 1;
    if (L->ev.type == YAML_ALIAS_EVENT)
        return fail_at(L, L->ev.start_mark, "YAML aliases (*%s) are not supported in configs", L->ev.data.alias.anchor);
    return 0;
}

static const char *scalar(const loader *L) { return (const char *)L->ev.data.scalar.value; }

/* YAML's null: an empty value, ~ or null, written without quotes. */
static int is_null(const loader *L) {
    if (L->ev.type != YAML_SCALAR_EVENT || !L->ev.data.scalar.plain_implicit) return 0;
    const char *s = scalar(L);
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static const char *what(const yaml_event_t *e) {
    switch (e->type) {
    case YAML_MAPPING_START_EVENT: return "a mapping";
    case YAML_SEQUENCE_START_EVENT: return "a sequence";
    case YAML_SCALAR_EVENT: return "a scalar";
    default: return "something else";
    }
}

/* Resolve a relative input path against the base directory.  Leading ./ and
 * ../ are folded into the base textually; base comes from realpath, so this
 * cannot be fooled by symlinks in the base itself. */
static int resolve_path(const char *base, const char *rel, char *out, size_t n) {
    if (!base || !*rel || rel[0] == '/') return ll_cfg_copy_str(out, n, rel);
    char dir[LL_PATH_MAX * 2];
    size_t dl = strlen(base);
    if (dl >= sizeof dir) return -1;
    memcpy(dir, base, dl + 1);
    for (;;) {
        if (!strncmp(rel, "./", 2)) {
            rel += 2;
        } else if (!strncmp(rel, "../", 3) || !strcmp(rel, "..")) {
            char *slash = strrchr(dir, '/');
            int poppable = slash && strcmp(slash + 1, "..") && strcmp(slash + 1, ".") && slash[1];
            if (!poppable) break; /* relative base ending in ..: keep the rest literally */
            *(slash == dir ? slash + 1 : slash) = 0;
            rel += rel[2] ? 3 : 2;
        } else {
            break;
        }
        while (*rel == '/') rel++;
    }
    char joined[LL_PATH_MAX * 3];
    size_t dlen = strlen(dir);
    int w = snprintf(joined, sizeof joined, "%s%s%s", dir, (dlen && dir[dlen - 1] == '/') || !*rel ? "" : "/", rel);
    if (w < 0 || (size_t)w >= sizeof joined) return -1;
    return ll_cfg_copy_str(out, n, joined);
}

static int valid_lang(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n >= LL_LANG_MAX || !isalpha((unsigned char)s[0])) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return 0;
    return 1;
}

int ll_config_src_tag_ok(const char *s) {
    size_t n = strlen(s);
    if (n < 3 || n >= LL_TAG_MAX || s[0] != '<' || s[n - 1] != '>' || s[1] == '2') return 0;
    for (size_t i = 0; i < n; i++)
        if (isspace((unsigned char)s[i]) || (i > 0 && i < n - 1 && (s[i] == '<' || s[i] == '>'))) return 0;
    return strcmp(s, "<s>") && strcmp(s, "</s>") && strcmp(s, "<pad>") && strcmp(s, "<unk>");
}

float ll_corpus_weight(const ll_corpus_cfg *cc) { return cc->weight > 0 ? cc->weight : 1.0f; }

/* One {src, tgt, src_lang, tgt_lang[, src_tag][, weight]} mapping; the current event is its MAPPING_START. */
static int parse_corpus(loader *L, const ll_cfg_key *k, int idx, ll_corpus_cfg *cc) {
    enum { N_FIELDS = 6 };
    static const char *const fields[N_FIELDS] = {"src", "tgt", "src_lang", "tgt_lang", "src_tag", "weight"};
    yaml_mark_t start = L->ev.start_mark;
    size_t seen[N_FIELDS] = {0};
    for (;;) {
        if (next(L)) return -1;
        if (L->ev.type == YAML_MAPPING_END_EVENT) break;
        if (L->ev.type != YAML_SCALAR_EVENT)
            return fail_at(L, L->ev.start_mark,
                           "%s[%d]: expected a key (src, tgt, src_lang, tgt_lang, src_tag or weight), got %s",
                           k->name, idx, what(&L->ev));
        int f = -1;
        size_t best_d = (size_t)-1;
        int best = 0;
        for (int i = 0; i < N_FIELDS; i++) {
            if (!strcmp(scalar(L), fields[i])) f = i;
            size_t d = ll_cfg_edit_distance(scalar(L), fields[i]);
            if (d < best_d) best_d = d, best = i;
        }
        yaml_mark_t km = L->ev.start_mark;
        if (f < 0) {
            if (best_d <= 3 && best_d < strlen(scalar(L)))
                return fail_at(L, km, "unknown key '%s' in %s[%d] (did you mean '%s'?)", scalar(L), k->name, idx,
                               fields[best]);
            return fail_at(L, km, "unknown key '%s' in %s[%d] (expected src, tgt, src_lang, tgt_lang, src_tag, weight)",
                           scalar(L), k->name, idx);
        }
        if (seen[f])
            return fail_at(L, km, "duplicate key '%s.%s' in %s[%d] (first set on line %zu)", k->name, fields[f],
                           k->name, idx, seen[f]);
        seen[f] = km.line + 1;
        if (next(L)) return -1;
        if (L->ev.type != YAML_SCALAR_EVENT || !*scalar(L))
            return fail_at(L, L->ev.start_mark, "%s[%d].%s expects a non-empty string, got %s", k->name, idx,
                           fields[f], L->ev.type == YAML_SCALAR_EVENT ? "''" : what(&L->ev));
        const char *v = scalar(L);
        if (f < 2) {
            if (resolve_path(k->flags & LL_CFG_INPUT_PATH ? L->base : NULL, v, f ? cc->tgt : cc->src, LL_PATH_MAX))
                return fail_at(L, L->ev.start_mark, "%s[%d].%s: path too long (at most %d bytes)", k->name, idx,
                               fields[f], LL_PATH_MAX - 1);
        } else if (f == 4) {
            if (!ll_config_src_tag_ok(v))
                return fail_at(L, L->ev.start_mark,
                               "%s[%d].src_tag: '%s' is not a tag such as <BT> ('<', then up to %d bytes without white "
                               "space or '<>', then '>'; not <2..>, a language tag, nor <s>, </s>, <pad> or <unk>)",
                               k->name, idx, v, LL_TAG_MAX - 3);
            ll_cfg_copy_str(cc->src_tag, LL_TAG_MAX, v);
        } else if (f == 5) {
            double w = 0;
            if (ll_num_double(v, &w, 1) || !(w > 0) || w > LL_CORPUS_WEIGHT_MAX)
                return fail_at(L, L->ev.start_mark, "%s[%d].weight: '%s' is not a number in (0, %g]", k->name, idx, v,
                               (double)LL_CORPUS_WEIGHT_MAX);
            cc->weight = (float)w;
        } else {
            if (!valid_lang(v))
                return fail_at(L, L->ev.start_mark,
                               "%s[%d].%s: '%s' is not a language code (a letter, then letters, digits, '_' or "
                               "'-'; at most %d bytes)",
                               k->name, idx, fields[f], v, LL_LANG_MAX - 1);
            ll_cfg_copy_str(f == 2 ? cc->src_lang : cc->tgt_lang, LL_LANG_MAX, v);
        }
    }
    for (int i = 0; i < 4; i++) /* (src_tag and weight are optional) */
        if (!seen[i]) return fail_at(L, start, "%s[%d] is missing '%s'", k->name, idx, fields[i]);
    return 0;
}

/* A corpus list; the current event is the value (a sequence, or null = empty). */
static int parse_corpora(loader *L, const ll_cfg_key *k) {
    ll_corpus_cfg *list = ll_cfg_field(L->c, k);
    int *count = (int *)((char *)L->c + k->count_offset);
    int cap = (int)(k->size / sizeof(ll_corpus_cfg));
    memset(list, 0, k->size);
    *count = 0;
    if (is_null(L)) return 0;
    if (L->ev.type != YAML_SEQUENCE_START_EVENT)
        return fail_at(L, L->ev.start_mark,
                       "%s expects a list of {src: ..., tgt: ..., src_lang: ..., tgt_lang: ...}, got %s", k->name,
                       what(&L->ev));
    for (;;) {
        if (next(L)) return -1;
        if (L->ev.type == YAML_SEQUENCE_END_EVENT) return 0;
        if (L->ev.type != YAML_MAPPING_START_EVENT)
            return fail_at(L, L->ev.start_mark,
                           "%s[%d] expects a mapping {src: ..., tgt: ..., src_lang: ..., tgt_lang: ...}, got %s",
                           k->name, *count, what(&L->ev));
        if (*count == cap)
            return fail_at(L, L->ev.start_mark, "too many %s entries (at most %d)", k->name, cap);
        const unsigned at = (unsigned)L->ev.start_mark.line + 1;
        if (parse_corpus(L, k, *count, &list[*count])) return -1;
        unsigned *lines = list == L->c->train ? L->c->train_line : list == L->c->valid ? L->c->valid_line : NULL;
        if (lines) lines[*count] = at;
        (*count)++;
    }
}

static int unknown_key(loader *L, const char *section, const char *key) {
    int s = ll_cfg_suggest_key(section, key);
    if (s >= 0)
        return fail_at(L, L->ev.start_mark, "unknown key '%s.%s' (did you mean '%s'?)", section, key,
                       ll_cfg_keys[s].name);
    return fail_at(L, L->ev.start_mark, "unknown key '%s.%s' (see --help-config for the keys of %s:)", section, key,
                   section);
}

/* The keys of one section; the current event is the section's MAPPING_START. */
static int parse_section(loader *L, const char *section) {
    for (;;) {
        if (next(L)) return -1;
        if (L->ev.type == YAML_MAPPING_END_EVENT) return 0;
        if (L->ev.type != YAML_SCALAR_EVENT)
            return fail_at(L, L->ev.start_mark, "expected a key in section '%s', got %s", section, what(&L->ev));
        char full[256];
        if ((size_t)snprintf(full, sizeof full, "%s.%s", section, scalar(L)) >= sizeof full)
            return fail_at(L, L->ev.start_mark, "unknown key '%.40s...' in section '%s'", scalar(L), section);
        int i = ll_cfg_find(full);
        if (i < 0) return unknown_key(L, section, scalar(L));
        const ll_cfg_key *k = &ll_cfg_keys[i];
        if (L->seen_line[i])
            return fail_at(L, L->ev.start_mark, "duplicate key '%s' (first set on line %zu)", k->name,
                           L->seen_line[i]);
        L->seen_line[i] = L->ev.start_mark.line + 1;
        L->c->key_line[i] = (unsigned)L->seen_line[i];
        if (next(L)) return -1;
        if (k->type == LL_CFG_CORPORA) {
            if (parse_corpora(L, k)) return -1;
            continue;
        }
        if (L->ev.type != YAML_SCALAR_EVENT)
            return fail_at(L, L->ev.start_mark, "%s expects %s %s, got %s", k->name,
                           k->type == LL_CFG_INT || k->type == LL_CFG_ENUM ? "an" : "a", ll_cfg_type_name(k->type),
                           what(&L->ev));
        const char *v = k->type == LL_CFG_STRING && is_null(L) ? "" : scalar(L);
        char err[1024];
        if (ll_cfg_parse_value(k, v, L->c, err, sizeof err)) return fail_at(L, L->ev.start_mark, "%s", err);
        if (k->type == LL_CFG_STRING && (k->flags & LL_CFG_INPUT_PATH) &&
            resolve_path(L->base, v, ll_cfg_field(L->c, k), k->size))
            return fail_at(L, L->ev.start_mark, "%s: path too long (at most %zu bytes)", k->name, k->size - 1);
    }
}

static int unknown_section(loader *L, const char *name) {
    const char *s = ll_cfg_suggest_section(name);
    if (s) return fail_at(L, L->ev.start_mark, "unknown section '%s' (did you mean '%s'?)", name, s);
    for (int i = 0; i < ll_cfg_nkeys; i++) { /* a key written at top level */
        const char *dot = strchr(ll_cfg_keys[i].name, '.');
        if (!strcmp(dot + 1, name))
            return fail_at(L, L->ev.start_mark, "unknown section '%s' (did you mean '%s'? keys go inside their section)",
                           name, ll_cfg_keys[i].name);
    }
    char list[512] = "";
    size_t n = 0;
    for (int i = 0; i < ll_cfg_nsections && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", ll_cfg_sections[i].name);
    return fail_at(L, L->ev.start_mark, "unknown section '%s' (sections: %s)", name, list);
}

static int parse_document(loader *L) {
    if (next(L)) return -1; /* the root */
    if (is_null(L)) return next(L);
    if (L->ev.type != YAML_MAPPING_START_EVENT)
        return fail_at(L, L->ev.start_mark, "a config is a mapping of sections (model:, data:, ...), got %s",
                       what(&L->ev));
    size_t sec_line[64] = {0};
    for (;;) {
        if (next(L)) return -1;
        if (L->ev.type == YAML_MAPPING_END_EVENT) break;
        if (L->ev.type != YAML_SCALAR_EVENT)
            return fail_at(L, L->ev.start_mark, "expected a section name, got %s", what(&L->ev));
        char section[128];
        snprintf(section, sizeof section, "%s", scalar(L));
        int s = ll_cfg_find_section(scalar(L), strlen(scalar(L)));
        if (s < 0) return unknown_section(L, section);
        if (s < 64 && sec_line[s])
            return fail_at(L, L->ev.start_mark, "duplicate section '%s' (first on line %zu)", section, sec_line[s]);
        if (s < 64) sec_line[s] = L->ev.start_mark.line + 1;
        if (next(L)) return -1;
        if (is_null(L)) continue; /* "model:" with every key commented out */
        if (L->ev.type != YAML_MAPPING_START_EVENT)
            return fail_at(L, L->ev.start_mark, "section '%s' must be a mapping of keys, got %s", section,
                           what(&L->ev));
        if (parse_section(L, section)) return -1;
    }
    return next(L); /* DOCUMENT_END */
}

static int parse_stream(loader *L) {
    if (next(L)) return -1; /* STREAM_START */
    if (next(L)) return -1;
    if (L->ev.type == YAML_STREAM_END_EVENT) return 0; /* empty or comments only */
    if (parse_document(L)) return -1;
    if (next(L)) return -1;
    if (L->ev.type == YAML_DOCUMENT_START_EVENT)
        return fail_at(L, L->ev.start_mark, "only one YAML document is allowed in a config");
    return 0;
}

int ll_config_load_text_in(ll_config *c, const char *text, const char *name, const char *base_dir) {
    if (ll_cfg_nkeys > LL_CFG_MAX_KEYS) ll_die("config schema: %d keys, LL_CFG_MAX_KEYS is %d", ll_cfg_nkeys, LL_CFG_MAX_KEYS);
    ll_config *t = ll_calloc(1, sizeof *t);
    ll_config_defaults(t);
    loader L;
    memset(&L, 0, sizeof L);
    L.name = name ? name : "<config>";
    L.text = text;
    L.base = base_dir;
    L.c = t;
    L.seen_line = ll_calloc((size_t)ll_cfg_nkeys, sizeof *L.seen_line);
    yaml_parser_initialize(&L.parser);
    yaml_parser_set_input_string(&L.parser, (const unsigned char *)text, strlen(text));
    int rc = parse_stream(&L);
    if (L.have) yaml_event_delete(&L.ev);
    yaml_parser_delete(&L.parser);
    free(L.seen_line);
    if (rc == 0) {
        *c = *t;
        c->text = ll_strdup(text);
        size_t n = strlen(L.name);
        if (n >= sizeof c->source) n = sizeof c->source - 1;
        memcpy(c->source, L.name, n);
        c->source[n] = 0;
    }
    free(t);
    return rc;
}

int ll_config_load_text(ll_config *c, const char *text, const char *name) {
    return ll_config_load_text_in(c, text, name, NULL);
}

int ll_config_load(ll_config *c, const char *path) {
    size_t len;
    char *text = ll_read_file_max(path, (size_t)16 << 20, &len); /* a config is KBs: /dev/zero must not fill memory */
    if (!text) return -1;
    if (strlen(text) != len) { /* (the file:line:col of the first one, as the parser's errors) */
        const size_t at = strlen(text);
        int line = 1;
        size_t col = 1;
        for (size_t i = 0; i < at; i++, col++)
            if (text[i] == '\n') line++, col = 0;
        free(text);
        return ll_fail("%s:%d:%zu: config contains a NUL byte", path, line, col);
    }
    /* Input paths are relative to the file's own (canonical) directory. */
    char *dir = ll_strdup(path), *slash = strrchr(dir, '/');
    if (!slash)
        strcpy(dir, ".");
    else if (slash == dir)
        dir[1] = 0;
    else
        *slash = 0;
    char *base = realpath(dir, NULL);
    free(dir);
    if (!base) {
        free(text);
        return ll_fail("%s: cannot resolve its directory", path);
    }
    int rc = ll_config_load_text_in(c, text, path, base);
    free(base);
    free(text);
    return rc;
}

int ll_config_set(ll_config *c, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq) return ll_fail("--set %s: expected section.key=value", assignment);
    char name[256];
    size_t n = (size_t)(eq - assignment);
    if (n >= sizeof name) return ll_fail("--set %s: unknown key", assignment);
    memcpy(name, assignment, n);
    name[n] = 0;
    int i = ll_cfg_find(name);
    if (i < 0) {
        char *dot = strchr(name, '.');
        if (!dot) {
            int s = ll_cfg_suggest_key(NULL, name);
            return s >= 0 ? ll_fail("--set %s: unknown key '%s' (did you mean '%s'?)", assignment, name,
                                    ll_cfg_keys[s].name)
                          : ll_fail("--set %s: expected section.key=value", assignment);
        }
        *dot = 0;
        int s = ll_cfg_suggest_key(name, dot + 1);
        *dot = '.';
        if (s >= 0)
            return ll_fail("--set %s: unknown key '%s' (did you mean '%s'?)", assignment, name, ll_cfg_keys[s].name);
        return ll_fail("--set %s: unknown key '%s' (see --help-config)", assignment, name);
    }
    char err[1024];
    /* parse_value writes only on success, so a bad value leaves c untouched */
    if (ll_cfg_parse_value(&ll_cfg_keys[i], eq + 1, c, err, sizeof err)) return ll_fail("--set %s: %s", assignment, err);
    c->key_line[i] = 0; /* (no longer the file's value) */
    return 0;
}

const char *ll_config_where(const ll_config *c, const char *key, int i, char *buf, size_t n) {
    const int k = ll_cfg_find(key);
    unsigned line = k < 0 ? 0 : i < 0 ? c->key_line[k] : 0;
    if (i >= 0 && i < LL_MAX_CORPORA && !strcmp(key, "data.train")) line = c->train_line[i];
    if (i >= 0 && i < LL_MAX_CORPORA && !strcmp(key, "data.valid")) line = c->valid_line[i];
    if (line && c->source[0])
        snprintf(buf, n, "%s:%u", c->source, line);
    else
        snprintf(buf, n, "%s", c->source);
    return buf;
}

static int add_lang(char langs[][LL_LANG_MAX], int n, const char *lang, int *idx) {
    for (int i = 0; i < n; i++)
        if (!strcmp(langs[i], lang)) {
            *idx = i;
            return n;
        }
    snprintf(langs[n], LL_LANG_MAX, "%s", lang);
    *idx = n;
    return n + 1;
}

int ll_config_langs(const ll_config *c, char langs[][LL_LANG_MAX]) {
    char tmp[LL_MAX_CORPORA * 4][LL_LANG_MAX];
    int n = 0, idx;
    for (int k = 0; k < c->n_train + c->n_valid; k++) {
        const ll_corpus_cfg *cc = k < c->n_train ? &c->train[k] : &c->valid[k - c->n_train];
        n = add_lang(tmp, n, cc->src_lang, &idx);
        n = add_lang(tmp, n, cc->tgt_lang, &idx);
    }
    if (langs) memcpy(langs, tmp, sizeof(tmp[0]) * n);
    return n;
}

int ll_config_lang_index(const ll_config *c, const char *lang) {
    char tmp[LL_MAX_CORPORA * 4][LL_LANG_MAX];
    int n = ll_config_langs(c, tmp);
    for (int i = 0; i < n; i++)
        if (!strcmp(tmp[i], lang)) return i;
    return -1;
}
