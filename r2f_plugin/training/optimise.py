"""The training loop of the multi-step baselines: AdamW, micro-batches, accumulation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from ..errors import UserError
from ..progress import bar
from ..unlearner import at_least


def adamw(params: Iterable[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """AdamW without weight decay over ``params``, which are made trainable."""
    params = list(params)
    for p in params:
        p.requires_grad_(True)
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.0)


@dataclass
class BatchParams:
    """Batching shared by the multi-step baselines: micro-batches of the size every
    method back-propagates in, accumulated to the R2F paper's effective batch of 32."""

    batch_size: int = field(default=8, metadata={"help": "sequences per micro-batch (R2F paper: 8 on RWKU)", "check": at_least(1)})
    accumulate: int = field(default=4, metadata={"help": "micro-batches per optimiser step (effective batch 32, as in the R2F paper)", "check": at_least(1)})


def optimise(opt: torch.optim.Optimizer, loss_fn: Callable[[int], torch.Tensor | None], steps: int,
             accumulate: int = 1, decay: bool = False) -> list[float]:
    """``steps`` optimiser steps, each on the mean of ``accumulate`` micro-batch losses.

    ``loss_fn(i)`` is the loss of micro-batch ``i`` (counted from 0 across steps), or
    ``None`` when there is none left (a pass over a fixed set of batches). The
    shared training loop of the multi-step baselines (gradient ascent, SCRUB, SKU,
    DeepCUT): micro-batches keep every method's passes the same size (see
    :data:`r2f_bench.training.losses.BATCH`) while the effective batch stays the paper's.
    Pass one :func:`adamw` across calls to keep its state. With ``decay`` the learning
    rate falls linearly to 0 over the ``steps``. Returns the mean loss of each step.
    """
    losses = []
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1 - i / steps) if decay and steps else None
    params = [p for group in opt.param_groups for p in group["params"]]
    try:
        for step in bar(range(steps), desc="unlearning", unit="step"):
            opt.zero_grad(set_to_none=True)
            values = []
            for micro in range(accumulate):
                loss = loss_fn(step * accumulate + micro)
                if loss is None:
                    break
                if not torch.isfinite(loss):
                    raise UserError("the training loss is not finite (NaN/inf); lower the learning rate or use float32.")
                (loss / accumulate).backward()
                values.append(float(loss.detach()))
            if not values:
                break
            if len(values) < accumulate:  # a short last step: average over what it had
                for p in params:
                    if p.grad is not None:
                        p.grad.mul_(accumulate / len(values))
            opt.step()
            if schedule is not None:
                schedule.step()
            losses.append(sum(values) / len(values))
    finally:
        opt.zero_grad(set_to_none=True)
    return losses
