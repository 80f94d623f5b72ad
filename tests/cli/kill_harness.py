#!/usr/bin/env python3
"""Kill harness for lltrain (issue 13; docs/reliability.md, "Kills survived").

A tiny CPU run (configs/tiny_test.cfg, a checkpoint every 3 updates) is killed
with SIGKILL at random moments -- half of them while a checkpoint or metrics
temporary is being written -- and resumed each time.  After every kill each
*.llm on disk must load (checksum-verified by scripts/llmodel.py); at the end
checkpoint_last, checkpoint_best, the numbered checkpoints kept and the
metrics records must equal an uninterrupted run's byte for byte.  Then
SIGINT/SIGTERM/SIGHUP stop gracefully (exit 0, the printed command resumes to
the same bytes), a second signal exits at once, and a file-size limit during a
checkpoint (disk full) leaves the previous one intact.

    kill_harness.py BINARY_DIR SOURCE_DIR [--kills N] [--seed S] [--only-kills] [-v]
"""
import json
import os
import random
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BIN, SRC = sys.argv[1], sys.argv[2]
KILLS = int(sys.argv[sys.argv.index("--kills") + 1]) if "--kills" in sys.argv else 20
SEED = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else int(time.time())
sys.path.insert(0, os.path.join(SRC, "scripts"))
import llmodel  # noqa: E402

LLTRAIN = os.path.join(BIN, "lltrain")
failures = []


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    failures.append(msg)


T = tempfile.mkdtemp(prefix="llkill.")
RUN = os.path.join(T, "run")  # every run uses this save_dir: the config text stored in checkpoints names it
ARGS = [LLTRAIN, "--config", os.path.join(SRC, "configs/tiny_test.cfg"), "--quiet",
        "--set", "data.dir=" + os.path.join(T, "bin"), "--set", "checkpoint.save_dir=" + RUN,
        "--set", "train.max_updates=36", "--set", "checkpoint.save_interval=3", "--set", "checkpoint.keep_last=3",
        "--set", "train.valid_interval=10", "--set", "train.log_interval=5", "--set", "train.threads=1"]
ENV = dict(os.environ, OMP_WAIT_POLICY="passive")


def has_checkpoint():
    return os.path.isdir(RUN) and any(f.endswith(".llm") for f in os.listdir(RUN))


def default_signals():
    # (a child of a background job or of nohup inherits SIGINT or SIGHUP ignored, and lltrain
    # keeps an ignored signal ignored: the graceful stops below need them at their default)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


def start(extra=(), preexec_fn=None, **kw):
    args = ARGS + (["--resume"] if has_checkpoint() else []) + list(extra)

    def pre():
        default_signals()
        if preexec_fn:
            preexec_fn()
    return subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=pre, **kw)


