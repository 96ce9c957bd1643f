"""Relearning attacks: a short fine-tune of the unlearned model, then the forget probes again.

* ``rap`` (the R2F paper's relearning attack, RAP): ``--rap-steps`` AdamW steps at
  ``--rap-lr`` on paraphrased views of half the request's facts (the other half, and every
  scored probe, unseen); what comes back that was never relearned was hidden, not removed.
* ``relearn_unrelated:k`` (Deeb & Roger's and the UDS meta-evaluation's warning that an
  attack can re-teach; ``ethz-spylab/unlearning-vs-safety`` relearns on 10 unrelated
  examples): the same fine-tune on ``k`` items of the retain pool, other people's data that
  holds no fact of the target, so whatever returns was suppressed, not erased.
* ``relearn_related:k`` (minimal information injection, after "Existing LLM Unlearning
  Evaluations Are Inconclusive"): the same fine-tune on only ``k`` of RAP's items, so the
  budget of related data is stated; beside ``relearn_unrelated:k`` it separates what a
  little of the target's own data brings back from what any fine-tune does.
"""

from __future__ import annotations

import random

import torch

from ..attack import Attack, Attacked, count
from ..engine.teaching import finetune
from ..errors import UserError

BATCH = 16  # sequences per relearning step (RAP's)


class Relearning(Attack):
    """A fine-tuning attack: ``--rap-steps`` AdamW steps at ``--rap-lr`` on :meth:`data`,
    every weight trainable, seeded alike on the unlearned and the untouched model."""

    relearns = True

    def attack(self, model, data, ctx, budget):
        torch.manual_seed(ctx.seed)
        for p in model.parameters():
            p.requires_grad_(True)
        finetune(model, ctx.tokenizer, data, epochs=10**6, lr=budget.lr, batch_size=BATCH, max_steps=budget.steps,
                 seed=ctx.seed)
        return Attacked(model)


class Rap(Relearning):
    name = "rap"
    description = "RAP (R2F paper): relearn on paraphrased views of half the request's facts, then ask again."

    def data(self, request, ctx):
        if not request.facts:
            return []
        paraphrased = [p for view in request.views[1:] for p in view] or list(request.facts)
        rng = random.Random(ctx.seed)
        keep = {p.answer for p in rng.sample(list(request.facts), max(1, len(request.facts) // 2))}
        return [p for p in paraphrased if p.answer in keep]


class RelearnRelated(Relearning):
    name = "relearn_related"
    description = "Relearn on only k of RAP's items (paraphrases of half the request's facts): a stated related budget."
    Params = count(2, "of RAP's items relearned on")

    def data(self, request, ctx):
        items = Rap().data(request, ctx)
        return random.Random(ctx.seed).sample(items, min(self.params.k, len(items)))


class RelearnUnrelated(Relearning):
    name = "relearn_unrelated"
    description = "Relearn on k items of other people's data (the retain pool): what returns was suppressed."
    Params = count(10, "retain-pool items (other people's data) relearned on")

    def data(self, request, ctx):
        pool = list(ctx.retain_pool)
        if not pool:
            raise UserError("attack relearn_unrelated relearns on the retain pool (the dev targets' data), and this run "
                            "has none; pass --dev-targets 2 or more, or leave it out of --attacks.")
        return random.Random(ctx.seed).sample(pool, min(self.params.k, len(pool)))
