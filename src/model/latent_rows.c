/* Which row of layer logits a language pair uses (latent.posterior):
 *   per_language  encoder: the source language's row, decoder: the target's;
 *   per_pair      one row per distinct training pair, for both stacks (in
 *                 many-to-one every pair would otherwise share one decoder
 *                 row, and the aggregated-posterior KL would be KL(q||q) = 0);
 *   shared        row 0;
 *   auto          per_pair where per_language would merge pairs on a latent
 *                 stack, else per_language (ll_config_latent_per_pair; the
 *                 model's hp.latent_per_pair holds the resolved choice).
 * Kept apart from latent.c, which holds the sampling and gradients. */
#include <stdio.h>
#include <string.h>

#include "ll/latent.h"

int ll_latent_pair_row(const ll_hparams *hp, const ll_config *cfg, int stack, int src_lang, int tgt_lang) {
    if (hp->latent_rows <= 1) return 0;
    if (!hp->latent_per_pair) {
        const int lang = stack ? tgt_lang : src_lang;
        return lang >= 0 && lang < hp->latent_rows ? lang : -1;
    }
    /* the first training pair with these languages (a repeated pair shares its row) */
    for (int k = 0; k < cfg->n_train && k < hp->latent_rows; k++)
        if (ll_config_lang_index(cfg, cfg->train[k].src_lang) == src_lang &&
            ll_config_lang_index(cfg, cfg->train[k].tgt_lang) == tgt_lang)
            return k;
    return -1;
}

const char *ll_latent_row_name(const ll_hparams *hp, const ll_config *cfg, int row, char *buf, size_t n) {
    if (hp->latent_rows <= 1) {
        snprintf(buf, n, "shared");
    } else if (hp->latent_per_pair) {
        snprintf(buf, n, "%s-%s", cfg->train[row].src_lang, cfg->train[row].tgt_lang);
    } else {
        char langs[LL_MAX_CORPORA * 4][LL_LANG_MAX];
        int nl = ll_config_langs(cfg, langs);
        snprintf(buf, n, "%s", row < nl ? langs[row] : "?");
    }
    return buf;
}
