#!/usr/bin/env bash
# Every shipped research config trains end to end at toy size: the config's
# own method settings (depth, DLCL, latent layers, CAD/DDR/ALD) with the
# width shrunk and the data section replaced by the tiny test corpus; then
# the checkpoint decodes.  Each update accumulates 2 batches (train.update_freq 2): the configs'
# own 8 and 32 (their papers' GPU counts on one) cost minutes under ASan for the same code path.
source "$(dirname "$0")/lib.sh"

for c in dlcl30 deep_decoder_15_15 latent_dlcl_cad wmt16_ende_ll64; do
  # the config with its data: section swapped for the tiny corpus
  python3 - "$SRC/configs/$c.cfg" "$T/$c.cfg" "$SRC/tests/data/tiny" "$T/bin" <<'PY'
import re, sys
src, dst, tiny, bindir = sys.argv[1:]
text = open(src).read()
text = re.sub(r"(?ms)^data:\n.*?(?=^\S)", "", text)
text += f"""
data:
  dir: {bindir}
  vocab_size: 100
  train:
    - {{src: {tiny}/train.en, tgt: {tiny}/train.es, src_lang: en, tgt_lang: es}}
  valid:
    - {{src: {tiny}/valid.en, tgt: {tiny}/valid.es, src_lang: en, tgt_lang: es}}
  max_tokens: 512
  max_len: 64
"""
open(dst, "w").write(text)
PY
  "$BIN/lltrain" --config "$T/$c.cfg" --quiet --set model.d_model=16 --set model.ffn_dim=32 --set model.heads=2 \
    --set train.device=cpu --set train.max_updates=3 --set train.update_freq=2 --set train.warmup_updates=1 --set train.valid_interval=3 \
    --set train.threads=2 --set checkpoint.save_dir="$T/$c" --set checkpoint.save_interval=0 2> "$T/$c.log" ||
    { err "$c: training failed: $(tail -1 "$T/$c.log")"; continue; }
  [ -s "$T/$c/checkpoint_last.llm" ] || err "$c: no checkpoint"
  loss=$(grep '"type":"valid"' "$T/$c/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
  python3 -c "import math,sys; sys.exit(0 if math.isfinite(float('$loss')) else 1)" || err "$c: valid loss $loss"
  head -3 "$SRC/tests/data/tiny/test.en" | "$BIN/lldecode" --model "$T/$c/checkpoint_last.llm" --beam 2 \
    --max-len-b 10 --quiet > "$T/$c.out" || err "$c: decoding failed"
  [ "$(wc -l < "$T/$c.out")" -eq 3 ] || err "$c: decoded $(wc -l < "$T/$c.out") lines, want 3"
  echo "$c: valid loss $loss"
done
[ $fail -eq 0 ] && echo "test_configs_toy: all checks passed"
exit $fail
