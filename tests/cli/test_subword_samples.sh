#!/usr/bin/env bash
# llprep's sampled segmentations (data.spm_samples) with a BPE model from spm_train: BPE-dropout
# through the same call as the unigram sampling (tests/test_data.c covers the unigram model, the
# batcher's epochs and the manifest); the same bytes on 1 and 2 threads; bad settings refused.
source "$(dirname "$0")/lib.sh"
command -v spm_train > /dev/null || { echo "FAIL: spm_train not found (Debian's sentencepiece package)" >&2; exit 1; }
D=$SRC/tests/data/tiny
spm_train --input="$D/overfit32.en,$D/overfit32.es" --model_prefix="$T/bpe" --vocab_size=120 --model_type=bpe \
  --bos_id=0 --pad_id=1 --eos_id=2 --unk_id=3 --minloglevel=2 > "$T/spm.log" 2>&1 || err "spm_train failed: $(tail -1 "$T/spm.log")"

cat > "$T/bpe.cfg" <<CFG
$(tiny_data "$T/bin" 256)
  spm_model: $T/bpe.model
  spm_samples: 2
  spm_alpha: 0.3
CFG
"$BIN/llprep" --config "$T/bpe.cfg" > "$T/prep.log" 2>&1 || err "llprep failed: $(tail -1 "$T/prep.log")"
line=$(grep "subword regularization: 2 sampled segmentations" "$T/prep.log")
echo "${line:-no summary line}"
ratios=$(echo "$line" | sed -n 's/.*: \([0-9.]*\)x the standard tokens on the source side, \([0-9.]*\)x.*/\1 \2/p')
python3 -c "import sys; a, b = map(float, '${ratios:-0 0}'.split()); sys.exit(0 if a > 1.05 and b > 1.05 else 1)" ||
  err "BPE-dropout at 0.3 did not lengthen the segmentations ('$ratios')"
for k in 1 2; do
  for s in src tgt; do
    f=train.0.en-es.s$k.$s.bin
    [ -s "$T/bin/$f" ] || err "missing $f"
    cmp -s "$T/bin/$f" "$T/bin/train.0.en-es.$s.bin" && err "$f is the standard segmentation"
  done
done
cmp -s "$T/bin/train.0.en-es.s1.src.bin" "$T/bin/train.0.en-es.s2.src.bin" && err "samples 1 and 2 are the same"
"$BIN/llprep" --config "$T/bpe.cfg" --set data.dir="$T/bin1" --set train.threads=1 --quiet 2> "$T/prep1.log" ||
  err "llprep on one thread failed: $(tail -1 "$T/prep1.log")"
for f in train.0.en-es.s1.src.bin train.0.en-es.s2.tgt.bin; do
  cmp -s "$T/bin/$f" "$T/bin1/$f" || err "$f differs between 2 threads and 1"
done
# up to date as prepared; another alpha is other data
"$BIN/llprep" --config "$T/bpe.cfg" --if-needed | grep -q "up to date" || err "prepared data not up to date"
"$BIN/llprep" --config "$T/bpe.cfg" --if-needed --set data.spm_alpha=0.1 | grep -q "up to date" &&
  err "another data.spm_alpha counted as the same data"

# the source side only: no target files, the target's ratio 1
"$BIN/llprep" --config "$T/bpe.cfg" --set data.dir="$T/src_only" --set data.spm_sample_sides=source > "$T/src.log" 2>&1 ||
  err "llprep (source side only) failed: $(tail -1 "$T/src.log")"
grep -q "1.00x on the target side (not sampled)" "$T/src.log" || err "source-only summary: $(grep subword "$T/src.log")"
[ -s "$T/src_only/train.0.en-es.s2.src.bin" ] || err "source-only: no sampled source"
[ -e "$T/src_only/train.0.en-es.s1.tgt.bin" ] && err "source-only: a sampled target was written"

# bad settings: one line naming the key, nothing prepared
for bad in "data.spm_alpha=0" "data.spm_alpha=1.5" "data.spm_samples=65" "data.spm_samples=-1" \
  "data.spm_sample_sides=src"; do
  "$BIN/llprep" --config "$T/bpe.cfg" --set data.dir="$T/never" --set "$bad" > /dev/null 2> "$T/bad.log" &&
    err "$bad was accepted"
  [ "$(wc -l < "$T/bad.log")" = 1 ] && grep -q "${bad%%=*}" "$T/bad.log" || err "$bad: not one line naming the key: $(cat "$T/bad.log")"
  [ -e "$T/never" ] && err "$bad left $T/never behind"
done
exit $fail
