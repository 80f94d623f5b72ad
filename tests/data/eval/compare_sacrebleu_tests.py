#!/usr/bin/env python3
"""Compare lleval's statistical tests and multi-system tables with sacreBLEU's.

usage: compare_sacrebleu_tests.py LLEVAL [--cases N] [--seed S] [--cli N] [--lleval-version V]

Each case writes 1-4 systems and 1-3 references (the generators of
compare_sacrebleu.py: Unicode, numbers, entities, empty lines, ...) and picks a
mode (--confidence, --paired-bs, --paired-ar, a plain table of systems), metric
options, resample counts and SACREBLEU_SEED.  The expected text is what
sacreBLEU's CLI prints (-f text), computed in this process the way sacrebleu.py
does it (corpus_score(n_bootstrap=...), PairedTest, print_results_table); the
first --cli cases also run the real sacrebleu command to check that emulation.
lleval runs with -w 17, so equal text means equal doubles: score, bootstrap mean
and CI, and the p-value (4 decimals, one count apart at these trial numbers).
Exit 1 on any difference.
"""
import argparse
import contextlib
import difflib
import io
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_sacrebleu as cs  # noqa: E402  (the text generators and option flags)

import sacrebleu  # noqa: E402
from sacrebleu.metrics import BLEU, CHRF, TER  # noqa: E402
from sacrebleu.significance import PairedTest  # noqa: E402
from sacrebleu.utils import Color, print_results_table, print_single_results  # noqa: E402

Color.ENABLE_COLORS = False  # as the CLI sets it when stdout is not a terminal

OPTION_SETS = [
    {}, {"m": ["bleu", "chrf", "ter"]}, {"lc": True, "cw": 2}, {"smooth": "floor"}, {"smooth": "add-k"},
    {"smooth": "none"}, {"m": ["chrf"], "eps": True}, {"m": ["chrf"], "cc": 4, "beta": 1},
    {"m": ["ter"], "tnorm": True}, {"m": ["bleu", "ter"], "tok": "none"}, {"short": True},
    {"score_only": True},
]
MODES = ["confidence", "paired-bs", "paired-ar", "table"]


class SacreBug(Exception):
    pass


def metrics_for(opt, refs):
    out = {}
    for name in opt.get("m", ["bleu", "chrf"]):
        if name == "bleu":
            out["BLEU"] = BLEU(lowercase=opt.get("lc", False), tokenize=opt.get("tok"),
                               smooth_method=opt.get("smooth", "exp"), smooth_value=opt.get("sv"),
                               references=refs)
        elif name == "ter":
            out["TER"] = TER(case_sensitive=opt.get("tcs", False), normalized=opt.get("tnorm", False),
                             no_punct=opt.get("tnp", False), references=refs)
        else:
            out["CHRF"] = CHRF(char_order=opt.get("cc", 6), word_order=opt.get("cw", 0), beta=opt.get("beta", 2),
                               lowercase=opt.get("lc", False), whitespace=opt.get("ws", False),
                               eps_smoothing=opt.get("eps", False), references=refs)
    return out


def expected(sys_paths, ref_paths, opt, mode, n, width):
    """sacrebleu.py main() for these files, -f text (the seed comes from the environment)."""
    def read(p):
        with open(p, encoding="utf-8", newline="\n") as f:
            return [line.rstrip() for line in f]
    systems = [read(p) for p in sys_paths]
    metrics = metrics_for(opt, [read(p) for p in ref_paths])
    so, short = opt.get("score_only", False), opt.get("short", False)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        if mode == "confidence":
            results = []
            for name in sorted(metrics):
                score = metrics[name].corpus_score(systems[0], references=None, n_bootstrap=n)
                sig = metrics[name].get_signature().format(short)
                results.append(score.format(width, so, sig))
            if so and len({"=" in r for r in results}) > 1:
                # print_single_results then prints one line twice and drops another
                raise SacreBug("-b --confidence with a CI on some metrics only")
            print_single_results(results, argparse.Namespace(format="text"))
        else:
            names = sys_paths[:]
            if mode != "table":
                names[0] = "Baseline: " + names[0]
            named = list(zip(names, systems))
            args = argparse.Namespace(format="text", width=width, paired_bs=mode == "paired-bs",
                                      paired_ar=mode == "paired-ar", paired_bs_n=n, paired_ar_n=n, short=short)
            if mode == "table":
                sigs, scores = {}, {"System": names}
                for sys_name, system in named:
                    for name in sorted(metrics):
                        score = metrics[name].corpus_score(system, references=None)
                        sigs[score.name] = metrics[name].get_signature().format(short)
                        scores.setdefault(score.name, []).append(score.format(width, True))
            else:
                ps = PairedTest(named, metrics, references=None, test_type="bs" if mode == "paired-bs" else "ar",
                                n_samples=n)
                sigs, scores = ps()
                sigs = {k: v.format(short) for k, v in sigs.items()}
            print_results_table(scores, sigs, args)
    return buf.getvalue()


