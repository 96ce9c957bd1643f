"""Unlearning losses, exact per-matrix gradients, and the normalised update step.

Shared by R2F, FullGrad, the LoRA baselines and gradient ascent, so they differ only
in how they obtain the gradient.

The unlearning step (paper Eq. 3, θ ← θ* − η ∇L_unlearn) uses a *relative* step size:
``ΔW = −η · ‖W‖ · G / ‖G‖`` with both norms taken over all updated matrices together,
so η means "move the weights by this fraction of their norm" whatever the model,
the loss scale or the gradient estimator; the direction is the gradient's.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch

from .data import Probe
from .errors import UserError
from .training import answer_nll, batches, encode, token_nll

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
    for chunk in batches(list(probes), BATCH):
        value = unlearning_loss(model, tokenizer, chunk, loss) * (len(chunk) / n)
        check_loss(value)
        value.backward()


def linear_weights(model: torch.nn.Module, modules: Sequence[str]) -> dict[str, torch.nn.Parameter]:
    """The weight matrices of the linear layers whose name ends with one of ``modules``."""
    out = {}
    for name, module in model.named_modules():
        if name.split(".")[-1] in modules and hasattr(module, "weight") and module.weight.dim() == 2:
            out[name] = module.weight
    if not out:
        raise UserError(f"the model has no linear layers named {', '.join(modules)}; set target modules that exist in this architecture.")
    return out


def exact_gradients(model: torch.nn.Module, tokenizer: Any, probes: Sequence[Probe], loss: str,
                    modules: Sequence[str]) -> dict[str, torch.Tensor]:
    """Exact gradient of the mean unlearning loss for each selected weight matrix.

    This is the full-model backward FullGrad pays for: it holds one gradient buffer
    per matrix at once.
    """
    weights = linear_weights(model, modules)
    saved = {p: p.requires_grad for p in model.parameters()}
    for p in model.parameters():
        p.requires_grad_(False)
    for w in weights.values():
        w.requires_grad_(True)
        w.grad = None
    try:
        backward_mean(model, tokenizer, probes, loss)
        grads = {name: w.grad for name, w in weights.items()}
        check_finite(grads.values())
        return grads
    finally:
        for w in weights.values():
            w.grad = None
        for p, flag in saved.items():
            p.requires_grad_(flag)


def check_finite(tensors: Iterable[torch.Tensor]) -> None:
    for t in tensors:
        if not torch.isfinite(t).all():
            raise UserError("gradients contain NaN or inf; check the model's weights and dtype (use float32 for small models).")


def norm(t: torch.Tensor) -> float:
    """Euclidean norm of a whole tensor, without a temporary copy of it."""
    return float(torch.linalg.vector_norm(t.detach()))


@torch.no_grad()
def apply_step(weights: dict[str, torch.Tensor], gradient: Callable[[str], torch.Tensor], step: float) -> float:
    """Apply ``ΔW = −step · ‖W‖ · G / ‖G‖`` matrix by matrix.

    ``gradient(name)`` produces one matrix's gradient on demand, so a caller that
    decodes gradients never holds more than one at a time: a first pass takes the
    norms, a second recomputes and applies. Returns ‖G‖ (global).
    """
    g_sq = 0.0
    for name in weights:
        g = gradient(name)
        check_finite([g])
        g_sq += norm(g) ** 2
        del g
    w_norm = sum(norm(w) ** 2 for w in weights.values()) ** 0.5
    g_norm = g_sq ** 0.5
    if g_norm == 0.0:
        raise UserError("the unlearning gradient is zero; the model may not know the target (check the untouched model's accuracy).")
    for name, w in weights.items():
        w.add_(gradient(name).to(w.dtype), alpha=-step * w_norm / g_norm)
    return g_norm


class CosineMeter:
    """Cosine between two gradients accumulated matrix by matrix, overall and per group."""

    def __init__(self) -> None:
        self.sums: dict[str, list[float]] = {}

    def add(self, group: str, estimate: torch.Tensor, truth: torch.Tensor) -> None:
        e, t = estimate.double().flatten(), truth.double().flatten()
        for key in (group, "overall"):
            s = self.sums.setdefault(key, [0.0, 0.0, 0.0, 0.0])
            s[0] += float(e @ t)
            s[1] += float(e @ e)
            s[2] += float(t @ t)
            s[3] += float((e - t) @ (e - t))

    def cosines(self) -> dict[str, float]:
        return {k: s[0] / max((s[1] * s[2]) ** 0.5, 1e-30) for k, s in self.sums.items()}

    def relative_errors(self) -> dict[str, float]:
        return {k: (s[3] / max(s[2], 1e-30)) ** 0.5 for k, s in self.sums.items()}

