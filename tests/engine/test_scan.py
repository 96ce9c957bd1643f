"""The knowledge scan: what the untouched model knows of each target, counted as a run's
record counts it, cached so the run reads it back; --min-known skips the rest with a line."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from r2f_bench.cli.main import main
from r2f_bench.cli.scan import render, selector
from r2f_bench.engine.scan import Known


@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    """``r2f-bench scan --json`` on the demo world's first three targets."""
    out, stdout = tmp_path_factory.mktemp("scan"), io.StringIO()
    with contextlib.redirect_stdout(stdout):
        assert main(["scan", "--task", "rwku", "--limit", "3", "--output", str(out), "--json", "--quiet"]) == 0
    return out, json.loads(stdout.getvalue())


def test_scan_orders_targets_by_what_the_untouched_model_knows(scanned):
    _, found = scanned
    assert len(found) == 3 and [k["total"] for k in found] == sorted((k["total"] for k in found), reverse=True)
    for k in found:
        assert k["total"] == sum(k["known"].values()) and all(k["known"][s] <= k["probes"][s] for s in k["known"])
    assert found[0]["total"] > 0


def test_a_run_counts_what_the_scan_counted_and_min_known_skips_the_rest(scanned, tmp_path, capsys):
    """A threshold between two targets' counts: the one below is skipped with a line and
    stores nothing; the one above is recorded with the scan's count of known probes."""
    _, found = scanned
    totals = sorted({k["total"] for k in found})
    assert len(totals) >= 2  # the demo's targets are known unequally: a threshold separates two
    low, high = totals[0], totals[-1]
    below = [k["target"] for k in found if k["total"] == low][0]
    above = [k["target"] for k in found if k["total"] == high][0]
    out = tmp_path / "out"
    assert main(["--method", "grad_ascent", "--task", "rwku", "--targets", f"{below},{above}", "--min-known",
                 str(high), "--output", str(out), "--rap-steps", "0"]) == 0
    err = capsys.readouterr().err
    assert f"skipping target {below}: the untouched model knows {low} of its " in err
    assert f"fewer than --min-known {high}; the other targets run" in err
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["target"] for r in records] == [above] and records[0]["known_forget_probes"] == high


def test_the_suggested_targets_are_the_best_known_and_select_them():
    found = [Known("10_Prince_Harry,_Duke_of_Sussex", "Prince Harry", {"forget_qa": 7}, {"forget_qa": 20}, 1),
             Known("1_Stephen_King", "Stephen King", {"forget_qa": 5}, {"forget_qa": 20}, 0),
             Known("2_Taylor_Swift", "Taylor Swift", {"forget_qa": 2}, {"forget_qa": 20}, 0)]
    text = render(found, "m", min_known=3, top=12)
    assert "2 of 3 targets have at least 3 known probes." in text
    assert "--targets 10,1_Stephen_King " in text  # an id with a comma by its number
    assert selector(found[1]) == "1_Stephen_King"
    assert "7/20" in text and "Run the 2 it knows best" in text
