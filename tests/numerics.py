"""Tolerances that follow the dtype and the size of the sum: two float32 computations of
the same sums in a different order (micro-batches, devices, fused kernels) agree only up
to rounding, and the rounding of a sum of ``n`` products grows with ``n``."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from r2f_bench.training.encoding import encode

FLOAT32_EPS = torch.finfo(torch.float32).eps  # 1.19e-7: one rounding of a float32 value


def assert_sums_close(actual: torch.Tensor, expected: torch.Tensor, terms: int) -> None:
    """``actual`` equals ``expected`` up to the rounding of float32 sums of ``terms``
    products taken in another order. A recursive sum of n terms has a relative error of at
    most about n·eps (Higham, *Accuracy and Stability of Numerical Algorithms*, §4.2), so
    each element may differ by n·eps of itself and n·eps of the tensor's largest element
    (the scale of the terms where an element nearly cancels to 0)."""
    tol = terms * FLOAT32_EPS
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * float(expected.abs().max()))


def tokens(tokenizer: Any, probes: Sequence[Any]) -> int:
    """The tokens (padding excluded) a batch of ``probes`` back-propagates through."""
    return int(encode(tokenizer, probes)["attention_mask"].sum())
