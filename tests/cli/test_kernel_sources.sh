#!/usr/bin/env bash
# Rules of kernels/ that no compiler checks, read off the sources (no GPU, no build needed):
#  - every kernel (__global__ function) begins with LL_PDL_ENTER(): LL_LAUNCH launches with
#    programmatic dependent launch on Hopper, and a kernel that read or wrote memory before that
#    wait could run ahead of the kernel before it (kernels/ll_cuda_common.cuh).  The emulation
#    stops a launched kernel whose threads never waited; this finds one no test launches.
source "$(dirname "$0")/lib.sh"
python3 - "$SRC"/kernels/*.cu "$SRC"/kernels/*.cuh <<'PY' || fail=1
import re, sys
bad, kernels = [], 0
for path in sys.argv[1:]:
    text = open(path).read()
    # comments out (same length, so offsets and line numbers hold)
    code = re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    for m in re.finditer(r"\b__global__\b", code):
        if code.startswith("#define", code.rfind("\n", 0, m.start()) + 1):
            continue
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration
        name = re.findall(r"(\w+)\s*\(", code[m.end():brace])
        name = [n for n in name if n != "__launch_bounds__"]
        kernels += 1
        first = code[brace + 1:].lstrip()
        if not first.startswith("LL_PDL_ENTER();"):
            line = code.count("\n", 0, m.start()) + 1
            bad.append(f"{path}:{line}: kernel {name[0] if name else '?'} does not begin with LL_PDL_ENTER();")
for b in bad:
    print(f"FAIL: {b}", file=sys.stderr)
print(f"kernel sources: {kernels} kernels, {len(bad)} without LL_PDL_ENTER() first")
sys.exit(1 if bad or kernels < 50 else 0)
PY
[ $fail -eq 0 ] && echo "test_kernel_sources: all checks passed"
exit $fail
