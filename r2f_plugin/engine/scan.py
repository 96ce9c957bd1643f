"""What the untouched model knows of each target (``r2f-bench scan``): its held-out forget
probes answered, counted as USR counts them (echo-answerable probes never count), from
the untouched evaluation's cache (the forget sets only; a run reads them back).

A pretrained model knows little of most real benchmark targets; USR on a target it
barely knows rests on a handful of probes. Scan once, then run on the targets it knows
(``--targets``), or let a run skip the rest (``--min-known``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..data import Target
from ..task import HELD_OUT
from .build import BuildInputs, build_models
from .config import RunConfig
from .distributed import process_state, set_up_cpu
from .evaluate import Evaluator
from .metrics import echo_answerable
from .plan import Plan
from .scope import Scope
from .record import Recorder
from .weights import Weights


@dataclass(frozen=True)
class Known:
    """One target's held-out forget probes, by set: those the untouched model ``known``,
    all of them (``probes``), and those its own prompt answers (``echo``, never known)."""

    target: str
    name: str
    known: dict[str, int]
    probes: dict[str, int]
    echo: int

    @property
    def total(self) -> int:
        return sum(self.known.values())


def known_of(scope: Scope, target: Target, scores: dict[str, list[dict]]) -> Known:
    """``target``'s :class:`Known` from the untouched model's per-probe ``scores``."""
    sets = scope.roles(target)[HELD_OUT]
    return Known(target.id, target.name, {s: sum(Recorder.known(target, scores, s)) for s in sets},
                 {s: len(target.probes[s]) for s in sets},
                 sum(echo_answerable(p) for s in sets for p in target.probes[s]))


def scan(config: RunConfig, progress: Callable[[str], None] = print) -> tuple[Plan, list[Known]]:
    """Every target of ``config``'s selection (a plan with no method) scored by the
    untouched model, most known first (ties in the data's order)."""
    plan = Plan(config, progress)
    set_up_cpu(plan.config.threads, 1)
    built = build_models(BuildInputs.of(plan), process_state().device)
    evaluator = Evaluator(plan.scope, built, Weights(built.model, plan.out_dir, "scan"), plan.config, progress)
    found = []
    for n, target in enumerate(plan.targets, 1):
        progress(f"scan: {target.id} ({n}/{len(plan.targets)})")
        found.append(known_of(plan.scope, target, evaluator.untouched(target, forget_only=True)["scores"]))
    return plan, sorted(found, key=lambda k: -k.total)
