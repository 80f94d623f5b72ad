#!/usr/bin/env python3
"""The commands of a build's tests, as ctest would run them, one line each.

    scripts/ctest_commands.py BUILD [-L LABEL] [-R REGEX] [-E REGEX] [--first NAME,...] [--programs-only]

prints, for each test of BUILD (ctest's own list, `ctest --show-only=json-v1`), three
tab-separated fields: the test's name, a shell-quoted `env -C DIR K=V ...` prefix (its working
folder and ENVIRONMENT property) and its shell-quoted command.  scripts/gpu_check.sh runs each
quick GPU test under compute-sanitizer this way:

    "${prefix[@]}" compute-sanitizer --tool memcheck "${command[@]}"

so a new test, or a test's new environment (the bf16 variants: LL_PARITY_PRECISION=bf16), is
checked without a list to keep in step.  --first puts the named tests first (in that order);
--programs-only leaves out tests whose command is a shell or mpirun (a sanitizer would follow
every process they start)."""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("-L", dest="label", default=None, help="only tests with this label")
    ap.add_argument("-R", dest="include", default=None, help="only tests whose name matches")
    ap.add_argument("-E", dest="exclude", default=None, help="leave out tests whose name matches")
    ap.add_argument("--first", default="", help="comma list of test names to put first")
    ap.add_argument("--programs-only", action="store_true", help="leave out shell and mpirun tests")
    a = ap.parse_args()
    cmd = ["ctest", "--test-dir", a.build, "--show-only=json-v1"]
    if a.label:
        cmd += ["-L", a.label]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        tests = json.loads(out)["tests"]
    except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as e:
        sys.exit(f"ctest_commands.py: {a.build}: cannot list its tests ({e})")
    rows = []
    for t in tests:
        name, command = t["name"], t.get("command") or []
        if not command or (a.include and not re.search(a.include, name)) or (a.exclude and re.search(a.exclude, name)):
            continue
        if a.programs_only and os.path.basename(command[0]) in ("bash", "sh", "mpirun", "mpiexec"):
            continue
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        if props.get("DISABLED"):
            continue
        prefix = ["env"]
        if props.get("WORKING_DIRECTORY"):
            prefix += ["-C", props["WORKING_DIRECTORY"]]
        prefix += list(props.get("ENVIRONMENT", []))
        rows.append((name, prefix, command))
    first = [n for n in a.first.split(",") if n]
    rank = {n: i for i, n in enumerate(first)}
    rows.sort(key=lambda r: rank.get(r[0], len(first)))  # stable: ctest's order after the named ones
    for name, prefix, command in rows:
        print(f"{name}\t{shlex.join(prefix)}\t{shlex.join(command)}")


if __name__ == "__main__":
    main()
