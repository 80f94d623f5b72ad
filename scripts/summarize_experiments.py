#!/usr/bin/env python3
"""Summarise the runs of scripts/experiments.sh: tables over seeds and plots.

    scripts/summarize_experiments.py [--runs runs/experiments] [--out docs/img/experiments]

Reads RUNS/results.tsv (one row per run and seed) and each run's
metrics.jsonl (RUNS/NAME.sSEED/metrics.jsonl) and writes
  - to stdout, one Markdown table per group: every metric as the mean over the
    seeds followed by the per-seed values, so that the spread is visible;
  - OUT/GROUP_valid.png: validation loss against update, one colour per
    model, one line per seed;
  - OUT/latent_depth.png (latent runs): the expected depth E[L] = sum_l q(z_l)
    per target language against update, one panel per model (seed 1 solid,
    other seeds dashed);
  - OUT/NAME/... : scripts/plot's per-run plots of seed 1 (q(z_l) over time
    and at the end for latent runs, the learned DLCL weights for DLCL runs).
Needs python3-matplotlib for the plots (the tables need nothing).
"""

import argparse
import csv
import importlib.machinery
import importlib.util
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM_PYTHON = "/usr/bin/python3"


def load_plot_module():
    """scripts/plot (no .py suffix) as a module, for its metrics reader."""
    loader = importlib.machinery.SourceFileLoader("llplot", os.path.join(HERE, "plot"))
    spec = importlib.util.spec_from_loader("llplot", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


GROUPS = {
    "depth": ["post_d20", "pre_d20", "dlcl_post_d20", "ll_post_d20"],
    "latent": ["o2m_beta0", "o2m_beta0_I2", "o2m_beta0_I5", "o2m_beta1", "o2m_agg"],
    # the deep-decoder methods on the decoder that fails here, next to that failing baseline
    "deep": ["post_d20", "deep_post_all", "deep_post_no_ddr", "deep_post_no_cad", "deep_post_no_ald"],
}
COLUMNS = [("valid_loss", "valid loss", 3), ("bleu", "BLEU", 2), ("chrf", "chrF", 1),
           ("bleu_unk_src", "BLEU, UNK source", 2), ("EL_dec", "E[L] dec", 2),
           ("kept_dec", "kept (q>=0.5)", None), ("bleu_soft", "BLEU soft", 2),
           ("bleu_pruned", "BLEU pruned", 2), ("train_s", "train s", 0),
           ("decode_s", "decode s", 1), ("decode_pruned_s", "decode pruned s", 1)]


def num(v):
    try:
        x = float(v)
        return x if math.isfinite(x) else None
    except (TypeError, ValueError):
        return None


def cell(vals, digits):
    """'mean (a / b)' over the seeds; non-numeric columns joined with '/'."""
    if digits is None or any(num(v) is None for v in vals):
        if all(v == vals[0] for v in vals):
            return vals[0] if vals[0] != "-" else "—"
        return " / ".join(vals)   # seed order
    xs = [num(v) for v in vals]
    f = "%%.%df" % digits
    if len(xs) == 1:
        return f % xs[0]
    return (f % statistics.mean(xs)) + " (" + " / ".join(f % x for x in xs) + ")"


def latent_final(plot, metrics):
    """Per-language q of the last logged update of the decoder: {lang: [q_l]}."""
    train, _ = plot.load_metrics(metrics)
    st = plot.latent_stacks(train).get("dec")
    if not st:
        return None, None
    return st, {lang: st["q"][lang][-1] for lang in st["langs"]}


def latent_table(plot, runs, names, rows):
    """Per model and seed: E[L] per language, layers kept per language, the
    spread of q across languages (agreement) and its range (sparsity)."""
    out = ["| model | seed | E[L] per language | kept per language | mean std of q across languages | q range |",
           "|---|---|---|---|---|---|"]
    for name in names:
        for r in rows:
            if r["name"] != name:
                continue
            st, q = latent_final(plot, os.path.join(runs, "%s.s%s" % (name, r["seed"]), "metrics.jsonl"))
            if not q:
                continue
            langs = st["langs"]
            el = " / ".join("%s %.2f" % (lg, sum(q[lg])) for lg in langs)
            kept = " / ".join("%d" % sum(1 for x in q[lg] if x >= 0.5) for lg in langs)
            L = len(q[langs[0]])
            spread = statistics.mean(statistics.pstdev([q[lg][l] for lg in langs]) for l in range(L)) \
                if len(langs) > 1 else 0.0
            allq = [x for lg in langs for x in q[lg]]
            out.append("| %s | %s | %s | %s | %.4f | %.3f–%.3f |" % (name, r["seed"], el, kept, spread,
                                                                    min(allq), max(allq)))
    return "\n".join(out)


def plot_valid(plt, plot, runs, group, names, rows, out):
    fig, ax = plt.subplots(figsize=(8, 4.2), layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, name in enumerate(names):
        seeds = [r["seed"] for r in rows if r["name"] == name]
        for j, seed in enumerate(seeds):
            _, valid = plot.load_metrics(os.path.join(runs, "%s.s%s" % (name, seed), "metrics.jsonl"))
            xs, ys = plot.series(valid, "loss")
            ax.plot(xs, ys, "o-" if j == 0 else "s--", color=colours[i % len(colours)], markersize=3,
                    linewidth=1.2, label=name if j == 0 else None)
    ax.set_xlabel("update")
    ax.set_ylabel("valid loss (bits per token)")
    ax.set_title("%s: validation loss, one line per seed" % group)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return plot.save(fig, out, "%s_valid.png" % group, plt)


def plot_latent_depth(plt, plot, runs, names, rows, out):
    names = [n for n in names if any(r["name"] == n for r in rows)]
    if not names:
        return None
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.4), sharey=True,
                             squeeze=False, layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, name in zip(axes[0], names):
        seeds = [r["seed"] for r in rows if r["name"] == name]
        for j, seed in enumerate(seeds):
            train, _ = plot.load_metrics(os.path.join(runs, "%s.s%s" % (name, seed), "metrics.jsonl"))
            st = plot.latent_stacks(train).get("dec")
            if not st:
                continue
            for k, lang in enumerate(st["langs"]):
                ax.plot(st["updates"], [sum(q) for q in st["q"][lang]], "-" if j == 0 else "--",
                        color=colours[k % len(colours)], linewidth=1.1,
                        label=lang if j == 0 else None)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("update")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("E[L] = sum_l q(z_l)")
    axes[0][0].legend(fontsize=7)
    return plot.save(fig, out, "latent_depth.png", plt)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="runs/experiments")
    ap.add_argument("--out", default="docs/img/experiments")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)
    if not args.no_plots and importlib.util.find_spec("matplotlib") is None and \
            os.access(SYSTEM_PYTHON, os.X_OK) and os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON):
        # a pyenv/venv python3 without Debian's python3-matplotlib: rerun under the system one
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    plot = load_plot_module()
    path = os.path.join(args.runs, "results.tsv")
    try:
        with open(path, encoding="utf-8") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
    except OSError as e:
        sys.exit("summarize_experiments: %s: %s" % (path, e.strerror))
    plt = None if args.no_plots else plot.import_pyplot()
    if plt:
        os.makedirs(args.out, exist_ok=True)
    for group, names in GROUPS.items():
        names = [n for n in names if any(r["name"] == n for r in rows)]
        if not names:
            continue
        print("### %s\n" % group)
        print("| model | seeds | " + " | ".join(c[1] for c in COLUMNS) + " |")
        print("|---|---|" + "---|" * len(COLUMNS))
        for name in names:
            rs = sorted((r for r in rows if r["name"] == name), key=lambda r: int(r["seed"]))
            for r in rs:   # training time from the run's own log (a resumed script does not see it)
                _, valid = plot.load_metrics(os.path.join(args.runs, "%s.s%s" % (name, r["seed"]), "metrics.jsonl"))
                if valid and isinstance(valid[-1].get("wall"), (int, float)):
                    r["train_s"] = "%.0f" % valid[-1]["wall"]
            print("| %s | %s | " % (name, ",".join(r["seed"] for r in rs)) +
                  " | ".join(cell([r[c[0]] for r in rs], c[2]) for c in COLUMNS) + " |")
        print()
        if group == "latent":
            print(latent_table(plot, args.runs, names, rows) + "\n")
        if plt:
            plot_valid(plt, plot, args.runs, group, names, rows, args.out)
            if group == "latent":
                plot_latent_depth(plt, plot, args.runs, names, rows, args.out)
            for name in names:   # scripts/plot's own per-run figures, seed 1
                run = os.path.join(args.runs, name + ".s1")
                what = "latent" if "o2m" in name or name.startswith("ll_") else "dlcl" if "dlcl" in name else None
                if what and os.path.isdir(run):
                    cmd = [os.path.join(HERE, "plot"), "--out", os.path.join(args.out, name), "--what", what]
                    cmd += [os.path.join(run, "metrics.jsonl")] if what == "latent" else \
                        ["--model", os.path.join(run, "checkpoint_last.llm")]
                    subprocess.run(cmd, check=True, stdout=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
