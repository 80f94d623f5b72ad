/* Mapped input files that shrink while mapped (a token file truncated in place
 * during training) make the next read a SIGBUS.  The handler finds the mapping
 * the faulting address lies in and says which file it was, instead of a bare
 * "Bus error". */
#define _GNU_SOURCE
#include "ll/core.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

enum { MAX_MAPS = 512, PATH_CAP = 512 };
static struct {
    const char *volatile addr;
    volatile size_t len;
    char path[PATH_CAP];
} g_maps[MAX_MAPS];
static const char *g_tool = "ll";

static void say(const char *s) {
    if (write(2, s, strlen(s)) < 0) return; /* nothing else to do in a signal handler */
}

static void on_sigbus(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    const char *a = si ? (const char *)si->si_addr : NULL;
    for (int i = 0; i < MAX_MAPS; i++) {
        const char *b = g_maps[i].addr;
        if (b && a >= b && a < b + g_maps[i].len) {
            say(g_tool);
            say(": error: ");
            say(g_maps[i].path);
            say(": the file became shorter while it was being read (truncated or rewritten in place?); "
                "stopped (bus error)\n");
            _exit(1);
        }
    }
    signal(sig, SIG_DFL); /* not one of ours: the default action */
    raise(sig);
}

void ll_map_register(const void *addr, size_t len, const char *path) {
    static int installed;
    if (!installed++) {
        static struct sigaction sa; /* static, not memset: -march=native's AVX-512 stores stop valgrind */
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, NULL);
    }
    for (int i = 0; i < MAX_MAPS; i++)
        if (!g_maps[i].addr) {
            snprintf(g_maps[i].path, PATH_CAP, "%s", path);
            g_maps[i].len = len;
            g_maps[i].addr = addr; /* last: the handler reads a complete entry */
            return;
        }
}

void ll_map_unregister(const void *addr) {
    for (int i = 0; i < MAX_MAPS; i++)
        if (g_maps[i].addr == addr) g_maps[i].addr = NULL;
}

void ll_map_set_tool(const char *name) { g_tool = name; }
