"""The attacks a run makes after each deletion (``--attacks``, :mod:`r2f_bench.attack`):
each one's data checked for leaks, its control on the untouched model (cached like the
untouched evaluation), then the attack on the unlearned model, put back between attacks
that change weights. The run reaches attacks through the plugin registry only."""

from __future__ import annotations

import dataclasses
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..attack import Attack, Attacked, Budget, parse_attacks
from ..data import ForgetRequest, Probe, Target
from ..errors import UserError
from ..plugins import registry
from ..unlearner import Context
from . import protocol
from .evalcache import cached, entry_path
from .evaluate import Evaluator, scores_shape
from .scope import Scope
from .weights import UNTOUCHED, Weights

Scores = dict[str, list[dict]]


@dataclass
class Prepared:
    """One attack on one target: its spec, the attack and the data it uses."""

    spec: str
    attack: Attack
    data: list[Probe]

    def key(self) -> list[Any]:
        """What its outcome depends on besides the model and the probes."""
        return [self.spec, type(self.attack).__module__, dataclasses.asdict(self.attack.params),
                [(p.prompt, p.answer) for p in self.data]]


class Attacks:
    """The run's attacks: prepared per target, run on the untouched model (controls, cached)
    and on each unlearned model."""

    def __init__(self, text: str, scope: Scope, evaluator: Evaluator, weights: Weights, ctx: Context, budget: Budget,
                 progress: Callable[[str], None]) -> None:
        self.attacks = parse_attacks(text)
        self.scope, self.evaluator, self.weights, self.ctx, self.budget = scope, evaluator, weights, ctx, budget
        self.progress = progress

    def prepare(self, target: Target, request: ForgetRequest) -> list[Prepared]:
        """Each attack with its data for ``target``; refused in one line when the data holds a
        string ``target`` is scored on (an attack must not be handed the answers)."""
        bench, prepared = self.scope.bench, []
        for spec, attack in self.attacks:
            if attack.relearns and not self.budget.steps:  # --rap-steps 0: no relearning
                continue
            data = attack.data(request, self.ctx)
            if attack.relearns and not data:  # nothing to relearn on (an empty request): not measured
                continue
            evaluated = [(protocol.asked(p), f"target {target.id}, probe set {s}")
                         for s, ps in self.scope.probe_sets(target, forget_only=True).items()
                         if s not in bench.seen_sets for p in ps]
            visible = [(x, f"the data of attack {spec}") for p in data for x in protocol.visible_texts(p)]
            leaks = protocol.find_leaks(evaluated, visible, first_only=True,
                                        wording=(s for s, _ in protocol.evaluated_items(bench)))
            if leaks:
                raise UserError(f"{leaks[0]}; an attack must never be handed what it is scored on "
                                f"(fix the attack's data).")
            prepared.append(Prepared(spec, attack, data))
        return prepared

    def scores(self, model: torch.nn.Module, target: Target, p: Prepared) -> Scores:
        """``target``'s forget-set scores of ``model`` after ``p`` attacks it; an attack that
        raises is its plugin's bug: its traceback, then one line naming it."""
        try:
            attacked = p.attack.attack(model, p.data, self.ctx, self.budget)
        except (UserError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - a plugin's bug, named
            self.progress(traceback.format_exc().rstrip())
            raise UserError(f"attack {p.spec!r} ({self.origin(p)}) raised {type(exc).__name__} on target {target.id}: "
                            f"{(str(exc).strip().splitlines() or [''])[0][:200]}; its traceback is above.") from None
        if not isinstance(attacked, Attacked):
            raise UserError(f"attack {p.spec!r} returned {type(attacked).__name__}, not an Attacked (r2f_bench.attack).")
        sets = self.scope.probe_sets(target, forget_only=True)
        if attacked.ask is not None:
            sets = {name: [attacked.ask(q) for q in probes] for name, probes in sets.items()}
        sampling = (attacked.samples, attacked.temperature, self.ctx.seed) if attacked.samples > 1 else None
        return self.evaluator.score_sets(attacked.model, sets, sampling, attacked.reply)

    def controls(self, target: Target, prepared: list[Prepared]) -> dict[str, Scores]:
        """Each attack's scores on the untouched model, cached by the model, the probes and the attack."""
        out = {}
        sets = self.scope.probe_sets(target, forget_only=True)
        probes = {n: [(q.prompt, q.answer) for q in ps] for n, ps in sets.items()}
        for p in prepared:
            budget = dataclasses.asdict(self.budget) if p.attack.relearns else None  # only a relearning attack spends it
            path = entry_path(f"{self.evaluator.config.task}-attack-control",
                              [*self.evaluator.model_key(), probes, *p.key(), self.origin(p), budget, self.ctx.seed])
            out[p.spec] = cached(path, lambda entry: scores_shape(entry, sets), lambda p=p: self._on_untouched(target, p),
                                 self.progress)
        return out

    @staticmethod
    def origin(p: Prepared) -> str:
        """The distribution an attack comes from, with its version (a new release: new controls)."""
        try:
            return registry().version_of("attack", p.attack.name)
        except KeyError:  # an attack object handed in, not registered
            return f"unregistered {type(p.attack).__module__}"

    def _on_untouched(self, target: Target, p: Prepared) -> Scores:
        model = self.weights.at(UNTOUCHED)
        if p.attack.edits_weights:
            self.weights.edited()
        return self.scores(model, target, p)

    def after(self, model: torch.nn.Module, target: Target, prepared: list[Prepared]) -> dict[str, tuple[Scores, float]]:
        """Each attack's scores on the unlearned ``model`` and its seconds; the weights the
        deletion left are put back before every attack that changes weights but the first
        (the run puts the untouched ones back after the last)."""
        if model is self.weights.model:
            self.weights.edited()
        ordered = sorted(prepared, key=lambda p: p.attack.edits_weights)  # the ones that change nothing first
        editing = [p for p in ordered if p.attack.edits_weights]
        held = self.weights.hold(model) if len(editing) > 1 else None
        out = {}
        for p in ordered:
            if held is not None and p is not editing[0] and p.attack.edits_weights:
                held.restore(model)
            start = time.perf_counter()
            out[p.spec] = (self.scores(model, target, p), time.perf_counter() - start)
        return {p.spec: out[p.spec] for p in prepared}
