"""A readable, self-contained HTML page for an ``Answer``: the answer, its claims with the cited graph paths drawn
as chains of entities, the conflicts and dropped claims, each chain's searches and trace, timings and tokens.
No scripts and no external files: it opens from disk anywhere."""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import TYPE_CHECKING, Any

from mirage_kg import Path

if TYPE_CHECKING:
    from mirage_reason.answer import Answer, Claim

__all__ = ["render_answer", "render_path"]

_CSS = """
body{font:15px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;
color:#1d232a;background:#fbfbfc}
h1{font-size:1.35em;margin:.2em 0}
h2{font-size:1.1em;margin-top:1.8em;border-bottom:1px solid #dde1e6;padding-bottom:.2em}
.badge{display:inline-block;font-size:.75em;padding:.1em .6em;border-radius:1em;background:#e8edf3;margin-right:.4em}
.abstained{background:#fde7c8}.answer{background:#fff;border:1px solid #dde1e6;border-radius:8px;padding:.8em 1.1em}
.claim{margin:.7em 0;padding:.5em .8em;background:#fff;border-left:4px solid #3b82f6;border-radius:4px}
.claim.warning{border-color:#dc2626}.claim.dropped{border-color:#9ca3af;color:#555}
.path{margin:.25em 0 .25em 1em;font-size:.9em}.node{display:inline-block;padding:0 .45em;border-radius:4px;
background:#eef2ff;border:1px solid #c7d2fe}.rel{color:#6b7280;margin:0 .35em;font-size:.85em}
.ptext{color:#4b5563;font-size:.85em;margin-left:1em}
details{margin:.5em 0;background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:.4em .8em}
summary{cursor:pointer;font-weight:600}pre{white-space:pre-wrap;background:#f6f8fa;padding:.5em;border-radius:4px;
font-size:.82em;margin:.3em 0}table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #e5e7eb;
padding:.2em .7em;text-align:right}th{background:#f3f4f6}td:first-child,th:first-child{text-align:left}
.event{font-size:.85em;margin:.2em 0}.muted{color:#6b7280}.flag{color:#b45309}
.verdict{font-weight:700;padding:.5em .9em;border-radius:6px;margin:.6em 0;border:1px solid}
.verdict.grounded{background:#e7f6ec;border-color:#34a853;color:#14532d}
.verdict.partial{background:#fff4e0;border-color:#d97706;color:#7c2d12}
.verdict.unsupported{background:#fde8e8;border-color:#dc2626;color:#7f1d1d}
.unsupported-sentence{background:#fde8e8;text-decoration:underline wavy #dc2626}
.own{background:#fff;border:2px dashed #dc2626;border-radius:8px;padding:.6em 1em;margin:.8em 0}
.own h2{margin-top:0;border:0;color:#7f1d1d}.code{font-family:monospace;font-size:.85em;margin-right:.4em}
.notkept{color:#7f1d1d;font-weight:600}
"""


def render_path(path: Path | dict[str, Any]) -> str:
    """A path as entity boxes joined by relation arrows, read in walking order, plus its sentence."""
    if isinstance(path, dict):  # a JSON path: nodes and steps only
        parts = [f'<span class="node">{escape(str(n))}</span>' for n in path.get("nodes", [])]
        return f'<div class="path">{" → ".join(parts)}<span class="ptext">{escape(path.get("text", ""))}</span></div>'
    out = []
    for i, step in enumerate(path.steps):
        if i == 0:
            out.append(f'<span class="node" title="{escape(step.start.id)}">{escape(step.start.label)}</span>')
        arrow = "→" if step.direction == "forward" else "←"
        label = step.relation.label if step.direction == "forward" else (step.relation.inverse_label
                                                                         or step.relation.label)
        out.append(f'<span class="rel">{arrow} {escape(label)} {arrow}</span>')
        out.append(f'<span class="node" title="{escape(step.end.id)}">{escape(step.end.label)}</span>')
    return f'<div class="path">{"".join(out)}<span class="ptext">{escape(path.text)}</span></div>'


