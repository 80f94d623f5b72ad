#!/usr/bin/env bash
# Vocabulary shortlists end to end: llshortlist writes a map from the prepared
# data (the same bytes on 1 and 2 threads), with which a tiny model that
# overfits 32 pairs still translates them exactly; a map listing a few pieces
# restricts the output to them (beam, greedy, sampling, int8, bf16, an
# ensemble, two batch workers); a map listing every piece changes no greedy
# translation; a multilingual corpus's map per target language; bad maps and
# options fail with one line and leave no output.
source "$(dirname "$0")/lib.sh"
DATA=$SRC/tests/data/tiny

overfit_cfg > "$T/tiny.cfg"
"$BIN/lltrain" --config "$T/tiny.cfg" --quiet > /dev/null 2> "$T/train.log" ||
  { echo "FAIL: training failed: $(tail -1 "$T/train.log")" >&2; exit 1; }
M=$T/run/checkpoint_last.llm
dec() { "$BIN/lldecode" --model "$M" --threads 2 "$@"; }
short() { "$BIN/llshortlist" "$@"; }

# 1. the map from the training pairs: its shape, the same bytes on any thread count
short --config "$T/tiny.cfg" --output "$T/map" --per-source 8 --frequent 10 --threads 2 2> "$T/map.log" ||
  err "llshortlist failed: $(tail -1 "$T/map.log")"
grep -q "round 5: log-likelihood" "$T/map.log" || err "llshortlist does not log its EM rounds: $(cat "$T/map.log")"
short --config "$T/tiny.cfg" --output "$T/map1" --per-source 8 --frequent 10 --threads 1 --quiet 2> "$T/map1.log" ||
  err "llshortlist on one thread failed: $(cat "$T/map1.log")"
[ -s "$T/map1.log" ] && err "--quiet still logs: $(cat "$T/map1.log")"
cmp -s "$T/map" "$T/map1" || err "the map differs between 1 and 2 threads"
python3 - "$T/map" <<'PY' || err "the map's format (above)"
import sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
assert lines[-1] == "", "no final newline"
lines = lines[:-1]
assert lines[0].startswith("\t") and len(lines[0][1:].split(" ")) == 10, f"first line: {lines[0]!r}"
for i, l in enumerate(lines[1:], 2):
    key, _, tgt = l.partition("\t")
    assert key and " " not in key and tgt and len(tgt.split(" ")) <= 8, f"line {i}: {l!r}"
print(f"map: {len(lines) - 1} source pieces, {len(lines[0].split())} always")
PY

# 2. with it the overfitted model still translates its training pairs exactly
dec --beam 5 --input "$DATA/overfit32.en" --output "$T/full.out" 2> /dev/null || err "decoding failed"
dec --beam 5 --input "$DATA/overfit32.en" --output "$T/sl.out" --shortlist "$T/map" 2> "$T/sl.log" ||
  err "decoding with --shortlist failed: $(tail -1 "$T/sl.log")"
exact=$(paste -d '\t' "$T/sl.out" "$DATA/overfit32.es" | awk -F '\t' '$1 == $2' | wc -l)
full=$(paste -d '\t' "$T/full.out" "$DATA/overfit32.es" | awk -F '\t' '$1 == $2' | wc -l)
echo "exact training translations: $exact / 32 with the shortlist, $full without; $(grep shortlist "$T/sl.log")"
[ "$exact" -ge 28 ] || err "with the shortlist only $exact of 32 training sentences translated exactly ($full without)"
grep -Eq "shortlist $T/map: [0-9]+ rules, 10 tokens always; [0-9]+ of 80 tokens per batch" "$T/sl.log" ||
  err "the summary does not describe the shortlist: $(cat "$T/sl.log")"

# 3. a map of four pieces: the output holds their characters only (or <unk>'s ⁇)
read -r -a few <<< "$(head -1 "$T/map" | cut -f2 | cut -d' ' -f1-4)"
[ "${#few[@]}" -eq 4 ] || err "fewer than 4 pieces in the map's first line"
printf '\t%s %s %s %s\n' "${few[@]}" > "$T/few"
check_few() { # label, output file
  python3 - "$2" "${few[@]}" <<'PY' || err "$1: (above)"
import sys
ok = set("".join(sys.argv[2:]).replace("\u2581", "")) | {" ", "\u2047"}
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")[:-1]
bad = sorted({c for l in lines for c in l} - ok)
assert not bad, f"characters outside the map's pieces {sys.argv[2:]}: {bad}"
assert len(lines) == 30, f"{len(lines)} lines, want 30"
assert sum(map(len, lines)) > 0, "every line empty"
PY
}
for args in "--beam 5" "--beam 1" "--sampling --seed 3" "--precision int8" "--precision bf16" \
            "--model $M --beam 3" "--inter-threads 2 --max-sentences 4"; do
  # shellcheck disable=SC2086
  dec $args --input "$DATA/valid.en" --output "$T/few.out" --shortlist "$T/few" 2> "$T/few.log" ||
    { err "--shortlist with $args failed: $(tail -1 "$T/few.log")"; continue; }
  check_few "$args" "$T/few.out"
done

