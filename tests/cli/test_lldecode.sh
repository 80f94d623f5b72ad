#!/usr/bin/env bash
# lldecode end to end: a tiny model trained here (it overfits 32 pairs)
# translates its training sentences exactly; outputs keep input order and
# line count (empty lines included) with beam 1 and 5; the fairseq and n-best
# formats are well formed and agree with the text output; diverse beam search,
# sampling, ensembles, prefixes and forced decoding behave; bad input fails with
# one line on stderr and leaves no output file.
source "$(dirname "$0")/lib.sh"
LLTRAIN=$BIN/lltrain
LLDECODE=$BIN/lldecode
DATA=$SRC/tests/data/tiny

{ overfit_cfg; echo "decode: {beam: 4, lenpen: 1.0}"; } > "$T/tiny.cfg"
"$LLTRAIN" --config "$T/tiny.cfg" --quiet > /dev/null 2> "$T/train.log" ||
  { echo "FAIL: training failed: $(tail -1 "$T/train.log")" >&2; exit 1; }
M=$T/run/checkpoint_last.llm
dec() { "$LLDECODE" --model "$M" --threads 2 "$@"; }

# 1. the overfitted model reproduces its training targets
dec --beam 5 --input "$DATA/overfit32.en" --output "$T/overfit.out" 2> "$T/speed.log" || err "decoding failed"
exact=$(paste -d '\t' "$T/overfit.out" "$DATA/overfit32.es" | awk -F '\t' '$1 == $2' | wc -l)
echo "exact training translations: $exact / 32; $(tail -1 "$T/speed.log")"
[ "$(head -1 "$T/overfit.out")" = "$(head -1 "$DATA/overfit32.es")" ] || err "line 1: '$(head -1 "$T/overfit.out")'"
[ "$exact" -ge 28 ] || err "only $exact of 32 training sentences translated exactly"
grep -q "beam 5" "$T/speed.log" || err "summary does not name beam 5: $(cat "$T/speed.log")"
dec --input "$DATA/test.en" --quiet 2>&1 > /dev/null | grep -q . && err "--quiet still wrote to stderr"
dec --input "$DATA/test.en" 2>&1 > /dev/null | grep -q "beam 4" || err "default beam is not the model's decode.beam (4)"

# 2. line count and order: an empty line in the middle, then the input reversed
{ head -10 "$DATA/test.en"; echo; tail -n +11 "$DATA/test.en"; } > "$T/in.en"
n=$(wc -l < "$T/in.en")
for beam in 1 5; do
  dec --beam $beam --input "$T/in.en" > "$T/out.$beam" 2>/dev/null || err "beam $beam failed"
  [ "$(wc -l < "$T/out.$beam")" -eq "$n" ] || err "beam $beam: $(wc -l < "$T/out.$beam") output lines for $n input lines"
  [ -z "$(sed -n 11p "$T/out.$beam")" ] || err "beam $beam: the empty input line did not give an empty output line"
  [ "$(grep -c . "$T/out.$beam")" -eq $((n - 1)) ] || err "beam $beam: some non-empty input gave an empty output"
  tac "$T/in.en" | dec --beam $beam --input - --max-tokens 64 > "$T/rev.$beam" 2>/dev/null || err "beam $beam reversed failed"
  tac "$T/rev.$beam" | cmp -s - "$T/out.$beam" || err "beam $beam: reversed input does not give the reversed output"
done
cmp -s "$T/out.1" "$T/out.5" && echo "note: beam 1 and beam 5 agree on every line"
# (--no-cuda-graphs takes no value, and on the CPU changes nothing)
dec --beam 5 --no-cuda-graphs --input "$T/in.en" --output "$T/file.5" 2>/dev/null || err "--output failed"
cmp -s "$T/file.5" "$T/out.5" || err "--output file differs from stdout"
ls "$T" | grep -q '\.tmp\.' && err "a temporary output file was left behind"

# 3. fairseq format: S/H/D/P per sentence, D == text output, H score == mean of P (lenpen 1, base 2)
dec --beam 5 --nbest 2 --format fairseq --input "$T/in.en" > "$T/fs.out" 2>/dev/null || err "--format fairseq failed"
python3 - "$T/fs.out" "$T/out.5" "$n" <<'PY' || err "fairseq format check failed"
import sys, collections
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")[:-1]
text = open(sys.argv[2], encoding="utf-8").read().split("\n")[:-1]
n = int(sys.argv[3])
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for l in lines:
    kind, _, rest = l.partition("-")
    idx, _, rest = rest.partition("\t")
    rows[int(idx)][kind].append(rest)
ok = sorted(rows) == list(range(n))
for i in range(n):
    r = rows[i]
    want = 1 if text[i] == "" else 2
    ok &= len(r["S"]) == 1 and len(r["H"]) == want and len(r["D"]) == want and len(r["P"]) == want
    if text[i] == "":
        continue
    ok &= r["D"][0].split("\t", 1)[1] == text[i]
    scores = [float(h.split("\t")[0]) for h in r["H"]]
    ok &= scores == sorted(scores, reverse=True)
    for h, d, p in zip(r["H"], r["D"], r["P"]):
        hs, hyp = h.split("\t")
        ps = [float(x) for x in p.split()]
        ok &= hs == d.split("\t")[0] and len(ps) == len(hyp.split()) + 1
        ok &= abs(float(hs) - sum(ps) / len(ps)) < 2e-4 and all(x <= 0 for x in ps)
    if not ok:
        print("bad block", i, dict(r), file=sys.stderr)
        break
sys.exit(0 if ok else 1)
PY

# 4. n-best text: "i ||| hypothesis ||| score", nbest lines per input, best first
dec --beam 5 --nbest 3 --input "$T/in.en" > "$T/nb.out" 2>/dev/null || err "--nbest failed"
python3 - "$T/nb.out" "$T/out.5" <<'PY' || err "n-best format check failed"
import sys
rows = [l.split(" ||| ") for l in open(sys.argv[1], encoding="utf-8").read().split("\n")[:-1]]
text = open(sys.argv[2], encoding="utf-8").read().split("\n")[:-1]
ok = all(len(r) == 3 for r in rows)
by = {}
for i, h, s in rows:
    by.setdefault(int(i), []).append((h, float(s)))