def _claim(claim: Claim, css: str = "") -> str:
    kind = "warning" if claim.kind == "warning" else css
    head = (f'<b>{escape(claim.entity.label)}</b> <span class="badge">{escape(claim.kind)}</span>'
            f'<span class="muted">support {claim.support:.2f}, chains {", ".join(map(str, claim.chains)) or "-"}'
            "</span>")
    if claim.status != "kept":
        head += f' <span class="badge">{escape(claim.status)}</span> <span class="muted">{escape(claim.reason)}</span>'
    paths = "".join(render_path(p) for p in claim.citations)
    return f'<div class="claim {kind}">{head}{paths}</div>'


def _paragraphs(text: str) -> str:
    return "".join(f"<p>{escape(p.strip())}</p>" for p in text.split("\n\n") if p.strip()) or "<p>(empty)</p>"


def _table(rows: Iterable[tuple[str, Any]], head: tuple[str, str]) -> str:
    body = "".join(f"<tr><td>{escape(str(k))}</td><td>{escape(str(v))}</td></tr>" for k, v in rows)
    return f"<table><tr><th>{escape(head[0])}</th><th>{escape(head[1])}</th></tr>{body}</table>"


def _event(event: dict[str, Any]) -> str:
    kind = event.get("event", "")
    turn = event.get("turn", "")
    if kind == "generate":
        return (f'<div class="event"><b>turn {turn}</b> generated {event.get("tokens", 0)} tokens '
                f'({escape(str(event.get("finish")))})<pre>{escape(str(event.get("text", "")))}</pre></div>')
    if kind == "seed":
        facts = "".join(f"<li>{escape(f)}</li>" for f in event.get("facts", []))
        return f'<div class="event"><b>seed facts</b><ul>{facts}</ul></div>'
    details = ", ".join(f"{k}={v}" for k, v in event.items() if k not in ("event", "turn") and v not in (None, ""))
    css = "flag" if kind in ("garbled", "budget_spent") else ""
    return f'<div class="event {css}"><b>{escape(kind)}</b> {f"(turn {turn})" if turn != "" else ""} ' \
           f'{escape(details)}</div>'


_VERDICT_WORDS = {"grounded": "Grounded in the knowledge graph", "partial": "Partly supported by the knowledge graph",
                  "unsupported": "Not supported by the knowledge graph"}


def _marked_answer(answer: Answer) -> str:
    """The answer's paragraphs, each sentence no claim supports marked (with why, on hover)."""
    checks = {c.text: c for c in answer.sentences}
    out = []
    for paragraph in answer.text.split("\n\n"):
        if not paragraph.strip():
            continue
        html = escape(paragraph.strip())
        for text, check in checks.items():
            if not check.supported and text and escape(text) in html:
                html = html.replace(escape(text), f'<span class="unsupported-sentence" title="not supported: '
                                                  f'{escape(check.reason)}">{escape(text)}</span>', 1)
        out.append(f"<p>{html}</p>")
    return "".join(out) or "<p>(empty)</p>"


