/* The single-file model/checkpoint format (layout: docs/model-format.md).
 * Writing streams straight from the caller's buffers through the atomic-file
 * helpers, hashing as it goes; reading maps the file and checks every length
 * and offset against the mapping before anything points into it, because a
 * checksum only catches accidents, not a crafted file. */
#define _GNU_SOURCE
#include "ll/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ll/core.h"

/* Offsets and sizes are u64 in the file and size_t in memory; one type for
 * both keeps the bounds checks free of truncation cases. */
_Static_assert(sizeof(size_t) >= 8, "ll checkpoints need a 64-bit size_t");

static const unsigned char MAGIC[8] = {'L', 'L', 'M', 'O', 'D', 'E', 'L', 0};
static const unsigned char END_MAGIC[8] = {'L', 'L', 'M', 'E', 'N', 'D', 0, 0};
enum {
    HEADER_BYTES = 24,  /* magic, version, flags, file size */
    TRAILER_BYTES = 16, /* checksum, end magic */
    /* smallest index entry: name_len, 1-byte name, dtype, ndim, offset, nbytes */
    MIN_ENTRY_BYTES = 4 + 1 + 4 + 4 + 8 + 8,
};
#define WRITE_CHUNK ((size_t)1 << 24) /* fwrite and hash multi-GB tensors piecewise */

static const struct {
    const char *name;
    size_t size;
} DTYPES[LL_DT_COUNT] = {
    [LL_DT_F32] = {"f32", 4}, [LL_DT_F64] = {"f64", 8}, [LL_DT_I32] = {"i32", 4},
    [LL_DT_I64] = {"i64", 8}, [LL_DT_U8] = {"u8", 1},   [LL_DT_BF16] = {"bf16", 2},
};

size_t ll_dtype_size(int dtype) { return dtype >= 0 && dtype < LL_DT_COUNT ? DTYPES[dtype].size : 0; }
const char *ll_dtype_name(int dtype) { return dtype >= 0 && dtype < LL_DT_COUNT ? DTYPES[dtype].name : "?"; }

static uint64_t align_up(uint64_t x) { return (x + (LL_CKPT_ALIGN - 1)) & ~(uint64_t)(LL_CKPT_ALIGN - 1); }

/* Bytes implied by dtype and shape; UINT64_MAX on overflow. */
static uint64_t expected_nbytes(const ll_tensor_ref *t) {
    uint64_t n = ll_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
        uint64_t dim = (uint64_t)t->shape[d];
        if (dim != 0 && n > UINT64_MAX / dim) return UINT64_MAX;
        n *= dim;
    }
    return n;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* ll_fnv1a64 hashes whole 8-byte words and then the tail byte by byte, so a
 * stream must be fed to it in multiples of 8 to give the one-shot result. */
typedef struct {
    uint64_t h;
    unsigned char pend[8];
    size_t npend;
} hasher;

static void hash_feed(hasher *s, const void *data, size_t n) {
    const unsigned char *p = data;
    if (s->npend) {
        size_t take = 8 - s->npend < n ? 8 - s->npend : n;
        memcpy(s->pend + s->npend, p, take);
        s->npend += take;
        p += take;
        n -= take;
        if (s->npend < 8) return;
        s->h = ll_fnv1a64(s->pend, 8, s->h);
        s->npend = 0;
    }
    size_t bulk = n & ~(size_t)7;
    if (bulk) s->h = ll_fnv1a64(p, bulk, s->h);
    memcpy(s->pend, p + bulk, n - bulk);
    s->npend = n - bulk;
}

static uint64_t hash_final(hasher *s) { return ll_fnv1a64(s->pend, s->npend, s->h); }

/* ---- writing ---------------------------------------------------------------- */

typedef struct {
    ll_atomic_file af;
    hasher hs;
    uint64_t pos;
    const char *path;
} writer;

static int emit(writer *w, const void *data, size_t n) {
    const unsigned char *p = data;
    while (n > 0) {
        size_t k = n < WRITE_CHUNK ? n : WRITE_CHUNK;
        if (fwrite(p, 1, k, w->af.f) != k) return ll_fail("%s: write failed: %s", w->path, strerror(errno));
        hash_feed(&w->hs, p, k);
        w->pos += k;
        p += k;
        n -= k;
    }
    return 0;
}

