"""Scoring models on a target: per-probe scores through lm-eval, the untouched model's
evaluation (cached, :mod:`~r2f_bench.engine.evalcache`), and identity alignment. The
attacks and their controls are :mod:`~r2f_bench.engine.attacks`'."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from ..atomic import atomic_write_text
from ..data import Probe, Target
from .build import Built
from .distributed import single_process_eval
from .evalcache import cached, entry_path, read
from .lmeval import evaluate_probes
from .metrics import ALIGNMENT_TAIL, distributions, identity_alignment, positions
from .config import RunConfig
from .reference import Reference
from .scope import Scope
from .weights import UNTOUCHED, Weights

EVAL_VERSION = "3"
EXTRA = "extra"  # the untouched evaluation's entry of the task's extra scores


def rows_shape(rows: Any, probes: list[Probe]) -> str | None:
    """Why cached per-probe score ``rows`` do not fit ``probes`` (``None``: they do): one
    object per probe."""
    if not isinstance(rows, list) or len(rows) != len(probes) or not all(isinstance(r, dict) for r in rows):
        return f"not the {len(probes)} score rows of its probes"
    return None


def scores_shape(scores: Any, sets: dict[str, list[Probe]]) -> str | None:
    """Why cached per-probe ``scores`` do not fit the probe ``sets`` they were made for
    (``None``: they do): each non-empty set needs one object per probe."""
    if not isinstance(scores, dict):
        return f"a JSON {type(scores).__name__}, not an object of probe sets"
    for name, probes in sets.items():
        if rows_shape(scores.get(name, [] if not probes else None), probes) is not None:
            return f"probe set {name!r} lacks its {len(probes)} score rows"
    return None


class Evaluator:
    """Scores the run's models on a target's probe sets (:meth:`.Scope.probe_sets`); the
    untouched model is ``weights`` put back to its untouched snapshot. ``config`` gives the
    work folder (``output``), the batch size and the key's task and dtype."""

    def __init__(self, scope: Scope, built: Built, weights: Weights, config: RunConfig,
                 progress: Callable[[str], None]) -> None:
        self.scope, self.built, self.weights, self.config, self.progress = scope, built, weights, config, progress
        self._reference: Reference | None = None

    def scores(self, model: torch.nn.Module, target: Target, forget_only: bool = False) -> dict[str, list[dict]]:
        """Per-probe scores of ``model`` on ``target``'s probe sets (``forget_only``: its
        forget sets alone), by probe set."""
        return self.score_sets(model, self.scope.probe_sets(target, forget_only))

    def score_sets(self, model: torch.nn.Module, sets: dict[str, list[Probe]],
                   sampling: tuple[int, float, int] | None = None, reply: str = "") -> dict[str, list[dict]]:
        """Per-probe scores of ``model`` on the probe ``sets``, by set (one lm-eval call;
        ``sampling`` and ``reply``: see :func:`~.lmeval.evaluate_probes`)."""
        with single_process_eval(), tempfile.TemporaryDirectory(prefix=".work-", dir=self.config.output) as workdir:
            return evaluate_probes(model, self.built.tokenizer, self.scope.task, sets, Path(workdir),
                                   self.config.eval_batch_size, self.built.chat_template, sampling, reply)

    def model_key(self) -> list[Any]:
        """What the untouched model's answers depend on: the model (its weights' key; an
        embedded model's label too, not a pretrained one's, which holds its path as typed), its
        dtype, the kind of device it runs on and whether probes go through the chat
        template. (Not the CPU thread count: it changes only the order of float sums.)"""
        device = next(self.weights.model.parameters()).device.type
        on = [device] if device != "cpu" else []  # CPU keys as they were before devices were keyed: caches stay
        label = self.built.label if self.built.knowledge.get("embedded") else ""
        return [EVAL_VERSION, label, self.built.info.get("key", ""), self.config.dtype, *on, self.built.chat_template]

    def untouched_paths(self, target: Target, forget_only: bool = False) -> dict[str, Path]:
        """Where the untouched model's evaluation on ``target`` is cached: one entry per probe
        set, keyed by the model and the set's probes (so the utility set, the same for every
        target, is evaluated once per model), and ``extra`` (the task's extra scores) keyed
        by the target and the data revision."""
        task, key = self.config.task, self.model_key()
        paths = {name: entry_path(f"{task}-untouched", [*key, name, [(p.prompt, p.answer) for p in probes]])
                 for name, probes in self.scope.probe_sets(target, forget_only).items()}
        if not forget_only:
            paths[EXTRA] = entry_path(f"{task}-extra", [*key, target.id, self.scope.bench.revision])
        return paths

    def untouched(self, target: Target, forget_only: bool = False) -> dict[str, Any]:
        """The untouched model's evaluation on ``target``: its per-probe ``scores`` and (unless
        ``forget_only``) the task's ``extra`` scores, each set read from the cache or
        evaluated (the missing sets in one call) and written there."""
        sets, paths = self.scope.probe_sets(target, forget_only), self.untouched_paths(target, forget_only)
        progress = self.progress
        scores = {name: read(paths[name], lambda rows, ps=probes: rows_shape(rows, ps), progress)
                  for name, probes in sets.items()}
        missing = {name: sets[name] for name, rows in scores.items() if rows is None}
        if missing:
            for name, rows in self.score_sets(self.weights.at(UNTOUCHED), missing).items():
                atomic_write_text(paths[name], json.dumps(rows))
                scores[name] = rows
        if forget_only:
            return {"scores": scores}
        extra = cached(paths[EXTRA], lambda entry: None if isinstance(entry, dict) else "not an object of scores",
                       lambda: self.scope.task.extra_scores(self.weights.at(UNTOUCHED), self.built.tokenizer,
                                                            self.scope.bench, target), progress)
        return {"scores": scores, "extra": extra}

    def reference(self) -> "Reference":
        """The untouched model's next-token distributions on the identity prompts, per batch
        (:mod:`~r2f_bench.engine.reference`): an entry of the cache keyed by the model, the
        prompts and the share of each distribution kept, written by the first run of this
        model (before its first edit) and read one batch at a time."""
        if self._reference is None:
            prompts = self.scope.bench.general_prompts
            key = self.model_key()[:-1]  # the prompts are raw text: the chat template plays no part
            path = entry_path(f"{self.config.task}-reference", [*key, prompts, ALIGNMENT_TAIL]).with_suffix("")
            rows = positions(self.built.tokenizer, prompts)
            vocab = self.weights.model.get_output_embeddings().weight.shape[0]
            self._reference = Reference.read(path, rows, vocab, self.progress)
            if self._reference is None:
                self._reference = Reference.write(path, rows, distributions(self.weights.at(UNTOUCHED),
                                                                             self.built.tokenizer, prompts))
        return self._reference

    def alignment(self, model: torch.nn.Module) -> float:
        """Identity alignment of ``model`` to the untouched model."""
        return identity_alignment(self.reference(), model, self.built.tokenizer, self.scope.bench.general_prompts)
