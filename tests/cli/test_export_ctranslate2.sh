#!/usr/bin/env bash
# scripts/export_ctranslate2.py: an ll model exported to CTranslate2 translates
# as lldecode does.  Greedy: the same translation of every line and the same
# score (CTranslate2's natural-log score = ll's base-2 one x ln 2) on a
# pre-norm model with shared embeddings, and on a post-norm one with separate
# embeddings, an output projection of its own and a language tag as its start
# token, and on a latent-depth model pruned for one language by llprune --lang;
# beam 5 mostly the same (CTranslate2's beam search finalizes hypotheses
# otherwise than fairseq's), int8 weights mostly the same and int8 arithmetic
# as CTranslate2's own int8; with llshortlist's map exported as the
# model's vmap.txt, CTranslate2's use_vmap translates as lldecode --shortlist.  Models CTranslate2 has no place for are
# refused with one line.  Needs the ctranslate2 Python package: the python3's,
# else pip-installed into a venv in the build directory; skips (77) without network.
source "$(dirname "$0")/lib.sh"
VER=4.8.5

PY=python3
VENV="${LL_BINARY_DIR:-$T}/ctranslate2-venv"
if ! "$PY" -c 'import ctranslate2, yaml, numpy' 2>/dev/null; then
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import ctranslate2, yaml, numpy' 2>/dev/null; then
    PY="$VENV/bin/python"
  else
    echo "ctranslate2 missing: pip install ctranslate2==$VER into $VENV"
    { python3 -m venv "$VENV" &&
      "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --retries 1 --timeout 30 \
        "ctranslate2==$VER" pyyaml numpy; } > "$T/pip.log" 2>&1 ||
      { tail -3 "$T/pip.log"; echo "SKIP: ctranslate2 is not installed and pip could not install it"; exit 77; }
    PY="$VENV/bin/python"
  fi
fi
EXPORT=("$PY" "$SRC/scripts/export_ctranslate2.py")

# translate IN (text) with the CTranslate2 model DIR: OUT (text) and OUT.scores
cat > "$T/ct2.py" <<'PY'
import os, subprocess, sys
import ctranslate2
sys.path.insert(0, sys.argv[1])
import llmodel
model, d, inp, out, beam, prefix = sys.argv[2:8]
spm = out + ".spm"
open(spm, "wb").write(llmodel.read(model).vocab)
enc = subprocess.run(["spm_encode", "--model", spm, "--output_format=piece"], stdin=open(inp, "rb"),
                     capture_output=True, check=True).stdout.decode("utf-8").splitlines()
src = [l.split() for l in enc]
t = ctranslate2.Translator(d, device="cpu", intra_threads=2, compute_type=os.environ.get("CT2_COMPUTE_TYPE", "default"))
# (at most model.max_positions - 1 tokens, as lldecode caps --max-len-b: 128 here)
r = t.translate_batch(src, beam_size=int(beam), max_decoding_length=127, min_decoding_length=1,
                      length_penalty=1.0, return_scores=True, use_vmap=os.environ.get("CT2_USE_VMAP") == "1",
                      target_prefix=[[prefix]] * len(src) if prefix != "-" else None)
hyps = [x.hypotheses[0] for x in r]  # (a start token given as the prefix is not returned)
dec = subprocess.run(["spm_decode", "--model", spm, "--input_format=piece"],
                     input="".join(" ".join(h) + "\n" for h in hyps).encode("utf-8"),
                     capture_output=True, check=True).stdout
open(out, "wb").write(dec)
open(out + ".scores", "w").write("".join("%.9g\n" % x.scores[0] for x in r))
open(out + ".len", "w").write("".join("%d\n" % len(h) for h in hyps))
PY
ct2() { "$PY" "$T/ct2.py" "$SRC/scripts" "$@"; }
# lldecode's translations and (--format fairseq) scores, in input order
lld() { # MODEL OUT IN BEAM [lldecode options]
  local model=$1 out=$2 in=$3 beam=$4
  shift 4
  "$BIN/lldecode" --model "$model" --input "$in" --beam "$beam" --output "$out" --quiet "$@" || return 1
  "$BIN/lldecode" --model "$model" --input "$in" --beam "$beam" --format fairseq --quiet "$@" |
    awk -F'\t' '/^H-/ {sub(/^H-/, "", $1); print $1 "\t" $2}' | sort -n | cut -f2 > "$out.scores"
}
# the lines of A and B (CTranslate2's) that agree; the scores that agree (ll's x ln 2 == CTranslate2's,
# 1e-4 relative), a translation cut at the length limit counted as agreeing: ll ends it with a forced
# </s> (its score in the sum, as fairseq), CTranslate2 without (one test below has some)
agree() {
  "$PY" - "$@" <<'PY'
import math, sys
a, b = open(sys.argv[1], encoding="utf-8").read().splitlines(), open(sys.argv[2], encoding="utf-8").read().splitlines()
sa = [float(x) * math.log(2) for x in open(sys.argv[1] + ".scores")]
sb = [float(x) for x in open(sys.argv[2] + ".scores")]
cut = [int(x) >= 127 for x in open(sys.argv[2] + ".len")]
assert len(a) == len(b) == len(sa) == len(sb) == len(cut), (len(a), len(b), len(sa), len(sb), len(cut))
if sum(cut) > len(a) // 4:
    sys.exit(f"{sum(cut)} of {len(a)} translations reach the length limit: too few scores to compare")
same = [i for i in range(len(a)) if a[i] == b[i]]
close = sum(1 for i in same if cut[i] or abs(sa[i] - sb[i]) <= 1e-4 * max(1.0, abs(sb[i])))
print(len(a), len(same), close)
PY
}

# greedy_same WHAT OUT MODEL CT2_DIR IN PREFIX [lldecode options]: every greedy translation and its
# score the same (lldecode's in T/ll.OUT, CTranslate2's in T/c2.OUT)
greedy_same() {
  local what=$1 out=$2 model=$3 dir=$4 in=$5 prefix=$6 n same close
  shift 6
  lld "$model" "$T/ll.$out" "$in" 1 "$@" || { err "$what: lldecode failed"; return; }
  ct2 "$model" "$dir" "$in" "$T/c2.$out" 1 "$prefix" || { err "$what: CTranslate2 failed"; return; }
  read -r n same close <<< "$(agree "$T/ll.$out" "$T/c2.$out")"
  echo "$what: $same of $n greedy translations the same, $close of them with the same score"
  [ "$same" = "$n" ] && [ "$close" = "$n" ] || err "$what: CTranslate2 gives $same of $n translations, $close scores as lldecode"
}

cat > "$T/pre.cfg" <<CFG
model: {d_model: 64, ffn_dim: 128, heads: 4, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.0}
$(tiny_data "$T/bin" 2048)
train: {seed: 1, threads: 2, lr: 3e-3, warmup_updates: 20, label_smoothing: 0.0, max_updates: 150, valid_interval: 0}
checkpoint: {save_dir: $T/pre}
CFG
cat "$SRC/tests/data/tiny/overfit32.en" "$SRC/tests/data/tiny/valid.en" > "$T/in.en"

# 1. pre-norm, shared embeddings: greedy the same, scores too; beam 5 and int8 mostly
"$BIN/lltrain" --config "$T/pre.cfg" --quiet 2> "$T/pre.log" || err "training failed: $(tail -1 "$T/pre.log")"
M="$T/pre/checkpoint_last.llm"
"${EXPORT[@]}" "$M" "$T/ct2" 2> "$T/export.log" || err "export failed: $(cat "$T/export.log")"
grep -q "2+2 layers, d=64, 80 pieces, float32; translations start with </s>; max_decoding_length <= 127" "$T/export.log" ||
  err "export summary: $(cat "$T/export.log")"
greedy_same "pre-norm" pre "$M" "$T/ct2" "$T/in.en" -
lld "$M" "$T/ll.5" "$T/in.en" 5 || err "lldecode beam 5 failed"
ct2 "$M" "$T/ct2" "$T/in.en" "$T/c2.5" 5 - || err "CTranslate2 beam 5 failed"
read -r n same close <<< "$(agree "$T/ll.5" "$T/c2.5")"
echo "beam 5: $same of $n translations the same, $close of them with the same score"
[ "$same" -ge $((n * 3 / 4)) ] && [ "$close" -ge $((same * 3 / 4)) ] || err "beam 5: $same of $n the same ($close scores)"
"${EXPORT[@]}" "$M" "$T/ct2i8" --quantization int8 2> "$T/export8.log" || err "int8 export failed: $(cat "$T/export8.log")"
# the exported int8 weights are the model's: dequantized (compute_type float32), mostly lldecode's
# translations; computed in int8, CTranslate2's own int8 of the float32 export.  How close int8
# arithmetic stays to fp32 is CTranslate2's and the CPU's (AVX-512 VNNI: >= 3/4 of these lines;
# an AVX2-only AMD EPYC: 28 of 62, its own int8 conversion alike), so it is printed, not tested.
CT2_COMPUTE_TYPE=float32 ct2 "$M" "$T/ct2i8" "$T/in.en" "$T/c2.i8w" 1 - || err "CTranslate2 int8 weights failed"
read -r n same close <<< "$(agree "$T/ll.pre" "$T/c2.i8w")"
echo "int8 weights (dequantized): $same of $n greedy translations as lldecode's fp32"
[ "$same" -ge $((n * 3 / 4)) ] || err "int8 weights: $same of $n translations the same"
ct2 "$M" "$T/ct2i8" "$T/in.en" "$T/c2.i8" 1 - || err "CTranslate2 int8 failed"
CT2_COMPUTE_TYPE=int8 ct2 "$M" "$T/ct2" "$T/in.en" "$T/c2.own8" 1 - || err "CTranslate2's int8 of the float32 export failed"
cmp -s "$T/c2.i8" "$T/c2.own8" || err "int8: the int8 export translates otherwise than CTranslate2's int8 of the float32 one"
read -r n same close <<< "$(agree "$T/ll.pre" "$T/c2.i8")"
echo "int8 compute: $same of $n greedy translations as lldecode's fp32; all as CTranslate2's own int8 conversion"
"${EXPORT[@]}" "$M" "$T/ct2" 2> "$T/err" && err "an existing output directory was replaced without --force"
grep -q "export_ctranslate2: $T/ct2: " "$T/err" || err "existing output: $(cat "$T/err")"
# a vocabulary shortlist: the same map in both (one batch each, so the same candidates)
"$BIN/llshortlist" --config "$T/pre.cfg" --output "$T/pre.vmap" --per-source 4 --frequent 8 --quiet ||
  err "llshortlist failed"
"${EXPORT[@]}" "$M" "$T/ct2v" --vmap "$T/pre.vmap" 2> "$T/exportv.log" || err "export --vmap failed: $(cat "$T/exportv.log")"
cmp -s "$T/pre.vmap" "$T/ct2v/vmap.txt" || err "the export did not save the map as vmap.txt"
export CT2_USE_VMAP=1
greedy_same "shortlist" sl "$M" "$T/ct2v" "$T/in.en" - --shortlist "$T/pre.vmap" --inter-threads 1
unset CT2_USE_VMAP
cmp -s "$T/ll.sl" "$T/ll.pre" && err "the shortlist changed no translation: a map of 4 per piece should"
"${EXPORT[@]}" "$M" "$T/ct2w" --vmap "$T/none.vmap" 2> "$T/err" && err "a missing --vmap was accepted"
grep -q -- "--vmap $T/none.vmap: not a readable file" "$T/err" || err "missing --vmap: $(cat "$T/err")"

# 2. post-norm, separate embeddings and output projection, a language tag as the start token
cat > "$T/post.cfg" <<CFG
model: {d_model: 64, ffn_dim: 128, heads: 4, enc_layers: 2, dec_layers: 3, max_positions: 128, dropout: 0.0,
        norm: post, share_all_embeddings: false, tie_output: false}
$(tiny_data "$T/bin2" 2048)
  lang_tags: on
train: {seed: 2, threads: 2, lr: 2e-3, warmup_updates: 20, label_smoothing: 0.0, max_updates: 100, valid_interval: 0}
checkpoint: {save_dir: $T/post}
CFG
"$BIN/lltrain" --config "$T/post.cfg" --quiet 2> "$T/post.log" || err "post-norm training failed: $(tail -1 "$T/post.log")"
M2="$T/post/checkpoint_last.llm"
"${EXPORT[@]}" "$M2" "$T/ct2p" 2> "$T/exportp.log" || err "post-norm export failed: $(cat "$T/exportp.log")"
grep -q 'translations start with the target_prefix \[\["<2es>"\]\]' "$T/exportp.log" ||
  err "tagged export summary: $(cat "$T/exportp.log")"
greedy_same "post-norm, tagged" post "$M2" "$T/ct2p" "$T/in.en" "<2es>"

# 2b. latent depth (two target languages, tags), pruned for es by llprune --lang: its gates baked in, it
# exports, and translates into es as lldecode --target-lang es does
"$BIN/lltrain" --config "$SRC/configs/tiny_latent.cfg" --quiet --set data.dir="$T/lbin" --set checkpoint.save_dir="$T/lat" \
  --set train.max_updates=200 --set train.lr=3e-3 --set train.valid_interval=0 2> "$T/lat.log" || err "latent training failed: $(tail -1 "$T/lat.log")"
"$BIN/llprune" --model "$T/lat/checkpoint_last.llm" --threshold 0.3 --lang es --output "$T/lat_es.llm" > "$T/prune.out" 2> "$T/prune.log" ||
  err "llprune --lang es failed: $(tail -1 "$T/prune.log")"
"${EXPORT[@]}" "$T/lat/checkpoint_last.llm" "$T/no" 2> "$T/err" && err "a model with latent gates exported"
grep -q "latent-depth gates have no CTranslate2 equivalent: bake them in with llprune" "$T/err" || err "latent: $(cat "$T/err")"
"${EXPORT[@]}" "$T/lat_es.llm" "$T/ct2l" 2> "$T/exportl.log" || err "pruned export failed: $(cat "$T/exportl.log")"
grep -q 'translations start with the target_prefix \[\["<2es>"\]\] (<2es>)' "$T/exportl.log" ||
  err "pruned export summary: $(cat "$T/exportl.log")"
cat "$SRC/tests/data/tiny/train.en" "$SRC/tests/data/tiny/valid.en" > "$T/in2.en"
greedy_same "latent depth pruned for es" lat "$T/lat_es.llm" "$T/ct2l" "$T/in2.en" "<2es>" --target-lang es

# 3. refused with one line: DLCL, ReZero, a file that is not a model
for v in "dlcl.encoder=true" "model.norm=rezero"; do
  d="$T/r_${v%%=*}"
  "$BIN/lltrain" --config "$T/pre.cfg" --quiet --set "$v" --set checkpoint.save_dir="$d" --set train.max_updates=1 \
    2> "$T/r.log" || { err "$v: training failed: $(tail -1 "$T/r.log")"; continue; }
  "${EXPORT[@]}" "$d/checkpoint_last.llm" "$T/no" > /dev/null 2> "$T/err" && err "$v: exported"
  [ "$(wc -l < "$T/err")" = 1 ] && grep -q "no CTranslate2 equivalent" "$T/err" || err "$v: $(cat "$T/err")"
  [ ! -e "$T/no" ] || err "$v: a refused export wrote $T/no"
done
printf 'not a model\n' > "$T/bad.llm"
"${EXPORT[@]}" "$T/bad.llm" "$T/no" 2> "$T/err" && err "a text file exported"
[ "$(wc -l < "$T/err")" = 1 ] && grep -q "^export_ctranslate2: $T/bad.llm: " "$T/err" || err "bad file: $(cat "$T/err")"
exit $fail
