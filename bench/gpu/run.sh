#!/usr/bin/env bash
# ll against a PyTorch peer on one GPU, side by side in one run (issue 15).
#
#   bench/gpu/run.sh BUILD_DIR OUTDIR [--quick]
#
# BUILD_DIR: a CUDA build of ll (cmake -DLL_CUDA=ON); OUTDIR: where the logs and
# summary.txt go.  For each model (ll64, base, deep30) it runs PyTorch eager, PyTorch
# with each layer compiled (base and deep30; ll64 too unless --quick) and ll, all at
# 256 sentences x 32 + 32 tokens, vocabulary 32,000; then beam-5 and greedy decoding of
# the base model (128 sentences x 32 tokens).  The bf16 matmul peak is measured once
# (bench/gpu/torch_gpu_peer.py) and every MFU is against it.  ll's per-op-class time
# breakdown comes from `ll_gpu_bench --profile` (each op timed between stream syncs:
# slower than the real step, but it shows where the time goes), with --gemm-survey 8:
# each matmul shape of the step alone, at cuBLASLt's first 8 candidate algorithms.  ll64 and base run once more
# with LL_CUDA_ATTENTION=simt: the tensor-core attention against the SIMT kernels; and
# with --graphs off: one CUDA graph per step against kernel-by-kernel launches.
#
# On the GPU machine (see ../shared/gpu/README.md and scripts/gpu_check.sh):
#   source .device/gpu/env.sh && cmake -S . -B /tmp/b -DLL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
#     -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/b -j16 && bench/gpu/run.sh /tmp/b "$OUT/bench"
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:?usage: bench/gpu/run.sh BUILD_DIR OUTDIR [--quick]}
OUT=${2:?usage: bench/gpu/run.sh BUILD_DIR OUTDIR [--quick]}
QUICK=${3:-}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
SUM="$OUT/summary.txt"
: >"$SUM"
say() { echo "$*" | tee -a "$SUM"; }

say "# ll GPU benchmark, $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | sed 's/^/# gpu: /' | tee -a "$SUM"
$PY -c "import torch; print('# torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1 | tee -a "$SUM"

# bf16 peak, once
$PY bench/gpu/torch_gpu_peer.py --model base --steps 1 --warmup 1 >"$OUT/peak.log" 2>&1
PEAK=$(sed -n 's/^RESULT torch_gpu_peak bf16_tflops=\([0-9.]*\).*/\1/p' "$OUT/peak.log")
PEAK=${PEAK:-784}
say "bf16 matmul peak: $PEAK TFLOP/s (8192^3)"

field() { sed -n "s/.*$2=\([^ ]*\).*/\1/p" "$1" | tail -1; }

say ""
say "| model | torch eager tok/s | torch compiled tok/s | ll tok/s | ll / eager | ll / compiled | ll MFU | ll peak GiB | torch peak GiB |"
say "|---|---|---|---|---|---|---|---|---|"
for model in ll64 base deep30; do
  $PY bench/gpu/torch_gpu_peer.py --model "$model" --peak-tflops "$PEAK" >"$OUT/torch_${model}_eager.log" 2>&1
  te=$(field "$OUT/torch_${model}_eager.log" tok_s)
  tm=$(field "$OUT/torch_${model}_eager.log" peak_mem_gib)
  tc=""
  if [ "$model" != ll64 ] || [ "$QUICK" != --quick ]; then
    $PY bench/gpu/torch_gpu_peer.py --model "$model" --compile --peak-tflops "$PEAK" >"$OUT/torch_${model}_compile.log" 2>&1
    tc=$(field "$OUT/torch_${model}_compile.log" tok_s)
  fi
  "$BUILD/ll_gpu_bench" --model "$model" --device cuda --peak-tflops "$PEAK" >"$OUT/ll_${model}.log" 2>&1
  l=$(field "$OUT/ll_${model}.log" tok_s)
  lm=$(field "$OUT/ll_${model}.log" peak_mem_gib)
  mfu=$(field "$OUT/ll_${model}.log" mfu)
  ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
  say "| $model | ${te:-fail} | ${tc:--} | ${l:-fail} | $(ratio "$l" "$te") | $(ratio "$l" "$tc") | ${mfu:-} | ${lm:-} | ${tm:-} |"
  "$BUILD/ll_gpu_bench" --model "$model" --device cuda --steps 3 --profile --gemm-survey 8 \
    >"$OUT/ll_${model}_profile.log" 2>&1
done

