/* ll's side of the GPU benchmark (bench/gpu/run.sh; issue 15): training steps
 * of a model given by a config file on random batches, the same update the
 * trainer runs (latent-depth gates sampled and their KL when the config has
 * latent layers, label-smoothed CE, backward, clipping, Adam), one stats read
 * per update, one update late (as lltrain: the host queues the next update
 * while the GPU runs this one), each forward and backward one CUDA graph
 * (train.cuda_graphs' default; --graphs off: kernel by kernel).  The peer is
 * bench/gpu/torch_gpu_peer.py.
 *
 *   ll_gpu_bench --model ll64|base|deep30 | --config FILE  [--device cuda|cpu]
 *                [--precision bf16|fp32] [--batch 256] [--len 32] [--vocab 32000]
 *                [--steps 20] [--warmup 5] [--peak-tflops P] [--graphs on|off] [--profile]
 *                [--gemm-survey N] [--set section.key=value ...]
 *
 * LayerDrop and cross-attention drop (when the config has them) are drawn per
 * step as the trainer draws them; with graphs their draws are the graphs'
 * conditional nodes' data (LL_CUDA_GRAPH_CONDS=0: a capture per draw, the A/B).
 * --profile times every op between syncs (ll_backend_timing) and prints ms per
 * step by op and by op class: slower than the real step, but it shows where
 * the time goes (and what a no-work op costs between syncs, the part of each
 * op's time that a real step does not pay).  --gemm-survey N (with --profile): then each distinct matmul
 * of the step, by time, is run alone with cuBLASLt's first N candidate
 * algorithms, each timed with CUDA events (ll_backend_gemm_survey): the
 * matmul time per step without the profile's syncs, at the heuristic's choice
 * (what ll runs) and at the fastest candidate.  Prints
 *   RESULT ll_gpu_train model=M device=D precision=P tok_s=... step_s=... tflops=... mfu=... peak_mem_gib=... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/latent.h"
#include "ll/model.h"
#include "ll/train.h"

static const char *model_config(const char *name) {
    if (!strcmp(name, "ll64")) return "configs/wmt16_ende_ll64.cfg";
    if (!strcmp(name, "base")) return "bench/gpu/base.cfg";
    if (!strcmp(name, "deep30")) return "bench/gpu/deep30.cfg";
    ll_die("ll_gpu_bench: unknown model '%s' (ll64, base, deep30, or --config FILE)", name);
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s --model ll64|base|deep30 | --config FILE [--device cuda|cpu] [--precision bf16|fp32]\n"
            "          [--batch B] [--len L] [--vocab V] [--steps N] [--warmup N] [--peak-tflops P] [--graphs on|off]\n"
            "          [--profile [--gemm-survey N]] [--set section.key=value ...]\n",
            argv0);
    exit(2);
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* What the profile's timing adds to each op: a 4-byte memset between syncs (a launch, no work,
 * the sync's round trip), the median of 200 */
static void sync_cost(ll_backend *be, double ops_per_step) {
    enum { REPS = 200 };
    void *p = be->alloc(be, 256);
    double t[REPS];
    for (int i = 0; i < REPS; i++) {
        be->sync(be);
        const double t0 = ll_now();
        be->memset0(be, p, 4);
        be->sync(be);
        t[i] = ll_now() - t0;
    }
    be->free(be, p);
    qsort(t, REPS, sizeof t[0], by_value);
    printf("an op of no work between syncs: %.1f us (median of %d); the profile's %.0f ops per step carry ~%.1f ms "
           "of it\n",
           1e6 * t[REPS / 2], REPS, ops_per_step, 1e3 * t[REPS / 2] * ops_per_step);
}

static double gemm_flops(const ll_gemm_desc *g) { return 2.0 * g->M * g->N * g->K; }

/* --gemm-survey: the step's matmuls by shape (the profile's tally), each timed alone with
 * cuBLASLt's first n candidates; the matmul time per step at the heuristic's choice and at
 * the fastest candidate */
