#!/usr/bin/env bash
# (Emulated builds only, not a test_*.sh: on a GPU nothing refuses.)  A kept CUDA graph whose
# update in place the runtime refuses is built anew, and training goes on
# with the same numbers.  compute-sanitizer's memcheck refused ll's graph updates on an H100
# (error 910, 2026-11-28), after which lltrain crashed on the host; the emulation refuses every
# update with LL_CUDA_EMU_GRAPH_UPDATE=refuse (emulated builds only: cmake/cuda_emu_tests.cmake).
# Two bf16 runs of the small Bible model from one seed with 2 graphs kept (so new batch shapes
# update them): updates allowed, then refused.  Passes when the first updated graphs in place,
# the second updated none and counted its refusals, and both logged the same losses, bit for bit.
source "$(dirname "$0")/lib.sh"
gpu_or_skip
bible_or_fail
N=${LL_GRAPH_REFUSED_UPDATES:-30}
export LL_CUDA_GRAPHS_KEPT=2
# shellcheck disable=SC2086 # LL_BIBLE_EXTRA: a smaller model under the emulation
bible_train allowed "$GPUDEV" bf16 "$N" --set train.log_interval=5 --set data.max_tokens=256 ${LL_BIBLE_EXTRA:-} ||
  err "the run with updates failed: $(tail -1 "$T/allowed.log")"
# shellcheck disable=SC2086
LL_CUDA_EMU_GRAPH_UPDATE=refuse bible_train refused "$GPUDEV" bf16 "$N" --set train.log_interval=5 \
  --set data.max_tokens=256 ${LL_BIBLE_EXTRA:-} || err "the run with updates refused failed: $(tail -1 "$T/refused.log")"
counts() { sed -n 's/.*CUDA graphs: [0-9]* steps.* \([0-9]*\) updated in place, \([0-9]*\) updates refused.*/\1 \2/p' "$T/$1.log"; }
read -r au ar <<< "$(counts allowed)"
read -r ru rr <<< "$(counts refused)"
echo "graph-refused: updates allowed: ${au:-?} in place, ${ar:-?} refused; refused: ${ru:-?} in place, ${rr:-?} refused"
[ "${au:-0}" -gt 0 ] && [ "${ar:-1}" = 0 ] || err "the run with updates did not update a graph in place"
[ "${ru:-1}" = 0 ] && [ "${rr:-0}" -gt 0 ] || err "the run with updates refused did not count refusals (or updated)"
# the trainer counts the epoch's batch shapes against the 2 graphs kept, and warns
grep -qE "^training batches: [0-9]+ shapes .* 2 graphs kept" "$T/allowed.log" &&
  grep -q "warning: the training batches have [0-9]* shapes, more than the 2 CUDA graphs kept" "$T/allowed.log" ||
  err "no count of the batch shapes against the 2 graphs kept, or no warning"
# each record's type, update, loss, nll and gradient norm (not its timings)
losses() {
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r.get("type"), r.get("update"), r.get("loss"), r.get("nll"), r.get("gnorm"))' "$T/$1/metrics.jsonl"
}
if [ -s "$T/allowed/metrics.jsonl" ] && cmp -s <(losses allowed) <(losses refused); then
  echo "graph-refused: the same $(losses allowed | wc -l) losses with and without updates in place"
else
  err "the losses differ with updates refused (or were not logged)"
fi
keep_logs graph_refused "$T"/*.log
exit $fail
