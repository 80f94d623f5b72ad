/* Incremental-decoding ops on the CPU: the KV-cache write, the beam reorder
 * the beam search's top-k over the vocabulary and the hard alignment (contracts in
 * include/ll/backend.h).  They are ops, not host code in the decoder, so that
 * the CUDA backend keeps the cache and the [rows, V] log-probabilities on the
 * device and the host reads only k candidates per sentence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "fixed_sum.h"
#include "vecmath.h"

/* Copies only: the same code serves every activation dtype (element size from be). */
void cpu_copy_rows(ll_backend *be, ll_act *dst, size_t dst_stride, const ll_act *src, size_t src_stride, int rows,
                   size_t n, const int *at, size_t at_stride) {
    const size_t e = ll_act_size(be);
    if (at) dst = (ll_act *)((char *)dst + (size_t)*at * at_stride * e);
    for (int i = 0; i < rows; i++)
        memcpy((char *)dst + i * dst_stride * e, (const char *)src + i * src_stride * e, n * e);
}

void cpu_reorder_rows(ll_backend *be, ll_act *buf, ll_act *scratch, const int *from, int rows, size_t n,
                      size_t stride) {
    const size_t e = ll_act_size(be);
    char *b = (char *)buf, *s = (char *)scratch;
    /* only rows that change are copied, once each where possible: a source
     * row that is itself overwritten is saved to scratch first; a source that
     * stays put (or lies past `rows`: compaction) is read in place */
#define MOVED(x) ((x) < rows && from[x] != (x))
    for (int r = 0; r < rows; r++)
        if (MOVED(r) && MOVED(from[r])) memcpy(s + r * n * e, b + from[r] * stride * e, n * e);
    for (int r = 0; r < rows; r++)
        if (MOVED(r)) memcpy(b + r * stride * e, MOVED(from[r]) ? s + r * n * e : b + from[r] * stride * e, n * e);
#undef MOVED
}

/* The rows' ancestry tables (contract in include/ll/backend.h): a beam
 * reorder moves rows * t ints instead of every layer's cache rows. */
void cpu_beam_ancestry(ll_backend *be, int *anc, int *scratch, const int *from, int rows, int t, const int *t_at,
                       int stride, int group) {
    (void)be;
    if (t_at) t += *t_at;
    if (from) {
        for (int r = 0; r < rows; r++) {
            const int f = from[r], shift = (r / group - f / group) * group;
            const int *src = anc + (size_t)f * stride;
            int *dst = scratch + (size_t)r * t;
            for (int j = 0; j < t; j++) dst[j] = src[j] + shift;
        }
        for (int r = 0; r < rows; r++) memcpy(anc + (size_t)r * stride, scratch + (size_t)r * t, sizeof(int) * t);
    }
    if (t < stride)
        for (int r = 0; r < rows; r++) anc[(size_t)r * stride + t] = r;
}

/* Diverse beam search's penalty: how often token v fills the slots of the earlier subgroups. */
typedef struct {
    const int32_t *tok; /* [n] their tokens */
    int n;
    double strength;
} div_pen;

/* x less the penalty of token v: one fma, so that no compiler's contraction changes it (the
 * CUDA kernel computes the same) */
static double div_less(const div_pen *p, int v, double x) {
    int c = 0;
    for (int i = 0; i < p->n; i++) c += p->tok[i] == v;
    return fma(-p->strength, (double)c, x);
}

/* One (sub)group: rows row0, row0 + step, .. below row_end into a list of k,
 * best first, by insertion; a candidate replaces the worst only when strictly
 * better, so among equal scores the earlier (lower row, token) stays ahead: a
 * stable top-k.  pen (n > 0): scores and lp less its penalty. */
