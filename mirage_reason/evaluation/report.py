"""The evaluation report: per-pipeline metrics computed from the result lines alone, shown as a rich table, a JSON
document, or a self-contained HTML page with plots (matplotlib figures inlined as base64 PNG).

Every timing key starts with ``seconds`` so that a comparison of two runs can drop exactly the wall-clock parts.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path as FsPath
from typing import Any

from mirage_reason.evaluation.metrics import BERTSCORE_MODEL_NAME, mean, percentile

__all__ = ["METRICS", "render_html", "render_table", "summarise", "without_timings", "write_html"]

REPORT_VERSION = 1

#: metric key -> (column title, higher is better, format)
METRICS: dict[str, tuple[str, bool | None, str]] = {
    "bertscore_f1": ("BERTScore F1", True, "{:.3f}"),
    "accuracy": ("accuracy", True, "{:.1%}"),
    "diagnosis_at_1": ("dx@1", True, "{:.1%}"),
    "diagnosis_at_3": ("dx@3", True, "{:.1%}"),
    "linking_recall": ("link R@5", True, "{:.3f}"),
    "evidence_recall": ("evid. recall", True, "{:.3f}"),
    "evidence_size": ("evid. entities", None, "{:.1f}"),
    "citation_validity": ("cite valid", True, "{:.1%}"),
    "abstention_rate": ("abstain", None, "{:.1%}"),
    "tokens_per_question": ("tokens/q", None, "{:.0f}"),
    "seconds_per_question": ("s/q", False, "{:.2f}"),
}


def _pipeline_summary(records: Sequence[Mapping[str, Any]], errors: int) -> dict[str, Any]:
    choice = [r for r in records if r.get("correct") is not None]
    cited_total = sum(r.get("citations_total") or 0 for r in records)
    cited_valid = sum(r.get("citations_valid") or 0 for r in records)
    any_citing = any(r.get("citations_total") is not None for r in records)
    stages = sorted({s for r in records for s in (r.get("tokens") or {})})
    second_stages = sorted({s for r in records for s in (r.get("seconds") or {})})
    seconds = [float(r.get("seconds_total") or 0.0) for r in records]
    latency = [float(r.get("seconds_latency") or r.get("seconds_total") or 0.0) for r in records]
    has_model = any(r.get("tokens") for r in records)
    return {
        "examples": len(records),
        "errors": errors,
        "bertscore_f1": mean(r.get("bertscore_f1") for r in records),
        "accuracy": mean(bool(r["correct"]) for r in choice) if choice else None,
        "answered_letter_rate": mean(r.get("letter") is not None for r in records if r.get("kind") == "choice")
        if any(r.get("kind") == "choice" for r in records) else None,
        # over the examples whose gold answer names a condition of the KG (the others have None)
        "diagnosis_at_1": mean(r.get("diagnosis_at_1") for r in records),
        "diagnosis_at_3": mean(r.get("diagnosis_at_3") for r in records),
        "diagnosis_examples": sum(r.get("diagnosis_at_1") is not None for r in records),
        "linking_recall": mean(r.get("linking_recall") for r in records),
        "evidence_recall": mean(r.get("evidence_recall") for r in records),
        "evidence_size": mean(r.get("evidence_size") for r in records),
        "evidence_facts": mean(r.get("evidence_facts") for r in records),
        "citation_validity": (cited_valid / cited_total) if cited_total else None,
        "citations_per_question": (cited_total / len(records)) if any_citing and records else None,
        "abstention_rate": mean(bool(r.get("abstained")) for r in records),
        "tokens_per_question": mean(sum((r.get("tokens") or {}).values()) for r in records) if has_model else None,
        "tokens_by_stage": {s: mean((r.get("tokens") or {}).get(s, 0) for r in records) for s in stages},
        "prompt_tokens_per_question": mean(r.get("prompt_tokens") for r in records),
        "seconds_per_question": mean(seconds),
        "seconds_latency_p50": percentile(latency, 50),
        "seconds_latency_p90": percentile(latency, 90),
        "seconds_by_stage": {s: mean((r.get("seconds") or {}).get(s, 0.0) for r in records) for s in second_stages},
    }


def summarise(records: Sequence[Mapping[str, Any]], *, pipelines: Sequence[str], dataset: str, examples: int,
              settings: Mapping[str, Any], fingerprint: str, errors: Mapping[str, int] | None = None,
              judge: Mapping[str, Any] | None = None, scorer: str | None = None,
              seconds_wall: float | None = None) -> dict[str, Any]:
    """The report document: settings, the scoring model, per-pipeline metrics, the judge's verdicts, latencies."""
    by_pipeline: dict[str, list[Mapping[str, Any]]] = {p: [] for p in pipelines}
    for record in records:
        by_pipeline.setdefault(record["pipeline"], []).append(record)
    errors = errors or {}
    return {
        "report_version": REPORT_VERSION,
        "dataset": dataset,
        "examples": examples,
        "pipelines": list(pipelines),
        "settings": dict(settings),
        "config_hash": fingerprint,
        "scoring_model": {"bertscore": BERTSCORE_MODEL_NAME, "implementation": scorer,
                          "note": "the paper scored BERTScore with another model; compare runs with each other, "
                                  "not with the paper's table"},
        "results": {p: _pipeline_summary(by_pipeline[p], errors.get(p, 0)) for p in pipelines},
        "judge": dict(judge) if judge else None,
        "seconds_latency_per_example": {
            p: [round(float(r.get("seconds_latency") or r.get("seconds_total") or 0.0), 6) for r in by_pipeline[p]]
            for p in pipelines},
        "seconds_wall": seconds_wall,
    }


