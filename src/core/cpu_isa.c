/* Which of ll's ISA-specific CPU kernels this process runs (include/ll/core.h).
 *
 * Why at run time: a binary is often built once and run on many machines
 * (cluster nodes; -DLL_NATIVE=OFF), and a build on an AVX-512 host must not
 * need AVX-512 to start.  Every AVX-512 path is compiled with a function
 * target attribute whatever the compiler flags, and taken only when the CPU
 * has the instructions and LL_CPU_KERNELS does not say `generic`; the portable
 * C loops are the fallback, tested by running the suite with
 * LL_CPU_KERNELS=generic (scripts/test.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"

int ll_cpu_avx512 = 0;
int ll_cpu_int8_isa = LL_INT8_GENERIC;

static int cpu_has_avx512(void) {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

/* Runs before main() (and before any OpenMP team), so the flag never changes
 * while kernels read it. */
__attribute__((constructor)) static void ll_cpu_isa_init(void) {
    const char *want = getenv("LL_CPU_KERNELS");
    if (want && *want && strcmp(want, "auto") != 0 && strcmp(want, "generic") != 0 && strcmp(want, "avx512") != 0) {
        fprintf(stderr, "error: LL_CPU_KERNELS=%s: expected auto, generic or avx512\n", want);
        exit(2);
    }
    const int have = cpu_has_avx512();
    if (want && !strcmp(want, "avx512") && !have) {
        fprintf(stderr, "error: LL_CPU_KERNELS=avx512, but this CPU has no AVX-512F\n");
        exit(2);
    }
    ll_cpu_avx512 = have && !(want && !strcmp(want, "generic"));
#if defined(__x86_64__)
    if (!(want && !strcmp(want, "generic"))) {
        if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") && have)
            ll_cpu_int8_isa = LL_INT8_AVX512VNNI;
        else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
            ll_cpu_int8_isa = LL_INT8_AVX2;
    }
#endif
}

const char *ll_cpu_int8_kernels(void) {
    return ll_cpu_int8_isa == LL_INT8_AVX512VNNI ? "avx512vnni" : ll_cpu_int8_isa == LL_INT8_AVX2 ? "avx2" : "generic";
}

const char *ll_cpu_kernels(void) {
#if defined(__x86_64__) || defined(__i386__)
    if (ll_cpu_avx512) return "avx512";
    return cpu_has_avx512() ? "generic (LL_CPU_KERNELS=generic)" : "generic (no AVX-512 on this CPU)";
#else
    return "generic";
#endif
}
