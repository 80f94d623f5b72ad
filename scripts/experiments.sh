#!/usr/bin/env bash
# Small-scale CPU experiments behind docs/experiments.md.  Each run trains a
# small model with lltrain, translates the held-out test set with beam 5,
# scores it, and appends one row to $OUT/results.tsv (columns: see HEADER).
#
#   scripts/experiments.sh [GROUP ...]        groups: depth latent deep (default: depth latent)
#
#   UPDATES=2000  SEEDS="1 2"  JOBS=2 (runs at once, THREADS=1 thread each)
#   TOKENS=1024 (Bible batch) PAIR_TOKENS=256 (locale: one batch per language per update)
#   OUT=runs/experiments  RUNS="name ..." (only these runs; default: every run of the groups)
#
# Needs the Bible corpus (scripts/make_bible_corpus.py; data/bible/bin from
# `llprep --config configs/bible_quick.cfg`) and, for `latent`, the locale
# corpus (scripts/make_locale_corpus.py; `llprep --config configs/locale_o2m_ll.cfg`).
# A finished run (its row in results.tsv) is skipped, so the script resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
OUT=${OUT:-runs/experiments}
UPDATES=${UPDATES:-2000}
SEEDS=${SEEDS:-1 2}
JOBS=${JOBS:-2}
THREADS=${THREADS:-1}
TOKENS=${TOKENS:-1024}
PAIR_TOKENS=${PAIR_TOKENS:-256}
TEST_LINES=${TEST_LINES:-0}   # > 0: score only the first N test sentences (a quick check of the script)
mkdir -p "$OUT"
RES=$OUT/results.tsv
HEADER='name\tseed\tupdates\tvalid_loss\tbleu\tchrf\tbleu_unk_src\tEL_dec\tkept_dec\tbleu_soft\tbleu_pruned\ttrain_s\tdecode_s\tdecode_pruned_s\n'
[ -f "$RES" ] || printf "$HEADER" > "$RES"
# which corpora the rows were measured on: the locale corpus depends on the gettext catalogs the
# machine has installed (a different package set gives a different corpus, so compare rows only
# when these agree)
for m in data/bible/raw/MANIFEST data/locale/raw/MANIFEST; do
  if [ -f "$m" ]; then
    printf '%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$m" "$(sed -n 's/^# sha256: //p' "$m")" >> "$OUT/corpora.tsv"
  fi
done

# d = 128 Transformers; validation loss every 250 updates for the learning curves.
common=(--set model.d_model=128 --set model.ffn_dim=512 --set model.heads=4 --set model.enc_layers=2
        --set train.max_updates=$UPDATES --set train.warmup_updates=200 --set train.lr=2e-3
        --set train.valid_interval=250 --set train.valid_bleu=false --set train.best_metric=loss
        --set train.log_interval=50 --set train.threads=$THREADS --set checkpoint.keep_last=1)
bible=(--config configs/bible_quick.cfg "${common[@]}" --set data.max_tokens=$TOKENS)
locale=(--config configs/locale_o2m_ll.cfg "${common[@]}" --set data.max_tokens=$PAIR_TOKENS
        --set model.dec_layers=8 --set latent.soft_update=200 --set latent.anneal_updates=500)
# latent runs: the layer logits learn at 10x train.lr, so that their step budget
# over the run is several units (at train.lr every q(z) stays near 0.5).
fast_logits=(--set latent.logits_lr=0.02)

# decode MODEL SRC OUTPUT LANG [lldecode options]: beam 5, prints the seconds it took.  Outputs are
# capped at 1.5 x source + 10 tokens: a diverged model would otherwise run every sentence to 200.
decode() {
  local model=$1 src=$2 out=$3 lang=$4; shift 4
  local t0; t0=$(date +%s.%N)
  "$B/lldecode" --model "$model" --beam 5 --lenpen 1.0 --max-len-a 1.5 --max-len-b 10 --threads "$THREADS" --target-lang "$lang" \
    --input "$src" --output "$out" --quiet "$@"
  python3 -c "import sys; print('%.1f' % ($(date +%s.%N) - $t0))"
}
bleu_of() { "$B/lleval" --ref "$1" --input "$2" --metrics bleu --score-only; }

