/* CPU decoding-speed benchmark of ll on the bench model (same as
 * bench/torch_decode_bench.py): d=256, 4 heads, FFN 1024, 6+6 layers, 8k
 * vocabulary, random weights; 64 source sentences x 30 tokens (EOS last); 30
 * output tokens per sentence (EOS is forbidden before step 30 and forced
 * there, so every hypothesis runs the full length); beam 5 and greedy with the
 * real ll_beam_search (fairseq's algorithm, KV cache, finished sentences
 * dropped), called the way lldecode calls it (ll_translate_ids: batching by
 * length, --inter-threads workers).  Prints:
 *   RESULT ll_decode beam=B inter=W sent_per_s=... tok_per_s=...
 * --shortlist K: every batch decodes over K of the V tokens (lldecode --shortlist; a synthetic map
 * listing every (V/K)-th token for every batch: the cost of a K-token output layer).
 * --profile 1: every op timed between syncs (ll_backend_timing: no CUDA graphs) and its time per
 * batch by op class after each beam's RESULT line (where a GPU's decoding goes: beam 5 ran at
 * 2.2x PyTorch's incremental decoding on an H200, greedy at 3.9x; bench/RESULTS.md, session 30). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/backend.h"
#include "ll/decode.h"
#include "ll/model.h"
#include "ll/shortlist.h"
#include "ll/train.h"


int main(int argc, char **argv) {
    ll_cpu_setup(argv);
    int threads = 2, repeats = 3, B = 64, S = 30, T = 30, inter = 0, profile = 0, align = 0, sampling = -1, score = 0, ensemble = 1;
    int no_repeat = 0, diverse = 0, shortlist_k = 0, vocab = 32000, n_sets = 0;
    double siblings = 0;
    const char *sets[32];
    const char *beams = "1,5", *model = NULL, *device = "cpu", *prec = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats")) repeats = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--beams")) beams = argv[i + 1];
        else if (!strcmp(argv[i], "--inter-threads")) inter = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--device")) device = argv[i + 1];
        else if (!strcmp(argv[i], "--precision")) prec = argv[i + 1];
        else if (!strcmp(argv[i], "--batch")) B = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--src-len")) S = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--len")) T = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--profile")) profile = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--alignment")) align = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--sampling")) sampling = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--score")) score = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ensemble")) ensemble = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--no-repeat")) no_repeat = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--diverse")) diverse = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--diversity-rate")) siblings = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--shortlist")) shortlist_k = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--vocab")) vocab = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--set") && n_sets < 32) sets[n_sets++] = argv[i + 1];
        else {
            fprintf(stderr,
                    "usage: %s [--threads N] [--repeats N] [--beams 1,5] [--inter-threads W]\n"
                    "          [--model base (bench/gpu/base.cfg, 128 x 32 -> 32)] [--device cpu|cuda]\n"
                    "          [--precision fp32|bf16|int8] [--batch B] [--src-len S] [--len T] [--profile 1]\n"
                    "          [--alignment 1 (lldecode --alignment)] [--sampling K (lldecode --sampling\n"
                    "          --sampling-topk K, K = 0: all; the --beams values are the draws per sentence)]\n"
                    "          [--score 1 (lldecode --score-reference of T-token references)]\n"
                    "          [--ensemble N (lldecode --model given N times: N models of the same shape)]\n"
                    "          [--no-repeat N (lldecode --no-repeat-ngram-size N)]\n"
                    "          [--diverse G (lldecode --diverse-beam-groups G; beams G divides, others skipped)]\n"
                    "          [--diversity-rate R (lldecode --diversity-rate R)]\n"
                    "          [--shortlist K (lldecode --shortlist: K tokens of the vocabulary per batch)]\n"
                    "          [--vocab V (--model base: its vocabulary, default 32000)]\n"
                    "          [--set section.key=value (--model base: overrides of its config, e.g. model.d_model)]\n",
                    argv[0]);
            return 2;
        }
    }
    ll_set_threads(threads);
    /* default: the CPU bench model (d 256, 6+6, 8k vocabulary); --model base:
     * the GPU benchmark's Transformer-base, vocabulary 32,000 */
    ll_hparams hp = {.C = 256, .F = 1024, .H = 4, .Le = 6, .Ld = 6, .V = 8000, .max_pos = 1024, .share_all = 1,
                     .tie_output = 1};
    if (!model && (n_sets || vocab != 32000)) ll_die("ll_decode_bench: --set and --vocab change --model base only");
    if (model) {
        if (strcmp(model, "base")) ll_die("ll_decode_bench: --model %s: only base", model);
        ll_config cfg;
        if (ll_config_load(&cfg, "bench/gpu/base.cfg")) ll_die("%s", ll_errbuf());
        for (int i = 0; i < n_sets; i++)
            if (ll_config_set(&cfg, sets[i])) ll_die("ll_decode_bench: --set %s: %s", sets[i], ll_errbuf());
        if (vocab < 4) ll_die("ll_decode_bench: --vocab %d: at least 4", vocab);
        ll_hparams_from_config(&hp, &cfg, vocab);
        ll_config_free(&cfg);
    }
    if (!prec) prec = strcmp(device, "cuda") ? "fp32" : "bf16";
    const ll_dtype act = strcmp(prec, "bf16") ? LL_REAL_DTYPE : LL_BF16;
    ll_backend *be = strcmp(device, "cuda") ? ll_backend_cpu_precision(act) : ll_backend_cuda_precision(0, act);
    if (!be) ll_die("ll_decode_bench: %s", ll_errbuf());
    ll_backend *timed = profile ? ll_backend_timing(be) : NULL;
    if (profile && !timed) ll_die("ll_decode_bench: --profile: no timing backend for %s", be->name);
    if (timed) be = timed;
    ll_model *m = ll_model_new(&hp, be), *members[16];
    ll_model_init(m, 1);
    m->decode_int8 = !strcmp(prec, "int8"); /* (lldecode --precision int8: fp32 activations) */
    if (ensemble < 1 || ensemble > 16) ll_die("ll_decode_bench: --ensemble %d: 1 to 16 models", ensemble);
    for (int j = 1; j < ensemble; j++) {
        members[j - 1] = ll_model_new(&hp, be);
        ll_model_init(members[j - 1], 1 + (uint64_t)j);
        members[j - 1]->decode_int8 = m->decode_int8;
    }
    if (ensemble > 1) ll_model_ensemble(m, members, ensemble - 1, NULL);
    ll_shortlist *sl = NULL;
    if (shortlist_k > 0) { /* every (V/K)-th token, EOS and UNK among them */
        if (shortlist_k > hp.V - 1) ll_die("ll_decode_bench: --shortlist %d: at most V - 1 = %d", shortlist_k, hp.V - 1);
        sl = ll_shortlist_new(hp.V);
        int32_t *ids = malloc(sizeof(int32_t) * shortlist_k);
        for (int j = 0; j < shortlist_k; j++) ids[j] = 2 + (int32_t)((long)j * (hp.V - 2) / shortlist_k);
        if (ll_shortlist_add(sl, NULL, 0, ids, shortlist_k)) ll_die("%s", ll_errbuf());
        free(ids);
    }
    int32_t *src = malloc(sizeof(int32_t) * B * S);
    int *len = malloc(sizeof(int) * B);
    int32_t **srcs = malloc(sizeof(int32_t *) * B);
    for (int b = 0; b < B; b++) srcs[b] = src + (size_t)b * S;
    ll_philox r;
    ll_philox_init(&r, 1234, 1001, 0);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < S; t++) src[b * S + t] = t == S - 1 ? LL_EOS : 4 + (int)ll_philox_below(&r, b * S + t, hp.V - 4);
        len[b] = S;
    }
    fprintf(stderr, "ll decode bench: %d sentences x %d tokens -> %d tokens, %s %s, %d threads, BLAS core %s\n", B,
            S, T, be->name, ll_dtype_str(be->act), threads, ll_blas_core());
    for (const char *p = beams; *p;) {
        int beam = atoi(p);
        while (*p && *p != ',') p++; /* (the next value) */
        if (*p == ',') p++;
        ll_search_opts o;
        ll_search_opts_default(&o);
        o.beam = beam;
        o.lenpen = 1;
        o.max_len_a = 0;
        o.max_len_b = T; /* steps 0..T: T tokens then EOS */
        o.min_len = T;
        o.align = align;
        o.sampling = sampling >= 0;
        o.topk = sampling > 0 ? sampling : 0;
        o.no_repeat_ngram = no_repeat;
        if (diverse > 1 && beam % diverse) continue; /* (G must divide the beam) */
        o.diverse_groups = diverse;
        o.diversity_rate = siblings;
        o.shortlist = sl;
        ll_translate_opts to = {.search = o, .max_tokens = 1 << 20, .max_sents = B, .inter_threads = inter};
        ll_nbest *out = calloc(B, sizeof *out);
        double best = 1e30;
        long tokens = 0;
        ll_graph_stats g0 = {0}, g1 = {0}; /* search steps as CUDA graphs (LL_CUDA_DECODE_GRAPHS=0: none) */
        if (be->graph_stats) be->graph_stats(be, &g0);
        for (int rep = 0; rep < repeats + 1; rep++) {
            if (timed && rep == 1) { /* (the first run warms up) */
                ll_op_counts *c = ll_backend_counts(timed);
                memset(c->per_op_ns, 0, sizeof c->per_op_ns);
                memset(c->per_op, 0, sizeof c->per_op);
            }
            double t0 = ll_now();
            ll_translate_ids(m, (const int32_t *const *)srcs, len, B, &to, out, NULL); /* lldecode's path */
            double dt = ll_now() - t0;
            tokens = 0;
            for (int b = 0; b < B; b++) {
                tokens += out[b].n ? out[b].h[0].len - 1 : 0; /* without EOS, as the PyTorch side counts */
                ll_nbest_free(&out[b]);
            }
            if (rep > 0 && dt < best) best = dt; /* the first run warms up */
        }
        if (be->graph_stats) be->graph_stats(be, &g1);
        char what[64] = "";
        if (o.sampling) snprintf(what, sizeof what, " sampling_topk=%d", o.topk);
        if (ensemble > 1) snprintf(what + strlen(what), sizeof what - strlen(what), " ensemble=%d", ensemble);
        if (no_repeat) snprintf(what + strlen(what), sizeof what - strlen(what), " no_repeat=%d", no_repeat);
        if (diverse) snprintf(what + strlen(what), sizeof what - strlen(what), " diverse=%d", diverse);
        if (m->decode_int8) snprintf(what + strlen(what), sizeof what - strlen(what), " int8=1");
        if (siblings > 0) snprintf(what + strlen(what), sizeof what - strlen(what), " diversity_rate=%g", siblings);
        if (sl) snprintf(what + strlen(what), sizeof what - strlen(what), " shortlist=%d", shortlist_k);
        printf("RESULT ll_decode beam=%d inter=%d%s%s sent_per_s=%.2f tok_per_s=%.1f graph_launches=%llu "
               "graph_replays=%llu\n",
               beam, ll_translate_workers(&to), align ? " alignment=1" : "", what, B / best, tokens / best,
               (unsigned long long)(g1.launches - g0.launches), (unsigned long long)(g1.replays - g0.replays));
        if (timed && repeats > 0) {
            printf("profile, beam %d (ms per batch of %d sentences, ops timed between syncs, no CUDA graphs; the "
                   "batch took %.1f ms so):\n",
                   beam, B, 1e3 * best);
            ll_backend_print_profile(stdout, ll_backend_counts(timed), repeats);
        }
        fflush(stdout);
        free(out);
    }
    if (score) { /* forced decoding of T-token references (EOS last): lldecode --score-reference's path */
        int32_t *ref = malloc(sizeof(int32_t) * B * (T + 1));
        int32_t **refs = malloc(sizeof(int32_t *) * B);
        int *rlen = malloc(sizeof(int) * B);
        float **pos = malloc(sizeof(float *) * B);
        for (int b = 0; b < B; b++) {
            for (int t = 0; t <= T; t++) ref[b * (T + 1) + t] = t == T ? LL_EOS : 4 + (int)ll_philox_below(&r, 1u << 20 | (b * (T + 1) + t), hp.V - 4);
            refs[b] = ref + (size_t)b * (T + 1), rlen[b] = T + 1, pos[b] = malloc(sizeof(float) * (T + 1));
        }
        ll_score_opts so = {.max_tokens = 1 << 20, .max_sents = B, .inter_threads = inter, .bos = LL_EOS};
        double best = 1e30;
        for (int rep = 0; rep < repeats + 1; rep++) {
            double t0 = ll_now();
            ll_score_ids(m, (const int32_t *const *)srcs, len, (const int32_t *const *)refs, rlen, B, &so, pos, NULL);
            double dt = ll_now() - t0;
            if (rep > 0 && dt < best) best = dt;
        }
        printf("RESULT ll_score inter=%d ensemble=%d sent_per_s=%.2f tok_per_s=%.1f\n", ll_translate_workers(&(ll_translate_opts){.inter_threads = inter}), ensemble, B / best,
               B * (T + 1) / best);
        for (int b = 0; b < B; b++) free(pos[b]);
        free(ref), free(refs), free(rlen), free(pos);
    }
    ll_model_free(m);
    ll_shortlist_free(sl);
    free(src);
    free(srcs);
    free(len);
    return 0;
}
