# Shared by the shell tests (tests/cli/test_*.sh, tests/gpu/lib.sh): where the
# sources and binaries are, a scratch directory removed on exit, and err(),
# which records a failure and goes on (each script ends with `exit $fail`).
set -u
SRC=${LL_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
BIN=${LL_BINARY_DIR:-$SRC/build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
err() { echo "FAIL: $*" >&2; fail=1; }

# The data: section of a config over the tiny corpus (tests/data/tiny: 32
# training pairs en-es), binarised into DIR:  tiny_data DIR MAX_TOKENS
tiny_data() {
  cat <<CFG
data:
  dir: $1
  vocab_size: 80
  train:
    - {src: $SRC/tests/data/tiny/overfit32.en, tgt: $SRC/tests/data/tiny/overfit32.es, src_lang: en, tgt_lang: es}
  valid:
    - {src: $SRC/tests/data/tiny/valid.en, tgt: $SRC/tests/data/tiny/valid.es, src_lang: en, tgt_lang: es}
  max_tokens: $2
  max_len: 64
CFG
}

# A config whose model overfits the 32 tiny training pairs (200 updates, a few
# seconds), saving into $T/run: lldecode's and the shortlist's tests.
overfit_cfg() {
  cat <<CFG
model: {d_model: 64, ffn_dim: 128, heads: 4, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.0}
data:
  dir: $T/bin
  vocab_size: 80
  train:
    - {src: $SRC/tests/data/tiny/overfit32.en, tgt: $SRC/tests/data/tiny/overfit32.es, src_lang: en, tgt_lang: es}
  max_tokens: 2048
  max_len: 64
train: {seed: 1, threads: 2, lr: 3e-3, warmup_updates: 20, label_smoothing: 0.0, max_updates: 200, log_interval: 100, valid_interval: 1000}
checkpoint: {save_dir: $T/run}
CFG
}
