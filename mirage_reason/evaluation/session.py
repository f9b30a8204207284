"""One evaluation from a request to a report: open the KG and the backend, load the dataset, run the pipelines
(resumably), score, judge if asked, and summarise. ``mirage-kg eval`` is a thin layer over :func:`evaluate`."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import TYPE_CHECKING, Any

from mirage_kg import InputError, KnowledgeGraph, demo_store, open_store

from mirage_reason.pipeline.config import MirageConfig
from mirage_reason.evaluation.datasets import Example, default_data_dir, load_dataset
from mirage_reason.evaluation.metrics import BertScorer
from mirage_reason.evaluation.pipelines import PIPELINE_NAMES, EvalResources, Pipeline, build_pipeline
from mirage_reason.evaluation.report import summarise
from mirage_reason.evaluation.runner import RunSettings, run_pipelines

if TYPE_CHECKING:
    from mirage_reason.backends.base import Backend

__all__ = ["DEFAULT_SCRIPTED_ANSWER", "EvalRequest", "EvalRun", "evaluate", "open_kg", "parse_overrides",
           "reasoner_config"]

DEFAULT_SCRIPTED_ANSWER = "I am not sure; please see a doctor. Answer: A"
REPORT_FILE = "report.json"


@dataclass
class EvalRequest:
    """What ``mirage-kg eval`` was asked; ``None`` means the documented default."""

    dataset: str
    data: str | None = None
    kg: str | None = None
    store: str | None = None  # an existing store folder
    endpoint: str | None = None  # a SPARQL 1.1 endpoint
    kinds: Sequence[str] = ()  # extra kinds/roles Turtle files
    pipelines: Sequence[str] = PIPELINE_NAMES
    limit: int | None = None
    seed: int = 0
    backend: str = "transformers"
    model: str | None = None
    base_url: str | None = None
    max_new_tokens: int | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    batch_size: int = 8
    output: str | None = None
    bertscore: bool = True
    judge_url: str | None = None
    judge_model: str | None = None
    judge_api_key: str | None = None
    progress: bool | None = None
    threads: int | None = 1  # torch CPU threads; None leaves torch's default


@dataclass
class EvalRun:
    """A finished evaluation: its report, the output folder and the records behind the report."""

    report: dict[str, Any]
    output: FsPath
    records: list[dict[str, Any]]


def parse_overrides(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings -> MirageConfig fields, typed by the field's default (int, float, bool, or None)."""
    from mirage_reason.pipeline.config import parse_settings

    try:
        return parse_settings(pairs)
    except ValueError as exc:
        raise InputError(str(exc)) from None




def model_name(request: EvalRequest) -> str | None:
    """The model this run uses: as given, else (an in-process engine) QwQ-32B with a CUDA GPU and SmolLM2 without
    one, as ``mirage-kg ask`` chooses."""
    from mirage_reason.backends.defaults import ENGINES, choose_engine

    if request.model or request.backend not in ENGINES:
        return request.model
    return choose_engine(request.backend, None)[1]


def reasoner_config(request: EvalRequest, model: str | None = None) -> MirageConfig:
    """The reasoner settings shared by every model pipeline, as ``mirage-kg ask`` builds them: the small-model
    budgets for SmolLM2, then ``--max-new-tokens`` (per step; a chain gets 2x with SmolLM2, else 4x), the seed, and
    finally every ``--set``."""
    from mirage_reason.pipeline import config as config_module

    from mirage_reason.backends.defaults import ENGINES, is_small_model

    small = request.backend in ENGINES and is_small_model(model)
    changes: dict[str, Any] = dict(getattr(config_module, "SMALL_MODEL_BUDGETS", {})) if small else {}
    changes["seed"] = request.seed
    if request.max_new_tokens is not None:
        n = request.max_new_tokens
        changes.update(max_new_tokens=n, max_chain_tokens=(2 if small else 4) * n, decomposer_max_new_tokens=n,
                       synthesizer_max_new_tokens=n)
    if request.kinds:
        changes["kinds"] = tuple(str(FsPath(k).resolve()) for k in request.kinds)
    changes.update(request.overrides)
    try:
        return MirageConfig(**changes)
    except (TypeError, ValueError) as exc:
        raise InputError(str(exc)) from None


