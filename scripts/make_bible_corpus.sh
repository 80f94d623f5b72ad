#!/usr/bin/env bash
# Thin wrapper: build the bundled WEB/RV1909 English->Spanish corpus into
# data/bible/raw (relative to the repository root) unless --out is given.
# Extra arguments (--force, --books, --jobs, --verbose) are passed through.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
case " $* " in
    *" --out "*|*" --out="*) exec python3 "$here/make_bible_corpus.py" "$@" ;;
    *) exec python3 "$here/make_bible_corpus.py" --out "$root/data/bible/raw" "$@" ;;
esac
