/* Data-parallel training over the collectives of ll/dist.h
 * (src/train/dist_train.c; docs/distributed.md).
 *
 * A global update is world x train.update_freq rounds of what one process
 * does per micro-step (one batch, or one batch of every pair with
 * data.sampling every_pair).  Its jobs j = 0, 1, ... are dealt round-robin:
 * rank r trains job j iff j % world == r.  Every rank walks every job's batch
 * (so data positions, token counts and random keys are global and a
 * checkpoint resumes with any number of ranks) and replays the latent-depth
 * Gumbel draws of the jobs it does not train, so the samples the KL and L_K
 * read are what one process would hold.  Gradients are summed in buckets
 * started as soon as the last backward pass that writes them has run; the
 * statistics slots are summed before the gradient norm and Adam; the result
 * equals one process with update_freq x world, up to float summation order. */
#ifndef LL_DIST_TRAIN_H
#define LL_DIST_TRAIN_H

#include "ll/dist.h"
#include "ll/train.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ll_dist_train ll_dist_train;

/* The collectives on be's memory: NCCL over host's ranks for the CUDA
 * backend when built with NCCL (nccl = 1: even with one rank), host itself
 * for the CPU.  NULL + errbuf when be cannot take part (CUDA with several
 * ranks and no NCCL). */
ll_dist *ll_dist_for_backend(ll_dist *host, ll_backend *be, int nccl);
/* Buckets of the model's gradient (cfg dist.bucket_mb) and, with dist.zero,
 * the Adam moments moved into this rank's shards (opt->m, opt->v freed).
 * Broadcasts rank 0's parameters and moments first, so every rank starts
 * from the same state. */
ll_dist_train *ll_dist_train_new(ll_dist *d, ll_model *m, ll_adam *opt, const ll_config *cfg);
void ll_dist_train_free(ll_dist_train *dt);
int ll_dist_train_rank(const ll_dist_train *dt);  /* 0 for NULL */
int ll_dist_train_world(const ll_dist_train *dt); /* 1 for NULL */
int ll_dist_train_owns(const ll_dist_train *dt, long job);
/* Before this rank's last job of an update: set (on) or clear the model's
 * gradient hook that starts buckets from inside the backward. */
void ll_dist_train_arm(ll_dist_train *dt, int on);
/* Start every bucket whose gradients are final (LL_GRAD_DEC / LL_GRAD_ENC;
 * idempotent: a started bucket is not started again). */
void ll_dist_train_ready(ll_dist_train *dt, int what);
/* Once per update, on the host: sum this rank's trained tokens and signal
 * flag.  -1 + errbuf when the sum differs from the update's token count (ranks
 * reading different data); *signal becomes the largest signal of any rank,
 * *out_of_time 1 when it is set on any rank (train.max_minutes). */
int ll_dist_train_sync(ll_dist_train *dt, long own_tokens, long global_tokens, int *signal, int *out_of_time);
/* Sum the remaining buckets and the statistics slots, then ll_adam_step's
 * work (with ZeRO-1: norm over the shards, Adam on this rank's shard,
 * all-gather of the parameters). */
void ll_dist_train_step(ll_dist_train *dt, double lr, double lr_phi, double grad_scale, double clip_norm);
/* ZeRO-1: on = 1 gathers the full moments into opt->m / opt->v for a
 * checkpoint (every rank takes part), on = 0 frees them again.  No-op without
 * ZeRO. */
void ll_dist_train_full_moments(ll_dist_train *dt, int on);
/* Seconds this rank spent waiting for collectives (token counts, the
 * gradient buckets' and statistics' completion, ZeRO's all-gathers): the
 * communication the backward did not hide, plus waiting for slower ranks. */
double ll_dist_train_wait_seconds(const ll_dist_train *dt);
/* The log lines that say how the job is split (ranks, buckets, ZeRO-1 savings). */
void ll_dist_train_describe(const ll_dist_train *dt, const ll_config *cfg, int micro_steps);
/* Adam moment bytes saved on this rank by ZeRO-1 (0 without it). */
size_t ll_dist_train_saved_bytes(const ll_dist_train *dt);

#ifdef __cplusplus
}
#endif
#endif
