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
trap 'kill -9 $first 2> /dev/null; rm -rf "$T"' EXIT
for _ in $(seq 100); do grep -q "pid $first" "$R/.lltrain.lock" 2> /dev/null && break; sleep 0.1; done
for extra in --resume "--set train.max_updates=9"; do
  start=$(date +%s)
  # shellcheck disable=SC2086
  timeout 20 "${A[@]}" --set train.max_updates=100000 $extra 2> "$T/log"; rc=$?
  [ $rc -ne 0 ] || err "second lltrain ($extra) exited 0"
  [ $(( $(date +%s) - start )) -le 5 ] || err "second lltrain ($extra) did not fail at once"
  grep -q "error: $R: another lltrain (PID $first) is running with this checkpoint.save_dir" "$T/log" ||
    err "second lltrain ($extra): $(cat "$T/log")"
done
kill -0 $first 2> /dev/null || err "the first run stopped: $(tail -2 "$T/first")"
kill -9 $first; wait $first 2> /dev/null
"${A[@]}" --set train.max_updates=10 --resume 2> "$T/log" || err "resume after the holder's SIGKILL: $(cat "$T/log")"
python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$R/metrics.jsonl" || err "metrics.jsonl is not JSON lines"

# 2. --resume onto other data: another sentencepiece model (a corpus edit retrains it) is refused,
#    saying what differs; changed corpora under the same model and changed settings are listed and logged
D=$T/data2; mkdir -p "$D"; cp "$SRC"/tests/data/tiny/train.{en,es} "$D/"
cat > "$D/c.cfg" <<CFG
model: {d_model: 32, ffn_dim: 64, heads: 2, enc_layers: 1, dec_layers: 1, max_positions: 128}
data:
  dir: $D/bin
  vocab_size: 100
  train:
    - {src: train.en, tgt: train.es, src_lang: en, tgt_lang: es}
  max_tokens: 512
  max_len: 64
