/* The data tests' fixture (test_data.c, test_data_options.c): word-by-word parallel corpora in
 * English, Spanish and German, and configs over them. */
#ifndef LL_TEST_DATA_FIXTURE_H
#define LL_TEST_DATA_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/config.h"
#include "ll/core.h"
#include "testutil.h"

static const char *EN[] = {"the",   "a",    "cat",  "dog",   "house",   "green",  "red", "small",
                           "big",   "eats", "sees", "runs",  "quickly", "slowly", "man", "woman",
                           "child", "car",  "tree", "river", "city",    "old",    "new"};
static const char *ES[] = {"el",     "un",    "gato",  "perro", "casa",   "verde", "rojo",   "pequeño",
                           "grande", "come",  "ve",    "corre", "rápido", "lento", "hombre", "mujer",
                           "niño",   "coche", "árbol", "río",   "ciudad", "viejo", "nuevo"};
static const char *DE[] = {"der",  "ein",  "Katze", "Hund",  "Haus",    "grün",    "rot",  "klein",
                           "groß", "isst", "sieht", "läuft", "schnell", "langsam", "Mann", "Frau",
                           "Kind", "Auto", "Baum",  "Fluss", "Stadt",   "alt",     "neu"};
#define NW ((int)(sizeof EN / sizeof *EN))

static inline char *path_in(const char *dir, const char *name) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

/* Parallel "translations" word by word; n lines of 2..max_words words.  Writes
 * <name>.en/.es/.de in dir. */
static inline void gen_corpus(const char *dir, const char *name, int n, int max_words, uint32_t seed) {
    const char *ext[3] = {"en", "es", "de"};
    const char **words[3] = {EN, ES, DE};
    FILE *f[3];
    for (int l = 0; l < 3; l++) {
        char fn[256];
        snprintf(fn, sizeof fn, "%s/%s.%s", dir, name, ext[l]);
        f[l] = fopen(fn, "w");
    }
    uint32_t s = seed * 2654435761u + 1;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        int k = 2 + (int)((s >> 16) % (uint32_t)(max_words - 1));
        int idx[64];
        for (int j = 0; j < k; j++) {
            s = s * 1664525u + 1013904223u;
            idx[j] = (int)((s >> 16) % NW);
        }
        for (int l = 0; l < 3; l++) {
            for (int j = 0; j < k; j++) fprintf(f[l], "%s%s", j ? " " : "", words[l][idx[j]]);
            fputc('\n', f[l]);
        }
    }
    for (int l = 0; l < 3; l++) fclose(f[l]);
}

static inline void add_corpus(ll_config *c, int valid, const char *dir, const char *src, const char *tgt, const char *sl,
                       const char *tl) {
    ll_corpus_cfg *cc = valid ? &c->valid[c->n_valid++] : &c->train[c->n_train++];
    snprintf(cc->src, sizeof cc->src, "%s/%s", dir, src);
    snprintf(cc->tgt, sizeof cc->tgt, "%s/%s", dir, tgt);
    snprintf(cc->src_lang, sizeof cc->src_lang, "%s", sl);
    snprintf(cc->tgt_lang, sizeof cc->tgt_lang, "%s", tl);
}

static inline void base_config(ll_config *c, const char *data_dir) {
    ll_config_defaults(c);
    snprintf(c->data_dir, sizeof c->data_dir, "%s", data_dir);
    c->vocab_size = 64;
    c->threads = 2;
    c->max_len = 64;
    c->n_train = c->n_valid = 0;
}

static inline char *slurp(const char *path, size_t *n) {
    char *s = ll_read_file(path, n);
    return s ? s : ll_strdup("");
}

/* Exists-and-lists-nothing-new check: entries in dir, or -1 if it does not exist. */
static inline int entries(const char *dir) { return tu_count_entries(dir); }

/* en-es and en-de training corpora, an en-es validation corpus */
static inline void multi_config(ll_config *c, const char *dd, const char *tmp) {
    base_config(c, dd);
    add_corpus(c, 0, tmp, "c.en", "c.es", "en", "es");
    add_corpus(c, 0, tmp, "c.en", "c.de", "en", "de");
    add_corpus(c, 1, tmp, "v.en", "v.es", "en", "es");
}

/* A scratch directory with the corpora the tests read: c.{en,es,de} (300 lines) and v.* (30) */
static inline const char *fixture_corpora(void) {
    const char *tmp = tu_tmpdir();
    gen_corpus(tmp, "c", 300, 10, 1);
    gen_corpus(tmp, "v", 30, 10, 2);
    return tmp;
}

#endif
