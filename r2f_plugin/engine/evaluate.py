"""Scoring models on a target: per-probe scores through lm-eval, the untouched model's
evaluation and RAP's control (both cached, :mod:`~r2f_bench.engine.evalcache`), RAP's
relearning attack, and identity alignment."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..data import ForgetRequest, Probe, Target
from .build import Built
from .distributed import single_process_eval
from .evalcache import cached, entry_path
from .lmeval import evaluate_probes
from .metrics import identity_alignment, next_token_distributions
from .plan import Plan
from .teaching import finetune
from .weights import UNTOUCHED, Weights

EVAL_VERSION = "2"


def scores_shape(scores: Any, sets: dict[str, list[Probe]]) -> str | None:
    """Why cached per-probe ``scores`` do not fit the probe ``sets`` they were made for
    (``None``: they do): each non-empty set needs one object per probe."""
    if not isinstance(scores, dict):
        return f"a JSON {type(scores).__name__}, not an object of probe sets"
    for name, probes in sets.items():
        rows = scores.get(name, [] if not probes else None)
        if not isinstance(rows, list) or len(rows) != len(probes) or not all(isinstance(r, dict) for r in rows):
            return f"probe set {name!r} lacks its {len(probes)} score rows"
    return None


def untouched_shape(entry: Any, sets: dict[str, list[Probe]]) -> str | None:
    """Why a cached untouched-model evaluation is malformed (``None``: it is not)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("extra"), dict):
        return "not an evaluation record (scores and extra)"
    return scores_shape(entry.get("scores"), sets)


class Evaluator:
    """Scores the run's models on a target's probe sets (:meth:`Plan.probe_sets`); the
    untouched model is ``weights`` put back to its untouched snapshot."""

    def __init__(self, plan: Plan, built: Built, weights: Weights) -> None:
        self.plan, self.built, self.weights = plan, built, weights
        self._reference: list[torch.Tensor] | None = None

    def scores(self, model: torch.nn.Module, target: Target, forget_only: bool = False) -> dict[str, list[dict]]:
        """Per-probe scores of ``model`` on ``target``'s probe sets (``forget_only``: its
        forget sets alone), by probe set."""
        with single_process_eval(), tempfile.TemporaryDirectory(prefix=".work-", dir=self.plan.out_dir) as workdir:
            return evaluate_probes(model, self.built.tokenizer, self.plan.task,
                                   self.plan.probe_sets(target, forget_only), Path(workdir),
                                   chat_template=self.built.chat_template)

    def untouched_path(self, target: Target) -> Path:
        """Where the untouched model's evaluation on ``target`` is cached: keyed by the model,
        its dtype, the chat template's use and every probe scored (a request's seen set
        depends on the chosen targets)."""
        plan, config = self.plan, self.plan.config
        probes = {s: [(p.prompt, p.answer) for p in ps] for s, ps in plan.probe_sets(target).items()}
        return entry_path(config.task, [EVAL_VERSION, self.built.label, target.id, plan.bench.revision, config.task,
                                        config.seed, probes, self.built.info.get("key", ""), config.dtype,
                                        self.built.chat_template])

    def untouched(self, target: Target) -> dict[str, Any]:
        """The untouched model's evaluation on ``target``: its per-probe ``scores`` and the
        task's ``extra`` scores (cached)."""
        def evaluate() -> dict[str, Any]:
            model = self.weights.at(UNTOUCHED)
            return {"scores": self.scores(model, target),
                    "extra": self.plan.task.extra_scores(model, self.built.tokenizer, self.plan.bench, target)}

        return cached(self.untouched_path(target), lambda entry: untouched_shape(entry, self.plan.probe_sets(target)),
                      evaluate, self.plan.progress)

    def reference(self) -> list[torch.Tensor]:
        """The untouched model's next-token distributions on the identity prompts (computed
        on the first call, which comes before the first edit)."""
        if self._reference is None:
            self._reference = next_token_distributions(self.weights.at(UNTOUCHED), self.built.tokenizer,
                                                       self.plan.bench.general_prompts)
        return self._reference

    def alignment(self, model: torch.nn.Module) -> float:
        """Identity alignment of ``model`` to the untouched model."""
        return identity_alignment(self.reference(), model, self.built.tokenizer, self.plan.bench.general_prompts)

    # -- RAP ------------------------------------------------------------------
    def attack_data(self, request: ForgetRequest) -> list[Probe]:
        """RAP's relearning data: paraphrased views of half the request's facts."""
        paraphrased = [p for view in request.views[1:] for p in view] or list(request.facts)
        rng = random.Random(self.plan.config.seed)
        keep = {p.answer for p in rng.sample(list(request.facts), max(1, len(request.facts) // 2))}
        return [p for p in paraphrased if p.answer in keep]

    def relearned(self, model: torch.nn.Module, target: Target, data: list[Probe]) -> dict[str, list[dict]] | None:
        """RAP's attack: the forget-set scores of ``model`` after it is fine-tuned in place
        for ``rap_steps`` steps on ``data`` (``None``, and ``model`` untouched, with no steps)."""
        if not self.plan.config.rap_steps:
            return None
        if model is self.weights.model:
            self.weights.edited()
        for p in model.parameters():
            p.requires_grad_(True)
        config = self.plan.config
        finetune(model, self.built.tokenizer, data, epochs=10**6, lr=config.rap_lr, batch_size=16,
                 max_steps=config.rap_steps, seed=config.seed)
        return self.scores(model, target, forget_only=True)

    def control(self, target: Target, data: list[Probe]) -> dict[str, list[dict]] | None:
        """RAP's control: the untouched model's :meth:`relearned` scores, cached beside its
        plain evaluation (``None`` with no attack steps)."""
        config = self.plan.config
        if not config.rap_steps:
            return None
        attack = [(p.prompt, p.answer) for p in data]
        path = entry_path(f"{config.task}-attack", [self.untouched_path(target).stem, attack, config.rap_steps,
                                                    config.rap_lr])
        return cached(path, lambda entry: scores_shape(entry, self.plan.probe_sets(target, forget_only=True)),
                      lambda: self.relearned(self.weights.at(UNTOUCHED), target, data), self.plan.progress)
