/* The training loop: data -> batches -> model -> losses -> gradients -> Adam ->
 * checkpoints, with validation, a progress line and a JSONL metrics log.
 * Everything that decides the run's trajectory (model, Adam moments, update
 * count, data positions; dropout and Gumbel noise are keyed by the forward's
 * step) is in the checkpoint, so --resume continues bit for bit on the CPU.
 *
 * Latent depth (Algorithm 2 of Li et al. 2020): one update visits a batch of
 * every language pair; each forward draws the layer gates of its languages;
 * KL per pair and L_K per update add their gradients to the layer logits;
 * Theta steps every update, the logits every latent.inner_steps updates from
 * that update's gradient alone. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ll/dist_train.h"
#include "ll/latent.h"
#include "ll/train.h"
#include "signals.h"
#include "trainer_impl.h"


static const char *save_path(trainer *t, const char *name) {
    snprintf(t->path, sizeof t->path, "%s/%s", t->cfg->save_dir, name);
    return t->path;
}

/* A record is complete: it must reach the file now (a full disk, /dev/full),
 * else the run stops with the file and the reason instead of losing it. */
int trn_metrics_done(trainer *t) {
    errno = 0;
    if (fflush(t->metrics) == 0 && !ferror(t->metrics)) return 0;
    return ll_fail("%s: write failed: %s", t->mpath, errno ? strerror(errno) : "I/O error");
}

/* Test hook for the kill harness: LL_CRASH_AFTER="<what>@<update>" dies by
 * SIGKILL right after <what> (a file name written into save_dir, or "train" /
 * "valid" for a metrics record) at that update, so each point between two
 * writes can be hit on purpose.  Unset: one getenv per save. */
void trn_crash_point(const trainer *t, const char *what) {
    const char *e = getenv("LL_CRASH_AFTER");
    if (!e) return;
    char here[128];
    snprintf(here, sizeof here, "%s@%ld", what, t->ts.update);
    if (!strcmp(e, here)) raise(SIGKILL);
}

int trn_save(trainer *t, const char *name) {
    t->ts.n_streams = t->n_streams;
    for (int i = 0; i < t->n_streams; i++) ll_batcher_state(t->its[i], &t->ts.stream_pos[2 * i], &t->ts.stream_pos[2 * i + 1]);
    t->ts.epoch = t->ts.stream_pos[0];
    t->ts.batch_pos = t->ts.stream_pos[1];
    const double la[LL_LOG_ACC] = {(double)t->acc.ntok, t->acc.loss, t->acc.nll, t->acc.kl, t->acc.lk, t->acc.ddr,
                                   t->acc.ald, t->log_gnorm, (double)t->log_updates, (double)t->log_tokens};
    memcpy(t->ts.log_acc, la, sizeof la);
    if (t->rank != 0) return 0; /* rank 0 alone writes (the state is the same on every rank) */
    if (t->metrics && trn_metrics_done(t)) return -1; /* ts.metrics_records counts them: a resume cuts the log back */
    if (ll_model_save(save_path(t, name), t->m, t->config_text, t->vocab, t->vocab_len, &t->ts)) return -1;
    trn_crash_point(t, name);
    return 0;
}

/* checkpoint_last, and with `numbered` checkpoint_<update> first, last being a
 * hard link to it (same bytes, written once).  Every save writes last, so a
 * killed run resumes from its newest save whatever the validation schedule. */
static int checkpoint_rank0(trainer *t, int numbered);
static int checkpoint(trainer *t, int numbered) {
    ll_dist_train_full_moments(t->dt, 1); /* ZeRO-1: every rank sends its moment shards */
    int rc = t->rank == 0 ? checkpoint_rank0(t, numbered) : 0;
    ll_dist_train_full_moments(t->dt, 0);
    if (!rc) t->saved_update = t->ts.update;
    return rc;
}

static int checkpoint_rank0(trainer *t, int numbered) {
    char last[LL_PATH_MAX + 64];
    snprintf(last, sizeof last, "%s", save_path(t, "checkpoint_last.llm"));
    if (numbered) {
        char name[64];
        snprintf(name, sizeof name, "checkpoint_%ld.llm", t->ts.update);
        if (trn_save(t, name)) return -1;
        if (ll_link_over(t->path, last) == 0)
            trn_crash_point(t, "checkpoint_last.llm");
        else if (trn_save(t, "checkpoint_last.llm"))
            return -1;
        if (ll_ckpt_prune_numbered(t->cfg->save_dir, t->cfg->keep_last) < 0) return -1;
    } else if (trn_save(t, "checkpoint_last.llm")) {
        return -1;
    }
    t->saved_update = t->ts.update;
    return 0;
}

static void fmt_eta(char *buf, size_t n, double s) {
    if (!(s >= 0) || s > 1e8) {
        snprintf(buf, n, "--:--:--");
        return;
    }
    long x = (long)s;
    snprintf(buf, n, "%02ld:%02ld:%02ld", x / 3600, x / 60 % 60, x % 60);
}

/* The stopping rules (max updates, max epochs, patience, the smallest lr) say the run is over. */
static int run_is_over(trainer *t) {
    const ll_config *cfg = t->cfg;
    int64_t epoch, pos;
    ll_batcher_state(t->its[0], &epoch, &pos);
    const int nb = ll_batcher_n_batches(t->its[0]);
    return (cfg->max_updates > 0 && t->ts.update >= cfg->max_updates) ||
           (cfg->max_epochs > 0 && (epoch > cfg->max_epochs || (epoch == cfg->max_epochs && pos >= nb))) ||
           (cfg->patience > 0 && t->ts.bad_valids >= cfg->patience) || trn_lr_too_small(t);
}

