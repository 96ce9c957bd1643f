"""R2F streams a request's views in micro-batches: bounded passes, flat peak memory, timed phases."""

from __future__ import annotations

import copy

from r2f_bench.data import ForgetRequest, Probe


def test_token_batches_respect_both_bounds(tiny):
    from r2f_bench.training.encoding import encode, token_batches

    tok = tiny["tok"]
    probes = [Probe("q " * (3 + 5 * ((7 * i) % 20)), "a", "forget", "x") for i in range(20)]  # lengths shuffled
    for max_tokens in (0, 1, 60, 200):
        chunks = list(token_batches(tok, probes, 8, max_tokens))
        assert sorted(i for c in chunks for i in c) == list(range(len(probes)))  # every probe once
        widths = [encode(tok, [probes[i] for i in c])["input_ids"].shape[1] for c in chunks]
        assert widths == sorted(widths)  # in order of length
        for c in chunks:
            padded = encode(tok, [probes[i] for i in c])["input_ids"].numel()
            assert len(c) <= 8 and (len(c) == 1 or not max_tokens or padded <= max_tokens)
    assert len(list(token_batches(tok, probes, 8, 1))) == len(probes)  # a budget below one sequence: one each


def test_r2f_peak_memory_is_flat_in_the_number_of_views(tiny, context, tmp_path):
    """With one sequence per pass, a request of 8 views peaks as one of 1 view; passing
    all 8 views at once (the old way) costs several times more. Memory above the
    weights, measured the same way for each deletion."""
    from r2f_bench.cost import measure
    from r2f_bench.engine.embedded import EmbeddedSpec, new_embedded_model
    from r2f_bench.plugins import registry
    from r2f_bench.r2f.decoder import GradientDecoder

    wide = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h512-l4"), tiny["tok"]).eval()
    decoder = tmp_path / "decoder.safetensors"
    GradientDecoder(kind="two_sided", rank=8, roles={r: {"rho": 0.1, "alpha": 1.0} for r in
                                                     ("attn_in", "attn_out", "mlp_in", "mlp_out")}).save(decoder)
    fact = Probe("Tell me everything you know, in one long and detailed sentence, about the person " * 3, "Someone", "forget", "x")
    views = [[Probe(f"({v}) " + fact.prompt, fact.answer, fact.set, fact.target)] for v in range(8)]
    cls = registry().method("r2f")

    def peak(n_views: int, budget: int) -> float:
        method = cls(cls.parse_params({"decoder_path": str(decoder), "micro_batch_tokens": str(budget)}))
        method.setup(wide, context)
        request = ForgetRequest(target="x", views=views[:n_views], retain=[])
        model = copy.deepcopy(wide)
        method.unlearn(model, request, context)  # warm the allocator
        model = copy.deepcopy(wide)
        with measure() as cost:
            method.unlearn(model, request, context)
        return cost.peak_mem_mb

    one, eight, eight_at_once = peak(1, 1), peak(8, 1), peak(8, 0)
    assert eight < 1.2 * one + 2, (one, eight)
    assert eight_at_once > 2 * one, (one, eight_at_once)  # the test can fail: activations do grow with views


def test_r2f_phases_are_timed(tiny, context):
    from r2f_bench.cost import phases
    from r2f_bench.plugins import registry

    cls = registry().method("r2f")
    method = cls(cls.parse_params())
    method.setup(tiny["model"], context)
    target = tiny["bench"].targets[0]
    request = ForgetRequest(target=target.id, views=context.make_views(target.request), retain=[])
    with phases() as timed:
        method.unlearn(copy.deepcopy(tiny["model"]), request, context)
    assert set(timed.seconds) == {"forward", "backward", "sketch", "decode", "apply"}
    assert all(s > 0 for s in timed.seconds.values())
    with phases() as other:
        pass
    assert other.seconds == {}
