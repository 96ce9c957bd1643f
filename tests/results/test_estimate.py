"""A many-job command's estimate from its first job, and --budget's cut."""

from __future__ import annotations

import time

import fake_runner
import pytest

from r2f_bench.errors import UserError
from r2f_bench.results.estimate import Estimate, parse_duration
from r2f_bench.results.job import Job
from r2f_bench.results.sweep import execute


class TimedRun(fake_runner.Run):
    """The fake runner's records with a real run's times: 10 s a target, 4 of them the
    untouched evaluation (cached for later jobs), 1 s to load and set up a job."""

    def run_target(self, target) -> dict:
        return {**super().run_target(target), "wall_seconds": 10.0,
                "phases": {"untouched": 4.0, "unlearn": 1.0, "evaluate": 3.0},
                "phases_once": {"load": 0.5, "setup": 0.5}}


def jobs(n: int, out: str) -> list[Job]:
    return [Job({"method": "fullgrad", "task": "rwku", "seed": 0, "output": out, "limit": 2,
                 "params": {"step": str(i)}}) for i in range(n)]


@pytest.mark.parametrize("text, seconds", [("8h", 28800), ("90m", 5400), ("1h30m", 5400), ("45s", 45),
                                           ("3600", 3600), ("0.5h", 1800)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["8 hours", "h", "", "0", "-1h"])
def test_a_bad_duration_is_one_line(text):
    with pytest.raises(UserError, match=r"^--budget .* (is not a duration|is no time at all)"):
        parse_duration(text)


def test_the_first_job_estimates_the_rest_without_what_it_cached(tmp_path):
    """3 later jobs x (1 s set-up + 2 targets x 6 s: the 4 s untouched evaluation is read back)
    = 39 s; a job on another model pays the untouched evaluation again."""
    said: list[str] = []
    execute(jobs(4, str(tmp_path)), str(tmp_path), runner=TimedRun, process=(0, 1), progress=said.append)
    (line,) = [m for m in said if m.startswith("estimate: ")]
    assert line.startswith("estimate: the 3 remaining jobs to run should take about 39 s (measured on the first: 2 targets "
                           "a job, per target untouched 4.0, evaluate 3.0, other 2.0, unlearn 1.0 s, 1.0 s to load")
    (check,) = [m for m in said if m.startswith("estimate check: ")]
    assert check.startswith("estimate check: the 3 jobs run after the first took ")
    record = {"wall_seconds": 10.0, "phases": {"untouched": 4.0}, "phases_once": {"load": 1.0}}
    estimate = Estimate.of(jobs(1, "o")[0].fields, [record, record])
    other = {**jobs(1, "o")[0].fields, "model": "another"}
    assert estimate.job_seconds(jobs(1, "o")[0].fields) == 1 + 2 * 6 and estimate.job_seconds(other) == 1 + 2 * 10


def test_a_resumed_command_is_estimated_on_what_it_will_run(tmp_path, monkeypatch):
    """Of 4 jobs, the 2nd and 3rd are stored and one target of the 4th (interrupted): after the
    first runs, only the 4th's other target is left, 1 s set-up + 6 s."""
    every = jobs(4, str(tmp_path))
    fake_runner.CALLS.clear()
    monkeypatch.setenv("R2F_FAKE_INTERRUPT_AT", "5")
    with pytest.raises(KeyboardInterrupt):
        execute(every[1:], str(tmp_path), runner=TimedRun, process=(0, 1), progress=lambda msg: None)
    monkeypatch.delenv("R2F_FAKE_INTERRUPT_AT")
    fake_runner.CALLS.clear()
    said: list[str] = []
    execute(every, str(tmp_path), runner=TimedRun, process=(0, 1), progress=said.append)
    assert [(c["label"].split("/")[3], c["target"]) for c in fake_runner.CALLS] == [
        ('{"step": "0"}', "t1"), ('{"step": "0"}', "t2"), ('{"step": "3"}', "t2")]  # t1 of step 3 stored
    (line,) = [m for m in said if m.startswith("estimate: ")]
    assert line.startswith("estimate: the 1 remaining job to run should take about 7 s (") and \
        line.endswith("; 2 stored, skipped)")
    (check,) = [m for m in said if m.startswith("estimate check: ")]
    assert check.startswith("estimate check: the 1 job run after the first took ")


def test_a_budget_runs_only_the_jobs_that_fit_and_says_which_it_left_out(tmp_path):
    fake_runner.CALLS.clear()
    said: list[str] = []
    report = execute(jobs(4, str(tmp_path)), str(tmp_path), runner=TimedRun, process=(0, 1), progress=said.append,
                     deadline=time.time() + 20)  # the first job runs, then 13 s a job: one more fits
    assert len(fake_runner.CALLS) == 4 and report.ran == 4
    assert report.cut == [j.label for j in jobs(4, str(tmp_path))[2:]]
    (line,) = [m for m in said if m.startswith("budget: ")]
    assert line.startswith("budget: 1 of the 3 jobs to run fit in what is left of --budget; not run: ")
    (check,) = [m for m in said if m.startswith("estimate check: ")]  # of the job it kept
    assert check.startswith("estimate check: the 1 job run after the first took ") and check.endswith("% high")


def test_a_budget_never_cuts_a_stored_job(tmp_path):
    """The last of 4 jobs is stored: when --budget leaves room for none after the first, the
    two to run are cut and the stored one is still read back (its records reach the report,
    so a frontier's table keeps them)."""
    every = jobs(4, str(tmp_path))
    execute(every[3:], str(tmp_path), runner=TimedRun, process=(0, 1), progress=lambda msg: None)
    fake_runner.CALLS.clear()
    said: list[str] = []
    report = execute(every, str(tmp_path), runner=TimedRun, process=(0, 1), progress=said.append,
                     deadline=time.time() + 5)
    assert report.cut == [j.label for j in every[1:3]] and report.ran == 2 and report.skipped == 2
    assert set(report.job_keys) == {every[0].label, every[3].label}
    (line,) = [m for m in said if m.startswith("budget: ")]
    assert line.startswith("budget: 0 of the 2 jobs to run fit")
