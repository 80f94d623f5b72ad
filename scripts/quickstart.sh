#!/usr/bin/env bash
# The quick start: install dependencies, build, build the English->Spanish
# Bible corpus, train the bundled model on it and score the test books.
# On a machine with a GPU (and a CUDA build: nvcc present) it trains the
# Transformer-base of configs/bible_gpu.cfg for at most 5 minutes on the GPU;
# otherwise the small model of configs/bible_quick.cfg on the CPU (~15
# minutes on 2 cores).  LL_QUICKSTART_DEVICE=cpu forces the CPU config.
# Extra arguments go to lltrain, e.g. --set train.max_updates=300.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build -j"$(nproc)"
python3 scripts/make_bible_corpus.py --out data/bible/raw
name=bible_quick dev=cpu
if [ "${LL_QUICKSTART_DEVICE:-auto}" != cpu ] && build/lltrain --devices | grep -q '^train.device auto: cuda'; then
  name=bible_gpu dev=cuda
fi
echo "== training configs/$name.cfg on the $dev"
resume=()
[ -f "runs/$name/checkpoint_last.llm" ] && resume=(--resume) # bible_gpu: --resume trains another time budget
build/lltrain --config "configs/$name.cfg" "${resume[@]}" "$@"
# translate the held-out test books with beam 5 and score them
build/lldecode --model "runs/$name/checkpoint_best.llm" --device "$dev" --beam 5 --lenpen 1.0 \
  --input data/bible/raw/test.en --output "runs/$name/test.hyp.es"
echo "== test books (en->es), beam 5, model runs/$name/checkpoint_best.llm"
build/lleval --ref data/bible/raw/test.es --input "runs/$name/test.hyp.es" --metrics bleu,chrf
echo "== floor: copying the English source"
build/lleval --ref data/bible/raw/test.es --input data/bible/raw/test.en --metrics bleu,chrf
