#!/usr/bin/env bash
# lltrain recovery paths (issue 13, docs/reliability.md): --resume falls back
# past a corrupt or forged checkpoint_last, a lost checkpoint_best is repaired,
# a finished run is left untouched, stale temporaries are removed, a changed
# architecture is refused, non-finite updates are skipped and too many in a
# row stop the run without touching the last checkpoint, a diverging run is
# warned about, and valgrind can run the tools (no self re-exec).
source "$(dirname "$0")/lib.sh"
export PYTHONPATH=$SRC/scripts
R=$T/run
A=("$BIN/lltrain" --config "$SRC/configs/tiny_test.cfg" --quiet --set data.dir="$T/bin" --set checkpoint.save_dir="$R"
   --set train.valid_interval=10 --set checkpoint.save_interval=5 --set checkpoint.keep_last=0)
upd() { python3 -c "import llmodel,struct,sys; print(struct.unpack('<q', llmodel.read(sys.argv[1]).raw('state.counters')[8:16])[0])" "$1"; }
# forge SRC DST CODE: rewrite a model file; CODE edits t (name -> bytearray) with setf/seti64
forge() {
python3 - "$@" <<'PY'
import struct, sys, llmodel
src, dst, code = sys.argv[1:4]
m = llmodel.read(src)
t = {n: bytearray(m.raw(n)) for n in m.tensors}
def setf(name, i, v): struct.pack_into("<f", t[name], 4 * i, v)
def seti64(name, i, v): struct.pack_into("<q", t[name], 8 * i, v)
exec(code)
llmodel.write(dst, m.config, m.vocab, [(n, x.dtype, list(x.shape), bytes(t[n])) for n, x in m.tensors.items()])
PY
}

"${A[@]}" --set train.max_updates=20 2> "$T/log" || { echo "FAIL: training failed: $(tail -1 "$T/log")" >&2; exit 1; }

