"""Acceptance checks of a knowledge world: does the testbed let a ranking mean something?

A testbed ranks methods only if (A1) the untouched model answers questions it was
never taught, (A2) including in a question wording never taught for anyone, (A3) a
plain method on the real request forgets held-out answers while utility stays, and
(A4) negative controls do not: the same method on *another* person's request, and a
random weight step of the same size, must forget no faster than they damage
(USR ≤ 100 − GUR + :data:`CONTROL_SLACK`) wherever methods are ranked (GUR ≥
:data:`READ_FLOOR`, the frontier's lower floor), the real request must beat both by
:data:`MARGIN` points at GUR 90, and forget :data:`NAME_MARGIN` points more than it loses of
the name-mention control (sentences that merely name the target). The excess over the whole curve, heavy damage included,
is reported beside it.

"100 − GUR" is read like for like, as the share of the utility answers the untouched
model knew that are lost (USR computed on the utility set). GUR itself, a ratio of mean
scores, also counts utility items the untouched model got wrong: damage lets some of them
come out right by chance (random steps read GUR 101–103 here), so against GUR a damaged
model's held-out probes would seem to fall faster than its utility even when both lose
what they knew at one rate.

:func:`check_world` measures all four on a world folder (``benchmarks/testbed.py``
runs it on a freshly generated world; the tests on a small one).
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..atomic import atomic_write_text, check_writable, set_aside
from ..data import ForgetRequest, Probe, Target
from ..jsontext import canonical_json
from .frontier import best_usr
from ..engine.metrics import usr
from ..engine.config import RunConfig
from ..engine.controls import other_target, random_step_like, step_seed
from ..engine.record import answered, score
from ..engine.run import Run
from .sweep import target_keys

CONTROL_SLACK = 5.0
READ_FLOOR = 90.0  # controls are held to the diagonal where rankings are read (frontier floors 95 and 90)
MARGIN = 30.0
NAME_MARGIN = 10.0  # points of USR the real request must add over the name control it breaks (names alone)
BOOTSTRAP = 1000
CONDITIONS = ("request", "other_request", "random_step")
CURVE_COLUMNS = ("gur", "usr", "utility_lost", "name_control_lost")  # a curve point's values, in order


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float
    n: int

    def to_json(self) -> dict[str, float | int]:
        return {"mean": round(self.mean, 2), "lo": round(self.lo, 2), "hi": round(self.hi, 2), "n": self.n}


def interval(values_by_target: dict[str, list[float]], seed: int = 0) -> Interval:
    """Mean over every value, with a 95% bootstrap interval that resamples whole targets."""
    groups = [np.asarray(v, dtype=float) for v in values_by_target.values() if v]
    flat = np.concatenate(groups)
    rng = np.random.default_rng(seed)
    draws = [np.concatenate([groups[i] for i in rng.integers(0, len(groups), len(groups))]).mean()
             for _ in range(BOOTSTRAP)]
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return Interval(float(flat.mean()), float(lo), float(hi), len(flat))


def other_request(run: Run, target: Target) -> ForgetRequest:
    """The request of the next evaluation target (a different person), for ``target``."""
    return run.request(other_target(run.targets, target), scored=target)


def target_curve(run: Run, target: Target, strengths: Sequence[float], condition: str) -> list[tuple[float, ...]]:
    """(GUR, USR, utility lost, name control lost) of the untouched model, then of each
    strength, on ``target`` for one condition; a set's loss is the share of its known answers
    no longer given (the name control: the neighbour probes asked with the target's name,
    which a knowledge world has)."""
    knob = run.method_cls.strength.param
    before = run.evaluator.untouched(target)["scores"]
    points = [(100.0, 0.0, 0.0, 0.0)]
    util, named = run.task.utility_set, run.task.name_control_set
    for x in strengths:
        method = run.method_cls(run.method_cls.parse_params({**run.config.params, knob: str(x)}))
        request = other_request(run, target) if condition == "other_request" else run.request(target)
        torch.manual_seed(run.config.seed)
        edit = method.unlearn(copy.deepcopy(run.model), request, run.ctx)
        model = edit.model
        if condition == "random_step":
            model = random_step_like(run.model, edit.model, step_seed(run.config.seed, target.id))
        after = run.evaluator.scores(model, target)
        forgot, gur = run.recorder.headline(target, before, after)
        lost = usr(answered(before, util), answered(after, util))
        name_lost = usr(answered(before, named), answered(after, named)) if named else None
        points.append((gur if gur is not None else 0.0, forgot or 0.0, lost or 0.0, name_lost or 0.0))
    return points


def mean_curve(by_unit: Sequence[list[tuple[float, ...]]]) -> list[tuple[float, ...]]:
    return [tuple(np.mean([c[i] for c in by_unit], axis=0)) for i in range(len(by_unit[0]))]


def never_taught_qa(world: Path) -> tuple[set[str], set[str]]:
    """Target QA questions in taught and in never-taught templates (from the world's files)."""
    taught, new = set(), set()
    for path in (world / "Target").glob("*/forget_level2.json"):
        for row in json.loads(path.read_text()):
            (new if row.get("template") == "never_taught" else taught).add(row["query"])
    return taught, new


class CurveStore:
    """Measured curves kept in ``folder``, one file per target unit, condition and strengths, named
    by a hash of the unit's store key (:func:`~.sweep.target_keys`: model, world content, run seed,
    schedule, versions) with the rest, so a cut-off :func:`check_world` resumes. A file that does
    not read back as a curve of the expected length is measured again, with a line saying so."""

    def __init__(self, folder: Path, progress: Callable[[str], None]) -> None:
        self.folder, self.progress = Path(folder), progress
        check_writable(self.folder, "--curves")

    @staticmethod
    def key(unit_key: str, condition: str, strengths: Sequence[float]) -> str:
        return hashlib.sha256(canonical_json([unit_key, condition, list(strengths)]).encode()).hexdigest()[:32]

    def read(self, key: str, length: int) -> list[tuple[float, ...]] | None:
        path = self.folder / f"{key}.json"
        if not path.exists():
            return None
        try:
            points = [tuple(float(x) for x in p) for p in json.loads(path.read_text())]
            if len(points) != length or any(len(p) != len(CURVE_COLUMNS) for p in points):
                raise ValueError(f"{len(points)} points where {length} of {len(CURVE_COLUMNS)} values were expected")
            return points
        except (ValueError, TypeError, OSError) as exc:  # a cut write, another shape: measured again
            set_aside(path, str(exc), self.progress)
            return None

    def write(self, key: str, points: Sequence[tuple[float, ...]]) -> None:
        atomic_write_text(self.folder / f"{key}.json", json.dumps([list(p) for p in points]))


def unit_curve(run: Run, target: Target, points: Sequence[float], condition: str, key: str,
               store: CurveStore | None) -> list[tuple[float, ...]]:
    """:func:`target_curve`, read back from ``store`` where it holds it, else measured (and kept)."""
    curve_key = CurveStore.key(key, condition, points)
    if store is not None and (pts := store.read(curve_key, len(points) + 1)) is not None:
        return pts
    pts = target_curve(run, target, points, condition)
    if store is not None:
        store.write(curve_key, pts)
    return pts


def check_world(world: Path, seeds: Sequence[int], targets: int, method: str, task: str,
                strengths: Sequence[float] | None = None, config: dict[str, Any] | None = None,
                progress: Callable[[str], None] = lambda m: None, curves: Path | None = None) -> dict:
    """A1–A4 on ``world`` (the knowledge world of ``task``'s layout) for ``targets`` evaluation
    targets and run ``seeds``, the curves by ``method``'s strength knob; with ``curves``, each curve
    is kept there as measured and read back from there when it already is (:class:`CurveStore`)."""
    from ..engine.teaching import answered_share
    from ..training.encoding import as_asked
    from ..tasks.rwku.world import DIAGNOSTICS_FILE

    taught_q, new_q = never_taught_qa(world)
    diag = json.loads((world / DIAGNOSTICS_FILE).read_text())["never_taught_template_qa_train"]
    diag_probes = [Probe(prompt=f"Question: {r['query']}\nAnswer:", answer=r["answer"], set="diag", target="")
                   for r in random.Random(0).sample(diag, min(200, len(diag)))]
    a1: dict[str, list[float]] = {}
    a1_new: dict[str, list[float]] = {}
    a2: list[float] = []
    measured: dict[str, dict[str, list]] = {c: {} for c in CONDITIONS}
    store = CurveStore(curves, progress) if curves is not None else None
    teach_seconds: list[float] = []
    unreadable: list[int] = []  # run seeds whose untouched utility is below GUR's floor
    for seed in seeds:
        run = Run(RunConfig(**{"method": method, "task": task, "data_dir": str(world), "limit": targets,
                               "dev_targets": 2, "seed": seed, **(config or {})}), progress=progress)
        run.prepare()
        teach_seconds.append(run.model_info.get("teach_seconds", 0.0))
        knob = run.method_cls.strength
        points = list(strengths or knob.points(8))
        for target in run.targets:
            rows = run.evaluator.untouched(target)["scores"]
            qa = dict(zip((p.question for p in target.probes["forget_qa"]), answered(rows, "forget_qa")))
            a1.setdefault(target.id, []).extend(100.0 * v for q, v in qa.items() if q in taught_q)
            a1_new.setdefault(target.id, []).extend(100.0 * v for q, v in qa.items() if q in new_q)
        asked = as_asked(run.tokenizer, diag_probes, run.evaluator.built.chat_template)  # as the run asks
        a2.append(answered_share(run.model, run.tokenizer, asked))
        progress(f"untouched, seed {seed}: never-taught QA {np.mean([v for vs in a1.values() for v in vs]):.1f}%, "
                 f"never-taught template {np.mean([v for vs in a1_new.values() for v in vs]):.1f}%, A2 {a2[-1]:.1f}%")
        utility = score(run.evaluator.untouched(run.targets[0])["scores"][run.task.utility_set])
        if run.recorder.gur(utility, utility) is None:
            unreadable.append(seed)
            progress(f"seed {seed}: the untouched model answers {utility:.1f}% of the utility set, below GUR's floor: "
                     f"GUR is n/a, so A3 and A4 cannot be read on this model and no curve is measured")
            continue
        keys = target_keys(run)
        for target in run.targets:  # each unit whole, each curve said (and with a store, kept) as measured
            for condition in CONDITIONS:
                measured[condition][f"{target.id}@{seed}"] = pts = unit_curve(run, target, points, condition,
                                                                              keys[target.id], store)
                progress(f"curve {condition} {target.id}@{seed} {json.dumps(pts)}")
    return {**summarise(a1, a1_new, a2, measured, teach_seconds, points), "gur_unreadable_seeds": unreadable}


def gur_usr(points: Sequence[tuple[float, ...]]) -> list[tuple[float, float]]:
    return [(g, u) for g, u, *_ in points]


def summarise(a1, a1_new, a2, curves, teach_seconds, strengths) -> dict:
    """The acceptance figures from per-target answers and per-unit curves (A3's and A4's
    ``None`` where no curve could be read)."""
    first = {
        "a1_never_taught_qa": interval(a1).to_json(),
        "a1_never_taught_template_targets": interval(a1_new).to_json(),
        "a2_never_taught_template": {"mean": round(float(np.mean(a2)), 2), "per_seed": [round(x, 2) for x in a2]},
        "strengths": list(strengths),
        "teach_seconds": [round(s, 1) for s in teach_seconds],
    }
    if not curves["request"]:
        return {**first, **{k: None for k in ("a3_usr_at_gur95", "a4_margin_at_gur90", "a4_control_excess",
                                              "a4_name_margin_at_gur90", "a4_control_excess_whole_curve",
                                              "controls_usr_at_gur90", "curves")}}
    by_target = lambda d: {k.split("@")[0]: [] for k in d}
    mean_curves = {c: mean_curve(list(units.values())) for c, units in curves.items()}

    def at_floor(condition: str, floor: float) -> dict[str, list[float]]:
        out = by_target(curves[condition])
        for unit, pts in curves[condition].items():
            out[unit.split("@")[0]].append(best_usr(gur_usr(pts), floor))
        return out

    margin_units = by_target(curves["request"])
    for unit in curves["request"]:
        real = best_usr(gur_usr(curves["request"][unit]), 90)
        control = max(best_usr(gur_usr(curves[c][unit]), 90) for c in CONDITIONS[1:])
        margin_units[unit.split("@")[0]].append(real - control)
    name_margin = by_target(curves["request"])
    for unit, pts in curves["request"].items():  # at the strongest-forgetting measured point kept at GUR ≥ 90
        _, forgot, _, name_lost = max((p for p in pts if p[0] >= 90), key=lambda p: p[1])
        name_margin[unit.split("@")[0]].append(forgot - name_lost)
    excess = lambda c, floor: max(u - lost for gur, u, lost, *_ in mean_curves[c] if gur >= floor)
    return {
        **first,
        "a3_usr_at_gur95": interval(at_floor("request", 95)).to_json(),
        "a4_margin_at_gur90": interval(margin_units).to_json(),
        "a4_control_excess": {c: round(excess(c, READ_FLOOR), 2) for c in CONDITIONS[1:]},
        "a4_name_margin_at_gur90": interval(name_margin).to_json(),
        "a4_control_excess_whole_curve": {c: round(excess(c, -np.inf), 2) for c in CONDITIONS[1:]},
        "controls_usr_at_gur90": {c: interval(at_floor(c, 90)).to_json() for c in CONDITIONS[1:]},
        "curves": {c: [[round(x, 2) for x in pt] for pt in pts] for c, pts in mean_curves.items()},
        "curve_columns": list(CURVE_COLUMNS),
    }


def passes(result: dict) -> dict[str, bool]:
    """Each acceptance check's verdict (A3 and A4 fail where GUR could not be read: nothing
    was shown forgotten at any utility)."""
    readable = result["a3_usr_at_gur95"] is not None
    return {"A1": result["a1_never_taught_qa"]["mean"] >= 50,
            "A2": result["a2_never_taught_template"]["mean"] >= 40,
            "A3": readable and result["a3_usr_at_gur95"]["mean"] >= 40,
            "A4": readable and all(v <= CONTROL_SLACK for v in result["a4_control_excess"].values())
            and result["a4_margin_at_gur90"]["mean"] >= MARGIN
            and result["a4_name_margin_at_gur90"]["mean"] >= NAME_MARGIN}
