#!/usr/bin/env python3
"""Print the C test vectors of tests/test_eval.c (the "generated" blocks).

    pip install sacrebleu==2.6.0 && python3 tests/data/eval/make_vectors.py

Scores are printed with repr() (17 significant digits, round-trip exact)."""
import unicodedata

import sacrebleu
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a


def c(s):
    """A C string literal: printable characters as UTF-8, the rest as hex escapes."""
    out, hexed = '"', False
    for ch in s:
        cat = unicodedata.category(ch)
        if ch in '"\\':
            piece = '\\' + ch
        elif ch == '\n':
            piece = '\\n'
        elif ch == '\t':
            piece = '\\t'
        elif (32 <= ord(ch) < 127) or (ord(ch) > 127 and cat[0] not in 'CZM'):
            piece = ch
        else:
            out += ''.join('\\x%02x' % b for b in ch.encode('utf-8'))
            hexed = True
            continue
        if hexed and piece[0] in '0123456789abcdefABCDEF':
            out += '" "'  # a hex escape would swallow this digit
        out += piece
        hexed = False
    return out + '"'


TOK = [
    "Hello, world!", "1,000.50 dollars", "3.14 and 2.5.", "pages 10-20, a-b 5- -6", "e.g. U.S.A.",
    "&quot;x&quot; &amp;lt; &lt;b&gt; AT&amp;T", "a<skipped>b <skipped>", "line-\nbreak\nhere",
    "tab\there\u00a0nbsp\u3000ideo", "我们今天很好。", "مرحبا، ١٢٣.", "😀.👍🏽,x", "(hi) [x] {y} ~z^ `q` |p|",
    "don't 'quote'", "..,,.!?", ".5 5. ,5 5, a.b 1.b a.1", "$5 €10 50% #1 @me", "  ", "",
    "x\x1cy\x85z\u2028w", "\u200bzw \ufeffbom", "5-5-5 a--b 1--2",
]
LOWER = ["HELLO World", "ΣΊΣΥΦΟΣ ΟΔΟΣ.", "Σ", "ΑΣ", "ΑΣ'", "Α'Σ'Β", "ΑΣ.Β", "İstanbul", "ǅǈǋ ⅫⒶ", "ΜΆΙΟΣ-",
         "STRASSE ß ẞ", "ĲSSEL Å Ω K", "A\u0301Σ", "Σ\u0301 ΑΣ\u0301"]

print("/* Tokenizer13a()(s), sacrebleu %s */" % sacrebleu.__version__)
tk = Tokenizer13a()
for s in TOK:
    print("    {%s, %s}," % (c(s), c(tk(s))))
print("/* s.lower() */")
for s in LOWER:
    print("    {%s, %s}," % (c(s), c(s.lower())))

CORPORA = [
    ("unicode", ["Le chat est sur le tapis.", "1,000.50 € — «cher» !", "我们今天很好。", "", "ΟΔΟΣ İstanbul"],
     [["Le chat était sur le tapis.", "1,000.50 € - « cher » !", "我们今天天气很好。", "vide", "οδός istanbul"]]),
    ("multi", ["the cat sat on the mat", "a quick brown fox", "x y z"],
     [["the cat is on the mat", "the quick brown fox", "x y"],
      ["there is a cat on the mat", "a fast brown fox", "x y z w"]]),
    ("short", ["a", "b c"], [["a", "b d"]]),
]
OPTS = [("default", {}, {}), ("lc", {"lowercase": True}, {"lowercase": True}),
        ("none", {"tokenize": "none"}, {"word_order": 2})]
print("/* corpus: BLEU(**b).corpus_score / CHRF(**c).corpus_score, .score repr and str() */")
for name, hyps, refs in CORPORA:
    for oname, bo, co in OPTS:
        b = BLEU(**bo).corpus_score(hyps, refs)
        ch = CHRF(**co).corpus_score(hyps, refs)
        print("    /* %s, %s */ {%d, %d, %d, %d, %r, %r, %s, %s}," % (
            name, oname, CORPORA.index((name, hyps, refs)), bo.get("lowercase", False),
            bo.get("tokenize") == "none", co.get("word_order", 0), b.score, ch.score, c(str(b)), c(str(ch))))
