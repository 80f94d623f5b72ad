#!/usr/bin/env bash
# Latent depth end to end: a one-to-many model (configs/tiny_latent.cfg,
# English -> es and -> xx) trains, decodes each language with its own
# posterior, and prunes; the pruned model's output equals the hard-gated full
# model's, token for token, for one language (--lang) and for the union.
source "$(dirname "$0")/lib.sh"

"$BIN/lltrain" --config "$SRC/configs/tiny_latent.cfg" --set data.dir="$T/bin" --set checkpoint.save_dir="$T/ck" \
  --set latent.logits_lr=0.05 --set train.max_updates=60 --quiet 2> "$T/train.log" || { err "training failed: $(tail -1 "$T/train.log")"; exit 1; }
M=$T/ck/checkpoint_last.llm
grep -q '"latent":{"dec":{"q":{"es":\[' "$T/ck/metrics.jsonl" || err "metrics.jsonl has no per-language layer posteriors"

# threshold between the smallest and largest q, so that pruning keeps some layers and drops others
thr=$("$BIN/llprune" --model "$M" --output "$T/probe.llm" | python3 -c '
import sys
q = sorted(float(x) for l in sys.stdin if l.startswith("q(z=1)") for x in l.split(":")[1].split())
print("%.6f" % ((q[len(q)//2 - 1] + q[len(q)//2]) / 2))')
echo "threshold $thr"
for lang in es xx; do
  "$BIN/lldecode" --model "$M" --target-lang $lang --threshold "$thr" --beam 2 --input "$SRC/tests/data/tiny/test.en" \
    --output "$T/full.$lang" --quiet || err "decode $lang failed"
  [ "$(wc -l < "$T/full.$lang")" -eq "$(wc -l < "$SRC/tests/data/tiny/test.en")" ] || err "$lang: wrong line count"
  "$BIN/llprune" --model "$M" --threshold "$thr" --lang $lang --output "$T/pruned.$lang.llm" > "$T/prune.$lang.log" ||
    err "llprune --lang $lang failed"
  "$BIN/lldecode" --model "$T/pruned.$lang.llm" --target-lang $lang --beam 2 --input "$SRC/tests/data/tiny/test.en" \
    --output "$T/pruned.$lang" --quiet || err "decode pruned $lang failed"
  cmp -s "$T/full.$lang" "$T/pruned.$lang" || err "$lang: pruned model output differs from the hard-gated full model"
done
cmp -s "$T/full.es" "$T/full.xx" && err "the two target languages decode identically"
# ensembles (lldecode --model A --model B) set each model up for the pair: the pruned model beside the
# hard-gated full one (the threshold reaching the second model) translates as either alone; the
# model beside itself under --latent-inference sample draws each batch's layers in both (one
# sentence per batch: a draw per line), so it translates as alone
"$BIN/lldecode" --model "$T/pruned.es.llm" --model "$M" --target-lang es --threshold "$thr" --beam 2 \
  --input "$SRC/tests/data/tiny/test.en" --quiet > "$T/ens.es" || err "ensemble of the pruned and the full model failed"
cmp -s "$T/ens.es" "$T/full.es" || err "ensemble of the pruned and the hard-gated full model differs from either alone"
for m in one two; do
  # shellcheck disable=SC2046
  "$BIN/lldecode" --model "$M" $([ $m = two ] && echo --model "$M") --target-lang es --latent-inference sample \
    --max-sentences 1 --beam 2 --input "$SRC/tests/data/tiny/test.en" --quiet > "$T/sample.$m" || err "sample ($m) failed"
done
cmp -s "$T/sample.one" "$T/sample.two" || err "--latent-inference sample: the model ensembled with itself differs from it alone"
cmp -s "$T/sample.one" "$T/full.es" && err "--latent-inference sample decoded as the hard gates (the test would not test it)"
grep -q "keep" "$T/prune.es.log" && grep -q "parameters:" "$T/prune.es.log" || err "llprune did not report kept layers/savings"

# union over languages: per-language gates kept for the rest
"$BIN/llprune" --model "$M" --threshold "$thr" --output "$T/pruned.all.llm" > "$T/prune.all.log" || err "llprune union failed"
for lang in es xx; do
  "$BIN/lldecode" --model "$T/pruned.all.llm" --target-lang $lang --beam 2 --input "$SRC/tests/data/tiny/test.en" \
    --output "$T/union.$lang" --quiet || err "decode union $lang failed"
  cmp -s "$T/full.$lang" "$T/union.$lang" || err "$lang: union-pruned model output differs from the full model"
done
kept=$(grep '^decoder: keep' "$T/prune.all.log" | awk '{print $3}')
echo "union keeps $kept of 4 decoder layers"
[ "$kept" -lt 4 ] || [ "$(grep -c '^decoder: keep 4' "$T/prune.es.log")" -eq 0 ] || err "threshold pruned nothing anywhere"

# LayerDrop-style explicit subsets
"$BIN/llprune" --model "$M" --dec-layers-to-keep 0,2 --output "$T/sub.llm" > /dev/null || err "layers-to-keep failed"
"$BIN/llprune" --model "$M" --dec-layers-to-keep 2,1 --output "$T/bad.llm" 2> "$T/err" && err "unsorted keep list accepted"
[ ! -e "$T/bad.llm" ] || err "failed prune left a file"

# many-to-one: es -> en and xx -> en with latent ENCODER layers, one posterior per source language
cat > "$T/m2o.cfg" <<CFG
model: {d_model: 32, ffn_dim: 64, heads: 2, enc_layers: 4, dec_layers: 2, max_positions: 128}
data:
  dir: $T/m2obin
  vocab_size: 120
  train:
    - {src: $SRC/tests/data/tiny/train.es, tgt: $SRC/tests/data/tiny/train.en, src_lang: es, tgt_lang: en}
    - {src: $SRC/tests/data/tiny/train.xx, tgt: $SRC/tests/data/tiny/train.en, src_lang: xx, tgt_lang: en}
  max_tokens: 512
  max_len: 64
train: {seed: 1, threads: 2, lr: 2e-3, warmup_updates: 10, max_updates: 30, log_interval: 10, valid_interval: 30}
checkpoint: {save_dir: $T/m2o}
latent: {encoder: true, soft_update: 5, anneal_updates: 10, logits_lr: 0.05}
CFG
"$BIN/lltrain" --config "$T/m2o.cfg" --quiet 2> "$T/m2o.log" || err "M2O training failed: $(tail -1 "$T/m2o.log")"
grep -q '"latent":{"enc":{"q":{"es":\[.*"xx":\[' "$T/m2o/metrics.jsonl" || err "M2O: no per-source-language encoder posteriors"
for lang in es xx; do
  head -5 "$SRC/tests/data/tiny/test.$lang" > "$T/in.$lang"
  "$BIN/lldecode" --model "$T/m2o/checkpoint_last.llm" --source-lang $lang --beam 2 --input "$T/in.$lang" --quiet \
    --threshold 0.4 > "$T/m2o.full.$lang" || err "M2O decode $lang failed"
  "$BIN/llprune" --model "$T/m2o/checkpoint_last.llm" --threshold 0.4 --lang $lang --output "$T/m2o.$lang.llm" > /dev/null ||
    err "M2O prune $lang failed"
  "$BIN/lldecode" --model "$T/m2o.$lang.llm" --beam 2 --input "$T/in.$lang" --quiet > "$T/m2o.pruned.$lang" ||
    err "M2O decode pruned $lang failed"
  cmp -s "$T/m2o.full.$lang" "$T/m2o.pruned.$lang" || err "M2O $lang: pruned output differs from the full model"
  other=$([ $lang = es ] && echo xx || echo es) # the pruned model with the other source: refused
  "$BIN/lldecode" --model "$T/m2o.$lang.llm" --source-lang $other --input "$T/in.$lang" --quiet > /dev/null 2> "$T/err" &&
    err "M2O: the model pruned for $lang decoded $other"
  grep -q "pruned for $lang .* not $other -> en$" "$T/err" || err "M2O pruned for $lang, --source-lang $other: $(cat "$T/err")"
done

# without --source-lang the M2O model must not guess an encoder row (row 0 would be es's)
"$BIN/lldecode" --model "$T/m2o/checkpoint_last.llm" --input "$T/in.es" --quiet > /dev/null 2> "$T/err" &&
  err "M2O decode without --source-lang accepted"
[ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "choose --source-lang from es, xx" "$T/err" ||
  err "M2O without --source-lang: unclear error: $(cat "$T/err")"

# M2O with latent DECODER layers: per_pair rows by default (latent.posterior auto; per_language would give
# both pairs the one en row)
"$BIN/lltrain" --config "$T/m2o.cfg" --set checkpoint.save_dir="$T/pp" --set latent.encoder=false \
  --set latent.decoder=true --set latent.prior=agged_posterior \
  --set latent.soft_update=2 --set latent.anneal_updates=2 --set train.max_updates=12 --set train.log_interval=12 \
  --quiet 2> "$T/pp.log" || err "M2O per_pair training failed: $(tail -1 "$T/pp.log")"
grep -q '"latent":{"dec":{"q":{"es-en":\[.*"xx-en":\[' "$T/pp/metrics.jsonl" || err "per_pair: no per-pair decoder rows"
python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if "\"kl\"" in l][-1]
q = r["latent"]["dec"]["q"]
assert r["kl"] > 0, "aggregated KL is %g" % r["kl"]
assert q["es-en"] != q["xx-en"], "the two pair rows are identical"' "$T/pp/metrics.jsonl" || err "per_pair: KL zero or rows alike"
"$BIN/lldecode" --model "$T/pp/checkpoint_last.llm" --input "$T/in.es" --quiet > /dev/null 2> "$T/err" &&
  err "per_pair decode without --source-lang accepted"
grep -q "per-pair latent layers: choose --source-lang from es, xx" "$T/err" || err "per_pair: unclear error: $(cat "$T/err")"
"$BIN/lldecode" --model "$T/pp/checkpoint_last.llm" --source-lang xx --beam 2 --input "$T/in.xx" --quiet > /dev/null ||
  err "per_pair decode with --source-lang failed"

[ $fail -eq 0 ] && echo "test_latent: all checks passed"
exit $fail
