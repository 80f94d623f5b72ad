#!/usr/bin/env bash
# data.dir's lock (src/data/prepare.c, ll_data_lock_take): while another process holds
# data.dir/.lldata.lock, llprep and lltrain wait and say for which PID, then go on; two llprep
# runs with different settings on one data.dir take turns and leave it consistent; the lock
# file goes when its holder lets go.  (Before the lock, a second llprep prepared beside the
# first: the later renames won, and a manifest could name the other run's token files.)
source "$(dirname "$0")/lib.sh"

cfg() { # cfg FILE VOCAB: the tiny corpus into $T/data
  {
    tiny_data "$T/data" 512 | sed "s/vocab_size: 80/vocab_size: $2/"
    echo "model: {d_model: 16, ffn_dim: 32, heads: 2, enc_layers: 1, dec_layers: 1, max_positions: 128}"
    echo "train: {max_updates: 1, valid_interval: 1, threads: 1}"
    echo "checkpoint: {save_dir: $T/run}"
  } > "$1"
}
cfg "$T/a.cfg" 80
cfg "$T/b.cfg" 72

# hold LOCKFILE: a process that creates and locks the file as ll does, prints its PID, and on a
# line from stdin removes the file and lets go (the holder's way out: waiters must start over)
hold() {
  coproc HOLDER {
    python3 -u -c '
import fcntl, os, sys
p = sys.argv[1]
os.makedirs(os.path.dirname(p), exist_ok=True)
fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX)
print(os.getpid())
sys.stdin.readline()
os.unlink(p)
os.close(fd)
' "$1"
  }
  holder=$HOLDER_PID # (bash unsets HOLDER_PID once it reaps the coprocess)
  read -r holder_pid <&"${HOLDER[0]}"
}
release() {
  echo go >&"${HOLDER[1]}"
  wait "$holder" 2> /dev/null || true
}
# waits_for LOG PID CHILD NAME: CHILD (still running) said it waits for PID, within 60 s (a CUDA
# build's start on a loaded machine)
waits_for() {
  for _ in $(seq 600); do
    grep -q "waiting for PID $2\b" "$1" && break
    sleep 0.1
  done
  grep -q "waiting for PID $2\b" "$1" || err "no 'waiting for PID $2' from $4: $(cat "$1")"
  kill -0 "$3" 2> /dev/null || err "$4 did not wait for the lock"
}

# 1. llprep waits for the holder, then prepares
hold "$T/data/.lldata.lock"
"$BIN/llprep" --config "$T/a.cfg" --quiet > /dev/null 2> "$T/prep.err" &
prep=$!
waits_for "$T/prep.err" "$holder_pid" $prep llprep
[ -e "$T/data/manifest.txt" ] && err "llprep prepared data.dir while another process held its lock"
release
wait $prep || err "llprep after the lock came free: $(tail -1 "$T/prep.err")"
[ -s "$T/data/manifest.txt" ] || err "llprep wrote no manifest"
[ -e "$T/data/.lldata.lock" ] && err "llprep left its lock file behind"
[ "$(wc -l < "$T/prep.err")" = 1 ] || err "llprep said more than its one waiting line: $(cat "$T/prep.err")"

# 2. lltrain waits too (it checks, prepares and opens the data under the lock)
hold "$T/data/.lldata.lock"
"$BIN/lltrain" --config "$T/b.cfg" > /dev/null 2> "$T/train.err" &
train=$!
waits_for "$T/train.err" "$holder_pid" $train lltrain
release
wait $train || err "lltrain after the lock came free: $(tail -1 "$T/train.err")"
grep -q "preparing data in" "$T/train.err" || err "lltrain did not prepare its own settings' data"
[ -e "$T/data/.lldata.lock" ] && err "lltrain left data.dir's lock file behind"

