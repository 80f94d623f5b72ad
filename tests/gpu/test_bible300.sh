#!/usr/bin/env bash
# Issue 11's training check: 300 updates on the Bible corpus (the bible_quick
# model, d 256, 3+3 layers, on bible_gpu.cfg's data, 2048-token batches) on
# the GPU in bf16 (train.precision: bf16) and on the CPU in fp32, from the
# same seed: the same
# batches and dropout masks, so the two runs stay close.  Passes when the
# last logged training loss and the final validation loss of the GPU run are
# within 2% of the CPU's.  Then a model trained on each device decodes on
# the other (100 validation lines, greedy; on the GPU with --precision bf16):
# both must work and give one line per input.  Skips (77) without a GPU; fails without the corpus.
source "$(dirname "$0")/lib.sh"
gpu_or_skip
bible_or_fail
t0=$(date +%s)
# 2048-token batches: the CPU run is the slow half (~0.25 s an update on 16 cores)
# (LL_BIBLE_MAX_TOKENS, LL_BIBLE_DECODE_LINES: smaller under the CPU emulation of CUDA, cmake/cuda_emu_tests.cmake)
MAXTOK=${LL_BIBLE_MAX_TOKENS:-2048}
NDEC=${LL_BIBLE_DECODE_LINES:-100}
# shellcheck disable=SC2086 # LL_BIBLE_EXTRA: more --set options for both runs (a smaller model under the emulation)
bible_train gpu "$GPUDEV" bf16 "$UPD" --set data.max_tokens="$MAXTOK" ${LL_BIBLE_EXTRA:-} &
gpid=$!
# shellcheck disable=SC2086
bible_train cpu cpu fp32 "$UPD" --set data.max_tokens="$MAXTOK" ${LL_BIBLE_EXTRA:-} || err "CPU run failed: $(tail -1 "$T/cpu.log")"
wait $gpid || err "GPU run failed: $(tail -1 "$T/gpu.log")"
echo "bible300: both runs took $(($(date +%s) - t0)) s (concurrently)"
for kind in train valid; do
  g=$(last_loss gpu $kind) c=$(last_loss cpu $kind)
  if [ -z "$g" ] || [ -z "$c" ]; then
    err "no final $kind loss (gpu '$g', cpu '$c')"
    continue
  fi
  python3 - "$kind" "$g" "$c" "$UPD" <<'PY' || fail=1
import sys
kind, g, c, updates = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
rel = abs(g - c) / abs(c)
ok = rel <= 0.02
print(f"bible300: {kind} loss after {updates} updates: GPU bf16 {g:.4f}, CPU fp32 {c:.4f} bits/token: {100 * rel:.2f}% apart "
      f"({'PASS' if ok else 'FAIL'}: at most 2%)")
sys.exit(0 if ok else 1)
PY
done
grep -h "tok/s" "$T/gpu.log" | tail -1 | sed 's/^/bible300: GPU last log: /'
grep -h "tok/s" "$T/cpu.log" | tail -1 | sed 's/^/bible300: CPU last log: /'
# a model trained on one device decodes on the other
head -"$NDEC" "$RAW/valid.en" > "$T/v100.en"
for pair in "gpu cpu fp32" "cpu $GPUDEV bf16"; do
  set -- $pair
  if [ -s "$T/$1/checkpoint_last.llm" ]; then
    "$BIN/lldecode" --model "$T/$1/checkpoint_last.llm" --device "$2" --precision "$3" --beam 1 --max-len-a 1.5 \
      --max-len-b 10 \
      --input "$T/v100.en" --output "$T/$1-on-$2.hyp" 2> "$T/$1-on-$2.log" ||
      err "a model trained on $1 does not decode with --device $2: $(tail -1 "$T/$1-on-$2.log")"
    [ -f "$T/$1-on-$2.hyp" ] && [ "$(wc -l < "$T/$1-on-$2.hyp")" -eq "$NDEC" ] ||
      err "model trained on $1, decoded with --device $2: not $NDEC lines"
  fi
done
[ $fail = 0 ] && echo "bible300: models trained on each device decode on the other"
keep_logs bible300 "$T"/*.log "$T"/gpu/metrics.jsonl "$T"/cpu/metrics.jsonl
exit $fail