/* checkpoint_best must hold the model the state calls best.  A killed run, a
 * fallback past a corrupt last, or a user may leave it missing or older.  A
 * best at or after the resumed update is left alone: replaying the updates
 * since (bit for bit) rewrites it as the first run did.  A missing or older
 * one is rewritten when the resumed state is that model, else the next
 * validation writes a new one. */
static void repair_best(trainer *t) {
    if (t->ts.best_update < 0 || !isfinite(t->ts.best_valid)) return;
    const char *p = save_path(t, "checkpoint_best.llm");
    ll_ckpt *k = ll_ckpt_open(p);
    long u = k ? ll_ckpt_stored_update(k) : -1;
    ll_ckpt_close(k);
    if (u == t->ts.best_update || u >= t->ts.update) return;
    if (t->ts.update == t->ts.best_update && trn_save(t, "checkpoint_best.llm") == 0) {
        ll_warn("%s was missing or stale: rewritten from the resumed update %ld", p, t->ts.update);
        return;
    }
    ll_warn("%s %s, but the run's best is update %ld: the next validation writes a new one", p,
            u >= 0 ? "holds an older update" : "is missing or unreadable", t->ts.best_update);
    t->ts.best_valid = INFINITY;
}

static int setup(trainer *t, const ll_train_opts *o) {
    ll_config *cfg = t->cfg;
    char from[LL_PATH_MAX + 64] = "";
    char *resume_rec = NULL; /* left only by an error return, after which the tool exits */
    ll_dist *host = o->dist ? o->dist : ll_dist_single();
    t->rank = host->rank;
    t->world = host->world;
    t->uf = cfg->update_freq * t->world;
    if (!cfg->save_dir[0] || !cfg->data_dir[0]) /* "" would read as the working directory, or fail as ": ..." */
        return ll_fail("%s is empty: set it to a directory", cfg->save_dir[0] ? "data.dir" : "checkpoint.save_dir");
    if (ll_config_check_ranks(host, cfg)) return -1; /* mismatched ranks: told which keys differ */
    if (cfg->init_from[0] && !o->resume && ll_model_init_from_check(cfg)) return -1; /* (before save_dir exists) */
    /* before data preparation: fail fast (one rank per GPU; fp32 or bf16) */
    ll_backend *be = ll_backend_select(cfg->device, ll_config_act_dtype(cfg), host->local_rank, "train.device");
    if (!be) return -1;
    if (ll_config_act_dtype(cfg) == LL_F32 && ll_backend_set_tf32(be, cfg->tf32))
        ll_log("train.tf32 %s: fp32 matmuls %s", cfg->tf32 ? "true" : "false",
               cfg->tf32 ? "on TF32 tensor cores" : "exact (no TF32)");
    struct stat sd;
    if (t->rank == 0 && (!o->resume || stat(cfg->save_dir, &sd) == 0)) { /* one run per save_dir, before any
                                                                            * checkpoint is read or written, and
                                                                            * before data.dir is (re)prepared */
        int stale = 0;
        if (ll_mkdir_p(cfg->save_dir) || (t->lock_fd = ll_run_lock(cfg->save_dir, &t->prev_writer, &stale)) < 0) return -1;
        if (stale > 0) ll_log("removed %d stale temporary file(s) of PID %ld from %s", stale, t->prev_writer, cfg->save_dir);
    }
    if (!o->resume && ll_ckpt_dir_has_checkpoint(cfg->save_dir)) /* (every rank: rank 0 under the lock) */
        return ll_fail("%s already holds checkpoints: pass --resume to continue that run, or choose another "
                       "checkpoint.save_dir", cfg->save_dir);
    if (t->rank == 0) { /* several ranks: rank 0 prepares, the others wait; data.dir's lock is held to the
                          * opening of the data, so no other llprep or lltrain prepares it in between */
        if (ll_data_lock_take(&t->data_lock, cfg->data_dir)) return -1;
        t->data_locked = 1;
        if (!ll_data_is_prepared(cfg)) {
            ll_log("preparing data in %s ...", cfg->data_dir);
            if (ll_prepare_data(cfg)) return -1;
        }
    }
    if (t->world > 1) { /* however long preparing takes: no watchdog here */
        const double to = host->timeout_s;
        host->timeout_s = 0;
        host->barrier(host);
        host->timeout_s = to;
    }
    char spm_path[LL_PATH_MAX + 32];
    snprintf(spm_path, sizeof spm_path, "%s/spm.model", cfg->data_dir);
    if (!(t->spm = ll_spm_load(spm_path))) return -1;
    t->vocab = ll_spm_proto(t->spm, &t->vocab_len);
    ll_data_info *di = ll_calloc(1, sizeof *di); /* the manifest hash: what the checkpoints were trained on */
    const int di_rc = ll_data_info_read(di, cfg->data_dir);
    const uint64_t data_hash = di->hash;
    free(di);
    if (di_rc) return -1;
    if (ll_dataset_open(&t->train, cfg, "train")) return -1; /* verifies every token id */
    if (t->train.vocab_size != ll_spm_vocab_size(t->spm))
        return ll_fail("%s: %d pieces, but the manifest's token files were made for %d: run llprep again", spm_path,
                       ll_spm_vocab_size(t->spm), t->train.vocab_size);
    t->have_valid = cfg->n_valid > 0;
    if (t->have_valid && ll_dataset_open(&t->valid, cfg, "valid")) return -1;
    if (t->world > 1) host->barrier(host); /* every rank has opened the data: rank 0 may let data.dir go */
    if (t->data_locked) ll_data_lock_release(&t->data_lock, 0), t->data_locked = 0;
    if (strcmp(cfg->best_metric, "loss") && !cfg->valid_bleu)
        return ll_fail("train.best_metric=%s needs train.valid_bleu: true", cfg->best_metric);
    if (cfg->valid_translations && !cfg->valid_bleu)
        return ll_fail("train.valid_translations needs train.valid_bleu: true (the validation translations)");
    if (cfg->lr_shrink < 1 && !t->have_valid)
        return ll_fail("train.lr_shrink %g needs validation: no data.valid corpus", (double)cfg->lr_shrink);
    t->n_langs = ll_config_langs(cfg, t->langs);

    ll_hparams hp;
    ll_hparams_from_config(&hp, cfg, ll_spm_vocab_size(t->spm));
    if (o->op_stats) t->counted = be = ll_backend_counting(be); /* no CPU team: it is not ll_backend_cpu() */
    if (!(t->dist = ll_dist_for_backend(host, be, !strcmp(cfg->dist_backend, "nccl")))) return -1;
    t->m = ll_model_new(&hp, be);
    ll_model_init(t->m, (uint64_t)cfg->seed);
    if (cfg->init_from[0] && !o->resume) { /* (a resumed run's parameters are its checkpoint's) */
        if (ll_model_init_from(t->m, cfg->init_from, t->vocab, t->vocab_len)) return -1;
        if (t->rank == 0)
            ll_log("train.init_from: parameters from %s; the optimizer, learning-rate schedule, update count and "
                   "data position start fresh", cfg->init_from);
    }
    /* activations: one arena block sized by a dry run at the largest batch (+ slack for
     * shorter batches' alignment), so no step allocates backend memory */
    size_t act = ll_train_arena_bytes(cfg);
    ll_arena_reserve(&t->m->arena, act + act / 16 + (1 << 20));
    t->latent = ll_latent_on(t->m, 0) || ll_latent_on(t->m, 1);
    t->m->obj = (ll_objective){.ddr_alpha = cfg->ddr_alpha, .ald_weight = cfg->ald_weight, .ald_p = cfg->ald_p,
                               .ald_tau = cfg->ald_tau};
    if (cfg->ddr_alpha > 0) t->m->obj.ddr_dec_ctl = ll_calloc(hp.Ld ? hp.Ld : 1, sizeof(ll_layer_ctl));
    t->m->recompute = cfg->checkpoint_activations; /* (replicas copy it) */
    if (t->m->recompute && t->rank == 0)
        ll_log("train.checkpoint_activations true: each layer's input kept, its forward run again in the backward");
    if (t->latent) ll_latent_ctx_init(&t->lat, cfg, t->m);
    ll_adam_init(&t->opt, t->m, cfg);
    if (ll_adam_freeze(&t->opt, t->m, cfg->freeze, t->rank == 0)) return -1;
    if (t->opt.ema && t->rank == 0)
        ll_log("train.ema_decay %g: a moving average of the weights (averaging from update %d); validation, "
               "checkpoint_best and the checkpoints' models use it (the raw weights are kept for --resume)",
               (double)cfg->ema_decay, cfg->ema_start_update);
    if (ll_backend_is_cpu(be)) /* after m->obj: replicas copy it */
        t->team = ll_step_team_new(t->m, cfg->batch_workers > 0 ? cfg->batch_workers : ll_get_threads());
    /* each step one CUDA graph: not with several ranks, whose gradient hooks queue NCCL calls mid-backward */
    t->m->graphs = cfg->cuda_graphs && be->graph_begin && t->world == 1;
    if (t->m->graphs) ll_log("train.cuda_graphs true: each batch's forward and backward runs as one CUDA graph");
    if (!cfg->cuda_graphs) t->m->decode_graphs = -1; /* (validation BLEU's search steps too) */
    const int drops = cfg->enc_layerdrop > 0 || cfg->dec_layerdrop > 0 || cfg->cad_p_net > 0 || cfg->cad_p_net_above > 0;
    const char *conds = getenv("LL_CUDA_GRAPH_CONDS"); /* 0: A/B against a capture per draw */
    if (t->m->graphs && drops && be->cond_if && !(conds && !strcmp(conds, "0"))) {
        t->m->drop_conds = 1;
        ll_log("LayerDrop / cross-attention drop in the graphs as conditional nodes: each step's draw is uploaded "
               "with its batch, one graph per batch shape serves every draw");
    }
    if (cfg->cuda_graphs && be->graph_begin && t->world > 1)
        ll_log("train.cuda_graphs: off with %d ranks (their reductions start inside the backward)", t->world);
    ll_schedule_from_config(&t->sched, cfg);
    t->config_text = ll_config_dump(cfg);
    t->ts = (ll_train_state){.best_valid = INFINITY, .best_update = -1, .metrics_records = 0, .opt = &t->opt,
                             .data_hash = data_hash};
    /* every_pair (auto with latent layers): every update visits every pair, one iterator each */
    t->every_pair = !strcmp(cfg->sampling, "every_pair") || (t->latent && !strcmp(cfg->sampling, "auto"));
    if (t->latent && !t->every_pair && t->train.n_pairs > 1)
        return ll_fail("data.sampling %s: latent depth needs every_pair (or auto)", cfg->sampling);
    if (t->every_pair) {
        t->n_streams = t->train.n_pairs;
        for (int p = 0; p < t->train.n_pairs; p++) {
            t->sub[p] = t->train;
            t->sub[p].n_pairs = 1;
            t->sub[p].pairs[0] = t->train.pairs[p];
            t->its[p] = ll_batcher_new(&t->sub[p], cfg->max_tokens, (uint64_t)cfg->seed + 7919u * p, 1);
            if (cfg->pad_to_multiple > 1) ll_batcher_pad_to(t->its[p], cfg->pad_to_multiple);
        }
    } else {
        t->n_streams = 1;
        if (!(t->its[0] = ll_batcher_from_config(&t->train, cfg, 1))) return -1;
    }
    /* each batch shape is a step graph: shapes beyond the kept graphs are captured again and again */
    if (t->m->graphs) {
        int shapes = 0;
        for (int s = 0; s < t->n_streams; s++) shapes += ll_batcher_shapes(t->its[s]);
        const int kept = ll_backend_graphs_kept(be);
        ll_log("training batches: %d shapes (sentences x source x target length) per epoch, each one CUDA graph; "
               "%d graphs kept",
               shapes, kept);
        if (kept > 0 && shapes > kept)
            ll_warn("the training batches have %d shapes, more than the %d CUDA graphs kept: steps will be captured "
                    "again and again (a larger data.pad_to_multiple makes fewer shapes)",
                    shapes, kept);
    }

    if (o->resume) {
        int r = ll_resume_load(cfg->save_dir, t->m, &t->ts, from, sizeof from);
        if (r < 0) return -1;
        if (r == 0)
            return ll_fail("--resume: %s does not exist and %s holds no other checkpoint",
                           save_path(t, "checkpoint_last.llm"), cfg->save_dir);
        /* another vocabulary is refused; changed data or settings are listed (and logged below) */
        if (ll_resume_check(from, cfg, t->vocab, t->vocab_len, &t->ts, data_hash, t->rank == 0, &resume_rec))
            return -1;
        t->ts.data_hash = data_hash;
        if (t->ts.n_streams != t->n_streams)
            return ll_fail("%s: saved with %d data streams, this config has %d", from, t->ts.n_streams, t->n_streams);
        for (int i = 0; i < t->n_streams; i++) {
            const int nb = ll_batcher_epoch_batches(t->its[i], t->ts.stream_pos[2 * i]);
            if (t->ts.stream_pos[2 * i + 1] > nb)
                return ll_fail("%s: data position %lld is past the %d batches of this data (corrupt state, or the "
                               "data changed)", from, (long long)t->ts.stream_pos[2 * i + 1], nb);
            ll_batcher_seek(t->its[i], t->ts.stream_pos[2 * i], t->ts.stream_pos[2 * i + 1]);
        }
        if (t->ts.finished && run_is_over(t)) { /* touch nothing */
            free(resume_rec);
            fprintf(stderr, "lltrain: the run in %s already finished at update %ld; nothing to do\n", cfg->save_dir,
                    t->ts.update);
            return 1;
        }
        const double *la = t->ts.log_acc;
        t->acc = (update_stats){.ntok = (long)la[0], .loss = la[1], .nll = la[2], .kl = la[3], .lk = la[4],
                                .ddr = la[5], .ald = la[6]};
        t->log_gnorm = la[7];
        t->log_updates = (long)la[8];
        t->log_tokens = (long)la[9];
        t->saved_update = t->ts.update;
        ll_log("resumed from %s at update %ld (epoch %lld)", from, t->ts.update, (long long)t->ts.stream_pos[0]);
        /* checkpoint.keep_best: files of the updates to come are the interrupted run's; the replay writes them */
        if (cfg->keep_best > 0 && t->rank == 0 &&
            ll_ckpt_prune_best(cfg->save_dir, cfg->best_metric, cfg->keep_best, t->ts.update) < 0)
            return -1;
    }
    if (ll_mkdir_p(cfg->save_dir)) return -1;
    char *mpath = t->mpath;
    if (cfg->metrics_log[0])
        snprintf(mpath, sizeof t->mpath, "%s", cfg->metrics_log);
    else
        snprintf(mpath, sizeof t->mpath, "%s/metrics.jsonl", cfg->save_dir);
    if (t->rank == 0 && ll_metrics_log_check(mpath, cfg, o->resume ? from : NULL)) return -1;
    if (t->rank == 0 && (t->metrics_lock_fd = ll_metrics_lock(mpath)) < 0) return -1; /* before it is cut or replaced */
    if (o->resume && t->rank == 0) {
        repair_best(t);
        int kept = ll_metrics_truncate(mpath, t->ts.update, t->ts.metrics_records); /* written after the state */
        if (kept < 0) return -1;
        t->ts.metrics_records = kept;
    }
    t->ts.finished = 0;
    if (t->rank != 0) snprintf(mpath, sizeof t->mpath, "/dev/null"); /* rank 0 alone logs */
    t->metrics = fopen(mpath, o->resume && t->rank == 0 ? "a" : "w");
    if (!t->metrics) return ll_fail("%s: cannot write metrics log: %s", mpath, strerror(errno));
    if (resume_rec) { /* what changed at this resume, counted like every record */
        fprintf(t->metrics, "%s\n", resume_rec);
        free(resume_rec);
        resume_rec = NULL;
        t->ts.metrics_records++;
        if (trn_metrics_done(t)) return -1;
    }
    if (o->resume) { /* resumed from best or a numbered one: checkpoint_last (and the numbered one due at this
                      * update, if it never got written) as the interrupted run would have left them */
        const long U = t->ts.update;
        char *np = cfg->save_interval > 0 && U > 0 && U % cfg->save_interval == 0 ? ll_ckpt_numbered_path(cfg->save_dir, U) : NULL;
        struct stat st;
        const int missing = np && stat(np, &st) != 0;
        free(np);
        if ((strcmp(from, save_path(t, "checkpoint_last.llm")) || missing) && checkpoint(t, missing)) return -1;
        if (ll_ckpt_prune_numbered(cfg->save_dir, cfg->keep_last) < 0) return -1; /* killed before its prune */
    }
    ll_log("model: %d+%d layers, d=%d, ffn=%d, heads=%d, vocab %d, %s-norm%s%s, %zu parameters; %d threads, %d batch workers, BLAS core %s, ll kernels %s",
           hp.Le, hp.Ld, hp.C, hp.F, hp.H, hp.V, hp.post_norm ? "post" : "pre", hp.latent_enc ? ", latent encoder" : "",
           hp.latent_dec ? ", latent decoder" : "", ll_model_count_params(t->m), ll_get_threads(), ll_step_team_size(t->team),
           ll_blas_core(), ll_cpu_kernels());
    t->dt = ll_dist_train_new(t->dist, t->m, &t->opt, cfg); /* after the resume: rank 0's state goes to all */
    ll_dist_train_describe(t->dt, cfg, t->uf);
    /* what one update sees, so that runs can be matched at equal data (docs/methods.md) */
    if (t->every_pair)
        ll_log("data per update: one batch of each of the %d pairs x update_freq %d (data.sampling every_pair)",
               t->n_streams, t->uf);
    else
        ll_log("data per update: %d batch(es) drawn across %d pair(s) (data.sampling %s)", t->uf,
               t->train.n_pairs, !strcmp(cfg->sampling, "auto") ? "temperature" : cfg->sampling);
    char weights[512] = "";
    for (int k = 0, n = 0; !t->every_pair && k < cfg->n_train && k < t->train.n_pairs; k++)
        if (ll_corpus_weight(&cfg->train[k]) != 1.0f && n < (int)sizeof weights - 48)
            n += snprintf(weights + n, sizeof weights - (size_t)n, "%sdata.train[%d] x%g", n ? ", " : "", k,
                          (double)cfg->train[k].weight);
    if (weights[0])
        ll_log("corpus weights: %s; an epoch is %d batches", weights, ll_batcher_n_batches(t->its[0]));
    if (t->train.n_pairs > 0 && t->train.pairs[0].n_samples > 0)
        ll_log("subword regularization: epoch e reads sampled segmentation ((e - 1) mod %d) + 1 of the training data "
               "(%s; data.spm_samples %d, data.spm_alpha %g); validation the standard one",
               ll_batcher_segmentations(t->its[0]),
               t->train.pairs[0].sample_sides == 3 ? "both sides" : t->train.pairs[0].sample_sides == 1 ? "the source side" : "the target side",
               cfg->spm_samples, (double)cfg->spm_alpha);
    return 0;
}

