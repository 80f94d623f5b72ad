/* One knob for CPU parallelism: OpenMP for our loops, OpenBLAS for gemm. */
#include "ll/core.h"

#ifdef _OPENMP
#include <omp.h>
#endif

extern void openblas_set_num_threads(int);

static int g_threads = 1;

void ll_set_threads(int n) {
    if (n < 1) n = 1;
    g_threads = n;
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
    openblas_set_num_threads(n);
}

int ll_get_threads(void) { return g_threads; }
