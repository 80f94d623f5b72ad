#!/usr/bin/env bash
# llprep on bad input: exit status != 0, exactly one line on stderr naming the
# file (and line), and nothing written to data.dir.  Also a good run, and that a
# failing run leaves an already prepared data.dir byte for byte as it was.
set -u
LLPREP="${LL_BINARY_DIR:-.}/llprep"
[ -x "$LLPREP" ] || { echo "skip: $LLPREP not built"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/llprep-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
fail=0

# A small parallel corpus (word-for-word "translations").
en=(the a cat dog house green red small big eats sees runs man woman child car tree river city old)
es=(el un gato perro casa verde rojo pequeño grande come ve corre hombre mujer niño coche árbol río ciudad viejo)
s=1
for i in $(seq 1 300); do
    s=$(( (s * 1103515245 + 12345) % 2147483648 ))
    k=$(( 2 + s % 8 ))
    le=() ls=()
    for j in $(seq 1 $k); do
        s=$(( (s * 1103515245 + 12345) % 2147483648 ))
        w=$(( (s / 65536) % ${#en[@]} ))
        le+=("${en[$w]}") ls+=("${es[$w]}")
    done
    echo "${le[*]}" >> c.en
    echo "${ls[*]}" >> c.es
done

# config SRC TGT [extra data lines]: a config training on c.en/c.es plus SRC/TGT.
config() {
    cat <<EOF
data:
  dir: out/sub
  vocab_size: 64
  max_len: 40
  train:
    - {src: c.en, tgt: c.es, src_lang: en, tgt_lang: es}
    - {src: $1, tgt: $2, src_lang: en, tgt_lang: es}
${3:-}
EOF
}

# Every path under out/ and the checksum of every file.
snapshot() { (cd out && find . | sort && find . -type f -print0 | sort -z | xargs -0 cksum); }

# expect_fail NAME CFG PATTERN...: llprep fails with one stderr line matching every pattern,
# and out/ is untouched (absent, or identical to the snapshot in $T/snap).
expect_fail() {
    local name=$1 cfg=$2
    shift 2
    local before=""
    [ -d out ] && before=$(snapshot)
    "$LLPREP" --config "$cfg" >"$name.out" 2>"$name.err"
    local rc=$?
    if [ $rc -eq 0 ]; then
        echo "FAIL $name: exit status 0"; fail=1; return
    fi
    local lines
    lines=$(wc -l < "$name.err")
    if [ "$lines" -ne 1 ]; then
        echo "FAIL $name: $lines lines on stderr:"; cat "$name.err"; fail=1
    fi
    for p in "$@"; do
        if ! grep -qF -- "$p" "$name.err"; then
            echo "FAIL $name: stderr lacks '$p':"; cat "$name.err"; fail=1
        fi
    done
    local after=""
    [ -d out ] && after=$(snapshot)
    if [ "$before" != "$after" ]; then
        echo "FAIL $name: out/ changed:"; find out; fail=1
    fi
    if [ -z "$before" ] && [ -e out ]; then
        echo "FAIL $name: out/ was created"; find out; fail=1
    fi
}

printf 'a cat\nthe dog\nred car\n' > three.en
printf 'un gato\nel perro\n' > two.es
config three.en two.es > mismatch.cfg
printf 'a cat\nthe dog\n' > two.en
printf 'un gato\nel pe\xffrro\n' > bad.es
config two.en bad.es > utf8.cfg
: > empty.en
: > empty.es
config empty.en empty.es > empty.cfg
config two.en nosuch.es > missing.cfg
long=$(for i in 1 2 3 4 5 6; do printf 'the big green dog sees a small red car '; done)
printf 'a cat\n%s\n' "$long" > long.en
printf 'un gato\nel perro\n' > long.es
config long.en long.es "  long_lines: error" > long.cfg
config two.en two.es "  valid:
    - {src: three.en, tgt: two.es, src_lang: en, tgt_lang: es}" > validmismatch.cfg

run_all() {
    expect_fail mismatch mismatch.cfg "three.en has 3 lines but" "two.es has 2"
    expect_fail utf8 utf8.cfg "bad.es:2: invalid UTF-8 at byte 6"
    expect_fail empty empty.cfg "empty.en: empty corpus"
    expect_fail missing missing.cfg "nosuch.es: cannot open"
    expect_fail long long.cfg "long.en:2: sentence has" "more than data.max_len=40"
    expect_fail validmismatch validmismatch.cfg "three.en has 3 lines but" "two.es has 2"
    expect_fail noconfig nosuch.cfg "nosuch.cfg"
    printf 'data:\n  vocab_size: [1\n' > broken.cfg
    expect_fail broken broken.cfg "broken.cfg:"
}
run_all

# A good run prints the summary and writes the files ...
config two.en two.es > good.cfg
if ! "$LLPREP" --config good.cfg > good.out 2> good.err; then
    echo "FAIL good run:"; cat good.err; fail=1
else
    grep -q "vocab: 64 pieces" good.out || { echo "FAIL good run summary:"; cat good.out; fail=1; }
    grep -q "train total: 2 corpora, 302 sentence pairs" good.out || { echo "FAIL good run counts:"; cat good.out; fail=1; }
    n=$(ls out/sub | wc -l)
    [ "$n" -eq 6 ] || { echo "FAIL good run wrote $n files:"; ls -a out/sub; fail=1; }
    [ -z "$(ls -A out/sub | grep '^\.')" ] || { echo "FAIL leftover hidden files:"; ls -a out/sub; fail=1; }
    # ... and failing runs leave them as they were.
    run_all
fi

# --if-needed: nothing done while the inputs are unchanged (files untouched), a changed input prepares again
if [ $fail -eq 0 ]; then
    before=$(ls -l --time-style=+%s.%N out/sub | md5sum)
    "$LLPREP" --config good.cfg --if-needed > ifn.out 2> ifn.err || { echo "FAIL --if-needed:"; cat ifn.err; fail=1; }
    grep -q "up to date: nothing to do" ifn.out || { echo "FAIL --if-needed output:"; cat ifn.out; fail=1; }
    [ "$(ls -l --time-style=+%s.%N out/sub | md5sum)" = "$before" ] || { echo "FAIL --if-needed rewrote data.dir"; fail=1; }
    echo "uno dos tres" >> two.es && echo "one two three" >> two.en
    "$LLPREP" --config good.cfg --if-needed > ifn2.out 2> ifn2.err || { echo "FAIL --if-needed after a change:"; cat ifn2.err; fail=1; }
    grep -q "train total: 2 corpora, 303 sentence pairs" ifn2.out ||
        { echo "FAIL --if-needed did not prepare a changed input again:"; cat ifn2.out; fail=1; }
fi

# --set is applied; a bad key is a one-line error
"$LLPREP" --config good.cfg --set data.nosuchkey=1 > badkey.out 2> badkey.err && { echo "FAIL --set bad key accepted"; fail=1; }
[ "$(wc -l < badkey.err)" -eq 1 ] || { echo "FAIL --set bad key stderr:"; cat badkey.err; fail=1; }
"$LLPREP" --config long.cfg --set data.long_lines=skip --set data.dir=out2 > skip.out 2> skip.err ||
    { echo "FAIL long_lines=skip:"; cat skip.err; fail=1; }
grep -q "1 longer than data.max_len" skip.out || { echo "FAIL skip count:"; cat skip.out; fail=1; }

[ $fail -eq 0 ] && echo "test_llprep_errors: all checks passed"
exit $fail