ok &= sorted(by) == list(range(len(text)))
for i, t in enumerate(text):
    hs = by.get(i, [])
    ok &= len(hs) == (1 if t == "" else 3) and hs[0][0] == t
    ok &= [s for _, s in hs] == sorted((s for _, s in hs), reverse=True)
sys.exit(0 if ok else 1)
PY

# 5. raw ids: integers in, integers out, empty lines kept
printf '5 6 7\n\n9 10 11 12\n' | dec --raw-ids --beam 2 > "$T/ids.out" 2>/dev/null || err "--raw-ids failed"
[ "$(wc -l < "$T/ids.out")" -eq 3 ] && [ -z "$(sed -n 2p "$T/ids.out")" ] || err "--raw-ids: wrong lines: $(cat "$T/ids.out")"
grep -qvE '^([0-9]+( [0-9]+)*)?$' "$T/ids.out" && err "--raw-ids output is not ids: $(cat "$T/ids.out")"

# 5b. --alignment: fairseq's A- lines pair each target piece (EOS left out) with a source piece
# (EOS left out); the text form is those pairs as words (a piece beginning with U+2581 starts a
# word), the translation unchanged; --raw-ids gives the piece pairs; n-best adds a field
{ head -6 "$DATA/overfit32.en"; echo; sed -n 7,12p "$DATA/overfit32.en"; } > "$T/al.in"
dec --beam 5 --input "$T/al.in" --output "$T/al.txt" --quiet || err "decoding failed"
for v in fairseq text nbest; do
  case $v in
    fairseq) dec --beam 5 --alignment --format fairseq --input "$T/al.in" ;;
    text) dec --beam 5 --alignment --input "$T/al.in" ;;
    nbest) dec --beam 5 --nbest 2 --alignment --input "$T/al.in" ;;
  esac > "$T/al.$v" 2> "$T/al.err" || err "--alignment ($v) failed: $(cat "$T/al.err")"
done
printf '5 6 7\n\n9 10 11 12\n' | dec --raw-ids --beam 2 --alignment > "$T/al.ids" 2> /dev/null || err "--raw-ids --alignment failed"
awk -F ' \\|\\|\\| ' 'NF != 2 { bad = 1 }
  NR != 2 { n = split($1, t, " "); m = split($2, p, " "); if (n != m) bad = 1
            for (i = 1; i <= m; i++) { split(p[i], q, "-"); if (q[2] != i - 1 || q[1] < 0 || q[1] >= (NR == 1 ? 3 : 4)) bad = 1 } }
  NR == 2 && $0 != " ||| " { bad = 1 }
  END { exit bad || NR != 3 }' "$T/al.ids" || err "--raw-ids --alignment: $(cat "$T/al.ids")"
python3 - "$T/al.fairseq" "$T/al.text" "$T/al.txt" "$T/al.nbest" <<'PY' || err "--alignment outputs are inconsistent (above)"
import sys
fs, text, plain, nbest = (open(p, encoding="utf-8").read().split("\n")[:-1] for p in sys.argv[1:])
rec = {}
for line in fs:
    tag, rest = line.split("\t", 1)
    kind, i = tag.split("-", 1)
    rec.setdefault(int(i), {}).setdefault(kind, rest.split("\t"))
def words(pieces):
    w, k = [], -1
    for p in pieces:
        if k < 0 or p.startswith("\u2581"):
            k += 1
        w.append(k)
    return w
bad, spread = [], 0
for i in range(len(plain)):
    r = rec[i]
    src = r["S"][0].split() if r["S"][0] else []
    hyp = r["H"][1].split() if r["H"][1] else []
    pairs = [tuple(map(int, p.split("-"))) for p in r["A"][0].split()] if r["A"][0] else []
    if [t for _, t in pairs] != list(range(len(hyp))) or any(not 0 <= s < len(src) for s, _ in pairs):
        bad.append(f"sentence {i}: A- pairs {pairs} for {len(src)} source and {len(hyp)} target pieces")
    spread += len({s for s, _ in pairs}) > 1
    ws, wt = words(src), words(hyp)
    want = " ||| ".join([plain[i], " ".join(f"{a}-{b}" for a, b in sorted({(ws[s], wt[t]) for s, t in pairs}, key=lambda p: (p[1], p[0])))])
    if text[i] != want:
        bad.append(f"sentence {i}: text form {text[i]!r}, want {want!r}")
    n = [l for l in nbest if l.startswith(f"{i} ||| ")]
    if len(n) != (1 if not src else 2) or n[0].split(" ||| ")[1:3] != want.split(" ||| "):
        bad.append(f"sentence {i}: n-best {n}")
if spread < 8:
    bad.append(f"only {spread} of {len(plain) - 1} sentences align to more than one source piece")
for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY

# 5a. --buffer-size 1 (interactive, as fairseq-interactive): a line's translation comes out while
# the input is still open, and equals the batch translation
line1=$(head -1 "$DATA/overfit32.en")
coproc DEC { "$LLDECODE" --model "$M" --threads 1 --buffer-size 1 --quiet 2>&1; }
echo "$line1" >&"${DEC[1]}"
got=
read -r -t 120 got <&"${DEC[0]}" || err "--buffer-size 1: no translation while the input was open"
exec {DEC[1]}>&-
wait "$DEC_PID" 2>/dev/null
[ "$got" = "$(echo "$line1" | dec --quiet)" ] || err "--buffer-size 1: '$got', not the batch translation"

