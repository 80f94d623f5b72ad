#!/usr/bin/env bash
# checkpoint.keep_best N (fairseq's --keep-best-checkpoints): the N best
# validations' checkpoints as checkpoint_best_<metric>_<value>_<update>.llm,
# ranked with the files already there (ties to the earlier update), other
# names untouched; --resume drops the interrupted run's files of later updates
# and ends with the uninterrupted run's files, byte for byte; by BLEU the
# higher ranks first; llavg averages them.
source "$(dirname "$0")/lib.sh"
LLTRAIN=$BIN/lltrain

cat > "$T/kb.cfg" <<CFG
model: {d_model: 32, ffn_dim: 64, heads: 2, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.1}
$(tiny_data "$T/bin" 512)
train: {seed: 5, threads: 2, lr: 3e-3, warmup_updates: 4, max_updates: 30, log_interval: 5, valid_interval: 5}
checkpoint: {save_dir: $T/run, keep_best: 3}
CFG
train() { "$LLTRAIN" --config "$T/kb.cfg" --quiet "$@"; }
# the valid records' "update value" pairs (value as the names print it) of run DIR, metric M
records() { sed -n "s/.*\"type\":\"valid\",\"update\":\([0-9]*\),.*\"$2\":\([0-9.]*\).*/\1 \2/p" "$T/$1/metrics.jsonl" |
  awk '{printf "%d %.4f\n", $1, $2}'; }
# the kept files of run DIR, metric M: "update value", best first
kept() { ls "$T/$1" | sed -n "s/^checkpoint_best_$2_\([0-9.]*\)_\([0-9]*\)\.llm$/\2 \1/p" |
  sort -k2,2g${3:-} -k1,1n | awk '{print $1, $2}'; }

# 1. ranked with what is there: a better file (5.0000) stays, a worse one (9.0000) goes; other names
# (another metric, another form) are left alone
mkdir -p "$T/run"
for f in checkpoint_best_loss_5.0000_8.llm checkpoint_best_loss_9.0000_7.llm checkpoint_best_loss_5.1.llm \
  checkpoint_best_bleu_1.0000_3.llm notes.txt; do echo "$f" > "$T/run/$f"; done
train 2> "$T/r1.log" || err "run failed: $(tail -1 "$T/r1.log")"
want=$( (echo "8 5.0000"; records run loss) | sort -k2,2g -k1,1n | head -3)
got=$(kept run loss)
[ "$got" = "$want" ] || err "kept ($(echo $got)) are not the three best ($(echo $want))"
for f in checkpoint_best_loss_5.1.llm checkpoint_best_bleu_1.0000_3.llm notes.txt; do
  [ "$(cat "$T/run/$f" 2> /dev/null)" = "$f" ] || err "$f was touched"
done
[ ! -e "$T/run/checkpoint_best_loss_9.0000_7.llm" ] || err "a worse file than three was kept"
# each real one is a checkpoint of its update; the best of them is checkpoint_best.llm
PYTHONPATH="$SRC/scripts" python3 - "$T/run" <<'PY' || err "kept checkpoints (above)"
import os, re, sys
import llmodel
d = sys.argv[1]
real = []
for f in os.listdir(d):
    m = re.fullmatch(r"checkpoint_best_loss_([0-9.]+)_([0-9]+)\.llm", f)
    if m and os.path.getsize(os.path.join(d, f)) > 100:
        c = llmodel.read(os.path.join(d, f))
        upd = c.values("state.counters")[1]
        if upd != int(m.group(2)):
            sys.exit(f"{f}: holds update {upd}")
        real.append((float(m.group(1)), int(m.group(2)), f))
best = min(real)
if open(os.path.join(d, best[2]), "rb").read() != open(os.path.join(d, "checkpoint_best.llm"), "rb").read():
    sys.exit(f"{best[2]} is not checkpoint_best.llm")
print(f"keep_best 3: {len(real)} of this run's checkpoints kept beside the better file; the best is checkpoint_best")
PY

# 2. --resume: the straight run's files, byte for byte; a file of a later update (the interrupted
# run's, here forged better than all) is removed when the run resumes
rm -rf "$T/run"
train --set checkpoint.keep_best=2 2> /dev/null || err "straight run failed"
mv "$T/run" "$T/straight"
train --set checkpoint.keep_best=2 --set train.max_updates=15 2> /dev/null || err "first half failed"
cp "$T/run/checkpoint_last.llm" "$T/run/checkpoint_best_loss_0.5000_25.llm"
train --set checkpoint.keep_best=2 --resume 2> "$T/resume.log" || err "resume failed: $(tail -1 "$T/resume.log")"
[ "$(kept run loss)" = "$(kept straight loss)" ] ||
  err "resumed: kept $(kept run loss | tr '\n' ' '), straight $(kept straight loss | tr '\n' ' ')"
for f in "$T"/straight/checkpoint_best_loss_*; do
  cmp -s "$f" "$T/run/$(basename "$f")" || err "resumed: $(basename "$f") differs from the straight run's"
done
echo "resume: kept $(kept run loss | tr '\n' ' ')as the straight run"

# 3. by BLEU: the higher first (a file of 90 BLEU stays, one of 0 goes unless all tie), ties to the
# earlier update
rm -rf "$T/run"
mkdir -p "$T/run"
for f in checkpoint_best_bleu_90.0000_2.llm checkpoint_best_bleu_0.0000_99.llm; do echo "$f" > "$T/run/$f"; done
train --set checkpoint.keep_best=2 --set train.valid_bleu=true --set train.best_metric=bleu \
  --set train.max_updates=20 2> "$T/b.log" || err "BLEU run failed: $(tail -1 "$T/b.log")"
want=$( (printf '2 90.0000\n99 0.0000\n'; records run bleu) | sort -k2,2gr -k1,1n | head -2)
got=$(kept run bleu r)
[ -n "$got" ] && [ "$got" = "$want" ] || err "by BLEU: kept ($(echo $got)), the two best ($(echo $want))"
ls "$T/run" | grep -q "checkpoint_best_loss_" && err "by BLEU: files named by loss"

# 4. llavg averages them
"$BIN/llavg" --output "$T/avg.llm" "$T"/straight/checkpoint_best_loss_*.llm 2> "$T/avg.log" ||
  err "llavg of the kept checkpoints failed: $(cat "$T/avg.log")"
exit $fail
