"""Forget–utility frontiers: methods compared at matched utility, not at one point.

Every method declares the knob that trades forgetting against utility
(:attr:`r2f_bench.unlearner.Unlearner.strength`). ``r2f-bench frontier`` runs each
method at log-spaced strengths of that knob on the same evaluation targets, seeds,
views and retain data, plus once at its shipped defaults, and reads the curve of mean
(GUR, USR) points in strength order. Every curve starts at the untouched model
(strength 0: GUR 100, USR 0 by definition).

**Refinement.** After the log-spaced pass, for each GUR floor (:data:`GUR_LEVELS`) with
no measured point within :data:`TOLERANCE` GUR of it, a strength is added between the
two neighbours that bracket the floor (:func:`next_strength`: geometric midpoint, or a
tenth of the weaker one next to the untouched model), round after round, until a
point lands within the tolerance, the bracket cannot be split at 3 significant digits,
or the rounds run out (:func:`refinement`, stated beside the cell).

**USR at GUR ≥ g** (:func:`best_usr`) is the highest USR the curve reaches while GUR
stays at least ``g``: the measured points with GUR ≥ g, and the points where a segment
between neighbouring strengths crosses GUR = g, interpolated linearly. It is 0 where no
point keeps GUR ≥ g. It is flagged *open* when even the strongest measured point keeps
GUR ≥ g (stronger settings might do better). **Area** (:func:`area`) is the mean of
that best USR over g = 50, 51, …, 100: a summary of the whole frontier, in %; it is
open when the strongest point keeps GUR ≥ 50, and each curve states its GUR range.

**Failures.** Every method is read on the same (target, seed) units. A deletion that
diverged or failed, or a record missing at one strength, stays in its curve as
:data:`FAILURE` (USR 0, GUR 0: it forgot nothing and kept nothing, so it can never
help its method); it is never dropped.

**Uncertainty** (:mod:`r2f_bench.results.stats`): each bootstrap sample draws the
targets and, crossed with them, the run seeds (differently taught models) with replacement
(:func:`~.stats.unit_weights`), recomputes every method's mean curve and its summaries;
the 95% percentile interval carries n units, targets and seeds. Every method is drawn with the same samples, so the difference of two methods'
summaries has a **paired** interval (:func:`paired`); :func:`tiers` groups methods
that cannot be told apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import sqrt
from typing import Mapping, Sequence

import numpy as np

from .stats import BOOTSTRAP_SAMPLES, Stat, holm, percentile_interval, unit_weights

Unit = tuple[str, int]  # (target, seed)
Score = tuple[float, float]  # (usr, gur)
GUR_LEVELS = (95.0, 90.0)
AREA_FROM = 50
TOLERANCE = 1.0
UNTOUCHED: Score = (0.0, 100.0)
FAILURE: Score = (0.0, 0.0)
FAILURE_RULE = ("a diverged or failed deletion (or a missing record) stays in its curve as USR 0, GUR 0: it forgot "
                "nothing and kept nothing, so it can never help its method")
AREA_KEY = "auc"  # the area's key in the frontier's JSON and CSV (an output name: kept as it was first written)
KEYS = tuple(f"usr_at_gur{g:g}" for g in GUR_LEVELS) + (AREA_KEY,)  # the summaries, in table order
FLOORS = {f"usr_at_gur{g:g}": g for g in GUR_LEVELS}  # a matched-utility summary -> its GUR floor
MEASURED, OPEN, RESOLUTION, ROUNDS = "measured", "open", "strength resolution", "round limit"


def best_usr_rows(gur: np.ndarray, usr: np.ndarray, floors: Sequence[float]) -> np.ndarray:
    """:func:`best_usr` of each row of ``gur`` and ``usr`` (curves × strengths, in strength
    order) at each of ``floors``: curves × floors."""
    g, u, f = gur[:, None, :], usr[:, None, :], np.asarray(floors, dtype=float)[None, :, None]
    above = np.where(g >= f, u, -np.inf).max(axis=2, initial=-np.inf)
    g0, g1, u0, u1 = g[..., :-1], g[..., 1:], u[..., :-1], u[..., 1:]
    cross = (g0 - f) * (g1 - f) < 0
    with np.errstate(divide="ignore", invalid="ignore"):
        at = np.where(cross, u0 + (u1 - u0) * (f - g0) / (g1 - g0), -np.inf)
    best = np.maximum(above, at.max(axis=2, initial=-np.inf))
    return np.where(np.isfinite(best), best, 0.0)


def summaries_rows(gur: np.ndarray, usr: np.ndarray) -> np.ndarray:
    """Per curve (row), the summaries of :data:`KEYS`: USR at each floor, then the area."""
    best = best_usr_rows(gur, usr, GUR_LEVELS + tuple(range(AREA_FROM, 101)))
    return np.column_stack([best[:, :len(GUR_LEVELS)], best[:, len(GUR_LEVELS):].mean(axis=1)])


def _rows(curve: Sequence[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    points = np.asarray(curve, dtype=float).reshape(-1, 2)
    return points[None, :, 0], points[None, :, 1]


def best_usr(curve: Sequence[tuple[float, float]], floor: float) -> float:
    """The highest USR along ``curve`` ((GUR, USR) points in strength order) while GUR ≥ ``floor``."""
    return float(best_usr_rows(*_rows(curve), [floor])[0, 0])


def area(curve: Sequence[tuple[float, float]]) -> float:
    """Mean of :func:`best_usr` over GUR floors 50, 51, …, 100 (%)."""
    return float(summaries_rows(*_rows(curve))[0, -1])


def is_open(curve: Sequence[tuple[float, float]], floor: float) -> bool:
    """Whether the strongest measured point still keeps GUR ≥ ``floor``."""
    return bool(curve) and curve[-1][0] >= floor


# -- refinement ---------------------------------------------------------------
def between(lo: float, hi: float) -> float:
    """The strength to try between ``lo`` and ``hi``: their geometric mean (a tenth of ``hi``
    when ``lo`` is the untouched model), at 3 significant digits."""
    return float(f"{sqrt(lo * hi) if lo > 0 else hi / 10:.3g}")


def refinement(curve: Sequence[tuple[float, float]], floor: float) -> tuple[str, float | None]:
    """Where refinement stands at ``floor`` on ``curve`` ((strength, mean GUR) in strength
    order, the untouched model first): (:data:`MEASURED`, None) when a point lies within
    :data:`TOLERANCE` of the floor; (:data:`OPEN`, None) when no neighbours bracket it;
    (:data:`RESOLUTION`, None) when the bracket cannot be split; else (:data:`ROUNDS`, the
    strength to measure next)."""
    if any(abs(g - floor) <= TOLERANCE for _, g in curve):
        return MEASURED, None
    pair = next(((s0, s1) for (s0, g0), (s1, g1) in zip(curve, curve[1:]) if g0 >= floor > g1), None)
    if pair is None:
        return OPEN, None
    s = between(*pair)
    return (RESOLUTION, None) if s in pair else (ROUNDS, s)


def next_strength(curve: Sequence[tuple[float, float]], floor: float) -> float | None:
    """The strength to measure next near ``floor`` (see :func:`refinement`); None when done."""
    return refinement(curve, floor)[1]


# -- one method's frontier ----------------------------------------------------
@dataclass
class Frontier:
    """One method's measured curve and its summaries, on a fixed list of units."""

    method: str
    param: str
    units: list[Unit]
    points: list[dict]  # strength, usr, gur (Stat each), failures; strength 0 is the untouched model
    summaries: dict[str, Stat]  # KEYS -> Stat
    open_at: dict[float, bool]  # GUR floor -> the strongest point keeps GUR >= it
    area_open: bool  # the strongest point keeps GUR >= AREA_FROM: the area is cut short
    gur_range: tuple[float, float]  # the mean curve's GUR, lowest and highest
    failures: int  # (strength, unit) points of the curve counted as FAILURE
    tuned: dict  # the shipped defaults: params, usr, gur (Stat), failures
    draws: np.ndarray = field(repr=False)  # bootstrap samples × KEYS, drawn on target and seed resamples of `units`

    def curve(self) -> list[tuple[float, float]]:
        """(strength, mean GUR) in strength order."""
        return [(p["strength"], p["gur"].mean) for p in self.points]

    def refined(self, floor: float) -> str:
        """Where refinement stands at ``floor``: :data:`MEASURED`, :data:`OPEN`, :data:`RESOLUTION`
        or :data:`ROUNDS` (see :func:`refinement`)."""
        return refinement(self.curve(), floor)[0]

    def interpolates(self, key: str) -> bool:
        """Whether summary ``key`` is a GUR floor with no measured point within :data:`TOLERANCE`
        of it (its value read between two strengths): no verdict rests on such a cell."""
        floor = FLOORS.get(key)
        return floor is not None and self.refined(floor) in (RESOLUTION, ROUNDS)


