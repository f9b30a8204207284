"""``mirage-kg eval``: compare answer pipelines on a QA dataset over a KG, resumably, with a report."""

from __future__ import annotations

import json
from pathlib import Path as FsPath

import click

from mirage_reason.evaluation.datasets import DATASETS
from mirage_reason.evaluation.pipelines import PIPELINE_NAMES


def _pipeline_list(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    if value is None or value.strip().lower() == "all":
        return PIPELINE_NAMES
    names = tuple(dict.fromkeys(p.strip().lower() for p in value.split(",") if p.strip()))
    unknown = [n for n in names if n not in PIPELINE_NAMES]
    if unknown or not names:
        raise click.BadParameter(f"unknown pipeline(s) {', '.join(unknown) or '(none given)'}; choose from "
                                 f"{', '.join(PIPELINE_NAMES)} or 'all'")
    return names


@click.command("eval")
@click.argument("dataset", type=click.Choice(sorted(DATASETS), case_sensitive=False))
@click.option("--data", metavar="PATH", help="Dataset file or folder [default: $MIRAGE_KG_DATA, else "
              "../shared/data beside the repository].")
@click.option("--kg", metavar="PATH", help="Store folder, any source `mirage-kg load` reads, or 'demo' [default: "
              "the EMCKG triples for genmedgpt5k*, the demo KG otherwise].")
@click.option("--store", metavar="DIR", type=click.Path(file_okay=False),
              help="An existing store folder (as every other command takes), instead of --kg.")
@click.option("--endpoint", metavar="URL", help="A SPARQL 1.1 endpoint holding the KG, instead of --kg.")
@click.option("--kinds", "kinds_files", multiple=True, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False),
              help="Turtle file of entity kinds and clinical roles for a custom ontology (see ontologies/kinds.ttl). "
              "Repeatable.")
@click.option("--pipelines", callback=_pipeline_list, metavar="P1,P2,...",
              help=f"Comma-separated, or 'all' [default: all]: {', '.join(PIPELINE_NAMES)}.")
@click.option("--limit", type=click.IntRange(min=1), help="A random sample of N questions (drawn with --seed).")
@click.option("--seed", type=int, default=0, show_default=True, help="Sampling seed for --limit and the model.")
@click.option("--backend", type=click.Choice(["auto", "transformers", "llamacpp", "llamacpp-server", "vllm", "openai",
                                             "scripted"]),
              default="auto", show_default=True, help="LLM backend for the model pipelines (auto: transformers "
              "with a CUDA GPU, else llama.cpp in process, else llama.cpp's server).")
@click.option("--model", metavar="ID", help="Model: hub id, local folder, .gguf file or 'smollm2' (in-process) [default: "
              "Qwen/QwQ-32B with a CUDA GPU, else smollm2 with small budgets]; served name (openai); a JSON script "
              "file (scripted: {prompt substring: completion} or a list of completions).")
@click.option("--base-url", metavar="URL", help="OpenAI-compatible root URL for --backend openai.")
@click.option("--max-new-tokens", type=click.IntRange(min=1), help="Tokens per generation step (chains, "
              "decomposer, synthesizer); a chain gets 4x in all (2x with smollm2).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Any reasoner setting (MirageConfig field), e.g. --set n_r=2 --set samples=1. Repeatable.")
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True,
              help="Questions handed to the reasoner together (their chains share generate calls).")
@click.option("--output", metavar="DIR", type=click.Path(file_okay=False),
              help="Run folder with results.jsonl and report.json [default: mirage-eval/<dataset>-<hash>].")
@click.option("--threads", type=click.IntRange(min=0), default=1, show_default=True,
              help="torch CPU threads outside generation: the linker's and BERTScore's encoders (1 is fastest for "
                   "them on small machines; 0 = torch's default). A local model generates on every usable core.")
@click.option("--no-bertscore", is_flag=True, help="Skip BERTScore (no scoring model is loaded).")
@click.option("--judge-url", metavar="URL", help="OpenAI-compatible endpoint for a pairwise LLM judge.")
@click.option("--judge-model", metavar="ID", help="The judge's model name on that endpoint.")
@click.option("--judge-api-key", metavar="KEY", envvar="MIRAGE_KG_JUDGE_API_KEY",
              help="API key for the judge [default: $MIRAGE_KG_JUDGE_API_KEY, else $OPENAI_API_KEY].")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of a table.")
@click.option("--html", "html_path", metavar="FILE", type=click.Path(dir_okay=False, path_type=FsPath),
              help="Also write a self-contained HTML report with plots.")
def eval_command(dataset: str, data: str | None, kg: str | None, store: str | None, endpoint: str | None,
                 kinds_files: tuple[str, ...], pipelines: tuple[str, ...], limit: int | None,
                 seed: int, backend: str, model: str | None, base_url: str | None, max_new_tokens: int | None,
                 overrides: tuple[str, ...], batch_size: int, output: str | None, threads: int, no_bertscore: bool,
                 judge_url: str | None, judge_model: str | None, judge_api_key: str | None, as_json: bool,
                 html_path: FsPath | None) -> None:
    """Evaluate answer pipelines on DATASET (genmedgpt5k, genmedgpt5k-linked, explaincpe, or jsonl with --data).

    Results stream to <output>/results.jsonl; run the same command again after an interruption and it picks up
    where it stopped. Metrics: BERTScore F1 (offline all-MiniLM-L6-v2), accuracy, linking recall@5, evidence
    recall and size, citation validity, abstention, tokens and seconds per question."""
    import os

    from mirage_reason.evaluation.report import render_table, write_html
    from mirage_reason.evaluation.session import EvalRequest, evaluate, parse_overrides

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if judge_url and not judge_model:
        raise click.UsageError("--judge-url needs --judge-model")
    request = EvalRequest(
        dataset=dataset.lower(), data=data, kg=kg, store=store, endpoint=endpoint, kinds=kinds_files,
        pipelines=pipelines, limit=limit, seed=seed, backend=backend,
        model=model, base_url=base_url, max_new_tokens=max_new_tokens, overrides=parse_overrides(overrides),
        batch_size=batch_size, output=output, bertscore=not no_bertscore, judge_url=judge_url,
        judge_model=judge_model, judge_api_key=judge_api_key, threads=threads or None,
    )
    run = evaluate(request, on_output=lambda path: click.echo(f"results: {path / 'results.jsonl'}", err=True))
    if html_path is not None:
        samples = {}
        for name in run.report["pipelines"]:
            samples[name] = [r for r in run.records if r["pipeline"] == name][:5]
        write_html(run.report, html_path, samples)
        click.echo(f"HTML report: {html_path}", err=True)
    if as_json:
        click.echo(json.dumps(run.report, indent=2, ensure_ascii=False))
        return
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a log file or a pipe: do not squeeze the table into 80 columns
        console = Console(width=160)
    console.print(render_table(run.report))
    click.echo(f"report: {run.output / 'report.json'} ({run.report['seconds_wall']:.1f} s)")
