"""FullGrad: the naive full-gradient baseline of the R2F paper (App. B).

Back-propagates the unlearning loss through the whole model on a *single* view (the
request's facts as asked) and takes one step with the exact gradient of every
linear layer (the same matrices R2F updates, with the same relative step), holding
one full gradient buffer per matrix: the memory cost R2F avoids.
"""

from __future__ import annotations

from r2f_plugin import hookimpl
from r2f_plugin.gradients import exact_gradients
from r2f_plugin.lora import target_modules
from r2f_plugin.one_step import OneStepUnlearner


class FullGrad(OneStepUnlearner):
    name = "fullgrad"

    def gradient(self, model, request, ctx):
        grads = exact_gradients(model, ctx.tokenizer, request.facts, self.params.loss, target_modules(model))
        return grads.__getitem__, {"views_used": 1}


@hookimpl
def register_unlearners(register):
    register(FullGrad)
