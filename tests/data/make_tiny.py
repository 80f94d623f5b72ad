#!/usr/bin/env python3
"""Generate the tiny English->Spanish corpus used by the tests (deterministic).

Template sentences with real reordering (adjectives follow nouns in Spanish)
and agreement, so a model has something to learn.  Run from this directory:
    python3 make_tiny.py
"""
import random

NOUNS = [("cat", "gato", "m"), ("dog", "perro", "m"), ("house", "casa", "f"), ("book", "libro", "m"),
         ("woman", "mujer", "f"), ("man", "hombre", "m"), ("city", "ciudad", "f"), ("tree", "árbol", "m"),
         ("river", "río", "m"), ("door", "puerta", "f"), ("child", "niño", "m"), ("table", "mesa", "f")]
ADJS = [("red", "rojo", "roja"), ("big", "grande", "grande"), ("small", "pequeño", "pequeña"),
        ("old", "viejo", "vieja"), ("new", "nuevo", "nueva"), ("white", "blanco", "blanca"),
        ("black", "negro", "negra"), ("beautiful", "hermoso", "hermosa")]
VERBS = [("sees", "ve"), ("has", "tiene"), ("wants", "quiere"), ("finds", "encuentra"), ("loves", "ama")]


def np(rng):
    n = rng.choice(NOUNS)
    a = rng.choice(ADJS)
    art = "el" if n[2] == "m" else "la"
    return f"the {a[0]} {n[0]}", f"{art} {n[1]} {a[1] if n[2] == 'm' else a[2]}"


def sentence(rng):
    s_en, s_es = np(rng)
    o_en, o_es = np(rng)
    v = rng.choice(VERBS)
    en = f"{s_en} {v[0]} {o_en} ."
    es = f"{s_es} {v[1]} {o_es} ."
    return en[0].upper() + en[1:], es[0].upper() + es[1:]


def main():
    rng = random.Random(1234)
    seen, pairs = set(), []
    while len(pairs) < 400:
        p = sentence(rng)
        if p[0] not in seen:
            seen.add(p[0])
            pairs.append(p)
    for name, part in (("train", pairs[:340]), ("valid", pairs[340:370]), ("test", pairs[370:])):
        for side, k in (("en", 0), ("es", 1)):
            with open(f"tiny/{name}.{side}", "w", encoding="utf-8") as f:
                f.writelines(p[k] + "\n" for p in part)
    for side, k in (("en", 0), ("es", 1)):
        with open(f"tiny/overfit32.{side}", "w", encoding="utf-8") as f:
            f.writelines(p[k] + "\n" for p in pairs[:32])
    # A second target "language" for multilingual tests: the Spanish sentence
    # with every word spelled backwards (a different vocabulary, same structure).
    for name, part in (("train", pairs[:340]), ("valid", pairs[340:370]), ("test", pairs[370:])):
        with open(f"tiny/{name}.xx", "w", encoding="utf-8") as f:
            f.writelines(" ".join(w[::-1] for w in p[1].split()) + "\n" for p in part)


if __name__ == "__main__":
    main()
