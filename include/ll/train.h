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

/* ---- learning-rate schedules (reference-spec §5.2) ---- */
typedef struct {
    int kind; /* 0 inverse_sqrt, 1 polynomial */
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
} ll_adam;
void ll_adam_init(ll_adam *o, ll_model *model, const ll_config *cfg);
void ll_adam_free(ll_adam *o, ll_model *model);
/* Queue one update, with no host read: gradient norm into the stats buffer,
 * the gradient scaled by grad_scale and clipped to clip_norm (0 = off) inside
 * Adam, Theta stepped with lr and the latent logits [phi_offset, n) with
 * lr_phi; lr_phi < 0 leaves the logits alone this step (their gradient is
 * discarded: the inner steps of Algorithm 2).  A non-finite loss or gradient
 * norm skips the update on the backend (stats[LL_ST_SKIP]).  The norm before
 * clipping (after scaling) is stats[LL_ST_GNORM]. */
void ll_adam_step(ll_adam *o, ll_model *model, double lr, double lr_phi, double grad_scale, double clip_norm);
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
    int n_streams;          /* data iterators (one per language pair in latent mode) */
    int64_t stream_pos[2 * LL_MAX_CORPORA]; /* (epoch, pos) of each */
    ll_adam *opt;
} ll_train_state;

/* Write the model (and, if ts != NULL, optimizer + trainer state) atomically. */
int ll_model_save(const char *path, ll_model *m, const char *config_text, const void *vocab, size_t vocab_len,
                  const ll_train_state *ts);
/* Copy parameters from a checkpoint by name; shapes must match.  -1 + errbuf. */
int ll_model_load_params(ll_model *m, const ll_ckpt *k, const char *path);
/* Restore optimizer + trainer state.  -1 + errbuf when absent or mismatched. */
int ll_train_state_load(ll_train_state *ts, const ll_ckpt *k, ll_model *m, const char *path);
/* Build a model from a model file: its stored config gives the architecture.
 * cfg_out (optional) receives that config.  NULL + errbuf. */
ll_model *ll_model_from_file(const ll_ckpt *k, const char *path, ll_backend *be, ll_config *cfg_out);

/* ---- validation (src/train/validate.c) ---- */
typedef struct {
    double loss, nll;  /* per target token, base 2 (as fairseq logs them) */
    double bleu, chrf; /* when train.valid_bleu */
    int have_bleu;
} ll_valid_result;
/* Loss on `valid` and (train.valid_bleu) BLEU/chrF of decoding the raw
 * data.valid sources with train.valid_beam.  -1 + errbuf. */
int ll_validate(ll_model *m, const ll_config *cfg, const ll_dataset *valid, const ll_spm *spm, ll_valid_result *r);
/* Inference-time latent gates for a language pair (config language indices;
 * no-op without latent layers).  -1 + errbuf when a latent stack has no row
 * for the pair (an unknown language, or a pair per_pair rows do not cover). */
int ll_set_pair_inference(ll_model *m, const ll_config *cfg, int src_lang, int tgt_lang);

/* ---- the trainer (src/train/trainer.c) ---- */
typedef struct {
    int resume;        /* continue from save_dir/checkpoint_last.llm */
    const char *config_path;
    int op_stats;      /* count backend ops and host transfers per update (one worker), print at the end */
} ll_train_opts;
/* Prints the backend memory one training step of cfg needs (fp32 and bf16),
 * measured on the dry backend at the largest batch shape, or B x T sentences
 * x tokens when given (> 0) (src/train/dryrun.c). */
int ll_train_dry_run(const ll_config *cfg, const char *config_path, int B, int T);
/* Peak activation bytes of one step at the largest batch shape (dry run):
 * the trainer sizes the activation arena with it before the first step. */
size_t ll_train_arena_bytes(const ll_config *cfg);
/* Runs training as configured.  Returns 0, or -1 + errbuf. */
int ll_train(ll_config *cfg, const ll_train_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
