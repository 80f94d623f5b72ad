/* Replays fuzz inputs without libFuzzer: runs LLVMFuzzerTestOneInput on every
 * file in the directories (or files) named on the command line.  Built with
 * any compiler and registered in ctest (fuzz_replay_<target>), so the kept
 * crash reproducers and the minimised corpora run in the normal suite and,
 * in the sanitizer build, under ASan + UBSan.  A crash or abort fails it. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n == cap) buf = realloc(buf, cap = cap ? 2 * cap : 4096);
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    fclose(f);
    /* an exact-size copy, so ASan sees reads past the input's end */
    uint8_t *exact = malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) != 0) return 1;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            perror(argv[i]);
            return 1;
        }
        char **names = NULL;
        size_t nn = 0;
        struct dirent *e;
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') {
                names = realloc(names, sizeof *names * (nn + 1));
                names[nn++] = strdup(e->d_name);
            }
        closedir(d);
        if (nn) qsort(names, nn, sizeof *names, cmp_str); /* a fixed order, for reproducible failures */
        for (size_t k = 0; k < nn; k++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], names[k]);
            if (getenv("LL_FUZZ_VERBOSE")) fprintf(stderr, "replay %s\n", path);
            if (run_file(path) != 0) return 1;
            files++;
            free(names[k]);
        }
        free(names);
    }
    fprintf(stderr, "%s: %d inputs replayed, no failure\n", argv[0], files);
    return 0;
}
