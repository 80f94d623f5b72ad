#!/usr/bin/env python3
"""Build the bundled English->Spanish Bible parallel corpus.

Sources (both public domain, read through the SWORD command-line front end
``diatheke``):

  * engWEB2015eb - World English Bible        (Debian: sword-text-web)
  * spaRV1909eb  - Reina-Valera 1909          (Debian: sword-text-sparv)

Every book of the 66-book Protestant canon is exported verse by verse in
SWORD's raw ("internal") OSIS markup, the markup is stripped by this script
(see docs/bible-corpus.md for the traps this handles), the two texts are
aligned by verse reference and split by whole books into train/valid/test.

Usage:  scripts/make_bible_corpus.py --out data/bible/raw [--force]
        [--books Ruth,Jonah,...] [--jobs N]

Standard library only.  The output is deterministic for a given pair of
module versions; a sha256 over all output files is printed and recorded in
OUT/MANIFEST, which is written last (its presence means the set is complete).
"""

import argparse
import concurrent.futures
import hashlib
import html
import math
import os
import re
import shutil
import subprocess
import sys
import time
import unicodedata

from corpusio import combined_sha, read_manifest, sha256_file, write_atomic  # noqa: E402  (scripts/ is on sys.path)

VERSION = 1  # bump when the extraction rules change (invalidates MANIFEST)

EN_MODULE = "engWEB2015eb"
ES_MODULE = "spaRV1909eb"
MODULE_PACKAGE = {EN_MODULE: "sword-text-web", ES_MODULE: "sword-text-sparv"}

# (OSIS id, name diatheke prints with "-l en")
BOOKS = [
    ("Gen", "Genesis"), ("Exod", "Exodus"), ("Lev", "Leviticus"),
    ("Num", "Numbers"), ("Deut", "Deuteronomy"), ("Josh", "Joshua"),
    ("Judg", "Judges"), ("Ruth", "Ruth"), ("1Sam", "I Samuel"),
    ("2Sam", "II Samuel"), ("1Kgs", "I Kings"), ("2Kgs", "II Kings"),
    ("1Chr", "I Chronicles"), ("2Chr", "II Chronicles"), ("Ezra", "Ezra"),
    ("Neh", "Nehemiah"), ("Esth", "Esther"), ("Job", "Job"),
    ("Ps", "Psalms"), ("Prov", "Proverbs"), ("Eccl", "Ecclesiastes"),
    ("Song", "Song of Solomon"), ("Isa", "Isaiah"), ("Jer", "Jeremiah"),
    ("Lam", "Lamentations"), ("Ezek", "Ezekiel"), ("Dan", "Daniel"),
    ("Hos", "Hosea"), ("Joel", "Joel"), ("Amos", "Amos"),
    ("Obad", "Obadiah"), ("Jonah", "Jonah"), ("Mic", "Micah"),
    ("Nah", "Nahum"), ("Hab", "Habakkuk"), ("Zeph", "Zephaniah"),
    ("Hag", "Haggai"), ("Zech", "Zechariah"), ("Mal", "Malachi"),
    ("Matt", "Matthew"), ("Mark", "Mark"), ("Luke", "Luke"),
    ("John", "John"), ("Acts", "Acts"), ("Rom", "Romans"),
    ("1Cor", "I Corinthians"), ("2Cor", "II Corinthians"),
    ("Gal", "Galatians"), ("Eph", "Ephesians"), ("Phil", "Philippians"),
    ("Col", "Colossians"), ("1Thess", "I Thessalonians"),
    ("2Thess", "II Thessalonians"), ("1Tim", "I Timothy"),
    ("2Tim", "II Timothy"), ("Titus", "Titus"), ("Phlm", "Philemon"),
    ("Heb", "Hebrews"), ("Jas", "James"), ("1Pet", "I Peter"),
    ("2Pet", "II Peter"), ("1John", "I John"), ("2John", "II John"),
    ("3John", "III John"), ("Jude", "Jude"), ("Rev", "Revelation of John"),
]
BOOK_IDS = [b[0] for b in BOOKS]
BOOK_NAME = dict(BOOKS)