static int emit_zeros(writer *w, uint64_t to) {
    static const unsigned char zeros[LL_CKPT_ALIGN];
    while (w->pos < to) {
        size_t k = to - w->pos < sizeof zeros ? (size_t)(to - w->pos) : sizeof zeros;
        if (emit(w, zeros, k) < 0) return -1;
    }
    return 0;
}

static int cmp_ref_name(const void *a, const void *b) {
    return strcmp((*(const ll_tensor_ref *const *)a)->name, (*(const ll_tensor_ref *const *)b)->name);
}

/* Everything that can be wrong with the contents is caught here, before any
 * file exists, so a bad call never disturbs what is at path. */
static int validate(const char *path, const ll_ckpt_contents *c) {
    if (!c) return ll_fail("%s: no contents to write", path);
    if (c->n_tensors < 0 || (c->n_tensors > 0 && !c->tensors))
        return ll_fail("%s: invalid tensor list (%d tensors)", path, c->n_tensors);
    if (c->vocab_len > 0 && !c->vocab) return ll_fail("%s: vocabulary of %zu bytes has no data", path, c->vocab_len);
    for (int i = 0; i < c->n_tensors; i++) {
        const ll_tensor_ref *t = &c->tensors[i];
        if (!t->name || !t->name[0]) return ll_fail("%s: tensor %d has no name", path, i);
        if (strlen(t->name) > LL_CKPT_MAX_NAME)
            return ll_fail("%s: tensor name '%.40s...' longer than %d bytes", path, t->name, LL_CKPT_MAX_NAME);
        if (!ll_dtype_size(t->dtype)) return ll_fail("%s: tensor '%s': unknown dtype %d", path, t->name, t->dtype);
        if (t->ndim < 0 || t->ndim > LL_CKPT_MAX_NDIM)
            return ll_fail("%s: tensor '%s': ndim %d not in 0..%d", path, t->name, t->ndim, LL_CKPT_MAX_NDIM);
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0)
                return ll_fail("%s: tensor '%s': negative dimension %lld", path, t->name, (long long)t->shape[d]);
        uint64_t want = expected_nbytes(t);
        if (want == UINT64_MAX) return ll_fail("%s: tensor '%s': shape too large", path, t->name);
        if (want != t->nbytes)
            return ll_fail("%s: tensor '%s': nbytes %zu does not match %s shape (%llu bytes expected)", path,
                           t->name, t->nbytes, ll_dtype_name(t->dtype), (unsigned long long)want);
        if (t->nbytes > 0 && !t->data) return ll_fail("%s: tensor '%s' has no data", path, t->name);
    }
    if (c->n_tensors > 1) {
        const ll_tensor_ref **s = ll_malloc(sizeof *s * (size_t)c->n_tensors);
        for (int i = 0; i < c->n_tensors; i++) s[i] = &c->tensors[i];
        qsort(s, (size_t)c->n_tensors, sizeof *s, cmp_ref_name);
        int rc = 0;
        for (int i = 1; i < c->n_tensors && rc == 0; i++)
            if (strcmp(s[i - 1]->name, s[i]->name) == 0)
                rc = ll_fail("%s: duplicate tensor name '%s'", path, s[i]->name);
        free(s);
        if (rc) return rc;
    }
    return 0;
}

