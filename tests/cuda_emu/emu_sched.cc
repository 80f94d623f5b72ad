/* Kernel execution of the CUDA emulation: one fiber per CUDA thread, one
 * block at a time.
 *
 * Each thread of the running block is a fiber on its own stack (mmap'd, a
 * PROT_NONE guard page below it, reused across blocks and launches).  A fiber
 * runs until it reaches a rendezvous point, then the scheduler picks the next
 * runnable one by the schedule LL_CUDA_EMU_SCHEDULE names:
 *   rr (default)  thread order, each from where the last stopped;
 *   reverse       the same, highest thread first;
 *   greedy        always the lowest-numbered runnable thread (one warp runs
 *                 ahead as far as it can);
 *   random[:SEED] a seeded pseudo-random runnable thread.
 * So code that is right only for one interleaving (a missing barrier) gives
 * different values under different schedules; TSan builds see it directly.
 *
 * Rendezvous points, with PTX semantics:
 *   __syncthreads  completes when every non-exited thread of the block waits
 *                  at it; threads waiting at different source lines are a
 *                  divergent barrier (reported);
 *   shuffles       (and __syncwarp) complete when every lane the mask names has
 *                  arrived with the same mask at the same line (__syncwarp also
 *                  orders the lanes' memory accesses, as bar.warp.sync; a
 *                  shuffle does not); a mask naming
 *                  the caller's absence, an exited or absent lane, or reading
 *                  a lane outside the mask is reported;
 *   nothing runnable while threads wait: a deadlock, reported with what each
 *                  waits for.
 * Reports name the kernel, its launch site, the block, the thread and the line.
 *
 * Memory a block sees as a GPU gives it: static __shared__ arrays (tagged
 * ll_emu_shared, found in the program's symbol table) and the dynamic area
 * (exactly the launch's size, allocated per launch so ASan sees one element
 * too far) are filled with 0xFF bytes (NaN) before every block.  Kernels built with fast math run with the CPU's
 * FTZ/DAZ bits set. */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#else
#include <ucontext.h>
#endif

#include "emu_internal.h"

#ifdef LL_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef LL_EMU_TSAN
#include <sanitizer/tsan_interface.h>
#endif


