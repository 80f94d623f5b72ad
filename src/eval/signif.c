/* sacreBLEU's statistical tests (significance.py, metrics/base.py), number for number.
 *
 * What makes this more than resampling: sacreBLEU resamples numpy float32 copies of
 * the statistics, and under numpy 2's promotion rules (NEP 50) a Python number meeting
 * a float32 takes the float32's type, so a resample's chrF and TER are float32
 * arithmetic while its BLEU (math.exp) is a double.  Each value below carries that
 * type (tv), sums follow numpy's order (a column sum row by row; a 1-D sum pairwise,
 * pairwise_sum in loops_utils.h), and --confidence's mean is statistics.mean's
 * exact rational mean.  compare_sacrebleu.py checks it all against sacreBLEU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "ll/eval.h"

/* ---- metrics ---------------------------------------------------------------- */

void ll_sig_metric_bleu(ll_sig_metric *m, const ll_bleu_opts *o) {
    memset(m, 0, sizeof *m);
    m->kind = LL_SIG_BLEU;
    m->k = 2 + 2 * LL_BLEU_ORDER;
    m->bleu = *o;
}

int ll_sig_metric_chrf(ll_sig_metric *m, const ll_chrf_opts *o) {
    ll_chrf_stats probe;
    if (ll_chrf_init(&probe, o) != 0) return -1;
    memset(m, 0, sizeof *m);
    m->kind = LL_SIG_CHRF;
    m->k = 3 * (o->char_order + o->word_order);
    m->chrf = *o;
    return 0;
}

void ll_sig_metric_ter(ll_sig_metric *m, const ll_ter_opts *o) {
    memset(m, 0, sizeof *m);
    m->kind = LL_SIG_TER;
    m->k = 2;
    m->ter = *o;
}

int ll_sig_segment(const ll_sig_metric *m, const char *hyp, const char *const *refs, int nrefs, double *out) {
    if (m->kind == LL_SIG_BLEU) {
        ll_bleu_stats s;
        ll_bleu_init(&s, &m->bleu);
        if (ll_bleu_add(&s, hyp, refs, nrefs) != 0) return -1;
        out[0] = (double)s.sys_len;
        out[1] = (double)s.ref_len;
        for (int i = 0; i < LL_BLEU_ORDER; i++) {
            out[2 + i] = (double)s.correct[i];
            out[2 + LL_BLEU_ORDER + i] = (double)s.total[i];
        }
    } else if (m->kind == LL_SIG_CHRF) {
        ll_chrf_stats s;
        if (ll_chrf_init(&s, &m->chrf) != 0 || ll_chrf_add(&s, hyp, refs, nrefs) != 0) return -1;
        for (int i = 0; i < m->k; i++) out[i] = (double)s.stats[i];
    } else {
        ll_ter_stats s;
        ll_ter_init(&s, &m->ter);
        if (ll_ter_add(&s, hyp, refs, nrefs) != 0) return -1;
        out[0] = (double)s.edits;
        out[1] = s.ref_len;
    }
    return 0;
}

/* From sums of Python numbers (exact integers, or TER's float lengths): the
 * metric's own compute, which follows sacreBLEU's double arithmetic. */
double ll_sig_score(const ll_sig_metric *m, const double *sums) {
    if (m->kind == LL_SIG_BLEU) {
        ll_bleu_stats s;
        ll_bleu_result r;
        ll_bleu_init(&s, &m->bleu);
        s.sys_len = (int64_t)sums[0];
        s.ref_len = (int64_t)sums[1];
        for (int i = 0; i < LL_BLEU_ORDER; i++) {
            s.correct[i] = (int64_t)sums[2 + i];
            s.total[i] = (int64_t)sums[2 + LL_BLEU_ORDER + i];
        }
        ll_bleu_compute(&s, &r);
        return r.score;
    }
    if (m->kind == LL_SIG_CHRF) {
        ll_chrf_stats s;
        ll_chrf_result r;
        ll_chrf_init(&s, &m->chrf);
        for (int i = 0; i < m->k; i++) s.stats[i] = (int64_t)sums[i];
        ll_chrf_compute(&s, &r);
        return r.score;
    }
    ll_ter_stats s;
    ll_ter_result r;
    ll_ter_init(&s, &m->ter);
    s.edits = (int64_t)sums[0];
    s.ref_len = sums[1];
    ll_ter_compute(&s, &r);
    return r.score;
}

/* ---- numpy float32 arithmetic ------------------------------------------------ */