int ll_ckpt_write(const char *path, const ll_ckpt_contents *c) {
    if (validate(path, c) < 0) return -1;
    const char *config = c->config_text ? c->config_text : "";
    size_t config_len = strlen(config);

    /* Lay the whole file out first: the header records the final size, and
     * the index records every data offset. */
    size_t index_len = 8;
    for (int i = 0; i < c->n_tensors; i++)
        index_len += 4 + strlen(c->tensors[i].name) + 4 + 4 + 8 * (size_t)c->tensors[i].ndim + 8 + 8;
    uint64_t meta_end = HEADER_BYTES + 8 + (uint64_t)config_len + 8 + (uint64_t)c->vocab_len + index_len;
    uint64_t *offsets = ll_malloc(sizeof *offsets * (size_t)(c->n_tensors + 1));
    uint64_t cur = align_up(meta_end);
    for (int i = 0; i < c->n_tensors; i++) {
        cur = align_up(cur);
        offsets[i] = cur;
        cur += c->tensors[i].nbytes;
        if (cur < offsets[i]) {
            free(offsets);
            return ll_fail("%s: total size overflows", path);
        }
    }
    uint64_t file_size = cur + TRAILER_BYTES;

    unsigned char *meta = ll_malloc(index_len > HEADER_BYTES + 8 ? index_len : HEADER_BYTES + 8);
    writer w = {.path = path, .hs = {.h = LL_FNV_INIT}};
    if (ll_atomic_open(&w.af, path) < 0) {
        free(offsets);
        free(meta);
        return -1;
    }
    memcpy(meta, MAGIC, 8);
    put_u32(meta + 8, LL_CKPT_VERSION);
    put_u32(meta + 12, 0);
    put_u64(meta + 16, file_size);
    put_u64(meta + 24, config_len);
    int rc = emit(&w, meta, HEADER_BYTES + 8);
    if (rc == 0) rc = emit(&w, config, config_len);
    unsigned char len8[8];
    put_u64(len8, c->vocab_len);
    if (rc == 0) rc = emit(&w, len8, 8);
    if (rc == 0 && c->vocab_len) rc = emit(&w, c->vocab, c->vocab_len);

    put_u64(meta, (uint64_t)c->n_tensors);
    size_t k = 8;
    for (int i = 0; i < c->n_tensors; i++) {
        const ll_tensor_ref *t = &c->tensors[i];
        size_t nl = strlen(t->name);
        put_u32(meta + k, (uint32_t)nl);
        memcpy(meta + k + 4, t->name, nl);
        k += 4 + nl;
        put_u32(meta + k, (uint32_t)t->dtype);
        put_u32(meta + k + 4, (uint32_t)t->ndim);
        k += 8;
        for (int d = 0; d < t->ndim; d++, k += 8) put_u64(meta + k, (uint64_t)t->shape[d]);
        put_u64(meta + k, offsets[i]);
        put_u64(meta + k + 8, t->nbytes);
        k += 16;
    }
    if (rc == 0) rc = emit(&w, meta, k);
    if (rc == 0 && w.pos != meta_end) rc = ll_fail("%s: internal error: index layout mismatch", path);

    for (int i = 0; i < c->n_tensors && rc == 0; i++) {
        rc = emit_zeros(&w, offsets[i]);
        if (rc == 0) rc = emit(&w, c->tensors[i].data, c->tensors[i].nbytes);
    }
    if (rc == 0) rc = emit_zeros(&w, cur);
    if (rc == 0) {
        unsigned char trailer[TRAILER_BYTES];
        put_u64(trailer, hash_final(&w.hs));
        memcpy(trailer + 8, END_MAGIC, 8);
        if (fwrite(trailer, 1, sizeof trailer, w.af.f) != sizeof trailer)
            rc = ll_fail("%s: write failed: %s", path, strerror(errno));
        else if (w.pos + TRAILER_BYTES != file_size)
            rc = ll_fail("%s: internal error: size mismatch", path);
    }
    free(offsets);
    free(meta);
    if (rc != 0) {
        ll_atomic_abort(&w.af);
        return -1;
    }
    return ll_atomic_commit(&w.af); /* removes the temporary itself on failure */
}

/* ---- reading ---------------------------------------------------------------- */

struct ll_ckpt {
    const unsigned char *map;
    size_t map_len;
    char *config;
    const void *vocab;
    size_t vocab_len;
    int n;
    ll_tensor_ref *t;
    char *names;                    /* all names, NUL-separated */
    const ll_tensor_ref **by_name;  /* sorted by name, for ll_ckpt_find */
};

/* Bounds-checked reader over [pos, end) of the mapping. */
typedef struct {
    const unsigned char *b;
    uint64_t pos, end;
} cursor;

static const unsigned char *take(cursor *c, uint64_t n) {
    if (n > c->end - c->pos) return NULL;
    const unsigned char *p = c->b + c->pos;
    c->pos += n;
    return p;
}
static int take_u32(cursor *c, uint32_t *v) {
    const unsigned char *p = take(c, 4);
    if (!p) return -1;
    *v = get_u32(p);
    return 0;
}
static int take_u64(cursor *c, uint64_t *v) {
    const unsigned char *p = take(c, 8);
    if (!p) return -1;
    *v = get_u64(p);
    return 0;
}

