"""Plain fine-tuning on answers and teacher-forced answer accuracy.

Teaches the embedded models their facts, and runs the relearning attack (RAP).
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

import torch

from .data import Probe
from .encoding import batches, encode
from .losses import answer_nll, batch_logits
from .progress import bar


def finetune(model: torch.nn.Module, tokenizer: Any, probes: list[Probe], epochs: int = 1, lr: float = 1e-3,
             batch_size: int = 32, stop_accuracy: float | None = None, max_steps: int | None = None,
             progress: Callable[[str], None] | None = None, seed: int = 0) -> int:
    """AdamW on the answer NLL. Stops after ``max_steps`` optimiser steps, or once the
    answer-token accuracy reaches ``stop_accuracy`` (checked every 5 epochs; a check
    that does not improve on the best so far halves the learning rate).
    Returns the number of epochs run.
    """
    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rng = random.Random(seed)
    steps, best = 0, 0.0
    model.train()
    epochs_bar = bar(range(1, epochs + 1), desc="teaching", unit="epoch") if progress else range(1, epochs + 1)
    for epoch in epochs_bar:
        for chunk in batches(probes, batch_size, rng):
            loss = answer_nll(model, encode(tokenizer, chunk, device=device)).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            if max_steps is not None and steps >= max_steps:
                model.eval()
                return epoch
        if stop_accuracy is not None and epoch % 5 == 0:
            acc = answer_accuracy(model, tokenizer, probes)
            if progress:
                epochs_bar.set_postfix(loss=f"{loss.item():.3f}", accuracy=f"{acc:.3f}")
            if acc >= stop_accuracy:
                break
            if acc <= best:
                for group in opt.param_groups:
                    group["lr"] /= 2
            best = max(best, acc)
            model.train()
    if progress:
        epochs_bar.close()
    model.eval()
    return epoch


@torch.no_grad()
def answer_accuracy(model: torch.nn.Module, tokenizer: Any, probes: Sequence[Probe], batch_size: int = 64) -> float:
    """Share of answer tokens predicted correctly under teacher forcing."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    hit = total = 0
    for chunk in batches(probes, batch_size):
        batch = encode(tokenizer, chunk, device=device)
        logits = batch_logits(model, batch)[:, :-1]
        labels = batch["labels"][:, 1:]
        mask = labels != -100
        hit += int(((logits.argmax(-1) == labels) & mask).sum())
        total += int(mask.sum())
    model.train(was_training)
    return hit / max(total, 1)
