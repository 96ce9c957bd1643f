"""The result record of one target: its headline (USR, GUR), the other scores, what the
deletion cost, and what every record states besides its scores (provenance). Every
share is a percentage (0-100), identity alignment a cosine."""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..cost import TARGET_PHASES, Cost
from ..data import Benchmark, ForgetRequest, Target
from ..hardware import machine
from ..jsontext import json_safe
from ..metric import CORE, METRICS
from ..task import ACC, ANSWERED, HELD_OUT, LOCALITY, NAME_CONTROL, SCORE, SEEN
from .build import Built
from .metrics import RATIO_FLOOR, echo_answerable, floored_sets, kept, mean, pooled, recovery, retention, usr
from .config import RunConfig
from .scope import Scope

RAP = "rap"  # the paper's relearning attack: its scores are also the record's ``rap`` and ``rap_control``

Scores = dict[str, list[dict]]  # per-probe score rows by probe set


def answered(scores: Scores, probe_set: str) -> list[bool]:
    """Per probe of ``probe_set``: whether it counts as answered."""
    return [bool(x.get(ANSWERED, x.get(ACC, 0.0))) for x in scores.get(probe_set, [])]


def score(rows: list[dict]) -> float:
    """Mean score of per-probe rows (%): ROUGE-L recall, or accuracy for multiple choice."""
    return 100.0 * mean([r.get(SCORE, r.get(ACC, 0.0)) for r in rows])


@dataclass(frozen=True)
class Measured:
    """What one deletion's evaluation measured: the untouched model's evaluation
    (``before``: ``scores`` and ``extra``), the edited model's scores and extra scores,
    its identity alignment, and each attack's forget-set scores (by its ``--attacks``
    spec) on the edited model, with its seconds (``attacked``), and on the untouched one
    (``controls``); an attack that did not run (``--rap-steps 0``) is in neither."""

    before: dict[str, Any]
    after: Scores
    extra_after: dict[str, Any]
    alignment: float
    attacked: dict[str, tuple[Scores, float]]
    controls: dict[str, Scores]


def run_facts(config: RunConfig, bench: Benchmark, params: dict[str, Any], versions: dict[str, str]) -> dict[str, Any]:
    """What every record of a run states alike: the run's (completed) configuration, its
    method's resolved ``params``, the code ``versions`` and the data it ran on."""
    return {"request_source": bench.request_source, "config": config.to_dict(), "params": params,
            "versions": versions, "data_revision": bench.revision}


def provenance(facts: dict[str, Any], built: Built, request: ForgetRequest, phases_once: dict[str, float], wall: float,
               spent: dict[str, float], device: torch.device) -> dict[str, Any]:
    """What every record states besides its scores: the run's ``facts`` (:func:`run_facts`),
    the request's views, the models, the wall seconds of the target's phases that ran
    (``phases``) and the run's one-time costs (``phases_once``), and what they ran on
    (``machine``: the processor or accelerator of ``device``; CPU threads)."""
    return {"request_source": facts["request_source"],
            "views": [[p.question for p in view] for view in request.views],
            "request_of": request.target,  # under --control other_request, another target's
            "models": {"target": built.label, "proxy": built.proxy.label if built.proxy else None},
            "knowledge": built.knowledge, "chat_template": built.chat_template,
            "config": facts["config"], "params": facts["params"],
            "versions": facts["versions"], "data_revision": facts["data_revision"],
            "setup_seconds": phases_once["setup"], "wall_seconds": wall,
            "phases": {p: spent[p] for p in TARGET_PHASES if p in spent},
            "phases_once": dict(phases_once), "host": platform.node(),
            "machine": machine(device), "threads": torch.get_num_threads() if device.type == "cpu" else None}


