/* The training loop: data -> batches -> model -> loss -> gradients -> Adam ->
 * checkpoints, with validation, a progress line and a JSONL metrics log.
 * Everything that decides the run's trajectory (model, Adam moments, update
 * count, data position; dropout is keyed by the update) is in the checkpoint,
 * so --resume continues bit for bit on the CPU. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ll/train.h"

typedef struct {
    ll_config *cfg;
    ll_model *m;
    ll_adam opt;
    ll_schedule sched;
    ll_spm *spm;
    const void *vocab;
    size_t vocab_len;
    char *config_text;
    ll_dataset train, valid;
    int have_valid;
    ll_batcher *it;
    ll_train_state ts;
    FILE *metrics;
    char path[LL_PATH_MAX + 64];
} trainer;

static const char *save_path(trainer *t, const char *name) {
    snprintf(t->path, sizeof t->path, "%s/%s", t->cfg->save_dir, name);
    return t->path;
}

static int mkdir_p(const char *dir) {
    char buf[LL_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) && errno != EEXIST) return ll_fail("%s: cannot create directory: %s", buf, strerror(errno));
            *p = '/';
        }
    if (mkdir(buf, 0777) && errno != EEXIST) return ll_fail("%s: cannot create directory: %s", buf, strerror(errno));
    return 0;
}

static int save(trainer *t, const char *name) {
    int64_t e, p;
    ll_batcher_state(t->it, &e, &p);
    t->ts.epoch = e;
    t->ts.batch_pos = p;
    return ll_model_save(save_path(t, name), t->m, t->config_text, t->vocab, t->vocab_len, &t->ts);
}

/* Validation loss (summed nll/loss over the whole valid set, no dropout). */
static void validate(trainer *t, double *loss, double *nll) {
    ll_batcher *vb = ll_batcher_new(&t->valid, t->cfg->max_tokens, t->cfg->seed, 0);
    ll_batch b;
    memset(&b, 0, sizeof b);
    double L = 0, N = 0;
    long ntok = 0;
    while (ll_batcher_next(vb, &b)) {
        ll_loss_stats s;
        ll_model_step(t->m, &b, t->cfg->seed, 0, 0, &s);
        L += s.loss;
        N += s.nll;
        ntok += s.ntokens;
    }
    ll_batch_free(&b);
    ll_batcher_free(vb);
    *loss = L / (ntok ? ntok : 1) / M_LN2;
    *nll = N / (ntok ? ntok : 1) / M_LN2;
}

static void fmt_eta(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e8) {
        snprintf(buf, n, "--:--:--");
        return;
    }
    long x = (long)s;
    snprintf(buf, n, "%02ld:%02ld:%02ld", x / 3600, x / 60 % 60, x % 60);
}

