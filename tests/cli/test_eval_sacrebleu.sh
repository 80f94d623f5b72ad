#!/usr/bin/env bash
# lleval: error paths and output format (always), then agreement with the real
# sacrebleu package on ~200 generated and hand-written cases
# (tests/data/eval/compare_sacrebleu.py).  The comparison skips (exit 77) when
# sacrebleu is missing and cannot be pip-installed (no network).
set -u

SRC="${LL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
LLEVAL="${LL_BINARY_DIR:+$LL_BINARY_DIR/lleval}"
[ -x "${LLEVAL:-}" ] || LLEVAL="$(command -v lleval || true)"

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ -x "$LLEVAL" ] || fail "lleval not built (looked in \$LL_BINARY_DIR and PATH)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cd "$TMP" || exit 1

# ---- error paths: one line on stderr, exit 1 ----
expect_error() { # expect_error PATTERN CMD...
    local pat="$1"
    shift
    "$@" >out 2>err && fail "'$*' succeeded"
    [ "$(wc -l <err)" -eq 1 ] || { cat err; fail "'$*': error is not one line"; }
    grep -q -- "$pat" err || { cat err; fail "'$*': error lacks '$pat'"; }
    [ -s out ] && fail "'$*' printed to stdout"
    return 0
}
printf 'a b\nc d\n' >hyp2
printf 'a b\nc d\ne f\n' >ref3
printf 'a \xff b\nc d\n' >bad_utf8
: >empty
expect_error "hyp2 has 2 lines but ref3 has 3" "$LLEVAL" --ref ref3 --input hyp2
expect_error "hyp2 has 2 lines but ref3 has 3" "$LLEVAL" --ref hyp2 --ref ref3 --input hyp2
expect_error "bad_utf8:1: invalid UTF-8" "$LLEVAL" --ref hyp2 --input bad_utf8
expect_error "empty is empty" "$LLEVAL" --ref empty --input empty
expect_error "--ref FILE is required" "$LLEVAL" --input hyp2
expect_error "unknown metric 'meteor'" "$LLEVAL" --ref hyp2 --input hyp2 --metrics bleu,meteor
expect_error "unsupported tokenizer 'ja-mecab'" "$LLEVAL" --ref hyp2 --input hyp2 --tokenize ja-mecab
expect_error "unsupported tokenizer 'spm'" "$LLEVAL" --ref hyp2 --input hyp2 --tokenize spm
expect_error "no_such_file" "$LLEVAL" --ref no_such_file --input hyp2
expect_error "--ref -: standard input is already the --input" "$LLEVAL" --ref - --input - < hyp2
expect_error "--ref -: standard input is already another --ref" "$LLEVAL" --ref - --ref - --input hyp2 < hyp2

# ---- output format: sacreBLEU's README example, hypotheses on stdin ----
printf '%s\n' 'The dog bit the man.' 'It was not unexpected.' 'The man bit him first.' >ref_a
printf '%s\n' 'The dog had bit the man.' 'No one was surprised.' 'The man had bitten the dog.' >ref_b
printf '%s\n' 'The dog bit the man.' "It wasn't surprising." 'The man had just bitten him.' >sys
VER="$(sed -n 's/^#define LL_SACREBLEU_VERSION "\(.*\)"/\1/p' "$SRC/include/ll/eval.h")"
[ -n "$VER" ] || fail "cannot read LL_SACREBLEU_VERSION from include/ll/eval.h"
"$LLEVAL" -r ref_a -r ref_b -m bleu,chrf <sys >got || fail "lleval failed on the README example"
cat >want <<EOF
  BLEU|nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:$VER = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)
chrF2|nrefs:2|case:mixed|eff:yes|nc:6|nw:0|space:no|version:$VER = 59.73
EOF
diff want got || fail "README example output differs"
"$LLEVAL" -r ref_a -r ref_b -m ter,bleu -w 1 <sys >got || fail "lleval -m ter failed on the README example"
cat >want <<EOF
        BLEU|nrefs:2|case:mixed|eff:no|tok:13a|smooth:exp|version:$VER = 48.5 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)
TER|nrefs:2|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:$VER = 40.0
EOF
diff want got || fail "README example output with TER differs"
[ "$("$LLEVAL" -r ref_a -r ref_b -i sys -m chrf,bleu -b -w 1)" = "$(printf '48.5\n59.7')" ] \
    || fail "--score-only output differs"

