/* One full training step of every shipped method config at toy width, CUDA
 * against the CPU reference (fp32): the same config, the same seed, the same
 * batch, the same random structure (LayerDrop, cross-attention drop, the DDR
 * pass's own draws, Gumbel gates), one ll_model_step plus the latent-depth
 * losses as the trainer runs them (src/train/trainer.c: accumulate()), then
 *  - the loss statistics (LOSS, NLL, CE2, DDR, ALD, KL, LK slots) within 1e-4
 *    relative, and
 *  - every gradient tensor of the parameter table within 1e-4 relative to
 *    max(|g_cpu|, rms of the tensor's CPU gradient, 1e-7): relative for large
 *    elements, relative to the tensor's scale near zero, and an absolute
 *    floor of 1e-7 for a tensor whose gradient is (exactly) zero on the CPU
 *    (a layer LayerDrop skipped), so the GPU must give ~0 there too.
 * Dropout stays on (the configs' rates): its masks must be identical bits,
 * or the step differs by O(1).  1e-4 and not 1e-5: a step is ~10 layers of
 * reductions in another order, each adding ~1e-6.
 * bf16 (LL_PARITY_PRECISION=bf16): the bf16 CUDA backend against the bf16
 * CPU backend, both with bf16 activations and the same fp32 master weights.
 * Each op's output may differ by one bf16 rounding step (2^-8 relative) where
 * the two sides' fp32 values straddle a rounding boundary, and ~20 layers
 * carry such differences on, so elementwise comparison is too strict:
 *  - the loss statistics within TOL_STEP_BF16_LOSS = 2e-3 relative;
 *  - every gradient tensor with relative L2 error ||g - g_cpu|| / max(||g_cpu||,
 *    1e-7 sqrt(n)) < TOL_STEP_BF16_L2 = 2e-2 (tests/test_bf16.c allows 0.1
 *    for bf16 against fp32, which differ by far more; a wrong op, stride or
 *    mask gives O(1)), or below the tensor's bf16 noise floor: its error
 *    between the bf16 and the fp32 CPU backends (a third run), where that is
 *    larger.  Deep stacks need the floor: on an H200 (2026-11-26) the 30-layer
 *    DLCL method's dec.layers.1.ffn_ln.weight differed by 0.028, its fp32 run
 *    matching to 3e-6; cuBLASLt's bf16 products round other sums than
 *    OpenBLAS's, and 30 layers carry each flipped rounding on.
 * Every gemm of the step must run as one fused cuBLASLt matmul: a call that
 * falls back (ll_backend_gemm_fallbacks: a refused epilogue, bias type or
 * alignment) fails the method, on a GPU and under the emulation's strict
 * cuBLASLt stand-in alike.  With LL_CUDA_EMU_LT_REFUSE set (refusals forced
 * on purpose) the fallbacks must show in the count instead.
 * Under the CUDA emulation the CUDA side also runs through a counting
 * backend, and the stream operations the emulator queued must equal what
 * counting.c's launch rules predict (the numbers --dry-run and --op-stats
 * report as CUDA launches).
 * The device under test runs the step a second time with ll_model.unfused_ln
 * set (each residual sum and the layer norm reading it as two ops): the
 * fused residual_ln_fwd must give the same bits in every gradient; and again
 * with activation checkpointing (ll_model.recompute), op by op and as a CUDA
 * graph: the same bits.
 * The methods and toy shapes follow tests/cli/test_op_count.sh.  Skips (77)
 * without a GPU; LL_PARITY_SELFTEST=1 runs CPU against CPU (exact), and with
 * LL_PARITY_BREAK=<op> (tests/gpu/parity.h) it must fail. */
#include "parity.h"

#include "ll/config.h"
#include "ll/latent.h"
#include "ll/model.h"
#include "ll/train.h"
#include "../gradcheck/gradcheck.h"

#define TOL_STEP 1e-4
#define TOL_STEP_BF16_LOSS 2e-3
#define TOL_STEP_BF16_L2 2e-2

typedef struct {
    const char *name, *cfg;
    int L; /* layers of each stack */
    const char *sets[4];
} method;

