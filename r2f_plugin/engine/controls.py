"""Negative controls a real deletion must beat (``--control``), scored exactly as the
deletion is: ``other_request``, the method unlearns another evaluation target's request
(the next one, in order) and this target is scored, so what it forgets here is collateral;
``random_step``, the method's edit is replaced by a random direction of the same norm,
tensor by tensor, so what it forgets is what any change of that size breaks."""

from __future__ import annotations

import copy
import random
from typing import Sequence, TypeVar

import torch

T = TypeVar("T")


def other_target(targets: Sequence[T], target: T) -> T:
    """The evaluation target whose request stands in for ``target``'s: the next, cyclically."""
    return targets[(targets.index(target) + 1) % len(targets)]


def step_seed(seed: int, target_id: str) -> int:
    """The random step's seed for one target of a run: its own draw for each target (one
    direction for all would let a paired test over targets count one draw many times)."""
    return random.Random(f"{seed}:{target_id}").getrandbits(63)


def same_norm_noise(delta: torch.Tensor, gen: torch.Generator) -> torch.Tensor | None:
    """A random direction with ``delta``'s norm, on the CPU (``None`` where ``delta`` is zero)."""
    norm = delta.float().norm().item()
    if norm == 0:
        return None
    noise = torch.randn(delta.shape, generator=gen)
    return noise * (norm / noise.norm().item())


def random_step_like(original: torch.nn.Module, edited: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A copy of ``original`` moved by a random direction with the same norm, tensor by
    tensor, as the step that made ``edited``."""
    out = copy.deepcopy(original)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p, q in zip(out.parameters(), edited.parameters()):
            if (noise := same_norm_noise(q - p, gen)) is not None:
                p.add_(noise.to(p))  # on the weight's device
    return out
