"""The paper's metrics (USR, GUR, RAP, identity alignment), defined precisely (their titles,
units and short definitions for tables and summaries: :mod:`r2f_bench.metric`).

**Scale**: every share and score is a percentage (0-100), in records, tables and
``official``/``set_scores`` alike; identity alignment is a cosine similarity (0-1); times are seconds
and memory MB.

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
  whose strings the request itself contains (see :mod:`r2f_bench.engine.protocol`);
* **GUR** (general utility retention, %, higher is better): the unlearned model's
  mean utility score divided by the untouched model's, times 100; undefined (``None``)
  where the untouched model scores below :data:`RATIO_FLOOR` (a ratio to almost
  nothing: an untrained model's 2 % becoming 19 % would read as 955 %);
* **locality** (%, higher is better): the same ratio on the neighbour probes (facts
  next to the target that must stay), pooled over the neighbour sets the untouched model
  scores at least :data:`RATIO_FLOOR` on (the others left out, ``None`` if none is left:
  :func:`floored_sets`);
* **name control** (``name_control``, %, higher is better): the same ratio on the
  neighbour probes asked with the target's name before each (:data:`~r2f_bench.task.NAME_CONTROL`),
  under the same floor:
  a method that removes what is known of the target leaves it where Locality is; one that
  suppresses whatever names the target (USR bought by breaking the name) drops it below;
* **RAP** (relearning attack precision, %, lower is better): after a short
  fine-tune of the unlearned model on paraphrased views of half the request's facts,
  the share of the *forgotten* held-out probes (answered before, not after unlearning)
  whose answer comes back (multiple choice: above chance). Its **control**
  (``rap_control``) runs the same attack on the untouched model: the share of the known
  held-out probes it still answers (100: the attack by itself destroys no recall);
* **identity alignment** (``identity_alignment``, higher means closer to the original):
  mean cosine similarity of the next-token probability vectors of the untouched and
  unlearned models over every position of a fixed set of general prompts. The untouched
  model's vectors are kept by their largest entries (:func:`largest`), so each cosine is
  exact to within :data:`ALIGNMENT_TAIL` below, never above. It is not a
  membership-inference attack: the paper calls it "MIA" (model identity alignment), a
  similarity in App. C but "lower is better" in Table 3; RWKU's MIA is a loss-based
  attack on forget vs retain texts, which this is not. We report the similarity and say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F

from ..data import Probe

ANSWERED_RECALL = 0.5
RATIO_FLOOR = 5.0  # %: an untouched score below which a ratio to it (GUR, Locality, name control) is n/a
ALIGNMENT_TAIL = 1e-3  # the share of a reference distribution's L2 norm its dropped entries may hold
CELLS = 4096  # identity alignment's grid of probabilities: a float64 in [0, 1] shifted right by 50 bits

ANSWERED_NOTE = (f"A probe is answered when the ROUGE-L recall of its reference in the greedy answer is at least "
                 f"{ANSWERED_RECALL} (multiple choice: the correct choice is the most likely); a forget probe its own "
                 f"prompt would answer (its reference is in the question) never counts as known.")


@lru_cache(maxsize=1)
def _scorer():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)


def rouge_l_recall(reference: str, prediction: str) -> float:
    """ROUGE-L recall of ``reference`` in ``prediction`` (RWKU's official score)."""
    if not reference.strip():
        return 0.0
    return float(_scorer().score(reference, prediction)["rougeL"].recall)


def echo_answerable(probe: Probe) -> bool:
    """Whether a generated probe counts as answered by repeating its own prompt (its
    reference is already in its question): a chat model that echoes the question would
    "know" it. Such a probe is never counted as known, so it never enters USR or RAP."""
    return probe.choices is None and rouge_l_recall(probe.answer, probe.prompt) >= ANSWERED_RECALL


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


def recovery(before: Sequence[bool], after: Sequence[bool], attacked: Sequence[bool],
             chance: float = 0.0) -> float | None:
    """RAP: % of the *forgotten* probes (answered before, not after unlearning) that the
    relearning attack brings back, with ``chance`` (see :func:`usr`) as the floor:
    guessing alone scores 0. ``None`` if nothing was forgotten."""
    forgotten = [c for b, a, c in zip(before, after, attacked) if b and not a]
    if not forgotten:
        return None
    return max(0.0, (100.0 * sum(forgotten) / len(forgotten) - 100.0 * chance) / (1.0 - chance))


def kept(before: Sequence[bool], attacked: Sequence[bool], chance: float = 0.0) -> float | None:
    """RAP's control: % of the probes answered before that the untouched model still
    answers after the same attack (100: the attack itself destroys no recall), with
    ``chance`` as the floor. ``None`` if none was answered before."""
    known = [c for b, c in zip(before, attacked) if b]
    if not known:
        return None
    return max(0.0, (100.0 * sum(known) / len(known) - 100.0 * chance) / (1.0 - chance))


def pooled(values: dict[str, float | None], weights: dict[str, int]) -> float | None:
    """Per-set rates pooled, weighted by the probes each counts (known before):
    the plain rate over all probes when the sets share a chance level."""
    parts = [(v, weights[s]) for s, v in values.items() if v is not None and weights.get(s)]
    total = sum(w for _, w in parts)
    return sum(v * w for v, w in parts) / total if total else None


def retention(before: float, after: float, floor: float = 0.0) -> float | None:
    """GUR: ``after`` as a % of ``before``; ``None`` where ``before`` is 0 or below ``floor``
    (a score in %, e.g. :data:`RATIO_FLOOR`): too little to take a ratio to."""
    if before <= 0 or before < floor:
        return None
    return 100.0 * after / before


def floored_sets(before: Mapping[str, float], sets: Iterable[str]) -> list[str]:
    """Those of ``sets`` whose untouched score (``before``, % by set) is at least
    :data:`RATIO_FLOOR`: the sets Locality and the name control pool (a set the model
    barely answered untouched would make their ratio one to almost nothing)."""
    return [s for s in sets if before.get(s, 0.0) >= RATIO_FLOOR]


def _batches(tokenizer: Any, prompts: Sequence[str], batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
    """The tokenised batches identity alignment scores (left or right padded as the
    tokenizer pads; at most 64 tokens a prompt)."""
    for i in range(0, len(prompts), batch_size):
        yield tokenizer(list(prompts[i:i + batch_size]), return_tensors="pt", padding=True, truncation=True,
                        max_length=64)


def positions(tokenizer: Any, prompts: Sequence[str], batch_size: int = 16) -> list[int]:
    """Per batch of ``prompts``: the prompt positions identity alignment compares (its rows)."""
    return [int(enc["attention_mask"].sum()) for enc in _batches(tokenizer, prompts, batch_size)]


@torch.no_grad()
def distributions(model: torch.nn.Module, tokenizer: Any, prompts: Sequence[str],
                  batch_size: int = 16) -> Iterator[torch.Tensor]:
    """Per batch of ``prompts``: the model's next-token distribution at every prompt position
    (rows: the batch's unpadded positions in order; float32), one batch at a time."""
    device = next(model.parameters()).device
    for enc in _batches(tokenizer, prompts, batch_size):
        enc = enc.to(device)
        yield F.softmax(model(**enc).logits.float(), dim=-1)[enc["attention_mask"].bool()]


@dataclass(frozen=True)
class Largest:
    """A batch of next-token distributions kept by their largest entries: per row the number
    kept (``counts``) and the L2 norm of the whole row (``norms``); the kept entries'
    vocabulary ``indices`` and ``values``, flat, row after row."""
    counts: torch.Tensor  # int64 (rows,)
    norms: torch.Tensor  # float64 (rows,)
    indices: torch.Tensor  # int64 (sum of counts,)
    values: torch.Tensor  # float32 (sum of counts,)


def largest(p: torch.Tensor, tail: float = ALIGNMENT_TAIL, chunk: int = 64) -> Largest:
    """Each row of ``p`` (distributions, one a row) kept by its largest entries: all those
    above a threshold on a grid of quarter octaves (a float64's exponent and first two bits of
    mantissa), the highest under which the entries' L2 norm is at most ``tail`` times the
    row's. No sort: one pass sums each cell's squares (float64), ``chunk`` rows at a time.
    A real LM's distribution keeps few entries at 10⁻³: SmolLM2 1,758 of 49,152 on average
    (median 721), Gemma 3 270M 1,120 of 262,144 (median 373); a row whose mass is spread thin
    keeps more. Kept entries are in vocabulary order."""
    parts = []
    for rows in p.float().split(chunk):
        squares = rows.double()
        cells = squares.view(torch.int64) >> 50  # grows with the value: 0 is 0, 1.0 is 4092
        sums = torch.zeros(len(rows), CELLS, dtype=torch.float64, device=rows.device)
        sums.scatter_add_(1, cells, squares.square_())
        below = sums.cumsum(-1)  # [c]: the squares of cell c and of every smaller entry
        at = (cells >= (below <= tail ** 2 * below[:, -1:]).sum(-1, keepdim=True)).nonzero()
        parts.append((torch.bincount(at[:, 0], minlength=len(rows)), below[:, -1].sqrt(), at[:, 1], rows[at[:, 0], at[:, 1]]))
    return Largest(*(torch.cat(column) for column in zip(*parts, strict=True)))


def cosines(reference: Largest, q: torch.Tensor) -> torch.Tensor:
    """Per row, the cosine of ``reference``'s distribution with ``q``'s row. The dropped
    entries' share of the dot product is non-negative and at most ``tail`` times the two
    norms (Cauchy-Schwarz), so each value is exact to within ``tail`` below, never above."""
    if len(reference.counts) != len(q):
        raise RuntimeError(f"identity alignment's reference has {len(reference.counts)} positions, {len(q)} expected")
    rows = torch.repeat_interleave(torch.arange(len(reference.counts), device=q.device), reference.counts.to(q.device))
    products = reference.values.to(q.device).double() * q[rows, reference.indices.to(q.device)].double()
    dots = torch.zeros(len(q), dtype=torch.float64, device=q.device).index_add_(0, rows, products)
    return dots / (reference.norms.to(q.device) * q.norm(dim=-1).double()).clamp(min=1e-12)


def identity_alignment(original: Iterable[Largest], edited: torch.nn.Module, tokenizer: Any,
                       prompts: Sequence[str], batch_size: int = 16) -> float:
    """Identity alignment: mean cosine similarity of the edited model's next-token distributions
    to the untouched model's (``original``, per batch :func:`largest` of what
    :func:`distributions` gives on the same prompts) over all prompt positions. Batch by
    batch: the edited model's distributions are never held whole (a full vocabulary per
    position: 6 GB for SmolLM2's 49k tokens on 500 prompts)."""
    sims = [cosines(p, q) for p, q in zip(original, distributions(edited, tokenizer, prompts, batch_size), strict=True)]
    return float(torch.cat(sims).mean())


def mean(xs: Sequence[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else float("nan")
