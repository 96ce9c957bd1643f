"""``r2f-bench tune``: its rule, its search on the dev split, and that the dev split stays out of the tables."""

import json

from r2f_bench.cli import main
from r2f_bench.results.store import Store
from r2f_bench.results.leaderboard import build_tables
from r2f_bench.engine.config import RunConfig
from r2f_bench.results.tune import choose, grid_points, plan_searches, strengths
from r2f_bench.tasks.rwku import SAMPLE_DIR

TINY_ARGS = ["--model", "embedded:mistral-h64-l2", "--proxy", "embedded:mistral-h32-l2", "--data-dir", str(SAMPLE_DIR)]


def test_tune_rule_and_command(tmp_path, capsys):
    assert grid_points({"b": (1, 2), "a": ("x",)}) == [{"a": "x", "b": "1"}, {"a": "x", "b": "2"}]
    row = lambda usr, gur: ({}, {"usr": usr, "gur": gur})
    assert choose([row(90, 80), row(60, 95), row(50, 99)], 90)[0] == 1  # best USR among GUR ≥ 90
    assert choose([row(90, 80), row(60, 85)], 90)[0] == 1  # none qualifies: best GUR
    assert main(["tune", "--method", "fullgrad", "--grid", "step=0.005,0.04", "--limit", "1", "--dev-targets", "2",
                 "--output", str(tmp_path), "--json", *TINY_ARGS]) == 0
    printed = capsys.readouterr()
    out = printed.out
    search = json.loads(out[out.index("[\n"):])[0]
    assert [r["params"] for r in search["rows"]] == [{"step": "0.005"}, {"step": "0.04"}]
    # the search's runs say what they run on once, not once a run; the table says how to run the choice
    assert printed.err.count("1 evaluation target, 2 dev targets") == 1
    assert f"Run the choice: `r2f-bench --method fullgrad --task rwku --set step={search['chosen']['step']}`" in printed.err
    assert all(r["targets"] == 1 for r in search["rows"])
    assert search["capped"] is False  # a given grid is the user's range: never pushed past, never flagged
    assert search["chosen"] in ({"step": "0.005"}, {"step": "0.04"})
    # every dev-split record stays out of the leaderboard
    records = list(Store(tmp_path).records())
    assert records and all(r["config"]["split"] == "dev" for r in records)
    assert build_tables(records) == []


def _curve(gur):
    """A fake search point: USR rises with the knob, GUR follows ``gur``; every call recorded."""
    calls = []

    def evaluate(point):
        calls.append(float(point["step"]))
        return point, {"usr": float(point["step"]), "gur": gur(float(point["step"]))}
    return evaluate, calls


def test_search_goes_past_the_top_while_utility_holds_and_says_when_it_never_crosses():
    points = [{"step": "1"}, {"step": "2"}, {"step": "4"}]
    beyond = [{"step": "8"}, {"step": "16"}, {"step": "32"}]
    # crosses inside the range: nothing past the top, one refinement between 1 and 2
    evaluate, calls = _curve(lambda s: 100 - 10 * s)
    rows, crossed = strengths(points, beyond, "step", evaluate, 90, refine=1)
    assert crossed and calls == [1, 2, 4, 1.41] and [float(p["step"]) for p, _ in rows] == [1, 1.41, 2, 4]
    # utility outlasts the range: pushed on until GUR falls below the floor, then refined
    evaluate, calls = _curve(lambda s: 100 - s)
    rows, crossed = strengths(points, beyond, "step", evaluate, 90, refine=1)
    assert crossed and calls == [1, 2, 4, 8, 16, 11.3]
    assert rows[choose(rows, 90)[0]][0] == {"step": "8"}  # the old search would have stopped at 4
    # never crosses: flagged, and the strongest tried is the choice
    evaluate, calls = _curve(lambda s: 100.0)
    rows, crossed = strengths(points, beyond[:2], "step", evaluate, 90, refine=3)
    assert not crossed and calls == [1, 2, 4, 8, 16] and rows[choose(rows, 90)[0]][0] == {"step": "16"}
    evaluate, calls = _curve(lambda s: 100.0)
    assert strengths(points, [], "step", evaluate, 90, refine=3)[1] is False and calls == [1, 2, 4]
    # an unreadable GUR counts as below the floor
    evaluate, calls = _curve(lambda s: None)
    assert strengths(points, beyond, "step", evaluate, 90, refine=0)[1] and calls == [1, 2, 4]


def test_the_points_past_the_top_continue_its_ratio_as_far_as_the_method_allows():
    base = lambda method: RunConfig(method=method, task="rwku")
    (search,) = plan_searches(["fullgrad"], base, None, points=8, extend=3)
    assert search.points[0] == {"step": "0.002"} and search.points[-1] == {"step": "0.2"}
    # the last two points' ratio, 0.2 / 0.104: 0.385, 0.74, then 1.42, above the step's bound of 1
    assert search.beyond == [{"step": "0.385"}, {"step": "0.74"}]
    (search,) = plan_searches(["grad_ascent"], base, None, points=3, extend=2)
    assert search.beyond == [{"lr": "0.1"}, {"lr": "1"}]
    (search,) = plan_searches(["fullgrad"], base, {"step": ["0.01", "0.02"]}, points=8, extend=3)
    assert search.knob is None and search.beyond == []  # a given grid is not extended


def test_negative_extend_is_one_line(tmp_path, capsys):
    assert main(["tune", "--method", "fullgrad", "--extend", "-1", "--output", str(tmp_path), *TINY_ARGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --extend: -1 is below 0 (0 adds no strengths)."]


def test_a_setting_that_diverged_on_dev_targets_is_not_chosen_on_the_rest():
    """Before: means skipped the diverged deletions, so a setting that broke 2 of 3 dev targets was
    chosen on its one good score (USR 95, GUR 96) over one that kept all three (60, 92)."""
    from r2f_bench.results.tune import render, tune_means

    scored = {"usr": 95.0, "gur": 96.0, "rap": 1.0, "identity_alignment": 0.9, "seconds": 1.0}
    broke = tune_means([scored, {"status": "diverged"}, {"status": "diverged"}])
    held = tune_means([{**scored, "usr": 60.0, "gur": 92.0}] * 3)
    assert (broke["usr"], broke["gur"], broke["rap"], broke["diverged"]) == (95.0 / 3, 32.0, 1.0, 2)
    rows = [({"lr": "1e-3"}, broke), ({"lr": "1e-4"}, held)]
    assert choose(rows, 90)[0] == 1
    assert "| 3 (2 diverged: USR 0, GUR 0) |" in render("ga", "rwku", rows, 1, "why")
