"""The run's one model and its snapshots: put back after an edit, kept in sequential
mode, a changed structure refused in one line, the folder gone with the object."""

from __future__ import annotations

import gc

import pytest
import torch

from r2f_bench.engine.weights import CURRENT, UNTOUCHED, Weights
from r2f_bench.errors import UserError


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 2))


def step(m: torch.nn.Module, by: float) -> None:
    with torch.no_grad():
        for p in m.parameters():
            p.add_(by)


def test_an_edited_model_is_put_back_and_an_unedited_one_left_alone(tmp_path):
    w = Weights(model(), tmp_path, "m")
    untouched = [p.clone() for p in w.model.parameters()]
    step(w.edited(), 1.0)
    assert w.at(UNTOUCHED) is w.model and all(torch.equal(p, q) for p, q in zip(w.model.parameters(), untouched))
    step(w.model, 1.0)  # changed without edited(): the weights believe it untouched, so nothing is read back
    assert not torch.equal(w.at(UNTOUCHED)[0].bias, untouched[1])


def test_sequential_deletions_start_from_the_kept_result(tmp_path):
    w = Weights(model(), tmp_path, "m")
    untouched = [p.clone() for p in w.model.parameters()]
    step(w.edited(), 1.0)
    assert all(torch.equal(p, q) for p, q in zip(w.to_start().parameters(), untouched))
    step(w.edited(), 1.0)
    result = [p.clone() for p in w.model.parameters()]
    w.keep(w.model)
    step(w.edited(), 1.0)  # an attack on the result
    assert all(torch.equal(p, q) for p, q in zip(w.to_start().parameters(), result))
    assert all(torch.equal(p, q) for p, q in zip(w.at(UNTOUCHED).parameters(), untouched))
    assert all(torch.equal(p, q) for p, q in zip(w.at(CURRENT).parameters(), result))
    with pytest.raises(UserError, match="method 'm' returned another model object. Drop --sequential."):
        w.keep(model())


def test_a_changed_structure_is_one_line_naming_the_method(tmp_path):
    w = Weights(model(), tmp_path, "m")
    w.edited().append(torch.nn.Linear(2, 2))
    with pytest.raises(UserError, match="method 'm' left the model's structure changed .* merge_and_unload"):
        w.at(UNTOUCHED)


def test_the_snapshots_folder_goes_with_the_weights(tmp_path):
    w = Weights(model(), tmp_path, "m")
    assert len(list(tmp_path.glob(".weights-*/untouched.safetensors"))) == 1
    del w
    gc.collect()
    assert not list(tmp_path.glob(".weights-*"))
