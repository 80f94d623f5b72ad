#!/usr/bin/env python3
"""Compare lleval with the sacrebleu Python package on generated inputs.

usage: compare_sacrebleu.py LLEVAL [--cases N] [--seed S] [--keep DIR] [--cli N] [--lleval-version V]

Each case writes a hypothesis file and 1-3 reference files (random and
hand-written text: Unicode whitespace, numbers with separators, HTML entities,
CJK, Arabic, emoji, Greek sigma, long lines, empty lines, ...), picks options
(lowercase, tokenize none, zh and char on CJK text, intl on Unicode punctuation and symbols, chrF++, smoothing, several references,
sentence-level, TER and its options, ...) and computes sacreBLEU's output lines in this process the
way its CLI does (sacrebleu.py main(): files opened with newline="\\n",
rstrip()ed; print_single_results for the alignment).  The first --cli cases are
also run through the real `sacrebleu` command to check that emulation.  lleval
runs with -w 17 (so equal text means equal doubles) and the lines must agree
exactly apart from the score, which must agree to 2 decimals.

Prints a summary with the maximum absolute score difference; exit 1 on any
mismatch.
"""
import argparse
import contextlib
import io
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.utils import print_single_results

WORDS = ["the", "cat", "sat", "on", "mat", "Hello", "world", "New", "York", "U.S.", "e.g.", "don't",
         "it's", "co-operate", "state-of-the-art", "x", "a", "I", "THE", "Cat", "mr.", "Dr.", "etc.",
         "end.", "(hi)", "\"quoted\"", "'single'", "wait...", "yes!", "no?", "C++", "a.b.c", "x,y"]
NUMBERS = ["1,000.50", "3.14", "1,000", "2.", "0.5", ".5", "5.", "1-2", "2-3-4", "10-", "-5", "1.000,00",
           "12:30", "50%", "$5", "€10", "1/2", "3.14.15", "1,2,3", "2020-01-01", "1--2", "7-a", "a-7",
           "٣٫١٤", "１２３", "1.", ",5", "5,", "-1.5", "1e-3"]
PUNCT = ["!", "?", "...", "?!", ",", ".", ";", ":", "(", ")", "[", "]", "{", "}", "\"", "'", "`", "--",
         "—", "-", "/", "\\", "@", "#", "&", "*", "+", "=", "<", ">", "|", "~", "^", "_", ".,", ",.",
         "!!!", "?..", "«", "»", "“", "”", "…", "。", "、", "¿", "¡", "%", "$"]
ENTITIES = ["&quot;", "&amp;", "&lt;", "&gt;", "&amp;lt;", "&amp;amp;", "&quot", "&nbsp;", "&#39;",
            "<skipped>", "<skip", "a<skipped>b", "&lt;skipped&gt;", "AT&amp;T", "&&", "&;"]
CJK = ["我们", "今天", "天气", "很好", "。", "，", "東京", "日本語", "한국어", "テスト", "中文1,000.5", "漢字."]
ARABIC = ["مرحبا", "بالعالم", "١٢٣", "،", "؟", "العربية.", "שלום", "हिन्दी", "ไทย"]
EMOJI = ["😀", "👍🏽", "🇫🇷", "👨‍👩‍👧", "❤️", "🎉", "😀.", "🙂,", "𝔘𝔫𝔦"]
CASE = ["ΣΊΣΥΦΟΣ", "ΟΔΟΣ", "Σ", "ΑΣ.", "Σα", "λόγοσ", "ΣΣ", "ὈΔΥΣΣΕΎΣ", "İstanbul", "ß", "Straße",
        "ǅ", "ﬁ", "Å", "Ω", "ǈ", "Ⅻ", "Ⓐ", "e\u0301", "A\u0301Σ", "Σ'", "A.Σ", "ΜΆΙΟΣ-", "ÇA", "ĲSSEL"]
SPACES = [" ", " ", " ", " ", "  ", "\t", "\u00a0", "\u3000", "\u2009", "\u202f", "\x0b", "\x0c",
          "\x1c", "\x1f", "\x85", "\u2028", "\r", " \u200b", "\ufeff "]
POOLS = [(WORDS, 40), (NUMBERS, 10), (PUNCT, 12), (ENTITIES, 5), (CJK, 5), (ARABIC, 4), (EMOJI, 4),
         (CASE, 6)]
