/* One run per checkpoint.save_dir: an fcntl write lock on <save_dir>/.lltrain.lock,
 * held for the process's life.  The kernel drops it when the process dies, so a
 * crash never leaves a stale lock.  The file records the holder's PID: a second
 * lltrain names it, and the next holder learns whose temporaries a killed run
 * may have left (the clean-up removes only those, never a user's file). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ll/checkpoint.h"
#include "ll/train.h"

int ll_run_lock(const char *save_dir, long *prev_pid, int *removed) {
    char path[LL_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/.lltrain.lock", save_dir);
    *prev_pid = 0;
    *removed = 0;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return ll_fail("%s: cannot create the run lock: %s", path, strerror(errno));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_SETLK, &fl) != 0) {
        int e = errno;
        if (e != EAGAIN && e != EACCES) {
            close(fd);
            return ll_fail("%s: cannot lock: %s", path, strerror(e));
        }
        struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
        long pid = fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK ? (long)who.l_pid : 0;
        close(fd);
        if (pid > 0)
            return ll_fail("%s: another lltrain (PID %ld) is running with this checkpoint.save_dir; wait for it to "
                           "finish, stop it, or choose another directory", save_dir, pid);
        return ll_fail("%s: another lltrain is running with this checkpoint.save_dir (its lock %s is held)", save_dir,
                       path);
    }
    char old[64] = "";
    ssize_t n = pread(fd, old, sizeof old - 1, 0);
    if (n > 0) {
        old[n] = 0;
        long p;
        if (sscanf(old, "lltrain pid %ld", &p) == 1 && p > 0) *prev_pid = p;
    }
    /* before our PID replaces its: killed here, the next run still knows whose they are */
    if ((*removed = ll_ckpt_clean_stale_temps(save_dir, *prev_pid)) < 0) {
        close(fd);
        return -1;
    }
    char rec[64];
    int len = snprintf(rec, sizeof rec, "lltrain pid %ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, rec, (size_t)len, 0) != len) {
        int e = errno;
        close(fd);
        return ll_fail("%s: cannot write the run lock: %s", path, strerror(e));
    }
    return fd; /* kept open until exit: closing any descriptor of the file would drop the lock */
}
