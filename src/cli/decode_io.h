/* lldecode's line input and token output (decode_io.c). */
#ifndef LL_CLI_DECODE_IO_H
#define LL_CLI_DECODE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ll/decode.h"
#include "ll/data.h"

/* "id id id" -> ids with EOS appended (unless already last), truncated to max_src (*truncated);
 * 0 for a blank line.  A bad id is an error naming input:lineno. */
int parse_ids(const char *line, long lineno, const char *input, int V, int max_src, int32_t **ids, int *cap,
              int *truncated);

/* Tokens without the final EOS: pieces ("▁The ▁cat") or ids ("57 12"). */
void put_tokens(FILE *f, const ll_spm *spm, const int32_t *t, int n, int as_ids);

/* y's hard alignment "s-t s-t ...": by pieces, or with words by words (docs/decoding.md). */
void put_align(FILE *f, const ll_spm *spm, const int32_t *src, int src_len, const ll_hypo *y, int words);

/* Up to max lines of f into lines[] (newline and CR stripped; a NUL byte or invalid UTF-8 is an
 * error naming the line, counted from lineno + 1); *eof at the end.  Returns the number read. */
int read_chunk(FILE *f, const char *name, long lineno, int max, char **lines, char **buf, size_t *cap, int *eof);

/* A second file read in step with the input, one line per input line (--score-reference, --prefix):
 * a line-count mismatch either way is an error naming both files. */
typedef struct {
    FILE *f;
    const char *name, *in_name, *what; /* its name, the input's, and what one of its lines is */
    char **lines;                      /* the chunk's lines, --buffer-size of them at most */
} side_file;

/* Open path ("-": standard input) for the input in_name. */
void side_open(side_file *s, const char *path, const char *in_name, const char *what, long buffer);
/* The n lines that go with the input's lines lineno+1 .. lineno+n into s->lines (the caller frees them). */
void side_read(side_file *s, long lineno, int n, char **buf, size_t *cap);
/* The input ended after lineno lines: so must the side file.  Closes it. */
void side_close(side_file *s, long lineno, char **buf, size_t *cap);

#endif
