/* lldecode's choice of the language pair a model decodes (decode_lang.h): which language
 * --source-lang / --target-lang name, and the refusals where a model's latent layers or
 * llprune's cut depend on a language the user did not give. */
#include <string.h>

#include "decode_lang.h"
#include "ll/core.h"

/* Index of a language (given, or the only one on that side of the training data); -1 if ambiguous. */
int pick_lang(const ll_config *cfg, const char *lang, int target) {
    if (lang) {
        int i = ll_config_lang_index(cfg, lang);
        if (i < 0) ll_die("--%s-lang %s: the model was not trained with that language", target ? "target" : "source", lang);
        /* a language of the other side only: nothing would use it (a silent no-op) */
        char list[LL_MAX_CORPORA * 2 * (LL_LANG_MAX + 2)] = "";
        char listed[LL_MAX_CORPORA * 4] = {0}; /* by language index: each named once */
        for (int c = 0; c < cfg->n_train + cfg->n_valid; c++) {
            const ll_corpus_cfg *k = c < cfg->n_train ? &cfg->train[c] : &cfg->valid[c - cfg->n_train];
            const char *l = target ? k->tgt_lang : k->src_lang;
            if (!strcmp(l, lang)) return i;
            const int li = ll_config_lang_index(cfg, l);
            if (li >= 0 && !listed[li]++) strcat(strcat(list, list[0] ? ", " : ""), l);
        }
        ll_die("--%s-lang %s: the model translates %s %s only", target ? "target" : "source", lang,
               target ? "into" : "from", list);
    }
    int found = -1;
    for (int c = 0; c < cfg->n_train; c++) {
        int i = ll_config_lang_index(cfg, target ? cfg->train[c].tgt_lang : cfg->train[c].src_lang);
        if (found >= 0 && i != found) return -1;
        found = i;
    }
    return found;
}

/* Latent rows chosen by a language that was neither given nor unique: refuse
 * to guess (row 0 would silently decode with another language's layers). */
void need_lang(const ll_config *cfg, const ll_hparams *hp, int src, int tgt) {
    const int rows = hp->latent_rows > 1, pp = hp->latent_per_pair;
    for (int side = 0; side < 2; side++) { /* 0: source, 1: target */
        const int lang = side ? tgt : src;
        const int needed = rows && (side ? hp->latent_dec || (pp && hp->latent_enc) : hp->latent_enc || (pp && hp->latent_dec));
        if (!needed || lang >= 0) continue;
        char list[LL_MAX_CORPORA * (LL_LANG_MAX + 2)] = "";
        for (int c = 0; c < cfg->n_train; c++) {
            const char *l = side ? cfg->train[c].tgt_lang : cfg->train[c].src_lang;
            int seen = 0;
            for (int d = 0; d < c; d++) seen |= !strcmp(l, side ? cfg->train[d].tgt_lang : cfg->train[d].src_lang);
            if (seen) continue;
            if (list[0]) strcat(list, ", ");
            strcat(list, l);
        }
        if (pp) ll_die("the model has per-pair latent layers: choose --%s-lang from %s", side ? "target" : "source", list);
        ll_die("the model has per-%s-language latent %s layers: choose --%s-lang from %s", side ? "target" : "source",
               side ? "decoder" : "encoder", side ? "target" : "source", list);
    }
}

/* A model llprune cut down to one language's layers (latent.pruned_for) translates pairs with that
 * language only: the others' layers are gone, and it would run the wrong ones without a word. */
void need_pruned_lang(const ll_config *cfg, int src, int tgt) {
    const char *p = cfg->latent_pruned_for;
    if (!p[0]) return;
    char langs[LL_MAX_CORPORA * 4][LL_LANG_MAX];
    const int n = ll_config_langs(cfg, langs);
    const char *s = src >= 0 && src < n ? langs[src] : NULL, *t = tgt >= 0 && tgt < n ? langs[tgt] : NULL;
    /* (a side not given and not implied could be p: the input is the user's word for it) */
    if (!s || !t || !strcmp(s, p) || !strcmp(t, p)) return;
    ll_die("the model was pruned for %s (llprune --lang %s): its other languages' layers are gone, so it translates "
           "only pairs with %s, not %s -> %s",
           p, p, p, s, t);
}
