"""Exact gradients of the unlearning loss for chosen weight matrices of the full model.

What FullGrad pays for, and the reference every gradient estimator is measured against.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch

from ..data import Probe
from ..errors import UserError
from .losses import backward_mean


def linear_modules(model: torch.nn.Module, modules: Sequence[str]) -> dict[str, torch.nn.Module]:
    """The linear layers whose name ends with one of ``modules``, by full name."""
    out = {name: module for name, module in model.named_modules()
           if name.split(".")[-1] in modules and hasattr(module, "weight") and module.weight.dim() == 2}
    if not out:
        own = sorted({name.split(".")[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)} - {"lm_head"})
        raise UserError(f"the model has no linear layers named {', '.join(modules)}; pass --target-modules with names of "
                        f"its own linear layers ({', '.join(own) or 'none found'}), e.g. --target-modules {','.join(own[:2])}.")
    return out


def linear_weights(model: torch.nn.Module, modules: Sequence[str]) -> dict[str, torch.nn.Parameter]:
    """The weight matrices of :func:`linear_modules`."""
    return {name: module.weight for name, module in linear_modules(model, modules).items()}


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
