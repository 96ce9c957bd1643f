"""SKU: Liu et al. 2024, "Towards Safer Large Language Models through Machine
Unlearning" (Findings of ACL 2024), "Selective Knowledge negation Unlearning".

Two stages:

1. *Harmful knowledge acquisition*: a copy of the model (``θ₁ ← θ``) is trained so
   that it holds the knowledge to remove *more strongly*, with three losses summed:

   * guided distortion (``eps_gd``): descend the answer NLL of the forget data
     (every view of the request), making the forget answers stronger;
   * random disassociation (``eps_rd``): descend the answer NLL of the forget
     prompts paired with the answers of *other* facts of the request (a seeded
     derangement), so the vector also captures the target's generic
     "answer-about-this-entity" behaviour rather than only single facts;
   * preservation divergence (``eps_pd``): *maximise* the token-level
     KL(θ ‖ θ₁) on retain data (``request.retain``), so the task vector carries
     no normal knowledge (what it does to retain data is pushed away from the
     original and then subtracted).

2. *Knowledge negation*: subtract the task vector from the original weights,
   ``θ_unlearned = θ − λ(θ₁ − θ)`` (task arithmetic negation).

We train the stage-1 delta as a weight delta on a full copy (all parameters), the
simplest faithful form; ``info["delta_cosine"]`` records the cosine between the
applied change and the stage-1 delta (−1 by construction).

Defaults:

* ``eps_gd = eps_rd = eps_pd = 1``: equal weights of the three stage-1 losses
  (SKU sums the three terms with weights; we do not tune them per model).
* ``lam = 1``: plain task-vector negation (Ilharco et al. 2023, "Editing Models
  with Task Arithmetic"), the negation SKU applies.
* ``steps = 10``, ``lr = 1e-3``: stage-1 AdamW steps; 1e-3 for the tiny embedded
  models (SKU fine-tunes 7B OPT/Llama-2 with a much smaller rate), the same for
  every target.
* ``batch_size = 32``: forget and retain sequences per step.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

import torch

from r2f_plugin import hookimpl
from r2f_plugin.one_step import all_views
from r2f_plugin.training import adamw, answer_kl, answer_nll, batch_logits, cycle_batches, encode, optimise
from r2f_plugin.unlearner import Edit, Unlearner


@dataclass
class SkuParams:
    steps: int = field(default=10, metadata={"help": "stage-1 AdamW steps"})
    lr: float = field(default=1e-3, metadata={"help": "stage-1 learning rate (1e-3 for tiny models)"})
    eps_gd: float = field(default=1.0, metadata={"help": "weight of guided distortion (forget answers' NLL)"})
    eps_rd: float = field(default=1.0, metadata={"help": "weight of random disassociation (NLL of shuffled answers)"})
    eps_pd: float = field(default=1.0, metadata={"help": "weight of preservation divergence (−KL on retain data)"})
    lam: float = field(default=1.0, metadata={"help": "negation strength λ: θ − λ(θ₁ − θ)"})
    batch_size: int = field(default=32, metadata={"help": "forget and retain sequences per step"})


def derangement(n: int, rng: random.Random) -> list[int]:
    """A random permutation with no fixed point (identity if n < 2)."""
    if n < 2:
        return list(range(n))
    while True:
        perm = list(range(n))
        rng.shuffle(perm)
        if all(i != j for i, j in enumerate(perm)):
            return perm


class SKU(Unlearner):
    name = "sku"
    Params = SkuParams

    def unlearn(self, model, request, ctx):
        p = self.params
        tok, device = ctx.tokenizer, next(model.parameters()).device
        forget = all_views(request)
        perm = derangement(len(forget), random.Random(ctx.seed))
        wrong = {f: forget[j].answer for f, j in zip(forget, perm)}
        fb = cycle_batches(forget, p.batch_size, ctx.seed)
        rb = cycle_batches(request.retain, p.batch_size, ctx.seed) if request.retain else None
        original = model.eval()
        stage1 = copy.deepcopy(model)
        for q in original.parameters():
            q.requires_grad_(False)

        def loss(step):
            chunk = next(fb)
            total = p.eps_gd * answer_nll(stage1, encode(tok, chunk, device=device)).mean()
            total = total + p.eps_rd * answer_nll(stage1, encode(tok, chunk, [wrong[f] for f in chunk],
                                                                 device=device)).mean()
            if rb is not None and p.eps_pd:
                b = encode(tok, next(rb), device=device)
                with torch.no_grad():
                    ref = batch_logits(original, b)
                total = total - p.eps_pd * answer_kl(batch_logits(stage1, b), ref, b["labels"])
            return total

        losses = optimise(adamw(stage1.parameters(), p.lr), loss, p.steps)
        dot = change_sq = delta_sq = 0.0
        with torch.no_grad():
            for w, w1 in zip(original.parameters(), stage1.parameters()):
                delta = (w1 - w).double()
                before = w.detach().double()
                w.sub_((p.lam * delta).to(w.dtype))
                change = w.double() - before
                dot += float((change * delta).sum())
                change_sq += float(change.pow(2).sum())
                delta_sq += float(delta.pow(2).sum())
        for q in original.parameters():
            q.requires_grad_(True)
        del stage1
        cosine = dot / max((change_sq * delta_sq) ** 0.5, 1e-30)
        return Edit(original, {"stage1_losses": losses, "delta_norm": delta_sq ** 0.5, "delta_cosine": cosine})


@hookimpl
def register_unlearners(register):
    register(SKU)
