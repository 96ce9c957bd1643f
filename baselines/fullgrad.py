"""FullGrad: the naive full-gradient baseline of the R2F paper (App. B).

Back-propagates the unlearning loss through the whole model on a *single* view (the
request's facts as asked) and takes one step with the exact gradient of every
linear layer (the same matrices R2F updates, with the same relative step), holding
one full gradient buffer per matrix: the memory cost R2F avoids.

Defaults: ``loss = unlikelihood`` (shared by the one-step methods) and ``step``, chosen
by ``r2f-bench tune`` on the knowledge world's dev split (the values: ``Params``; the
searches: docs/tuning.md); ``fullgrad_multiview`` takes R2F's step.

``fullgrad_multiview`` is R2F's exact reference: the exact full gradient of the same
loss over the *same views* R2F averages (every view of the request), one step with the
same rule. R2F approximates this gradient from LoRA gradients, so it is R2F's upper
bound in quality and the method to beat in cost at equal views.

``fullgrad_fused`` is FullGrad's update without FullGrad's gradient buffer: the exact
gradient of the same loss on the same view, applied matrix by matrix inside the
backward pass as each gradient arrives (the fused update of LOMO, Lv et al. 2023,
"Full Parameter Fine-tuning for Large Language Models with Limited Resources"). The
relative step needs the global norm ‖G‖ before anything is applied, so a first
backward pass only measures it (as fused-update methods do for gradient clipping) and
a second applies. Both passes take the view in one batch: the norm of a gradient summed
over micro-batches cannot be had without holding it, so where FullGrad would split the
view (more than 8 sequences) the two differ in activation memory, not in the step.
"""

from __future__ import annotations

import math

import torch

from .. import hookimpl
from ..cost import phase
from ..training.gradients import check_finite, exact_gradients, linear_weights
from ..training.lora import target_modules
from ..training.losses import check_loss, unlearning_loss
from ..training.one_step import OneStepUnlearner, StepParams, all_views, grad_norms, norm, relative_alpha
from ..unlearner import Edit, Unlearner, tuned


class FullGrad(OneStepUnlearner):
    name = "fullgrad"
    cost_reference = True
    description = "FullGrad (R2F paper, App. B): one step along the exact full gradient of one view."
    Params = tuned(StepParams, step=0.0328)

    def gradient(self, model, request, ctx):
        grads = exact_gradients(model, ctx.tokenizer, request.facts, self.params.loss, target_modules(model, ctx.target_modules))
        return grads.__getitem__, {"views_used": 1}


class FullGradMultiview(OneStepUnlearner):
    name = "fullgrad_multiview"
    inputs = frozenset({"views", "target_modules"})
    description = "Exact multi-view gradient (R2F's reference): one step along the exact gradient of all of R2F's views."
    Params = tuned(StepParams, step=0.0144)  # R2F's step: the two differ only in the gradient

    def gradient(self, model, request, ctx):
        grads = exact_gradients(model, ctx.tokenizer, all_views(request), self.params.loss, target_modules(model, ctx.target_modules))
        return grads.__getitem__, {"views_used": len(request.views)}


class FullGradFused(Unlearner):
    name = "fullgrad_fused"
    description = "FullGrad's step applied inside backward (LOMO-style fused update): no full gradient buffer."
    Params = FullGrad.Params
    strength = OneStepUnlearner.strength
    inputs = OneStepUnlearner.inputs

    def unlearn(self, model, request, ctx):
        weights = linear_weights(model, target_modules(model, ctx.target_modules))
        return Edit(model, {"views_used": 1, **grad_norms([self.fused_step(model, request, ctx, weights)
                                                           for _ in range(self.params.steps)])})

    def fused_step(self, model, request, ctx, weights) -> float:
        """One step, its gradient's norm from a first fused pass and its update from a second."""
        squares: list[float] = []
        fused_backward(model, ctx.tokenizer, request.facts, self.params.loss, weights,
                       lambda w: squares.append(norm(w.grad) ** 2))
        g_norm = math.fsum(squares) ** 0.5
        scale = relative_alpha(weights, g_norm, self.params.step)
        fused_backward(model, ctx.tokenizer, request.facts, self.params.loss, weights,
                       lambda w: w.data.add_(w.grad.to(w.dtype), alpha=scale))
        return g_norm


def fused_backward(model, tokenizer, probes, loss, weights, on_gradient) -> None:
    """One backward pass of the mean unlearning loss over ``probes`` in which each weight's
    gradient, as soon as it is complete, goes to ``on_gradient(weight)`` and is freed."""
    saved = {p: p.requires_grad for p in model.parameters()}
    for p in model.parameters():
        p.requires_grad_(False)

    def consume(w):
        check_finite([w.grad])
        with torch.no_grad():
            on_gradient(w)
        w.grad = None

    for w in weights.values():
        w.requires_grad_(True)
        w.grad = None  # the pass's gradient alone, never added to one left on the model
    hooks = [w.register_post_accumulate_grad_hook(consume) for w in weights.values()]
    try:
        with phase("forward"):
            value = unlearning_loss(model, tokenizer, probes, loss)
            check_loss(value)
        with phase("backward"):  # the updates applied inside it included
            value.backward()
    finally:
        for h in hooks:
            h.remove()
        for p, flag in saved.items():
            p.requires_grad_(flag)


@hookimpl
def register_unlearners(register):
    register(FullGrad)
    register(FullGradMultiview)
    register(FullGradFused)
