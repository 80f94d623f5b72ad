#!/usr/bin/env bash
# Hostile inputs (issue 13, docs/reliability.md): corrupt token ids, output
# paths that are not regular files, model files whose config contradicts
# their tensors or that hold non-finite weights, forged training state.  Each
# must fail with one line naming the file, a non-zero exit and nothing
# clobbered -- or, for FIFOs and devices, be written to directly.
source "$(dirname "$0")/lib.sh"
export PYTHONPATH=$SRC/scripts
CFG=$SRC/configs/tiny_test.cfg
base=(--config "$CFG" --quiet --set data.dir="$T/bin" --set train.max_updates=6 --set checkpoint.save_interval=3
      --set train.valid_interval=6 --set train.log_interval=3)

# tool expected-substring args...: non-zero exit, exactly one line on stderr containing the substring
check_error() {
  local name=$1 want=$2; shift 2
  "$@" > "$T/out" 2> "$T/err" < /dev/null
  local rc=$?
  [ $rc -ne 0 ] || err "$name: exit status 0"
  [ $rc -lt 128 ] || err "$name: killed by signal $((rc - 128))"
  [ "$(wc -l < "$T/err")" -eq 1 ] || err "$name: expected one line on stderr, got: $(head -c 600 "$T/err")"
  grep -qF -- "$want" "$T/err" || err "$name: '$want' not in: $(head -c 600 "$T/err")"
}

# forge SRC DST CODE: rewrite a model file through scripts/llmodel.py; CODE edits
# cfg (the config text) and t (name -> [dtype, shape, bytearray]) with setf/seti64
forge() {
python3 - "$@" <<'PY'
import struct, sys, llmodel
src, dst, code = sys.argv[1:4]
m = llmodel.read(src)
cfg = m.config
t = {n: [x.dtype, list(x.shape), bytearray(m.raw(n))] for n, x in m.tensors.items()}
def setf(name, i, v): struct.pack_into("<f", t[name][2], 4 * i, v)
def seti64(name, i, v): struct.pack_into("<q", t[name][2], 8 * i, v)
exec(code)
llmodel.write(dst, cfg, m.vocab, [(n, d, s, bytes(b)) for n, (d, s, b) in t.items()])
PY
}

"$BIN/lltrain" "${base[@]}" --set checkpoint.save_dir="$T/run" 2> "$T/train.log" ||
  { echo "FAIL: training failed: $(tail -1 "$T/train.log")" >&2; exit 1; }
M=$T/run/checkpoint_last.llm

# ---- 1. token ids are checked when a dataset is opened -----------------------
# poke(file, token index, value): overwrite one int32 token in a token file (header is 64 bytes)
poke() { python3 -c "import struct,sys; f=open(sys.argv[1],'r+b'); f.seek(64+4*int(sys.argv[2])); f.write(struct.pack('<i',int(sys.argv[3])))" "$@"; }
for v in 1000000 -7 100; do
  rm -rf "$T/cbin"; cp -r "$T/bin" "$T/cbin"
  poke "$T/cbin/train.0.en-es.src.bin" 5 $v
  check_error "token id $v (lltrain)" "train.0.en-es.src.bin: token id $v outside the vocabulary [0, 100) at sentence 0 token 5" \
    "$BIN/lltrain" "${base[@]}" --set data.dir="$T/cbin" --set checkpoint.save_dir="$T/crun"
  [ ! -e "$T/crun/checkpoint_last.llm" ] || err "token id $v: a checkpoint was written"
done
# an in-range flip is caught by the checksum; in the validation set too
rm -rf "$T/cbin"; cp -r "$T/bin" "$T/cbin"
poke "$T/cbin/valid.0.en-es.tgt.bin" 3 17
check_error "in-range flip (valid)" "valid.0.en-es.tgt.bin: checksum mismatch" \
  "$BIN/lltrain" "${base[@]}" --set data.dir="$T/cbin" --set checkpoint.save_dir="$T/crun"
rm -rf "$T/crun"

