#!/usr/bin/env bash
# `cmake --install`: the tools land in PREFIX/bin and run from there (each --help), the configs and
# the Python helpers in PREFIX/share/ll; the installed model reader works beside its own modules.
source "$(dirname "$0")/lib.sh"
P=$T/prefix
cmake --install "$BIN" --prefix "$P" > "$T/install.log" 2>&1 || { err "cmake --install failed: $(tail -3 "$T/install.log")"; exit 1; }
for tool in lltrain lldecode llprep lleval llavg llprune llshortlist; do
  [ -x "$P/bin/$tool" ] || { err "$tool not installed in $P/bin"; continue; }
  "$P/bin/$tool" --help > "$T/$tool.help" 2>&1 || err "installed $tool --help failed: $(tail -1 "$T/$tool.help")"
  grep -qi "usage" "$T/$tool.help" || err "installed $tool --help printed no usage"
done
for f in configs/wmt16_ende_ll64.cfg configs/bible_quick.cfg scripts/llmodel.py scripts/corpusio.py \
  scripts/export_ctranslate2.py scripts/plot; do
  [ -s "$P/share/ll/$f" ] || err "share/ll/$f not installed"
done
[ -x "$P/share/ll/scripts/export_ctranslate2.py" ] || err "export_ctranslate2.py not executable"
[ -s "$P/share/doc/ll/README.md" ] || err "README.md not installed"
# nothing of the build or source tree is needed: the installed lleval scores from its own folder
printf 'the cat sat on the mat\n' > "$T/ref"
(cd / && "$P/bin/lleval" -r "$T/ref" -i "$T/ref" -b) > "$T/score" 2>&1 || err "installed lleval failed: $(cat "$T/score")"
[ "$(cat "$T/score")" = "100.00" ] || err "installed lleval: $(cat "$T/score")"
python3 -c "import sys; sys.path.insert(0, '$P/share/ll/scripts'); import llmodel" 2> "$T/py.err" ||
  err "the installed llmodel.py does not import: $(tail -1 "$T/py.err")"
exit $fail
