"""FullGrad: the naive full-gradient baseline of the R2F paper (App. B).

Back-propagates the unlearning loss through the whole model on a *single* view (the
request's facts as asked) and takes one step with the exact gradient of every
linear layer (the same matrices R2F updates, with the same relative step), holding
one full gradient buffer per matrix: the memory cost R2F avoids.

Defaults: ``loss = unlikelihood`` (shared by the one-step methods) and ``step = 0.015``,
chosen by ``r2f-bench tune`` on RWKU's dev split (docs/tuning.md).
"""

from __future__ import annotations

from .. import hookimpl
from ..gradients import exact_gradients
from ..lora import target_modules
from ..one_step import OneStepUnlearner, StepParams
from ..unlearner import tuned


class FullGrad(OneStepUnlearner):
    name = "fullgrad"
    description = "FullGrad (R2F paper, App. B): one step along the exact full gradient of one view."
    Params = tuned(StepParams, step=0.015)

    def gradient(self, model, request, ctx):
        grads = exact_gradients(model, ctx.tokenizer, request.facts, self.params.loss, target_modules(model))
        return grads.__getitem__, {"views_used": 1}


@hookimpl
def register_unlearners(register):
    register(FullGrad)
