#!/usr/bin/env bash
# Session 5 (issue 12): `mpirun -np 2 lltrain` on the CPU against one process
# with 2 threads, at the same global batch (2 x max_tokens per update), on a
# d=256, 3+3-layer model over the tiny test corpus.  Prints tokens/s (the
# trainer's own figure, from its last metrics record) per run, alternating
# the three setups ROUNDS times.  Usage: bench/dist_cpu.sh [build dir] [rounds]
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$SRC/build}
ROUNDS=${2:-3}
. "$SRC/tests/cli/dist_env.sh"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
ARGS=(--config "$SRC/configs/tiny_test.cfg" --set data.dir="$T/bin" --set model.d_model=256 --set model.ffn_dim=1024
      --set model.heads=4 --set model.enc_layers=3 --set model.dec_layers=3 --set data.max_tokens=2048
      --set train.max_updates=40 --set train.log_interval=40 --set train.valid_interval=100000
      --set checkpoint.save_interval=0 --set train.warmup_updates=10 --quiet)
"$BIN/lltrain" "${ARGS[@]}" --set train.max_updates=1 --set checkpoint.save_dir="$T/prep" 2> /dev/null
tps() { grep -o '"tokens_per_s":[0-9.]*' "$1/metrics.jsonl" | tail -1 | cut -d: -f2; }
for r in $(seq "$ROUNDS"); do
  "$BIN/lltrain" "${ARGS[@]}" --set train.threads=2 --set train.update_freq=2 --set checkpoint.save_dir="$T/a$r"
  echo "round $r  one process, 2 threads, 2 batch workers, update_freq 2: $(tps "$T/a$r") tok/s"
  "$BIN/lltrain" "${ARGS[@]}" --set train.threads=2 --set train.batch_workers=1 --set train.update_freq=2 \
    --set checkpoint.save_dir="$T/c$r"
  echo "round $r  one process, 2 threads, ops threaded, update_freq 2: $(tps "$T/c$r") tok/s"
  mpirun2 "$BIN/lltrain" "${ARGS[@]}" --set train.threads=1 --set checkpoint.save_dir="$T/b$r"
  echo "round $r  mpirun -np 2, 1 thread each, update_freq 1:   $(tps "$T/b$r") tok/s"
done
