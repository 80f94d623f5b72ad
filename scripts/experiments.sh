#!/usr/bin/env bash
# Small-scale CPU experiments behind docs/experiments.md, and the papers'
# comparisons on one GPU.  Each run trains a model with lltrain, translates
# the held-out test set with beam 5, scores it, and appends one row to
# $OUT/results.tsv (columns: see HEADER).
#
#   scripts/experiments.sh [GROUP ...]        CPU groups: depth latent deep paper paper_hard latent_static
#                                             precision_depth
#                                             (default: depth latent)
#   scripts/experiments.sh --device cuda [GROUP ...]
#       GPU groups (default: all three, 13 runs, about 25 minutes on one H100 at MINUTES=1.3):
#         gpu_latent  static vs latent depth, pre-norm 6/24 and 6/48 decoders (L_K with K = L/2)
#         gpu_norm    post-norm vs pre-norm 6/24 (post-norm should fail), DLCL-30 vs static 30/6
#         gpu_deep    15/15 deep decoder: plain, +CAD, +DDR+ALD, +CAD+DDR+ALD
#       each run trains for MINUTES of wall time (train.max_minutes, equal compute per run), seed 1,
#       d 512 / FFN 1024 / 4 heads (the latent-depth paper's width), Bible en->es, 8192-token batches.
#
#   LEGACY=1  the defaults before issue 27 (hard straight-through samples after soft_update, the KL
#             summed over layers, no LN_0 in DLCL): how the rows in docs/experiments-results.tsv
#             dated before it were made
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
DEVICE=cpu
if [ "${1:-}" = --device ]; then DEVICE=${2:?--device cpu|cuda}; shift 2; fi
gpu=0; [ "$DEVICE" = cuda ] && gpu=1
B=${B:-build}
if [ $gpu = 1 ]; then  # one GPU: one run at a time, time-budgeted
  OUT=${OUT:-runs/experiments_gpu}
  UPDATES=${UPDATES:-100000}  # a cap only: MINUTES ends each run
  MINUTES=${MINUTES:-1.3}
  SEEDS=${SEEDS:-1}
  JOBS=1
  THREADS=${THREADS:-0}
  TOKENS=${TOKENS:-8192}
  TEST_LINES=${TEST_LINES:-600}
fi
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
if [ $gpu = 1 ]; then
  common=(--set model.d_model=512 --set model.ffn_dim=1024 --set model.heads=4 --set model.enc_layers=6
          --set train.device="$DEVICE" --set train.max_minutes="$MINUTES" --set train.max_updates=$UPDATES
          --set train.warmup_updates=600 --set train.lr=1.5e-3 --set train.clip_norm=1.0 --set model.dropout=0.3
          --set train.valid_interval=500 --set train.valid_bleu=false --set train.best_metric=loss
          --set train.log_interval=100 --set train.threads=$THREADS --set checkpoint.keep_last=1)
fi
[ "${LEGACY:-0}" = 1 ] && common+=(--set latent.soft_select=false --set latent.kl_reduce=sum --set dlcl.normalize_embed=false)
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
    --device "$DEVICE" --input "$src" --output "$out" --quiet "$@"
  python3 -c "import sys; print('%.1f' % ($(date +%s.%N) - $t0))"
}
bleu_of() { "$B/lleval" --ref "$1" --input "$2" --metrics bleu --score-only; }

