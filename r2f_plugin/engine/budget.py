"""What a deletion spends besides time and memory, measured the same way for every method
(the framework is told nothing by the method): the forward passes through the model with
gradients on and the tokens they carry, whether it read retain data (the request's or the
context's pool, in :meth:`~r2f_bench.unlearner.Unlearner.setup` or the deletion), and the
share of the model's weights it changed (:meth:`~r2f_bench.engine.snapshot.Snapshot.changed_share`).
Rankings are read beside it: one step is not 150."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Iterator, Sequence

import torch


@dataclass
class Spend:
    """One deletion's budget, as records state it (``budget``)."""

    grad_passes: int = 0  # forward passes through the model with autograd on
    grad_tokens: int = 0  # the input tokens of those passes
    retain_read: bool = False  # the deletion read retain data (the request's retain items or the context's pool)
    retain_in_setup: bool = False  # the method's setup read the pool (R2F fits its decoder on it, ECO its classifier)
    weights_changed: float | None = None  # % of the model's weight elements changed (None: another model returned)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Watched(list):
    """A list that notes whether its items were read (iterated, indexed or sliced; asking its
    length, or whether it is empty, reads nothing). Reads done in C without iterating (``+``,
    ``.copy()``, ``in``) go unnoticed: a lower bound, which every built-in method's use meets
    (``tests/test_every_method_on_every_task.py``)."""

    read = False

    def __iter__(self) -> Iterator:
        self.read = True
        return super().__iter__()

    def __getitem__(self, index: Any) -> Any:
        self.read = True
        return super().__getitem__(index)


@contextmanager
def metered(model: torch.nn.Module, retain: Sequence[Watched]) -> Iterator[Spend]:
    """Count the passes with gradients through ``model`` (at its input embeddings, which every
    forward of a transformer goes through, wrapped in PEFT or not, and which a deep copy of it
    carries along) while the block runs, and whether any :class:`Watched` of ``retain`` was
    read in it (what was read before stays noted)."""
    spend = Spend()
    earlier = [items.read for items in retain]
    for items in retain:
        items.read = False

    def count(_module: torch.nn.Module, args: tuple) -> None:
        if torch.is_grad_enabled() and args and isinstance(args[0], torch.Tensor):
            spend.grad_passes += 1
            spend.grad_tokens += args[0].numel()

    entry = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else model  # not a transformer: its own
    handle = entry.register_forward_pre_hook(count)
    try:
        yield spend
    finally:
        handle.remove()
        spend.retain_read = any(items.read for items in retain)
        for items, was in zip(retain, earlier):
            items.read = items.read or was
