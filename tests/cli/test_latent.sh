#!/usr/bin/env bash
# Latent depth end to end: a one-to-many model (configs/tiny_latent.cfg,
# English -> es and -> xx) trains, decodes each language with its own
# posterior, and prunes; the pruned model's output equals the hard-gated full
# model's, token for token, for one language (--lang) and for the union.
set -u
SRC=${LL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${LL_BINARY_DIR:-$SRC/build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
err() { echo "FAIL: $*" >&2; fail=1; }

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

[ $fail -eq 0 ] && echo "test_latent: all checks passed"
exit $fail
