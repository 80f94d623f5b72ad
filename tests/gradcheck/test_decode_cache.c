/* The KV-cache decoding path gives the same log-probabilities as full
 * (teacher-forced) recomputation, for every architecture the decoder has
 * (pre/post-norm, DLCL, ReZero, gates, skipped and switched-off layers), and
 * reordering rows and dropping sentences move their caches.
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
    if (ctl == 2) { /* a latent layer switched off at inference (z = 0) */
        m->dec_ctl[1].skip = 0;
        m->dec_ctl[1].off = 1;
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

/* Rows that hold different sequences: every step permutes the rows within
 * each sentence and, halfway, drops sentence 1; each row must still get the
 * log-probabilities of the sequence it now holds (full recomputation of an
 * N-row batch, one row per sequence). */
static void check_moves(const char *label, ll_hparams hp, int beam) {
    ll_model *m = ll_model_new(&hp, ll_backend_cpu());
    ll_model_init(m, 5);
    const int B = 3, S = 7, T = 6, N = B * beam, V = hp.V;
    ll_batch sb, rb; /* sb: the B sentences; rb: N rows, row n = source n / beam, its own target */
    gc_make_batch(&sb, B, S, T, V, 11);
    gc_make_batch(&rb, N, S, T, V, 12);
    rb.n_src_tokens = 0;
    for (int n = 0; n < N; n++) {
        memcpy(rb.src + (size_t)n * S, sb.src + (size_t)(n / beam) * S, sizeof(int32_t) * S);
        rb.src_len[n] = sb.src_len[n / beam];
        rb.n_src_tokens += rb.src_len[n];
    }
    real *full = malloc(sizeof(real) * N * T * V);
    memcpy(full, ll_model_logprobs(m, &rb), sizeof(real) * N * T * V);
    ll_dec_state *d = ll_decode_begin(m, sb.src, sb.src_len, B, S, beam, T + 1);
    real *logp = malloc(sizeof(real) * N * V);
    int32_t *prev = malloc(sizeof(int32_t) * N);
    int *from = malloc(sizeof(int) * N), *seq = malloc(sizeof(int) * N), *seq2 = malloc(sizeof(int) * N);
    for (int n = 0; n < N; n++) seq[n] = n; /* the sequence (row of rb) each row holds */
    int rows = N, moved = 0;
    double worst = 0;
    ll_philox r;
    ll_philox_init(&r, 77, 1, 0);
    for (int t = 0; t < T; t++) {
        for (int n = 0; n < rows; n++) prev[n] = rb.tgt_in[(size_t)seq[n] * T + t];
        ll_decode_step(m, d, prev, logp);
        for (int n = 0; n < rows; n++)
            for (int v = 0; v < V && t < rb.tgt_len[seq[n]]; v++) { /* past its end the sequence is padding */
                double e = fabs(logp[(size_t)n * V + v] - full[((size_t)seq[n] * T + t) * V + v]);
                if (e > worst) worst = e;
            }
        if (t == T / 2 && rows == N) { /* sentence 1 finishes: keep 0 and 2 */
            const int keep[2] = {0, 2};
            ll_decode_compact(m, d, keep, 2);
            for (int j = 0; j < 2; j++)
                for (int b = 0; b < beam; b++) seq[j * beam + b] = seq[keep[j] * beam + b];
            rows = 2 * beam;
        }
        /* a random permutation within each sentence (rows may also repeat: beams fork) */
        for (int n = 0; n < rows; n++) {
            const int base = n / beam * beam;
            from[n] = base + (int)ll_philox_below(&r, (uint64_t)(t * N + n), beam);
            seq2[n] = seq[from[n]];
            moved += from[n] != n;
        }
        memcpy(seq, seq2, sizeof(int) * rows);
        ll_decode_reorder(m, d, from);
    }
    fprintf(stderr, "%s: max |cached - full| = %.3g with %d row moves\n", label, worst, moved);
    CHECK_MSG(moved > 0, "%s: no row moved", label);
    CHECK_MSG(worst < (sizeof(real) == 8 ? 1e-10 : 2e-5), "%s: moved rows differ from recomputation by %g", label, worst);
    ll_decode_end(m, d);
    free(full), free(logp), free(prev), free(from), free(seq), free(seq2);
    gc_free_batch(&sb);
    gc_free_batch(&rb);
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
    check("post-norm layer off", hp, 2, 2);
    check_moves("post-norm moves", hp, 3);
    hp.post_norm = 0;
    check("pre-norm layer off", hp, 2, 2);
    check_moves("pre-norm moves", hp, 3);
    hp.dlcl_dec = hp.dlcl_enc = 1;
    hp.dlcl_ln = 1;
    check("pre-norm DLCL gates+skips", hp, 2, 1);
    check("pre-norm DLCL layer off", hp, 2, 2);
    check_moves("pre-norm DLCL moves", hp, 2);
    hp.post_norm = 1;
    check("post-norm DLCL gates+skips", hp, 2, 1);
    hp.post_norm = 0;
    hp.dlcl_dec = hp.dlcl_enc = 0;
    hp.rezero = 1;
    check("ReZero gates+skips", hp, 2, 1);
    return tu_finish("grad_test_decode_cache");
}
