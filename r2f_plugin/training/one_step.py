"""The shared skeleton of one-step gradient methods (R2F, FullGrad, LoRA) and their step rule.

They differ only in where the per-matrix gradient comes from; the loss, the
relative step and the matrix-by-matrix application live here once.

The unlearning step (paper Eq. 3, θ ← θ* − η ∇L_unlearn) uses a *relative* step size:
``ΔW = −η · ‖W‖ · G / ‖G‖`` with both norms taken over all updated matrices together,
so η means "move the weights by this fraction of their norm" whatever the model,
the loss scale or the gradient estimator; the direction is the gradient's.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..cost import phase
from ..data import ForgetRequest, Probe
from ..errors import UserError
from .gradients import check_finite, linear_weights
from .lora import target_modules
from .losses import LOSSES
from .lowrank import LowRank
from ..unlearner import Context, Edit, Strength, Unlearner, at_least, fraction, one_of


@dataclass
class StepParams:
    step: float = field(default=0.01, metadata={"help": "relative step: ‖ΔW‖ = step · ‖W‖ over the updated matrices", "check": fraction})
    loss: str = field(default="unlikelihood", metadata={"help": "unlearning loss: ascent (log-likelihood of the answer) or unlikelihood (−log(1−p))",
                                                               "check": one_of(*LOSSES)})
    steps: int = field(default=1, metadata={"help": "steps, each along the gradient at the weights the last one left "
                                                    "(1: the paper's one step; more: an equal-budget variant beside "
                                                    "the optimiser loops)", "check": at_least(1), "added": True})


def norm(t: torch.Tensor) -> float:
    """Euclidean norm of a whole tensor, without a temporary copy of it."""
    return float(torch.linalg.vector_norm(t.detach()))


def relative_alpha(weights: dict[str, torch.Tensor], g_norm: float, step: float) -> float:
    """The factor on G of the relative step ``ΔW = −step · ‖W‖ · G / ‖G‖`` (‖·‖ over all ``weights``)."""
    if not math.isfinite(g_norm) or g_norm == 0.0:
        raise UserError("the unlearning gradient is zero or not finite; the model may not know the target "
                        "(check the untouched model's accuracy and its dtype).")
    return -step * sum(norm(w) ** 2 for w in weights.values()) ** 0.5 / g_norm


@torch.no_grad()
def apply_step(weights: dict[str, torch.Tensor], gradient: Callable[[str], torch.Tensor | LowRank],
               step: float) -> float:
    """Apply ``ΔW = −step · ‖W‖ · G / ‖G‖`` matrix by matrix.

    ``gradient(name)`` gives one matrix's gradient, dense (in the weight's layout) or
    as :class:`~r2f_bench.training.lowrank.LowRank` factors; a caller that forms dense gradients
    on demand never holds more than one at a time. A first pass takes the norms (of
    factors, from their Gram matrices), a second applies (factors: one ``addmm_`` per
    matrix). Returns ‖G‖ (global).
    """
    with phase("apply"):
        g_sq = 0.0
        for name in weights:
            g = gradient(name)
            check_finite(g.tensors() if isinstance(g, LowRank) else [g])
            g_sq += g.sq_norm() if isinstance(g, LowRank) else norm(g) ** 2
            del g
        g_norm = g_sq ** 0.5
        alpha = relative_alpha(weights, g_norm, step)
        for name, w in weights.items():
            g = gradient(name)
            if isinstance(g, LowRank):
                g.add_to(w, alpha)
            else:
                w.add_(g.to(w.dtype), alpha=alpha)
        return g_norm


def all_views(request: ForgetRequest) -> list[Probe]:
    return [p for view in request.views for p in view]


class OneStepUnlearner(Unlearner):
    """θ ← θ − step·‖W‖·G/‖G‖ for the model's linear layers, G from :meth:`gradient`."""

    Params = StepParams
    strength = Strength("step", 0.002, 0.2)
    inputs = frozenset({"target_modules"})  # the step's layers; a subclass whose gradient reads the views adds them

    @abstractmethod
    def gradient(self, model: torch.nn.Module, request: ForgetRequest,
                 ctx: Context) -> tuple[Callable[[str], torch.Tensor | LowRank], dict[str, Any]]:
        """Return ``gradient(layer_name)`` (dense in the layer's weight layout, or
        :class:`~r2f_bench.training.lowrank.LowRank`) and info to record."""

    def unlearn(self, model: torch.nn.Module, request: ForgetRequest, ctx: Context) -> Edit:
        norms = []
        for _ in range(self.params.steps):
            gradient, info = self.gradient(model, request, ctx)
            weights = linear_weights(model, target_modules(model, ctx.target_modules))
            norms.append(apply_step(weights, gradient, self.params.step))
        return Edit(model, {**info, **grad_norms(norms)})


def grad_norms(norms: list[float]) -> dict[str, Any]:
    """The info of a deletion's step norms: the first as ``grad_norm``, all of several steps too."""
    return {"grad_norm": norms[0], **({"grad_norms": norms} if len(norms) > 1 else {})}
