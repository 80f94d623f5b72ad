/* Which of ll's ISA-specific CPU kernels this process runs (include/ll/core.h).
 *
 * Why at run time: a binary is often built once and run on many machines
 * (cluster nodes; -DLL_NATIVE=OFF), and a build on an AVX-512 host must not
 * need AVX-512 to start.  Every AVX-512 path is compiled with a function
 * target attribute whatever the compiler flags, and taken only when the CPU
 * has the instructions and LL_CPU_KERNELS does not say `generic`; the portable
 * C loops are the fallback, tested by running the suite with
 * LL_CPU_KERNELS=generic (scripts/test.sh).  Kernels with an AVX2 + FMA form
 * (the packed decoding linear) take it on CPUs without AVX-512, or with
 * LL_CPU_KERNELS=avx2, which lets an AVX-512 machine test it natively. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"

int ll_cpu_avx512 = 0;
int ll_cpu_avx2 = 0;
int ll_cpu_int8_isa = LL_INT8_GENERIC;

static int cpu_has_avx512(void) {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}
static int cpu_has_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* Runs before main() (and before any OpenMP team), so the flag never changes
 * while kernels read it. */
__attribute__((constructor)) static void ll_cpu_isa_init(void) {
    const char *want = getenv("LL_CPU_KERNELS");
    if (want && *want && strcmp(want, "auto") != 0 && strcmp(want, "generic") != 0 && strcmp(want, "avx512") != 0 &&
        strcmp(want, "avx2") != 0) {
        fprintf(stderr, "error: LL_CPU_KERNELS=%s: expected auto, generic, avx2 or avx512\n", want);
        exit(2);
    }
    const int have = cpu_has_avx512(), have2 = cpu_has_avx2();
    if (want && !strcmp(want, "avx512") && !have) {
        fprintf(stderr, "error: LL_CPU_KERNELS=avx512, but this CPU has no AVX-512F\n");
        exit(2);
    }
    if (want && !strcmp(want, "avx2") && !have2) {
        fprintf(stderr, "error: LL_CPU_KERNELS=avx2, but this CPU has no AVX2 and FMA\n");
        exit(2);
    }
    const int generic = want && !strcmp(want, "generic"), avx2 = want && !strcmp(want, "avx2");
    ll_cpu_avx512 = have && !generic && !avx2;
    ll_cpu_avx2 = have2 && !generic && !ll_cpu_avx512; /* (avx2 on an AVX-512 CPU: those forms, tested natively) */
#if defined(__x86_64__)
    if (!generic) {
        if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") && have && !avx2)
            ll_cpu_int8_isa = LL_INT8_AVX512VNNI;
        else if (have2)
            ll_cpu_int8_isa = LL_INT8_AVX2;
    }
#endif
    /* the int8 kernels alone (their forms give the same bytes; the other kernels' forms differ in
     * rounding), so a test can compare them with everything else fixed */
    const char *want8 = getenv("LL_CPU_INT8_KERNELS");
    if (want8 && *want8 && strcmp(want8, "auto")) {
        const int isa = !strcmp(want8, "generic") ? LL_INT8_GENERIC : !strcmp(want8, "avx2") ? LL_INT8_AVX2
                        : !strcmp(want8, "avx512vnni")                                    ? LL_INT8_AVX512VNNI
                                                                                          : -1;
        if (isa < 0) {
            fprintf(stderr, "error: LL_CPU_INT8_KERNELS=%s: expected auto, generic, avx2 or avx512vnni\n", want8);
            exit(2);
        }
        if (isa > ll_cpu_int8_isa) {
            fprintf(stderr, "error: LL_CPU_INT8_KERNELS=%s: this CPU (or LL_CPU_KERNELS) runs %s at most\n", want8,
                    ll_cpu_int8_kernels());
            exit(2);
        }
        ll_cpu_int8_isa = isa;
    }
}

const char *ll_cpu_int8_kernels(void) {
    return ll_cpu_int8_isa == LL_INT8_AVX512VNNI ? "avx512vnni" : ll_cpu_int8_isa == LL_INT8_AVX2 ? "avx2" : "generic";
}

const char *ll_cpu_kernels(void) {
#if defined(__x86_64__) || defined(__i386__)
    if (ll_cpu_avx512) return "avx512";
    if (ll_cpu_avx2) return cpu_has_avx512() ? "avx2 (LL_CPU_KERNELS=avx2)" : "avx2";
    return cpu_has_avx512() || cpu_has_avx2() ? "generic (LL_CPU_KERNELS=generic)" : "generic (no AVX2 on this CPU)";
#else
    return "generic";
#endif
}
