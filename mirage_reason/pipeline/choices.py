"""Multiple-choice questions: the lettered options a question carries, and the letter an answer picks.

The evaluation writes options as "Options:" followed by "A. text" lines (``question_text``); the synthesizer reads
them back so that a multiple-choice question always gets a letter, and the evaluation scores letters with the same
``extract_letter``."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["LETTERS", "closest_option", "drop_letter_line", "extract_letter", "parse_options"]

LETTERS = "ABCDEFGHIJ"
_OPTION_SEPARATOR = r"[.)．、:：]"  # "A." "A)" "A、" "A：" ...
_OPTION_LINE = re.compile(rf"^\s*([A-J])\s*{_OPTION_SEPARATOR}\s*(.+?)\s*$")


def parse_options(question: str) -> tuple[str, ...]:
    """The options of a multiple-choice question: consecutive lettered lines "A. ...", "B. ..." (at least two,
    starting at A); none for a free-text question."""
    options: list[str] = []
    for line in question.splitlines():
        match = _OPTION_LINE.match(line)
        if match and match.group(1) == LETTERS[len(options)]:
            options.append(match.group(2))
        elif match and match.group(1) == "A":
            options = [match.group(2)]  # a new list starts
        elif options and line.strip():
            if len(options) >= 2:
                break
            options = []
    return tuple(options) if len(options) >= 2 else ()


_EXPLICIT = [
    # "答案是D", "答案：D", "正确答案为（D）", "正确选项是B"
    re.compile(r"(?:答案|正确选项)\s*(?:应该|应)?\s*(?:是|为|选|:|：)?\s*[\(（【\[]?\s*([A-Ja-j])(?![A-Za-z])"),
    # "故选D", "选择 D" (not "选项A", which only names an option)
    re.compile(r"选\s*(?:择)?\s*[\(（【\[]?\s*([A-J])(?![A-Za-z])"),
    # "Answer: d", "the answer is (B)", "correct option is C", "final answer: **E**"
    re.compile(r"(?i)\b(?:answer|(?:correct|right|best)\s+(?:option|choice))\s*(?:is|would be|should be|:|=|：)"
               r"\s*[:：]?\s*[\*\(\[]*\s*([a-j])\b(?![\w'])"),
]
_LOWERCASE_WORD = re.compile(r"\s+[A-Za-z]")  # "the answer is a combination ..." names no option
_LEADING = re.compile(r"^\s*[\*\(\[（【]*\s*([A-J])\s*(?:[\)\]）】\.。、:：,，\*]|\s|$)")
_PARENTHESISED = re.compile(r"[\(（【\[]\s*([A-J])\s*[\)）】\]]")
_STANDALONE = re.compile(r"(?<![A-Za-z0-9])([A-J])(?![A-Za-z0-9])")
_ARTICLE = re.compile(r"A\s+[a-z]")
_OPTION_MARKER = re.compile(rf"(?<![A-Za-z0-9])([A-J])\s*{_OPTION_SEPARATOR}")


def _recites_options(text: str) -> bool:
    """Whether the answer repeats the option list ("A. ... B. ..."): small models often echo the options, and the
    echo's leading "A." is no pick (it made every echoing sample vote A)."""
    markers = [m.group(1) for m in _OPTION_MARKER.finditer(text)]
    return "A" in markers and "B" in markers[markers.index("A") + 1:]


def extract_letter(text: str, options: Sequence[str] = (), n_options: int | None = None) -> str | None:
    """The option letter a model's answer picks, or ``None``.

    In order: an explicit statement (the last one: "答案是D", "Answer: d", "the answer is (B)"); an answer that only
    repeats the option list ("A. ... B. ...") picks nothing; then a letter that opens
    the answer ("D.", "(D)"), the first parenthesised letter, the first standalone capital letter (not the English
    article "A ..."), and finally the one option whose text the answer quotes. Letters beyond the options count
    as no answer. A finished ``<think>`` block is ignored."""
    n = n_options or len(options) or 5
    allowed = "ABCDEFGHIJ"[:n]
    if "</think>" in text:
        text = text.split("</think>")[-1]
    text = text.strip()
    if not text:
        return None
    for pattern in _EXPLICIT:
        found = [m.group(1).upper() for m in pattern.finditer(text)
                 if not (m.group(1).islower() and _LOWERCASE_WORD.match(text, m.end()))]
        found = [f for f in found if f in allowed]
        if found:
            return found[-1]
    if _recites_options(text):
        return None  # an echo of the options with no explicit statement picks none of them
    match = _LEADING.match(text)
    if match and match.group(1) in allowed and not _ARTICLE.match(text):
        return match.group(1)
    for match in _PARENTHESISED.finditer(text):
        if match.group(1) in allowed:
            return match.group(1)
    for match in _STANDALONE.finditer(text):
        letter = match.group(1)
        if letter in allowed and not (letter == "A" and _ARTICLE.match(text, match.start())):
            return letter
    quoted = [i for i, option in enumerate(options) if option.strip() and option.strip() in text]
    if len(quoted) == 1:
        return allowed[quoted[0]]
    return None


def closest_option(options: Sequence[str], text: str) -> str:
    """The option sharing the most words with ``text`` (the first on a tie), for a model that named none."""
    words = set(re.findall(r"\w+", text.casefold()))

    def overlap(option: str) -> int:
        own = set(re.findall(r"\w+", option.casefold()))
        chars = sum(1 for ch in set(option) if not ch.isspace() and ch in text)  # scripts without spaces
        return len(own & words) * 10 + chars

    scores = [overlap(o) for o in options]
    return LETTERS[scores.index(max(scores))]


def drop_letter_line(text: str) -> str:
    """The writer's explanation without its "Answer: X" line (the letter is stated once, by the synthesizer)."""
    return re.sub(r"(?im)^\s*(?:final\s+)?answer\s*[:：]\s*[\(\[]?[A-J]\b[^\n]*\n?", "", text).strip()