static void teardown(trainer *t) {
    if (t->data_locked) ll_data_lock_release(&t->data_lock, 1); /* (setup failed while holding it) */
    if (t->lock_fd > 0) close(t->lock_fd);
    if (t->metrics_lock_fd > 0) close(t->metrics_lock_fd);
    if (t->metrics) fclose(t->metrics);
    ll_dist_train_free(t->dt);
    if (t->dist && t->dist->host != t->dist) t->dist->finalize(t->dist); /* NCCL over the host's ranks */
    for (int i = 0; i < t->n_streams; i++)
        if (t->its[i]) ll_batcher_free(t->its[i]);
    ll_step_team_free(t->team);
    if (t->m && t->m->graphs && t->m->be->graph_stats) {
        ll_graph_stats g;
        t->m->be->graph_stats(t->m->be, &g);
        /* validation BLEU's search steps: their own line */
        const ll_graph_stats *s = &t->m->dec_graph_st, none = {0};
        ll_graph_stats_add(&g, &none, s);
        if (s->launches)
            ll_log("CUDA graphs: %llu validation search steps, each one graph: %llu replayed as kept, %llu captured",
                   (unsigned long long)s->launches, (unsigned long long)s->replays, (unsigned long long)s->captures);
        if (g.launches)
            ll_log("CUDA graphs: %llu steps, each one graph: %llu replayed as kept, %llu captured (%.0f nodes and %.0f "
                   "conditional nodes on average; %llu built, %llu updated in place, %llu updates refused)",
                   (unsigned long long)g.launches, (unsigned long long)g.replays, (unsigned long long)g.captures,
                   g.captures ? (double)g.nodes / (double)g.captures : 0.0,
                   g.captures ? (double)g.conditionals / (double)g.captures : 0.0, (unsigned long long)g.instantiations,
                   (unsigned long long)g.updates, (unsigned long long)g.refusals);
        if (g.unnamed)
            ll_log("CUDA graphs: the runtime did not name the kernels of %llu captures, so none of them was updated in "
                   "place (each was built anew)",
                   (unsigned long long)g.unnamed);
        if (g.tune_drops)
            ll_log("CUDA graphs: the kept graphs were dropped %llu times (LL_CUDA_GEMM_TUNE switched a matmul's "
                   "algorithm after they were captured)",
                   (unsigned long long)g.tune_drops);
    }
    if (t->m) {
        uint64_t tuned = 0, switched = 0;
        ll_backend_gemm_tune_stats(t->m->be, &tuned, &switched);
        if (tuned)
            ll_log("cuBLASLt autotune: %llu matmul shapes timed, %llu of them run another algorithm than the "
                   "heuristic's first",
                   (unsigned long long)tuned, (unsigned long long)switched);
        free(t->m->obj.ddr_dec_ctl);
        ll_adam_free(&t->opt, t->m);
        ll_model_free(t->m);
    }
    if (t->have_valid) ll_dataset_close(&t->valid);
    ll_dataset_close(&t->train);
    if (t->spm) ll_spm_free(t->spm);
    free(t->config_text);
    ll_backend_counting_free(t->counted);
}

