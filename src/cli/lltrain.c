/* lltrain: train a model as a config describes.
 *
 *   lltrain --config FILE [--set section.key=value ...] [--resume] [--threads N]
 *   lltrain --help-config
 *   lltrain --devices
 *
 * Prepares the data when data.dir is missing or stale (as llprep does), then
 * trains, validating every train.valid_interval updates and writing
 * checkpoint_last.llm / checkpoint_best.llm / checkpoint_<N>.llm to
 * checkpoint.save_dir.  Errors: one line on stderr, exit status 1. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ll/backend.h"
#include "ll/config.h"
#include "ll/core.h"
#include "ll/dist.h"
#include "ll/train.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: lltrain --config FILE [--set section.key=value ...] [--resume] [--threads N] [--quiet] [--op-stats] [--dry-run [--batch BxT] [--gpu-mem GIB]]\n"
            "       lltrain --help-config     print every config key with its type, default and meaning\n"
            "       lltrain --devices         print 'cuda devices: N' (0 without a GPU or a CUDA build) and what auto picks (fp32, bf16)\n"
            "  --resume    continue the run in checkpoint.save_dir from its newest usable checkpoint (bit for bit on CPU)\n"
            "  --threads N CPU threads (overrides train.threads; 0 = OMP_NUM_THREADS, else all cores)\n"
            "  --op-stats  count backend ops and host<->backend transfers per update (one worker) and print them\n"
            "  --dry-run   print the parameter, optimizer and peak activation memory of one step (fp32, bf16); no data needed\n"
            "  --batch BxT with --dry-run: B sentences of T tokens instead of the largest shape (max_tokens / max_len)\n"
            "  --gpu-mem G with --dry-run: the device's usable memory in GiB (default 74.5, one 80 GB GPU): whether the\n"
            "              step fits, and the largest data.max_tokens that does, with and without activation checkpointing\n");
}

/* argv as a shell command line with --resume (printed after a graceful stop). */
static char *resume_command(int argc, char **argv) {
    size_t cap = 64;
    for (int i = 0; i < argc; i++) cap += 4 * strlen(argv[i]) + 3;
    char *s = ll_malloc(cap), *p = s;
    int have_resume = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        have_resume |= !strcmp(a, "--resume");
        if (i) *p++ = ' ';
        int plain = *a != 0;
        for (const char *c = a; *c; c++)
            plain &= (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                     strchr("_-./=:,+@%", *c) != NULL;
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (const char *c = a; *c; c++)
            if (*c == '\'') {
                memcpy(p, "'\\''", 4);
                p += 4;
            } else {
                *p++ = *c;
            }
        *p++ = '\'';
    }
    if (!have_resume) p += sprintf(p, " --resume");
    *p = 0;
    return s;
}