def render_answer(answer: Answer) -> str:
    """The whole page for one answer: how grounded it is first, then the answer with unsupported sentences marked,
    the model's own words apart under their label, the flags, claims, conflicts, dropped claims and the chains."""
    badges = f'<span class="badge">{escape(answer.pipeline)}</span>'
    if answer.abstained:
        badges += '<span class="badge abstained">abstained: no claim of the knowledge graph survived</span>'
    verdict = answer.support.verdict
    parts = [
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>MIRAGE-KG: {escape(answer.question[:80])}</title><style>{_CSS}</style></head><body>",
        f"<div>{badges}</div><h1>{escape(answer.question)}</h1>",
        f'<div class="verdict {escape(verdict)}" id="verdict">{escape(_VERDICT_WORDS.get(verdict, verdict))}: '
        f'<span style="font-weight:400">{escape(answer.support.reason)}</span></div>',
        f'<div class="answer">{_marked_answer(answer)}</div>',
    ]
    if answer.unsupported_text:
        parts.append('<div class="own" id="unsupported-text"><h2>The model\'s own words: NOT supported by the '
                     f"knowledge graph, not its answer</h2>{_paragraphs(answer.unsupported_text)}</div>")
    if answer.flags:
        from mirage_reason.pipeline.support import flag_json

        parts.append("<h2>Flags</h2><ul id=\"flags\">" + "".join(
            f'<li class="flag"><span class="code">{escape(f["code"])}</span>{escape(f["message"])}</li>'
            for f in map(flag_json, answer.flags)) + "</ul>")
    if answer.question_entities:
        chips = " ".join(f'<span class="node" title="{escape(e.id)}">{escape(e.label)}</span>'
                         for e in answer.question_entities)
        parts.append(f"<p class=\"muted\">Entities of the question: {chips}</p>")
    parts.append(f"<h2>Claims ({len(answer.claims)}) and the graph paths they rest on</h2>")
    parts.extend(_claim(c) for c in answer.claims)
    if not answer.claims:
        parts.append('<p class="muted">No claim survived.</p>')
    if answer.conflicts:
        parts.append("<h2>Conflicts</h2>")
        for conflict in answer.conflicts:
            votes = ", ".join(f"{k}: {v:.2f}" for k, v in conflict.votes)
            parts.append(f'<div class="claim warning"><b>{escape(conflict.kind)}</b> {escape(conflict.reason)}'
                         f'{f" <span class=muted>(votes {escape(votes)})</span>" if votes else ""}'
                         f'{"".join(render_path(p) for p in conflict.evidence)}</div>')
    if answer.dropped:
        parts.append(f"<details><summary>Dropped claims ({len(answer.dropped)})</summary>"
                     + "".join(_claim(c, "dropped") for c in answer.dropped) + "</details>")
    if answer.sub_questions:
        parts.append("<h2>Sub-questions</h2><ol>"
                     + "".join(f"<li>{escape(s)}</li>" for s in answer.sub_questions) + "</ol>")
    if answer.chains:
        parts.append(f"<h2>Reasoning chains ({len(answer.chains)})</h2>")
    for i, chain in enumerate(answer.chains):
        searches = "".join(
            f'<div class="event"><b>{escape(s.mode)}</b> <code>{escape(s.query)}</code> '
            f'<span class="muted">{len(s.paths)} facts{" (cached)" if s.cached else ""}'
            f'{" - " + escape(s.note) if s.note else ""}</span>'
            + "".join(render_path(p) for p in s.paths[:10]) + "</div>"
            for s in chain.searches)
        trace = "".join(_event(e) for e in chain.trace)
        kept = any(i in c.chains for c in answer.claims)
        status = ("" if kept else '<p class="notkept">The synthesizer kept no claim of this chain\'s answer: '
                  "it is not part of the graph's answer.</p>")
        parts.append(
            f"<details><summary>Chain {i + 1}: {escape(chain.sub_question)}{'' if kept else ' (not kept)'}</summary>"
            f"{status}<p><b>Answer:</b> {escape(chain.answer) or '<i>(none)</i>'}</p>"
            f'<p class="muted">{chain.turns} turns, {chain.completion_tokens} tokens, '
            f"finished: {escape(chain.finish_reason)}</p>"
            f"{searches or '<p class=muted>No searches.</p>'}"
            f"<details><summary>Trace</summary>{trace}</details></details>")
    if answer.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in answer.notes) + "</ul>")
    parts.append("<h2>Cost</h2><div style=\"display:flex;gap:2em\">")
    parts.append(_table(((k, f"{v:.3f}") for k, v in answer.timings.items()), ("stage", "seconds")))
    parts.append(_table(answer.tokens.items(), ("stage", "tokens")))
    parts.append("</div><p class=\"muted\">Generated by MIRAGE-KG. Not medical advice.</p></body></html>")
    return "".join(parts)
