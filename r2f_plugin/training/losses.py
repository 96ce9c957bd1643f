"""Losses on answers: token NLL, the KL to a reference model, and the unlearning losses.

The unlearning losses (``ascent``, ``unlikelihood``) are shared by R2F, FullGrad, the
LoRA baselines and gradient ascent, so they differ only in how they obtain a gradient.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from ..cost import phase
from ..data import Probe
from .encoding import encode, token_batches
from ..errors import UserError


def batch_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model's logits on an :func:`encode` batch."""
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def token_nll(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token negative log-likelihood of the labels and the mask of labelled tokens."""
    logits = batch_logits(model, batch)
    return logits_nll(logits, batch["labels"])


def logits_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`token_nll` from already computed logits (shifted here)."""
    logits, labels = logits[:, :-1].float(), labels[:, 1:].to(logits.device)  # a sharded model's logits are on its last device
    mask = labels != -100
    nll = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.clamp(min=0).reshape(-1),
                          reduction="none").view_as(labels)
    return nll * mask, mask


def answer_nll(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean answer-token NLL of each sequence (shape: batch)."""
    nll, mask = token_nll(model, batch)
    return nll.sum(1) / mask.sum(1).clamp(min=1)


def answer_logprob(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``log π(y|x)``, the summed answer-token log-probability of each sequence, and its
    answer length ``|y|`` in tokens (end-of-sequence included; shapes: batch): the
    sequence likelihood NPO and SimNPO are written in."""
    nll, mask = token_nll(model, batch)
    return -nll.sum(1), mask.sum(1)


def answer_kl(logits: torch.Tensor, ref_logits: torch.Tensor, labels: torch.Tensor,
              temperature: float = 1.0) -> torch.Tensor:
    """Token-level KL(reference ‖ model) of the next-token distributions, averaged over
    the answer tokens of the batch (SCRUB's and SKU's divergence for causal LMs). At a
    ``temperature`` T both distributions are softened by T and the KL is scaled by T²,
    as in knowledge distillation (Hinton et al. 2015; SCRUB's ``DistillKL``)."""
    t = float(temperature)
    logp = F.log_softmax(logits[:, :-1].float() / t, -1)
    ref = F.log_softmax(ref_logits[:, :-1].float() / t, -1)
    mask = labels[:, 1:].to(logits.device) != -100
    kl = F.kl_div(logp, ref, log_target=True, reduction="none").sum(-1)
    return t * t * (kl * mask).sum() / mask.sum().clamp(min=1)


LOSSES = ("ascent", "unlikelihood")
# sequences per forward/backward pass when a gradient is computed (the R2F paper's
# RWKU batch size); every method back-propagates in passes of this size, so their
# peak memory compares methods, not batch sizes
BATCH = 8


def sequence_losses(model: torch.nn.Module, tokenizer: Any, probes: Sequence[Probe],
                    loss: str = "ascent") -> torch.Tensor:
    """The unlearning loss of each probe (shape: len(probes)); descending it pushes the
    model away from the memorised answers (the "unlearning label" of the R2F paper's
    footnote 1).

    ``ascent``: the negated answer log-likelihood, ``log p(y)`` (gradient ascent,
    Jang et al. 2022). Its gradient weights each answer token by ``1 − p``, so the
    tokens the model is surest of, the ones greedy decoding keeps producing, count
    least.
    ``unlikelihood``: ``−log(1 − p(y_t))`` per answer token (Welleck et al. 2020,
    "Neural Text Generation with Unlikelihood Training"), averaged per answer. It
    weights confident tokens most and stops pushing once a token is unlikely.
    """
    if loss not in LOSSES:
        raise UserError(f"unknown unlearning loss {loss!r}; choose one of {', '.join(LOSSES)}.")
    batch = encode(tokenizer, probes, device=next(model.parameters()).device)
    if loss == "ascent":
        return -answer_nll(model, batch)
    nll, mask = token_nll(model, batch)
    p = torch.exp(-nll).clamp(max=1 - 1e-6)
    return (-torch.log1p(-p) * mask).sum(1) / mask.sum(1).clamp(min=1)


def unlearning_loss(model: torch.nn.Module, tokenizer: Any, probes: Sequence[Probe], loss: str = "ascent") -> torch.Tensor:
    """Mean unlearning loss over ``probes`` (see :func:`sequence_losses`)."""
    return sequence_losses(model, tokenizer, probes, loss).mean()


def check_loss(value: torch.Tensor) -> None:
    if not torch.isfinite(value).all():
        raise UserError("the unlearning loss is not finite (NaN/inf); check the model's weights and dtype (use float32 for small models).")


def backward_mean(model: torch.nn.Module, tokenizer: Any, probes: Sequence[Probe], loss: str) -> None:
    """Accumulate into ``.grad`` the gradient of the mean loss over ``probes`` (in chunks)."""
    n = len(probes)
    for indices in token_batches(tokenizer, probes, BATCH):  # in order of length: the mean does not depend on order
        chunk = [probes[i] for i in indices]
        with phase("forward"):
            value = unlearning_loss(model, tokenizer, chunk, loss) * (len(chunk) / n)
            check_loss(value)
        with phase("backward"):
            value.backward()