typedef struct {
    double v;
    int f32; /* a numpy float32 (else a Python float or int) */
} tv;

static tv D(double v) { return (tv){v, 0}; }
static tv F(float v) { return (tv){v, 1}; }
/* a Python scalar meeting a float32 is cast to float32 first (NEP 50's weak scalars) */
static tv op(tv a, tv b, char o) {
    if (a.f32 || b.f32) {
        float x = (float)a.v, y = (float)b.v;
        return F(o == '+' ? x + y : o == '-' ? x - y : o == '*' ? x * y : x / y);
    }
    return D(o == '+' ? a.v + b.v : o == '-' ? a.v - b.v : o == '*' ? a.v * b.v : a.v / b.v);
}

static double my_log(double x) { return x == 0.0 ? -9999999999.0 : log(x); }

/* BLEU.compute_bleu on a float32 statistics row: precisions in float32, the rest
 * (int() lengths, math.log, math.exp) in double, so the score is a Python float. */
static tv bleu_f32(const ll_bleu_opts *o, const float *st) {
    const long sys_len = (long)st[0], ref_len = (long)st[1];
    double bp = 1.0;
    if (sys_len < ref_len) bp = sys_len > 0 ? exp(1 - (double)ref_len / (double)sys_len) : 0.0;
    tv correct[LL_BLEU_ORDER], total[LL_BLEU_ORDER], prec[LL_BLEU_ORDER];
    int any = 0;
    for (int i = 0; i < LL_BLEU_ORDER; i++) {
        correct[i] = F(st[2 + i]);
        total[i] = F(st[2 + LL_BLEU_ORDER + i]);
        prec[i] = D(0.0);
        any |= st[2 + i] != 0;
    }
    if (!any) return D(0.0);
    const double sv = o->smooth_value >= 0                 ? o->smooth_value
                      : o->smooth == LL_BLEU_SMOOTH_FLOOR ? 0.1
                      : o->smooth == LL_BLEU_SMOOTH_ADDK  ? 1.0
                                                          : 0.0;
    double smooth_mteval = 1.0;
    int eff_order = LL_BLEU_ORDER;
    for (int n = 1; n <= LL_BLEU_ORDER; n++) {
        if (o->smooth == LL_BLEU_SMOOTH_ADDK && n > 1) {
            correct[n - 1] = op(correct[n - 1], D(sv), '+');
            total[n - 1] = op(total[n - 1], D(sv), '+');
        }
        if (total[n - 1].v == 0) break;
        if (o->effective_order) eff_order = n;
        if (correct[n - 1].v == 0) {
            if (o->smooth == LL_BLEU_SMOOTH_EXP) {
                smooth_mteval *= 2;
                prec[n - 1] = op(D(100.), op(D(smooth_mteval), total[n - 1], '*'), '/');
            } else if (o->smooth == LL_BLEU_SMOOTH_FLOOR) {
                prec[n - 1] = op(D(100. * sv), total[n - 1], '/');
            }
        } else {
            prec[n - 1] = op(op(D(100.), correct[n - 1], '*'), total[n - 1], '/');
        }
    }
    double sum = 0.0;
    for (int n = 0; n < eff_order; n++) sum += my_log(prec[n].v);
    return D(bp * exp(sum / eff_order));
}

/* CHRF._compute_f_score on a float32 row */
static tv chrf_f32(const ll_chrf_opts *o, const float *st) {
    const int order = o->char_order + o->word_order;
    const tv eps = D(1e-16), factor = D((double)o->beta * o->beta), factor1 = op(D(1), factor, '+');
    tv score = D(0.0), avg_prec = D(0.0), avg_rec = D(0.0);
    int eff = 0;
    for (int i = 0; i < order; i++) {
        const tv nh = F(st[3 * i]), nr = F(st[3 * i + 1]), nm = F(st[3 * i + 2]);
        const tv prec = nh.v > 0 ? op(nm, nh, '/') : eps, rec = nr.v > 0 ? op(nm, nr, '/') : eps;
        const tv denom = op(op(factor, prec, '*'), rec, '+');
        score = op(score, denom.v > 0 ? op(op(op(factor1, prec, '*'), rec, '*'), denom, '/') : eps, '+');
        if (nh.v > 0 && nr.v > 0) {
            avg_prec = op(avg_prec, prec, '+');
            avg_rec = op(avg_rec, rec, '+');
            eff++;
        }
    }
    if (o->eps_smoothing) return op(op(D(100), score, '*'), D(order), '/');
    if (eff == 0) {
        avg_prec = avg_rec = D(0.0);
    } else {
        avg_prec = op(avg_prec, D(eff), '/');
        avg_rec = op(avg_rec, D(eff), '/');
    }
    if (op(avg_prec, avg_rec, '+').v == 0) return D(0.0);
    tv s = op(op(factor1, avg_prec, '*'), avg_rec, '*');
    s = op(s, op(op(factor, avg_prec, '*'), avg_rec, '+'), '/');
    return op(D(100), s, '*');
}

