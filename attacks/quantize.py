"""Quantisation (Zhang et al., "Catastrophic Failure of LLM Unlearning via Quantization"):
an unlearned model's small weight changes can fall inside one quantisation step, so the
quantised model answers as the untouched one did. ``quantize:nf4`` and ``quantize:int8``
simulate bitsandbytes' weight formats exactly in torch, on any device: each weight is
quantised, then dequantised in place (what a quantised layer computes with); the tests
check both against bitsandbytes' own kernels.

* **nf4** (QLoRA's 4-bit NormalFloat, ``bnb_4bit_quant_type="nf4"``): the flattened weight
  in blocks of 64, each scaled by its absolute maximum and rounded to the nearest of 16
  fixed levels (quantiles of a normal distribution); no double quantisation.
* **int8** (LLM.int8's weights): each output row scaled by its absolute maximum to
  [-127, 127] and rounded; the activations' outlier decomposition is not simulated
  (weight-only, as the attack needs).

Every linear layer is quantised but the output head (bitsandbytes keeps ``lm_head`` in
full precision); embeddings and norms stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..attack import Attack, Attacked
from ..unlearner import one_of

BLOCK = 64  # bitsandbytes' default 4-bit block size
NF4 = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                    0.7229568362236023, 1.0])  # QLoRA's NF4 levels, as bitsandbytes stores them


@torch.no_grad()
def nf4(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` quantised to NF4 in blocks of :data:`BLOCK` and dequantised."""
    flat = weight.detach().float().reshape(-1)
    pad = -flat.numel() % BLOCK
    blocks = torch.cat([flat, flat.new_zeros(pad)]).view(-1, BLOCK)
    absmax = blocks.abs().amax(dim=1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
    levels = NF4.to(blocks.device)
    midpoints = (levels[1:] + levels[:-1]) / 2
    index = torch.bucketize(blocks / absmax, midpoints)
    return (levels[index] * absmax).reshape(-1)[:flat.numel()].view_as(weight).to(weight.dtype)


@torch.no_grad()
def int8(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` quantised to int8 with one absmax scale per output row, and dequantised."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny) / 127
    return (torch.round(w / scale).clamp(-127, 127) * scale).to(weight.dtype)


FORMATS = {"nf4": nf4, "int8": int8}


@dataclass
class QuantizeParams:
    format: str = field(default="nf4", metadata={"help": "weight format: nf4 (4-bit, blocks of 64) or int8 (per row)",
                                                 "check": one_of(*FORMATS)})


class Quantize(Attack):
    name = "quantize"
    description = "Quantise every linear layer but the head (NF4 or int8, bitsandbytes' rules), then ask again."
    Params = QuantizeParams

    def attack(self, model, data, ctx, budget):
        head = model.get_output_embeddings()
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module is not head:
                module.weight.data.copy_(FORMATS[self.params.format](module.weight))
        return Attacked(model)
