/* Core utilities: errors, allocation, the real type, the Philox RNG, arenas,
 * atomic file output, timing.  Everything above src/core builds on these. */
#ifndef LL_CORE_H
#define LL_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CPU model code is written against `real`.  The normal build uses float;
 * the gradient-check test build compiles the same sources with
 * -DLL_REAL_DOUBLE so finite differences run in double precision. */
#ifdef LL_REAL_DOUBLE
typedef double real;
#define LL_REAL_NAME "f64"
#define rexp exp
#define rlog log
#define rsqrt_ sqrt
#else
typedef float real;
#define LL_REAL_NAME "f32"
#define rexp expf
#define rlog logf
#define rsqrt_ sqrtf
#endif

/* ---- errors ---------------------------------------------------------------
 * Tools report bad input with one line and exit non-zero.  Library code that
 * can fail on user input returns -1 and leaves the message in ll_errbuf()
 * (so tests can check it); ll_die prints and exits. */
void ll_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
int ll_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* sets errbuf, returns -1 */
const char *ll_errbuf(void);
void ll_set_progname(const char *name);

void *ll_malloc(size_t n);  /* dies on OOM with the size */
void *ll_calloc(size_t n, size_t sz);
void *ll_realloc(void *p, size_t n);
char *ll_strdup(const char *s);
void *ll_aligned_alloc(size_t n); /* 64-byte aligned, zeroed; free with free() */

/* ---- command lines (src/core/args.c) ----
 * A tool whose option came twice would keep the last one silently ("--config A
 * --config B" trains B): ll_args_no_repeats dies naming it, but for the options
 * in `repeatable` (names separated by blanks, e.g. "--set").  Option aliases
 * (-i and --input) are the tool's to compare. */
void ll_args_no_repeats(int argc, char **argv, const char *repeatable);
/* 1 when a and b are one regular file (the same inode; either may be a link to
 * it), so an output named like an input can be refused before it replaces it. */
int ll_same_file(const char *a, const char *b);

/* ---- strict numbers (src/core/numparse.c) ----
 * The whole string must be the number (no blanks or trailing text). */
enum { LL_NUM_SYNTAX = -1, LL_NUM_RANGE = -2, LL_NUM_UNDERFLOW = -3 };
int ll_num_long(const char *s, long *v); /* 0, LL_NUM_SYNTAX or LL_NUM_RANGE (beyond long) */
/* 0, LL_NUM_SYNTAX (also NaN), LL_NUM_RANGE (infinite or beyond the type) or
 * LL_NUM_UNDERFLOW (not 0 but below the type's smallest normal value); as_float:
 * the value goes into a float. */
int ll_num_double(const char *s, double *v, int as_float);
/* Flags: -1 + errbuf "what: expected an integer in [lo, hi], got 's'". */
int ll_parse_long(const char *what, const char *s, long lo, long hi, long *out);
int ll_parse_double(const char *what, const char *s, double lo, double hi, double *out);

/* ---- logging ---- */
extern int ll_verbosity; /* 0 quiet, 1 normal, 2 debug */
void ll_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "prog: warning: ..." on stderr whatever the verbosity: something the user must know. */
void ll_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- time ---- */
double ll_now(void); /* monotonic seconds */

/* ---- Philox4x32-10 counter-based RNG ----------------------------------------
 * A stream is keyed by (seed, a, b) where callers pack purpose/step/layer into
 * a and b; element i of the stream is a pure function of (key, i), so CPU and
 * CUDA draw identical numbers and a resumed run continues bit for bit. */
typedef struct {
    uint32_t key[2];
    uint32_t ctr_hi[2]; /* counter words 2,3: stream selector */
    /* when set, counter word 3 is read from here when the numbers are drawn,
     * not from ctr_hi[1]: the training step in backend memory (uploaded with
     * the batch), so a step replayed as a CUDA graph draws that step's numbers */
    const uint32_t *ctr_hi1_at;
} ll_philox;

/* counter word 3 of r (ctr_hi1_at or ctr_hi[1]) */
static inline uint32_t ll_philox_ctr3(const ll_philox *r) { return r->ctr_hi1_at ? *r->ctr_hi1_at : r->ctr_hi[1]; }

