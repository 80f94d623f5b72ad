#!/usr/bin/env bash
# What nvcc made of kernels/, read off the build's own objects (cuobjdump -sass; no GPU needed):
#  - no kernel has a generic load or store (LD/ST: a pointer whose state space the compiler lost,
#    served through the generic-to-shared or -global path; nvcc 13.0 gave every bf16 WMMA fragment
#    load of the attention kernels four of them until kernels/wmma_tile.cuh's ll_wmma_load_shared
#    named .shared).  kernels/wmma_probe.cu loads from global memory through WMMA on purpose;
#  - every tensor-core attention kernel loads its fragments with ldmatrix (LDSM), on every
#    architecture the build compiles for.
# A CUDA build only (it skips elsewhere: the CPU builds have no device code, the emulation's
# kernels are host code).  cuobjdump comes from the CUDA toolkit when it has one, else from PyPI
# (nvidia-cuda-cuobjdump and -nvdisasm, into a venv in the build folder; skips without a network).
source "$(dirname "$0")/lib.sh"
skip() {
  echo "SKIP: $*"
  exit 77
}
OBJ=$BIN/CMakeFiles/ll_cuda.dir/kernels
[ -f "$OBJ/attention_tc.cu.o" ] || skip "not a CUDA build ($OBJ/attention_tc.cu.o missing)"
grep -q '^LL_CUDA_EMU:BOOL=ON' "$BIN/CMakeCache.txt" 2> /dev/null && skip "the CUDA emulation's kernels are host code"
CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2> /dev/null || true)
if [ -z "$CUOBJDUMP" ]; then
  VENV=$BIN/cuobjdump-venv
  CUOBJDUMP=$(ls "$VENV"/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump 2> /dev/null | head -1)
  if [ -z "$CUOBJDUMP" ]; then
    echo "cuobjdump missing: pip install nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm into $VENV"
    { python3 -m venv "$VENV" && "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --retries 0 \
      --timeout 15 "nvidia-cuda-cuobjdump==13.5.37" "nvidia-cuda-nvdisasm==13.5.37"; } > "$T/pip.log" 2>&1 ||
      { tail -3 "$T/pip.log"; skip "no cuobjdump, and pip could not install it (no network?)"; }
    CUOBJDUMP=$(ls "$VENV"/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump 2> /dev/null | head -1)
    [ -n "$CUOBJDUMP" ] || skip "nvidia-cuda-cuobjdump installed no cuobjdump"
  fi
fi
export PATH=$(dirname "$CUOBJDUMP"):$PATH # (cuobjdump -sass runs nvdisasm)
command -v nvdisasm > /dev/null || skip "cuobjdump without nvdisasm ($CUOBJDUMP)"
echo "cuobjdump: $CUOBJDUMP"
for o in "$OBJ"/*.cu.o; do
  "$CUOBJDUMP" -sass "$o" > "$T/$(basename "$o").sass" 2> "$T/err.log" || err "cuobjdump -sass $o: $(tail -1 "$T/err.log")"
done
python3 - "$T"/*.sass <<'PY' || fail=1
import os, re, sys
ins = re.compile(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z0-9_]+)(\.[A-Z0-9_.]+)?")
bad, funcs, tc = [], 0, {}
for path in sys.argv[1:]:
    name = os.path.basename(path)[: -len(".cu.o.sass")]
    arch, fn = "?", None
    for line in open(path):
        m = re.search(r"arch = (sm_\d+)", line)
        if m:
            arch = m.group(1)
        m = re.search(r"Function : (\S+)", line)
        if m:
            fn, funcs = m.group(1), funcs + 1
            if re.search(r"attention_\w+_tc_kernel", fn):
                tc.setdefault((arch, fn), 0)
            continue
        m = ins.match(line)
        if not m or fn is None:
            continue
        op = m.group(1)
        if op in ("LD", "ST") and name != "wmma_probe":
            bad.append(f"{name}.cu ({arch}) {fn}: generic {op}{m.group(2) or ''}")
        if op == "LDSM" and (arch, fn) in tc:
            tc[(arch, fn)] += 1
no_ldsm = [f"{a} {f}" for (a, f), n in sorted(tc.items()) if n == 0]
for b in sorted(set(bad))[:20]:
    print(f"FAIL: {b}", file=sys.stderr)
for f in no_ldsm[:20]:
    print(f"FAIL: {f}: a tensor-core attention kernel without ldmatrix (LDSM)", file=sys.stderr)
archs = sorted({a for a, _ in tc})
print(f"kernel SASS: {funcs} kernel functions, {len(tc)} tensor-core attention kernels on {', '.join(archs)}; "
      f"{len(bad)} generic loads or stores outside the WMMA probe, {len(no_ldsm)} attention kernels without LDSM")
sys.exit(1 if bad or no_ldsm or funcs < 100 or len(tc) < 40 else 0)
PY
[ $fail -eq 0 ] && echo "test_kernel_sass: all checks passed"
exit $fail