/* TER._compute_score_from_stats on a float32 row */
static tv ter_f32(const float *st) {
    tv score;
    if (st[1] > 0)
        score = op(F(st[0]), F(st[1]), '/');
    else
        score = D(st[0] > 0 ? 1.0 : 0.0);
    return op(D(100), score, '*');
}

static tv score_f32(const ll_sig_metric *m, const float *sums) {
    return m->kind == LL_SIG_BLEU ? bleu_f32(&m->bleu, sums) : m->kind == LL_SIG_CHRF ? chrf_f32(&m->chrf, sums)
                                                                                     : ter_f32(sums);
}

/* ---- numpy and statistics reductions ------------------------------------------ */

/* numpy's pairwise_sum (8 accumulators up to 128 elements, halves above) */
#define PAIRWISE(name, T)                                                                    \
    static T name(const T *a, long n) {                                                      \
        if (n < 8) {                                                                         \
            T res = 0;                                                                       \
            for (long i = 0; i < n; i++) res += a[i];                                        \
            return res;                                                                      \
        }                                                                                    \
        if (n <= 128) {                                                                      \
            T r[8];                                                                          \
            for (int j = 0; j < 8; j++) r[j] = a[j];                                         \
            long i;                                                                          \
            for (i = 8; i < n - n % 8; i += 8)                                               \
                for (int j = 0; j < 8; j++) r[j] += a[i + j];                                \
            T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));       \
            for (; i < n; i++) res += a[i];                                                  \
            return res;                                                                      \
        }                                                                                    \
        long n2 = n / 2;                                                                     \
        n2 -= n2 % 8;                                                                        \
        return name(a, n2) + name(a + n2, n - n2);                                           \
    }
PAIRWISE(pairwise_f, float)
PAIRWISE(pairwise_d, double)

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* statistics.mean of non-negative doubles: the exact rational mean, rounded once
 * (float(Fraction)).  The sum is kept as an integer count of 2^-1074. */
#define LIMBS 20
static double exact_mean(const double *v, long n) {
    uint64_t acc[LIMBS] = {0};
    for (long i = 0; i < n; i++) {
        if (v[i] == 0) continue;
        int e;
        const double fr = frexp(v[i], &e); /* v = fr * 2^e, 0.5 <= fr < 1 */
        uint64_t mant = (uint64_t)ldexp(fr, 53);
        int shift = e - 53 + 1074; /* v = mant * 2^(shift - 1074) */
        if (shift < 0) {           /* subnormal: exact, the low bits are zero */
            mant >>= -shift;
            shift = 0;
        }
        const int limb = shift / 64, bit = shift % 64;
        unsigned __int128 add = (unsigned __int128)mant << bit;
        for (int l = limb; l < LIMBS && add; l++) {
            unsigned __int128 s = (unsigned __int128)acc[l] + (uint64_t)add;
            acc[l] = (uint64_t)s;
            add = (add >> 64) + (s >> 64);
        }
    }
    /* divide by n, top limb first */
    uint64_t q[LIMBS];
    unsigned __int128 rem = 0;
    for (int l = LIMBS - 1; l >= 0; l--) {
        unsigned __int128 cur = rem << 64 | acc[l];
        q[l] = (uint64_t)(cur / (uint64_t)n);
        rem = cur % (uint64_t)n;
    }
    int top = -1;
    for (int l = LIMBS - 1; l >= 0 && top < 0; l--)
        if (q[l]) top = l * 64 + 63 - __builtin_clzll(q[l]);
#define QBIT(b) ((b) >= 0 && (q[(b) / 64] >> ((b) % 64) & 1))
    /* keep 53 bits from the top (fewer for a subnormal result), round half to even */
    const int low = top < 52 ? 0 : top - 52;
    uint64_t mant = 0;
    for (int b = top; b >= low; b--) mant = mant << 1 | QBIT(b);
    int half, sticky = rem != 0;
    if (low > 0) {
        half = QBIT(low - 1);
        for (int b = low - 2; b >= 0 && !sticky; b--) sticky |= QBIT(b);
    } else { /* the next bit is the remainder's: compare 2 rem with n */
        half = 2 * rem >= (unsigned __int128)n;
        sticky = 2 * rem != (unsigned __int128)n;
    }
#undef QBIT
    if (half && (sticky || (mant & 1))) mant++;
    return ldexp((double)mant, low - 1074);
}

