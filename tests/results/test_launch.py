"""``--launcher submitit``: a sweep's jobs as a job array, through submitit's local executor
(each task a real process, as on a SLURM node) and a stand-in ``sbatch``; the fake runner, which
each task unpickles (by reference: it imports tests/fake_runner.py)."""

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from r2f_bench.cli import main
from r2f_bench.errors import UserError
from r2f_bench.results.store import Store, record_key

TESTS = Path(__file__).resolve().parents[1]
SWEEP = ["sweep", "--tasks", "rwku", "--limit", "2", "--launcher", "submitit",
         "--slurm-executor", "local", "--quiet"]


@pytest.fixture
def submitit(fake_run, monkeypatch, tmp_path):
    """submitit (skip without it); the tasks import the fake runner and log every target they run."""
    pytest.importorskip("submitit")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("R2F_FAKE_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.delenv("R2F_FAKE_REVISION", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    return tmp_path / "calls.jsonl"


def ran(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_sweep_runs_every_target_once_as_an_array(submitit, fake_run, tmp_path, capsys):
    out = tmp_path / "store"
    assert main(SWEEP + ["--methods", "r2f,grad_ascent", "--seeds", "0,1", "--output", str(out)]) == 0
    calls = ran(submitit)
    assert len(calls) == 2 * 2 * 2  # methods x seeds x targets
    assert set(Counter((c["label"], c["target"]) for c in calls).values()) == {1}  # no target ran twice
    assert len({c["pid"] for c in calls}) == 4 and os.getpid() not in {c["pid"] for c in calls}  # a task per job
    assert not fake_run.CALLS  # nothing ran in the submitting process
    store = Store(out)
    assert len(store) == 8 and all(record_key(r) == r["key"] for r in store.records())
    assert len((out / "results.jsonl").read_text().splitlines()) == 8  # exported after the array
    assert not list((out / "locks").glob("*.lock"))
    printed = capsys.readouterr().out
    assert "sweep: 4 jobs as local processes" in printed and "8 targets run, 0 already done" in printed


def test_a_killed_array_resumes_with_only_what_is_missing(submitit, tmp_path, capsys, monkeypatch):
    out = tmp_path / "store"
    argv = SWEEP + ["--methods", "grad_ascent", "--seeds", "0,1", "--output", str(out)]
    monkeypatch.setenv("R2F_FAKE_INTERRUPT_AT", "1")  # every task is interrupted (as by a kill) after one target
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: 2 job(s) failed (grad_ascent/rwku/seed0: task ")
    assert "ended without a result" in err[-1]
    assert len(ran(submitit)) == len(Store(out)) == 2 and not list((out / "locks").glob("*.lock"))
    monkeypatch.delenv("R2F_FAKE_INTERRUPT_AT")
    assert main(argv) == 0  # the same command again: a new array runs only the missing targets
    assert "2 targets run, 2 already done" in capsys.readouterr().out
    calls = ran(submitit)
    assert len(calls) == len(Store(out)) == 4 and set(Counter((c["label"], c["target"]) for c in calls).values()) == {1}


def test_frontier_rounds_run_as_arrays(submitit, fake_run, tmp_path, capsys):
    argv = ["frontier", "--methods", "r2f", "--points", "2", "--seeds", "0", "--limit", "1",
            "--refine", "0", "--output", str(tmp_path / "store"), "--json", "--quiet", "--launcher", "submitit",
            "--slurm-executor", "local"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [p["strength"] for p in summary["methods"][0]["points"]] == [0.0, 0.002, 0.2]
    calls = ran(submitit)
    assert len(calls) == 3 and len({c["pid"] for c in calls}) == 3 and not fake_run.CALLS  # 2 strengths + defaults


@pytest.fixture
def picky(fake_run, monkeypatch):
    """The fake runner refusing, as it is set up, a job whose step is 0.2 or whose method is grad_ascent."""
    init = fake_run.Run.__init__

    def refusing(self, config, progress=print):
        if config.params.get("step") == "0.2" or config.method == "grad_ascent":
            raise UserError("this setting is out of range; pass another.")
        init(self, config, progress)

    monkeypatch.setattr(fake_run.Run, "__init__", refusing)


def test_a_job_that_cannot_be_set_up_is_refused_before_the_array(submitit, picky, fake_run, tmp_path, capsys):
    """Before, the frontier's array path submitted every job and each bad one failed in its task;
    with --keep-going the bad ones are listed as failed and the rest are submitted."""
    frontier = ["frontier", "--methods", "r2f", "--points", "2", "--seeds", "0", "--limit", "1", "--refine", "0",
                "--output", str(tmp_path / "f"), "--quiet", "--launcher", "submitit", "--slurm-executor", "local"]
    sweep = SWEEP + ["--methods", "r2f,grad_ascent", "--output", str(tmp_path / "s")]
    for argv, n in ((frontier, 3), (sweep, 2), (sweep + ["--dry-run"], 2)):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "this setting is out of range" in err[0], err
        assert f"None of the {n} job(s) was {'run' if '--dry-run' in argv else 'submitted'}" in err[0]
    assert not ran(submitit) and not fake_run.CALLS and not list(tmp_path.glob("*/submitit"))
    assert main(sweep + ["--keep-going"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: 1 job(s) failed (grad_ascent/rwku/seed0: this setting is out of range")
    assert {c["label"].split("/")[0] for c in ran(submitit)} == {"r2f"} and len(ran(submitit)) == 2
    assert main(frontier + ["--keep-going", "--json"]) == 0
    assert len(ran(submitit)) == 2 + 2  # the shipped defaults and step 0.002 ran; 0.2 counts as a failure
    assert "job failed, its targets count as failures: r2f/rwku/seed0 [step=0.2" in capsys.readouterr().err


def test_a_slurm_array_is_one_sbatch_script(submitit, tmp_path, monkeypatch, capsys):
    """With the slurm executor: one ``sbatch`` of an array with the options asked for; ``--no-wait``
    returns with its id. (A stand-in ``sbatch`` records the script; nothing runs.)"""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\ncp "$1" {tmp_path}/script.sh\necho "Submitted batch job 4242"\n')
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "store"
    argv = [a for a in SWEEP if a not in ("--slurm-executor", "local")]
    assert main(argv + ["--methods", "r2f,grad_ascent", "--seeds", "0,1", "--output", str(out), "--slurm-partition",
                        "gpu", "--slurm-gpus", "1", "--slurm-time", "30", "--slurm-array-parallelism", "2",
                        "--slurm-extra", "account=abc", "--no-wait"]) == 0
    script = (tmp_path / "script.sh").read_text()
    for flag in ("--array=0-3%2", "--partition=gpu", "--gpus-per-node=1", "--time=30", "--account=abc",
                 "--signal=USR2@90", f"--output={out}/submitit/%A_%a_0_log.out"):
        assert f"#SBATCH {flag}\n" in script
    assert "SLURM array 4242, not waiting; watch: squeue -j 4242" in capsys.readouterr().out
    assert len(list((out / "submitit").glob("4242_*_submitted.pkl"))) == 4 and not ran(submitit)


@pytest.mark.parametrize("extra, message", [
    (["--slurm-partition", "gpu"], "error: --slurm-partition applies only to a SLURM array; add --launcher submitit"),
    (["--no-wait", "--slurm-gpus", "1"], "error: --slurm-gpus, --no-wait apply only to a SLURM array;"),
    (["--launcher", "submitit", "--slurm-time", "0"], "error: --slurm-time must be at least 1, got 0."),
    (["--launcher", "submitit", "--slurm-executor", "local", "--slurm-extra", "account"],
     "error: bad --slurm-extra 'account'; write NAME=VALUE"),
    (["--launcher", "submitit"], "error: sbatch or srun not found: submitting a SLURM array needs a SLURM login node"),
])
def test_bad_launcher_options_are_one_line(tmp_path, capsys, monkeypatch, extra, message):
    if "--launcher" in extra:
        pytest.importorskip("submitit")
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    out = tmp_path / "store"
    assert main(["sweep", "--methods", "r2f", "--output", str(out)] + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err
    assert not out.exists()  # refused before anything was planned, loaded or submitted


@pytest.mark.parametrize("command", ["sweep", "frontier"])
def test_missing_submitit_names_the_extra(tmp_path, capsys, monkeypatch, command):
    monkeypatch.setitem(sys.modules, "submitit", None)  # `import submitit` raises ImportError
    out = tmp_path / "store"
    assert main([command, "--methods", "r2f", "--output", str(out),
                 "--launcher", "submitit"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --launcher submitit needs the submitit package, which is not installed; "
                   "pip install 'r2f-bench[submitit]' (or pip install submitit)."]
    assert not out.exists()
