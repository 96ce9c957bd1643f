"""FullGrad: the naive full-gradient baseline of the R2F paper (App. B).

Back-propagates the unlearning loss through the whole model on a *single* view (the
request's facts as asked) and takes one step with the exact gradient of every
linear layer (the same matrices R2F updates, with the same relative step), holding
one full gradient buffer per matrix: the memory cost R2F avoids.

Defaults: ``loss = unlikelihood`` (shared by the one-step methods) and ``step = 0.015``,
chosen by ``r2f-bench tune`` on RWKU's dev split (docs/tuning.md).

``fullgrad_multiview`` is R2F's exact reference: the exact full gradient of the same
loss over the *same views* R2F averages (every view of the request), one step with the
same rule. R2F approximates this gradient from LoRA gradients, so it is R2F's upper
bound in quality and the method to beat in cost at equal views.
"""

from __future__ import annotations

from .. import hookimpl
from ..gradients import exact_gradients
from ..lora import target_modules
from ..one_step import OneStepUnlearner, StepParams, all_views
from ..unlearner import tuned


class FullGrad(OneStepUnlearner):
    name = "fullgrad"
    description = "FullGrad (R2F paper, App. B): one step along the exact full gradient of one view."
    Params = tuned(StepParams, step=0.015)

    def gradient(self, model, request, ctx):
        grads = exact_gradients(model, ctx.tokenizer, request.facts, self.params.loss, target_modules(model))
        return grads.__getitem__, {"views_used": 1}


class FullGradMultiview(OneStepUnlearner):
    name = "fullgrad_multiview"
    description = "Exact multi-view gradient (R2F's reference): one step along the exact gradient of all of R2F's views."
    Params = tuned(StepParams, step=0.01)  # R2F's step: the two differ only in the gradient

    def gradient(self, model, request, ctx):
        grads = exact_gradients(model, ctx.tokenizer, all_views(request), self.params.loss, target_modules(model))
        return grads.__getitem__, {"views_used": len(request.views)}


@hookimpl
def register_unlearners(register):
    register(FullGrad)
    register(FullGradMultiview)
