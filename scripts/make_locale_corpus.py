#!/usr/bin/env python3
"""Build a one-to-many English->{de,fr,es,it,...} corpus from gettext catalogs.

Source: the compiled message catalogs that Debian packages install under
/usr/share/locale/<lang>/LC_MESSAGES/*.mo -- software messages (menus,
dialogs, error messages, country and language names) translated by people.
The .mo binary format is parsed here directly (no msgunfmt needed).

Usage:  scripts/make_locale_corpus.py [--out data/locale/raw] [--force]
        [--langs de,fr,es,it] [--locale-dir /usr/share/locale]

For every language xx it writes OUT/{train,valid,test}.en-xx.{en,xx}, one
message per line, and last OUT/MANIFEST (counts and sha256 of every file;
its presence means the set is complete).  Standard library only.  The
output is deterministic for a given set of installed catalogs: everything
is sorted, and the train/valid/test split is a hash of the (normalised)
English message, so a message lands in the same split for every language.
See docs/locale-corpus.md for the cleaning rules.
"""

import argparse
import collections
import hashlib
import os
import re
import struct
import sys
import time

from corpusio import combined_sha, read_manifest, sha256_file, write_atomic  # noqa: E402  (scripts/ is on sys.path)

VERSION = 1  # bump when the extraction rules change (invalidates MANIFEST)

DEFAULT_LANGS = "de,fr,es,it"
SPLITS = ["train", "valid", "test"]
# Split by hash bucket out of 10000: [0, 200) valid, [200, 500) test.
VALID_BUCKETS, TEST_BUCKETS = 200, 300
VALID_CAP, TEST_CAP = 500, 1000
MIN_LEN, MAX_LEN = 2, 200

MO_MAGIC = 0x950412DE


def die(msg, code=1):
    print("make_locale_corpus: error: " + msg, file=sys.stderr)
    sys.exit(code)


def log(msg):
    print(msg, flush=True)


# --------------------------------------------------------------------------
# .mo parsing
# --------------------------------------------------------------------------

class MoError(Exception):
    pass


def read_mo(data):
    """Parse a GNU .mo file; return [(msgid_bytes, msgstr_bytes)] in file
    order.  Both may contain \\x04 (context separator) and \\0 (plural
    forms).  Raises MoError on a malformed file."""
    if len(data) < 28:
        raise MoError("too short for a .mo header")
    for endian in ("<", ">"):
        if struct.unpack(endian + "I", data[:4])[0] == MO_MAGIC:
            break
    else:
        raise MoError("bad magic")
    rev, n, off_o, off_t = struct.unpack(endian + "4I", data[4:20])
    if rev >> 16 > 1:
        raise MoError("unsupported major revision %d" % (rev >> 16))
    if n > len(data) // 8:
        raise MoError("string count %d exceeds file size" % n)

    def table(off):
        if off + 8 * n > len(data):
            raise MoError("string table out of range")
        return struct.unpack(endian + "%dI" % (2 * n), data[off:off + 8 * n])

    to, tt = table(off_o), table(off_t)
    out = []
    for i in range(n):
        lo, oo, lt, ot = to[2 * i], to[2 * i + 1], tt[2 * i], tt[2 * i + 1]
        if oo + lo > len(data) or ot + lt > len(data):
            raise MoError("string %d out of range" % i)
        out.append((data[oo:oo + lo], data[ot:ot + lt]))
    return out


CHARSET_RE = re.compile(rb"charset=([A-Za-z0-9_.:-]+)", re.I)
NPLURALS_RE = re.compile(rb"nplurals\s*=\s*(\d+)", re.I)