/* ---- non-finite updates ----
 * The one place that decides what a bad update does.  The update was not
 * applied (a non-finite loss never reaches Adam; ll_adam_step refuses a
 * non-finite gradient norm), so parameters, moments and step counts are as
 * before it.  train.max_bad_updates in a row stop the run with an error and
 * without writing anything, so the last checkpoint stays the last good state. */
static int skip_bad_update(trainer *t, const update_stats *u, double gnorm) {
    const char *what = !isfinite(u->loss) ? "loss" : "gradient norm";
    double v = !isfinite(u->loss) ? u->loss : gnorm;
    t->bad_streak++;
    ll_warn("update %ld: %s is %g: update skipped, parameters unchanged (%d in a row; train.max_bad_updates %d)",
            t->ts.update, what, v, t->bad_streak, t->cfg->max_bad_updates);
    fprintf(t->metrics, "{\"type\":\"skip\",\"update\":%ld,\"reason\":\"%s\",\"in_a_row\":%d}\n", t->ts.update,
            what, t->bad_streak);
    t->ts.metrics_records++;
    if (trn_metrics_done(t)) return -1;
    if (t->bad_streak >= t->cfg->max_bad_updates)
        return ll_fail("update %ld: %d updates in a row had a non-finite loss or gradient norm (train.max_bad_updates); "
                       "stopped without saving: %s/checkpoint_last.llm (update %ld) is the last good state; lower "
                       "train.lr or set train.clip_norm",
                       t->ts.update, t->bad_streak, t->cfg->save_dir, t->saved_update);
    return 0;
}