# ab TAG HEADER ENV_OR_- ARGS...: ll64 and base once more with one switch flipped (an environment
# assignment, or - for none, then extra ll_gpu_bench arguments), against the runs above
ab() {
  local tag=$1 header=$2 envset=$3 model l s r
  shift 3
  say ""
  say "$header"
  say "|---|---|---|---|"
  for model in ll64 base; do
    if [ "$envset" = - ]; then
      "$BUILD/ll_gpu_bench" --model "$model" --device cuda --peak-tflops "$PEAK" "$@" >"$OUT/ll_${model}_$tag.log" 2>&1
    else
      env "$envset" "$BUILD/ll_gpu_bench" --model "$model" --device cuda --peak-tflops "$PEAK" "$@" \
        >"$OUT/ll_${model}_$tag.log" 2>&1
    fi
    l=$(field "$OUT/ll_${model}.log" tok_s)
    s=$(field "$OUT/ll_${model}_$tag.log" tok_s)
    r=$([ -n "$l" ] && [ -n "$s" ] && awk -v a="$l" -v b="$s" 'BEGIN { printf "%.2fx", a / b }')
    say "| $model | ${l:-fail} | ${s:-fail} | ${r:-} |"
  done
}
# attention: the tensor-core kernels (kernels/attention_tc.cu, the bf16 default) against the
# SIMT ones; CUDA graphs: each forward + backward one graph (the default) against kernel by kernel
ab simt_attention "| model | ll tok/s, attention on tensor cores | ll tok/s, SIMT attention | tensor cores / SIMT |" \
  LL_CUDA_ATTENTION=simt
ab no_graphs "| model | ll tok/s, one CUDA graph per step | ll tok/s, kernel by kernel | graphs / kernels |" - \
  --graphs off
# cuBLASLt's heuristic choice (the default) against the fastest of its first 8 candidates per shape
ab gemm_tune "| model | ll tok/s, cuBLASLt's heuristic | ll tok/s, LL_CUDA_GEMM_TUNE=8 | heuristic / tuned |" \
  LL_CUDA_GEMM_TUNE=8
# the FFN's ReLU backward as a separate relu_bwd pass (the default: an H100 ran ll64 3% faster so,
# 2026-11-28) against the backward matmul's DRELU epilogue
ab relu_mask "| model | ll tok/s, separate relu_bwd | ll tok/s, ReLU backward in DRELU | separate / DRELU |" \
  LL_CUDA_RELU_MASK=1
# weight gradients as plain products (which cuBLASLt may split over K) and the bias-gradient kernel
# (the default since an H200 ran ll64 5.9% faster so, 2026-11-28) against cuBLASLt's BGRAD epilogue
ab bgrad_epilogue "| model | ll tok/s, plain dW + bias-gradient kernel | ll tok/s, BGRAD epilogue | split / epilogue |" \
  LL_CUDA_BGRAD_EPILOGUE=1
# the one-kernel attention backward (T <= 32) in blocks of 4 warps (the default since 2026-11-28)
# against 2 (the layout an H100 timed at 102 us per ll64 call)
ab bwd1_warps "| model | ll tok/s, 4-warp attention backward | ll tok/s, 2 warps | 4 / 2 |" \
  LL_CUDA_ATTN_BWD1_WARPS=2
# the (residual +) layer norm forward with the row in registers (the default since 2026-11-28)
# against the lane-strided row that reads the sum back (20.1 us per ll64 call on an H100)
ab ln_vec "| model | ll tok/s, row in registers | ll tok/s, LL_CUDA_LN_VEC=0 | registers / strided |" \
  LL_CUDA_LN_VEC=0
# weight gradients on a side stream beside the backward's chain (the default since 2026-11-28)
# against every product in order on the device's stream
ab side_stream "| model | ll tok/s, dW on the side stream | ll tok/s, LL_CUDA_SIDE_STREAM=0 | side / in order |" \
  LL_CUDA_SIDE_STREAM=0
# the device's stream at the greatest priority and the side stream at the least (the default since
# 2026-11-28) against every stream at the default priority
ab stream_priority "| model | ll tok/s, chain first | ll tok/s, LL_CUDA_STREAM_PRIORITY=0 | priorities / none |" \
  LL_CUDA_STREAM_PRIORITY=0
# the side stream joined after every 4 layers (the default since 2026-11-28) against after each
ab layers_per_join "| model | ll tok/s, a join every 4 layers | ll tok/s, LL_LAYERS_PER_JOIN=1 | 4 / 1 |" \
  LL_LAYERS_PER_JOIN=1
# the residual backward in one wave of equal shares (the default since 2026-11-28) against the
# grid of before (1,024 blocks with gate gradients: 1.55 waves on an H100, SMs idle 29% of it)
ab one_wave "| model | ll tok/s, one wave | ll tok/s, LL_CUDA_ONE_WAVE=0 | one wave / before |" \
  LL_CUDA_ONE_WAVE=0
# ll's kernels with programmatic dependent launch (the default since 2026-11-28: the next kernel's
# blocks resident before the one before it ends) against plain launches
ab pdl "| model | ll tok/s, programmatic dependent launch | ll tok/s, LL_CUDA_PDL=0 | PDL / plain |" \
  LL_CUDA_PDL=0
