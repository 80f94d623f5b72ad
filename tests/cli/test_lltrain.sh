#!/usr/bin/env bash
# lltrain end to end on real files: a tiny model overfits 32 sentence pairs,
# --resume continues bit for bit, train.init_from starts a run from its
# parameters, and bad input fails with one line and leaves nothing behind.
source "$(dirname "$0")/lib.sh"
LLTRAIN=$BIN/lltrain

cat > "$T/overfit.cfg" <<CFG
model: {d_model: 64, ffn_dim: 128, heads: 4, enc_layers: 2, dec_layers: 2, max_positions: 128, dropout: 0.0}
$(tiny_data "$T/bin" 2048)
train: {seed: 1, threads: 2, lr: 3e-3, warmup_updates: 20, label_smoothing: 0.0, max_updates: 200, log_interval: 10, valid_interval: 100}
checkpoint: {save_dir: $T/overfit}
CFG

# 1. overfit: the last logged training loss (base 2, per token) must be < 0.05
"$LLTRAIN" --config "$T/overfit.cfg" --quiet 2> "$T/overfit.log" || err "overfit run failed: $(tail -1 "$T/overfit.log")"
last=$(grep '"type":"train"' "$T/overfit/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
echo "overfit: final training loss $last"
python3 -c "import sys; sys.exit(0 if float('$last') < 0.05 else 1)" || err "overfit loss $last >= 0.05"
for f in checkpoint_last.llm checkpoint_best.llm metrics.jsonl; do
  [ -s "$T/overfit/$f" ] || err "missing $f"
done

# 2. resume: 30 updates straight == 15 + --resume 15, byte for byte
common=(--config "$T/overfit.cfg" --set train.valid_interval=5 --set train.log_interval=5 --set model.dropout=0.1
        --set model.attn_dropout=0.1 --set train.label_smoothing=0.1)
# (same save_dir for both, since the config text stored in the checkpoint names it)
"$LLTRAIN" "${common[@]}" --set checkpoint.save_dir="$T/run" --set train.max_updates=30 2>/dev/null ||
  err "straight run failed"
mv "$T/run" "$T/straight"
"$LLTRAIN" "${common[@]}" --set checkpoint.save_dir="$T/run" --set train.max_updates=15 2>/dev/null ||
  err "first half failed"
"$LLTRAIN" "${common[@]}" --set checkpoint.save_dir="$T/run" --set train.max_updates=30 --resume 2>"$T/resume.log" ||
  err "resume failed: $(tail -1 "$T/resume.log")"
grep -q "resumed from" "$T/resume.log" || err "resume did not say it resumed"
cmp -s "$T/straight/checkpoint_last.llm" "$T/run/checkpoint_last.llm" ||
  err "resumed run differs from the uninterrupted run"

# 2b. the same with sampled segmentations (data.spm_samples): 200-token batches make epochs of 6-7
# updates (by sample), so the 30 updates read every sample, and the first half stops inside epoch 3
sw=("${common[@]}" --set data.dir="$T/bin_sw" --set data.spm_samples=3 --set data.spm_alpha=0.2
    --set data.max_tokens=200)
"$LLTRAIN" "${sw[@]}" --set checkpoint.save_dir="$T/run_sw" --set train.max_updates=30 2>"$T/sw.log" ||
  err "straight run with sampled segmentations failed: $(tail -1 "$T/sw.log")"
grep -q "subword regularization: epoch e reads sampled segmentation ((e - 1) mod 3) + 1" "$T/sw.log" ||
  err "the log does not say the epochs read sampled segmentations"
[ -s "$T/bin_sw/train.0.en-es.s3.tgt.bin" ] || err "no third sampled segmentation"
epochs=$(grep '"type":"train"' "$T/run_sw/metrics.jsonl" | tail -1 | sed 's/.*"epoch":\([0-9]*\).*/\1/')
[ "${epochs:-0}" -gt 3 ] || err "30 updates covered ${epochs:-no} epochs, not all three samples"
mv "$T/run_sw" "$T/straight_sw"
"$LLTRAIN" "${sw[@]}" --set checkpoint.save_dir="$T/run_sw" --set train.max_updates=15 2>/dev/null ||
  err "first half with sampled segmentations failed"
"$LLTRAIN" "${sw[@]}" --set checkpoint.save_dir="$T/run_sw" --set train.max_updates=30 --resume 2>/dev/null ||
  err "resume with sampled segmentations failed"
cmp -s "$T/straight_sw/checkpoint_last.llm" "$T/run_sw/checkpoint_last.llm" ||
  err "resumed run with sampled segmentations differs from the uninterrupted run"
cmp -s "$T/straight_sw/checkpoint_last.llm" "$T/straight/checkpoint_last.llm" &&
  err "sampled segmentations trained the same model as the standard one"

# 3. validation BLEU, best by BLEU, early stopping after `patience` validations without improvement
"$LLTRAIN" --config "$T/overfit.cfg" --quiet --set checkpoint.save_dir="$T/bleu" --set train.max_updates=400 \
  --set train.valid_interval=10 --set train.valid_bleu=true --set train.best_metric=bleu --set train.patience=2 \
  --set train.lr=1e-4 --set train.warmup_updates=1 2> "$T/bleu.log" || err "validation-BLEU run failed: $(tail -1 "$T/bleu.log")"
grep -q '"bleu":' "$T/bleu/metrics.jsonl" || err "no BLEU in the validation records"
nval=$(grep -c '"type":"valid"' "$T/bleu/metrics.jsonl")
last=$(grep '"type":"train"' "$T/bleu/metrics.jsonl" | tail -1 | sed 's/.*"update":\([0-9]*\).*/\1/')
[ "$last" -lt 400 ] || err "patience=2 did not stop training early ($nval validations, last update $last)"
[ -s "$T/bleu/checkpoint_best.llm" ] || err "no checkpoint_best with best_metric=bleu"
echo "early stop after $nval validations (update $last)"
"$LLTRAIN" --config "$T/overfit.cfg" --quiet --set checkpoint.save_dir="$T/nobleu" --set train.best_metric=bleu 2> "$T/err"
grep -q "needs train.valid_bleu" "$T/err" || err "best_metric=bleu without valid_bleu was accepted"
# best by chrF, and validation BLEU's tokenizer (train.valid_tokenize): the same model scored with
# 13a and char has the same chrF and another BLEU; "best" follows the highest chrF so far (from the
# overfit model of section 1, whose translations are mostly right)
for tok in 13a char; do
  "$LLTRAIN" --config "$T/overfit.cfg" --set checkpoint.save_dir="$T/chrf_$tok" --set train.max_updates=30 \
    --set train.init_from="$T/overfit/checkpoint_last.llm" --set train.lr=1e-2 --set train.warmup_updates=1 \
    --set train.valid_interval=10 --set train.valid_bleu=true --set train.best_metric=chrf \
    --set train.valid_tokenize=$tok 2> "$T/chrf_$tok.log" || err "best_metric=chrf run failed: $(tail -1 "$T/chrf_$tok.log")"
done
grep -q "best chrf" "$T/chrf_char.log" || err "the validation line does not name the chrf best"
python3 - "$T/chrf_13a/metrics.jsonl" "$T/chrf_char/metrics.jsonl" <<'PY' || err "best_metric=chrf / valid_tokenize"
import json, sys
runs = [[r for r in map(json.loads, open(p)) if r["type"] == "valid"] for p in sys.argv[1:]]
assert len(runs[0]) == len(runs[1]) >= 2, runs
for a, b in zip(*runs):
    assert a["chrf"] == b["chrf"] and a["loss"] == b["loss"], (a, b)  # the same model, the same translations
assert any(a["bleu"] != b["bleu"] for a, b in zip(*runs)), runs  # words against characters
for run in runs:
    for i, r in enumerate(run):
        assert abs(r["best"] - max(x["chrf"] for x in run[:i + 1])) < 1e-4, run
PY
"$LLTRAIN" --config "$T/overfit.cfg" --quiet --set checkpoint.save_dir="$T/badtok" --set train.valid_tokenize=ja-mecab 2> "$T/err" &&
  err "train.valid_tokenize=ja-mecab was accepted"
grep -q "valid_tokenize" "$T/err" || err "no error naming train.valid_tokenize: $(cat "$T/err")"

# 3a. reduce on plateau (train.lr_shrink, lr_patience) and train.stop_min_lr.  A model this young
# translates nothing, so its BLEU stays 0: after the first validation (the best), every one is
# without improvement; with lr_patience 1 the lr halves at updates 15 and 25.  The lr records
# against the same run without shrinking: x1 to update 15, x0.5 for 16-25, x0.25 after.  A run
# stopped at update 15 and resumed replays it bit for bit (the counters are in the checkpoint).
plateau=(--config "$T/overfit.cfg" --set train.max_updates=30 --set train.valid_interval=5 --set train.log_interval=5
         --set train.valid_bleu=true --set train.best_metric=bleu --set train.lr_patience=1)
"$LLTRAIN" "${plateau[@]}" --set checkpoint.save_dir="$T/flat" 2> "$T/flat.log" || err "lr_shrink 1 run failed"
rm -rf "$T/run"
"$LLTRAIN" "${plateau[@]}" --set checkpoint.save_dir="$T/run" --set train.lr_shrink=0.5 2> "$T/shrink.log" ||
  err "lr_shrink run failed: $(tail -1 "$T/shrink.log")"
mv "$T/run" "$T/shrink"
grep -q "valid | update 15 | no new best of bleu in 2 validations: lr x 0.5 (x 0.5 in all)" "$T/shrink.log" ||
  err "no lr shrink logged at update 15: $(grep '^valid' "$T/shrink.log")"
python3 - "$T/flat/metrics.jsonl" "$T/shrink/metrics.jsonl" <<'PY' || err "the shrunk learning rates"
import json, sys
lr = [{r["update"]: r["lr"] for r in map(json.loads, open(p)) if r["type"] == "train"} for p in sys.argv[1:]]
want = {5: 1, 10: 1, 15: 1, 20: 0.5, 25: 0.5, 30: 0.25}
got = {u: lr[1][u] / lr[0][u] for u in want}
assert all(abs(got[u] - want[u]) < 1e-6 for u in want), got
PY
"$LLTRAIN" "${plateau[@]}" --set checkpoint.save_dir="$T/run" --set train.lr_shrink=0.5 --set train.max_updates=15 \
  2> /dev/null || err "lr_shrink first half failed"
"$LLTRAIN" "${plateau[@]}" --set checkpoint.save_dir="$T/run" --set train.lr_shrink=0.5 --resume 2> "$T/shrink2.log" ||
  err "lr_shrink resume failed: $(tail -1 "$T/shrink2.log")"
cmp -s "$T/shrink/checkpoint_last.llm" "$T/run/checkpoint_last.llm" ||
  err "a resumed reduce-on-plateau run differs from the uninterrupted one"
# stop_min_lr: a constant lr (polynomial decay of power 0) shrunk at every validation without a
# best: x0.5 after update 10, x0.25 < 0.3 after update 15
minlr=(--set train.lr_shrink=0.5 --set train.lr_patience=0 --set train.warmup_updates=1 --set train.scheduler=polynomial
       --set train.power=0 --set train.stop_min_lr=9e-4)
"$LLTRAIN" "${plateau[@]}" --set checkpoint.save_dir="$T/minlr" "${minlr[@]}" 2> "$T/minlr.log" || err "stop_min_lr run failed"
grep -q "stop: the learning rate .* is below train.stop_min_lr 0.0009" "$T/minlr.log" || err "stop_min_lr did not stop the run"
last=$(grep '"type":"train"' "$T/minlr/metrics.jsonl" | tail -1 | sed 's/.*"update":\([0-9]*\).*/\1/')
[ "$last" = 15 ] || err "stop_min_lr: the last update is $last, not 15"
"$LLTRAIN" "${plateau[@]}" --set checkpoint.save_dir="$T/minlr" "${minlr[@]}" --resume 2> "$T/minlr2.log"
grep -q "already finished" "$T/minlr2.log" || err "resuming a run stopped by stop_min_lr trained on: $(tail -1 "$T/minlr2.log")"
sed '/valid:/,/valid.es/d' "$T/overfit.cfg" > "$T/novalid.cfg"
"$LLTRAIN" --config "$T/novalid.cfg" --set checkpoint.save_dir="$T/nov" --set train.lr_shrink=0.5 2> "$T/err" &&
  err "train.lr_shrink without validation was accepted"
grep -q "train.lr_shrink 0.5 needs validation" "$T/err" || err "lr_shrink without validation: $(cat "$T/err")"

# 3b. train.valid_max_batches: the validation loss over the first batches only, said in the log and
# the metrics' token count (the full run above: every validation token)
"$LLTRAIN" --config "$T/overfit.cfg" --quiet --set checkpoint.save_dir="$T/vmax" --set train.max_updates=2 \
  --set train.valid_interval=2 --set data.max_tokens=64 --set train.valid_max_batches=1 2> "$T/vmax.log" ||
  err "valid_max_batches run failed: $(tail -1 "$T/vmax.log")"
"$LLTRAIN" --config "$T/overfit.cfg" --quiet --set checkpoint.save_dir="$T/vall" --set train.max_updates=2 \
  --set train.valid_interval=2 --set data.max_tokens=64 2> "$T/vall.log" || err "full validation run failed"
vtok() { sed -n 's/.*"type":"valid".*"tokens":\([0-9]*\).*/\1/p' "$T/$1/metrics.jsonl" | tail -1; }
a=$(vtok vmax) b=$(vtok vall)
[ -n "$a" ] && [ -n "$b" ] && [ "$a" -gt 0 ] && [ "$a" -lt "$b" ] || err "valid_max_batches=1: $a validation tokens, all: $b"
[ "$a" -le 64 ] || err "valid_max_batches=1 with 64-token batches validated $a tokens"
echo "validation tokens: first batch $a, all $b"

# 3c. the thread count: train.threads 0 takes OMP_NUM_THREADS when it is set, --threads overrides both
OMP_NUM_THREADS=3 "$LLTRAIN" --config "$T/overfit.cfg" --set checkpoint.save_dir="$T/omp" --set train.max_updates=1 \
  --set train.threads=0 --set train.valid_interval=0 2> "$T/omp.log" || err "OMP_NUM_THREADS run failed: $(tail -1 "$T/omp.log")"
grep -q "; 3 threads," "$T/omp.log" || err "train.threads 0 with OMP_NUM_THREADS=3: $(grep '^model:' "$T/omp.log")"
OMP_NUM_THREADS=3 "$LLTRAIN" --config "$T/overfit.cfg" --set checkpoint.save_dir="$T/omp2" --set train.max_updates=1 \
  --threads 1 --set train.valid_interval=0 2> "$T/omp2.log" || err "--threads 1 run failed: $(tail -1 "$T/omp2.log")"
grep -q "; 1 threads," "$T/omp2.log" || err "--threads 1 under OMP_NUM_THREADS=3: $(grep '^model:' "$T/omp2.log")"

# 3d. train.init_from (fairseq's --finetune-from-model): the overfit model's parameters start a new run, whose
# first update (1: the counters start fresh) then has the overfit model's loss; a fresh start's is far higher
"$LLTRAIN" --config "$T/overfit.cfg" --set checkpoint.save_dir="$T/ft" --set train.max_updates=2 \
  --set train.log_interval=1 --set train.valid_interval=0 --set train.init_from="$T/overfit/checkpoint_last.llm" \
  2> "$T/ft.log" || err "init_from run failed: $(tail -1 "$T/ft.log")"
grep -q "train.init_from: parameters from $T/overfit/checkpoint_last.llm" "$T/ft.log" || err "init_from not logged"
first() { grep '"type":"train"' "$T/$1/metrics.jsonl" | head -1; }
case "$(first ft)" in *'"update":1,'*) ;; *) err "init_from: the first record is not update 1: $(first ft)" ;; esac
"$LLTRAIN" --config "$T/overfit.cfg" --quiet --set checkpoint.save_dir="$T/fresh" --set train.max_updates=1 \
  --set train.log_interval=1 --set train.valid_interval=0 2> /dev/null || err "fresh run failed"
