"""benchmarks/real_lm.py: the calibration's choice rule, and the script end to end on the demo
model and world (a smoke test: scan, calibration from the weakest setting up, the table)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def real_lm():
    spec = importlib.util.spec_from_file_location("real_lm", ROOT / "benchmarks" / "real_lm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def falling(at: dict[float, float | None]):
    """A measure that records what it was asked and reads GUR from ``at``."""
    asked: list[float] = []

    def measure(value: float) -> float | None:
        asked.append(value)
        return at[value]
    return measure, asked


def test_calibration_stops_at_the_first_setting_below_the_floor(real_lm):
    measure, asked = falling({1e-5: 98.0, 3e-5: 91.0, 1e-4: 40.0})
    rows, pick, reached = real_lm.choose([1e-5, 3e-5, 1e-4], 3, 90.0, measure)
    assert (pick, reached, asked) == (3e-5, True, [1e-5, 3e-5, 1e-4]) and rows[-1] == (1e-4, 40.0)


def test_a_method_whose_utility_outlasts_the_grid_is_pushed_past_its_top(real_lm):
    """The grid's top kept GUR above the floor: the next values continue its ratio (x2 here)
    until one falls below, and the one before it is chosen, not the grid's top."""
    measure, asked = falling({2e-4: 103.0, 4e-4: 101.0, 8e-4: 102.0, 1.6e-3: 97.0, 3.2e-3: 70.0})
    _, pick, reached = real_lm.choose([2e-4, 4e-4, 8e-4], 3, 90.0, measure)
    assert asked == [2e-4, 4e-4, 8e-4, 1.6e-3, 3.2e-3] and (pick, reached) == (1.6e-3, True)


def test_a_floor_never_reached_is_said_so(real_lm):
    measure, asked = falling({1.0: 99.0, 3.0: 99.0, 10.0: 99.0, 33.3: 99.0, 111.0: 99.0})
    _, pick, reached = real_lm.choose([1.0, 3.0, 10.0], 2, 90.0, measure)
    assert asked == [1.0, 3.0, 10.0, 33.3, 111.0] and (pick, reached) == (111.0, False)
    assert real_lm.unreached(99.0, 90.0) == ("GUR stayed at or above 90 up to the strongest setting tried: "
                                             "not calibrated; raise --extend")


def test_a_weakest_setting_already_below_the_floor_sends_the_search_down_past_the_grid(real_lm):
    """The grid's bottom was too strong: weaker values continue its first ratio (/3 here) until
    one holds, and that one is chosen, not the grid's bottom."""
    measure, asked = falling({1e-5: 50.0, 3.33e-6: 80.0, 1.11e-6: 95.0, 3.7e-7: 99.0})
    _, pick, reached = real_lm.choose([1e-5, 3e-5, 1e-4], 3, 90.0, measure)
    assert asked == [1e-5, 3.33e-6, 1.11e-6] and (pick, reached) == (1.11e-6, True)
    measure, asked = falling({1e-5: 50.0, 3.33e-6: 80.0, 1.11e-6: 85.0})
    rows, pick, reached = real_lm.choose([1e-5, 3e-5, 1e-4], 2, 90.0, measure)
    assert asked == [1e-5, 3.33e-6, 1.11e-6] and (pick, reached) == (1.11e-6, False)
    assert real_lm.unreached(rows[-1][1], 90.0) == ("GUR stayed below 90 down to the weakest setting tried: "
                                                    "not calibrated; raise --extend")


def test_an_unreadable_utility_ends_the_search_uncalibrated(real_lm):
    measure, asked = falling({1e-5: None, 3e-5: 99.0})
    _, pick, reached = real_lm.choose([1e-5, 3e-5, 1e-4], 3, 90.0, measure)
    assert (asked, pick, reached) == ([1e-5], 1e-5, False)
    assert real_lm.unreached(None, 90.0) == "GUR unreadable: not calibrated"


def test_the_name_control_holds_a_method_that_breaks_the_targets_name_at_the_floor(real_lm):
    """RMU on SmolLM2 kept GUR near 100 while answering almost nothing asked with the target's
    name: read as the lower of the two, its utility falls and the calibration stops it earlier."""
    rmu = [{"gur": 100.8, "name_control": 0.0}, {"gur": 99.0, "name_control": 20.0}, {"gur": 98.0}]
    assert real_lm.mean_utility(rmu) == pytest.approx((100.8 + 99.0 + 98.0) / 3)
    assert real_lm.mean_utility(rmu, name_control=True) == pytest.approx(10.0)  # the third has no name control
    assert real_lm.mean_utility([{"gur": None, "name_control": 50.0}], name_control=True) is None
    assert real_lm.unreached(60.0, 90.0, real_lm.utility_label(True)) == (
        "min(GUR, name ctrl) stayed below 90 down to the weakest setting tried: not calibrated; raise --extend")


