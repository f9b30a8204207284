"""The validation report: findings (check id, level, count, first examples), its JSON form and its terminal form.

Every source of findings (structural checks, SHACL, the OWL reasoner, a user's SPARQL checks) produces the same
``Finding`` records, so one report, one exit rule and one JSON layout cover them all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rich.console import Console

Level = Literal["error", "warning", "info"]
LEVELS: tuple[Level, ...] = ("error", "warning", "info")
FAIL_ON = ("error", "warning", "none")
_RANK: dict[str, int] = {level: rank for rank, level in enumerate(LEVELS)}


@dataclass(frozen=True, slots=True)
class Example:
    """One offending thing: its id (a CURIE where one fits), its label, and what is wrong with it.

    ``iri`` is kept, not printed, so the report can look labels up for many examples in one query."""

    id: str
    label: str = ""
    detail: str = ""
    iri: str | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "label": self.label, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Finding:
    """One check that found something: how many things and the first few of them."""

    check: str
    level: Level
    count: int
    examples: tuple[Example, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "level": self.level, "count": self.count,
                "examples": [e.to_json() for e in self.examples]}


@dataclass(frozen=True)
class Report:
    """The findings of one validation run, errors first. ``timings`` (seconds per stage) is for people, not JSON."""

    findings: tuple[Finding, ...]
    checks_run: int = 0
    timings: dict[str, float] = field(default_factory=dict, compare=False)

    @property
    def summary(self) -> dict[str, int]:
        """Problems per level: the sum of the findings' counts (not the number of checks that fired)."""
        totals: dict[str, int] = {level: 0 for level in LEVELS}
        for finding in self.findings:
            totals[finding.level] += finding.count
        return totals

    def fails(self, fail_on: str = "error") -> bool:
        """Whether any finding reaches ``fail_on`` (error < warning; ``none`` never fails)."""
        if fail_on not in FAIL_ON:
            raise ValueError(f"fail_on must be one of {', '.join(FAIL_ON)}, not {fail_on!r}")
        if fail_on == "none":
            return False
        threshold = _RANK[fail_on]
        return any(_RANK[f.level] <= threshold for f in self.findings)

    def finding(self, check: str) -> Finding | None:
        """The finding of one check, or None when it found nothing."""
        return next((f for f in self.findings if f.check == check), None)

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary, "findings": [f.to_json() for f in self.findings]}


def sort_findings(findings: list[Finding]) -> tuple[Finding, ...]:
    """Errors, then warnings, then info; by check id within a level. Empty findings are dropped."""
    return tuple(sorted((f for f in findings if f.count > 0), key=lambda f: (_RANK[f.level], f.check)))


_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def render(report: Report, console: "Console", *, location: str = "", show_timings: bool = False) -> None:
    """The report as a rich table: one row per finding with its first examples, then a one-line summary."""
    from rich.table import Table
    from rich.text import Text

    where = f" of {location}" if location else ""
    if not report.findings:
        console.print(f"[bold green]No findings[/]{where}: {report.checks_run} checks passed.")
    else:
        table = Table(title=f"Validation{where}", title_justify="left", show_lines=True, expand=False)
        table.add_column("level", no_wrap=True)
        table.add_column("check", no_wrap=True)
        table.add_column("count", justify="right", no_wrap=True)
        table.add_column("first examples", overflow="fold")
        for finding in report.findings:
            lines = Text()
            for i, example in enumerate(finding.examples):
                if i:
                    lines.append("\n")
                lines.append(example.id, style="bold")
                if example.label and example.label != example.id:
                    lines.append(f" ({example.label})")
                if example.detail:
                    lines.append(": ")
                    lines.append(example.detail, style="dim")
            if finding.count > len(finding.examples) and finding.examples:
                lines.append(f"\n... and {finding.count - len(finding.examples):,} more", style="dim")
            table.add_row(Text(finding.level, style=_STYLE[finding.level]), finding.check, f"{finding.count:,}",
                          lines)
        console.print(table)
    summary = report.summary
    parts = [f"[{_STYLE[level]}]{summary[level]:,} {level}{'s' if summary[level] != 1 and level != 'info' else ''}[/]"
             for level in LEVELS]
    total = sum(report.timings.values())
    console.print(f"{', '.join(parts)} from {report.checks_run} checks in {total:.2f} s")
    if show_timings and report.timings:
        timing = Table(title="time per check", title_justify="left")
        timing.add_column("check")
        timing.add_column("seconds", justify="right")
        for name, seconds in sorted(report.timings.items(), key=lambda kv: -kv[1]):
            timing.add_row(name, f"{seconds:.3f}")
        console.print(timing)
