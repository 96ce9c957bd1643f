"""A weight update held as two thin factors, ``G = left @ right``.

Decoded R2F gradients and LoRA step directions have rank a few times ``r``; kept as
factors, the global norm of an update comes from small Gram matrices and each matrix
is changed by one ``addmm_``, so no full-size temporary is ever formed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass
class LowRank:
    """``left`` (d_out × k) @ ``right`` (k × d_in), in the orientation of ``W`` as
    (d_out × d_in); ``transposed``: the layer stores its weight as (d_in × d_out)."""

    left: torch.Tensor
    right: torch.Tensor
    transposed: bool = False

    @classmethod
    def mean(cls, parts: Sequence["LowRank"]) -> "LowRank":
        """The mean of several updates of one matrix: their factors side by side."""
        return cls(torch.cat([p.left for p in parts], 1).div_(len(parts)),
                   torch.cat([p.right for p in parts], 0), parts[0].transposed)

    def sq_norm(self) -> float:
        """‖left @ right‖²_F = Σ (leftᵀleft) ⊙ (right rightᵀ), from k × k Gram matrices (float64)."""
        left, right = self.left.double(), self.right.double()
        return float(((left.T @ left) * (right @ right.T)).sum().clamp(min=0.0))

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.left, self.right

    @torch.no_grad()
    def add_to(self, weight: torch.Tensor, alpha: float) -> None:
        """``weight += alpha · G`` in the weight's own layout and dtype, in place."""
        left, right = self.left.to(weight.device, weight.dtype), self.right.to(weight.device, weight.dtype)
        if self.transposed:
            weight.addmm_(right.T, left.T, alpha=alpha)
        else:
            weight.addmm_(left, right, alpha=alpha)

    def dense(self) -> torch.Tensor:
        """The full matrix, in the weight's layout (evaluation only: it costs d_out × d_in)."""
        g = self.left @ self.right
        return g.T if self.transposed else g