VALID_BOOKS = ["Ruth", "Mic", "Nah", "Zeph", "Col", "1Thess"]
TEST_BOOKS = ["Ezra", "Esth", "Lam", "Joel", "Hab", "Titus", "Phlm", "Jas",
              "1Pet", "2Pet", "1John", "2John", "3John", "Jude"]
SPLITS = ["train", "valid", "test"]
# Sanity ranges for the full build (pairs per split).
EXPECTED = {"train": (26000, 31000), "valid": (350, 700), "test": (900, 1500)}


def split_of(book):
    if book in VALID_BOOKS:
        return "valid"
    if book in TEST_BOOKS:
        return "test"
    return "train"


def die(msg, code=1):
    print("make_bible_corpus: error: " + msg, file=sys.stderr)
    sys.exit(code)


def log(msg):
    print(msg, flush=True)


# --------------------------------------------------------------------------
# diatheke
# --------------------------------------------------------------------------

def diatheke_env():
    env = dict(os.environ)
    env["LC_ALL"] = "C.UTF-8"   # diatheke output is UTF-8 regardless
    env.pop("LANGUAGE", None)
    return env


def check_diatheke():
    exe = shutil.which("diatheke")
    if exe is None:
        die("diatheke not found; install it with: apt-get install diatheke "
            "sword-text-web sword-text-sparv")
    try:
        out = subprocess.run([exe, "-b", "system", "-k", "modulelist"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=diatheke_env(), timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        die("could not run diatheke (%s); reinstall it with: apt-get install "
            "--reinstall diatheke" % e)
    have = set(re.findall(r"^(\S+) : ", out.decode("utf-8", "replace"), re.M))
    for mod in (EN_MODULE, ES_MODULE):
        if mod not in have:
            die("SWORD module %s not installed; install it with: apt-get "
                "install %s" % (mod, MODULE_PACKAGE[mod]))
    return exe


def module_versions():
    """Version strings from the modules' .conf files (for MANIFEST), so an
    upgraded module invalidates complete outputs.  Best effort."""
    dirs = []
    if os.environ.get("SWORD_PATH"):
        dirs.append(os.environ["SWORD_PATH"])
    dirs += [os.path.expanduser("~/.sword"), "/usr/share/sword",
             "/usr/local/share/sword"]
    out = []
    for mod in (EN_MODULE, ES_MODULE):
        ver = "unknown"
        for conf in [os.path.join(d, "mods.d", name + ".conf")
                     for d in dirs for name in (mod, mod.lower())]:
            try:
                with open(conf, encoding="utf-8", errors="replace") as f:
                    m = re.search(r"^Version=(\S+)", f.read(), re.M)
            except OSError:
                continue
            if m:
                ver = m.group(1)
                break
        out.append("%s-%s" % (mod, ver))
    return " ".join(out)


def run_diatheke(exe, module, book):
    # -f internal: the module's own OSIS markup, untouched by render filters.
    # -o fhsn: keep footnotes, headings, cross references and Strong's in
    # the markup, so that we (not the render filters) decide what to strip;
    # with headings switched off diatheke re-prints stale headings.
    # -l en: fixed English book names in the references we parse.
    cmd = [exe, "-b", module, "-f", "internal", "-o", "fhsn", "-l", "en",
           "-k", book]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=diatheke_env(), timeout=600)
    if p.returncode != 0:
        die("diatheke failed (%s): %s" % (" ".join(cmd),
                                          p.stderr.decode("utf-8", "replace")
                                          .strip()[:200]))
    return p.stdout.decode("utf-8")


# --------------------------------------------------------------------------
# Parsing diatheke's per-verse output
# --------------------------------------------------------------------------

def parse_entries(raw, module, book):
    """Return [(chapter, verse, prefix_markup, body_markup)] for one book.

    diatheke prints one entry per line as ``<preverse>NAME C:V: <text>``;
    the pre-verse part holds headings (psalm titles, section titles,
    paragraph milestones), the final line is ``(MODULE)``."""
    name = BOOK_NAME[book]
    ref = re.compile(r"^(.*?)(?:(?<=[\s>])|^)" + re.escape(name) +
                     r" (\d+):(\d+):(?: |$)(.*)$")
    entries = []
    for line in raw.split("\n"):
        if not line.strip() or line.strip() == "(%s)" % module:
            continue
        m = ref.match(line)
        if m:
            entries.append([int(m.group(2)), int(m.group(3)), m.group(1),
                            m.group(4)])
        elif entries:       # never seen in practice: a wrapped verse
            entries[-1][3] += "\n" + line
        else:
            die("unexpected diatheke output for %s %s: %r"
                % (module, book, line[:120]))
    if not entries:
        die("diatheke returned no verses for %s in %s (is the locale 'en' "
            "available?)" % (book, module))
    return entries


# --------------------------------------------------------------------------
# OSIS -> plain text
# --------------------------------------------------------------------------

TOKEN_RE = re.compile(r"<[^>]*>|[^<]+")
TAG_RE = re.compile(r"<\s*(/?)\s*([A-Za-z][\w:.-]*)([^>]*?)(/?)\s*>$")
ATTR_RE = re.compile(r'([\w:.-]+)\s*=\s*"([^"]*)"')

# Elements whose content is not verse text.
DROP = {"note", "title", "speaker", "reference", "catchWord", "rdg",
        "figure", "head", "header", "milestone"}
# Elements that separate words (line, paragraph, list structure).
STRUCT = {"l", "lg", "lb", "p", "div", "chapter", "verse", "item", "list",
          "table", "row", "cell", "cb", "pb"}
# Divisions whose start or end inside a verse means the verse text is over.
END_DIVS = {"book", "bookGroup", "glossary", "introduction", "colophon",
            "appendix", "back", "front"}

OPENING = set("“‘(¿¡«[\"")
CLOSING = set(",.;:!?”’)»]\"")

# ---- Spanish enclitics -------------------------------------------------
# In spaRV1909eb, words supplied by the translators are wrapped in
# <transChange type="added"> and abut the neighbouring <w> with no space,
# whether they are separate words ("siempre</w><transChange>es") or an
# enclitic pronoun split off its verb ("sáca</w><transChange>lo" =
# "sácalo").  We join only when the next word is a clitic pronoun chain and
# the previous word looks like a verb form that takes enclitics.
CLITIC_RE = re.compile(r"(?:me|te|se|nos|os|le|les|lo|los|la|las){1,3}")
ES_NOT_VERB = set("""
a á ó o u ú e é y ni que no si sí como cómo cuando cuándo cuanto cuánto
cuanta cuánta donde dónde de del al en con por para sin sobre entre hasta
desde tras ante bajo contra según mas más pues porque aunque ya aún sólo
solo también tampoco allí allá aquí acá así además jamás después antes
luego él ella ellos ellas yo tú mí ti nosotros vosotros me te se nos os le
les lo los la las un una unos unas uno el mi tu su mis tus sus este esta
esto estos estas ese esa eso esos esas aquel aquella quien quién quienes
cual cuál cuales qué todo toda todos todas cada otro otra otros otras muy
tan tanto mucho poco nunca siempre lugar mar altar mujer hogar par pilar
collar millar azar éste ésta esto éstos éstas ése ésa
ésos ésas aquél aquélla aquéllos aquéllas
dios jehová jesús cristo señor josué david moisés
""".split())
# Nouns ending like a plural imperative (-ad/-ed/-id).
ES_D_NOUNS = set("""
verdad ciudad voluntad mitad edad piedad maldad bondad heredad soledad
vanidad iniquidad santidad majestad potestad tempestad libertad amistad
enemistad humildad necesidad hermandad crueldad falsedad sed red pared
merced huésped césped david vid lid ardid
""".split())
ES_MONO_VERBS = set("di da dé dí he ha vi ve haz pon ten sal ven id oid "
                    "oíd dad ved sé fué fue dió vió".split())
ES_VOWEL_GROUP = re.compile(r"[aeiouáéíóúü]+", re.I)


def es_is_enclitic(prev_text, word, nxt):
    """Should `word` (last word so far) and `nxt` be written as one word?"""
    if not CLITIC_RE.fullmatch(nxt):
        return False
    low = word.lower()
    if not word.isalpha() or low in ES_NOT_VERB:
        return False
    # A capitalised word inside a sentence is a proper name.
    before = prev_text[:len(prev_text) - len(word)].rstrip()
    sentence_start = (not before) or before[-1] in ".:;?!¿¡“‘(«\""
    if word[0].isupper() and not sentence_start:
        return False
    if low in ES_MONO_VERBS:
        return True
    if re.search(r"(ar|er|ir|ír|ndo)$", low):
        return True              # infinitive / gerund
    if re.search(r"[aei]d$", low) and low not in ES_D_NOUNS and \
            not low.endswith("idad"):
        return True              # plural imperative: haced, sellad, oid
    m = re.search(r"[áéíóú]", low)
    if m:
        # Old orthography keeps/adds the accent on the verb before an
        # enclitic ("sáca"+"lo", "vió"+"lo").  A word already stressed on
        # the antepenultimate ("ejército") only takes a clitic if it ends
        # in one already ("concédase"+"le").
        after = len(ES_VOWEL_GROUP.findall(low[m.end():]))
        if after >= 2 and not re.search(
                r"(me|te|se|nos|os|le|les|lo|los|la|las)$", low):
            return False
        return True
    return False


LAST_WORD_RE = re.compile(r"(\w+)$")
FIRST_WORD_RE = re.compile(r"^(\w+)")


def join_decision(lang, acc, new, flags, stats):
    """Separator to put between accumulated text `acc` and text `new`."""
    left, right = acc[-1], new[0]
    if left.isspace() or right.isspace():
        return ""
    if "struct" in flags:
        return "" if right in CLOSING else " "
    if "drop" in flags:
        if (left.isalnum() or left in CLOSING) and \
           (right.isalnum() or right in OPENING):
            stats["space_after_removed_note"] += 1
            return " "
        return ""
    if left.isalnum() and right.isalnum():
        # Leaving a <transChange> never splits a word in these modules.
        if lang == "es" and "tc_end" not in flags:
            w = LAST_WORD_RE.search(acc).group(1)
            n = FIRST_WORD_RE.search(new).group(1)
            if es_is_enclitic(acc, w, n):
                stats["es_enclitic_joined"] += 1
                stats["joins"].append(w + "+" + n)
                return ""
        stats["space_between_glued_words_" + lang] += 1
        return " "
    if left in ",;:!?" and right.isalpha():
        stats["space_after_glued_punct"] += 1
        return " "
    return ""


def osis_to_text(markup, lang, stats):
    """Strip OSIS markup from one verse; return normalised plain text."""
    out = ""
    flags = set()
    drop_stack = []          # names of open elements being dropped
    for tok in TOKEN_RE.findall(markup):
        if tok.startswith("<"):
            if not drop_stack and (tok == "</w>" or tok.startswith("<w ")
                                   or tok == "<w>"):
                flags.add("inline")      # fast path: ~70% of all tags
                continue
            m = TAG_RE.match(tok)
            if not m:
                continue     # stray '<' fragment: ignore
            closing, name, attrs, selfclosing = m.groups()
            attr = dict(ATTR_RE.findall(attrs))
            # A chapter end, or a book / glossary division, after verse text
            # means the rest of the entry is not part of the verse (WEB
            # appends its glossary to Rev 22:21).
            if out.strip() and ((name == "chapter" and "eID" in attr) or
                                (name == "div" and
                                 attr.get("type") in END_DIVS)):
                break
            if drop_stack:
                if name in DROP and not selfclosing:
                    if closing:
                        if drop_stack and drop_stack[-1] == name:
                            drop_stack.pop()
                    else:
                        drop_stack.append(name)
                continue
            if name in DROP:
                if not closing and not selfclosing:
                    drop_stack.append(name)
                if name != "milestone":
                    flags.add("drop")
                else:
                    flags.add("struct")
            elif name in STRUCT:
                flags.add("struct")
            else:
                flags.add("inline")
                if name == "transChange" and closing:
                    flags.add("tc_end")
            continue
        if drop_stack:
            continue
        text = html.unescape(tok)
        if not text:
            continue
        if out and flags:
            out += join_decision(lang, out, text, flags, stats)
        out += text
        flags = set()
    text = unicodedata.normalize("NFC", out)
    return " ".join(text.split())


# --------------------------------------------------------------------------
# Psalm titles
# --------------------------------------------------------------------------

HEBREW_LETTERS = set("""ALEPH ALEF BETH BET GIMEL GHIMEL DALETH DALET HE HE
VAU VAV WAW ZAIN ZAYIN HETH CHETH HET TETH TET JOD YOD YODH CAPH KAPH KAF
KAPF LAMED LAMEDH MEM NUN SAMECH SAMEKH AIN AYIN PE PHE TZADDI TZADHE
TSADE ZADE KOPH COPH QOPH QOF RESH SIN SCHIN SHIN TAU TAV""".split())
DROPCAP_RE = re.compile(r"(?:^|(?<=\s))[¡¿(«“]*"          # opening punct.
                        r"(?:[A-ZÁÉÍÓÚÑÜ]\s+)?"              # "A TI", "Y ..."
                        r"[A-ZÁÉÍÓÚÑÜ]{2,}(?![a-záéíóúñü])")  # "OH", "TEN"
ACROSTIC_RE = re.compile(r"^([A-Z]+)[.:]?\s+")


def strip_es_psalm_title(text):
    """RV1909 has the psalm title as plain text at the start of verse 1
    (WEB has it as a <title>, which we drop).  The verse proper starts with
    the chapter's capitalised first word ("Salmo de David. TEN piedad ...").
    Returns the verse without the title, or None if it cannot be found."""
    m = ACROSTIC_RE.match(text)
    if m and m.group(1) in HEBREW_LETTERS:
        return text[m.end():]            # Psalm 119: "BETH ¿Con qué ..."
    m = DROPCAP_RE.search(text)
    if m is None:
        return None
    return text[m.start():]


# --------------------------------------------------------------------------
# Epistle subscriptions
# --------------------------------------------------------------------------

# RV1909 (like the KJV) ends the Pauline epistles and Hebrews with a
# subscription ("Amén. Fué escrita de Corinto á los Romanos, ...") that is
# not marked up as such; WEB has none.
COLOPHON_BOOKS = {"Rom", "1Cor", "2Cor", "Gal", "Eph", "Phil", "Col",
                  "1Thess", "2Thess", "1Tim", "2Tim", "Titus", "Phlm", "Heb"}
COLOPHON_RE = re.compile(r"^(.*\bAmén\.)\s+(\S.*)$")
COLOPHON_WORD_RE = re.compile(r"\b(?:[Ee]scrita|[Ee]nviada)\b")


def strip_es_colophon(text):
    m = COLOPHON_RE.match(text)
    if m and COLOPHON_WORD_RE.search(m.group(2)):
        return m.group(1)
    return text


# --------------------------------------------------------------------------
# Length-based alignment check
# --------------------------------------------------------------------------
# Within chapters whose verse sets agree, RV1909 sometimes still follows a
# different verse division: text is shifted by one or more verses (e.g.
# Num 13, 1 Sam 24, Jonah 2, where the Hebrew numbering was squeezed into
# KJV verse numbers by merging and splitting verses) or a phrase sits on the
# other side of a verse boundary (1 Kgs 18:33-34).  A Gale-Church style
# dynamic programme over verse lengths finds these: beads 1-1, 1-2, 2-1,
# 2-2, 1-0, 0-1, cost = |log(es/en) - MU| / B per bead (Laplace) plus a
# penalty per non 1-1 bead.  Chapters whose best path contains a shift bead
# (1-2, 2-1, 1-0, 0-1) and beats the plain verse-by-verse alignment by
# SHIFT_MARGIN are dropped whole; verses in 2-2 beads are dropped alone.
# Constants were fitted on the full corpus (median / mean absolute
# deviation of the log length ratio); they do not depend on --books.
ALIGN_MU = -0.042
ALIGN_B = 0.107
ALIGN_PEN = {(1, 1): 0.0, (1, 2): 4.0, (2, 1): 4.0, (2, 2): 5.5,
             (1, 0): 8.0, (0, 1): 8.0}
ALIGN_BAND = 4
SHIFT_MARGIN = 5.0
# Single pairs whose length ratio is this far off (cost 5 = a factor of
# about 1.7 from the typical ratio) are textual variants that one side
# lacks (Rom 14:23 doxology, Matt 27:35, Acts 9:6) or undetected
# re-divisions; they are dropped.
OUTLIER_COST = 5.0


def bead_cost(le, ls):
    return abs(math.log((ls + 10.0) / (le + 10.0)) - ALIGN_MU) / ALIGN_B


def check_alignment(en_lens, es_lens):
    """-> (margin, shift, [indices of verses in 2-2 beads])"""
    n = len(en_lens)
    inf = float("inf")
    cost = {(0, 0): 0.0}
    back = {}
    for i in range(n + 1):
        for j in range(max(0, i - ALIGN_BAND), min(n, i + ALIGN_BAND) + 1):
            if i == 0 and j == 0:
                continue
            best, arg = inf, None
            for (a, b), pen in ALIGN_PEN.items():
                prev = cost.get((i - a, j - b))
                if prev is None:
                    continue
                c = prev + pen
                if a and b:
                    c += bead_cost(sum(en_lens[i - a:i]),
                                   sum(es_lens[j - b:j]))
                if c < best:
                    best, arg = c, (a, b)
            if arg is not None:
                cost[(i, j)] = best
                back[(i, j)] = arg
    diag = sum(bead_cost(a, b) for a, b in zip(en_lens, es_lens))
    margin = diag - cost[(n, n)]
    shift, redivided = False, []
    i = j = n
    while i or j:
        a, b = back[(i, j)]
        if (a, b) == (2, 2):
            redivided += [i - 2, i - 1]
        elif (a, b) != (1, 1):
            shift = True
        i, j = i - a, j - b
    return margin, shift, sorted(redivided)


# --------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------

def extract(raw, module, book, lang, stats):
    """-> ({(ch, v): text}, {(ch, v) preceded by a psalm title})"""
    verses = {}
    titled = set()
    for ch, v, prefix, body in parse_entries(raw, module, book):
        if re.search(r'<title\b[^>]*type="psalm"', prefix):
            titled.add((ch, v))
        verses[(ch, v)] = osis_to_text(body, lang, stats)
    return verses, titled


def new_stats():
    return {"space_after_removed_note": 0, "es_enclitic_joined": 0,
            "space_between_glued_words_en": 0,
            "space_between_glued_words_es": 0,
            "space_after_glued_punct": 0, "joins": []}


def build(books, jobs):
    exe = check_diatheke()
    stats = new_stats()
    tasks = [(m, b) for b in books for m in (EN_MODULE, ES_MODULE)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        raws = list(ex.map(lambda t: run_diatheke(exe, t[0], t[1]), tasks))
    raw = dict(zip(tasks, raws))

    pairs = {s: [] for s in SPLITS}
    report = {"chapters": 0, "versification": [], "shifted": [],
              "redivided": [], "outliers": [], "empty": 0, "title_unsplit": [],
              "titles_stripped": 0, "colophons": 0, "books": []}
    for book in books:
        en, en_titled = extract(raw[(EN_MODULE, book)], EN_MODULE, book,
                                "en", stats)
        es, _ = extract(raw[(ES_MODULE, book)], ES_MODULE, book, "es", stats)
        if not any(en.values()) or not any(es.values()):
            continue                     # book missing from one module
        report["books"].append(book)
        last_es = max(k for k, t in es.items() if t)
        for ch in sorted({c for c, _ in en} | {c for c, _ in es}):
            report["chapters"] += 1
            en_set = {v for (c, v), t in en.items() if c == ch and t}
            es_set = {v for (c, v), t in es.items() if c == ch and t}
            if en_set != es_set:
                report["versification"].append(
                    (book, ch, sorted(en_set ^ es_set)))
                continue
            rows = []
            for v in sorted(en_set):
                ref = "%s %d:%d" % (book, ch, v)
                e, s = en[(ch, v)], es[(ch, v)]
                if book == "Ps" and (ch, v) in en_titled:
                    s2 = strip_es_psalm_title(s)
                    if s2 is None:
                        report["title_unsplit"].append(ref)
                        continue
                    if s2 != s:
                        report["titles_stripped"] += 1
                    s = s2
                if book in COLOPHON_BOOKS and (ch, v) == last_es:
                    s2 = strip_es_colophon(s)
                    if s2 != s:
                        report["colophons"] += 1
                    s = s2
                if not e or not s:
                    report["empty"] += 1
                    continue
                rows.append((ref, e, s))
            margin, shift, redivided = check_alignment(
                [len(r[1]) for r in rows], [len(r[2]) for r in rows])
            if shift and margin >= SHIFT_MARGIN:
                report["shifted"].append((book, ch, margin))
                continue
            for k in redivided:
                report["redivided"].append(rows[k][0])
            drop = set(redivided)
            for k, (ref, e, s) in enumerate(rows):
                if k not in drop and bead_cost(len(e), len(s)) > OUTLIER_COST:
                    report["outliers"].append(ref)
                    drop.add(k)
            pairs[split_of(book)] += [r for k, r in enumerate(rows)
                                      if k not in drop]
    return pairs, report, stats


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

def out_files():
    return ["%s.%s" % (s, ext) for s in SPLITS for ext in ("en", "es", "ref")]



def manifest_params(books):
    return "version=%d modules=%s books=%s" % (
        VERSION, module_versions().replace(" ", ","), ",".join(books))



def is_complete(out, books):
    info = read_manifest(out)
    if not info or info.get("params") != manifest_params(books):
        return None
    if sorted(info["files"]) != sorted(out_files()):
        return None
    for name, digest in info["files"].items():
        p = os.path.join(out, name)
        if not os.path.isfile(p) or sha256_file(p) != digest:
            return None
    return info



def write_outputs(out, pairs, books, counts_line):
    os.makedirs(out, exist_ok=True)
    manifest = os.path.join(out, "MANIFEST")
    if os.path.exists(manifest):
        os.unlink(manifest)            # set is incomplete until re-written
    digests = {}
    for s in SPLITS:
        cols = {"ref": [], "en": [], "es": []}
        for ref, e, sp in pairs[s]:
            for k, t in (("ref", ref), ("en", e), ("es", sp)):
                assert "\n" not in t and "\r" not in t and t == t.strip()
                cols[k].append(t)
        for ext in ("en", "es", "ref"):
            data = "".join(t + "\n" for t in cols[ext]).encode("utf-8")
            name = "%s.%s" % (s, ext)
            digests[name] = hashlib.sha256(data).hexdigest()
            write_atomic(os.path.join(out, name), data)
    total = combined_sha(digests)
    text = ["# params: " + manifest_params(books),
            "# counts: " + counts_line,
            "# sha256: " + total]
    text += ["%s  %s" % (digests[n], n) for n in sorted(digests)]
    write_atomic(manifest, ("\n".join(text) + "\n").encode("utf-8"))
    return total


def resolve_books(spec):
    if not spec:
        return list(BOOK_IDS)
    by_key = {}
    for osis, name in BOOKS:
        for k in (osis, name, name.replace(" ", "")):
            by_key[k.lower()] = osis
    want = set()
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        if item.lower() not in by_key:
            die("unknown book %r (use OSIS ids such as Gen, Ruth, 1John)"
                % item)
        want.add(by_key[item.lower()])
    return [b for b in BOOK_IDS if b in want]


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Build the WEB/RV1909 English->Spanish Bible corpus.")
    ap.add_argument("--out", required=True,
                    help="output directory (e.g. data/bible/raw)")
    ap.add_argument("--force", action="store_true",
                    help="rebuild even if complete outputs exist")
    ap.add_argument("--books", default="",
                    help="comma-separated OSIS book ids to restrict to "
                         "(for quick tests); default: all 66 books")
    ap.add_argument("--jobs", type=int, default=2,
                    help="parallel diatheke processes (default 2)")
    ap.add_argument("--verbose", action="store_true",
                    help="list dropped chapters and enclitic joins")
    args = ap.parse_args(argv)
    books = resolve_books(args.books)
    if not books:
        die("--books selected no books")
    full = (books == BOOK_IDS)

    if not args.force:
        info = is_complete(args.out, books)
        if info:
            log("outputs in %s are complete (%s); skipping (use --force to "
                "rebuild)" % (args.out, info.get("counts", "")))
            log("sha256 %s" % info.get("sha256", ""))
            return 0

    t0 = time.time()
    pairs, report, stats = build(books, max(1, args.jobs))
    n = {s: len(pairs[s]) for s in SPLITS}
    counts_line = " ".join("%s=%d" % (s, n[s]) for s in SPLITS)
    log("books: %d  chapters: %d" % (len(report["books"]),
                                      report["chapters"]))
    log("chapters dropped for versification mismatch (verse sets differ): "
        "%d" % len(report["versification"]))
    if args.verbose:
        for b, c, diff in report["versification"]:
            log("  %s %d (verses in one text only: %s)"
                % (b, c, ",".join(map(str, diff))))
    log("chapters dropped for shifted verse division (length check): %d"
        % len(report["shifted"]))
    if args.verbose:
        for b, c, margin in report["shifted"]:
            log("  %s %d (margin %.1f)" % (b, c, margin))
    log("verses dropped at re-divided verse boundaries: %d %s"
        % (len(report["redivided"]), " ".join(report["redivided"])))
    log("verses dropped as length-ratio outliers: %d %s"
        % (len(report["outliers"]), " ".join(report["outliers"])))
    log("RV1909 psalm titles stripped: %d; unsplittable (dropped): %d %s; "
        "epistle subscriptions stripped: %d"
        % (report["titles_stripped"], len(report["title_unsplit"]),
           " ".join(report["title_unsplit"]), report["colophons"]))
    log("verses dropped as empty on one side: %d" % report["empty"])
    log("markup: spaces inserted after removed notes %d, between glued "
        "words en %d / es %d, after glued punctuation %d; Spanish enclitics "
        "joined %d" % (stats["space_after_removed_note"],
                       stats["space_between_glued_words_en"],
                       stats["space_between_glued_words_es"],
                       stats["space_after_glued_punct"],
                       stats["es_enclitic_joined"]))
    if args.verbose:
        log("  enclitic joins: " + " ".join(stats["joins"]))
    log("pairs: " + counts_line)
    if full:
        for s in SPLITS:
            lo, hi = EXPECTED[s]
            if not lo <= n[s] <= hi:
                die("%s has %d pairs, expected %d..%d: module versions "
                    "changed?" % (s, n[s], lo, hi))
    total = write_outputs(args.out, pairs, books, counts_line)
    log("wrote %s (%.1f s)" % (", ".join(os.path.join(args.out, f)
                                         for f in out_files()),
                               time.time() - t0))
    log("sha256 %s" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
