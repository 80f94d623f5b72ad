# Helpers of the shell-level GPU tests (tests/gpu/test_*.sh source this).
# Exit 77 (skip) only when there is no GPU; with a GPU, a missing corpus is a
# failure (the check was not done), with the recipe to provide it.
# SRC, BIN, the scratch directory T, err() and tiny_data()
source "$(dirname "${BASH_SOURCE[0]}")/../cli/lib.sh"
# prepared Bible data: shared with the quick starts (the same data section)
BIBLE_BIN=${LL_BIBLE_BIN:-$SRC/data/bible/bin}
RAW=$SRC/data/bible/raw
# Self-test of these scripts without a GPU: LL_GPU_TEST_DEVICE=cpu runs the
# "GPU" side on the CPU (and LL_BIBLE_UPDATES=20 keeps it short).
GPUDEV=${LL_GPU_TEST_DEVICE:-cuda}
UPD=${LL_BIBLE_UPDATES:-300}

gpu_or_skip() {
  local n
  [ "$GPUDEV" = cpu ] && { echo "LL_GPU_TEST_DEVICE=cpu: the GPU side runs on the CPU (script self-test)"; return 0; }
  n=$("$BIN/lltrain" --devices 2> /dev/null | sed -n 's/^cuda devices: //p')
  if [ "${n:-0}" -eq 0 ]; then
    echo "no CUDA device: skipping"
    exit 77
  fi
}

bible_or_fail() {
  local s l
  for s in train valid test; do
    for l in en es; do
      if [ ! -s "$RAW/$s.$l" ]; then
        echo "FAIL: no Bible corpus ($RAW/$s.$l): build it with 'python3 scripts/make_bible_corpus.py --out data/bible/raw'" \
          "(needs diatheke); on a GPU machine without it, carry data/bible/raw (scripts/gpu_check.sh says how)" >&2
        exit 1
      fi
    done
  done
  "$BIN/llprep" --config "$SRC/configs/bible_gpu.cfg" --set data.dir="$BIBLE_BIN" --quiet --if-needed 2> "$T/prep.log" ||
    { echo "FAIL: llprep: $(tail -1 "$T/prep.log")" >&2; exit 1; }
}

# --set train.precision=P (fp32|bf16: the activation dtype; bf16 = mixed precision, fp32 master weights)
precision() { echo "--set train.precision=$1"; }

# bible_train NAME DEVICE PRECISION UPDATES [--set ...]: the bible_quick model
# (d 256, 3+3 layers) on bible_gpu.cfg's data, into $T/NAME (TRAIN_WRAP: an array, the
# command lltrain runs under, e.g. compute-sanitizer)
TRAIN_WRAP=()
bible_train() {
  local name=$1 dev=$2 prec=$3 upd=$4
  shift 4
  # shellcheck disable=SC2046
  ${TRAIN_WRAP[@]+"${TRAIN_WRAP[@]}"} "$BIN/lltrain" --config "$SRC/configs/bible_gpu.cfg" --set data.dir="$BIBLE_BIN" --set model.d_model=256 \
    --set model.ffn_dim=1024 --set model.heads=4 --set model.enc_layers=3 --set model.dec_layers=3 \
    --set model.dropout=0.1 --set model.attn_dropout=0 --set model.act_dropout=0 --set data.max_tokens=4096 \
    --set train.lr=2e-3 --set train.warmup_updates=200 --set train.clip_norm=0 --set train.max_minutes=0 \
    --set train.max_updates="$upd" --set train.log_interval=50 --set train.valid_interval="$upd" \
    --set train.valid_bleu=false --set train.best_metric=loss --set train.threads=0 --set train.device="$dev" \
    $(precision "$prec") --set checkpoint.save_dir="$T/$name" --set checkpoint.keep_last=1 "$@" 2> "$T/$name.log"
}

# last "loss" of a record type (train|valid) in a run's metrics.jsonl
last_loss() {
  python3 - "$T/$1/metrics.jsonl" "$2" <<'PY'
import json, sys
v = None
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") == sys.argv[2] and "loss" in r:
        v = r["loss"]
print("" if v is None else v)
PY
}

# copy logs to $LL_GPU_LOG_DIR/<test> (scripts/gpu_check.sh collects them)
keep_logs() {
  [ -n "${LL_GPU_LOG_DIR:-}" ] || return 0
  local d=$LL_GPU_LOG_DIR/$1
  shift
  mkdir -p "$d"
  cp -r "$@" "$d" 2> /dev/null || true
}
