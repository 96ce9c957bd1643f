"""LoRA-gradient baselines of the R2F paper (Liu et al., "Recover-to-Forget: Gradient
Reconstruction from LoRA for Efficient LLM Unlearning", App. B): ``lora_single`` and
``lora_multi``.

The unlearning update is computed *only in LoRA parameters*: attach rank-``rank``
LoRA adapters to every linear layer (:func:`r2f_bench.lora.lora_probe`, the same
two-sided init R2F uses), take the gradient of the unlearning loss w.r.t. the LoRA
factors and take one step in them. To first order that step changes each effective
weight ``W`` along :func:`r2f_bench.lora.lora_step_direction`,
``s(∇B·A + B·∇A)``; we apply that direction to the base weights with the shared
relative step of :class:`r2f_bench.one_step.OneStepUnlearner`, so the comparison
with R2F (decoded full gradient) and FullGrad (exact gradient) differs only in where
the gradient comes from.

* ``lora_single``: one view, the request's facts as asked (``request.facts``).
* ``lora_multi``: the LoRA gradients of every view (``request.views``) averaged,
  the views R2F uses.

Defaults:

* ``rank = 8``: the R2F paper's LoRA rank, identical to R2F's default so the probes
  are the same.
* ``loss = unlikelihood``: :class:`r2f_bench.one_step.StepParams`, shared with R2F
  and FullGrad; ``step = 0.03`` for both, chosen by ``r2f-bench tune`` on RWKU's dev
  split (docs/tuning.md): the low-rank direction needs a longer step than the
  full-gradient ones to forget at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import hookimpl
from ..lora import average, lora_probe, lora_step_direction
from ..one_step import OneStepUnlearner, StepParams
from ..unlearner import at_least, tuned


@dataclass
class LoraParams(StepParams):
    rank: int = field(default=8, metadata={"help": "LoRA rank of the adapters (R2F paper default 8, as R2F)", "check": at_least(1)})


class LoraSingle(OneStepUnlearner):
    """One step along the LoRA-induced weight change from the request's own phrasing."""

    name = "lora_single"
    description = "Single-view LoRA (R2F paper, App. B): one step in LoRA parameters from the request as asked."
    Params = tuned(LoraParams, step=0.03)
    multi_view = False

    def gradient(self, model, request, ctx):
        p = self.params
        views = request.views if self.multi_view else [request.facts]
        grads = average(lora_probe(model, p.rank, ctx.target_modules, seed=ctx.seed).gradients(ctx.tokenizer, views, p.loss))
        directions = {name: lora_step_direction(g) for name, g in grads.items()}
        return directions.__getitem__, {"views_used": len(views), "rank": p.rank}


class LoraMulti(LoraSingle):
    """The same with the LoRA gradients averaged over all of the request's views."""

    name = "lora_multi"
    description = "Multi-view LoRA (R2F paper, App. B): the same with LoRA gradients averaged over the views."
    multi_view = True


@hookimpl
def register_unlearners(register):
    register(LoraSingle)
    register(LoraMulti)
