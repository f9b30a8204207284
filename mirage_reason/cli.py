"""``mirage-kg ask`` (answer one question with MIRAGE over a KG) and ``mirage-kg serve-llm`` (an OpenAI-compatible
server over a local model). Heavy imports happen inside the commands so ``mirage-kg --help`` stays fast."""

from __future__ import annotations

import json
import os
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

import click

from mirage_kg import MirageError

from mirage_reason.config import PIPELINES, SMALL_MODEL_BUDGETS, MirageConfig

if TYPE_CHECKING:
    from mirage_reason.backends.base import Backend
    from mirage_reason.coordinator import Answer

__all__ = ["ask", "serve_llm"]

DEFAULT_GPU_MODEL = "Qwen/QwQ-32B"
CPU_FALLBACK_MODEL = "smollm2"


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _scripted(path: str) -> Backend:
    """A JSON list of completions (replayed in order, cycling) or an object {prompt substring: completion}, where the
    first key found in the prompt wins and the key "" is the default."""
    from mirage_reason.backends.scripted import ScriptedBackend

    script = json.loads(FsPath(path).read_text(encoding="utf-8"))
    if isinstance(script, dict):
        rules = [(str(k), str(v)) for k, v in script.items()]

        def reply(prompt: str) -> str:
            return next((v for k, v in rules if k and k in prompt), script.get("", ""))

        return ScriptedBackend(reply)
    if not isinstance(script, list) or not script:
        raise click.BadParameter("the script must be a non-empty JSON list or object", param_hint="--script")
    return ScriptedBackend([str(s) for s in script], cycle=True)


def _backend(kind: str, model: str | None, base_url: str | None, script: str | None) -> tuple[Backend, bool]:
    """The backend, and whether it is the small CPU model (which gets small length budgets)."""
    if script is not None:
        return _scripted(script), False
    if kind == "openai":
        if not base_url:
            raise click.UsageError("--backend openai needs --base-url (or $MIRAGE_KG_BASE_URL)")
        from mirage_reason.backends.openai_backend import OpenAIBackend

        return OpenAIBackend(base_url, model), False
    if model is None:
        if _cuda_available():
            model = DEFAULT_GPU_MODEL
        else:
            model = CPU_FALLBACK_MODEL
            click.echo(f"no CUDA GPU: using SmolLM2-135M-Instruct (offline, on the CPU) instead of "
                       f"{DEFAULT_GPU_MODEL}, with small length budgets; pass --model to choose a model", err=True)
    from mirage_reason.backends.transformers_backend import TransformersBackend

    return TransformersBackend(model), model.lower() == CPU_FALLBACK_MODEL


def _config(pipeline: str, small: bool, max_new_tokens: int | None, **settings: Any) -> MirageConfig:
    budgets: dict[str, int] = dict(SMALL_MODEL_BUDGETS) if small else {}
    if max_new_tokens is not None:
        budgets.update(max_new_tokens=max_new_tokens, max_chain_tokens=(2 if small else 4) * max_new_tokens,
                       decomposer_max_new_tokens=max_new_tokens, synthesizer_max_new_tokens=max_new_tokens)
    return MirageConfig.pipeline(pipeline, **budgets, **settings)


def _print_text(answer: Answer) -> None:
    click.echo(answer.text)
    if answer.claims:
        click.echo("\nClaims and the knowledge-graph paths they rest on:")
        for i, claim in enumerate(answer.claims, start=1):
            click.echo(f"  [{i}] {claim.entity.label} ({claim.kind})")
            for path in claim.citations:
                click.echo(f"      - {path.text}")
    for flag in answer.flags:
        click.echo(f"note: {flag}", err=True)
    stages = ", ".join(f"{k} {v:.1f}s" for k, v in answer.timings.items() if v >= 0.05 and k != "total")
    click.echo(f"\n{len(answer.sub_questions)} sub-question(s), {len(answer.chains)} chain(s), "
               f"{answer.tokens.get('total', 0)} tokens, {answer.timings.get('total', 0.0):.1f} s ({stages})",
               err=True)


@click.command("ask")
@click.argument("question")
@click.option("--store", "store", metavar="DIR", type=click.Path(file_okay=False),
              help="On-disk store folder [default: $MIRAGE_KG_STORE, else the built-in demo KG].")
@click.option("--endpoint", metavar="URL", envvar="MIRAGE_KG_ENDPOINT", help="SPARQL 1.1 query endpoint.")
@click.option("--backend", "backend_kind", type=click.Choice(["transformers", "openai"]), default="transformers",
              show_default=True, help="Where the LLM runs: in-process, or any OpenAI-compatible server.")
@click.option("--model", metavar="ID", help=f"Hub id, local folder or 'smollm2' (transformers) or served model name "
              f"(openai) [default: {DEFAULT_GPU_MODEL} with a CUDA GPU, else smollm2].")
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
@click.option("--seed", type=int, help="Sampling seed (reproducible runs).")
@click.option("--pipeline", type=click.Choice(list(PIPELINES)), default="mirage", show_default=True,
              help="MIRAGE or one of its baselines and ablations.")
