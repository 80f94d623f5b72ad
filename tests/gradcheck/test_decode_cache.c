/* The KV-cache decoding path gives the same log-probabilities as full
 * (teacher-forced) recomputation, and reordering rows moves their caches.
 * Built twice: in double (grad_) and in fp32 (f32_, the fast decoding paths). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/testutil.h"
#include "gradcheck.h"
#include "ll/model.h"

static void check(const char *label, ll_hparams hp, int beam, int ctl) {
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 3);
    if (ctl) { /* soft gates and skipped layers/branches, as latent depth and CAD set them */
        m->enc_ctl[0].skip = 1;
        ll_model_set_gate(m, 0, 1, 0.6);
        ll_model_set_gate(m, 1, 0, 0.4);
        m->dec_ctl[1].skip = 1;
        m->dec_ctl[2].skip_cross = 1;
    }
    ll_batch b;
    gc_make_batch(&b, 3, 7, 6, hp.V, 5);
    const int N = b.B * beam, V = hp.V;
    real *full = malloc(sizeof(real) * b.B * b.T * V);
    memcpy(full, ll_model_logprobs(m, &b), sizeof(real) * b.B * b.T * V);
    ll_dec_state *d = ll_decode_begin(m, b.src, b.src_len, b.B, b.S, beam, b.T + 2);
    real *logp = malloc(sizeof(real) * N * V);
    int32_t *prev = malloc(sizeof(int32_t) * N);
    int *from = malloc(sizeof(int) * N);
    double worst = 0;
    for (int t = 0; t < b.T; t++) {
        for (int n = 0; n < N; n++) prev[n] = b.tgt_in[(n / beam) * b.T + t];
        ll_decode_step(m, d, prev, logp);
        for (int n = 0; n < N; n++) {
            int s = n / beam;
            if (t >= b.tgt_len[s]) continue;
            for (int v = 0; v < V; v++) {
                double e = fabs(logp[(size_t)n * V + v] - full[((size_t)s * b.T + t) * V + v]);
                if (e > worst) worst = e;
            }
        }
        /* rows of a sentence hold identical prefixes: swapping them must change nothing */
        for (int n = 0; n < N; n++) from[n] = (n / beam) * beam + (beam - 1 - n % beam);
        ll_decode_reorder(m, d, from);
    }
    fprintf(stderr, "%s: max |cached - full| = %.3g\n", label, worst);
    /* double build: same math to rounding; fp32 build: packed weights and a
     * different summation order than the teacher-forced gemms */
    CHECK_MSG(worst < (sizeof(real) == 8 ? 1e-10 : 2e-5), "%s: cached decoding differs from recomputation by %g", label, worst);
    ll_decode_end(m, d);
    free(full);
    free(logp);
    free(prev);
    free(from);
    gc_free_batch(&b);
    ll_model_free(m);
}

int main(void) {
    ll_set_threads(1); /* tiny shapes: threads only add overhead */
    ll_hparams hp = {.C = 16, .F = 24, .H = 4, .Le = 2, .Ld = 3, .V = 31, .max_pos = 64, .share_all = 1,
                     .tie_output = 1, .dropout = 0.3, .attn_dropout = 0.1};
    check("pre-norm beam 1", hp, 1, 0);
    check("pre-norm gates+skips", hp, 2, 1);
    check("pre-norm beam 3", hp, 3, 0);
    hp.post_norm = 1;
    hp.share_all = 0;
    hp.tie_output = 0;
    check("post-norm beam 2", hp, 2, 0);
    check("post-norm gates+skips", hp, 2, 1);
    return tu_finish("grad_test_decode_cache");
}
