"""What a run scores and what its methods fit on, once the data is loaded: the task, the
data, the split's targets and dev targets, each target's probe sets by role and the
retain items of its deletion request."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from ..data import Benchmark, Probe, Target
from ..errors import UserError
from ..task import HELD_OUT, LOCALITY, NAME_CONTROL, SEEN, Task
from . import protocol


def scored_split(bench: Benchmark, split: str) -> Benchmark:
    """The targets scored and the dev targets methods fit on. The eval split scores the
    evaluation targets; the dev split (tuning) scores the first half of the dev targets
    (rounded down) and lets methods fit on the rest, so tuning never fits on what it
    scores."""
    if split == "eval":
        return bench
    dev = bench.dev_targets
    if len(dev) < 2:
        raise UserError("the dev split needs at least 2 dev targets (one half is scored, methods fit on the "
                        "other); pass --dev-targets 2 or more.")
    scored = len(dev) // 2
    return protocol.hold_out(dataclasses.replace(bench, targets=dev[:scored], dev_targets=dev[scored:]))


@dataclass(frozen=True)
class Scope:
    """``task`` and its loaded data ``bench``; ``scored``, the split (the targets scored and
    the dev targets methods fit on); ``targets``, those of the split that can be scored;
    the run ``seed`` and ``retain_items`` that size each request's retain items."""

    task: Task
    bench: Benchmark
    scored: Benchmark
    targets: list[Target]
    seed: int
    retain_items: int

    def roles(self, target: Target) -> dict[str, list[str]]:
        """The target's non-empty probe sets by role (:data:`~r2f_bench.task.ROLES`):
        ``held_out`` forget sets (the headline USR), ``seen`` sets (the request's own
        strings), ``locality`` (neighbour) sets and the ``name_control`` set."""
        sets = [s for s, ps in target.probes.items() if ps]
        return {role: [s for s in sets if self.task.role(s, self.bench) == role]
                for role in (HELD_OUT, SEEN, LOCALITY, NAME_CONTROL)}

    def probe_sets(self, target: Target, forget_only: bool = False) -> dict[str, list[Probe]]:
        """The probe sets a model is scored on for ``target``: its forget sets, then (unless
        ``forget_only``) its locality and name-control sets and the task's utility set."""
        roles = self.roles(target)
        names = roles[HELD_OUT] + roles[SEEN] + ([] if forget_only else roles[LOCALITY] + roles[NAME_CONTROL])
        sets = {s: target.probes[s] for s in names}
        if not forget_only:
            sets[self.task.utility_set] = self.bench.utility
        return sets

    def retain_for(self, target: Target) -> list[Probe]:
        """A request's retain items: a seeded sample of the fitting targets' requests, of the
        same size in both splits (what the dev split's fitting half holds, capped by
        ``retain_items``)."""
        dev = self.bench.dev_targets
        fitting = dev[len(dev) // 2:] if len(dev) > 1 else dev
        size = min(self.retain_items, sum(len(t.request) for t in fitting))
        pool = self.scored.retain_pool()
        return random.Random(f"{self.seed}:{target.id}").sample(pool, min(size, len(pool)))
