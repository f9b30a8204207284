"""``mirage-kg ask``: answer one question with MIRAGE over a KG. Heavy imports happen inside the command so
``mirage-kg --help`` stays fast."""

from __future__ import annotations

import json
import os
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

import click

from mirage_kg import MirageError

from mirage_reason.backends.defaults import DEFAULT_GPU_MODEL, ENGINES, choose_engine, is_small_model
from mirage_reason.pipeline.config import PIPELINES, SMALL_MODEL_BUDGETS, MirageConfig, parse_settings
from mirage_reason.pipeline.support import valid_text
from mirage_reason.render.html import render_answer

if TYPE_CHECKING:
    from mirage_reason.backends.base import Backend
    from mirage_reason.answer import Answer

__all__ = ["ask", "ask_config", "build_backend", "serve_backend"]

def valid_unicode(text: str) -> str:
    """``text`` with any lone surrogate (a model's broken byte pair) as U+FFFD, so the output is valid UTF-8."""
    return valid_text(text)


def _scripted(path: str) -> Backend:
    """A JSON list of completions (replayed in order, cycling) or an object {prompt substring: completion}, where the
    first key found in the prompt wins and the key "" is the default."""
    from mirage_reason.backends.scripted import ScriptedBackend

    try:
        script = json.loads(FsPath(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: bad UTF-8 or not JSON
        raise click.BadParameter(f"{path}: not a JSON file in UTF-8 ({exc})", param_hint="--script") from None
    completions = script.values() if isinstance(script, dict) else script if isinstance(script, list) else ()
    if not all(isinstance(c, str) for c in completions):
        raise click.BadParameter(f"{path}: every completion must be a string (no nested lists or objects)",
                                 param_hint="--script")
    if isinstance(script, dict):
        rules = [(str(k), str(v)) for k, v in script.items()]

        def reply(prompt: str) -> str:
            return next((v for k, v in rules if k and k in prompt), script.get("", ""))

        return ScriptedBackend(reply)
    if not isinstance(script, list) or not script:
        raise click.BadParameter("the script must be a non-empty JSON list or object", param_hint="--script")
    return ScriptedBackend([str(s) for s in script], cycle=True)


def build_backend(kind: str, model: str | None, base_url: str | None = None, *, max_in_flight: int = 32,
                  announce: bool = False, seeded: bool = False) -> tuple[Backend, bool]:
    """The backend for ``--backend/--model/--base-url``, and whether it runs the small CPU model (small budgets).
    ``seeded`` (``--seed`` given): a llama.cpp engine's thread count does not follow the load (see
    :func:`~mirage_reason.backends.cores.choose_threads`), so the seed gives the same chains again."""
    from mirage_reason.backends import get_backend

    if kind == "openai":
        if not base_url:
            raise click.UsageError("--backend openai needs --base-url (or $MIRAGE_KG_BASE_URL)")
        return get_backend("openai", base_url=base_url, model=model, concurrency=max_in_flight), False
    engine, chosen = choose_engine(kind, model)
    if announce and model is None and is_small_model(chosen):
        click.echo(f"no CUDA GPU: using SmolLM2-135M-Instruct (offline, on the CPU, {engine}) instead of "
                   f"{DEFAULT_GPU_MODEL}, with small length budgets; pass --model to choose a model", err=True)
    steady = {"steady_threads": True} if seeded and engine in ("llamacpp", "llamacpp-server") else {}
    return get_backend(engine, model=chosen, **steady), is_small_model(chosen)


def serve_backend(kind: str, model: str | None, base_url: str | None, script: str | None) -> tuple[Backend, bool]:
    """``build_backend`` with its defaults, or the scripted model of ``--script`` (what ``mirage-kg serve`` uses)."""
    if script is not None:
        return _scripted(script), False
    return build_backend(kind, model, base_url, announce=True)


def ask_config(pipeline: str, small: bool, max_new_tokens: int | None, overrides: dict[str, Any] | None = None,
               **settings: Any) -> MirageConfig:
    """The pipeline's configuration as `ask` and `serve` build it: the small model's budgets when ``small``,
    ``max_new_tokens`` spread over every stage, then ``overrides`` (``--set``) and ``settings``."""
    budgets: dict[str, int] = dict(SMALL_MODEL_BUDGETS) if small else {}
    if max_new_tokens is not None:
        budgets.update(max_new_tokens=max_new_tokens, max_chain_tokens=(2 if small else 4) * max_new_tokens,
                       decomposer_max_new_tokens=max_new_tokens, synthesizer_max_new_tokens=max_new_tokens)
    try:
        return MirageConfig.pipeline(pipeline, **{**budgets, **settings, **(overrides or {})})
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from None


def _print_text(answer: Answer) -> None:
    """How grounded the answer is first, then the answer; the model's own words only under their label; flags,
    claims with their paths, conflicts and dropped claims after (all on stdout: what a reader must see)."""
    click.echo(f"[{answer.support.verdict.upper()}] {answer.support.reason}\n")
    click.echo(answer.text)
    if answer.unsupported_text:
        click.echo("\nThe model's own words, NOT supported by the knowledge graph (not its answer):")
        click.echo("  " + answer.unsupported_text.replace("\n", "\n  "))
    if answer.flags:
        click.echo("\nFlags:")
        for flag in answer.to_json()["flags"]:
            click.echo(f"  [{flag['code']}] {flag['message']}")
    if answer.claims:
        click.echo("\nClaims and the knowledge-graph paths they rest on:")
        for i, claim in enumerate(answer.claims, start=1):
            click.echo(f"  [{i}] {claim.entity.label} ({claim.kind})")
            sources = claim.sources if len(claim.sources) == len(claim.citations) else ((),) * len(claim.citations)
            for path, held_by in zip(claim.citations, sources):
                click.echo(f"      - {path.text}" + (f" [{', '.join(held_by)}]" if held_by else ""))
    if answer.conflicts:
        click.echo("\nConflicts:")
        for conflict in answer.conflicts:
            click.echo(f"  {conflict.kind}: {conflict.reason}")
    if answer.dropped:
        click.echo("\nDropped claims:")
        for claim in answer.dropped:
            click.echo(f"  {claim.entity.label} ({claim.status}): {claim.reason}")
    stages = ", ".join(f"{k} {v:.1f}s" for k, v in answer.timings.items() if v >= 0.05 and k != "total")
    threads = answer.engine.get("threads")
    engine = f"; {answer.engine.get('engine', 'engine')} on {threads} thread(s)" if threads else ""
    click.echo(f"\n{len(answer.sub_questions)} sub-question(s), {len(answer.chains)} chain(s), "
               f"{answer.tokens.get('total', 0)} tokens, {answer.timings.get('total', 0.0):.1f} s ({stages}){engine}",
               err=True)


@click.command("ask")
@click.argument("question")
@click.option("--store", "store", metavar="DIR", type=click.Path(file_okay=False),
              help="On-disk store folder [default: $MIRAGE_KG_STORE, else the built-in demo KG].")
@click.option("--endpoint", metavar="URL", envvar="MIRAGE_KG_ENDPOINT", help="SPARQL 1.1 query endpoint.")
@click.option("--backend", "backend_kind", type=click.Choice([*ENGINES, "openai"]), default="auto", show_default=True,
              help="Where the LLM runs: an in-process engine, or any OpenAI-compatible server (vLLM, SGLang, "
              "llama.cpp's server). auto: transformers with a CUDA GPU, else llama.cpp in process, else llama.cpp's "
              "own server (llamacpp-server) if only that is installed.")
@click.option("--model", metavar="ID", help=f"Hub id or local folder (transformers, vllm), .gguf file (llamacpp), "
              f"'smollm2', or served model name (openai) [default: {DEFAULT_GPU_MODEL} with a CUDA GPU, else smollm2].")
@click.option("--base-url", metavar="URL", envvar="MIRAGE_KG_BASE_URL",
              help="OpenAI-compatible root URL, e.g. http://localhost:8000/v1 (for --backend openai).")
@click.option("--n-q", type=click.IntRange(min=1), default=4, show_default=True, help="Most sub-questions.")
@click.option("--n-r", type=click.IntRange(min=0), default=5, show_default=True, help="Most KG searches per chain.")
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True,
              help="Anchor mode: neighbours per relation and direction.")
@click.option("--max-hops", type=click.IntRange(min=1, max=6), default=3, show_default=True,
              help="Bridge mode: longest path.")
@click.option("--samples", type=click.IntRange(min=1), default=1, show_default=True,
              help="Chains per sub-question (they vote).")
@click.option("--max-new-tokens", type=click.IntRange(min=1),
              help="Tokens per generation step [default: 2048; 96 with smollm2]; a chain gets 4x (2x with smollm2).")
@click.option("--seed", type=int, help="Sampling seed (reproducible runs; each sample gets its own seed from it).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Any reasoner setting (MirageConfig field), e.g. --set samples=3 --set temperature=0.7. Repeatable.")
@click.option("--max-in-flight", type=click.IntRange(min=1), default=32, show_default=True,
              help="Most requests in flight at once to an OpenAI-compatible server (--backend openai).")
@click.option("--pipeline", type=click.Choice(list(PIPELINES)), default="mirage", show_default=True,
              help="MIRAGE or one of its baselines and ablations.")
@click.option("--embedding-model", metavar="NAME",
              help="Sentence-transformers model for entity matching [default: the offline all-MiniLM-L6-v2]; "
              "'none' matches by name only.")
@click.option("--kinds", "kinds_files", multiple=True, metavar="FILE", type=click.Path(exists=True, dir_okay=False),
              help="Turtle file of entity kinds and clinical roles for a custom ontology (MKG:entityKind, "
              "MKG:clinicalRole; see ontologies/kinds.ttl). Repeatable.")
@click.option("--no-support", type=click.Choice(["flag", "abstain"]), default="flag", show_default=True,
              help="A free-text question the KG supports nothing of: say what the graph held and show the model's "
              "answer apart, labelled as not supported (flag), or abstain.")
@click.option("--json", "as_json", is_flag=True, help="Print the answer, claims, chains, timings and tokens as JSON.")
@click.option("--html", "html_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Also write a readable HTML page of the answer and its trace.")
@click.option("--script", hidden=True, type=click.Path(exists=True, dir_okay=False),
              help="Replay a scripted model from a JSON file (tests).")
@click.option("--no-cache", is_flag=True, help="Ask the model again even when the server's answer cache holds this "
              "question with the same store, model, settings and seed (a server's asks: $MIRAGE_KG_SERVER or "
              "$MIRAGE_KG_WARM; a local ask keeps no cache).")
def ask(question: str, store: str | None, endpoint: str | None, backend_kind: str, model: str | None,
        base_url: str | None, n_q: int, n_r: int, k: int, max_hops: int, samples: int, max_new_tokens: int | None,
        seed: int | None, overrides: tuple[str, ...], max_in_flight: int, pipeline: str, embedding_model: str | None,
        kinds_files: tuple[str, ...], no_support: str,
        as_json: bool, html_file: str | None, script: str | None, no_cache: bool) -> None:
    """Answer QUESTION with MIRAGE over a knowledge graph: decompose it, reason in parallel chains that search the
    graph, and synthesise an answer whose every claim cites the graph paths it rests on.

    With no GPU and no --model it runs SmolLM2-135M on the CPU (llama.cpp) over the built-in demo KG, offline. With
    $MIRAGE_KG_SERVER set to a running `mirage-kg serve` (e.g. http://127.0.0.1:8000; token: $MIRAGE_KG_TOKEN) the
    question goes there: no start-up, the server's model and settings. With $MIRAGE_KG_WARM=1 (or the idle seconds)
    a background server for this store and model is reused, or started for later calls, and exits when idle; the
    same question asked again is answered from its cache, saying so (--no-cache asks again). Not medical advice."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not question.strip():
        raise click.UsageError("QUESTION is empty")
    from mirage_reason.service.remote import ask_remote, server_url, warm_server_for

    if server_url() is not None:  # a running `mirage-kg serve` ($MIRAGE_KG_SERVER) answers: no start-up here
        ask_remote(click.get_current_context(), question, as_json)
        return
    try:
        warm = warm_server_for(click.get_current_context())  # $MIRAGE_KG_WARM: a background server answers
    except MirageError as exc:
        raise click.ClickException(str(exc)) from None
    if warm is not None:
        ask_remote(click.get_current_context(), question, as_json, warm)
        return
    try:
        settings = parse_settings(overrides)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--set") from None
    backend: Backend | None = None
    try:
        from mirage_kg import KnowledgeGraph, open_store

        from mirage_reason.pipeline.coordinator import Mirage

        kg = KnowledgeGraph(open_store(store, endpoint), embedding_model=embedding_model)
        if script is not None:
            backend, small = _scripted(script), False
        else:
            backend, small = build_backend(backend_kind, model, base_url, max_in_flight=max_in_flight,
                                               announce=True, seeded=seed is not None)
        config = ask_config(pipeline, small, max_new_tokens, settings, n_q=n_q, n_r=n_r, k=k, max_hops=max_hops,
                         samples=samples, seed=seed, kinds=kinds_files, no_support=no_support)
        answer = Mirage(kg, backend, config).answer(question)
    except MirageError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        if backend is not None:
            backend.close()
    if html_file is not None:
        FsPath(html_file).write_text(valid_unicode(render_answer(answer)), encoding="utf-8")
        click.echo(f"wrote {html_file}", err=True)
    if as_json:
        click.echo(valid_unicode(json.dumps(answer.to_json(), indent=2, ensure_ascii=False)))
    else:
        _print_text(answer)
