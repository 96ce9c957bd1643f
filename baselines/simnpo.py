"""SimNPO: Fan et al. 2024, "Simplicity Prevails: Rethinking Negative Preference
Optimization for LLM Unlearning".

NPO without its reference model, with the answer's log-likelihood normalised by its
length (SimPO's reward) and a margin γ:

    L = −(2/β) · E_forget[log σ(−(β/|y|) · log πθ(y|x) − γ)] + λ · E_retain[NLL],

``log π(y|x)`` the summed log-probability of the answer tokens and ``|y|`` their number
(:func:`r2f_bench.training.losses.answer_logprob`). The paper's argument: NPO's reference term
spreads the unlearning unevenly over forget answers of different lengths and
difficulty. The gradient is that of the mean answer-token log-probability weighted by
``2·σ((β/|y|)·log π + γ)``, which fades once an answer is unlikely. Forget data = every view of the request, retain data = ``request.retain``;
the loop is GradDiff's (:func:`r2f_bench.baselines.graddiff.train_forget_retain`).

Defaults:

* ``beta = 2.5``, ``gamma = 0``, ``retain_weight = 0.1375`` (λ): the authors' TOFU
  forget05 setting (their ``run_scripts.py`` sweeps β and γ at λ = 0.1375 over 10
  epochs). The values are per benchmark: their MUSE commands use β = 0.75, γ = 3 (News)
  and β = 0.7, γ = 0 (Books) with λ = 0.1.
* ``steps = 5``; ``lr`` (the strength knob, swept 1e-4–1e-2), chosen by ``r2f-bench tune`` on the knowledge world's dev split (docs/tuning.md).
  The authors run 10 epochs at 1e-5 on 7B models.
* ``batch_size = 8``, ``accumulate = 4``: 32 sequences per step. AdamW, all parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from .. import hookimpl
from ..data import Probe
from ..training.encoding import encode
from ..training.losses import answer_logprob
from ..unlearner import at_least, positive, tuned
from .graddiff import ForgetLoss, ForgetRetainParams, ForgetRetainUnlearner


@dataclass
class SimNpoParams(ForgetRetainParams):
    retain_weight: float = field(default=0.1375, metadata={"help": "λ, weight of the retain NLL (authors, TOFU: 0.1375)", "check": at_least(0)})
    beta: float = field(default=2.5, metadata={"help": "β, inverse temperature (paper, TOFU: 2.5)", "check": positive})
    gamma: float = field(default=0.0, metadata={"help": "γ, reward margin (paper, TOFU: 0)"})


def simnpo_loss(logp: torch.Tensor, length: torch.Tensor, beta: float, gamma: float) -> torch.Tensor:
    """``−(2/β) · mean log σ(−(β/|y|) · log πθ − γ)`` over sequences."""
    return -(2 / beta) * F.logsigmoid(-(beta / length) * logp - gamma).mean()


def simnpo_forget(model: torch.nn.Module, tokenizer: Any, beta: float, gamma: float) -> ForgetLoss:
    """SimNPO's loss of a micro-batch of forget probes."""
    def loss(probes: list[Probe]) -> torch.Tensor:
        logp, length = answer_logprob(model, encode(tokenizer, probes, device=next(model.parameters()).device))
        return simnpo_loss(logp, length, beta, gamma)
    return loss


class SimNPO(ForgetRetainUnlearner):
    name = "simnpo"
    description = "SimNPO (Fan et al. 2024): reference-free, length-normalised NPO with a margin, plus a retain NLL."
    Params = tuned(SimNpoParams, lr=1.93e-3)

    def forget_loss(self, model, request, ctx):
        return simnpo_forget(model, ctx.tokenizer, self.params.beta, self.params.gamma)


@hookimpl
def register_unlearners(register):
    register(SimNPO)