# 5a2. --prefix: forcing the first two ids of each greedy translation gives the same translation;
# text prefixes begin their outputs, empty prefix lines change nothing, and sampling keeps them
printf '5 6 7\n9 10 11 12\n13 8\n' > "$T/px.ids"
dec --raw-ids --beam 1 --input "$T/px.ids" > "$T/px.greedy" 2>/dev/null || err "--raw-ids greedy failed"
awk '{ print $1, $2 }' "$T/px.greedy" > "$T/px.pre"
dec --raw-ids --beam 1 --input "$T/px.ids" --prefix "$T/px.pre" > "$T/px.forced" 2>/dev/null || err "--prefix (ids) failed"
cmp -s "$T/px.forced" "$T/px.greedy" || err "--prefix of the greedy translation's own first ids changed it: $(paste -d'|' "$T/px.forced" "$T/px.greedy" | tr '\n' ' ')"
awk 'NR % 3 == 2 { print "El perro"; next } NR % 3 == 1 { print ""; next } { print "La casa" }' "$T/in.en" > "$T/px.txt" # (first: none)
dec --beam 5 --input "$T/in.en" --prefix "$T/px.txt" > "$T/px.out" 2>/dev/null || err "--prefix failed"
dec --sampling --beam 2 --nbest 2 --input "$T/in.en" --prefix "$T/px.txt" > "$T/px.samp" 2>/dev/null || err "--prefix --sampling failed"
paste -d '\t' "$T/px.txt" "$T/px.out" "$T/out.5" "$T/in.en" | awk -F '\t' '
  $4 == "" { if ($2 != "") { print "FAIL: line " NR ": an empty input gave " $2; bad = 1 }; next }
  $1 == "" && $2 != $3 { print "FAIL: line " NR ": an empty prefix changed the translation"; bad = 1 }
  $1 != "" && index($2, $1) != 1 { print "FAIL: line " NR ": " $2 " does not begin with " $1; bad = 1 }
  END { exit bad }' >&2 || err "--prefix: outputs and their prefixes"
awk -F ' \\|\\|\\| ' -v pf="$T/px.txt" -v src="$T/in.en" 'BEGIN { while ((getline l < pf) > 0) p[n++] = l
    while ((getline l < src) > 0) s[m++] = l }
  s[$1] != "" && p[$1] != "" && index($2, p[$1]) != 1 { print "FAIL: draw " $0 " lacks " p[$1]; bad = 1 } END { exit bad }' "$T/px.samp" >&2 ||
  err "--prefix --sampling: draws without their prefix"

# 5b2. --sampling: top-1 draws (top-k 1, or top-p of almost nothing) are the greedy search; draws depend on --seed and the line, not on
# threads; n-best draws sorted; empty lines stay empty
dec --beam 1 --input "$T/in.en" > "$T/greedy.out" 2>/dev/null || err "greedy failed"
dec --sampling --sampling-topk 1 --input "$T/in.en" > "$T/top1.out" 2> "$T/top1.err" || err "--sampling failed: $(cat "$T/top1.err")"
cmp -s "$T/top1.out" "$T/greedy.out" || err "--sampling --sampling-topk 1 differs from greedy search"
dec --sampling --sampling-topp 0.000001 --input "$T/in.en" > "$T/topp.out" 2>/dev/null || err "--sampling-topp failed"
cmp -s "$T/topp.out" "$T/greedy.out" || err "--sampling --sampling-topp 1e-6 (the best token alone) differs from greedy search"
grep -q "draws per sentence 1" "$T/top1.err" || err "--sampling summary: $(cat "$T/top1.err")"
# (--max-sentences 1: each line decoded alone in both runs, so its log-probabilities are the same
# bits on every CPU; the portable build's OpenBLAS rounds a row differently in another batch)
dec --sampling --beam 3 --nbest 3 --seed 7 --max-sentences 1 --input "$T/in.en" > "$T/s7a.out" 2>/dev/null &&
  "$LLDECODE" --model "$M" --threads 1 --sampling --beam 3 --nbest 3 --seed 7 --max-sentences 1 --input "$T/in.en" \
    > "$T/s7b.out" 2>/dev/null &&
  dec --sampling --beam 3 --nbest 3 --seed 8 --max-sentences 1 --input "$T/in.en" > "$T/s8.out" 2>/dev/null ||
  err "--sampling --nbest failed"
cmp -s "$T/s7a.out" "$T/s7b.out" || err "--sampling: the draws changed with the thread count (workers)"
cmp -s "$T/s7a.out" "$T/s8.out" && err "--sampling: --seed 8 drew what --seed 7 drew"
awk -F ' \\|\\|\\| ' -v n="$n" '{ c[$1]++; if ($1 == p && $3 > s + 1e-9) bad = 1; p = $1; s = $3 }
  END { for (i = 0; i < n; i++) if (c[i] != (i == 10 ? 1 : 3)) bad = 1; exit bad }' "$T/s7a.out" ||
  err "--sampling --nbest 3: not 3 sorted draws per line: $(head -4 "$T/s7a.out")"
dec --sampling --temperature 3 --input "$T/in.en" > "$T/hot.out" 2>/dev/null || err "--temperature 3 failed"
[ "$(wc -l < "$T/hot.out")" -eq "$n" ] && [ -z "$(sed -n 11p "$T/hot.out")" ] || err "--sampling: lines not kept"
cmp -s "$T/hot.out" "$T/greedy.out" && err "--temperature 3 drew the greedy translations"

# 5c. --score-reference (forced decoding): each n-best hypothesis scored as a reference gets the
# search's score (base 2, / len^lenpen) in text, fairseq and raw-id forms; empty sides still give
# a line; the overfitted model prefers its training targets to another line's target
for lp in 1.0 0.6; do
  dec --beam 5 --nbest 3 --lenpen $lp --input "$T/in.en" > "$T/sc.nb" 2>/dev/null || err "--nbest (lenpen $lp) failed"
  # (a text reference is scored as sentencepiece segments it, spaces normalised: hypotheses whose
  # text has other pieces -- an empty piece between two spaces, or the same text twice -- are left
  # to the raw-id check below)
  awk -F ' \\|\\|\\| ' -v src="$T/in.en" 'BEGIN { while ((getline l < src) > 0) s[n++] = l }
    { k = $2; gsub(/  +/, " ", k); c[$1, k]++; i[NR] = $1; h[NR] = $2; w[NR] = $3; key[NR] = k }
    END { for (r = 1; r <= NR; r++) if (s[i[r]] != "" && c[i[r], key[r]] == 1 && key[r] == h[r]) {
            print s[i[r]] > "'"$T"'/sc.src"; print h[r] > "'"$T"'/sc.ref"; print w[r] > "'"$T"'/sc.want" } }' "$T/sc.nb"
  dec --lenpen $lp --input "$T/sc.src" --score-reference "$T/sc.ref" --output "$T/sc.got" 2> "$T/sc.err" ||
    err "--score-reference (lenpen $lp) failed: $(cat "$T/sc.err")"
  grep -q "pairs scored" "$T/sc.err" || err "--score-reference: no summary: $(cat "$T/sc.err")"
  paste "$T/sc.got" "$T/sc.want" | awk -v lp=$lp '{ d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5) { print "FAIL: lenpen " lp " line " NR ": scored " $1 ", searched " $2; bad = 1 } }
    END { exit bad || NR < 60 }' >&2 || err "--score-reference (lenpen $lp): scores differ from the search's"
  rm -f "$T/sc.src" "$T/sc.ref" "$T/sc.want"