def _kg_source(request: EvalRequest) -> str:
    """``"demo"``, the absolute path of the KG file or store folder this run uses, ``store:PATH`` or
    ``endpoint:URL``."""
    given = [name for name, value in (("--kg", request.kg), ("--store", request.store),
                                      ("--endpoint", request.endpoint)) if value]
    if len(given) > 1:
        raise InputError(f"give one of {', '.join(given)}: they name different knowledge graphs")
    if request.endpoint:
        return "endpoint:" + request.endpoint.strip()
    if request.store:
        folder = FsPath(request.store).expanduser()
        if not (folder.is_dir() and _is_store(folder)):
            raise InputError("not a store folder (build one with `mirage-kg load --store DIR ...` or "
                             "`mirage-kg build-default --store DIR`)", folder)
        return "store:" + str(folder.resolve())
    if request.kg is not None:
        if request.kg.strip().lower() == "demo":
            return "demo"
        path = FsPath(request.kg).expanduser()
        if not path.exists():
            raise InputError("no such KG file or store folder (give a triple/RDF file, a store folder or 'demo')",
                             path)
        return str(path.resolve())
    if request.dataset.lower().startswith("genmedgpt5k"):
        try:
            triples = default_data_dir() / "emckg" / "triples.tsv"
        except InputError:
            raise InputError("GenMedGPT-5k is evaluated on the EMCKG graph: give --kg PATH/triples.tsv or set "
                             "MIRAGE_KG_DATA") from None
        if not triples.is_file():
            raise InputError("the EMCKG graph is missing; give --kg PATH", triples)
        return str(triples.resolve())
    return "demo"


def _given_kg(kg: Any) -> str:
    location = getattr(getattr(kg, "store", None), "location", None)
    return f"given {type(kg).__name__}" + (f" at {location}" if location else "")


def _is_store(folder: FsPath) -> bool:
    """An Oxigraph store folder (RocksDB keeps a ``CURRENT`` file), as opposed to a source release folder."""
    return (folder / "CURRENT").is_file()


