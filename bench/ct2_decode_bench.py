#!/usr/bin/env python3
"""lldecode against CTranslate2 on the same model and input (CPU).

    python3 bench/ct2_decode_bench.py MODEL.llm SRC REF [--beams 1,5] [--repeats 3]
        [--threads 2] [--precisions fp32,int8] [--lldecode build/lldecode]

The model is exported with scripts/export_ctranslate2.py (float32, and int8
for --precisions int8: CTranslate2's int8 against lldecode --precision int8,
the same scheme).  SRC is tokenised once with the model's sentencepiece model
(spm_encode) for CTranslate2; lldecode reads the text.  Each setting runs
lldecode and CTranslate2 alternately, --repeats times, and reports the median
of each: the translation time only (lldecode's own summary, without loading
the model; CTranslate2's translate_batch call), sentences/s, and the BLEU of
the translations (lleval).  Both sort by length and batch 4096 source tokens;
lldecode with --threads N (N batches at once, one thread each: its default),
CTranslate2 both ways (intra_threads N x inter_threads 1, and 1 x N), the
faster reported.  Search settings are lldecode's defaults: length penalty 1,
at most 200 tokens (or model.max_positions - 1), at least 1.

One line per setting:
  RESULT decode prec=fp32 beam=5 ll_sent_per_s=... ct2_sent_per_s=... ratio=... ll_bleu=... ct2_bleu=...
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))

import llmodel  # noqa: E402


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, **kw)


def bleu(lleval, ref, hyp):
    r = run([lleval, "--ref", ref, "--input", hyp, "-m", "bleu"])
    out = r.stdout.decode() + r.stderr.decode()
    m = re.search(r"= ([0-9.]+) ", out)
    return float(m.group(1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("src")
    ap.add_argument("ref")
    ap.add_argument("--beams", default="1,5")
    ap.add_argument("--precisions", default="fp32,int8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lldecode", default=os.path.join(HERE, "..", "build", "lldecode"))
    a = ap.parse_args()
    import ctranslate2
    import yaml

    bindir = os.path.dirname(os.path.abspath(a.lldecode))
    lleval = os.path.join(bindir, "lleval")
    m = llmodel.read(a.model)
    max_len = min(200, int(yaml.safe_load(m.config)["model"]["max_positions"]) - 1)
    tmp = tempfile.mkdtemp(prefix="ct2bench.")
    spm = os.path.join(tmp, "spm.model")
    open(spm, "wb").write(m.vocab)
    pieces = run(["spm_encode", "--model", spm, "--output_format=piece"],
                 stdin=open(a.src, "rb")).stdout.decode("utf-8").splitlines()
    src = [p.split() for p in pieces]
    export = [sys.executable, os.path.join(HERE, "..", "scripts", "export_ctranslate2.py")]
    dirs = {}
    for prec in a.precisions.split(","):
        d = os.path.join(tmp, prec)
        run(export + [a.model, d] + (["--quantization", "int8"] if prec == "int8" else []))
        dirs[prec] = d
    print(f"ctranslate2 {ctranslate2.__version__}; {len(src)} sentences; {a.threads} threads; "
          f"max length {max_len}", flush=True)
    for prec in a.precisions.split(","):
        tr = {(i, e): ctranslate2.Translator(dirs[prec], device="cpu", intra_threads=i, inter_threads=e)
              for i, e in ((a.threads, 1), (1, a.threads))}
        for beam in [int(b) for b in a.beams.split(",")]:
            ll_t, ct_t = [], {k: [] for k in tr}
            ll_out, ct_out = os.path.join(tmp, "ll.txt"), os.path.join(tmp, "ct2.txt")
            for _ in range(a.repeats):
                r = run([a.lldecode, "--model", a.model, "--input", a.src, "--output", ll_out, "--beam", str(beam),
                         "--threads", str(a.threads), "--precision", prec, "--max-len-b", str(max_len)])
                s = re.search(r"beam \d+[^:]*: ([0-9.]+) s,", r.stderr.decode())
                ll_t.append(float(s.group(1)))
                for k, t in tr.items():
                    t0 = time.perf_counter()
                    res = t.translate_batch(src, beam_size=beam, max_decoding_length=max_len, min_decoding_length=1,
                                            length_penalty=1.0, max_batch_size=4096, batch_type="tokens")
                    ct_t[k].append(time.perf_counter() - t0)
            best = min(ct_t, key=lambda k: statistics.median(ct_t[k]))
            dec = run(["spm_decode", "--model", spm, "--input_format=piece"],
                      input="".join(" ".join(x.hypotheses[0]) + "\n" for x in res).encode("utf-8")).stdout
            open(ct_out, "wb").write(dec)
            lls, cts = len(src) / statistics.median(ll_t), len(src) / statistics.median(ct_t[best])
            print(f"RESULT decode prec={prec} beam={beam} ll_sent_per_s={lls:.1f} ct2_sent_per_s={cts:.1f} "
                  f"ratio={lls / cts:.2f} ll_bleu={bleu(lleval, a.ref, ll_out):.2f} "
                  f"ct2_bleu={bleu(lleval, a.ref, ct_out):.2f} ct2_threads=intra{best[0]}xinter{best[1]} "
                  f"ll_s={','.join('%.2f' % x for x in ll_t)} "
                  f"ct2_s={';'.join('%dx%d:' % k + ','.join('%.2f' % x for x in v) for k, v in ct_t.items())}",
                  flush=True)


if __name__ == "__main__":
    main()
