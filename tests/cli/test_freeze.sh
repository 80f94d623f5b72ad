#!/usr/bin/env bash
# train.freeze: fine-tuning with some tensors fixed.  From a 10-update model (train.init_from),
# 10 more updates with the encoder frozen, weight decay on: every encoder tensor keeps the
# starting model's bytes, every other tensor moves; the run without freezing moves the encoder
# too.  A pattern that matches nothing, one that matches everything, and one that matches only the
# latent logits are refused.  (The ZeRO-1 path: tests/cli/test_dist_mpi.sh, `freeze`.)
source "$(dirname "$0")/lib.sh"
cat > "$T/ft.cfg" <<CFG
model: {d_model: 64, ffn_dim: 128, heads: 4, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.1}
$(tiny_data "$T/bin" 2048)
train: {seed: 1, threads: 2, lr: 3e-3, warmup_updates: 5, max_updates: 10, log_interval: 5, valid_interval: 10,
        weight_decay: 0.1}
checkpoint: {save_dir: $T/base}
CFG
"$BIN/lltrain" --config "$T/ft.cfg" 2> "$T/base.log" || { err "base run failed: $(tail -1 "$T/base.log")"; exit 1; }
for f in enc none; do
  set=(--set train.init_from="$T/base/checkpoint_last.llm" --set checkpoint.save_dir="$T/$f")
  [ $f = enc ] && set+=(--set "train.freeze=enc.layers.*, enc.final_ln.*")
  "$BIN/lltrain" --config "$T/ft.cfg" "${set[@]}" 2> "$T/$f.log" || err "fine-tuning ($f) failed: $(tail -1 "$T/$f.log")"
done
grep -q "train.freeze: 26 tensors frozen" "$T/enc.log" || err "no line saying what was frozen: $(grep freeze "$T/enc.log")"
python3 - "$SRC/scripts" "$T/base/checkpoint_last.llm" "$T/enc/checkpoint_last.llm" "$T/none/checkpoint_last.llm" <<'PY' ||
import sys
sys.path.insert(0, sys.argv[1])
import llmodel
base, enc, none = (llmodel.read(p) for p in sys.argv[2:])
names = [n for n in base.tensors if not n.startswith(("optim.", "state."))]
frozen = [n for n in names if n.startswith(("enc.layers.", "enc.final_ln."))]
assert len(frozen) == 26, frozen
for n in names:
    same = base.raw(n) == enc.raw(n)
    assert same == (n in frozen), (n, "frozen but moved" if n in frozen else "trainable but did not move")
assert all(base.raw(n) != none.raw(n) for n in frozen), "without freezing the encoder did not move"
PY
  err "the frozen tensors moved, or the others did not"
for bad in "enc.layer.*|matches no parameter" "*|freezes every parameter"; do
  "$BIN/lltrain" --config "$T/ft.cfg" --set checkpoint.save_dir="$T/bad" --set "train.freeze=${bad%%|*}" 2> "$T/err" &&
    err "train.freeze=${bad%%|*} was accepted"
  grep -q "${bad#*|}" "$T/err" || err "train.freeze=${bad%%|*}: $(tail -1 "$T/err")"
done
"$BIN/lltrain" --config "$SRC/configs/tiny_latent.cfg" --set data.dir="$T/lbin" --set checkpoint.save_dir="$T/lat" \
  --set train.freeze=dec.latent_logits --set train.max_updates=1 2> "$T/err" && err "freezing the latent logits was accepted"
grep -q "matches only the latent-depth logits" "$T/err" || err "freezing the latent logits: $(tail -1 "$T/err")"
"$BIN/lltrain" --config "$SRC/configs/tiny_latent.cfg" --set data.dir="$T/lbin" --set checkpoint.save_dir="$T/lat2" \
  --set "train.freeze=dec.*" --set train.max_updates=1 2> "$T/lat2.log" || err "freezing dec.* of a latent model failed"
grep -q "'dec.\*' also matches the latent-depth logits: they are left to latent.\* settings" "$T/lat2.log" ||
  err "no warning that dec.* leaves the latent logits alone: $(grep freeze "$T/lat2.log")"
exit $fail