ftl=$(first ft | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/') frl=$(first fresh | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
echo "init_from: first training loss $ftl (a fresh start: $frl)"
python3 -c "import sys; sys.exit(0 if float('$ftl') < 0.2 and float('$frl') > 5 else 1)" ||
  err "init_from: first loss $ftl, fresh $frl"

# 4. bad input: one-line error, exit 1, nothing written
check_error() { # name expected-substring args...
  local name=$1 want=$2; shift 2
  "$LLTRAIN" --quiet "$@" > "$T/out" 2> "$T/err"
  local rc=$?
  [ $rc -ne 0 ] || err "$name: exit status 0"
  [ "$(wc -l < "$T/err")" -eq 1 ] || err "$name: expected one line on stderr, got: $(cat "$T/err")"
  grep -qF -- "$want" "$T/err" || err "$name: '$want' not in: $(cat "$T/err")"
}
printf 'not a model\n' > "$T/a.txt"
printf 'model:\n  d_model: 64\n  dropuot: 0.1\n' > "$T/bad.cfg"
check_error "unknown key" "bad.cfg:3:3" --config "$T/bad.cfg" --set checkpoint.save_dir="$T/nothing"
printf 'model:\n  d_model: sixty\n' > "$T/bad2.cfg"
check_error "wrong type" "bad2.cfg:2:12" --config "$T/bad2.cfg" --set checkpoint.save_dir="$T/nothing"
check_error "bad --set" "train.lr" --config "$T/overfit.cfg" --set train.lr=fast --set checkpoint.save_dir="$T/nothing"
check_error "existing run" "--resume" --config "$T/overfit.cfg"
check_error "resume without checkpoint" "does not exist" --config "$T/overfit.cfg" --resume --set checkpoint.save_dir="$T/nothing"
check_error "init_from: missing file" "$T/none.llm" --config "$T/overfit.cfg" --set checkpoint.save_dir="$T/nothing" \
  --set train.init_from="$T/none.llm"
check_error "init_from: not a model file" "$T/a.txt" --config "$T/overfit.cfg" --set checkpoint.save_dir="$T/nothing" \
  --set train.init_from="$T/a.txt"
check_error "init_from: another architecture" "another architecture than this config's (model.dec_layers 3 vs 2" \
  --config "$T/overfit.cfg" --set checkpoint.save_dir="$T/nothing" --set model.dec_layers=3 \
  --set train.init_from="$T/overfit/checkpoint_last.llm"
[ ! -e "$T/nothing" ] || err "an error left $T/nothing behind"
# another sentencepiece model (its vocabulary size 90 at the same architecture): refused once the data is known
"$LLTRAIN" --config "$T/overfit.cfg" --quiet --set data.dir="$T/bin90" --set data.vocab_size=90 \
  --set checkpoint.save_dir="$T/v90" --set train.max_updates=1 --set train.valid_interval=0 2> /dev/null ||
  err "the vocabulary-90 run failed"
check_error "init_from: another vocabulary" "its sentencepiece vocabulary is not this run's" --config "$T/overfit.cfg" \
  --set checkpoint.save_dir="$T/v80" --set train.init_from="$T/v90/checkpoint_last.llm"
printf 'a\nb\n' > "$T/a.en"; printf 'a\n' > "$T/a.es"
sed -e "s#$SRC/tests/data/tiny/overfit32.en#$T/a.en#" -e "s#$SRC/tests/data/tiny/overfit32.es#$T/a.es#" \
    -e "s#dir: $T/bin#dir: $T/badbin#" "$T/overfit.cfg" > "$T/mismatch.cfg"
check_error "mismatched corpus" "a.en" --config "$T/mismatch.cfg" --set checkpoint.save_dir="$T/nothing"
[ ! -e "$T/badbin" ] || err "data preparation error left $T/badbin behind"

[ $fail -eq 0 ] && echo "test_lltrain: all checks passed"
exit $fail
