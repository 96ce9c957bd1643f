"""The gradient decoder: exact on low-rank gradients, good on held-out facts, safe to store."""

from __future__ import annotations

import pytest
import torch
from numerics import assert_sums_close, tokens

from r2f_bench.r2f.decoder import GradientDecoder, reconstruct
from r2f_bench.errors import UserError
from r2f_bench.training.lora import LoraGrad
from r2f_bench.r2f.method import decoder_cosines, fit_decoder


def sketch(G: torch.Tensor, r: int, s: float = 1.0, seed: int = 0) -> LoraGrad:
    gen = torch.Generator().manual_seed(seed)
    A = torch.randn(r, G.shape[1], generator=gen) / G.shape[1] ** 0.5
    B = torch.randn(G.shape[0], r, generator=gen) * 1e-3
    return LoraGrad(A=A, B=B, gA=s * B.T @ G, gB=s * G @ A.T, scale=s)


@pytest.mark.parametrize("rank_of_g", [1, 4, 8])
def test_two_sided_is_exact_when_gradient_rank_fits(rank_of_g):
    gen = torch.Generator().manual_seed(1)
    G = torch.randn(48, rank_of_g, generator=gen) @ torch.randn(rank_of_g, 40, generator=gen)
    est = reconstruct(sketch(G, r=8, s=2.0), "two_sided", rho=1e-6)
    assert torch.nn.functional.cosine_similarity(est.flatten(), G.flatten(), dim=0) > 0.99


def test_projection_floor_is_worse_on_full_rank():
    G = torch.randn(64, 64, generator=torch.Generator().manual_seed(2))
    est = reconstruct(sketch(G, r=8), "projection", rho=0.0)
    assert torch.nn.functional.cosine_similarity(est.flatten(), G.flatten(), dim=0) < 0.6


def test_fit_on_proxy_transfers_to_target_on_held_out_facts(tiny, context):
    bench = tiny["bench"]
    dev_views = context.make_views(bench.retain_pool())
    decoder = fit_decoder(tiny["proxy"], tiny["proxy_tok"], dev_views, 8, "two_sided", "before", "ascent", 0,
                          {"proxy": "tiny-proxy"}, progress=lambda m: None)
    held_out = bench.targets[0].request[:6]
    cos = []
    for fact in held_out:
        views = context.make_views([fact])
        cos.append(decoder_cosines(decoder, tiny["model"], tiny["tok"], views, 8, "before", "ascent", 0).cosines()["overall"])
    # a 5-view average of one fact on a width-64 target, decoded by a width-32 proxy's fit
    assert sum(cos) / len(cos) > 0.9, cos


def test_learned_decoder_fits_by_mse_and_transfers_at_least_as_well_as_its_special_case(tiny, context, tmp_path):
    """The paper's decoder (r × r maps fitted by least squares on proxy pairs) contains
    the projection floor (W_B = I, W_A = 0): on held-out facts of a wider target it must
    do at least about as well, and it survives a save/load round trip."""
    bench = tiny["bench"]
    dev_views = context.make_views(bench.retain_pool())
    fit = lambda kind: fit_decoder(tiny["proxy"], tiny["proxy_tok"], dev_views, 8, kind, "before", "ascent", 0,
                                   {"proxy": "tiny-proxy"}, progress=lambda m: None)
    learned, projection = fit("learned"), fit("projection")
    assert set(learned.maps) == {"attn_in", "attn_out", "mlp_in", "mlp_out"}
    learned.save(tmp_path / "learned.safetensors")
    loaded = GradientDecoder.load(tmp_path / "learned.safetensors")
    assert loaded.kind == "learned" and all(torch.equal(loaded.maps[r], learned.maps[r]) for r in learned.maps)
    cos = {}
    for name, decoder in (("learned", loaded), ("projection", projection)):
        cos[name] = sum(decoder_cosines(decoder, tiny["model"], tiny["tok"], context.make_views([fact]), 8, "before",
                                        "ascent", 0).cosines()["overall"] for fact in bench.targets[0].request[:6]) / 6
    assert cos["learned"] > cos["projection"] - 0.02, cos