/* Score.estimate_ci (--confidence; sorted, statistics.mean) or significance.estimate_ci
 * (paired tests; np.sort, ndarray.mean).  f32: the scores are numpy float32. */
static void estimate_ci(double *v, long n, int f32, int numpy_mean, double *mean, double *ci) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    const long lo = n / 40, hi = n - lo - 1;
    if (f32) {
        *ci = (float)(0.5f * (float)((float)v[hi] - (float)v[lo]));
    } else {
        *ci = 0.5 * (v[hi] - v[lo]);
    }
    if (!numpy_mean) {
        const double m = exact_mean(v, n);
        *mean = f32 ? (float)m : m;
    } else if (f32) {
        float *f = ll_malloc((size_t)n * sizeof *f);
        for (long i = 0; i < n; i++) f[i] = (float)v[i];
        *mean = pairwise_f(f, n) / (float)n;
        free(f);
    } else {
        *mean = pairwise_d(v, n) / (double)n;
    }
}

/* ---- the tests ---------------------------------------------------------------- */

/* np.array(stats, dtype='float32') */
static float *to_f32(const double *stats, long n, int k) {
    float *f = ll_malloc((size_t)n * (size_t)k * sizeof *f);
    for (long i = 0; i < n * k; i++) f[i] = (float)stats[i];
    return f;
}

static void column_sums(const double *stats, long n, int k, double *sums) {
    memset(sums, 0, (size_t)k * sizeof *sums);
    for (long i = 0; i < n; i++)
        for (int j = 0; j < k; j++) sums[j] += stats[i * k + j];
}

/* `_s.sum(0)` of the rows idx[0..n): float32, row after row */
static void resample_sums(const float *f, const uint32_t *idx, long n, int k, float *sums) {
    memcpy(sums, f + (size_t)idx[0] * k, (size_t)k * sizeof *sums);
    for (long i = 1; i < n; i++) {
        const float *row = f + (size_t)idx[i] * k;
        for (int j = 0; j < k; j++) sums[j] += row[j];
    }
}

static void draw_row(ll_np_rng *rng, uint32_t *idx, long n) {
    for (long i = 0; i < n; i++) idx[i] = ll_np_rng_below(rng, (uint32_t)n);
}

void ll_sig_bootstrap(const ll_sig_metric *m, const double *stats, long n, int n_samples, uint64_t seed,
                      int numpy_mean, ll_sig_result *r) {
    const int k = m->k;
    double *sums = ll_malloc((size_t)k * sizeof *sums), *scores = ll_malloc((size_t)n_samples * sizeof *scores);
    float *f = to_f32(stats, n, k), *fs = ll_malloc((size_t)k * sizeof *fs);
    uint32_t *idx = ll_malloc((size_t)n * sizeof *idx);
    column_sums(stats, n, k, sums);
    r->score = ll_sig_score(m, sums);
    r->p = -1;
    ll_np_rng rng;
    ll_np_rng_seed(&rng, seed);
    int all_f32 = 1;
    for (int s = 0; s < n_samples; s++) {
        draw_row(&rng, idx, n);
        resample_sums(f, idx, n, k, fs);
        const tv sc = score_f32(m, fs);
        scores[s] = sc.v;
        all_f32 &= sc.f32;
    }
    estimate_ci(scores, n_samples, all_f32, numpy_mean, &r->mean, &r->ci);
    r->has_ci = 1;
    free(sums);
    free(scores);
    free(f);
    free(fs);
    free(idx);
}

/* (c + 1) / (len + 1) with c the trials whose statistic exceeds the real one */
static double p_value(long c, long len) { return (double)(c + 1) / (double)(len + 1); }

/* The two systems' corpus scores (r->score: the system's); returns |baseline - system|, the
 * difference the paired tests ask about.  sums: [m->k] scratch. */
