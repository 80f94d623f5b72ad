#!/usr/bin/env bash
# llprune on latent-depth models where dropping a layer is more than deleting
# it: with DLCL (pre-norm, and ReZero with fixed weights) a dropped layer's
# entry is folded into the kept rows' weights, and the pruned model decodes
# like the hard-gated full model (same tokens, same log-probs up to float
# rounding).  Post-norm latent layers and DLCL layers-to-keep are refused.  A pruned
# model trains on (train.init_from) with its layer count.
source "$(dirname "$0")/lib.sh"
IN=$T/in.en
head -12 "$SRC/tests/data/tiny/test.en" > "$IN"

train() { # name, extra --set arguments
  local name=$1; shift
  "$BIN/lltrain" --config "$SRC/configs/tiny_latent.cfg" --set data.dir="$T/bin" --set checkpoint.save_dir="$T/$name" \
    --set latent.logits_lr=0.05 --set train.max_updates=30 --set train.valid_interval=100 --set dlcl.decoder=true \
    "$@" --quiet 2> "$T/$name.log" || { err "$name: training failed: $(tail -1 "$T/$name.log")"; return 1; }
}

# threshold between the middle two q values, so pruning keeps some layers and drops others
median_q() {
  "$BIN/llprune" --model "$1" --output "$T/probe.llm" | python3 -c '
import sys
q = sorted(float(x) for l in sys.stdin if l.startswith("q(z=1)") for x in l.split(":")[1].split())
print("%.6f" % ((q[len(q)//2 - 1] + q[len(q)//2]) / 2))'
}

# the same hypotheses, and scores equal up to float rounding (fairseq format, base 2)
same() {
  python3 - "$1" "$2" <<'PY' || return 1
import sys
a, b = (open(p).read().split("\n") for p in sys.argv[1:3])
assert len(a) == len(b), "line counts differ"
worst = 0.0
for x, y in zip(a, b):
    fx, fy = x.split("\t"), y.split("\t")
    if x[:2] in ("H-", "D-"):
        assert fx[2:] == fy[2:], "hypotheses differ: %r vs %r" % (x, y)
        worst = max(worst, abs(float(fx[1]) - float(fy[1])))
    elif x[:2] == "P-":
        worst = max([worst] + [abs(float(u) - float(v)) for u, v in zip(fx[1].split(), fy[1].split())])
    else:
        assert x == y, "%r vs %r" % (x, y)
print("max score difference %g" % worst, file=sys.stderr)
assert worst < 2e-4, "scores differ by %g" % worst
PY
}

check_model() { # name: prune per language and for the union, decode, compare
  local M=$T/$1/checkpoint_last.llm thr
  thr=$(median_q "$M")
  for lang in es xx; do
    "$BIN/lldecode" --model "$M" --target-lang $lang --threshold "$thr" --beam 2 --format fairseq --input "$IN" \
      --output "$T/$1.full.$lang" --quiet || err "$1: decode $lang failed"
    "$BIN/llprune" --model "$M" --threshold "$thr" --lang $lang --output "$T/$1.$lang.llm" > "$T/$1.prune.$lang" ||
      err "$1: llprune --lang $lang failed"
    "$BIN/lldecode" --model "$T/$1.$lang.llm" --target-lang $lang --beam 2 --format fairseq --input "$IN" \
      --output "$T/$1.pruned.$lang" --quiet || err "$1: decode pruned $lang failed"
    same "$T/$1.full.$lang" "$T/$1.pruned.$lang" || err "$1 $lang: pruned model decodes differently"
  done
  grep -q "^decoder: keep [0-3] of 4" "$T/$1.prune.es" "$T/$1.prune.xx" || err "$1: nothing was pruned"
  # a model pruned for one language refuses the others (it ran their pairs on its layers, silently)
  "$BIN/lldecode" --model "$T/$1.es.llm" --target-lang xx --input "$IN" --quiet > /dev/null 2> "$T/err" &&
    err "$1: the model pruned for es decoded into xx"
  grep -q "error: the model was pruned for es (llprune --lang es): .* only pairs with es, not en -> xx$" "$T/err" &&
    [ "$(wc -l < "$T/err")" -eq 1 ] || err "$1: unclear refusal of xx: $(cat "$T/err")"
  "$BIN/llprune" --model "$M" --threshold "$thr" --output "$T/$1.all.llm" > /dev/null || err "$1: union prune failed"
  for lang in es xx; do
    "$BIN/lldecode" --model "$T/$1.all.llm" --target-lang $lang --beam 2 --format fairseq --input "$IN" \
      --output "$T/$1.union.$lang" --quiet || err "$1: decode union $lang failed"
    same "$T/$1.full.$lang" "$T/$1.union.$lang" || err "$1 $lang: union-pruned model decodes differently"
  done
}

# pre-norm, DLCL in both stacks (learned weights)
train dlcl --set dlcl.encoder=true && check_model dlcl
# ReZero, fixed DLCL weights (the pruned model stores the folded weights)
train rezero --set model.norm=rezero --set dlcl.learnable=false && check_model rezero

# refused: layers-to-keep in a DLCL stack, and dropping post-norm latent layers
"$BIN/llprune" --model "$T/dlcl/checkpoint_last.llm" --dec-layers-to-keep 0,2 --output "$T/bad.llm" 2> "$T/err" &&
  err "DLCL layers-to-keep accepted"
grep -q "DLCL" "$T/err" && [ "$(wc -l < "$T/err")" -eq 1 ] || err "DLCL layers-to-keep: unclear error: $(cat "$T/err")"
train post --set model.norm=post --set dlcl.decoder=false --set train.max_updates=2
thr=$(median_q "$T/post/checkpoint_last.llm") # drops some layers, keeps others
"$BIN/llprune" --model "$T/post/checkpoint_last.llm" --threshold "$thr" --output "$T/bad.llm" > /dev/null 2> "$T/err" &&
  err "post-norm latent pruning accepted"
[ "$(grep -c "error: .*post-norm" "$T/err")" -eq 1 ] || err "post-norm prune: unclear error: $(cat "$T/err")"
[ ! -e "$T/bad.llm" ] || err "a refused prune left a file"

# a threshold no layer reaches: refused (an empty stack is no model lldecode can load), naming the stack,
# the language and the highest q; no file written
M=$T/dlcl/checkpoint_last.llm
for lang_arg in "" "--lang es"; do
  # shellcheck disable=SC2086
  "$BIN/llprune" --model "$M" --threshold 1 $lang_arg --output "$T/empty.llm" > /dev/null 2> "$T/err" &&
    err "threshold 1 ($lang_arg) accepted"
  [ "$(wc -l < "$T/err")" -eq 1 ] && grep -q "keeps no \\(en\\|de\\)coder layer.*highest q(z=1) is 0\.[0-9]* (\(en\|es\|xx\|shared\).*layer [0-9]*); use a threshold <=" "$T/err" ||
    err "empty stack ($lang_arg): unclear error: $(cat "$T/err")"
  [ ! -e "$T/empty.llm" ] || err "an empty-stack prune left a file"
  cp "$T/err" "$T/err.prune" # the last one (--lang es) suggests the threshold tried below
done
# hard inference over such a threshold runs no layer of the stack: lldecode says so, once
"$BIN/lldecode" --model "$M" --target-lang es --threshold 1 --beam 2 --input "$IN" --quiet > /dev/null 2> "$T/err" ||
  err "decode at threshold 1 failed"
[ "$(grep -c "latent decoder row es: no layer has q(z=1) >= latent.threshold 1 .*runs none of its layers" "$T/err")" -eq 1 ] ||
  err "no (single) empty-stack warning: $(cat "$T/err")"
# ... and the suggested threshold works
thr=$(sed -n 's/.*use a threshold <= \([0-9.]*\).*/\1/p' "$T/err.prune")
[ -n "$thr" ] || err "no threshold suggested: $(cat "$T/err.prune")"
"$BIN/llprune" --model "$M" --threshold "$thr" --lang es --output "$T/one.llm" > "$T/one.out" ||
  err "the suggested threshold $thr failed"
"$BIN/lldecode" --model "$T/one.llm" --target-lang es --beam 2 --input "$IN" --quiet > /dev/null ||
  err "the model pruned at the suggested threshold does not decode"

# train.init_from: the pruned model (the union of the languages' layers) trained on, with its layer count
thr=$(median_q "$M")
"$BIN/llprune" --model "$M" --threshold "$thr" --output "$T/ft_src.llm" > "$T/ft.out" || err "prune for init_from failed"
K=$(sed -n 's/^decoder: keep \([0-9]*\) of 4.*/\1/p' "$T/ft.out")
[ -n "$K" ] && [ "$K" -lt 4 ] || err "the prune for init_from kept $K decoder layers: $(cat "$T/ft.out")"
"$BIN/lltrain" --config "$SRC/configs/tiny_latent.cfg" --set data.dir="$T/bin" --set checkpoint.save_dir="$T/ft" \
  --set latent.logits_lr=0.05 --set dlcl.decoder=true --set dlcl.encoder=true --set model.dec_layers="$K" \
  --set train.max_updates=2 --set train.init_from="$T/ft_src.llm" 2> "$T/ft.log" &&
  grep -q "train.init_from: parameters from $T/ft_src.llm" "$T/ft.log" ||
  err "training the pruned model on: $(tail -1 "$T/ft.log")"
"$BIN/lldecode" --model "$T/ft/checkpoint_last.llm" --target-lang es --beam 2 --input "$IN" --quiet > /dev/null ||
  err "the pruned model trained on does not decode"

# --lang of a language no latent stack has rows for (en: only a source here, the decoder's rows are
# per target language) is refused, not taken as no --lang
"$BIN/llprune" --model "$M" --threshold 0.5 --lang en --output "$T/en.llm" > /dev/null 2> "$T/err" &&
  err "llprune --lang en (a source language, latent decoder) accepted"
grep -q "error: --lang en: no latent stack of .* has a layer posterior for en" "$T/err" && [ ! -e "$T/en.llm" ] ||
  err "llprune --lang en: $(cat "$T/err")"

# lldecode's shape message shows each shape with its own rank ([8,1] vs [8], not "[8,0] ... [8,0]")
python3 - "$M" "$T/shape.llm" "$SRC/scripts" <<'PY'
import sys
sys.path.insert(0, sys.argv[3])
import llmodel
m = llmodel.read(sys.argv[1])
ts = [(n, x.dtype, [x.shape[0], 1] if n == "dec.layers.0.ffn.fc2.bias" else list(x.shape), m.raw(n))
      for n, x in m.tensors.items()]
llmodel.write(sys.argv[2], m.config, m.vocab, ts)
PY
"$BIN/lldecode" --model "$T/shape.llm" --target-lang es --input "$IN" --quiet > /dev/null 2> "$T/err" &&
  err "a model with a mis-shaped tensor decoded"
grep -q "tensor 'dec.layers.0.ffn.fc2.bias' has shape \[\([0-9]*\),1\], the model needs \[\1\]" "$T/err" ||
  err "shape message: $(cat "$T/err")"

[ $fail -eq 0 ] && echo "test_latent_prune: all checks passed"
exit $fail