void ll_philox_init(ll_philox *r, uint64_t seed, uint32_t stream_a, uint32_t stream_b);
void ll_philox_block(const ll_philox *r, uint64_t block, uint32_t out[4]); /* 4 words per block */
/* blocks block0..block0+15, their words in order (out[4*i + w]); vectorised */
void ll_philox_blocks16(const ll_philox *r, uint64_t block0, uint32_t out[64]);
uint32_t ll_philox_u32(const ll_philox *r, uint64_t i);                    /* i-th 32-bit word */
float ll_philox_uniform(const ll_philox *r, uint64_t i);                   /* (0,1) open */
uint32_t ll_philox_below(const ll_philox *r, uint64_t i, uint32_t n);      /* [0,n) */

/* Purposes for stream_a (keep stable: they define the random stream). */
enum {
    LL_RNG_DROPOUT = 1,
    LL_RNG_SHUFFLE = 2,
    LL_RNG_INIT = 3,
    LL_RNG_GUMBEL = 4,
    LL_RNG_DROPNET = 5,
    LL_RNG_LAYERDROP = 6,
    LL_RNG_UNK = 7,
    LL_RNG_SAMPLE = 8,
    LL_RNG_DECODE_SAMPLE = 9, /* lldecode --sampling */
};

/* ---- arena: bump allocator for activations (reset per step) ----
 * Host memory by default; ll_arena_init_with takes the block allocator of a
 * backend (device memory), the descriptors staying on the host.  used_act
 * counts the bytes allocated in the activation dtype (ll_arena_alloc_act).
 * (The bf16 memory report is a measurement: lltrain --dry-run runs the step
 * with bf16 activations, src/train/dryrun.c.) */
typedef struct ll_arena_block ll_arena_block;
typedef struct {
    ll_arena_block *top;
    ll_arena_block *spare;    /* chained blocks a release gave back, reused before allocating */
    size_t cap, used, peak;   /* bytes: all blocks, in use now, most in use at once */
    size_t used_act;
    size_t grown;             /* blocks chained because a step outgrew the arena */
    void *(*mem_alloc)(void *ctx, size_t bytes);
    void (*mem_free)(void *ctx, void *p);
    void *ctx;
} ll_arena;
void ll_arena_init(ll_arena *a, size_t cap);
void ll_arena_init_with(ll_arena *a, size_t cap, void *(*mem_alloc)(void *ctx, size_t bytes),
                        void (*mem_free)(void *ctx, void *p), void *ctx);
void *ll_arena_alloc(ll_arena *a, size_t bytes);     /* 64-byte aligned, not zeroed */
void *ll_arena_alloc_act(ll_arena *a, size_t bytes); /* the same, counted as activation-dtype bytes */
void ll_arena_reset(ll_arena *a);
/* Make the (reset) arena one block of at least `bytes`, allocated now. */
void ll_arena_reserve(ll_arena *a, size_t bytes);
/* Stack-like use inside a step: everything allocated after a mark is released. */
typedef struct {
    ll_arena_block *block;
    size_t used, total, act;
} ll_arena_mark;
ll_arena_mark ll_arena_get_mark(const ll_arena *a);
void ll_arena_release(ll_arena *a, ll_arena_mark mk);
void ll_arena_free(ll_arena *a);

/* ---- atomic output ----------------------------------------------------------
 * Write to "<path>.tmp.<pid>", fsync, rename over <path>, fsync the directory.
 * On failure (or ll_atomic_abort) the temporary is removed and <path> is untouched.
 * Only a regular file or a missing path is replaced that way: a FIFO, character
 * device, socket or /dev/stdout-like alias is written directly (tmp == NULL;
 * commit only flushes), a symlink to a regular file has its target replaced
 * atomically (path is then the resolved target), and a dangling symlink, a
 * directory or any other kind of file is refused. */
typedef struct {
    FILE *f;
    char *path, *tmp;
} ll_atomic_file;
int ll_atomic_open(ll_atomic_file *af, const char *path);   /* -1 + errbuf on failure */
int ll_atomic_commit(ll_atomic_file *af);                    /* -1 + errbuf on failure */
void ll_atomic_abort(ll_atomic_file *af);