static const method methods[] = {
    {"plain pre-norm", "tiny_test", 5, {NULL}}, /* 5: groups of layers per join (2 in the bf16 run) */
    {"post-norm", "tiny_test", 2, {"model.norm=post"}},
    {"latent (LL-Both)", "tiny_latent", 2, {"latent.encoder=true", "latent.decoder=true"}},
    {"DLCL", "dlcl30", 3, {NULL}},
    {"CAD+DDR+ALD", "deep_decoder_15_15", 2, {NULL}},
    {"LayerDrop", "tiny_test", 4, {"model.enc_layerdrop=0.3", "model.dec_layerdrop=0.3"}},
    {"ReZero", "tiny_test", 2, {"model.norm=rezero"}},
    {"latent+DLCL+CAD", "latent_dlcl_cad", 2, {NULL}},
};

typedef struct {
    ll_model *m;
    ll_latent_ctx lat;
    double st[LL_ST_N];
    real *grads;        /* host copy */
    uint64_t fallbacks; /* gemm calls of the step that did not run fused (CUDA) */
    ll_backend *counted; /* the counting wrapper it ran on (emulation), or NULL */
    int unfused_ln;      /* residual sums and their layer norms as two ops (ll_model.unfused_ln) */
    int recompute;       /* activation checkpointing (ll_model.recompute) */
    int graphs;          /* the step as one CUDA graph (ll_model.graphs) */
    const ll_batch *more; /* then n_more further steps on these batches (the next updates, the same
                             structure and latent samples), whose statistics and gradients are read */
    int n_more;
    ll_graph_stats more_graphs; /* what the last of them did (graphs) */
    int drop_conds;      /* LayerDrop / CAD as conditionals (ll_model.drop_conds), each further step with
                            draws of its own (other than the first step's) */
    uint64_t conditionals; /* conditional nodes captured by the side's steps */
} side;

/* ll_model_step's random structure as the trainer draws it (draw_structure) */
static void draw_structure(const ll_config *cfg, ll_model *m, uint64_t step) {
    for (int l = 0; m->drop_conds && l < m->hp.Le; l++) m->enc_ctl[l].may_skip = cfg->enc_layerdrop > 0;
    for (int l = 0; m->drop_conds && l < m->hp.Ld; l++) {
        m->dec_ctl[l].may_skip = cfg->dec_layerdrop > 0;
        m->dec_ctl[l].may_skip_cross = (l < cfg->cad_drop_depth ? cfg->cad_p_net : cfg->cad_p_net_above) > 0;
    }
    if (cfg->enc_layerdrop > 0) ll_layerdrop_sample(m->enc_ctl, m->hp.Le, cfg->enc_layerdrop, cfg->seed, step, 0, 0);
    if (cfg->dec_layerdrop > 0) ll_layerdrop_sample(m->dec_ctl, m->hp.Ld, cfg->dec_layerdrop, cfg->seed, step, 1, 0);
    if (cfg->cad_p_net > 0 || cfg->cad_p_net_above > 0)
        ll_cad_sample(m->dec_ctl, m->hp.Ld, cfg->cad_p_net, cfg->cad_drop_depth, cfg->cad_p_net_above, cfg->seed, step, 0);
    if (m->obj.ddr_dec_ctl) {
        memcpy(m->obj.ddr_dec_ctl, m->dec_ctl, sizeof(ll_layer_ctl) * m->hp.Ld);
        if (cfg->dec_layerdrop > 0)
            ll_layerdrop_sample(m->obj.ddr_dec_ctl, m->hp.Ld, cfg->dec_layerdrop, cfg->seed, step, 1, 1);
        if (cfg->cad_p_net > 0 || cfg->cad_p_net_above > 0)
            ll_cad_sample(m->obj.ddr_dec_ctl, m->hp.Ld, cfg->cad_p_net, cfg->cad_drop_depth, cfg->cad_p_net_above,
                          cfg->seed, step, 1);
    }
}

/* The first step from base on whose draws CAD or LayerDrop (when on) drop
 * something, so the test sees a skipped layer / cross-attention.  Host-side
 * and deterministic: both sides pick the same step. */
static uint64_t pick_step(const ll_config *cfg, ll_model *m, uint64_t base) {
    if (!(cfg->enc_layerdrop > 0 || cfg->dec_layerdrop > 0 || cfg->cad_p_net > 0 || cfg->cad_p_net_above > 0))
        return base;
    for (uint64_t step = base; step < base + 64; step++) {
        draw_structure(cfg, m, step);
        int dropped = 0, kept = 0;
        for (int l = 0; l < m->hp.Le; l++) dropped += m->enc_ctl[l].skip, kept += !m->enc_ctl[l].skip;
        for (int l = 0; l < m->hp.Ld; l++)
            dropped += m->dec_ctl[l].skip || m->dec_ctl[l].skip_cross, kept += !m->dec_ctl[l].skip;
        if (dropped && kept) return step;
    }
    return base;
}

