#!/usr/bin/env bash
# --resume on the GPU continues deterministically (issue 11): 30 updates
# straight on the GPU == 15 + --resume 15 on the GPU, checkpoint byte for byte
# (so no kernel of a training step may depend on atomics' order), with dropout
# and attention dropout on, and the weights' moving average (train.ema_decay: validation swaps it
# into the bf16 weight copy and back), and the first encoder layer frozen (train.freeze: Adam on
# the pieces around it, the bf16 copy refreshed piecewise; the frozen tensors stay where they
# started).  A tiny model on tests/data/tiny: a few seconds.
# Skips (77) without a GPU.
source "$(dirname "$0")/lib.sh"
gpu_or_skip
# LL_RESUME_UPDATES (default 30), LL_RESUME_VALID (the validation interval, default 5; half the
# updates must be a multiple of it, else even the CPU differs) and LL_RESUME_TOKENS (batch, default
# 2048): smaller under the CPU emulation of CUDA (cmake/cuda_emu_tests.cmake)
R=${LL_RESUME_UPDATES:-30} V=${LL_RESUME_VALID:-5}
cat > "$T/t.cfg" <<CFG
model: {d_model: 64, ffn_dim: 128, heads: 4, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.1, attn_dropout: 0.1}
$(tiny_data "$T/bin" "${LL_RESUME_TOKENS:-2048}")
train: {seed: 1, lr: 3e-3, warmup_updates: 5, valid_interval: $V, log_interval: $V, device: $GPUDEV}
checkpoint: {save_dir: $T/run}
CFG
common=(--config "$T/t.cfg" --set train.precision=bf16 --set train.ema_decay=0.9 --set "train.freeze=enc.layers.0.*")
"$BIN/lltrain" "${common[@]}" --set train.max_updates="$R" 2> "$T/straight.log" ||
  { err "straight run failed: $(tail -1 "$T/straight.log")"; exit 1; }
mv "$T/run" "$T/straight"
"$BIN/lltrain" "${common[@]}" --set train.max_updates=$((R / 2)) 2> "$T/half.log" || err "first half failed: $(tail -1 "$T/half.log")"
cp "$T/run/checkpoint_last.llm" "$T/half.llm"
"$BIN/lltrain" "${common[@]}" --set train.max_updates="$R" --resume 2> "$T/resume.log" ||
  err "resume failed: $(tail -1 "$T/resume.log")"
grep -q "resumed from" "$T/resume.log" || err "resume did not say it resumed"
if cmp -s "$T/straight/checkpoint_last.llm" "$T/run/checkpoint_last.llm"; then
  echo "resume: $((R / 2)) + --resume $((R / 2)) on the $GPUDEV == $R straight, byte for byte"
else
  err "the resumed GPU run differs from the uninterrupted one (non-deterministic kernels, or state not restored)"
  cmp -s "$T/straight/metrics.jsonl" "$T/run/metrics.jsonl" || diff "$T/straight/metrics.jsonl" "$T/run/metrics.jsonl" | head -6
fi
# the frozen layer: the same at update R/2 and R (up to the moving average's rounding: the checkpoints'
# tensors are the average, ~1e-8 from a weight that does not move); the layer after it moved
python3 - "$SRC/scripts" "$T/half.llm" "$T/straight/checkpoint_last.llm" <<'PY' || err "train.freeze on the $GPUDEV"
import sys
sys.path.insert(0, sys.argv[1])
import llmodel
a, b = (llmodel.read(p) for p in sys.argv[2:])
def diff(n):
    return max(abs(x - y) for x, y in zip(a.values(n), b.values(n)))
frozen = [n for n in a.tensors if n.startswith("enc.layers.0.")]
moved = [n for n in a.tensors if n.startswith("enc.layers.1.")]
assert len(frozen) == 12 and len(moved) == 12, (frozen, moved)
assert max(diff(n) for n in frozen) < 1e-6, [(n, diff(n)) for n in frozen]
assert min(diff(n) for n in moved if not n.endswith("_ln.bias")) > 1e-5, [(n, diff(n)) for n in moved]
PY
keep_logs resume "$T"/*.log
exit $fail
