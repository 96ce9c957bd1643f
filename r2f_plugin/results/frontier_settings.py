"""A frontier's settings, checked before anything runs: each method entry's curve over its
strength knob (its range, or the one the entry sets), the attack USR is read after, and
the baseline the others are paired against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..attack import parse_attacks
from ..engine.config import OPTIONS, RunConfig, for_method
from ..errors import UserError
from ..plugins import registry
from ..unlearner import Strength, method_variant
from .job import Job


@dataclass(frozen=True)
class Settings:
    """What a frontier is asked for: the method entries (``all``, ``name`` or
    ``name@param=value@...``), the task, seeds and run options every job shares, the
    strengths per curve, the rounds of refinement and the entry paired against."""

    methods: list[str]
    task: str
    seeds: list[int]
    run: dict[str, Any]  # RunConfig fields the options set, the store (output) included
    points: int
    refine: int
    baseline: str | None  # None: the first entry
    keep_going: bool
    deadline: float | None = None  # --budget's end (time.time()): jobs that would end after it are not run
    after: str | None = None  # --after: USR read after this attack (one of the run's --attacks)
    name_control: bool = False  # --name-control: utility is the lower of GUR and the name control

    @property
    def output(self) -> str:
        return self.run["output"]


@dataclass
class Curve:
    """One method entry's runs: its knob and the strengths measured so far."""

    entry: str  # name or name@param=value@...
    param: str
    base: dict[str, Any]  # RunConfig fields, without the seed
    seeds: list[int]
    strengths: list[float]

    def jobs(self, strength: float) -> list[Job]:
        params = {**self.base["params"], self.param: str(strength)}
        return [Job({**self.base, "params": params, "seed": seed}) for seed in self.seeds]

    def shipped(self) -> list[Job]:
        """The jobs at the entry's shipped defaults (with its own parameters)."""
        return [Job({**self.base, "seed": seed}) for seed in self.seeds]


def curves_of(settings: Settings, entries: list[str]) -> list[Curve]:
    """Per method entry (``name`` or ``name@param=value@...``): its knob and log-spaced
    strengths over the knob's declared range, or over ``low:high`` where the entry sets the
    knob so (``fullgrad@step=1e-4:1e-3``); every entry checked before anything runs."""
    if settings.points < 2:
        raise UserError(f"--points must be at least 2, got {settings.points}.")
    if settings.refine < 0:
        raise UserError(f"--refine must be 0 or more rounds, got {settings.refine}.")
    if not entries:
        raise UserError("--methods is empty; name some or pass `all`.")
    curves = []
    for entry in entries:
        method, overrides = method_variant(entry)
        cls = registry().method(method)
        if cls.strength is None:
            raise UserError(f"method {method!r} declares no strength knob, so it has no frontier; give its class "
                            f"`strength = Strength(param, low, high)` (r2f_bench.unlearner) or leave it out of --methods.")
        strength = cls.strength
        if ":" in overrides.get(strength.param, ""):  # name@knob=low:high: the curve's own range
            strength = strength_range(entry, strength.param, overrides.pop(strength.param))
        params = cls.parse_params({**(settings.run.get("params") or {}), **overrides})
        base = RunConfig(method=method, task=settings.task, **for_method(settings.run, cls, params)).to_dict()
        base["params"] = {**base["params"], **overrides}
        curve = Curve(entry, strength.param, base, settings.seeds, strength.points(settings.points))
        for strength in curve.strengths:
            cls.parse_params(curve.jobs(strength)[0].fields["params"])  # a bad name or value fails here
        cls.parse_params(base["params"])
        curves.append(curve)
    return curves


def checked_after(settings: Settings) -> str:
    """``--after`` as its attack names itself, one line if the runs will not hold it: not among
    ``--attacks``, or a relearning attack with no relearning steps."""
    (after, attack), = parse_attacks(settings.after)
    attacks = settings.run.get("attacks", OPTIONS["attacks"].default)
    if after not in dict(parse_attacks(attacks)):
        raise UserError(f"--after {after!r} is not among --attacks ({attacks}); add it there, e.g. --attacks rap,{after}.")
    if attack.relearns and settings.run.get("rap_steps") == 0:
        raise UserError(f"--after {after!r} relearns, and --rap-steps 0 runs no relearning; drop one of them.")
    return after


def strength_range(entry: str, param: str, text: str) -> Strength:
    """The knob's range an entry ``name@knob=low:high`` gives (e.g. a pretrained model's steps,
    far below the demo model's); one line if it is no range of two positive numbers."""
    low, _, high = text.partition(":")
    try:
        lo, hi = float(low), float(high)
    except ValueError:
        lo = hi = float("nan")
    if not (0 < lo < hi < float("inf")):
        raise UserError(f"bad range {param}={text!r} in --methods entry {entry!r}; write {param}=low:high with "
                        f"0 < low < high, e.g. {param}=1e-4:1e-3.")
    return Strength(param, lo, hi)


def baseline_of(baseline: str | None, curves: list[Curve]) -> str:
    """The entry every other method is paired against: ``baseline`` (``--baseline``), else the first."""
    entries = [c.entry for c in curves]
    if baseline is None:
        return entries[0]
    if baseline not in entries:
        raise UserError(f"--baseline {baseline!r} is not among --methods ({', '.join(entries)}); name one of them.")
    return baseline