# 1. a finished run: --resume says so, exits 0 and touches nothing
before=$(ls -l --time-style=+%s.%N "$R"; md5sum "$R"/*)
"${A[@]}" --set train.max_updates=20 --resume 2> "$T/log" || err "resuming a finished run failed: $(cat "$T/log")"
grep -q "already finished at update 20; nothing to do" "$T/log" || err "finished run: $(cat "$T/log")"
[ "$before" = "$(ls -l --time-style=+%s.%N "$R"; md5sum "$R"/*)" ] || err "resuming a finished run changed files"

# 2. a corrupt checkpoint_last: warned about, the newest numbered one is used
"${A[@]}" --set train.max_updates=25 --resume 2> /dev/null || err "extending the run failed"
printf 'garbage' | dd of="$R/checkpoint_last.llm" bs=1 seek=300 conv=notrunc 2> /dev/null
"${A[@]}" --set train.max_updates=30 --resume 2> "$T/log" || err "resume past a corrupt last failed: $(cat "$T/log")"
grep -q "checkpoint_last.llm: checksum mismatch.*skipping it" "$T/log" || err "no warning about the corrupt last: $(cat "$T/log")"
grep -q "resuming from .*checkpoint_25.llm (update 25) instead" "$T/log" || err "did not fall back to checkpoint_25: $(cat "$T/log")"
[ "$(upd "$R/checkpoint_last.llm")" = 30 ] || err "checkpoint_last is not at update 30 after the fallback"

# 3. forged training state (negative update count, Adam step, batch position, lr plateau counters
#    (train.lr_shrink) negative or past the update count): refused, falls back
for f in "seti64('state.counters', 1, -5)" "seti64('state.counters', 0, -1)" "seti64('state.counters', 3, -2)" \
  "seti64('state.extra', 4, -1)" "seti64('state.extra', 5, 31)"; do
  forge "$R/checkpoint_30.llm" "$R/checkpoint_last.llm" "$f"
  "${A[@]}" --set train.max_updates=30 --resume 2> "$T/log"
  grep -q "checkpoint_last.llm: training state is.* forged" "$T/log" || err "forged state ($f) accepted: $(cat "$T/log")"
done
cp "$R/checkpoint_30.llm" "$R/checkpoint_last.llm"

# 4. checkpoint_best lost: rewritten when the resumed state is the best model, else the next validation writes one
rm "$R/checkpoint_best.llm" "$R/checkpoint_30.llm"
cp "$R/checkpoint_last.llm" "$T/last30.llm"
forge "$T/last30.llm" "$R/checkpoint_last.llm" "seti64('state.extra', 1, 0)" # not finished
"${A[@]}" --set train.max_updates=30 --resume 2> "$T/log" || err "resume without best failed: $(cat "$T/log")"
grep -q "checkpoint_best.llm was missing or stale: rewritten from the resumed update 30" "$T/log" ||
  err "checkpoint_best not rewritten: $(cat "$T/log")"
[ "$(upd "$R/checkpoint_best.llm")" = 30 ] || err "checkpoint_best is not the update-30 model"
"${A[@]}" --set train.max_updates=35 --resume 2> /dev/null || err "resume to 35 failed" # checkpoint_35 says best = 30
rm "$R/checkpoint_best.llm" "$R/checkpoint_last.llm"
"${A[@]}" --set train.max_updates=45 --resume 2> "$T/log" || err "resume at 35 failed: $(cat "$T/log")"
grep -q "checkpoint_best.llm is missing or unreadable, but the run's best is update 30: the next validation writes" \
  "$T/log" || err "no warning about the lost best: $(cat "$T/log")"
[ -s "$R/checkpoint_best.llm" ] || err "no checkpoint_best after the next validation"

# 5. stale temporaries of the dead previous holder of save_dir's lock are removed at start; a user's
#    files that merely look like temporaries (another dead pid) are kept (issue 28 #9); no duplicate metrics
sh -c 'exit 0' & dead=$!; wait $dead
sh -c 'exit 0' & dead2=$!; wait $dead2
head -c 1000 "$R/checkpoint_last.llm" > "$R/checkpoint_50.llm.tmp.$dead"
printf 'lltrain pid %s\n' "$dead" > "$R/.lltrain.lock" # as a run killed while writing leaves it
echo mine > "$R/checkpoint_notes.tmp.$dead2"; echo mine > "$R/metrics_old.tmp.$dead2"
"${A[@]}" --set train.max_updates=50 --resume 2> /dev/null || err "resume with a stale temporary failed"
[ ! -e "$R/checkpoint_50.llm.tmp.$dead" ] || err "stale temporary of a dead pid left in place"
[ -e "$R/checkpoint_notes.tmp.$dead2" ] && [ -e "$R/metrics_old.tmp.$dead2" ] || err "a user's file was deleted"
rm -f "$R/checkpoint_notes.tmp.$dead2" "$R/metrics_old.tmp.$dead2"
dups=$(grep -o '"type":"[a-z]*","update":[0-9]*' "$R/metrics.jsonl" | sort | uniq -d)
[ -z "$dups" ] || err "duplicate metrics records after resumes: $dups"

# 6. a changed architecture is refused, not resumed into
"${A[@]}" --set train.max_updates=60 --set model.heads=4 --resume 2> "$T/log"
[ $? -ne 0 ] && [ "$(wc -l < "$T/log")" -eq 1 ] && grep -q "another architecture than the config's (model.heads 2 vs 4)" "$T/log" ||
  err "resume with model.heads=4: $(cat "$T/log")"

# 7. non-finite updates: skipped; train.max_bad_updates in a row stop the run, the last checkpoint untouched
forge "$R/checkpoint_last.llm" "$R/checkpoint_last.llm" \
  "[setf(n, i, 3e38) for n in ('dec.final_ln.weight', 'dec.final_ln.bias') for i in range(32)]"
sums=$(md5sum "$R"/*.llm)
"${A[@]}" --set train.max_updates=80 --set train.max_bad_updates=7 --resume 2> "$T/log"
rc=$?
[ $rc -eq 1 ] || err "7 bad updates in a row: exit status $rc"
[ "$(grep -c "update skipped, parameters unchanged" "$T/log")" -eq 7 ] || err "skipped updates not logged: $(cat "$T/log")"
grep -q "error: update 57: 7 updates in a row had a non-finite loss or gradient norm (train.max_bad_updates); stopped without saving" \
  "$T/log" || err "no clear stop message: $(tail -1 "$T/log")"
[ "$sums" = "$(md5sum "$R"/*.llm)" ] || err "checkpoints were written or touched during the bad updates"
[ "$(grep -c '"type":"skip"' "$R/metrics.jsonl")" -eq 7 ] || err "skipped updates not in metrics.jsonl"

# 8. a diverging run is warned about
"$BIN/lltrain" --config "$SRC/configs/tiny_test.cfg" --quiet --set data.dir="$T/bin" --set checkpoint.save_dir="$T/lr10" \
  --set train.lr=10 --set train.max_updates=30 --set train.log_interval=5 2> "$T/log"
grep -q "warning: update [0-9]*: loss .* bits/token is above log2(vocabulary) = 6.64.*diverging" "$T/log" ||
  err "lr 10 diverged without a warning: $(tail -2 "$T/log")"

# 9. valgrind runs the tools (no re-exec through /proc/self/exe); LL_NO_REEXEC=1 is the manual switch.
# Not under ASan, and not in a CUDA build: its lldecode loads cuBLASLt, whose start takes ~20 s of
# valgrind; the re-exec code is the same in the CPU builds, which check it.
libs=$(ldd "$BIN/lldecode")
if command -v valgrind > /dev/null && ! grep -q libasan <<< "$libs" && ! grep -q libcublasLt <<< "$libs"; then
  # (valgrind 3.19 decodes no AVX-512: a -march=native build on such a host stops at its first
  # EVEX instruction with SIGILL, valgrind's limit and not the tools'; the portable build runs it)
  if env -u OMP_WAIT_POLICY -u OPENBLAS_CORETYPE -u LL_NO_REEXEC valgrind -q "$BIN/lldecode" --help > "$T/vg" 2>&1; then
    :
  elif grep -q "Illegal opcode\|unhandled instruction bytes" "$T/vg" && grep -q avx512f /proc/cpuinfo; then
    echo "valgrind cannot decode this build's AVX-512 instructions (-march=native on an AVX-512 host): skipping its check"
  else
    err "valgrind lldecode --help: $(head -3 "$T/vg")"
  fi
else
  echo "valgrind not installed (or an ASan or CUDA build): skipping its check"
fi

[ $fail -eq 0 ] && echo "test_resume_recovery: all checks passed"
exit $fail
