#!/usr/bin/env bash
# Small-scale CPU experiments behind docs/experiments.md.  Each run trains a
# small model with lltrain, decodes a held-out set greedily, and appends one
# row to runs/experiments/results.tsv:
#   name  updates  valid_loss  valid_ppl  BLEU  chrF  BLEU_unk_source  E[L]_dec  kept_dec  seconds
#
#   scripts/experiments.sh [GROUP ...]     groups: deep dlcl ll_deep ll_k ll_beta ll_inner (default: all)
#
# Needs the Bible corpus (scripts/make_bible_corpus.py) and, for the ll_*
# multilingual groups, the locale corpus (scripts/make_locale_corpus.py).
set -euo pipefail
cd "$(dirname "$0")/.."
B=build
OUT=runs/experiments
mkdir -p "$OUT"
RES=$OUT/results.tsv
[ -f "$RES" ] || printf 'name\tupdates\tvalid_loss\tvalid_ppl\tbleu\tchrf\tbleu_unk_src\tEL_dec\tkept_dec\tseconds\n' > "$RES"
UPDATES=${UPDATES:-200}

# Common small setting on the Bible corpus (reuses data/bible/bin of the quick start).
bible=(--config configs/bible_quick.cfg --set model.d_model=128 --set model.ffn_dim=512 --set model.heads=4
       --set data.max_tokens=2048 --set train.max_updates=$UPDATES --set train.warmup_updates=100 --set train.lr=2e-3
       --set train.valid_interval=$UPDATES --set train.valid_bleu=false --set train.best_metric=loss
       --set train.log_interval=50 --set train.threads=2 --set checkpoint.keep_last=1)
locale=(--config configs/locale_o2m_ll.cfg --set model.d_model=128 --set model.ffn_dim=512 --set model.heads=4
        --set model.enc_layers=2 --set model.dec_layers=8 --set data.max_tokens=1024 --set train.max_updates=$UPDATES
        --set train.warmup_updates=100 --set train.lr=2e-3 --set train.valid_interval=$UPDATES --set train.log_interval=50
        --set train.threads=2 --set latent.soft_update=50 --set latent.anneal_updates=100 --set checkpoint.keep_last=1)

