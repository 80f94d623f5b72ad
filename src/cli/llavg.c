/* llavg: average the parameters of several checkpoints into one model file,
 * as fairseq's scripts/average_checkpoints.py does (reference-spec §8):
 * every model tensor is averaged elementwise (summed in double, divided by N);
 * config and vocabulary come from the first (newest) input; optimizer and
 * trainer state are dropped.  Every input must be a valid model file (its
 * config consistent with its tensors, all finite: ll_model_from_file), and all
 * must share the architecture and vocabulary: averaging a heads=2 run with a
 * heads=4 run of the same shapes would give a meaningless model.
 *
 *   llavg --output OUT.llm M1.llm M2.llm ...
 *   llavg --output OUT.llm --dir CHECKPOINT_DIR --last N   (newest N checkpoint_<U>.llm) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/checkpoint.h"
#include "ll/core.h"
#include "ll/train.h"

static int is_model_tensor(const char *name) { return strncmp(name, "optim.", 6) && strncmp(name, "state.", 6); }

int main(int argc, char **argv) {
    ll_set_progname("llavg");
    ll_args_no_repeats(argc, argv, NULL);
    const char *out = NULL, *dir = NULL;
    int last = 0, n_in = 0;
    char **in = calloc(argc, sizeof(char *));
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--output") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--last") && i + 1 < argc) {
            long v;
            if (ll_parse_long("--last", argv[++i], 1, 1000000, &v)) ll_die("%s", ll_errbuf());
            last = (int)v;
        }
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: llavg --output OUT.llm M1.llm M2.llm ...\n"
                   "       llavg --output OUT.llm --dir CHECKPOINT_DIR --last N\n");
            free(in);
            return 0;
        } else if (argv[i][0] == '-')
            ll_die("unknown argument '%s' (see llavg --help)", argv[i]);
        else
            in[n_in++] = argv[i];
    }
    if (!out) ll_die("--output OUT.llm is required");
    const int n_args = n_in; /* in[n_args..] are malloc'd paths from --dir */
    /* two ways to name the inputs, not both: a file named again by --dir would be weighted twice */
    if (dir && n_in) ll_die("--dir D --last N or checkpoint files, not both (see llavg --help)");
    if (last && !dir) ll_die("--last N takes the newest N checkpoints of --dir D; no --dir given");
    if (dir) {
        if (last < 1) ll_die("--dir needs --last N with N >= 1");
        long *ups = NULL;
        int n = ll_ckpt_list_numbered(dir, &ups);
        if (n < 0) ll_die("%s", ll_errbuf());
        if (n < last) ll_die("%s: %d numbered checkpoints, fewer than --last %d", dir, n, last);
        in = realloc(in, sizeof(char *) * (n_in + last));
        for (int k = 0; k < last; k++) in[n_in++] = ll_ckpt_numbered_path(dir, ups[n - 1 - k]); /* newest first */
        free(ups);
    }
    if (n_in < 1) ll_die("no input checkpoints");
    for (int i = 0; i < n_in; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(in[i], in[j]))
                ll_die("%s is given twice: each checkpoint once, or it is weighted twice", in[i]);
            else if (ll_same_file(in[i], in[j]))
                ll_die("%s and %s are one file: each checkpoint once, or it is weighted twice", in[j], in[i]);
    if (ll_ckpt_output_ok(out, (const char *const *)in, n_in)) ll_die("%s", ll_errbuf());

    ll_ckpt **k = calloc(n_in, sizeof *k);
    ll_hparams hp0;
    for (int i = 0; i < n_in; i++) {
        if (!(k[i] = ll_ckpt_open(in[i]))) ll_die("%s", ll_errbuf());
        ll_model *m = ll_model_from_file(k[i], in[i], ll_backend_cpu(), NULL); /* validates the file */
        if (!m) ll_die("%s", ll_errbuf());
        char what[128];
        size_t v0, vi;
        const void *voc0 = ll_ckpt_vocab(k[0], &v0), *voci = ll_ckpt_vocab(k[i], &vi);
        if (i == 0)
            hp0 = m->hp;
        else if (ll_hparams_arch_diff(&hp0, &m->hp, what, sizeof what))
            ll_die("%s: architecture differs from %s (%s); refusing to average", in[i], in[0], what);
        else if (v0 != vi || memcmp(voc0, voci, v0))
            ll_die("%s: vocabulary differs from %s; refusing to average", in[i], in[0]);
        ll_model_free(m);
    }
    int nt = ll_ckpt_n_tensors(k[0]);
    ll_tensor_ref *t = calloc(nt, sizeof *t);
    void **bufs = calloc(nt, sizeof(void *));
    int n_out = 0;
    for (int j = 0; j < nt; j++) {
        const ll_tensor_ref *r = ll_ckpt_tensor(k[0], j);
        if (!is_model_tensor(r->name)) continue;
        if (r->dtype != LL_DT_F32 && r->dtype != LL_DT_F64)
            ll_die("%s: tensor '%s' is not floating point", in[0], r->name);
        size_t n = r->nbytes / ll_dtype_size(r->dtype);
        double *acc = calloc(n ? n : 1, sizeof(double));
        for (int i = 0; i < n_in; i++) {
            const ll_tensor_ref *s = ll_ckpt_find(k[i], r->name);
            if (!s) ll_die("%s: has no tensor '%s' (found in %s)", in[i], r->name, in[0]);
            if (s->dtype != r->dtype || s->nbytes != r->nbytes || s->ndim != r->ndim ||
                memcmp(s->shape, r->shape, sizeof(int64_t) * r->ndim))
                ll_die("%s: tensor '%s' differs in shape or dtype from %s", in[i], r->name, in[0]);
            for (size_t e = 0; e < n; e++)
                acc[e] += r->dtype == LL_DT_F32 ? ((const float *)s->data)[e] : ((const double *)s->data)[e];
        }
        void *o = malloc(r->nbytes ? r->nbytes : 1);
        for (size_t e = 0; e < n; e++) {
            if (r->dtype == LL_DT_F32)
                ((float *)o)[e] = (float)(acc[e] / n_in);
            else
                ((double *)o)[e] = acc[e] / n_in;
        }
        free(acc);
        t[n_out] = *r;
        t[n_out].data = o;
        bufs[n_out++] = o;
    }
    for (int i = 1; i < n_in; i++) /* same model tensor set everywhere */
        for (int j = 0; j < ll_ckpt_n_tensors(k[i]); j++) {
            const ll_tensor_ref *s = ll_ckpt_tensor(k[i], j);
            if (is_model_tensor(s->name) && !ll_ckpt_find(k[0], s->name))
                ll_die("%s: extra tensor '%s' not in %s", in[i], s->name, in[0]);
        }
    size_t vlen;
    const void *vocab = ll_ckpt_vocab(k[0], &vlen);
    ll_ckpt_contents c = {.config_text = ll_ckpt_config_text(k[0]), .vocab = vocab, .vocab_len = vlen,
                          .tensors = t, .n_tensors = n_out};
    if (ll_ckpt_write(out, &c)) ll_die("%s", ll_errbuf());
    fprintf(stderr, "averaged %d checkpoints (%d tensors) into %s\n", n_in, n_out, out);
    for (int j = 0; j < n_out; j++) free(bufs[j]);
    for (int i = 0; i < n_in; i++) ll_ckpt_close(k[i]);
    for (int i = n_args; i < n_in; i++) free(in[i]); /* LeakSanitizer checks the tools too */
    free(in);
    free(k);
    free(t);
    free(bufs);
    return 0;
}
