/* lldecode's language pair (decode_lang.c). */
#ifndef LL_CLI_DECODE_LANG_H
#define LL_CLI_DECODE_LANG_H

#include "ll/config.h"
#include "ll/model.h"

/* Index of a language (given, or the only one on that side of the training data); -1 if
 * ambiguous.  A language the model never saw on that side is an error listing those it did. */
int pick_lang(const ll_config *cfg, const char *lang, int target);
/* Latent rows chosen by a language that was neither given nor unique: an error naming the choices. */
void need_lang(const ll_config *cfg, const ll_hparams *hp, int src, int tgt);
/* A model llprune cut down to one language's layers, asked for a pair without it: an error. */
void need_pruned_lang(const ll_config *cfg, int src, int tgt);

#endif