static void topk_rows(double *score, real *lp, int32_t *flat, const real *logp, const double *cum, uint8_t mode,
                      int row0, int row_end, int step, int V, int k, int pad, int bos, int eos, const div_pen *pen) {
    int n = 0;
    double thresh = -INFINITY; /* score of the k-th candidate once there are k */
    const int eos_only = mode & 2, eos_ok = mode & 1;
    /* a penalty of either sign keeps the skips below exact when it only lowers scores */
    const int penal = pen->n > 0, lowers = !penal || pen->strength >= 0;
    for (int r = row0; r < row_end; r += step) {
        const double cs = cum[r];
        if (cs == -INFINITY) continue; /* dead row */
        const real *l = logp + (size_t)r * V;
        const int v0 = eos_only ? eos : 0, v1 = eos_only ? eos + 1 : V;
        for (int c0 = v0; c0 < v1; c0 += 64) {
            const int c1 = c0 + 64 < v1 ? c0 + 64 : v1;
            /* once there are k candidates, a chunk whose best cannot beat the
             * k-th is skipped whole (exact: cs + l[v] <= cs + max <= thresh) */
            if (lowers && n == k && cs + (double)ll_row_max(l + c0, c1 - c0) <= thresh) continue;
            for (int v = c0; v < c1; v++) {
                double sc = cs + (double)l[v];
                if (lowers && !(sc > thresh)) continue; /* also drops NaN and -inf */
                if (v == pad || v == bos || (v == eos && !eos_ok)) continue;
                if (penal) {
                    sc = div_less(pen, v, sc);
                    if (!(sc > thresh)) continue;
                }
                int pos = n < k ? n++ : k - 1;
                while (pos > 0 && score[pos - 1] < sc) {
                    score[pos] = score[pos - 1];
                    lp[pos] = lp[pos - 1];
                    flat[pos] = flat[pos - 1];
                    pos--;
                }
                score[pos] = sc;
                lp[pos] = penal ? (real)div_less(pen, v, (double)l[v]) : l[v];
                flat[pos] = (int32_t)((size_t)r * V + v);
                if (n == k) thresh = score[k - 1];
            }
        }
    }
    for (int i = n; i < k; i++) {
        score[i] = -INFINITY;
        lp[i] = 0;
        flat[i] = -1;
    }
}

/* One group (a sentence's `beam` rows); with D > 1 subgroups ranked one after
 * another, each penalised by the earlier ones' tokens, into interleaved slots. */
static void topk_group(double *score, real *lp, int32_t *flat, const real *logp, const double *cum, uint8_t mode,
                       int row0, int beam, int V, int k, int D, double strength, int pad, int bos, int eos) {
    div_pen pen = {.strength = strength};
    if (D <= 1) {
        topk_rows(score, lp, flat, logp, cum, mode, row0, row0 + beam, 1, V, k, pad, bos, eos, &pen);
        return;
    }
    const int kk = k / D;
    double *s = ll_malloc(sizeof(double) * kk);
    real *l = ll_malloc(sizeof(real) * kk);
    int32_t *f = ll_malloc(sizeof(int32_t) * kk), *tok = ll_malloc(sizeof(int32_t) * k);
    pen.tok = tok;
    for (int sub = 0; sub < D; sub++) {
        const int first = beam == 1 ? row0 : row0 + sub, step = beam == 1 ? 1 : D;
        topk_rows(s, l, f, logp, cum, mode, first, row0 + beam, step, V, kk, pad, bos, eos, &pen);
        for (int q = 0; q < kk; q++) {
            score[q * D + sub] = s[q], lp[q * D + sub] = l[q], flat[q * D + sub] = f[q];
            if (f[q] >= 0) tok[pen.n++] = f[q] % V;
        }
    }
    free(s), free(l), free(f), free(tok);
}

void cpu_beam_topk(ll_backend *be, double *score, real *lp, int32_t *flat, const ll_act *logp_act, const double *cum,
                   const uint8_t *mode, int groups, int beam, int V, int k, int div_groups, double div_strength,
                   int pad, int bos, int eos) {
    (void)be;
    const real *logp = (const real *)logp_act;
#pragma omp parallel for schedule(static) if (groups > 1 && (size_t)groups * beam * V > 200000)
    for (int g = 0; g < groups; g++)
        topk_group(score + (size_t)g * k, lp + (size_t)g * k, flat + (size_t)g * k, logp, cum, mode[g], g * beam,
                   beam, V, k, div_groups, div_strength, pad, bos, eos);
}

