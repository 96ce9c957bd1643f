"""Aggregating result records: settings, per-metric statistics with bootstrap CIs.

Every number a table or plot shows is :func:`aggregate`'s: the mean of a metric over
every (target, seed) record that has it, with its 95% bootstrap confidence interval and
``n`` the number of records. The bootstrap is crossed (:func:`unit_weights`): it resamples
whole **targets** and, independently, whole **run seeds** (differently taught models), so
an interval reflects the spread between targets and between taught models. The
:class:`Stat` carries how many targets and seeds it rests on. Records that differ in
setting (:data:`SETTING_FIELDS`) are never pooled.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np

from ..jsontext import canonical_json
from ..metric import METRICS

BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
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


def _value(record: Record, metric: str) -> float | None:
    """The record's ``metric``; ``a.b`` reads a nested field (e.g. ``usr_by_level.forget_qa``)."""
    v: Any = record
    for part in metric.split("."):
        v = v.get(part) if isinstance(v, Mapping) else None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def aggregate(records: Iterable[Record], metric: str,
              key: Callable[[Record], Hashable]) -> dict[Hashable, Stat]:
    """Group records by ``key``; per group, a :class:`Stat` over its (target, seed) records,
    its interval resampling targets and seeds (:func:`clustered`)."""
    groups: dict[Hashable, list[tuple[str, str, float]]] = defaultdict(list)
    for r in records:
        v = _value(r, metric)
        if v is not None:
            groups[key(r)].append((str(r.get("target")), str(r.get("seed")), v))
    out = {}
    for k, rows in groups.items():
        rows.sort()  # a fixed order, so the bootstrap does not depend on the store's order
        targets, seeds, values = zip(*rows)
        out[k] = clustered(values, targets, seeds)
    return out


def setting(record: Record) -> dict[str, Any]:
    """What distinguishes runs of one method besides task, seed and target.

    The request is what the record says it was made of (``request_source``: RWKU's
    corpus and its FB probes never share a row). Hyper-parameters are the resolved ones a record carries (``params``: defaults
    included, so runs that differ only in a default never share a row), else the
    configured overrides. Models are identified by the spec the run was given
    (``config.model`` / ``config.proxy``), not by the descriptive labels in
    ``record["models"]``, which may differ between tasks for the same model (e.g.
    "taught N facts").
    """
    config, models = record.get("config", {}), record.get("models", {})
    params = record.get("params") or config.get("params") or {}
    return {"params": dict(params), "views": config.get("views"),
            "target": config.get("model", models.get("target")), "proxy": config.get("proxy", models.get("proxy")),
            "request": record.get("request_source"), "retain_items": config.get("retain_items"),
            "paraphraser": config.get("paraphraser")}


SETTING_FIELDS = ("params", "views", "target", "proxy", "request", "retain_items", "paraphraser")


def varying(records: Sequence[Record], fields: Sequence[str] = SETTING_FIELDS) -> list[str]:
    """The setting fields that take more than one value among ``records``; for
    ``params``, each varying hyper-parameter as ``params.<name>``."""
    differs = lambda values: len({canonical_json(v) for v in values}) > 1
    out: list[str] = []
    for f in fields:
        if f == "params":
            names = sorted({k for r in records for k in setting(r)["params"]})
            out += [f"params.{k}" for k in names if differs(setting(r)["params"].get(k) for r in records)]
        elif differs(setting(r)[f] for r in records):
            out.append(f)
    return out


def setting_label(s: Mapping[str, Any], fields: Sequence[str]) -> str:
    parts: list[str] = []
    for f in fields:
        group, _, name = f.partition(".")
        if name:
            if name in s.get(group, {}):
                parts.append(f"{name}={s[group][name]}")
        elif f in s:
            parts.append(f"{f}={s[f]}")
    return ", ".join(parts)


def task_order(tasks: Iterable[str]) -> list[str]:
    """``tasks`` as tables order them: the built-in tasks in registration order, then the rest by name."""
    from ..plugins import registry

    rank = {t: i for i, t in enumerate(registry().builtin_order("task"))}
    return sorted(set(tasks), key=lambda t: (rank.get(t, len(rank)), t))


REQUIRED = (("method", str), ("task", str), ("target", str), ("seed", int), ("config", dict), ("versions", dict),
            ("data_revision", str))
OPTIONAL = (("params", dict), ("models", dict), ("info", dict), ("official", dict), ("set_scores", dict),
            ("n", dict), ("phases", dict), ("budget", dict), ("attacks", dict))  # where present, of this type


def invalid(record: Record) -> str | None:
    """Why ``record`` cannot enter a table (``None``: it can): a required field missing or
    mistyped, an optional one (:data:`OPTIONAL`) mistyped, no headline metric fields (``usr``, ``gur``) at all, or a metric that is not
    a number in its range (:attr:`~r2f_bench.metric.MetricSpec.range`; ``null`` is allowed: undefined)."""
    for name, kind in REQUIRED:
        value = record.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"field {name!r} missing or not a {kind.__name__}"
    for name, kind in OPTIONAL:
        if record.get(name) is not None and not isinstance(record[name], kind):
            return f"field {name!r} is a {type(record[name]).__name__}, not a {kind.__name__}"
    for metric in ("usr", "gur"):
        if metric not in record:
            return f"metric {metric!r} missing (an identity without results)"
    for metric, spec in METRICS.items():
        v = record.get(metric)
        if v is None or spec.range is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"metric {metric!r} is {v!r}, not a number"
        lo, hi = spec.range
        if not lo - 1e-9 <= v <= hi + 1e-9:
            return f"metric {metric!r} is {v!r}, outside [{lo:g}, {hi:g}]"
    return None


def cell(record: Record, all_versions: bool = False) -> str:
    """The table cell a record counts in once: method, setting, task, target, seed and split;
    with ``all_versions`` also its code versions and data revision (pooled deliberately)."""
    identity = [record.get("method"), setting(record), record.get("task"), record.get("target"), record.get("seed"),
                (record.get("config") or {}).get("split", "eval")]
    if all_versions:
        identity += [record.get("versions"), record.get("data_revision")]
    return canonical_json(identity)


def superseded(old: Record, new: Record) -> str:
    """Why ``old`` gives way to ``new`` in one cell: another code version, data revision, or a duplicate."""
    if canonical_json(old.get("versions")) != canonical_json(new.get("versions")):
        return "code version"
    if old.get("data_revision") != new.get("data_revision"):
        return "data revision"
    return "duplicate"


def newest_per_cell(records: Iterable[Record], all_versions: bool = False) -> tuple[list[Record], Counter[str]]:
    """One record per :func:`cell`: the newest (``stored_at``, then key), in the input's
    order; and how many were set aside, by :func:`superseded`'s reason."""
    records = list(records)
    newest: dict[str, Record] = {}
    for r in records:
        c = cell(r, all_versions)
        if c not in newest or _age(r) > _age(newest[c]):
            newest[c] = r
    kept_ids = {id(r) for r in newest.values()}
    aside = Counter(superseded(r, newest[cell(r, all_versions)]) for r in records if id(r) not in kept_ids)
    return [r for r in records if id(r) in kept_ids], aside


def _age(record: Record) -> tuple[float, str]:
    stored = record.get("stored_at")
    return (float(stored) if isinstance(stored, (int, float)) else 0.0, str(record.get("key", "")))