# ---- 2. outputs that are not regular files are written into, never replaced ----
printf 'the cat\nthe dog\n' > "$T/in.txt"
dec() { decm "$M" "$@"; }
decm() { local m=$1; shift; "$BIN/lldecode" --model "$m" --quiet --beam 1 --input "$T/in.txt" "$@"; } # decm FILE: another model
mkfifo "$T/fifo"
timeout 20 cat "$T/fifo" > "$T/fifo.out" &
reader=$!
dec --output "$T/fifo" 2> "$T/err" || err "lldecode --output FIFO failed: $(cat "$T/err")"
wait $reader
[ -p "$T/fifo" ] || err "lldecode replaced the FIFO"
[ "$(wc -l < "$T/fifo.out")" -eq 2 ] || err "the FIFO's reader got $(wc -l < "$T/fifo.out") lines, expected 2"
timeout 20 cat "$T/fifo" > "$T/fifo.llm" &
reader=$!
"$BIN/llavg" --output "$T/fifo" "$M" 2> "$T/err" || err "llavg --output FIFO failed: $(cat "$T/err")"
wait $reader
[ -p "$T/fifo" ] || err "llavg replaced the FIFO"
python3 "$SRC/scripts/llmodel.py" "$T/fifo.llm" > /dev/null || err "llavg through a FIFO wrote an unreadable model"
# a character device: our own copy of /dev/null when root (never risk the real one), else /dev/null
if [ "$(id -u)" -eq 0 ] && mknod "$T/null" c 1 3 2> /dev/null; then cdev=$T/null; else cdev=/dev/null; fi
dec --output "$cdev" 2> "$T/err" || err "lldecode --output $cdev failed: $(cat "$T/err")"
[ -c "$cdev" ] || err "lldecode replaced the character device $cdev"
dec --output /dev/fd/1 > "$T/stdout.txt" 2> "$T/err" || err "lldecode --output /dev/fd/1 failed: $(cat "$T/err")"
[ "$(wc -l < "$T/stdout.txt")" -eq 2 ] || err "--output /dev/fd/1 wrote $(wc -l < "$T/stdout.txt") lines"
# a symlink is followed: its target is replaced atomically, the link stays a link
mkdir "$T/real"; echo old > "$T/real/out.txt"; ln -s "$T/real/out.txt" "$T/link.txt"
dec --output "$T/link.txt" 2> "$T/err" || err "lldecode --output symlink failed: $(cat "$T/err")"
[ -L "$T/link.txt" ] || err "lldecode replaced the symlink with a regular file"
[ "$(wc -l < "$T/real/out.txt")" -eq 2 ] || err "the symlink's target was not written"
ls "$T/real" | grep -q tmp && err "a temporary was left next to the symlink's target"
ln -s "$T/real/model.llm" "$T/link.llm"; "$BIN/llavg" --output "$T/real/model.llm" "$M" 2> /dev/null # (a model file: a
# training checkpoint is never replaced by one: test_run_guard.sh)
"$BIN/llavg" --output "$T/link.llm" "$M" 2> "$T/err" || err "llavg --output symlink failed: $(cat "$T/err")"
[ -L "$T/link.llm" ] || err "llavg replaced the symlink"
ln -s "$T/nowhere/x.txt" "$T/dangling.txt"
check_error "dangling symlink" "dangling.txt: dangling symbolic link" dec --output "$T/dangling.txt"
[ -L "$T/dangling.txt" ] || err "the dangling symlink was replaced"
check_error "directory" "is a directory" dec --output "$T/real"

# ---- 5. model files: the stored config must agree with the tensors, weights finite ----
forge "$M" "$T/heads3.llm" 'cfg = cfg.replace("heads: 2", "heads: 3")'
check_error "heads 3, d_model 32" "heads3.llm: stored config: model.d_model (32) is not divisible by model.heads (3)" \
  decm "$T/heads3.llm"
forge "$M" "$T/layers1.llm" 'cfg = cfg.replace("enc_layers: 2", "enc_layers: 1")'
check_error "fewer layers in the config" "layers1.llm: tensor 'enc.layers.1." decm "$T/layers1.llm"
forge "$M" "$T/ffn.llm" 'cfg = cfg.replace("ffn_dim: 64", "ffn_dim: 48")'
check_error "ffn_dim vs shapes" "ffn.llm: tensor 'enc.layers.0.ffn.fc1.weight' has shape [64,32], the model needs [48,32]" \
  decm "$T/ffn.llm"
for v in nan inf -inf; do
  forge "$M" "$T/$v.llm" "setf('enc.layers.0.self_attn.qkv.weight', 7, float('$v'))"
  check_error "$v weight (lldecode)" "$v.llm: tensor 'enc.layers.0.self_attn.qkv.weight' holds a non-finite value" \
    decm "$T/$v.llm"
done
check_error "nan weight (llprune)" "nan.llm: tensor 'enc.layers.0.self_attn.qkv.weight' holds a non-finite value" \
  "$BIN/llprune" --model "$T/nan.llm" --output "$T/pruned.llm"
[ ! -e "$T/pruned.llm" ] || err "llprune wrote an output for a NaN model"

[ $fail -eq 0 ] && echo "test_hostile_inputs: all checks passed"
exit $fail
