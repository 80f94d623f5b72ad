/* lldecode's line input and token output: input lines (UTF-8 checked), a second file read in step
 * with the input, raw token ids, pieces and alignments as lldecode writes them. */
#define _POSIX_C_SOURCE 200809L
#include "decode_io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ll/core.h"
#include "ll/eval.h"

/* "id id id" -> ids with EOS appended (unless already last); 0 for a blank line. */
int parse_ids(const char *line, long lineno, const char *input, int V, int max_src, int32_t **ids, int *cap,
                     int *truncated) {
    int n = 0;
    *truncated = 0;
    for (const char *p = line;;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        /* as lldecode writes them: digits, no sign, no leading zero */
        if (errno || end == p || (*end && *end != ' ' && *end != '\t') || v < 0 || v >= V || v == LL_PAD ||
            *p < '0' || *p > '9' || (*p == '0' && end > p + 1))
            ll_die("%s:%ld: bad token id '%.*s' (ids are integers in [0, %d) other than pad = %d, written in plain "
                   "digits)", input, lineno, (int)strcspn(p, " \t"), p, V, LL_PAD);
        if (n > 0 && (*ids)[n - 1] == LL_EOS) /* (EOS may end a line, as lldecode's own output never shows it) */
            ll_die("%s:%ld: the EOS id %d inside the line: a sentence ends at its EOS", input, lineno, LL_EOS);
        if (n + 2 > *cap) *ids = ll_realloc(*ids, sizeof(int32_t) * (*cap = 2 * (n + 2)));
        (*ids)[n++] = (int32_t)v;
        p = end;
    }
    if (n == 1 && (*ids)[0] == LL_EOS) n = 0; /* EOS alone: an empty sentence, as an empty line */
    if (n == 0) return 0;
    if ((*ids)[n - 1] != LL_EOS) (*ids)[n++] = LL_EOS;
    if (n > max_src) {
        (*ids)[max_src - 1] = LL_EOS;
        n = max_src;
        *truncated = 1;
    }
    return n;
}

/* Tokens without the final EOS: pieces ("▁The ▁cat") or ids ("57 12"). */
void put_tokens(FILE *f, const ll_spm *spm, const int32_t *t, int n, int as_ids) {
    if (n > 0 && t[n - 1] == LL_EOS) n--;
    for (int i = 0; i < n; i++) {
        if (i) fputc(' ', f);
        const char *p = as_ids ? NULL : ll_spm_id_piece(spm, t[i]);
        if (p)
            fputs(p, f);
        else
            fprintf(f, "%d", t[i]);
    }
}

/* Word index of each piece: a piece beginning with U+2581 (sentencepiece's space) starts a word,
 * so word k is the k-th whitespace-separated word of the text the pieces decode to. */
static void piece_words(const ll_spm *spm, const int32_t *t, int n, int *w) {
    int k = -1;
    for (int i = 0; i < n; i++) {
        const char *p = ll_spm_id_piece(spm, t[i]);
        if (k < 0 || (p && !strncmp(p, "\xe2\x96\x81", 3))) k++;
        w[i] = k;
    }
}

static int cmp_pair(const void *a, const void *b) {
    const int *x = a, *y = b;
    return x[1] != y[1] ? (x[1] > y[1]) - (x[1] < y[1]) : (x[0] > y[0]) - (x[0] < y[0]);
}

/* "s-t s-t ...": pieces (fairseq's hard alignment: target EOS left out, in target order) or, with
 * words, the distinct word pairs of those, by target word then source word. */
void put_align(FILE *f, const ll_spm *spm, const int32_t *src, int src_len, const ll_hypo *y, int words) {
    int n = y->len, np = 0;
    if (n > 0 && y->tokens[n - 1] == LL_EOS) n--;
    int *pair = ll_malloc(sizeof(int) * 2 * (n ? n : 1));
    int *ws = words ? ll_malloc(sizeof(int) * (src_len ? src_len : 1)) : NULL;
    int *wt = words ? ll_malloc(sizeof(int) * (n ? n : 1)) : NULL;
    if (words) {
        piece_words(spm, src, src_len, ws);
        piece_words(spm, y->tokens, n, wt);
    }
    for (int j = 0; j < n; j++) {
        const int a = y->align[j];
        if (a < 0 || a >= src_len) continue;
        pair[2 * np] = words ? ws[a] : a;
        pair[2 * np + 1] = words ? wt[j] : j;
        np++;
    }
    if (words) qsort(pair, np, sizeof(int) * 2, cmp_pair);
    for (int i = 0, out = 0; i < np; i++) {
        if (words && i && pair[2 * i] == pair[2 * i - 2] && pair[2 * i + 1] == pair[2 * i - 1]) continue;
        fprintf(f, out++ ? " %d-%d" : "%d-%d", pair[2 * i], pair[2 * i + 1]);
    }
    free(pair);
    free(ws);
    free(wt);
}

/* Up to max lines of f into lines[] (newline and CR stripped; a NUL byte or invalid UTF-8 is an
 * error naming the line); *eof at the end.  Returns the number read. */
int read_chunk(FILE *f, const char *name, long lineno, int max, char **lines, char **buf, size_t *cap,
                      int *eof) {
    int n = 0;
    while (n < max) {
        errno = 0;
        ssize_t got = getline(buf, cap, f);
        if (got < 0) {
            /* not at the end: an error, or no memory for the line (ENOMEM sets no error flag) */
            if (ferror(f) || !feof(f))
                ll_die("%s:%ld: read error: %s", name, lineno + n + 1, strerror(errno ? errno : EIO));
            *eof = 1;
            break;
        }
        char *line = *buf;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (memchr(line, 0, got)) ll_die("%s:%ld: NUL byte in the input", name, lineno + n + 1);
        /* as llprep and lleval: UTF-8 only (sentencepiece would map the bytes to <unk> silently) */
        const long bad = ll_utf8_invalid_at(line, (size_t)got);
        if (bad >= 0)
            ll_die("%s:%ld: invalid UTF-8 at byte %ld of the line (ll reads UTF-8 only: convert with iconv)", name,
                   lineno + n + 1, bad + 1);
        lines[n++] = ll_strdup(line);
    }
    return n;
}

void side_open(side_file *s, const char *path, const char *in_name, const char *what, long buffer) {
    const int std = !strcmp(path, "-");
    *s = (side_file){.f = std ? stdin : fopen(path, "rb"), .name = std ? "<stdin>" : path, .in_name = in_name,
                     .what = what, .lines = ll_calloc(buffer, sizeof(char *))};
    if (!s->f) ll_die("%s: cannot open: %s", path, strerror(errno));
}

/* The n lines that go with the input's lines lineno+1 .. lineno+n into s->lines (an error if it ends first). */
void side_read(side_file *s, long lineno, int n, char **buf, size_t *cap) {
    int eof = 0;
    const int got = read_chunk(s->f, s->name, lineno, n, s->lines, buf, cap, &eof);
    if (got < n) ll_die("%s: %ld lines, but %s has more: one %s per input line", s->name, lineno + got, s->in_name, s->what);
}

/* The input ended after lineno lines: so must the side file. */
void side_close(side_file *s, long lineno, char **buf, size_t *cap) {
    if (read_chunk(s->f, s->name, lineno, 1, s->lines, buf, cap, &(int){0}) == 1)
        ll_die("%s: more than %ld lines, but %s has %ld: one %s per input line", s->name, lineno, s->in_name, lineno,
               s->what);
    if (s->f != stdin) fclose(s->f);
    free(s->lines);
}
