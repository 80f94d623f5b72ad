#!/usr/bin/env bash
# scripts/plot and scripts/llmodel.py on synthetic inputs: a metrics.jsonl
# with train/valid/latent records (2 languages, 4 decoder layers, 6 encoder
# layers) and a model file with DLCL weights written by llmodel.write.
# Skips (exit 77) when matplotlib is missing.
set -u

SRC="${LL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
PLOT="$SRC/scripts/plot"

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

command -v python3 >/dev/null 2>&1 || skip "python3 not found"
# scripts/plot falls back to /usr/bin/python3 (where apt puts matplotlib)
# when the python3 on PATH has no matplotlib.
python3 -c 'import matplotlib' 2>/dev/null \
    || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null \
    || skip "matplotlib missing (apt-get install python3-matplotlib)"
[ -x "$PLOT" ] || fail "scripts/plot is not executable"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# ---- llmodel.py: writer/reader round trip, checksum, damage -------------
python3 - "$SRC/scripts" "$TMP" <<'EOF' || fail "llmodel checks"
import os, struct, sys
sys.path.insert(0, sys.argv[1])
import llmodel as L
tmp = sys.argv[2]

# ll_fnv1a64 is word-wise: 8-byte little-endian words, then the tail bytes.
# The value was computed with the C implementation (src/core/errors.c).
assert L.fnv1a64(b"") == 0xcbf29ce484222325
assert L.fnv1a64(b"LLMODEL\0abc") == 0x95e8aa3e89aa6a35, hex(L.fnv1a64(b"LLMODEL\0abc"))

def dlcl(n, seed):
    """Lower-triangular [n, n] weights, rows summing to ~1, some negative."""
    w = [[0.0] * n for _ in range(n)]
    for r in range(n):
        for k in range(r + 1):
            w[r][k] = (1.0 / (r + 1)) + 0.05 * (((r * 7 + k * 3 + seed) % 5) - 2)
    return [x for row in w for x in row]

tensors = [("enc.embed", "f32", [10, 4], [i / 10 for i in range(40)]),
           ("enc.dlcl_weights", "f32", [7, 7], dlcl(7, 1)),
           ("dec.dlcl_weights", "f32", [5, 5], dlcl(5, 2)),
           ("dec.latent_logits", "f32", [2, 4], [0.5, -1, 2, 0, 1, 1, -2, 3]),
           ("state.update", "i64", [], [1234]),
           ("half", "bf16", [3], [1.0, -2.5, 0.15625]),
           ("empty", "f32", [0, 4], [])]
cfg = "model:\n  d_model: 4\n"
path = os.path.join(tmp, "dlcl.llm")
L.write(path, cfg, b"\x0a\x03abc", tensors)
m = L.read(path)
assert m.config == cfg and m.vocab == b"\x0a\x03abc"
assert list(m.tensors) == [t[0] for t in tensors]
for t in m.tensors.values():
    assert t.offset % 64 == 0, t
assert m.tensors["enc.dlcl_weights"].shape == (7, 7)
got = m.values("enc.dlcl_weights")
assert all(abs(a - b) < 1e-6 for a, b in zip(got, dlcl(7, 1)))
assert m.values("state.update") == [1234]
assert m.values("half") == [1.0, -2.5, 0.15625]
assert m.values("empty") == []
data = open(path, "rb").read()
assert struct.unpack_from("<Q", data, 16)[0] == len(data)
assert data[-8:] == b"LLMEND\0\0"
# No tensors at all is a valid file too.
L.write(os.path.join(tmp, "none.llm"), "", b"", [])
assert L.read(os.path.join(tmp, "none.llm")).tensors == {}

def expect_error(blob, text):
    p = os.path.join(tmp, "bad.llm")
    with open(p, "wb") as f:
        f.write(blob)
    try:
        L.read(p)
    except L.LLModelError as e:
        msg = str(e)
        assert msg.startswith(p + ": ") and text in msg and "\n" not in msg, msg
        return
    raise AssertionError("accepted: " + text)

flip = bytearray(data); flip[200] ^= 1
expect_error(bytes(flip), "checksum mismatch")
expect_error(data[:-1], "truncated")
expect_error(data + b"\0", "unexpected bytes after the end")
expect_error(b"NOTMODEL" + data[8:], "bad magic")
newer = bytearray(data); struct.pack_into("<I", newer, 8, 2)
expect_error(bytes(newer), "version 2 is newer")
expect_error(b"", "empty")
try:
    L.write(os.path.join(tmp, "dup.llm"), "", b"", [("a", "f32", [1], [1]), ("a", "f32", [1], [2])])
    raise AssertionError("duplicate names accepted")
except ValueError:
    pass
assert not [f for f in os.listdir(tmp) if ".tmp." in f], os.listdir(tmp)

# A model without DLCL weights.
L.write(os.path.join(tmp, "plain.llm"), cfg, b"", tensors[:1])
print("llmodel: ok")
EOF

# A file written by the C code, when one is at hand (LL_TEST_LLM=path).
if [ -n "${LL_TEST_LLM:-}" ] && [ -f "$LL_TEST_LLM" ]; then
    python3 "$SRC/scripts/llmodel.py" "$LL_TEST_LLM" >/dev/null \
        || fail "llmodel.py cannot read $LL_TEST_LLM"
fi

