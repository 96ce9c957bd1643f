"""The weights' snapshot on disk: bit-exact restore of tied, bfloat16 and float32 weights,
hooks and flags put back, a changed module tree refused, a valid safetensors file."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from r2f_bench.engine.embedded import build_tokenizer, EmbeddedSpec, new_embedded_model
from r2f_bench.engine.snapshot import Snapshot


def tiny_model(family: str, dtype: torch.dtype) -> torch.nn.Module:
    tok = build_tokenizer(["alpha beta gamma delta"])
    torch.manual_seed(0)
    return new_embedded_model(EmbeddedSpec.parse(f"embedded:{family}-h32-l2"), tok).to(dtype).eval()


def state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("family,dtype", [("gpt2", torch.float32), ("mistral", torch.bfloat16)])
def test_restore_is_bit_exact_after_every_weight_moved(tmp_path, family, dtype):
    model = tiny_model(family, dtype)
    before = state(model)
    snap = Snapshot(model, tmp_path / "w.safetensors")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    snap.restore(model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # the file is ordinary safetensors, one entry per distinct tensor (a tied weight once)
    saved = load_file(str(tmp_path / "w.safetensors"))
    everything = {**dict(model.named_buffers()), **model.state_dict()}  # non-persistent buffers too
    assert set(saved) <= set(everything) and all(torch.equal(saved[k], everything[k]) for k in saved)
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert len(saved) == len(everything) - tied


def test_a_broken_non_persistent_buffer_and_a_cast_are_put_back(tmp_path):
    """A method may set a buffer no state dict holds (the rotary frequencies) to NaN, or
    cast the model to bfloat16: both come back bit-exactly, float32 included."""
    model = tiny_model("mistral", torch.float32)
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    before = state(model)
    assert any(k not in before for k in buffers), "the rotary frequencies are a non-persistent buffer"
    snap = Snapshot(model, tmp_path / "w.safetensors")
    with torch.no_grad():
        for k, b in model.named_buffers():
            b.fill_(float("nan"))
    model.to(torch.bfloat16)
    snap.restore(model)
    assert all(v.dtype == before[k].dtype and torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(buffers[k], b) for k, b in model.named_buffers())


def test_restore_removes_hooks_and_gradients_and_puts_back_flags_and_mode(tmp_path):
    model = tiny_model("mistral", torch.float32)
    embed = model.get_input_embeddings()
    kept = embed.register_forward_hook(lambda m, i, o: None)  # present at the snapshot: stays
    snap = Snapshot(model, tmp_path / "w.safetensors")
    embed.register_forward_hook(lambda m, i, o: o * 0)
    embed.register_forward_pre_hook(lambda m, a, k: None, with_kwargs=True)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()  # a gradient on every parameter
    for p in model.parameters():
        p.requires_grad_(False)
    model.train()
    snap.restore(model)
    assert all(p.grad is None for p in model.parameters())
    assert list(embed._forward_hooks) == [kept.id] and not embed._forward_pre_hooks
    assert not embed._forward_pre_hooks_with_kwargs
    assert all(p.requires_grad for p in model.parameters()) and not model.training


def test_a_changed_module_tree_is_refused_not_half_restored(tmp_path):
    model = tiny_model("mistral", torch.float32)
    snap = Snapshot(model, tmp_path / "w.safetensors")
    model.model.layers[0].extra = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="modules changed"):
        snap.restore(model)


def test_hidden_states_still_come_after_a_restore(tmp_path):
    """transformers hooks the model the first time a forward asks for hidden states and
    never again; a restore that removes those hooks must let it hook the model anew."""
    model = tiny_model("mistral", torch.float32)
    snap = Snapshot(model, tmp_path / "w.safetensors")
    ids = torch.tensor([[1, 2, 3]])
    assert len(model(input_ids=ids, output_hidden_states=True).hidden_states) == 3  # embeddings + 2 layers
    snap.restore(model)
    assert len(model(input_ids=ids, output_hidden_states=True).hidden_states) == 3


def test_transformers_own_capturing_hooks_are_not_a_methods_change(tmp_path):
    """--control random_step refuses a deletion that changed more than weights, and a forward
    asking for hidden states (DeepCUT's) is not such a change; a hook of the method's own is."""
    model = tiny_model("mistral", torch.float32)
    snap = Snapshot(model, tmp_path / "w.safetensors")
    model(input_ids=torch.tensor([[1, 2, 3]]), output_hidden_states=True)
    assert any(m._forward_hooks for m in model.modules())  # transformers hooked it
    assert snap.beyond_parameters(model) is None
    model.model.layers[1].register_forward_hook(lambda *a: None)
    assert snap.beyond_parameters(model) == "registered a hook on module 'model.layers.1'"
    model.model.extra = torch.nn.Linear(2, 2)  # an adapter left attached: said, not a KeyError
    assert snap.beyond_parameters(model).startswith("changed the model's structure: its modules changed")


def test_a_full_disk_while_snapshotting_is_the_documented_line_and_leaves_nothing(tmp_path, monkeypatch):
    """Before: a raw ENOSPC traceback and a partial file beside the output."""
    import errno

    from r2f_bench.engine import snapshot as snapshot_module
    from r2f_bench.errors import UserError

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(snapshot_module.os, "fsync", full)
    with pytest.raises(UserError, match=r"^disk full while writing \S+untouched\.safetensors; free space"):
        Snapshot(torch.nn.Linear(2, 2), tmp_path / "untouched.safetensors")
    assert list(tmp_path.iterdir()) == []