# run NAME CORPUS(bible|locale) LANG [--set ...]: train, decode the test set, score, append a row.
run() {
  local name=$1 corpus=$2 lang=$3; shift 3
  local dir=$OUT/$name
  if grep -q "^$name	" "$RES"; then echo "skip $name (done)"; return; fi
  local t0=$SECONDS
  local base=("${bible[@]}")
  [ "$corpus" = locale ] && base=("${locale[@]}")
  if ! grep -q '"type":"valid","update":'"$UPDATES" "$dir/metrics.jsonl" 2>/dev/null; then  # (re)train unless finished
    rm -rf "$dir"
    "$B/lltrain" "${base[@]}" --set checkpoint.save_dir="$dir" "$@" 2> "$dir.log" || { echo "$name: training failed" >&2; tail -2 "$dir.log" >&2; return; }
  fi
  local secs=$((SECONDS - t0))
  local model=$dir/checkpoint_last.llm src ref spm
  if [ "$corpus" = bible ]; then
    src=data/bible/raw/test.en; ref=data/bible/raw/test.es; spm=data/bible/bin/spm.model
  else
    src=data/locale/raw/test.en-$lang.en; ref=data/locale/raw/test.en-$lang.$lang; spm=data/locale/bin/spm.model
  fi
  "$B/lldecode" --model "$model" --beam 1 --max-len-a 1.2 --max-len-b 10 --target-lang "$lang" --input "$src" --output "$dir/test.hyp" --quiet
  local scores bleu chrf
  scores=$("$B/lleval" --ref "$ref" --input "$dir/test.hyp" --metrics bleu,chrf --score-only)
  bleu=$(echo "$scores" | sed -n 1p); chrf=$(echo "$scores" | sed -n 2p)
  # the same model with every source token replaced by UNK: how much does it still "translate"?
  spm_encode --model "$spm" --output_format id < "$src" | awk '{for (i = 1; i <= NF; i++) $i = 3; print}' > "$dir/src.unk"
  "$B/lldecode" --model "$model" --beam 1 --max-len-a 1.2 --max-len-b 10 --target-lang "$lang" --raw-ids --input "$dir/src.unk" --output "$dir/unk.ids" --quiet
  spm_decode --model "$spm" --input_format id < "$dir/unk.ids" > "$dir/unk.hyp"
  local bleu_unk
  bleu_unk=$("$B/lleval" --ref "$ref" --input "$dir/unk.hyp" --metrics bleu --score-only)
  local vl el kept
  vl=$(grep '"type":"valid"' "$dir/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
  el=$(grep '"expected_depth"' "$dir/metrics.jsonl" | tail -1 | sed 's/.*"dec":{.*"expected_depth":\([0-9.]*\).*/\1/' || true)
  kept=-
  if grep -q latent_logits < <(python3 scripts/llmodel.py "$model" 2>/dev/null); then
    kept=$("$B/llprune" --model "$model" --output "$dir/pruned.llm" ${PRUNE_LANG:+--lang $lang} 2>/dev/null | awk '/^decoder: keep/ {print $3 "/" $5}')
  fi
  printf '%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$UPDATES" "$vl" "$(python3 -c "print(2**$vl)")" \
    "$bleu" "$chrf" "$bleu_unk" "${el:--}" "$kept" "$secs" | tee -a "$RES"
}

groups=${*:-deep dlcl ll_deep ll_k ll_beta ll_inner}
for g in $groups; do
  case $g in
  deep) # a deep decoder without and with CAD + DDR + ALD (Li et al. 2022), pre-norm 2+12
    run deep_plain bible es --set model.enc_layers=2 --set model.dec_layers=12
    run deep_cad_crt bible es --set model.enc_layers=2 --set model.dec_layers=12 --set deep.p_net=0.5 \
      --set deep.drop_depth=8 --set deep.ddr_alpha=1 --set deep.ald_weight=1 ;;
  dlcl) # DLCL vs plain pre-norm at the same depth (12-layer encoder)
    run prenorm_e12 bible es --set model.enc_layers=12 --set model.dec_layers=2
    run dlcl_e12 bible es --set model.enc_layers=12 --set model.dec_layers=2 --set dlcl.encoder=true --set dlcl.decoder=true ;;
  ll_deep) # a deep post-norm decoder: static vs latent of the same depth
    run static_post_d16 bible es --set model.norm=post --set model.enc_layers=2 --set model.dec_layers=16
    run latent_post_d16 bible es --set model.norm=post --set model.enc_layers=2 --set model.dec_layers=16 \
      --set latent.decoder=true --set latent.soft_update=50 --set latent.anneal_updates=100 ;;
  ll_k) # latent L=24, K=12 vs static 12 decoder layers
    run static_d12 bible es --set model.enc_layers=2 --set model.dec_layers=12
    run latent_d24_k12 bible es --set model.enc_layers=2 --set model.dec_layers=24 --set latent.decoder=true \
      --set latent.target_layers_dec=12 --set latent.soft_update=50 --set latent.anneal_updates=50 \
      --set latent.lk_anneal_updates=50 ;;
  ll_beta) # one-to-many (en -> de, fr, es, it): beta and the aggregated posterior vs sparsity
    run o2m_beta0 locale de --set latent.beta=0
    run o2m_beta1 locale de --set latent.beta=1
    run o2m_agg_beta1 locale de --set latent.beta=1 --set latent.prior=agged_posterior ;;
  ll_inner) # Algorithm 2's inner steps
    run o2m_I1 locale de --set latent.inner_steps=1 --set latent.target_layers_dec=4
    run o2m_I2 locale de --set latent.inner_steps=2 --set latent.target_layers_dec=4
    run o2m_I5 locale de --set latent.inner_steps=5 --set latent.target_layers_dec=4 ;;
  *) echo "unknown group $g" >&2; exit 2 ;;
  esac
done
column -t -s $'\t' "$RES"