def without_timings(report: Any) -> Any:
    """The report with every wall-clock value removed (keys starting with ``seconds``): what two runs of the same
    settings must agree on."""
    if isinstance(report, Mapping):
        return {k: without_timings(v) for k, v in report.items() if not str(k).startswith("seconds")}
    if isinstance(report, list):
        return [without_timings(v) for v in report]
    return report


def _fmt(value: Any, fmt: str) -> str:
    if value is None:
        return "—"
    return fmt.format(value)


def render_table(report: Mapping[str, Any]) -> Any:
    """A rich Table of the headline metrics, one row per pipeline; columns that apply to no pipeline are dropped."""
    from rich.table import Table

    results = report["results"]
    shown = [k for k in METRICS if any(results[p].get(k) is not None for p in report["pipelines"])]
    judge = report.get("judge")
    table = Table(title=f"{report['dataset']}: {report['examples']} questions", title_justify="left")
    table.add_column("pipeline", style="bold", no_wrap=True)
    table.add_column("n", justify="right")
    for key in shown:
        table.add_column(METRICS[key][0], justify="right")
    if judge:
        table.add_column("judge win", justify="right")
        table.add_column("judge rank", justify="right")
    for name in report["pipelines"]:
        row = results[name]
        count = str(row["examples"]) + (f" ({row['errors']} err)" if row.get("errors") else "")
        cells = [name, count] + [_fmt(row.get(k), METRICS[k][2]) for k in shown]
        if judge:
            verdict = judge["pipelines"].get(name, {})
            cells += [_fmt(verdict.get("win_rate"), "{:.1%}"), _fmt(verdict.get("mean_rank"), "{:.2f}")]
        table.add_row(*cells)
    table.caption = f"BERTScore: {report['scoring_model']['bertscore']}"
    return table


# -- HTML ----------------------------------------------------------------------------------------------------------