done
dec --input "$DATA/test.en" --score-reference "$T/out.5" --format fairseq 2>/dev/null > /dev/null &&
  err "--score-reference with one line more in the references accepted"
head -3 "$DATA/overfit32.es" > "$T/sc3.ref"; head -3 "$T/in.en" > "$T/in3.en"
dec --input "$T/in.en" > "$T/sc.txt" 2>/dev/null
python3 - "$T/in.en" "$T/sc.txt" <<'PY' > "$T/sc.ref" || err "making references failed"
import sys
src, hyp = (open(p, encoding="utf-8").read().split("\n")[:-1] for p in sys.argv[1:])
print("\n".join(hyp[:5] + ["", "xq"] + hyp[7:]))  # an empty reference; an empty source (line 11) stays
PY
dec --input "$T/in.en" --score-reference "$T/sc.ref" --format fairseq > "$T/sc.fs" 2>/dev/null || err "--score-reference --format fairseq failed"
dec --input "$T/in.en" --score-reference "$T/sc.ref" > "$T/sc.plain" 2>/dev/null || err "--score-reference failed"
python3 - "$T/sc.fs" "$T/sc.plain" "$T/in.en" "$T/sc.ref" <<'PY' || err "--score-reference fairseq form (above)"
import sys
fs, plain, src, ref = (open(p, encoding="utf-8").read().split("\n")[:-1] for p in sys.argv[1:])
bad, rec = [], {}
for line in fs:
    tag, rest = line.split("\t", 1)
    kind, i = tag.split("-", 1)
    rec.setdefault(int(i), {})[kind] = rest.split("\t")
if sorted(rec) != list(range(len(src))) or len(plain) != len(src):
    bad.append(f"{len(rec)} fairseq records, {len(plain)} text lines for {len(src)} pairs")
for i, r in rec.items():
    toks = r["H"][1].split() if r["H"][1] else []
    pos = [float(x) for x in r["P"][0].split()]
    score = float(r["H"][0])
    if r["T"][0] != ref[i] or r["D"][1] != (ref[i] if ref[i] != "xq" else " \u2047 q"):
        bad.append(f"pair {i}: T {r['T'][0]!r}, D {r['D'][1]!r}, reference {ref[i]!r}")
    if len(pos) != len(toks) + 1 or abs(score - sum(pos) / len(pos)) > 1e-3 or abs(score - float(plain[i])) > 1e-6:
        bad.append(f"pair {i}: score {score} for {len(toks)} pieces, P {pos}, text {plain[i]}")
    if any(not (p <= 0) for p in pos) or (src[i] == "") != (r["S"][0] == ""):
        bad.append(f"pair {i}: P {pos}, S {r['S'][0]!r} for source {src[i]!r}")
for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
head -20 "$DATA/overfit32.en" > "$T/ov.en"; head -20 "$DATA/overfit32.es" > "$T/ov.es"
{ tail -n +2 "$T/ov.es"; head -1 "$T/ov.es"; } > "$T/ov.shift"
dec --input "$T/ov.en" --score-reference "$T/ov.es" > "$T/ov.right" 2>/dev/null &&
  dec --input "$T/ov.en" --score-reference "$T/ov.shift" > "$T/ov.wrong" 2>/dev/null || err "--score-reference failed"
better=$(paste "$T/ov.right" "$T/ov.wrong" | awk '$1 > $2 + 0.1' | wc -l)
[ "$better" -ge 18 ] || err "--score-reference: the training target scored clearly higher on $better of 20 lines only"
printf '5 6 7\n\n9 10 11 12\n' > "$T/sc.ids"
dec --raw-ids --beam 3 --nbest 2 --input "$T/sc.ids" > "$T/sc.idsnb" 2>/dev/null || err "--raw-ids --nbest failed"
awk -F ' \\|\\|\\| ' '$1 != 1 { print $2 > "'"$T"'/sc.idsref"; print $3 > "'"$T"'/sc.idswant"; print ($1 ? "9 10 11 12" : "5 6 7") > "'"$T"'/sc.idssrc" }' "$T/sc.idsnb"
dec --raw-ids --input "$T/sc.idssrc" --score-reference "$T/sc.idsref" > "$T/sc.idsgot" 2>/dev/null || err "--raw-ids --score-reference failed"
paste "$T/sc.idsgot" "$T/sc.idswant" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 2e-5) bad = 1 } END { exit bad || NR != 4 }' ||
  err "--raw-ids --score-reference: $(paste "$T/sc.idsgot" "$T/sc.idswant" | tr '\n' ' ')"

# 5d. ensembles (--model A --model B): a model with itself translates as alone; two models give
# each token log2 of the mean of their probabilities (each scored alone by --score-reference), and
# the ensemble's search scores its translations as its forced decoding does
"$LLTRAIN" --config "$T/tiny.cfg" --quiet --set train.seed=2 --set train.max_updates=120 \
  --set checkpoint.save_dir="$T/run2" > /dev/null 2> "$T/train2.log" || err "second model: $(tail -1 "$T/train2.log")"
