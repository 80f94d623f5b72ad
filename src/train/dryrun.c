/* lltrain --dry-run: the memory a training step of a config needs on its
 * backend, measured by running one full step (forward, backward, Adam) at the
 * largest batch shape on the dry backend, which counts and sizes everything
 * and computes nothing: a 64+64-layer model at 8192 tokens is measured in a
 * second on any machine.  The step runs twice, with fp32 and with bf16
 * activations (train.precision), so both columns are measurements: bf16 has
 * activations and the weight copy matmuls read in 2 bytes, and fp32 master
 * weights, gradients, Adam moments and statistics. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ll/latent.h"
#include "ll/train.h"

static double gib(double bytes) { return bytes / (1024.0 * 1024 * 1024); }

typedef struct {
    ll_backend *be;
    ll_model *m;
    ll_adam opt;
    size_t before_step;
    ll_op_counts step; /* the counts at the start of the step; then the step's own */
    int B, T;
} dry_step;

/* The largest shape: sentences of max_len tokens, as many as max_tokens allows (or the caller's). */
static int dry_len(const ll_config *cfg, int T_opt) { return T_opt > 0 ? T_opt : cfg->max_len; }
static int dry_sents(const ll_config *cfg, int B_opt, int T) {
    return B_opt > 0 ? B_opt : cfg->max_tokens / T > 0 ? cfg->max_tokens / T : 1;
}

/* Memory this process may still take: MemAvailable, else all physical memory; 0 when unknown. */
static double host_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    double kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb > 0) return kb * 1024;
    const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * size : 0;
}

/* `reps` training steps of cfg at B x T (<= 0: the largest shape) on the dry backend; d->step
 * counts the last (the first grows the activation arena, the second consolidates it: a
 * trainer sizes it up front, so from the third on a step is what training repeats). */
static void dry_run_step(dry_step *d, const ll_config *cfg, int B_opt, int T_opt, ll_dtype act, int reps) {
    ll_hparams hp;
    ll_hparams_from_config(&hp, cfg, cfg->vocab_size);
    ll_backend *be = d->be = ll_backend_dry(ll_backend_cpu_precision(act));
    ll_model *m = d->m = ll_model_new(&hp, be); /* not initialised: values are never computed */
    m->obj = (ll_objective){.ddr_alpha = cfg->ddr_alpha, .ald_weight = cfg->ald_weight, .ald_p = cfg->ald_p,
                            .ald_tau = cfg->ald_tau};
    if (cfg->ddr_alpha > 0) m->obj.ddr_dec_ctl = ll_calloc(hp.Ld ? hp.Ld : 1, sizeof(ll_layer_ctl));
    m->recompute = cfg->checkpoint_activations;
    ll_adam_init(&d->opt, m, cfg);
    d->before_step = ll_backend_counts(be)->mem_live;

    const int T = d->T = dry_len(cfg, T_opt), B = d->B = dry_sents(cfg, B_opt, T);
    ll_batch b;
    ll_batch_full(&b, B, T);
    for (int rep = 0; rep < reps; rep++) {
        d->step = *ll_backend_counts(be);
        ll_backend_gemm_shapes_reset(be); /* the last step's matmuls by shape */
        for (int s = 0; s < 2; s++) /* every layer runs (no LayerDrop, gates on) */
            if (ll_latent_on(m, s)) ll_latent_sample(m, s, 0, 1, 0, 1, 0);
        ll_model_zero_grads(m); /* as the trainer starts an update */
        ll_model_stats_zero(m);
        ll_model_step(m, &b, 1, 0, 1, NULL);
        ll_adam_step(&d->opt, m, 1e-4, 1e-4, 1.0 / b.n_tgt_tokens, 1);
        ll_adam_ema_step(&d->opt, m, 1); /* train.ema_decay's one op */
    }
    const ll_op_counts *c = ll_backend_counts(be);
    d->step.calls = c->calls - d->step.calls;
    d->step.launches = c->launches - d->step.launches;
    for (size_t i = 0; i < sizeof c->per_op / sizeof c->per_op[0]; i++) {
        d->step.per_op[i] = c->per_op[i] - d->step.per_op[i];
        d->step.per_op_launches[i] = c->per_op_launches[i] - d->step.per_op_launches[i];
    }
    ll_batch_free(&b);
}

/* A step's backend ops and the CUDA stream operations they would be
 * (counting.c's rules), in total and by op, most frequent first. */
