"""``r2f-bench tune``: its rule, its search on the dev split, and that the dev split stays out of the tables."""

import json

from r2f_bench.cli import main
from r2f_bench.results.store import Store
from r2f_bench.results.leaderboard import build_tables
from r2f_bench.results.tune import choose, grid_points
from r2f_bench.tasks.rwku import SAMPLE_DIR

TINY_ARGS = ["--model", "embedded:mistral-h64-l2", "--proxy", "embedded:mistral-h32-l2", "--views", "3",
             "--data-dir", str(SAMPLE_DIR)]


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
    assert search["chosen"] in ({"step": "0.005"}, {"step": "0.04"})
    # every dev-split record stays out of the leaderboard
    records = list(Store(tmp_path).records())
    assert records and all(r["config"]["split"] == "dev" for r in records)
    assert build_tables(records) == []