/* SIGINT, SIGTERM and SIGHUP (where not ignored) remove the atomic writer's live
 * temporaries, then kill the process as before.  ll_set_progname calls it;
 * lltrain's own handlers (graceful stop) replace it while training. */
void ll_remove_temps_on_signals(void);
/* More for those signals to remove (on 1) or to leave again (on 0): a file (data.dir's lock), and
 * one flat directory (llprep's staging directory, files only). */
void ll_signal_cleanup_file(const char *path, int on);
void ll_signal_cleanup_dir(const char *dir, int on);

/* Read a whole file; returns NULL + errbuf on failure.  Adds a NUL terminator. */
char *ll_read_file(const char *path, size_t *len);
/* The same, refusing (NULL + errbuf) a file of more than max bytes (config files). */
char *ll_read_file_max(const char *path, size_t max, size_t *len);
/* `to` becomes a copy of the file `from`, written atomically; -1 + errbuf on failure. */
int ll_copy_file(const char *from, const char *to);

/* Mapped input files (src/core/mapguard.c): a SIGBUS inside a registered
 * mapping (the file shrank while mapped) prints an error naming the file and
 * exits 1.  Register after mmap, unregister before munmap. */
void ll_map_register(const void *addr, size_t len, const char *path);
void ll_map_unregister(const void *addr);
void ll_map_set_tool(const char *name); /* the message's prefix (ll_set_progname sets it) */

/* ---- checksums ---- */
uint64_t ll_fnv1a64(const void *data, size_t n, uint64_t h);
#define LL_FNV_INIT 0xcbf29ce484222325ULL

/* ---- threads ---- */
void ll_set_threads(int n); /* OpenMP + OpenBLAS */
/* The thread count when none is configured: OMP_NUM_THREADS when it is set to a
 * positive number (as OpenMP programs and PyTorch honour it), else every online core. */
int ll_default_threads(void);
int ll_get_threads(void);
/* Threads an op started here may use: 1 inside a worker (a parallel region
 * that cannot nest), else ll_get_threads(). */
int ll_threads_here(void);
/* Worker teams (decoding batch workers, training slices): while one runs,
 * parallel regions nested inside it use a single thread.  Returns the
 * previous setting for ll_workers_end. */
int ll_workers_begin(void);
void ll_workers_end(int saved);
int ll_worker_id(void); /* this thread's number in the current team (0 outside) */
/* Call first in main(): re-executes once with OPENBLAS_CORETYPE / OMP_WAIT_POLICY
 * fixed when the environment leaves them at slow defaults (src/core/threads.c). */
void ll_cpu_setup(char **argv);
const char *ll_blas_core(void);
/* ll's own ISA-specific CPU kernels (src/core/cpu_isa.c): 1 when this process
 * takes the AVX-512 paths (the CPU has AVX-512F and LL_CPU_KERNELS is not
 * `generic`), chosen once before main(); 0 elsewhere, aarch64 included. */
extern int ll_cpu_avx512;
/* 1 when the kernels that have an AVX2 + FMA form take it: the CPU has AVX2 and FMA, and AVX-512 is
 * not taken (no AVX-512F, or LL_CPU_KERNELS=avx2); chosen once before main(), tests may flip it. */
extern int ll_cpu_avx2;
const char *ll_cpu_kernels(void); /* "avx512", "avx2 ..." or "generic ...", for logs */
/* The int8 matrix kernels (lldecode --precision int8, src/backend/cpu/cpu_linear_int8.c): AVX-512
 * VNNI, else AVX2, else portable C (LL_CPU_KERNELS=generic: C), chosen so before main(); the
 * three give the same bits, and tests may lower it to compare them. */
enum { LL_INT8_GENERIC = 0, LL_INT8_AVX2 = 1, LL_INT8_AVX512VNNI = 2 };
extern int ll_cpu_int8_isa;
const char *ll_cpu_int8_kernels(void); /* "avx512vnni", "avx2" or "generic" */

#ifdef __cplusplus
}
#endif
#endif
