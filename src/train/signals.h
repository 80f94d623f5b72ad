/* SIGINT/SIGTERM/SIGHUP during training (src/train/signals.c): the first
 * finishes the current update and writes a checkpoint, a second exits at
 * once.  With several ranks the trainer sums the flag over ranks every
 * update, so all ranks stop after the same one. */
#ifndef LL_TRAIN_SIGNALS_H
#define LL_TRAIN_SIGNALS_H

#include <signal.h>

typedef struct {
    struct sigaction old[3];
} ll_train_signals;

/* Install the handlers (ranks: the job's world size, for the message). */
void ll_train_signals_catch(ll_train_signals *s, int ranks);
void ll_train_signals_restore(const ll_train_signals *s);
/* The first signal received since catch, 0 if none. */
int ll_train_signal(void);
/* Another rank's signal: as if received here (no message). */
void ll_train_signal_raise(int sig);

#endif
