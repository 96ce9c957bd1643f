"""Per-metric statistics of result records with crossed bootstrap CIs, and the tests that
call a difference between two methods.

Every number a table or plot shows is :func:`group_stats`'s: the mean of a metric over
every (target, seed) record that has it, with its 95% bootstrap confidence interval and
``n`` the number of records. The bootstrap is crossed (:func:`unit_weights`): it resamples
whole **targets** and, independently, whole **run seeds** (differently taught models), so
an interval reflects the spread between targets and between taught models. The
:class:`Stat` carries how many targets and seeds it rests on. Which records are pooled in
one group: :mod:`r2f_bench.results.cells`.

A difference between paired per-unit scores is called by :func:`sign_flip_p` (targets
exchangeable; the frontier's summaries, which are not per unit, floor the bootstrap's p at
its least), Holm-corrected over a table's family of comparisons (:func:`holm`, level
:data:`ALPHA`), and never from fewer than :data:`MIN_MODELS` taught models
(:func:`too_few_models`).
"""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np

BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE  # the family-wise error rate of a table's comparisons (:func:`holm`)
MIN_MODELS = 3  # taught models a difference must rest on before a table calls it
Record = Mapping[str, Any]


@dataclass(frozen=True)
class Stat:
    """Mean of ``n`` values with its confidence interval [``lo``, ``hi``] (``None`` where it
    cannot be estimated), and the ``targets`` and ``seeds`` those values come from where known."""

    mean: float
    lo: float | None
    hi: float | None
    n: int
    targets: int | None = None
    seeds: int | None = None