void ll_ckpt_close(ll_ckpt *k) {
    if (!k) return;
    if (k->map) {
        ll_map_unregister(k->map);
        munmap((void *)k->map, k->map_len);
    }
    free(k->config);
    free(k->t);
    free(k->names);
    free(k->by_name);
    free(k);
}

/* One-line error "path: ...", frees the partial result, returns NULL. */
static ll_ckpt *bad(ll_ckpt *k, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ll_ckpt *bad(ll_ckpt *k, const char *path, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ll_fail("%s: %s", path, msg);
    ll_ckpt_close(k);
    return NULL;
}

/* Where an index entry's name and data sit in the file, until checked. */
typedef struct {
    const unsigned char *name;
    uint32_t name_len;
    uint64_t off;
} raw_entry;

/* Parse one index entry into t and r; -1 if it is malformed or runs out. */
static int read_entry(cursor *c, ll_tensor_ref *t, raw_entry *r) {
    uint32_t dtype, ndim;
    uint64_t nbytes;
    if (take_u32(c, &r->name_len) < 0 || r->name_len < 1 || r->name_len > LL_CKPT_MAX_NAME) return -1;
    if (!(r->name = take(c, r->name_len)) || memchr(r->name, 0, r->name_len)) return -1;
    if (take_u32(c, &dtype) < 0 || !ll_dtype_size((int)dtype)) return -1;
    if (take_u32(c, &ndim) < 0 || ndim > LL_CKPT_MAX_NDIM) return -1;
    t->dtype = (int)dtype;
    t->ndim = (int)ndim;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t dim;
        if (take_u64(c, &dim) < 0 || dim > INT64_MAX) return -1;
        t->shape[d] = (int64_t)dim;
    }
    if (take_u64(c, &r->off) < 0 || take_u64(c, &nbytes) < 0) return -1;
    t->nbytes = nbytes;
    return 0;
}

/* Parse and check the tensor index; c is positioned at the count. */
static ll_ckpt *read_index(ll_ckpt *k, const char *path, cursor *c) {
    uint64_t n;
    if (take_u64(c, &n) < 0) return bad(k, path, "corrupt: tensor index runs past the end of the file");
    /* Bound the count by the bytes left before allocating anything for it. */
    if (n > INT_MAX || n > (c->end - c->pos) / MIN_ENTRY_BYTES)
        return bad(k, path, "corrupt: tensor count %llu does not fit in the file", (unsigned long long)n);
    k->n = (int)n;
    k->t = ll_calloc(n ? n : 1, sizeof *k->t);
    raw_entry *raw = ll_malloc(sizeof *raw * (n ? n : 1));
    size_t names_total = 0;
    for (int i = 0; i < k->n; i++) {
        if (read_entry(c, &k->t[i], &raw[i]) < 0) {
            free(raw);
            return bad(k, path, "corrupt: tensor index entry %d is invalid or runs past the end of the file", i);
        }
        names_total += raw[i].name_len + 1;
    }
    /* Tensors follow the index in file order, each aligned and inside the
     * data area, none overlapping: then every pointer is safe to hand out. */
    uint64_t prev_end = c->pos, data_end = c->end;
    for (int i = 0; i < k->n; i++) {
        ll_tensor_ref *t = &k->t[i];
        uint64_t off = raw[i].off;
        if (expected_nbytes(t) != t->nbytes) {
            free(raw);
            return bad(k, path, "corrupt: tensor %d: %zu bytes do not match its %s shape", i, t->nbytes,
                       ll_dtype_name(t->dtype));
        }
        if (off % LL_CKPT_ALIGN != 0 || off < prev_end || t->nbytes > data_end || off > data_end - t->nbytes) {
            free(raw);
            return bad(k, path, "corrupt: tensor %d: data at offset %llu (%zu bytes) is misaligned or out of bounds",
                       i, (unsigned long long)off, t->nbytes);
        }
        t->data = k->map + off;
        prev_end = off + t->nbytes;
    }
    k->names = ll_malloc(names_total ? names_total : 1);
    k->by_name = ll_malloc(sizeof *k->by_name * (n ? n : 1));
    for (size_t i = 0, at = 0; i < n; i++) {
        memcpy(k->names + at, raw[i].name, raw[i].name_len);
        k->names[at + raw[i].name_len] = 0;
        k->t[i].name = k->names + at;
        at += raw[i].name_len + 1;
        k->by_name[i] = &k->t[i];
    }
    free(raw);
    qsort(k->by_name, n, sizeof *k->by_name, cmp_ref_name);
    for (size_t i = 1; i < n; i++)
        if (strcmp(k->by_name[i - 1]->name, k->by_name[i]->name) == 0)
            return bad(k, path, "corrupt: duplicate tensor name '%s'", k->by_name[i]->name);
    return k;
}

