#!/usr/bin/env bash
# train.tf32 (issue 26): an fp32 run on the GPU takes TF32 tensor cores by
# default and says so; train.tf32 false keeps exact fp32 products.  A tiny
# model, 4 updates, no dropout: the exact GPU run equals the CPU run (to Adam's
# amplification of last-bit differences), the TF32 run differs from it (the
# inputs really are rounded to 10 mantissa bits) but stays close.  And
# train.cuda_graphs: the exact run (graphs, the default; some steps replay
# kept graphs) and one with train.cuda_graphs false end with the same
# parameters, bit for bit; so do the two with LayerDrop and cross-attention
# drop, whose graphs take each step's draws as data (conditional nodes); and
# the exact run with every weight gradient in order (LL_CUDA_SIDE_STREAM=0, not
# on the side stream) ends with the same parameters, bit for bit.
# LL_TF32_TOKENS: the batch (default 2048; smaller under the CPU emulation); LL_TF32_UPDATES
# (default 4; 2 under the emulation's sanitizers).
# Skips (77) without a GPU.
source "$(dirname "$0")/lib.sh"
gpu_or_skip
cat > "$T/t.cfg" <<CFG
model: {d_model: 64, ffn_dim: 128, heads: 4, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.0}
$(tiny_data "$T/bin" "${LL_TF32_TOKENS:-2048}")
train: {seed: 1, lr: 1e-3, warmup_updates: 2, max_updates: ${LL_TF32_UPDATES:-4}, valid_interval: ${LL_TF32_UPDATES:-4}, log_interval: 1, precision: fp32}
CFG
run() { # run NAME DEVICE TF32
  "$BIN/lltrain" --config "$T/t.cfg" --set train.device="$2" --set train.tf32="$3" \
    --set checkpoint.save_dir="$T/$1" 2> "$T/$1.log" || { err "$1: $(tail -1 "$T/$1.log")"; return 1; }
}
run cpu cpu true && run exact "$GPUDEV" false && run tf32 "$GPUDEV" true || exit 1
# train.cuda_graphs (on by default): each step one CUDA graph, the same bits as op by op
"$BIN/lltrain" --config "$T/t.cfg" --set train.device="$GPUDEV" --set train.tf32=false --set train.cuda_graphs=false \
  --set checkpoint.save_dir="$T/eager" 2> "$T/eager.log" || err "eager: $(tail -1 "$T/eager.log")"
# the weight gradients in order on the device's stream: the same products, the same bits
LL_CUDA_SIDE_STREAM=0 "$BIN/lltrain" --config "$T/t.cfg" --set train.device="$GPUDEV" --set train.tf32=false \
  --set checkpoint.save_dir="$T/noside" 2> "$T/noside.log" || err "noside: $(tail -1 "$T/noside.log")"
