"""GradDiff (gradient difference): Liu et al. 2022, "Continual Learning and Private
Unlearning" (CoLLAs 2022), the ``grad_diff`` baseline of Maini et al. 2024 (TOFU), MUSE
(Shi et al. 2024) and open-unlearning.

Gradient ascent on the forget data and descent on the retain data, all parameters,
AdamW:

    L = −NLL(forget) + λ · NLL(retain),

each NLL the mean answer-token NLL per sequence averaged over the micro-batch, as in
gradient ascent (:func:`r2f_bench.training.losses.unlearning_loss`, ``ascent``). Forget data =
every view of the request (``request.views``), retain data = ``request.retain``; each
micro-batch pairs ``batch_size`` forget sequences with ``batch_size`` retain ones (both
shuffled and cycled), ``accumulate`` micro-batches per step.

The loop (:func:`train_forget_retain`) is shared with NPO and SimNPO, which replace the
forget term and keep the retain term (NPO+RT, SimNPO's λ).

Defaults:

* ``retain_weight = 1`` (λ): TOFU's and open-unlearning's equal weights.
* ``steps = 5`` (gradient ascent's); ``lr`` (the strength knob, swept
  1e-4–1e-2), chosen by ``r2f-bench tune`` on the knowledge world's dev split (docs/tuning.md). TOFU runs 5 epochs at 1e-5 on 7B models.
* ``batch_size = 8``, ``accumulate = 4``: 32 forget (and 32 retain) sequences per step
  (:class:`r2f_bench.training.optimise.BatchParams`). AdamW, no weight decay.
"""

from __future__ import annotations

import itertools
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from .. import hookimpl
from ..data import ForgetRequest, Probe
from ..training.encoding import cycle_batches, encode
from ..errors import UserError
from ..training.losses import answer_nll, unlearning_loss
from ..training.one_step import all_views
from ..training.optimise import BatchParams, adamw, optimise
from ..unlearner import Context, Edit, Strength, Unlearner, at_least, positive

ForgetLoss = Callable[[list[Probe]], torch.Tensor]  # a micro-batch of forget sequences -> its loss


@dataclass
class ForgetRetainParams(BatchParams):
    """The loop's parameters: shared by GradDiff, NPO and SimNPO."""

    steps: int = field(default=5, metadata={"help": "AdamW steps (fixed for every target)", "check": at_least(1)})
    lr: float = field(default=1.18e-3, metadata={"help": "learning rate, the strength knob (each method tunes its own)", "check": positive})
    retain_weight: float = field(default=1.0, metadata={"help": "λ, weight of the retain answers' NLL (0: none)", "check": at_least(0)})


def retain_nll(model: torch.nn.Module, tokenizer: Any, probes: Sequence[Probe]) -> torch.Tensor:
    """Mean answer NLL of the retain facts: the term descended to keep them."""
    return answer_nll(model, encode(tokenizer, probes, device=next(model.parameters()).device)).mean()


def with_retain(model: torch.nn.Module, tokenizer: Any, forget_loss: ForgetLoss, forget: list[Probe],
                retain: list[Probe], weight: float) -> torch.Tensor:
    """``forget_loss(forget) + weight · NLL(retain)``: one micro-batch's loss."""
    loss = forget_loss(forget)
    return loss + weight * retain_nll(model, tokenizer, retain) if weight else loss


def train_forget_retain(model: torch.nn.Module, request: ForgetRequest, ctx: Context, p: ForgetRetainParams,
                        forget_loss: ForgetLoss) -> list[float]:
    """``p.steps`` AdamW steps on every parameter, each on ``p.accumulate`` micro-batches
    of :func:`with_retain` (``p.batch_size`` views and retain facts each). Returns the
    loss of each step."""
    if p.retain_weight and not request.retain:
        raise UserError("this method's retain term needs retain facts and the task gave none; set retain_weight=0.")
    forget = cycle_batches(all_views(request), p.batch_size, ctx.seed)
    retain = cycle_batches(request.retain, p.batch_size, ctx.seed) if p.retain_weight else itertools.repeat([])
    return optimise(adamw(model.parameters(), p.lr),
                    lambda i: with_retain(model, ctx.tokenizer, forget_loss, next(forget), next(retain), p.retain_weight),
                    p.steps, p.accumulate)


def ascent(model: torch.nn.Module, tokenizer: Any) -> ForgetLoss:
    """Gradient ascent's forget term, −NLL (:func:`r2f_bench.training.losses.unlearning_loss`)."""
    return lambda probes: unlearning_loss(model, tokenizer, probes, "ascent")


class ForgetRetainUnlearner(Unlearner):
    """The forget/retain loop with the forget term left to :meth:`forget_loss`: GradDiff, NPO, SimNPO."""

    Params = ForgetRetainParams
    strength = Strength("lr", 1e-4, 1e-2)
    inputs = frozenset({"views", "retain"})

    @classmethod
    def reads(cls, params: ForgetRetainParams) -> frozenset[str]:
        return cls.inputs if params.retain_weight else cls.inputs - {"retain"}  # λ = 0: no retain term

    @abstractmethod
    def forget_loss(self, model: torch.nn.Module, request: ForgetRequest, ctx: Context) -> ForgetLoss:
        """The loss of a micro-batch of forget sequences (called once per deletion, before any step)."""

    def unlearn(self, model, request, ctx):
        losses = train_forget_retain(model, request, ctx, self.params, self.forget_loss(model, request, ctx))
        return Edit(model.eval(), {"steps": self.params.steps, "loss_per_step": losses})


class GradDiff(ForgetRetainUnlearner):
    name = "graddiff"
    description = "GradDiff (Liu et al. 2022; TOFU, MUSE): gradient ascent on the forget answers, descent on retain answers."

    def forget_loss(self, model, request, ctx):
        return ascent(model, ctx.tokenizer)


@hookimpl
def register_unlearners(register):
    register(GradDiff)
