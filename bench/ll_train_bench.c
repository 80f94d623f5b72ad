/* CPU training-throughput benchmark of ll on the bench model (bench/README.md):
 * pre-norm Transformer d=256, 4 heads, FFN 1024, 6+6 layers, 8k joint vocab,
 * shared embeddings, dropout 0.1, label smoothing 0.1, Adam; a synthetic batch of
 * 128 pairs x 32 tokens (4096 target tokens).  Same shapes as torch_train_bench.py.
 * The step is lltrain's: ll_model_step_team with --batch-workers workers (default:
 * one per thread; 1 = one batch, every op threaded).
 * --precision bf16: train.precision bf16 (bf16 activations and weight copy).
 * --checkpoint-activations 1: train.checkpoint_activations (each layer recomputed in the backward).
 * Prints: RESULT ll tokens_per_s=... step_s=... gflops=... workers=W */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ll/model.h"
#include "ll/train.h"

/* CPU seconds of all threads: with hypervisor steal on a shared VM it varies
 * less than wall time, so it is the better A/B signal between two builds. */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    ll_cpu_setup(argv);
    int steps = 10, threads = 2, B = 128, L = 32, workers = 0, bf16 = 0, recompute = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--len")) L = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch-workers")) workers = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--precision")) bf16 = !strcmp(argv[i + 1], "bf16");
        else if (!strcmp(argv[i], "--checkpoint-activations")) recompute = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--steps N] [--threads N] [--batch B] [--len L] [--batch-workers W] [--precision fp32|bf16] "
                    "[--checkpoint-activations 0|1]\n", argv[0]);
            return 2;
        }
    }
    ll_set_threads(threads);
    ll_hparams hp = {.C = 256, .F = 1024, .H = 4, .Le = 6, .Ld = 6, .V = 8000, .max_pos = 1024, .share_all = 1,
                     .tie_output = 1, .dropout = 0.1, .label_smoothing = 0.1};
    ll_model *m = ll_model_new(&hp, ll_backend_cpu_precision(bf16 ? LL_BF16 : LL_F32));
    ll_model_init(m, 1);
    m->recompute = recompute; /* train.checkpoint_activations */
    ll_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.adam_beta1 = 0.9;
    cfg.adam_beta2 = 0.98;
    cfg.adam_eps = 1e-8;
    ll_adam opt;
    ll_adam_init(&opt, m, &cfg);
    ll_step_team *team = ll_step_team_new(m, workers > 0 ? workers : threads);

    ll_batch b = {.B = B, .S = L, .T = L};
    b.src = malloc(sizeof(int32_t) * B * L);
    b.tgt_in = malloc(sizeof(int32_t) * B * L);
    b.tgt_out = malloc(sizeof(int32_t) * B * L);
    b.src_len = malloc(sizeof(int) * B);
    b.tgt_len = malloc(sizeof(int) * B);
    ll_philox r;
    ll_philox_init(&r, 42, 1000, 0);
    for (int i = 0; i < B; i++) {
        for (int t = 0; t < L; t++) {
            b.src[i * L + t] = t == L - 1 ? LL_EOS : 4 + (int)ll_philox_below(&r, 2 * (i * L + t), hp.V - 4);
            b.tgt_out[i * L + t] = t == L - 1 ? LL_EOS : 4 + (int)ll_philox_below(&r, 2 * (i * L + t) + 1, hp.V - 4);
        }
        for (int t = 0; t < L; t++) b.tgt_in[i * L + t] = t == 0 ? LL_EOS : b.tgt_out[i * L + t - 1];
        b.src_len[i] = b.tgt_len[i] = L;
    }
    b.n_src_tokens = b.n_tgt_tokens = B * L;
    double flops = ll_model_train_flops(&hp, B * L, B * L, B, L, L);
    fprintf(stderr, "ll bench: %zu parameters, %.1f GFLOP per step, %d threads, BLAS core %s\n", ll_model_count_params(m),
            flops / 1e9, threads, ll_blas_core());
    double t0 = 0, c0 = 0;
    for (int s = 0; s < steps + 2; s++) {
        if (s == 2) t0 = ll_now(), c0 = cpu_seconds();
        memset(m->grads, 0, m->n_params * sizeof(real));
        double ts = ll_now();
        /* as lltrain: losses accumulate on the backend, one stats read per update */
        ll_model_stats_zero(m);
        ll_model_step_team(m, team, &b, 1, s, NULL);
        ll_adam_step(&opt, m, 5e-4, 5e-4, 1.0 / b.n_tgt_tokens, 0);
        double st[LL_ST_N];
        ll_model_stats_read(m, st, NULL);
        fprintf(stderr, "step %d loss %.4f  %.3f s\n", s, st[LL_ST_LOSS] / b.n_tgt_tokens, ll_now() - ts);
    }
    double dt = (ll_now() - t0) / steps, dc = (cpu_seconds() - c0) / steps;
    printf("RESULT ll tokens_per_s=%.1f step_s=%.4f gflops=%.1f workers=%d cpu_s_per_step=%.4f\n", B * L / dt, dt,
           flops / dt / 1e9, ll_step_team_size(team), dc);
    fprintf(stderr, "activation arena peak %.1f MiB\n", m->arena.peak / 1048576.0);
    ll_step_team_free(team);
    ll_adam_free(&opt, m);
    ll_model_free(m);
    return 0;
}