static void print_step_ops(const ll_op_counts *st) {
    printf("one step (forward, backward, Adam): %llu backend ops, %llu CUDA launches (kernels, async copies and "
           "memsets; a steady-state step; with train.cuda_graphs the forward and backward's run as one CUDA graph)\n",
           (unsigned long long)st->calls, (unsigned long long)st->launches);
    const size_t nslots = sizeof st->per_op / sizeof st->per_op[0];
    uint8_t done[sizeof st->per_op / sizeof st->per_op[0]] = {0};
    printf("%-34s %12s %12s\n", "ops of the step", "calls", "launches");
    for (;;) {
        size_t best = nslots;
        for (size_t i = 0; i < nslots; i++)
            if (!done[i] && st->per_op[i] && (best == nslots || st->per_op[i] > st->per_op[best])) best = i;
        if (best == nslots) break;
        done[best] = 1;
        printf("  %-32s %12llu %12llu\n", ll_backend_op_name(best), (unsigned long long)st->per_op[best],
               (unsigned long long)st->per_op_launches[best]);
    }
}

/* The step's matmuls by shape, the most FLOPs first (the shapes a GPU profile would time:
 * ll_gpu_bench --gemm-survey). */
static double shape_flops(const ll_gemm_shape *s) { return 2.0 * s->g.M * s->g.N * s->g.K * (double)s->calls; }
static int by_flops(const void *pa, const void *pb) {
    const double a = shape_flops(pa), b = shape_flops(pb);
    return a < b ? 1 : a > b ? -1 : 0;
}
static void print_step_gemms(ll_backend *be) {
    enum { MAX = 256, SHOWN = 12 };
    ll_gemm_shape *sh = ll_malloc(MAX * sizeof *sh);
    const int n = ll_backend_gemm_shapes(be, sh, MAX);
    qsort(sh, (size_t)n, sizeof *sh, by_flops);
    double total = 0, side = 0;
    uint64_t calls = 0, side_calls = 0;
    for (int i = 0; i < n; i++) {
        total += shape_flops(&sh[i]), calls += sh[i].calls;
        if (sh[i].g.side) side += shape_flops(&sh[i]), side_calls += sh[i].calls;
    }
    printf("matmuls of the step: %llu calls of %d shapes, %.2f TFLOP (%llu calls, %.2f TFLOP, may run beside the "
           "chain: on CUDA its side stream); the %d with the most FLOPs:\n",
           (unsigned long long)calls, n, total * 1e-12, (unsigned long long)side_calls, side * 1e-12,
           n < SHOWN ? n : SHOWN);
    printf("  %6s %5s %6s %6s %6s %-11s %-9s %9s %6s %4s\n", "calls", "trans", "M", "N", "K", "types", "epi", "GFLOP",
           "share", "side");
    for (int i = 0; i < n && i < SHOWN; i++) {
        const ll_gemm_desc *g = &sh[i].g;
        char types[16];
        snprintf(types, sizeof types, "%s>%s", ll_dtype_str(g->a_type), ll_dtype_str(g->c_type));
        printf("  %6llu %4d%d %6d %6d %6d %-11s %-9s %9.1f %5.1f%% %4s\n", (unsigned long long)sh[i].calls, g->trans_a,
               g->trans_b, g->M, g->N, g->K, types, ll_epilogue_str(g->epi), shape_flops(&sh[i]) * 1e-9,
               total > 0 ? 100 * shape_flops(&sh[i]) / total : 0, g->side ? "yes" : "-");
    }
    free(sh);
}

static void dry_free(dry_step *d) {
    free(d->m->obj.ddr_dec_ctl);
    ll_adam_free(&d->opt, d->m);
    ll_model_free(d->m);
    ll_backend_counting_free(d->be);
}

ll_dtype ll_config_act_dtype(const ll_config *cfg) {
    return !strcmp(cfg->precision, "bf16") ? LL_BF16 : LL_REAL_DTYPE;
}

size_t ll_train_arena_bytes(const ll_config *cfg) {
    dry_step d;
    dry_run_step(&d, cfg, 0, 0, ll_config_act_dtype(cfg), 1);
    size_t peak = d.m->arena.peak;
    dry_free(&d);
    return peak;
}

/* What the trainer holds during a step: everything allocated before it, and the activation arena it
 * reserves (src/train/trainer.c: the dry peak + 1/16 slack + 1 MiB). */
