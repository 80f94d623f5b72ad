/* The one strict number parser of every tool flag and config key: the whole
 * string is the number (no blanks, no trailing text), and overflow, underflow
 * and the allowed range are checked after conversion, so "O.9", "0.5x", "1e-320"
 * or "3000000000" for an int never turn silently into some other value. */
#include "ll/core.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int ll_num_long(const char *s, long *v) {
    if (!*s || isspace((unsigned char)*s)) return LL_NUM_SYNTAX;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (*end) return LL_NUM_SYNTAX;
    if (errno == ERANGE) return LL_NUM_RANGE;
    *v = x;
    return 0;
}

int ll_num_double(const char *s, double *v, int as_float) {
    if (!*s || isspace((unsigned char)*s)) return LL_NUM_SYNTAX;
    /* decimal only, as the integers: strtod also reads hex ("0x1p-9") and "infinity" */
    for (const char *c = s; *c; c++)
        if (!isdigit((unsigned char)*c) && !strchr("+-.eE", *c)) return LL_NUM_SYNTAX;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (*end || isnan(x)) return LL_NUM_SYNTAX;
    const double big = as_float ? FLT_MAX : DBL_MAX, tiny = as_float ? FLT_MIN : DBL_MIN;
    if (!(fabs(x) <= big)) return LL_NUM_RANGE; /* inf, or beyond the type */
    /* strtod reports underflow (ERANGE) for a result below the smallest normal value, even 0 */
    if ((errno == ERANGE && fabs(x) < 1.0) || (x != 0 && fabs(x) < tiny)) return LL_NUM_UNDERFLOW;
    *v = x;
    return 0;
}

int ll_parse_long(const char *what, const char *s, long lo, long hi, long *out) {
    long v = 0;
    if (ll_num_long(s, &v) != 0 || v < lo || v > hi)
        return ll_fail("%s: expected an integer in [%ld, %ld], got '%s'", what, lo, hi, s);
    *out = v;
    return 0;
}

int ll_parse_double(const char *what, const char *s, double lo, double hi, double *out) {
    double v = 0;
    int rc = ll_num_double(s, &v, 0);
    if (rc == LL_NUM_UNDERFLOW)
        return ll_fail("%s: '%s' is too small to represent (it would read as 0); expected a number in [%g, %g]", what,
                       s, lo, hi);
    if (rc != 0 || !(v >= lo && v <= hi)) return ll_fail("%s: expected a number in [%g, %g], got '%s'", what, lo, hi, s);
    *out = v;
    return 0;
}
