"""LoRA gradient probes, PEFT LoRA adapters, and the role of each adapted matrix.

R2F and the LoRA baselines read the gradients of LoRA factors on the model's linear
layers. For layer ``W`` (d_out × d_in) with ``ΔW = s · B A`` (A: r × d_in, B: d_out × r)
and true gradient ``G``: ``∇B = s · G Aᵀ`` (right sketch) and ``∇A = s · Bᵀ G`` (left
sketch). :class:`LoraProbe` computes them with hooks on the layers, without adapters
(PEFT's wrappers cost more than the sketches on small models); SKU trains real PEFT
adapters (:func:`lora_adapters`).

PEFT's default init (B = 0) makes ``∇A = 0``; the probes initialise *both* factors
small and random ("two-sided" init: A ~ N(0, 1/d_in), B ~ N(0, ε²/r)) so both
sketches are observed.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

from ..cost import phase
from ..data import Probe
from .encoding import token_batches
from ..errors import UserError
from .gradients import check_finite, exact_gradients, linear_modules
from .losses import BATCH, check_loss, sequence_losses
from .lowrank import LowRank

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


def target_modules(model: torch.nn.Module, chosen: Sequence[str] | None = None) -> tuple[str, ...]:
    """The linear layers a method adapts or steps: ``chosen`` (``--target-modules``, through
    :attr:`~r2f_bench.unlearner.Context.target_modules`), else the architecture's default."""
    return tuple(chosen) if chosen else FAMILY_MODULES.get(getattr(model.config, "model_type", ""), DEFAULT_MODULES)


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


def check_rank(rank: int, layers: dict[str, torch.nn.Module]) -> None:
    """One line for a LoRA rank below 1 or above the narrowest adapted layer's width, its
    larger side (a rank-5000 adapter on a width-64 model spends minutes on nothing a rank-64
    one lacks; a rank between a layer's two sides is redundant but harmless)."""
    if rank < 1:
        raise UserError(f"LoRA rank must be at least 1, got {rank}.")
    width, name = min((max(layer.weight.shape), name) for name, layer in layers.items())
    if rank > width:
        raise UserError(f"LoRA rank {rank} is more than the narrowest adapted layer's width ({width}, {name}); "
                        f"pass --set rank={width} or less.")


@contextmanager
def lora_adapters(model: torch.nn.Module, rank: int, modules: Sequence[str] | None = None,
                  alpha: float | None = None) -> Iterator[Any]:
    """Attach PEFT LoRA adapters (PEFT's own init) to ``model``; remove them, unmerged, on exit.

    Yields the PEFT model: the adapters are trainable, the base weights frozen
    meanwhile; afterwards ``model`` has its original modules and ``requires_grad``
    flags back.
    """
    from peft import LoraConfig, get_peft_model

    modules = tuple(modules or target_modules(model))
    check_rank(rank, linear_modules(model, modules))
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


def lora_layers(peft_model: Any) -> dict[str, Any]:
    """The PEFT LoRA layers of an adapted model, by their name in the base model."""
    from peft.tuners.lora import LoraLayer

    return {name.replace("base_model.model.", "", 1): m for name, m in peft_model.named_modules()
            if isinstance(m, LoraLayer)}