class Recorder:
    """The records of one run's targets, scored as ``scope`` says, and their headline; each
    names the run's method, task and seed (``config``) and holds the method's own
    ``result_columns``."""

    def __init__(self, scope: Scope, config: RunConfig, result_columns: tuple[str, ...],
                 progress: Callable[[str], None]) -> None:
        self.scope, self.config, self.result_columns, self.progress = scope, config, result_columns, progress
        self._low_utility_said = False

    def gur(self, before: float, after: float) -> float | None:
        """GUR from the untouched and unlearned utility scores (%): n/a (``None``) where the
        untouched model scores below :data:`~r2f_bench.engine.metrics.RATIO_FLOOR`, said once per run."""
        if before < RATIO_FLOOR and not self._low_utility_said:
            self._low_utility_said = True
            self.progress(f"warning: the untouched model scores {before:.1f}% on the utility set, below the "
                               f"{RATIO_FLOOR:g}% floor: GUR, a ratio to it, is n/a in this run's records")
        return retention(before, after, RATIO_FLOOR)

    def headline(self, target: Target, before: Scores, after: Scores) -> tuple[float | None, float | None]:
        """(USR, GUR) of one deletion from the per-probe scores before and after (GUR ``None``
        when ``after`` holds no utility scores: a forget-only evaluation)."""
        task = self.scope.task
        held_out, util = self.scope.roles(target)[HELD_OUT], task.utility_set
        known = {s: sum(self.known(target, before, s)) for s in held_out}
        by_level = {s: usr(self.known(target, before, s), answered(after, s), task.chance(s)) for s in held_out}
        gur = self.gur(score(before[util]), score(after[util])) if util in after else None
        return pooled(by_level, known), gur

    @staticmethod
    def known(target: Target, before: Scores, probe_set: str) -> list[bool]:
        """Per probe of ``target``'s forget set ``probe_set``: whether the untouched model
        knew it (answered it, and its own prompt would not: :func:`echo_answerable`)."""
        return [a and not echo_answerable(p) for a, p in zip(answered(before, probe_set), target.probes[probe_set])]

    def diverged(self, target: Target, cost: Cost, info: dict, stated: dict[str, Any]) -> dict[str, Any]:
        """The record of a deletion that destroyed the model: a failure, never a score."""
        config = self.config
        return json_safe({"method": config.method, "task": config.task, "target": target.id,
                          "seed": config.seed, "status": "diverged",
                          **{m: None for m in CORE if METRICS[m].kind == "score"}, "attacks": {},
                          "seconds": cost.seconds, "peak_mem_mb": cost.peak_mem_mb, "budget": cost.budget,
                          "info": info, **stated})

    def record(self, target: Target, request: ForgetRequest, m: Measured, cost: Cost, info: dict,
               stated: dict[str, Any]) -> dict[str, Any]:
        """The result record of a deletion, with ``stated`` (its :func:`provenance`)."""
        scope, task, config = self.scope, self.scope.task, self.config
        roles, chance = scope.roles(target), task.chance
        b_scores, util, held_out = m.before["scores"], task.utility_set, roles[HELD_OUT]
        known = {s: sum(self.known(target, b_scores, s)) for s in held_out + roles[SEEN]}
        forgotten = {s: sum(b and not a for b, a in zip(self.known(target, b_scores, s), answered(m.after, s)))
                     for s in held_out}

        def rate(f, sets: list[str], *scores: Scores) -> dict[str, float | None]:
            return {s: f(self.known(target, b_scores, s), *(answered(x, s) for x in scores), chance(s)) for s in sets}

        by_level = rate(usr, held_out, m.after)
        attacks = {spec: {"usr": pooled(rate(usr, held_out, scores), known),
                          "recovered": pooled(rate(recovery, held_out, m.after, scores), forgotten),
                          "control": pooled(rate(kept, held_out, m.controls[spec]), known),
                          "forgotten": sum(forgotten.values()), "seconds": seconds}
                   for spec, (scores, seconds) in m.attacked.items()}
        set_before = {s: score(rows) for s, rows in b_scores.items()}
        set_after = {s: score(rows) for s, rows in m.after.items()}
        rows = lambda scores, role: [p for s in floored_sets(set_before, roles[role]) for p in scores.get(s, [])]

        def ratio(role: str) -> float | None:
            """The role's score after as a % of before, over its sets at or above the floor."""
            asked = rows(b_scores, role)
            return retention(score(asked), score(rows(m.after, role))) if asked else None

        record = {
            "method": config.method, "task": config.task, "target": target.id, "seed": config.seed,
            "status": "ok",
            "usr": pooled(by_level, known),
            "usr_seen": pooled(rate(usr, roles[SEEN], m.after), known),
            "usr_by_level": by_level,
            "gur": self.gur(set_before[util], set_after[util]),
            "locality": ratio(LOCALITY),
            "name_control": ratio(NAME_CONTROL),
            "ratio_floor": RATIO_FLOOR,
            **{field: attacks.get(RAP, {}).get(key) for field, key in (("rap", "recovered"), ("rap_control", "control"))},
            "attacks": attacks,
            "identity_alignment": m.alignment,
            "seconds": cost.seconds, "peak_mem_mb": cost.peak_mem_mb, "budget": cost.budget,
            "known_forget_probes": sum(known[s] for s in held_out),
            "forgotten_forget_probes": sum(forgotten.values()),
            "forget_probes": sum(len(b_scores.get(s, [])) for s in held_out),
            "echo_forget_probes": sum(echo_answerable(p) for s in held_out for p in target.probes[s]),
            "n": {"utility": len(scope.bench.utility), "identity_prompts": len(scope.bench.general_prompts),
                  **{role: len(rows(b_scores, role)) for role in (LOCALITY, NAME_CONTROL)},  # what the ratio rests on
                  "request": len(request.facts),
                  "retain": len(request.retain)},
            "roles": roles,
            "official": {"before": {**task.official_scores(set_before), **m.before["extra"]},
                         "after": {**task.official_scores(set_after), **m.extra_after}},
            "set_scores": {"before": set_before, "after": set_after},
            "info": info,
            **stated,
        }
        record.update({column: info.get(column) for column in self.result_columns})
        return json_safe(record)