namespace ll_emu {

thread_ctx *cur;
block_ctx blk;

namespace {

enum state { RUNNABLE, AT_BARRIER, AT_WARP, EXITED };

struct fiber {
    thread_ctx ctx;
    int st;
    const char *wfile; /* where it waits */
    int wline;
    char *stack_lo;
    size_t stack_size;
#if defined(__x86_64__)
    void *sp;
#else
    ucontext_t uc;
#endif
#ifdef LL_EMU_TSAN
    void *tsan;
#endif
#ifdef LL_EMU_ASAN
    void *fake;
#endif
};

struct warp_state {
    unsigned present; /* lanes that exist in this block */
    unsigned exited;  /* lanes that have returned */
    unsigned pending; /* lanes arrived at the current exchange */
    unsigned mask;
    const char *what, *file;
    int line;
    uint64_t val[32], res[32];
    int src[32];
    int gen; /* completed __syncwarp exchanges, mod 2 (TSan's sync object) */
};

/* never destroyed: fibers and stacks live until the process ends (reachable for LeakSanitizer) */
std::vector<fiber *> &g_fibers = *new std::vector<fiber *>();
std::vector<warp_state> &g_warps = *new std::vector<warp_state>();
int g_n, g_live, g_bar_count;
const char *g_bar_file;
int g_bar_line;
int g_last = -1, g_hint;
const launch_desc *g_launch;
const std::function<void()> *g_body;
fiber *g_cur_fiber;
int g_policy = -1; /* 0 rr, 1 reverse, 2 greedy, 3 random */
uint64_t g_rng = 0x9E3779B97F4A7C15ull;
#if defined(__x86_64__)
void *g_sched_sp;
#else
ucontext_t g_sched_uc;
#endif
#ifdef LL_EMU_TSAN
void *g_sched_tsan;
char g_tsan_start, g_tsan_end, g_tsan_bar[2];
char g_tsan_warp[32][2]; /* __syncwarp's memory ordering, per warp of the block */
int g_bar_gen;
#endif
#ifdef LL_EMU_ASAN
void *g_sched_fake;
const void *g_sched_lo;
size_t g_sched_size;
#endif

size_t stack_bytes() {
    const char *e = env("LL_CUDA_EMU_STACK_KB");
#if defined(LL_EMU_ASAN) || defined(LL_EMU_TSAN)
    size_t kb = 512;
#else
    size_t kb = 128;
#endif
    if (e && atoi(e) > 0) kb = (size_t)atoi(e);
    return kb << 10;
}

void pick_policy() {
    const char *s = env("LL_CUDA_EMU_SCHEDULE");
    g_policy = 0;
    if (!s || !*s || !strcmp(s, "rr")) return;
    if (!strcmp(s, "reverse")) g_policy = 1;
    else if (!strcmp(s, "greedy")) g_policy = 2;
    else if (!strncmp(s, "random", 6)) {
        g_policy = 3;
        if (s[6] == ':') g_rng ^= strtoull(s + 7, NULL, 10) * 0xBF58476D1CE4E5B9ull;
    } else
        fail("LL_CUDA_EMU_SCHEDULE=%s: rr, reverse, greedy or random[:SEED]", s);
}

} // namespace

/* ---- reports ------------------------------------------------------------------ */

static void where(char *buf, size_t n) {
    if (!g_launch) {
        snprintf(buf, n, "(host)");
        return;
    }
    int k = snprintf(buf, n, "kernel %s (launched at %s:%d, grid (%u,%u,%u) x block (%u,%u,%u)), block (%u,%u,%u)",
                     g_launch->name, g_launch->file, g_launch->line, g_launch->grid.x, g_launch->grid.y,
                     g_launch->grid.z, g_launch->block.x, g_launch->block.y, g_launch->block.z, blk.bid.x, blk.bid.y,
                     blk.bid.z);
    if (g_cur_fiber && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, ", thread (%u,%u,%u)", g_cur_fiber->ctx.tid.x, g_cur_fiber->ctx.tid.y,
                 g_cur_fiber->ctx.tid.z);
}

void fail(const char *fmt, ...) {
    char w[512], msg[1024];
    where(w, sizeof w);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda-emu: ERROR: %s\ncuda-emu:   in %s\n", msg, w);
    fflush(stderr);
    fflush(stdout);
    _exit(1);
}

/* ---- context switches ------------------------------------------------------------ */

#if defined(__x86_64__)
/* ll_emu_switch(save, to): push the callee-saved registers, save rsp in *save,
 * load `to`, pop and return into the other context. */
extern "C" void ll_emu_switch(void **save, void *to);
__asm__(".text\n"
        ".globl ll_emu_switch\n"
        ".type ll_emu_switch,@function\n"
        "ll_emu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size ll_emu_switch, .-ll_emu_switch\n");
#endif

static void fiber_main();
static int pick();

/* ---- switching ------------------------------------------------------------------------
 * A fiber that waits hands over to the next runnable one directly (one stack
 * switch per rendezvous, not two through the scheduler); the scheduler's own
 * stack is entered only at the block's start and end (or a deadlock).  NULL
 * names the scheduler.  g_from_sched: the switch being made comes from the
 * scheduler, so the fiber that resumes learns the scheduler's stack (ASan;
 * blocks may run on the host thread or the stream worker). */
static fiber *g_next; /* the fiber being switched to (a fresh one reads it in fiber_main) */
#ifdef LL_EMU_ASAN
static bool g_from_sched;
#endif

/* where a fiber (or the scheduler) continues after a switch to it */
static void arrived(fiber *self) {
#ifdef LL_EMU_ASAN
    const void *lo = NULL;
    size_t sz = 0;
    __sanitizer_finish_switch_fiber(self ? self->fake : g_sched_fake, &lo, &sz);
    if (g_from_sched) {
        g_sched_lo = lo;
        g_sched_size = sz;
        g_from_sched = false;
    }
#endif
    g_cur_fiber = self;
    cur = self ? &self->ctx : NULL;
}

/* from `from` to `to`; returns when something switches back to `from`
 * (never when it is exiting) */
static void go(fiber *from, fiber *to, int exiting) {
    g_next = to;
#ifdef LL_EMU_ASAN
    g_from_sched = from == NULL;
    __sanitizer_start_switch_fiber(exiting ? NULL : from ? &from->fake : &g_sched_fake, to ? to->stack_lo : g_sched_lo,
                                   to ? to->stack_size : g_sched_size);
#else
    (void)exiting;
#endif
#ifdef LL_EMU_TSAN
    __tsan_switch_to_fiber(to ? to->tsan : g_sched_tsan, __tsan_switch_to_fiber_no_sync);
#endif
#if defined(__x86_64__)
    ll_emu_switch(from ? &from->sp : &g_sched_sp, to ? to->sp : g_sched_sp);
#else
    swapcontext(from ? &from->uc : &g_sched_uc, to ? &to->uc : &g_sched_uc);
#endif
    arrived(from);
}

/* The running fiber f stops (waits, or exits): on to the next runnable thread
 * the schedule picks, or back to the scheduler when none is (the block is done,
 * or deadlocked). */
static void yield_from(fiber *f, int exiting) {
    const int i = pick();
    if (i < 0) {
        go(f, NULL, exiting);
        return;
    }
    g_last = i;
    go(f, g_fibers[i], exiting);
}

/* Point a fiber at the start of fiber_main on its empty stack. */
static void fiber_reset(fiber *f) {
#if defined(__x86_64__)
    uintptr_t top = ((uintptr_t)(f->stack_lo + f->stack_size)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL;                 /* fiber_main's return address: never used */
    *--sp = (void *)&fiber_main;  /* ll_emu_switch returns here */
    for (int i = 0; i < 6; i++) *--sp = NULL; /* rbp rbx r12-r15 */
    f->sp = sp;
#else
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack_lo;
    f->uc.uc_stack.ss_size = f->stack_size;
    f->uc.uc_link = NULL;
    makecontext(&f->uc, fiber_main, 0);
#endif
}

static fiber *fiber_new() {
    fiber *f = new fiber();
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), sz = stack_bytes();
    char *m = (char *)mmap(NULL, sz + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) fail("cannot map a %zu-byte fiber stack: %s", sz, strerror(errno));
    if (mprotect(m, page, PROT_NONE) != 0) fail("cannot protect a fiber stack's guard page: %s", strerror(errno));
    f->stack_lo = m + page;
    f->stack_size = sz;
#ifdef LL_EMU_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
    return f;
}

/* ---- the rendezvous points ----------------------------------------------------------- */

static void wake_barrier() {
    for (int i = 0; i < g_n; i++)
        if (g_fibers[i]->st == AT_BARRIER) g_fibers[i]->st = RUNNABLE;
    g_bar_count = 0;
    g_bar_file = NULL;
    g_hint = 0;
#ifdef LL_EMU_TSAN
    g_bar_gen ^= 1;
#endif
}

void syncthreads(const char *file, int line) {
    fiber *f = g_cur_fiber;
    if (!f) fail("__syncthreads outside a kernel");
    if (g_bar_count && (g_bar_line != line || (g_bar_file != file && strcmp(g_bar_file, file))))
        fail("divergent __syncthreads: this thread waits at %s:%d while %d thread(s) wait at %s:%d", file, line,
             g_bar_count, g_bar_file, g_bar_line);
#ifdef LL_EMU_TSAN
    const int gen = g_bar_gen;
    __tsan_release(&g_tsan_bar[gen]); /* the barrier orders every write before it ... */
#endif
    if (!g_bar_count) {
        g_bar_file = file;
        g_bar_line = line;
    }
    g_bar_count++;
    f->wfile = file;
    f->wline = line;
    if (g_bar_count == g_live) {
        wake_barrier();
    } else {
        f->st = AT_BARRIER;
        yield_from(f, 0);
    }
#ifdef LL_EMU_TSAN
    __tsan_acquire(&g_tsan_bar[gen]); /* ... before every access after it */
#endif
}

uint64_t warp_exchange(unsigned mask, uint64_t val, int src, const char *what, const char *file, int line) {
    fiber *f = g_cur_fiber;
    if (!f) fail("%s outside a kernel", what);
    const int lane = f->ctx.lane, w = f->ctx.warp;
    if (!(mask >> lane & 1))
        fail("%s at %s:%d with mask 0x%08x, which does not name the calling lane %d", what, file, line, mask, lane);
    warp_state &ws = g_warps[w];
    if (mask & ~ws.present)
        fail("%s at %s:%d: mask 0x%08x names lane %d, absent (the block has %d threads)", what, file, line, mask,
             __builtin_ctz(mask & ~ws.present), g_n);
    if (mask & ws.exited)
        fail("%s at %s:%d: mask 0x%08x names lane %d, which has exited", what, file, line, mask,
             __builtin_ctz(mask & ws.exited));
    if (ws.pending && (ws.mask != mask || ws.line != line || (ws.file != file && strcmp(ws.file, file))))
        fail("divergent warp operations: lane %d reaches %s at %s:%d (mask 0x%08x) while lanes 0x%08x wait at %s at "
             "%s:%d (mask 0x%08x)",
             lane, what, file, line, mask, ws.pending, ws.what, ws.file, ws.line, ws.mask);
    if (!ws.pending) {
        ws.mask = mask;
        ws.what = what;
        ws.file = file;
        ws.line = line;
    }
#ifdef LL_EMU_TSAN
    /* __syncwarp orders memory like a barrier of the named lanes (a shuffle does not) */
    const bool memord = !strcmp(what, "__syncwarp");
    const int wgen = ws.gen;
    if (memord) __tsan_release(&g_tsan_warp[w][wgen]);
#endif
    ws.val[lane] = val;
    ws.src[lane] = src;
    ws.pending |= 1u << lane;
    f->wfile = file;
    f->wline = line;
    if (ws.pending == mask) { /* the last lane: complete the exchange for all */
        for (unsigned mm = mask; mm; mm &= mm - 1) {
            const int l = __builtin_ctz(mm);
            const int s = ws.src[l];
            if (s < 0 || s > 31 || !(mask >> s & 1))
                fail("%s at %s:%d: lane %d reads lane %d, outside the mask 0x%08x", what, file, line, l, s, mask);
            ws.res[l] = ws.val[s];
            fiber *o = g_fibers[w * 32 + l];
            if (o->st == AT_WARP) o->st = RUNNABLE;
        }
        ws.pending = 0;
        ws.gen ^= 1;
        if (w * 32 < g_hint) g_hint = w * 32;
    } else {
        f->st = AT_WARP;
        yield_from(f, 0);
    }
#ifdef LL_EMU_TSAN
    if (memord) __tsan_acquire(&g_tsan_warp[w][wgen]);
#endif
    return ws.res[lane];
}

/* ---- running a block ---------------------------------------------------------------- */

static void fiber_main() {
    fiber *f = g_next;
#ifdef LL_EMU_ASAN
    f->fake = NULL; /* a fresh start: no fake stack of an earlier run to restore */
#endif
    arrived(f);
#ifdef LL_EMU_TSAN
    __tsan_acquire(&g_tsan_start);
#endif
    (*g_body)();
#ifdef LL_EMU_TSAN
    __tsan_release(&g_tsan_end);
#endif
    if (g_launch->pdl && !f->ctx.pdl_waited)
        fail("launched with programmatic dependent launch (LL_CUDA_PDL), but the thread never waited for the grids "
             "before it: a kernel of kernels/ must begin with LL_PDL_ENTER()");
    /* exit: lanes waiting for this one in an exchange can never complete */
    warp_state &ws = g_warps[f->ctx.warp];
    if (ws.pending && (ws.mask >> f->ctx.lane & 1))
        fail("thread exits while lanes 0x%08x wait for it in %s at %s:%d (mask 0x%08x)", ws.pending, ws.what, ws.file,
             ws.line, ws.mask);
    f->st = EXITED;
    ws.exited |= 1u << f->ctx.lane;
    g_live--;
    if (g_bar_count && g_bar_count == g_live) wake_barrier();
    yield_from(f, 1);
    fail("an exited fiber was resumed");
}

static int pick() {
    const int n = g_n;
    switch (g_policy) {
    case 1: { /* from the thread before the last one, downwards, wrapping once */
        const int l = g_last < 0 ? n : g_last;
        for (int i = l - 1; i >= 0; i--)
            if (g_fibers[i]->st == RUNNABLE) return i;
        for (int i = n - 1; i >= l && i >= 0; i--)
            if (g_fibers[i]->st == RUNNABLE) return i;
        return -1;
    }
    case 2:
        for (int i = g_hint; i < n; i++)
            if (g_fibers[i]->st == RUNNABLE) return g_hint = i;
        for (int i = 0; i < g_hint; i++)
            if (g_fibers[i]->st == RUNNABLE) return g_hint = i;
        return -1;
    case 3: {
        g_rng ^= g_rng << 13;
        g_rng ^= g_rng >> 7;
        g_rng ^= g_rng << 17;
        const int s = (int)(g_rng % (uint64_t)n);
        for (int k = 0; k < n; k++)
            if (g_fibers[(s + k) % n]->st == RUNNABLE) return (s + k) % n;
        return -1;
    }
    default: /* from the thread after the last one, wrapping once (no division: this is the hot path) */
        for (int i = g_last + 1; i < n; i++)
            if (g_fibers[i]->st == RUNNABLE) return i;
        for (int i = 0; i <= g_last && i < n; i++)
            if (g_fibers[i]->st == RUNNABLE) return i;
        return -1;
    }
}

[[noreturn]] static void deadlock() {
    char buf[2048];
    size_t k = 0;
    int shown = 0;
    for (int i = 0; i < g_n && shown < 8; i++) {
        fiber *f = g_fibers[i];
        if (f->st == EXITED) continue;
        const warp_state &ws = g_warps[f->ctx.warp];
        int m = snprintf(buf + k, sizeof buf - k, "\ncuda-emu:   thread %d (warp %d lane %d) waits at %s at %s:%d", i,
                         f->ctx.warp, f->ctx.lane,
                         f->st == AT_BARRIER ? "__syncthreads" : ws.pending ? ws.what : "a warp operation", f->wfile,
                         f->wline);
        if (f->st == AT_WARP && m > 0 && (size_t)m < sizeof buf - k) {
            k += (size_t)m;
            m = snprintf(buf + k, sizeof buf - k, " (mask 0x%08x, arrived 0x%08x)", ws.mask, ws.pending);
        }
        if (m > 0 && (size_t)m < sizeof buf - k) k += (size_t)m;
        shown++;
    }
    fail("deadlock: %d thread(s) wait and none can run (%d at a barrier); e.g.%s", g_live, g_bar_count, buf);
}

static void run_block() {
    g_live = g_n;
    g_bar_count = 0;
    g_last = -1;
    g_hint = 0;
    for (int i = 0; i < g_n; i++) {
        fiber *f = g_fibers[i];
        f->st = RUNNABLE;
        f->ctx.pdl_waited = 0;
        fiber_reset(f);
    }
    for (size_t w = 0; w < g_warps.size(); w++) {
        const int lanes = g_n - (int)w * 32 >= 32 ? 32 : g_n - (int)w * 32;
        g_warps[w].present = lanes == 32 ? ~0u : (1u << lanes) - 1;
        g_warps[w].exited = 0;
        g_warps[w].pending = 0;
    }
    while (g_live > 0) {
        const int i = pick();
        if (i < 0) deadlock();
        g_last = i;
        go(NULL, g_fibers[i], 0);
    }
}

/* The static __shared__ arrays: emu_device.h tags each with abi_tag
 * "ll_emu_shared", which shows in its mangled name (B13ll_emu_shared); their
 * addresses and exact sizes come from the program's ELF symbol table (a
 * linker section would be simpler, but g++ ignores section attributes in
 * template instances; the tag survives, and as ordinary globals the arrays
 * get ASan's redzones).  The kernels are linked into the program itself
 * (ll_cuda is a static library). */
struct shared_range {
    char *p;
    size_t n;
};
static std::vector<shared_range> g_shared;

static int main_bias(struct dl_phdr_info *info, size_t, void *out) {
    *(uintptr_t *)out = (uintptr_t)info->dlpi_addr; /* the first object is the program */
    return 1;
}

static void find_shared() {
    uintptr_t bias = 0;
    dl_iterate_phdr(main_bias, &bias);
    const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) fail("cannot read /proc/self/exe for the static __shared__ arrays: %s", strerror(errno));
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) fail("cannot map /proc/self/exe: %s", strerror(errno));
    const char *base = (const char *)m;
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0) fail("/proc/self/exe is not an ELF file");
    const ElfW(Shdr) *sh = (const ElfW(Shdr) *)(base + eh->e_shoff);
    int have_symtab = 0;
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_SYMTAB) continue;
        have_symtab = 1;
        const ElfW(Sym) *sym = (const ElfW(Sym) *)(base + sh[i].sh_offset);
        const char *str = base + sh[sh[i].sh_link].sh_offset;
        const size_t ns = sh[i].sh_size / sizeof *sym;
        for (size_t j = 0; j < ns; j++)
            if (ELF64_ST_TYPE(sym[j].st_info) == STT_OBJECT && sym[j].st_size &&
                strstr(str + sym[j].st_name, "B13ll_emu_shared"))
                g_shared.push_back({(char *)(bias + sym[j].st_value), (size_t)sym[j].st_size});
    }
    munmap(m, (size_t)st.st_size);
    if (!have_symtab) fail("the program has no symbol table (stripped?): its static __shared__ arrays cannot be found");
    if (env("LL_CUDA_EMU_VERBOSE")) {
        size_t b = 0;
        for (const shared_range &r : g_shared) b += r.n;
        fprintf(stderr, "cuda-emu: %zu static __shared__ arrays, %zu bytes, refilled with NaN bytes for every block\n",
                g_shared.size(), b);
    }
}

