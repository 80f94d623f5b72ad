/* Internal to src/config: the schema table and the per-type value code that
 * defaults, the YAML loader, --set, dump and help all share. */
#ifndef LL_CONFIG_SCHEMA_H
#define LL_CONFIG_SCHEMA_H

#include <stddef.h>

#include "ll/config.h"

typedef enum { LL_CFG_INT, LL_CFG_FLOAT, LL_CFG_BOOL, LL_CFG_STRING, LL_CFG_ENUM, LL_CFG_CORPORA } ll_cfg_type;

enum {
    LL_CFG_MIN_OPEN = 1,   /* range excludes min */
    LL_CFG_MAX_OPEN = 2,   /* range excludes max */
    LL_CFG_INPUT_PATH = 4, /* relative value is resolved against the config file's directory */
};

typedef struct {
    const char *name;    /* "section.key" */
    ll_cfg_type type;
    size_t offset, size; /* the field in ll_config; size bounds strings and corpus arrays */
    size_t count_offset; /* corpora: the int holding the entry count */
    const char *def;     /* default, written as config text */
    double min, max;     /* int/float range; HUGE_VAL = unbounded */
    const char *choices; /* enum: "pre|post" */
    int flags;
    const char *help;
} ll_cfg_key;

typedef struct {
    const char *name, *help;
} ll_cfg_section;

extern const ll_cfg_key ll_cfg_keys[];
extern const int ll_cfg_nkeys;
extern const ll_cfg_section ll_cfg_sections[];
extern const int ll_cfg_nsections;

/* Exact lookup: index into ll_cfg_keys or -1.  `name` is "section.key". */
int ll_cfg_find(const char *name);
/* Index of section `name` (len bytes) in ll_cfg_sections, or -1. */
int ll_cfg_find_section(const char *name, size_t len);
/* Closest known key to "section.key" (edit distance <= 3, preferring the same
 * section), or -1. */
int ll_cfg_suggest_key(const char *section, const char *key);
/* Closest section name, or NULL. */
const char *ll_cfg_suggest_section(const char *name);
size_t ll_cfg_edit_distance(const char *a, const char *b);

/* Parse scalar text into c's field (not for corpora).  On error writes a
 * message like "train.lr expects a float, got 'abc'" to err and returns -1. */
int ll_cfg_parse_value(const ll_cfg_key *k, const char *text, ll_config *c, char *err, size_t errn);
/* Copy s into a char field of capacity n, zero-padding; -1 if too long. */
int ll_cfg_copy_str(char *dst, size_t n, const char *s);

/* Growable string for dump/help output. */
typedef struct {
    char *p;
    size_t n, cap;
} ll_sbuf;
void ll_sb_printf(ll_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ll_sb_quote(ll_sbuf *b, const char *s); /* YAML double-quoted scalar */
/* Append k's value in c as config text (corpora as a flow sequence). */
void ll_cfg_format_value(ll_sbuf *b, const ll_cfg_key *k, const ll_config *c);
/* One corpus as a YAML flow mapping: {src: "..", tgt: "..", src_lang: xx, tgt_lang: yy[, src_tag: "<..>"]} */
void ll_cfg_format_corpus(ll_sbuf *b, const ll_corpus_cfg *cc);
/* Shortest decimal text that reads back to exactly f. */
void ll_cfg_format_float(char *buf, size_t n, float f);
/* "int", "float", ..., and the range/choices as text ("[0, 1)", "pre | post"). */
const char *ll_cfg_type_name(ll_cfg_type t);
void ll_cfg_range_text(const ll_cfg_key *k, char *buf, size_t n);

static inline void *ll_cfg_field(ll_config *c, const ll_cfg_key *k) { return (char *)c + k->offset; }
static inline const void *ll_cfg_cfield(const ll_config *c, const ll_cfg_key *k) {
    return (const char *)c + k->offset;
}

#endif