@click.option("--embedding-model", metavar="NAME",
              help="Sentence-transformers model for entity matching [default: the offline all-MiniLM-L6-v2]; "
              "'none' matches by name only.")
@click.option("--kinds", "kinds_files", multiple=True, metavar="FILE", type=click.Path(exists=True, dir_okay=False),
              help="Turtle file of entity kinds and clinical roles for a custom ontology (MKG:entityKind, "
              "MKG:clinicalRole; see ontologies/kinds.ttl). Repeatable.")
@click.option("--no-support", type=click.Choice(["flag", "abstain"]), default="flag", show_default=True,
              help="A free-text question the KG supports nothing of: the model's answer, flagged, or an abstention.")
@click.option("--json", "as_json", is_flag=True, help="Print the answer, claims, chains, timings and tokens as JSON.")
@click.option("--html", "html_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Also write a readable HTML page of the answer and its trace.")
@click.option("--script", hidden=True, type=click.Path(exists=True, dir_okay=False),
              help="Replay a scripted model from a JSON file (tests).")
def ask(question: str, store: str | None, endpoint: str | None, backend_kind: str, model: str | None,
        base_url: str | None, n_q: int, n_r: int, k: int, max_hops: int, samples: int, max_new_tokens: int | None,
        seed: int | None, pipeline: str, embedding_model: str | None, kinds_files: tuple[str, ...], no_support: str,
        as_json: bool, html_file: str | None, script: str | None) -> None:
    """Answer QUESTION with MIRAGE over a knowledge graph: decompose it, reason in parallel chains that search the
    graph, and synthesise an answer whose every claim cites the graph paths it rests on.

    With no GPU and no --model it runs SmolLM2-135M on the CPU over the built-in demo KG, offline. Not medical
    advice."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if not question.strip():
        raise click.UsageError("QUESTION is empty")
    try:
        from mirage_kg import KnowledgeGraph, open_store

        from mirage_reason.coordinator import Mirage

        kg = KnowledgeGraph(open_store(store, endpoint), embedding_model=embedding_model)
        backend, small = _backend(backend_kind, model, base_url, script)
        config = _config(pipeline, small, max_new_tokens, n_q=n_q, n_r=n_r, k=k, max_hops=max_hops,
                         samples=samples, seed=seed, kinds=kinds_files, no_support=no_support)
        answer = Mirage(kg, backend, config).answer(question)
    except MirageError as exc:
        raise click.ClickException(str(exc)) from None
    if html_file is not None:
        FsPath(html_file).write_text(answer.to_html(), encoding="utf-8")
        click.echo(f"wrote {html_file}", err=True)
    if as_json:
        click.echo(json.dumps(answer.to_json(), indent=2, ensure_ascii=False))
    else:
        _print_text(answer)


@click.command("serve-llm")
@click.option("--model", default=CPU_FALLBACK_MODEL, show_default=True, metavar="ID",
              help="Hub id, local folder or 'smollm2'.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8000, show_default=True,
              help="0 picks a free port.")
@click.option("--served-model-name", metavar="NAME", help="The model id clients send [default: --model].")
@click.option("--dtype", default="auto", show_default=True)
@click.option("--device-map", default="auto", show_default=True,
              help="'auto' (GPU + accelerate only), 'none', or a device.")
@click.option("--threads", type=click.IntRange(min=1), help="CPU threads for torch while generating [default: every usable core].")
@click.option("--think", type=click.Choice(["keep", "strip"]), default="keep", show_default=True,
              help="Keep or drop finished <think> blocks in completions.")
@click.option("--max-batch", type=click.IntRange(min=1), default=32, show_default=True,
              help="Most prompts per generate call.")
@click.option("--quiet", is_flag=True, help="Do not log requests.")
def serve_llm(model: str, host: str, port: int, served_model_name: str | None, dtype: str, device_map: str,
              threads: int | None, think: str, max_batch: int, quiet: bool) -> None:
    """Serve a local model over the OpenAI HTTP API (/v1/completions, /v1/chat/completions, /v1/models), batching
    concurrent requests; point `mirage-kg ask --backend openai --base-url http://HOST:PORT/v1` at it."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from mirage_reason.backends.transformers_backend import TransformersBackend
        from mirage_reason.serve import serve

        backend = TransformersBackend(model, device_map=None if device_map == "none" else device_map, dtype=dtype,
                                      threads=threads, think=think, max_batch_size=max_batch)  # type: ignore[arg-type]
    except MirageError as exc:
        raise click.ClickException(str(exc)) from None
    serve(backend, host, port, model_name=served_model_name or model, max_batch=max_batch, verbose=not quiet)
