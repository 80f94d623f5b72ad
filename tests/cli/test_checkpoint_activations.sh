#!/usr/bin/env bash
# train.checkpoint_activations (fairseq's --checkpoint-activations), end to end:
# lltrain with each layer recomputed in the backward writes the same
# checkpoints, bit for bit (parameters and Adam moments), as without, for a
# pre-norm model on two batch workers (fp32 and bf16) and a latent-depth model
# through the inner/outer loop; --resume may switch it on or off; the dry run
# of the 64+64-layer config measures far less activation memory with it, and
# each dry run gives the other setting's figures too, and the largest
# data.max_tokens that fits a given device memory (--gpu-mem) either way.
source "$(dirname "$0")/lib.sh"
LLTRAIN=$BIN/lltrain

cat > "$T/pre.cfg" <<CFG
model: {d_model: 32, ffn_dim: 64, heads: 2, enc_layers: 3, dec_layers: 3, max_positions: 128, dropout: 0.1,
        attn_dropout: 0.1, act_dropout: 0.1}
$(tiny_data "$T/bin" 256)
train: {seed: 5, threads: 2, batch_workers: 2, lr: 3e-3, warmup_updates: 4, max_updates: 6, log_interval: 2,
        valid_interval: 3}
checkpoint: {save_dir: $T/run}
CFG
sed -e "s|dir: .*/bin|dir: $T/lbin|" -e "s|save_dir: .*|save_dir: $T/run|" "$SRC/configs/tiny_latent.cfg" |
  sed -e "s|\.\./tests/data|$SRC/tests/data|g" > "$T/lat.cfg"

# same: NAME CONFIG SETTINGS...: the run with and without; every tensor equal
same() {
  local name=$1 cfg=$2
  shift 2
  for ck in false true; do
    rm -rf "$T/run"
    "$LLTRAIN" --config "$cfg" --set train.checkpoint_activations=$ck "$@" 2> "$T/$name.$ck.log" ||
      { err "$name, checkpoint_activations $ck: $(tail -1 "$T/$name.$ck.log")"; return; }
    mv "$T/run" "$T/$name.$ck"
  done
  grep -q "train.checkpoint_activations true: each layer's input kept" "$T/$name.true.log" ||
    err "$name: the recomputation is not logged"
  for prefix in "" optim.; do
    out=$("$BIN/ll_ckpt_diff" "$T/$name.false/checkpoint_last.llm" "$T/$name.true/checkpoint_last.llm" $prefix) ||
      { err "$name: $out"; continue; }
    case "$out" in
      "max_abs_diff 0 over "*) ;;
      *) err "$name: recomputing each layer changed the ${prefix:-model} tensors: $out" ;;
    esac
  done
  local v=() ck
  for ck in false true; do
    v+=("$(grep -o '"type":"valid","update":[0-9]*,"loss":[^,]*,"nll":[^,]*' "$T/$name.$ck/metrics.jsonl")")
  done
  [ "$(printf '%s\n' "${v[0]}" | grep -c .)" = 2 ] || err "$name: want 2 validations in metrics.jsonl: ${v[0]}"
  [ "${v[0]}" = "${v[1]}" ] || err "$name: the validation losses differ: ${v[0]} / ${v[1]}"
}
same pre-norm "$T/pre.cfg"
same bf16 "$T/pre.cfg" --set train.precision=bf16
same latent "$T/lat.cfg" --set train.max_updates=6 --set train.valid_interval=3

# --resume switches it: 3 updates without, then 3 with = 6 without
rm -rf "$T/run"
"$LLTRAIN" --config "$T/pre.cfg" --set train.max_updates=3 2> "$T/half.log" || err "3 updates: $(tail -1 "$T/half.log")"
"$LLTRAIN" --config "$T/pre.cfg" --set train.checkpoint_activations=true --resume 2> "$T/resume.log" ||
  err "resume with checkpointing: $(tail -1 "$T/resume.log")"
out=$("$BIN/ll_ckpt_diff" "$T/pre-norm.false/checkpoint_last.llm" "$T/run/checkpoint_last.llm") || err "resume: $out"
case "$out" in "max_abs_diff 0 over "*) ;; *) err "resumed with checkpointing: $out" ;; esac