# For the zh and char tokenizers and TER's Asian support: words without spaces, the ends of each
# of their character ranges (TokenizerZh's two ranges written with five hex digits, which Python
# reads as U+2001..U+2A6D and U+2F81..U+2FA1), CJK punctuation, full-width forms, kana
CJK_TEXT = ["我们今天天气很好", "价格是1,000.50元。", "第1-2章", "東京タワー", "ひらがな", "カタカナ", "ㇰㇱ",
            "한국어", "ภาษาไทย", "漢字.", "中文,English", "「引用」", "（括号）", "问题？", "１２３", "ＡＢＣ",
            "，", "．", "：", "；", "！", "＂", "、", "。", "〈", "〉", "【", "】", "〔", "〕", "〟", "・",
            "｡", "･", "\u2000", "\u2001", "\u2026", "\u2a6d", "\u2a6e", "\u2f80", "\u2f81", "\u2fa1",
            "\u2fa2", "\u3400", "\u4db5", "\u4db6", "\u4dbf", "\u9fa5", "\u9fbb", "\u9fbc", "\u9fff",
            "\ufa2d", "\ufa2e", "\ufa6a", "\ufad9", "\ufada", "\ufaff", "\uff00", "\uffef", "\ufff0",
            "\u303f", "\u3040", "\u31c0", "\u31ef", "\u31f0", "\u3200", "\u3f22", "\u3f23",
            "\U00020000", "\U0002f800", "\u2600", "\u27bf", "\u27c0", "\ufe10", "\ufe1f", "\ufe30",
            "\ufe4f", "\ufe50", "\u2e80", "\u2eff", "\u2ff0", "\u3100", "\u31a0", "\u33ff", "ｶﾀｶﾅ"]
POOLS_CJK = [(CJK_TEXT, 30), (CJK, 10), (WORDS, 10), (NUMBERS, 5), (PUNCT, 6), (CASE, 2)]
# For the intl tokenizer: Unicode punctuation (\p{P}) and symbols (\p{S}) of many scripts, numbers
# with separators, and glued to words or digits on either side
UNI_PS = ["—", "–", "‘", "’", "‚", "„", "†", "‡", "•", "‰", "′",
          "″", "‹", "›", "⁂", "©", "®", "™", "°", "±", "×", "÷",
          "µ", "¶", "§", "¤", "¢", "£", "¥", "₹", "₽", "∑", "√",
          "∞", "≈", "≠", "←", "→", "⇒", "♥", "★", "☺", "٪", "،",
          "؛", "؟", "।", "॥", "、", "。", "「", "」", "『", "』", "〜",
          "・", "！", "？", "＃", "＄", "´", "`", "^", "¨", "¯", "˜", "٣٫١",
          "1٫5", "1,5", "2.", "3.14", "10%", "5€", "$5", "a-b", "x/y", "e.g.", "U.S.", "don't", "2019.",
          "½", "Ⅳ", "①", "x²", "😀!", "a—b", "(§ 3)", "¿qué?", "1–2"]
POOLS_INTL = POOLS + [(UNI_PS, 25)]


def rand_token(rng, pools=POOLS):
    pool = rng.choices([p for p, _ in pools], weights=[w for _, w in pools])[0]
    t = rng.choice(pool)
    if rng.random() < 0.15:  # glue punctuation on
        t = t + rng.choice(PUNCT) if rng.random() < 0.7 else rng.choice(PUNCT) + t
    return t


def rand_line(rng, n, pools=POOLS):
    out = []
    for i in range(n):
        if i:  # (CJK text: mostly no space between words)
            out.append("" if pools is POOLS_CJK and rng.random() < 0.6 else
                       rng.choice(SPACES) if rng.random() < 0.3 else " ")
        out.append(rand_token(rng, pools))
    s = "".join(out)
    if rng.random() < 0.1:
        s = rng.choice(SPACES) + s + rng.choice(SPACES)
    return s


def perturb(rng, line, level, pools=POOLS):
    toks = line.split(" ")
    out = []
    for t in toks:
        r = rng.random()
        if r < level * 0.3:
            continue
        if r < level * 0.6:
            out.append(rand_token(rng, pools))
            continue
        if r < level * 0.7:
            t = t.upper() if rng.random() < 0.5 else t.lower()
        out.append(t)
        if rng.random() < level * 0.1:
            out.append(rand_token(rng, pools))
    if len(out) > 1 and rng.random() < level:
        i = rng.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]
    return " ".join(out)


