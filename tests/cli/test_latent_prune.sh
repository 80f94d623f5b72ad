#!/usr/bin/env bash
# llprune on latent-depth models where dropping a layer is more than deleting
# it: with DLCL (pre-norm, and ReZero with fixed weights) a dropped layer's
# entry is folded into the kept rows' weights, and the pruned model decodes
# like the hard-gated full model (same tokens, same log-probs up to float
# rounding).  Post-norm latent layers and DLCL layers-to-keep are refused.
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
"$BIN/llprune" --model "$T/post/checkpoint_last.llm" --threshold 0.9 --output "$T/bad.llm" > /dev/null 2> "$T/err" &&
  err "post-norm latent pruning accepted"
[ "$(grep -c "error: .*post-norm" "$T/err")" -eq 1 ] || err "post-norm prune: unclear error: $(cat "$T/err")"
[ ! -e "$T/bad.llm" ] || err "a refused prune left a file"

[ $fail -eq 0 ] && echo "test_latent_prune: all checks passed"
exit $fail
