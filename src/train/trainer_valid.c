/* The trainer's validation step: validate, keep the best (checkpoint_best, checkpoint.keep_best,
 * the best validation's translations), early stopping, and the learning rate's plateaus
 * (train.lr_shrink, train.stop_min_lr).  The training loop that calls it is in trainer.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/dist_train.h"
#include "ll/train.h"
#include "trainer_impl.h"

/* checkpoint.keep_best: this validation's model as one of the N best files when
 * it ranks among them (rank 0 writes; ZeRO-1 gathers the moments on every rank). */
static int keep_best(trainer *t, double value) {
    const ll_config *cfg = t->cfg;
    if (cfg->keep_best <= 0 || !isfinite(value)) return 0; /* (a NaN loss ranks nowhere, and "nan" is no name) */
    ll_dist_train_full_moments(t->dt, 1);
    int rc = 0;
    if (t->rank == 0) {
        const int before = ll_ckpt_best_rank(cfg->save_dir, cfg->best_metric, value, t->ts.update);
        char name[128];
        if (before < 0)
            rc = -1;
        else if (before < cfg->keep_best && trn_save(t, ll_ckpt_best_name(name, sizeof name, cfg->best_metric, value,
                                                                       t->ts.update)))
            rc = -1;
        else if (ll_ckpt_prune_best(cfg->save_dir, cfg->best_metric, cfg->keep_best, -1) < 0)
            rc = -1;
    }
    ll_dist_train_full_moments(t->dt, 0);
    return rc;
}

/* The lr of the update after `updates` completed ones: the schedule's, shrunk on plateaus
 * (train.lr_shrink). */
double trn_lr_at(const trainer *t, long updates) {
    const double lr = ll_schedule_lr(&t->sched, updates);
    return t->ts.lr_shrinks > 0 ? lr * pow(t->cfg->lr_shrink, (double)t->ts.lr_shrinks) : lr;
}

/* train.stop_min_lr: past warmup, the next update's lr is below it */
int trn_lr_too_small(const trainer *t) {
    return t->cfg->stop_min_lr > 0 && t->ts.update >= t->cfg->warmup_updates &&
           trn_lr_at(t, t->ts.update) < t->cfg->stop_min_lr;
}

/* Validate, track the best score and patience, write checkpoint_best on a new
 * best.  The caller writes checkpoint_last afterwards: best goes first, so no
 * committed state ever records a best model that is not on disk.  *stop set
 * on early stop. */
