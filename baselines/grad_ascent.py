"""Gradient ascent (GA): Jang et al. 2022, "Knowledge Unlearning for Mitigating Privacy
Risks in Language Models" (ACL 2023).

The model is fine-tuned to *maximise* the negative log-likelihood of the sequences to
forget, i.e. gradient descent on the negated answer NLL
(:func:`r2f_bench.training.losses.unlearning_loss`, ``ascent``), updating *all* parameters
with Adam. Jang et al. unlearn the target sequences with a small learning rate until
their likelihood has dropped (extraction likelihood / memorisation accuracy below a
threshold); a per-target stopping rule would be per-target tuning, so we run a fixed
number of steps for every target. The forget set is the request as asked
(``request.facts``), the data the original method sees; paraphrases are R2F's addition.
Each step uses the whole request (it fits one batch; larger requests are split into
minibatches and cycled).

Defaults (hyper-parameters are per-model in the paper; these are for the embedded
tiny models and are the same for every target):

* ``steps = 5``: a few optimiser steps, enough for the forget answers' likelihood
  to drop on the tiny models (the paper stops once it has dropped, after a few epochs).
* ``lr``: chosen by ``r2f-bench tune`` on the knowledge world's dev split (docs/tuning.md);
  Jang et al. use 5e-5 on GPT-Neo 125M-2.7B. Re-tune for real LLMs.
* ``batch_size = 8``, ``accumulate = 4``: 32 facts per step (Jang et al. unlearn 32
  sequences at once), in micro-batches of 8 (:class:`r2f_bench.training.optimise.BatchParams`).
* AdamW with no weight decay (the paper's Adam), dropout off (model in eval mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import hookimpl
from ..training.encoding import cycle_batches
from ..training.losses import unlearning_loss
from ..training.optimise import BatchParams, adamw, optimise
from ..unlearner import Edit, Strength, Unlearner, at_least, positive


@dataclass
class GradAscentParams(BatchParams):
    steps: int = field(default=5, metadata={"help": "AdamW steps on the forget facts (fixed for every target)", "check": at_least(1)})
    lr: float = field(default=1.39e-3, metadata={"help": "learning rate (tuned on the dev split; Jang et al.: 5e-5 on GPT-Neo)", "check": positive})


class GradAscent(Unlearner):
    name = "grad_ascent"
    inputs = frozenset()  # the request's facts as asked, as the method's papers run it
    description = "Gradient ascent (Jang et al. 2022): a few AdamW steps up the forget answers' loss."
    Params = GradAscentParams
    strength = Strength("lr", 1e-4, 1e-2)

    def unlearn(self, model, request, ctx):
        p = self.params
        data = cycle_batches(request.facts, p.batch_size, ctx.seed)
        losses = optimise(adamw(model.parameters(), p.lr),
                          lambda i: unlearning_loss(model, ctx.tokenizer, next(data), "ascent"), p.steps, p.accumulate)
        # loss = −NLL of the forget answers before each step
        return Edit(model.eval(), {"steps": p.steps, "forget_nll_per_step": [-x for x in losses]})


@hookimpl
def register_unlearners(register):
    register(GradAscent)