/* A weight-gradient shape surveyed again without its bias-gradient epilogue (what
 * LL_CUDA_BGRAD_EPILOGUE=0 runs; its bias gradient is then a separate kernel, not timed here):
 * a line under the shape's; ms per step it would save (< 0) or cost, against with_us (0: unknown) */
static double without_bgrad(ll_backend *be, const ll_gemm_desc *g, int n, int reps, double calls, double with_us) {
    ll_gemm_desc p = *g;
    p.epi = LL_EPI_NONE;
    ll_gemm_algo_time u[LL_GEMM_SURVEY_MAX];
    const int pg = ll_backend_gemm_survey(be, &p, n, reps, u);
    int pb = -1;
    for (int j = 0; j < pg; j++)
        if (u[j].us > 0 && (pb < 0 || u[j].us < u[pb].us)) pb = j;
    if (pb < 0 || u[0].us <= 0) {
        printf("%7s    without the bias-gradient epilogue: %d candidates, %s\n", "", pg,
               pg > 0 ? "untimed (no event timing here)" : "none ran");
        return 0;
    }
    printf("%7s    without the bias-gradient epilogue: heuristic %.1f us (split-K %d), best %.1f us (#%d "
           "%d/%d/%d/%d)\n",
           "", u[0].us, u[0].splitk, u[pb].us, pb, u[pb].algo_id, u[pb].tile, u[pb].stages, u[pb].splitk);
    return with_us > 0 ? calls * (u[pb].us - with_us) * 1e-3 : 0;
}

static void gemm_survey(ll_backend *be, ll_backend *timed, int steps, int n, const char *model, const char *device) {
    enum { MAX_SHAPES = 256, REPS = 20 };
    ll_gemm_shape *sh = malloc(MAX_SHAPES * sizeof *sh);
    const int ns = ll_backend_gemm_shapes(timed, sh, MAX_SHAPES);
    printf("gemm survey: %d shapes, cuBLASLt's first %d candidates each, timed alone over %d calls (CUDA events)\n",
           ns, n, REPS);
    printf("%7s %3s %6s %6s %6s %-11s %-9s %4s %9s | %9s %7s | %9s %7s %-22s | %8s\n", "calls", "t", "M", "N", "K",
           "types", "epi", "beta", "prof us", "heur us", "TFLOP/s", "best us", "TFLOP/s", "best (id/tile/stg/splitk)",
           "save ms");
    double heur_ms = 0, best_ms = 0, prof_ms = 0, flops = 0, nobgrad_ms = 0;
    int shapes_faster = 0;
    for (int i = 0; i < ns; i++) {
        const ll_gemm_desc *g = &sh[i].g;
        const double calls = (double)sh[i].calls / steps, prof_us = sh[i].calls ? 1e-3 * sh[i].ns / sh[i].calls : 0;
        ll_gemm_algo_time t[LL_GEMM_SURVEY_MAX];
        const int got = g->K > 0 ? ll_backend_gemm_survey(be, g, n, REPS, t) : 0;
        int b = -1, untimed = 0;
        for (int j = 0; j < got; j++) {
            untimed += t[j].us == -2;
            if (t[j].us > 0 && (b < 0 || t[j].us < t[b].us)) b = j;
        }
        char types[16], best[32] = "-";
        snprintf(types, sizeof types, "%s>%s", ll_dtype_str(g->a_type), ll_dtype_str(g->c_type));
        prof_ms += calls * prof_us * 1e-3;
        if (got <= 0 || t[0].us <= 0 || b < 0) {
            char why[96];
            if (g->K <= 0) snprintf(why, sizeof why, "no product (K = 0)");
            else if (got < 0) snprintf(why, sizeof why, "survey failed (CUDA error)");
            else if (got == 0) snprintf(why, sizeof why, "no cuBLASLt candidate (the op falls back)");
            else if (untimed) snprintf(why, sizeof why, "%d of %d candidates ran, untimed (no event timing here)", untimed, got);
            else snprintf(why, sizeof why, "the heuristic's choice failed to run");
            printf("%7.0f %d%d %6d %6d %6d %-11s %-9s %4.0f %9.1f | %s\n", calls, g->trans_a, g->trans_b, g->M, g->N,
                   g->K, types, ll_epilogue_str(g->epi), (double)g->beta, prof_us, why);
            if (g->epi == LL_EPI_BGRAD) without_bgrad(be, g, n, REPS, calls, 0);
            continue;
        }
        const double f = gemm_flops(g), save = calls * (t[0].us - t[b].us) * 1e-3;
        snprintf(best, sizeof best, "#%d %d/%d/%d/%d", b, t[b].algo_id, t[b].tile, t[b].stages, t[b].splitk);
        printf("%7.0f %d%d %6d %6d %6d %-11s %-9s %4.0f %9.1f | %9.1f %7.1f | %9.1f %7.1f %-22s | %8.3f\n", calls,
               g->trans_a, g->trans_b, g->M, g->N, g->K, types, ll_epilogue_str(g->epi), (double)g->beta, prof_us, t[0].us,
               f / t[0].us * 1e-6, t[b].us, f / t[b].us * 1e-6, best, save);
        heur_ms += calls * t[0].us * 1e-3;
        best_ms += calls * t[b].us * 1e-3;
        flops += calls * f;
        shapes_faster += b != 0;
        if (g->epi == LL_EPI_BGRAD) nobgrad_ms += without_bgrad(be, g, n, REPS, calls, t[b].us);
    }
    printf("matmul time per step: %.2f ms in the profile (between syncs), %.2f ms alone at the heuristic's choice "
           "(%.1f TFLOP/s), %.2f ms at the fastest candidate (%.1f TFLOP/s; %d of %d shapes faster)\n",
           prof_ms, heur_ms, heur_ms > 0 ? flops / heur_ms * 1e-9 : 0, best_ms, best_ms > 0 ? flops / best_ms * 1e-9 : 0,
           shapes_faster, ns);
    printf("bias-gradient shapes without their epilogue, at their fastest: %+.2f ms per step against with it (the "
           "separate bias-gradient kernels not counted)\n",
           nobgrad_ms);
    printf("RESULT ll_gemm_survey model=%s device=%s shapes=%d candidates=%d profile_ms=%.3f heuristic_ms=%.3f "
           "best_ms=%.3f bgrad_split_delta_ms=%.3f\n",
           model, device, ns, n, prof_ms, heur_ms, best_ms, nobgrad_ms);
    free(sh);
}