/* A spike (train.spike_zscore_*): the backend skipped the update as it skips a bad one, but a
 * spike is no failure: logged and recorded, not counted towards train.max_bad_updates. */
static int skip_spike(trainer *t, const update_stats *u, const double *st) {
    t->spikes++;
    const double zl = st[LL_ST_Z_LOSS], zg = st[LL_ST_Z_GNORM], tl = t->cfg->spike_zscore_loss,
                 tg = t->cfg->spike_zscore_gnorm, loss = u->loss / (u->ntok ? u->ntok : 1) / M_LN2;
    const int by_loss = tl > 0 && zl > tl;
    ll_warn("update %ld: a %s spike (z-score %.2f > %g, train.spike_zscore_%s): update skipped, parameters "
            "unchanged; loss %.4f (z-score %.2f), gradient norm %.4g (z-score %.2f), %ld target tokens; %ld spike%s so "
            "far",
            t->ts.update, by_loss ? "loss" : "gradient-norm", by_loss ? zl : zg, by_loss ? tl : tg,
            by_loss ? "loss" : "gnorm", loss, zl, st[LL_ST_GNORM], zg, u->ntok, t->spikes, t->spikes == 1 ? "" : "s");
    fprintf(t->metrics,
            "{\"type\":\"skip\",\"update\":%ld,\"reason\":\"spike\",\"loss\":%.6f,\"z_loss\":%.4f,\"gnorm\":%.6g,"
            "\"z_gnorm\":%.4f,\"tokens\":%ld}\n",
            t->ts.update, loss, zl, st[LL_ST_GNORM], zg, u->ntok);
    t->ts.metrics_records++;
    return trn_metrics_done(t) ? -1 : 0;
}