diff_of() { "$BIN/ll_ckpt_diff" "$T/$1/checkpoint_last.llm" "$T/$2/checkpoint_last.llm" | sed -n 's/^max_abs_diff \([^ ]*\) .*/\1/p'; }
# LayerDrop and cross-attention drop: with graphs their draws are conditional nodes' data (kept graphs
# serve every draw); without, the skipped ops are not queued.  The same parameters either way.
# (Under the emulation's sanitizers, 2 updates: gpu_test_step_cuda covers the conditionals there.)
drops_on=$([ "${LL_TF32_UPDATES:-4}" -ge 4 ] && echo 1)
if [ -n "$drops_on" ]; then
  drops=(--set model.enc_layerdrop=0.4 --set model.dec_layerdrop=0.4 --set deep.p_net=0.5 --set deep.drop_depth=2
    --set train.device="$GPUDEV" --set train.tf32=false)
  "$BIN/lltrain" --config "$T/t.cfg" "${drops[@]}" --set checkpoint.save_dir="$T/drops" 2> "$T/drops.log" ||
    err "drops: $(tail -1 "$T/drops.log")"
  "$BIN/lltrain" --config "$T/t.cfg" "${drops[@]}" --set train.cuda_graphs=false --set checkpoint.save_dir="$T/drops_eager" \
    2> "$T/drops_eager.log" || err "drops_eager: $(tail -1 "$T/drops_eager.log")"
  # the emulation as a driver without conditional nodes: the step that fails to capture runs without a
  # graph, graphs go off with a warning, and the run still ends with the same parameters
  if "$BIN/lltrain" --devices 2>&1 | grep -q EMULATED; then
    LL_CUDA_EMU_NO_CONDITIONALS=1 "$BIN/lltrain" --config "$T/t.cfg" "${drops[@]}" --set checkpoint.save_dir="$T/drops_nocond" \
      2> "$T/drops_nocond.log" || err "drops_nocond: $(tail -1 "$T/drops_nocond.log")"
    grep -q "CUDA graphs off: a step with conditional nodes .* could not be captured" "$T/drops_nocond.log" ||
      err "a refused conditional node does not turn graphs off with a warning: $(grep -i 'graph' "$T/drops_nocond.log" | tail -2)"
    n=$(diff_of drops_nocond drops_eager)
    [ "$n" = 0 ] || err "LayerDrop + CAD after conditional nodes were refused: max_abs_diff ${n:-?} against the run without graphs"
  fi
  if [ "$GPUDEV" = cuda ]; then
    grep -q "cross-attention drop in the graphs as conditional nodes" "$T/drops.log" ||
      err "the LayerDrop run does not queue its draws as conditionals"
    if [ "${LL_TF32_UPDATES:-4}" -ge 4 ]; then
      grep -Eq "each one graph: [1-9][0-9]* replayed as kept" "$T/drops.log" ||
        err "LayerDrop: no step replayed a kept graph: $(grep 'CUDA graphs' "$T/drops.log" | tail -1)"
    fi
  fi
fi
if [ "$GPUDEV" = cuda ]; then
  grep -q "train.tf32 true: fp32 matmuls on TF32 tensor cores" "$T/tf32.log" || err "the TF32 run does not say so"
  grep -q "train.tf32 false: fp32 matmuls exact" "$T/exact.log" || err "the exact run does not say so"
  grep -q "train.tf32" "$T/cpu.log" && err "the CPU run talks about TF32"
fi
if [ "$GPUDEV" = cuda ]; then
  grep -q "CUDA graphs: ${LL_TF32_UPDATES:-4} steps, each one graph" "$T/exact.log" || err "the run did not step as CUDA graphs"
  # the tiny corpus has two batch shapes: from the third step on, kept graphs launched again without a capture
  if [ "${LL_TF32_UPDATES:-4}" -ge 4 ]; then
    grep -Eq "each one graph: [1-9][0-9]* replayed as kept" "$T/exact.log" ||
      err "no step replayed a kept graph: $(grep 'CUDA graphs:' "$T/exact.log")"
  fi
  grep -q "CUDA graphs" "$T/eager.log" && err "train.cuda_graphs false still made graphs"
fi
e=$(diff_of cpu exact) t=$(diff_of exact tf32) g=$(diff_of exact eager)
[ "$g" = 0 ] || err "the run with CUDA graphs differs from the one without: max_abs_diff ${g:-?}"
n=$(diff_of exact noside)
[ "$n" = 0 ] || err "the run with weight gradients on the side stream differs from the one without: max_abs_diff ${n:-?}"
if [ -n "$drops_on" ]; then
  d=$(diff_of drops drops_eager)
  [ "$d" = 0 ] || err "LayerDrop + CAD: the run with CUDA graphs differs from the one without: max_abs_diff ${d:-?}"
fi
echo "parameters after ${LL_TF32_UPDATES:-4} updates: |exact GPU - CPU| = $e, |TF32 - exact| = $t"
python3 -c "import sys; sys.exit(0 if float('$e') < 1e-3 else 1)" || err "exact GPU run differs from the CPU by $e"
if [ "$GPUDEV" = cuda ]; then
  python3 -c "import sys; sys.exit(0 if 0 < float('$t') < 0.05 else 1)" ||
    err "TF32 vs exact: $t (0 means TF32 was not used; large means it broke training)"
fi
exit $fail
