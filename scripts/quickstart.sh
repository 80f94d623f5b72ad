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
echo "model: runs/bible_quick/checkpoint_best.llm (metrics: runs/bible_quick/metrics.jsonl)"