def records(path):
    """metrics.jsonl records without the timing fields, which differ run to run."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except ValueError:
                fail("%s:%d: not a JSON record: %r" % (path, n, line[:80]))
                continue
            for k in ("wall", "tokens_per_s"):
                r.pop(k, None)
            out.append(r)
    return out


def check_loadable(when):
    for f in sorted(os.listdir(RUN)):
        if f.endswith(".llm"):
            try:
                llmodel.read(os.path.join(RUN, f))
            except llmodel.LLModelError as e:
                fail("%s: %s" % (when, e))


def compare_with_reference(ref, label):
    names = sorted(f for f in os.listdir(ref) if f.endswith(".llm"))
    got = sorted(f for f in os.listdir(RUN) if f.endswith(".llm"))
    if names != got:
        fail("%s: checkpoints %s, the uninterrupted run has %s" % (label, got, names))
    for f in names:
        p = os.path.join(RUN, f)
        if os.path.exists(p) and open(p, "rb").read() != open(os.path.join(ref, f), "rb").read():
            fail("%s: %s differs from the uninterrupted run's" % (label, f))
    a, b = records(os.path.join(RUN, "metrics.jsonl")), records(os.path.join(ref, "metrics.jsonl"))
    if a != b:
        fail("%s: metrics.jsonl has %d records, the uninterrupted run %d, or they differ" % (label, len(a), len(b)))
    temps = [f for f in os.listdir(RUN) if ".tmp." in f]
    if temps:
        fail("%s: temporaries left: %s" % (label, temps))


def finish(label):
    p = start()
    _, err = p.communicate(timeout=120)
    if "-v" in sys.argv:
        print(err.decode())
    if p.returncode != 0:
        fail("%s: final resume failed (%d): %s" % (label, p.returncode, err.decode()[-400:]))


def kill_during_write(p, deadline):
    """SIGKILL as soon as a temporary appears in the save_dir (a write in progress)."""
    while time.time() < deadline and p.poll() is None:
        try:
            if any(".tmp." in f for f in os.listdir(RUN)):
                break
        except FileNotFoundError:
            pass
        time.sleep(0.0005)
    p.kill()


def main():
    rng = random.Random(SEED)
    print("kill harness: seed %d, %d kills" % (SEED, KILLS))
    # the uninterrupted reference (prepares the data too)
    t0 = time.time()
    p = start()
    t_first = None  # when its first checkpoint appeared (the graceful stops aim at the time after it)
    while p.poll() is None and time.time() - t0 < 300:
        if t_first is None and has_checkpoint():
            t_first = time.time()
        time.sleep(0.002)
    _, err = p.communicate(timeout=300)
    if p.returncode != 0:
        print("FAIL: reference run failed: " + err.decode()[-400:], file=sys.stderr)
        return 1
    run_s = time.time() - t0
    # (a CUDA build's start-up, which loads cuBLASLt, made run_s / 3 outlast the training itself)
    after_first_s = time.time() - (t_first or t0)
    ref = os.path.join(T, "ref")
    os.rename(RUN, ref)
    print("reference run: %.2f s (%.2f s after its first checkpoint)" % (run_s, after_first_s))

    # ---- SIGKILL at random moments, half of them during a write -------------------
    kills = in_write = left_tmp = 0
    t0 = time.time()
    while kills < KILLS:
        p = start()
        if kills % 2:
            time.sleep(rng.uniform(0.0, 0.25))  # let it get past startup, then wait for a write
            kill_during_write(p, time.time() + run_s)
        else:
            time.sleep(rng.uniform(0.0, run_s))
            p.kill()
        p.wait()
        if p.returncode == 0:  # it finished before the kill: start over
            shutil.rmtree(RUN)
            continue
        kills += 1
        tmps = [f for f in os.listdir(RUN) if ".tmp." in f] if os.path.isdir(RUN) else []
        in_write += kills % 2 == 0
        left_tmp += bool(tmps)
        if os.path.isdir(RUN):
            check_loadable("after kill %d" % kills)
    print("%d SIGKILLs in %.1f s (%d aimed at writes; %d left a temporary behind)" %
          (kills, time.time() - t0, KILLS // 2, left_tmp))
    if left_tmp == 0:
        fail("no kill landed during a write (no temporary was ever left)")
    finish("after %d kills" % kills)
    compare_with_reference(ref, "after %d kills" % kills)

    # ---- SIGKILL at each point between two writes, on purpose (LL_CRASH_AFTER) ------
    # at update 30: metrics records, checkpoint_best, checkpoint_30, checkpoint_last;
    # at 36, the end: the loop's checkpoint_36/last, then the final validation's
    # record, checkpoint_best, and the final checkpoint_last
    t_phase = time.time()
    points = ["train@30", "valid@30", "checkpoint_best.llm@30", "checkpoint_30.llm@30", "checkpoint_last.llm@30",
              "checkpoint_36.llm@36", "checkpoint_last.llm@36", "valid@36", "checkpoint_best.llm@36"]
    for point in points:
        shutil.rmtree(RUN, ignore_errors=True)
        p = subprocess.run(ARGS, env=dict(ENV, LL_CRASH_AFTER=point), capture_output=True)
        if p.returncode != -signal.SIGKILL:
            fail("%s: the crash point was not reached (exit status %d)" % (point, p.returncode))
        check_loadable("killed after " + point)
        finish("killed after " + point)
        compare_with_reference(ref, "killed after " + point)
    print("%d deliberate crash points: %.1f s" % (len(points), time.time() - t_phase))
    if "--only-kills" in sys.argv:  # (debugging: keep the state the kills left)
        print("kept %s" % T)
        return 1 if failures else 0

    t_phase = time.time()
    # ---- graceful stops --------------------------------------------------------------
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        shutil.rmtree(RUN, ignore_errors=True)
        p = start()
        while not has_checkpoint() and p.poll() is None:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, after_first_s / 2))
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
        err = err.decode()
        name = signal.Signals(sig).name
        if p.returncode != 0:
            fail("%s: exit status %d: %s" % (name, p.returncode, err[-300:]))
            continue
        lines = err.splitlines()
        if "To resume:" not in err:
            # it may have finished before the signal arrived (a loaded machine runs the reference slower
            # than this run), or after its last update, where it only saves: then the run is complete,
            # as the uninterrupted one (--quiet prints no "done" line to tell)
            mpath = os.path.join(RUN, "metrics.jsonl")
            got = records(mpath) if os.path.exists(mpath) else []
            if got != records(os.path.join(ref, "metrics.jsonl")):
                fail("%s: no resume command printed, and the run stopped after %d of the uninterrupted run's "
                     "%d records: %s" % (name, len(got), len(records(os.path.join(ref, "metrics.jsonl"))), err[-300:]))
        else:
            cmd = lines[lines.index(next(l for l in lines if l.endswith("To resume:"))) + 1].strip()
            r = subprocess.run(shlex.split(cmd), env=ENV, capture_output=True)
            if r.returncode != 0:
                fail("%s: the printed command failed: %s" % (name, r.stderr.decode()[-300:]))
        compare_with_reference(ref, name)
    # an ignored SIGHUP (nohup lltrain ... &) stays ignored: the run goes on, SIGTERM still stops it
    shutil.rmtree(RUN, ignore_errors=True)
    # (a run far longer than the 0.2 s below: the SIGTERM must come while it trains, not after its last
    # update, when lltrain's handlers are gone and the signal kills it; that failed once in CI)
    p = start(["--set", "train.max_updates=100000"], preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    while not has_checkpoint() and p.poll() is None:
        time.sleep(0.005)
    p.send_signal(signal.SIGHUP)
    time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    err = err.decode()
    if p.returncode != 0 or "stopped by signal %d " % signal.SIGHUP in err:
        fail("an ignored SIGHUP stopped lltrain (exit %d): %s" % (p.returncode, err[-300:]))
    # a second signal exits at once, non-zero (a wider model, so that one update
    # outlasts the time between the two signals); what is on disk stays loadable
    shutil.rmtree(RUN, ignore_errors=True)
    wide = ["--set", "model.d_model=256", "--set", "model.ffn_dim=2048", "--set", "train.max_updates=6"]
    p = start(wide)
    while not has_checkpoint() and p.poll() is None:
        time.sleep(0.005)
    p.send_signal(signal.SIGINT)
    while p.poll() is None and b"signal received" not in p.stderr.readline():
        pass
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=120)
    if p.returncode != 128 + signal.SIGINT:
        fail("second SIGINT: exit status %d, expected %d" % (p.returncode, 128 + signal.SIGINT))
    check_loadable("after a second SIGINT")
    p = start(wide)
    _, err = p.communicate(timeout=300)
    if p.returncode != 0:
        fail("resume after a second SIGINT failed: " + err.decode()[-300:])

    print("graceful stops and a second signal: %.1f s" % (time.time() - t_phase))
    t_phase = time.time()
    # ---- disk full during a checkpoint (RLIMIT_FSIZE; SIGXFSZ ignored -> EFBIG) --------
    shutil.rmtree(RUN, ignore_errors=True)
    p = start()  # stopped gracefully after its first checkpoint
    while not has_checkpoint() and p.poll() is None:
        time.sleep(0.005)
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=120)
    if not os.path.exists(os.path.join(RUN, "checkpoint_last.llm")):
        fail("disk full: no checkpoint_last.llm after a graceful stop")
        print("kill harness: %d failure(s); seed %d; kept %s" % (len(failures), SEED, T))
        return 1
    before = open(os.path.join(RUN, "checkpoint_last.llm"), "rb").read()
    limit = len(before) // 2

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    p = start(preexec_fn=small_disk)
    _, err = p.communicate(timeout=120)
    err = err.decode()
    if p.returncode != 1 or len(err.splitlines()) != 1 or "write failed" not in err:
        fail("disk full: expected one 'write failed' line and exit 1, got %d: %s" % (p.returncode, err[-300:]))
    if open(os.path.join(RUN, "checkpoint_last.llm"), "rb").read() != before:
        fail("disk full: checkpoint_last.llm changed")
    if any(".tmp." in f for f in os.listdir(RUN)):
        fail("disk full: a temporary was left behind")
    finish("after disk full")
    compare_with_reference(ref, "after disk full")

    print("disk full: %.1f s" % (time.time() - t_phase))
    if failures:
        print("kill harness: %d failure(s); seed %d (rerun with --seed %d); kept %s" % (len(failures), SEED, SEED, T))
        return 1
    shutil.rmtree(T)
    print("kill harness: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
