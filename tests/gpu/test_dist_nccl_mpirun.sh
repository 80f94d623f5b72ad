#!/usr/bin/env bash
# Data parallelism through NCCL (dist.backend: nccl, src/dist/nccl): `mpirun
# -np 2 lltrain` on two GPUs must give, after a few updates, the parameters of
# one process on one GPU that sees the union of the two ranks' batches
# (update_freq x 2), max |diff| < 5e-5 (tests/cli/test_dist_mpi.sh's bound),
# and the same with dist.backend: mpi (host reductions of device buffers).
# With one CUDA device it runs one rank (world size 1, update_freq 2), which
# must equal the plain single-process run.  Skips (77) without a CUDA device,
# without mpirun or without NCCL in the build.  Under the CPU emulation of CUDA each rank is an emulated
# device (LL_CUDA_EMU_DEVICES=2, cmake/cuda_emu_tests.cmake) and NCCL runs over MPI.
source "$(dirname "$0")/lib.sh"
gpu_or_skip
. "$SRC/tests/cli/dist_env.sh"
n=$("$BIN/lltrain" --devices 2> /dev/null | sed -n 's/^cuda devices: //p')
[ "${n:-0}" -ge 1 ] || { echo "no CUDA device: skipping"; exit 77; }
NP=2
[ "$n" -ge 2 ] || { NP=1; echo "one CUDA device: world size 1 against the single-process run"; }
U=${LL_DIST_NCCL_UPDATES:-6}
cat > "$T/t.cfg" <<CFG
model: {d_model: 32, ffn_dim: 64, heads: 4, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.1}
$(tiny_data "$T/bin" "${LL_DIST_NCCL_TOKENS:-1024}")
train: {seed: 3, lr: 1e-3, warmup_updates: 3, valid_interval: 0, log_interval: 2, device: cuda, threads: 1, adam_eps: 1e-6,
        max_updates: $U}
CFG
"$BIN/lltrain" --config "$T/t.cfg" --set checkpoint.save_dir="$T/one" --set train.update_freq=2 2> "$T/one.log" ||
  { err "one process failed: $(tail -1 "$T/one.log")"; exit 1; }
for b in nccl mpi; do
  "$MPIRUN" --oversubscribe --allow-run-as-root -np $NP "$BIN/lltrain" --config "$T/t.cfg" \
    --set checkpoint.save_dir="$T/$b" --set train.update_freq=$((2 / NP)) \
    --set dist.backend=$b > "$T/$b.log" 2>&1 || { err "mpirun -np $NP ($b) failed: $(grep -v '^cuda-emu' "$T/$b.log" | tail -2)"; continue; }
  if [ $b = nccl ] && ! grep -qi "nccl" "$T/$b.log"; then
    echo "note: the log does not name NCCL"
  fi
  out=$("$BIN/ll_ckpt_diff" "$T/one/checkpoint_last.llm" "$T/$b/checkpoint_last.llm") || { err "$b: $out"; continue; }
  d=$(echo "$out" | awk '{print $2}')
  echo "dist-nccl: dist.backend $b, $NP rank(s) vs one process: $out"
  python3 -c "import sys; sys.exit(0 if float('$d') < 5e-5 else 1)" || err "$b: parameters differ by $d (>= 5e-5)"
done
keep_logs dist_nccl "$T"/*.log
exit $fail
