"""R2F and FullGrad really forget, keep neighbours, and R2F never holds a full gradient."""

from __future__ import annotations

import copy

import pytest
import torch
from numerics import assert_sums_close, tokens

from r2f_bench.data import ForgetRequest
from r2f_bench.training.encoding import encode
from r2f_bench.training.losses import answer_nll
from r2f_bench.engine.teaching import answer_accuracy

NEIGHBOUR_BOUND = 0.15  # max drop of neighbour answer-token accuracy allowed


def request_for(tiny, context, i=0):
    target = tiny["bench"].targets[i]
    return target, ForgetRequest(target=target.id, views=context.make_views(target.request),
                                 retain=tiny["bench"].retain_pool())


def run_method(name, tiny, context, **params):
    from r2f_bench.plugins import registry

    cls = registry().method(name)
    method = cls(cls.parse_params({k: str(v) for k, v in params.items()}))
    method.setup(tiny["model"], context)
    target, request = request_for(tiny, context)
    model = copy.deepcopy(tiny["model"])
    edit = method.unlearn(model, request, context)
    return method, target, request, edit


@pytest.mark.parametrize("name", ["r2f", "fullgrad", "fullgrad_multiview"])
def test_method_forgets_and_retains(name, tiny, context):
    """One step forgets the request while neighbours stay within the bound.

    The loss is pinned to ascent: on this 0.15M-parameter sample model the
    unlikelihood default (chosen on RWKU's dev split with the 1M-parameter embedded
    model, where it dominates ascent; docs/tuning.md) costs neighbours more."""
    method, target, request, edit = run_method(name, tiny, context, step=0.02, loss="ascent")
    tok, before = tiny["tok"], tiny["model"]
    facts = request.facts
    with torch.no_grad():
        nll_before = answer_nll(before, encode(tok, facts)).mean()
        nll_after = answer_nll(edit.model, encode(tok, facts)).mean()
    assert nll_after > nll_before + 0.5
    assert answer_accuracy(edit.model, tok, facts) < answer_accuracy(before, tok, facts) - 0.2
    neighbours = [p for s in ("neighbor_fb", "neighbor_qa") for p in target.probes[s]]
    assert answer_accuracy(edit.model, tok, neighbours) >= answer_accuracy(before, tok, neighbours) - NEIGHBOUR_BOUND
    assert any(not torch.equal(a, b) for a, b in zip(edit.model.parameters(), before.parameters()))


def test_r2f_records_decoder_and_cosine(tiny, context):
    method, target, request, edit = run_method("r2f", tiny, context)
    assert edit.info["decoder"] == "two_sided" and "proxy-fitted" in edit.info["decoder_uses"]
    diag = method.diagnostics(tiny["model"], request, context)
    assert diag["grad_cosine"] > 0.5 and "mlp_in" in diag["grad_cosine_by_role"]



def test_r2f_decoder_cache_follows_the_proxy_weights(tiny, context):
    """Two proxies under one name (say, rebuilt with another seed) never share a fitted decoder."""
    import dataclasses

    from r2f_bench.plugins import registry

    cls = registry().method("r2f")
    for key in ("proxy-weights-a", "proxy-weights-a", "proxy-weights-b"):
        proxy = dataclasses.replace(context.proxy, key=key)
        cls(cls.parse_params({"fit_examples": "4"})).setup(tiny["model"], dataclasses.replace(context, proxy=proxy))
    assert len(list((context.cache_dir / "decoders").glob("*.safetensors"))) == 2

def test_r2f_holds_no_full_gradient(tiny, context):
    """No parameter of the target ever gets a .grad during an R2F deletion."""
    from r2f_bench.r2f import R2F

    method = R2F()
    method.setup(tiny["model"], context)
    _, request = request_for(tiny, context)
    model = copy.deepcopy(tiny["model"])
    base = {id(p) for p in model.parameters()}
    seen = []
    original_backward = torch.Tensor.backward

    def spy(self, *a, **k):
        original_backward(self, *a, **k)
        seen.extend(p for p in model.parameters() if id(p) in base and p.grad is not None)

    torch.Tensor.backward = spy
    try:
        method.unlearn(model, request, context)
    finally:
        torch.Tensor.backward = original_backward
    assert not seen
    assert all(p.grad is None for p in model.parameters())


def test_nan_weights_give_a_clear_error(tiny, context):
    from r2f_bench.errors import UserError

    method, target, request, _ = run_method("fullgrad", tiny, context)
    broken = copy.deepcopy(tiny["model"])
    with torch.no_grad():
        next(broken.parameters()).fill_(float("nan"))
    with pytest.raises(UserError, match="not finite|NaN"):
        method.unlearn(broken, request, context)