def percentile_interval(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 95% percentile interval of bootstrap ``draws`` along their first axis."""
    ordered = np.sort(np.asarray(draws, dtype=float), axis=0)
    tail = (1 - CONFIDENCE) / 2
    return ordered[int(tail * len(ordered))], ordered[math.ceil((1 - tail) * len(ordered)) - 1]


def summarize(values: Sequence[float], bootstrap_seed: int = 0) -> Stat | None:
    """The mean and its 95% percentile-bootstrap interval over independent ``values``
    (the bootstrap seeded: tables are reproducible)."""
    if not values:
        return None
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Stat(mean, None, None, 1)
    rng = random.Random(bootstrap_seed)
    lo, hi = percentile_interval(np.array([statistics.fmean(rng.choices(values, k=len(values)))
                                           for _ in range(BOOTSTRAP_SAMPLES)]))
    return Stat(mean, float(lo), float(hi), len(values))


def _label_counts(labels: Sequence[Hashable], samples: int, rng: np.random.Generator) -> np.ndarray:
    """``samples`` × units: each row draws the distinct ``labels`` with replacement, and a
    unit weighs the number of times its label was drawn."""
    position = {t: i for i, t in enumerate(dict.fromkeys(labels))}
    index = np.array([position[t] for t in labels])
    k = len(position)
    picks = rng.integers(0, k, size=(samples, k)) + k * np.arange(samples)[:, None]
    return np.bincount(picks.ravel(), minlength=samples * k).reshape(samples, k)[:, index].astype(float)


def unit_weights(targets: Sequence[Hashable], seeds: Sequence[Hashable], samples: int = BOOTSTRAP_SAMPLES,
                 bootstrap_seed: int = 0) -> np.ndarray:
    """Bootstrap weights (``samples`` × units) for units (``targets[i]``, ``seeds[i]``): a
    crossed bootstrap. Each row draws the distinct targets and, independently, the distinct
    run seeds (differently taught models) with replacement; unit (t, s) weighs
    count(t) × count(s). Targets and taught models both vary, so both are resampled: a
    method that does better on one taught model than another (a method × model
    interaction) widens its interval, which resampling targets alone hides. With one seed
    it is the bootstrap over targets, with one target over seeds, with one unit of each
    over units. A row whose draws meet no unit (a sparse grid) is drawn again. The same
    units and ``bootstrap_seed`` give the same rows, so statistics drawn with them are paired."""
    rng = np.random.default_rng(bootstrap_seed)
    crossed = [labels for labels in (targets, seeds) if len(set(labels)) > 1] or [range(len(targets))]
    weights = np.ones((samples, len(targets)))
    for labels in crossed:
        weights *= _label_counts(list(labels), samples, rng)
    while (empty := weights.sum(axis=1) == 0).any():
        redrawn = np.ones((int(empty.sum()), len(targets)))
        for labels in crossed:
            redrawn *= _label_counts(list(labels), len(redrawn), rng)
        weights[empty] = redrawn
    return weights


def clustered(values: Sequence[float], targets: Sequence[Hashable], seeds: Sequence[Hashable],
              bootstrap_seed: int = 0) -> Stat | None:
    """The mean of per-unit ``values`` (unit i: target ``targets[i]``, seed ``seeds[i]``) and its
    95% interval resampling targets and seeds (:func:`unit_weights`); none from one value."""
    x = np.asarray(values, dtype=float)
    if not x.size:
        return None
    n_targets, n_seeds = len(set(targets)), len(set(seeds))
    if len(x) < 2:
        return Stat(float(x.mean()), None, None, 1, n_targets, n_seeds)
    w = unit_weights(targets, seeds, bootstrap_seed=bootstrap_seed)
    lo, hi = percentile_interval(w @ x / w.sum(axis=1))
    return Stat(float(x.mean()), float(lo), float(hi), len(x), n_targets, n_seeds)


def sign_flip_p(differences: Sequence[float], clusters: Sequence[Hashable], exact_up_to: int = 16,
                samples: int = 1 << 16, sample_seed: int = 0) -> float:
    """The two-sided sign-flip (randomisation) test that paired ``differences`` have mean 0,
    with whole ``clusters`` (targets) as the exchangeable units: each cluster's sum of
    differences keeps or flips its sign, and p is the share of the 2^k sign assignments whose
    total is at least as far from 0 as the observed one (so the statistic is the mean of all
    ``differences``; exact up to ``exact_up_to`` clusters, else ``samples`` random assignments
    with the observed one counted). Unlike a bootstrap p-value, which is 0 whenever every
    difference has one sign, it cannot fall below 2 / 2^k: on three targets 0.25, on ten 0.002."""
    by: dict[Hashable, float] = defaultdict(float)
    for d, c in zip(differences, clusters, strict=True):
        by[c] += float(d)
    sums = np.array(list(by.values()))
    k = len(sums)
    if k <= exact_up_to:
        signs = 1 - 2 * ((np.arange(1 << k)[:, None] >> np.arange(k)) & 1)  # row 0: every sign kept
    else:
        signs = np.random.default_rng(sample_seed).choice([-1.0, 1.0], size=(samples + 1, k))
        signs[0] = 1.0
    totals = np.abs(signs @ sums)
    observed = totals[0]  # the same arithmetic as every other row: ties are ties
    if not k or observed == 0:
        return 1.0
    return float((totals >= observed - 1e-9 * np.abs(sums).sum()).mean())


def excludes_zero(stat: Stat) -> bool:
    """Whether ``stat``'s interval lies wholly on one side of 0 (uncorrected for how many
    comparisons are made: see :func:`holm`)."""
    return stat.lo is not None and stat.hi is not None and (stat.lo > 0 or stat.hi < 0)


def holm(p_values: Mapping[Hashable, float], alpha: float = ALPHA) -> dict[Hashable, bool]:
    """Which of a family of comparisons stay significant at family-wise level ``alpha``
    (Holm's step-down: the i-th smallest of m p-values against alpha / (m − i), stopping at
    the first that fails). A table of 15 methods × 3 summaries makes 45 comparisons; at
    0.05 each, about two would look different by chance alone."""
    ordered = sorted(p_values, key=lambda k: p_values[k])
    out = dict.fromkeys(p_values, False)
    for i, k in enumerate(ordered):
        if p_values[k] > alpha / (len(ordered) - i):
            break
        out[k] = True
    return out


def metric_value(record: Record, metric: str) -> float | None:
    """The record's ``metric``; ``a.b`` reads a nested field (e.g. ``usr_by_level.forget_qa``)."""
    v: Any = record
    for part in metric.split("."):
        v = v.get(part) if isinstance(v, Mapping) else None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def group_stats(records: Iterable[Record], metric: str,
                key: Callable[[Record], Hashable]) -> dict[Hashable, Stat]:
    """Group records by ``key``; per group, a :class:`Stat` over its (target, seed) records,
    its interval resampling targets and seeds (:func:`clustered`)."""
    groups: dict[Hashable, list[tuple[str, str, float]]] = defaultdict(list)
    for r in records:
        v = metric_value(r, metric)
        if v is not None:
            groups[key(r)].append((str(r.get("target")), str(r.get("seed")), v))
    out = {}
    for k, rows in groups.items():
        rows.sort()  # a fixed order, so the bootstrap does not depend on the store's order
        targets, seeds, values = zip(*rows)
        out[k] = clustered(values, targets, seeds)
    return out


def too_few_models(records: Iterable[Record], seeds: int) -> str | None:
    """Why no difference between methods may be called from ``records`` read on ``seeds`` run
    seeds: their models were taught, one per seed, and fewer than :data:`MIN_MODELS` stand
    behind the intervals (a method × model interaction is then not resampled); None for a
    pretrained model's own knowledge or enough taught models."""
    taught = any((k := r.get("knowledge") or {}).get("taught", k.get("embedded")) for r in records)
    if taught and seeds < MIN_MODELS:
        return (f"only {seeds} taught model(s) (run seeds) behind the intervals, and a method's advantage can "
                f"change from one taught model to another")
    return None
