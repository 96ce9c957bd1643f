"""Frontiers: the matched-utility summaries on synthetic curves, the refusal of a method
without a knob, and a killed frontier run resuming without duplicates."""

from __future__ import annotations

import json

import fake_runner
import pytest

from r2f_bench.cli import main
import numpy as np

from r2f_bench.results.frontier import (GUR_LEVELS, KEYS, MEASURED, OPEN, RESOLUTION, ROUNDS, TOLERANCE, area, best_usr, frontier,
                                is_open, next_strength, paired, refinement, tiers)
from r2f_bench.results.stats import excludes_zero
from r2f_bench.results.store import Store
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


def test_frontier_bootstraps_over_targets_and_starts_at_the_untouched_model():
    units = [("t1", 0), ("t2", 0), ("t3", 0), ("t1", 1)]
    by_strength = {s: {u: (usr + i, gur - i) for i, u in enumerate(units)} for s, (gur, usr) in zip((0.1, 0.2, 0.4, 0.8), CURVE)}
    f = frontier("m", "step", by_strength, units, {u: (10.0, 99.0) for u in units}, {"step": "0.1"})
    assert [p["strength"] for p in f.points] == [0.0, 0.1, 0.2, 0.4, 0.8]
    assert (f.points[0]["usr"].mean, f.points[0]["gur"].mean) == (0.0, 100.0)  # the untouched model
    stat = f.summaries["usr_at_gur95"]
    assert (stat.n, stat.targets, stat.seeds) == (4, 3, 2) and stat.lo <= stat.mean <= stat.hi and stat.lo < stat.hi
    curve = [(100.0, 0.0)] + [(g - 1.5, u + 1.5) for g, u in CURVE]
    assert f.tuned["usr"].mean == 10.0 and f.summaries["auc"].mean == pytest.approx(area(curve))
    assert f.gur_range == (78.5, 100.0) and f.area_open and f.failures == 0  # the strongest point keeps GUR >= 50


def test_a_diverged_point_keeps_its_target_as_a_failure():
    units = [("t1", 0), ("t2", 0)]
    ok = {s: {u: (usr, gur) for u in units} for s, (gur, usr) in zip((0.1, 0.2, 0.4, 0.8), CURVE)}
    diverged = {**ok, 0.8: {("t1", 0): None, ("t2", 0): ok[0.8][("t2", 0)]}}  # t1 destroyed at the strongest step
    missing = {**ok, 0.8: {("t2", 0): ok[0.8][("t2", 0)]}}  # or its record lost
    for scores in (diverged, missing):
        f = frontier("m", "step", scores, units, {}, {})
        assert f.summaries["auc"].n == 2 and f.failures == 1 and f.points[-1]["failures"] == 1
        assert (f.points[-1]["usr"].mean, f.points[-1]["gur"].mean) == (45.0, 40.0)  # (90, 80) and (0, 0)
        assert f.summaries["auc"].mean < frontier("m", "step", ok, units, {}, {}).summaries["auc"].mean
        assert f.tuned["failures"] == 2  # no shipped point measured: both fail


def test_refinement_bisects_the_bracket_until_a_point_is_near_the_floor():
    gur = lambda s: 100 / (1 + (s / 0.02) ** 2)
    curve = [(0.0, 100.0)] + [(s, gur(s)) for s in (0.002, 0.02, 0.2)]
    assert refinement(curve, 95.0) == (ROUNDS, 0.00632)  # between the two that bracket it
    assert refinement([(0.0, 100.0), (0.002, 80.0)], 95.0) == (ROUNDS, 0.0002)  # next to the untouched model
    assert refinement([(0.0, 100.0), (0.002, 99.0)], 90.0)[0] == OPEN
    assert refinement([(0.0, 100.0), (0.0144, 99.0), (0.0145, 80.0)], 90.0)[0] == RESOLUTION
    for floor in (95.0, 90.0):
        points = list(curve)
        while (s := next_strength(points, floor)) is not None:
            points = sorted(points + [(s, gur(s))])
        assert refinement(points, floor)[0] == MEASURED and min(abs(g - floor) for _, g in points) <= TOLERANCE


