/* Repeated n-grams banned from a hypothesis (lldecode --no-repeat-ngram-size), as fairseq's
 * NGramRepeatBlock (sequence_generator.py, its Python path): the history is the decoder's start
 * token and the tokens generated so far; each earlier n-gram whose first n-1 tokens equal the
 * history's last n-1 bans its last token at the next step.  n = 1 bans every generated token (the
 * start token left out: fairseq's Python path bans nothing at n = 1, its CUDA kernel every token,
 * EOS among them, so that no translation could end). */
#include "decode_internal.h"

int ll_ngram_bans(int32_t bos, const int32_t *gen, int len, int n, int32_t *out) {
    int c = 0;
    if (n == 1) {
        for (int i = 0; i < len; i++) out[c++] = gen[i];
        return c;
    }
    const int L = len + 1; /* history h: bos, gen[0 .. len) */
#define H(i) ((i) ? gen[(i) - 1] : bos)
    for (int i = 0; i + n <= L; i++) { /* the n-gram h[i .. i+n) against the last n-1 tokens */
        int k = 0;
        while (k < n - 1 && H(i + k) == H(L - n + 1 + k)) k++;
        if (k == n - 1) out[c++] = H(i + n - 1);
    }
#undef H
    return c;
}
