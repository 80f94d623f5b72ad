#!/usr/bin/env bash
# ll's AVX-512 and AVX2 kernels against their portable forms (docs/architecture.md,
# "CPU kernels and run-time dispatch"): a tiny model (head size 32, so the
# one-query attention kernel runs) translates byte-identically with the
# AVX-512 kernels (packed decoding linears, one-query attention, vector
# softmax rows), with the AVX2 ones (LL_CPU_KERNELS=avx2: the packed linears),
# with LL_CPU_KERNELS=generic, and with the packed kernel off; training logs
# name the kernels it took, and a bad LL_CPU_KERNELS is refused.  A CPU
# without AVX-512 runs the forms it has (said below).
source "$(dirname "$0")/lib.sh"
unset LL_CPU_KERNELS # this test sets it per run (scripts/test.sh's portable part exports generic)
DATA=$SRC/tests/data/tiny
cat > "$T/tiny.cfg" <<CFG
model: {d_model: 64, ffn_dim: 128, heads: 2, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.0}
$(tiny_data "$T/bin" 2048)
train: {seed: 1, threads: 2, lr: 3e-3, warmup_updates: 20, label_smoothing: 0.0, max_updates: 120, log_interval: 40, valid_interval: 1000}
checkpoint: {save_dir: $T/run}
CFG
"$BIN/lltrain" --config "$T/tiny.cfg" > /dev/null 2> "$T/train.log" ||
  { echo "FAIL: training failed: $(tail -1 "$T/train.log")" >&2; exit 1; }
M=$T/run/checkpoint_last.llm
have=0 have2=0
grep -qw avx512f /proc/cpuinfo && have=1
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && have2=1
want=$([ $have = 1 ] && echo "ll kernels avx512" || { [ $have2 = 1 ] && echo "ll kernels avx2"; } ||
  echo "ll kernels generic (no AVX2 on this CPU)")
grep -q "$want" "$T/train.log" || err "the training log does not say '$want': $(grep 'model:' "$T/train.log")"
LL_CPU_KERNELS=generic "$BIN/lltrain" --devices | grep -q "ll kernels generic" || err "--devices does not name the generic kernels"
out=$(LL_CPU_KERNELS=sse9 "$BIN/lltrain" --devices 2>&1) && err "LL_CPU_KERNELS=sse9 accepted"
echo "$out" | grep -q "LL_CPU_KERNELS=sse9: expected auto, generic, avx2 or avx512" || err "bad LL_CPU_KERNELS message: $out"
if [ $have2 = 1 ]; then
  LL_CPU_KERNELS=avx2 "$BIN/lltrain" --devices | grep -q "ll kernels avx2" || err "--devices does not name the AVX2 kernels"
fi

cat "$DATA/overfit32.en" "$DATA/test.en" > "$T/in.en"
for beam in 1 5; do
  "$BIN/lldecode" --model "$M" --threads 2 --beam $beam --input "$T/in.en" > "$T/auto.$beam" 2> /dev/null ||
    err "beam $beam: decoding failed"
  LL_CPU_KERNELS=generic "$BIN/lldecode" --model "$M" --threads 2 --beam $beam --input "$T/in.en" \
    > "$T/generic.$beam" 2> /dev/null || err "beam $beam: generic decoding failed"
  LL_DECODE_PACKED=0 "$BIN/lldecode" --model "$M" --threads 2 --beam $beam --input "$T/in.en" \
    > "$T/unpacked.$beam" 2> /dev/null || err "beam $beam: unpacked decoding failed"
  if [ $have2 = 1 ]; then
    LL_CPU_KERNELS=avx2 "$BIN/lldecode" --model "$M" --threads 2 --beam $beam --input "$T/in.en" \
      > "$T/avx2.$beam" 2> /dev/null || err "beam $beam: AVX2 decoding failed"
    cmp -s "$T/auto.$beam" "$T/avx2.$beam" || err "beam $beam: the AVX2 kernels translate differently"
  fi
  [ -s "$T/auto.$beam" ] || err "beam $beam: no output"
  cmp -s "$T/auto.$beam" "$T/generic.$beam" ||
    err "beam $beam: AVX-512 and generic kernels translate differently: $(diff "$T/auto.$beam" "$T/generic.$beam" | head -4)"
  cmp -s "$T/auto.$beam" "$T/unpacked.$beam" || err "beam $beam: packed and plain gemm translate differently"
done
echo "$([ $have = 1 ] && echo "AVX-512, ")$([ $have2 = 1 ] && echo "AVX2 and ")generic kernels: byte-identical translations, beam 1 and 5 ($(wc -l < "$T/in.en") lines)"
exit $fail
