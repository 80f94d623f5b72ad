#!/usr/bin/env bash
# train.ema_decay, the weights' moving average (fairseq's --ema-decay, Marian's
# --exponential-smoothing), end to end on real files: each checkpoint's model is
# the average of its raw weights (optim.params) by the recurrence, update after
# update; validation scores the average; the average leaves training itself
# alone; --resume continues bit for bit, with the average, without it, or
# starting one.
source "$(dirname "$0")/lib.sh"
LLTRAIN=$BIN/lltrain

cat > "$T/ema.cfg" <<CFG
model: {d_model: 32, ffn_dim: 64, heads: 2, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.1}
$(tiny_data "$T/bin" 512)
train: {seed: 3, threads: 2, lr: 3e-3, warmup_updates: 4, max_updates: 8, log_interval: 2, valid_interval: 4}
checkpoint: {save_dir: $T/run, save_interval: 1, keep_last: 0}
CFG
train() { "$LLTRAIN" --config "$T/ema.cfg" "$@"; }
D=0.75 START=3

# 1. a run with the average (from update 3), and the same run without it
train --set train.ema_decay=$D --set train.ema_start_update=$START 2> "$T/ema.log" ||
  err "EMA run failed: $(tail -1 "$T/ema.log")"
grep -q "train.ema_decay 0.75: a moving average of the weights (averaging from update 3)" "$T/ema.log" ||
  err "the moving average is not logged: $(head -3 "$T/ema.log")"
mv "$T/run" "$T/ema"
train 2> "$T/plain.log" || err "plain run failed: $(tail -1 "$T/plain.log")"
mv "$T/run" "$T/plain"

# 2. the recurrence, checkpoint by checkpoint: e_n = p_n before update 3, then
# fma(d, e_(n-1) - p_n, p_n); the raw weights are the run without the average's
PYTHONPATH="$SRC/scripts" python3 - "$T" $D $START <<'PY' || err "the moving average (above)"
import struct, sys
import llmodel
T, d, start = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
def flat(path):
    """The model tensors laid out as the flat parameter buffer (16 reserved
    elements, each tensor at the next multiple of 16) and optim.params."""
    m = llmodel.read(path)
    raw = m.values("optim.params") if "optim.params" in m.tensors else None
    out, off = [0.0] * 16, 16
    for name, t in m.tensors.items():
        if name.startswith(("optim.", "state.")):
            continue
        pad = -off % 16
        out += [0.0] * pad
        off += pad
        v = m.values(name)
        out += v
        off += len(v)
    return out, raw
bad = []
prev = None
for n in range(1, 9):
    e, p = flat(f"{T}/ema/checkpoint_{n}.llm")
    plain, none = flat(f"{T}/plain/checkpoint_{n}.llm")
    if p is None or none is not None or len(e) != len(p):
        sys.exit(f"update {n}: optim.params {'missing' if p is None else len(p)}, model {len(e)}; "
                 f"the plain run's: {'none' if none is None else 'present'}")
    if p != plain:
        bad.append(f"update {n}: the raw weights differ from the run without the average")
    if n < start:
        if e != p:
            bad.append(f"update {n} (before ema_start_update): the average is not the weights")
    else:
        off = ulp = moved = 0
        for a, x, y in zip(e, prev, p):
            want = f32(y + d * f32(x - y))  # (d * (x - y) is exact in a double; one rare double rounding)
            if a != want:
                off += 1
                ulp = max(ulp, abs(a - want) / max(abs(want), 1e-30))
            moved += a != y
        if off > len(e) // 10000 or ulp > 2 ** -22:
            bad.append(f"update {n}: {off} of {len(e)} elements off the recurrence (worst {ulp:.2e} relative)")
        if moved < len(e) // 2:
            bad.append(f"update {n}: only {moved} of {len(e)} averaged elements differ from the weights")
    prev = e
for b in bad:
    print(b)
print(f"moving average: 8 checkpoints follow e = fma({d}, e - p, p) from update {start}")
sys.exit(1 if bad else 0)
PY

# 3. validation scores the average: the validation nll at updates 4 and 8 is the
# nll lldecode --score-reference gives the checkpoint's model (the average)
for n in 4 8; do
  "$BIN/lldecode" --model "$T/ema/checkpoint_$n.llm" --input "$SRC/tests/data/tiny/valid.en" \
    --score-reference "$SRC/tests/data/tiny/valid.es" --lenpen 0 > "$T/sc.$n" 2> "$T/sc.err" ||
    err "score-reference on checkpoint_$n: $(tail -1 "$T/sc.err")"
  rec=$(grep "\"type\":\"valid\",\"update\":$n," "$T/ema/metrics.jsonl")
  want=$(sed 's/.*"nll":\([0-9.e+-]*\).*/\1/' <<< "$rec") tok=$(sed 's/.*"tokens":\([0-9]*\).*/\1/' <<< "$rec")
  got=$(awk -v t="$tok" '{s += $1} END {printf "%.6f", -s / t}' "$T/sc.$n")
  [ -n "$want" ] && [ "$got" = "$want" ] || err "update $n: validation nll $want, the saved model's $got"