static int has_drops(const ll_config *cfg) {
    return cfg->enc_layerdrop > 0 || cfg->dec_layerdrop > 0 || cfg->cad_p_net > 0 || cfg->cad_p_net_above > 0;
}
static uint64_t draws_sig(const ll_model *m) {
    uint64_t h = 1469598103934665603ull;
    for (int l = 0; l < m->hp.Le; l++) h = (h ^ m->enc_ctl[l].skip) * 1099511628211ull;
    for (int l = 0; l < m->hp.Ld; l++) h = (h ^ (m->dec_ctl[l].skip | m->dec_ctl[l].skip_cross << 1)) * 1099511628211ull;
    for (int l = 0; m->obj.ddr_dec_ctl && l < m->hp.Ld; l++)
        h = (h ^ (m->obj.ddr_dec_ctl[l].skip | m->obj.ddr_dec_ctl[l].skip_cross << 1)) * 1099511628211ull;
    return h;
}
/* The first step from `from` whose draws differ from step's (deterministic: both sides agree). */
static uint64_t other_draws(const ll_config *cfg, ll_model *m, uint64_t step, uint64_t from) {
    draw_structure(cfg, m, step);
    const uint64_t h = draws_sig(m);
    for (uint64_t s = from; s < from + 64; s++) {
        draw_structure(cfg, m, s);
        if (draws_sig(m) != h) return s;
    }
    return from;
}

#ifdef LL_CUDA_EMU
uint64_t ll_cuda_emu_stream_ops(void); /* tests/cuda_emu/emu_runtime.cc */
#endif

/* One update's forward/backward on backend be, as trainer.c's accumulate() runs it for one batch.
 * counted: be is a counting wrapper (ll_backend_counting) of the backend under test. */
static void run_side(side *sd, ll_backend *be, const ll_config *cfg, const ll_hparams *hp, const ll_batch *b) {
    const uint64_t f0 = ll_backend_gemm_fallbacks(be);
    ll_model *m = sd->m = ll_model_new(hp, be);
    m->unfused_ln = sd->unfused_ln;
    m->recompute = sd->recompute;
    m->graphs = sd->graphs;
    m->drop_conds = sd->drop_conds ? (sd->graphs ? 1 : 2) : 0;
    ll_graph_stats gs0 = {0}, gs1 = {0};
    if (be->graph_stats) be->graph_stats(be, &gs0);
    ll_model_init(m, (uint64_t)cfg->seed);
    if (sd->n_more) ll_arena_reserve(&m->arena, (size_t)64 << 20); /* as the trainer: no growth, so no move after step 1 */
    m->obj = (ll_objective){.ddr_alpha = cfg->ddr_alpha, .ald_weight = cfg->ald_weight, .ald_p = cfg->ald_p,
                            .ald_tau = cfg->ald_tau};
    if (cfg->ddr_alpha > 0) m->obj.ddr_dec_ctl = ll_calloc(hp->Ld ? hp->Ld : 1, sizeof(ll_layer_ctl));
    const int latent = ll_latent_on(m, 0) || ll_latent_on(m, 1);
    if (latent) { /* logits away from their init of 0 (q = 1/2, where the KL to a Beta(1,1) prior is 0) */
        ll_latent_ctx_init(&sd->lat, cfg, m);
        const size_t n = m->n_params - m->phi_offset;
        real *a = ll_malloc(sizeof(real) * (n ? n : 1));
        ll_philox r;
        ll_philox_init(&r, 77, 0, 0);
        for (size_t i = 0; i < n; i++) a[i] = (real)(4 * ll_philox_uniform(&r, i) - 2);
        be->upload(be, m->params + m->phi_offset, a, sizeof(real) * n);
        ll_model_refresh_weights(m); /* the activation-dtype weight copy (bf16) */
        free(a);
    }
    /* an update past the soft phase and the annealing: hard gates, KL and L_K weights on */
    const long upd = latent ? cfg->latent_soft_update + cfg->latent_anneal_updates + cfg->latent_lk_anneal_updates / 2 + 1 : 3;
    const int hard = latent && !cfg->latent_soft_select && upd > cfg->latent_soft_update;
    const uint64_t step = pick_step(cfg, m, (uint64_t)upd * cfg->update_freq);
    ll_model_reset_ctl(m);
    ll_model_zero_grads(m);
    ll_model_stats_zero(m);
    const int rows[2] = {ll_latent_pair_row(hp, cfg, 0, b->src_lang, b->tgt_lang),
                         ll_latent_pair_row(hp, cfg, 1, b->src_lang, b->tgt_lang)};
    for (int s = 0; s < 2; s++)
        if (ll_latent_on(m, s)) ll_latent_sample(m, s, rows[s], cfg->seed, step, (real)cfg->latent_tau, hard);
    draw_structure(cfg, m, step);
    ll_model_step(m, b, (uint64_t)cfg->seed, step, 1, NULL);
    for (int s = 0; s < 2; s++)
        if (ll_latent_on(m, s)) {
            ll_latent_backward(m, s, rows[s]);
            ll_latent_kl(m, &sd->lat, s, rows[s], upd, b->n_tgt_tokens);
        }
    for (int s = 0; s < 2 && latent; s++) ll_latent_lk(m, &sd->lat, s, upd, b->n_tgt_tokens);
    for (int i = 0; i < sd->n_more; i++) {
        ll_graph_stats g0;
        if (sd->graphs) be->graph_stats(be, &g0);
        ll_model_zero_grads(m);
        ll_model_stats_zero(m);
        uint64_t next = step + 1 + (uint64_t)i;
        if (sd->drop_conds) { /* other draws: the kept graph must serve them */
            next = other_draws(cfg, m, step, next);
            draw_structure(cfg, m, next);
        }
        ll_model_step(m, &sd->more[i], (uint64_t)cfg->seed, next, 1, NULL);
        if (sd->graphs) {
            be->graph_stats(be, &sd->more_graphs);
            sd->more_graphs.captures -= g0.captures, sd->more_graphs.replays -= g0.replays;
            sd->more_graphs.launches -= g0.launches;
        }
    }
    ll_model_stats_read(m, sd->st, NULL);
    sd->grads = ll_malloc(m->n_params * sizeof(real));
    be->download(be, sd->grads, m->grads, m->n_params * sizeof(real));
    sd->fallbacks = ll_backend_gemm_fallbacks(be) - f0;
    if (be->graph_stats) be->graph_stats(be, &gs1);
    sd->conditionals = gs1.conditionals - gs0.conditionals;
}