# finished DIR: the run logged its validation at the last update (GPU: its final validation, at
# whatever update the time budget ended)
finished() {
  if [ $gpu = 1 ]; then grep -q '"type":"valid"' "$1/metrics.jsonl" 2>/dev/null && grep -q "train.max_minutes .* reached" "$1/train.log" 2>/dev/null
  else grep -q '"type":"valid","update":'"$UPDATES," "$1/metrics.jsonl" 2>/dev/null; fi
}

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
  local bleu_unk=-  # (needs the sentencepiece command-line tools)
  if command -v spm_encode > /dev/null; then
    spm_encode --model "$spm" --output_format id < "$src" | awk '{for (i = 1; i <= NF; i++) $i = 3; print}' > "$dir/src.unk"
    decode "$model" "$dir/src.unk" "$dir/unk.ids" "$lang" --raw-ids > /dev/null
    spm_decode --model "$spm" --input_format id < "$dir/unk.ids" > "$dir/unk.hyp"
    bleu_unk=$(bleu_of "$ref" "$dir/unk.hyp")
  fi
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
  local upd=$UPDATES  # GPU: the update the time budget ended at
  [ $gpu = 1 ] && upd=$(grep '"type":"valid"' "$dir/metrics.jsonl" | tail -1 | sed 's/.*"update":\([0-9]*\).*/\1/')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$seed" "$upd" "$vl" "$bleu" "$chrf" \
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
[ $gpu = 1 ] && groups=${*:-gpu_latent gpu_norm gpu_deep}
for g in $groups; do
  if [ $gpu = 0 ] && [[ $g == gpu_* ]]; then echo "group $g needs --device cuda" >&2; exit 2; fi
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
  paper) # issue 27: one-to-many latent depth on the corrected defaults (soft samples throughout, the KL
    # averaged over layers so beta = 1 is the paper's beta = the code's --sparsity-weight 1), 3 seeds:
    # do the per-language posteriors separate and become sparse, and do the kept layers agree across seeds?
    # Short: UPDATES=800 SEEDS="1 2 3" (KL from update 100 over 300 updates, L_K over the next 200)
    queue o2m_paper locale de --set latent.target_layers_dec=3 --set latent.soft_update=100 \
      --set latent.anneal_updates=300 --set latent.lk_anneal_updates=200 "${fast_logits[@]}" --set latent.beta=1 ;;
  latent_static) # issue 27: latent depth against static pre-norm decoders of the same expected depth (Li et al.
    # 2020, Table 8: LL L = 24 with E[L] = 12 vs static 12) at CPU scale, Bible en->es: a latent 16-layer
    # decoder with L_K at K = 8 against static 8 (its expected depth) and static 16 (its full depth), all
    # pre-norm, on the new defaults (soft samples throughout, beta 1 on the KL averaged over the 16 layers).
    # Short: UPDATES=600 SEEDS="1 2 3" TEST_LINES=300 (KL from update 100 over 200 updates, L_K over the
    # next 200, both at full weight for the last 100); the latent run first, so that a cut-short session
    # has it
    queue ll_pre_d16_k8 bible es --set model.dec_layers=16 --set model.norm=pre --set latent.decoder=true \
      --set latent.target_layers_dec=8 --set latent.soft_update=100 --set latent.anneal_updates=200 \
      --set latent.lk_anneal_updates=200 "${fast_logits[@]}"
    queue static_pre_d8 bible es --set model.dec_layers=8 --set model.norm=pre
    queue static_pre_d16 bible es --set model.dec_layers=16 --set model.norm=pre ;;
  precision_depth) # issue 26: the residual stream in bf16 against fp32 on a deep pre-norm stack (32 + 32
    # layers): the CPU bf16 backend stores every activation bf16 where the CUDA bf16 backend does (the
    # stream is rounded at each of the 64 residual sums and again in the backward), fp32 masters and Adam
    # in both.  Does that rounding cost quality at depth?  Same seeds, same batches.
    # Short: UPDATES=800 SEEDS="1 2" TEST_LINES=300
    d32=(--set model.enc_layers=32 --set model.dec_layers=32 --set model.norm=pre)
    queue fp32_pre_32_32 bible es "${d32[@]}" --set train.precision=fp32
    queue bf16_pre_32_32 bible es "${d32[@]}" --set train.precision=bf16 ;;
  paper_hard) # the same with the reference code's samples (hard straight-through after soft_update): which of
    # the two changes (soft samples, beta's scale) decides what o2m_paper shows
    queue o2m_paper_hard locale de --set latent.target_layers_dec=3 --set latent.soft_update=100 \
      --set latent.anneal_updates=300 --set latent.lk_anneal_updates=200 "${fast_logits[@]}" --set latent.beta=1 \
      --set latent.soft_select=false ;;
  gpu_latent) # Li et al. 2020, Tables 1/3-5/8: a static deep pre-norm decoder against latent depth with L_K
    # at K = L/2 (Table 8: LL L=24 with E[L] = 12 vs static 12), and the static stack of that expected depth
    for L in 24 48; do
      queue "gpu_static_6_$L" bible es --set model.dec_layers=$L
      queue "gpu_ll_6_$L" bible es --set model.dec_layers=$L --set latent.decoder=true \
        --set latent.target_layers_dec=$((L / 2)) --set latent.soft_update=100 --set latent.anneal_updates=500 \
        --set latent.lk_anneal_updates=500
    done
    queue gpu_static_6_12 bible es --set model.dec_layers=12 ;;
  gpu_norm) # Wang et al. 2019: post-norm fails where pre-norm trains (6/24); DLCL-30 (pre-norm, LN(y_0))
    # against the static 30/6 stack
    queue gpu_post_6_24 bible es --set model.dec_layers=24 --set model.norm=post
    queue gpu_pre_6_24 bible es --set model.dec_layers=24 --set model.norm=pre
    queue gpu_static_30_6 bible es --set model.enc_layers=30 --set model.dec_layers=6
    queue gpu_dlcl_30_6 bible es --set model.enc_layers=30 --set model.dec_layers=6 --set dlcl.encoder=true \
      --set dlcl.decoder=true ;;
  gpu_deep) # Li et al. 2022, Tables 1/3: the 15/15 deep decoder, plain and with CAD / CRT (DDR + ALD) / both
    d15=(--set model.enc_layers=15 --set model.dec_layers=15)
    cad=(--set deep.p_net=0.5 --set deep.drop_depth=12)
    crt=(--set deep.ddr_alpha=1 --set deep.ald_weight=1)
    queue gpu_deep_15_15 bible es "${d15[@]}"
    queue gpu_deep_15_15_cad bible es "${d15[@]}" "${cad[@]}"
    queue gpu_deep_15_15_crt bible es "${d15[@]}" "${crt[@]}"
    queue gpu_deep_15_15_all bible es "${d15[@]}" "${cad[@]}" "${crt[@]}" ;;
  *) echo "unknown group $g" >&2; exit 2 ;;
  esac
done
wait
column -t -s $'\t' "$RES"
