#!/usr/bin/env bash
# A rank that dies or hangs stops the whole job (docs/distributed.md):
#  0. SIGTERM to rank 1 alone: all ranks stop after the same update, exit 0;
#  1. SIGKILL rank 1 of `mpirun -np 2 lltrain`: mpirun exits non-zero within
#     dist.timeout_s, naming rank 1;
#  2. --resume continues from the last checkpoint with two ranks; SIGSTOP rank 1
#     there: rank 0's watchdog names rank 1 and stops the job within the timeout;
#  3. the checkpoint written by two ranks resumes in one process and finishes.
set -u
SRC=${LL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${LL_BINARY_DIR:-$SRC/build}
. "$SRC/tests/cli/dist_env.sh"
T=$(mktemp -d)
MP=
cleanup() {
  [ -n "$MP" ] && kill "$MP" 2> /dev/null
  for p in $(pgrep -f "save_dir=$T/ck" || true); do kill -9 "$p" 2> /dev/null; done # ranks this test started
  rm -rf "$T"
}
trap cleanup EXIT
fail=0
err() { echo "FAIL: $*" >&2; fail=1; }
TIMEOUT=4
RUN=("$BIN/lltrain" --config "$SRC/configs/tiny_test.cfg" --set data.dir="$T/bin" --set checkpoint.save_dir="$T/ck"
     --set train.threads=1 --set train.valid_interval=100000 --set checkpoint.save_interval=5 --set train.log_interval=5
     --set dist.timeout_s=$TIMEOUT)
"$BIN/lltrain" --config "$SRC/configs/tiny_test.cfg" --set data.dir="$T/bin" --set checkpoint.save_dir="$T/prep" \
  --set train.max_updates=1 --quiet 2> /dev/null || { err "preparing data failed"; exit 1; }

rank_pid() { # pid of rank $1 of the running job
  for p in $(pgrep -f "save_dir=$T/ck" || true); do
    tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
  done
}
# start a long run in the background; wait for a checkpoint at or after update $1
launch() {
  local want=$1; shift
  mpirun2 "${RUN[@]}" --set train.max_updates=1000000 "$@" > "$T/run.log" 2>&1 &
  MP=$!
  for _ in $(seq 300); do
    u=$(grep -o '"update":[0-9]*' "$T/ck/metrics.jsonl" 2> /dev/null | tail -1 | cut -d: -f2)
    [ -e "$T/ck/checkpoint_last.llm" ] && [ "${u:-0}" -ge "$want" ] && return 0
    kill -0 "$MP" 2> /dev/null || { err "the job ended early: $(tail -3 "$T/run.log")"; return 1; }
    sleep 0.1
  done
  err "no checkpoint at update $want after 30 s"
  return 1
}
# wait for mpirun; it must exit non-zero within the timeout (+ slack for a loaded machine)
expect_stop() {
  local what=$1 t0=$SECONDS rc
  wait "$MP"; rc=$?
  MP=
  local took=$((SECONDS - t0))
  echo "$what: mpirun exited $rc after ${took} s"
  [ "$rc" -ne 0 ] || err "$what: the job exited 0"
  [ "$took" -le $((TIMEOUT + 15)) ] || err "$what: took $took s (dist.timeout_s $TIMEOUT)"
}

# 0. SIGTERM to one rank: every rank finishes the same update, rank 0 checkpoints, exit 0
launch 3 || exit 1
p1=$(rank_pid 1)
[ -n "$p1" ] || { err "rank 1 not found"; exit 1; }
kill -TERM "$p1"
wait "$MP"; rc=$?
MP=
[ "$rc" -eq 0 ] || err "SIGTERM to rank 1: the job exited $rc: $(tail -3 "$T/run.log")"
[ "$(grep -c 'stopped by signal 15 after update' "$T/run.log")" -eq 1 ] || err "SIGTERM: no single stop message"
grep -q "To resume:" -A1 "$T/run.log" && grep -A1 "To resume:" "$T/run.log" | grep -q "mpirun -np 2 .*--resume" ||
  err "SIGTERM: the resume hint is not an mpirun command"
rm -rf "$T/ck"

# 1. a rank dies
launch 5 || exit 1
p1=$(rank_pid 1)
[ -n "$p1" ] || { err "rank 1 not found"; exit 1; }
kill -9 "$p1"
expect_stop "rank 1 killed"
grep -E "rank 1 .*(exited on signal 9|Killed)|no answer from rank 1" "$T/run.log" || err "no message naming rank 1: $(tail -5 "$T/run.log")"

# 2. --resume continues; a rank hangs
saved=$(grep -o '"update":[0-9]*' "$T/ck/metrics.jsonl" | tail -1 | cut -d: -f2)
launch $((saved + 10)) --resume || exit 1
grep -q "resumed from $T/ck/checkpoint_last.llm" "$T/run.log" || err "--resume did not continue from checkpoint_last"
p1=$(rank_pid 1)
[ -n "$p1" ] || { err "rank 1 not found after --resume"; exit 1; }
kill -STOP "$p1"
expect_stop "rank 1 stopped"
grep "rank 0: .*no answer from rank 1 for $TIMEOUT s (dist.timeout_s)" "$T/run.log" ||
  err "rank 0's watchdog did not name rank 1: $(tail -5 "$T/run.log")"

# 3. two ranks' checkpoint, one process: resumes and finishes
U=$(( $(grep -o '"update":[0-9]*' "$T/ck/metrics.jsonl" | tail -1 | cut -d: -f2) + 5 ))
"${RUN[@]}" --set train.max_updates=$U --resume 2> "$T/one.log" || err "one process could not resume: $(tail -1 "$T/one.log")"
grep -q "done: $U updates" "$T/one.log" || err "one process did not finish at update $U: $(tail -2 "$T/one.log")"
exit $fail