def test_r2f_peak_memory_is_a_fraction_of_fullgrads(tiny, context, tmp_path):
    """One R2F deletion (LoRA backward, decode and apply one matrix at a time) peaks
    below one FullGrad deletion (a gradient buffer for every matrix) by at least half
    of that buffer: the memory claim of the paper. Both see the same single view of 8
    facts, one micro-batch, so their activations are the same and the difference is
    the gradient buffer. (With more views R2F's activations grow with the longest
    paraphrases; benchmarks/cost.py measures whole deletions.)"""
    from r2f_bench.r2f.decoder import GradientDecoder
    from r2f_bench.cost import measure
    from r2f_bench.engine.embedded import EmbeddedSpec, new_embedded_model
    from r2f_bench.plugins import registry

    wide = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h1024-l2"), tiny["tok"]).eval()
    gradient_mb = sum(m.weight.numel() for n, m in wide.named_modules() if n.endswith("proj")) * 4 / 2**20
    decoder = tmp_path / "decoder.safetensors"
    GradientDecoder(kind="two_sided", rank=8, roles={r: {"rho": 0.1, "alpha": 1.0} for r in
                                                     ("attn_in", "attn_out", "mlp_in", "mlp_out")}).save(decoder)
    target = tiny["bench"].targets[0]
    request = ForgetRequest(target=target.id, views=[target.request[:8]], retain=[])
    peaks = {}
    for name, params in (("fullgrad", {}), ("r2f", {"decoder_path": str(decoder)})):
        cls = registry().method(name)
        method = cls(cls.parse_params(params))
        method.setup(wide, context)
        model = copy.deepcopy(wide)
        with measure() as cost:
            method.unlearn(model, request, context)
        peaks[name] = cost.peak_mem_mb
    assert peaks["fullgrad"] > gradient_mb  # it holds every matrix's gradient, and activations
    assert peaks["r2f"] < peaks["fullgrad"] - 0.5 * gradient_mb, (peaks, gradient_mb)


def test_a_loaded_decoder_is_recorded_as_the_kind_it_is_and_fit_settings_beside_it_are_refused(tiny, context,
                                                                                              tmp_path):
    """Before: a projection decoder loaded with decoder_path was recorded as the default two_sided,
    and decoder= or fit_examples= beside it were ignored under a new store key."""
    from r2f_bench.errors import UserError
    from r2f_bench.plugins import registry
    from r2f_bench.r2f.decoder import GradientDecoder

    path = tmp_path / "decoder.safetensors"
    GradientDecoder(kind="projection", rank=8, roles={r: {"rho": 0.1, "alpha": 1.0} for r in
                                                      ("attn_in", "attn_out", "mlp_in", "mlp_out")}).save(path)
    r2f = registry().method("r2f")
    method = r2f(r2f.parse_params({"decoder_path": str(path)}))
    method.setup(tiny["model"], context)
    target = tiny["bench"].targets[0]
    _, info = method.gradient(tiny["model"], ForgetRequest(target=target.id, views=[target.request[:2]], retain=[]),
                              context)
    assert info["decoder"] == "projection"
    for name, value in (("decoder", "learned"), ("fit_examples", "10")):
        with pytest.raises(UserError, match=rf"^parameter '{name}' of method 'r2f' shapes the decoder R2F fits, and "
                                            r"decoder_path loads a fitted one; drop one of them\.$"):
            r2f.parse_params({"decoder_path": str(path), name: value})


def test_fused_fullgrad_takes_fullgrads_step_without_its_buffer(tiny, context):
    """The LOMO-style fused update lands on FullGrad's weights (same loss, view and
    relative step), while never holding a gradient for more than one matrix."""
    _, _, request, plain = run_method("fullgrad", tiny, context, step=0.02, loss="ascent")
    assert len(request.facts) <= 8  # one micro-batch: FullGrad's chunking cannot change the step
    _, _, _, fused = run_method("fullgrad_fused", tiny, context, step=0.02, loss="ascent")
    original = list(tiny["model"].parameters())
    assert max(float((a - b).norm()) for a, b in zip(plain.model.parameters(), original)) > 0
    n = tokens(tiny["tok"], request.facts)
    for a, b, w in zip(fused.model.parameters(), plain.model.parameters(), original):
        # both steps sum the request's n tokens × the matrix's widest side of products, in another order
        assert_sums_close(a - w, b - w, n * max(w.shape))
    assert fused.info["grad_norm"] == pytest.approx(plain.info["grad_norm"], rel=1e-4)
    assert all(p.grad is None for p in fused.model.parameters())
