"""SKU: Liu et al. 2024, "Towards Safer Large Language Models through Machine
Unlearning" (Findings of ACL 2024), "Selective Knowledge negation Unlearning".

Two stages, as in the authors' release (``franciscoliu/SKU``):

1. *Harmful knowledge acquisition*: LoRA adapters on the attention query and value
   projections are trained so that the adapted model holds the knowledge to remove
   *more strongly*, minimising the weighted sum of

   * guided distortion (``eps_gd``): the answer NLL of the forget data (every view of
     the request): the adapters learn the forget answers;
   * random disassociation (``eps_rd``): the answer NLL of each forget prompt paired
     with ``k_random`` answers drawn at random from the request, so the adapters also
     capture the target's generic "answer about this entity" behaviour;
   * preservation divergence (``eps_pd``): the *negated* token-level
     KL(original ‖ adapted) on retain data (``request.retain``): the adapters are
     pushed away from normal behaviour on normal prompts, so negating them later
     does not move normal behaviour the wrong way.

   The original model for the KL is the same network with its adapters disabled, so
   no second copy of the weights is held.

2. *Knowledge negation*: the adapters' weight delta (the task vector τ = θ₁ − θ,
   here ``s·B·A`` per adapted matrix) is subtracted from the original weights,
   ``θ_unlearned = θ − λ·τ`` (task arithmetic, Ilharco et al. 2023), and the adapters
   are removed. ``info["delta_cosine"]`` records the cosine between the applied
   change and τ (−1 by construction).

Defaults:

* ``eps_gd = 0.5``, ``eps_rd = 1``, ``eps_pd = 1``, ``k_random = 5``: the authors'
  defaults (``bad_weight``, ``random_weight``, ``normal_weight``, ``K``).
* ``rank = 32``, ``alpha = 16``, modules q/v (GPT-2: the fused ``c_attn``): the
  authors' LoRA configuration for Llama-2-7B.
* ``lam = 1``: plain task-vector negation, as SKU applies it.
* ``steps = 10`` and ``lr``: stage-1 AdamW steps with the authors' linear decay to 0;
  the authors run 1000 steps at 2e-5 on 7B models, far too little movement for the
  tiny embedded models in 10 steps, so ``lr`` is chosen by ``r2f-bench tune``
  on the knowledge world's dev split at the authors' λ = 1 (docs/tuning.md), the same
  for every target.
* ``batch_size = 8``, ``accumulate = 4``: forget and retain sequences per micro-batch,
  4 per step (the authors accumulate to 32; :class:`r2f_bench.training.optimise.BatchParams`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from .. import hookimpl
from ..training.encoding import cycle_batches, encode
from ..training.lora import lora_adapters, lora_layers
from ..training.losses import answer_kl, answer_nll, batch_logits
from ..training.one_step import all_views
from ..training.optimise import BatchParams, adamw, optimise
from ..unlearner import INPUTS, Edit, Strength, Unlearner, at_least, positive

QV_MODULES = {"gpt2": ("c_attn",)}
DEFAULT_QV = ("q_proj", "v_proj")


@dataclass
class SkuParams(BatchParams):
    steps: int = field(default=10, metadata={"help": "stage-1 AdamW steps (linear decay to 0)", "check": at_least(1)})
    lr: float = field(default=9e-3, metadata={"help": "stage-1 learning rate (tuned on the dev split at λ = 1; authors: 2e-5 for 1000 steps)", "check": positive})
    eps_gd: float = field(default=0.5, metadata={"help": "weight of guided distortion (authors: 0.5)"})
    eps_rd: float = field(default=1.0, metadata={"help": "weight of random disassociation (authors: 1)"})
    eps_pd: float = field(default=1.0, metadata={"help": "weight of preservation divergence, −KL on retain data (authors: 1)"})
    k_random: int = field(default=5, metadata={"help": "random answers per forget prompt (authors: K=5)", "check": at_least(1)})
    rank: int = field(default=32, metadata={"help": "stage-1 LoRA rank (authors: 32)", "check": at_least(1)})
    alpha: float = field(default=16.0, metadata={"help": "stage-1 LoRA alpha (authors: 16)", "check": positive})
    lam: float = field(default=1.0, metadata={"help": "negation strength λ: θ − λ·τ", "check": positive})


class SKU(Unlearner):
    name = "sku"
    inputs = INPUTS  # retain items for its KL term; its adapters' layers (default: query and value)
    description = "SKU (Liu et al. 2024): learn the forget knowledge into LoRA, then negate that task vector."
    Params = SkuParams
    strength = Strength("lam", 0.1, 10.0)

    def unlearn(self, model, request, ctx):
        p = self.params
        tok, device = ctx.tokenizer, next(model.parameters()).device
        forget = all_views(request)
        answers = sorted({f.answer for f in forget})
        rng = random.Random(ctx.seed)
        fb = cycle_batches(forget, p.batch_size, ctx.seed)
        rb = cycle_batches(request.retain, p.batch_size, ctx.seed) if request.retain else None
        modules = ctx.target_modules or QV_MODULES.get(getattr(model.config, "model_type", ""), DEFAULT_QV)
        with lora_adapters(model, p.rank, modules, alpha=p.alpha) as adapted:
            def loss(step):
                chunk = next(fb)
                total = p.eps_gd * answer_nll(adapted, encode(tok, chunk, device=device)).mean()
                drawn = rng.sample(answers, min(p.k_random, len(answers)))
                paired = [f for f in chunk for _ in drawn]
                total = total + p.eps_rd * answer_nll(adapted, encode(tok, paired, drawn * len(chunk),
                                                                     device=device)).mean()
                if rb is not None and p.eps_pd:
                    b = encode(tok, next(rb), device=device)
                    with torch.no_grad(), adapted.disable_adapter():
                        ref = batch_logits(adapted, b)
                    total = total - p.eps_pd * answer_kl(batch_logits(adapted, b), ref, b["labels"])
                return total

            params = [q for q in adapted.parameters() if q.requires_grad]
            losses = optimise(adamw(params, p.lr), loss, p.steps, p.accumulate, decay=True)
            with torch.no_grad():
                vector = {name: layer.get_delta_weight("default").detach().clone()
                          for name, layer in lora_layers(adapted).items()}
        weights = dict(model.named_modules())
        dot = change_sq = delta_sq = 0.0
        with torch.no_grad():
            for name, delta in vector.items():
                w = weights[name].weight
                before = w.detach().double().clone()
                w.sub_((p.lam * delta).to(w.dtype))
                change, d = w.double() - before, delta.double()
                dot += float((change * d).sum())
                change_sq += float(change.pow(2).sum())
                delta_sq += float(d.pow(2).sum())
        cosine = dot / max((change_sq * delta_sq) ** 0.5, 1e-30)
        return Edit(model.eval(), {"stage1_losses": losses, "delta_norm": delta_sq ** 0.5, "delta_cosine": cosine,
                                   "adapted_matrices": len(vector)})


@hookimpl
def register_unlearners(register):
    register(SKU)
