#!/usr/bin/env bash
# scripts/summarize_experiments.py on a synthetic runs directory: two seeds of
# a depth run and of a latent run (2 languages, 3 decoder layers).  Checks the
# mean-and-per-seed cells, the training time taken from metrics.jsonl, the
# per-language E[L] / kept / agreement table, the error on a missing
# results.tsv, and (with matplotlib) that the plots are written.
set -u
SRC="${LL_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
S="$SRC/scripts/summarize_experiments.py"
fail() { echo "FAIL: $*"; exit 1; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not found"; exit 77; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
R=$TMP/runs
mkdir -p "$R"
printf 'name\tseed\tupdates\tvalid_loss\tbleu\tchrf\tbleu_unk_src\tEL_dec\tkept_dec\tbleu_soft\tbleu_pruned\ttrain_s\tdecode_s\tdecode_pruned_s\n' > "$R/results.tsv"
printf 'post_d20\t1\t2000\t14.0\t0.00\t1.0\t0.00\t-\t-\t-\t-\t0\t10.0\t-\n' >> "$R/results.tsv"
printf 'post_d20\t2\t2000\t15.0\t0.50\t2.0\t0.10\t-\t-\t-\t-\t0\t12.0\t-\n' >> "$R/results.tsv"
printf 'o2m_beta1\t1\t2000\t5.0\t10.00\t30.0\t1.00\t2.5\t3/3\t9.00\t10.00\t0\t4.0\t3.0\n' >> "$R/results.tsv"
printf 'o2m_beta1\t2\t2000\t6.0\t12.00\t32.0\t1.00\t1.5\t2/3\t11.00\t12.00\t0\t4.0\t3.0\n' >> "$R/results.tsv"
for s in 1 2; do
  mkdir -p "$R/post_d20.s$s" "$R/o2m_beta1.s$s"
  printf '{"type":"valid","update":1000,"loss":9.0,"wall":50.0}\n{"type":"valid","update":2000,"loss":1%d.0,"wall":%d00.0}\n' \
    $((3 + s)) $s > "$R/post_d20.s$s/metrics.jsonl"
done
# seed 1: de uses layers 0 and 1, fr layers 1 and 2 (q >= 0.5); seed 2 agrees fully
cat > "$R/o2m_beta1.s1/metrics.jsonl" <<'EOF'
{"type":"train","update":1000,"loss":6.0,"latent":{"dec":{"q":{"de":[0.5,0.5,0.5],"fr":[0.5,0.5,0.5]},"u":[1,0,1],"expected_depth":1.5}}}
{"type":"train","update":2000,"loss":5.0,"latent":{"dec":{"q":{"de":[0.9,0.8,0.1],"fr":[0.1,0.8,0.9]},"u":[1,1,0],"expected_depth":1.8}}}
{"type":"valid","update":2000,"loss":5.0,"wall":300.0}
EOF
cat > "$R/o2m_beta1.s2/metrics.jsonl" <<'EOF'
{"type":"train","update":2000,"loss":6.0,"latent":{"dec":{"q":{"de":[0.9,0.2,0.6],"fr":[0.9,0.2,0.6]},"u":[1,0,1],"expected_depth":1.7}}}
{"type":"valid","update":2000,"loss":6.0,"wall":500.0}
EOF

# o2m_agg: seed 1's run directory is gone but its metrics are archived; seed 2's are lost
printf 'o2m_agg\t1\t2000\t5.5\t11.00\t31.0\t1.00\t2.0\t2/3\t10.00\t11.00\t77\t4.0\t3.0\n' >> "$R/results.tsv"
printf 'o2m_agg\t2\t2000\t5.7\t11.50\t31.5\t1.00\t2.0\t2/3\t10.00\t11.00\t88\t4.0\t3.0\n' >> "$R/results.tsv"
A=$TMP/archive
mkdir -p "$A"
cat > "$A/o2m_agg.s1.metrics.jsonl" <<'EOF'
{"type":"train","update":2000,"loss":6.0,"latent":{"dec":{"q":{"de":[0.9,0.9,0.1],"fr":[0.9,0.9,0.1]},"u":[1,1,0],"expected_depth":1.9}}}
{"type":"valid","update":2000,"loss":5.5,"wall":400.0}
EOF

out=$(python3 "$S" --runs "$R" --archive "$A" --no-plots 2>"$TMP/err") || fail "summarize exited $?"
echo "$out"
grep -qF '| post_d20 | 1,2 | 2000 | 14.500 (14.000 / 15.000) | 0.25 (0.00 / 0.50) |' <<<"$out" || fail "depth row: mean and seeds"
grep -qF '| 150 (100 / 200) |' <<<"$out" || fail "training seconds from metrics.jsonl wall"
grep -qF '| 3/3 / 2/3 |' <<<"$out" || fail "kept column joins the seeds' values"
grep -qF '| o2m_beta1 | 1 | de 1.80 / fr 1.80 | 2 / 2 | 0.2667 | 0.100–0.900 |' <<<"$out" || fail "latent seed 1: E[L], kept, spread, range"
grep -qF '| o2m_beta1 | 2 | de 1.70 / fr 1.70 | 2 / 2 | 0.0000 | 0.200–0.900 |' <<<"$out" || fail "latent seed 2: full agreement"
grep -q '^### depth' <<<"$out" && grep -q '^### latent' <<<"$out" || fail "group headings"
grep -qF '| o2m_agg | 1,2 | 2000 | 5.600 (5.500 / 5.700) |' <<<"$out" || fail "o2m_agg row from results.tsv"
grep -qF '| 244 (400 / 88) |' <<<"$out" || fail "train s: archived wall for seed 1, results.tsv for seed 2"
grep -qF '| o2m_agg | 1 | de 1.90 / fr 1.90 | 2 / 2 |' <<<"$out" || fail "latent table from the archived metrics"
grep -qF '| o2m_agg | 2 | (metrics not kept) |' <<<"$out" || fail "a run without metrics keeps a row"
grep -q 'no metrics.jsonl for o2m_agg seed 2' "$TMP/err" || fail "warning for the lost metrics: $(cat "$TMP/err")"

cp -r "$A" "$TMP/kept"
python3 "$S" --runs "$R" --archive "$TMP/kept" --no-plots --keep >/dev/null 2>&1 || fail "--keep exited $?"
cmp -s "$R/o2m_beta1.s2/metrics.jsonl" "$TMP/kept/o2m_beta1.s2.metrics.jsonl" || fail "--keep copies metrics.jsonl into the archive"
[ -s "$TMP/kept/o2m_agg.s1.metrics.jsonl" ] || fail "--keep keeps archived metrics of a gone run"
err=$(python3 "$S" --runs "$TMP/none" --no-plots 2>&1) && fail "a missing results.tsv must fail"
grep -q "results.tsv" <<<"$err" || fail "error names the file: $err"

if python3 -c 'import matplotlib' 2>/dev/null || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  python3 "$S" --runs "$R" --archive "$A" --out "$TMP/img" > /dev/null 2>&1 || fail "plots: exit $?"
  for f in depth_valid.png latent_valid.png latent_depth.png latent_prior_depth.png o2m_beta1/latent_final.png \
           o2m_agg/latent_final.png; do
    [ -s "$TMP/img/$f" ] || fail "plot $f not written"
  done
  # no run of a group has metrics: its plot is not rewritten (an earlier image stays)
  mkdir -p "$TMP/img2" && echo old > "$TMP/img2/depth_valid.png"
  mv "$R/post_d20.s1" "$R/post_d20.s2" "$TMP/"
  python3 "$S" --runs "$R" --archive "$A" --out "$TMP/img2" > /dev/null 2>&1 || fail "plots without depth metrics: exit $?"
  [ "$(cat "$TMP/img2/depth_valid.png")" = old ] || fail "depth_valid.png rewritten without any depth metrics"
  [ -s "$TMP/img2/latent_valid.png" ] || fail "latent plots still written"
fi
echo "OK"