# the dry run of the 64+64-layer model: the activation peak with and without
peak() {
  "$LLTRAIN" --config "$SRC/configs/wmt16_ende_ll64.cfg" --dry-run "$@" 2>&1 |
    awk '/^activations, peak of the step/ {print $6, $7}'
}
read -r k32 k16 <<< "$(peak)"
read -r r32 r16 <<< "$(peak --set train.checkpoint_activations=true)"
echo "ll64 activation peak (GiB, fp32 / bf16): keeping every layer's $k32 / $k16, recomputing $r32 / $r16"
awk -v a="$k32" -v b="$r32" -v c="$k16" -v d="$r16" 'BEGIN { exit !(a > 0 && c > 0 && b > 0 && d > 0 && b < a / 4 && d < c / 4) }' ||
  err "the dry run's activation peak with checkpointing ($r32 / $r16 GiB) is not below a quarter of $k32 / $k16"
"$LLTRAIN" --config "$SRC/configs/wmt16_ende_ll64.cfg" --dry-run --set train.checkpoint_activations=true > "$T/on.txt" 2>&1
grep -q "^activation checkpointing (train.checkpoint_activations)" "$T/on.txt" || err "the dry run does not say it recomputes"
# each dry run also measures the other setting: its line has the other run's figures
grep -q "^with train.checkpoint_activations false: activations $k32 / $k16 GiB" "$T/on.txt" ||
  err "the dry run with checkpointing does not give the figures without: $(grep '^with train' "$T/on.txt")"
"$LLTRAIN" --config "$SRC/configs/wmt16_ende_ll64.cfg" --dry-run 2>&1 |
  grep -q "^with train.checkpoint_activations true (each layer's forward again in the backward): activations $r32 / $r16 GiB" ||
  err "the dry run without checkpointing does not give the figures with it"
# the largest data.max_tokens that fits (--gpu-mem 22, a 24 GB card), with and without checkpointing:
# at that value the step fits, one sentence more does not
LL64=("$LLTRAIN" --config "$SRC/configs/wmt16_ende_ll64.cfg" --dry-run --gpu-mem 22)
line=$("${LL64[@]}" 2>&1 | grep "^largest data.max_tokens whose step fits 22 GiB in bf16")
read -r mt_keep mt_rec <<< "$(echo "$line" | sed -n 's/.*: \([0-9]*\); with train.checkpoint_activations true: \([0-9]*\)$/\1 \2/p')"
echo "largest data.max_tokens in 22 GiB: $mt_keep, recomputing $mt_rec"
[ -n "$mt_keep" ] && [ -n "$mt_rec" ] && [ "$mt_keep" -gt 0 ] && [ "$mt_rec" -gt $((mt_keep * 3)) ] ||
  err "the fitted data.max_tokens ($mt_keep, recomputing $mt_rec): want both, the second > 3x: $line"
fits() { "${LL64[@]}" --set data.max_tokens=$1 "${@:2}" 2>&1 | grep -o "^fits 22 GiB (--gpu-mem): fp32 [a-z]*, bf16 [a-z]*" | awk '{print $NF}'; }
[ "$(fits "$mt_keep")" = yes ] && [ "$(fits $((mt_keep + 256)))" = no ] ||
  err "data.max_tokens $mt_keep: fits '$(fits "$mt_keep")', +256: '$(fits $((mt_keep + 256)))' (want yes, no)"
R=(--set train.checkpoint_activations=true)
[ "$(fits "$mt_rec" "${R[@]}")" = yes ] && [ "$(fits $((mt_rec + 256)) "${R[@]}")" = no ] ||
  err "recomputing, data.max_tokens $mt_rec: fits '$(fits "$mt_rec" "${R[@]}")', +256: '$(fits $((mt_rec + 256)) "${R[@]}")'"
for bad in 0 -3 abc 1e9; do
  "$LLTRAIN" --config "$SRC/configs/wmt16_ende_ll64.cfg" --dry-run --gpu-mem "$bad" > /dev/null 2> "$T/bad.log" &&
    err "--gpu-mem $bad was accepted"
  grep -q "^lltrain: error: --gpu-mem $bad: expected the device's usable memory in GiB" "$T/bad.log" ||
    err "--gpu-mem $bad: $(cat "$T/bad.log")"
done
"$LLTRAIN" --config "$SRC/configs/wmt16_ende_ll64.cfg" --gpu-mem 22 > /dev/null 2> "$T/bad.log" && err "--gpu-mem without --dry-run ran"
grep -q "gpu-mem is an option of --dry-run" "$T/bad.log" || err "--gpu-mem alone: $(cat "$T/bad.log")"
exit $fail