int trn_run_validation(trainer *t, double elapsed, int *stop) {
    if (!t->have_valid) return 0;
    ll_valid_result r;
    ll_adam_ema_swap(&t->opt, t->m, 1); /* train.ema_decay: scored on the moving average, as it is saved */
    const int vrc = ll_validate_ranks(t->m, t->cfg, &t->valid, t->spm, &r, t->dist); /* sharded over the ranks */
    ll_adam_ema_swap(&t->opt, t->m, 0);
    if (vrc) return -1;
    const int by_bleu = !strcmp(t->cfg->best_metric, "bleu"), by_chrf = !strcmp(t->cfg->best_metric, "chrf");
    const int higher = by_bleu || by_chrf;                      /* BLEU and chrF: higher is better */
    const double value = by_bleu ? r.bleu : by_chrf ? r.chrf : r.loss;
    double metric = higher ? -value : value; /* lower is better */
    int best = metric < t->ts.best_valid;
    if (best) {
        t->ts.best_valid = metric;
        t->ts.best_update = t->ts.update;
        t->ts.bad_valids = 0;
    } else {
        t->ts.bad_valids++;
    }
    /* reduce on plateau (torch's ReduceLROnPlateau, as fairseq uses it: shrink once more than
     * lr_patience validations in a row brought no best, then count again from 0) */
    int shrunk = 0;
    if (t->cfg->lr_shrink < 1) {
        t->ts.plateau_bad = best ? 0 : t->ts.plateau_bad + 1;
        if (t->ts.plateau_bad > t->cfg->lr_patience) {
            t->ts.lr_shrinks++;
            t->ts.plateau_bad = 0;
            shrunk = 1;
        }
    }
    char extra[160];
    ll_valid_extra(t->cfg, &r, extra, sizeof extra);
    if (ll_verbosity > 0)
        fprintf(stderr, "valid | update %ld | loss %.3f | nll %.3f | ppl %.2f%s | best %s %.*f%s\n", t->ts.update, r.loss,
            r.nll, pow(2, r.nll), extra, t->cfg->best_metric, higher ? 2 : 3, /* bleu, chrf as printed before */
            higher ? -t->ts.best_valid : t->ts.best_valid,
            best ? " (new best)" : "");
    if (shrunk && ll_verbosity > 0)
        fprintf(stderr, "valid | update %ld | no new best of %s in %d validations: lr x %g (x %.4g in all), %.3e next\n",
                t->ts.update, t->cfg->best_metric, t->cfg->lr_patience + 1, (double)t->cfg->lr_shrink,
                pow(t->cfg->lr_shrink, (double)t->ts.lr_shrinks), trn_lr_at(t, t->ts.update));
    for (int k = 0; ll_verbosity > 0 && k < r.n_corpora; k++) {
        char line[2 * LL_PATH_MAX];
        ll_valid_corpus_line(t->cfg, &r, k, line, sizeof line);
        fprintf(stderr, "valid | update %ld | %s\n", t->ts.update, line);
    }
    fprintf(t->metrics, "{\"type\":\"valid\",\"update\":%ld,\"loss\":%.6f,\"nll\":%.6f,\"ppl\":%.4f,\"tokens\":%ld",
            t->ts.update, r.loss, r.nll, pow(2, r.nll), r.tokens);
    if (r.have_bleu) fprintf(t->metrics, ",\"bleu\":%.4f,\"chrf\":%.4f", r.bleu, r.chrf);
    if (r.n_corpora > 0) { /* each data.valid corpus, in order */
        fprintf(t->metrics, ",\"corpora\":[");
        for (int k = 0; k < r.n_corpora; k++) {
            fprintf(t->metrics, "%s{\"pair\":\"%s-%s\",\"loss\":%.6f,\"nll\":%.6f,\"tokens\":%ld", k ? "," : "",
                    t->cfg->valid[k].src_lang, t->cfg->valid[k].tgt_lang, r.corpus[k].loss, r.corpus[k].nll,
                    r.corpus[k].tokens);
            if (r.have_bleu) fprintf(t->metrics, ",\"bleu\":%.4f,\"chrf\":%.4f", r.corpus[k].bleu, r.corpus[k].chrf);
            fprintf(t->metrics, "}");
        }
        fprintf(t->metrics, "]");
    }
    fprintf(t->metrics, ",\"best\":%.6f,\"wall\":%.2f}\n", higher ? -t->ts.best_valid : t->ts.best_valid, elapsed);
    t->ts.metrics_records++;
    if (trn_metrics_done(t)) return -1;
    trn_crash_point(t, "valid");
    if (best && t->cfg->valid_translations && t->rank == 0) /* the best validation's translations, kept */
        for (int k = 0; k < t->cfg->n_valid; k++) {
            char cur[LL_PATH_MAX + 64], keep[LL_PATH_MAX + 64];
            ll_valid_hyp_path(t->cfg, k, 0, cur, sizeof cur);
            if (ll_link_over(cur, ll_valid_hyp_path(t->cfg, k, 1, keep, sizeof keep)) && ll_copy_file(cur, keep))
                return -1;
        }
    if (best) {
        ll_dist_train_full_moments(t->dt, 1); /* ZeRO-1: every rank sends its shards; rank 0 writes */
        int rc = trn_save(t, "checkpoint_best.llm");
        ll_dist_train_full_moments(t->dt, 0);
        if (rc) return -1;
    }
    if (keep_best(t, value)) return -1;
    if (t->cfg->patience > 0 && t->ts.bad_valids >= t->cfg->patience) {
        ll_log("early stop: %lld validations without improvement of %s", (long long)t->ts.bad_valids,
               t->cfg->best_metric);
        *stop = 1;
    } else if (trn_lr_too_small(t)) {
        ll_log("stop: the learning rate %.3e is below train.stop_min_lr %g", trn_lr_at(t, t->ts.update),
               (double)t->cfg->stop_min_lr);
        *stop = 1;
    }
    return 0;
}
