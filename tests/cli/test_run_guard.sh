#!/usr/bin/env bash
# Issue 28 (docs/reliability.md, "Round 2"): one lltrain per checkpoint.save_dir,
# no silent resume onto other data, no lost writes, and its smaller findings.
# Each section names the finding it covers.
source "$(dirname "$0")/lib.sh"
R=$T/run
A=("$BIN/lltrain" --config "$SRC/configs/tiny_test.cfg" --quiet --set data.dir="$T/bin" --set checkpoint.save_dir="$R"
   --set train.valid_interval=10 --set checkpoint.save_interval=5 --set checkpoint.keep_last=0)
"${A[@]}" --set train.max_updates=5 2> "$T/log" || { echo "FAIL: training failed: $(tail -1 "$T/log")" >&2; exit 1; }

# 1. a second lltrain on the same save_dir (fresh or --resume) exits non-zero at once, naming the
#    directory and the PID holding it; the first run goes on; a SIGKILL releases the lock
"${A[@]}" --set train.max_updates=100000 --resume 2> "$T/first" & first=$!
for _ in $(seq 100); do grep -q "pid $first" "$R/.lltrain.lock" 2> /dev/null && break; sleep 0.1; done
for extra in --resume "--set train.max_updates=9"; do
  start=$(date +%s)
  # shellcheck disable=SC2086
  "${A[@]}" --set train.max_updates=100000 $extra 2> "$T/log"; rc=$?
  [ $rc -ne 0 ] || err "second lltrain ($extra) exited 0"
  [ $(( $(date +%s) - start )) -le 5 ] || err "second lltrain ($extra) did not fail at once"
  grep -q "error: $R: another lltrain (PID $first) is running with this checkpoint.save_dir" "$T/log" ||
    err "second lltrain ($extra): $(cat "$T/log")"
done
kill -0 $first 2> /dev/null || err "the first run stopped: $(tail -2 "$T/first")"
kill -9 $first; wait $first 2> /dev/null
"${A[@]}" --set train.max_updates=10 --resume 2> "$T/log" || err "resume after the holder's SIGKILL: $(cat "$T/log")"
python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$R/metrics.jsonl" || err "metrics.jsonl is not JSON lines"

# 3. lost writes: a metrics log, decoded text or a report on a full device stops the tool, non-zero,
#    naming the file and the reason
"${A[@]}" --set checkpoint.save_dir="$T/full" --set train.max_updates=10 --set train.metrics_log=/dev/full 2> "$T/log"
rc=$?
[ $rc -ne 0 ] && grep -q "error: /dev/full: write failed: No space left on device" "$T/log" ||
  err "metrics log on /dev/full: exit $rc: $(tail -1 "$T/log")"
echo "hello world" > "$T/in.txt"
"$BIN/lldecode" --model "$R/checkpoint_last.llm" --input "$T/in.txt" --output /dev/full --quiet 2> "$T/log"
rc=$?
[ $rc -ne 0 ] && grep -q "/dev/full: write failed: No space left on device" "$T/log" || err "lldecode --output /dev/full: exit $rc: $(cat "$T/log")"
"$BIN/lldecode" --model "$R/checkpoint_last.llm" --input "$T/in.txt" --quiet > /dev/full 2> "$T/log"
rc=$?
[ $rc -ne 0 ] && grep -q "<stdout>: write failed: No space left on device" "$T/log" || err "lldecode > /dev/full: exit $rc: $(cat "$T/log")"
for tool in lltrain lldecode lleval llavg llprep llprune; do
  "$BIN/$tool" --help > /dev/full 2> "$T/log"
  rc=$?
  [ $rc -ne 0 ] && grep -q "^$tool: error: <stdout>: write failed: No space left on device" "$T/log" ||
    err "$tool --help > /dev/full: exit $rc: $(cat "$T/log")"
done
"$BIN/lleval" --input "$T/in.txt" --ref "$T/in.txt" > /dev/full 2> "$T/log" && err "lleval > /dev/full exited 0"
"$BIN/llprune" --model "$R/checkpoint_last.llm" --output "$T/pruned.llm" > /dev/full 2> "$T/log" && err "llprune > /dev/full exited 0"

[ $fail -eq 0 ] && echo "test_run_guard: all checks passed"
exit $fail