void check_shared(const void *p, size_t bytes, const char *what, const char *file, int line) {
    const char *a = (const char *)p, *e = a + bytes;
    const char *d = (const char *)blk.dyn;
    if (g_launch && d && a >= d && e <= d + g_launch->smem) return;
    for (const shared_range &r : g_shared)
        if (a >= r.p && e <= r.p + r.n) return;
    fail("%s at %s:%d: [%p, +%zu bytes) is not in the block's shared memory (dynamic %p, +%zu bytes, or a static "
         "__shared__ array): a GPU's .shared load would read something else",
         what, file, line, p, bytes, blk.dyn, g_launch ? g_launch->smem : (size_t)0);
}

void run_grid(const launch_desc &d, const std::function<void()> &body) {
    static std::once_flag shared_once;
    std::call_once(shared_once, find_shared);
    if (g_policy < 0) pick_policy();
    const int n = (int)(d.block.x * d.block.y * d.block.z);
    while ((int)g_fibers.size() < n) g_fibers.push_back(fiber_new());
    g_warps.assign((size_t)(n + 31) / 32, warp_state());
    for (int i = 0; i < n; i++) {
        thread_ctx &c = g_fibers[i]->ctx;
        c.tid.x = (unsigned)i % d.block.x;
        c.tid.y = (unsigned)i / d.block.x % d.block.y;
        c.tid.z = (unsigned)i / (d.block.x * d.block.y);
        c.lin = i;
        c.lane = i & 31;
        c.warp = i >> 5;
    }
    g_n = n;
    g_launch = &d;
    g_body = &body;
#ifdef LL_EMU_TSAN
    if (!g_sched_tsan) g_sched_tsan = __tsan_get_current_fiber();
#endif
    /* dynamic shared memory: exactly d.smem bytes, so one element past is outside */
    void *dyn = NULL;
    if (posix_memalign(&dyn, 16, d.smem ? d.smem : 1) != 0) fail("cannot allocate %zu bytes of shared memory", d.smem);
#if defined(__x86_64__)
    const unsigned mxcsr = _mm_getcsr();
    const char *fz = env("LL_CUDA_EMU_FTZ"); /* "all": as if every file were built with -ftz=true */
    if (d.ftz || (fz && !strcmp(fz, "all"))) _mm_setcsr(mxcsr | 0x8040); /* FTZ | DAZ, as --use_fast_math's .ftz */
    else _mm_setcsr(mxcsr & ~0x8040u);
#endif
    blk.bdim = d.block;
    blk.gdim = d.grid;
    blk.dyn = dyn;
    for (unsigned z = 0; z < d.grid.z; z++)
        for (unsigned y = 0; y < d.grid.y; y++)
            for (unsigned x = 0; x < d.grid.x; x++) {
#ifdef LL_EMU_TSAN
                /* blocks are ordered here (the shared memory is reused); only the
                 * barriers order threads inside a block */
                __tsan_acquire(&g_tsan_end);
#endif
                for (const shared_range &r : g_shared) memset(r.p, 0xFF, r.n);
                if (d.smem) memset(dyn, 0xFF, d.smem);
                blk.bid.x = x;
                blk.bid.y = y;
                blk.bid.z = z;
#ifdef LL_EMU_TSAN
                __tsan_release(&g_tsan_start);
#endif
                run_block();
            }
#ifdef LL_EMU_TSAN
    __tsan_acquire(&g_tsan_end);
#endif
#if defined(__x86_64__)
    _mm_setcsr(mxcsr);
#endif
    free(dyn);
    g_launch = NULL;
    g_body = NULL;
}

} // namespace ll_emu