static void free_side(side *sd) {
    free(sd->m->obj.ddr_dec_ctl);
    sd->m->obj.ddr_dec_ctl = NULL;
    ll_model_free(sd->m);
    free(sd->grads);
    ll_backend_counting_free(sd->counted);
}

static int run_method(const method *me) {
    const int before = tu_failures;
    char path[4096];
    snprintf(path, sizeof path, "%s/configs/%s.cfg", tu_source_dir(), me->cfg);
    ll_config cfg;
    if (ll_config_load(&cfg, path)) {
        fprintf(stderr, "  %s: %s\n", me->name, ll_errbuf());
        return ++tu_failures, 0;
    }
    char L[64];
    const char *toy[] = {"model.d_model=32", "model.ffn_dim=64", "model.heads=2", "train.device=cpu", "train.seed=3"};
    for (size_t i = 0; i < sizeof toy / sizeof toy[0]; i++)
        if (ll_config_set(&cfg, toy[i])) ll_die("%s", ll_errbuf());
    for (int s = 0; s < 2; s++) {
        snprintf(L, sizeof L, "model.%s_layers=%d", s ? "dec" : "enc", me->L);
        if (ll_config_set(&cfg, L)) ll_die("%s", ll_errbuf());
    }
    for (int i = 0; i < 4 && me->sets[i]; i++)
        if (ll_config_set(&cfg, me->sets[i])) ll_die("%s", ll_errbuf());
    ll_hparams hp;
    ll_hparams_from_config(&hp, &cfg, 157);
    ll_batch b = {0};
    gc_make_batch(&b, 5, 11, 9, hp.V, 42);
    b.pair = 0;
    b.src_lang = ll_config_lang_index(&cfg, cfg.train[0].src_lang);
    b.tgt_lang = ll_config_lang_index(&cfg, cfg.train[0].tgt_lang);

    side sd[2];
    memset(sd, 0, sizeof sd);
    const uint64_t fin0 = ll_backend_side_ln_finishes(pb_be[DUT]);
    for (int s = 0; s < 2; s++) {
#ifdef LL_CUDA_EMU
        /* the emulated side through a counting wrapper: its launch rules (src/backend/counting.c,
         * what the dry run and --op-stats report) must predict every stream operation queued.
         * Not with refusals forced (LL_CUDA_EMU_LT_REFUSE): each refused epilogue adds a kernel
         * the rules, which count the fused path, do not predict. */
        const char *refuse = getenv("LL_CUDA_EMU_LT_REFUSE");
        if (s == DUT && !pb_selftest && !(refuse && *refuse)) {
            ll_backend *cb = ll_backend_counting(pb_be[DUT]);
            const uint64_t q0 = ll_cuda_emu_stream_ops();
            run_side(&sd[s], cb, &cfg, &hp, &b);
            const ll_op_counts *c = ll_backend_counts(cb);
            /* CUB's radix sort is one queued operation here, CUB_SORT kernels on a GPU */
            const size_t eb = offsetof(ll_backend, embed_bwd) / sizeof(void *);
            const uint64_t want = c->launches - c->per_op_launches[eb] + 3 * c->per_op[eb];
            const uint64_t got = ll_cuda_emu_stream_ops() - q0;
            if (got != want) {
                fprintf(stderr, "  %s: %llu stream operations queued, the counting backend's rules say %llu\n",
                        me->name, (unsigned long long)got, (unsigned long long)want);
                for (size_t i = 0; i < sizeof c->per_op / sizeof c->per_op[0]; i++)
                    if (c->per_op[i])
                        fprintf(stderr, "    %-16s %6llu calls %6llu launches\n", ll_backend_op_name(i),
                                (unsigned long long)c->per_op[i], (unsigned long long)c->per_op_launches[i]);
                tu_failures++;
            }
            /* the FFN's ReLU backward rides in the DRELU epilogue wherever the backend offers masks */
            const size_t rb = offsetof(ll_backend, relu_bwd) / sizeof(void *);
            if (pb_be[DUT]->relu_mask_bytes && c->per_op[rb]) {
                fprintf(stderr, "  %s: %llu relu_bwd ops, though %s offers ReLU masks (LL_EPI_DRELU)\n", me->name,
                        (unsigned long long)c->per_op[rb], pb_be[DUT]->name);
                tu_failures++;
            }
            sd[s].counted = cb;
            continue;
        }
#endif
        run_side(&sd[s], pb_be[s], &cfg, &hp, &b);
    }
    /* inside each layer's backward the layer norms' column-sum finishes ran on the side stream
     * (cuda_side.c; the gradients compared below say they were right; ReZero has no norms) */
    const char *side_env = getenv("LL_CUDA_SIDE_STREAM");
    if (!strcmp(pb_be[DUT]->name, "cuda") && !(side_env && !strcmp(side_env, "0")) && !hp.rezero &&
        ll_backend_side_ln_finishes(pb_be[DUT]) == fin0) {
        fprintf(stderr, "  %s: no layer norm's finish ran on the side stream\n", me->name);
        tu_failures++;
    }

    /* the device under test again with each residual sum and the layer norm reading it as two
     * ops: the fused residual_ln_fwd must give the same bits, statistics and every gradient
     * (not again in the reruns with cuBLASLt refusals forced: they test the gemm fallbacks) */
    const char *refusing = getenv("LL_CUDA_EMU_LT_REFUSE");
    if (!(refusing && *refusing)) {
        side un;
        memset(&un, 0, sizeof un);
        un.unfused_ln = 1;
        run_side(&un, pb_be[DUT], &cfg, &hp, &b);
        if (memcmp(un.grads, sd[DUT].grads, un.m->n_params * sizeof(real)) || memcmp(un.st, sd[DUT].st, sizeof un.st)) {
            fprintf(stderr, "  %s: the step with residual_ln_fwd differs from residual_fwd + layernorm_fwd on %s\n",
                    me->name, pb_be[DUT]->name);
            tu_failures++;
        }
        free_side(&un);
        /* ... and as one CUDA graph: (1) model A's step, built; (2) A's next update on another
         * batch of the same shape (other tokens, lengths and token count) with the next dropout
         * step: replayed without a capture, it must equal the same two updates run op by op
         * (A's arena is reserved, as the trainer does, so it does not move); (3) model B, the same structure, one graph kept
         * (LL_CUDA_GRAPHS_KEPT=1): its capture updates A's executable graph with B's pointers
         * (an update that kept the old parameters would run the freed model A's step).
         * LayerDrop / CAD methods: A runs with the draws as conditionals (ll_model.drop_conds)
         * and its second update has draws of its own, which the replayed graph must follow;
         * the op-by-op reference queues the same conditionals (each one's host branch). */
        if (pb_be[DUT]->graph_begin) {
            ll_batch more[1] = {{0}};
            for (int i = 0; i < 1; i++) {
                gc_make_batch(&more[i], b.B, b.S, b.T, hp.V, 43 + (uint64_t)i);
                more[i].pair = b.pair, more[i].src_lang = b.src_lang, more[i].tgt_lang = b.tgt_lang;
            }
            side ea, ga;
            memset(&ea, 0, sizeof ea);
            memset(&ga, 0, sizeof ga);
            ea.more = ga.more = more;
            ea.n_more = ga.n_more = 1;
            ga.graphs = 1;
            ea.drop_conds = ga.drop_conds = has_drops(&cfg); /* LayerDrop / CAD: new draws, the same graph */
            run_side(&ea, pb_be[DUT], &cfg, &hp, &b);
            run_side(&ga, pb_be[DUT], &cfg, &hp, &b);
            if (ga.more_graphs.replays != 1 || ga.more_graphs.captures != 0 || ga.more_graphs.launches != 1) {
                fprintf(stderr, "  %s: the second update as a CUDA graph: %llu replays, %llu captures (want 1, 0)\n",
                        me->name, (unsigned long long)ga.more_graphs.replays,
                        (unsigned long long)ga.more_graphs.captures);
                tu_failures++;
            }
            if (memcmp(ga.grads, ea.grads, ga.m->n_params * sizeof(real)) || memcmp(ga.st, ea.st, sizeof ga.st)) {
                fprintf(stderr, "  %s: the replayed CUDA graph step differs from the step run op by op\n", me->name);
                tu_failures++;
            }
            if (ga.drop_conds && !ga.conditionals) {
                fprintf(stderr, "  %s: LayerDrop / CAD as conditionals, but the graph has no conditional node\n",
                        me->name);
                tu_failures++;
            }
            free_side(&ea);
            free_side(&ga);
            gc_free_batch(&more[0]);
            ll_graph_stats g0, g1;
            pb_be[DUT]->graph_stats(pb_be[DUT], &g0);
            side gr;
            memset(&gr, 0, sizeof gr);
            gr.graphs = 1;
            run_side(&gr, pb_be[DUT], &cfg, &hp, &b);
            pb_be[DUT]->graph_stats(pb_be[DUT], &g1);
            /* (after A's graph with conditionals, of another family: B's is built, not updated) */
            const uint64_t want_upd = !has_drops(&cfg);
            if (g1.launches != g0.launches + 1 || g1.updates != g0.updates + want_upd ||
                g1.instantiations != g0.instantiations + !want_upd) {
                fprintf(stderr, "  %s: model B's step as a CUDA graph: %llu launches, %llu updates, %llu built (want 1, "
                        "%llu, %llu)\n",
                        me->name, (unsigned long long)(g1.launches - g0.launches),
                        (unsigned long long)(g1.updates - g0.updates),
                        (unsigned long long)(g1.instantiations - g0.instantiations), (unsigned long long)want_upd,
                        (unsigned long long)!want_upd);
                tu_failures++;
            }
            if (memcmp(gr.grads, sd[DUT].grads, gr.m->n_params * sizeof(real)) || memcmp(gr.st, sd[DUT].st, sizeof gr.st)) {
                fprintf(stderr, "  %s: model B's step as a CUDA graph differs from the step run op by op\n", me->name);
                tu_failures++;
            }
            if (!pb_quiet)
                printf("  %s: as a CUDA graph of %llu nodes: the same bits (built, replayed, updated)\n", me->name,
                       (unsigned long long)((g1.nodes - g0.nodes)));
            free_side(&gr);
        }
        /* ... and with activation checkpointing (ll_model.recompute: each layer's forward again right
         * before its backward), op by op and, where the backend has graphs, as one CUDA graph (after
         * the graph checks above, whose counts assume the graphs they built): the same bits */
        for (int g = 0; g < (pb_be[DUT]->graph_begin ? 2 : 1); g++) {
            side rc;
            memset(&rc, 0, sizeof rc);
            rc.recompute = 1;
            rc.graphs = g;
            run_side(&rc, pb_be[DUT], &cfg, &hp, &b);
            if (memcmp(rc.grads, sd[DUT].grads, rc.m->n_params * sizeof(real)) || memcmp(rc.st, sd[DUT].st, sizeof rc.st)) {
                fprintf(stderr, "  %s: the step recomputing each layer%s differs from the step keeping them on %s\n",
                        me->name, g ? " (a CUDA graph)" : "", pb_be[DUT]->name);
                tu_failures++;
            }
            free_side(&rc);
        }
        /* LayerDrop / CAD methods: recomputing inside a CUDA graph whose layers and branches are
         * conditional nodes (the recomputed forward queues its own conditionals) = the same step op
         * by op, keeping every activation, the conditionals queued with their host branches */
        if (pb_be[DUT]->graph_begin && has_drops(&cfg)) {
            side rg, ref;
            memset(&rg, 0, sizeof rg);
            memset(&ref, 0, sizeof ref);
            rg.recompute = rg.graphs = rg.drop_conds = 1;
            ref.drop_conds = 1;
            run_side(&rg, pb_be[DUT], &cfg, &hp, &b);
            run_side(&ref, pb_be[DUT], &cfg, &hp, &b);
            if (!rg.conditionals || memcmp(rg.grads, ref.grads, rg.m->n_params * sizeof(real)) ||
                memcmp(rg.st, ref.st, sizeof rg.st)) {
                fprintf(stderr, "  %s: recomputing in a CUDA graph with conditionals (%llu) differs from the step op "
                        "by op\n", me->name, (unsigned long long)rg.conditionals);
                tu_failures++;
            }
            free_side(&rg);
            free_side(&ref);
        }
    }
    static const struct { int slot; const char *name; } slots[] = {
        {LL_ST_LOSS, "loss"}, {LL_ST_NLL, "nll"}, {LL_ST_CE2, "ce2 (DDR)"}, {LL_ST_NLL2, "nll2 (DDR)"},
        {LL_ST_DDR, "ddr"},   {LL_ST_ALD, "ald"}, {LL_ST_KL, "kl"},         {LL_ST_LK, "lk"}};
    const int bf16 = pb_act == LL_BF16;
    const double tol_loss = bf16 ? TOL_STEP_BF16_LOSS : TOL_STEP, tol_grad = bf16 ? TOL_STEP_BF16_L2 : TOL_STEP;
    side floor_sd; /* bf16: the fp32 CPU run, whose distance from the bf16 CPU run is the noise floor */
    memset(&floor_sd, 0, sizeof floor_sd);
    if (bf16) run_side(&floor_sd, ll_backend_cpu_precision(LL_F32), &cfg, &hp, &b);
    double worst_loss = 0;
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        const double g = sd[DUT].st[slots[i].slot], f = sd[REF].st[slots[i].slot];
        const double e = fabs(g - f) / fmax(fabs(f), 1e-7);
        if (!(e <= worst_loss)) worst_loss = e;
        if (!(e <= tol_loss)) {
            fprintf(stderr, "  %s: %s: %s %.9g, cpu %.9g (error %.3g)\n", me->name, slots[i].name, pb_be[DUT]->name, g,
                    f, e);
            tu_failures++;
        }
    }
    double worst = 0, worst_floor = 0;
    const char *worst_name = "-";
    const ll_model *m = sd[REF].m;
    for (int t = 0; t < m->n_table; t++) {
        const ll_param *p = &m->table[t];
        const real *g = sd[DUT].grads + p->offset, *f = sd[REF].grads + p->offset;
        double ss = 0;
        for (size_t i = 0; i < p->numel; i++) ss += (double)f[i] * f[i];
        const double den0 = fmax(sqrt(ss / (double)(p->numel ? p->numel : 1)), 1e-7);
        double e = 0, d2 = 0;
        size_t wi = 0;
        for (size_t i = 0; i < p->numel; i++) {
            const double d = (double)g[i] - f[i];
            double ei = fabs(d) / fmax(fabs((double)f[i]), den0);
            if (!(ei <= e)) e = ei, wi = i;
            d2 += d * d;
        }
        double tol_t = tol_grad, fl = 0;
        if (bf16) { /* relative L2 error of the tensor (see above), against the larger of 2e-2 and the floor */
            const double den = fmax(sqrt(ss), 1e-7 * sqrt((double)(p->numel ? p->numel : 1)));
            e = sqrt(d2) / den;
            double f2 = 0;
            for (size_t i = 0; i < p->numel; i++) {
                const double d = (double)floor_sd.grads[p->offset + i] - f[i];
                f2 += d * d;
            }
            fl = sqrt(f2) / den;
            if (fl > worst_floor) worst_floor = fl;
            tol_t = fmax(tol_grad, fl);
        }
        if (!(e <= worst)) worst = e, worst_name = p->name;
        if (!(e <= tol_t)) {
            fprintf(stderr, "  %s: grad %s [%zu]: error %.3g, bf16 floor %.3g (worst element %zu: %s %.9g, cpu %.9g)\n",
                    me->name, p->name, p->numel, e, fl, wi, pb_be[DUT]->name, (double)g[wi], (double)f[wi]);
            tu_failures++;
        }
    }
    const char *forced = getenv("LL_CUDA_EMU_LT_REFUSE");
    if (forced && *forced && !pb_selftest) {
        if (sd[DUT].fallbacks == 0) {
            fprintf(stderr, "  %s: LL_CUDA_EMU_LT_REFUSE=%s, but no gemm call was counted as a fallback\n", me->name,
                    forced);
            tu_failures++;
        }
    } else if (sd[DUT].fallbacks) {
        fprintf(stderr, "  %s: %llu gemm calls of the step fell back from one fused cuBLASLt matmul (refused epilogue, "
                "bias type or alignment; LL_CUDA_EMU_VERBOSE=1 says why)\n", me->name,
                (unsigned long long)sd[DUT].fallbacks);
        tu_failures++;
    }
    const int ok = tu_failures == before;
    char extra[160] = "";
    for (size_t i = 2; i < sizeof slots / sizeof slots[0]; i++)
        if (sd[REF].st[slots[i].slot] != 0)
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " %s %.4g", slots[i].name,
                     sd[REF].st[slots[i].slot]);
    char fls[48] = "";
    if (bf16) snprintf(fls, sizeof fls, "; bf16 floor up to %.2g", worst_floor);
    printf("%s  %-18s loss %.6f (cpu %.6f;%s), %d gradient tensors, worst errors: loss %.2g, gradient %.2g (%s%s)\n",
           ok ? "PASS" : "FAIL", me->name, sd[DUT].st[LL_ST_LOSS], sd[REF].st[LL_ST_LOSS], extra, m->n_table,
           worst_loss, worst, worst_name, fls);
    fflush(stdout);
    for (int s = 0; s < 2; s++) free_side(&sd[s]);
    if (bf16) free_side(&floor_sd);
    gc_free_batch(&b);
    ll_config_free(&cfg);
    return ok;
}

