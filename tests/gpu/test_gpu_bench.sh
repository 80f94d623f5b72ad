#!/usr/bin/env bash
# The GPU benchmark itself (bench/gpu/ll_gpu_bench.c) on a tiny model, so that
# a GPU session's bench step does not meet it broken: training steps as CUDA
# graphs (replayed), then --profile with --gemm-survey (every matmul shape of
# the step run alone with cuBLASLt's candidates; under the emulation they run
# untimed).  Skips (77) without a GPU.
source "$(dirname "$0")/lib.sh"
gpu_or_skip
tiny=(--device "$GPUDEV" --model base --batch 4 --len 8 --vocab 64 --steps 3 --warmup 2
  --set model.enc_layers=2 --set model.dec_layers=2 --set model.d_model=64 --set model.ffn_dim=128 --set model.heads=2)
cd "$SRC" || exit 1
if "$BIN/ll_gpu_bench" "${tiny[@]}" > "$T/graphs.log" 2>&1; then
  r=$(grep '^RESULT ll_gpu_train' "$T/graphs.log")
  echo "gpu-bench: $r"
  [ "$GPUDEV" = cpu ] || grep -q 'graphs=on .*graph_replays=[1-9]' <<< "$r" ||
    err "the timed steps were not replayed as CUDA graphs: ${r:-no RESULT line}"
else
  err "ll_gpu_bench failed: $(tail -1 "$T/graphs.log")"
fi
if "$BIN/ll_gpu_bench" "${tiny[@]}" --profile --gemm-survey 3 > "$T/survey.log" 2>&1; then
  n=$(sed -n 's/^gemm survey: \([0-9]*\) shapes.*/\1/p' "$T/survey.log")
  # a shape's line: its candidates' times, or (emulation) "N of N candidates ran, untimed"
  ok=$(grep -cE '^ +[0-9]+ [01][01] .*\| +[0-9.]+ +[0-9.]+ \||candidates ran, untimed' "$T/survey.log")
  echo "gpu-bench: $(grep '^matmul time per step' "$T/survey.log")"
  if [ "$GPUDEV" != cpu ]; then
    [ "${n:-0}" -ge 8 ] || err "gemm survey: ${n:-no} shapes (a 2+2-layer step has more)"
    [ "$ok" = "$n" ] || err "gemm survey: $ok of ${n:-?} shapes ran: $(grep -E 'failed|no cuBLASLt' "$T/survey.log" | head -3)"
  fi
  grep -q '^RESULT ll_gemm_survey' "$T/survey.log" || err "no RESULT ll_gemm_survey line"
else
  err "ll_gpu_bench --profile --gemm-survey failed: $(tail -1 "$T/survey.log")"
fi
keep_logs gpu_bench "$T"/*.log
exit $fail