def _matrix(scores: Sequence[Mapping[Unit, Score | None]], units: Sequence[Unit]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(USR, GUR) arrays (rows of ``scores`` × units) with failures as :data:`FAILURE`, and the
    failures of each row."""
    values = [[row.get(u) or FAILURE for u in units] for row in scores]
    array = np.asarray(values, dtype=float).reshape(len(scores), len(units), 2)
    return array[..., 0], array[..., 1], [sum(row.get(u) is None for u in units) for row in scores]


def frontier(method: str, param: str, by_strength: Mapping[float, Mapping[Unit, Score | None]],
             units: Sequence[Unit], tuned: Mapping[Unit, Score | None], tuned_params: Mapping,
             samples: int = BOOTSTRAP_SAMPLES, bootstrap_seed: int = 0) -> Frontier:
    """The frontier of ``method`` on ``units`` from ``by_strength[s][unit] = (usr, gur)``; a unit
    missing or ``None`` at a strength is a failure (:data:`FAILURE`). The untouched model is
    prepended at strength 0."""
    if not units:
        raise ValueError(f"frontier of {method!r}: no (target, seed) unit to read it on")
    strengths = [0.0] + sorted(by_strength)
    usr, gur, failures = _matrix([dict.fromkeys(units, UNTOUCHED)] + [by_strength[s] for s in strengths[1:]], units)
    t_usr, t_gur, t_failures = _matrix([tuned], units)
    targets, seeds = [u[0] for u in units], [u[1] for u in units]
    weights = unit_weights(targets, seeds, samples, bootstrap_seed)
    weights = weights / weights.sum(axis=1, keepdims=True)
    mean = lambda x: _stat(x.mean(), weights @ x, targets, seeds)  # a unit mean with its interval
    draws = summaries_rows(weights @ gur.T, weights @ usr.T)
    mean_gur, mean_usr = gur.mean(axis=1), usr.mean(axis=1)
    value = summaries_rows(mean_gur[None], mean_usr[None])[0]
    mean_curve = list(zip(mean_gur.tolist(), mean_usr.tolist()))
    return Frontier(
        method=method, param=param, units=list(units),
        points=[{"strength": s, "usr": mean(x), "gur": mean(g), "failures": k}
                for s, x, g, k in zip(strengths, usr, gur, failures)],
        summaries={k: _stat(value[i], draws[:, i], targets, seeds) for i, k in enumerate(KEYS)},
        open_at={f: is_open(mean_curve, f) for f in GUR_LEVELS},
        area_open=is_open(mean_curve, AREA_FROM),
        gur_range=(float(mean_gur.min()), float(mean_gur.max())),
        failures=sum(failures),
        tuned={"params": dict(tuned_params), "usr": mean(t_usr[0]), "gur": mean(t_gur[0]), "failures": t_failures[0]},
        draws=draws)


def _stat(value: float, draws: np.ndarray, targets: Sequence[str], seeds: Sequence[int]) -> Stat:
    """A summary with its percentile interval (none from a single unit)."""
    n_targets, n_seeds = len(set(targets)), len(set(seeds))
    if len(targets) < 2:
        return Stat(float(value), None, None, len(targets), n_targets, n_seeds)
    lo, hi = percentile_interval(draws)
    return Stat(float(value), float(lo), float(hi), len(targets), n_targets, n_seeds)


# -- comparisons --------------------------------------------------------------
def paired(a: Frontier, b: Frontier) -> dict[str, Stat]:
    """``a`` − ``b`` in each summary of :data:`KEYS`, with its paired 95% interval: both
    methods' summaries drawn on the same target and seed resamples of the same units."""
    if a.units != b.units:
        raise ValueError(f"{a.method!r} and {b.method!r} were read on different units; pair them on the same ones")
    targets, seeds = [u[0] for u in a.units], [u[1] for u in a.units]
    return {k: _stat(a.summaries[k].mean - b.summaries[k].mean, a.draws[:, i] - b.draws[:, i], targets, seeds)
            for i, k in enumerate(KEYS)}


def paired_p(a: Frontier, b: Frontier) -> dict[str, float]:
    """The bootstrap p-value of ``a`` − ``b`` in each summary: twice the share of paired
    draws on the far side of 0 (at most 1), the test whose 95% acceptance region is the
    percentile interval of :func:`paired`; never below 2 / 2^k on k targets, the least a
    test that treats the targets as exchangeable can give (:func:`~.stats.sign_flip_p`):
    on a few targets whose differences share a sign the bootstrap's p is 0."""
    if a.units != b.units:
        raise ValueError(f"{a.method!r} and {b.method!r} were read on different units; pair them on the same ones")
    diff = a.draws - b.draws
    if len(a.units) < 2:
        return {k: 1.0 for k in KEYS}
    least = 2.0 ** (1 - len({t for t, _ in a.units}))
    return {k: float(min(1.0, max(least, 2 * min((diff[:, i] <= 0).mean(), (diff[:, i] >= 0).mean()))))
            for i, k in enumerate(KEYS)}


def tiers(frontiers: Sequence[Frontier], key: str) -> list[list[str]]:
    """Methods grouped by summary ``key`` (higher is better): in order of the estimate, the
    first tier is the best method and every method not told apart from it (its paired
    difference not significant once Holm-corrected over the comparisons with that leader);
    the next tier starts at the best method left, and so on. A method whose cell interpolates
    (:meth:`Frontier.interpolates`) enters no tier."""
    left = sorted((f for f in frontiers if not f.interpolates(key)), key=lambda f: -f.summaries[key].mean)
    out: list[list[str]] = []
    while left:
        leader = left[0]
        apart = holm({f.method: paired_p(f, leader)[key] for f in left if f is not leader})
        tier = [f for f in left if f is leader or not apart[f.method]]
        out.append([f.method for f in tier])
        left = [f for f in left if f not in tier]
    return out
