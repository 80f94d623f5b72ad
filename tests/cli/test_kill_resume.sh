#!/usr/bin/env bash
# SIGKILL lltrain at ~20 random moments (half during checkpoint writes) and
# resume each time; graceful SIGINT/SIGTERM/SIGHUP stops; disk full during a
# checkpoint.  The end state must equal an uninterrupted run byte for byte
# (tests/cli/kill_harness.py; docs/reliability.md, "Kills survived").
set -u
SRC=${LL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${LL_BINARY_DIR:-$SRC/build}
exec python3 "$SRC/tests/cli/kill_harness.py" "$BIN" "$SRC" --kills "${LL_KILLS:-20}" ${LL_KILL_SEED:+--seed "$LL_KILL_SEED"}
