"""Targets spread over devices: R2F's probe, decode and apply work through Accelerate's
hooks and make the same edit; the new placement options keep older store keys."""

from __future__ import annotations

import copy

from numerics import assert_sums_close, tokens

from r2f_bench.data import ForgetRequest


def test_r2f_edit_on_a_dispatched_model_equals_the_plain_one(tiny, context, tmp_path):
    """The tiny target split block by block over a device map (all CPU here: the hooks
    that move inputs between a sharded model's devices are forced on) gets the edit the
    undivided model gets."""
    from r2f_bench.engine.pretrained import dispatch
    from r2f_bench.plugins import registry
    from r2f_bench.r2f.decoder import GradientDecoder

    decoder = tmp_path / "decoder.safetensors"
    GradientDecoder(kind="two_sided", rank=8, roles={r: {"rho": 0.1, "alpha": 1.0} for r in
                                                     ("attn_in", "attn_out", "mlp_in", "mlp_out")}).save(decoder)
    target = tiny["bench"].targets[0]
    request = ForgetRequest(target=target.id, views=context.make_views(target.request), retain=[])
    blocks = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu", "lm_head": "cpu",
              **{f"model.layers.{i}": "cpu" for i in range(len(tiny["model"].model.layers))}}
    sharded = dispatch(copy.deepcopy(tiny["model"]), blocks, force_hooks=True)
    assert all(hasattr(layer, "_hf_hook") for layer in sharded.model.layers)
    cls = registry().method("r2f")
    edits = []
    for model in (copy.deepcopy(tiny["model"]), sharded):
        method = cls(cls.parse_params({"decoder_path": str(decoder), "micro_batch_tokens": "64"}))
        method.setup(model, context)
        edits.append(method.unlearn(model, request, context))
    plain, spread = (dict(e.model.named_parameters()) for e in edits)
    original = dict(tiny["model"].named_parameters())
    assert max(float((plain[n] - p).abs().max()) for n, p in original.items()) > 0
    n = tokens(tiny["tok"], [p for view in request.views for p in view])
    for name, weight in plain.items():
        # each edit sums the request's n tokens × the layer's widest side of products (then one
        # rounding of w + Δ); the hooks may change the order in which they are added
        assert_sums_close(spread[name] - original[name], weight - original[name], n * max(weight.shape))


def test_default_dtype_keeps_the_keys_of_older_stores():
    from r2f_bench.engine.config import RunConfig
    from r2f_bench.results.store import job_key

    new = RunConfig(method="r2f", task="rwku").to_dict()
    old = {k: v for k, v in new.items() if k not in ("dtype", "device_map")}
    assert job_key(new, "t", "rev", {}) == job_key(old, "t", "rev", {})
    assert job_key({**new, "dtype": "bfloat16"}, "t", "rev", {}) != job_key(old, "t", "rev", {})
    assert job_key({**new, "device_map": "auto"}, "t", "rev", {}) == job_key(new, "t", "rev", {})