static ll_backend *pick_backend(const char *device, ll_dtype act) {
    if (!strcmp(device, "cpu")) return ll_backend_cpu_precision(act);
    if (strcmp(device, "cuda")) ll_die("ll_gpu_bench: --device %s: cuda or cpu", device);
    ll_backend *be = ll_backend_cuda_precision(0, act);
    if (!be) ll_die("ll_gpu_bench: %s", ll_errbuf());
    return be;
}

int main(int argc, char **argv) {
    ll_cpu_setup(argv);
    const char *model = "base", *cfg_path = NULL, *device = "cuda", *prec = NULL;
    int B = 256, L = 32, V = 32000, steps = 20, warmup = 5, profile = 0, graphs = 1, survey = 0;
    double peak = 0;
    const char *sets[32];
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--profile")) profile = 1;
        else if (!v) usage(argv[0]);
        else if (!strcmp(a, "--model")) model = v, i++;
        else if (!strcmp(a, "--config")) cfg_path = v, i++;
        else if (!strcmp(a, "--device")) device = v, i++;
        else if (!strcmp(a, "--precision")) prec = v, i++;
        else if (!strcmp(a, "--batch")) B = atoi(v), i++;
        else if (!strcmp(a, "--len")) L = atoi(v), i++;
        else if (!strcmp(a, "--vocab")) V = atoi(v), i++;
        else if (!strcmp(a, "--steps")) steps = atoi(v), i++;
        else if (!strcmp(a, "--warmup")) warmup = atoi(v), i++;
        else if (!strcmp(a, "--peak-tflops")) peak = atof(v), i++;
        else if (!strcmp(a, "--gemm-survey")) survey = atoi(v), i++;
        else if (!strcmp(a, "--graphs") && (!strcmp(v, "on") || !strcmp(v, "off"))) graphs = !strcmp(v, "on"), i++;
        else if (!strcmp(a, "--set") && n_sets < 32) sets[n_sets++] = v, i++;
        else usage(argv[0]);
    }
    if (B < 1 || L < 2 || V < 8 || steps < 1 || warmup < 0 || survey < 0 || survey > LL_GEMM_SURVEY_MAX ||
        (survey && !profile))
        usage(argv[0]);
    if (!cfg_path) cfg_path = model_config(model);
    if (!prec) prec = strcmp(device, "cuda") ? "fp32" : "bf16";
    const ll_dtype act = !strcmp(prec, "bf16") ? LL_BF16 : !strcmp(prec, "fp32") ? LL_REAL_DTYPE : (ll_dtype)-1;
    if ((int)act < 0) ll_die("ll_gpu_bench: --precision %s: bf16 or fp32", prec);

    ll_config cfg;
    if (ll_config_load(&cfg, cfg_path)) ll_die("%s", ll_errbuf());
    for (int i = 0; i < n_sets; i++)
        if (ll_config_set(&cfg, sets[i])) ll_die("--set %s: %s", sets[i], ll_errbuf());
    ll_hparams hp;
    ll_hparams_from_config(&hp, &cfg, V);
    ll_backend *be = pick_backend(device, act), *timed = NULL, *plain = be;
    if (profile) be = timed = ll_backend_timing(be);
    ll_model *m = ll_model_new(&hp, be);
    ll_model_init(m, 1);
    m->graphs = graphs && !profile; /* (the timing wrapper has no graph_begin anyway: it syncs per op) */
    m->recompute = cfg.checkpoint_activations; /* --set train.checkpoint_activations=true (MFU counts model FLOPs) */
    const int drops = cfg.enc_layerdrop > 0 || cfg.dec_layerdrop > 0 || cfg.cad_p_net > 0 || cfg.cad_p_net_above > 0;
    const char *conds = getenv("LL_CUDA_GRAPH_CONDS");
    m->drop_conds = m->graphs && drops && be->cond_if && !(conds && !strcmp(conds, "0")); /* as the trainer */
    ll_adam opt;
    ll_adam_init(&opt, m, &cfg);
    ll_latent_ctx lat;
    const int latent = ll_latent_on(m, 0) || ll_latent_on(m, 1);
    if (latent) ll_latent_ctx_init(&lat, &cfg, m);

    /* random batches, no padding (as the PyTorch peer): 4 of them, in turn */
    enum { NB = 4 };
    ll_batch b[NB];
    ll_philox r;
    ll_philox_init(&r, 42, 1000, 0);
    for (int k = 0; k < NB; k++) {
        b[k] = (ll_batch){.B = B, .S = L, .T = L};
        b[k].src = malloc(sizeof(int32_t) * B * L);
        b[k].tgt_in = malloc(sizeof(int32_t) * B * L);
        b[k].tgt_out = malloc(sizeof(int32_t) * B * L);
        b[k].src_len = malloc(sizeof(int) * B);
        b[k].tgt_len = malloc(sizeof(int) * B);
        for (int i = 0; i < B; i++) {
            for (int t = 0; t < L; t++) {
                const uint64_t e = ((uint64_t)k * B + i) * L + t;
                b[k].src[i * L + t] = t == L - 1 ? LL_EOS : 4 + (int)ll_philox_below(&r, 2 * e, hp.V - 4);
                b[k].tgt_out[i * L + t] = t == L - 1 ? LL_EOS : 4 + (int)ll_philox_below(&r, 2 * e + 1, hp.V - 4);
            }
            for (int t = 0; t < L; t++) b[k].tgt_in[i * L + t] = t == 0 ? LL_EOS : b[k].tgt_out[i * L + t - 1];
            b[k].src_len[i] = b[k].tgt_len[i] = L;
        }
        b[k].n_src_tokens = b[k].n_tgt_tokens = B * L;
    }
    const double flops = ll_model_train_flops(&hp, (long)B * L, (long)B * L, B, L, L);
    fprintf(stderr, "ll_gpu_bench: %s (%s), %zu parameters, %s %s, batch %d x %d+%d, %.2f TFLOP per step%s\n",
            cfg_path, model, ll_model_count_params(m), be->name, ll_dtype_str(be->act), B, L, L, flops / 1e12,
            latent ? ", latent gates" : "");

    const long ntok = (long)B * L;
    double t0 = 0, st[LL_ST_N];
    ll_graph_stats g0 = {0}, g1 = {0}; /* the timed steps': replayed as kept or captured */
    int late = 0; /* a statistics read in flight */
    if (profile) warmup = 1, steps = steps < 3 ? steps : 3;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            if (late) {
                ll_model_stats_finish(m, st);
                fprintf(stderr, "step %d: loss %.4f grad norm %.3f\n", s - 1, st[LL_ST_LOSS] / ntok, st[LL_ST_GNORM]);
                late = 0;
            }
            be->sync(be);
            if (timed) memset(ll_backend_counts(timed)->per_op_ns, 0, sizeof ll_backend_counts(timed)->per_op_ns);
            if (timed) memset(ll_backend_counts(timed)->per_op, 0, sizeof ll_backend_counts(timed)->per_op);
            if (timed) ll_backend_gemm_shapes_reset(timed);
            if (be->graph_stats) be->graph_stats(be, &g0);
            t0 = ll_now();
        }
        const ll_batch *bk = &b[s % NB];
        be->memset0(be, m->grads, m->n_params * sizeof(real));
        ll_model_stats_zero(m);
        if (latent)
            for (int k = 0; k < 2; k++)
                if (ll_latent_on(m, k)) ll_latent_sample(m, k, 0, 1, (uint64_t)s, (real)cfg.latent_tau, 0);
        if (drops) { /* the trainer's draws (src/train/update.c: draw_structure, without DDR) */
            for (int l = 0; l < hp.Le; l++) m->enc_ctl[l].may_skip = m->drop_conds && cfg.enc_layerdrop > 0;
            for (int l = 0; l < hp.Ld; l++) {
                m->dec_ctl[l].may_skip = m->drop_conds && cfg.dec_layerdrop > 0;
                m->dec_ctl[l].may_skip_cross =
                    m->drop_conds && (l < cfg.cad_drop_depth ? cfg.cad_p_net : cfg.cad_p_net_above) > 0;
            }
            if (cfg.enc_layerdrop > 0) ll_layerdrop_sample(m->enc_ctl, hp.Le, cfg.enc_layerdrop, 1, (uint64_t)s, 0, 0);
            if (cfg.dec_layerdrop > 0) ll_layerdrop_sample(m->dec_ctl, hp.Ld, cfg.dec_layerdrop, 1, (uint64_t)s, 1, 0);
            if (cfg.cad_p_net > 0 || cfg.cad_p_net_above > 0)
                ll_cad_sample(m->dec_ctl, hp.Ld, cfg.cad_p_net, cfg.cad_drop_depth, cfg.cad_p_net_above, 1, (uint64_t)s, 0);
        }
        ll_model_step(m, bk, 1, (uint64_t)s, 1, NULL);
        if (latent) {
            for (int k = 0; k < 2; k++)
                if (ll_latent_on(m, k)) {
                    ll_latent_backward(m, k, 0);
                    ll_latent_kl(m, &lat, k, 0, s, ntok);
                }
            for (int k = 0; k < 2; k++) ll_latent_lk(m, &lat, k, s, ntok);
        }
        ll_adam_step(&opt, m, 5e-4, 5e-4, 1.0 / ntok, cfg.clip_norm);
        /* the trainer's one read per update, taken in after the next update is queued */
        if (late) {
            ll_model_stats_finish(m, st);
            if (s - 1 < warmup) fprintf(stderr, "step %d: loss %.4f grad norm %.3f\n", s - 1, st[LL_ST_LOSS] / ntok, st[LL_ST_GNORM]);
        }
        ll_model_stats_start(m);
        late = 1;
    }
    ll_model_stats_finish(m, st);
    fprintf(stderr, "step %d: loss %.4f grad norm %.3f\n", warmup + steps - 1, st[LL_ST_LOSS] / ntok, st[LL_ST_GNORM]);
    const double dt = (ll_now() - t0) / steps;
    if (be->graph_stats) be->graph_stats(be, &g1);
    const double tflops = flops / dt / 1e12;
    /* backend memory ll holds: master weights, gradients, Adam moments, the
     * activation-dtype weight copy (when it is not the master) and the arena */
    const size_t np = m->n_params;
    const double mem = (double)np * 4 * sizeof(real) +
                       ((void *)m->wact != (void *)m->params ? (double)np * ll_dtype_bytes(be->act) : 0) +
                       (double)m->arena.peak;
