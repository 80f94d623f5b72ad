#!/usr/bin/env python3
"""Summarise the runs of scripts/experiments.sh: tables over seeds and plots.

    scripts/summarize_experiments.py [--runs runs/experiments] [--out docs/img/experiments]
                                     [--archive docs/experiments-runs] [--keep]

Reads RUNS/results.tsv (one row per run and seed) and each run's
metrics.jsonl (RUNS/NAME.sSEED/metrics.jsonl, else the archived copy
ARCHIVE/NAME.sSEED.metrics.jsonl; --keep first copies each run directory's
metrics.jsonl there, so the raw numbers outlive runs/) and writes
  - to stdout, one Markdown table per group: every metric as the mean over the
    seeds followed by the per-seed values, so that the spread is visible;
  - OUT/GROUP_valid.png: validation loss against update, one colour per
    model, one line per seed;
  - OUT/GROUP_depth.png (latent groups): the expected depth E[L] = sum_l q(z_l)
    per target language against update, one panel per model (seed 1 solid,
    other seeds dashed);
  - OUT/NAME/... : scripts/plot's per-run plots of seed 1 (q(z_l) over time
    and at the end for latent runs, the learned DLCL weights for DLCL runs).
A run whose metrics are in neither place is left out of the plots (with a
warning) and keeps its results.tsv numbers; a plot none of whose runs has
metrics is not rewritten, so an earlier image stays.
Needs python3-matplotlib for the plots (the tables need nothing).
"""

import argparse
import csv
import importlib.machinery
import importlib.util
import math
import os
import shutil
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
    "latent": ["o2m_beta0", "o2m_beta1"],
    # the aggregated-posterior prior against the Beta(1,1) prior at the same beta
    "latent_prior": ["o2m_beta1", "o2m_agg"],
    # the inner loop: I = 1, 2, 5 inner updates of the logits per outer step (beta 0)
    "latent_inner": ["o2m_beta0", "o2m_beta0_I2", "o2m_beta0_I5"],
    # the deep-decoder methods on the decoder that fails here, next to that failing baseline
    # (post_d20_750: its first 750 updates, rerun with train.max_updates=750)
    "deep": ["post_d20", "post_d20_750", "deep_post_all", "deep_post_no_ddr", "deep_post_no_cad", "deep_post_no_ald"],
    # issue 27: the corrected defaults (soft samples, beta on the code's scale), and with the code's hard samples
    "latent_paper": ["o2m_paper", "o2m_paper_hard"],
    # issue 27: latent 16-layer pre-norm decoder (K = 8) against static 8 and static 16 (Bible)
    "latent_static": ["static_pre_d8", "static_pre_d16", "ll_pre_d16_k8"],
    # scripts/experiments.sh --device cuda
    "gpu_latent": ["gpu_static_6_12", "gpu_static_6_24", "gpu_ll_6_24", "gpu_static_6_48", "gpu_ll_6_48"],
    "gpu_norm": ["gpu_post_6_24", "gpu_pre_6_24", "gpu_static_30_6", "gpu_dlcl_30_6"],
    "gpu_deep": ["gpu_deep_15_15", "gpu_deep_15_15_cad", "gpu_deep_15_15_crt", "gpu_deep_15_15_all"],
}
COLUMNS = [("updates", "updates", None), ("valid_loss", "valid loss", 3), ("bleu", "BLEU", 2), ("chrf", "chrF", 1),
           ("bleu_unk_src", "BLEU, UNK source", 2), ("EL_dec", "E[L] dec", 2),
           ("kept_dec", "kept (q>=0.5)", None), ("bleu_soft", "BLEU soft", 2),
           ("bleu_pruned", "BLEU pruned", 2), ("train_s", "train s", 0),
           ("decode_s", "decode s", 1), ("decode_pruned_s", "decode pruned s", 1)]


class Metrics:
    """Finds and reads a run's metrics.jsonl: the run directory first, then the archive."""

    def __init__(self, plot, runs, archive):
        self.plot, self.runs, self.archive, self.warned = plot, runs, archive, set()

    def path(self, name, seed):
        for p in (os.path.join(self.runs, "%s.s%s" % (name, seed), "metrics.jsonl"),
                  os.path.join(self.archive, "%s.s%s.metrics.jsonl" % (name, seed)) if self.archive else None):
            if p and os.path.isfile(p):
                return p
        if (name, seed) not in self.warned:
            self.warned.add((name, seed))
            print("summarize_experiments: no metrics.jsonl for %s seed %s (neither %s/%s.s%s/ nor the archive): "
                  "left out of the plots" % (name, seed, self.runs, name, seed), file=sys.stderr)
        return None

    def load(self, name, seed):
        """(train, valid) records, or ([], []) when the run's metrics are missing."""
        p = self.path(name, seed)
        return self.plot.load_metrics(p) if p else ([], [])


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