ll_ckpt *ll_ckpt_open(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return bad(NULL, path, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return bad(NULL, path, "not a regular file");
    }
    if (st.st_size == 0) {
        close(fd);
        return bad(NULL, path, "empty file (0 bytes), not an ll model");
    }
    ll_ckpt *k = ll_calloc(1, sizeof *k);
    k->map_len = (size_t)st.st_size;
    void *m = mmap(NULL, k->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) {
        k->map = NULL;
        return bad(k, path, "cannot map: %s", strerror(e));
    }
    k->map = m;
    ll_map_register(m, k->map_len, path);
    const unsigned char *b = k->map;
    uint64_t size = k->map_len;

    /* Header, cheapest and most telling checks first. */
    size_t mlen = size < 8 ? (size_t)size : 8;
    if (memcmp(b, MAGIC, mlen) != 0) return bad(k, path, "not an ll model file (bad magic)");
    if (size < HEADER_BYTES) return bad(k, path, "truncated: only %llu bytes", (unsigned long long)size);
    uint32_t version = get_u32(b + 8), flags = get_u32(b + 12);
    if (version > LL_CKPT_VERSION)
        return bad(k, path, "model format version %u is newer than this ll (%d)", version, LL_CKPT_VERSION);
    if (version < 1) return bad(k, path, "unsupported model format version %u", version);
    if (flags != 0) return bad(k, path, "unknown format flags 0x%x (written by a newer ll?)", flags);
    uint64_t declared = get_u64(b + 16);
    if (size < declared)
        return bad(k, path, "truncated: %llu of %llu bytes", (unsigned long long)size, (unsigned long long)declared);
    if (size > declared)
        return bad(k, path, "%llu unexpected bytes after the end of the model: file is corrupt",
                   (unsigned long long)(size - declared));
    if (size < HEADER_BYTES + 8 + 8 + 8 + TRAILER_BYTES)
        return bad(k, path, "corrupt: declared size %llu is too small", (unsigned long long)declared);

    uint64_t trailer = size - TRAILER_BYTES;
    if (memcmp(b + trailer + 8, END_MAGIC, 8) != 0)
        return bad(k, path, "missing end marker: file is corrupt or truncated");
    if (ll_fnv1a64(b, (size_t)trailer, LL_FNV_INIT) != get_u64(b + trailer))
        return bad(k, path, "checksum mismatch: file is corrupt or truncated");

    /* Sections.  The checksum says nothing about a crafted file, so every
     * length is still checked against the space left before the trailer. */
    cursor c = {b, HEADER_BYTES, trailer};
    uint64_t len;
    const unsigned char *p;
    if (take_u64(&c, &len) < 0 || !(p = take(&c, len))) return bad(k, path, "corrupt: config text out of bounds");
    if (memchr(p, 0, len)) return bad(k, path, "corrupt: config text contains a NUL byte");
    k->config = ll_malloc(len + 1);
    memcpy(k->config, p, len);
    k->config[len] = 0;
    if (take_u64(&c, &len) < 0 || !(p = take(&c, len))) return bad(k, path, "corrupt: vocabulary out of bounds");
    k->vocab = len ? p : NULL;
    k->vocab_len = len;
    return read_index(k, path, &c);
}

const char *ll_ckpt_config_text(const ll_ckpt *k) { return k->config; }
const void *ll_ckpt_vocab(const ll_ckpt *k, size_t *n) {
    if (n) *n = k->vocab_len;
    return k->vocab;
}
int ll_ckpt_n_tensors(const ll_ckpt *k) { return k->n; }
const ll_tensor_ref *ll_ckpt_tensor(const ll_ckpt *k, int i) { return i >= 0 && i < k->n ? &k->t[i] : NULL; }

