/* Fuzz target: the binarised token-file reader (src/data/tokfile.c).  The
 * input is a whole token file.  An opened file must be safe to walk as
 * lldecode/lltrain walk it (every sentence, every token), and verification
 * must never read outside the mapping; the descriptor must not leak. */
#include "fuzz_util.h"
#include "ll/core.h"
#include "ll/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd0 = fz_lowest_fd();
    char path[300];
    fz_path(path, sizeof path, "in.bin");
    fz_write(path, data, size);
    ll_tokfile f;
    if (ll_tokfile_open(&f, path) == 0) {
        uint64_t sum = 0;
        for (int i = 0; i < f.n_sents; i++) {
            int n = ll_tokfile_len(&f, i);
            if (n < 1) abort(); /* open promises non-empty sentences */
            for (int j = 0; j < n; j++) sum += (uint32_t)f.tokens[f.offsets[i] + j];
            sum += f.lines[i];
        }
        ll_tokfile_verify(&f, path, 0);
        ll_tokfile_verify(&f, path, 64);
        ll_tokfile_close(&f);
        if (sum == 1) fputc(' ', stderr); /* keep the walk */
    }
    fz_check_fds(fd0, "ll_tokfile_open");
    return 0;
}
