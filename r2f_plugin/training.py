"""Tokenising (prompt, answer) pairs, the answer likelihood, and plain fine-tuning.

Used to teach the embedded models their facts, by the relearning attack (RAP) and
by every method that needs a loss on answers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F

from .data import Probe
from .errors import UserError
from .unlearner import at_least

# tokens of (prompt + answer) a training or unlearning sequence keeps, from the end: the
# embedded models' whole context, so a long prompt is cut where lm-eval cuts it when
# it generates (the end of the prompt stays, next to the answer)
MAX_LENGTH = 256


def encode(tokenizer: Any, probes: Sequence[Probe], answers: Sequence[str] | None = None,
           device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Right-padded batch of ``prompt + " " + answer + eos``; labels only on the answer.

    ``answers`` replaces the probes' answers (e.g. a refusal or a wrong answer).
    """
    answers = answers if answers is not None else [p.answer for p in probes]
    seqs, labels = [], []
    for p, a in zip(probes, answers):
        prompt = tokenizer(p.prompt, add_special_tokens=False)["input_ids"]
        answer = tokenizer(" " + a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = (prompt + answer)[-MAX_LENGTH:]
        n_ans = min(len(answer), len(ids))
        seqs.append(ids)
        labels.append([-100] * (len(ids) - n_ans) + ids[len(ids) - n_ans:])
    width = max(len(s) for s in seqs)
    pad = tokenizer.pad_token_id
    return {
        "input_ids": torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=device),
        "attention_mask": torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], device=device),
        "labels": torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels], device=device),
    }


def batch_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model's logits on an :func:`encode` batch."""
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def token_nll(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token negative log-likelihood of the labels and the mask of labelled tokens."""
    logits = batch_logits(model, batch)
    return logits_nll(logits, batch["labels"])


def logits_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`token_nll` from already computed logits (shifted here)."""
    logits, labels = logits[:, :-1].float(), labels[:, 1:]
    mask = labels != -100
    nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.clamp(min=0).reshape(-1),
                          reduction="none").view_as(labels)
    return nll * mask, mask


def answer_kl(logits: torch.Tensor, ref_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Token-level KL(reference ‖ model) of the next-token distributions, averaged over
    the answer tokens of the batch (SCRUB's and SKU's divergence for causal LMs)."""
    logp, ref = F.log_softmax(logits[:, :-1].float(), -1), F.log_softmax(ref_logits[:, :-1].float(), -1)
    mask = labels[:, 1:] != -100
    kl = F.kl_div(logp, ref, log_target=True, reduction="none").sum(-1)
    return (kl * mask).sum() / mask.sum().clamp(min=1)


def cycle_batches(items: Sequence[Any], size: int, seed: int = 0) -> Iterator[list[Any]]:
    """Endless shuffled minibatches of ``items`` (reshuffled every pass)."""
    rng = random.Random(seed)
    while True:
        yield from batches(items, size, rng)


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
    :data:`r2f_bench.gradients.BATCH`) while the effective batch stays the paper's.
    Pass one :func:`adamw` across calls to keep its state. With ``decay`` the learning
    rate falls linearly to 0 over the ``steps``. Returns the mean loss of each step.
    """
    losses = []
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1 - i / steps) if decay and steps else None
    params = [p for group in opt.param_groups for p in group["params"]]
    try:
        for step in range(steps):
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


def answer_nll(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean answer-token NLL of each sequence (shape: batch)."""
    nll, mask = token_nll(model, batch)
    return nll.sum(1) / mask.sum(1).clamp(min=1)


def batches(items: Sequence[Any], size: int, rng: random.Random | None = None) -> Iterable[list[Any]]:
    order = list(range(len(items)))
    if rng is not None:
        rng.shuffle(order)
    for i in range(0, len(order), size):
        yield [items[j] for j in order[i:i + size]]


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
    for epoch in range(1, epochs + 1):
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
                progress(f"  epoch {epoch}: loss {loss.item():.3f}, answer-token accuracy {acc:.3f}")
            if acc >= stop_accuracy:
                break
            if acc <= best:
                for group in opt.param_groups:
                    group["lr"] /= 2
            best = max(best, acc)
            model.train()
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