def latent_final(metrics, name, seed):
    """Per-language q of the last logged update of the decoder: {lang: [q_l]}."""
    train, _ = metrics.load(name, seed)
    st = metrics.plot.latent_stacks(train).get("dec")
    if not st:
        return None, None
    return st, {lang: st["q"][lang][-1] for lang in st["langs"]}


def latent_table(metrics, names, rows):
    """Per model and seed: E[L] per language, layers kept per language, the
    spread of q across languages (agreement) and its range (sparsity)."""
    out = ["| model | seed | E[L] per language | kept per language | mean std of q across languages | q range |",
           "|---|---|---|---|---|---|"]
    for name in names:
        for r in sorted(rows, key=lambda r: int(r["seed"])):   # seed order, as in the tables
            if r["name"] != name:
                continue
            st, q = latent_final(metrics, name, r["seed"])
            if not q:
                out.append("| %s | %s | (metrics not kept) | | | |" % (name, r["seed"]))
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


def plot_valid(plt, metrics, group, names, rows, out):
    plot = metrics.plot
    fig, ax = plt.subplots(figsize=(8, 4.2), layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, name in enumerate(names):
        seeds = [r["seed"] for r in rows if r["name"] == name]
        for j, seed in enumerate(seeds):
            _, valid = metrics.load(name, seed)
            if not valid:
                continue
            xs, ys = plot.series(valid, "loss")
            ax.plot(xs, ys, "o-" if j == 0 else "s--", color=colours[i % len(colours)], markersize=3,
                    linewidth=1.2, label=name if j == 0 else None)
    ax.set_xlabel("update")
    ax.set_ylabel("valid loss (bits per token)")
    ax.set_title("%s: validation loss, one line per seed" % group)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return plot.save(fig, out, "%s_valid.png" % group, plt)


def plot_latent_depth(plt, metrics, group, names, rows, out):
    plot = metrics.plot
    names = [n for n in names if any(r["name"] == n for r in rows)]
    if not names:
        return None
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.4), sharey=True,
                             squeeze=False, layout="constrained")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, name in zip(axes[0], names):
        seeds = [r["seed"] for r in rows if r["name"] == name]
        for j, seed in enumerate(seeds):
            train, _ = metrics.load(name, seed)
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
    return plot.save(fig, out, "%s_depth.png" % group, plt)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="runs/experiments")
    ap.add_argument("--out", default="docs/img/experiments")
    ap.add_argument("--archive", default="docs/experiments-runs",
                    help="where archived NAME.sSEED.metrics.jsonl files are looked for when a run directory is gone")
    ap.add_argument("--keep", action="store_true",
                    help="first copy each run directory's metrics.jsonl into the archive (raw numbers kept with the docs)")
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
    if args.keep:
        os.makedirs(args.archive, exist_ok=True)
        for r in rows:
            src = os.path.join(args.runs, "%s.s%s" % (r["name"], r["seed"]), "metrics.jsonl")
            if os.path.isfile(src):
                shutil.copyfile(src, os.path.join(args.archive, "%s.s%s.metrics.jsonl" % (r["name"], r["seed"])))
    metrics = Metrics(plot, args.runs, args.archive)
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
                _, valid = metrics.load(name, r["seed"])
                if valid and isinstance(valid[-1].get("wall"), (int, float)):
                    r["train_s"] = "%.0f" % valid[-1]["wall"]
            print("| %s | %s | " % (name, ",".join(r["seed"] for r in rs)) +
                  " | ".join(cell([r[c[0]] for r in rs], c[2]) for c in COLUMNS) + " |")
        print()
        latent = group.startswith("latent")
        if latent:
            print(latent_table(metrics, names, rows) + "\n")
        have = [n for n in names if any(metrics.path(n, r["seed"]) for r in rows if r["name"] == n)]
        if plt and have:   # a plot without any run's metrics would only erase an earlier image
            plot_valid(plt, metrics, group, have, rows, args.out)
            if latent:
                plot_latent_depth(plt, metrics, group, have, rows, args.out)
            for name in have:   # scripts/plot's own per-run figures, seed 1
                what = "latent" if "o2m" in name or name.startswith("ll_") or "_ll_" in name else "dlcl" if "dlcl" in name else None
                path = metrics.path(name, "1")
                model = os.path.join(args.runs, name + ".s1", "checkpoint_last.llm")
                if what == "latent" and path:
                    arg = [path]
                elif what == "dlcl" and os.path.isfile(model):
                    arg = ["--model", model]
                else:
                    continue
                cmd = [os.path.join(HERE, "plot"), "--out", os.path.join(args.out, name), "--what", what] + arg
                subprocess.run(cmd, check=True, stdout=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
