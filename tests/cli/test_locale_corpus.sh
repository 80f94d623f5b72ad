#!/usr/bin/env bash
# Quick check of scripts/make_locale_corpus.py on the installed catalogs
# (two target languages to stay fast), plus the .mo parser on synthetic
# catalogs (both byte orders, context, plurals, accelerators).
# Skips (exit 77) when /usr/share/locale holds too few catalogs.
set -u

SRC="${LL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
SCRIPT="$SRC/scripts/make_locale_corpus.py"
LOCALE_DIR="${LL_LOCALE_DIR:-/usr/share/locale}"
LANGS="de,fr"

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

command -v python3 >/dev/null 2>&1 || skip "python3 not found"
for l in ${LANGS//,/ }; do
    n=$(find "$LOCALE_DIR/$l/LC_MESSAGES/" -maxdepth 1 -name '*.mo' 2>/dev/null | wc -l)
    [ "$n" -ge 20 ] || skip "only $n catalogs in $LOCALE_DIR/$l/LC_MESSAGES (need 20)"
done

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# ---- the parser and the cleaning rules, on synthetic catalogs ----------
python3 - "$SRC/scripts" "$TMP/syn" <<'EOF' || fail "synthetic catalog checks"
import os, struct, sys
sys.path.insert(0, sys.argv[1])
import make_locale_corpus as m

def mo(entries, endian):
    """A .mo file with the given (msgid, msgstr) byte strings."""
    entries = sorted(entries)
    n = len(entries)
    o_tab, t_tab = 28, 28 + 8 * n
    data_off = t_tab + 8 * n
    blob, otab, ttab = b"", [], []
    for k, v in entries:
        otab += [len(k), data_off + len(blob)]; blob += k + b"\0"
    for k, v in entries:
        ttab += [len(v), data_off + len(blob)]; blob += v + b"\0"
    hdr = struct.pack(endian + "7I", 0x950412DE, 0, n, o_tab, t_tab, 0, 0)
    return hdr + struct.pack(endian + "%dI" % (2 * n), *otab) + \
        struct.pack(endian + "%dI" % (2 * n), *ttab) + blob

header = (b"", b"Content-Type: text/plain; charset=ISO-8859-1\n"
               b"Plural-Forms: nplurals=2; plural=(n != 1);\n")
entries = [header,
           (b"_Open", b"\xd6_ffnen"),                          # latin-1
           (b"menu\x04_Quit", b"_Beenden"),                    # context
           (b"%d file\0%d files", b"%d Datei\0%d Dateien"),   # plural
           (b"Same", b"Same"),                                 # untranslated
           (b"Empty", b""),
           (b"max_connections is %d", b"max_connections ist %d"),
           (b"Line one\nline   two", b"Zeile eins\nZeile zwei"),
           (b"%s: %s", b"%s : %s")]
os.makedirs(sys.argv[2])
for endian in "<>":
    p = os.path.join(sys.argv[2], "t%s.mo" % ("le" if endian == "<" else "be"))
    with open(p, "wb") as f:
        f.write(mo(entries, endian))
    stats = {"bad_files": []}
    import collections
    stats = collections.Counter(); stats["bad_files"] = []
    pairs, mnem = m.catalog_entries(p, stats)
    assert not stats["bad_files"], stats["bad_files"]
    got = sorted(c for c in (m.clean_pair(a, b, True, stats) for a, b in pairs) if c)
    want = sorted([("Open", "Öffnen"), ("Quit", "Beenden"),
                   ("%d file", "%d Datei"), ("%d files", "%d Dateien"),
                   ("max_connections is %d", "max_connections ist %d"),
                   ("Line one line two", "Zeile eins Zeile zwei")])
    assert got == want, (endian, got)
# accelerators and identifiers
cases = [(("Sa_ve", "_Speichern", True), ("Save", "Speichern")),
         (("KP_Delete", "Entf (Nmblck)", True), ("KP_Delete", "Entf (Nmblck)")),
         (("new_name", "neuer_Name", False), ("new_name", "neuer_Name")),
         (("&Open", "Ö&ffnen", False), ("Open", "Ö&ffnen")),
         (("AT&T syntax", "AT&T-Syntax", False), ("AT&T syntax", "AT&T-Syntax")),
         (("the &lt;key&gt;", "die &lt;Taste&gt;", False),
          ("the &lt;key&gt;", "die &lt;Taste&gt;"))]
for (en, xx, mn), want in cases:
    got = m.strip_accels(en, xx, mn)[:2]
    assert got == want, (en, xx, got)
try:
    m.read_mo(b"\0" * 40)
    raise SystemExit("bad magic accepted")
except m.MoError:
    pass
print("synthetic catalogs: ok")
EOF

# ---- the real catalogs ---------------------------------------------------
OUT="$TMP/raw"
python3 "$SCRIPT" --out "$OUT" --langs "$LANGS" --locale-dir "$LOCALE_DIR" \
    --min-train 500 >"$TMP/log1" 2>&1 || { cat "$TMP/log1"; fail "script failed"; }
cat "$TMP/log1"
grep -q '\.mo files contributed' "$TMP/log1" || fail "no catalog count printed"

count() { wc -l <"$1" | tr -d ' '; }
for l in ${LANGS//,/ }; do
    for s in train valid test; do
        for side in en "$l"; do
            [ -f "$OUT/$s.en-$l.$side" ] || fail "missing $s.en-$l.$side"
        done
        ne=$(count "$OUT/$s.en-$l.en"); nx=$(count "$OUT/$s.en-$l.$l")
        [ "$ne" = "$nx" ] || fail "$s.en-$l: line counts differ (en=$ne $l=$nx)"
        [ "$ne" -gt 0 ] || fail "$s.en-$l is empty"
        if grep -qn '^[[:space:]]*$' "$OUT/$s.en-$l.en" "$OUT/$s.en-$l.$l"; then
            fail "$s.en-$l: empty line"
        fi
        [ "$(sort "$OUT/$s.en-$l.en" | uniq -d | wc -l)" = 0 ] \
            || fail "$s.en-$l: an English message twice"
    done
    [ "$(count "$OUT/valid.en-$l.en")" -le 500 ] || fail "valid.en-$l over the cap"
    [ "$(count "$OUT/test.en-$l.en")" -le 1000 ] || fail "test.en-$l over the cap"
done

# No valid/test English message in any training file, across languages.
cat "$OUT"/train.en-*.en | LC_ALL=C sort -u >"$TMP/train_en"
cat "$OUT"/valid.en-*.en "$OUT"/test.en-*.en | LC_ALL=C sort -u >"$TMP/heldout_en"
leak=$(LC_ALL=C comm -12 "$TMP/train_en" "$TMP/heldout_en" | wc -l)
[ "$leak" = 0 ] || fail "$leak valid/test English messages also in training data"
cat "$OUT"/valid.en-*.en | LC_ALL=C sort -u >"$TMP/valid_en"
cat "$OUT"/test.en-*.en | LC_ALL=C sort -u >"$TMP/test_en"
[ "$(LC_ALL=C comm -12 "$TMP/valid_en" "$TMP/test_en" | wc -l)" = 0 ] \
    || fail "an English message in both valid and test"

# Second run: complete outputs are kept; --force rebuilds identical bytes.
# written with open()'s mode (0666 less the umask), not mkstemp's 0600: a shared data directory stays readable
want=$(printf '%o' $((0666 & ~$(umask))))
for f in "$OUT"/*; do
  [ "$(stat -c %a "$f")" = "$want" ] || fail "$f has mode $(stat -c %a "$f"), not $want (umask $(umask))"
done
sum1=$(sed -n 's/^# sha256: //p' "$OUT/MANIFEST")
[ -n "$sum1" ] || fail "no sha256 in MANIFEST"
cp "$OUT/MANIFEST" "$TMP/MANIFEST1"
python3 "$SCRIPT" --out "$OUT" --langs "$LANGS" --locale-dir "$LOCALE_DIR" \
    --min-train 500 >"$TMP/log2" 2>&1 || fail "second run failed"
grep -q 'skipping' "$TMP/log2" || fail "complete outputs were not skipped"
python3 "$SCRIPT" --out "$OUT" --langs "$LANGS" --locale-dir "$LOCALE_DIR" \
    --min-train 500 --force >"$TMP/log3" 2>&1 || fail "forced run failed"
cmp -s "$TMP/MANIFEST1" "$OUT/MANIFEST" || fail "output not deterministic"
[ -z "$(find "$OUT" -name '*.tmp.*')" ] || fail "temporary files left behind"

# A missing language: one-line error, non-zero exit, nothing written.
if python3 "$SCRIPT" --out "$TMP/x" --langs xx-nonexistent \
        --locale-dir "$LOCALE_DIR" >"$TMP/log4" 2>&1; then
    fail "no error for a missing language"
fi
[ "$(wc -l <"$TMP/log4")" = 1 ] || { cat "$TMP/log4"; fail "error is not one line"; }
grep -q '^make_locale_corpus: error: no catalogs' "$TMP/log4" || fail "unexpected error text"
[ ! -e "$TMP/x" ] || fail "outputs written despite error"

echo "PASS"
