#!/usr/bin/env bash
# The quick start: install dependencies, build, build the English->Spanish
# Bible corpus, and train the bundled model on it (configs/bible_quick.cfg).
# Extra arguments go to lltrain, e.g. --set train.max_updates=300.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$(nproc)"
python3 scripts/make_bible_corpus.py --out data/bible/raw
resume=()
[ -f runs/bible_quick/checkpoint_last.llm ] && resume=(--resume)
build/lltrain --config configs/bible_quick.cfg "${resume[@]}" "$@"
# translate the held-out test books with beam 5 and score them
build/lldecode --model runs/bible_quick/checkpoint_best.llm --beam 5 --lenpen 1.0 \
  --input data/bible/raw/test.en --output runs/bible_quick/test.hyp.es
echo "== test books (en->es), beam 5, model runs/bible_quick/checkpoint_best.llm"
build/lleval --ref data/bible/raw/test.es --input runs/bible_quick/test.hyp.es --metrics bleu,chrf
echo "== floor: copying the English source"
build/lleval --ref data/bible/raw/test.es --input data/bible/raw/test.en --metrics bleu,chrf
