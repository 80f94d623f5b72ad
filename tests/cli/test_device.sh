#!/usr/bin/env bash
# Device selection and the time budget, on any machine: train.device and
# lldecode --device take auto|cpu|cuda (anything else: one line, status 1);
# without a GPU, cuda is a one-line error before any work and auto trains and
# decodes on the CPU, saying so, with the same output as cpu; with a GPU the
# GPU tests (ctest -L gpu) cover the rest; the same with train.precision /
# --precision bf16 (auto: the bf16 CPU backend).  train.max_minutes stops a run
# early; --resume continues with a fresh budget.
source "$(dirname "$0")/lib.sh"
one_line() { # log expected-substring
  [ "$(wc -l < "$1")" -eq 1 ] || err "$1: expected one line, got: $(cat "$1")"
  grep -q -- "$2" "$1" || err "$1: no '$2' in: $(cat "$1")"
}

cat > "$T/t.cfg" <<CFG
model: {d_model: 32, ffn_dim: 64, heads: 2, enc_layers: 1, dec_layers: 1, max_positions: 128}
$(tiny_data "$T/bin" 512)
train: {seed: 1, threads: 1, warmup_updates: 2, max_updates: 4, log_interval: 2, valid_interval: 100}
checkpoint: {save_dir: $T/run}
CFG

# bad values: one line naming the choices
"$BIN/lltrain" --config "$T/t.cfg" --set train.device=gpu 2> "$T/e1" && err "train.device=gpu accepted"
one_line "$T/e1" "one of: auto, cpu, cuda"
"$BIN/lldecode" --model "$T/none.llm" --device gpu 2> "$T/e2" < /dev/null && err "--device gpu accepted"
one_line "$T/e2" "expected auto, cpu or cuda"

gpu=0
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then gpu=1; fi
if [ $gpu = 0 ]; then
  # cuda without a GPU: one line, before data preparation (no data directory appears)
  "$BIN/lltrain" --config "$T/t.cfg" --set train.device=cuda 2> "$T/e3" && err "train.device=cuda trained without a GPU"
  one_line "$T/e3" "train.device cuda: no CUDA device"
  [ -e "$T/bin" ] && err "train.device=cuda without a GPU prepared data before failing"
  # auto: the CPU, and the log says so
  "$BIN/lltrain" --config "$T/t.cfg" --set train.device=auto 2> "$T/auto.log" || err "auto: $(tail -1 "$T/auto.log")"
  grep -q "train.device auto: .*using the CPU" "$T/auto.log" || err "auto: the log does not say the CPU was picked"
  printf 'the house\nthe dog is big\n' > "$T/in.en"
  "$BIN/lldecode" --model "$T/run/checkpoint_last.llm" --input "$T/in.en" --output "$T/cpu.out" --quiet ||
    err "lldecode (cpu) failed"
  "$BIN/lldecode" --model "$T/run/checkpoint_last.llm" --input "$T/in.en" --output "$T/auto.out" --device auto \
    2> "$T/dauto.log" || err "lldecode --device auto failed: $(tail -1 "$T/dauto.log")"
  grep -q -- "--device auto: .*using the CPU" "$T/dauto.log" || err "lldecode --device auto: no word on the CPU pick"
  cmp -s "$T/cpu.out" "$T/auto.out" || err "lldecode --device auto (no GPU) differs from --device cpu"
  "$BIN/lldecode" --model "$T/run/checkpoint_last.llm" --input "$T/in.en" --device cuda 2> "$T/e4" > /dev/null &&
    err "lldecode --device cuda decoded without a GPU"
  one_line "$T/e4" "no CUDA device"
  # with train.precision / --precision bf16: auto is the bf16 CPU backend, cuda still one line
  "$BIN/lldecode" --model "$T/run/checkpoint_last.llm" --input "$T/in.en" --output "$T/cpu16.out" --precision bf16 \
    --quiet || err "lldecode --precision bf16 (cpu) failed"
  "$BIN/lldecode" --model "$T/run/checkpoint_last.llm" --input "$T/in.en" --output "$T/auto16.out" --device auto \
    --precision bf16 2> "$T/dauto16.log" || err "lldecode --device auto --precision bf16 failed"
  grep -q -- "--device auto: .*using the CPU (bf16 activations)" "$T/dauto16.log" ||
    err "lldecode --device auto --precision bf16: no word on the bf16 CPU pick: $(cat "$T/dauto16.log")"
  cmp -s "$T/cpu16.out" "$T/auto16.out" || err "lldecode --device auto --precision bf16 differs from --device cpu"
  "$BIN/lldecode" --model "$T/run/checkpoint_last.llm" --input "$T/in.en" --device cuda --precision bf16 \
    2> "$T/e5" > /dev/null && err "lldecode --device cuda --precision bf16 decoded without a GPU"
  one_line "$T/e5" "no CUDA device"
  rm -rf "$T/run16"
  "$BIN/lltrain" --config "$T/t.cfg" --set train.device=auto --set train.precision=bf16 \
    --set checkpoint.save_dir="$T/run16" 2> "$T/auto16.log" || err "auto bf16: $(tail -1 "$T/auto16.log")"
  grep -q "train.device auto: .*using the CPU (bf16 activations)" "$T/auto16.log" ||
    err "auto bf16: the log does not say the bf16 CPU backend was picked"
  "$BIN/lltrain" --config "$T/t.cfg" --set train.device=cuda --set train.precision=bf16 2> "$T/e6" &&
    err "train.device=cuda train.precision=bf16 trained without a GPU"
  one_line "$T/e6" "train.device cuda: no CUDA device"
else
  echo "a GPU is present: the no-GPU checks are skipped (ctest -L gpu covers the device)"
fi

# train.max_minutes: a budget of 0.2 s ends a 100000-update run early; --resume goes on from there
rm -rf "$T/run"
"$BIN/lltrain" --config "$T/t.cfg" --set train.max_updates=100000 --set train.max_minutes=0.0033 \
  --set train.device=cpu 2> "$T/budget.log" || err "max_minutes run failed: $(tail -1 "$T/budget.log")"
grep -q "train.max_minutes 0.0033 reached after" "$T/budget.log" || err "no max_minutes line: $(tail -3 "$T/budget.log")"
"$BIN/lltrain" --config "$T/t.cfg" --set train.max_updates=100000 --set train.max_minutes=0.0033 \
  --set train.device=cpu --resume 2> "$T/resume.log" || err "resume after the budget failed"
n1=$(sed -n 's/.*reached after \([0-9]*\) updates.*/\1/p' "$T/budget.log")
n2=$(sed -n 's/.*reached after \([0-9]*\) updates.*/\1/p' "$T/resume.log")
[ -n "$n1" ] && [ -n "$n2" ] && [ "$n2" -gt "$n1" ] || err "--resume after the budget: updates $n1 then '$n2'"
exit $fail
