#!/usr/bin/env bash
# train.precision: bf16 end to end on the CPU (the mixed-precision path the
# CUDA backend will take, tested without a GPU):
# 1. 100 updates of a tiny model reach a training loss within 5% of fp32's
#    (same seed, data and dropout draws; only the activation dtype differs);
# 2. --resume stays bit-exact in bf16 (the bf16 weight copy is rebuilt from
#    the fp32 master on load, exactly as Adam refreshes it);
# 3. lldecode --precision bf16 decodes the bf16-trained model;
# 4. lltrain --dry-run measures bf16 activations below fp32's.
source "$(dirname "$0")/lib.sh"
LLTRAIN=$BIN/lltrain

cat > "$T/tiny.cfg" <<CFG
model: {d_model: 64, ffn_dim: 128, heads: 4, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.1, attn_dropout: 0.1}
$(tiny_data "$T/bin" 2048)
train: {seed: 1, threads: 2, lr: 3e-3, warmup_updates: 20, label_smoothing: 0.1, max_updates: 100, log_interval: 10, valid_interval: 50}
checkpoint: {save_dir: $T/fp32}
CFG

# 1. 100 updates, fp32 vs bf16: mean training loss of the last 20 updates within 5%
loss_tail() { grep '"type":"train"' "$1/metrics.jsonl" | tail -2 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/' | tr '\n' ' '; }
"$LLTRAIN" --config "$T/tiny.cfg" --quiet 2>"$T/fp32.log" || err "fp32 run failed: $(tail -1 "$T/fp32.log")"
"$LLTRAIN" --config "$T/tiny.cfg" --quiet --set train.precision=bf16 --set checkpoint.save_dir="$T/bf16" \
  2>"$T/bf16.log" || err "bf16 run failed: $(tail -1 "$T/bf16.log")"
f=$(loss_tail "$T/fp32"); b=$(loss_tail "$T/bf16")
echo "last logged training losses (base 2): fp32 $f| bf16 $b"
python3 - "$f" "$b" <<'PY' || err "bf16 training loss is not within 5% of fp32's: fp32 $f bf16 $b"
import sys
f = [float(x) for x in sys.argv[1].split()]; b = [float(x) for x in sys.argv[2].split()]
mf, mb = sum(f) / len(f), sum(b) / len(b)
print(f"mean fp32 {mf:.4f} bf16 {mb:.4f} ratio {mb / mf:.4f}")
sys.exit(0 if len(f) == 2 and len(b) == 2 and abs(mb - mf) <= 0.05 * mf else 1)
PY

# 2. resume in bf16: 30 updates straight == 15 + --resume 15, byte for byte
common=(--config "$T/tiny.cfg" --set train.precision=bf16 --set train.valid_interval=5 --set train.log_interval=5)
"$LLTRAIN" "${common[@]}" --set checkpoint.save_dir="$T/run" --set train.max_updates=30 2>/dev/null ||
  err "straight bf16 run failed"
mv "$T/run" "$T/straight"
"$LLTRAIN" "${common[@]}" --set checkpoint.save_dir="$T/run" --set train.max_updates=15 2>/dev/null ||
  err "first half failed"
"$LLTRAIN" "${common[@]}" --set checkpoint.save_dir="$T/run" --set train.max_updates=30 --resume 2>"$T/resume.log" ||
  err "bf16 resume failed: $(tail -1 "$T/resume.log")"
grep -q "resumed from" "$T/resume.log" || err "resume did not say it resumed"
cmp -s "$T/straight/checkpoint_last.llm" "$T/run/checkpoint_last.llm" ||
  err "resumed bf16 run differs from the uninterrupted run"

# 3. decoding in bf16 (and fp32) of the bf16-trained model
head -5 "$SRC/tests/data/tiny/valid.en" > "$T/in.txt"
"$BIN/lldecode" --model "$T/bf16/checkpoint_last.llm" --input "$T/in.txt" --precision bf16 --quiet > "$T/out16.txt" ||
  err "lldecode --precision bf16 failed"
"$BIN/lldecode" --model "$T/bf16/checkpoint_last.llm" --input "$T/in.txt" --quiet > "$T/out32.txt" ||
  err "lldecode (fp32) failed"
[ "$(wc -l < "$T/out16.txt")" = 5 ] || err "lldecode --precision bf16 wrote $(wc -l < "$T/out16.txt") lines, not 5"
"$BIN/lldecode" --model "$T/bf16/checkpoint_last.llm" --input "$T/in.txt" --precision fp16 2>/dev/null &&
  err "lldecode accepted --precision fp16"

# 4. dry run: both columns measured, bf16 activations smaller
"$LLTRAIN" --config "$SRC/configs/tiny_test.cfg" --dry-run > "$T/dry.txt" 2>&1 || err "dry run failed"
act=$(grep "activations, peak" "$T/dry.txt")
python3 -c "import sys; v = sys.argv[1].split(); f, b = float(v[-2]), float(v[-1]); sys.exit(0 if 0 < b < 0.75 * f else 1)" \
  "$act" || err "dry run: bf16 activations not below 3/4 of fp32: $act"
exit $fail
