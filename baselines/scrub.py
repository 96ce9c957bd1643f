"""SCRUB: Kurmanji et al. 2023, "Towards Unbounded Machine Unlearning" (NeurIPS 2023).

A student initialised from the model is trained against a frozen teacher (the
original model: :func:`frozen_copy`, ``requires_grad`` off, eval mode). Training
alternates two kinds of epochs ("SCRUB" = SCalable Remembering and Unlearning
unBound):

* max-steps, in the first ``msteps`` epochs only: on the forget data, *maximise*
  KL(teacher ‖ student) (the student moves away from the teacher);
* min-steps, every epoch: on the retain data, minimise
  ``alpha · KL(teacher ‖ student) + gamma · CE`` (stay close to the teacher and keep
  the retain answers).

For causal LMs the KL and the cross-entropy are token-level, over the answer tokens
(:func:`r2f_bench.training.losses.answer_kl`, :func:`r2f_bench.training.losses.logits_nll`).
Forget data = all of the request's views (``request.views``); retain data = the
request's retain facts (``request.retain``), the same for every method. An epoch is
one pass over its data in steps of ``accumulate`` micro-batches of ``batch_size``.

Note: the R2F paper's appendix describes a different procedure under the name
"SCRUB"; we implement the original method of Kurmanji et al. as published.

Defaults:

* ``msteps = 2``, ``epochs = 3``, constant learning rate: the schedule of the
  original's large-scale configuration (``large_scale_unlearning.ipynb``; its
  small-scale one uses 3 max epochs of 10).
* ``alpha = 0.001`` (KL weight), ``gamma = 0.99`` (CE weight) and ``temperature = 4``
  (both distributions softened by T, the KL scaled by T², the original's ``kd_T``):
  the large-scale configuration's values. Both terms are per-token means here as they
  are per-sample means there, so the weights carry over unchanged.
* ``lr``: chosen by ``r2f-bench tune`` on the knowledge world's dev split
  (docs/tuning.md; the original uses 5e-4 on image classifiers); the same for every target.
* ``batch_size = 8``, ``accumulate = 4``: steps of 32 sequences in micro-batches of 8
  (:class:`r2f_bench.training.optimise.BatchParams`). Optimiser: AdamW, no weight decay, all
  parameters.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch

from .. import hookimpl
from ..errors import UserError
from ..training.encoding import batches, encode
from ..training.losses import answer_kl, batch_logits, logits_nll
from ..training.one_step import all_views
from ..training.optimise import BatchParams, adamw, optimise
from ..unlearner import Edit, Strength, Unlearner, at_least, positive


@dataclass
class ScrubParams(BatchParams):
    msteps: int = field(default=2, metadata={"help": "epochs that include a max-step on the forget data (Kurmanji et al.; at most epochs)", "check": at_least(1)})
    epochs: int = field(default=3, metadata={"help": "total epochs; every epoch has a min-step pass on the retain data", "check": at_least(1)})
    lr: float = field(default=2.59e-3, metadata={"help": "AdamW learning rate (tuned on the dev split; original 5e-4 on image models)", "check": positive})
    alpha: float = field(default=0.001, metadata={"help": "weight of KL(teacher‖student) in the min-step (Kurmanji et al., large-scale)", "check": at_least(0)})
    gamma: float = field(default=0.99, metadata={"help": "weight of the retain answer cross-entropy in the min-step (large-scale)", "check": at_least(0)})
    temperature: float = field(default=4.0, metadata={"help": "distillation temperature T of both KL terms, scaled by T² (the original's kd_T)", "check": positive})

    def __post_init__(self) -> None:
        if self.msteps > self.epochs:  # the epochs past the last bound every max-step: the same run as msteps=epochs
            raise UserError(f"parameter 'msteps' of method 'scrub' must be at most epochs ({self.epochs}), got "
                            f"{self.msteps}: only that many epochs hold a max-step.")


NO_RETAIN = ("SCRUB's min-steps keep the retain facts, which come from the dev split, and this run has none; pass "
             "--dev-targets 1 or more and --retain-items 1 or more.")


def frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The teacher: a deep copy with gradients off, in eval mode."""
    teacher = copy.deepcopy(model).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


class Scrub(Unlearner):
    name = "scrub"
    inputs = frozenset({"views", "retain"})
    description = "SCRUB (Kurmanji et al. 2023): a student moves away from a frozen teacher on forget data, stays close on retain."
    Params = ScrubParams
    strength = Strength("lr", 5e-5, 5e-3)

    @classmethod
    def dev_split_needed(cls, params: ScrubParams) -> str | None:
        return NO_RETAIN

    def unlearn(self, model, request, ctx):
        if not request.retain:  # the min-steps are SCRUB's half that keeps what it should (--retain-items 0)
            raise UserError(NO_RETAIN)
        p = self.params
        teacher = frozen_copy(model)
        device = next(model.parameters()).device
        forget = list(batches(all_views(request), p.batch_size))
        retain = list(batches(request.retain, p.batch_size))
        kl_forget, min_losses = [], []

        def max_loss(i):  # maximise KL(teacher‖student) on the forget data
            if i >= len(forget):
                return None
            b = encode(ctx.tokenizer, forget[i], device=device)
            with torch.no_grad():
                t = batch_logits(teacher, b)
            kl = answer_kl(batch_logits(model, b), t, b["labels"], p.temperature)
            return -kl

        def min_loss(i):  # alpha·KL + gamma·CE on the retain data
            if i >= len(retain):
                return None
            b = encode(ctx.tokenizer, retain[i], device=device)
            with torch.no_grad():
                t = batch_logits(teacher, b)
            s = batch_logits(model, b)
            nll, mask = logits_nll(s, b["labels"])
            return p.alpha * answer_kl(s, t, b["labels"], p.temperature) + p.gamma * nll.sum() / mask.sum().clamp(min=1)

        opt = adamw(model.parameters(), p.lr)  # one optimiser for the whole schedule
        steps = lambda micro_batches: math.ceil(micro_batches / p.accumulate)  # one pass over the data
        for epoch in range(p.epochs):
            if epoch < p.msteps:
                kl_forget += [-x for x in optimise(opt, max_loss, steps(len(forget)), p.accumulate)]
            if retain:
                min_losses += optimise(opt, min_loss, steps(len(retain)), p.accumulate)
        del teacher
        return Edit(model.eval(), {"epochs": p.epochs, "msteps": p.msteps, "temperature": p.temperature, "forget_kl": kl_forget,
                                   "retain_loss": min_losses})


@hookimpl
def register_unlearners(register):
    register(Scrub)
