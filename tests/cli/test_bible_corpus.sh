#!/usr/bin/env bash
# Quick check of scripts/make_bible_corpus.py on a few books.
# Skips (exit 77) when diatheke or the SWORD modules are not installed.
set -u

SRC="${LL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
SCRIPT="$SRC/scripts/make_bible_corpus.py"

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

command -v python3 >/dev/null 2>&1 || skip "python3 not found"
command -v diatheke >/dev/null 2>&1 || skip "diatheke not installed (apt-get install diatheke)"
mods="$(diatheke -b system -k modulelist 2>/dev/null)"
grep -q '^engWEB2015eb :' <<<"$mods" || skip "module engWEB2015eb missing (apt-get install sword-text-web)"
grep -q '^spaRV1909eb :' <<<"$mods" || skip "module spaRV1909eb missing (apt-get install sword-text-sparv)"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
OUT="$TMP/raw"
# Gen: Gen 1:1 and an enclitic (Gen 19:12 "sácalo"); Ps: psalm titles;
# Jonah: chapter 1 differs in versification, chapter 2 is shifted;
# Ruth: valid; Titus, Phlm: test (Titus 3:15 carries an RV subscription).
BOOKS="Gen,Ruth,Jonah,Ps,Titus,Phlm"

python3 "$SCRIPT" --out "$OUT" --books "$BOOKS" >"$TMP/log1" 2>&1 \
    || { cat "$TMP/log1"; fail "script failed"; }
cat "$TMP/log1"

count() { wc -l <"$1" | tr -d ' '; }
for s in train valid test; do
    for ext in en es ref; do
        [ -f "$OUT/$s.$ext" ] || fail "missing $s.$ext"
    done
    n_en=$(count "$OUT/$s.en"); n_es=$(count "$OUT/$s.es"); n_ref=$(count "$OUT/$s.ref")
    [ "$n_en" = "$n_es" ] && [ "$n_en" = "$n_ref" ] \
        || fail "$s: line counts differ (en=$n_en es=$n_es ref=$n_ref)"
    if grep -qn '^[[:space:]]*$' "$OUT/$s.en" "$OUT/$s.es" "$OUT/$s.ref"; then
        fail "$s: empty line"
    fi
    if grep -q '[<>]' "$OUT/$s.en" "$OUT/$s.es"; then
        fail "$s: markup left in text"
    fi
done

in_range() {  # name value lo hi
    [ "$2" -ge "$3" ] && [ "$2" -le "$4" ] || fail "$1 has $2 pairs, expected $3..$4"
}
in_range train "$(count "$OUT/train.en")" 3600 4400   # Gen + Jonah + Ps
in_range valid "$(count "$OUT/valid.en")" 75 85       # Ruth (85 verses)
in_range test  "$(count "$OUT/test.en")" 60 71        # Titus + Philemon

# Books land in their split only.
grep -Eq '^(Ruth|Titus|Phlm) ' "$OUT/train.ref" && fail "valid/test book in train"
grep -Evq '^Ruth ' "$OUT/valid.ref" && fail "non-valid book in valid"
grep -Evq '^(Titus|Phlm) ' "$OUT/test.ref" && fail "non-test book in test"
grep -Eq '^(Ezra|Esth|Lam|Joel|Hab|Titus|Phlm|Jas|1Pet|2Pet|1John|2John|3John|Jude) ' \
    "$OUT/train.ref" "$OUT/valid.ref" && fail "test-book verse outside test"

# Dropped chapters: Jonah 1 (versification), Jonah 2 (shifted division).
grep -Eq '^Jonah [12]:' "$OUT/train.ref" && fail "Jonah 1/2 should be dropped"
grep -q '^Jonah 3:1$' "$OUT/train.ref" || fail "Jonah 3:1 missing"

pair() {  # split ref -> "en<TAB>es"
    local n
    n=$(grep -nx "$2" "$OUT/$1.ref" | head -1 | cut -d: -f1)
    [ -n "$n" ] || fail "$2 not found in $1"
    paste "$OUT/$1.en" "$OUT/$1.es" | sed -n "${n}p"
}
want=$'In the beginning, God created the heavens and the earth.\tEN el principio crió Dios los cielos y la tierra.'
got=$(pair train "Gen 1:1")
[ "$got" = "$want" ] || fail "Gen 1:1 pair is '$got'"
[ "$(head -1 "$OUT/train.ref")" = "Gen 1:1" ] || fail "train does not start at Gen 1:1"

pair train "Gen 19:12" | grep -q 'sácalo de este lugar' || fail "enclitic not joined in Gen 19:12"
# Psalm titles are dropped on both sides.
pair train "Ps 3:1" | grep -q $'^Yahweh, how.*\t¡OH Jehová' || fail "Ps 3:1 title not stripped"
grep -q 'Salmo de David' "$OUT/train.es" && fail "RV psalm title left in text"
# RV epistle subscription stripped.
pair test "Titus 3:15" | grep -q 'Nicópolis' && fail "Titus 3:15 subscription kept"
# No glued words from stripped markup.
grep -q 'Godcreated' "$OUT/train.en" && fail "glued words"

# Second run: complete outputs are kept; --force rebuilds identical bytes.
sum1=$(sed -n 's/^# sha256: //p' "$OUT/MANIFEST")
[ -n "$sum1" ] || fail "no sha256 in MANIFEST"
python3 "$SCRIPT" --out "$OUT" --books "$BOOKS" >"$TMP/log2" 2>&1 || fail "second run failed"
grep -q 'skipping' "$TMP/log2" || fail "complete outputs were not skipped"
python3 "$SCRIPT" --out "$OUT" --books "$BOOKS" --force >"$TMP/log3" 2>&1 || fail "forced run failed"
sum2=$(sed -n 's/^# sha256: //p' "$OUT/MANIFEST")
[ "$sum1" = "$sum2" ] || fail "output not deterministic ($sum1 vs $sum2)"
ls "$OUT" | grep -q 'tmp' && fail "temporary files left behind"

# Missing diatheke: clear error naming the package, non-zero exit.
PY=$(python3 -c 'import sys; print(sys.executable)')
mkdir -p "$TMP/emptybin"
if PATH="$TMP/emptybin" "$PY" "$SCRIPT" --out "$TMP/x" --force >"$TMP/log4" 2>&1; then
    fail "no error without diatheke"
fi
grep -q 'apt-get install diatheke' "$TMP/log4" || { cat "$TMP/log4"; fail "error does not name the package"; }
[ ! -e "$TMP/x/train.en" ] || fail "outputs written despite error"

echo "PASS"