const ll_tensor_ref *ll_ckpt_find(const ll_ckpt *k, const char *name) {
    int lo = 0, hi = k->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int r = strcmp(k->by_name[mid]->name, name);
        if (r == 0) return k->by_name[mid];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int ll_ckpt_output_ok(const char *out, const char *const *in, int n) {
    for (int i = 0; i < n; i++)
        if (ll_same_file(out, in[i])) return ll_fail("%s: the output is an input too; refusing to replace it", out);
    struct stat st;
    if (stat(out, &st) || !S_ISREG(st.st_mode)) return 0;
    ll_ckpt *k = ll_ckpt_open(out); /* (not a checkpoint: the user's to replace) */
    int training = 0;
    for (int j = 0; k && j < k->n && !training; j++)
        training = !strncmp(k->t[j].name, "optim.", 6) || !strncmp(k->t[j].name, "state.", 6);
    ll_ckpt_close(k);
    if (training)
        return ll_fail("%s: a training checkpoint (it holds the optimizer and trainer state its run resumes "
                       "from); refusing to replace it with a model file: choose another output", out);
    return 0;
}

/* ---- checkpoint directories ------------------------------------------------- */

/* "<N>.llm" with N canonical decimal (so no two names share an N). */
static int parse_update_llm(const char *d, long *n) {
    static const char suf[] = ".llm";
    const char *e = d;
    long v = 0;
    while (*e >= '0' && *e <= '9') {
        if (e - d >= 18) return 0; /* keeps v far from overflow */
        v = v * 10 + (*e++ - '0');
    }
    if (e == d || (*d == '0' && e - d > 1) || strcmp(e, suf) != 0) return 0;
    *n = v;
    return 1;
}

/* "checkpoint_<N>.llm" */
static int parse_numbered(const char *name, long *n) {
    static const char pre[] = "checkpoint_";
    return strncmp(name, pre, sizeof pre - 1) == 0 && parse_update_llm(name + sizeof pre - 1, n);
}

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int ll_ckpt_list_numbered(const char *dir, long **updates) {
    *updates = NULL;
    DIR *dp = opendir(dir);
    if (!dp) return ll_fail("%s: cannot open directory: %s", dir, strerror(errno));
    long *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        long u;
        if (!parse_numbered(e->d_name, &u)) continue;
        if (n == cap) v = ll_realloc(v, sizeof *v * (cap = cap ? 2 * cap : 16));
        v[n++] = u;
    }
    closedir(dp);
    if (n > INT_MAX) {
        free(v);
        return ll_fail("%s: too many numbered checkpoints", dir);
    }
    if (n) qsort(v, n, sizeof *v, cmp_long);
    *updates = v;
    return (int)n;
}

char *ll_ckpt_numbered_path(const char *dir, long update) {
    size_t n = strlen(dir) + 48;
    char *p = ll_malloc(n);
    snprintf(p, n, "%s/checkpoint_%ld.llm", dir, update);
    return p;
}

int ll_ckpt_prune_numbered(const char *dir, int keep_last) {
    if (keep_last < 0) return ll_fail("%s: keep_last must be >= 0 (got %d)", dir, keep_last);
    long *v;
    int n = ll_ckpt_list_numbered(dir, &v);
    if (n < 0) return -1;
    int deleted = 0, rc = 0;
    for (int i = 0; keep_last > 0 && i < n - keep_last; i++) {
        char *p = ll_ckpt_numbered_path(dir, v[i]);
        if (unlink(p) == 0)
            deleted++;
        else if (errno != ENOENT && rc == 0) /* ENOENT: someone else pruned it already */
            rc = ll_fail("%s: cannot delete: %s", p, strerror(errno));
        free(p);
    }
    free(v);
    return rc < 0 ? -1 : deleted;
}

/* ---- the best N (checkpoint.keep_best) ---- */

typedef struct {
    double value;
    long update;
    char *name;
} best_file;

