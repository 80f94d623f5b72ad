/* sample_draw on the CPU (contract in include/ll/backend.h): one draw per row
 * of a sampling search, in double, rows in parallel.  The reference of the
 * CUDA kernel (kernels/sample.cu), which finds the same candidates and adds
 * the same weights in the same order with other algorithms (a radix select
 * instead of a heap, a sort of ranked chunks instead of qsort).
 *
 * As fairseq: the score is normalised over the whole (tempered) vocabulary;
 * unkpen and the bans (--no-repeat-ngram-size) act after the softmax, so
 * <unk> is drawn e^-unkpen times as often and a banned token never, while
 * the other tokens' scores stay what the model gives them. */
#include <math.h>
#include <stdlib.h>

#include "cpu_internal.h"

/* (q, index) ranks above (q2, index2): higher q, ties to the lower index */
static int above(double q, int i, double q2, int i2) { return q > q2 || (q == q2 && i < i2); }

/* Min-heap of the k best (q, index) pairs seen: the root is the worst kept. */
static void heap_down(int *h, const double *q, int n, int at) {
    for (;;) {
        int w = at, l = 2 * at + 1, r = l + 1;
        if (l < n && above(q[h[w]], h[w], q[h[l]], h[l])) w = l;
        if (r < n && above(q[h[w]], h[w], q[h[r]], h[r])) w = r;
        if (w == at) return;
        const int t = h[w];
        h[w] = h[at], h[at] = t, at = w;
    }
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

typedef struct {
    double w;
    int i; /* position in cand */
} weighted;

/* higher weight first; ties to the lower token (cand is in token order, so the lower position) */
static int by_weight(const void *a, const void *b) {
    const weighted *x = a, *y = b;
    if (x->w != y->w) return x->w < y->w ? 1 : -1;
    return (x->i > y->i) - (x->i < y->i);
}

/* Nucleus (top-p): keep the most probable candidates, best first, until their share of the
 * candidates' weight reaches topp (the one that reaches it included); zero the others' w.
 * Returns the kept weight. */
static double nucleus(double *w, int n, double total, double topp, weighted *order) {
    for (int i = 0; i < n; i++) order[i] = (weighted){w[i], i};
    qsort(order, n, sizeof *order, by_weight);
    double kept = 0;
    int k = 0;
    while (k < n && kept < topp * total) kept += order[k++].w;
    for (int i = k; i < n; i++) w[order[i].i] = 0;
    return kept;
}

/* w[0..n) summed as the contract says: blocks of LL_SAMPLE_SUM_BLOCK in order, their sums in order */
static double block_sum(const double *w, int n) {
    double total = 0;
    for (int j = 0; j < n; j += LL_SAMPLE_SUM_BLOCK) {
        const int e = j + LL_SAMPLE_SUM_BLOCK < n ? j + LL_SAMPLE_SUM_BLOCK : n;
        double b = 0;
        for (int i = j; i < e; i++) b += w[i];
        total += b;
    }
    return total;
}

/* The first candidate whose running sum (the blocks before its own, then its block's terms up to
 * it) exceeds target; -1 when none does (rounding). */
static int walk(const double *w, const int *cand, int n, double target) {
    double P = 0;
    for (int j = 0; j < n; j += LL_SAMPLE_SUM_BLOCK) {
        const int e = j + LL_SAMPLE_SUM_BLOCK < n ? j + LL_SAMPLE_SUM_BLOCK : n;
        double b = 0;
        for (int i = j; i < e; i++) b += w[i];
        if (P + b > target) { /* in this block (its last weighted candidate reaches P + b) */
            double s = 0;
            for (int i = j; i < e; i++) {
                s += w[i];
                if (w[i] > 0 && P + s > target) return cand[i];
            }
        }
        P += b;
    }
    return -1;
}

typedef struct {
    double *q, *w;
    int *cand;
    weighted *order;
} draw_scratch;

/* One row's draw (the contract's steps, in its words); returns the token, *lq its score. */
static int draw(const real *lp, int V, const ll_sample_row *row, const int32_t *ban, const ll_sample_params *p,
                draw_scratch *s, double *lq) {
    double *q = s->q, *w = s->w;
    int *cand = s->cand;
    const int t1 = p->temperature == 1.0, mode = row->mode;
    double mx = -INFINITY, amx = -INFINITY; /* over all tokens (as the model gives them); over the drawable ones */
    for (int v = 0; v < V; v++) {
        q[v] = t1 ? (double)lp[v] : (double)lp[v] / p->temperature;
        if (q[v] > mx) mx = q[v];
        if (v == p->unk) q[v] -= p->unkpen;
    }
    for (int i = 0; i < row->n_ban; i++) q[ban[row->ban0 + i]] = -INFINITY;
#define DRAWABLE(v) ((v) != p->pad && (v) != p->bos && ((v) != p->eos || (mode & 1)) && q[v] > -INFINITY)
    for (int v = 0; v < V; v++)
        if (DRAWABLE(v) && q[v] > amx) amx = q[v];
    int tok = row->forced >= 0 ? row->forced : p->eos; /* at the length limit (mode bit 1), or nothing drawable */
    if (row->forced < 0 && !(mode & 2) && amx > -INFINITY) {
        int n = 0;
        if (p->topk > 0 && p->topk < V) { /* the topk best (ties to the lower id) in a min-heap, then by id */
            for (int v = 0; v < V; v++) {
                if (!DRAWABLE(v)) continue;
                if (n < p->topk) { /* sift up */
                    int at = n++;
                    while (at > 0 && above(q[cand[(at - 1) / 2]], cand[(at - 1) / 2], q[v], v)) {
                        cand[at] = cand[(at - 1) / 2];
                        at = (at - 1) / 2;
                    }
                    cand[at] = v;
                } else if (above(q[v], v, q[cand[0]], cand[0])) {
                    cand[0] = v;
                    heap_down(cand, q, n, 0);
                }
            }
            qsort(cand, n, sizeof(int), cmp_int); /* a fixed order to walk: by token id */
        } else {
            for (int v = 0; v < V; v++)
                if (DRAWABLE(v)) cand[n++] = v;
        }
#undef DRAWABLE
        for (int i = 0; i < n; i++) w[i] = exp(q[cand[i]] - amx);
        double total = block_sum(w, n);
        if (p->topp > 0 && p->topp < 1) total = nucleus(w, n, total, p->topp, s->order);
        tok = walk(w, cand, n, row->u * total);
        for (int i = n - 1; tok < 0; i--) /* (rounding: past the last weight, the last kept) */
            if (w[i] > 0 || i == 0) tok = cand[i];
    }
    if (t1) {
        *lq = (double)lp[tok] - (tok == p->unk ? p->unkpen : 0);
    } else { /* the normaliser of the tempered model, before the penalty */
        for (int v = 0; v < V; v++) w[v] = exp((double)lp[v] / p->temperature - mx); /* (bans and unkpen left out) */
        *lq = q[tok] - (mx + log(block_sum(w, V)));
    }
    return tok;
}

void cpu_sample_draw(ll_backend *be, int32_t *tok, double *lq, const ll_act *logp, const ll_sample_row *row,
                     const int32_t *ban, int rows, int V, const ll_sample_params *p) {
    (void)be;
    const real *lp = (const real *)logp;
#pragma omp parallel if (rows > 1 && (size_t)rows * V > 100000)
    {
        draw_scratch s = {NULL, NULL, NULL, NULL};
#pragma omp for schedule(dynamic, 1)
        for (int r = 0; r < rows; r++) {
            if (row[r].mode & 4) {
                tok[r] = -1, lq[r] = 0;
                continue;
            }
            if (!s.q) {
                s.q = ll_malloc(sizeof(double) * 2 * (size_t)V);
                s.w = s.q + V;
                s.cand = ll_malloc(sizeof(int) * (size_t)V);
                s.order = ll_malloc(sizeof(weighted) * (size_t)V);
            }
            tok[r] = draw(lp + (size_t)r * V, V, &row[r], ban, p, &s, &lq[r]);
        }
        free(s.q), free(s.cand), free(s.order);
    }
}
