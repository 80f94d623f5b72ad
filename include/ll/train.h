/* Training: optimizer, learning-rate schedules, gradient clipping and the
 * trainer loop (src/train/). */
#ifndef LL_TRAIN_H
#define LL_TRAIN_H

#include "ll/checkpoint.h"
#include "ll/config.h"
#include "ll/model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ll_dist; /* ll/dist.h */

/* ---- learning-rate schedules (reference-spec §5.2) ---- */
typedef struct {
    int kind; /* 0 inverse_sqrt, 1 polynomial, 2 cosine */
    double lr, warmup_init_lr, end_lr, power;
    long warmup, total;
} ll_schedule;
void ll_schedule_from_config(ll_schedule *s, const ll_config *cfg);
/* lr for the update that follows `num_updates` completed updates. */
double ll_schedule_lr(const ll_schedule *s, long num_updates);

/* ---- Adam over the flat parameter buffer ---- */
typedef struct {
    real *m, *v; /* device buffers, n_params each */
    long t;      /* updates of Theta taken (host mirror of stats[LL_ST_ADAM_T]) */
    long t_phi;  /* updates of the latent-depth logits [phi_offset, n) taken (LL_ST_ADAM_T_PHI) */
    real b1, b2, eps, wd;
    real *ema;        /* train.ema_decay: the weights' moving average, n_params (NULL: none) */
    real ema_decay;
    long ema_start;   /* train.ema_start_update */
    /* train.spike_zscore_loss / _gnorm: the spike detector's state in backend memory
     * (backend.h spike_check: 2 + 2 spike_window doubles; NULL: off) and its thresholds */
    double *spike;
    int spike_window;
    double spike_z_loss, spike_z_gnorm;
    /* train.freeze: the parts of Theta = [0, phi_offset) Adam steps, and the frozen parts, whose
     * gradients are zeroed before the norm (lo, n in reals; without freezing one part, [0, phi)) */
    struct ll_adam_range {
        size_t lo, n;
    } *steps, *frozen;
    int n_steps, n_frozen;
} ll_adam;
void ll_adam_init(ll_adam *o, ll_model *model, const ll_config *cfg);
/* train.freeze: the tensors whose names match any of the comma-separated glob patterns (fnmatch,
 * e.g. "enc.embed,enc.layers.*") take no Adam step and no weight decay, and leave the gradient
 * norm; -1 + errbuf for a pattern that matches nothing, the latent logits (latent.* settings
 * steer them), or everything.  Logs what it froze (once: rank 0 passes verbose). */
int ll_adam_freeze(ll_adam *o, const ll_model *model, const char *patterns, int verbose);
void ll_adam_free(ll_adam *o, ll_model *model);
/* Queue one update, with no host read: gradient norm into the stats buffer,
 * the gradient scaled by grad_scale and clipped to clip_norm (0 = off) inside
 * Adam, Theta stepped with lr and the latent logits [phi_offset, n) with
 * lr_phi; lr_phi < 0 leaves the logits alone this step (their gradient is
 * discarded: the inner steps of Algorithm 2).  A non-finite loss or gradient
 * norm, or a spike (train.spike_zscore_*: stats[LL_ST_SPIKE]), skips the update
 * on the backend (stats[LL_ST_SKIP]).  The norm before
 * clipping (after scaling) is stats[LL_ST_GNORM]. */
void ll_adam_step(ll_adam *o, ll_model *model, double lr, double lr_phi, double grad_scale, double clip_norm);
/* train.ema_decay: the moving average after update number `update` (1-based,
 * the count once it is done), queued after the update's step, no host read;
 * skipped with the update (stats[LL_ST_SKIP]).  No-op without an average. */
void ll_adam_ema_step(ll_adam *o, ll_model *model, long update);
/* in = 1: the model's weights become the average (the raw ones stashed in the
 * gradient buffer, free between updates); in = 0: the raw weights back.  For
 * validation; no-op without an average. */