HAND = [
    # (hypotheses, [reference streams])
    (["1,000.50 dollars and 3.14 pie", "pages 10-20, 30-40.", "a.b, c.d 1.5.6 7,8,9"],
     [["1,000.50 dollars and 3.14 pies", "pages 10-20 , 30-40 .", "a.b, c.d 1.5.6 7,8,9"]]),
    (["&quot;Hi&quot; &amp; &lt;b&gt; &amp;lt; <skipped> x", "AT&amp;T", ""],
     [["\"Hi\" & <b> &lt; x", "AT&T", ""]]),
    (["non\u00a0breaking\u3000ideographic\ttab\u2009thin\x1cfs\x85nel", "zero\u200bwidth \ufeffbom"],
     [["non breaking ideographic tab thin fs nel", "zero width bom"]]),
    (["我们今天很好。", "مرحبا بالعالم ١٢٣", "😀 👍🏽 🇫🇷 👨‍👩‍👧"],
     [["我们今天天气很好。", "مرحبا بالعالم", "😀 👍🏽 🇫🇷"]]),
    (["ΟΔΟΣ ΣΊΣΥΦΟΣ İstanbul STRASSE", "ΣΑΣ. Σ'Σ A\u0301Σ"], [["οδός σίσυφος istanbul straße", "σας. σ'ς áς"]]),
    (["the same line .", "identical !"], [["the same line .", "identical !"]]),
    (["completely wrong", "nothing matches here"], [["totally different", "zero overlap exists"]]),
    (["", "", ""], [["a reference", "another one", "third"]]),
    (["", ""], [["", ""]]),
    (["?!?!... ,,, ..; (( )) -- -1- 2--3 4-5-6 7- -8"], [["? ! ? ! ... , , , .. ; ( ( ) ) -- -1- 2 --3 4 -5 -6 7 - -8"]]),
    ([" ".join(["long"] * 3000 + ["tail."])], [[" ".join(["long"] * 2990 + ["tail", "."])]]),
    (["short", "a b c d e f"], [["short one", "a b c d e f"], ["short", "a b c"], ["x", "a b c d e f g"]]),
]

OPTION_SETS = [
    {}, {}, {"lc": True}, {"tok": "none"}, {"cw": 2}, {"lc": True, "cw": 2}, {"smooth": "none"},
    {"smooth": "floor"}, {"smooth": "add-k"}, {"smooth": "floor", "sv": 0.3}, {"smooth": "add-k", "sv": 2},
    {"ws": True}, {"eps": True}, {"cc": 4, "beta": 1}, {"sl": "bleu"}, {"sl": "chrf"}, {"short": True},
    {"score_only": True}, {"tok": "none", "lc": True, "cw": 2},
    {"m": ["bleu", "chrf", "ter"]}, {"m": ["ter"], "tcs": True}, {"m": ["ter"], "tnorm": True},
    {"m": ["ter"], "tnp": True}, {"m": ["ter", "bleu"], "tcs": True, "tnorm": True, "tnp": True, "lc": True},
    {"sl": "ter"}, {"m": ["ter"], "short": True, "tnorm": True}, {"m": ["ter"], "score_only": True},
    # the tokenizers and TER settings for text without spaces (their cases draw from POOLS_CJK)
    {"tok": "zh"}, {"tok": "char"}, {"tok": "zh", "lc": True, "m": ["bleu"]}, {"sl": "bleu", "tok": "zh"},
    {"tok": "char", "short": True, "m": ["bleu"]}, {"m": ["ter"], "tnorm": True, "tas": True},
    {"m": ["ter"], "tnp": True, "tas": True}, {"m": ["ter", "bleu"], "tnorm": True, "tnp": True, "tas": True,
                                               "tok": "zh", "short": True},
    {"m": ["ter"], "tas": True},
    # intl (its cases draw from POOLS_INTL)
    {"tok": "intl"}, {"tok": "intl", "lc": True, "m": ["bleu"]}, {"sl": "bleu", "tok": "intl"},
    {"tok": "intl", "short": True, "m": ["bleu", "chrf"]},
]


def cjk(opt):
    return opt.get("tok") in ("zh", "char") or opt.get("tas", False)


