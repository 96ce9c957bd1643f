"""The shared skeleton of one-step gradient methods (R2F, FullGrad, LoRA, ascent).

They differ only in where the per-matrix gradient comes from; the loss, the
relative step and the matrix-by-matrix application live here once.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .data import ForgetRequest, Probe
from .gradients import LOSSES, apply_step, linear_weights
from .lora import target_modules
from .unlearner import Context, Edit, Unlearner, fraction, one_of


@dataclass
class StepParams:
    step: float = field(default=0.01, metadata={"help": "relative step: ‖ΔW‖ = step · ‖W‖ over the updated matrices", "check": fraction})
    loss: str = field(default="unlikelihood", metadata={"help": "unlearning loss: ascent (log-likelihood of the answer) or unlikelihood (−log(1−p))",
                                                               "check": one_of(*LOSSES)})


def all_views(request: ForgetRequest) -> list[Probe]:
    return [p for view in request.views for p in view]


class OneStepUnlearner(Unlearner):
    """θ ← θ − step·‖W‖·G/‖G‖ for the target model's linear layers, G from :meth:`gradient`."""

    Params = StepParams
    search_space = {"step": (0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.08)}

    @abstractmethod
    def gradient(self, model: torch.nn.Module, request: ForgetRequest,
                 ctx: Context) -> tuple[Callable[[str], torch.Tensor], dict[str, Any]]:
        """Return ``gradient(layer_name)`` (in the layer's weight layout) and info to record."""

    def unlearn(self, model: torch.nn.Module, request: ForgetRequest, ctx: Context) -> Edit:
        gradient, info = self.gradient(model, request, ctx)
        weights = linear_weights(model, target_modules(model))
        info["grad_norm"] = apply_step(weights, gradient, self.params.step)
        return Edit(model, info)
