"""A real two-process CPU launch through Accelerate, with the fake runner (``-m fake_runner``:
``r2f-bench`` with it)."""

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

from r2f_bench.results.store import Store
from r2f_bench.results.sweep import sweep_jobs

ROOT = Path(__file__).resolve().parents[2]
METHODS, TASKS, SEEDS = ["r2f", "grad_ascent", "fullgrad"], ["rwku"], [0, 1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(output: Path, log: Path, command: list[str] | None = None, seeds: list[int] = SEEDS) -> subprocess.CompletedProcess:
    # torchrun-style workers (--multi_gpu is Accelerate's multi-process launcher); ACCELERATE_USE_CPU
    # makes them a gloo CPU group even where a GPU is visible.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
           "ACCELERATE_USE_CPU": "true", "CUDA_VISIBLE_DEVICES": "", "R2F_FAKE_LOG": str(log),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
           "--main_process_port", str(_free_port()),
           "-m", "fake_runner", *(command or ["sweep", "--methods", ",".join(METHODS), "--tasks", ",".join(TASKS)]),
           "--seeds", ",".join(map(str, seeds)), "--limit", "2", "--output", str(output)]
    return subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_two_processes_split_jobs_without_duplicates(tmp_path):
    log, output = tmp_path / "calls.jsonl", tmp_path / "store"
    done = _launch(output, log)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    jobs = sweep_jobs(METHODS, TASKS, SEEDS)
    assert len(calls) == 2 * len(jobs)  # two targets per job
    assert set(Counter((c["label"], c["target"]) for c in calls).values()) == {1}  # no duplicates
    assert {c["rank"] for c in calls} == {0, 1} and len({c["pid"] for c in calls}) == 2
    expected = {(j.fields["method"], j.fields["seed"]): i % 2 for i, j in enumerate(jobs)}  # jobs i::2
    assert all(expected[(c["label"].split("/")[0], int(c["label"].split("/")[2]))] == c["rank"] for c in calls)
    assert len(Store(output)) == len(calls)
    assert "[process 2/2]" in done.stdout

    again = _launch(output, log)  # resume: everything is done, nothing runs
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(log.read_text().splitlines()) == len(calls)
    assert again.stdout.count("0 targets run") == 2


def test_two_processes_share_every_frontier_round(tmp_path):
    """The first round and every refinement are split between the processes, each
    target runs once, and the main process alone writes the tables."""
    log, output = tmp_path / "calls.jsonl", tmp_path / "store"
    frontier = ["frontier", "--methods", "r2f,fullgrad", "--points", "3", "--refine", "2", "--json", "--quiet"]
    done = _launch(output, log, frontier)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert set(Counter((c["label"], c["target"]) for c in calls).values()) == {1}  # no duplicates
    first = 2 * (3 + 1) * len(SEEDS) * 2  # methods x (strengths + shipped) x seeds x targets
    refined = calls[first:] if len(calls) > first else []
    assert refined and {c["rank"] for c in calls} == {0, 1}
    summary = json.loads(done.stdout[done.stdout.index("{"):done.stdout.rindex("}") + 1])  # the main process's JSON
    assert len(summary["methods"][0]["points"]) > 4  # untouched + 3 strengths + the refinements
    assert (done.stdout + done.stderr).count("ran its share of the first round") == 1  # the other process
    assert (output / "frontier" / "frontier.png").is_file()


def test_a_round_with_fewer_jobs_than_processes_does_not_hang(tmp_path):
    """One method, one seed: each refinement round has one or two jobs, so a process may
    get none of them and must still meet the other at the barrier."""
    frontier = ["frontier", "--methods", "r2f", "--points", "3", "--refine", "3", "--json", "--quiet"]
    done = _launch(tmp_path / "store", tmp_path / "calls.jsonl", frontier, seeds=[0])
    assert done.returncode == 0, done.stdout + done.stderr
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert len(calls) > (3 + 1) * 2 and set(Counter((c["label"], c["target"]) for c in calls).values()) == {1}
