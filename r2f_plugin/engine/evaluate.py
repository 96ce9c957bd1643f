"""Scoring models on a target: per-probe scores through lm-eval, the untouched model's
evaluation (cached, :mod:`~r2f_bench.engine.evalcache`), and identity alignment. The
attacks and their controls are :mod:`~r2f_bench.engine.attacks`'."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from ..atomic import atomic_path, atomic_write_text, set_aside
from ..data import Probe, Target
from .build import Built
from .distributed import single_process_eval
from .evalcache import cached, entry_path, read
from .lmeval import evaluate_probes
from .metrics import distributions, identity_alignment, positions
from .config import RunConfig
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
        """What the untouched model's answers depend on: the model (its weights' key), its
        dtype, the kind of device it runs on and whether probes go through the chat
        template. (Not the CPU thread count: it changes only the order of float sums.)"""
        device = next(self.weights.model.parameters()).device.type
        on = [device] if device != "cpu" else []  # CPU keys as they were before devices were keyed: caches stay
        return [EVAL_VERSION, self.built.label, self.built.info.get("key", ""), self.config.dtype, *on,
                self.built.chat_template]

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
        """The untouched model's next-token distributions on the identity prompts, per batch:
        a file of the cache keyed by the model and the prompts, written by the first run of
        this model (before its first edit) and read one batch at a time."""
        if self._reference is None:
            prompts = self.scope.bench.general_prompts
            key = self.model_key()[:-1]  # the prompts are raw text: the chat template plays no part
            path = entry_path(f"{self.config.task}-reference", [*key, prompts]).with_suffix(".npy")
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


class Reference:
    """Identity alignment's reference on disk: an ``.npy`` array of float32 rows (one per
    prompt position, a full vocabulary each), read back ``rows`` at a time, one batch per
    step of the comparison, so it is never held whole (6 GB for SmolLM2 on 500 prompts)."""

    def __init__(self, path: Path, rows: list[int], offset: int, vocab: int) -> None:
        self.path, self.rows, self.offset, self.vocab = path, rows, offset, vocab

    def __iter__(self) -> Iterator[torch.Tensor]:
        with self.path.open("rb") as f:
            f.seek(self.offset)
            for n in self.rows:
                yield torch.from_numpy(np.fromfile(f, dtype=np.float32, count=n * self.vocab).reshape(n, self.vocab))

    @classmethod
    def read(cls, path: Path, rows: list[int], vocab: int, progress: Callable[[str], None]) -> "Reference | None":
        """The entry at ``path`` (``None``: absent); one that is not a float32 array of
        ``sum(rows)`` × ``vocab``, or shorter than its header says, is set aside (one line)."""
        if not path.exists():
            return None
        try:
            with path.open("rb") as f:
                header = {(1, 0): np.lib.format.read_array_header_1_0,
                          (2, 0): np.lib.format.read_array_header_2_0}.get(np.lib.format.read_magic(f))
                if header is None:
                    raise ValueError("an .npy version this reader does not know")
                shape, fortran, dtype = header(f)
                offset = f.tell()
        except (OSError, ValueError) as exc:
            set_aside(path, type(exc).__name__, progress)
            return None
        expected = (sum(rows), vocab)
        if shape != expected or fortran or dtype != np.float32 or path.stat().st_size < offset + 4 * sum(rows) * vocab:
            set_aside(path, f"wrong shape: {shape} {dtype}, not {expected} float32", progress)
            return None
        return cls(path, rows, offset, vocab)

    @classmethod
    def write(cls, path: Path, rows: list[int], batches: Iterator[torch.Tensor]) -> "Reference":
        """Write ``batches`` (``rows`` of them, in order) to ``path`` atomically, one at a time."""
        with atomic_path(path) as tmp:
            array, start = None, 0
            for n, batch in zip(rows, batches, strict=True):
                if array is None:
                    array = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(sum(rows), batch.shape[1]))
                if len(batch) != n:
                    raise RuntimeError(f"identity alignment's batch has {len(batch)} positions, {n} expected")
                array[start:start + n] = batch.cpu().numpy()
                start += n
            array.flush()
            offset, vocab = array.offset, array.shape[1]
            del array
        return cls(path, rows, offset, vocab)