M2=$T/run2/checkpoint_last.llm
dec --model "$M" --beam 5 --input "$T/in.en" > "$T/ens.self" 2> "$T/ens.err" || err "--model twice: $(cat "$T/ens.err")"
cmp -s "$T/ens.self" "$T/out.5" || err "a model in an ensemble with itself translated otherwise than alone"
grep -q "beam 5, an ensemble of 2 models" "$T/ens.err" || err "ensemble summary: $(cat "$T/ens.err")"
dec --model "$M2" --beam 5 --format fairseq --input "$T/in.en" > "$T/ens.fs" 2>/dev/null || err "ensemble search failed"
grep '^D-' "$T/ens.fs" | sort -t- -k2n | cut -f3 > "$T/ens.txt"
[ "$(wc -l < "$T/ens.txt")" -eq "$n" ] || err "ensemble: $(wc -l < "$T/ens.txt") translations for $n lines"
# --weights: equal weights on any scale are the plain mean; 3,1 mixes 3/4 of the first model's
# probability with 1/4 of the second's
dec --model "$M2" --weights 2.5,2.5 --beam 5 --format fairseq --input "$T/in.en" > "$T/ens.fs22" 2>/dev/null || err "--weights 2.5,2.5 failed"
cmp -s "$T/ens.fs" "$T/ens.fs22" || err "--weights 2.5,2.5 searched otherwise than equal weights by default"
# weights 30 orders of magnitude apart and beyond (the offsets in logs): the first model alone
dec --model "$M2" --weights 1e30,1e-300 --beam 5 --input "$T/in.en" > "$T/ens.far" 2> "$T/ens.err" ||
  err "--weights 1e30,1e-300: $(cat "$T/ens.err")"
cmp -s "$T/ens.far" "$T/out.5" || err "--weights 1e30,1e-300 translated otherwise than the first model alone"
for who in ens a b w; do
  case $who in ens) args=(--model "$M" --model "$M2") ;; a) args=(--model "$M") ;; b) args=(--model "$M2") ;;
    w) args=(--model "$M" --model "$M2" --weights 3,1) ;; esac
  "$LLDECODE" "${args[@]}" --threads 2 --input "$T/in.en" --score-reference "$T/ens.txt" --format fairseq \
    > "$T/ens.sc.$who" 2>/dev/null || err "--score-reference with $who failed"
done
python3 - "$T/ens.fs" "$T/ens.sc.ens" "$T/ens.sc.a" "$T/ens.sc.b" "$T/ens.sc.w" <<'PY' || err "ensemble scores (above)"
import math, sys
def records(path):
    rec = {}
    for line in open(path, encoding="utf-8").read().split("\n")[:-1]:
        tag, rest = line.split("\t", 1)
        kind, i = tag.split("-", 1)
        rec.setdefault(int(i), {})[kind] = rest.split("\t")
    return rec
search, ens, a, b, w = (records(p) for p in sys.argv[1:])
bad, tokens, same = [], 0, 0
for i in ens:
    pe, pa, pb, pw = ([float(x) for x in r[i]["P"][0].split()] for r in (ens, a, b, w))
    for t, (e, x, y, ew) in enumerate(zip(pe, pa, pb, pw)):
        want = math.log2((2 ** x + 2 ** y) / 2)
        want_w = math.log2((3 * 2 ** x + 2 ** y) / 4)
        tokens += 1
        if abs(e - want) > 3e-4:
            bad.append(f"line {i} token {t}: ensemble {e}, the models {x} and {y} mixed {want:.4f}")
        if abs(ew - want_w) > 3e-4:
            bad.append(f"line {i} token {t}: --weights 3,1 gave {ew}, the models {x} and {y} mixed 3:1 {want_w:.4f}")
    if search[i]["S"][0] and search[i]["H"][1] == ens[i]["H"][1]:  # re-encodes to the pieces searched
        same += 1
        if abs(float(search[i]["H"][0]) - float(ens[i]["H"][0])) > 1e-4:
            bad.append(f"line {i}: searched {search[i]['H'][0]}, forced {ens[i]['H'][0]}")
if tokens < 100 or same < len(ens) // 2:
    bad.append(f"only {tokens} tokens, {same} of {len(ens)} translations compared")
differ = sum(abs(float(ens[i]["H"][0]) - float(a[i]["H"][0])) > 1e-3 for i in ens)
if differ < len(ens) // 2:
    bad.append(f"the ensemble's scores differ from the first model's alone on {differ} lines only")
