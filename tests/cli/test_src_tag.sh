#!/usr/bin/env bash
# A corpus's src_tag (tagged back-translation): lltrain on a plain and a <BT>-tagged copy of the tiny
# corpus, validation BLEU on a tagged validation corpus, the tag kept in the checkpoint's config;
# lldecode reads "<BT> text" with the tag (its scores differ from the untagged line's), and a
# tag the vocabulary lacks is plain text.  The tagged copy has weight 3 (data.sampling size): an
# epoch reads its batches three times.  Validation on the tagged and the plain validation corpus:
# each one's loss and BLEU/chrF are also reported, and each BLEU/chrF is lleval's of lldecode's
# greedy translations of that corpus (with and without the tag) by the last checkpoint, which are
# the translations train.valid_translations wrote, byte for byte.
source "$(dirname "$0")/lib.sh"
D=$SRC/tests/data/tiny
cat > "$T/bt.cfg" <<CFG
model: {d_model: 64, ffn_dim: 128, heads: 4, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.0}
data:
  dir: $T/bin
  vocab_size: 80
  train:
    - {src: $D/overfit32.en, tgt: $D/overfit32.es, src_lang: en, tgt_lang: es}
    - {src: $D/overfit32.en, tgt: $D/overfit32.es, src_lang: en, tgt_lang: es, src_tag: <BT>, weight: 3}
  valid:
    - {src: $D/valid.en, tgt: $D/valid.es, src_lang: en, tgt_lang: es, src_tag: <BT>}
    - {src: $D/valid.en, tgt: $D/valid.es, src_lang: en, tgt_lang: es}
  max_tokens: 2048
  max_len: 64
  sampling: size
train: {seed: 1, threads: 2, lr: 3e-3, warmup_updates: 20, max_updates: 60, log_interval: 20, valid_interval: 30, valid_bleu: true,
        valid_translations: true}
checkpoint: {save_dir: $T/run}
CFG
"$BIN/lltrain" --config "$T/bt.cfg" > "$T/train.log" 2>&1 || err "lltrain failed: $(tail -1 "$T/train.log")"
grep -q 'corpus weights: data.train\[1\] x3; an epoch is 4 batches' "$T/train.log" ||
  err "the weighted epoch is not 1 + 3 x 1 batches: $(grep 'corpus weights' "$T/train.log")"
grep -q "epoch 15 | 100.0% | update 60 " "$T/train.log" || err "60 updates over epochs of 4 batches are not 15 epochs: $(grep -o "epoch [0-9]*" "$T/train.log" | tail -1)"
grep -q '"bleu":' "$T/run/metrics.jsonl" || err "no validation BLEU on the tagged validation corpus"
M=$T/run/checkpoint_last.llm
# each validation corpus: the loss's parts add up to the whole; the last validation (update 60, the
# last checkpoint's) scores what lldecode + lleval score
sed 's/^/<BT> /' "$D/valid.en" > "$T/valid.bt"
for k in 0 1; do
  src=$D/valid.en
  [ $k = 0 ] && src=$T/valid.bt
  "$BIN/lldecode" --model "$M" --input "$src" --beam 1 --quiet > "$T/valid$k.hyp" 2> "$T/valid$k.err" ||
    err "lldecode of validation corpus $k failed: $(tail -1 "$T/valid$k.err")"
  "$BIN/lleval" -r "$D/valid.es" -i "$T/valid$k.hyp" -m bleu,chrf -b -w 4 > "$T/valid$k.score" ||
    err "lleval of validation corpus $k failed"
done
grep -q '^valid | update 60 | en-es (valid.en) | loss [0-9.]* | ppl [0-9.]* | bleu' "$T/train.log" ||
  err "no line for each validation corpus: $(grep '^valid' "$T/train.log")"
python3 - "$T/run/metrics.jsonl" "$T/valid0.score" "$T/valid1.score" <<'PY' || err "the scores of each validation corpus"
import json, sys
v = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "valid"]
assert len(v) == 2 and all(len(r["corpora"]) == 2 for r in v), v
for r in v:
    c = r["corpora"]
    assert sum(x["tokens"] for x in c) == r["tokens"], r
    assert abs(sum(x["loss"] * x["tokens"] for x in c) / r["tokens"] - r["loss"]) < 1e-5, r
    assert c[0]["loss"] != c[1]["loss"], r  # the tag changes the source
for k in (0, 1):
    bleu, chrf = map(float, open(sys.argv[2 + k]).read().split())
    got = v[-1]["corpora"][k]
    assert abs(got["bleu"] - bleu) < 1e-3 and abs(got["chrf"] - chrf) < 1e-3, (k, got, bleu, chrf)
print("validation corpora:", v[-1]["corpora"])
PY
for k in 0 1; do
  cmp -s "$T/run/valid_hyp.$k.es" "$T/valid$k.hyp" || err "valid_hyp.$k.es is not lldecode's translation of corpus $k"
  [ -s "$T/run/valid_hyp_best.$k.es" ] || err "no valid_hyp_best.$k.es"
done
grep -aq 'src_tag: "<BT>", weight: 3}' "$M" || err "the checkpoint's config lost the src_tag or the weight"
head -5 "$D/valid.en" > "$T/in.en"
head -5 "$D/valid.es" > "$T/ref.es"
sed 's/^/<BT> /' "$T/in.en" > "$T/in.bt"
for f in in.en in.bt; do
  "$BIN/lldecode" --model "$M" --input "$T/$f" --score-reference "$T/ref.es" --quiet > "$T/$f.score" 2> "$T/$f.err" ||
    err "lldecode --score-reference on $f failed: $(tail -1 "$T/$f.err")"
  "$BIN/lldecode" --model "$M" --input "$T/$f" --beam 2 --quiet > "$T/$f.hyp" 2> "$T/$f.err" || err "lldecode on $f failed"
  [ "$(wc -l < "$T/$f.hyp")" = 5 ] || err "lldecode on $f: not 5 lines"
done
cmp -s "$T/in.en.score" "$T/in.bt.score" && err "the <BT> tag changed no score (not read as the tag?)"
grep -q "<BT>" "$T/in.bt.hyp" && err "a translation holds the source tag"
exit $fail