# kept graphs launched as they are (the default: the host only runs the shadow step) against a
# capture and update every step
ab capture_each_step "| model | ll tok/s, kept graphs replayed | ll tok/s, captured every step | replay / capture |" \
  LL_CUDA_GRAPH_REPLAY=0

# LayerDrop and cross-attention drop: their draws as the graphs' conditional nodes (the default),
# a capture per draw (LL_CUDA_GRAPH_CONDS=0; graphs then give up), kernel by kernel
say ""
say "| model (random structure) | ll tok/s, conditional nodes | ll tok/s, capture per draw | ll tok/s, kernel by kernel | conditionals / kernels |"
say "|---|---|---|---|---|"
for dm in "base+LayerDrop 0.2:--model base --set model.enc_layerdrop=0.2 --set model.dec_layerdrop=0.2" \
          "deep decoder 15/15, CAD 0.5:--config configs/deep_decoder_15_15.cfg"; do
  name=${dm%%:*}
  read -r -a args <<< "${dm#*:}"
  tag=$(echo "$name" | tr -c 'a-z0-9' _)
  "$BUILD/ll_gpu_bench" "${args[@]}" --device cuda --peak-tflops "$PEAK" >"$OUT/ll_${tag}_conds.log" 2>&1
  LL_CUDA_GRAPH_CONDS=0 "$BUILD/ll_gpu_bench" "${args[@]}" --device cuda --peak-tflops "$PEAK" \
    >"$OUT/ll_${tag}_capture.log" 2>&1
  "$BUILD/ll_gpu_bench" "${args[@]}" --device cuda --peak-tflops "$PEAK" --graphs off >"$OUT/ll_${tag}_kernels.log" 2>&1
  c=$(field "$OUT/ll_${tag}_conds.log" tok_s) p=$(field "$OUT/ll_${tag}_capture.log" tok_s)
  k=$(field "$OUT/ll_${tag}_kernels.log" tok_s)
  r=$([ -n "$c" ] && [ -n "$k" ] && awk -v a="$c" -v b="$k" 'BEGIN { printf "%.2fx", a / b }')
  say "| $name | ${c:-fail} | ${p:-fail} | ${k:-fail} | ${r:-} |"
done

say ""
# ll's search steps run as CUDA graphs (one per batch shape, replayed); LL_CUDA_DECODE_GRAPHS=0: one by one;
# LL_CUDA_DECODE_ATTN=serial: the cached self-attention key by key (before session 30)
say "| decoding (base, 128 x 32) | torch sent/s | ll sent/s | ll / torch | ll sent/s, steps not graphs | ll sent/s, serial cached attention | graph launches (replays) |"
say "|---|---|---|---|---|---|---|"
$PY bench/gpu/torch_gpu_peer.py --model base --decode 5,1 >"$OUT/torch_decode.log" 2>&1
"$BUILD/ll_decode_bench" --device cuda --model base --batch 128 --src-len 32 --len 32 --beams 5,1 >"$OUT/ll_decode.log" 2>&1
LL_CUDA_DECODE_GRAPHS=0 "$BUILD/ll_decode_bench" --device cuda --model base --batch 128 --src-len 32 --len 32 \
  --beams 5,1 >"$OUT/ll_decode_nographs.log" 2>&1
LL_CUDA_DECODE_ATTN=serial "$BUILD/ll_decode_bench" --device cuda --model base --batch 128 --src-len 32 --len 32 \
  --beams 5,1 >"$OUT/ll_decode_serial.log" 2>&1
for beam in 5 1; do
  t=$(grep "beam=$beam " "$OUT/torch_decode.log" | sed -n 's/.*sent_s=\([0-9.]*\).*/\1/p')
  l=$(grep "beam=$beam " "$OUT/ll_decode.log" | sed -n 's/.*sent_per_s=\([0-9.]*\).*/\1/p')
  n=$(grep "beam=$beam " "$OUT/ll_decode_nographs.log" | sed -n 's/.*sent_per_s=\([0-9.]*\).*/\1/p')
  c=$(grep "beam=$beam " "$OUT/ll_decode_serial.log" | sed -n 's/.*sent_per_s=\([0-9.]*\).*/\1/p')
  g=$(grep "beam=$beam " "$OUT/ll_decode.log" | sed -n 's/.*graph_launches=\([0-9]*\) graph_replays=\([0-9]*\).*/\1 (\2)/p')
  r=$([ -n "$t" ] && [ -n "$l" ] && awk -v a="$l" -v b="$t" 'BEGIN { printf "%.2fx", a / b }')
  say "| beam $beam | ${t:-fail} | ${l:-fail} | ${r:-} | ${n:-fail} | ${c:-fail} | ${g:-} |"
done
say ""
say "ll per-op-class breakdown and matmul survey: $OUT/ll_*_profile.log"
for model in ll64 base deep30; do
  say "$model: $(grep '^matmul time per step' "$OUT/ll_${model}_profile.log" 2>/dev/null)"
done