def _figure_png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _plots(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.colors import TABLEAU_COLORS

    pipelines = report["pipelines"]
    results = report["results"]
    figures: list[tuple[str, str]] = []
    metric_keys = [k for k in METRICS if k != "seconds_per_question"
                   and any(results[p].get(k) is not None for p in pipelines)]
    if metric_keys:
        cols = min(3, len(metric_keys))
        rows = (len(metric_keys) + cols - 1) // cols
        fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
        colours = list(TABLEAU_COLORS.values())  # tab10's ten colours
        for ax, key in zip(axes.flat, metric_keys):
            values = [results[p].get(key) for p in pipelines]
            ax.bar(range(len(pipelines)), [v if v is not None else 0 for v in values],
                   color=[colours[i % 10] for i in range(len(pipelines))])
            for i, v in enumerate(values):
                ax.text(i, v if v is not None else 0, "n/a" if v is None else f"{v:.3g}", ha="center",
                        va="bottom", fontsize=7)
            ax.set_title(METRICS[key][0], fontsize=10)
            ax.set_xticks(range(len(pipelines)), pipelines, rotation=35, ha="right", fontsize=8)
            ax.tick_params(axis="y", labelsize=8)
        for ax in list(axes.flat)[len(metric_keys):]:
            ax.axis("off")
        fig.tight_layout()
        figures.append(("Metrics per pipeline", _figure_png(fig)))
        plt.close(fig)
    latencies = [report["seconds_latency_per_example"].get(p, []) for p in pipelines]
    if any(latencies):
        fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(pipelines)), 3.4))
        ax.boxplot([v or [0.0] for v in latencies], showfliers=True)
        for i, values in enumerate(latencies, start=1):
            ax.scatter([i] * len(values), values, s=6, alpha=0.4)
        ax.set_xticks(range(1, len(pipelines) + 1), pipelines, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("seconds until answered")
        if all(v > 0 for values in latencies for v in values) and max(max(v) for v in latencies if v) > 20 * min(
                min(v) for v in latencies if v):
            ax.set_yscale("log")
        ax.set_title("Latency per question (from its batch's start)", fontsize=10)
        fig.tight_layout()
        figures.append(("Latency", _figure_png(fig)))
        plt.close(fig)
    return figures


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:14px}th,td{border:1px solid #ccc;padding:4px 8px;
text-align:right}th:first-child,td:first-child{text-align:left}th{background:#f3f3f3}
.best{font-weight:bold;background:#e8f5e9}code,pre{background:#f6f6f6}pre{padding:8px;white-space:pre-wrap;
font-size:12px;max-height:18em;overflow:auto}img{max-width:100%}.note{color:#666;font-size:13px}"""


def render_html(report: Mapping[str, Any], samples: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> str:
    """A self-contained page: settings, the metric table (best value per column marked), plots, sample answers."""
    pipelines = report["pipelines"]
    results = report["results"]
    keys = [k for k in METRICS if any(results[p].get(k) is not None for p in pipelines)]
    esc = html.escape
    head = "".join(f"<th>{esc(METRICS[k][0])}</th>" for k in keys)
    rows = []
    for name in pipelines:
        cells = []
        for key in keys:
            value = results[name].get(key)
            better = METRICS[key][1]
            column = [results[p].get(key) for p in pipelines if results[p].get(key) is not None]
            best = value is not None and better is not None and len(column) > 1 and value == (
                max(column) if better else min(column))
            cells.append(f"<td class=\"{'best' if best else ''}\">{esc(_fmt(value, METRICS[key][2]))}</td>")
        errors = results[name].get("errors")
        rows.append(f"<tr><td>{esc(name)}</td><td>{results[name]['examples']}"
                    f"{f' ({errors} errors)' if errors else ''}</td>{''.join(cells)}</tr>")
    parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>MIRAGE-KG eval: {esc(report['dataset'])}"
             f"</title><style>{_CSS}</style></head><body>",
             f"<h1>MIRAGE-KG evaluation: {esc(report['dataset'])}</h1>",
             f"<p>{report['examples']} questions, {len(pipelines)} pipelines; config hash "
             f"<code>{esc(report['config_hash'])}</code>.</p>",
             f"<table><tr><th>pipeline</th><th>n</th>{head}</tr>{''.join(rows)}</table>",
             f"<p class=\"note\">BERTScore: {esc(report['scoring_model']['bertscore'])}"
             f" ({esc(str(report['scoring_model'].get('implementation') or 'not computed'))}); "
             f"{esc(report['scoring_model']['note'])}. Best value per column in bold.</p>"]
    judge = report.get("judge")
    if judge:
        jrows = "".join(f"<tr><td>{esc(p)}</td><td>{v['wins']}</td><td>{v['ties']}</td><td>{v['losses']}</td>"
                        f"<td>{esc(_fmt(v['win_rate'], '{:.1%}'))}</td><td>{esc(_fmt(v['mean_rank'], '{:.2f}'))}"
                        f"</td></tr>" for p, v in judge["pipelines"].items())
        parts.append(f"<h2>Pairwise judge ({esc(judge['model'])})</h2><table><tr><th>pipeline</th><th>wins</th>"
                     f"<th>ties</th><th>losses</th><th>win rate</th><th>mean rank</th></tr>{jrows}</table>")
    stage_rows = []
    for name in pipelines:
        tokens = results[name].get("tokens_by_stage") or {}
        seconds = results[name].get("seconds_by_stage") or {}
        stages = sorted(set(tokens) | set(seconds))
        detail = ", ".join(f"{esc(s)}: {tokens.get(s, 0):.0f} tok / {seconds.get(s, 0.0):.2f} s" for s in stages)
        stage_rows.append(f"<tr><td>{esc(name)}</td><td style=\"text-align:left\">{detail or '—'}</td>"
                          f"<td>{esc(_fmt(results[name].get('seconds_per_question'), '{:.2f}'))}</td>"
                          f"<td>{esc(_fmt(results[name].get('seconds_latency_p50'), '{:.2f}'))}</td>"
                          f"<td>{esc(_fmt(results[name].get('seconds_latency_p90'), '{:.2f}'))}</td></tr>")
    parts.append("<h2>Cost per question, by stage</h2><table><tr><th>pipeline</th><th>mean generated tokens / "
                 "seconds per stage</th><th>s/q (amortised)</th><th>latency p50 s</th><th>latency p90 s</th></tr>"
                 f"{''.join(stage_rows)}</table><p class=\"note\">Stage seconds of batched model work are the "
                 "batch's wall time, charged to every question in the batch; s/q is the batch's wall time divided "
                 "by its questions.</p>")
    for title, png in _plots(report):
        parts.append(f"<h2>{esc(title)}</h2><img alt=\"{esc(title)}\" src=\"data:image/png;base64,{png}\">")
    if samples:
        parts.append("<h2>Sample answers</h2>")
        for name, items in samples.items():
            parts.append(f"<h3>{esc(name)}</h3>")
            for item in items:
                verdict = ""
                if item.get("letter") is not None or item.get("gold_letter") is not None:
                    verdict = f" — picked {item.get('letter') or 'nothing'}, gold {item.get('gold_letter')}"
                elif item.get("bertscore_f1") is not None:
                    verdict = f" — BERTScore F1 {item['bertscore_f1']:.3f}"
                parts.append(f"<p><b>{esc(item['example_id'])}</b>{esc(verdict)}</p>"
                             f"<pre>{esc(str(item.get('answer') or ''))}</pre>")
    parts.append("<h2>Settings</h2><pre>" + esc(json.dumps(report["settings"], indent=2, ensure_ascii=False))
                 + "</pre></body></html>")
    return "\n".join(parts)


def write_html(report: Mapping[str, Any], path: FsPath,
               samples: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report, samples), encoding="utf-8")
