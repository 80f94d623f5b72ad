/* Binarised token files: written once (atomically), read by mmap.  The
 * tokens come first so the writer can stream them; offsets and line numbers,
 * known only at the end, follow, and the header is rewritten last. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ll/core.h"
#include "ll/data.h"

#define TOK_MAGIC "LLTOKENS"
#define TOK_VERSION 1u
#define TOK_HEADER 64

typedef struct {
    char magic[8];
    uint32_t version, header_size;
    uint64_t n_sents, n_tokens, checksum;
    uint64_t reserved[3];
} tok_header;
_Static_assert(sizeof(tok_header) == TOK_HEADER, "token file header must be 64 bytes");

static uint64_t pad8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

/* Byte positions of the arrays for given counts; also the expected file size. */
static void tok_layout(uint64_t n_sents, uint64_t n_tokens, uint64_t *off_pos, uint64_t *line_pos, uint64_t *size) {
    *off_pos = pad8(TOK_HEADER + 4 * n_tokens);
    *line_pos = *off_pos + 8 * (n_sents + 1);
    *size = *line_pos + 8 * n_sents;
}

/* Checksum chained per sentence, so writer (streaming) and verifier agree. */
static uint64_t sent_hash(const int32_t *ids, int n, uint64_t h) { return ll_fnv1a64(ids, 4 * (size_t)n, h); }

int ll_tokfile_open(ll_tokfile *f, const char *path) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return ll_fail("%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ll_fail("%s: cannot stat: %s", path, strerror(e));
    }
    size_t len = (size_t)st.st_size;
    if (len < TOK_HEADER) {
        close(fd);
        return ll_fail("%s: truncated token file (%zu bytes, header needs %d)", path, len, TOK_HEADER);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return ll_fail("%s: cannot mmap: %s", path, strerror(errno));
    ll_map_register(map, len, path); /* truncated while mapped: an error naming it, not a bare SIGBUS */
    const tok_header *h = map;
    const char *why = NULL;
    char buf[160];
    uint64_t off_pos = 0, line_pos = 0, size = 0;
    if (memcmp(h->magic, TOK_MAGIC, 8) != 0)
        why = "not an ll token file (bad magic)";
    else if (h->version != TOK_VERSION) {
        snprintf(buf, sizeof buf, "unsupported token file version %u (expected %u)", h->version, TOK_VERSION);
        why = buf;
    } else if (h->header_size != TOK_HEADER || h->n_sents > (uint64_t)INT_MAX || h->n_tokens > ((uint64_t)1 << 60))
        why = "corrupt header";
    else {
        tok_layout(h->n_sents, h->n_tokens, &off_pos, &line_pos, &size);
        if (size != len) {
            snprintf(buf, sizeof buf, "%s token file (%zu bytes, header says %llu)",
                     len < size ? "truncated" : "corrupt", len, (unsigned long long)size);
            why = buf;
        }
    }
    if (!why) {
        const uint64_t *off = (const uint64_t *)((const char *)map + off_pos);
        if (off[0] != 0 || off[h->n_sents] != h->n_tokens) why = "corrupt offsets";
        for (uint64_t i = 0; !why && i < h->n_sents; i++)
            if (off[i + 1] <= off[i] || off[i + 1] > h->n_tokens) {
                snprintf(buf, sizeof buf, "corrupt offsets at sentence %llu", (unsigned long long)i);
                why = buf;
            }
    }
    if (why) {
        ll_map_unregister(map);
        munmap(map, len);
        return ll_fail("%s: %s", path, why);
    }
    f->n_sents = (int)h->n_sents;
    f->n_tokens = h->n_tokens;
    f->checksum = h->checksum;
    f->tokens = (const int32_t *)((const char *)map + TOK_HEADER);
    f->offsets = (const uint64_t *)((const char *)map + off_pos);
    f->lines = (const uint64_t *)((const char *)map + line_pos);
    f->map = map;
    f->map_len = len;
    return 0;
}

void ll_tokfile_close(ll_tokfile *f) {
    if (f->map) {
        ll_map_unregister(f->map);
        munmap(f->map, f->map_len);
    }
    memset(f, 0, sizeof *f);
}