static int setup(trainer *t, const ll_train_opts *o) {
    ll_config *cfg = t->cfg;
    if (!ll_data_is_prepared(cfg)) {
        ll_log("preparing data in %s ...", cfg->data_dir);
        if (ll_prepare_data(cfg)) return -1;
    }
    char spm_path[LL_PATH_MAX + 32];
    snprintf(spm_path, sizeof spm_path, "%s/spm.model", cfg->data_dir);
    if (!(t->spm = ll_spm_load(spm_path))) return -1;
    t->vocab = ll_spm_proto(t->spm, &t->vocab_len);
    if (ll_dataset_open(&t->train, cfg, "train")) return -1;
    t->have_valid = cfg->n_valid > 0;
    if (t->have_valid && ll_dataset_open(&t->valid, cfg, "valid")) return -1;

    ll_hparams hp;
    ll_hparams_from_config(&hp, cfg, ll_spm_vocab_size(t->spm));
    ll_backend *be = ll_backend_cpu();
    if (!strcmp(cfg->device, "cuda")) {
        ll_backend *cb = ll_backend_cuda(0);
        if (!cb) return -1;
        const char *missing = ll_backend_missing(cb);
        if (missing)
            return ll_fail("train.device=cuda: the CUDA backend does not implement '%s' yet (full CUDA training is the next milestone); use train.device=cpu",
                           missing);
        be = cb;
    }
    t->m = ll_model_new(&hp, be);
    ll_model_init(t->m, (uint64_t)cfg->seed);
    ll_adam_init(&t->opt, t->m, cfg);
    ll_schedule_from_config(&t->sched, cfg);
    t->config_text = ll_config_dump(cfg);
    t->ts = (ll_train_state){.best_valid = INFINITY, .opt = &t->opt};
    t->it = ll_batcher_from_config(&t->train, cfg, 1);

    const char *last = save_path(t, "checkpoint_last.llm");
    struct stat sb;
    int have_last = stat(last, &sb) == 0;
    if (o->resume) {
        if (!have_last) return ll_fail("--resume: %s does not exist", last);
        ll_ckpt *k = ll_ckpt_open(last);
        if (!k) return -1;
        int rc = ll_model_load_params(t->m, k, last) || ll_train_state_load(&t->ts, k, t->m, last);
        ll_ckpt_close(k);
        if (rc) return -1;
        ll_batcher_seek(t->it, t->ts.epoch, t->ts.batch_pos);
        ll_log("resumed from %s at update %ld (epoch %lld)", last, t->ts.update, (long long)t->ts.epoch);
    } else if (have_last) {
        return ll_fail("%s already exists: pass --resume to continue that run, or choose another checkpoint.save_dir",
                       last);
    }
    if (mkdir_p(cfg->save_dir)) return -1;
    char mpath[LL_PATH_MAX + 64];
    if (cfg->metrics_log[0])
        snprintf(mpath, sizeof mpath, "%s", cfg->metrics_log);
    else
        snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", cfg->save_dir);
    t->metrics = fopen(mpath, o->resume ? "a" : "w");
    if (!t->metrics) return ll_fail("%s: cannot write metrics log: %s", mpath, strerror(errno));
    ll_log("model: %d+%d layers, d=%d, ffn=%d, heads=%d, vocab %d, %s-norm, %zu parameters; %d threads, BLAS core %s",
           hp.Le, hp.Ld, hp.C, hp.F, hp.H, hp.V, hp.post_norm ? "post" : "pre", ll_model_count_params(t->m), ll_get_threads(),
           ll_blas_core());
    return 0;
}

static void teardown(trainer *t) {
    if (t->metrics) fclose(t->metrics);
    if (t->it) ll_batcher_free(t->it);
    if (t->m) {
        ll_adam_free(&t->opt, t->m);
        ll_model_free(t->m);
    }
    if (t->have_valid) ll_dataset_close(&t->valid);
    ll_dataset_close(&t->train);
    if (t->spm) ll_spm_free(t->spm);
    free(t->config_text);
}

static int run_validation(trainer *t, double elapsed) {
    if (!t->have_valid) return save(t, "checkpoint_last.llm");
    double vl, vn;
    validate(t, &vl, &vn);
    int best = vl < t->ts.best_valid;
    if (best) {
        t->ts.best_valid = vl;
        t->ts.bad_valids = 0;
    } else {
        t->ts.bad_valids++;
    }
    fprintf(stderr, "valid | update %ld | loss %.3f | nll %.3f | ppl %.2f | best %.3f%s\n", t->ts.update, vl, vn,
            pow(2, vn), t->ts.best_valid, best ? " (new best)" : "");
    fprintf(t->metrics, "{\"type\":\"valid\",\"update\":%ld,\"loss\":%.6f,\"nll\":%.6f,\"ppl\":%.4f,\"best\":%.6f,\"wall\":%.2f}\n",
            t->ts.update, vl, vn, pow(2, vn), t->ts.best_valid, elapsed);
    fflush(t->metrics);
    if (save(t, "checkpoint_last.llm")) return -1;
    if (best && save(t, "checkpoint_best.llm")) return -1;
    return 0;
}

