#!/usr/bin/env bash
# Data parallelism on the CPU (docs/distributed.md): `mpirun -np 2 lltrain`
# must give, after 10 updates, the parameters of one process that sees the
# union of the two ranks' batches (update_freq x 2), max |diff| < 5e-5 (PTOL):
# plain (with dropout and gradient clipping), with update_freq, with ZeRO-1
# (also skipping spikes: train.spike_zscore_*; also with frozen tensors: train.freeze),
# with DDR + ALD + cross-attention drop + LayerDrop (also recomputing each
# layer: train.checkpoint_activations), with DLCL + ReZero, and a
# multilingual latent-depth model whose ranks hold different language pairs
# in each update (reference KL with the aggregated-posterior prior, L_K; validation of each pair).
# Then train.max_minutes with two ranks: all stop after the same update.
# adam_eps 1e-6: the attention key biases have a gradient that is zero in
# exact arithmetic; Adam with eps 1e-8 turns its rounding noise (which
# depends on summation order) into lr-sized steps (docs/distributed.md).
source "$(dirname "$0")/lib.sh"
. "$SRC/tests/cli/dist_env.sh"
start=$SECONDS

PTOL=5e-5
BASE=(--set train.max_updates=10 --set train.threads=1 --set train.valid_interval=0 --set train.warmup_updates=3
      --set train.adam_eps=1e-6 --set train.log_interval=5)
# one process, update_freq u1  vs  two ranks, update_freq u2 (= u1 / 2); extra options in "$@"
compare() {
  local name=$1 cfg=$2 u1=$3 u2=$4; shift 4
  "$BIN/lltrain" --config "$cfg" "${BASE[@]}" --set checkpoint.save_dir="$T/$name.1" --set train.update_freq=$u1 "$@" \
    2> "$T/$name.1.log" || { err "$name: one process failed: $(tail -1 "$T/$name.1.log")"; return; }
  mpirun2 "$BIN/lltrain" --config "$cfg" "${BASE[@]}" --set checkpoint.save_dir="$T/$name.2" --set train.update_freq=$u2 \
    "$@" > "$T/$name.2.log" 2>&1 || { err "$name: mpirun -np 2 failed: $(grep lltrain "$T/$name.2.log" | tail -2)"; return; }
  local out d
  out=$("$BIN/ll_ckpt_diff" "$T/$name.1/checkpoint_last.llm" "$T/$name.2/checkpoint_last.llm") || { err "$name: $out"; return; }
  d=$(echo "$out" | awk '{print $2}')
  echo "$name: $out"
  # PTOL: 5% of one Adam step at lr 1e-3.  Adam turns the ranks' different summation order of a
  # near-zero gradient into up to a few % of a step: `deep_zero` measured 1.1e-5 (fc1 weights) in the
  # ASan build on an AVX-512 EPYC, 4e-7 in the release build.  A wrong shard, a missing reduction or
  # a different dropout/LayerDrop draw moves parameters by whole steps (1e-3).
  python3 -c "import sys; sys.exit(0 if float('$d') < $PTOL else 1)" || err "$name: parameters differ by $d (>= $PTOL)"
  # the logged loss is global: the same training records up to the summation order of the ranks'
  # partial sums (the 6th decimal can flip: 6.891681 vs 6.891682 for `deep` on an AVX-512 EPYC);
  # validation (sharded over the ranks, then summed) the same up to summation order, BLEU/chrF
  # (summed n-gram counts) exactly
  python3 - "$T/$name.1/metrics.jsonl" "$T/$name.2/metrics.jsonl" <<'PY' || err "$name: logged records differ"
import json, sys
recs = [list(map(json.loads, open(f))) for f in sys.argv[1:]]
for kind, tol in (("train", 1e-5), ("valid", 1e-4)):
    a, b = ([r for r in rs if r["type"] == kind] for rs in recs)
    assert len(a) == len(b) and a, (kind, len(a), len(b))
    for x, y in zip(a, b):
        assert x["update"] == y["update"], (kind, x, y)
        assert abs(x["loss"] - y["loss"]) < tol and abs(x["nll"] - y["nll"]) < tol, (kind, x, y)
        assert x.get("bleu") == y.get("bleu") and x.get("chrf") == y.get("chrf"), (kind, x, y)
        # several validation corpora: each one's too (its loss read between corpora on each rank)
        xc, yc = x.get("corpora", []), y.get("corpora", [])
        assert len(xc) == len(yc), (kind, x, y)
        for p, q in zip(xc, yc):
            assert p["tokens"] == q["tokens"] and abs(p["loss"] - q["loss"]) < tol, (kind, p, q)
            assert p.get("bleu") == q.get("bleu") and p.get("chrf") == q.get("chrf"), (kind, p, q)
PY
}