def test_a_paired_interval_covers_a_known_difference_about_95_percent_of_the_time():
    """Two methods on 12 targets x 2 seeds sharing target effects; B forgets 3 points more at every
    strength along the same GUR, so each summary differs by what it differs on the expected curves."""
    rng = np.random.default_rng(7)
    strengths, gur, base = (0.1, 0.2, 0.4, 0.8), [97.0, 92.0, 80.0, 40.0], [5.0, 20.0, 50.0, 90.0]
    expected = lambda shift: [(100.0, 0.0)] + [(g, b + shift) for g, b in zip(gur, base)]
    truth = [best_usr(expected(3.0), g) - best_usr(expected(0.0), g) for g in GUR_LEVELS]
    truth.append(area(expected(3.0)) - area(expected(0.0)))
    assert truth[0] == 3.0 and 2.8 < truth[-1] < 3.0  # near GUR 100 both curves start at the untouched model
    units = [(f"t{t}", s) for t in range(12) for s in range(2)]
    hits = np.zeros(len(KEYS))
    for _ in range(200):
        effect = {t: rng.normal(0, 4) for t, _ in units}
        score = lambda shift: {s: {u: (b + shift + effect[u[0]] + rng.normal(0, 1), g) for u in units}
                               for s, g, b in zip(strengths, gur, base)}
        a, b = (frontier(m, "step", score(shift), units, {}, {}, samples=500) for m, shift in (("a", 0.0), ("b", 3.0)))
        diff = paired(b, a)
        hits += [diff[k].lo <= t <= diff[k].hi for k, t in zip(KEYS, truth)]
    assert all(0.88 <= h / 200 <= 0.99 for h in hits), hits / 200


def test_tiers_group_methods_that_cannot_be_told_apart():
    units = [(f"t{t}", 0) for t in range(10)]
    rng = np.random.default_rng(0)
    method = lambda name, shift: frontier(name, "step", {s: {u: (usr + shift + rng.normal(0, 2), gur) for u in units}
                                                         for s, (gur, usr) in zip((0.1, 0.2, 0.4), CURVE[1:])},
                                          units, {}, {}, samples=500)
    group = [method("a", 0.0), method("b", 0.3), method("c", 20.0)]
    assert tiers(group, "auc") == [["c"], ["b", "a"]]
    assert excludes_zero(paired(group[2], group[0])["auc"]) and not excludes_zero(paired(group[1], group[0])["auc"])


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


def test_killed_frontier_resumes_without_duplicates(fake_run, tmp_path, monkeypatch, capsys):
    argv = ["frontier", "--methods", "r2f,fullgrad", "--points", "3", "--seeds", "0,1",
            "--limit", "2", "--refine", "0", "--output", str(tmp_path), "--json", "--quiet"]
    monkeypatch.setenv("R2F_FAKE_INTERRUPT_AT", "7")
    assert main(argv) == 130  # killed after 7 targets
    assert len(Store(tmp_path)) == 7
    monkeypatch.delenv("R2F_FAKE_INTERRUPT_AT")
    capsys.readouterr()
    assert main(argv) == 0
    jobs = 2 * (3 + 1) * 2  # methods x (strengths + shipped defaults) x seeds
    assert len(Store(tmp_path)) == jobs * 2 == len(fake_run.CALLS)  # each target ran exactly once
    assert len({(c["label"], c["target"]) for c in fake_run.CALLS}) == len(fake_run.CALLS)
    summary = json.loads(capsys.readouterr().out)  # stdout holds the JSON alone
    assert [m["method"] for m in summary["methods"]] == ["r2f", "fullgrad"]
    assert [p["strength"] for p in summary["methods"][0]["points"]] == [0.0, 0.002, 0.02, 0.2]
    assert summary["methods"][0]["usr_at_gur95"]["n"] == 4 and summary["units"]["targets"] == ["t1", "t2"]
    assert [(p["method"], p["baseline"]) for p in summary["pairs"]] == [("fullgrad", "r2f")]
    assert set(summary["ranking"]) == {"usr_at_gur95", "usr_at_gur90", "auc"}
    written = {p.name for p in (tmp_path / "frontier").iterdir()}
    assert {"frontier.png", "tables.md", "tables.tex", "frontier.csv", "frontier-pairs.csv", "frontier-ranking.csv",
            "tables.html"} <= written


