/* ll_ckpt_diff A B [prefix]: the largest absolute difference between the f32
 * tensors (whose name starts with prefix; default: every tensor that is not
 * optimizer/trainer state) of two checkpoints; prints "max_abs_diff X over N
 * tensors" and exits 0, or 1 + one line when the files do not match in
 * names or shapes.  Used by tests/cli/test_dist_mpi.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/checkpoint.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ll_ckpt_diff A B [name-prefix]\n");
        return 2;
    }
    const char *prefix = argc > 3 ? argv[3] : NULL;
    ll_ckpt *a = ll_ckpt_open(argv[1]), *b = ll_ckpt_open(argv[2]);
    if (!a || !b) {
        fprintf(stderr, "ll_ckpt_diff: cannot open %s\n", !a ? argv[1] : argv[2]);
        return 1;
    }
    double worst = 0;
    const char *where = "";
    int n = 0;
    for (int i = 0; i < ll_ckpt_n_tensors(a); i++) {
        const ll_tensor_ref *x = ll_ckpt_tensor(a, i);
        if (prefix ? strncmp(x->name, prefix, strlen(prefix)) != 0
                   : (!strncmp(x->name, "optim.", 6) || !strncmp(x->name, "state.", 6)))
            continue;
        if (x->dtype != LL_DT_F32) continue;
        const ll_tensor_ref *y = ll_ckpt_find(b, x->name);
        if (!y || y->nbytes != x->nbytes || y->dtype != x->dtype) {
            fprintf(stderr, "ll_ckpt_diff: %s differs in presence, type or size\n", x->name);
            return 1;
        }
        const float *p = x->data, *q = y->data;
        double tw = 0;
        for (size_t k = 0; k < x->nbytes / 4; k++) tw = fmax(tw, fabs((double)p[k] - q[k]));
        if (getenv("LL_DIFF_VERBOSE")) printf("%-40s %.3g\n", x->name, tw);
        for (size_t k = 0; k < x->nbytes / 4; k++) {
            double d = fabs((double)p[k] - q[k]);
            if (!(d <= worst)) { /* NaN counts as worst */
                worst = isnan(d) ? INFINITY : d;
                where = x->name;
            }
        }
        n++;
    }
    if (worst > 0)
        printf("max_abs_diff %.3g over %d tensors (largest in %s)\n", worst, n, where);
    else
        printf("max_abs_diff 0 over %d tensors (all equal)\n", n);
    ll_ckpt_close(a);
    ll_ckpt_close(b);
    return 0;
}