TINY=$SRC/configs/tiny_test.cfg
D=(--set data.dir="$T/bin")
# the first run prepares the data (rank 0 prepares, rank 1 waits)
mpirun2 "$BIN/lltrain" --config "$TINY" "${D[@]}" "${BASE[@]}" --set train.max_updates=1 --set checkpoint.save_dir="$T/prep" \
  > "$T/prep.log" 2>&1
if grep -q "this build has no MPI" "$T/prep.log"; then echo "SKIP: lltrain built without MPI"; exit 77; fi
[ -e "$T/prep/checkpoint_last.llm" ] || { err "mpirun -np 2 on fresh data failed: $(tail -3 "$T/prep.log")"; exit 1; }
grep -q "2 ranks (mpi collectives" "$T/prep.log" || err "rank 0 did not log the 2 ranks"

compare plain "$TINY" 2 1 "${D[@]}" --set train.clip_norm=0.5 --set train.valid_bleu=true --set train.valid_interval=5
compare uf "$TINY" 4 2 "${D[@]}" --set dist.bucket_mb=0.05
# validation translations (train.valid_translations) gathered from two ranks: from a model that
# translates something (60 updates of one process), one update, then the final validation
"$BIN/lltrain" --config "$TINY" "${D[@]}" "${BASE[@]}" --set train.max_updates=60 --set train.lr=3e-3 \
  --set train.warmup_updates=20 --set checkpoint.save_dir="$T/vt0" 2> "$T/vt0.log" || err "vt0: training failed"
compare vt "$TINY" 2 1 "${D[@]}" --set train.init_from="$T/vt0/checkpoint_last.llm" --set train.max_updates=1 \
  --set train.valid_bleu=true --set train.valid_translations=true
grep -q '[^[:space:]]' "$T/vt.1/valid_hyp.0.es" || err "vt: the translations are all empty (the test would test nothing)"
cmp -s "$T/vt.1/valid_hyp.0.es" "$T/vt.2/valid_hyp.0.es" || err "vt: two ranks' validation translations differ from one's"
# (with the weights' moving average: the model compared is the average; the raw weights are optim.params)
compare zero "$TINY" 4 2 "${D[@]}" --set dist.zero=1 --set dist.bucket_mb=0.02 --set train.clip_norm=0.5 \
  --set train.ema_decay=0.8
grep -q "ZeRO-1: Adam moments sharded over 2 ranks: .* MiB of optimizer state saved per rank" "$T/zero.2.log" ||
  err "zero: no memory-saved line"
# train.freeze under ZeRO-1: each rank steps the parts of its blocks left to train (blocks that
# cut across frozen tensors), with weight decay, the norm clipped (so the frozen gradients must leave
# it on every rank); one process freezes the same tensors
compare freeze "$TINY" 2 1 "${D[@]}" --set dist.zero=1 --set dist.bucket_mb=0.02 --set train.weight_decay=0.1 \
  --set train.clip_norm=0.1 \
  --set "train.freeze=enc.layers.0.*,dec.layers.1.ffn.*,enc.embed"
"$BIN/ll_ckpt_diff" "$T/zero.1/checkpoint_last.llm" "$T/zero.2/checkpoint_last.llm" optim. | tee "$T/zero.moments"
awk '{exit !($2 < 1e-5)}' "$T/zero.moments" || err "zero: gathered Adam moments (or raw weights) differ"
"$BIN/ll_ckpt_diff" "$T/zero.1/checkpoint_last.llm" "$T/zero.2/checkpoint_last.llm" optim.params | grep -q " over 1 " ||
  err "zero: the raw weights beside the moving average are missing"
# ZeRO-1 through a checkpoint: 5 updates, --resume to 10 == the uninterrupted run
Z=(--config "$TINY" "${D[@]}" "${BASE[@]}" --set checkpoint.save_dir="$T/zres" --set train.update_freq=2 --set dist.zero=1
   --set dist.bucket_mb=0.02 --set train.clip_norm=0.5 --set train.ema_decay=0.8)
mpirun2 "$BIN/lltrain" "${Z[@]}" --set train.max_updates=5 > "$T/zres.log" 2>&1 &&
  mpirun2 "$BIN/lltrain" "${Z[@]}" --resume >> "$T/zres.log" 2>&1 || err "zero resume: $(grep lltrain "$T/zres.log" | tail -2)"
"$BIN/ll_ckpt_diff" "$T/zres/checkpoint_last.llm" "$T/zero.2/checkpoint_last.llm" | tee "$T/zres.diff"
awk '{exit !($2 < 1e-6)}' "$T/zres.diff" || err "zero resume: differs from the uninterrupted run"
# spike skipping (train.spike_zscore_*) over ZeRO-1: each rank decides from the all-reduced loss and
# norm, so every rank skips the same updates, those one process skips
compare spike "$TINY" 2 1 "${D[@]}" --set dist.zero=1 --set train.max_updates=30 --set train.spike_window=8 \
  --set train.spike_zscore_gnorm=0.01 --set train.spike_zscore_loss=0.01
