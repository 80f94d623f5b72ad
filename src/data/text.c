/* Raw text: line reading, UTF-8 validation and content hashing.  Files are
 * streamed line by line so corpora need not fit in memory. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "data_internal.h"
#include "ll/core.h"

int ll_lr_open(ll_linereader *r, const char *path) {
    memset(r, 0, sizeof *r);
    r->path = path;
    r->f = fopen(path, "rb");
    if (!r->f) return ll_fail("%s: cannot open: %s", path, strerror(errno));
    return 0;
}

ssize_t ll_lr_next(ll_linereader *r, char **line) {
    errno = 0;
    ssize_t n = getline(&r->buf, &r->cap, r->f);
    if (n < 0) {
        if (ferror(r->f) || !feof(r->f)) { /* ENOMEM (a huge line) is no end of input */
            if (!errno) errno = EIO;
            ll_fail("%s:%lld: read error: %s", r->path, (long long)r->lineno + 1, strerror(errno));
            return -2;
        }
        return -1;
    }
    r->lineno++;
    if (n > 0 && r->buf[n - 1] == '\n') r->buf[--n] = 0;
    if (n > 0 && r->buf[n - 1] == '\r') r->buf[--n] = 0; /* CRLF files read like LF files */
    *line = r->buf;
    return n;
}

void ll_lr_close(ll_linereader *r) {
    if (r->f) fclose(r->f);
    free(r->buf);
    memset(r, 0, sizeof *r);
}

ssize_t ll_utf8_invalid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            if (c == 0) return (ssize_t)i; /* sentencepiece would cut the line here */
            i++;
            continue;
        }
        size_t len;
        unsigned lo = 0x80, hi = 0xBF; /* allowed range of the 2nd byte */
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0; /* overlong */
            if (c == 0xED) hi = 0x9F; /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90; /* overlong */
            if (c == 0xF4) hi = 0x8F; /* > U+10FFFF */
        } else
            return (ssize_t)i;
        if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return (ssize_t)i;
        for (size_t k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return (ssize_t)i;
        i += len;
    }
    return -1;
}

int ll_scan_text(const char *path, int64_t *lines, uint64_t *hash) {
    ll_linereader r;
    if (ll_lr_open(&r, path) != 0) return -1;
    uint64_t h = LL_FNV_INIT;
    char *line;
    ssize_t n;
    int rc = 0;
    while ((n = ll_lr_next(&r, &line)) >= 0) {
        ssize_t bad = ll_utf8_invalid(line, (size_t)n);
        if (bad >= 0) {
            rc = ll_fail("%s:%lld: %s at byte %lld", path, (long long)r.lineno,
                         line[bad] ? "invalid UTF-8" : "NUL character", (long long)bad + 1);
            break;
        }
        h = ll_fnv1a64(line, (size_t)n, h);
        h = ll_fnv1a64("\n", 1, h);
    }
    if (n == -2) rc = -1;
    if (rc == 0 && r.lineno == 0) rc = ll_fail("%s: empty corpus", path);
    *lines = r.lineno;
    *hash = h;
    ll_lr_close(&r);
    return rc;
}

int ll_hash_file(const char *path, uint64_t *hash) {
    FILE *f = fopen(path, "rb");
    if (!f) return ll_fail("%s: cannot open: %s", path, strerror(errno));
    enum { CHUNK = 1 << 16 };
    char *buf = ll_malloc(CHUNK);
    uint64_t h = LL_FNV_INIT;
    size_t got;
    /* fread on a regular file fills the chunk except at the end, so the chaining is stable */
    while ((got = fread(buf, 1, CHUNK, f)) > 0) h = ll_fnv1a64(buf, got, h);
    int err = ferror(f);
    fclose(f);
    free(buf);
    if (err) return ll_fail("%s: read error", path);
    *hash = h;
    return 0;
}
