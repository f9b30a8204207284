"""Words as the linker compares them: folding (case, accents, punctuation), a crude English singular, acronyms,
tokens with their offsets, the function words (``STOPWORDS``) and the keys fuzzy matching blocks labels by."""

from __future__ import annotations

import re
import unicodedata

# Function words and greetings: never a mention on their own, nor the edge of a fuzzy or embedding span.
STOPWORDS = frozenset("""
a about above after again against all also am an and any are aren't as at be because been before being below
between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each few
for from further had hadn't has hasn't have haven't having he her here hers herself him himself his how i i'm i've
i'd if in into is isn't it it's its itself just let's me more most much my myself no nor not now of off on once
only or other our ours ourselves out over own same she should shouldn't so some such than that that's the their
theirs them themselves then there these they this those through to too under until up very was wasn't we were
weren't what what's when where which while who whom why will with won't would wouldn't you your yours yourself
yourselves get got getting feel feeling felt since lately recently really quite bit lot lots please thank thanks
hi hello hey dear doctor doc sir madam think know want need like also still even ever keep keeps kept
experiencing experience experienced having suffering suffer suffered problem problems issue issues might may must
shall seem seems seemed worried afraid concerned suspect suspects suspected diagnosed tell
""".split())

_TOKEN = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")
_NON_WORD = re.compile(r"[\W_]+")
# fold() on ASCII text: letters lower-cased, apostrophes dropped, every other non-alphanumeric a space (one
# bytes table: translating the UTF-8 bytes costs half what the same table as a str mapping does)
_ASCII_FOLD = bytes(ord(chr(c).lower()) if chr(c).isalnum() else 32 for c in range(128)) + bytes(range(128, 256))


def singular(word: str) -> str:
    """A crude English singular, applied to labels and mentions alike (so it only has to be consistent)."""
    if len(word) <= 3 or word[-1] != "s" or not word.isalpha():  # every rule below takes a final s
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes")) and not word.endswith("aches"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is", "ous")):
        return word[:-1]
    return word


def fold(text: str) -> str:
    """Case, accents, punctuation and ``_`` folded: ``"Crohn's_Disease"`` -> ``"crohns disease"``."""
    if text.isascii():  # most mentions: NFKD and casefold change nothing but the case; one table does it all
        return b" ".join(text.encode("ascii").translate(_ASCII_FOLD, b"'").split()).decode("ascii")
    folded = unicodedata.normalize("NFKD", text)
    folded = "".join(c for c in folded if not unicodedata.combining(c)).casefold().replace("’", "'")
    return " ".join(_NON_WORD.sub(" ", folded.replace("'", "")).split())


def is_acronym(text: str) -> bool:
    """An acronym: one word of at least two letters with a capital past its first character, all capitals
    ("COPD", "T2DM") or mixed case ("chILD", "AFib", "HbA1c"). As a synonym it matches only as written: folded,
    "chILD" would be the word "child"."""
    word = text.strip()
    if not word or len(word) > 12 or any(c.isspace() for c in word):
        return False
    return sum(c.isalpha() for c in word) >= 2 and any(c.isupper() for c in word[1:])


def normalise(text: str) -> str:
    """``fold`` plus plurals: ``"Panic_Disorders"`` -> ``"panic disorder"`` (the normalised-label method)."""
    folded = fold(text)
    if not folded.endswith("s") and "s " not in folded:  # ``singular`` changes only a word ending in s
        return folded
    return " ".join(map(singular, folded.split()))


def tokens(text: str) -> list[tuple[str, int, int]]:
    """Words with their character offsets."""
    return [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def is_stop(word: str) -> bool:
    """A function word (``STOPWORDS``), whatever its case."""
    return word.casefold().replace("’", "'") in STOPWORDS


def content_words(folded: str) -> set[str]:
    """The words of a folded text that fuzzy matching keys on: three letters or more, no function words."""
    return {w for w in folded.split() if len(w) >= 3 and w not in STOPWORDS}


def block_keys(word: str) -> tuple[str, str]:
    """A word's block keys: its first and its last four letters."""
    return "^" + word[:4], word[-4:] + "$"
