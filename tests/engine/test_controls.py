"""--control: the negative controls a deletion must beat, run and scored as the deletion is
(another target's request; a random step of the deletion's size), stored as rows of their own."""

from __future__ import annotations

import pytest
import torch

from r2f_bench.cli import main
from r2f_bench.engine.controls import other_target, step_seed
from r2f_bench.engine.weights import Weights
from r2f_bench.errors import UserError
from r2f_bench.results.store import Store


def test_the_stand_in_request_is_the_next_targets_cyclically():
    assert [other_target(["a", "b", "c"], t) for t in "abc"] == ["b", "c", "a"]


def test_each_target_of_a_run_gets_its_own_step_seed():
    assert step_seed(0, "a") == step_seed(0, "a")
    assert len({step_seed(0, "a"), step_seed(0, "b"), step_seed(1, "a")}) == 3


def test_each_seed_draws_its_own_random_step(tmp_path):
    """One direction for every target would make the paired test over targets count one draw many times."""
    from r2f_bench.engine.snapshot import Snapshot

    def step(seed: int) -> torch.Tensor:
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 16)
        start = model.weight.detach().clone()
        snapshot = Snapshot(model, tmp_path / f"s{seed}.safetensors")
        with torch.no_grad():
            model.weight.add_(0.1)
        snapshot.randomize_step(model, seed)
        return (model.weight.detach() - start).flatten()

    assert torch.equal(step(1), step(1)) and not torch.allclose(step(1), step(2))


def test_a_random_step_keeps_each_tensors_step_norm_and_changes_its_direction(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))
    weights = Weights(model, tmp_path, "m")
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        model[0].weight.add_(0.1 * torch.ones(8, 8))  # a deletion that moved one tensor
    step = model[0].weight.detach() - start["0.weight"]
    weights.randomize_step(weights.edited(), seed=3)
    moved = model[0].weight.detach() - start["0.weight"]
    assert torch.allclose(moved.norm(), step.norm(), rtol=1e-5)
    assert torch.nn.functional.cosine_similarity(moved.flatten(), step.flatten(), dim=0).abs() < 0.5
    for name, p in model.named_parameters():
        if name != "0.weight":
            assert torch.equal(p, start[name])  # what the deletion left alone stays alone


def _rows(out) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for r in Store(out).records():
        rows.setdefault(r["config"]["control"], []).append(r)
    return rows


def test_a_random_step_is_refused_where_the_deletion_changed_more_than_weights(tmp_path):
    """A hook or a written buffer would survive the random step, keeping part of the real edit."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    weights = Weights(model, tmp_path, "plugin")
    weights.edited()[0].weight.data.add_(0.1)
    weights.randomize_step(model, seed=1)  # a weight step alone: randomised as asked
    weights.to_start()
    weights.edited()[0].register_forward_hook(lambda *a: None)
    with pytest.raises(UserError, match=r"method 'plugin' also registered a hook on module '0', which a random step"):
        weights.randomize_step(model, seed=1)
    weights.to_start()
    weights.edited()[1].running_mean.add_(1.0)
    with pytest.raises(UserError, match=r"also wrote the buffer '1\.running_mean'"):
        weights.randomize_step(model, seed=1)


def test_the_deletion_beats_its_controls_on_the_demo(tmp_path, monkeypatch, capsys):
    """FullGrad on the demo forgets far more of a target than the same step made for another
    target, or a random step of its size; each control is a row of its own in the store."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    seeds = []
    randomize = Weights.randomize_step
    monkeypatch.setattr(Weights, "randomize_step", lambda self, result, seed: (seeds.append(seed), randomize(self, result, seed)))
    out = tmp_path / "out"
    for control in ("none", "other_request", "random_step"):
        assert main(["--method", "fullgrad", "--task", "rwku", "--control", control, "--rap-steps", "0",
                     "--threads", "1", "--output", str(out), "--quiet"]) == 0
    rows = _rows(out)
    mean = lambda control: sum(r["usr"] for r in rows[control]) / len(rows[control])
    assert {c: len(rs) for c, rs in rows.items()} == {"none": 3, "other_request": 3, "random_step": 3}
    targets = sorted(r["target"] for r in rows["none"])
    assert sorted(r["request_of"] for r in rows["other_request"]) == targets
    assert all(r["request_of"] != r["target"] for r in rows["other_request"])
    assert all(r["request_of"] == r["target"] for r in rows["none"] + rows["random_step"])
    assert mean("none") > mean("other_request") + 30 and mean("none") > mean("random_step") + 30
    assert len(set(seeds)) == len(rows["random_step"]) == 3  # a direction of its own per target
    shares = {c: sorted(round(r["budget"]["weights_changed"], 3) for r in rows[c]) for c in rows}
    assert shares["random_step"] == shares["none"]  # the deletion's own cost and reach, then randomised
    # rows of their own; the deletion's row keeps the method's name, so it stays the paired table's default baseline
    assert main(["table", "--output", str(out), "--format", "md"]) == 0
    table = capsys.readouterr().out
    for row in ("| fullgrad |", "| fullgrad (control: other_request) |", "| fullgrad (control: random_step) |",
                "| fullgrad (control: other_request) − fullgrad |"):
        assert row in table, row


@pytest.mark.parametrize("argv,line", [
    (["--method", "fullgrad", "--control", "other_request", "--limit", "1"],
     "--control other_request unlearns another evaluation target's request, and this run has one target; pass two "
     "or more (--targets or --limit)."),
    (["--method", "eco", "--control", "random_step"],
     "--control random_step replaces a deletion's weight step, and method 'eco' edits no weights; use --control "
     "other_request."),
    (["--method", "fullgrad", "--control", "other_request", "--sequential"],
     "--control other_request with --sequential would score each target after its own request was unlearned (by "
     "the step before); drop one of them."),
    (["--method", "fullgrad", "--control", "random_step", "--dtype", "bfloat16"],
     "--control random_step needs --dtype float32 (in bfloat16 a random step of a deletion's norm, spread over every "
     "weight, mostly rounds away)."),
    (["--method", "fullgrad", "--control", "random_step", "--save-model", "m"],
     "--save-model with --control would save a control under the deletion's checkpoint names; save the deletion's "
     "models in a run without --control."),
])
def test_a_control_that_cannot_run_is_one_line(argv, line, tmp_path, capsys):
    assert main([*argv, "--task", "rwku", "--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {line}"]
