"""The paper's metrics (USR, GUR, RAP, MIA), defined precisely.

Paper (Liu et al., "Recover-to-Forget", App. C) gives them in words; our exact
definitions, used for every method and task:

* a probe counts as **answered** when the ROUGE-L recall of its reference answer in
  the model's greedy output is at least ``ANSWERED_RECALL`` (multiple-choice
  probes: the highest-likelihood choice is the correct one);
* **USR** (unlearning success rate, %, higher is better): among the *held-out* forget
  probes the untouched model answered, the share the unlearned model no longer
  answers; for multiple-choice probes rescaled so that chance-level answering counts
  as complete forgetting (see :func:`usr`). Reported per probe set (``usr_by_level``)
  and pooled over them (:func:`pooled`); ``usr_seen`` is the same on the seen sets,
  whose strings the request itself contains (see :mod:`r2f_bench.protocol`);
* **GUR** (general utility retention, %, higher is better): the unlearned model's
  mean utility score divided by the untouched model's, times 100;
* **locality** (%, higher is better): the same ratio on the neighbour probes (facts
  next to the target that must stay);
* **RAP** (relearning attack precision, %, lower is better): after a short
  fine-tune of the unlearned model on paraphrased target data, the share of the
  originally answered forget probes whose answer comes back (multiple choice:
  above chance);
* **MIA** (model identity alignment, higher means closer to the original): mean
  cosine similarity of the next-token probability vectors of the untouched and
  unlearned models over every position of a fixed set of general prompts. (The
  paper calls it a similarity in App. C but marks it "lower is better" in Table 3;
  we report the similarity and say so.)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import torch
import torch.nn.functional as F

ANSWERED_RECALL = 0.5


@lru_cache(maxsize=1)
def _scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


def rouge_l_recall(reference: str, prediction: str) -> float:
    """ROUGE-L recall of ``reference`` in ``prediction`` (RWKU's official score)."""
    if not reference.strip():
        return 0.0
    return float(_scorer().score(reference, prediction)["rougeL"].recall)


def rouge_l_f1(reference: str, prediction: str) -> float:
    """ROUGE-L F1 (MUSE's official VerbMem / KnowMem score)."""
    if not reference.strip():
        return 0.0
    return float(_scorer().score(reference, prediction)["rougeL"].fmeasure)


def usr(before: Sequence[bool], after: Sequence[bool], chance: float = 0.0) -> float | None:
    """% of probes answered before and not after; ``None`` if none was answered before.

    ``chance`` is the probability of answering a probe right without knowing it
    (multiple choice: 1 / #choices). A model that knows nothing still gets that share
    right, so the raw share is divided by ``1 - chance`` (capped at 100): complete
    forgetting scores 100 whatever the format.
    """
    known = [a for b, a in zip(before, after) if b]
    if not known:
        return None
    return min(100.0, 100.0 * sum(not a for a in known) / len(known) / (1.0 - chance))


def recovery(before: Sequence[bool], after: Sequence[bool], chance: float = 0.0) -> float | None:
    """% of probes answered before that are answered again (RAP, after relearning),
    with ``chance`` (see :func:`usr`) as the floor: guessing alone scores 0."""
    known = [a for b, a in zip(before, after) if b]
    if not known:
        return None
    return max(0.0, (100.0 * sum(known) / len(known) - 100.0 * chance) / (1.0 - chance))


def pooled(values: dict[str, float | None], weights: dict[str, int]) -> float | None:
    """Per-set rates pooled, weighted by the probes each counts (known before):
    the plain rate over all probes when the sets share a chance level."""
    parts = [(v, weights[s]) for s, v in values.items() if v is not None and weights.get(s)]
    total = sum(w for _, w in parts)
    return sum(v * w for v, w in parts) / total if total else None


def retention(before: float, after: float) -> float | None:
    """GUR: ``after`` as a % of ``before``."""
    if before <= 0:
        return None
    return 100.0 * after / before


@torch.no_grad()
def identity_alignment(original: torch.nn.Module, edited: torch.nn.Module, tokenizer: Any,
                       prompts: Sequence[str], batch_size: int = 16) -> float:
    """MIA: mean cosine similarity of next-token distributions over all prompt positions."""
    sims: list[torch.Tensor] = []
    device = next(original.parameters()).device
    for i in range(0, len(prompts), batch_size):
        enc = tokenizer(list(prompts[i:i + batch_size]), return_tensors="pt", padding=True,
                        truncation=True, max_length=64).to(device)
        p = F.softmax(original(**enc).logits.float(), dim=-1)
        q = F.softmax(edited(**enc).logits.float(), dim=-1)
        cos = F.cosine_similarity(p, q, dim=-1)
        sims.append(cos[enc["attention_mask"].bool()])
    return float(torch.cat(sims).mean())


def mean(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else float("nan")
