"""Forget–utility frontiers: methods compared at matched utility, not at one point.

Every method declares the knob that trades forgetting against utility
(:attr:`r2f_bench.unlearner.Unlearner.strength`). ``r2f-bench frontier`` runs each
method at log-spaced strengths of that knob on the same evaluation targets, seeds,
views and retain data, plus once at its dev-tuned defaults, and reads the curve of
(GUR, USR) points in strength order.

**USR at GUR ≥ g** (:func:`best_usr`) is the highest USR the curve reaches while GUR
stays at least ``g``: the measured points with GUR ≥ g, and the points where a segment
between neighbouring strengths crosses GUR = g, interpolated linearly. It is 0 where no
point keeps GUR ≥ g. It is flagged *open* when even the strongest measured point keeps
GUR ≥ g (stronger settings might do better). **Area** (:func:`area`) is the mean of
that best USR over g = 50, 51, …, 100: a summary of the whole frontier, in %.

Uncertainty: the unit of resampling is a (target, seed) pair, measured at every
strength; each bootstrap sample recomputes the mean curve and the statistic, and the
95% percentile interval is reported with ``n`` = the number of pairs.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import Mapping, Sequence

from .aggregate import BOOTSTRAP_SAMPLES, CONFIDENCE, Stat, summarize

GUR_LEVELS = (95.0, 90.0)
AREA_FROM = 50


def best_usr(curve: Sequence[tuple[float, float]], floor: float) -> float:
    """The highest USR along ``curve`` ((GUR, USR) points in strength order) while GUR ≥ ``floor``."""
    best = [usr for gur, usr in curve if gur >= floor]
    for (g0, u0), (g1, u1) in zip(curve, curve[1:]):
        if (g0 - floor) * (g1 - floor) < 0:  # the segment crosses the floor
            best.append(u0 + (u1 - u0) * (floor - g0) / (g1 - g0))
    return max(best, default=0.0)


def area(curve: Sequence[tuple[float, float]]) -> float:
    """Mean of :func:`best_usr` over GUR floors 50, 51, …, 100 (%)."""
    return statistics.fmean(best_usr(curve, float(g)) for g in range(AREA_FROM, 101))


def is_open(curve: Sequence[tuple[float, float]], floor: float) -> bool:
    """Whether the strongest measured point still keeps GUR ≥ ``floor``."""
    return bool(curve) and curve[-1][0] >= floor


@dataclass
class Frontier:
    """One method's measured curve and its summaries."""

    method: str
    param: str
    points: list[dict]  # strength, usr, gur (Stat each), in strength order
    usr_at: dict[float, Stat]  # GUR floor -> USR at GUR >= floor
    open_at: dict[float, bool]
    auc: Stat
    tuned: dict  # the dev-tuned defaults: params, usr, gur (Stat)


def frontier(method: str, param: str, by_strength: Mapping[float, Mapping[tuple, tuple[float, float]]],
             tuned: Mapping[tuple, tuple[float, float]], tuned_params: Mapping, seed: int = 0) -> Frontier:
    """The frontier of ``method`` from its records: ``by_strength[s][unit] = (usr, gur)`` with
    ``unit`` a (target, seed) pair. Only units measured at every strength count."""
    strengths = sorted(by_strength)
    units = sorted(set.intersection(*(set(by_strength[s]) for s in strengths)), key=str)
    usr = [[by_strength[s][u][0] for u in units] for s in strengths]
    gur = [[by_strength[s][u][1] for u in units] for s in strengths]

    def stats(sample: Sequence[int]) -> tuple[list[float], float]:
        curve = [(statistics.fmean(g[i] for i in sample), statistics.fmean(x[i] for i in sample))
                 for g, x in zip(gur, usr)]
        return [best_usr(curve, f) for f in GUR_LEVELS], area(curve)

    everyone = list(range(len(units)))
    point, point_area = stats(everyone)
    rng = random.Random(seed)
    draws = [stats([rng.randrange(len(units)) for _ in units]) for _ in range(BOOTSTRAP_SAMPLES if len(units) > 1 else 0)]
    curve = [(statistics.fmean(g), statistics.fmean(x)) for g, x in zip(gur, usr)]
    return Frontier(
        method=method, param=param,
        points=[{"strength": s, "usr": summarize(x, seed), "gur": summarize(g, seed)}
                for s, x, g in zip(strengths, usr, gur)],
        usr_at={f: _stat(point[k], [d[0][k] for d in draws], len(units)) for k, f in enumerate(GUR_LEVELS)},
        open_at={f: is_open(curve, f) for f in GUR_LEVELS},
        auc=_stat(point_area, [d[1] for d in draws], len(units)),
        tuned={"params": dict(tuned_params), "usr": summarize([v[0] for v in tuned.values()], seed),
               "gur": summarize([v[1] for v in tuned.values()], seed)})


def _stat(value: float, draws: list[float], n: int) -> Stat:
    if not draws:
        return Stat(value, None, None, n)
    draws = sorted(draws)
    tail = (1 - CONFIDENCE) / 2
    return Stat(value, draws[int(tail * len(draws))], draws[min(len(draws) - 1, int((1 - tail) * len(draws)))], n)