def catalog_entries(path, stats):
    """Return ([(msgid, msgstr)], uses_mnemonics) for one catalog: header
    skipped, context stripped, plural forms paired (see pair_plurals).  An
    unreadable catalog is counted in stats and yields nothing."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        raw = read_mo(data)
    except (OSError, MoError) as e:
        stats["bad_files"].append("%s (%s)" % (path, e))
        return [], False
    charset, nplurals = "utf-8", None
    for mid, mstr in raw:
        if mid == b"":
            m = CHARSET_RE.search(mstr)
            if m and m.group(1).upper() != b"CHARSET":
                charset = m.group(1).decode("ascii")
            m = NPLURALS_RE.search(mstr)
            if m:
                nplurals = int(m.group(1))
            break
    try:
        "".encode(charset)
    except LookupError:
        stats["bad_files"].append("%s (unknown charset %s)" % (path, charset))
        return [], False
    pairs = []
    for mid, mstr in raw:
        if mid == b"":
            continue                       # header entry
        stats["entries"] += 1
        try:
            mid = mid.decode(charset)
            mstr = mstr.decode(charset)
        except UnicodeDecodeError:
            stats["undecodable"] += 1
            continue
        if "\x04" in mid:                  # msgctxt \x04 msgid
            mid = mid.split("\x04", 1)[1]
            stats["context"] += 1
        if "\0" in mid:
            stats["plural"] += 1
            pairs += pair_plurals(mid, mstr, nplurals, stats)
        else:
            pairs.append((mid, mstr))
    return pairs, uses_mnemonics([m for m, _ in pairs])


def pair_plurals(mid, mstr, nplurals, stats):
    """English singular/plural with the translation's forms.  The singular
    always pairs with form 0.  The English plural pairs with form 1 only when
    the language has exactly two forms (de/fr/es/it/pt/nl...): with three or
    more (ru, pl, ...) form 1 is a 'few' form, not the general plural."""
    sing, plur = mid.split("\0", 1)
    plur = plur.split("\0", 1)[0]
    forms = mstr.split("\0")
    yield sing, forms[0]
    if nplurals == 2 and len(forms) >= 2:
        stats["plural_second"] += 1
        yield plur, forms[1]


# --------------------------------------------------------------------------
# Cleaning
# --------------------------------------------------------------------------

WS_RE = re.compile(r"\s+")
# A CJK-style accelerator appended in parentheses: "ファイル(_F)".
PAREN_ACCEL_RE = re.compile(r"\s?\(_[A-Za-z0-9]\)")
# GTK mnemonic: '_' before a letter, not after another '_' ("__" is a
# literal underscore).  Word-initial ones ("_File", "Save _As") are
# unambiguous; mid-word ones ("Sa_ve") look like identifiers ("new_name").
UNDERSCORE_RE = re.compile(r"(?<!_)_(?=[^\W\d_])")
WORD_START_US_RE = re.compile(r"(?:^|(?<=[\s\"'(\[]))_[^\W\d_]")
# Qt/KDE/wx accelerator: '&' before a letter at the start of a word, not an
# entity ("&amp;") and not inside a word ("AT&T").
AMP_RE = re.compile(r"(?<![\w&])&(?=[^\W\d_])")
ENTITY_RE = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#x[0-9A-Fa-f]+);")
IDENT_RE = re.compile(r"[\w&]+")
HAS_LETTER_RE = re.compile(r"[^\W\d_]")
# printf conversions ("%s", "%-10.3lu", "%1$s", binutils' "%pB"); they stay
# in the data but do not count as letters.
PRINTF_RE = re.compile(r"%(?:\d+\$)?[-+ #0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?"
                       r"(?:hh|h|ll|l|L|q|j|z|t|p)?[A-Za-z%]")
# A catalog uses GTK mnemonics when at least this share of its messages
# has a word-initial '_' marker (gtk30: 11%, avahi: 2%; postgres: 0.02%).
MNEMONIC_SHARE = 0.01


def uses_mnemonics(msgids):
    n = sum(1 for m in msgids if WORD_START_US_RE.search(m))
    return n >= 2 and n >= MNEMONIC_SHARE * len(msgids)


def _candidates(regex, text, other):
    """Marker positions in text, minus those inside an entity, inside a
    token that also occurs verbatim on the other side and has a marker
    character inside it (an identifier such as "GTK_THEME" or
    "max_connections", or "AT&T"), and mid-word '_' before a capital
    ("KP_Insert", "Page_Down": key and identifier names, not mnemonics)."""
    if not regex.search(text):
        return []
    protected = set()
    for m in ENTITY_RE.finditer(text):
        protected.update(range(m.start(), m.end()))
    shared = set(IDENT_RE.findall(other))
    for m in IDENT_RE.finditer(text):
        tok = m.group(0)
        if tok in shared and ("_" in tok[1:] or "&" in tok[1:]):
            protected.update(range(m.start(), m.end()))
    out = []
    for m in regex.finditer(text):
        i = m.start()
        if i in protected:
            continue
        if text[i] == "_" and i > 0 and text[i - 1].isalnum() and \
                text[i + 1].isupper():
            continue
        out.append(i)
    return out


def _remove(text, positions):
    for i in sorted(positions, reverse=True):
        text = text[:i] + text[i + 1:]
    return text


def strip_accels(en, xx, mnemonics):
    """Remove keyboard-accelerator markers from both sides of a pair;
    return (en, xx, markers removed).

    '&' before a letter at the start of a word ("&Open") is removed
    anywhere (it is rare here: Debian's catalogs are GTK and CLI ones).
    '_' markers are removed only in catalogs that use GTK mnemonics
    (uses_mnemonics), and on one side only when that side has exactly one
    candidate and either the other side has one too ("Sa_ve" / "_Speichern")
    or the marker starts a word ("_File" / "Datei").  So identifiers survive
    ("KP_Delete" / "Entf (Nmblck)", psql's "new_name" / "neuer_Name").  In
    a mnemonic catalog, a side that keeps a word-initial marker after this
    ("_Ind_ice") makes the pair unusable: (None, None, n)."""
    n = 0
    ae, ax = _candidates(AMP_RE, en, xx), _candidates(AMP_RE, xx, en)
    if ae or ax:
        en, xx, n = _remove(en, ae), _remove(xx, ax), len(ae) + len(ax)
    if not mnemonics:
        return en, xx, n
    en2, xx2 = PAREN_ACCEL_RE.sub("", en), PAREN_ACCEL_RE.sub("", xx)
    n += (en2 != en) + (xx2 != xx)
    en, xx = en2, xx2
    ue, ux = _candidates(UNDERSCORE_RE, en, xx), \
        _candidates(UNDERSCORE_RE, xx, en)

    def ok(mine, theirs, text):
        if len(mine) != 1:
            return False
        if len(theirs) == 1:
            return True
        return bool(WORD_START_US_RE.match(text, mine[0]))

    se, sx = ok(ue, ux, en), ok(ux, ue, xx)
    if se:
        en = _remove(en, ue)
    if sx:
        xx = _remove(xx, ux)
    if WORD_START_US_RE.search(en) or WORD_START_US_RE.search(xx):
        return None, None, n        # markers we cannot place ("_Ind_ice")
    return en, xx, n + se + sx


CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")   # Unicode category Cc


def has_control(text):
    return CONTROL_RE.search(text) is not None


def clean_pair(en, xx, mnemonics, stats):
    """Return the cleaned (en, xx) or None, counting the reason."""
    if not xx.strip():
        stats["drop_untranslated"] += 1
        return None
    en2, xx2, n = strip_accels(en, xx, mnemonics)
    stats["accels_stripped"] += n
    if en2 is None:
        stats["drop_accel"] += 1
        return None
    en2 = WS_RE.sub(" ", en2).strip()
    xx2 = WS_RE.sub(" ", xx2).strip()
    if en2 == xx2:
        stats["drop_untranslated"] += 1
        return None
    if has_control(en2) or has_control(xx2):
        stats["drop_control_chars"] += 1
        return None
    if not HAS_LETTER_RE.search(PRINTF_RE.sub("", en2)):
        stats["drop_no_letters"] += 1
        return None
    if not (MIN_LEN <= len(en2) <= MAX_LEN and MIN_LEN <= len(xx2) <= MAX_LEN):
        stats["drop_length"] += 1
        return None
    return en2, xx2


# --------------------------------------------------------------------------
# Catalog discovery
# --------------------------------------------------------------------------

def find_catalogs(locale_dir, lang):
    """Sorted catalog paths of one language.  Symlinked aliases
    (iso_639.mo -> iso_639-2.mo) are read once, under the real file's name
    when it is in the same directory."""
    d = os.path.join(locale_dir, lang, "LC_MESSAGES")
    try:
        names = sorted(n for n in os.listdir(d) if n.endswith(".mo"))
    except OSError:
        return []
    by_real = {}
    for n in names:
        p = os.path.join(d, n)
        if not os.path.isfile(p):
            continue
        r = os.path.realpath(p)
        if r not in by_real or not os.path.islink(p):
            if r not in by_real or os.path.islink(by_real[r]):
                by_real[r] = p
    return sorted(by_real.values())


def package_owners(paths):
    """Map catalog path -> Debian package from dpkg's file lists (best
    effort; paths dpkg does not know map to None)."""
    want = set(paths)
    real = {os.path.realpath(p): p for p in paths}
    owner = {}
    info = "/var/lib/dpkg/info"
    try:
        lists = sorted(n for n in os.listdir(info) if n.endswith(".list"))
    except OSError:
        return owner
    for name in lists:
        pkg = name[:-5].split(":", 1)[0]
        try:
            with open(os.path.join(info, name), "rb") as f:
                for line in f:
                    if not line.endswith(b".mo\n") or b"/LC_MESSAGES/" \
                            not in line:
                        continue
                    p = line[:-1].decode("utf-8", "replace")
                    if p in want:
                        owner[p] = pkg
                    else:
                        q = real.get(os.path.realpath(p))
                        if q is not None:
                            owner.setdefault(q, pkg)
        except OSError:
            continue
    return owner


def inputs_fingerprint(catalogs):
    h = hashlib.sha256()
    for p in catalogs:
        st = os.stat(p)
        h.update(("%s %d %d\n" % (p, st.st_size, int(st.st_mtime))).encode())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------

NON_ALNUM_RE = re.compile(r"[\W_]+")
_BUCKETS = {}


def split_key(en):
    """Near-duplicates ("Open", "Open...", "open") share a split."""
    return NON_ALNUM_RE.sub("", en.casefold()) or en


def bucket(en):
    """(bucket in [0, 10000), sha256 digest) of an English message; the
    same for every language."""
    r = _BUCKETS.get(en)
    if r is None:
        d = hashlib.sha256(split_key(en).encode("utf-8")).digest()
        r = _BUCKETS[en] = (int.from_bytes(d[:8], "big") % 10000, d)
    return r


def build_lang(catalogs, stats, contributing):
    """All cleaned pairs of one language -> {en: xx}, one target each.
    Catalogs that yield at least one pair are added to `contributing`."""
    counts = collections.Counter()
    for path in catalogs:
        entries, mnemonics = catalog_entries(path, stats)
        if mnemonics:
            stats["mnemonic_catalogs"] += 1
        for en, xx in entries:
            p = clean_pair(en, xx, mnemonics, stats)
            if p is not None:
                counts[p] += 1
                stats["pairs_cleaned"] += 1
                contributing.add(path)
    by_en = {}
    for (en, xx), c in counts.items():
        best = by_en.get(en)
        if best is None or (-c, xx) < (-best[1], best[0]):
            by_en[en] = (xx, c)
    stats["distinct_pairs"] = len(counts)
    stats["ambiguous_en"] = len(counts) - len(by_en)
    return {en: xx for en, (xx, _) in by_en.items()}


def split_lang(table):
    """{en: xx} -> {split: [(en, xx)]}, sorted; valid/test capped by taking
    the messages with the smallest hash (the rest of those buckets is
    dropped, never moved to train, so no message crosses splits)."""
    parts = {s: [] for s in SPLITS}
    for en, xx in table.items():
        b, d = bucket(en)
        s = ("valid" if b < VALID_BUCKETS else
             "test" if b < VALID_BUCKETS + TEST_BUCKETS else "train")
        parts[s].append((d, en, xx))
    capped = 0
    for s, cap in (("valid", VALID_CAP), ("test", TEST_CAP)):
        parts[s].sort()
        capped += max(0, len(parts[s]) - cap)
        parts[s] = parts[s][:cap]
    return {s: sorted((en, xx) for _, en, xx in parts[s]) for s in SPLITS}, \
        capped


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------

def out_files(langs):
    return ["%s.en-%s.%s" % (s, l, side)
            for l in langs for s in SPLITS for side in ("en", l)]




def is_complete(out, params, langs):
    info = read_manifest(out)
    if not info or info.get("params") != params:
        return None
    if sorted(info["files"]) != sorted(out_files(langs)):
        return None
    for name, digest in info["files"].items():
        p = os.path.join(out, name)
        if not os.path.isfile(p) or sha256_file(p) != digest:
            return None
    return info




def write_outputs(out, langs, parts, params, counts_line):
    os.makedirs(out, exist_ok=True)
    manifest = os.path.join(out, "MANIFEST")
    if os.path.exists(manifest):
        os.unlink(manifest)            # set is incomplete until re-written
    digests = {}
    for l in langs:
        for s in SPLITS:
            for side, col in (("en", 0), (l, 1)):
                lines = []
                for pair in parts[l][s]:
                    t = pair[col]
                    assert t and "\n" not in t and t == t.strip()
                    lines.append(t + "\n")
                data = "".join(lines).encode("utf-8")
                name = "%s.en-%s.%s" % (s, l, side)
                digests[name] = hashlib.sha256(data).hexdigest()
                write_atomic(os.path.join(out, name), data)
    total = combined_sha(digests)
    text = ["# params: " + params,
            "# counts: " + counts_line,
            "# sha256: " + total]
    text += ["%s  %s" % (digests[n], n) for n in sorted(digests)]
    write_atomic(manifest, ("\n".join(text) + "\n").encode("utf-8"))
    return total


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Build the English->many corpus from gettext catalogs.")
    ap.add_argument("--out", default="data/locale/raw",
                    help="output directory (default data/locale/raw)")
    ap.add_argument("--langs", default=DEFAULT_LANGS,
                    help="target languages, names of directories under "
                         "--locale-dir (default %s)" % DEFAULT_LANGS)
    ap.add_argument("--locale-dir", default="/usr/share/locale",
                    help="where the catalogs are (default /usr/share/locale)")
    ap.add_argument("--min-train", type=int, default=1000,
                    help="fail if a language gets fewer training pairs "
                         "(default 1000)")
    ap.add_argument("--force", action="store_true",
                    help="rebuild even if complete outputs exist")
    args = ap.parse_args(argv)

    langs = [l.strip() for l in args.langs.split(",") if l.strip()]
    if not langs:
        die("--langs selected no languages")
    for l in langs:
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_@-]{0,14}", l) or l == "en":
            die("bad target language %r" % l)
    if len(set(langs)) != len(langs):
        die("--langs lists a language twice")
    if not os.path.isdir(args.locale_dir):
        die("%s does not exist" % args.locale_dir)

    catalogs = {l: find_catalogs(args.locale_dir, l) for l in langs}
    for l in langs:
        if not catalogs[l]:
            die("no catalogs in %s/%s/LC_MESSAGES (packages' translations "
                "missing? check for 'path-exclude=/usr/share/locale' in "
                "/etc/dpkg/dpkg.cfg.d/)" % (args.locale_dir, l))
    every = sorted(p for l in langs for p in catalogs[l])
    params = "version=%d langs=%s inputs=%s" % (
        VERSION, ",".join(langs), inputs_fingerprint(every))

    if not args.force:
        info = is_complete(args.out, params, langs)
        if info:
            log("outputs in %s are complete (%s); skipping (use --force to "
                "rebuild)" % (args.out, info.get("counts", "")))
            log("sha256 %s" % info.get("sha256", ""))
            return 0

    t0 = time.time()
    owners = package_owners(every)
    parts, counts = {}, []
    contributing = set()
    for l in langs:
        stats = collections.Counter()
        stats["bad_files"] = []
        table = build_lang(catalogs[l], stats, contributing)
        parts[l], capped = split_lang(table)
        n = {s: len(parts[l][s]) for s in SPLITS}
        counts.append("%s:%d/%d/%d" % (l, n["train"], n["valid"], n["test"]))
        log("en-%s: %d catalogs, %d entries (%d with context, %d plural), "
            "%d cleaned pairs, %d distinct, %d English messages "
            "(%d had competing translations) -> train %d valid %d test %d "
            "(%d dropped by the valid/test caps)"
            % (l, len(catalogs[l]), stats["entries"], stats["context"],
               stats["plural"], stats["pairs_cleaned"],
               stats["distinct_pairs"], len(table), stats["ambiguous_en"],
               n["train"], n["valid"], n["test"], capped))
        log("  dropped: untranslated/identical %d, too long/short %d, no "
            "letters in English %d, control characters %d, undecodable %d, "
            "unplaceable accelerators %d; "
            "accelerator markers removed %d (%d catalogs with GTK mnemonics)"
            % (stats["drop_untranslated"], stats["drop_length"],
               stats["drop_no_letters"], stats["drop_control_chars"],
               stats["undecodable"], stats["drop_accel"],
               stats["accels_stripped"],
               stats["mnemonic_catalogs"]))
        for b in stats["bad_files"]:
            log("  skipped unreadable catalog: " + b)
        if n["train"] < args.min_train:
            die("en-%s has only %d training pairs (< --min-train %d): too "
                "few catalogs installed in %s/%s" % (
                    l, n["train"], args.min_train, args.locale_dir, l))
    pkgs = {owners.get(p) for p in contributing}
    unowned = sum(1 for p in contributing if owners.get(p) is None)
    pkgs.discard(None)
    domains = {os.path.basename(p) for p in contributing}
    log("catalogs: %d .mo files contributed (%d domains) from %d Debian "
        "packages%s" % (len(contributing), len(domains), len(pkgs),
                        " (+%d files not owned by a package)" % unowned
                        if unowned else ""))
    counts_line = " ".join(counts)
    try:
        total = write_outputs(args.out, langs, parts, params, counts_line)
    except OSError as e:
        die("cannot write %s: %s" % (e.filename or args.out,
                                     e.strerror or e))
    log("pairs (train/valid/test): " + counts_line)
    log("wrote %d files to %s (%.1f s)" % (len(out_files(langs)), args.out,
                                            time.time() - t0))
    log("sha256 %s" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