@pytest.mark.parametrize("argv,line", [
    (["--extend", "-1"], r"--extend: -1 is below 0 \(0 keeps each method to its grid\)\."),
    (["--methods", "r2f,foo"], r"--methods: foo; choose from r2f, fullgrad, .*\."),
    (["--methods", ","], r"--methods: none given; choose from r2f, .*\."),
    (["--controls", "other_request,random"], r"--controls: random; choose from other_request, random_step\."),
    (["--controls", "other_request", "--targets", "1"],
     r"--controls other_request unlearns another table target's request; pass --targets 2 or more\."),
    (["--targets", "0"], r"--targets must be at least 1, got 0\."),  # [] once meant the task's first 3
    (["--calibrate", "0"], r"--calibrate must be at least 1, got 0\."),
    (["--min-gur", "0.9"], r"--min-gur is the share of utility kept, in %: .*got 0\.9; for 90 % write --min-gur 90\."),
    (["--rap-lr", "nan"], r"--rap-lr must be a finite number, got nan\."),
    (["--scan", "0"], r"--scan must be at least 1, got 0\."),
    (["--frontier", "fullgrad@step=1e-3:1e-4"], r"bad range step='1e-3:1e-4' in --frontier entry .*"),
])
def test_bad_options_get_one_line_before_the_scan(real_lm, tmp_path, argv, line):
    """Refused before anything loads (before: after the scan, or after a calibration, or never)."""
    from r2f_bench.errors import UserError

    with pytest.raises(UserError, match=f"^{line}$"):
        real_lm.main([*argv, "--output", str(tmp_path)])
    assert not any(tmp_path.iterdir())


ARGV = ["--scan", "3", "--targets", "1", "--calibrate", "1", "--methods", "fullgrad", "--controls", "random_step",
        "--extend", "1", "--threads", "1"]


def test_the_script_scans_calibrates_and_tabulates(real_lm, tmp_path, capsys):
    assert real_lm.main(ARGV + ["--output", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "table targets: " in err and "calibrated fullgrad: step 0.0002 -> GUR " in err
    # the demo model's utility outlasts this grid, sized for a pretrained LM: pushed on, then said so
    assert "0.0016 -> GUR " in err and "chosen 0.0016 (GUR stayed at or above 90" in err
    assert "chosen settings (calibrated on GUR >= 90): fullgrad step=" in out and "| fullgrad |" in out and "R2F's proxy" not in out
    assert "| fullgrad (control: random_step) |" in out  # the row's negative control, at its chosen setting
    assert len(list((tmp_path / "table" / "jobs").glob("*.json"))) == 2

    # the ranking is kept beside the stores: a rerun goes on without scanning, with the same targets
    scans = list((tmp_path / "scans").glob("*.json"))
    assert len(scans) == 1 and err.count("scan: ") == 3
    table_line = next(line for line in err.splitlines() if line.startswith("table targets: "))
    assert real_lm.main(ARGV + ["--output", str(tmp_path)]) == 0
    _, again = capsys.readouterr()
    assert f"scan: read back from {scans[0]}" in again and again.count("scan: ") == 1 and table_line in again
    assert len(list((tmp_path / "table" / "jobs").glob("*.json"))) == 2  # nothing run twice

    # a damaged ranking is set aside and the targets scanned again, never trusted
    scans[0].write_text('{"ranked": [["1_x", "many"]]}')
    assert real_lm.main(ARGV + ["--output", str(tmp_path)]) == 0
    _, rescanned = capsys.readouterr()
    assert "could not be loaded (wrong shape: no list of [target, known probes])" in rescanned
    assert rescanned.count("scan: ") == 3 and table_line in rescanned and "read back" not in rescanned


def test_the_frontier_stage_reads_the_tables_runs_back_and_runs_the_rest(real_lm, tmp_path, capsys):
    """--frontier after the table: the row the table already ran (same key) is copied from its
    store, not run again; the entry's other strength and its shipped defaults run; the
    frontier's tables print."""
    argv = [*ARGV[:ARGV.index("--controls")], "--extend", "1", "--threads", "1", "--output", str(tmp_path)]
    assert real_lm.main([*argv, "--frontier", "fullgrad@step=4e-4:1.6e-3", "--points", "2"]) == 0
    out, err = capsys.readouterr()
    assert "chosen 0.0016" in err and "frontier: 1 record(s) read from the table's store" in err
    names = lambda store: {p.name for p in (tmp_path / store / "jobs").glob("*.json")}
    assert len(names("frontier")) == 3 and len(names("table")) == 1 and names("table") <= names("frontier")
    assert "USR at matched GUR" in out and (tmp_path / "frontier" / "report" / "frontier.png").is_file()

