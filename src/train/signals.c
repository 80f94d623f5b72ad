/* Graceful stop on SIGINT/SIGTERM/SIGHUP (signals.h), moved out of trainer.c. */
#include <string.h>
#include <unistd.h>

#include "signals.h"

/* ---- interruption: SIGINT/SIGTERM/SIGHUP finish the update, checkpoint, exit 0 ---- */
static volatile sig_atomic_t g_signal;
static volatile sig_atomic_t g_ranks = 1; /* the job's world size, for the message */

static void on_signal(int sig) {
    static const char again[] = "\nlltrain: second signal: exiting now, without a checkpoint\n";
    static const char first[] = "\nlltrain: signal received: finishing this update and writing a checkpoint "
                                "(send it again to exit at once)\n";
    ssize_t w;
    if (g_signal) {
        w = write(STDERR_FILENO, again, sizeof again - 1);
        _exit(128 + sig);
    }
    g_signal = sig;
    if (g_ranks > 1) { /* mpirun also sends SIGTERM when another rank has died: its message follows */
        static const char ranks[] = "\nlltrain: signal received: all ranks finish this update and write a checkpoint "
                                    "(if another rank died, mpirun stops this one too)\n";
        w = write(STDERR_FILENO, ranks, sizeof ranks - 1);
        return;
    }
    w = write(STDERR_FILENO, first, sizeof first - 1);
    (void)w;
}

static const int k_signals[3] = {SIGINT, SIGTERM, SIGHUP};

void ll_train_signals_catch(ll_train_signals *s, int ranks) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    g_signal = 0;
    g_ranks = ranks;
    for (int i = 0; i < 3; i++) { /* an ignored one stays ignored: nohup lltrain survives the hangup */
        sigaction(k_signals[i], NULL, &s->old[i]);
        if (s->old[i].sa_handler != SIG_IGN) sigaction(k_signals[i], &sa, NULL);
    }
}

void ll_train_signals_restore(const ll_train_signals *s) {
    /* After a stop was asked for, the handler stays: a second signal during
     * teardown must still exit 130 with its message, not die by the default
     * action (the kill harness caught that race). */
    if (g_signal) return;
    for (int i = 0; i < 3; i++) sigaction(k_signals[i], &s->old[i], NULL);
}

int ll_train_signal(void) { return g_signal; }

void ll_train_signal_raise(int sig) {
    if (!g_signal) g_signal = sig;
}