static double pair_diff(const ll_sig_metric *m, const double *base, const double *sys, long n, double *sums,
                        ll_sig_result *r) {
    column_sums(base, n, m->k, sums);
    const double bl_score = ll_sig_score(m, sums);
    column_sums(sys, n, m->k, sums);
    r->score = ll_sig_score(m, sums);
    return fabs(bl_score - r->score);
}

void ll_sig_paired_bs(const ll_sig_metric *m, const double *base, const double *sys, long n, int n_samples,
                      uint64_t seed, ll_sig_result *r) {
    const int k = m->k;
    double *sums = ll_malloc((size_t)k * sizeof *sums);
    double *sc_bl = ll_malloc((size_t)n_samples * sizeof *sc_bl), *sc_sys = ll_malloc((size_t)n_samples * sizeof *sc_sys);
    float *fb = to_f32(base, n, k), *fsys = to_f32(sys, n, k), *fs = ll_malloc((size_t)k * sizeof *fs);
    uint32_t *idx = ll_malloc((size_t)n * sizeof *idx);
    const double diff = pair_diff(m, base, sys, n, sums, r);
    ll_np_rng rng;
    ll_np_rng_seed(&rng, seed);
    int bl_f32 = 1, sys_f32 = 1;
    for (int s = 0; s < n_samples; s++) {
        draw_row(&rng, idx, n);
        resample_sums(fb, idx, n, k, fs);
        tv t = score_f32(m, fs);
        sc_bl[s] = t.v;
        bl_f32 &= t.f32;
        resample_sums(fsys, idx, n, k, fs);
        t = score_f32(m, fs);
        sc_sys[s] = t.v;
        sys_f32 &= t.f32;
    }
    /* sample_diffs = |sys - bl|, then minus its mean: float32 when both arrays are */
    const int f32 = bl_f32 && sys_f32;
    long c = 0;
    if (f32) {
        float *d = ll_malloc((size_t)n_samples * sizeof *d);
        for (int s = 0; s < n_samples; s++) d[s] = fabsf((float)sc_sys[s] - (float)sc_bl[s]);
        const float mean = pairwise_f(d, n_samples) / (float)n_samples, fdiff = (float)diff;
        for (int s = 0; s < n_samples; s++) c += (float)(d[s] - mean) > fdiff;
        free(d);
    } else {
        double *d = ll_malloc((size_t)n_samples * sizeof *d);
        for (int s = 0; s < n_samples; s++) d[s] = fabs(sc_sys[s] - sc_bl[s]);
        const double mean = pairwise_d(d, n_samples) / n_samples;
        for (int s = 0; s < n_samples; s++) c += d[s] - mean > diff;
        free(d);
    }
    r->p = p_value(c, n_samples);
    estimate_ci(sc_sys, n_samples, sys_f32, 1, &r->mean, &r->ci);
    r->has_ci = 1;
    free(sums);
    free(sc_bl);
    free(sc_sys);
    free(fb);
    free(fsys);
    free(fs);
    free(idx);
}

void ll_sig_paired_ar(const ll_sig_metric *m, const double *base, const double *sys, long n, int n_trials,
                      uint64_t seed, ll_sig_result *r) {
    const int k = m->k;
    double *sums = ll_malloc((size_t)k * sizeof *sums), *sa = ll_malloc((size_t)k * sizeof *sa),
           *sb = ll_malloc((size_t)k * sizeof *sb);
    unsigned char *pos = ll_malloc((size_t)n);
    const double diff = pair_diff(m, base, sys, n, sums, r);
    ll_np_rng rng;
    ll_np_bits bits = {0, 0};
    ll_np_rng_seed(&rng, seed);
    long c = 0;
    for (int t = 0; t < n_trials; t++) {
        /* shuf_a = pos @ base + ~pos @ sys, shuf_b the other way round */
        ll_np_rng_bools(&rng, &bits, pos, (size_t)n);
        memset(sa, 0, (size_t)k * sizeof *sa);
        memset(sb, 0, (size_t)k * sizeof *sb);
        for (long i = 0; i < n; i++) {
            const double *x = (pos[i] ? base : sys) + i * k, *y = (pos[i] ? sys : base) + i * k;
            for (int j = 0; j < k; j++) {
                sa[j] += x[j];
                sb[j] += y[j];
            }
        }
        c += fabs(ll_sig_score(m, sa) - ll_sig_score(m, sb)) > diff;
    }
    r->p = p_value(c, n_trials);
    r->has_ci = 0;
    r->mean = r->ci = 0;
    free(sums);
    free(sa);
    free(sb);
    free(pos);
}
