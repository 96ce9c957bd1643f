"""Frontiers: the matched-utility summaries on synthetic curves, the refusal of a method
without a knob, and a killed frontier run resuming without duplicates."""

from __future__ import annotations

import json

import fake_runner
import pytest

from r2f_bench.cli import main
from r2f_bench.frontier import area, best_usr, frontier, is_open
from r2f_bench.store import Store
from r2f_bench.unlearner import Strength

# (GUR, USR) in strength order: utility falls as forgetting rises
CURVE = [(100.0, 0.0), (98.0, 20.0), (92.0, 50.0), (80.0, 90.0)]


def test_usr_at_matched_gur_interpolates_between_strengths():
    assert best_usr(CURVE, 95.0) == pytest.approx(35.0)  # halfway from GUR 98 to 92
    assert best_usr(CURVE, 90.0) == pytest.approx(50 + 40 * 2 / 12)
    assert best_usr(CURVE, 100.0) == 0.0 and best_usr(CURVE, 50.0) == 90.0
    assert best_usr([(85.0, 60.0), (70.0, 95.0)], 90.0) == 0.0  # no strength keeps GUR >= 90
    # a curve that turns back keeps the best USR reached above the floor
    assert best_usr([(100.0, 0.0), (94.0, 40.0), (97.0, 30.0), (85.0, 70.0)], 95.0) == pytest.approx(30 + 40 * 2 / 12)
    assert is_open([(100.0, 0.0), (96.0, 10.0)], 95.0) and not is_open(CURVE, 95.0)
    # area: mean over floors 50..100 of the best USR: 90 below 80, then falling to 0 at 100
    assert 50.0 < area(CURVE) < 90.0 and area([(100.0, 0.0)]) == 0.0


def test_frontier_bootstraps_over_target_seed_pairs():
    units = [("t1", 0), ("t2", 0), ("t3", 0), ("t1", 1)]
    by_strength = {s: {u: (usr + i, gur - i) for i, u in enumerate(units)} for s, (gur, usr) in zip((0.1, 0.2, 0.4, 0.8), CURVE)}
    f = frontier("m", "step", by_strength, {u: (10.0, 99.0) for u in units}, {"step": "0.1"})
    assert [p["strength"] for p in f.points] == [0.1, 0.2, 0.4, 0.8]
    stat = f.usr_at[95.0]
    assert stat.n == 4 and stat.lo <= stat.mean <= stat.hi and stat.lo < stat.hi
    assert f.tuned["usr"].mean == 10.0 and f.auc.mean == pytest.approx(area([(g - 1.5, u + 1.5) for g, u in CURVE]))


def test_strength_points_are_log_spaced():
    assert Strength("step", 0.002, 0.2).points(3) == [0.002, 0.02, 0.2]
    assert len(Strength("lr", 1e-4, 1e-2).points(8)) == 8


def test_a_method_without_a_knob_is_refused_in_one_line(capsys, tmp_path):
    from r2f_bench.plugins import registry
    from r2f_bench.unlearner import Edit, Unlearner

    class Knobless(Unlearner):
        name = "knobless_test"

        def unlearn(self, model, request, ctx):
            return Edit(model)

    import types

    from r2f_bench import hookimpl

    registry().register(types.SimpleNamespace(register_unlearners=hookimpl(lambda register: register(Knobless))),
                        "knobless")
    try:
        assert main(["frontier", "--methods", "fullgrad,knobless_test", "--output", str(tmp_path)]) == 2
    finally:
        registry().unregister("knobless")
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: method 'knobless_test' declares no strength knob")
    assert not (tmp_path / "jobs").exists()  # refused before anything ran


def test_killed_frontier_resumes_without_duplicates(tmp_path, monkeypatch, capsys):
    argv = ["frontier", "--runner", "fake_runner", "--methods", "r2f,fullgrad", "--points", "3", "--seeds", "0,1",
            "--limit", "2", "--output", str(tmp_path), "--json", "--quiet"]
    fake_runner.CALLS.clear()
    monkeypatch.setenv("R2F_FAKE_INTERRUPT_AT", "7")
    assert main(argv) == 130  # killed after 7 targets
    assert len(Store(tmp_path)) == 7
    monkeypatch.delenv("R2F_FAKE_INTERRUPT_AT")
    capsys.readouterr()
    assert main(argv) == 0
    jobs = 2 * (3 + 1) * 2  # methods x (strengths + dev-tuned) x seeds
    assert len(Store(tmp_path)) == jobs * 2 == len(fake_runner.CALLS)  # each target ran exactly once
    assert len({(c["label"], c["target"]) for c in fake_runner.CALLS}) == len(fake_runner.CALLS)
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("[\n"):])
    assert [m["method"] for m in summary] == ["r2f", "fullgrad"]
    assert [p["strength"] for p in summary[0]["points"]] == [0.002, 0.02, 0.2]
    assert summary[0]["usr_at_gur95"]["n"] == 4 and "auc" in summary[1]
    written = {p.name for p in (tmp_path / "frontier").iterdir()}
    assert {"frontier.png", "tables.md", "tables.tex", "frontier.csv", "tables.html"} <= written


def test_tune_refines_between_the_strengths_that_cross_the_floor():
    from r2f_bench.tune import refinement

    rows = [({"step": s}, {"gur": g, "usr": u}) for s, g, u in
            (("0.001", 100.0, 0.0), ("0.1", 85.0, 60.0), ("0.01", 95.0, 20.0), ("1", 70.0, 90.0))]
    assert refinement(rows, "step", 90.0, 3) == [{"step": "0.0178"}, {"step": "0.0316"}, {"step": "0.0562"}]
    assert refinement(rows, "step", 50.0, 3) == []  # never crosses


def test_tables_flag_a_method_below_its_tuning_floor():
    from r2f_bench.tables import build_tables

    def record(method, target, gur):
        return {"method": method, "task": "rwku", "target": target, "seed": 0, "usr": 50.0, "gur": gur,
                "config": {"method": method, "task": "rwku", "seed": 0, "params": {}}, "params": {},
                "models": {"target": "m"}, "versions": {}, "data_revision": "r"}

    table1 = next(t for t in build_tables([record("a", "t1", 80.0), record("b", "t1", 97.0)]) if t.name == "table1")
    assert [label for label, _ in table1.rows] == ["a", "b"]
    assert "Below the 90% GUR floor their defaults were tuned for on the dev split (r2f-bench tune): a;" in table1.note


def test_variants_of_one_method_are_separate_curves(tmp_path, capsys):
    """``r2f@decoder=learned`` runs R2F with that parameter beside plain ``r2f``; a
    malformed entry or a bad value is one line before anything runs."""
    argv = ["frontier", "--runner", "fake_runner", "--methods", "r2f,r2f@decoder=learned", "--points", "2",
            "--seeds", "0", "--limit", "1", "--output", str(tmp_path), "--json", "--quiet"]
    fake_runner.CALLS.clear()
    assert main(argv) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("[\n"):])
    assert [m["method"] for m in summary] == ["r2f", "r2f@decoder=learned"]
    decoders = {json.loads(c["label"].split("/")[3]).get("decoder") for c in fake_runner.CALLS}
    assert decoders == {None, "learned"}
    for entry, message in (("r2f@decoder", "error: bad method entry 'r2f@decoder'"),
                           ("r2f@decoder=bogus", "error: parameter 'decoder' of method 'r2f' must be one of")):
        assert main(["frontier", "--methods", entry, "--output", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(message), err
    assert not (tmp_path / "bad").exists()