def expected(hyp_path, ref_paths, opt, width):
    """The text sacrebleu's CLI prints (-f text), computed in-process."""
    def read(p):
        with open(p, encoding="utf-8", newline="\n") as f:
            return [line.rstrip() for line in f]
    system = read(hyp_path)
    refs = [read(p) for p in ref_paths]
    metrics = {}
    names = [opt["sl"]] if "sl" in opt else opt.get("m", ["bleu", "chrf"])
    for name in names:
        if name == "bleu":
            metrics["BLEU"] = BLEU(lowercase=opt.get("lc", False), tokenize=opt.get("tok"),
                                   smooth_method=opt.get("smooth", "exp"), smooth_value=opt.get("sv"),
                                   effective_order="sl" in opt, references=refs)
        elif name == "ter":
            metrics["TER"] = TER(case_sensitive=opt.get("tcs", False), normalized=opt.get("tnorm", False),
                                 no_punct=opt.get("tnp", False), asian_support=opt.get("tas", False),
                                 references=refs)
        else:
            metrics["CHRF"] = CHRF(char_order=opt.get("cc", 6), word_order=opt.get("cw", 0),
                                   beta=opt.get("beta", 2), lowercase=opt.get("lc", False),
                                   whitespace=opt.get("ws", False), eps_smoothing=opt.get("eps", False),
                                   references=refs)
    so, short = opt.get("score_only", False), opt.get("short", False)
    if "sl" in opt:
        metric = list(metrics.values())[0]
        lines = []
        for hyp, *rs in zip(system, *refs):
            score = metric.sentence_score(hyp, rs)
            lines.append(score.format(width, so, metric.get_signature().format(short)))
        return "\n".join(lines) + "\n"
    results = []
    for name in sorted(metrics):
        score = metrics[name].corpus_score(system, references=None, n_bootstrap=1)
        results.append(score.format(width, so, metrics[name].get_signature().format(short)))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_single_results(results, argparse.Namespace(format="text"))
    return buf.getvalue()


def lleval_args(opt):
    a = ["-m", opt["sl"] if "sl" in opt else ",".join(opt.get("m", ["bleu", "chrf"]))]
    if opt.get("lc"):
        a.append("-lc")
    if "tok" in opt:
        a += ["-tok", opt["tok"]]
    if "smooth" in opt:
        a += ["-s", opt["smooth"]]
    if "sv" in opt:
        a += ["-sv", str(opt["sv"])]
    if "cw" in opt:
        a += ["-cw", str(opt["cw"])]
    if "cc" in opt:
        a += ["-cc", str(opt["cc"])]
    if "beta" in opt:
        a += ["--chrf-beta", str(opt["beta"])]
    if opt.get("ws"):
        a.append("--chrf-whitespace")
    if opt.get("eps"):
        a.append("--chrf-eps-smoothing")
    if "sl" in opt:
        a.append("-sl")
    if opt.get("score_only"):
        a.append("-b")
    if opt.get("short"):
        a.append("-sh")
    for k, flag in (("tcs", "--ter-case-sensitive"), ("tnorm", "--ter-normalized"), ("tnp", "--ter-no-punct"),
                    ("tas", "--ter-asian-support")):
        if opt.get(k):
            a.append(flag)
    return a


def sacrebleu_cli_args(opt):
    """The same options for the real sacrebleu command."""
    a = ["-m"] + ([opt["sl"]] if "sl" in opt else opt.get("m", ["bleu", "chrf"]))
    if opt.get("lc"):
        a += ["-lc", "--chrf-lowercase"]
    for k, flag in (("tok", "-tok"), ("smooth", "-s"), ("sv", "-sv"), ("cw", "-cw"), ("cc", "-cc"),
                    ("beta", "--chrf-beta")):
        if k in opt:
            a += [flag, str(opt[k])]
    for k, flag in (("ws", "--chrf-whitespace"), ("eps", "--chrf-eps-smoothing"), ("score_only", "-b"),
                    ("short", "-sh"), ("tcs", "--ter-case-sensitive"), ("tnorm", "--ter-normalized"),
                    ("tnp", "--ter-no-punct"), ("tas", "--ter-asian-support")):
        if opt.get(k):
            a.append(flag)
    if "sl" in opt:
        a.append("-sl")
    return a + ["-f", "text", "-q"]


SCORE_RE = re.compile(r"^(\s*\S+ = )?(\d+(?:\.\d+)?)(.*)$")


def split_score(line):
    m = SCORE_RE.match(line)
    if not m:
        return line, None
    return (m.group(1) or "") + "#" + m.group(3), float(m.group(2))