int main(int argc, char **argv) {
    setenv("LL_CUDA_GRAPHS_KEPT", "1", 1); /* a second model's capture updates the first one's graph */
    const int n = (int)(sizeof methods / sizeof methods[0]);
    const int child = argc == 3 && !strcmp(argv[1], "--method");
    int rc = pb_setup(child);
    if (rc) return child ? 1 : rc;
    pb_break_from_env();
    if (child) { /* one method, in its own process */
        const int i = atoi(argv[2]);
        if (i < 0 || i >= n) ll_die("--method %s: expected 0..%d", argv[2], n - 1);
        return run_method(&methods[i]) ? 0 : PB_CHECKS_FAILED;
    }
    const char *missing = ll_backend_missing(pb_be[DUT]);
    if (missing) { /* ll_model_new would stop the process: say it as a test failure */
        printf("FAIL  every method: the %s backend lacks op '%s' (tests/gpu/test_ops_cuda lists them all)\n",
               pb_be[DUT]->name, missing);
        tu_failures++;
        return tu_finish("gpu_test_step_cuda");
    }
    const int fork_each = pb_use_children();
    /* LL_STEP_TEST_FIRST_FAIL=1: stop at the first method that fails (the mutation tests: a killed
     * mutant need not run the others) */
    const char *ff = getenv("LL_STEP_TEST_FIRST_FAIL");
    const int first_fail = ff && *ff && strcmp(ff, "0") != 0;
    int pass = 0, ran = 0;
    for (int i = 0; i < n; i++) {
        char idx[16], why[160] = "";
        snprintf(idx, sizeof idx, "%d", i);
        const int r = fork_each ? pb_child(argv[0], "--method", idx, 300, why, sizeof why) : !run_method(&methods[i]);
        if (r < 0) printf("FAIL  %-18s %s\n", methods[i].name, why);
        pass += r == 0;
        ran++;
        if (r != 0 && first_fail) {
            printf("LL_STEP_TEST_FIRST_FAIL: stopped after method %d of %d\n", ran, n);
            break;
        }
    }
    printf("methods: %d of %d match (backend under test: %s, %s activations)\n", pass, n, pb_be[DUT]->name,
           ll_dtype_str(pb_act));
    if (fork_each) tu_failures += n - pass;
    if (pass < n && !tu_failures) tu_failures = n - pass;
    return tu_finish(pb_selftest ? "parity_selftest_step" : "gpu_test_step_cuda");
}