def test_save_load_round_trip_and_mismatch(tmp_path):
    d = GradientDecoder(kind="two_sided", rank=8, roles={"attn_in": {"rho": 0.1, "alpha": 1.5},
                                                         "mlp_out": {"rho": 0.2, "alpha": 0.9}},
                        meta={"proxy": "p"})
    d.save(tmp_path / "d.safetensors")
    e = GradientDecoder.load(tmp_path / "d.safetensors")
    assert e.roles.keys() == d.roles.keys() and e.kind == "two_sided" and e.rank == 8
    assert e.roles["attn_in"]["alpha"] == pytest.approx(1.5) and e.meta["proxy"] == "p"
    with pytest.raises(UserError, match="fitted for LoRA rank 8 but the target uses rank 4"):
        e.check_fits(4, ["model.layers.0.self_attn.q_proj"])
    with pytest.raises(UserError, match="lacks layer roles attn_out"):
        e.check_fits(8, ["model.layers.0.self_attn.o_proj"])
    (tmp_path / "bad.safetensors").write_bytes(b"not a decoder")
    with pytest.raises(UserError, match="is not an r2f-bench decoder"):
        GradientDecoder.load(tmp_path / "bad.safetensors")
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(str(tmp_path / "d.safetensors"), framework="pt") as f:
        meta = f.metadata()
    save_file({"rho": torch.tensor([0.1]), "alpha": torch.tensor([1.5, 0.9])}, str(tmp_path / "short.safetensors"),
              metadata=meta)  # one rho for two roles: an IndexError before
    with pytest.raises(UserError, match=r"short.safetensors is not an r2f-bench decoder \(ValueError\)"):
        GradientDecoder.load(tmp_path / "short.safetensors")


def test_streamed_sketches_equal_one_exact_backward_per_group(tiny, context):
    """The hook-assembled per-group LoRA gradients R2F uses, streamed in micro-batches of
    any token budget, are the sketches of each group's exact gradient."""
    from r2f_bench.training.lora import lora_probe
    from r2f_bench.r2f.method import units

    facts = tiny["bench"].targets[0].request[:5]
    groups = units(context.make_views(facts), "before")
    probe = lora_probe(tiny["model"], 8, seed=0)
    for loss, budget in (("ascent", 0), ("unlikelihood", 0), ("unlikelihood", 40)):
        streamed = probe.gradients(tiny["tok"], groups, loss, max_tokens=budget)
        single = [probe.exact(tiny["tok"], g, loss)[0] for g in groups]
        for group, mine, ref in zip(groups, streamed, single):
            n = tokens(tiny["tok"], group)
            for name in ref:
                # ∇A = s·Σ_t (Bᵀδ_t) x_tᵀ sums n tokens × d_out products per element, ∇B = s·Σ_t δ_t (A x_t)ᵀ
                # n tokens × d_in; the two paths add them in another order (micro-batches vs one backward)
                d_out, d_in = ref[name].B.shape[0], ref[name].A.shape[1]
                assert_sums_close(mine[name].gA, ref[name].gA, n * d_out)
                assert_sums_close(mine[name].gB, ref[name].gB, n * d_in)


def test_probe_sketches_are_what_a_peft_adapter_reports(tiny, context):
    """A PEFT LoRA adapter with the probe's A and a B shrunk towards 0 (so its own forward
    adds nothing) gets the factor gradients the hooks compute, ∇A scaled with B."""
    from r2f_bench.training.lora import lora_adapters, lora_layers, lora_probe
    from r2f_bench.training.losses import unlearning_loss

    probes = context.make_views(tiny["bench"].targets[0].request[:2])[0]
    probe = lora_probe(tiny["model"], 8, seed=3)
    sketches = probe.gradients(tiny["tok"], [probes], "ascent")[0]
    shrink = 1e-3
    with lora_adapters(tiny["model"], 8) as peft_model:
        layers = lora_layers(peft_model)
        with torch.no_grad():
            for name, layer in layers.items():
                layer.lora_A["default"].weight.copy_(probe.factors[name][0])
                layer.lora_B["default"].weight.copy_(probe.factors[name][1] * shrink)
        unlearning_loss(peft_model, tiny["tok"], probes, "ascent").backward()
        for name, layer in layers.items():
            for mine, theirs in ((sketches[name].gA * shrink, layer.lora_A["default"].weight.grad),
                                 (sketches[name].gB, layer.lora_B["default"].weight.grad)):
                assert float((mine - theirs).norm() / theirs.norm()) < 1e-3, name