for x in bad[:10]:
    print("FAIL:", x, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
"$LLTRAIN" --config "$T/tiny.cfg" --quiet --set data.dir="$T/bin60" --set data.vocab_size=60 --set train.max_updates=1 \
  --set checkpoint.save_dir="$T/run60" > /dev/null 2>&1 || err "a model with another vocabulary: training failed"
"$LLTRAIN" --config "$T/tiny.cfg" --quiet --set model.max_positions=64 --set train.max_updates=1 \
  --set checkpoint.save_dir="$T/run64" > /dev/null 2>&1 || err "a model with max_positions 64: training failed"

# 5e. --unkpen (fairseq's): 0 changes nothing; a bonus of 1000 makes <unk> (id 3) every token up to
# the length limit, in the search and in sampling
dec --beam 5 --unkpen 0 --input "$T/in.en" > "$T/unk0" 2>/dev/null && cmp -s "$T/unk0" "$T/out.5" || err "--unkpen 0 changed the translations"
for how in "--beam 2" "--sampling"; do
  # shellcheck disable=SC2086
  dec $how --raw-ids --unkpen -1000 --max-len-b 4 --input "$T/sc.ids" > "$T/unkb" 2>/dev/null || err "--unkpen -1000 ($how) failed"
  [ "$(tr '\n' '|' < "$T/unkb")" = "3 3 3 3||3 3 3 3|" ] || err "--unkpen -1000 ($how): $(tr '\n' '|' < "$T/unkb")"
done

# 5f. --no-repeat-ngram-size (fairseq's): 0 changes nothing; with <unk> favoured (which would fill
# every step), no translation repeats an n-gram of ids, in the search and in sampling
dec --beam 5 --no-repeat-ngram-size 0 --input "$T/in.en" > "$T/nr0" 2>/dev/null && cmp -s "$T/nr0" "$T/out.5" ||
  err "--no-repeat-ngram-size 0 changed the translations"
for how in "--beam 4" "--sampling"; do
  for ng in 1 2 3; do
    # shellcheck disable=SC2086
    dec $how --raw-ids --unkpen -20 --no-repeat-ngram-size $ng --max-len-b 12 --input "$T/sc.ids" > "$T/nrb" 2>/dev/null ||
      err "--no-repeat-ngram-size $ng ($how) failed"
    python3 - "$T/nrb" "$ng" <<'PY' || err "--no-repeat-ngram-size $ng ($how): $(tr '\n' '|' < "$T/nrb")"
import sys
lines, n = open(sys.argv[1]).read().split("\n")[:-1], int(sys.argv[2])
assert len(lines) == 3 and any("3" in l.split() for l in lines), lines
for l in lines:
    t = l.split()
    grams = [tuple(t[i:i + n]) for i in range(len(t) - n + 1)]
    assert len(grams) == len(set(grams)), (n, l)
PY
  done
done
dec --beam 4 --raw-ids --unkpen -20 --max-len-b 12 --input "$T/sc.ids" > "$T/nrb" 2>/dev/null
grep -q "3 3 3" "$T/nrb" || err "without --no-repeat-ngram-size, <unk> favoured repeats no 3-gram: $(tr '\n' '|' < "$T/nrb")"

# 5g. --diverse-beam-groups and --diversity-rate (fairseq's diverse beam search and diverse siblings
# search; their exact searches: grad_test_diverse): one group is beam search; the n-best lists are
# well formed, and their scores hold the penalties: each hypothesis scored as a reference
# (--score-reference: the model alone) scores at least as high, some higher
dec --beam 5 --diverse-beam-groups 1 --input "$T/in.en" > "$T/dv1" 2>/dev/null && cmp -s "$T/dv1" "$T/out.5" ||
  err "--diverse-beam-groups 1 is not beam search"
head -3 "$T/sc.ids" | grep . > "$T/dv.ids"
for how in "--diverse-beam-groups 2 --diverse-beam-strength 2" "--diversity-rate 1.5"; do
  # shellcheck disable=SC2086
  dec --raw-ids --beam 4 --nbest 4 $how --format fairseq --input "$T/dv.ids" > "$T/dv.fs" 2>/dev/null || err "$how failed"
  python3 - "$T/dv.ids" "$T/dv.fs" "$T/dv" <<'PY' || err "$how: bad n-best lists: $(head -c 600 "$T/dv.fs")"
import sys
src = open(sys.argv[1]).read().split("\n")[:-1]
hyps = [l.split("\t") for l in open(sys.argv[2]) if l.startswith("H-")]
assert len(hyps) == 4 * len(src), (len(hyps), len(src))
with open(sys.argv[3] + ".src", "w") as s, open(sys.argv[3] + ".ref", "w") as r, open(sys.argv[3] + ".score", "w") as c:
    for h in hyps:
        s.write(src[int(h[0][2:])] + "\n"), r.write(h[2]), c.write(h[1] + "\n")
PY
  dec --raw-ids --input "$T/dv.src" --score-reference "$T/dv.ref" > "$T/dv.model" 2>/dev/null || err "scoring the $how hypotheses failed"
  paste "$T/dv.score" "$T/dv.model" | awk '$2 < $1 - 1e-4 { bad++ } $2 > $1 + 0.1 { higher++ }
    END { if (bad || !higher) { print "diverse scores vs the model'"'"'s: " bad+0 " above, " higher+0 " penalised"; exit 1 } }' ||
    err "$how: the scores do not hold the penalties: $(paste "$T/dv.score" "$T/dv.model" | tr '\n' '|')"
done

# 5h. --precision int8 (CTranslate2's int8 for the decoder's steps): the overfitted model still
# reproduces its training targets; the portable C int8 kernels give the same bytes as this CPU's
# (LL_CPU_INT8_KERNELS=generic: the int8 kernels alone; LL_CPU_KERNELS=generic would also change
# the fp32 kernels' rounding, the softmax rows', so a near tie in the beam could go the other way);
# an ensemble of the model with itself translates as the model alone
dec --beam 5 --precision int8 --input "$DATA/overfit32.en" --output "$T/q8.out" 2> "$T/q8.log" || err "int8 failed"
exact=$(paste -d '\t' "$T/q8.out" "$DATA/overfit32.es" | awk -F '\t' '$1 == $2' | wc -l)
[ "$exact" -ge 28 ] || err "int8: only $exact of 32 training sentences translated exactly"
grep -q "int8 (" "$T/q8.log" || err "int8: the summary does not say so: $(cat "$T/q8.log")"
LL_CPU_INT8_KERNELS=generic "$LLDECODE" --model "$M" --threads 2 --beam 5 --precision int8 --input "$DATA/overfit32.en" \
  > "$T/q8g.out" 2> "$T/q8g.log" && cmp -s "$T/q8.out" "$T/q8g.out" || err "int8: the C int8 kernels translate otherwise"
grep -q "int8 (generic)" "$T/q8g.log" || err "int8: LL_CPU_INT8_KERNELS=generic not taken: $(tail -1 "$T/q8g.log")"
out=$(LL_CPU_INT8_KERNELS=sse "$LLDECODE" --model "$M" --input /dev/null 2>&1) && err "LL_CPU_INT8_KERNELS=sse accepted"
echo "$out" | grep -q "LL_CPU_INT8_KERNELS=sse: expected auto, generic, avx2 or avx512vnni" || err "bad LL_CPU_INT8_KERNELS: $out"
dec --beam 5 --precision int8 --model "$M" --input "$DATA/overfit32.en" > "$T/q8e.out" 2> /dev/null &&
  cmp -s "$T/q8.out" "$T/q8e.out" || err "int8: an ensemble of the model with itself translates otherwise"
echo "int8: $exact / 32 training translations exact; $(tail -1 "$T/q8.log")"

# 6. bad input: one line on stderr, exit 1, no output file (and an existing one untouched)
check_error() { # name expected-substring args...
  local name=$1 want=$2; shift 2
  rm -f "$T/bad.out"
  "$LLDECODE" --output "$T/bad.out" "$@" < /dev/null > /dev/null 2> "$T/err"
  local rc=$?
  [ $rc -eq 1 ] || err "$name: exit status $rc"
  [ "$(wc -l < "$T/err")" -eq 1 ] || err "$name: expected one line on stderr, got: $(cat "$T/err")"
  grep -qF -- "$want" "$T/err" || err "$name: '$want' not in: $(cat "$T/err")"
  [ ! -e "$T/bad.out" ] || err "$name: left an output file"
}
check_error "missing model" "$T/nope.llm" --model "$T/nope.llm" --input "$DATA/test.en"
head -c 5000 "$M" > "$T/corrupt.llm"
check_error "truncated model" "corrupt.llm" --model "$T/corrupt.llm" --input "$DATA/test.en"
cp "$M" "$T/flipped.llm"
printf 'X' | dd of="$T/flipped.llm" bs=1 seek=3000 conv=notrunc 2>/dev/null
check_error "corrupt model" "flipped.llm" --model "$T/flipped.llm" --input "$DATA/test.en"
check_error "beam 0" "--beam" --model "$M" --beam 0 --input "$DATA/test.en"
check_error "nbest > beam" "--nbest" --model "$M" --beam 2 --nbest 3 --input "$DATA/test.en"
check_error "min-len above the length limit" "--max-len-b 10" --model "$M" --min-len 11 --max-len-b 10 --input "$DATA/test.en"
check_error "min-len above the positions" "max_positions - 1 = 127" --model "$M" --min-len 128 --max-len-a 2 --input "$DATA/test.en"
check_error "source language of the other side" "--source-lang es: the model translates from en only" --model "$M" --source-lang es --input "$DATA/test.en"
check_error "--threshold without latent layers" "--threshold: the model has no latent-depth layers" --model "$M" --threshold 0.3 --input "$DATA/test.en"
check_error "--latent-inference without latent layers" "--latent-inference: the model has no latent-depth layers" --model "$M" --latent-inference soft --input "$DATA/test.en"
check_error "bad format" "--format" --model "$M" --format json --input "$DATA/test.en"
check_error "missing input" "nothere.en" --model "$M" --input "$T/nothere.en"
check_error "unknown target language" "es" --model "$M" --target-lang de --input "$DATA/test.en"
printf '5 6\n7 x 8\n' > "$T/bad.ids"
printf '5 6\n7 8\n' > "$T/good.ids"
check_error "bad reference id" "bad.ids:2" --model "$M" --raw-ids --input "$T/good.ids" --score-reference "$T/bad.ids"
check_error "bad id" "bad.ids:2" --model "$M" --raw-ids --input "$T/bad.ids"
printf '5 6\n7 99999\n' > "$T/big.ids"
check_error "id out of range" "big.ids:2" --model "$M" --raw-ids --input "$T/big.ids"
for id in +5 -0 007 0x5 5.0; do # (round 5: strtol took a sign and leading zeros)
  printf '5 6\n7 %s 8\n' "$id" > "$T/sig.ids"
  check_error "id '$id'" "sig.ids:2: bad token id '$id'" --model "$M" --raw-ids --input "$T/sig.ids"
done
printf '5 2 6\n' > "$T/eosin.ids" # EOS (id 2) inside a line
check_error "EOS inside a line" "eosin.ids:1: the EOS id 2 inside the line" --model "$M" --raw-ids --input "$T/eosin.ids"
printf '5 6 2\n2\n\n' | dec --raw-ids --beam 2 > "$T/eos.out" 2> /dev/null || err "--raw-ids with final EOS ids failed"
[ "$(sed -n 2p "$T/eos.out")" = "" ] && [ -n "$(sed -n 1p "$T/eos.out")" ] && [ "$(wc -l < "$T/eos.out")" -eq 3 ] ||
  err "--raw-ids: an EOS-only line is not an empty sentence: $(cat "$T/eos.out")"
printf '5 1 6\n' > "$T/pad.ids"
check_error "pad id" "pad.ids:1" --model "$M" --raw-ids --input "$T/pad.ids"
check_error "no model" "--model" --input "$DATA/test.en"
check_error "ensemble, another vocabulary" "--model $T/run60/checkpoint_last.llm: its sentencepiece vocabulary differs from $M's" \
  --model "$M" --model "$T/run60/checkpoint_last.llm" --input "$T/in.en"
check_error "--weights, one model" "--weights: an ensemble's option, but there is one --model" \
  --model "$M" --weights 1 --input "$T/in.en"
check_error "--weights, too few" "--weights '2': 1 weights for 2 models" --model "$M" --model "$M2" --weights 2 --input "$T/in.en"
check_error "--weights, too many" "more weights than the 2 models" --model "$M" --model "$M2" --weights 1,2,3 --input "$T/in.en"
check_error "--weights, zero" "weight 2 is 0; each must be positive" --model "$M" --model "$M2" --weights 1,0 --input "$T/in.en"
check_error "--weights, empty" "weight 2 is empty" --model "$M" --model "$M2" --weights 1, --input "$T/in.en"
check_error "--weights, not a number" "--weights (weight 1)" --model "$M" --model "$M2" --weights x,1 --input "$T/in.en"
check_error "ensemble, another max_positions" "model.max_positions 64, but $M has 128" \
  --model "$M" --model "$T/run64/checkpoint_last.llm" --input "$T/in.en"
cp "$M2" "$T/m2copy.llm"
"$LLDECODE" --model "$M" --model "$T/m2copy.llm" --input "$T/in.en" --output "$T/m2copy.llm" 2> "$T/err" &&
  err "--output onto the second --model accepted"
grep -q "it is a --model too" "$T/err" && cmp -s "$M2" "$T/m2copy.llm" || err "--output onto the second --model: $(cat "$T/err")"
check_error "references too few" "sc3.ref: 3 lines, but $T/in.en has more" --model "$M" --input "$T/in.en" --score-reference "$T/sc3.ref"
check_error "references too many" "sc.ref: more than 3 lines, but $T/in3.en has 3" --model "$M" --input "$T/in3.en" --score-reference "$T/sc.ref"
check_error "a search option" "--beam: a search option, with --score-reference" --model "$M" --beam 5 --input "$T/in.en" --score-reference "$T/sc.ref"
check_error "alignment with scores" "--alignment: a search option" --model "$M" --alignment --input "$T/in.en" --score-reference "$T/sc.ref"
check_error "topk without sampling" "--sampling-topk: a sampling option, without --sampling" --model "$M" --sampling-topk 5 --input "$T/in.en"
check_error "zero temperature" "--temperature" --model "$M" --sampling --temperature 0 --input "$T/in.en"
check_error "zero top-p" "--sampling-topp" --model "$M" --sampling --sampling-topp 0 --input "$T/in.en"
check_error "unkpen with scores" "--unkpen: a search option, with --score-reference" --model "$M" --unkpen 1 --input "$T/in.en" --score-reference "$T/sc.ref"
check_error "no-repeat with scores" "--no-repeat-ngram-size: a search option, with --score-reference" --model "$M" \
  --no-repeat-ngram-size 3 --input "$T/in.en" --score-reference "$T/sc.ref"
check_error "no-repeat negative" "--no-repeat-ngram-size" --model "$M" --no-repeat-ngram-size -1 --input "$T/in.en"
check_error "unkpen not a number" "--unkpen" --model "$M" --unkpen lots --input "$T/in.en"
check_error "groups not dividing the beam" "--diverse-beam-groups 3: must divide the beam size 4" --model "$M" \
  --beam 4 --diverse-beam-groups 3 --input "$T/in.en"
check_error "diverse sampling" "--diverse-beam-groups: diverse beam search, with --sampling" --model "$M" --sampling \
  --diverse-beam-groups 2 --beam 2 --input "$T/in.en"
check_error "diverse with a prefix" "--diverse-beam-strength: diverse beam search does not take a --prefix" --model "$M" \
  --diverse-beam-strength 1 --diverse-beam-groups 2 --prefix "$T/px.txt" --input "$T/in.en"
check_error "strength alone" "--diverse-beam-strength: without --diverse-beam-groups" --model "$M" \
  --diverse-beam-strength 1 --input "$T/in.en"
check_error "diverse with scores" "--diverse-beam-groups: a search option, with --score-reference" --model "$M" \
  --diverse-beam-groups 2 --input "$T/in.en" --score-reference "$T/sc.ref"
check_error "zero groups" "--diverse-beam-groups" --model "$M" --diverse-beam-groups 0 --input "$T/in.en"
check_error "two diverse searches" "--diversity-rate: diverse siblings search, with --diverse-beam-groups" --model "$M" \
  --diverse-beam-groups 2 --diversity-rate 0.5 --input "$T/in.en"
check_error "siblings sampling" "--diversity-rate: diverse siblings search, with --sampling" --model "$M" --sampling \
  --diversity-rate 0.5 --input "$T/in.en"
check_error "siblings with a prefix" "--diversity-rate: diverse siblings search does not take a --prefix" --model "$M" \
  --diversity-rate 0.5 --prefix "$T/px.txt" --input "$T/in.en"
check_error "negative rate" "--diversity-rate" --model "$M" --diversity-rate -1 --input "$T/in.en"
check_error "int8 on a GPU" "--precision int8: the CPU's" --model "$M" --precision int8 --device cuda --input "$T/in.en"
check_error "int8 scoring" "--precision int8: for the search; --score-reference scores in fp32" --model "$M" \
  --precision int8 --input "$T/in.en" --score-reference "$T/sc.ref"
check_error "unknown precision" "--precision takes fp32, bf16 or int8, not 'int4'" --model "$M" --precision int4 \
  --input "$T/in.en"
check_error "siblings with scores" "--diversity-rate: a search option, with --score-reference" --model "$M" \
  --diversity-rate 1 --input "$T/in.en" --score-reference "$T/sc.ref"
check_error "sampling a reference" "--sampling: a search option, with --score-reference" --model "$M" --sampling --input "$T/in.en" --score-reference "$T/sc.ref"
check_error "more n-best than draws" "--nbest 2: must not exceed the draws per sentence (--beam) 1" --model "$M" --sampling --nbest 2 --input "$T/in.en"
check_error "prefixes too few" "px.pre: 3 lines, but $T/in.en has more" --model "$M" --input "$T/in.en" --prefix "$T/px.pre"
check_error "prefixes too many" "px.txt: more than 3 lines, but $T/in3.en has 3" --model "$M" --input "$T/in3.en" --prefix "$T/px.txt"
check_error "prefix with scores" "--prefix: a search option, with --score-reference" --model "$M" --input "$T/in.en" --prefix "$T/px.txt" --score-reference "$T/sc.ref"
check_error "prefix on stdin too" "--prefix -: standard input is already the --input" --model "$M" --prefix -
python3 -c "print(' '.join(['casa'] * 200))" > "$T/long.pre"; head -1 "$T/in.en" > "$T/in1p.en"
check_error "over-long prefix" "long.pre:1: a prefix of" --model "$M" --input "$T/in1p.en" --prefix "$T/long.pre"
check_error "both on stdin" "--score-reference -: standard input is already the --input" --model "$M" --score-reference -
python3 -c "print(' '.join(['casa'] * 200))" > "$T/long.ref"
head -1 "$T/in3.en" > "$T/in1.en"
check_error "over-long reference" "long.ref:1: the reference has" --model "$M" --input "$T/in1.en" --score-reference "$T/long.ref"
echo keep > "$T/keep.out"
"$LLDECODE" --model "$M" --raw-ids --input "$T/bad.ids" --output "$T/keep.out" 2>/dev/null && err "bad ids accepted"
[ "$(cat "$T/keep.out")" = keep ] || err "a failed run changed an existing output file"
ls "$T" | grep -q '\.tmp\.' && err "a failed run left a temporary file"

[ $fail -eq 0 ] && echo "test_lldecode: all checks passed"
exit $fail
