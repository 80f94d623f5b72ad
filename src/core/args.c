/* Command-line checks every tool shares (include/ll/core.h, "command lines"). */
#include <ctype.h>
#include <string.h>
#include <sys/stat.h>

#include "ll/core.h"

/* An option is an argument of the form --name or -x; "-", "-0.5" and "-.5" are values. */
static int is_option(const char *a) {
    if (a[0] != '-' || !a[1]) return 0;
    const char c = a[1] == '-' ? a[2] : a[1];
    return a[1] == '-' ? c != 0 : !(isdigit((unsigned char)c) || c == '.');
}

static int listed(const char *a, const char *list) { /* list: names separated by blanks */
    const size_t n = strlen(a);
    for (const char *p = list ? strstr(list, a) : NULL; p; p = strstr(p + 1, a))
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 1;
    return 0;
}

void ll_args_no_repeats(int argc, char **argv, const char *repeatable) {
    for (int i = 1; i < argc; i++) {
        if (!is_option(argv[i]) || listed(argv[i], repeatable)) continue;
        for (int j = 1; j < i; j++)
            if (!strcmp(argv[i], argv[j]))
                ll_die("%s is given twice (arguments %d and %d); give it once", argv[i], j, i);
    }
}

int ll_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || !strcmp(a, "-") || !strcmp(b, "-")) return 0;
    if (stat(a, &sa) || stat(b, &sb) || !S_ISREG(sa.st_mode) || !S_ISREG(sb.st_mode)) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}
