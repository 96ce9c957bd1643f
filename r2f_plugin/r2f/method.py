"""R2F: Recover-to-Forget (Liu et al., "Recover-to-Forget: Gradient Reconstruction
from LoRA for Efficient LLM Unlearning", Algorithm 1).

Per deletion request:
1. attach LoRA probes (rank ``rank``, all linear layers, two-sided init, see
   :mod:`r2f_bench.training.lora`) to the frozen model;
2. compute LoRA gradients of the unlearning loss on the request's views (the facts
   as asked plus paraphrases): per fact, averaged over that fact's views
   (``aggregate=before``, the default and the paper's order: Algorithm 1 averages
   the views of one datapoint, then decodes), or per view sequence
   (``aggregate=after``: closer to the exact multi-view gradient, cos 0.96 against
   0.92 on held-out RWKU facts, but one stored LoRA gradient per phrasing, 5x the
   memory, for the same unlearning on the dev split; docs/r2f.md);
3. decode each unit's full gradient with the proxy-fitted decoder
   (:mod:`r2f_bench.r2f.decoder`) as thin factors, average them (side by side), and apply
   the step matrix by matrix with one ``addmm_`` each, its norm taken from small Gram
   matrices (:mod:`r2f_bench.training.lowrank`): no full-size gradient, not even one matrix's,
   is ever formed.

The LoRA gradients come from hooks on the frozen model (:class:`r2f_bench.training.lora.LoraProbe`:
no adapters, no weight gradients), streamed in micro-batches of at most
``micro_batch_tokens`` padded tokens, so peak activation memory is one micro-batch's
however many views a request has.

The decoding unit is one phrasing (or one fact) because that is what the decoder is
fitted on and what a rank-``r`` sketch can reconstruct: one fact's views span a few
dozen tokens, while a whole request (dozens of facts) spans hundreds.

The decoder is fitted once, on the proxy, from (LoRA gradient, full gradient)
pairs on the dev split's facts (never the evaluation targets), and cached with
safetensors. For evaluation only, every run also computes the model's exact
gradient after the timed deletion and records the decoded-vs-true cosine.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..atomic import set_aside
from ..cost import phase
from ..data import ForgetRequest, Probe
from ..errors import UserError
from ..metric import MetricSpec, register_metric
from ..training.lora import LoraGrad, lora_probe, role_of
from ..training.lowrank import LowRank
from ..training.one_step import OneStepUnlearner, StepParams
from ..progress import bar
from ..unlearner import Context, at_least, existing_file, one_of, tuned
from .decoder import KINDS, CosineMeter, GradientDecoder, fit

AGGREGATES = ("before", "after")
MICRO_BATCH_TOKENS = 64  # benchmarks/cost.py at 426M: 0.10x FullGrad's memory at 0.51x the exact multi-view time (docs/cost.md)


@dataclass
class R2FParams(StepParams):
    rank: int = field(default=8, metadata={"help": "LoRA rank of the gradient probes (paper default 8)", "check": at_least(1)})
    decoder: str = field(default="two_sided", metadata={"help": "decoder form: two_sided, projection (the floor) or learned (the paper's MSE-fitted maps)", "check": one_of(*KINDS)})
    aggregate: str = field(default="before", metadata={"help": "average each fact's views, then decode (before; the paper's order) or decode every view, then average (after: closer to the exact gradient, 5x the memory)",
                                                           "check": one_of(*AGGREGATES)})
    decoder_path: str = field(default="", metadata={"help": "load this fitted decoder (.safetensors) instead of fitting one",
                                                    "check": existing_file})
    fit_examples: int = field(default=1000, metadata={"help": "max proxy examples for fitting (paper: 1k)", "check": at_least(1)})
    micro_batch_tokens: int = field(default=MICRO_BATCH_TOKENS, metadata={
        "help": "padded tokens per forward/backward pass (at most 8 sequences; 0: 8 sequences whatever their length): peak activation memory is one such pass's",
        "check": at_least(0)})

    def __post_init__(self) -> None:
        fitted = [f.name for f in fields(self) if f.name in ("decoder", "fit_examples")
                  and getattr(self, f.name) != f.default]
        if self.decoder_path and fitted:
            raise UserError(f"parameter {fitted[0]!r} of method 'r2f' shapes the decoder R2F fits, and decoder_path "
                            f"loads a fitted one; drop one of them.")


def units(views: Sequence[Sequence[Probe]], aggregate: str) -> list[list[Probe]]:
    """Groups of probes whose mean LoRA gradient is decoded as one: each fact's views
    (``before``) or each single phrasing (``after``). Every probe of ``views`` is in
    exactly one group, so the mean of the groups' gradients is the request's."""
    if aggregate not in AGGREGATES:
        raise UserError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {aggregate!r}.")
    per_fact = [list(column) for column in zip(*views)]
    return per_fact if aggregate == "before" else [[p] for fact in per_fact for p in fact]


def decoded(decoder: GradientDecoder, grads: list[dict[str, LoraGrad]]) -> dict[str, LowRank]:
    """The mean decoded gradient of the units, per layer, as factors."""
    return {name: LowRank.mean([decoder.decode(name, g[name]) for g in grads]) for name in grads[0]}


GRAD_COSINE = register_metric(MetricSpec("grad_cosine", "Grad cosine", "cosine", "decoded vs exact full gradient of "
                                         "the request (R2F's diagnostic)", digits=3, kind="diagnostic"))


class R2F(OneStepUnlearner):
    name = "r2f"
    description = "R2F (Liu et al., Recover-to-Forget): one step along a full gradient decoded from multi-view LoRA gradients."
    Params = tuned(R2FParams, step=0.0144)  # r2f-bench tune on the knowledge world's dev split (docs/tuning.md)
    uses_proxy = True  # the decoder is fitted on it
    inputs = frozenset({"views", "target_modules"})  # the LoRA gradients of every view, and the layers adapted
    result_columns = (GRAD_COSINE.name,)  # decoded vs exact gradient, from diagnostics()
    ablations = ("rank", "views", "transfer")

    @classmethod
    def dev_split_needed(cls, params: R2FParams) -> str | None:
        return None if params.decoder_path else ("R2F fits its decoder on the dev split's facts; use --dev-targets ≥ 1 "
                                                 "or --set decoder_path=FILE.")

    def setup(self, model: torch.nn.Module, ctx: Context) -> None:
        p = self.params
        self.decoder = GradientDecoder.load(Path(p.decoder_path).expanduser()) if p.decoder_path else self._fit_on_proxy(ctx)
        self.decoder.check_fits(p.rank, list(lora_probe(model, p.rank, ctx.target_modules, seed=ctx.seed).layers))

    def _fit_on_proxy(self, ctx: Context) -> GradientDecoder:
        p = self.params
        facts = ctx.retain_pool[: p.fit_examples]
        if ctx.proxy is None or not facts:
            raise UserError("R2F needs a proxy model and dev-split facts to fit its decoder; pass --proxy, or --set decoder_path=FILE.")
        views = ctx.make_views(facts)
        key = hashlib.sha256(json.dumps([ctx.proxy.key, p.rank, p.decoder, p.aggregate, p.loss, ctx.seed,
                                         [[v.prompt for v in view] for view in views]]).encode()).hexdigest()[:16]
        path = ctx.cache_dir / "decoders" / f"{p.decoder}-r{p.rank}-{p.aggregate}-{key}.safetensors"
        if path.exists():
            try:
                decoder = GradientDecoder.load(path)
                ctx.progress(f"r2f: decoder loaded from {path}")
                return decoder
            except UserError:
                set_aside(path, "not a readable decoder", ctx.progress)
        proxy, proxy_tok = ctx.proxy.load()
        decoder = fit_decoder(proxy, proxy_tok, views, p.rank, p.decoder, p.aggregate, p.loss, ctx.seed,
                              {"proxy": ctx.proxy.label, "fit_facts": str(len(facts))}, ctx.progress)
        decoder.save(path)
        ctx.progress(f"r2f: decoder fitted on {ctx.proxy.label} and saved to {path}")
        return GradientDecoder.load(path)  # the stored (float32) scalars, as every later run sees them

    def gradient(self, model, request: ForgetRequest, ctx: Context):
        p = self.params
        probe = lora_probe(model, p.rank, ctx.target_modules, seed=ctx.seed)
        grads = probe.gradients(ctx.tokenizer, units(request.views, p.aggregate), p.loss, p.micro_batch_tokens)
        with phase("decode"):
            update = decoded(self.decoder, grads)
        info = {"decoder": self.decoder.kind, "decoder_uses": self.decoder.uses, "aggregate": p.aggregate,
                "decoded_units": len(grads),
                "decoder_proxy": self.decoder.meta.get("proxy", "")}
        return update.__getitem__, info

    def diagnostics(self, original: torch.nn.Module, request: ForgetRequest, ctx: Context) -> dict[str, Any]:
        """Decoded vs exact gradient on the untouched model (evaluation only, untimed)."""
        meter = decoder_cosines(self.decoder, original, ctx.tokenizer, request.views, self.params.rank,
                                self.params.aggregate, self.params.loss, ctx.seed, ctx.target_modules)
        cos = meter.cosines()
        return {"grad_cosine": cos.pop("overall"), "grad_cosine_by_role": cos}


def decoder_cosines(decoder: GradientDecoder, model: torch.nn.Module, tokenizer: Any,
                    views: Sequence[Sequence[Probe]], rank: int, aggregate: str, loss: str,
                    seed: int, modules: Sequence[str] | None = None) -> CosineMeter:
    """Cosine of the decoded to the exact gradient of the whole request, per role and overall."""
    meter = CosineMeter()
    probe = lora_probe(model, rank, modules, seed=seed)
    estimate = decoded(decoder, probe.gradients(tokenizer, units(views, aggregate), loss))
    _, full = probe.exact(tokenizer, [p for v in views for p in v], loss)
    for name, truth in full.items():
        meter.add(role_of(name), estimate[name].left @ estimate[name].right, truth)
    return meter


def fit_decoder(proxy: torch.nn.Module, tokenizer: Any, views: Sequence[Sequence[Probe]], rank: int,
                kind: str, aggregate: str, loss: str, seed: int, meta: dict[str, str],
                progress: Callable[[str], None] = print) -> GradientDecoder:
    """Collect (LoRA gradient, full gradient) pairs on the proxy, one per decoding
    unit (:func:`units`: what R2F will decode on the model), and fit."""
    probe = lora_probe(proxy, rank, seed=seed)
    pairs = []
    for group in bar(units(views, aggregate), desc="r2f: decoder pairs", unit="pair"):
        g, f = probe.exact(tokenizer, group, loss)
        pairs.append({name: (g[name], f[name]) for name in g})
    return fit(pairs, kind, rank, {**meta, "aggregate": aggregate, "loss": loss,
                                   "views": str(len(views)), "facts": str(len(views[0]))})