# ---- synthetic metrics ----------------------------------------------------
python3 - "$TMP/metrics.jsonl" <<'EOF' || fail "could not write metrics"
import json, math, sys
with open(sys.argv[1], "w") as f:
    for u in range(20, 1001, 20):
        q = {"es": [1 / (1 + math.exp(-(3 - l) * u / 400)) for l in range(4)],
             "xx": [1 / (1 + math.exp(-(l - 1.5) * u / 300)) for l in range(4)]}
        qe = {"shared": [min(1, 0.5 + 0.0004 * u * (l % 2)) for l in range(6)]}
        rec = {"type": "train", "update": u, "epoch": 1 + u // 500,
               "epoch_pct": (u % 500) / 5, "loss": 8 * math.exp(-u / 300) + 2,
               "nll": 8 * math.exp(-u / 300) + 1.7, "ppl": 2 ** 3,
               "lr": 1e-3, "gnorm": 0.5, "tokens_per_s": 1000.0, "wall": u / 10,
               "kl": 0.1 * math.exp(-u / 500), "lk": 0.0,
               "latent": {
                   "enc": {"q": qe, "u": [round(x) for x in qe["shared"]],
                           "expected_depth": sum(qe["shared"])},
                   "dec": {"q": q, "u": [(a + b) / 2 for a, b in zip(q["es"], q["xx"])],
                           "expected_depth": (sum(q["es"]) + sum(q["xx"])) / 2}}}
        f.write(json.dumps(rec) + "\n")
        if u % 200 == 0:
            f.write(json.dumps({"type": "valid", "update": u,
                                "loss": 8 * math.exp(-u / 300) + 2.3,
                                "nll": 8 * math.exp(-u / 300) + 2.0, "ppl": 9.0,
                                "bleu": 30 * (1 - math.exp(-u / 400)),
                                "chrf": 50 * (1 - math.exp(-u / 400)),
                                "best": 2.3, "wall": u / 10}) + "\n")
    # a resumed run re-logs update 1000; then a line cut off mid-write
    f.write(json.dumps({"type": "train", "update": 1000, "loss": 2.1, "nll": 1.8}) + "\n")
    f.write('{"type":"train","update":1020,"lo')
EOF

OUT="$TMP/plots"
"$PLOT" "$TMP/metrics.jsonl" --out "$OUT" >"$TMP/log1" 2>&1 \
    || { cat "$TMP/log1"; fail "plot failed"; }
cat "$TMP/log1"
for f in curves.png latent_final.png latent_time_dec.png latent_time_enc.png; do
    [ -s "$OUT/$f" ] || fail "$f missing or empty"
    head -c 8 "$OUT/$f" | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a' \
        || fail "$f is not a PNG"
done
grep -q 'incomplete last line' "$TMP/log1" || fail "cut-off last line not reported"

# DLCL heatmaps from the model file.
"$PLOT" --what dlcl --model "$TMP/dlcl.llm" --out "$OUT" >"$TMP/log2" 2>&1 \
    || { cat "$TMP/log2"; fail "plot --what dlcl failed"; }
[ -s "$OUT/dlcl.png" ] || fail "dlcl.png missing or empty"
"$PLOT" --what dlcl --model "$TMP/plain.llm" --out "$TMP/p2" >"$TMP/log3" 2>&1 \
    || fail "plot --what dlcl on a model without DLCL failed"
grep -q 'no DLCL weights in this model' "$TMP/log3" || fail "no 'no DLCL weights' note"
[ ! -e "$TMP/p2/dlcl.png" ] || fail "dlcl.png written without DLCL weights"

# A run without latent records: curves only, and a note.
grep -v latent "$TMP/metrics.jsonl" | head -20 >"$TMP/plain.jsonl"
"$PLOT" "$TMP/plain.jsonl" --out "$TMP/p3" >"$TMP/log4" 2>&1 || fail "plain run failed"
[ -s "$TMP/p3/curves.png" ] || fail "curves.png missing for a plain run"
grep -q 'no latent-depth records' "$TMP/log4" || fail "no note for a run without latent records"

# Errors: one line, non-zero exit.
for args in "--out $TMP/e --what nope $TMP/metrics.jsonl" \
            "--out $TMP/e --what dlcl" \
            "--out $TMP/e $TMP/missing.jsonl" \
            "--out $TMP/e --what dlcl --model $TMP/metrics.jsonl"; do
    # shellcheck disable=SC2086
    if "$PLOT" $args >"$TMP/elog" 2>&1; then fail "no error for: $args"; fi
    [ "$(wc -l <"$TMP/elog")" = 1 ] || { cat "$TMP/elog"; fail "error is not one line: $args"; }
    grep -q '^plot: error: ' "$TMP/elog" || { cat "$TMP/elog"; fail "unexpected error text: $args"; }
done
printf '{"type":"train","update":1}\nnot json\n{"type":"train","update":2}\n' >"$TMP/bad.jsonl"
if "$PLOT" "$TMP/bad.jsonl" --out "$TMP/e" >"$TMP/elog" 2>&1; then fail "bad JSON accepted"; fi
grep -q 'bad.jsonl:2: not a JSON record' "$TMP/elog" || { cat "$TMP/elog"; fail "bad JSON error does not name the line"; }
[ -z "$(find "$OUT" -name '*.tmp.*')" ] || fail "temporary files left behind"

# A lost write (file size limit 1 KiB: EFBIG, which Python does not die of):
# one line naming the file, non-zero exit, no PNG or temporary left.
if (ulimit -f 1 && "$PLOT" "$TMP/plain.jsonl" --out "$TMP/p4" >"$TMP/elog" 2>&1); then fail "a lost write exited 0"; fi
grep -q "p4/curves.png: cannot write: File too large" "$TMP/elog" || { cat "$TMP/elog"; fail "lost write not reported"; }
[ "$(grep -c "error" "$TMP/elog")" = 1 ] || { cat "$TMP/elog"; fail "lost-write error is not one line"; }
[ -z "$(find "$TMP/p4" -name 'curves.png*')" ] || fail "a lost write left a file"

echo "PASS"