# 4. a map of every piece: the same greedy translations as no map
python3 - "$T/map" "$T/all" <<'PY'
import sys
pieces = set()
for l in open(sys.argv[1], encoding="utf-8"):
    key, _, tgt = l.rstrip("\n").partition("\t")
    pieces.update(key.split()), pieces.update(tgt.split())
open(sys.argv[2], "w", encoding="utf-8").write("\t" + " ".join(sorted(pieces)) + "\n")
PY
dec --beam 1 --input "$DATA/valid.en" --output "$T/g_full.out" 2> /dev/null
dec --beam 1 --input "$DATA/valid.en" --output "$T/g_all.out" --shortlist "$T/all" 2> /dev/null
cmp -s "$T/g_full.out" "$T/g_all.out" || err "greedy with a map of every piece differs from no map"

# 5. one-to-many data: a map per target language (--target-lang), logged by corpus
cat > "$T/ml.cfg" <<CFG
model: {d_model: 32, ffn_dim: 64, heads: 2, enc_layers: 1, dec_layers: 1, max_positions: 128}
data:
  dir: $T/mlbin
  vocab_size: 120
  lang_tags: on
  train:
    - {src: $DATA/train.en, tgt: $DATA/train.es, src_lang: en, tgt_lang: es}
    - {src: $DATA/train.en, tgt: $DATA/train.xx, src_lang: en, tgt_lang: xx}
  max_len: 64
CFG
"$BIN/llprep" --config "$T/ml.cfg" --quiet || err "llprep of the one-to-many data failed"
for l in es xx; do
  short --config "$T/ml.cfg" --target-lang $l --output "$T/ml.$l" 2> "$T/ml.$l.log" || err "--target-lang $l failed"
  grep -qx "llshortlist: en-$l (340 pairs)" "$T/ml.$l.log" || err "--target-lang $l: $(head -1 "$T/ml.$l.log")"
done
short --config "$T/ml.cfg" --output "$T/ml.all" 2> "$T/ml.all.log" || err "the one-to-many map failed"
grep -qx "llshortlist: en-es (340 pairs), en-xx (340 pairs)" "$T/ml.all.log" || err "all pairs: $(head -1 "$T/ml.all.log")"
short --config "$T/ml.cfg" --source-lang en --target-lang es --output "$T/ml.en-es" --quiet || err "--source-lang failed"
cmp -s "$T/ml.es" "$T/ml.en-es" || err "--source-lang en --target-lang es differs from --target-lang es"
cmp -s "$T/ml.es" "$T/ml.xx" && err "the es and xx maps are the same"
cmp -s "$T/ml.es" "$T/ml.all" && err "the es map is the map of both pairs"

# 5. bad input: one line, exit 1, no output written
expect_fail() { # label, wanted message (grep -E), command...
  local label=$1 want=$2
  shift 2
  rm -f "$T/none.out"
  if "$@" > /dev/null 2> "$T/e.log"; then err "$label: succeeded"; return; fi
  [ "$(wc -l < "$T/e.log")" -eq 1 ] || err "$label: not one line: $(cat "$T/e.log")"
  grep -Eq -- "$want" "$T/e.log" || err "$label: '$(cat "$T/e.log")', want /$want/"
  [ -e "$T/none.out" ] && err "$label: left an output file"
}
printf '%s\t%s\n%s %s\n' "${few[0]}" "${few[1]}" "${few[0]}" "${few[1]}" > "$T/notab"
expect_fail "no tab" "notab:2: no tab" dec --input "$DATA/valid.en" --output "$T/none.out" --shortlist "$T/notab"
printf '%s\tXQZ_not_a_piece\n' "${few[0]}" > "$T/unknown"
expect_fail "unknown piece" "unknown:1: 'XQZ_not_a_piece' is not a piece" dec --input "$DATA/valid.en" \
  --output "$T/none.out" --shortlist "$T/unknown"
expect_fail "missing map" "$T/nomap" dec --input "$DATA/valid.en" --output "$T/none.out" --shortlist "$T/nomap"
expect_fail "with --score-reference" "--shortlist: a search option, with --score-reference" dec --input \
  "$DATA/valid.en" --score-reference "$DATA/valid.es" --output "$T/none.out" --shortlist "$T/map"
expect_fail "unprepared data" "not prepared for .*run llprep" short --config "$T/tiny.cfg" --set data.vocab_size=70 \
  --output "$T/none.out"
expect_fail "no data dir" "manifest" short --data "$T/nodir" --output "$T/none.out"
expect_fail "no such pair" "no training corpus \\*-zz \\(it has en-es, en-xx\\)" short --config "$T/ml.cfg" \
  --target-lang zz --output "$T/none.out"
expect_fail "--per-source 0" "--per-source" short --config "$T/tiny.cfg" --per-source 0 --output "$T/none.out"
expect_fail "both --config and --data" "one of --config FILE or --data DIR" short --config "$T/tiny.cfg" --data \
  "$T/bin" --output "$T/none.out"
# a failed run leaves an existing map as it was
cp "$T/map" "$T/keep"
short --data "$T/nodir" --output "$T/keep" 2> /dev/null && err "llshortlist on a missing data dir succeeded"
cmp -s "$T/map" "$T/keep" || err "a failed llshortlist changed the existing output"
exit $fail
