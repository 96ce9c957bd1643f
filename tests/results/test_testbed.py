"""The acceptance checks' curve store: a cut-off A1–A4 run resumes from the curves it measured,
keyed by what they were measured on, and never trusts a file it cannot read back."""

from __future__ import annotations

import json

import pytest

from r2f_bench.engine.config import RunConfig
from r2f_bench.engine.run import Run
from r2f_bench.results import testbed
from r2f_bench.results.sweep import target_keys
from r2f_bench.results.testbed import CurveStore, unit_curve
from r2f_bench.tasks.rwku.world import WorldConfig, write

CURVE = [(100.0, 0.0, 0.0, 0.0), (97.5, 40.0, 2.5, 5.0), (80.0, 90.0, 20.0, 30.0)]


def keys(world, seed: int = 0, **fields) -> dict[str, str]:
    return target_keys(Run(RunConfig(method="grad_ascent", task="rwku", data_dir=str(world), limit=3, dev_targets=2,
                                     seed=seed, **fields), progress=lambda m: None))


def test_a_curve_is_keyed_by_the_world_content_and_the_run_not_where_the_world_lies(tmp_path):
    """check_world writes its world into a fresh temporary folder each time: the same world (same
    generator seed) in another folder must find its curves, another world or run seed must not."""
    cfg = WorldConfig(seed=3, people=60, targets=6)
    a, b = write(cfg, tmp_path / "a"), write(cfg, tmp_path / "b")
    other = write(WorldConfig(seed=4, people=60, targets=6), tmp_path / "c")
    first = keys(a, output=str(tmp_path / "out1"))
    assert first == keys(b, output=str(tmp_path / "out2"))
    assert set(first.values()).isdisjoint(keys(other).values())
    assert set(first.values()).isdisjoint(keys(a, seed=1).values())


def test_a_measured_curve_is_read_back_not_measured_again(tmp_path, monkeypatch):
    measured = []

    def target_curve(run, target, points, condition):
        measured.append((target, condition))
        return CURVE

    monkeypatch.setattr(testbed, "target_curve", target_curve)
    store = CurveStore(tmp_path / "curves", print)
    assert unit_curve(None, "t1", [0.1, 0.2], "request", "k1", store) == CURVE
    assert unit_curve(None, "t1", [0.1, 0.2], "request", "k1", CurveStore(tmp_path / "curves", print)) == CURVE
    assert measured == [("t1", "request")]
    # another condition, strengths or unit is another curve
    unit_curve(None, "t1", [0.1, 0.2], "random_step", "k1", store)
    unit_curve(None, "t1", [0.1, 0.3], "request", "k1", store)
    unit_curve(None, "t2", [0.1, 0.2], "request", "k2", store)
    assert len(measured) == 4
    unit_curve(None, "t1", [0.1, 0.2], "request", "k1", None)  # no store: always measured
    assert len(measured) == 5


@pytest.mark.parametrize("text", ['[[100.0, 0.0, 0.0, 0.0], [97.5, 40', '[[100.0, 0.0, 0.0, 0.0]]',
                                  '[[100.0, 0.0], [97.5, 40.0], [80.0, 90.0]]', '{"a": 1}', '[["x", 0, 0, 0]]'])
def test_a_curve_file_that_does_not_read_back_is_set_aside_and_measured_again(tmp_path, text):
    """A cut write, a curve of other strengths' length, another shape: never trusted."""
    said: list[str] = []
    store = CurveStore(tmp_path, said.append)
    key = CurveStore.key("k", "request", [0.1, 0.2])
    (tmp_path / f"{key}.json").write_text(text)
    assert store.read(key, len(CURVE)) is None
    assert len(said) == 1 and "rebuilt" in said[0]
    assert not (tmp_path / f"{key}.json").exists()
    store.write(key, CURVE)
    assert store.read(key, len(CURVE)) == CURVE
    assert json.loads((tmp_path / f"{key}.json").read_text()) == [list(p) for p in CURVE]