static double trainer_bytes(const dry_step *d) {
    const double peak = (double)d->m->arena.peak;
    return (double)d->before_step + peak + peak / 16 + (1 << 20);
}

/* Does a step of B sentences of T tokens, with cfg's train.checkpoint_activations, fit `budget` bytes? */
static int step_fits(const ll_config *cfg, int B, int T, ll_dtype act, double budget) {
    dry_step d;
    dry_run_step(&d, cfg, B, T, act, 1);
    const double total = trainer_bytes(&d);
    dry_free(&d);
    return total <= budget;
}

/* The most sentences of T tokens (the dry run's largest shape at data.max_tokens = B T) whose training
 * step fits `budget` bytes of backend memory in dtype act, with train.checkpoint_activations as given;
 * 0 when one sentence does not.  Bisection on dry steps (memory grows with the batch), up to what
 * data.max_tokens and this host's memory allow a dry batch (40 bytes a token): *capped is set when
 * the answer is that bound, not the device's. */
static int fit_sentences(const ll_config *cfg, int T, ll_dtype act, int recompute, double budget, int *capped) {
    ll_config c = *cfg; /* (a shallow copy, read only) */
    c.checkpoint_activations = recompute;
    double cap_d = fmin((double)INT_MAX / T, (double)(1 << 20));
    const double host = host_available();
    if (host > 0) cap_d = fmin(cap_d, host / 2 / (40.0 * T));
    const int cap = cap_d >= 1 ? (int)cap_d : 1;
    *capped = 0;
    int lo = 0, hi = 1; /* lo fits (or is 0), hi is to be tried */
    while (step_fits(&c, hi, T, act, budget)) {
        lo = hi;
        if (hi == cap) return *capped = 1, lo;
        hi = hi > cap / 2 ? cap : 2 * hi;
    }
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        if (step_fits(&c, mid, T, act, budget))
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

int ll_train_dry_run(const ll_config *cfg, const char *config_path, int B_opt, int T_opt, double gpu_gib) {
    { /* the backend computes nothing, but the batch and the step's per-token arrays are real host
       * memory, ~36 bytes per token for the two steps (measured, any model): a shape beyond the
       * machine is an error, not an OOM kill minutes later */
        const int T = dry_len(cfg, T_opt);
        const double need = 40.0 * dry_sents(cfg, B_opt, T) * T, avail = host_available();
        if (avail > 0 && need > avail)
            return ll_fail("--dry-run at %d x %d tokens: the batch and the step's per-token arrays need about %.1f GiB "
                           "of host memory (40 bytes per token), more than the %.1f GiB available here",
                           dry_sents(cfg, B_opt, T), T, gib(need), gib(avail));
    }
    dry_step d, h;
    dry_run_step(&d, cfg, B_opt, T_opt, LL_REAL_DTYPE, 3);
    dry_run_step(&h, cfg, B_opt, T_opt, LL_BF16, 3);
    ll_model *m = d.m;
    const ll_hparams hp = m->hp;
    const int B = d.B, T = d.T;

    const double P = (double)m->n_params, R = (double)sizeof(real);
    const double act32 = (double)m->arena.peak, act16 = (double)h.m->arena.peak;
    const double copy16 = 2 * P; /* the bf16 weight copy; in fp32 it is the master itself */
    /* buffers beside params, grads, moments (and the bf16 copy) */
    const double ema = d.opt.ema ? R * P : 0; /* train.ema_decay's average */
    const double other32 = (double)d.before_step - 4 * P * R - ema;
    const double other16 = (double)h.before_step - 4 * P * R - copy16 - ema;
    /* what the trainer allocates: everything before the step, plus one arena block of the peak */
    const double tot32 = (double)d.before_step + act32, tot16 = (double)h.before_step + act16;
    printf("dry run of %s: %d+%d layers, d=%d, ffn %d, heads %d, vocab %d%s%s%s\n", config_path, hp.Le, hp.Ld, hp.C, hp.F,
           hp.H, hp.V, hp.latent_enc || hp.latent_dec ? ", latent depth" : "", hp.dlcl_enc || hp.dlcl_dec ? ", DLCL" : "",
           cfg->ddr_alpha > 0 || cfg->ald_weight > 0 ? ", DDR/ALD passes" : "");
    printf("%s batch: %d sentences x %d tokens (%d tokens per side)\n", B_opt > 0 ? "the" : "largest", B, T, B * T);
    printf("parameters: %zu\n", ll_model_count_params(m));
    if (cfg->checkpoint_activations)
        printf("activation checkpointing (train.checkpoint_activations): each layer's input kept, the layer's "
               "forward run again in the backward\n");
    const dry_step *own = ll_config_act_dtype(cfg) == LL_BF16 ? &h : &d; /* the config's train.precision */
    printf("%s activations:\n", ll_dtype_str(own->m->be->act));
    print_step_ops(&own->step);
    print_step_gemms(own->be);
    printf("%-34s %12s %12s\n", "backend memory (GiB), measured", "fp32", "bf16");
    printf("%-34s %12.3f %12.3f\n", "master weights (fp32)", gib(R * P), gib(R * P));
    printf("%-34s %12s %12.3f\n", "weight copy for matmuls (bf16)", "-", gib(copy16));
    printf("%-34s %12.3f %12.3f\n", "gradients (fp32)", gib(R * P), gib(R * P));
    printf("%-34s %12.3f %12.3f\n", "Adam moments (fp32)", gib(2 * R * P), gib(2 * R * P));
    if (ema > 0) printf("%-34s %12.3f %12.3f\n", "moving average of weights (fp32)", gib(ema), gib(ema));
    printf("%-34s %12.3f %12.3f\n", "activations, peak of the step", gib(act32), gib(act16));
    printf("%-34s %12.3f %12.3f\n", "other (tables, stats, samples)", gib(other32), gib(other16));
    printf("%-34s %12.3f %12.3f\n", "total at the peak", gib(tot32), gib(tot16));
    /* "fits": with the trainer's arena slack (trainer_bytes), as fit_sentences decides */
    const double budget = (gpu_gib > 0 ? gpu_gib : 74.5) * (1 << 30);
    const int fit32 = trainer_bytes(&d) <= budget, fit16 = trainer_bytes(&h) <= budget;
    if (gpu_gib > 0)
        printf("fits %.4g GiB (--gpu-mem): fp32 %s, bf16 %s\n", gpu_gib, fit32 ? "yes" : "no", fit16 ? "yes" : "no");
    else
        printf("fits one 80 GB GPU (74.5 GiB usable): fp32 %s, bf16 %s\n", fit32 ? "yes" : "no", fit16 ? "yes" : "no");
    { /* the other side of train.checkpoint_activations, measured too: what switching it gives or costs */
        ll_config other = *cfg; /* (a shallow copy, read only) */
        other.checkpoint_activations = !cfg->checkpoint_activations;
        dry_step od, oh;
        dry_run_step(&od, &other, B_opt, T_opt, LL_REAL_DTYPE, 3);
        dry_run_step(&oh, &other, B_opt, T_opt, LL_BF16, 3);
        const double a32 = (double)od.m->arena.peak, a16 = (double)oh.m->arena.peak;
        printf("with train.checkpoint_activations %s%s: activations %.3f / %.3f GiB, total %.3f / %.3f GiB (fp32 / "
               "bf16), %llu backend ops a step\n",
               other.checkpoint_activations ? "true" : "false",
               other.checkpoint_activations ? " (each layer's forward again in the backward)" : "", gib(a32), gib(a16),
               gib((double)od.before_step + a32), gib((double)oh.before_step + a16),
               (unsigned long long)(ll_config_act_dtype(cfg) == LL_BF16 ? oh : od).step.calls);
        dry_free(&od);
        dry_free(&oh);
    }
    { /* Marian's --mini-batch-fit, offline: the largest batch of max_len-token sentences that fits */
        const ll_dtype act = ll_config_act_dtype(cfg);
        const int Tf = dry_len(cfg, T_opt);
        int c0, c1;
        const int b0 = fit_sentences(cfg, Tf, act, cfg->checkpoint_activations, budget, &c0),
                  b1 = fit_sentences(cfg, Tf, act, !cfg->checkpoint_activations, budget, &c1);
        printf("largest data.max_tokens whose step fits %.4g GiB in %s (sentences of %d tokens): %s%lld; with "
               "train.checkpoint_activations %s: %s%lld%s\n",
               budget / (1 << 30), ll_dtype_str(act), Tf, c0 ? "at least " : "", (long long)b0 * Tf,
               cfg->checkpoint_activations ? "false" : "true", c1 ? "at least " : "", (long long)b1 * Tf,
               c0 || c1 ? " (the search stops where data.max_tokens or this host's memory ends)" : "");
    }
    dry_free(&d);
    dry_free(&h);
    return 0;
}
