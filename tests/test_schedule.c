/* The learning-rate schedules (train.scheduler) against fairseq's formulas,
 * written out here independently: inverse_sqrt (linear warmup from
 * warmup_init_lr, then lr sqrt(warmup / n)), polynomial_decay (warmup from 0,
 * then (lr - end_lr) (1 - (n - warmup) / (total - warmup))^power + end_lr,
 * end_lr from total on) and cosine (warmup from warmup_init_lr, then
 * end_lr + (lr - end_lr) (1 + cos(pi t / period)) / 2 with t = n - warmup and
 * period = total - warmup; end_lr from total on).  n counts completed
 * updates.  Also what the config accepts for each. */
#include <math.h>
#include <string.h>

#include "ll/config.h"
#include "ll/train.h"
#include "util/testutil.h"

static ll_schedule make(const char *kind, double lr, double init, double end, double power, long warmup, long total) {
    ll_config c;
    ll_config_defaults(&c);
    snprintf(c.scheduler, sizeof c.scheduler, "%s", kind);
    c.lr = (float)lr, c.warmup_init_lr = (float)init, c.end_lr = (float)end, c.power = (float)power;
    c.warmup_updates = (int)warmup, c.max_updates = (int)total;
    ll_schedule s;
    ll_schedule_from_config(&s, &c);
    ll_config_free(&c);
    return s;
}

static double want(const char *kind, double lr, double init, double end, double power, long warmup, long total, long n) {
    if (n < warmup) {
        const double lr0 = !strcmp(kind, "polynomial") ? 0 : init;
        return lr0 + (lr - lr0) * (double)n / (double)warmup;
    }
    if (!strcmp(kind, "inverse_sqrt")) return lr * sqrt((double)warmup / (double)(n ? n : 1));
    if (n >= total) return end;
    const double f = (double)(n - warmup) / (double)(total - warmup);
    if (!strcmp(kind, "polynomial")) return (lr - end) * pow(1 - f, power) + end;
    return end + (lr - end) * (1 + cos(M_PI * f)) / 2;
}

int main(void) {
    static const struct { const char *kind; double lr, init, end, power; long warmup, total; } cases[] = {
        {"inverse_sqrt", 5e-4, 1e-7, 0, 1, 4000, 0},   {"inverse_sqrt", 1e-3, 0, 0, 1, 1, 0},
        {"polynomial", 5e-4, 0, 1e-5, 1, 100, 1000},   {"polynomial", 2e-3, 0, 0, 2.5, 0, 300},
        {"cosine", 5e-4, 1e-7, 1e-5, 1, 100, 1000},    {"cosine", 3e-3, 0, 0, 1, 0, 50},
        {"cosine", 1e-3, 1e-4, 1e-6, 1, 999, 1000},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const __typeof__(cases[0]) *c = &cases[k];
        const ll_schedule s = make(c->kind, c->lr, c->init, c->end, c->power, c->warmup, c->total);
        const long last = c->total ? c->total + 5 : 3 * c->warmup + 10;
        double prev = INFINITY;
        /* (the config holds floats: the reference takes the values as the config rounded them) */
        const double lr = (float)c->lr, init = (float)c->init, end = (float)c->end, power = (float)c->power;
        for (long n = 0; n <= last; n++) {
            const double got = ll_schedule_lr(&s, n), w = want(c->kind, lr, init, end, power, c->warmup, c->total, n);
            if (!(fabs(got - w) <= 1e-12 * fmax(fabs(w), 1e-12))) {
                CHECK_MSG(0, "%s (warmup %ld, total %ld): update %ld: lr %.12g, want %.12g", c->kind, c->warmup,
                          c->total, n, got, w);
                break;
            }
            if (n > c->warmup && got > prev + 1e-15)
                CHECK_MSG(0, "%s: lr rises after warmup at update %ld (%.12g after %.12g)", c->kind, n, got, prev);
            if (n >= c->warmup) prev = got;
        }
        /* the peak right after warmup, the floor at the end */
        CHECK_MSG(fabs(ll_schedule_lr(&s, c->warmup) - lr) <= 1e-12 * lr, "%s: lr at the end of warmup %.12g, want %g",
                  c->kind, ll_schedule_lr(&s, c->warmup), lr);
        if (c->total) CHECK(ll_schedule_lr(&s, c->total) == end);
    }
    /* cosine: halfway down the period the mean of lr and end_lr */
    const ll_schedule s = make("cosine", 1e-3, 0, 1e-4, 1, 100, 1100);
    CHECK_NEAR(ll_schedule_lr(&s, 600), ((double)1e-3f + (double)1e-4f) / 2, 1e-15);
    /* the config: cosine, as polynomial, needs max_updates > warmup and end_lr <= lr */
    const char *bad[][3] = {{"train.scheduler=cosine", "train.max_updates=0", "train.max_updates > 0"},
                            {"train.scheduler=cosine", "train.max_updates=4000", "must be < train.max_updates (4000)"},
                            {"train.max_updates=10000", "train.end_lr=1", "train.end_lr (1) must be <= train.lr"}};
    for (int i = 0; i < 3; i++) {
        ll_config c;
        ll_config_defaults(&c);
        CHECK(ll_config_set(&c, "train.scheduler=cosine") == 0 && ll_config_set(&c, bad[i][0]) == 0 &&
              ll_config_set(&c, bad[i][1]) == 0);
        CHECK_MSG(ll_config_validate(&c) != 0 && strstr(ll_errbuf(), bad[i][2]), "%s %s: %s", bad[i][0], bad[i][1],
                  ll_errbuf());
        ll_config_free(&c);
    }
    ll_config ok;
    ll_config_defaults(&ok);
    CHECK(ll_config_set(&ok, "train.scheduler=cosine") == 0 && ll_config_set(&ok, "train.max_updates=10000") == 0);
    CHECK_MSG(ll_config_validate(&ok) == 0, "%s", ll_errbuf());
    ll_config_free(&ok);
    return tu_finish("test_schedule");
}