void ll_adam_ema_swap(ll_adam *o, ll_model *model, int in);
/* The spike detector's state, 2 + 2 spike_window doubles (host copy, for checkpoints; and back). */
size_t ll_adam_spike_len(const ll_adam *o);
void ll_adam_spike_get(const ll_adam *o, ll_model *model, double *out);
void ll_adam_spike_set(ll_adam *o, ll_model *model, const double *in);
/* The detector on the update's statistics, before grad_finish (ll_adam_step, and ll_dist_train_step's
 * ZeRO path, after the norm's all-reduce): nothing when it is off. */
void ll_adam_spike_check(ll_adam *o, ll_model *model, double grad_scale);
/* Host mirrors t, t_phi from a stats read; and back to the backend (resume). */
void ll_adam_sync(ll_adam *o, const double *stats);
void ll_adam_push_steps(ll_adam *o, ll_model *model);

/* ---- model files (src/train/model_io.c) ---- */

/* What a training checkpoint carries beyond the model. */
typedef struct {
    long update;            /* updates completed */
    int64_t epoch, batch_pos; /* data position (ll_batcher_state) */
    double best_valid;      /* best validation loss so far (inf if none) */
    int64_t bad_valids;     /* validations without improvement */
    int64_t lr_shrinks;     /* train.lr_shrink: times the lr has been shrunk (lr = schedule x shrink^this) */
    int64_t plateau_bad;    /* validations without improvement since the last shrink */
    int n_streams;          /* data iterators (one per language pair in latent mode) */
    int64_t stream_pos[2 * LL_MAX_CORPORA]; /* (epoch, pos) of each */
    long best_update;       /* update of the model in checkpoint_best (-1: none / unknown) */
    int finished;           /* the run ended (max updates/epochs, early stop): resuming does nothing */
    int64_t metrics_records; /* records in the metrics log when this state was saved (-1: unknown) */
    uint64_t data_hash;     /* the prepared data's manifest hash (raw corpora + data settings); 0: unknown */
#define LL_LOG_ACC 10
    double log_acc[LL_LOG_ACC]; /* the trainer's progress-line sums since its last log record */
    ll_adam *opt;
} ll_train_state;

/* Write the model (and, if ts != NULL, optimizer + trainer state) atomically. */
int ll_model_save(const char *path, ll_model *m, const char *config_text, const void *vocab, size_t vocab_len,
                  const ll_train_state *ts);
/* Copy parameters from a checkpoint by name; shapes must match, every value
 * must be finite, and the file may hold no model tensor the model lacks.
 * -1 + errbuf naming the tensor. */
int ll_model_load_params(ll_model *m, const ll_ckpt *k, const char *path);
/* 1 + a description ("model.heads 2 vs 4") when a and b differ in anything
 * that shapes the network (not dropout/label smoothing), else 0. */
int ll_hparams_arch_diff(const ll_hparams *a, const ll_hparams *b, char *what, size_t n);
/* train.init_from: ll_model_init_from_check, before anything is created, opens cfg->init_from and
 * compares the architecture its stored config describes with cfg's (ll_hparams_arch_diff); then,
 * once the data is prepared, ll_model_init_from loads its parameters into m, refusing another
 * sentencepiece vocabulary than vocab [vocab_len] (byte for byte).  -1 + errbuf (one line naming
 * the file and what differs). */
int ll_model_init_from_check(const ll_config *cfg);
int ll_model_init_from(ll_model *m, const char *path, const void *vocab, size_t vocab_len);
/* Restore optimizer + trainer state.  -1 + errbuf when absent, mismatched or
 * impossible (negative counters, Adam step beyond the update count, negative
 * second moments, non-finite values). */
int ll_train_state_load(ll_train_state *ts, const ll_ckpt *k, ll_model *m, const char *path);
/* Build a model from a model file: its stored config gives the architecture
 * (checked: d_model % heads, ...; every tensor must match it, be finite).
 * cfg_out (optional) receives that config.  NULL + errbuf. */
ll_model *ll_model_from_file(const ll_ckpt *k, const char *path, ll_backend *be, ll_config *cfg_out);