/* "checkpoint_best_<metric>_<digits>.<4 digits>_<N>.llm", N canonical decimal. */
static int parse_best(const char *name, const char *metric, double *value, long *update) {
    char pre[48];
    snprintf(pre, sizeof pre, "checkpoint_best_%s_", metric);
    if (strncmp(name, pre, strlen(pre)) != 0) return 0;
    const char *d = name + strlen(pre), *e = d;
    while (*e >= '0' && *e <= '9') e++;
    if (e == d || e - d > 12 || (*d == '0' && e - d > 1)) return 0; /* canonical integer digits */
    if (*e != '.' || strspn(e + 1, "0123456789") != 4 || e[5] != '_') return 0;
    *value = strtod(d, NULL);
    return parse_update_llm(e + 6, update);
}

const char *ll_ckpt_best_name(char *buf, size_t n, const char *metric, double value, long update) {
    snprintf(buf, n, "checkpoint_best_%s_%.4f_%ld.llm", metric, value, update);
    return buf;
}

/* better first: the metric's direction, then the earlier update */
static int best_higher; /* (list_best sets it for qsort: 1 when the metric is BLEU or chrF) */
static int cmp_best(const void *a, const void *b) {
    const best_file *x = a, *y = b;
    if (x->value != y->value) return (x->value < y->value) == !best_higher ? -1 : 1;
    return (x->update > y->update) - (x->update < y->update);
}

static int list_best(const char *dir, const char *metric, best_file **out) {
    *out = NULL;
    DIR *dp = opendir(dir);
    if (!dp) return ll_fail("%s: cannot open directory: %s", dir, strerror(errno));
    best_file *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        double val;
        long u;
        if (!parse_best(e->d_name, metric, &val, &u)) continue;
        if (n == cap) v = ll_realloc(v, sizeof *v * (cap = cap ? 2 * cap : 16));
        v[n++] = (best_file){val, u, ll_strdup(e->d_name)};
    }
    closedir(dp);
    best_higher = !strcmp(metric, "bleu") || !strcmp(metric, "chrf");
    if (n) qsort(v, n, sizeof *v, cmp_best);
    *out = v;
    return (int)n;
}

int ll_ckpt_best_rank(const char *dir, const char *metric, double value, long update) {
    best_file *v;
    int n = list_best(dir, metric, &v), r = 0;
    if (n < 0) return -1;
    char buf[32]; /* the value as the name will hold it */
    snprintf(buf, sizeof buf, "%.4f", value);
    const best_file q = {strtod(buf, NULL), update, NULL};
    for (int i = 0; i < n; i++) {
        r += cmp_best(&v[i], &q) < 0;
        free(v[i].name);
    }
    free(v);
    return r;
}

int ll_ckpt_prune_best(const char *dir, const char *metric, int keep, long after) {
    best_file *v;
    int n = list_best(dir, metric, &v);
    if (n < 0) return -1;
    int deleted = 0, rc = 0, kept = 0;
    char path[4096];
    for (int i = 0; i < n; i++) {
        const int drop = (after >= 0 && v[i].update > after) || (keep > 0 && kept >= keep);
        kept += !drop;
        snprintf(path, sizeof path, "%s/%s", dir, v[i].name);
        if (drop && unlink(path) == 0)
            deleted++;
        else if (drop && errno != ENOENT && rc == 0)
            rc = ll_fail("%s: cannot delete: %s", path, strerror(errno));
        free(v[i].name);
    }
    free(v);
    return rc < 0 ? -1 : deleted;
}

/* "<name>.tmp.<pid>" (the atomic writer's temporaries) for the files a run
 * writes into its save_dir; *pid receives the writer's pid. */
static int parse_temp(const char *name, long *pid) {
    const char *t = strstr(name, ".tmp.");
    if (!t || (strncmp(name, "checkpoint_", 11) && strncmp(name, "metrics", 7))) return 0;
    const char *d = t + 5;
    char *end;
    errno = 0;
    long v = strtol(d, &end, 10);
    if (end == d || *end || *d < '0' || *d > '9' || errno || v <= 0) return 0;
    *pid = v;
    return 1;
}

int ll_ckpt_clean_stale_temps(const char *dir, long writer) {
    if (writer <= 0 || writer == (long)getpid()) return 0;
    DIR *dp = opendir(dir);
    if (!dp) return errno == ENOENT ? 0 : ll_fail("%s: cannot open directory: %s", dir, strerror(errno));
    int removed = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(dp))) {
        long pid;
        if (!parse_temp(e->d_name, &pid) || pid != writer) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* its writer may still be running */
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) == 0) removed++;
    }
    closedir(dp);
    return removed;
}
