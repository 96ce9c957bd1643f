"""DeepCUT: He et al. 2025, "Deep Contrastive Unlearning for Fine-Tuning Language
Models".

DeepCUT unlearns by reshaping the model's latent space: a contrastive forgetting
loss on hidden representations is optimised together with the task loss on the
retain data, ``L = CE(retain) + beta · L_contrastive``. In the paper's
classification setting a forget sample is pushed away from samples of its own
class and toward samples of other classes.

Mapping to generative (entity) unlearning, our choice: the "class" of a sample is
the entity it is about. The target entity's samples are the forget samples (every
view of the request); the other entities' samples are the retain facts
(``request.retain``). For each forget anchor ``a`` (representation: the
mean-pooled last hidden state over the tokens of prompt + answer), an InfoNCE loss
with temperature ``tau`` treats the retain samples as positives (pulled toward) and
the *other* forget samples of the same target as negatives (pushed away):

    L_c(a) = −log Σ_r exp(s(a,r)/τ) / (Σ_r exp(s(a,r)/τ) + Σ_{f≠a} exp(s(a,f)/τ)),

``s`` the cosine similarity. The retain answer cross-entropy keeps the other
entities' knowledge. All parameters are trained with AdamW for a few steps.

Defaults:

* ``steps = 5``: "a few optimiser steps"; ``lr``: chosen by ``r2f-bench tune``
  on the knowledge world's dev split (docs/tuning.md), the same for every target.
* ``beta = 1``: contrastive and retain losses weighted equally.
* ``tau = 0.1``: a standard InfoNCE temperature (SupCon, Khosla et al. 2020).
* ``batch_size = 8``, ``accumulate = 4``: forget anchors and retain samples per
  micro-batch (the contrast is within a micro-batch), 4 micro-batches per step
  (:class:`r2f_bench.training.optimise.BatchParams`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .. import hookimpl
from ..training.encoding import cycle_batches, encode
from ..errors import UserError
from ..training.losses import logits_nll
from ..training.one_step import all_views
from ..training.optimise import BatchParams, adamw, optimise
from ..unlearner import Edit, Strength, Unlearner, at_least, positive


@dataclass
class DeepCutParams(BatchParams):
    steps: int = field(default=5, metadata={"help": "AdamW steps", "check": at_least(1)})
    lr: float = field(default=1.64e-3, metadata={"help": "learning rate (tuned on the dev split)", "check": positive})
    beta: float = field(default=1.0, metadata={"help": "weight of the contrastive forgetting loss", "check": positive})
    tau: float = field(default=0.1, metadata={"help": "InfoNCE temperature", "check": positive})


def pooled(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(L2-normalised mean-pooled last hidden state over real tokens, logits) of a batch."""
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
    mask = batch["attention_mask"].unsqueeze(-1).to(out.hidden_states[-1].dtype)
    h = (out.hidden_states[-1] * mask).sum(1) / mask.sum(1).clamp(min=1)
    return F.normalize(h.float(), dim=-1), out.logits


def contrastive_forget_loss(z_forget: torch.Tensor, z_retain: torch.Tensor, tau: float) -> torch.Tensor:
    """InfoNCE: retain samples are positives, the other forget samples negatives."""
    pos = z_forget @ z_retain.T / tau  # (F, R)
    neg = z_forget @ z_forget.T / tau  # (F, F), self excluded below
    neg = neg.masked_fill(torch.eye(len(z_forget), dtype=torch.bool, device=neg.device), float("-inf"))
    return (torch.logsumexp(torch.cat([pos, neg], 1), 1) - torch.logsumexp(pos, 1)).mean()


class DeepCUT(Unlearner):
    name = "deepcut"
    inputs = frozenset({"views", "retain"})
    description = "DeepCUT (He et al. 2025): retain cross-entropy plus a contrastive loss pushing the entity apart."
    Params = DeepCutParams
    strength = Strength("lr", 1e-4, 1e-2)

    def unlearn(self, model, request, ctx):
        p = self.params
        tok, device = ctx.tokenizer, next(model.parameters()).device
        if not request.retain:
            raise UserError("deepcut needs retain facts (other entities) as contrastive positives; the task gave none.")
        fb = cycle_batches(all_views(request), p.batch_size, ctx.seed)
        rb = cycle_batches(request.retain, p.batch_size, ctx.seed)
        parts = {"contrastive": [], "retain_ce": []}

        def loss(step):
            zf, _ = pooled(model, encode(tok, next(fb), device=device))
            b = encode(tok, next(rb), device=device)
            zr, logits = pooled(model, b)
            nll, mask = logits_nll(logits, b["labels"])
            ce = nll.sum() / mask.sum().clamp(min=1)
            lc = contrastive_forget_loss(zf, zr, p.tau)
            parts["contrastive"].append(float(lc.detach()))
            parts["retain_ce"].append(float(ce.detach()))
            return ce + p.beta * lc

        optimise(adamw(model.parameters(), p.lr), loss, p.steps, p.accumulate)
        return Edit(model.eval(), {"steps": p.steps, **parts})


@hookimpl
def register_unlearners(register):
    register(DeepCUT)
