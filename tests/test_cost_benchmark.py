"""benchmarks/cost.py's fit check: a method's requirement above the weights is extrapolated
linearly in depth from 1 and 2 blocks, and a method that cannot fit is never run."""

from __future__ import annotations

import sys
from argparse import Namespace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import cost  # noqa: E402  (benchmarks/ on the path: a broken script fails here, never skips)


@pytest.fixture
def children(monkeypatch):
    """cost.child replaced by a stand-in: peak 100 MB at 1 block, 150 MB at 2, 900 MB at any other depth."""
    calls: list[int | None] = []

    def child(args, size, method, layers):
        calls.append(layers)
        peak = {1: 100.0, 2: 150.0}.get(layers, 900.0)
        return {"seconds": 1.0, "peak_extra_mb": peak, "phase_seconds": {}}

    monkeypatch.setattr(cost, "child", child)
    return calls


def test_a_method_that_fits_runs_in_full_beside_its_extrapolated_requirement(children):
    row = cost.measure_isolated(Namespace(memory_gib=4.0, layers=None), "mistral-7b", "r2f", full_depth=32,
                                weights_mb=1000.0)
    assert children == [1, 2, None]  # None: the size's own depth
    assert row["required_mb"] == pytest.approx(100 + 50 * 31) and row["fits"]
    assert row["peak_extra_mb"] == 900.0


def test_a_method_that_cannot_fit_is_reported_with_its_requirement_and_not_run(children):
    row = cost.measure_isolated(Namespace(memory_gib=2.0, layers=None), "mistral-7b", "fullgrad", full_depth=32,
                                weights_mb=1000.0)
    assert children == [1, 2]  # never run at full size
    assert (row["fits"], row["peak_extra_mb"], row["seconds"]) == (False, None, None)
    assert row["required_mb"] == pytest.approx(1650.0)


def test_the_full_run_keeps_the_depth_asked_for(children):
    cost.measure_isolated(Namespace(memory_gib=4.0, layers=4), "mistral-7b", "r2f", full_depth=4, weights_mb=1000.0)
    assert children == [1, 2, 4]


def test_eval_cost_counts_every_phases_tokens_against_the_floor(capsys, monkeypatch, tmp_path):
    """benchmarks/eval_cost.py on the demo model: every phase runs, its tokens are those its
    forward passes processed (each request at least once), and the floor is tokens × 2 ×
    parameters at the measured GEMM rate."""
    import json

    import eval_cost
    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path))  # the script points it at its own empty cache: put back after
    assert eval_cost.main(["--model", "embedded", "--set", "step=0.0122", "--threads", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    phases = {p["phase"]: p for p in result["phases"]}
    assert list(phases) == ["untouched evaluation", "alignment reference", "edited evaluation", "identity alignment",
                            "attacks + re-test"]
    for p in phases.values():
        assert p["tokens"] >= p["requests"] > 0 and p["seconds"] > 0
        assert p["floor_seconds"] == pytest.approx(p["tokens"] * 2 * result["parameters"] / (result["gemm_gflops"] * 1e9))
    assert phases["alignment reference"]["tokens"] == phases["identity alignment"]["tokens"]  # the same prompts
