"""LoRA adapters used as gradient probes, and the role of each adapted matrix.

R2F and the LoRA baselines attach PEFT LoRA adapters to the target's linear layers
and read gradients of the adapter factors. For layer ``W`` (d_out × d_in) with
``ΔW = s · B A`` (A: r × d_in, B: d_out × r) and true gradient ``G``:
``∇B = s · G Aᵀ`` (right sketch) and ``∇A = s · Bᵀ G`` (left sketch).

PEFT's default init (B = 0) makes ``∇A = 0``; we initialise *both* factors small and
random ("two-sided" init: A ~ N(0, 1/d_in), B ~ N(0, ε²/r)) so both sketches are
observed while ``s·BA`` stays negligible (the model is unchanged to first order).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from .data import Probe
from .encoding import batches
from .errors import UserError
from .gradients import check_finite
from .losses import BATCH, backward_mean, check_loss, sequence_losses

# Module names per architecture family; each maps to a role shared across families,
# which is what lets a decoder fitted on one family be applied to another.
ROLES = {
    "q_proj": "attn_in", "k_proj": "attn_in", "v_proj": "attn_in", "o_proj": "attn_out",
    "gate_proj": "mlp_in", "up_proj": "mlp_in", "down_proj": "mlp_out",
    "c_attn": "attn_in", "attn.c_proj": "attn_out", "c_fc": "mlp_in", "mlp.c_proj": "mlp_out",
}
FAMILY_MODULES = {
    "gpt2": ("c_attn", "c_proj", "c_fc"),
}
DEFAULT_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
INIT_EPS = 1e-3


def target_modules(model: torch.nn.Module) -> tuple[str, ...]:
    return FAMILY_MODULES.get(getattr(model.config, "model_type", ""), DEFAULT_MODULES)


def role_of(layer_name: str) -> str:
    parts = layer_name.split(".")
    for key in (".".join(parts[-2:]), parts[-1]):
        if key in ROLES:
            return ROLES[key]
    return parts[-1]


@dataclass
class LoraGrad:
    """The LoRA factors of one layer and the gradients of their factors.

    All in the orientation of ``W`` as (d_out × d_in), whatever the layer stores.
    """

    A: torch.Tensor
    B: torch.Tensor
    gA: torch.Tensor
    gB: torch.Tensor
    scale: float
    transposed: bool = False  # the layer stores W as (d_in × d_out) (GPT-2 Conv1D)

    def as_weight(self, g: torch.Tensor) -> torch.Tensor:
        """A (d_out × d_in) matrix in the layout the layer stores its weight."""
        return g.T if self.transposed else g


@contextmanager
def lora_adapters(model: torch.nn.Module, rank: int, modules: Sequence[str] | None = None,
                  alpha: float | None = None) -> Iterator[Any]:
    """Attach PEFT LoRA adapters (PEFT's own init) to ``model``; remove them, unmerged, on exit.

    Yields the PEFT model: the adapters are trainable, the base weights frozen
    meanwhile; afterwards ``model`` has its original modules and ``requires_grad``
    flags back.
    """
    from peft import LoraConfig, get_peft_model

    if rank < 1:
        raise UserError(f"LoRA rank must be at least 1, got {rank}.")
    modules = tuple(modules or target_modules(model))
    saved = {p: p.requires_grad for p in model.parameters()}
    config = LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else rank, target_modules=list(modules),
                        lora_dropout=0.0, fan_in_fan_out=getattr(model.config, "model_type", "") == "gpt2")
    peft_model = get_peft_model(model, config)
    try:
        yield peft_model
    finally:
        peft_model.unload()
        for p, flag in saved.items():
            p.requires_grad_(flag)


@contextmanager
def lora_probe(model: torch.nn.Module, rank: int, modules: Sequence[str] | None = None,
               seed: int = 0) -> Iterator[Any]:
    """LoRA adapters used as gradient probes: :func:`lora_adapters` with the
    two-sided init (both factors random, ``s·BA`` negligible), seeded."""
    with lora_adapters(model, rank, modules) as peft_model:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for layer in lora_layers(peft_model).values():
                A, B = layer.lora_A["default"].weight, layer.lora_B["default"].weight
                A.copy_(torch.randn(A.shape, generator=gen) / A.shape[1] ** 0.5)
                B.copy_(torch.randn(B.shape, generator=gen) * INIT_EPS / rank ** 0.5)
        yield peft_model


def lora_layers(peft_model: Any) -> dict[str, Any]:
    from peft.tuners.lora import LoraLayer

    return {name.replace("base_model.model.", "", 1): m for name, m in peft_model.named_modules()
            if isinstance(m, LoraLayer)}


def lora_gradients(peft_model: Any, tokenizer: Any, probes: Sequence[Probe], loss: str,
                   with_full: bool = False) -> tuple[dict[str, LoraGrad], dict[str, torch.Tensor]]:
    """Gradients of the mean unlearning loss over ``probes`` w.r.t. every LoRA factor.

    With ``with_full`` the same backward also yields the exact gradient of each
    adapted base weight, as (d_out × d_in): this is how decoder fitting (on the
    proxy) and the evaluation-only cosine (on the target) get ground truth.
    Returns (lora gradients, full gradients or {}).
    """
    layers = lora_layers(peft_model)
    params = [p for layer in layers.values() for p in _factors(layer)]
    bases = [layer.base_layer.weight for layer in layers.values()] if with_full else []
    for p in params + bases:
        p.grad = None
    for w in bases:
        w.requires_grad_(True)
    try:
        backward_mean(peft_model, tokenizer, probes, loss)
        out, full = {}, {}
        for name, layer in layers.items():
            A, B = _factors(layer)
            check_finite([A.grad, B.grad])
            transposed = bool(getattr(layer, "fan_in_fan_out", False))
            out[name] = LoraGrad(A=A.detach().clone(), B=B.detach().clone(), gA=A.grad.detach().clone(),
                                 gB=B.grad.detach().clone(), scale=float(layer.scaling["default"]),
                                 transposed=transposed)
            if with_full:
                g = layer.base_layer.weight.grad.detach()
                full[name] = (g.T if transposed else g).clone()
        return out, full
    finally:
        for p in params + bases:
            p.grad = None
        for w in bases:
            w.requires_grad_(False)


def grouped_lora_gradients(peft_model: Any, tokenizer: Any, groups: Sequence[Sequence[Probe]],
                           loss: str) -> list[dict[str, LoraGrad]]:
    """The LoRA gradients of each group's mean unlearning loss, from batched passes.

    Sequences are independent, so each group's gradient can be assembled from what
    the adapters see during one batched backward (captured by hooks, as per-example
    gradients are in DP-SGD): for ``u = A x`` and ``v = B u``, summing over the
    group's tokens, ``∇A = Σ_t (∂L/∂u_t) x_tᵀ`` and ``∇B = Σ_t (∂L/∂v_t) u_tᵀ``. All
    groups then cost one pass over their sequences instead of one backward per
    group; the result equals :func:`lora_gradients` on each group (tested).
    """
    layers = lora_layers(peft_model)
    factors = {name: tuple(f.detach().clone() for f in _factors(layer)) for name, layer in layers.items()}
    probes = [p for g in groups for p in g]
    owner = [i for i, g in enumerate(groups) for _ in g]
    sums = {name: (A.new_zeros(len(groups), *A.shape), B.new_zeros(len(groups), *B.shape))
            for name, (A, B) in factors.items()}
    spans: list[tuple[int, int, int]] = []  # (group, first, end) rows of the chunk being back-propagated

    def capture(name: str, factor: int):
        """Forward hook on a LoRA factor: when its output's gradient arrives, add each
        group's share of that factor's gradient to the group's sum (nothing is kept)."""
        def hook(module, args, out):
            held = [args[0].detach()]  # released once used: the graph may outlive the pass

            def accumulate(grad: torch.Tensor) -> None:
                inputs, total = held.pop(), sums[name][factor]
                for group, first, end in spans:
                    g = grad[first:end].reshape(-1, grad.shape[-1])
                    x = inputs[first:end].reshape(-1, inputs.shape[-1])
                    total[group] += (g.T @ x).to(total.dtype) / len(groups[group])
            out.register_hook(accumulate)
        return hook

    handles = []
    for name, layer in layers.items():
        handles.append(layer.lora_A["default"].register_forward_hook(capture(name, 0)))
        handles.append(layer.lora_B["default"].register_forward_hook(capture(name, 1)))
    try:
        start = 0
        for chunk in batches(probes, BATCH):
            spans[:] = runs(owner[start:start + len(chunk)])
            losses = sequence_losses(peft_model, tokenizer, chunk, loss)
            check_loss(losses)
            losses.sum().backward()  # sequences are independent: each gets its own loss's gradient
            del losses
            start += len(chunk)
    finally:
        for h in handles:
            h.remove()
        for p in peft_model.parameters():
            p.grad = None
    check_finite(t for pair in sums.values() for t in pair)
    return [{name: LoraGrad(A=factors[name][0], B=factors[name][1], gA=sums[name][0][i], gB=sums[name][1][i],
                            scale=float(layer.scaling["default"]),
                            transposed=bool(getattr(layer, "fan_in_fan_out", False)))
             for name, layer in layers.items()}
            for i in range(len(groups))]


def runs(labels: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(label, first, end)`` for each run of equal consecutive labels."""
    out: list[tuple[int, int, int]] = []
    for i, label in enumerate(labels):
        if out and out[-1][0] == label:
            out[-1] = (label, out[-1][1], i + 1)
        else:
            out.append((label, i, i + 1))
    return out


def _factors(layer: Any) -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
    return layer.lora_A["default"].weight, layer.lora_B["default"].weight


def average(grads: Sequence[dict[str, LoraGrad]]) -> dict[str, LoraGrad]:
    """Average LoRA gradients over views (the factors themselves are shared)."""
    first = grads[0]
    return {name: LoraGrad(A=g.A, B=g.B, scale=g.scale,
                           gA=torch.stack([x[name].gA for x in grads]).mean(0),
                           gB=torch.stack([x[name].gB for x in grads]).mean(0), transposed=g.transposed)
            for name, g in first.items()}


def lora_step_direction(g: LoraGrad) -> torch.Tensor:
    """The change of ``W`` (as d_out × d_in) per unit LoRA gradient step, to first order.

    A step (−∇A, −∇B) changes ``s·BA`` by ``−s(∇B A + B ∇A)``; this is the direction
    single/multi-view LoRA unlearning moves the effective weight.
    """
    return g.scale * (g.gB @ g.A + g.B @ g.gA)
