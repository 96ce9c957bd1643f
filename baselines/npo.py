"""NPO: Zhang et al. 2024, "Negative Preference Optimization: From Catastrophic Collapse
to Effective Unlearning" (COLM 2024).

DPO with only a losing answer: on the forget data,

    L_NPO = −(2/β) · E[log σ(−β · log(πθ(y|x) / πref(y|x)))],

``log π(y|x)`` the summed log-probability of the answer tokens
(:func:`r2f_bench.training.losses.answer_logprob`). Its gradient is gradient ascent's weighted
by ``2·σ(β·log(πθ/πref))``, which fades once an answer is less likely than under the
reference, so the model drifts toward collapse exponentially slower than under gradient
ascent (the paper's title). As β → 0 it is gradient ascent. ``πref`` is the model
before unlearning: its log-probability of every forget sequence is computed once per
request, before the first step, from the untouched model the method is handed (no
second live model).

NPO+RT (the paper's variant with a retain term) adds ``λ · NLL(retain)``:
``retain_weight`` (``npo@retain_weight=1`` is NPO+RT as the paper weights it). Forget
data = every view of the request, retain data = ``request.retain``; the loop is
GradDiff's (:func:`r2f_bench.baselines.graddiff.train_forget_retain`).

Defaults:

* ``beta = 0.1``: the paper's (TOFU).
* ``retain_weight = 0``: plain NPO, the paper's headline loss.
* ``steps = 5``; ``lr`` (the strength knob, swept 1e-4–1e-2), chosen by ``r2f-bench tune`` on the knowledge world's dev split (docs/tuning.md).
  The paper runs 10 epochs at 1e-5 on 7B models (TOFU).
* ``batch_size = 8``, ``accumulate = 4``: 32 sequences per step. AdamW, all parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from .. import hookimpl
from ..data import Probe
from ..training.encoding import encode, token_batches
from ..training.losses import BATCH, answer_logprob
from ..training.one_step import all_views
from ..unlearner import at_least, positive, tuned
from .graddiff import ForgetLoss, ForgetRetainParams, ForgetRetainUnlearner


@dataclass
class NpoParams(ForgetRetainParams):
    retain_weight: float = field(default=0.0, metadata={"help": "λ of NPO+RT's retain NLL (0: plain NPO; the paper's NPO+RT: 1)", "check": at_least(0)})
    beta: float = field(default=0.1, metadata={"help": "β, inverse temperature of the log-ratio (paper: 0.1)", "check": positive})


def npo_loss(logp: torch.Tensor, ref_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """``−(2/β) · mean log σ(−β · (log πθ − log πref))`` over sequences."""
    return -(2 / beta) * F.logsigmoid(-beta * (logp - ref_logp)).mean()


def reference_logprobs(model: torch.nn.Module, tokenizer: Any, probes: Sequence[Probe]) -> dict[Probe, float]:
    """``log πref(y|x)`` of each distinct probe under ``model`` as it is now (no gradient)."""
    device, refs = next(model.parameters()).device, {}
    with torch.no_grad():
        for indices in token_batches(tokenizer, probes, BATCH):
            chunk = [probes[i] for i in indices]
            logp, _ = answer_logprob(model, encode(tokenizer, chunk, device=device))
            refs.update(zip(chunk, logp.tolist()))
    return refs


def npo_forget(model: torch.nn.Module, tokenizer: Any, refs: dict[Probe, float], beta: float) -> ForgetLoss:
    """NPO's loss of a micro-batch of forget probes against their reference log-probabilities."""
    def loss(probes: list[Probe]) -> torch.Tensor:
        logp, _ = answer_logprob(model, encode(tokenizer, probes, device=next(model.parameters()).device))
        return npo_loss(logp, torch.tensor([refs[q] for q in probes], device=logp.device), beta)
    return loss


class NPO(ForgetRetainUnlearner):
    name = "npo"
    description = "NPO (Zhang et al. 2024): DPO-style negative preference on the forget answers against the untouched model."
    Params = tuned(NpoParams, lr=1.64e-3)

    def forget_loss(self, model, request, ctx):
        refs = reference_logprobs(model, ctx.tokenizer, all_views(request))  # the untouched model, before any step
        return npo_forget(model, ctx.tokenizer, refs, self.params.beta)


@hookimpl
def register_unlearners(register):
    register(NPO)