/* Validation is due after the update just done (valid_interval 0: at epoch ends). */
static int valid_due_at(trainer *t, long update) {
    int64_t epoch, pos;
    ll_batcher_state(t->its[0], &epoch, &pos);
    const int vi = t->cfg->valid_interval;
    return (vi > 0 && update % vi == 0) || (vi == 0 && pos >= ll_batcher_n_batches(t->its[0]));
}
static int valid_due(trainer *t) { return valid_due_at(t, t->ts.update); }

/* An update's statistics, taken in: Adam's step counts, the update count, the
 * log's sums or a skipped update.  The update's log record, validation and
 * checkpoint (if due) follow in the loop. */
static int absorb_update(trainer *t, const double *st, long ntok) {
    ll_adam_sync(&t->opt, st);
    t->ts.update++;
    update_stats u = {.ntok = ntok};
    trn_add_stats(&u, st);
    if (st[LL_ST_SKIP] != 0 && st[LL_ST_SPIKE] != 0 && isfinite(u.loss) && isfinite(st[LL_ST_GNORM]))
        return skip_spike(t, &u, st);
    if (st[LL_ST_SKIP] != 0) /* the backend skipped it: non-finite loss or gradient norm */
        return skip_bad_update(t, &u, st[LL_ST_GNORM]);
    t->bad_streak = 0;
    t->log_updates++;
    t->log_tokens += ntok;
    t->tps_tokens += ntok;
    t->acc.ntok += ntok;
    trn_add_stats(&t->acc, st);
    t->log_gnorm += st[LL_ST_GNORM];
    return 0;
}

/* The same for the update whose statistics ll_model_stats_start began to read
 * (*late_ntok its tokens; -1 after). */
static int absorb_late(trainer *t, long *late_ntok) {
    double st[LL_ST_N];
    ll_model_stats_finish(t->m, st);
    const long ntok = *late_ntok;
    *late_ntok = -1;
    return absorb_update(t, st, ntok);
}