def smooth(failing: str | None = None):
    """A fake ``run_target``: GUR falls smoothly with the knob (100 / (1 + (s / s0)^2), s0 per
    target), USR rises; target ``failing`` diverges at the strongest strength."""
    def run_target(self, target):
        record = real_run_target(self, target)
        knob = float(self.config.params.get("step", 0.02))
        s0 = 0.02 * (1 + 0.1 * int(target.id[1:]))
        gur = 100 / (1 + (knob / s0) ** 2)
        if target.id == failing and knob >= 0.2:
            return {**record, "status": "diverged", "usr": None, "gur": None}
        return {**record, "usr": 100 - gur + self.config.seed, "gur": gur}
    return run_target


real_run_target = fake_runner.Run.run_target


def test_frontier_refines_to_a_measured_point_near_each_floor(fake_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fake_run.Run, "run_target", smooth(failing="t2"))
    argv = ["frontier", "--methods", "r2f,fullgrad", "--points", "3", "--seeds", "0,1",
            "--limit", "2", "--output", str(tmp_path), "--json", "--quiet"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    for m in summary["methods"]:
        gurs = [p["gur"]["mean"] for p in m["points"]]
        assert all(min(abs(g - floor) for g in gurs) <= TOLERANCE for floor in (95.0, 90.0)), gurs
        assert m["refined_at_gur95"] == m["refined_at_gur90"] == "measured" and len(gurs) > 4
        assert m["usr_at_gur95"]["targets"] == 2 and m["usr_at_gur95"]["seeds"] == 2
        # t2 diverged at the strongest step in both seeds: it stays, as a failure
        assert m["failures"] == 2 and m["points"][-1]["failures"] == 2 and m["usr_at_gur95"]["n"] == 4
    assert "USR 0, GUR 0" in captured.err and "r2f 2 of" in captured.err  # the caption states the rule and count
    # one round only: the floors the first bisection misses are flagged, not passed off as measured
    assert main(argv[:-2] + ["--refine", "1", "--output", str(tmp_path / "one"), "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    flags = {m[f"refined_at_gur{g}"] for m in json.loads(captured.out)["methods"] for g in (95, 90)}
    assert "round limit" in flags and "No measured point within 1 GUR of the floor" in captured.err


def test_frontier_json_pipes_into_json_tool(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    cmd = (f"{sys.executable} -m fake_runner frontier --methods r2f,fullgrad --baseline fullgrad "
           f"--points 2 --refine 1 --limit 2 --output {tmp_path} --json --quiet | {sys.executable} -m json.tool")
    done = subprocess.run(cmd, shell=True, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["baseline"] == "fullgrad" and summary["pairs"][0]["method"] == "r2f"
    assert {"mean", "lo", "hi", "excludes_zero"} <= set(summary["pairs"][0]["auc"])
    assert "Paired differences against fullgrad" in done.stderr


def test_a_baseline_outside_the_methods_is_one_line(tmp_path, capsys):
    assert main(["frontier", "--methods", "r2f,fullgrad", "--baseline", "scrub", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --baseline 'scrub' is not among --methods (r2f, fullgrad); name one of them."]


def test_tune_refines_between_the_strengths_that_cross_the_floor():
    from r2f_bench.results.tune import refinement

    rows = [({"step": s}, {"gur": g, "usr": u}) for s, g, u in
            (("0.001", 100.0, 0.0), ("0.1", 85.0, 60.0), ("0.01", 95.0, 20.0), ("1", 70.0, 90.0))]
    assert refinement(rows, "step", 90.0, 3) == [{"step": "0.0178"}, {"step": "0.0316"}, {"step": "0.0562"}]
    assert refinement(rows, "step", 50.0, 3) == []  # never crosses


def test_tables_flag_a_method_below_its_tuning_floor():
    from r2f_bench.results.leaderboard import build_tables

    def record(method, target, gur):
        return {"method": method, "task": "rwku", "target": target, "seed": 0, "usr": 50.0, "gur": gur,
                "config": {"method": method, "task": "rwku", "seed": 0, "params": {}}, "params": {},
                "models": {"target": "m"}, "versions": {}, "data_revision": "r"}

    table1 = next(t for t in build_tables([record("a", "t1", 80.0), record("b", "t1", 97.0)]) if t.name == "table1")
    assert [label for label, _ in table1.rows] == ["a", "b"]
    assert "Below the 90% GUR floor their defaults were tuned for on the dev split (r2f-bench tune): a;" in table1.note


def test_variants_of_one_method_are_separate_curves(fake_run, tmp_path, capsys):
    """``r2f@decoder=learned`` runs R2F with that parameter beside plain ``r2f``; a
    malformed entry or a bad value is one line before anything runs."""
    argv = ["frontier", "--methods", "r2f,r2f@decoder=learned", "--points", "2",
            "--seeds", "0", "--limit", "1", "--refine", "0", "--output", str(tmp_path), "--json", "--quiet"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)["methods"]
    assert [m["method"] for m in summary] == ["r2f", "r2f@decoder=learned"]
    decoders = {json.loads(c["label"].split("/")[3]).get("decoder") for c in fake_run.CALLS}
    assert decoders == {None, "learned"}
    for entry, message in (("r2f@decoder", "error: bad method entry 'r2f@decoder'"),
                           ("r2f@decoder=bogus", "error: parameter 'decoder' of method 'r2f' must be one of")):
        assert main(["frontier", "--methods", entry, "--output", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(message), err
    assert not (tmp_path / "bad").exists()


def test_the_bootstrap_p_value_agrees_with_the_interval_and_holm_thins_the_verdicts():
    """p < 0.05 exactly where the paired 95% interval excludes 0 (the same draws); among
    many methods a lone difference that excludes 0 at p ~ 0.02 is not named apart once the
    family is corrected, a large one is (on 12 targets; on 10, no test over the targets goes
    below 2/1024, more than Holm asks of the first of 42 comparisons)."""
    from r2f_bench.results.frontier import paired_p
    from r2f_bench.results.stats import holm

    units = [(f"t{t}", s) for t in range(12) for s in range(2)]
    rng = np.random.default_rng(3)
    method = lambda name, shift, sd=2.0: frontier(name, "step", {s: {u: (usr + shift + rng.normal(0, sd), gur)
                                                                     for u in units}
                                                                 for s, (gur, usr) in zip((0.1, 0.2, 0.4), CURVE[1:])},
                                                  units, {}, {}, samples=1000)
    base = method("base", 0.0)
    group = [method(f"m{i}", 0.0) for i in range(12)] + [method("small", 1.5), method("large", 15.0)]
    for f in group:
        for k, p in paired_p(f, base).items():
            assert (p < 0.05) == excludes_zero(paired(f, base)[k]) or abs(p - 0.05) < 0.01
    key = "usr_at_gur95"
    p_small, p_large = paired_p(group[-2], base)[key], paired_p(group[-1], base)[key]
    assert 0.003 < p_small < 0.05 and p_large == 2 / 2 ** 12  # the bootstrap's 0, floored at 12 targets' least
    apart = holm({(f.method, k): p for f in group for k, p in paired_p(f, base).items()})
    assert apart[("large", key)] and not apart[("small", key)]


def test_three_targets_never_name_a_difference_however_consistent():
    """Three targets whose differences share a sign: the paired interval excludes 0 and the
    bootstrap's p is 0, but no test over three exchangeable targets goes below 0.25."""
    from r2f_bench.results.frontier import paired_p

    units = [(f"t{t}", 0) for t in range(3)]
    method = lambda name, shift: frontier(name, "step", {s: {u: (usr + shift + i, gur) for i, u in enumerate(units)}
                                                         for s, (gur, usr) in zip((0.1, 0.2, 0.4), CURVE[1:])},
                                          units, {}, {}, samples=1000)
    base, better = method("base", 0.0), method("better", 20.0)
    assert excludes_zero(paired(better, base)["auc"])
    assert paired_p(better, base)["auc"] == 0.25


def measured(results, seeds: int, embedded: bool = True):
    from r2f_bench.results.frontier_run import FrontierResults, Readout

    units = results[0].units
    records = [{"knowledge": {"embedded": embedded}, "target": t, "seed": s} for t, s in units]
    return FrontierResults(results, results[0].method, Readout({}, units, [], [], records, []), [])


def curves_with(units, shifts: dict[str, float], gurs=(95.5, 90.5, 80.0), seed: int = 0):
    """Frontiers of methods forgetting ``shift`` more than the first at GURs ``gurs`` (measured
    within TOLERANCE of both floors by default)."""
    rng = np.random.default_rng(seed)
    return [frontier(name, "step", {s: {u: (usr + shift + rng.normal(0, 1), g) for u in units}
                                    for s, g, usr in zip((0.1, 0.2, 0.4), gurs, (20.0, 50.0, 90.0))},
                     units, {}, {}, samples=500) for name, shift in shifts.items()]


def test_an_interpolated_cell_enters_no_tier_and_no_verdict():
    """A method whose curve passes 3 GUR from a floor is read between two strengths there: it
    gets no tier and its difference is marked, never called, however large."""
    from r2f_bench.results import frontier_tables as ft

    units = [(f"t{t}", s) for t in range(8) for s in range(3)]
    base, far = curves_with(units, {"base": 0.0, "far": 0.0})
    between = curves_with(units, {"between": 30.0}, gurs=(98.0, 92.0, 80.0))[0]
    assert between.interpolates("usr_at_gur95") and not far.interpolates("usr_at_gur95")
    assert not between.interpolates("auc")
    m = measured([base, far, between], seeds=3)
    assert all("between" not in group for group in tiers([base, far, between], "usr_at_gur95"))
    summary = ft.as_json(m)
    pair = next(p for p in summary["pairs"] if p["method"] == "between")
    assert pair["usr_at_gur95"]["interpolated"] and not pair["usr_at_gur95"]["holm_apart"]
    assert pair["usr_at_gur95"]["mean"] > 20 and pair["auc"]["holm_apart"]  # the area is read on the whole curve
    rows = dict(ft.ranking_table(m).rows)
    assert rows["between"][0] is None and rows["base"][0] is not None
    assert "(interpolated: USR @ GUR≥95" in ft.pairs_table(m).rows[-1][0]


def test_fewer_than_three_taught_models_call_no_difference():
    from r2f_bench.results import frontier_tables as ft

    for seeds, called in ((2, False), (3, True)):
        units = [(f"t{t}", s) for t in range(10) for s in range(seeds)]
        m = measured(curves_with(units, {"base": 0.0, "better": 25.0}), seeds)
        summary = ft.as_json(m)
        assert summary["pairs"][0]["auc"]["holm_apart"] is called and bool(summary["ranking"]) is called
        assert (summary["ranking_withheld"] is None) is called
        assert ("no difference is called" in ft.pairs_table(m).note) is not called
    # one pretrained model: its targets are what varies; the claim is about that model
    units = [(f"t{t}", 0) for t in range(10)]
    assert ft.as_json(measured(curves_with(units, {"base": 0.0, "better": 25.0}), 1, embedded=False))["ranking"]


def test_the_summary_states_each_methods_measured_budget():
    from r2f_bench.results import frontier_tables as ft

    units = [(f"t{t}", s) for t in range(4) for s in range(3)]
    m = measured(curves_with(units, {"onestep": 0.0, "loop": 5.0}), 3)
    one = {"grad_passes": 1, "grad_tokens": 176, "retain_read": False, "retain_in_setup": True, "weights_changed": 99.0}
    loop = {"grad_passes": 40, "grad_tokens": 15840, "retain_read": True, "retain_in_setup": False, "weights_changed": 100.0}
    m.readout.shipped = {"onestep": [{"budget": one}] * len(units), "loop": [{"budget": loop}] * len(units)}
    note = ft.summary_table(m, 1).note
    assert ("onestep 1 passes (176 tokens), 99% of weights changed, retain data in its setup only" in note
            and "loop 40 passes (15840 tokens), 100% of weights changed, retain data in the deletion" in note)
    m.readout.shipped["loop"] = [{"budget": {**loop, "weights_changed": None}}] * len(units)
    assert "loop 40 passes (15840 tokens), weights changed not measurable" in ft.summary_table(m, 1).note


def test_the_frontier_reads_usr_after_an_attack(fake_run, tmp_path, monkeypatch, capsys):
    """--after quantize:nf4: each point's USR is the one the attack leaves (here half the
    deletion's), so the whole frontier falls; an attack not run is one line."""
    plain = smooth()

    def run_target(self, target):
        record = plain(self, target)
        return {**record, "attacks": {"quantize:nf4": {"usr": record["usr"] / 2}}}

    monkeypatch.setattr(fake_run.Run, "run_target", run_target)
    argv = ["frontier", "--methods", "r2f", "--points", "3", "--refine", "0", "--seeds", "0,1,2", "--limit", "2",
            "--attacks", "rap,quantize:nf4", "--output", str(tmp_path), "--json", "--quiet"]
    assert main(argv) == 0
    before = json.loads(capsys.readouterr().out)["methods"][0]["auc"]["mean"]
    assert main(argv + ["--after", "quantize:nf4"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    after = summary["methods"][0]["auc"]["mean"]
    assert after == pytest.approx(before / 2, rel=0.05) and "after quantize:nf4" in captured.err
    shipped = summary["shipped_attacks"]["r2f"]  # the attacks at the shipped defaults, with intervals
    assert shipped["quantize:nf4.usr"]["mean"] == pytest.approx(shipped["usr"]["mean"] / 2)
    assert shipped["usr"]["n"] == 6 and shipped["usr"]["seeds"] == 3 and "Each method at its shipped defaults" in captured.err
    assert main(argv[:-2] + ["--after", "leak_at_k:8"]) == 2
    assert "--after 'leak_at_k:8' is not among --attacks (rap,quantize:nf4)" in capsys.readouterr().err
    # a deletion that diverged at the shipped defaults: out of the attacks table, which says so (before: silently)
    store = Store(tmp_path)
    key = next(k for k in store.keys() if not (store.get(k)["config"].get("params") or {}))
    store.put(key, {**store.get(key), "status": "diverged"})
    assert main(argv) == 0
    summary, err = json.loads((captured := capsys.readouterr()).out), captured.err
    assert summary["shipped_attacks"]["r2f"]["usr"]["n"] == 5
    assert ("Left out: diverged deletions at the shipped defaults (r2f 1), which the summary counts as failures "
            "(USR 0, GUR 0)") in " ".join(err.split())


def test_the_name_control_reading_charges_a_method_that_breaks_sentences_naming_the_target(
        fake_run, tmp_path, monkeypatch, capsys):
    """--name-control: utility is the lower of GUR and the name control. Two methods forget
    alike along the same GUR, but fullgrad also breaks other people's facts asked with the
    target's name: the plain reading ties them, the name-control reading puts fullgrad behind;
    a task with no name-control set is one line before anything runs."""
    plain = smooth()

    def run_target(self, target):
        record = plain(self, target)
        knob = float(self.config.params.get("step", 0.02))
        named = 100.0 if self.config.method == "r2f" else 100 / (1 + (knob / 0.005) ** 2)
        return {**record, "name_control": named}

    monkeypatch.setattr(fake_run.Run, "run_target", run_target)
    argv = ["frontier", "--methods", "r2f,fullgrad", "--points", "3", "--refine", "2", "--seeds", "0,1,2",
            "--limit", "2", "--output", str(tmp_path), "--json", "--quiet"]
    areas = {}
    for extra in ([], ["--name-control"]):
        assert main(argv + extra) == 0
        captured = capsys.readouterr()
        summary = json.loads(captured.out)
        areas[bool(extra)] = {m["method"]: m["auc"]["mean"] for m in summary["methods"]}
    assert areas[False]["fullgrad"] == pytest.approx(areas[False]["r2f"], abs=1.0)
    assert areas[True]["r2f"] == pytest.approx(areas[False]["r2f"], abs=1.0)
    assert areas[True]["fullgrad"] < areas[True]["r2f"] - 10
    assert summary["utility"] == "min(gur, name_control)" and "and name control" in captured.err
    assert main(argv[:-2] + ["--task", "wmdp", "--name-control"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--name-control: the task 'wmdp' asks no name-control probes" in err[0]


def test_all_may_be_listed_beside_variants_of_its_methods(fake_run, tmp_path, capsys):
    """``--methods all,r2f@steps=5``: every registered method plus the variant, each once."""
    from r2f_bench.plugins import registry

    argv = ["frontier", "--methods", "all,r2f@steps=5,r2f", "--points", "2", "--refine", "0", "--seeds", "0",
            "--limit", "1", "--output", str(tmp_path), "--json", "--quiet"]
    assert main(argv) == 0
    methods = [m["method"] for m in json.loads(capsys.readouterr().out)["methods"]]
    assert methods == [info.name for info in registry().listing("method")] + ["r2f@steps=5"]