spikes() { grep -o '"update":[0-9]*,"reason":"spike"' "$T/spike.$1/metrics.jsonl" | tr '\n' ' '; }
[ -n "$(spikes 2)" ] && [ "$(spikes 1)" = "$(spikes 2)" ] ||
  err "spike: one process skipped updates {$(spikes 1)}, two ranks {$(spikes 2)} (want the same, and some)"
METHODS=(--set deep.ddr_alpha=1 --set deep.ald_weight=0.5 --set deep.p_net=0.3 --set deep.drop_depth=1
         --set model.enc_layerdrop=0.2 --set model.dec_layerdrop=0.2 --set model.dec_layers=3)
compare deep "$TINY" 4 2 "${D[@]}" "${METHODS[@]}" --set dist.bucket_mb=0.01
compare deep_zero "$TINY" 2 1 "${D[@]}" "${METHODS[@]}" --set dist.zero=1
# activation checkpointing: the per-layer gradient hooks start reductions between recomputed layers
compare deep_recompute "$TINY" 2 1 "${D[@]}" "${METHODS[@]}" --set train.checkpoint_activations=true
compare dlcl_rezero "$TINY" 2 1 "${D[@]}" --set dlcl.encoder=true --set dlcl.decoder=true --set model.norm=rezero \
  --set train.lr=3e-4
LAT=(--set data.dir="$T/lbin" --set latent.soft_update=2 --set latent.anneal_updates=3 --set latent.lk_anneal_updates=2
     --set latent.logits_lr=0.05 --set latent.kl=reference --set latent.prior=agged_posterior --set latent.inner_steps=2)
compare latent "$SRC/configs/tiny_latent.cfg" 2 1 "${LAT[@]}" --set train.valid_interval=5 --set train.valid_bleu=true \
  --set train.valid_translations=true
for f in valid_hyp.0.es valid_hyp.1.xx valid_hyp_best.0.es; do # (each rank translated every second line)
  cmp -s "$T/latent.1/$f" "$T/latent.2/$f" || err "latent: $f of two ranks differs from one process's"
done
grep -q '"corpora":\[{"pair":"en-es",.*"bleu".*},{"pair":"en-xx",' "$T/latent.2/metrics.jsonl" ||
  err "latent: no validation record of each language pair"
cmp -s <(grep -o '"kl":[^,]*,"lk":[^,]*' "$T/latent.1/metrics.jsonl") <(grep -o '"kl":[^,]*,"lk":[^,]*' "$T/latent.2/metrics.jsonl") ||
  err "latent: KL / L_K records differ"
grep -q '"lk":0.0[0-9]*[1-9]' "$T/latent.2/metrics.jsonl" || err "latent: L_K never active (the test would not test it)"

# the comparison can fail: one process with the two ranks' batch count halved is a different run
"$BIN/lltrain" --config "$TINY" "${D[@]}" "${BASE[@]}" --set checkpoint.save_dir="$T/half" 2> /dev/null
d=$("$BIN/ll_ckpt_diff" "$T/half/checkpoint_last.llm" "$T/plain.2/checkpoint_last.llm" | awk '{print $2}')
python3 -c "import sys; sys.exit(0 if float('$d') > 1e-4 else 1)" || err "control: a different batch gave a diff of only $d"
# train.max_minutes with two ranks: rank 1 gets no budget (an MPMD launch), as if its clock ran
# late; without agreeing on the update (ll_dist_train_sync) rank 0 would leave the loop while
# rank 1 waits in a collective; both must stop after the same update and the job must end
BUDGET=("$BIN/lltrain" --config "$TINY" "${D[@]}" --set train.threads=1 --set train.valid_interval=0
        --set train.max_updates=100000 --set checkpoint.save_dir="$T/budget")
timeout 120 "$MPIRUN" --oversubscribe --allow-run-as-root -np 1 "${BUDGET[@]}" --set train.max_minutes=0.004 \
  : -np 1 "${BUDGET[@]}" --set train.max_minutes=0 > "$T/budget.log" 2>&1 ||
  err "max_minutes with 2 ranks: exit status not 0 (124: a rank hung): $(grep lltrain "$T/budget.log" | tail -2)"
grep -q "train.max_minutes 0.004 reached after" "$T/budget.log" || err "max_minutes with 2 ranks: no budget line"
echo "dist equivalence tests: $((SECONDS - start)) s"
exit $fail