def lleval_mode_args(mode, n):
    return {"confidence": ["--confidence", "-cin", str(n)], "paired-bs": ["--paired-bs", "-pbsn", str(n)],
            "paired-ar": ["--paired-ar", "-parn", str(n)], "table": []}[mode]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lleval")
    ap.add_argument("--cases", type=int, default=60)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--cli", type=int, default=4, help="cases also checked against the sacrebleu command")
    ap.add_argument("--lleval-version")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="lleval_tests_")
    width, failures, cli_checked, lines = 17, 0, 0, 0
    theirs = sacrebleu.__version__
    for idx in range(args.cases):
        mode = MODES[idx % len(MODES)]
        opt = dict(OPTION_SETS[(idx // len(MODES)) % len(OPTION_SETS)])
        if mode in ("paired-bs", "paired-ar", "table") and opt.get("score_only"):
            opt.pop("score_only")  # -b does not apply to a table
        ter = "ter" in opt.get("m", [])
        nlines = rng.choice([1, 2, 5, 20, 60, 150] if ter else [1, 2, 5, 20, 60, 150, 400])
        nrefs = rng.choice([1, 1, 2, 3])
        if ter and mode == "paired-ar":
            # TER's mean reference length of 3 references is inexact, and sacreBLEU sums the
            # shuffled statistics with numpy's matmul (BLAS order), so a trial that ties the
            # real difference can fall either way there (docs/eval.md): 1 or 2 references
            nrefs = min(nrefs, 2)
        nsys = 1 if mode == "confidence" else rng.choice([2, 2, 3, 4])
        n = rng.choice([2, 40, 100, 333, 1000]) if mode != "paired-ar" else rng.choice([1, 100, 500, 1000])
        env_seed = rng.choice(["12345", "12345", "0", "7", "4294967296", "NONE"]) if mode != "table" else None
        lens = [0, 1, 3, 8, 15, 30] if ter else [0, 1, 3, 8, 15, 30, 60]
        base = [cs.rand_line(rng, rng.choice(lens)) for _ in range(nlines)]
        refs = [[cs.perturb(rng, b, 0.2) if k else b for b in base] for k in range(nrefs)]
        d = os.path.join(tmp, "case%03d" % idx)
        os.makedirs(d)
        ref_paths, sys_paths = [], []
        for k, r in enumerate(refs):
            ref_paths.append(os.path.join(d, "ref%d" % k))
            cs.write(ref_paths[-1], r, rng)
        for s in range(nsys):
            level = rng.choice([0.0, 0.1, 0.3, 0.6])
            sys_paths.append(os.path.join(d, "sys%d" % s))
            cs.write(sys_paths[-1], [cs.perturb(rng, b, level) if rng.random() > 0.05 else "" for b in base], rng)
        env = dict(os.environ)
        if env_seed is None:
            env.pop("SACREBLEU_SEED", None)
        else:
            env["SACREBLEU_SEED"] = env_seed
        os.environ.clear()
        os.environ.update(env)
        unseeded = env_seed == "NONE" or (env_seed == "0" and mode.startswith("paired"))
        try:
            want = expected(sys_paths, ref_paths, opt, mode, n, width)
        except (TypeError, SacreBug) as e:  # TypeError: statistics.mean on mixed float32 / float scores
            print("case %d: sacrebleu fails here (%s); skipped" % (idx, e))
            continue
        if args.lleval_version and args.lleval_version != theirs:
            want = want.replace("version:" + theirs, "version:" + args.lleval_version)
        cmd = [args.lleval] + sum((["-r", p] for p in ref_paths), []) + ["-i"] + sys_paths + ["-w", str(width)]
        cmd += cs.lleval_args(opt) + lleval_mode_args(mode, n)
        got = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if got.returncode != 0:
            print("case %d: lleval failed: %s\n  %s" % (idx, got.stderr.strip(), " ".join(cmd)))
            failures += 1
            continue
        if cli_checked < args.cli and not unseeded and idx % 5 == 2:
            cli = subprocess.run([sys.executable, "-m", "sacrebleu"] + ref_paths + ["-i"] + sys_paths +
                                 ["-w", str(width)] + cs.sacrebleu_cli_args(opt) +
                                 [a.replace("-cin", "--confidence-n").replace("-pbsn", "--paired-bs-n")
                                  .replace("-parn", "--paired-ar-n") for a in lleval_mode_args(mode, n)],
                                 capture_output=True, text=True, env=env)
            cli_checked += 1
            if cli.stdout != expected(sys_paths, ref_paths, opt, mode, n, width):
                print("case %d: in-process emulation differs from the sacrebleu CLI:\n%s" % (idx, cli.stdout))
                failures += 1
        wl, gl = want.splitlines(), got.stdout.splitlines()
        if unseeded:
            # unseeded draws differ run to run: compare the layout, not the numbers
            def layout(lines):
                return [re.sub(r"\d+", "#", x) for x in lines if not re.match("^[│╒╞├╘]", x)]
            wl, gl = layout(wl), layout(gl)
        lines += len(wl)
        if wl != gl:
            diff = difflib.unified_diff(wl, gl, "sacrebleu", "lleval", n=0, lineterm="")
            print("case %d (%s, %s, SACREBLEU_SEED=%s, n=%d) differs:\n%s\n  %s" %
                  (idx, mode, opt, env_seed, n, "\n".join(diff), " ".join(cmd)))
            failures += 1
    shutil.rmtree(tmp)
    print("sacrebleu %s statistical tests: %d cases, %d lines compared (-w %d), %d checked against the CLI, "
          "%d failures" % (theirs, args.cases, lines, width, cli_checked, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