# finished DIR: the run logged its validation at the last update
finished() { grep -q '"type":"valid","update":'"$UPDATES," "$1/metrics.jsonl" 2>/dev/null; }

# run NAME SEED CORPUS(bible|locale) LANG [--set ...]: train, decode, score, append a row.
run() {
  local name=$1 seed=$2 corpus=$3 lang=$4; shift 4
  local dir=$OUT/$name.s$seed
  if grep -q "^$name	$seed	" "$RES"; then echo "skip $name seed $seed (done)"; return; fi
  local base=("${bible[@]}")
  [ "$corpus" = locale ] && base=("${locale[@]}")
  local t0=$SECONDS
  if ! finished "$dir"; then  # (re)train unless finished
    rm -rf "$dir"; mkdir -p "$dir"
    "$B/lltrain" "${base[@]}" --set train.seed="$seed" --set checkpoint.save_dir="$dir" "$@" 2> "$dir/train.log" ||
      { echo "$name seed $seed: training failed: $(tail -1 "$dir/train.log")" >&2; return; }
    # lltrain exits 0 when stopped by a signal (it checkpoints for --resume): no row for a run cut short
    finished "$dir" ||
      { echo "$name seed $seed: stopped before update $UPDATES: $(grep -m1 'stopped by' "$dir/train.log" || tail -1 "$dir/train.log")" >&2; return; }
  fi
  local train_s=$((SECONDS - t0))
  local model=$dir/checkpoint_last.llm src ref spm
  if [ "$corpus" = bible ]; then
    src=data/bible/raw/test.en; ref=data/bible/raw/test.es; spm=data/bible/bin/spm.model
  else
    src=data/locale/raw/test.en-$lang.en; ref=data/locale/raw/test.en-$lang.$lang; spm=data/locale/bin/spm.model
  fi
  if [ "$TEST_LINES" -gt 0 ]; then
    head -n "$TEST_LINES" "$src" > "$dir/test.src"; head -n "$TEST_LINES" "$ref" > "$dir/test.ref"
    src=$dir/test.src ref=$dir/test.ref
  fi
  local decode_s bleu chrf scores
  decode_s=$(decode "$model" "$src" "$dir/test.hyp" "$lang")
  scores=$("$B/lleval" --ref "$ref" --input "$dir/test.hyp" --metrics bleu,chrf --score-only)
  bleu=$(echo "$scores" | sed -n 1p); chrf=$(echo "$scores" | sed -n 2p)
  # the same model with every source token replaced by UNK (id 3): how much does it still "translate"?
  spm_encode --model "$spm" --output_format id < "$src" | awk '{for (i = 1; i <= NF; i++) $i = 3; print}' > "$dir/src.unk"
  decode "$model" "$dir/src.unk" "$dir/unk.ids" "$lang" --raw-ids > /dev/null
  spm_decode --model "$spm" --input_format id < "$dir/unk.ids" > "$dir/unk.hyp"
  local bleu_unk; bleu_unk=$(bleu_of "$ref" "$dir/unk.hyp")
  local vl el=- kept=- bleu_soft=- bleu_pruned=- decode_pruned_s=-
  vl=$(grep '"type":"valid"' "$dir/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
  if grep -q '"expected_depth"' "$dir/metrics.jsonl"; then
    el=$(grep '"expected_depth"' "$dir/metrics.jsonl" | tail -1 | sed 's/.*"dec":{.*"expected_depth":\([0-9.]*\).*/\1/')
    # soft inference (z = q) against the default hard inference (layer used iff q >= 0.5)
    decode "$model" "$src" "$dir/test.soft.hyp" "$lang" --latent-inference soft > /dev/null
    bleu_soft=$(bleu_of "$ref" "$dir/test.soft.hyp")
    # the pruned model: llprune keeps the layers with q >= 0.5 for this language
    local plang=(); [ "$corpus" = locale ] && plang=(--lang "$lang")
    if kept=$("$B/llprune" --model "$model" --output "$dir/pruned.llm" "${plang[@]}" 2>"$dir/prune.log" |
              awk '/^decoder: keep/ {print $3 "/" $5}') && [ -f "$dir/pruned.llm" ]; then
      decode_pruned_s=$(decode "$dir/pruned.llm" "$src" "$dir/test.pruned.hyp" "$lang")
      bleu_pruned=$(bleu_of "$ref" "$dir/test.pruned.hyp")
    else
      kept="refused"
    fi
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$seed" "$UPDATES" "$vl" "$bleu" "$chrf" \
    "$bleu_unk" "$el" "${kept:--}" "$bleu_soft" "$bleu_pruned" "$train_s" "$decode_s" "$decode_pruned_s" | tee -a "$RES"
}

# queue NAME CORPUS LANG [--set ...]: one run per seed, at most JOBS at once
queue() {
  local seed
  if [ -n "${RUNS:-}" ] && [[ " $RUNS " != *" $1 "* ]]; then return; fi
  for seed in $SEEDS; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    run "$1" "$seed" "${@:2}" &
  done
}

groups=${*:-depth latent}
for g in $groups; do
  case $g in
  depth) # a 20-layer decoder: does post-norm fail at this depth, and do DLCL and latent depth fix it?
    d20=(--set model.dec_layers=20)
    queue post_d20 bible es "${d20[@]}" --set model.norm=post
    queue pre_d20 bible es "${d20[@]}" --set model.norm=pre
    queue dlcl_post_d20 bible es "${d20[@]}" --set model.norm=post --set dlcl.encoder=true --set dlcl.decoder=true
    queue ll_post_d20 bible es "${d20[@]}" --set model.norm=post --set latent.decoder=true \
      --set latent.soft_update=200 --set latent.anneal_updates=500 "${fast_logits[@]}" ;;
  latent) # one-to-many en -> {de, fr, es, it}, 8 latent decoder layers, target depth K = 3
    k3=(--set latent.target_layers_dec=3 --set latent.lk_anneal_updates=500)
    queue o2m_beta0 locale de "${k3[@]}" "${fast_logits[@]}" --set latent.beta=0
    queue o2m_beta1 locale de "${k3[@]}" "${fast_logits[@]}" --set latent.beta=1
    queue o2m_agg locale de "${k3[@]}" "${fast_logits[@]}" --set latent.beta=1 --set latent.prior=agged_posterior
    # the inner loop at beta = 0, where the logits move (at beta = 1 every q(z) stays at 0.5)
    queue o2m_beta0_I2 locale de "${k3[@]}" "${fast_logits[@]}" --set latent.beta=0 --set latent.inner_steps=2
    queue o2m_beta0_I5 locale de "${k3[@]}" "${fast_logits[@]}" --set latent.beta=0 --set latent.inner_steps=5 ;;
  deep) # the deep-decoder methods (Li et al. 2022), each removed in turn, on the 20-layer decoder that
    # fails at this scale: post-norm (the pre-norm one does not collapse; see the depth group)
    d20=(--set model.dec_layers=20 --set model.norm=post)
    crt=(--set deep.p_net=0.5 --set deep.drop_depth=12 --set deep.ddr_alpha=1 --set deep.ald_weight=1)
    queue deep_post_all bible es "${d20[@]}" "${crt[@]}"
    queue deep_post_no_ddr bible es "${d20[@]}" "${crt[@]}" --set deep.ddr_alpha=0
    queue deep_post_no_cad bible es "${d20[@]}" "${crt[@]}" --set deep.p_net=0
    queue deep_post_no_ald bible es "${d20[@]}" "${crt[@]}" --set deep.ald_weight=0 ;;
  *) echo "unknown group $g" >&2; exit 2 ;;
  esac
done
wait
column -t -s $'\t' "$RES"