done
vplain=$(grep '"type":"valid","update":8,' "$T/plain/metrics.jsonl" | sed 's/.*"nll":\([0-9.e+-]*\).*/\1/')
[ "$vplain" != "$want" ] || err "validation gives the same nll with the average as without ($want)"
echo "validation nll at update 8: $want on the average, $vplain on the weights"

# 4. --resume: 8 straight == 4 + 4 resumed, byte for byte, with the average
train --set train.ema_decay=$D --set train.ema_start_update=$START --set train.max_updates=4 2> /dev/null ||
  err "first half failed"
train --set train.ema_decay=$D --set train.ema_start_update=$START --resume 2> "$T/resume.log" ||
  err "resume failed: $(tail -1 "$T/resume.log")"
cmp -s "$T/ema/checkpoint_last.llm" "$T/run/checkpoint_last.llm" ||
  err "resumed run with the moving average differs from the uninterrupted one"

# 4b. the same in bf16, where validation swaps the average into the weight copy and back
for half in 8 4; do
  rm -rf "$T/run"
  train --set train.precision=bf16 --set train.ema_decay=$D --set train.max_updates=$half 2> /dev/null ||
    err "bf16 run ($half updates) failed"
  [ $half = 8 ] && mv "$T/run" "$T/bf16"
done
train --set train.precision=bf16 --set train.ema_decay=$D --resume 2> /dev/null || err "bf16 resume failed"
cmp -s "$T/bf16/checkpoint_last.llm" "$T/run/checkpoint_last.llm" ||
  err "bf16: the resumed run with the moving average differs from the uninterrupted one"

# 5a. resuming it without the average goes on from the raw weights: its model is then the plain run's
rm -rf "$T/run"
train --set train.ema_decay=$D --set train.ema_start_update=$START --set train.max_updates=4 2> /dev/null ||
  err "first half failed"
train --resume 2> "$T/drop.log" || err "resume without the average failed: $(tail -1 "$T/drop.log")"
grep -q "moving average of the weights is dropped" "$T/drop.log" || err "the dropped average is not logged"
PYTHONPATH="$SRC/scripts" python3 - "$T" <<'PY' || err "resumed without the average (above)"
import sys
import llmodel
T = sys.argv[1]
model = lambda m: [v for n in m.tensors if not n.startswith(("optim.", "state.")) for v in m.values(n)]
a, b = llmodel.read(f"{T}/run/checkpoint_8.llm"), llmodel.read(f"{T}/plain/checkpoint_8.llm")
if "optim.params" in a.tensors:
    sys.exit("resumed without the average, the checkpoint still keeps raw weights apart")
if model(a) != model(b):
    sys.exit("resumed without the average, the model is not the run without one's")
print("the average dropped on --resume: training goes on from the raw weights")
PY

# 5b. resuming the plain run with an average starts it from the checkpoint's weights:
# update 5's average is fma(d, w_4 - w_5, w_5)
rm -rf "$T/run"
train --set train.max_updates=4 2> /dev/null || err "plain first half failed"
train --set train.ema_decay=$D --resume 2> "$T/start.log" || err "resume starting an average failed"
grep -q "holds no moving average of the weights" "$T/start.log" || err "the started average is not logged"
PYTHONPATH="$SRC/scripts" python3 - "$T" $D <<'PY' || err "a started average (above)"
import struct, sys
import llmodel
T, d = sys.argv[1], float(sys.argv[2])
f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
w4, k5 = llmodel.read(f"{T}/run/checkpoint_4.llm"), llmodel.read(f"{T}/run/checkpoint_5.llm")
raw5 = k5.values("optim.params")
a, e, w5, off = [], [], [], 16
for n in k5.tensors:
    if n.startswith(("optim.", "state.")):
        continue
    off += -off % 16
    v = k5.values(n)
    a += w4.values(n)
    e += v
    w5 += raw5[off:off + len(v)]
    off += len(v)
bad = sum(1 for x, y, z in zip(a, w5, e) if z != f32(y + d * f32(x - y)))
if bad > len(e) // 10000 or a == e:
    sys.exit(f"update 5 after resuming with a new average: {bad} of {len(e)} elements are not fma(d, w_4 - w_5, w_5)")
print("a started average: its first step averages the checkpoint's weights")
PY

# 6. the range: a decay of 1 would never move
train --set train.ema_decay=1 --set checkpoint.save_dir="$T/nothing" 2> "$T/err" && err "train.ema_decay 1 accepted"
grep -q "train.ema_decay" "$T/err" || err "train.ema_decay 1: $(cat "$T/err")"
[ ! -e "$T/nothing" ] || err "a refused config created its save_dir"
exit $fail