@dataclass
class LoraProbe:
    """Random LoRA factors on a model's linear layers, read as gradient probes.

    For an adapter ``s·B A`` on layer ``W`` at these factors, the adapter's gradients are
    ``∇B = s·G Aᵀ`` and ``∇A = s·Bᵀ G``: two rank-``r`` sketches of the layer's gradient
    ``G``. The probe computes them without attaching an adapter: hooks on the layers see
    each input ``x_t`` and output gradient ``δ_t`` and add ``∇B += s·δ_t (A x_t)ᵀ`` and
    ``∇A += s·(Bᵀ δ_t) x_tᵀ``, while the frozen model back-propagates activations only
    (no weight gradient is formed). These are a PEFT adapter's gradients at ``B A = 0``
    exactly; with PEFT's forward, which adds the ``O(ε)`` adapter, they differ by ``O(ε)``.
    """

    model: torch.nn.Module
    modules: tuple[str, ...]
    layers: dict[str, torch.nn.Module]
    factors: dict[str, tuple[torch.Tensor, torch.Tensor]]  # name -> (A: r × d_in, B: d_out × r)
    scale: float = 1.0  # PEFT's lora_alpha / r with alpha = r

    def sketch(self, name: str, gradient: torch.Tensor) -> LoraGrad:
        """The LoRA gradients of layer ``name`` given its exact gradient (d_out × d_in)."""
        A, B = self.factors[name]
        g = gradient.to(A.dtype)
        return LoraGrad(A=A, B=B, gA=self.scale * (B.T @ g), gB=self.scale * (g @ A.T), scale=self.scale,
                        transposed=_transposed(self.layers[name]))

    def exact(self, tokenizer: Any, probes: Sequence[Probe],
              loss: str) -> tuple[dict[str, LoraGrad], dict[str, torch.Tensor]]:
        """The exact gradient of the mean unlearning loss over ``probes`` for every probed
        layer (d_out × d_in) and its sketches: ground truth for decoder fitting (on the
        proxy) and for the evaluation-only cosine (on the model)."""
        grads = exact_gradients(self.model, tokenizer, probes, loss, self.modules)
        full = {name: (g.T if _transposed(self.layers[name]) else g) for name, g in grads.items()}
        return {name: self.sketch(name, g) for name, g in full.items()}, full

    def gradients(self, tokenizer: Any, groups: Sequence[Sequence[Probe]], loss: str,
                  max_tokens: int = 0) -> list[dict[str, LoraGrad]]:
        """The LoRA gradients of each group's mean unlearning loss, streamed in micro-batches.

        Sequences are independent, so each group's share of a batched backward can be
        summed apart (as per-example gradients are in DP-SGD). Sequences go in order of
        length (less padding); a pass takes at most :data:`~r2f_bench.training.losses.BATCH`
        sequences and ``max_tokens`` padded tokens (0: no token limit), so peak
        activations are one micro-batch's however many groups and views there are, and
        only ``len(groups)`` pairs of rank-``r`` sums are kept.
        Equals one exact backward per group, sketched (tested).
        """
        probes = [p for g in groups for p in g]
        owner = [i for i, g in enumerate(groups) for _ in g]
        sums = {name: (A.new_zeros(len(groups), *A.shape), B.new_zeros(len(groups), *B.shape))
                for name, (A, B) in self.factors.items()}
        spans: list[tuple[int, int, int]] = []  # (group, first, end) rows of the micro-batch in flight

        def capture(name: str):
            """Forward hook: when the layer's output gradient arrives, add each group's
            share of the sketches to its sums; the input is released once used."""
            A, B = self.factors[name]
            sum_A, sum_B = sums[name]

            def hook(module, args, out):
                held = [args[0].detach()]

                def accumulate(grad: torch.Tensor) -> None:
                    inputs = held.pop()
                    with phase("sketch"):
                        for group, first, end in spans:
                            d = grad[first:end].reshape(-1, grad.shape[-1]).to(A.dtype)
                            x = inputs[first:end].reshape(-1, inputs.shape[-1]).to(A.dtype)
                            weight = self.scale / len(groups[group])
                            sum_B[group].addmm_(d.T, x @ A.T, alpha=weight)
                            sum_A[group].addmm_((d @ B).T, x, alpha=weight)
                out.register_hook(accumulate)
            return hook

        with _frozen_but_differentiable(self.model):
            handles = [layer.register_forward_hook(capture(name)) for name, layer in self.layers.items()]
            try:
                for chunk in token_batches(tokenizer, probes, BATCH, max_tokens):
                    spans[:] = runs([owner[i] for i in chunk])
                    with phase("forward"):
                        losses = sequence_losses(self.model, tokenizer, [probes[i] for i in chunk], loss)
                        check_loss(losses)
                    with phase("backward"):
                        losses.sum().backward()  # each sequence gets its own loss's gradient
                    del losses
            finally:
                for h in handles:
                    h.remove()
        check_finite(t for pair in sums.values() for t in pair)
        return [{name: LoraGrad(A=A, B=B, gA=sums[name][0][i], gB=sums[name][1][i], scale=self.scale,
                                transposed=_transposed(self.layers[name]))
                 for name, (A, B) in self.factors.items()}
                for i in range(len(groups))]


def lora_probe(model: torch.nn.Module, rank: int, modules: Sequence[str] | None = None,
               seed: int = 0) -> LoraProbe:
    """Seeded two-sided LoRA factors, float32 on each layer's device, for every adapted
    linear layer of ``model`` (the model itself is not changed)."""
    modules = tuple(modules or target_modules(model))
    layers = linear_modules(model, modules)
    check_rank(rank, layers)
    gen = torch.Generator().manual_seed(seed)
    factors = {}
    for name, layer in layers.items():
        d_out, d_in = layer.weight.shape[::-1] if _transposed(layer) else layer.weight.shape
        A = torch.randn(rank, d_in, generator=gen) / d_in ** 0.5
        B = torch.randn(d_out, rank, generator=gen) * INIT_EPS / rank ** 0.5
        factors[name] = (A.to(layer.weight.device), B.to(layer.weight.device))
    return LoraProbe(model, modules, layers, factors)


def _transposed(layer: torch.nn.Module) -> bool:
    """The layer stores W as (d_in × d_out): GPT-2's Conv1D."""
    return type(layer).__name__ == "Conv1D"


@contextmanager
def _frozen_but_differentiable(model: torch.nn.Module) -> Iterator[None]:
    """No parameter takes a gradient, yet activations do: the input embeddings' output
    is made to require one, so the backward pass reaches every layer's output."""
    saved = {p: p.requires_grad for p in model.parameters()}
    for p in model.parameters():
        p.requires_grad_(False)
    handle = model.get_input_embeddings().register_forward_hook(lambda m, a, out: out.requires_grad_(True))
    try:
        yield
    finally:
        handle.remove()
        for p, flag in saved.items():
            p.requires_grad_(flag)


def runs(labels: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(label, first, end)`` for each run of equal consecutive labels."""
    out: list[tuple[int, int, int]] = []
    for i, label in enumerate(labels):
        if out and out[-1][0] == label:
            out[-1] = (label, out[-1][1], i + 1)
        else:
            out.append((label, i, i + 1))
    return out


def average(grads: Sequence[dict[str, LoraGrad]]) -> dict[str, LoraGrad]:
    """Average LoRA gradients over views (the factors themselves are shared)."""
    first = grads[0]
    return {name: LoraGrad(A=g.A, B=g.B, scale=g.scale,
                           gA=torch.stack([x[name].gA for x in grads]).mean(0),
                           gB=torch.stack([x[name].gB for x in grads]).mean(0), transposed=g.transposed)
            for name, g in first.items()}


def lora_step_direction(g: LoraGrad) -> LowRank:
    """The change of ``W`` per unit LoRA gradient step, to first order, as two factors.

    A step (−∇A, −∇B) changes ``s·BA`` by ``−s(∇B A + B ∇A)``; this is the direction
    single/multi-view LoRA unlearning moves the effective weight:
    ``s·[∇B, B] [A; ∇A]``, of rank 2r.
    """
    return LowRank(torch.cat([g.gB, g.B], 1).mul_(g.scale), torch.cat([g.A, g.gA], 0), g.transposed)
