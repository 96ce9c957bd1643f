"""ECO: Liu et al. 2024, "Large Language Model Unlearning via Embedding-Corrupted
Prompts" (NeurIPS 2024).

ECO changes no weight. A prompt classifier decides whether a prompt falls in the
forget scope; the token embeddings of flagged prompts are corrupted at inference,
so the model behaves as if it never learned the target, while every other prompt
runs through the untouched model (bit-identical outputs).

* Classifier (offline stand-in for ECO's trained prompt classifier): the maximum
  cosine similarity, under the offline sentence embedder
  (:func:`r2f_bench.training.embedder.embed`, all-MiniLM-L6-v2), between the prompt and the
  prompts of the request (every view: the facts as asked and their paraphrases),
  thresholded. The scope is built from the request alone (its views), never from an
  evaluation prompt. The threshold is chosen once in :meth:`ECO.setup` on the dev
  split: for each dev target, the scope is its request as asked; positives are its
  paraphrased views and its forget probes, negatives its neighbour probes (probe sets
  named ``neighbor*``) and the other dev targets' requests; the threshold maximises
  balanced accuracy (recorded in ``info``). After the evaluation the run records the
  share of each evaluated probe set the classifier flags (``flagged``).
* Corruption: a forward hook on the input-embedding module
  (``model.get_input_embeddings()``) decodes each row of ``input_ids`` with the
  run's tokenizer and, if the classifier flags it, adds Gaussian noise
  ``sigma · RMS(embedding table) · N(0, I)`` (seeded) to the row's non-padding
  positions. Only prefill passes are corrupted: a single-token pass (cached
  decoding) is left alone, so the whole generated answer follows a corrupted
  prompt. A teacher-forced pass (prompt + continuation in one forward, e.g.
  log-likelihood scoring) is corrupted over all of its positions.
* ``sigma``: fitted once in :meth:`ECO.setup` by a zeroth-order grid search toward
  the unlearning objective on the retain pool (the dev targets' requests): the smallest candidate for
  which the teacher-forced answer-token accuracy of those items with corrupted prompts falls
  to at most ``stop_ratio`` × their clean accuracy (the largest candidate if none
  does). ECO optimises its corruption strength per task with zeroth-order search
  toward a target metric; the grid is our compact version.

Defaults:

* ``sigmas = 0.5,1,2,4,8``: candidate strengths, relative to the embedding RMS.
* ``stop_ratio = 0.3``: "stopped answering" = dev answer-token accuracy at most 30%
  of the clean one.
* ``threshold = -1`` (fit on dev) and ``sigma = -1`` (fit on dev); set either to a
  value ≥ 0 to fix it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, fields
from typing import Any, Sequence

import torch

from .. import hookimpl
from ..data import Probe
from ..errors import UserError
from ..task import HELD_OUT, LOCALITY, SEEN
from ..training.embedder import embed
from ..training.encoding import batches, encode
from ..unlearner import Context, Edit, Strength, Unlearner, positive, positives


@dataclass
class EcoParams:
    sigmas: tuple[float, ...] = field(default=(0.5, 1.0, 2.0, 4.0, 8.0), metadata={"help": "candidate noise strengths (× embedding RMS) for the dev search", "check": positives})
    stop_ratio: float = field(default=0.3, metadata={"help": "sigma search target: dev answer accuracy ≤ stop_ratio × clean", "check": positive})
    threshold: float = field(default=-1.0, metadata={"help": "classifier cosine threshold, at most 1; < 0: fit on the dev split",
                                                     "check": lambda v: None if v <= 1 else "at most 1 (a cosine; < 0 fits it on the dev split)"})
    sigma: float = field(default=-1.0, metadata={"help": "noise strength; < 0: fit on the dev split",
                                                 "check": lambda v: None if v != 0 else "> 0 (0 adds no noise; < 0 fits it on the dev split)"})

    def __post_init__(self) -> None:
        search = [f.name for f in fields(self) if f.name in ("sigmas", "stop_ratio") and getattr(self, f.name) != f.default]
        if self.sigma > 0 and search:
            raise UserError(f"parameter {search[0]!r} of method 'eco' sets the dev search for sigma, and sigma is given "
                            f"({self.sigma:g}); drop one of them.")


def scope_scores(texts: Sequence[str], scope: torch.Tensor) -> list[float]:
    """Max cosine of each text to the scope's (normalised) embeddings."""
    return (embed(texts) @ scope.T).max(1).values.tolist()