/* Row r's attention probabilities over its sentence b's first n keys, summed over the heads in
 * head order, into sum[n] (P: [n] scratch). */
static void head_sums(const real *q, int q_stride, const real *kv, int kv_stride, int r, int b, int n, int S, int H,
                      int Dh, real *P, real *sum) {
    const real scale = 1 / sqrt((real)Dh);
    for (int j = 0; j < n; j++) sum[j] = 0;
    for (int h = 0; h < H; h++) {
        const real *qi = q + (size_t)r * q_stride + (size_t)h * Dh;
        const real *kb = kv + (size_t)b * S * kv_stride + (size_t)h * Dh;
        real mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            P[j] = ll_dot_fixed(qi, kb + (size_t)j * kv_stride, Dh) * scale;
            mx = P[j] > mx ? P[j] : mx;
        }
        const real z = ll_row_exp_inplace(P, n, mx, NULL);
        for (int j = 0; j < n; j++) sum[j] += P[j] / z;
    }
}

/* the first maximum among the keys before the source's EOS (n >= 2) */
static int first_max(const real *v, int n) {
    int best = 0;
    for (int j = 1; j < n - 1; j++)
        if (v[j] > v[best]) best = j;
    return best;
}

/* Hard alignment of a decoding step (contract in include/ll/backend.h): per
 * query row, the probabilities of its sentence's keys summed over the heads;
 * the first maximum among the keys before the source's EOS. */
void cpu_attn_align(ll_backend *be, int32_t *idx, const ll_act *q_, int q_stride, const ll_act *kv_, int kv_stride,
                    const int *key_len, int sents, int per_sent, int S, int H, int Dh) {
    (void)be;
    const real *q = (const real *)q_, *kv = (const real *)kv_;
    const int rows = sents * per_sent;
#pragma omp parallel if ((size_t)rows * S * H * Dh > 200000)
    {
        real *P = ll_aligned_alloc(sizeof(real) * 2 * (S > 0 ? S : 1)), *sum = P + (S > 0 ? S : 1);
#pragma omp for schedule(static)
        for (int r = 0; r < rows; r++) {
            const int b = r / per_sent, n = key_len[b] < S ? key_len[b] : S;
            if (n < 2) {
                idx[r] = -1;
                continue;
            }
            head_sums(q, q_stride, kv, kv_stride, r, b, n, S, H, Dh, P, sum);
            idx[r] = first_max(sum, n);
        }
        free(P);
    }
}

/* An ensemble member's share of the alignment: acc (=, +=) w / H * the head sums. */
void cpu_attn_probs(ll_backend *be, real *acc, int overwrite, real w, const ll_act *q_, int q_stride,
                    const ll_act *kv_, int kv_stride, const int *key_len, int sents, int per_sent, int S, int H,
                    int Dh) {
    (void)be;
    const real *q = (const real *)q_, *kv = (const real *)kv_;
    const int rows = sents * per_sent;
    const real f = w / (real)H;
#pragma omp parallel if ((size_t)rows * S * H * Dh > 200000)
    {
        real *P = ll_aligned_alloc(sizeof(real) * 2 * (S > 0 ? S : 1)), *sum = P + (S > 0 ? S : 1);
#pragma omp for schedule(static)
        for (int r = 0; r < rows; r++) {
            const int b = r / per_sent, n = key_len[b] < S ? key_len[b] : S;
            real *a = acc + (size_t)r * S;
            head_sums(q, q_stride, kv, kv_stride, r, b, n, S, H, Dh, P, sum);
            for (int j = 0; j < n; j++) a[j] = overwrite ? f * sum[j] : a[j] + f * sum[j];
        }
        free(P);
    }
}

void cpu_align_argmax(ll_backend *be, int32_t *idx, const real *acc, const int *key_len, int sents, int per_sent,
                      int S) {
    (void)be;
    for (int r = 0; r < sents * per_sent; r++) {
        const int b = r / per_sent, n = key_len[b] < S ? key_len[b] : S;
        idx[r] = n < 2 ? -1 : first_max(acc + (size_t)r * S, n);
    }
}
