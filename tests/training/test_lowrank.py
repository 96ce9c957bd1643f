"""Updates held as factors: the norm from Gram matrices and the in-place apply equal the dense ones."""

from __future__ import annotations

import pytest
import torch

from r2f_bench.training.lowrank import LowRank


@pytest.mark.parametrize("transposed", [False, True])
def test_norm_and_apply_equal_the_dense_matrix(transposed):
    gen = torch.Generator().manual_seed(0)
    parts = [LowRank(torch.randn(12, 3, generator=gen), torch.randn(3, 7, generator=gen), transposed) for _ in range(4)]
    mean = LowRank.mean(parts)
    dense = sum(p.left @ p.right for p in parts) / len(parts)
    assert mean.left.shape == (12, 12) and mean.sq_norm() == pytest.approx(float(dense.pow(2).sum()), rel=1e-5)
    torch.testing.assert_close(mean.dense(), dense.T if transposed else dense)
    weight = torch.randn(*(dense.T if transposed else dense).shape, generator=gen)
    expected = weight + 0.3 * (dense.T if transposed else dense)
    mean.add_to(weight, 0.3)
    torch.testing.assert_close(weight, expected)


def test_lora_step_direction_is_the_first_order_change():
    from r2f_bench.training.lora import LoraGrad, lora_step_direction

    gen = torch.Generator().manual_seed(1)
    A, B, gA, gB = (torch.randn(*s, generator=gen) for s in ((4, 9), (6, 4), (4, 9), (6, 4)))
    g = LoraGrad(A=A, B=B, gA=gA, gB=gB, scale=2.0)
    torch.testing.assert_close(lora_step_direction(g).dense(), 2.0 * (gB @ A + B @ gA))