int ll_train(ll_config *cfg, const ll_train_opts *o) {
    trainer t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    int rc = setup(&t, o);
    if (rc) {
        teardown(&t);
        return rc < 0 ? rc : 0; /* 1: a finished run, nothing to do */
    }
    ll_batch b;
    memset(&b, 0, sizeof b);
    const int nb = ll_batcher_n_batches(t.its[0]);
    const long max_updates = cfg->max_updates > 0 ? cfg->max_updates : 0;
    const long max_epochs = cfg->max_epochs;
    const int I = t.latent ? cfg->latent_inner_steps : 1;
    double t_start = ll_now(), t_log = t_start;
    long start_update = t.ts.update;
    update_stats *acc = &t.acc;
    real *snap = t.latent ? ll_malloc(t.m->snap_bytes) : NULL; /* host copy of the latent snapshot */
    int64_t epoch, pos;
    int stop = 0;
    int stop_sig = 0; /* several ranks: the signal all ranks agreed on (a rank may see g_signal earlier) */
    int out_of_time = 0; /* train.max_minutes passed (on any rank), after this update */
    ll_train_signals sigs;
    ll_train_signals_catch(&sigs, t.world);
    /* An update whose record, validation and checkpoint are not due has its
     * statistics read while the next update runs (ll_model_stats_start): the
     * host queues update u + 1 before it waits for u, so it never drains the
     * device between such updates.  late_ntok >= 0: such a read is in flight,
     * and t.ts.update does not count that update yet. */
    long late_ntok = -1;
    for (;;) {
        ll_batcher_state(t.its[0], &epoch, &pos);
        const long q = t.ts.update + (late_ntok >= 0); /* the update about to be queued */
        const int low_lr = cfg->stop_min_lr > 0 && q >= cfg->warmup_updates && trn_lr_at(&t, q) < cfg->stop_min_lr;
        if (late_ntok >= 0 && ((t.world > 1 ? stop_sig : ll_train_signal()) || stop || out_of_time || low_lr ||
                               (max_updates && q >= max_updates) ||
                               (max_epochs && (epoch > max_epochs || (epoch == max_epochs && pos >= nb))))) {
            if ((rc = absorb_late(&t, &late_ntok))) goto out; /* the loop ends below: the update in flight first */
        }
        if ((t.world > 1 ? stop_sig : ll_train_signal()) || stop || (max_updates && t.ts.update >= max_updates)) break;
        if (out_of_time) {
            ll_log("train.max_minutes %g reached after %ld updates", (double)cfg->max_minutes, t.ts.update);
            break;
        }
        if (max_epochs && (epoch > max_epochs || (epoch == max_epochs && pos >= nb))) break; /* epochs are 1-based */
        if (low_lr) {
            ll_log("stop: the learning rate %.3e is below train.stop_min_lr %g", trn_lr_at(&t, q), (double)cfg->stop_min_lr);
            break;
        }
        double lr = trn_lr_at(&t, q);
        if (t.counted) t.tally.before = *ll_backend_counts(t.counted);
        ll_model_zero_grads(t.m);
        ll_model_stats_zero(t.m);
        long ntok = 0, own = 0;
        t.dist->update = q;
        if ((rc = trn_accumulate(&t, q, &b, &ntok, &own))) goto out;
        /* every rank learns of a signal, and of any rank's clock passing
         * train.max_minutes, at the same update, so all stop together */
        int sig = ll_train_signal();
        out_of_time = cfg->max_minutes > 0 && ll_now() - t_start >= 60.0 * cfg->max_minutes;
        if ((rc = ll_dist_train_sync(t.dt, own, ntok, &sig, &out_of_time))) goto out;
        if (sig) ll_train_signal_raise(sig);
        if (t.world > 1) stop_sig = sig;
        /* the logits take a step every I updates, from this update's gradient only */
        double lr_phi = -1;
        if (t.latent && (q + 1) % I == 0)
            lr_phi = cfg->latent_logits_lr > 0 ? lr * cfg->latent_logits_lr / cfg->lr : lr;
        ll_dist_train_step(t.dt, lr, lr_phi, 1.0 / (ntok ? ntok : 1), cfg->clip_norm); /* sums the ranks' gradients */
        ll_adam_ema_step(&t.opt, t.m, q + 1); /* (every rank: each holds all the weights after the step) */
        const int log_now = (q + 1) % cfg->log_interval == 0 || (max_updates && q + 1 == max_updates);
        if (t.latent && log_now) { /* E[L] and the logits/samples ride along with the stats */
            ll_latent_depth(t.m, &t.lat);
            ll_model_snapshot(t.m);
        }
        /* the previous update's statistics, read while this one was queued */
        if (late_ntok >= 0 && (rc = absorb_late(&t, &late_ntok))) goto out;
        /* nothing due after this update (--op-stats counts each update's read as its own) */
        if (!t.counted && !log_now && !valid_due_at(&t, q + 1) &&
            !(cfg->save_interval > 0 && (q + 1) % cfg->save_interval == 0)) {
            ll_model_stats_start(t.m);
            late_ntok = ntok;
            continue;
        }
        /* the update's one backend-to-host read, waited for: its record, validation or checkpoint follow */
        double st[LL_ST_N];
        ll_model_stats_read(t.m, st, t.latent && log_now ? snap : NULL);
        if (t.counted) trn_tally_update(&t); /* before logging, checkpoints and validation */
        if ((rc = absorb_update(&t, st, ntok))) goto out;
        if (t.log_updates > 0 && log_now) {
            double now = ll_now();
            double tps = t.tps_tokens / (now - t_log);
            double per_update = (now - t_start) / (double)(t.ts.update - start_update);
            ll_batcher_state(t.its[0], &epoch, &pos);
            double remaining = -1;
            if (max_updates)
                remaining = (max_updates - t.ts.update) * per_update;
            else if (max_epochs)
                remaining = ((max_epochs - epoch) * (double)nb + nb - pos) / t.uf * per_update;
            if (cfg->max_minutes > 0) { /* the time budget may end the run first */
                const double left = 60.0 * cfg->max_minutes - (now - t_start);
                if (remaining < 0 || left < remaining) remaining = left > 0 ? left : 0;
            }
            char eta[32], depth[96] = "";
            fmt_eta(eta, sizeof eta, remaining);
            if (cfg->ddr_alpha > 0 || cfg->ald_weight > 0)
                snprintf(depth, sizeof depth, " | ddr %.3f | ald %.3f", acc->ddr / acc->ntok / M_LN2,
                         acc->ald / acc->ntok / M_LN2);
            if (t.latent)
                snprintf(depth, sizeof depth, " | E[L] enc %.2f dec %.2f | kl %.3f",
                         ll_latent_on(t.m, 0) ? st[LL_ST_DEPTH_ENC] : (double)t.m->hp.Le,
                         ll_latent_on(t.m, 1) ? st[LL_ST_DEPTH_DEC] : (double)t.m->hp.Ld, acc->kl / acc->ntok / M_LN2);
            double L = acc->loss / acc->ntok / M_LN2, N = acc->nll / acc->ntok / M_LN2;
            /* worse than a uniform guess over the vocabulary after warm-up (or twice
             * that at any time): the run is diverging (nll can even read 0 then: all
             * mass on one token while the smoothing term explodes) */
            const double uniform = log2(t.m->hp.V);
            if (t.rank == 0 && (!(L <= 2 * uniform) || (t.ts.update > cfg->warmup_updates && L > uniform + 1)))
                ll_warn("update %ld: loss %.4g bits/token is above log2(vocabulary) = %.2f, a uniform guess: training "
                        "is diverging; lower train.lr or set train.clip_norm",
                        t.ts.update, L, uniform);
            if (ll_verbosity > 0)
                fprintf(stderr,
                    "epoch %lld | %5.1f%% | update %ld | loss %.3f | nll %.3f | ppl %.2f | lr %.3e | gnorm %.3f | "
                    "tok/s %.0f | tok/upd %.0f%s | ETA %s\n",
                    (long long)epoch, 100.0 * pos / (nb ? nb : 1), t.ts.update, L, N, pow(2, N), lr,
                    t.log_gnorm / t.log_updates, tps, (double)t.log_tokens / t.log_updates, depth, eta);
            fprintf(t.metrics,
                    "{\"type\":\"train\",\"update\":%ld,\"epoch\":%lld,\"epoch_pct\":%.2f,\"loss\":%.6f,\"nll\":%.6f,"
                    "\"ppl\":%.4f,\"lr\":%.6e,\"gnorm\":%.5f,\"tokens_per_s\":%.1f,\"tokens_per_update\":%.1f,"
                    "\"wall\":%.2f",
                    t.ts.update, (long long)epoch, 100.0 * pos / (nb ? nb : 1), L, N, pow(2, N), lr,
                    t.log_gnorm / t.log_updates, tps, (double)t.log_tokens / t.log_updates, now - t_start);
            if (cfg->ddr_alpha > 0 || cfg->ald_weight > 0)
                fprintf(t.metrics, ",\"ddr\":%.6f,\"ald\":%.6f", acc->ddr / acc->ntok / M_LN2, acc->ald / acc->ntok / M_LN2);
            if (t.latent) {
                fprintf(t.metrics, ",\"kl\":%.6g,\"lk\":%.6g", acc->kl / acc->ntok / M_LN2, acc->lk / acc->ntok / M_LN2);
                trn_log_latent_json(&t, snap, st);
            }
            fprintf(t.metrics, "}\n");
            t.ts.metrics_records++;
            if ((rc = trn_metrics_done(&t))) goto out;
            trn_crash_point(&t, "train");
            t_log = now;
            t.log_tokens = t.log_updates = t.tps_tokens = 0;
            t.log_gnorm = 0;
            *acc = (update_stats){0};
        }
        /* validation (and checkpoint_best) first, then checkpoint_last (+ numbered) */
        int validated = 0;
        if (valid_due(&t)) {
            if ((rc = trn_run_validation(&t, ll_now() - t_start, &stop))) goto out;
            validated = t.have_valid;
        }
        int numbered = cfg->save_interval > 0 && t.ts.update % cfg->save_interval == 0;
        /* not during a run of skipped updates: if it ends the run, the last good checkpoint stays as it was */
        if (t.bad_streak == 0 && (numbered || validated) && (rc = checkpoint(&t, numbered))) goto out;
    }
    if (t.world > 1 ? stop_sig : ll_train_signal()) {
        if (t.saved_update != t.ts.update && (rc = checkpoint(&t, 0))) goto out;
        if (t.rank == 0) /* the same on every rank: once */
            fprintf(stderr, "lltrain: stopped by signal %d after update %ld; %s/checkpoint_last.llm holds it. To resume:\n  %s\n",
                ll_train_signal(), t.ts.update, cfg->save_dir,
                o->resume_command ? o->resume_command : "lltrain --config <the same config and --set options> --resume");
        goto out;
    }
    /* final validation unless the last update just did it, then the final checkpoint */
    if (!stop && (t.ts.update == 0 || !valid_due(&t))) /* a checkpoint at U includes U's validation */
        rc = trn_run_validation(&t, ll_now() - t_start, &stop);
    t.ts.finished = 1;
    if (!rc) rc = checkpoint(&t, 0);
    if (!rc && t.spikes)
        ll_log("%ld update%s skipped as spikes in this run (train.spike_zscore_*; metrics: \"reason\":\"spike\")",
               t.spikes, t.spikes == 1 ? "" : "s");
    if (!rc) ll_log("done: %ld updates; checkpoints in %s", t.ts.update, cfg->save_dir);
    if (!rc && t.world > 1)
        ll_log("rank 0 waited %.2f s for collectives (%.1f%% of %.1f s of training)", ll_dist_train_wait_seconds(t.dt),
               100 * ll_dist_train_wait_seconds(t.dt) / (ll_now() - t_start), ll_now() - t_start);
    if (!rc && t.counted) trn_print_op_stats(&t);
out:
    free(snap);
    ll_train_signals_restore(&sigs);
    ll_batch_free(&b);
    teardown(&t);
    return rc;
}