train: {seed: 1, threads: 1, lr: 1e-3, warmup_updates: 2, max_updates: 4, log_interval: 2, valid_interval: 0}
checkpoint: {save_dir: $D/run, save_interval: 2, keep_last: 0}
CFG
"$BIN/lltrain" --config "$D/c.cfg" --quiet 2> "$T/log" || err "data2 run: $(cat "$T/log")"
cp "$D/bin/spm.model" "$D/fixed.model"
# another vocabulary size: one error that says so, no checkpoint tried after another, none changed
ck=$(cat "$D"/run/*.llm | cksum)
"$BIN/lltrain" --config "$D/c.cfg" --quiet --resume --set data.vocab_size=90 --set data.dir="$D/bin90" 2> "$T/log"; rc=$?
[ $rc -ne 0 ] && [ "$(wc -l < "$T/log")" -eq 1 ] &&
  grep -q "error: --resume: $D/run/checkpoint_last.llm was trained on a sentencepiece vocabulary of 100 pieces, the data's has 90 (the corpus, data.vocab_size or data.spm_model changed)" "$T/log" ||
  err "resume onto a 90-piece vocabulary: exit $rc: $(cat "$T/log")"
[ "$(cat "$D"/run/*.llm | cksum)" = "$ck" ] || err "a refused resume changed a checkpoint"
sed -i '1,60d' "$D/train.en" "$D/train.es"
"$BIN/lltrain" --config "$D/c.cfg" --quiet --resume --set train.max_updates=6 2> "$T/log"; rc=$?
[ $rc -ne 0 ] && grep -q "error: --resume: $D/bin/spm.model is not the sentencepiece model $D/run/checkpoint_last.llm was trained with: [0-9]* of 100 ids now mean other pieces (id [0-9]*: '.*' was '.*')" "$T/log" ||
  err "resume onto a retrained sentencepiece model: exit $rc: $(cat "$T/log")"
# the same model (data.spm_model), 60 lines fewer, other lr and dropout: allowed, listed, logged
cp "$SRC"/tests/data/tiny/train.{en,es} "$D/"
rm -rf "$D/bin" "$D/run"
"$BIN/lltrain" --config "$D/c.cfg" --quiet --set data.spm_model="$D/fixed.model" 2> "$T/log" || err "spm_model run: $(cat "$T/log")"
sed -i '1,60d' "$D/train.en" "$D/train.es"
"$BIN/lltrain" --config "$D/c.cfg" --quiet --resume --set data.spm_model="$D/fixed.model" --set train.max_updates=6 \
  --set train.lr=2e-3 --set model.dropout=0.3 2> "$T/log" || err "resume with changed data and settings: $(cat "$T/log")"
grep -q "the prepared data changed since $D/run/checkpoint_last.llm was saved (manifest hash [0-9a-f]* -> [0-9a-f]*); same vocabulary" "$T/log" ||
  err "changed corpus not reported: $(cat "$T/log")"
grep -q "resuming with 3 changed setting(s): model.dropout 0.1 -> 0.3; train.lr 0.001 -> 0.002; train.max_updates 4 -> 6" "$T/log" ||
  err "changed settings not listed: $(cat "$T/log")"
grep -q '^{"type":"resume","update":4,"data_changed":true,"changes":{"model.dropout":\["0.1","0.3"\],"train.lr":\["0.001","0.002"\]}}$' "$D/run/metrics.jsonl" ||
  err "no resume record in metrics.jsonl: $(grep resume "$D/run/metrics.jsonl")"
# a checkpoint from before these records (no data hash) still resumes, with a warning
PYTHONPATH=$SRC/scripts python3 - "$D/run/checkpoint_last.llm" <<'PY'
import struct, sys, llmodel
m = llmodel.read(sys.argv[1])
t = {n: bytearray(m.raw(n)) for n in m.tensors}
struct.pack_into("<q", t["state.extra"], 8 * 3, 0)
llmodel.write(sys.argv[1], m.config, m.vocab, [(n, x.dtype, list(x.shape), bytes(t[n])) for n, x in m.tensors.items()])
PY
"$BIN/lltrain" --config "$D/c.cfg" --quiet --resume --set data.spm_model="$D/fixed.model" --set train.max_updates=8 \
  --set train.lr=2e-3 --set model.dropout=0.3 2> "$T/log" || err "resume of an older checkpoint: $(cat "$T/log")"
grep -q "warning: .*checkpoint_last.llm predates the record of its training data" "$T/log" || err "no warning for an old checkpoint: $(cat "$T/log")"

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
"$BIN/llprune" --model "$R/checkpoint_last.llm" --dec-layers-to-keep 0 --output "$T/pruned.llm" > /dev/full 2> "$T/log" &&
  err "llprune > /dev/full exited 0"
grep -q "write failed" "$T/log" || err "llprune > /dev/full: $(cat "$T/log")"

# 4. out of memory while reading is an error naming the file, never end of input
# (not in the AddressSanitizer build: its shadow memory cannot be mapped under ulimit -v)
if grep -q __asan_init "$BIN/lldecode"; then
  echo "note: ASan build: the ulimit -v cases run in the other builds"
else
  (ulimit -v 1500000; "$BIN/lldecode" --model "$R/checkpoint_last.llm" --input /dev/zero > "$T/out" 2> "$T/log")
  rc=$?
  [ $rc -ne 0 ] && grep -q "error: /dev/zero:1: read error: Cannot allocate memory" "$T/log" ||
    err "lldecode --input /dev/zero under ulimit -v: exit $rc: $(cat "$T/log")"
  (ulimit -v 1500000; head -c 2000000000 /dev/zero | "$BIN/lleval" --ref - --input "$T/in.txt" > /dev/null 2> "$T/log")
  rc=$?
  [ $rc -ne 0 ] && grep -q "error: <stdin>: read error after [0-9]* bytes: Cannot allocate memory" "$T/log" ||
    err "lleval --ref - (2 GB) under ulimit -v: exit $rc: $(cat "$T/log")"
fi

# 5. strict numbers in every tool's flags: the whole string, range checked, the message gives the range
want() { # want "PATTERN" CMD...: CMD fails with one line matching PATTERN
  local pat=$1; shift
  "$@" > /dev/null 2> "$T/log"; local rc=$?
  [ $rc -ne 0 ] && [ "$(wc -l < "$T/log")" -eq 1 ] && grep -q -- "$pat" "$T/log" || err "$*: exit $rc: $(cat "$T/log")"
}
for v in O.9 abc 0.5x -0.9 1.5 "" " 0.5" 1e-400 0x1p-1 infinity; do # (hex and words: decimal only, round 5)
  want "error: --threshold: .*\[0, 1\]" "$BIN/llprune" --model "$R/checkpoint_last.llm" --threshold "$v" --output "$T/p.llm"
done
[ ! -e "$T/p.llm" ] || err "llprune wrote a model despite a bad --threshold"
for v in abc 2x -1 0 99999999999999999999; do
  want "error: --last: expected an integer in \[1, 1000000\], got '$v'" "$BIN/llavg" --output "$T/a.llm" --dir "$R" --last "$v"
done
want "error: --width: expected an integer in \[0, 40\], got '5x'" "$BIN/lleval" --ref "$T/in.txt" --input "$T/in.txt" --width 5x
want "error: --smooth-value: expected a number" "$BIN/lleval" --ref "$T/in.txt" --input "$T/in.txt" --smooth-value 0.1.
want "error: --beam: expected an integer in \[1, 1024\], got '4 '" "$BIN/lldecode" --model "$R/checkpoint_last.llm" --beam "4 "
want "error: --batch 99999999999x5: expected BxT" "${A[@]}" --dry-run --batch 99999999999x5
want "error: --batch 4x5y: expected BxT" "${A[@]}" --dry-run --batch 4x5y
want "train.threads expects an int, got '2x'" "${A[@]}" --threads 2x
want "error: --enc-layers-to-keep: '0,-1' is not a list" "$BIN/llprune" --model "$R/checkpoint_last.llm" --enc-layers-to-keep 0,-1 --output "$T/p.llm"

# 6. config numbers: underflow and integers beyond their type, with the allowed range
want "train.lr: 1e-320 underflows a float.*allowed: (0, 10\]" "${A[@]}" --set train.lr=1e-320
want "train.max_updates must be an integer in \[0, 2147483647\], got 3000000000" "${A[@]}" --set train.max_updates=3000000000
want "train.seed must be an integer in \[0, 2147483647\], got 18446744073709551617" "${A[@]}" --set train.seed=18446744073709551617
want "data.max_tokens expects an int, got '1e20' (allowed: \[1, 2147483647\])" "${A[@]}" --set data.max_tokens=1e20
want "train.lr expects a float, got '0x1p-9'" "${A[@]}" --set train.lr=0x1p-9

# 7. messages naming the key, the file and the reason
want "error: checkpoint.save_dir is empty: set it to a directory" "${A[@]}" --set checkpoint.save_dir=
want "error: data.dir is empty: set it to a directory" "${A[@]}" --set data.dir=
mkdir -p "$T/cfgdir"
want "error: $T/cfgdir: read error after 0 bytes: Is a directory" "$BIN/lltrain" --config "$T/cfgdir"
echo "not a model" > "$T/bad.model"
want "error: data.spm_model $T/bad.model: cannot load sentencepiece model" "${A[@]}" --set data.dir="$T/bin_bad" \
  --set data.spm_model="$T/bad.model" --set checkpoint.save_dir="$T/r_bad"
# ranks started with different configs are told which keys differ (not "another rank probably died")
if command -v mpirun > /dev/null && ldd "$BIN/lltrain" | grep -q libmpi; then
  ( . "$SRC/tests/cli/dist_env.sh"
    mpirun2 bash -c 'exec "$0" "$@" --set model.d_model=$((32 + 32 * OMPI_COMM_WORLD_RANK)) --set train.lr=$((OMPI_COMM_WORLD_RANK + 1))e-3' \
      "${A[@]}" --set checkpoint.save_dir="$T/mpi" --set train.max_updates=2 > "$T/mpi.log" 2>&1 )
  grep -q "lltrain: rank 1: the config differs from rank 0's in 2 key(s) (rank 0 -> this rank): model.d_model 32 -> 64; train.lr 0.001 -> 0.002" \
    "$T/mpi.log" || err "mismatched ranks: $(grep lltrain "$T/mpi.log")"
else
  echo "no mpirun or no MPI build: skipping the ranks' config check"
fi

# 8. corpora from pipes: refused at once with a message that says why (a FIFO hung llprep forever,
#    /dev/stdin from a pipe failed with "Vocabulary size too high")
mkfifo "$T/fifo.en"
sed -e "s#src: train.en#src: $T/fifo.en#" -e "s#dir: $D/bin#dir: $T/fifobin#" "$D/c.cfg" > "$D/fifo.cfg"
timeout 20 "$BIN/llprep" --config "$D/fifo.cfg" > /dev/null 2> "$T/log"; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "error: $D/fifo.cfg:6: data.train\[0\].src $T/fifo.en: not a regular file (a pipe, FIFO, device or directory); ll reads each input more than once" "$T/log" ||
  err "llprep on a FIFO: exit $rc: $(cat "$T/log")"
sed -e "s#src: train.en#src: /dev/stdin#" -e "s#dir: $D/bin#dir: $T/stdinbin#" "$D/c.cfg" > "$D/stdin.cfg"
cat "$D/train.en" | timeout 20 "$BIN/lltrain" --config "$D/stdin.cfg" --set checkpoint.save_dir="$T/stdinrun" > /dev/null 2> "$T/log"; rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "error: $D/stdin.cfg:6: data.train\[0\].src /dev/stdin: not a regular file" "$T/log" ||
  err "lltrain with /dev/stdin from a pipe: exit $rc: $(cat "$T/log")"

# 10. SIGTERM to lldecode removes its temporary output; the exit status still says it was killed
for i in $(seq 3000); do echo "the house is very big and the cat sleeps on the red chair $i"; done > "$T/many.txt"
mkdir -p "$T/sig"
"$BIN/lldecode" --model "$R/checkpoint_last.llm" --input "$T/many.txt" --output "$T/sig/out.txt" --beam 5 --threads 1 2> /dev/null &
dec=$!
for _ in $(seq 100); do ls "$T/sig" | grep -q "out.txt.tmp" && break; sleep 0.05; done
ls "$T/sig" | grep -q "out.txt.tmp" || err "lldecode wrote no temporary (test setup)"
kill -TERM $dec; wait $dec; rc=$?
[ $rc -eq 143 ] || err "lldecode after SIGTERM: exit $rc, not 143"
[ -z "$(ls "$T/sig")" ] || err "SIGTERM left $(ls "$T/sig") behind"

# 10. lldecode reads UTF-8 only, as training does: invalid bytes stop it naming the line, writing nothing
printf 'hola\nbad \377 here\n' > "$T/bad_utf8.txt"
want "error: $T/bad_utf8.txt:2: invalid UTF-8 at byte 5 of the line" "$BIN/lldecode" --model "$R/checkpoint_last.llm" \
  --input "$T/bad_utf8.txt" --output "$T/utf8_out.txt"
[ ! -e "$T/utf8_out.txt" ] || err "lldecode wrote output for invalid UTF-8"

# 10. a config file has a size cap (/dev/zero is refused at once, not read into 9 GB)
want "error: /dev/zero: larger than 16777216 bytes; refusing to read it" "$BIN/lltrain" --config /dev/zero

# 11. an output that is an input, or a training checkpoint, is never replaced by a tool's model file;
#     llavg weighs each checkpoint once; an option given twice is refused, not overridden
cp "$R/checkpoint_last.llm" "$T/keep.llm"
sum() { cksum < "$1"; }
before=$(sum "$R/checkpoint_last.llm")
want "error: $R/checkpoint_last.llm: the output is an input too; refusing to replace it" \
  "$BIN/llprune" --model "$R/checkpoint_last.llm" --output "$R/checkpoint_last.llm"
ln -f "$T/keep.llm" "$T/hardlink.llm"
want "error: $T/hardlink.llm: the output is an input too" "$BIN/llavg" --output "$T/hardlink.llm" "$R/checkpoint_5.llm" "$T/keep.llm"
want "error: $R/checkpoint_last.llm: a training checkpoint .*choose another output" \
  "$BIN/llavg" --output "$R/checkpoint_last.llm" "$R/checkpoint_5.llm" "$R/checkpoint_10.llm"
want "error: $R/checkpoint_last.llm: a training checkpoint" "$BIN/llprune" --model "$R/checkpoint_5.llm" --output "$R/checkpoint_last.llm"
[ "$(sum "$R/checkpoint_last.llm")" = "$before" ] || err "a refused output was changed anyway"
want "error: --output $T/in.txt: it is the --input too; refusing to replace it" \
  "$BIN/lldecode" --model "$R/checkpoint_last.llm" --input "$T/in.txt" --output "$T/in.txt"
[ "$(cat "$T/in.txt")" = "hello world" ] || err "lldecode replaced its input"
want "error: $R/checkpoint_5.llm is given twice: each checkpoint once" "$BIN/llavg" --output "$T/a.llm" "$R/checkpoint_5.llm" "$R/checkpoint_5.llm"
want "error: --dir D --last N or checkpoint files, not both" "$BIN/llavg" --output "$T/a.llm" --dir "$R" --last 2 "$R/checkpoint_5.llm"
want "error: --last N takes the newest N checkpoints of --dir D; no --dir given" "$BIN/llavg" --output "$T/a.llm" --last 2 "$R/checkpoint_5.llm"
want "error: --threshold 0.5: $R/checkpoint_last.llm has no latent-depth stack to prune by it" \
  "$BIN/llprune" --model "$R/checkpoint_last.llm" --threshold 0.5 --output "$T/p.llm"
[ ! -e "$T/a.llm" ] && [ ! -e "$T/p.llm" ] || err "a refused llavg or llprune wrote its output"
(cd "$T" && want "error: --config is given twice (arguments 1 and 3); give it once" "$BIN/lltrain" \
  --config "$SRC/configs/tiny_test.cfg" --config "$SRC/configs/tiny_latent.cfg"; exit $fail) || fail=1 # (in $T: were it taken, it would train there)
want "error: --beam is given twice" "$BIN/lldecode" --model "$R/checkpoint_last.llm" --beam 5 --beam 3 --input "$T/in.txt"
want "error: --model is given twice" "$BIN/llprune" --model "$R/checkpoint_5.llm" --model "$R/checkpoint_10.llm" --output "$T/p.llm"
# (round 5) llprune: a keep list with a trailing comma, and a model with nothing to prune (it wrote a copy)
want "error: --dec-layers-to-keep: '0,' is not a comma-separated list" "$BIN/llprune" --model "$R/checkpoint_5.llm" --dec-layers-to-keep 0, --output "$T/p.llm"
want "checkpoint_5.llm: nothing to prune: no latent-depth stack" "$BIN/llprune" --model "$R/checkpoint_5.llm" --output "$T/p.llm"
[ ! -e "$T/p.llm" ] || err "a refused llprune wrote its output"
want "error: --output is given twice" "$BIN/llavg" --output "$T/a.llm" --output "$T/b.llm" "$R/checkpoint_5.llm"
want "error: --input (-i) is given twice" "$BIN/lleval" --ref "$T/in.txt" -i "$T/in.txt" --input "$T/in.txt"
want "error: --config is given twice" "$BIN/llprep" --config "$D/c.cfg" --config "$D/c.cfg"
"$BIN/lleval" --ref "$T/in.txt" --ref "$T/in.txt" --input "$T/in.txt" > /dev/null 2> "$T/log" || err "lleval with two --ref: $(cat "$T/log")"
want "error: --output '': an empty path (- is standard output)" "$BIN/lldecode" --model "$R/checkpoint_last.llm" --input "$T/in.txt" --output ""
want "error: --input '': an empty path (- is standard input)" "$BIN/lldecode" --model "$R/checkpoint_last.llm" --input ""
"$BIN/lldecode" --model "$R/checkpoint_last.llm" --input "$T/in.txt" --lenpen -0.5 --quiet > /dev/null 2> "$T/log" ||
  err "lldecode --lenpen -0.5 (a value, not an option): $(cat "$T/log")"

# 12. tok/s after a resume mid-interval counts this process's tokens only: the record's running sums
#     span updates 1-100 (30 of them restored from the checkpoint), its time the 70 run here
P=("${A[@]}" --set checkpoint.save_dir="$T/tps" --set train.log_interval=100 --set checkpoint.save_interval=30)
"${P[@]}" --set train.max_updates=45 2> "$T/log" || err "tok/s run: $(tail -1 "$T/log")"
rm -f "$T/tps/checkpoint_last.llm" "$T/tps/checkpoint_best.llm" # (resume from checkpoint_30: no record since update 0)
"${P[@]}" --set train.max_updates=100 --resume 2> "$T/log" || err "tok/s resume: $(tail -1 "$T/log")"
python3 - "$T/tps/metrics.jsonl" <<'PY' || err "tok/s after a resume counts the restored updates' tokens"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l][-1]
n = r["tokens_per_s"] * r["wall"] / r["tokens_per_update"]  # updates whose tokens tok/s counted
print(f"update {r['update']}: tok/s x wall = {n:.1f} updates' tokens (want ~70, not 100)")
sys.exit(not (r["update"] == 100 and 55 <= n <= 85))
PY

# 13. train.metrics_log on a file that is not a metrics log (a corpus, a note, a checkpoint) is refused,
#     new run or resume, and the file is left as it was; the run's own log is appended to as before
cp "$D/train.en" "$T/corpus.en"; printf 'my notes\nline 2\nline 3\n' > "$T/notes.txt"
cks=$(cat "$T/corpus.en" "$T/notes.txt" "$R/checkpoint_last.llm" | cksum)
want "error: train.metrics_log $T/corpus.en: an existing file that is not an ll metrics log" \
  "${A[@]}" --set checkpoint.save_dir="$T/m1" --set train.max_updates=2 --set train.metrics_log="$T/corpus.en"
"${A[@]}" --set checkpoint.save_dir="$T/mr" --set train.max_updates=2 2> "$T/log" || err "metrics_log run: $(cat "$T/log")"
cks2=$(cat "$T/mr/checkpoint_last.llm" | cksum)
for f in "$T/notes.txt" "$T/mr/checkpoint_last.llm"; do # (a resume also lists the changed settings first)
  "${A[@]}" --set checkpoint.save_dir="$T/mr" --set train.max_updates=4 --resume --set train.metrics_log="$f" 2> "$T/log"
  rc=$?
  [ $rc -ne 0 ] && grep -q "^lltrain: error: train.metrics_log $f: an existing file that is not an ll metrics log" "$T/log" ||
    err "--resume with train.metrics_log $f: exit $rc: $(cat "$T/log")"
done
[ "$(cat "$T/corpus.en" "$T/notes.txt" "$R/checkpoint_last.llm" | cksum)" = "$cks" ] &&
  [ "$(cat "$T/mr/checkpoint_last.llm" | cksum)" = "$cks2" ] || err "a refused metrics_log changed its file"
"${A[@]}" --set checkpoint.save_dir="$T/m2" --set train.max_updates=2 --set train.metrics_log="$T/m.jsonl" 2> "$T/log" &&
  "${A[@]}" --set checkpoint.save_dir="$T/m2" --set train.max_updates=4 --set train.metrics_log="$T/m.jsonl" --resume 2> "$T/log" ||
  err "a metrics log of its own refused: $(cat "$T/log")"

# 14. --resume where checkpoint_last is unreadable and nothing else is there: one message that says so
#     and what to do (it said "does not exist"); a fresh run there is refused as before
mkdir -p "$T/junk"; echo junk > "$T/junk/checkpoint_last.llm"
"${A[@]}" --set checkpoint.save_dir="$T/junk" --resume 2> "$T/log"; rc=$?
[ $rc -ne 0 ] && grep -q "error: $T/junk: no usable checkpoint: checkpoint_last.llm cannot be resumed from (above) and there is no other; move it away" "$T/log" ||
  err "--resume on an unreadable checkpoint_last: exit $rc: $(cat "$T/log")"

# 15. a run refused by the lock, or for a save_dir with checkpoints, touches no data: the refusal comes
#     before data.dir is (re)prepared (a refused second run had rewritten the first one's data)
rm -rf "$T/bin"; ls "$R" > /dev/null
"${A[@]}" --set train.max_updates=2 2> "$T/log"; rc=$?
[ $rc -ne 0 ] && grep -q "already holds checkpoints" "$T/log" && [ ! -e "$T/bin" ] ||
  err "a fresh run into a run directory prepared data first: exit $rc, $(ls "$T" | tr '\n' ' ')"
# 16. a corpus path with a line break is refused before anything is written (the manifest could not list it)
cp "$D/train.en" "$T/nl
x.en"
printf 'data:\n  dir: %s\n  vocab_size: 100\n  train:\n    - {src: "%s/nl\\nx.en", tgt: %s/train.es, src_lang: en, tgt_lang: es}\n' \
  "$T/nlbin" "$T" "$D" > "$D/nl.cfg"
"$BIN/llprep" --config "$D/nl.cfg" > /dev/null 2> "$T/log"; rc=$?
[ $rc -ne 0 ] && grep -q "error: $D/nl.cfg:5: data.train\[0\].src: the path holds a line break; rename the file" "$T/log" && [ ! -e "$T/nlbin" ] ||
  err "a corpus path with a line break: exit $rc: $(cat "$T/log")"

# 17. (round 5) another run's metrics log is never overwritten or cut back: a new run refuses a
#     non-empty log outside its save_dir, a resume one that the checkpoint's run did not write; a
#     new run still replaces the stale log in its own save_dir, a resume starts a new path afresh
cks=$(cksum < "$T/m.jsonl")
want "error: train.metrics_log $T/m.jsonl: an existing metrics log outside checkpoint.save_dir $T/m3" \
  "${A[@]}" --set checkpoint.save_dir="$T/m3" --set train.max_updates=2 --set train.metrics_log="$T/m.jsonl"
"${A[@]}" --set checkpoint.save_dir="$T/mr" --set train.max_updates=6 --resume --set train.metrics_log="$T/m.jsonl" 2> "$T/log"
rc=$?
[ $rc -ne 0 ] && grep -q "^lltrain: error: train.metrics_log $T/m.jsonl: not the log this run wrote ($T/mr/metrics.jsonl" "$T/log" ||
  err "--resume onto another run's metrics log: exit $rc: $(cat "$T/log")"
[ "$(cksum < "$T/m.jsonl")" = "$cks" ] || err "a refused run changed another run's metrics log"
"${A[@]}" --set checkpoint.save_dir="$T/m2" --set train.max_updates=6 --resume 2> "$T/log" &&
  [ "$(grep -c . "$T/m2/metrics.jsonl")" -ge 1 ] && [ "$(cksum < "$T/m.jsonl")" = "$cks" ] ||
  err "--resume onto a new metrics log path: $(cat "$T/log")"
mkdir -p "$T/m4" && cp "$T/m.jsonl" "$T/m4/metrics.jsonl" # an attempt that saved no checkpoint
"${A[@]}" --set checkpoint.save_dir="$T/m4" --set train.max_updates=2 2> "$T/log" &&
  grep -q '"update":4,' "$T/m.jsonl" && ! grep -q '"update":4,' "$T/m4/metrics.jsonl" ||
  err "a new run kept its save_dir's stale log: $(cat "$T/log")"
# 18. (round 5) closed standard descriptors: the console's lines went into the first files opened
#     (the run lock, the metrics log); now the log holds records only and the lock its PID line
B=()
for a in "${A[@]}"; do [ "$a" = --quiet ] || B+=("$a"); done
"${B[@]}" --set checkpoint.save_dir="$T/m5" --set train.max_updates=3 --set train.log_interval=1 >&- 2>&-
grep -vq '^{"type":"' "$T/m5/metrics.jsonl" && err "closed stdout/stderr: the metrics log holds other lines: $(head -3 "$T/m5/metrics.jsonl")"
[ "$(grep -c . "$T/m5/metrics.jsonl")" -ge 3 ] || err "closed stdout/stderr: the run did not log"
[ ! -e "$T/m5/.lltrain.lock" ] || [ "$(grep -vc '^lltrain pid' "$T/m5/.lltrain.lock")" -eq 0 ] ||
  err "closed stdout/stderr: the lock file holds: $(head -3 "$T/m5/.lltrain.lock")"
# 19. one metrics log per run: runs with their own save_dirs given the same train.metrics_log (they
#     start together, so neither log exists yet for the check of 17) interleaved and cut each other's
#     records; now the log is locked for the run, and another process holding it stops lltrain at
#     once, before a resume cuts it back (the lock is flock(2): held here by flock(1))
: > "$T/shared.jsonl"
want "error: train.metrics_log $T/shared.jsonl: another lltrain is writing it" \
  flock "$T/shared.jsonl" "${A[@]}" --set checkpoint.save_dir="$T/m6" --set train.max_updates=2 --set train.metrics_log="$T/shared.jsonl"
[ ! -s "$T/shared.jsonl" ] && [ ! -e "$T/m6/checkpoint_last.llm" ] || err "a run refused by the metrics lock wrote"
M6=("${A[@]}" --set checkpoint.save_dir="$T/m6" --set train.metrics_log="$T/shared.jsonl")
"${M6[@]}" --set train.max_updates=2 2> "$T/log" && [ "$(grep -c . "$T/shared.jsonl")" -ge 1 ] ||
  err "the log once free: $(cat "$T/log")"
echo '{"type":"train","update":3,"torn":' >> "$T/shared.jsonl" # a resume would cut this line
cks=$(cksum < "$T/shared.jsonl")
flock "$T/shared.jsonl" "${M6[@]}" --set train.max_updates=4 --resume 2> "$T/log" &&
  err "a resume onto a held metrics log exited 0" # (its first line reports the changed max_updates)
grep -q "error: train.metrics_log $T/shared.jsonl: another lltrain is writing it" "$T/log" ||
  err "a resume onto a held metrics log: $(cat "$T/log")"
[ "$(cksum < "$T/shared.jsonl")" = "$cks" ] || err "a resume refused by the metrics lock cut the log"
"${M6[@]}" --set train.max_updates=4 --resume 2> "$T/log" && ! grep -q torn "$T/shared.jsonl" &&
  python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$T/shared.jsonl" ||
  err "resume with the log free (cut in place): $(cat "$T/log")"
# 20. lltrain --dry-run --batch beyond the machine: B x T above data.max_tokens's limit said "out of
#     memory allocating 1099511627264 bytes"; below it, a batch the host cannot hold was an OOM kill.
#     Now both are one line that says why (the second where this machine has under 80 GiB free)
want "error: --batch 2147483647x128: 274877906816 tokens in one batch; at most 2147483647" \
  "$BIN/lltrain" --config "$SRC/configs/wmt16_ende_ll64.cfg" --dry-run --batch 2147483647x128
if [ "$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)" -lt $((80 * 1024 * 1024)) ]; then
  want "error: --dry-run at 16777215 x 128 tokens: .* need about 80.0 GiB of host memory" \
    timeout 60 "$BIN/lltrain" --config "$SRC/configs/wmt16_ende_ll64.cfg" --dry-run --batch 16777215x128
fi

[ $fail -eq 0 ] && echo "test_run_guard: all checks passed"
exit $fail
