/* The training loop's state and the pieces of one update that live outside
 * src/train/trainer.c (src/train/update.c): private to src/train. */
#ifndef LL_TRAINER_IMPL_H
#define LL_TRAINER_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "ll/dist_train.h"
#include "ll/latent.h"
#include "ll/train.h"

/* --op-stats: what crosses between host and backend per update. */
typedef struct {
    long updates;
    uint64_t calls, min_calls, max_calls, max_reads, max_uploads;
    uint64_t launches; /* CUDA stream operations of the calls (counting.c's rules) */
    uint64_t per_op[sizeof(ll_backend) / sizeof(void *)];
    ll_op_counts before;
} op_tally;

typedef struct {
    long ntok;
    double loss, nll, kl, lk, ddr, ald;
} update_stats;

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
    ll_dataset sub[LL_MAX_CORPORA]; /* one pair each (latent mode) */
    int have_valid, latent;
    int every_pair; /* one iterator per pair, one batch of each per update (data.sampling) */
    ll_step_team *team; /* thread data parallelism (NULL: one worker) */
    int n_streams;
    ll_batcher *its[LL_MAX_CORPORA];
    ll_latent_ctx lat;
    ll_train_state ts;
    FILE *metrics;
    char mpath[LL_PATH_MAX + 64]; /* its name, for errors */
    long saved_update; /* update of the newest checkpoint_last on disk */
    int bad_streak;    /* consecutive skipped (non-finite) updates */
    long spikes;       /* updates skipped as spikes (train.spike_zscore_*) in this process */
    /* the progress line's running sums since the last one (kept in checkpoints so
     * a resumed run logs the same records as an uninterrupted one) */
    update_stats acc;
    double log_gnorm;
    long log_updates, log_tokens;
    long tps_tokens; /* tokens since the last record in this process (log_tokens resumes a checkpoint's: tok/s) */
    char path[LL_PATH_MAX + 64];
    char langs[LL_MAX_CORPORA * 4][LL_LANG_MAX];
    int n_langs;
    ll_backend *counted; /* --op-stats: the counting backend */
    op_tally tally;
    /* multi-process training (src/train/dist_train.c): rank 0 alone writes */
    ll_dist *dist;     /* collectives on the backend's memory */
    ll_dist_train *dt;
    int rank, world;
    int lock_fd;       /* rank 0: the save_dir lock (ll_run_lock), held until teardown */
    int metrics_lock_fd; /* rank 0: train.metrics_log's lock (ll_metrics_lock; 0: none), held until teardown */
    long prev_writer;  /* the PID that held it before (its temporaries are removed) */
    ll_data_lock data_lock; /* rank 0: data.dir's lock, from the check that the data are current to their opening */
    int data_locked;
    int uf;            /* micro-steps of a global update: update_freq x world */
} trainer;

/* --op-stats: the update just done into t->tally; the table at the end */
void trn_tally_update(trainer *t);
void trn_print_op_stats(const trainer *t);
/* the log's sums from a statistics read */
void trn_add_stats(update_stats *u, const double *st);
/* forward/backward of every job of update `upd` (see update.c) */
int trn_accumulate(trainer *t, long upd, ll_batch *b, long *ntok, long *own);
/* the latent part of a train record, from the snapshot read with the statistics */
void trn_log_latent_json(trainer *t, const real *snap, const double *st);
/* trainer.c: the model and state into save_dir/name (rank 0); the metrics log's record count
 * checked (train.metrics_log); the kill harness's named crash points */
int trn_save(trainer *t, const char *name);
int trn_metrics_done(trainer *t);
void trn_crash_point(const trainer *t, const char *what);
/* trainer_valid.c: the lr of the update after `updates` completed ones (the schedule's, shrunk
 * on plateaus); whether it is below train.stop_min_lr past warmup; one validation (see there) */
double trn_lr_at(const trainer *t, long updates);
int trn_lr_too_small(const trainer *t);
int trn_run_validation(trainer *t, double elapsed, int *stop);

#endif