int main(int argc, char **argv) {
    ll_cpu_setup(argv);
    ll_set_progname("lltrain");
    ll_args_no_repeats(argc, argv, "--set");
    const char *cfg_path = NULL, *threads = NULL;
    const char *sets[256];
    int n_sets = 0;
    ll_train_opts opts = {0};
    int dry = 0, dry_B = 0, dry_T = 0;
    double dry_gib = 0; /* --gpu-mem (0: one 80 GB GPU) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--devices")) {
            const int n = ll_cuda_device_count();
            printf("cuda devices: %d\n", n);
            printf("cpu: BLAS core %s, ll kernels %s\n", ll_blas_core(), ll_cpu_kernels());
            ll_verbosity = 0; /* the choice is printed below, not logged */
            ll_backend *be = ll_backend_select("auto", LL_REAL_DTYPE, 0, "auto");
            printf("train.device auto: %s\n", be && strcmp(be->name, "cpu") ? "cuda" : "cpu");
            be = ll_backend_select("auto", LL_BF16, 0, "auto");
            printf("train.device auto, train.precision bf16: %s\n", be && strcmp(be->name, "cpu") ? "cuda" : "cpu");
#ifdef LL_CUDA_EMU
            if (n > 0) printf("cuda devices are EMULATED on the CPU (LL_CUDA_EMU test build): not GPUs\n");
#endif
            return 0;
        } else if (!strcmp(argv[i], "--help-config")) {
            ll_config_print_help(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            cfg_path = argv[++i];
        } else if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            if (n_sets == 256) ll_die("too many --set options");
            sets[n_sets++] = argv[++i];
        } else if (!strcmp(argv[i], "--resume")) {
            opts.resume = 1;
        } else if (!strcmp(argv[i], "--dry-run")) {
            dry = 1;
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            char b[64];
            const char *x = strchr(argv[++i], 'x');
            long B, T;
            snprintf(b, sizeof b, "%.*s", x ? (int)(x - argv[i]) : 0, argv[i]);
            if (!x || strlen(argv[i]) >= sizeof b || ll_num_long(b, &B) || ll_num_long(x + 1, &T) || B < 1 ||
                B > INT_MAX || T < 2 || T > INT_MAX)
                ll_die("--batch %s: expected BxT, e.g. 256x32 (B in [1, %d] sentences of T in [2, %d] tokens)",
                       argv[i], INT_MAX, INT_MAX);
            if (B * T > INT_MAX) /* (B, T < 2^31: no overflow) */
                ll_die("--batch %s: %lld tokens in one batch; at most %d (the limit of data.max_tokens)", argv[i],
                       (long long)B * T, INT_MAX);
            dry_B = (int)B;
            dry_T = (int)T;
        } else if (!strcmp(argv[i], "--gpu-mem") && i + 1 < argc) {
            if (ll_num_double(argv[++i], &dry_gib, 0) || !(dry_gib > 0 && dry_gib <= 1e6))
                ll_die("--gpu-mem %s: expected the device's usable memory in GiB, e.g. 74.5 (an 80 GB H100) or 22 "
                       "(a 24 GB card)", argv[i]);
        } else if (!strcmp(argv[i], "--op-stats")) {
            opts.op_stats = 1;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = argv[++i];
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            ll_verbosity = 0;
        } else {
            ll_die("unknown or incomplete argument '%s' (see lltrain --help)", argv[i]);
        }
    }
    if (!cfg_path) ll_die("--config FILE is required (see lltrain --help)");
    ll_config cfg;
    if (ll_config_load(&cfg, cfg_path)) ll_die("%s", ll_errbuf());
    for (int i = 0; i < n_sets; i++)
        if (ll_config_set(&cfg, sets[i])) ll_die("%s", ll_errbuf());
    if (threads) {
        char buf[64];
        snprintf(buf, sizeof buf, "train.threads=%s", threads);
        if (ll_config_set(&cfg, buf)) ll_die("--threads: %s", ll_errbuf());
    }
    if (ll_config_validate(&cfg)) ll_die("%s", ll_errbuf());
    int nt = cfg.threads > 0 ? cfg.threads : ll_default_threads();
    ll_set_threads(nt);
    opts.config_path = cfg_path;
    if (dry_B && !dry) ll_die("--batch is an option of --dry-run");
    if (dry_gib > 0 && !dry) ll_die("--gpu-mem is an option of --dry-run");
    if (dry_T > cfg.max_positions) ll_die("--batch: %d tokens exceed model.max_positions %d", dry_T, cfg.max_positions);
    if (dry) {
        int drc = ll_train_dry_run(&cfg, cfg_path, dry_B, dry_T, dry_gib);
        if (drc) ll_die("%s", ll_errbuf());
        ll_config_free(&cfg);
        return drc ? 1 : 0;
    }
    /* mpirun -np N: one rank per process (docs/distributed.md); rank 0 alone logs */
    ll_dist *dist = ll_dist_start(cfg.dist_backend, cfg.dist_timeout_s);
    opts.dist = dist;
    if (dist->world > 1) {
        if (dist->rank != 0) ll_verbosity = 0;
        if (cfg.threads == 0) { /* all cores, shared by this node's ranks */
            int per = nt / (dist->local_size > 0 ? dist->local_size : 1);
            ll_set_threads(per > 0 ? per : 1);
        }
    }
    char *resume = resume_command(argc, argv);
    if (dist->world > 1) { /* the same launch again */
        char *r = ll_malloc(strlen(resume) + 32);
        sprintf(r, "mpirun -np %d %s", dist->world, resume);
        free(resume);
        resume = r;
    }
    opts.resume_command = resume;
    int rc = ll_train(&cfg, &opts);
    free(resume);
    ll_config_free(&cfg);
    if (rc && dist->world > 1) ll_dist_abort(dist, ll_errbuf()); /* stops the other ranks too */
    if (rc) ll_die("%s", ll_errbuf());
    dist->finalize(dist);
    return 0;
}
