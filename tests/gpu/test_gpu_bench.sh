#!/usr/bin/env bash
# The GPU benchmark itself (bench/gpu/ll_gpu_bench.c) on a tiny model, so that
# a GPU session's bench step does not meet it broken: training steps as CUDA
# graphs (replayed), the same with LL_CUDA_GEMM_TUNE (cuBLASLt's candidates
# timed per matmul shape), then --profile with --gemm-survey (every matmul
# shape of the step run alone with cuBLASLt's candidates; under the emulation
# they run untimed).  Skips (77) without a GPU.
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
  [ "$GPUDEV" = cpu ] || grep -q " layers_per_join=${LL_LAYERS_PER_JOIN:-4}\( \|$\)" <<< "$r" ||
    err "the side stream not joined every ${LL_LAYERS_PER_JOIN:-4} layers: ${r:-no RESULT line}"
  # programmatic dependent launch: on by default on an H100/H200 and the emulation (compute capability 9.0)
  [ "$GPUDEV" = cpu ] || [ "${LL_CUDA_PDL:-1}" = 0 ] || grep -q " pdl=on pdl_edges=[1-9][0-9]*/[1-9]" <<< "$r" ||
    err "kernels not launched with programmatic dependent launch, or no programmatic edge in the step's graphs: ${r:-no RESULT line}"
else
  err "ll_gpu_bench failed: $(tail -1 "$T/graphs.log")"
fi
# LL_CUDA_GEMM_TUNE: each new matmul shape timed at cuBLASLt's first 3 candidates; shapes first
# met in a capture are timed after it, and kept graphs with a switched algorithm are dropped.  The
# emulation has no timings: LL_CUDA_EMU_TUNE_PICK=2 switches every shape (its candidates compute
# alike, so the losses equal the untuned run's)
if [ "$GPUDEV" != cpu ]; then
  emu=$("$BIN/lltrain" --devices 2>&1 | grep -c EMULATED)
  if LL_CUDA_GEMM_TUNE=3 LL_CUDA_EMU_TUNE_PICK=2 "$BIN/ll_gpu_bench" "${tiny[@]}" > "$T/tune.log" 2>&1; then
    r=$(grep '^RESULT ll_gpu_train' "$T/tune.log")
    echo "gpu-bench: LL_CUDA_GEMM_TUNE=3: $(grep -o 'graph_replays=.*' <<< "$r")"
    grep -q 'gemm_tuned=[1-9]' <<< "$r" || err "LL_CUDA_GEMM_TUNE=3 timed no matmul shape: ${r:-no RESULT line}"
    if [ "$emu" -gt 0 ]; then
      grep -q 'graph_replays=[1-9].*gemm_switched=[1-9][0-9]* graph_tune_drops=[1-9]' <<< "$r" ||
        err "LL_CUDA_EMU_TUNE_PICK=2: no switch, no dropped graph or no replay after it: $r"
      [ "$(grep '^step' "$T/tune.log")" = "$(grep '^step' "$T/graphs.log")" ] ||
        err "the tuned run's losses differ from the untuned run's: $(grep '^step' "$T/tune.log" | tail -1)"
    fi
  else
    err "LL_CUDA_GEMM_TUNE=3 ll_gpu_bench failed: $(tail -1 "$T/tune.log")"
  fi
fi
# (the profile runs op by op: LL_CUDA_GEMM_TUNE=2 times each new shape at once, outside a capture)
if LL_CUDA_GEMM_TUNE=2 "$BIN/ll_gpu_bench" "${tiny[@]}" --profile --gemm-survey 3 > "$T/survey.log" 2>&1; then
  n=$(sed -n 's/^gemm survey: \([0-9]*\) shapes.*/\1/p' "$T/survey.log")
  # a shape's line: its candidates' times, or (emulation) "N of N candidates ran, untimed"
  ok=$(grep -cE '^ +[0-9]+ [01][01] .*\| +[0-9.]+ +[0-9.]+ \||candidates ran, untimed' "$T/survey.log")
  echo "gpu-bench: $(grep '^matmul time per step' "$T/survey.log")"
  if [ "$GPUDEV" != cpu ]; then
    [ "${n:-0}" -ge 8 ] || err "gemm survey: ${n:-no} shapes (a 2+2-layer step has more)"
    [ "$ok" = "$n" ] || err "gemm survey: $ok of ${n:-?} shapes ran: $(grep -E 'failed|no cuBLASLt' "$T/survey.log" | head -3)"
  fi
  grep -q '^RESULT ll_gemm_survey' "$T/survey.log" || err "no RESULT ll_gemm_survey line"
  # each weight-gradient shape surveyed once more without its bias-gradient epilogue
  nb=$(grep -cE '^ +[0-9]+ [01][01] .* bgrad ' "$T/survey.log")
  nw=$(grep -cE 'without the bias-gradient epilogue: (heuristic|[0-9]+ candidates, untimed)' "$T/survey.log")
  [ "$nb" -ge 1 ] && [ "$nw" = "$nb" ] ||
    err "gemm survey: $nb bias-gradient shapes, $nw surveyed without the epilogue: $(grep -m2 'without the bias' "$T/survey.log")"
  [ "$GPUDEV" = cpu ] || grep -q '^RESULT ll_gpu_train .*gemm_tuned=[1-9]' "$T/survey.log" ||
    err "LL_CUDA_GEMM_TUNE=2 op by op timed no matmul shape: $(grep '^RESULT ll_gpu_train' "$T/survey.log")"
else
  err "ll_gpu_bench --profile --gemm-survey failed: $(tail -1 "$T/survey.log")"
fi
keep_logs gpu_bench "$T"/*.log
exit $fail