def best_threshold(pos: Sequence[float], neg: Sequence[float]) -> tuple[float, float]:
    """Threshold maximising balanced accuracy of ``score ≥ t``; returns (t, accuracy)."""
    values = sorted(set(pos) | set(neg))
    cands = [values[0] - 1e-6] + [(a + b) / 2 for a, b in zip(values, values[1:])] + [values[-1] + 1e-6]
    best = (cands[0], -1.0)
    for t in cands:
        acc = 0.5 * (sum(s >= t for s in pos) / len(pos) + sum(s < t for s in neg) / len(neg))
        if acc > best[1]:
            best = (t, acc)
    return best


def embedding_rms(model: torch.nn.Module) -> float:
    return float(model.get_input_embeddings().weight.detach().float().pow(2).mean().sqrt())


def noise(shape, sigma: float, rms: float, seed: int, key: Sequence[int]) -> torch.Tensor:
    """Seeded noise, the same for the same tokens (reproducible runs)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(str(list(key)).encode()))
    return torch.randn(shape, generator=gen) * sigma * rms


class Corruption:
    """The forward hook: corrupt the embeddings of prompts the classifier flags."""

    def __init__(self, tokenizer: Any, scope: torch.Tensor, threshold: float, sigma: float, rms: float,
                 seed: int) -> None:
        self.tok, self.scope, self.threshold = tokenizer, scope, threshold
        self.sigma, self.rms, self.seed = sigma, rms, seed
        self.cache: dict[str, bool] = {}
        self.flagged = 0

    def is_flagged(self, text: str) -> bool:
        if text not in self.cache:
            self.cache[text] = scope_scores([text], self.scope)[0] >= self.threshold
        return self.cache[text]

    def __call__(self, module, args, output):
        ids = args[0] if args else None
        if ids is None or ids.dim() != 2 or ids.shape[1] < 2:  # single-token step: cached decoding
            return None
        rows = [i for i, row in enumerate(ids.tolist())
                if self.is_flagged(self.tok.decode(row, skip_special_tokens=True))]
        if not rows:
            return None  # unflagged: the untouched output object
        self.flagged += len(rows)
        out = output.clone()
        for i in rows:
            keep = (ids[i] != self.tok.pad_token_id).unsqueeze(-1)
            eps = noise(out[i].shape, self.sigma, self.rms, self.seed, ids[i].tolist())
            out[i] = out[i] + eps.to(out.device, out.dtype) * keep
        return out


class ECO(Unlearner):
    name = "eco"
    inputs = frozenset({"views"})  # its classifier's scope; it edits no layers and reads no retain items
    description = "ECO (Liu et al. 2024): flagged prompts get corrupted embeddings at inference; no weight changes."
    Params = EcoParams
    edits_weights = False
    # the noise strength (x embedding RMS); the classifier threshold is still fitted on the dev split
    strength = Strength("sigma", 0.1, 16.0)

    @classmethod
    def dev_split_needed(cls, params: EcoParams) -> str | None:
        fitted = [name for name in ("threshold", "sigma") if getattr(params, name) < 0]
        sets = " and ".join(f"--set {name}={name[0].upper()}" for name in fitted)
        return f"eco fits its {' and '.join(fitted)} on the dev split; use --dev-targets ≥ 1 or {sets}." if fitted else None

    def setup(self, model: torch.nn.Module, ctx: Context) -> None:
        p = self.params
        self.rms = embedding_rms(model)
        self.fit: dict[str, Any] = {}
        self.threshold = p.threshold if p.threshold >= 0 else self._fit_threshold(ctx)
        self.sigma = p.sigma if p.sigma >= 0 else self._fit_sigma(model, ctx)
        ctx.progress(f"eco: threshold {self.threshold:.3f}, sigma {self.sigma:g} (× embedding RMS {self.rms:.4f})")

    def _fit_threshold(self, ctx: Context) -> float:
        dev = ctx.dev_targets
        if not dev:
            raise UserError("eco fits its classifier threshold on dev targets; use --dev-targets ≥ 1 or --set threshold=T.")
        pos, neg = [], []
        for t in dev:
            asked = {q.prompt for q in t.request}
            scope = embed(sorted(asked))
            views = ctx.make_views(t.request)[1:]
            positives = [q.prompt for v in views for q in v]
            positives += [q.prompt for s, ps in t.probes.items() if ctx.probe_roles.get(s) in (HELD_OUT, SEEN) for q in ps]
            positives = [x for x in dict.fromkeys(positives) if x not in asked]
            negatives = [q.prompt for s, ps in t.probes.items() if ctx.probe_roles.get(s) == LOCALITY for q in ps]
            negatives += [q.prompt for other in dev if other is not t for q in other.request]
            if positives:
                pos += scope_scores(positives, scope)
            if negatives:
                neg += scope_scores(negatives, scope)
        if not pos or not neg:
            raise UserError("eco needs dev positives (paraphrases / forget probes) and negatives (neighbour probes, other dev requests) to fit its threshold; or --set threshold=T.")
        threshold, acc = best_threshold(pos, neg)
        self.fit.update(dev_balanced_accuracy=acc, dev_positives=len(pos), dev_negatives=len(neg))
        return threshold

    @torch.no_grad()
    def _fit_sigma(self, model: torch.nn.Module, ctx: Context) -> float:
        facts = ctx.retain_pool
        if not facts:
            raise UserError("eco fits sigma on the retain pool (the dev targets' requests); use --dev-targets ≥ 1 or --set sigma=S.")
        clean = corrupted_accuracy(model, ctx.tokenizer, facts, 0.0, self.rms, ctx.seed)
        trace = {}
        chosen = float(self.params.sigmas[-1])
        for s in sorted(float(x) for x in self.params.sigmas):
            trace[s] = corrupted_accuracy(model, ctx.tokenizer, facts, s, self.rms, ctx.seed)
            if trace[s] <= self.params.stop_ratio * clean:
                chosen = s
                break
        self.fit.update(dev_clean_accuracy=clean, dev_accuracy_by_sigma=trace)
        return chosen

    def unlearn(self, model: torch.nn.Module, request, ctx: Context) -> Edit:
        scope = embed(list(dict.fromkeys(q.prompt for v in request.views for q in v)))
        hook = Corruption(ctx.tokenizer, scope, self.threshold, self.sigma, self.rms, ctx.seed)
        model.get_input_embeddings().register_forward_hook(hook)
        flagged = lambda sets: {"flagged": {s: sum(map(hook.is_flagged, (p.prompt for p in ps))) / len(ps)
                                            for s, ps in sets.items() if ps}}
        return Edit(model, {"threshold": self.threshold, "sigma": self.sigma, "embedding_rms": self.rms,
                            "scope_prompts": len(scope), **self.fit}, evaluation_info=flagged)


def corrupted_accuracy(model: torch.nn.Module, tokenizer: Any, facts: Sequence[Probe], sigma: float,
                       rms: float, seed: int) -> float:
    """Teacher-forced answer-token accuracy with the prompt positions' embeddings corrupted."""
    hit = total = 0
    device = next(model.parameters()).device
    for chunk in batches(list(facts), 32):
        b = encode(tokenizer, chunk, device=device)
        emb = model.get_input_embeddings()(b["input_ids"])
        prompt = ((b["labels"] == -100) & (b["attention_mask"] == 1)).unsqueeze(-1)
        for i in range(len(chunk)):
            emb[i] = emb[i] + noise(emb[i].shape, sigma, rms, seed, b["input_ids"][i].tolist()).to(emb) * prompt[i]
        logits = model(inputs_embeds=emb, attention_mask=b["attention_mask"]).logits[:, :-1]
        labels = b["labels"][:, 1:]
        mask = labels != -100
        hit += int(((logits.argmax(-1) == labels) & mask).sum())
        total += int(mask.sum())
    return hit / max(total, 1)


@hookimpl
def register_unlearners(register):
    register(ECO)