def write(path, lines, rng):
    # some files end without a newline: sacreBLEU still reads the last line
    text = "\n".join(lines) + ("\n" if rng.random() < 0.8 or not lines or lines[-1] == "" else "")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def make_case(rng, idx, ter=False, pools=POOLS):
    if idx < len(HAND):
        hyps, refs = HAND[idx]
        return list(hyps), [list(r) for r in refs]
    n = rng.randint(1, 12)
    nrefs = rng.choice([1, 1, 1, 2, 3])
    level = rng.choice([0.0, 0.1, 0.3, 0.6, 1.0])
    # (TER: lines up to 80 words; sacrebleu's Python TER takes seconds on 200)
    lens = [0, 1, 2, 5, 10, 20, 40, 80] if ter else [0, 1, 2, 5, 10, 20, 40, 200]
    base = [rand_line(rng, rng.choice(lens) if rng.random() < 0.95 else 0, pools) for _ in range(n)]
    refs = [[perturb(rng, b, 0.3 * level, pools) if k else b for b in base] for k in range(nrefs)]
    hyps = [perturb(rng, b, level, pools) if rng.random() > 0.05 else "" for b in base]
    return hyps, refs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lleval")
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--cli", type=int, default=6, help="cases also checked against the sacrebleu command")
    ap.add_argument("--keep", help="keep the case files here")
    ap.add_argument("--lleval-version", help="the sacreBLEU version lleval reproduces (LL_SACREBLEU_VERSION)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tmp = args.keep or tempfile.mkdtemp(prefix="lleval_cmp_")
    os.makedirs(tmp, exist_ok=True)
    width = 17
    failures, lines_checked, bit_identical, max_diff = 0, 0, 0, 0.0
    sacre_cmd = [sys.executable, "-m", "sacrebleu"]
    theirs = sacrebleu.__version__
    if args.lleval_version and args.lleval_version != theirs:
        print("note: sacrebleu %s is installed but lleval matches %s; comparing with the version field masked"
              % (theirs, args.lleval_version))
    cli_checked = 0
    for idx in range(args.cases):
        opt = OPTION_SETS[idx % len(OPTION_SETS)] if idx >= len(HAND) else {}
        hyps, refs = make_case(rng, idx, "ter" in opt.get("m", []) or opt.get("sl") == "ter",
                               POOLS_CJK if cjk(opt) else POOLS_INTL if opt.get("tok") == "intl" else POOLS)
        d = os.path.join(tmp, "case%03d" % idx)
        os.makedirs(d, exist_ok=True)
        hyp_path = os.path.join(d, "hyp")
        write(hyp_path, hyps, rng)
        ref_paths = []
        for k, r in enumerate(refs):
            ref_paths.append(os.path.join(d, "ref%d" % k))
            write(ref_paths[-1], r, rng)
        want = expected(hyp_path, ref_paths, opt, width)
        if args.lleval_version and args.lleval_version != theirs:
            want = want.replace("version:" + theirs, "version:" + args.lleval_version)
            want = want.replace("|v:" + theirs, "|v:" + args.lleval_version)
        cmd = [args.lleval] + sum((["-r", p] for p in ref_paths), []) + ["-i", hyp_path, "-w", str(width)]
        cmd += lleval_args(opt)
        got = subprocess.run(cmd, capture_output=True, text=True)
        if got.returncode != 0:
            print("case %d: lleval failed: %s" % (idx, got.stderr.strip()))
            failures += 1
            continue
        if sacre_cmd and cli_checked < args.cli and idx % 7 == 1:  # spread over the option sets
            cli = subprocess.run(sacre_cmd + ref_paths + ["-i", hyp_path, "-w", str(width)] +
                                 sacrebleu_cli_args(opt), capture_output=True, text=True)
            cli_checked += 1
            if cli.stdout != expected(hyp_path, ref_paths, opt, width):
                print("case %d: in-process emulation differs from the sacrebleu CLI:\n%s%s" %
                      (idx, cli.stdout, want))
                failures += 1
        wl, gl = want.splitlines(), got.stdout.splitlines()
        if len(wl) != len(gl):
            print("case %d: %d lines from sacrebleu, %d from lleval" % (idx, len(wl), len(gl)))
            failures += 1
            continue
        for w, g in zip(wl, gl):
            lines_checked += 1
            if w == g:
                bit_identical += 1
            (wt, ws), (gt, gs) = split_score(w), split_score(g)
            diff = abs(ws - gs) if ws is not None and gs is not None else 0.0
            max_diff = max(max_diff, diff)
            if wt != gt or (ws is None) != (gs is None) or (ws is not None and "%.2f" % ws != "%.2f" % gs):
                print("case %d (%s) differs:\n  sacrebleu: %s\n  lleval:    %s" % (idx, d, w, g))
                failures += 1
    if not args.keep:
        shutil.rmtree(tmp)
    print("sacrebleu %s: %d cases, %d score lines, %d bit-identical (-w %d), max |diff| = %.3g, "
          "%d checked against the sacrebleu CLI, %d failures"
          % (sacrebleu.__version__, args.cases, lines_checked, bit_identical, width, max_diff, cli_checked,
             failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