/* train.metrics_log names a file lltrain appends to (a resume) or replaces (a new run): -1 + errbuf
 * when it exists, is a regular non-empty file and does not start as an ll metrics log does
 * ({"type":"...), so a corpus, a note or a checkpoint given there by mistake is never overwritten or
 * cut.  Nor is another run's log: a new run (resumed_from NULL) refuses a non-empty log outside
 * cfg's checkpoint.save_dir, a resumed one a non-empty log other than the one the checkpoint
 * resumed_from logged to (train.metrics_log changed).  Pipes, devices and a missing file are fine. */
int ll_metrics_log_check(const char *path, const ll_config *cfg, const char *resumed_from);
/* Hold train.metrics_log for this process (an flock, so closing other descriptors of the file keeps
 * it), created if missing: two runs given the same log (different save_dirs) would interleave or
 * cut each other's records.  The descriptor to keep open, 0 for a pipe or device (not locked), -1 +
 * errbuf when another process holds it. */
int ll_metrics_lock(const char *path);
/* ---- resuming (src/train/resume.c) ---- */
/* The update count a training checkpoint stores; -1 for a plain model file. */
long ll_ckpt_stored_update(const ll_ckpt *k);
/* 1 when dir holds checkpoint_last, checkpoint_best or a numbered checkpoint. */
int ll_ckpt_dir_has_checkpoint(const char *dir);
/* Load model + training state from the newest checkpoint in dir that loads
 * (last, numbered or best, ordered by the update each stores), warning on
 * stderr about each newer one skipped as corrupt or unreadable.  Returns 1
 * (path in chosen), 0 when dir has no checkpoint, -1 + errbuf when none is
 * usable or one was saved with another architecture than m's. */
int ll_resume_load(const char *dir, ll_model *m, ll_train_state *ts, char *chosen, size_t chosen_len);
/* Cut a JSONL metrics log back to what it held when the resumed state was
 * saved: its first `records` lines, or (records < 0: an older checkpoint) the
 * lines up to the first record whose "update" exceeds `update`; a torn last
 * line goes too.  Atomic; FIFOs and devices are left alone.  Returns the
 * records kept, or -1 + errbuf. */
int ll_metrics_truncate(const char *path, long update, int64_t records);

/* ---- one run per save_dir (src/train/rundir.c) ---- */
int ll_mkdir_p(const char *dir); /* mkdir -p; -1 + errbuf naming the part that failed */
/* dst becomes another name of src, atomically (link to a temporary, rename).
 * -1 where links are not possible or dst is a symlink (the caller writes instead). */
int ll_link_over(const char *src, const char *dst);
/* Take the advisory lock <save_dir>/.lltrain.lock for the process's life (the
 * kernel drops it on exit or crash).  Returns its descriptor (keep it open),
 * or -1 + errbuf naming save_dir and the holder's PID when another process
 * holds it.  *prev_pid: the PID of the previous holder (0 if unknown); its
 * temporaries are removed (ll_ckpt_clean_stale_temps) before this process's
 * PID is recorded, *removed their number. */
int ll_run_lock(const char *save_dir, long *prev_pid, int *removed);

/* What the resumed checkpoint `from` was trained on against what this run has
 * now.  A vocabulary (sentencepiece model) that differs is refused (-1 + errbuf
 * saying what differs): the weights would mean other pieces.  Changed data
 * under the same vocabulary, and changed config keys, are allowed: printed on
 * stderr (report: rank 0), and *record (malloc'd, NULL when nothing changed) is
 * the JSON metrics record to log.  Checkpoints from before these records
 * resume with a warning. */
int ll_resume_check(const char *from, const ll_config *cfg, const void *vocab, size_t vocab_len,
                    const ll_train_state *ts, uint64_t data_hash, int report, char **record);

/* Several ranks: -1 + errbuf on a rank whose config differs from rank 0's,
 * naming the keys (every rank calls it at start-up; collective). */
int ll_config_check_ranks(struct ll_dist *host, const ll_config *cfg);