# 3. two llprep runs with other settings at once: both finish, one after the other, and the
# data.dir they leave is one of them, whole (byte for byte what that one leaves alone)
snap() { (cd "$T/data" && ls -A | sort | xargs md5sum); }
"$BIN/llprep" --config "$T/a.cfg" --quiet > /dev/null || err "llprep a alone failed"
ref_a=$(snap)
"$BIN/llprep" --config "$T/b.cfg" --quiet > /dev/null || err "llprep b alone failed"
ref_b=$(snap)
[ "$ref_a" != "$ref_b" ] || err "the two settings prepared the same files"
for round in 1 2 3 4; do
  "$BIN/llprep" --config "$T/a.cfg" --quiet > /dev/null 2> "$T/a.err" &
  pa=$!
  "$BIN/llprep" --config "$T/b.cfg" --quiet > /dev/null 2> "$T/b.err" &
  pb=$!
  wait $pa || err "round $round: llprep a: $(tail -1 "$T/a.err")"
  wait $pb || err "round $round: llprep b: $(tail -1 "$T/b.err")"
  now=$(snap)
  [ "$now" = "$ref_a" ] || [ "$now" = "$ref_b" ] ||
    err "round $round: data.dir is neither run's preparation: $(diff <(echo "$ref_a") <(echo "$now") | tr '\n' ' ')"
done
ls -A "$T/data" | grep -q '^\.' && err "hidden files left in data.dir: $(ls -A "$T/data")"

# 4. a prepared data.dir its reader may not write (another user's data set, a read-only mount):
# read without the lock, with a warning (as root: run as nobody, where nobody can read everything)
if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null; then
  "$BIN/llprep" --config "$T/b.cfg" --if-needed --quiet > /dev/null || err "llprep b --if-needed failed"
  chmod 755 "$T" && chmod -R a+rX "$T" && chmod a-w "$T/data"
  as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
  if as_nobody test -r "$SRC/tests/data/tiny/overfit32.en" -a -r "$BIN/llprep" 2> /dev/null; then
    as_nobody "$BIN/llprep" --config "$T/b.cfg" --if-needed > "$T/ro.out" 2> "$T/ro.err" ||
      err "llprep --if-needed on a data.dir it may not write: $(tail -1 "$T/ro.err")"
    grep -q "up to date" "$T/ro.out" || err "llprep --if-needed (not writable): $(cat "$T/ro.out")"
    grep -q "cannot create data.dir's lock (Permission denied): going on without it" "$T/ro.err" ||
      err "no warning about the lock: $(cat "$T/ro.err")"
  else
    echo "SKIP section 4: nobody cannot read the sources or the build"
  fi
  chmod u+w "$T/data"
else
  echo "SKIP section 4: not root (it runs llprep as another user)"
fi

# 5. (round 5) SIGTERM while llprep prepares: its staging directory and the lock go with it, as the
#    tools' temporaries do (they stayed until the next preparation of that data.dir)
python3 - "$T/big" <<'PY'
import random, sys
random.seed(1)
w = ["".join(random.choice("abcdefghijklmnop") for _ in range(random.randint(2, 9))) for _ in range(20000)]
for ext in ("en", "es"):
    with open(f"{sys.argv[1]}.{ext}", "w") as f:
        for _ in range(60000):
            f.write(" ".join(random.choice(w) for _ in range(12)) + "\n")
PY
printf 'data:\n  dir: %s\n  vocab_size: 2000\n  train:\n    - {src: %s.en, tgt: %s.es, src_lang: en, tgt_lang: es}\n' \
  "$T/sig" "$T/big" "$T/big" > "$T/sig.cfg"
"$BIN/llprep" --config "$T/sig.cfg" > /dev/null 2>&1 &
pid=$!
for _ in $(seq 200); do compgen -G "$T/sig/.llprep.*" > /dev/null && break; sleep 0.05; done
sleep 0.3 # (into the sentencepiece training: the staging directory holds its input by then)
compgen -G "$T/sig/.llprep.*" > /dev/null || err "SIGTERM: llprep never staged (too fast?)"
kill -TERM $pid
wait $pid
rc=$?
[ $rc -eq 143 ] || err "SIGTERM: llprep exit $rc (want 143: killed by it)"
left=$(cd "$T/sig" 2> /dev/null && ls -A)
[ -z "$(echo "$left" | grep -E '^\.llprep\.|^\.lldata\.lock$')" ] || err "SIGTERM left in data.dir: $left"

[ $fail -eq 0 ] && echo "test_data_lock: all checks passed"
exit $fail
