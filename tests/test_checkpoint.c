/* Checkpoint format: round trip of every dtype (empty, scalar and a ~50 MB
 * tensor), every rejection path with its message, robustness against crafted
 * files, atomic replacement, and numbered-checkpoint pruning. */
#define _GNU_SOURCE
#include "ll/checkpoint.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ll/core.h"
#include "util/testutil.h"

static char *path_in(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static char *make_subdir(const char *name) {
    char *d = path_in(tu_tmpdir(), name);
    if (mkdir(d, 0755) != 0) {
        perror(d);
        exit(1);
    }
    return d;
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static unsigned char *slurp(const char *p, size_t *n) { return (unsigned char *)ll_read_file(p, n); }

static void spit(const char *p, const void *data, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        perror(p);
        exit(1);
    }
}

/* ll_ckpt_open(p) must fail with one line that starts "p: " and contains want. */
static void expect_open_error(const char *p, const char *want) {
    ll_ckpt *k = ll_ckpt_open(p);
    CHECK_MSG(k == NULL, "%s opened but should fail with '%s'", p, want);
    ll_ckpt_close(k);
    const char *e = ll_errbuf();
    CHECK_MSG(strncmp(e, p, strlen(p)) == 0 && strncmp(e + strlen(p), ": ", 2) == 0, "'%s' not prefixed by path", e);
    CHECK_MSG(strchr(e, '\n') == NULL, "multi-line error '%s'", e);
    CHECK_CONTAINS(e, want);
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static void set_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
/* Re-seal an edited image, as a deliberate forger would. */
static void fix_checksum(unsigned char *b, size_t n) { set_le64(b + n - 16, ll_fnv1a64(b, n - 16, LL_FNV_INIT)); }

/* ---- a set of tensors covering every dtype ---- */

enum { NT = 9 };
static float f32a[3 * 5], f32s[1];
static double f64a[7];
static int32_t i32a[2 * 3 * 4];
static int64_t i64a[5];
static uint8_t u8a[13];
static uint16_t bf16a[3 * 3];
static float *big;
static const size_t BIG_ROWS = 12800, BIG_COLS = 1024; /* 52 MB of f32 */

static void make_tensors(ll_tensor_ref *t, int with_big) {
    for (size_t i = 0; i < 15; i++) f32a[i] = (float)i * 0.25f - 1.0f;
    f32s[0] = 3.5f;
    for (size_t i = 0; i < 7; i++) f64a[i] = 1.0 / (double)(i + 1);
    for (size_t i = 0; i < 24; i++) i32a[i] = (int32_t)(i * 7919) - 100000;
    for (size_t i = 0; i < 5; i++) i64a[i] = (int64_t)1 << (10 * i);
    for (size_t i = 0; i < 13; i++) u8a[i] = (uint8_t)(i * 37);
    for (size_t i = 0; i < 9; i++) bf16a[i] = (uint16_t)(0x3f80 + i);
    /* u8 (13 bytes) and bf16 (18 bytes) are placed so the following tensors need padding. */
    ll_tensor_ref ts[NT] = {
        {"enc.embed", LL_DT_F32, 2, {3, 5}, f32a, sizeof f32a},
        {"u8.odd", LL_DT_U8, 1, {13}, u8a, sizeof u8a},
        {"f64.vec", LL_DT_F64, 1, {7}, f64a, sizeof f64a},
        {"bf16.mat", LL_DT_BF16, 2, {3, 3}, bf16a, sizeof bf16a},
        {"i32.cube", LL_DT_I32, 3, {2, 3, 4}, i32a, sizeof i32a},
        {"empty", LL_DT_F32, 2, {0, 8}, NULL, 0},
        {"state.i64", LL_DT_I64, 1, {5}, i64a, sizeof i64a},
        {"scalar", LL_DT_F32, 0, {0}, f32s, sizeof f32s},
        {"big", LL_DT_F32, 2, {(int64_t)BIG_ROWS, (int64_t)BIG_COLS}, big, BIG_ROWS * BIG_COLS * sizeof(float)},
    };
    memcpy(t, ts, sizeof ts);
    if (!with_big) t[NT - 1] = (ll_tensor_ref){"small", LL_DT_F32, 1, {2}, f32a, 2 * sizeof(float)};
}

static unsigned char vocab[300];
static const char *CONFIG = "model:\n  layers: 6 # ünïcode\nlr: 1e-3\n";

static ll_ckpt_contents contents(const ll_tensor_ref *t, int n) {
    return (ll_ckpt_contents){CONFIG, vocab, sizeof vocab, t, n};
}

static void check_same(const ll_ckpt *k, const ll_tensor_ref *t, int n) {
    CHECK(ll_ckpt_n_tensors(k) == n);
    for (int i = 0; i < n && i < ll_ckpt_n_tensors(k); i++) {
        const ll_tensor_ref *r = ll_ckpt_tensor(k, i);
        CHECK_MSG(strcmp(r->name, t[i].name) == 0, "tensor %d: %s vs %s", i, r->name, t[i].name);
        CHECK(ll_ckpt_find(k, t[i].name) == r);
        CHECK(r->dtype == t[i].dtype && r->ndim == t[i].ndim && r->nbytes == t[i].nbytes);
        for (int d = 0; d < t[i].ndim; d++) CHECK(r->shape[d] == t[i].shape[d]);
        CHECK_MSG((uintptr_t)r->data % 64 == 0, "tensor %s data not 64-byte aligned", r->name);
        CHECK_MSG(t[i].nbytes == 0 || memcmp(r->data, t[i].data, t[i].nbytes) == 0, "tensor %s differs", r->name);
    }
    CHECK(ll_ckpt_tensor(k, -1) == NULL && ll_ckpt_tensor(k, n) == NULL);
    CHECK(ll_ckpt_find(k, "absent") == NULL && ll_ckpt_find(k, "") == NULL);
}

static void test_round_trip(void) {
    ll_tensor_ref t[NT];
    make_tensors(t, 1);
    char *p = path_in(tu_tmpdir(), "rt.llm");
    ll_ckpt_contents c = contents(t, NT);
    CHECK_MSG(ll_ckpt_write(p, &c) == 0, "%s", ll_errbuf());
    ll_ckpt *k = ll_ckpt_open(p);
    CHECK_MSG(k != NULL, "%s", ll_errbuf());
    if (k) {
        check_same(k, t, NT);
        CHECK(strcmp(ll_ckpt_config_text(k), CONFIG) == 0);
        size_t vn = 0;
        const void *v = ll_ckpt_vocab(k, &vn);
        CHECK(vn == sizeof vocab && v && memcmp(v, vocab, vn) == 0);
        ll_ckpt_close(k);
    }
    /* The layout as documented: header fields, checksum over all but the trailer. */
    size_t n;
    unsigned char *b = slurp(p, &n);
    CHECK(memcmp(b, "LLMODEL\0", 8) == 0 && b[8] == 1 && b[9] == 0 && le64(b + 16) == n);
    CHECK(memcmp(b + n - 8, "LLMEND\0\0", 8) == 0);
    CHECK(le64(b + n - 16) == ll_fnv1a64(b, n - 16, LL_FNV_INIT));
    CHECK(le64(b + 24) == strlen(CONFIG) && memcmp(b + 32, CONFIG, strlen(CONFIG)) == 0);
    free(b);
    CHECK(tu_count_entries(tu_tmpdir()) == 1); /* no temporary left behind */
    unlink(p);
    free(p);
}

static void test_minimal(void) {
    char *p = path_in(tu_tmpdir(), "min.llm");
    ll_ckpt_contents c = {0};
    CHECK_MSG(ll_ckpt_write(p, &c) == 0, "%s", ll_errbuf());
    ll_ckpt *k = ll_ckpt_open(p);
    CHECK_MSG(k != NULL, "%s", ll_errbuf());
    if (k) {
        size_t vn = 1;
        CHECK(strcmp(ll_ckpt_config_text(k), "") == 0);
        CHECK(ll_ckpt_vocab(k, &vn) == NULL && vn == 0);
        CHECK(ll_ckpt_n_tensors(k) == 0 && ll_ckpt_find(k, "x") == NULL);
        ll_ckpt_close(k);
    }
    unlink(p);
    free(p);
}

/* ---- rejection of damaged files ---- */

static uint64_t g_ctr; /* next Philox draw */

static void test_errors(void) {
    char *dir = make_subdir("err");
    ll_tensor_ref t[NT];
    make_tensors(t, 0);
    char *good = path_in(dir, "good.llm"), *p = path_in(dir, "bad.llm");
    ll_ckpt_contents c = contents(t, NT);
    CHECK(ll_ckpt_write(good, &c) == 0);
    size_t n;
    unsigned char *b = slurp(good, &n);
    unsigned char *m = malloc(n + 64);
    /* Where things are, per docs/model-format.md. */
    size_t index_at = 24 + 8 + strlen(CONFIG) + 8 + sizeof vocab;
    size_t e0_off = index_at + 8 + 4 + strlen("enc.embed") + 4 + 4 + 2 * 8; /* tensor 0's offset field */

    char *missing = path_in(dir, "missing.llm");
    expect_open_error(missing, "cannot open: No such file");
    spit(p, "", 0);
    expect_open_error(p, "empty file");
    spit(p, "GGUF\3\0\0\0 this is something else entirely..........", 50);
    expect_open_error(p, "not an ll model file (bad magic)");
    expect_open_error(dir, "not a regular file");

    memcpy(m, b, n);
    m[8] = 2;
    spit(p, m, n);
    char want[600];
    snprintf(want, sizeof want, "%s: model format version 2 is newer than this ll (1)", p);
    CHECK(ll_ckpt_open(p) == NULL);
    CHECK_MSG(strcmp(ll_errbuf(), want) == 0, "%s", ll_errbuf());
    m[8] = 0;
    spit(p, m, n);
    expect_open_error(p, "unsupported model format version 0");

    /* Truncation inside the magic, header, config, index, data and trailer. */
    size_t cuts[] = {5, 20, 40, index_at + 10, e0_off + 4, n / 2, n - 100, n - 16, n - 3, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        spit(p, b, cuts[i]);
        expect_open_error(p, "truncated");
    }
    memcpy(m, b, n);
    memset(m + n, 'x', 10);
    spit(p, m, n + 10);
    expect_open_error(p, "10 unexpected bytes after the end of the model");

    /* A flipped bit in config, vocab, index or data is caught by the checksum. */
    size_t flips[] = {35, index_at - 5, index_at + 3, e0_off, n - 40, n - 20};
    for (size_t i = 0; i < sizeof flips / sizeof *flips; i++) {
        memcpy(m, b, n);
        m[flips[i]] ^= 0x10;
        spit(p, m, n);
        expect_open_error(p, "checksum mismatch: file is corrupt or truncated");
    }
    memcpy(m, b, n);
    m[n - 2] ^= 1;
    spit(p, m, n);
    expect_open_error(p, "missing end marker");

    /* Crafted files with a valid checksum: bounds are still checked. */
    struct {
        size_t at;
        uint64_t value;
        const char *want;
    } forged[] = {
        {24, (uint64_t)1 << 62, "config text out of bounds"},
        {24, n, "config text out of bounds"},
        {24 + 8 + strlen(CONFIG), ~(uint64_t)0, "vocabulary out of bounds"},
        {index_at, (uint64_t)1 << 40, "tensor count"},
        {index_at, 1000, "tensor count"},
        {index_at + 8, 0xffff, "tensor index entry 0"},                    /* name length */
        {index_at + 8 + 4 + 9, 99, "tensor index entry 0"},               /* dtype */
        {index_at + 8 + 4 + 9 + 4, 7, "tensor index entry 0"},            /* ndim */
        {index_at + 8 + 4 + 9 + 8, (uint64_t)-3, "tensor index entry 0"}, /* negative dim */
        {e0_off, le64(b + e0_off) + 4, "misaligned or out of bounds"},
        {e0_off, n - 64, "misaligned or out of bounds"},
        {e0_off, 64, "misaligned or out of bounds"}, /* overlaps the index */
        {e0_off + 8, 64, "do not match"},
    };
    for (size_t i = 0; i < sizeof forged / sizeof *forged; i++) {
        memcpy(m, b, n);
        if (forged[i].at == index_at + 8 || forged[i].at == index_at + 8 + 4 + 9 ||
            forged[i].at == index_at + 8 + 4 + 9 + 4) { /* u32 fields */
            for (int j = 0; j < 4; j++) m[forged[i].at + j] = (unsigned char)(forged[i].value >> (8 * j));
        } else {
            set_le64(m + forged[i].at, forged[i].value);
        }
        fix_checksum(m, n);
        spit(p, m, n);
        expect_open_error(p, forged[i].want);
    }
    memcpy(m, b, n);
    m[index_at + 8 + 4 + 3] = 0; /* NUL inside a name */
    fix_checksum(m, n);
    spit(p, m, n);
    expect_open_error(p, "tensor index entry 0");
    memcpy(m, b, n);
    m[32 + 3] = 0; /* NUL inside the config text (which starts at 32) */
    fix_checksum(m, n);
    spit(p, m, n);
    expect_open_error(p, "config text contains a NUL byte");

    /* Duplicate names: write "aa" and "ab", then forge the second into "aa". */
    ll_tensor_ref two[2] = {{"aa", LL_DT_U8, 1, {3}, u8a, 3}, {"ab", LL_DT_U8, 1, {3}, u8a, 3}};
    ll_ckpt_contents tc = {NULL, NULL, 0, two, 2};
    CHECK(ll_ckpt_write(p, &tc) == 0);
    size_t n2;
    unsigned char *b2 = slurp(p, &n2);
    size_t second = 24 + 8 + 8 + 8 + (4 + 2 + 4 + 4 + 8 + 8 + 8) + 4;
    CHECK(memcmp(b2 + second, "ab", 2) == 0);
    b2[second + 1] = 'a';
    fix_checksum(b2, n2);
    spit(p, b2, n2);
    expect_open_error(p, "duplicate tensor name 'aa'");
    free(b2);

    /* Random damage, re-sealed: must never crash or hand out a bad pointer. */
    ll_philox r;
    ll_philox_init(&r, 42, 0, 0);
    int opened = 0;
    for (int it = 0; it < 2000; it++) {
        memcpy(m, b, n);
        int edits = 1 + (int)ll_philox_below(&r, g_ctr++, 4);
        for (int e = 0; e < edits; e++) {
            /* mostly the metadata, where the interesting bounds live */
            size_t span = ll_philox_below(&r, g_ctr++, 2) ? e0_off + 24 - 16 : n - 32;
            size_t at = 16 + ll_philox_below(&r, g_ctr++, (uint32_t)span);
            m[at] = (unsigned char)ll_philox_u32(&r, g_ctr++);
        }
        fix_checksum(m, n);
        spit(p, m, n);
        ll_ckpt *kk = ll_ckpt_open(p);
        if (!kk) {
            CHECK_MSG(strncmp(ll_errbuf(), p, strlen(p)) == 0, "%s", ll_errbuf());
            continue;
        }
        opened++;
        unsigned sum = 0; /* touch every byte handed out: ASan/SIGSEGV if out of the mapping */
        size_t vn;
        const unsigned char *v = ll_ckpt_vocab(kk, &vn);
        for (size_t j = 0; j < vn; j++) sum += v[j];
        for (int i = 0; i < ll_ckpt_n_tensors(kk); i++) {
            const ll_tensor_ref *tr = ll_ckpt_tensor(kk, i);
            for (size_t j = 0; j < tr->nbytes; j++) sum += ((const unsigned char *)tr->data)[j];
            CHECK((uintptr_t)tr->data % 64 == 0);
            CHECK(ll_ckpt_find(kk, tr->name) == tr);
        }
        CHECK(sum != 1u << 31); /* uses sum, so the reads cannot be dropped */
        ll_ckpt_close(kk);
    }
    CHECK(opened > 0); /* edits to data bytes alone are undetectable once re-sealed */

    free(b);
    free(m);
    free(missing);
    free(good);
    free(p);
    free(dir);
}

/* ---- atomicity and input validation ---- */

static void expect_write_error(const char *p, const ll_ckpt_contents *c, const char *want) {
    CHECK_MSG(ll_ckpt_write(p, c) == -1, "write should fail with '%s'", want);
    CHECK_MSG(strncmp(ll_errbuf(), p, strlen(p)) == 0, "'%s' not prefixed by path", ll_errbuf());
    CHECK_CONTAINS(ll_errbuf(), want);
}

static void check_holds(const char *p, const ll_tensor_ref *t, int n) {
    ll_ckpt *k = ll_ckpt_open(p);
    CHECK_MSG(k != NULL, "%s", ll_errbuf());
    if (k) check_same(k, t, n);
    ll_ckpt_close(k);
}

static void test_atomic(void) {
    char *dir = make_subdir("atomic");
    ll_tensor_ref t[NT];
    make_tensors(t, 0);
    ll_ckpt_contents c = contents(t, NT);

    char *nodir = path_in(dir, "no/such/dir/x.llm");
    expect_write_error(nodir, &c, "cannot write");
    CHECK(tu_count_entries(dir) == 0);

    /* Invalid contents are refused before any file is created. */
    char *p = path_in(dir, "model.llm");
    struct {
        ll_tensor_ref t;
        const char *want;
    } invalid[] = {
        {{"enc.embed", LL_DT_U8, 1, {3}, u8a, 3}, "duplicate tensor name 'enc.embed'"},
        {{"x", LL_DT_F32, 2, {3, 5}, f32a, 59}, "nbytes 59 does not match f32 shape (60 bytes expected)"},
        {{"x", LL_DT_F32, 1, {3}, f32a, 0}, "nbytes 0 does not match"},
        {{"x", 17, 1, {3}, f32a, 12}, "unknown dtype 17"},
        {{"x", LL_DT_F32, 5, {1, 1, 1, 1}, f32a, 4}, "ndim 5"},
        {{"x", LL_DT_F32, -1, {1}, f32a, 4}, "ndim -1"},
        {{"x", LL_DT_F32, 2, {-2, -2}, f32a, 16}, "negative dimension -2"},
        {{"x", LL_DT_U8, 2, {1000, 1000}, u8a, 1}, "nbytes 1 does not match u8 shape (1000000 bytes expected)"},
        {{"x", LL_DT_F64, 4, {1LL << 40, 1LL << 40, 1LL << 40, 1}, u8a, 1}, "shape too large"},
        {{"", LL_DT_U8, 1, {1}, u8a, 1}, "has no name"},
        {{NULL, LL_DT_U8, 1, {1}, u8a, 1}, "has no name"},
        {{"x", LL_DT_U8, 1, {4}, NULL, 4}, "tensor 'x' has no data"},
    };
    ll_tensor_ref withbad[NT + 1];
    memcpy(withbad, t, sizeof t);
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++) {
        withbad[NT / 2] = invalid[i].t; /* mid-list: nothing may have been written yet */
        if (i == 0) { /* the duplicate goes last, after the tensor it repeats */
            withbad[NT / 2] = t[NT / 2];
            withbad[NT] = invalid[i].t;
        }
        ll_ckpt_contents bc = contents(withbad, i == 0 ? NT + 1 : NT);
        expect_write_error(p, &bc, invalid[i].want);
        CHECK(tu_count_entries(dir) == 0);
    }
    ll_ckpt_contents nov = {NULL, NULL, 5, NULL, 0};
    expect_write_error(p, &nov, "vocabulary of 5 bytes has no data");
    nov = (ll_ckpt_contents){NULL, NULL, 0, NULL, -1};
    expect_write_error(p, &nov, "invalid tensor list");
    expect_write_error(p, NULL, "no contents");
    CHECK(tu_count_entries(dir) == 0);

    /* A refused overwrite leaves the old file intact ... */
    CHECK(ll_ckpt_write(p, &c) == 0);
    withbad[0] = (ll_tensor_ref){"y", LL_DT_F32, 1, {2}, f32a, 12};
    ll_ckpt_contents bc = contents(withbad, NT);
    expect_write_error(p, &bc, "does not match");
    check_holds(p, t, NT);

    /* ... a good one replaces it completely ... */
    ll_tensor_ref other[2] = {{"only", LL_DT_F64, 1, {7}, f64a, sizeof f64a}, {"e", LL_DT_I32, 1, {0}, NULL, 0}};
    ll_ckpt_contents oc = {"other: 1\n", NULL, 0, other, 2};
    CHECK(ll_ckpt_write(p, &oc) == 0);
    check_holds(p, other, 2);
    ll_ckpt *k = ll_ckpt_open(p);
    CHECK(k && strcmp(ll_ckpt_config_text(k), "other: 1\n") == 0 && ll_ckpt_find(k, "enc.embed") == NULL);
    ll_ckpt_close(k);

    /* ... and a write that fails halfway (file size limit: EFBIG) leaves the
     * old file and no temporary. */
    size_t nbig = 1 << 18;
    float *bigbuf = calloc(nbig, sizeof *bigbuf);
    ll_tensor_ref huge = {"huge", LL_DT_F32, 1, {(int64_t)nbig}, bigbuf, nbig * sizeof *bigbuf};
    ll_ckpt_contents hc = {NULL, NULL, 0, &huge, 1};
    struct rlimit old_lim, lim;
    getrlimit(RLIMIT_FSIZE, &old_lim);
    lim = old_lim;
    lim.rlim_cur = 100000;
    void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    expect_write_error(p, &hc, "write failed");
    setrlimit(RLIMIT_FSIZE, &old_lim);
    signal(SIGXFSZ, old_sig);
    check_holds(p, other, 2);
    CHECK(tu_count_entries(dir) == 1);
    free(bigbuf);

    free(nodir);
    free(p);
    free(dir);
}

/* ---- numbered checkpoints ---- */

static void test_prune(void) {
    char *dir = make_subdir("ckpts");
    const char *numbered[] = {"checkpoint_100.llm", "checkpoint_2.llm", "checkpoint_10.llm", "checkpoint_1.llm",
                              "checkpoint_0.llm"};
    const char *others[] = {"checkpoint_last.llm", "checkpoint_best.llm", "checkpoint_05.llm",
                            "checkpoint_7.llm.tmp.1234", "checkpoint_-3.llm", "checkpoint_+3.llm",
                            "checkpoint_3.llmx", "checkpoint_.llm", "checkpoint_12a.llm", "checkpoint_3.LLM",
                            "xcheckpoint_3.llm", "checkpoint_99999999999999999999999.llm", "notes.txt"};
    size_t nn = sizeof numbered / sizeof *numbered, no = sizeof others / sizeof *others;
    for (size_t i = 0; i < nn; i++) free(tu_write(dir, numbered[i], "x"));
    for (size_t i = 0; i < no; i++) free(tu_write(dir, others[i], "x"));

    long *u = NULL;
    int n = ll_ckpt_list_numbered(dir, &u);
    CHECK(n == 5);
    long want[] = {0, 1, 2, 10, 100};
    for (int i = 0; i < n && i < 5; i++) CHECK_MSG(u[i] == want[i], "updates[%d] = %ld", i, u[i]);
    free(u);

    CHECK(ll_ckpt_prune_numbered(dir, 0) == 0); /* keep all */
    CHECK(ll_ckpt_prune_numbered(dir, 5) == 0);
    CHECK(ll_ckpt_prune_numbered(dir, 9) == 0);
    CHECK(tu_count_entries(dir) == (int)(nn + no));
    CHECK(ll_ckpt_prune_numbered(dir, 2) == 3);
    CHECK(tu_count_entries(dir) == (int)(2 + no));
    for (size_t i = 0; i < no; i++) {
        char *q = path_in(dir, others[i]);
        CHECK_MSG(exists(q), "%s was deleted", others[i]);
        free(q);
    }
    char *q10 = ll_ckpt_numbered_path(dir, 10), *q100 = ll_ckpt_numbered_path(dir, 100);
    char *q2 = ll_ckpt_numbered_path(dir, 2);
    CHECK(exists(q10) && exists(q100) && !exists(q2));
    CHECK_CONTAINS(q10, "/checkpoint_10.llm");
    free(q10);
    free(q100);
    free(q2);
    CHECK(ll_ckpt_prune_numbered(dir, 1) == 1);
    n = ll_ckpt_list_numbered(dir, &u);
    CHECK(n == 1 && u && u[0] == 100);
    free(u);

    CHECK(ll_ckpt_prune_numbered(dir, -1) == -1);
    CHECK_CONTAINS(ll_errbuf(), "keep_last");
    char *none = path_in(dir, "nonexistent");
    CHECK(ll_ckpt_prune_numbered(none, 2) == -1);
    CHECK_CONTAINS(ll_errbuf(), "cannot open directory");
    CHECK(ll_ckpt_list_numbered(none, &u) == -1 && u == NULL);
    char *empty = make_subdir("empty");
    CHECK(ll_ckpt_list_numbered(empty, &u) == 0 && u == NULL);
    free(none);
    free(empty);
    free(dir);
}

/* checkpoint.keep_best's names: only the exact form counts; ranked by the metric's direction, ties
 * to the earlier update; pruned to the best N and past an update */
static void test_prune_best(void) {
    char *dir = make_subdir("best");
    const char *ours[] = {"checkpoint_best_loss_5.2000_30.llm", "checkpoint_best_loss_4.1000_20.llm",
                          "checkpoint_best_loss_4.1000_10.llm", "checkpoint_best_loss_7.0000_5.llm",
                          "checkpoint_best_bleu_12.5000_10.llm", "checkpoint_best_bleu_30.0000_20.llm",
                          "checkpoint_best_bleu_0.0000_5.llm"};
    const char *others[] = {"checkpoint_best.llm", "checkpoint_best_loss_4.1_9.llm", "checkpoint_best_loss_04.1000_9.llm",
                            "checkpoint_best_loss_4.1000_09.llm", "checkpoint_best_loss_-4.1000_9.llm",
                            "checkpoint_best_loss_4.1000_9.llmx", "checkpoint_best_loss_nan_9.llm",
                            "checkpoint_best_chrf_1.0000_9.llm", "checkpoint_best_loss_4.10000_9.llm", "checkpoint_9.llm"};
    const size_t no = sizeof others / sizeof *others;
    for (size_t i = 0; i < sizeof ours / sizeof *ours; i++) free(tu_write(dir, ours[i], "x"));
    for (size_t i = 0; i < no; i++) free(tu_write(dir, others[i], "x"));
    char name[128];
    CHECK(!strcmp(ll_ckpt_best_name(name, sizeof name, "loss", 4.10004, 20), "checkpoint_best_loss_4.1000_20.llm"));
    /* loss: 4.1@10, 4.1@20, 5.2@30, 7@5; a new 4.1 at 15 ranks after 4.1@10, before 4.1@20 */
    CHECK(ll_ckpt_best_rank(dir, "loss", 4.1, 15) == 1);
    CHECK(ll_ckpt_best_rank(dir, "loss", 4.09999, 40) == 2); /* (as the name prints it: 4.1000) */
    CHECK(ll_ckpt_best_rank(dir, "loss", 1.0, 40) == 0 && ll_ckpt_best_rank(dir, "loss", 9.0, 1) == 4);
    /* bleu: higher first: 30@20, 12.5@10, 0@5 */
    CHECK(ll_ckpt_best_rank(dir, "bleu", 20, 40) == 1 && ll_ckpt_best_rank(dir, "bleu", 40, 40) == 0);
    CHECK(ll_ckpt_best_rank(dir, "bleu", 0, 1) == 2 && ll_ckpt_best_rank(dir, "bleu", 0, 9) == 3);
    /* chrf: higher first too (its one file, 1.0@9, is among the others above) */
    CHECK(ll_ckpt_best_rank(dir, "chrf", 2.0, 1) == 0 && ll_ckpt_best_rank(dir, "chrf", 0.5, 1) == 1);
    /* past update 20 (a resume's), then the best 2 */
    CHECK(ll_ckpt_prune_best(dir, "loss", 0, 20) == 1); /* 5.2@30 */
    CHECK(ll_ckpt_prune_best(dir, "loss", 2, -1) == 1); /* 7@5 */
    CHECK(ll_ckpt_prune_best(dir, "bleu", 1, -1) == 2);
    const char *left[] = {"checkpoint_best_loss_4.1000_20.llm", "checkpoint_best_loss_4.1000_10.llm",
                          "checkpoint_best_bleu_30.0000_20.llm"};
    for (size_t i = 0; i < 3; i++) {
        char *q = path_in(dir, left[i]);
        CHECK_MSG(exists(q), "%s was deleted", left[i]);
        free(q);
    }
    for (size_t i = 0; i < no; i++) {
        char *q = path_in(dir, others[i]);
        CHECK_MSG(exists(q), "%s was deleted", others[i]);
        free(q);
    }
    CHECK(tu_count_entries(dir) == (int)(3 + no));
    char *none = path_in(dir, "nonexistent");
    CHECK(ll_ckpt_best_rank(none, "loss", 1, 1) == -1 && ll_ckpt_prune_best(none, "loss", 1, -1) == -1);
    CHECK_CONTAINS(ll_errbuf(), "cannot open directory");
    free(none);
    free(dir);
}

int main(void) {
    CHECK(ll_dtype_size(LL_DT_BF16) == 2 && ll_dtype_size(LL_DT_F64) == 8 && ll_dtype_size(99) == 0);
    CHECK(strcmp(ll_dtype_name(LL_DT_U8), "u8") == 0 && strcmp(ll_dtype_name(-1), "?") == 0);
    for (size_t i = 0; i < sizeof vocab; i++) vocab[i] = (unsigned char)(i * 11); /* includes NULs */
    big = ll_aligned_alloc(BIG_ROWS * BIG_COLS * sizeof(float));
    ll_philox r;
    ll_philox_init(&r, 7, 0, 0);
    for (size_t i = 0; i < BIG_ROWS * BIG_COLS; i++) big[i] = (float)ll_philox_u32(&r, i);

    double t0 = ll_now();
    test_round_trip();
    test_minimal();
    free(big);
    test_errors();
    test_atomic();
    test_prune();
    test_prune_best();
    if (ll_verbosity > 1) fprintf(stderr, "test_checkpoint: %.2f s\n", ll_now() - t0);
    return tu_finish("test_checkpoint");
}
