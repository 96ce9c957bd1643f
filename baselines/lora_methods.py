"""LoRA-gradient baselines of the R2F paper (Liu et al., "Recover-to-Forget: Gradient
Reconstruction from LoRA for Efficient LLM Unlearning", App. B): ``lora_single`` and
``lora_multi``.

The unlearning update is computed *only in LoRA parameters*: attach rank-``rank``
LoRA adapters to every linear layer (:func:`r2f_bench.training.lora.lora_probe`, the same
two-sided init R2F uses), take the gradient of the unlearning loss w.r.t. the LoRA
factors and take one step in them. To first order that step changes each effective
weight ``W`` along :func:`r2f_bench.training.lora.lora_step_direction`,
``s(∇B·A + B·∇A)``; we apply that direction to the base weights with the shared
relative step of :class:`r2f_bench.training.one_step.OneStepUnlearner`, so the comparison
with R2F (decoded full gradient) and FullGrad (exact gradient) differs only in where
the gradient comes from.

* ``lora_single``: one view, the request's facts as asked (``request.facts``).
* ``lora_multi``: the LoRA gradients of every view (``request.views``) averaged,
  the views R2F uses.
* ``lora_finetune``: the paper's App. D reading of the LoRA baselines, a LoRA
  *fine-tune* ("LoRA fine-tuning", batch 8 accumulated to 32 "for all baselines"):
  rank-``rank`` PEFT adapters on the same layers, ``steps`` AdamW steps on the
  unlearning loss of every view, then merged into the base weights. Its knob is the
  learning rate; ``steps = 5`` (about one pass over a RWKU target's views, as the other
  multi-step baselines) because App. B/D give no step count.

Defaults:

* ``rank = 8``: the R2F paper's LoRA rank, identical to R2F's default so the probes
  are the same.
* ``loss = unlikelihood``: :class:`r2f_bench.training.one_step.StepParams`, shared with R2F
  and FullGrad; ``step``, chosen for each by
  ``r2f-bench tune`` on the knowledge world's dev split (docs/tuning.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .. import hookimpl
from ..training.encoding import cycle_batches
from ..training.losses import LOSSES, unlearning_loss
from ..training.lora import average, lora_adapters, lora_probe, lora_step_direction
from ..training.one_step import OneStepUnlearner, StepParams, all_views
from ..training.optimise import BatchParams, adamw, optimise
from ..unlearner import Edit, Strength, Unlearner, at_least, one_of, positive, tuned


@dataclass
class LoraParams(StepParams):
    rank: int = field(default=8, metadata={"help": "LoRA rank of the adapters (R2F paper default 8, as R2F)", "check": at_least(1)})


class LoraSingle(OneStepUnlearner):
    """One step along the LoRA-induced weight change from the request's own phrasing."""

    name = "lora_single"
    description = "Single-view LoRA (R2F paper, App. B): one step in LoRA parameters from the request as asked."
    Params = tuned(LoraParams, step=0.0456)
    multi_view = False
    inputs = frozenset({"target_modules"})

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
    Params = tuned(LoraParams, step=0.0386)
    multi_view = True
    inputs = frozenset({"views", "target_modules"})


@dataclass
class LoraFinetuneParams(BatchParams):
    rank: int = field(default=8, metadata={"help": "LoRA rank of the adapters (R2F paper: 8)", "check": at_least(1)})
    steps: int = field(default=5, metadata={"help": "AdamW steps on the adapters (fixed for every target)", "check": at_least(1)})
    lr: float = field(default=5.88e-3, metadata={"help": "AdamW learning rate of the adapters, the strength knob (tuned on the dev split)", "check": positive})
    loss: str = field(default="unlikelihood", metadata={"help": "unlearning loss: ascent or unlikelihood (as the one-step methods)",
                                                        "check": one_of(*LOSSES)})


class LoraFinetune(Unlearner):
    """A multi-step LoRA fine-tune on the unlearning loss of every view, merged at the end."""

    name = "lora_finetune"
    inputs = frozenset({"views", "target_modules"})
    description = "LoRA fine-tune (R2F paper, App. D reading): AdamW on rank-8 adapters over all views, then merged."
    Params = LoraFinetuneParams
    strength = Strength("lr", 1e-4, 3e-2)

    def unlearn(self, model, request, ctx):
        p = self.params
        data = cycle_batches(all_views(request), p.batch_size, ctx.seed)
        torch.manual_seed(ctx.seed)  # PEFT's random init of the A factors
        with lora_adapters(model, p.rank, ctx.target_modules) as peft_model:
            adapters = [q for q in peft_model.parameters() if q.requires_grad]
            losses = optimise(adamw(adapters, p.lr),
                              lambda i: unlearning_loss(peft_model, ctx.tokenizer, next(data), p.loss), p.steps, p.accumulate)
            peft_model.merge_adapter()  # the adapters' product joins the base weights; unload keeps it
        return Edit(model.eval(), {"steps": p.steps, "rank": p.rank, "loss_per_step": losses})


@hookimpl
def register_unlearners(register):
    register(LoraSingle)
    register(LoraMulti)
    register(LoraFinetune)
