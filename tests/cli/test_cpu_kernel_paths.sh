#!/usr/bin/env bash
# ll's AVX-512 kernels against their portable forms (docs/architecture.md,
# "CPU kernels and run-time dispatch"): a tiny model (head size 32, so the
# one-query attention kernel runs) translates byte-identically with the
# AVX-512 kernels (packed decoding linears, one-query attention, vector
# softmax rows), with LL_CPU_KERNELS=generic, and with the packed kernel off;
# training logs name the kernels it took, and a bad LL_CPU_KERNELS is refused.
# Without AVX-512 on this CPU both runs take the portable paths (said below).
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
have=0
grep -qw avx512f /proc/cpuinfo && have=1
want=$([ $have = 1 ] && echo "ll kernels avx512" || echo "ll kernels generic (no AVX-512 on this CPU)")
grep -q "$want" "$T/train.log" || err "the training log does not say '$want': $(grep 'model:' "$T/train.log")"
LL_CPU_KERNELS=generic "$BIN/lltrain" --devices | grep -q "ll kernels generic" || err "--devices does not name the generic kernels"
out=$(LL_CPU_KERNELS=sse9 "$BIN/lltrain" --devices 2>&1) && err "LL_CPU_KERNELS=sse9 accepted"
echo "$out" | grep -q "LL_CPU_KERNELS=sse9: expected auto, generic or avx512" || err "bad LL_CPU_KERNELS message: $out"

cat "$DATA/overfit32.en" "$DATA/test.en" > "$T/in.en"
for beam in 1 5; do
  "$BIN/lldecode" --model "$M" --threads 2 --beam $beam --input "$T/in.en" > "$T/auto.$beam" 2> /dev/null ||
    err "beam $beam: decoding failed"
  LL_CPU_KERNELS=generic "$BIN/lldecode" --model "$M" --threads 2 --beam $beam --input "$T/in.en" \
    > "$T/generic.$beam" 2> /dev/null || err "beam $beam: generic decoding failed"
  LL_DECODE_PACKED=0 "$BIN/lldecode" --model "$M" --threads 2 --beam $beam --input "$T/in.en" \
    > "$T/unpacked.$beam" 2> /dev/null || err "beam $beam: unpacked decoding failed"
  [ -s "$T/auto.$beam" ] || err "beam $beam: no output"
  cmp -s "$T/auto.$beam" "$T/generic.$beam" ||
    err "beam $beam: AVX-512 and generic kernels translate differently: $(diff "$T/auto.$beam" "$T/generic.$beam" | head -4)"
  cmp -s "$T/auto.$beam" "$T/unpacked.$beam" || err "beam $beam: packed and plain gemm translate differently"
done
[ $have = 1 ] && echo "AVX-512 and generic kernels: byte-identical translations, beam 1 and 5 ($(wc -l < "$T/in.en") lines)" ||
  echo "note: no AVX-512 on this CPU; both runs took the portable kernels"
exit $fail
