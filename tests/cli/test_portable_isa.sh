#!/usr/bin/env bash
# A portable build (LL_NATIVE=OFF: -march=x86-64-v2) holds no instruction a CPU without AVX
# could not run, outside the AVX-512 kernels chosen at run time (docs/architecture.md, "CPU
# kernels and run-time dispatch").  Read off the machine code of every library and program of
# the build (objdump): an instruction with a VEX or EVEX prefix (AVX, AVX2, FMA, AVX-512) is
# allowed only in a function whose name says avx512 or avx2 (ll's target("avx512f") kernels
# follow that rule, and their OpenMP bodies inherit the name).  This covers all the code, where the
# emulated-Haswell run of scripts/test.sh sees only the paths its tests execute.
# First the checker itself, on a compiled object with one stray AVX2 loop: it must be caught.
source "$(dirname "$0")/lib.sh"
skip() {
  echo "SKIP: $*"
  exit 77
}
grep -q '^LL_NATIVE:BOOL=OFF' "$BIN/CMakeCache.txt" 2> /dev/null || skip "not a portable build (LL_NATIVE=ON)"
command -v objdump > /dev/null || skip "no objdump"
objdump -f "$BIN/lltrain" 2> /dev/null | grep -q 'file format elf64-x86-64' || skip "not an x86-64 build"
CC=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$BIN/CMakeCache.txt")

# check FILE...: "FILE: FUNCTION: N instruction(s) beyond x86-64-v2, the first: INSN" per stray function
check() {
  python3 - "$@" <<'PY'
import re, subprocess, sys
LEGACY = {0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x67}  # the prefixes that may precede VEX/EVEX
for path in sys.argv[1:]:
    r = subprocess.run(["objdump", "-d", "-w", "--insn-width=15", path], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"objdump {path}: {r.stderr.strip()}")
    fn, member, stray = None, path, {}
    for line in r.stdout.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if m:
            fn = m.group(1)
            continue
        m = re.match(r"^(\S+):\s+file format", line)
        if m:
            member = m.group(1)
            continue
        p = line.split("\t")
        if len(p) < 3 or not p[0].strip().endswith(":"):
            continue
        b = [int(x, 16) for x in p[1].split()]
        i = 0
        while i < len(b) and b[i] in LEGACY:
            i += 1
        # c4/c5: VEX, 62: EVEX (in 64-bit mode never LES/LDS/BOUND)
        if i < len(b) and b[i] in (0x62, 0xC4, 0xC5) and "avx512" not in (fn or "") and "avx2" not in (fn or ""):
            stray.setdefault((member, fn), []).append(p[2].strip())
    for (mem, f), ins in stray.items():
        print(f"{mem}: {f}: {len(ins)} instruction(s) beyond x86-64-v2, the first: {ins[0]}")
PY
}

cat > "$T/probe.c" << 'C'
__attribute__((target("avx2"))) void stray_loop(float *a, int n) {
    for (int i = 0; i < n; i++) a[i] = a[i] * 2.0f + 1.0f;
}
__attribute__((target("avx512f"))) void scale_avx512(float *a, int n) {
    for (int i = 0; i < n; i++) a[i] = a[i] * 3.0f;
}
void plain(float *a, int n) {
    for (int i = 0; i < n; i++) a[i] += 1.0f;
}
C
"$CC" -O2 -march=x86-64-v2 -c "$T/probe.c" -o "$T/probe.o" || err "cannot compile the probe with $CC"
probe=$(check "$T/probe.o") || err "the checker failed on the probe"
echo "$probe" | grep -q ": stray_loop: " || err "the checker missed the probe's stray AVX2 loop: '$probe'"
[ "$(echo "$probe" | grep -c .)" = 1 ] || err "the checker flags more than the probe's stray loop: '$probe'"

files=()
for f in "$BIN"/*.a "$BIN"/*.so "$BIN"/ll*; do
  [ -f "$f" ] && { [[ $f == *.a || $f == *.so ]] || [ -x "$f" ]; } && files+=("$f")
done
[ ${#files[@]} -ge 8 ] || err "only ${#files[@]} libraries and programs in $BIN: ${files[*]}"
out=$(check "${files[@]}") || err "the checker failed on the build"
[ -z "$out" ] || err "code beyond x86-64-v2 outside the avx512 kernels:
$out"
[ $fail = 0 ] && echo "no VEX/EVEX instruction outside the avx512 kernels in ${#files[@]} files: ${files[*]##*/}"
exit $fail