def open_kg(source: str, workdir: FsPath) -> KnowledgeGraph:
    """The KG of ``source``: the demo KG; a store folder as it is; a source file or release folder (anything
    ``mirage-kg load`` reads) loaded once into an on-disk store under ``workdir/kg-store/``, reused by later runs
    and reloaded when the source changes."""
    if source == "demo":
        return KnowledgeGraph(demo_store())
    if source.startswith("endpoint:"):
        return KnowledgeGraph(open_store(endpoint=source[len("endpoint:"):]))
    if source.startswith("store:"):
        return KnowledgeGraph(open_store(FsPath(source[len("store:"):])))
    path = FsPath(source)
    if path.is_dir() and _is_store(path):
        return KnowledgeGraph(open_store(path))
    from mirage_kg.loaders import LoadOptions, LoadReport, detect

    loader = detect(path)  # an InputError naming the path when no loader reads it
    stat = path.stat()
    tag = hashlib.sha256(f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    folder = workdir / "kg-store" / tag
    marker = folder.parent / f"{tag}.loaded"
    store = open_store(folder, create=True)
    if not marker.exists():
        loader.load(store, path, LoadOptions(), LoadReport())
        marker.write_text(json.dumps({"source": str(path), "size": stat.st_size}), encoding="utf-8")
    return KnowledgeGraph(store)


def build_backend(request: EvalRequest, model: str | None) -> Backend:
    from mirage_reason.backends import get_backend

    name = request.backend.strip().lower()
    if name == "scripted":
        from mirage_reason.backends import ScriptedBackend

        if request.model:
            return _scripted(FsPath(request.model))
        return ScriptedBackend(lambda prompt: DEFAULT_SCRIPTED_ANSWER)
    if name == "openai":
        if not request.base_url:
            raise InputError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
        return get_backend("openai", base_url=request.base_url, model=request.model)
    from mirage_reason.backends.defaults import ENGINES, choose_engine

    if name in ENGINES:  # auto: transformers with a CUDA GPU, else llama.cpp (the faster CPU engine)
        engine, chosen = choose_engine(name, model)
        return get_backend(engine, model=chosen)
    try:
        return get_backend(name, **({"model": request.model} if request.model else {}))
    except ValueError as exc:
        raise InputError(str(exc)) from None


def _scripted(path: FsPath) -> Backend:
    """A JSON list of completions (replayed in order, cycling: the order of questions matters) or an object
    ``{prompt substring: completion}`` where the first key found in the prompt wins and ``""`` is the default (the
    same prompt always gets the same completion), as ``mirage-kg ask --script`` reads them."""
    from mirage_reason.backends import ScriptedBackend

    try:
        script = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        raise InputError(f"the scripted backend's --model must be a JSON file: {exc}", path) from None
    if isinstance(script, dict) and script and all(isinstance(v, str) for v in script.values()):
        rules = [(str(k), str(v)) for k, v in script.items()]
        default = str(script.get("", ""))
        return ScriptedBackend(lambda prompt: next((v for k, v in rules if k and k in prompt), default))
    if isinstance(script, list) and script and all(isinstance(x, str) for x in script):
        return ScriptedBackend(script, cycle=True)
    raise InputError("expected a non-empty JSON list of completions or an object {prompt substring: completion}",
                     path)


def _judge_backend(request: EvalRequest) -> Backend:
    from mirage_reason.backends import get_backend

    return get_backend("openai", base_url=request.judge_url, model=request.judge_model,
                       api_key=request.judge_api_key, mode="chat")


def _needs_model(request: EvalRequest, pipelines: Sequence[Pipeline] | None) -> bool:
    if pipelines is not None:
        return any(p.uses_model for p in pipelines)
    return any(p != "retrieve" for p in request.pipelines)


def _set_threads(threads: int | None) -> None:
    """On small CPUs torch's default thread count made the MiniLM linker about 5x slower per question (0.38 s vs
    0.07 s on 2 cores) and SmolLM2 about 4x slower: one thread is the default here."""
    if threads is None:
        return
    if threads < 1:
        raise InputError(f"--threads must be at least 1, not {threads}")
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(threads)


def default_output(request: EvalRequest, settings: RunSettings) -> FsPath:
    return FsPath("mirage-eval") / f"{request.dataset.lower()}-{settings.fingerprint[:8]}"


def evaluate(request: EvalRequest, *, kg: KnowledgeGraph | None = None, backend: Backend | None = None,
             examples: Sequence[Example] | None = None, pipelines: Sequence[Pipeline] | None = None,
             judge_backend: Backend | None = None, on_output: Callable[[FsPath], None] | None = None) -> EvalRun:
    """Run (or resume) an evaluation and return its report; the report is also written to ``<output>/report.json``.

    ``kg``, ``backend``, ``examples``, ``pipelines`` and ``judge_backend`` replace what the request would build
    (an application's own graph or model, or test doubles)."""
    started = time.perf_counter()
    _set_threads(request.threads)
    unknown = [p for p in request.pipelines if p not in PIPELINE_NAMES]
    if unknown and pipelines is None:
        raise InputError(f"unknown pipeline(s) {', '.join(unknown)}; choose from {', '.join(PIPELINE_NAMES)}")
    if not request.pipelines and pipelines is None:
        raise InputError("no pipelines to run")
    if request.batch_size < 1:
        raise InputError(f"--batch-size must be at least 1, not {request.batch_size}")
    if examples is None:
        examples = load_dataset(request.dataset, request.data, request.limit, request.seed)
    kg_source = _kg_source(request) if kg is None else _given_kg(kg)
    model = model_name(request) if backend is None and _needs_model(request, pipelines) else request.model
    config = reasoner_config(request, model)
    settings = RunSettings(
        dataset=request.dataset.lower(),
        data=str(FsPath(request.data).resolve()) if request.data else None,
        kg=kg_source,
        backend=(backend.name if backend is not None else request.backend),
        model=model,
        base_url=request.base_url,
        seed=request.seed,
        reasoner=config.to_json(),
        bertscore=request.bertscore,
    )
    if backend is None and request.backend.strip().lower() == "scripted" and request.model:
        _scripted(FsPath(request.model))  # a bad script file is one error now, not an error record per question
    output = FsPath(request.output) if request.output else default_output(request, settings)
    output.mkdir(parents=True, exist_ok=True)
    if on_output is not None:
        on_output(output)
    resources = EvalResources(kg_factory=(lambda: kg) if kg is not None else (lambda: open_kg(kg_source, output)),
                              backend_factory=(lambda: backend) if backend is not None else
                              (lambda: build_backend(request, model)), config=config)
    chosen = list(pipelines) if pipelines is not None else [build_pipeline(p, resources) for p in request.pipelines]
    if len({p.name for p in chosen}) != len(chosen):
        raise InputError("each pipeline may run once per evaluation")
    scorer = BertScorer() if request.bertscore else None
    outcome = run_pipelines(examples, chosen, settings, output, batch_size=request.batch_size,
                            kg=lambda: resources.kg, scorer=scorer, progress=request.progress)
    judge_summary = None
    if request.judge_url or judge_backend is not None:
        from mirage_reason.evaluation.judge import PairwiseJudge, summarise_verdicts

        judge_name = request.judge_model or (judge_backend.name if judge_backend is not None else "judge")
        judge = PairwiseJudge(judge_backend or _judge_backend(request), judge_name, seed=request.seed)
        names = [p.name for p in chosen]
        verdicts = judge.judge(examples, outcome.records, names, output, settings.fingerprint)
        judge_summary = summarise_verdicts(verdicts, names, judge_name)
    scorer_name = None
    if scorer is not None and any(r.get("bertscore_f1") is not None for r in outcome.records):
        scorer_name = scorer.implementation
    report = summarise(outcome.records, pipelines=[p.name for p in chosen], dataset=request.dataset.lower(),
                       examples=len(examples), settings=settings.to_json(), fingerprint=settings.fingerprint,
                       errors=outcome.errors, judge=judge_summary, scorer=scorer_name,
                       seconds_wall=round(time.perf_counter() - started, 3))
    (output / REPORT_FILE).write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    return EvalRun(report, output, outcome.records)
