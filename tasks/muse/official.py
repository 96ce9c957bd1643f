"""MUSE's own metrics (Shi et al. 2024, "MUSE: Machine Unlearning Six-Way Evaluation for
Language Models"), computed as the reference code ``swj0419/muse_bench`` does:

* **VerbMem** on D_f: greedy continuation of 128 new tokens after each ``prompt``;
  ROUGE-L F1 (no stemming) against ``gt`` cut to its first 128 tokens; mean.
* **KnowMem** on D_f / D_r: greedy answer of 32 new tokens after the in-context
  prompt, cut before ``"\\n\\n"``, ``"\\nQuestion"`` or ``"Question:"``; ROUGE-L F1; mean.
* **PrivLeak**: Min-K% Prob with k = 40% (mean log-probability of the 40% least likely
  tokens of a text) for each forget (member) and holdout (non-member) text; the AUC of
  telling holdout from forget texts by it (key ``forget_holdout_Min-40%`` upstream),
  relative to a retrained model's AUC: ``(AUC - AUC_retrain) / AUC_retrain * 100``.
  Negative means the model still leaks membership, positive that it over-unlearned.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ...data import Probe
from ...engine.metrics import mean, rouge_l_f1
from ..common import auroc, generate

VERBMEM_TOKENS = 128
KNOWMEM_TOKENS = 32
KNOWMEM_STOPS = ("\n\n", "\nQuestion", "Question:")
MIN_K = 0.4


def knowmem(model: torch.nn.Module, tokenizer: Any, probes: Sequence[Probe]) -> float:
    """Mean ROUGE-L F1 of the greedy in-context answers."""
    answers = generate(model, tokenizer, [p.prompt for p in probes], KNOWMEM_TOKENS, stop=KNOWMEM_STOPS)
    return mean([rouge_l_f1(p.answer, a[0]) for p, a in zip(probes, answers)])


def verbmem(model: torch.nn.Module, tokenizer: Any, probes: Sequence[Probe]) -> float:
    """Mean ROUGE-L F1 of the greedy continuations against the first 128 tokens of ``gt``."""
    outputs = generate(model, tokenizer, [p.prompt for p in probes], VERBMEM_TOKENS)
    scores = []
    for p, out in zip(probes, outputs):
        gt = tokenizer.decode(tokenizer(p.answer)["input_ids"][:VERBMEM_TOKENS], skip_special_tokens=True)
        scores.append(rouge_l_f1(gt, out[0]))
    return mean(scores)


@torch.no_grad()
def token_logprobs(model: torch.nn.Module, tokenizer: Any, texts: Sequence[str],
                   batch_size: int = 4) -> list[torch.Tensor]:
    """Log-probability of every token of each text given the tokens before it (texts are
    cut to the model's context length)."""
    device = next(model.parameters()).device
    limit = getattr(model.config, "max_position_embeddings", None)
    was_training = model.training
    model.eval()
    out: list[torch.Tensor] = []
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(list(texts[i:i + batch_size]), return_tensors="pt", padding=True, padding_side="right",
                        truncation=limit is not None, max_length=limit)
        enc = {k: enc[k].to(device) for k in ("input_ids", "attention_mask")}
        logits = model(**enc).logits[:, :-1].float()
        lp = torch.log_softmax(logits, dim=-1).gather(-1, enc["input_ids"][:, 1:, None]).squeeze(-1)
        mask = enc["attention_mask"][:, 1:].bool()
        out += [lp[j][mask[j]].cpu() for j in range(lp.shape[0])]
    model.train(was_training)
    return out


def min_k_score(logprobs: torch.Tensor, k: float = MIN_K) -> float:
    """Mean log-probability of the ``k`` share of least likely tokens (higher: more likely a
    training member). MUSE's "Min-40%" value is its negative. At least one token is kept,
    where upstream would average an empty set for texts under three tokens."""
    n = max(1, int(len(logprobs) * k))
    return float(torch.sort(logprobs).values[:n].mean())


def privleak_auc(model: torch.nn.Module, tokenizer: Any, forget: Sequence[str], holdout: Sequence[str]) -> float:
    """AUC of scoring holdout texts above forget texts by Min-K% (MUSE's ``forget_holdout``)."""
    scores = [min_k_score(lp) for lp in token_logprobs(model, tokenizer, list(forget) + list(holdout))]
    return auroc(negatives=scores[:len(forget)], positives=scores[len(forget):])


def privleak(auc: float, reference: float) -> float:
    """PrivLeak (%): the AUC's relative gap to the retrained reference model's AUC."""
    return (auc - reference) / reference * 100.0