int ll_tokfile_verify(const ll_tokfile *f, const char *path, int vocab) {
    /* One pass: the id range first (names the exact position of a corrupt id),
     * then the checksum, which also catches flips that stay in range. */
    uint64_t h = LL_FNV_INIT;
    for (int i = 0; i < f->n_sents; i++) {
        const int32_t *t = f->tokens + f->offsets[i];
        int n = ll_tokfile_len(f, i);
        if (vocab > 0)
            for (int j = 0; j < n; j++)
                if ((uint32_t)t[j] >= (uint32_t)vocab)
                    return ll_fail("%s: token id %d outside the vocabulary [0, %d) at sentence %d token %d (byte "
                                   "offset %llu, raw text line %llu); the file is corrupt: run llprep again",
                                   path, t[j], vocab, i, j, (unsigned long long)(TOK_HEADER + 4 * (f->offsets[i] + j)),
                                   (unsigned long long)f->lines[i] + 1);
        if (t[n - 1] != LL_EOS) return ll_fail("%s: sentence %d does not end with EOS", path, i);
        h = sent_hash(t, n, h);
    }
    if (h != f->checksum) return ll_fail("%s: checksum mismatch (file is corrupt): run llprep again", path);
    return 0;
}

/* ---- writer ---- */

struct ll_tokfile_writer {
    ll_atomic_file af;
    uint64_t *offsets, *lines;
    size_t n, cap;
    uint64_t n_tokens, checksum;
    int failed;
};

ll_tokfile_writer *ll_tokfile_create(const char *path) {
    ll_tokfile_writer *w = ll_calloc(1, sizeof *w);
    if (ll_atomic_open(&w->af, path) != 0) {
        free(w);
        return NULL;
    }
    w->cap = 1024;
    w->offsets = ll_malloc(sizeof(uint64_t) * (w->cap + 1));
    w->lines = ll_malloc(sizeof(uint64_t) * w->cap);
    w->offsets[0] = 0;
    w->checksum = LL_FNV_INIT;
    static const char zero[TOK_HEADER];
    if (fwrite(zero, 1, TOK_HEADER, w->af.f) != TOK_HEADER) w->failed = 1; /* header placeholder */
    return w;
}

int ll_tokfile_append(ll_tokfile_writer *w, const int32_t *ids, int n, uint64_t line) {
    if (n < 1 || ids[n - 1] != LL_EOS) return ll_fail("%s: sentence must end with EOS", w->af.path);
    if (w->n == (size_t)INT_MAX) return ll_fail("%s: too many sentences", w->af.path);
    if (w->n == w->cap) {
        w->cap *= 2;
        w->offsets = ll_realloc(w->offsets, sizeof(uint64_t) * (w->cap + 1));
        w->lines = ll_realloc(w->lines, sizeof(uint64_t) * w->cap);
    }
    if (fwrite(ids, 4, (size_t)n, w->af.f) != (size_t)n) w->failed = 1;
    w->checksum = sent_hash(ids, n, w->checksum);
    w->n_tokens += (uint64_t)n;
    w->lines[w->n] = line;
    w->offsets[++w->n] = w->n_tokens;
    return 0;
}

static void writer_free(ll_tokfile_writer *w) {
    free(w->offsets);
    free(w->lines);
    free(w);
}

int ll_tokfile_commit(ll_tokfile_writer *w) {
    uint64_t off_pos, line_pos, size;
    tok_layout(w->n, w->n_tokens, &off_pos, &line_pos, &size);
    static const char zero[8];
    size_t pad = (size_t)(off_pos - (TOK_HEADER + 4 * w->n_tokens));
    tok_header h = {.version = TOK_VERSION,
                    .header_size = TOK_HEADER,
                    .n_sents = w->n,
                    .n_tokens = w->n_tokens,
                    .checksum = w->checksum};
    memcpy(h.magic, TOK_MAGIC, 8);
    FILE *f = w->af.f;
    if (w->failed || fwrite(zero, 1, pad, f) != pad || fwrite(w->offsets, 8, w->n + 1, f) != w->n + 1 ||
        fwrite(w->lines, 8, w->n, f) != w->n || fseek(f, 0, SEEK_SET) != 0 || fwrite(&h, sizeof h, 1, f) != 1) {
        int rc = ll_fail("%s: write failed: %s", w->af.path, strerror(errno));
        ll_atomic_abort(&w->af);
        writer_free(w);
        return rc;
    }
    int rc = ll_atomic_commit(&w->af);
    writer_free(w);
    return rc;
}

void ll_tokfile_abort(ll_tokfile_writer *w) {
    if (!w) return;
    ll_atomic_abort(&w->af);
    writer_free(w);
}
