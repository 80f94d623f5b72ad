#!/usr/bin/env bash
# train.spike_zscore_loss / train.spike_zscore_gnorm (llm.c's -sl / -sg): an
# update whose per-token loss or gradient norm lies more than the threshold's
# standard deviations above the previous train.spike_window updates' is
# skipped on the training device, logged and recorded; the run goes on.
# End to end on real files: skips happen and are reported, the skipped
# updates leave the parameters (the run differs from one without), --resume
# restores the window bit for bit (30 + 10 = 40 straight, the same skips), a
# checkpoint without a window resumes with an empty one, bad settings are
# refused.  (The decision itself: test_cpu_kernels against a double reference,
# gpu_test_ops_cuda --op spike_check CUDA against the CPU, test_dist_mpi.sh
# two ranks against one process.)
source "$(dirname "$0")/lib.sh"
LLTRAIN=$BIN/lltrain

cat > "$T/sp.cfg" <<CFG
model: {d_model: 32, ffn_dim: 64, heads: 2, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.1}
$(tiny_data "$T/bin" 128)
train: {seed: 5, threads: 2, lr: 3e-3, warmup_updates: 4, max_updates: 40, log_interval: 10, valid_interval: 20}
checkpoint: {save_dir: $T/run}
CFG
SPIKE=(--set train.spike_zscore_gnorm=1 --set train.spike_zscore_loss=2 --set train.spike_window=8)
train() { "$LLTRAIN" --config "$T/sp.cfg" "$@"; }
skips() { grep -o '"update":[0-9]*,"reason":"spike"' "$1/metrics.jsonl" | tr '\n' ' '; }

# 1. skips happen, are logged (which threshold, the z-scores) and recorded; the run finishes
train "${SPIKE[@]}" 2> "$T/straight.log" || err "the run with spike skipping failed: $(tail -1 "$T/straight.log")"
mv "$T/run" "$T/straight"
n=$(grep -c "a gradient-norm spike (z-score [0-9.]* > 1, train.spike_zscore_gnorm): update skipped" "$T/straight.log")
[ "$n" -ge 1 ] || err "no spike was skipped in 40 updates at z 1 (the test would not test it): $(grep -c spike "$T/straight.log")"
[ "$(skips "$T/straight" | wc -w)" = "$n" ] || err "metrics.jsonl has $(skips "$T/straight" | wc -w) spike records, the log $n"
grep -q "^lltrain: $n updates\? skipped as spikes in this run" "$T/straight.log" ||
  grep -q "$n update.* skipped as spikes in this run" "$T/straight.log" || err "no summary of the skipped spikes"
grep -q "done: 40 updates" "$T/straight.log" || err "the run did not reach update 40"
# the first `window` updates cannot be spikes
first=$(skips "$T/straight" | grep -o '[0-9]*' | head -1)
[ "${first:-0}" -gt 8 ] || err "update $first skipped before the window of 8 was full"

# 2. the skipped updates left the parameters: the run differs from one without
train 2> "$T/plain.log" || err "plain run: $(tail -1 "$T/plain.log")"
mv "$T/run" "$T/plain"
grep -q spike "$T/plain.log" && err "the run without spike skipping mentions spikes"
out=$("$BIN/ll_ckpt_diff" "$T/plain/checkpoint_last.llm" "$T/straight/checkpoint_last.llm")
case "$out" in "max_abs_diff 0 over"*) err "skipping spikes changed nothing: $out" ;; esac

# 3. --resume: 30, then 10 more, equals 40 straight (parameters, moments, the same skips)
train "${SPIKE[@]}" --set train.max_updates=30 2> "$T/a.log" && train "${SPIKE[@]}" --resume 2> "$T/b.log" ||
  err "30 + resume: $(tail -1 "$T/a.log") $(tail -1 "$T/b.log")"
for prefix in "" optim.; do
  out=$("$BIN/ll_ckpt_diff" "$T/straight/checkpoint_last.llm" "$T/run/checkpoint_last.llm" $prefix)
  case "$out" in "max_abs_diff 0 over"*) ;; *) err "resumed (${prefix:-model}): $out" ;; esac
done
[ "$(skips "$T/run")" = "$(skips "$T/straight")" ] ||
  err "resumed run skipped {$(skips "$T/run")}, straight {$(skips "$T/straight")}"
grep -q "spike window" "$T/b.log" && err "the resume did not restore the window: $(grep 'spike window' "$T/b.log")"
rm -rf "$T/run"

# 4. a checkpoint without a window (or with another size) resumes with an empty one, said so
train --set train.max_updates=30 2> /dev/null && train "${SPIKE[@]}" --resume 2> "$T/c.log" ||
  err "resume with spike skipping newly on: $(tail -1 "$T/c.log")"
grep -q "no spike window: the spike detector's window starts empty" "$T/c.log" || err "no note of the empty window"
train "${SPIKE[@]}" --set train.spike_window=10 --set train.max_updates=45 --resume 2> "$T/d.log" ||
  err "resume with another window: $(tail -1 "$T/d.log")"
grep -q "another size (train.spike_window): the spike detector's window starts empty" "$T/d.log" ||
  err "no note of the resized window"
rm -rf "$T/run"

# 5. bad settings: one line naming the key, nothing written
for bad in "train.spike_window=4" "train.spike_zscore_loss=-1" "train.spike_zscore_gnorm=abc"; do
  if train --set "$bad" 2> "$T/bad.log"; then err "$bad was accepted"; fi
  grep -q "${bad%%=*}" "$T/bad.log" || err "$bad: the error does not name the key: $(cat "$T/bad.log")"
  [ -e "$T/run" ] && err "$bad: a run directory was written" && rm -rf "$T/run"
done
exit $fail