/* ---- validation (src/train/validate.c) ---- */
typedef struct {
    double loss, nll;  /* per target token, base 2 (as fairseq logs them) */
    double bleu, chrf; /* when train.valid_bleu */
    int have_bleu;
    long tokens;       /* target tokens the loss covers (fewer with train.valid_max_batches) */
    /* Each data.valid corpus alone, when there are several (else n_corpora = 0): a multilingual
     * model's pairs, or several test sets of one pair.  The fields above are over them all. */
    int n_corpora;
    struct {
        double loss, nll, bleu, chrf;
        long tokens;
    } corpus[LL_MAX_CORPORA];
} ll_valid_result;
/* Loss on `valid` and (train.valid_bleu) BLEU/chrF of decoding the raw
 * data.valid sources with train.valid_beam.  -1 + errbuf. */
int ll_validate(ll_model *m, const ll_config *cfg, const ll_dataset *valid, const ll_spm *spm, ll_valid_result *r);
/* The same over several ranks (d: the collectives on the model's memory;
 * NULL: one process): each rank takes every world-th batch and sentence, the
 * sums (losses, tokens, BLEU/chrF n-gram counts) are all-reduced, and every
 * rank gets the global result. */
int ll_validate_ranks(ll_model *m, const ll_config *cfg, const ll_dataset *valid, const ll_spm *spm,
                      ll_valid_result *r, struct ll_dist *d);
/* What the validation log line adds after the loss: the batches validated
 * (train.valid_max_batches) and BLEU/chrF when computed; "" otherwise. */
void ll_valid_extra(const ll_config *cfg, const ll_valid_result *r, char *buf, size_t n);
/* Corpus k of r->corpus for the log: "de-en (newstest2015.de) | loss 3.123 | ppl 8.71 | bleu 25.10 |
 * chrf 50.20" (bleu and chrf when computed). */
/* train.valid_translations: the file of corpus k's translations in save_dir (best: the copy
 * kept for the best validation). */
const char *ll_valid_hyp_path(const ll_config *cfg, int k, int best, char *buf, size_t n);
void ll_valid_corpus_line(const ll_config *cfg, const ll_valid_result *r, int k, char *buf, size_t n);
/* Inference-time latent gates for a language pair (config language indices;
 * no-op without latent layers).  -1 + errbuf when a latent stack has no row
 * for the pair (an unknown language, or a pair per_pair rows do not cover). */
int ll_set_pair_inference(ll_model *m, const ll_config *cfg, int src_lang, int tgt_lang);

/* ---- the trainer (src/train/trainer.c) ---- */
typedef struct {
    int resume;        /* continue from the newest usable checkpoint in save_dir */
    const char *config_path;
    int op_stats;      /* count backend ops and host transfers per update (one worker), print at the end */
    const char *resume_command; /* printed after a graceful stop (SIGINT/SIGTERM/SIGHUP); NULL: generic hint */
    struct ll_dist *dist;       /* the job's ranks (ll_dist_start); NULL: one process */
} ll_train_opts;
/* Prints the backend memory one training step of cfg needs (fp32 and bf16),
 * measured on the dry backend at the largest batch shape, or B x T sentences
 * x tokens when given (> 0) (src/train/dryrun.c); whether it fits gpu_gib GiB (<= 0: 74.5, one 80 GB GPU)
 * and the largest data.max_tokens that does, with and without activation checkpointing.  -1 + errbuf
 * when the shape needs more host memory than the machine has available (the batch is real, ~40 bytes
 * per token). */
int ll_train_dry_run(const ll_config *cfg, const char *config_path, int B, int T, double gpu_gib);
/* Peak activation bytes of one step at the largest batch shape (dry run):
 * the trainer sizes the activation arena with it before the first step. */
size_t ll_train_arena_bytes(const ll_config *cfg);
/* The activation dtype train.precision asks for (fp32: the dtype of real). */
ll_dtype ll_config_act_dtype(const ll_config *cfg);
/* Runs training as configured.  SIGINT/SIGTERM/SIGHUP finish the current
 * update, write checkpoint_last and return 0; a second signal exits at once.
 * Returns 0, or -1 + errbuf. */
int ll_train(ll_config *cfg, const ll_train_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
