#!/usr/bin/env bash
# Hostile inputs (issue 13, docs/reliability.md): corrupt token ids, output
# paths that are not regular files, model files whose config contradicts
# their tensors or that hold non-finite weights, forged training state.  Each
# must fail with one line naming the file, a non-zero exit and nothing
# clobbered -- or, for FIFOs and devices, be written to directly.
set -u
SRC=${LL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${LL_BINARY_DIR:-$SRC/build}
export PYTHONPATH=$SRC/scripts
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
err() { echo "FAIL: $*" >&2; fail=1; }
CFG=$SRC/configs/tiny_test.cfg
base=(--config "$CFG" --quiet --set data.dir="$T/bin" --set train.max_updates=6 --set checkpoint.save_interval=3
      --set train.valid_interval=6 --set train.log_interval=3)

# tool expected-substring args...: non-zero exit, exactly one line on stderr containing the substring
check_error() {
  local name=$1 want=$2; shift 2
  "$@" > "$T/out" 2> "$T/err" < /dev/null
  local rc=$?
  [ $rc -ne 0 ] || err "$name: exit status 0"
  [ $rc -lt 128 ] || err "$name: killed by signal $((rc - 128))"
  [ "$(wc -l < "$T/err")" -eq 1 ] || err "$name: expected one line on stderr, got: $(head -c 600 "$T/err")"
  grep -qF -- "$want" "$T/err" || err "$name: '$want' not in: $(head -c 600 "$T/err")"
}

"$BIN/lltrain" "${base[@]}" --set checkpoint.save_dir="$T/run" 2> "$T/train.log" ||
  { echo "FAIL: training failed: $(tail -1 "$T/train.log")" >&2; exit 1; }
M=$T/run/checkpoint_last.llm

# ---- 1. token ids are checked when a dataset is opened -----------------------
# poke(file, token index, value): overwrite one int32 token in a token file (header is 64 bytes)
poke() { python3 -c "import struct,sys; f=open(sys.argv[1],'r+b'); f.seek(64+4*int(sys.argv[2])); f.write(struct.pack('<i',int(sys.argv[3])))" "$@"; }
for v in 1000000 -7 100; do
  rm -rf "$T/cbin"; cp -r "$T/bin" "$T/cbin"
  poke "$T/cbin/train.0.en-es.src.bin" 5 $v
  check_error "token id $v (lltrain)" "train.0.en-es.src.bin: token id $v outside the vocabulary [0, 100) at sentence 0 token 5" \
    "$BIN/lltrain" "${base[@]}" --set data.dir="$T/cbin" --set checkpoint.save_dir="$T/crun"
  [ ! -e "$T/crun/checkpoint_last.llm" ] || err "token id $v: a checkpoint was written"
done
# an in-range flip is caught by the checksum; in the validation set too
rm -rf "$T/cbin"; cp -r "$T/bin" "$T/cbin"
poke "$T/cbin/valid.0.en-es.tgt.bin" 3 17
check_error "in-range flip (valid)" "valid.0.en-es.tgt.bin: checksum mismatch" \
  "$BIN/lltrain" "${base[@]}" --set data.dir="$T/cbin" --set checkpoint.save_dir="$T/crun"
rm -rf "$T/crun"

[ $fail -eq 0 ] && echo "test_hostile_inputs: all checks passed"
exit $fail