# ---- statistical tests and several systems (sacreBLEU's output, printed by sacrebleu 2.6.0) ----
printf '%s\n' 'The dog bit a man.' "It was not unexpected." 'The man bit him.' >sys2
expect_error "paired tests require multiple input systems" "$LLEVAL" -r ref_a -i sys --paired-bs
expect_error "--confidence: use a paired test" "$LLEVAL" -r ref_a -i sys sys2 --confidence
expect_error "statistical tests are unavailable in sentence-level mode" "$LLEVAL" -r ref_a -i sys -sl --confidence
expect_error "only one system can be evaluated in sentence-level mode" "$LLEVAL" -r ref_a -i sys sys2 -sl
expect_error "give one of the two tests" "$LLEVAL" -r ref_a -i sys sys2 --paired-bs --paired-ar
expect_error "'sys2' already used to name a system" "$LLEVAL" -r ref_a -i sys sys2 sys2
expect_error "standard input is already another --input" "$LLEVAL" -r ref_a -i - - <sys
expect_error "hyp2 has 2 lines but ref3 has 3" "$LLEVAL" -r ref3 -i ref3 hyp2
expect_error "SACREBLEU_SEED='x1': not a seed" env SACREBLEU_SEED=x1 "$LLEVAL" -r ref_a -i sys --confidence
"$LLEVAL" -r ref_a -r ref_b -i sys -m bleu,chrf --confidence >got || fail "lleval --confidence failed"
cat >want <<EOF
  BLEU|nrefs:2|bs:1000|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|version:$VER = 48.53 (μ = 46.96 ± 46.75) 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)
chrF2|nrefs:2|bs:1000|seed:12345|case:mixed|eff:yes|nc:6|nw:0|space:no|version:$VER = 59.73 (μ = 60.35 ± 32.33)
EOF
diff want got || fail "--confidence output differs"
# the baseline given again is skipped, as sacreBLEU does
"$LLEVAL" -r ref_a -r ref_b -i sys sys2 sys -m bleu,chrf --paired-bs -w 1 >got || fail "lleval --paired-bs failed"
head -8 got >got8
cat >want <<'EOF'
╒═══════════════╤═════════════════════╤══════════════════════╕
│        System │  BLEU (μ ± 95% CI)  │  chrF2 (μ ± 95% CI)  │
╞═══════════════╪═════════════════════╪══════════════════════╡
│ Baseline: sys │ 48.5 (47.0 ± 46.8)  │  59.7 (60.3 ± 32.3)  │
├───────────────┼─────────────────────┼──────────────────────┤
│          sys2 │ 61.6 (62.3 ± 35.6)  │  77.1 (77.1 ± 19.9)  │
│               │    (p = 0.3057)     │     (p = 0.1608)     │
╘═══════════════╧═════════════════════╧══════════════════════╛
EOF
diff want got8 || fail "--paired-bs table differs"
grep -q "^ - BLEU       nrefs:2|bs:1000|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|version:$VER\$" got \
    || fail "--paired-bs signature differs"
SACREBLEU_SEED=none "$LLEVAL" -r ref_a -i sys -m chrf --confidence -sh | grep -q '^chrF2|#:1|bs:1000|rs:none|' \
    || fail "SACREBLEU_SEED=none: the signature shows rs:none"

# ---- agreement with sacrebleu ----
# Use the sacrebleu of python3; else pip-install it there; else (e.g. Debian's
# externally managed python) into a venv kept in the build directory.
command -v python3 >/dev/null 2>&1 || skip "python3 not found"
PY=python3
VENV="${LL_BINARY_DIR:-$TMP}/sacrebleu-venv"
PIP=(-m pip install --quiet --disable-pip-version-check --retries 0 --timeout 15 "sacrebleu==$VER")
if ! "$PY" -c 'import sacrebleu' 2>/dev/null; then
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import sacrebleu' 2>/dev/null; then
        PY="$VENV/bin/python"
    else
        echo "sacrebleu missing: pip install sacrebleu==$VER"
        if ! python3 "${PIP[@]}" >pip.log 2>&1; then
            echo "pip into python3 failed ($(tail -1 pip.log)); trying a venv in $VENV"
            { python3 -m venv "$VENV" && "$VENV/bin/python" "${PIP[@]}"; } >pip.log 2>&1 \
                || { tail -3 pip.log; skip "sacrebleu is not installed and pip could not install it (no network?)"; }
            PY="$VENV/bin/python"
        fi
        "$PY" -c 'import sacrebleu' 2>/dev/null || skip "sacrebleu still not importable after pip install"
    fi
fi
"$PY" "$SRC/tests/data/eval/compare_sacrebleu.py" "$LLEVAL" --cases 200 --seed 20240 --lleval-version "$VER" \
    || fail "lleval disagrees with sacrebleu"
"$PY" "$SRC/tests/data/eval/compare_sacrebleu_tests.py" "$LLEVAL" --cases 60 --seed 4321 --lleval-version "$VER" \
    || fail "lleval's statistical tests disagree with sacrebleu's"
echo "PASS"