int ll_train(ll_config *cfg, const ll_train_opts *o) {
    trainer t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    int rc = setup(&t, o);
    if (rc) {
        teardown(&t);
        return rc;
    }
    ll_batch b;
    memset(&b, 0, sizeof b);
    const int nb = ll_batcher_n_batches(t.it);
    const long max_updates = cfg->max_updates > 0 ? cfg->max_updates : 0;
    const long max_epochs = cfg->max_epochs;
    double t_start = ll_now(), t_log = t_start;
    long log_tokens = 0, log_updates = 0, start_update = t.ts.update;
    double log_loss = 0, log_nll = 0, log_gnorm = 0;
    long log_ntok = 0;
    int64_t epoch, pos;
    for (;;) {
        ll_batcher_state(t.it, &epoch, &pos);
        if (max_updates && t.ts.update >= max_updates) break;
        if (max_epochs && (epoch > max_epochs || (epoch == max_epochs && pos >= nb))) break; /* epochs are 1-based */
        double lr = ll_schedule_lr(&t.sched, t.ts.update);
        if (t.ts.update >= t.sched.warmup && cfg->max_updates == 0 && lr <= 0) break;
        t.m->be->memset0(t.m->be, t.m->grads, t.m->n_params * sizeof(real));
        long ntok = 0;
        double loss = 0, nll = 0;
        for (int k = 0; k < cfg->update_freq; k++) {
            if (!ll_batcher_next(t.it, &b)) {
                /* epoch boundary: the next call starts the next epoch */
                if (!ll_batcher_next(t.it, &b)) {
                    rc = ll_fail("training data yields no batches");
                    goto out;
                }
            }
            ll_loss_stats s;
            uint64_t rng_step = (uint64_t)t.ts.update * cfg->update_freq + k;
            ll_model_step(t.m, &b, (uint64_t)cfg->seed, rng_step, 1, &s);
            ntok += s.ntokens;
            loss += s.loss;
            nll += s.nll;
            log_tokens += s.ntokens;
        }
        double gnorm = ll_adam_step(&t.opt, t.m, lr, 1.0 / (ntok ? ntok : 1), cfg->clip_norm);
        t.ts.update++;
        log_updates++;
        log_loss += loss;
        log_nll += nll;
        log_ntok += ntok;
        log_gnorm += gnorm;
        if (!isfinite(loss)) {
            rc = ll_fail("update %ld: loss is %f (diverged); lower train.lr or set train.clip_norm", t.ts.update, loss);
            goto out;
        }
        if (t.ts.update % cfg->log_interval == 0 || (max_updates && t.ts.update == max_updates)) {
            double now = ll_now();
            double tps = log_tokens / (now - t_log);
            double per_update = (now - t_start) / (double)(t.ts.update - start_update);
            ll_batcher_state(t.it, &epoch, &pos);
            double remaining = -1;
            if (max_updates)
                remaining = (max_updates - t.ts.update) * per_update;
            else if (max_epochs)
                remaining = ((max_epochs - epoch) * (double)nb - pos) / cfg->update_freq * per_update;
            char eta[32];
            fmt_eta(eta, sizeof eta, remaining);
            double L = log_loss / log_ntok / M_LN2, N = log_nll / log_ntok / M_LN2;
            fprintf(stderr,
                    "epoch %lld | %5.1f%% | update %ld | loss %.3f | nll %.3f | ppl %.2f | lr %.3e | gnorm %.3f | "
                    "tok/s %.0f | ETA %s\n",
                    (long long)epoch, 100.0 * pos / (nb ? nb : 1), t.ts.update, L, N, pow(2, N), lr,
                    log_gnorm / log_updates, tps, eta);
            fprintf(t.metrics,
                    "{\"type\":\"train\",\"update\":%ld,\"epoch\":%lld,\"epoch_pct\":%.2f,\"loss\":%.6f,\"nll\":%.6f,"
                    "\"ppl\":%.4f,\"lr\":%.6e,\"gnorm\":%.5f,\"tokens_per_s\":%.1f,\"wall\":%.2f}\n",
                    t.ts.update, (long long)epoch, 100.0 * pos / (nb ? nb : 1), L, N, pow(2, N), lr,
                    log_gnorm / log_updates, tps, now - t_start);
            fflush(t.metrics);
            t_log = now;
            log_tokens = log_updates = log_ntok = 0;
            log_loss = log_nll = log_gnorm = 0;
        }
        if (cfg->save_interval > 0 && t.ts.update % cfg->save_interval == 0) {
            char name[64];
            snprintf(name, sizeof name, "checkpoint_%ld.llm", t.ts.update);
            if ((rc = save(&t, name))) goto out;
            if (ll_ckpt_prune_numbered(cfg->save_dir, cfg->keep_last) < 0) {
                rc = -1;
                goto out;
            }
        }
        ll_batcher_state(t.it, &epoch, &pos);
        /* valid_interval 0: validate when an epoch's last batch has been used */
        if ((cfg->valid_interval > 0 && t.ts.update % cfg->valid_interval == 0) ||
            (cfg->valid_interval == 0 && pos >= nb)) {
            if ((rc = run_validation(&t, ll_now() - t_start))) goto out;
        }
    }
    /* final validation + checkpoint unless the last update just did it */
    if (cfg->valid_interval <= 0 || t.ts.update % cfg->valid_interval != 0 || t.ts.update == start_update)
        rc = run_validation(&t, ll_now() - t_start);
    if (!rc) ll_log("done: %ld updates; checkpoints in %s", t.ts.update, cfg->save_dir);
out:
    ll_batch_free(&b);
    teardown(&t);
    return rc;
}