#ifdef LL_CUDA_EMU
    /* the CPU emulation of CUDA (tests only): its timings are never a GPU's */
    if (!strcmp(device, "cuda")) device = "cuda-EMULATED-not-a-GPU";
#endif
    if (profile) {
        printf("profile (%d steps, ops timed between syncs; the real step is %.1f ms without --profile):\n", steps,
               1e3 * dt);
        ll_backend_print_profile(stdout, ll_backend_counts(timed), steps);
        const ll_op_counts *oc = ll_backend_counts(timed);
        double ops = 0;
        for (size_t i = 0; i < sizeof oc->per_op / sizeof oc->per_op[0]; i++) ops += (double)oc->per_op[i];
        sync_cost(plain, ops / steps);
        if (survey) gemm_survey(plain, timed, steps, survey, model, device);
    }
    uint64_t tuned = 0, switched = 0; /* LL_CUDA_GEMM_TUNE: matmul shapes timed, and switched algorithm */
    ll_backend_gemm_tune_stats(plain, &tuned, &switched);
    printf("RESULT ll_gpu_train model=%s device=%s precision=%s graphs=%s tok_s=%.0f step_s=%.4f tflops=%.1f mfu=%.4f "
           "peak_mem_gib=%.2f graph_replays=%llu graph_captures=%llu graph_conditionals=%.0f gemm_tuned=%llu "
           "gemm_switched=%llu graph_tune_drops=%llu relu_mask=%s side_stream=%s pdl=%s pdl_edges=%.0f/%.0f "
           "bgrad=%s layers_per_join=%d recompute=%s\n",
           model, device, ll_dtype_str(be->act), m->graphs && be->graph_begin ? "on" : "off", ntok / dt, dt, tflops,
           peak > 0 ? tflops / peak : 0, mem / (1 << 30), (unsigned long long)(g1.replays - g0.replays),
           (unsigned long long)(g1.captures - g0.captures),
           g1.captures ? (double)g1.conditionals / (double)g1.captures : 0.0, /* per captured graph */
           (unsigned long long)tuned, (unsigned long long)switched, (unsigned long long)g1.tune_drops,
           plain->relu_mask_bytes ? "drelu" : "off", /* the FFN's ReLU backward in the DRELU epilogue */
           ll_backend_side_gemms(plain) ? "on" : "off", /* weight gradients beside (LL_CUDA_SIDE_STREAM) */
           ll_backend_pdl(plain) ? "on" : "off",        /* programmatic dependent launch (LL_CUDA_PDL) */
           /* per captured graph: its programmatic dependencies (a kernel -> ll's kernel) / all */
           g1.captures ? (double)g1.pdl_edges / (double)g1.captures : 0.0,
           g1.captures ? (double)g1.edges / (double)g1.captures : 0.0,
           /* the weight gradients' bias gradient: cuBLASLt's epilogue (LL_CUDA_BGRAD_EPILOGUE=1) or ll's kernel */
           strncmp(device, "cuda", 4) ? "-" : ll_backend_bgrad_epilogue_asked() ? "epilogue" : "kernel",
           ll_layer_join_every(m), m->recompute ? "on" : "off");
    for (int k = 0; k < NB; k++) {
        free(b[k].src), free(b[k].tgt_in), free(b[k].tgt_out), free(b[k].src_len), free(b[k].tgt_len);
    }
    ll_adam_free(&opt, m);
    ll_model_free(m);
    if (timed) ll_backend_counting_free(timed);
    ll_config_free(&cfg);
    return 0;
}
