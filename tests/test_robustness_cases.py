"""The cases of docs/errors.md added for issue 24: tables that count each (target, seed) once,
records and cache entries validated by shape, SIGTERM, locks, hostile plugins and the
inputs checked before any model loads."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from r2f_bench.cli import main
from r2f_bench.results.store import Store, record_key
from records import record

RUN = ["--method", "r2f", "--task", "rwku"]


def write_job(store: Store, key: str, rec: dict, stored_at: float) -> None:
    """A job file as an older (or this) release wrote it, stored at ``stored_at``."""
    store.jobs.mkdir(parents=True, exist_ok=True)
    store.path(key).write_text(json.dumps({**rec, "key": key, "stored_at": stored_at}))


def usr_cell(out: str) -> str:
    """The R2F row's RWKU USR cell of the printed Table 1."""
    row = next(line for line in out.splitlines() if line.startswith("| r2f "))
    return row.split("|")[2].strip()


# -- 1. one record per cell ----------------------------------------------------
def test_table_counts_each_target_and_seed_once_keeping_the_newest(tmp_path, capsys):
    """0.1.0 and 0.1.1 records of one cell and a duplicated job file: n=1, the newest, and the
    caption says how many were set aside and why; --all-versions pools the versions."""
    store = Store(tmp_path)
    old = {**record("r2f", "rwku", 0, "t1", 10.0, 90.0, 20.0, 0.9, 1.0), "versions": {"r2f-bench": "0.1.0"}}
    new = {**old, "usr": 30.0, "versions": {"r2f-bench": "0.1.1"}}
    write_job(store, record_key(old), old, 100.0)
    write_job(store, record_key(new), new, 200.0)
    write_job(store, "0" * 64, new, 150.0)  # the same job file, copied
    assert main(["table", "--output", str(tmp_path), "--format", "md"]) == 0
    out = capsys.readouterr().out
    assert usr_cell(out) == "**30.0** (n=1)"
    assert "1 records in the tables; 2 set aside (older code version 1, duplicate 1)" in out
    assert "Set aside: 2 records of a cell that has a newer one (older code version 1, duplicate 1)" in out
    assert main(["table", "--output", str(tmp_path), "--format", "md", "--all-versions"]) == 0
    out = capsys.readouterr().out
    assert usr_cell(out).endswith("(n=2)") and "Pooled across code versions and data revisions (--all-versions)" in out
    assert "set aside (duplicate 1)" in out


@pytest.mark.parametrize("change, why", [
    ({"usr": 150.0}, "metric 'usr' is 150.0, outside [0, 100]"),
    ({"identity_alignment": -3.0}, "metric 'identity_alignment' is -3.0, outside [-1, 1]"),
    ({"seed": True}, "field 'seed' missing or not a int"),
    ({"versions": None}, "field 'versions' missing or not a dict"),
    ({"params": ["lr", 1]}, "field 'params' is a list, not a dict"),  # a traceback in `table` before
    ({"models": "m"}, "field 'models' is a str, not a dict"),
    ({"usr": None, "gur": None, "drop": ("usr", "gur", "rap", "identity_alignment", "seconds", "peak_mem_mb")},
     "metric 'usr' missing (an identity without results)"),
])
def test_records_out_of_range_or_without_results_never_count(change, why, tmp_path, capsys):
    store = Store(tmp_path)
    good = record("r2f", "rwku", 0, "t1", 10.0, 90.0, 20.0, 0.9, 1.0)
    bad = {k: v for k, v in {**record("r2f", "rwku", 0, "t2", 10.0, 90.0, 20.0, 0.9, 1.0), **change}.items()
           if k not in change.get("drop", ()) and k != "drop"}
    for r in (good, bad):
        store.put(record_key(good) if r is good else "ab" * 32, r)
    assert main(["table", "--output", str(tmp_path), "--format", "md"]) == 0
    out, err = capsys.readouterr()
    assert f"warning: skipped record abababababab: {why}" in err.splitlines()
    assert "1 records in the tables; 1 skipped" in out and usr_cell(out) == "**10.0** (n=1)"


def test_data_revision_does_not_depend_on_the_selected_targets():
    from r2f_bench.tasks.rwku import RWKU, SAMPLE_DIR

    revisions = {RWKU().load(SAMPLE_DIR, targets, limit, 2).revision
                 for targets, limit in ((None, None), (None, 1), (["2"], None))}
    assert len(revisions) == 1


# -- 3. SIGTERM ------------------------------------------------------------------
def store_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_sigterm_keeps_and_exports_what_is_done_removes_scratch_and_locks_and_exits_143(tmp_path):
    import os
    import subprocess
    import sys

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "R2F_FAKE_SIGTERM_AT": "2"}
    argv = [sys.executable, "-m", "fake_runner", "sweep", "--methods", "r2f",
            "--tasks", "rwku", "--output", str(out), "--quiet"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 143
    assert done.stderr.splitlines() == ["terminated (SIGTERM); finished results are kept in the output directory "
                                        "(`r2f-bench table` reads them; a sweep run again skips them)"]
    files = store_files(out)
    assert len([f for f in files if f.startswith("jobs/")]) == 2 and "results.jsonl" in files
    assert len((out / "results.jsonl").read_text().splitlines()) == 2
    assert not [f for f in files if f.startswith("locks/") or ".work-" in f]
    assert not list(out.glob(".work-*"))


# -- 2. cache entries validated by shape -------------------------------------------
@pytest.fixture
def light_run(tmp_path, monkeypatch):
    """A Run on the string sample whose model and evaluations are stand-ins (no model is built)."""
    from types import SimpleNamespace

    import torch

    from r2f_bench.attack import Budget
    from r2f_bench.attacks import relearn
    from r2f_bench.engine import evaluate
    from r2f_bench.engine.attacks import Attacks
    from r2f_bench.engine.config import RunConfig
    from r2f_bench.engine.run import Run
    from r2f_bench.engine.weights import Weights
    from r2f_bench.tasks.rwku import SAMPLE_DIR

    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path / "cache"))
    said: list[str] = []
    run = Run(RunConfig(method="fullgrad", task="rwku", data_dir=str(SAMPLE_DIR), limit=1, output=str(tmp_path / "out")),
              progress=said.append)
    run.model, run.tokenizer, run.device, run.said, run.evaluations = torch.nn.Linear(1, 1), None, torch.device("cpu"), said, []
    run.weights = Weights(run.model, run.out_dir, run.config.method)
    built = SimpleNamespace(label="stand-in", info={}, knowledge={"embedded": True}, tokenizer=None, chat_template=False)
    run.evaluator = evaluate.Evaluator(run.scope, built, run.weights, run.config, said.append)
    run.attacks = Attacks("rap", run.scope, run.evaluator, run.weights, SimpleNamespace(seed=0, tokenizer=None),
                          Budget(5, 1e-3), said.append)

    def score_sets(model, sets, sampling=None, reply=""):
        run.evaluations.append(set(sets))
        return {s: [{"answered": 1.0} for _ in ps] for s, ps in sets.items()}

    monkeypatch.setattr(run.evaluator, "score_sets", score_sets)
    monkeypatch.setattr(relearn, "finetune", lambda *a, **kw: None)  # RAP's attack changes nothing
    monkeypatch.setattr(run.task, "extra_scores", lambda *a: {})
    return run


@pytest.mark.parametrize("kind", ["untouched", "attack"])
@pytest.mark.parametrize("entry", [{}, [], 5, [1], {"forget_qa": [1]}],
                         ids=["empty object", "empty array", "a number", "rows not objects", "a set's rows not objects"])
def test_wrong_shape_cache_entries_are_set_aside_and_rebuilt(kind, entry, light_run):
    from r2f_bench.engine.attacks import Prepared

    run, target = light_run, light_run.targets[0]
    planned = [Prepared("rap", run.attacks.attacks[0][1], [])]
    read = (lambda: run.evaluator.untouched(target)) if kind == "untouched" else (lambda: run.attacks.controls(target, planned)["rap"])
    first = read()
    path = run.evaluator.untouched_paths(target)["forget_qa"]
    if kind == "attack":
        (path,) = path.parent.glob("*-attack-*.json")
    path.write_text(json.dumps(entry))
    assert read() == first and len(run.evaluations) == 2  # rebuilt, never trusted
    assert len(list(path.parent.glob("*.corrupt-*"))) == 1
    (line,) = [m for m in run.said if "could not be loaded" in m]
    assert re.fullmatch(rf"warning: cache entry \S+{re.escape(path.name)} could not be loaded \(wrong shape: .+\); "
                        rf"moved to {re.escape(path.name)}\.corrupt-\d+ and rebuilt", line)


# -- 4 and 6. checked before anything runs (exit 2, one line) ---------------------------
def _file(tmp: Path, name: str = "file") -> Path:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("not a directory")
    return path


def _sample() -> str:
    from r2f_bench.tasks.rwku import SAMPLE_DIR

    return str(SAMPLE_DIR)


# (id, extra argv given the tmp dir, the exact message after "error: ")
EARLY = [
    ("seed too large", lambda t: ["--seed", str(2**63)], "--seed must be at most 4294967295, got 9223372036854775808."),
    ("negative seed", lambda t: ["--seed", "-1"], "--seed must be at least 0, got -1."),
    ("views unbounded", lambda t: ["--views", "1000000"], "--views must be at most 64, got 1000000."),
    ("limit takes the dev targets", lambda t: ["--data-dir", _sample(), "--limit", "5"],
     "--limit 5 leaves 0 of the 2 dev targets (rwku data here holds 5 targets); pass --limit 3 or less."),
    ("limit takes the dev targets of a method that needs none", lambda t: ["--data-dir", _sample(), "--limit", "5",
                                                                           "--method", "fullgrad"],
     "--limit 5 leaves 0 of the 2 dev targets (rwku data here holds 5 targets); pass --limit 3 or less, or "
     "--dev-targets 0."),
    ("save-model for a method that edits no weights", lambda t: ["--method", "eco", "--save-model", str(t / "m")],
     "method 'eco' edits no weights (it wraps the model at inference), so there is no checkpoint to save; drop "
     "--save-model."),
    ("jobs is a file", lambda t: ["--output", str(_file(t, "out/jobs").parent)],
     "{t}/out/jobs is a file, but the results store keeps its finished jobs there; move it away, or pass another "
     "--output."),
    ("locks is a file", lambda t: ["--output", str(_file(t, "out/locks").parent)],
     "{t}/out/locks is a file, but the results store keeps its job locks there; move it away, or pass another "
     "--output."),
]


@pytest.mark.parametrize("case", EARLY, ids=[c[0] for c in EARLY])
def test_late_or_unbounded_input_is_one_line_and_exit_2_before_anything_runs(case, tmp_path, capsys):
    _, argv, message = case
    assert main(RUN + ["--output", str(tmp_path / "store"), *argv(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: " + message.format(t=tmp_path)]
    assert not list(tmp_path.rglob("*.json"))  # nothing ran, nothing stored


def test_an_unwritable_cache_is_named_before_any_model_loads(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("R2F_BENCH_CACHE", str(_file(tmp_path)))
    assert main(RUN + ["--output", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: the cache (R2F_BENCH_CACHE) {tmp_path}/file is a file; pass a directory."]


def test_an_empty_cache_variable_is_refused_and_clears_nothing(tmp_path, monkeypatch, capsys):
    """R2F_BENCH_CACHE="" once meant the working folder: `cache clear` emptied its models/."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.safetensors").write_text("a user's file")
    monkeypatch.setenv("R2F_BENCH_CACHE", "")
    line = ("error: R2F_BENCH_CACHE is set but empty; unset it (the cache is then ~/.cache/r2f-bench) "
            "or set it to a folder.")
    for argv in (["cache", "clear"], ["cache", "info"], RUN + ["--output", str(tmp_path / "out")]):
        assert main(argv) == 2
        assert capsys.readouterr().err.strip().splitlines() == [line]
    assert (tmp_path / "models" / "mine.safetensors").is_file()
    monkeypatch.setenv("R2F_BENCH_CACHE", "~/r2f-cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    from r2f_bench.cache import cache_root
    assert cache_root() == tmp_path / "r2f-cache"


def test_a_folder_that_cannot_be_entered_is_one_line(tmp_path, monkeypatch, capsys):
    """Python 3.11's Path.exists raises PermissionError under a folder the user cannot enter."""
    from r2f_bench.atomic import check_writable
    from r2f_bench.errors import UserError

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "exists", denied)
    with pytest.raises(UserError, match=r"^cannot write to --output .*/x \(Permission denied\); choose a writable"):
        check_writable(tmp_path / "x")
    monkeypatch.setattr(Path, "is_dir", denied)
    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path / "locked"))
    assert main(["cache", "info"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: cannot read the cache {tmp_path}/locked (Permission denied); check its permissions, "
        "or set R2F_BENCH_CACHE to another folder."]


def test_a_descending_seed_range_names_the_fix():
    from r2f_bench.errors import UserError
    from r2f_bench.results.sweep import parse_seeds

    with pytest.raises(UserError, match=r"^bad --seeds item '5-2': a range runs from low to high; write 2-5\.$"):
        parse_seeds("5-2")


def test_threads_above_the_cores_are_capped_with_one_warning(monkeypatch):
    import os

    from r2f_bench.engine.plan import capped_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    said: list[str] = []
    assert capped_threads(1000, said.append) == 2 and capped_threads(2, said.append) == 2
    assert said == ["warning: --threads 1000 is more than the 2 cores available here; using 2"]


# -- 4. nothing computed is thrown away ----------------------------------------------
def _locked_key(tmp_path: Path) -> tuple[list, str]:
    """A one-target job of the fake runner and its store key."""
    import fake_runner

    from r2f_bench.engine.config import RunConfig
    from r2f_bench.results.store import job_key
    from r2f_bench.results.sweep import sweep_jobs

    jobs = sweep_jobs(["r2f"], ["rwku"], [0], limit=1, output=str(tmp_path))
    run = fake_runner.Run(RunConfig(**jobs[0].fields))
    return jobs, job_key(run.config.to_dict(), "t1", run.data_revision(), run.versions(), run.resolved_params())


def test_a_locked_job_stops_a_plain_run_naming_the_other_process_and_a_sweep_skips_it(tmp_path):
    import os
    import socket

    import fake_runner

    from r2f_bench.errors import UserError
    from r2f_bench.results.sweep import execute

    jobs, key = _locked_key(tmp_path)
    lock = Store(tmp_path).lock_path(key)
    lock.parent.mkdir(parents=True)
    lock.write_text(f"{socket.gethostname()} {os.getppid()}")  # a live process of this host
    holder = f"host {socket.gethostname()} pid {os.getppid()}"
    with pytest.raises(UserError) as plain:
        execute(jobs, str(tmp_path), runner=fake_runner.Run, process=(0, 1), replace=True, progress=lambda m: None)
    assert str(plain.value) == (f"t1 of this run ({key[:12]}) is being run by another process ({holder}); wait for it "
                                f"to finish, or remove {lock} if that process is gone.")
    said: list[str] = []
    report = execute(jobs, str(tmp_path), runner=fake_runner.Run, process=(0, 1), progress=said.append)
    assert report.skipped == 1 and f"  t1: running in another process ({holder}) ({key[:12]})" in said
    assert lock.exists() and not Store(tmp_path).done(key)


def test_a_lock_that_cannot_be_written_is_removed_never_left_empty(tmp_path, monkeypatch):
    import errno

    from r2f_bench.results import store as store_module
    from r2f_bench.errors import UserError

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    store, key = Store(tmp_path), "cd" * 32
    monkeypatch.setattr(store_module.os, "write", full)
    with pytest.raises(UserError, match=r"^cannot write the job lock \S+\.lock \(No space left on device\); free space"):
        with store.claim(key):
            pass
    assert not store.lock_path(key).exists()


@pytest.mark.parametrize("returned, message", [
    (lambda model: {}["no such key"], "method 'fullgrad' (distribution r2f-bench==0.1.0) raised KeyError in unlearn() "
                                      "on target 1_Orla_Vantree: 'no such key'; its traceback is above (a bug of the "
                                      "method's: report it to its authors)."),  # before: a bare traceback, no name
    (lambda model: None, "method 'fullgrad' (distribution r2f-bench==0.1.0) returned NoneType from unlearn(), not an "
                         "Edit; return Edit(model, info) (r2f_bench.unlearner)."),
    (lambda model: "model", "method 'fullgrad' (distribution r2f-bench==0.1.0) returned str from unlearn(), not an "
                            "Edit; return Edit(model, info) (r2f_bench.unlearner)."),
    (lambda model: __import__("r2f_bench").Edit(model, {(1, 2): 3.0}),
     "method 'fullgrad' (distribution r2f-bench==0.1.0) returned an Edit whose info cannot be stored as JSON (keys "
     "must be str, int, float, bool or None, not tuple); give Edit.info str keys and JSON values."),
])
def test_what_unlearn_returns_is_checked_as_it_returns(returned, message, light_run, monkeypatch):
    from types import SimpleNamespace

    from r2f_bench.errors import UserError

    from r2f_bench.engine.budget import Watched

    run = light_run
    run.ctx, run.retain_in_setup = SimpleNamespace(retain_pool=Watched()), False
    run.method = SimpleNamespace(unlearn=lambda model, request, ctx: returned(model),
                                 diagnostics=lambda model, request, ctx: {})
    monkeypatch.setattr(run, "prepare", lambda: None)
    monkeypatch.setattr(run, "request", lambda target: SimpleNamespace(retain=Watched()))
    monkeypatch.setattr(run.evaluator, "reference", lambda: [])  # identity alignment's, which needs a tokenizer
    monkeypatch.setattr(run, "attacks", SimpleNamespace(prepare=lambda target, request: [], controls=lambda target, planned: {},
                                                         after=lambda model, target, planned: {}))
    with pytest.raises(UserError) as exc:
        run.run_target(run.targets[0])
    assert str(exc.value) == message and run.evaluations == [set(run.scope.probe_sets(run.targets[0]))]  # the untouched model's only


def test_atomically_written_files_follow_the_umask(tmp_path):
    import os
    import stat

    import torch

    from r2f_bench.atomic import atomic_write_text, write_safetensors

    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "f.json", "{}")
        write_safetensors(tmp_path / "t.safetensors", {"w": torch.zeros(2)}, {"kind": "test"})  # its writer: 0600
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.json").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "t.safetensors").stat().st_mode) == 0o640


# -- 5. plugins cannot take the CLI down ------------------------------------------------
def _raises(subparsers):
    raise RuntimeError("boom")


def _clashes(subparsers):
    subparsers.add_parser("table")


@pytest.mark.parametrize("add, why", [
    (_raises, "RuntimeError: boom"),
    (_clashes, "ArgumentError: argument command: conflicting subparser: table"),
], ids=["raises", "clashes with a built-in"])
def test_a_broken_register_commands_hook_is_skipped_with_one_warning(add, why, tmp_path, capsys):
    from r2f_bench import hookimpl
    from r2f_bench.plugins import registry

    from types import SimpleNamespace

    registry().register(SimpleNamespace(register_commands=hookimpl(add)), "hostile-plugin", "hostile-dist", "0.1")
    try:
        with pytest.warns(UserWarning) as caught:
            assert main(["methods"]) == 0
            assert main(["table", "--output", str(tmp_path)]) == 2  # the built-in still answers (empty store)
    finally:
        registry().unregister("hostile-plugin")
    assert {str(w.message) for w in caught} == {
        f"r2f-bench plugin 'hostile-plugin' (distribution hostile-dist) failed in register_commands and its "
        f"commands were skipped: {why}"}
    assert "error: no results in" in capsys.readouterr().err


def test_warnings_print_as_one_line_without_paths():
    from r2f_bench.cli.main import one_line_warning

    assert one_line_warning(UserWarning("a plugin\n  failed"), UserWarning, "/x/plugins.py", 3, "src") == \
        "warning: a plugin failed\n"


# -- 6. task YAMLs, target modules and empty forget sets ------------------------------------
YAML_CASES = [
    ("unparseable", "rwku_forget_qa.yaml", "task: [rwku_forget_qa\n",
     "task YAML {d}/rwku_forget_qa.yaml cannot be parsed (expected ',' or ']', but got '<stream end>' at line 2); "
     "fix its YAML syntax (see docs/tasks.md for the keys a task YAML needs)."),
    ("missing key", "_rwku_generation.yaml", "tag: rwku\ncustom_dataset: !function utils.load_probes\n",
     "task YAML {d}/rwku_forget_aa.yaml lacks field 'output_type' (itself or through its include); add it (see "
     "docs/tasks.md for the keys a task YAML needs)."),
    ("include cycle (a RecursionError before)", "_rwku_generation.yaml", "include: rwku_forget_aa.yaml\n",
     "task YAML {d}/_rwku_generation.yaml includes itself (_rwku_generation.yaml -> rwku_forget_aa.yaml -> "
     "_rwku_generation.yaml); break the cycle."),
    ("no YAML for a probe set (lm-eval's KeyError after the model loaded, before)", "rwku_forget_aa.yaml", None,
     "task 'rwku_broken_yamls' has no lm-eval YAML for its probe set 'forget_fb' (one with `task: "
     "rwku_broken_yamls_forget_fb` in {d}); add it (see docs/tasks.md for the keys a task YAML needs)."),
]


@pytest.mark.parametrize("case", YAML_CASES, ids=[c[0] for c in YAML_CASES])
def test_an_invalid_task_yaml_is_one_line_when_the_task_is_picked(case, tmp_path, capsys):
    """Checked before the data or any model loads (before: lm-eval failed after the untouched model's build)."""
    from types import SimpleNamespace

    from r2f_bench import hookimpl
    from r2f_bench.plugins import registry
    from r2f_bench.tasks.rwku import RWKU

    _, name, text, message = case
    yamls = tmp_path / "yamls"
    shutil.copytree(RWKU.yaml_dir(), yamls, ignore=shutil.ignore_patterns("sample", "*.py", "*.md", "__pycache__"))
    if text is not None:
        (yamls / name).write_text(text)

    class BrokenYamls(RWKU):
        name = "rwku_broken_yamls"

        @classmethod
        def yaml_dir(cls) -> Path:
            return yamls

        def load(self, *args, **kwargs):
            raise AssertionError("data loaded before the YAMLs were checked")

    registry().register(SimpleNamespace(register_tasks=hookimpl(lambda register: register(BrokenYamls))), "broken-yamls")
    try:
        assert main(["--method", "r2f", "--task", "rwku_broken_yamls", "--output", str(tmp_path / "out")]) == 2
    finally:
        registry().unregister("broken-yamls")
    assert capsys.readouterr().err.strip().splitlines() == ["error: " + message.format(d=yamls)]


def test_target_modules_reach_the_methods_and_a_missing_name_names_the_option():
    """A non-Llama architecture (GPT-NeoX): the default names fail with one line naming
    --target-modules and the model's own layers; --target-modules set through the context works."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from r2f_bench.cli.main import build_parser
    from r2f_bench.cli.options import run_config
    from r2f_bench.errors import UserError
    from r2f_bench.training.one_step import OneStepUnlearner
    from r2f_bench.results.store import job_key
    from r2f_bench.unlearner import Context

    args = build_parser().parse_args(RUN + ["--target-modules", "query_key_value, dense"])
    config = run_config(args, "r2f", "rwku")
    assert config.target_modules == ["query_key_value", "dense"]
    default = run_config(build_parser().parse_args(RUN), "r2f", "rwku")
    legacy = {k: v for k, v in default.to_dict().items() if k != "target_modules"}
    assert job_key(default.to_dict(), "t", "r", {}) == job_key(legacy, "t", "r", {})  # older stores keep their keys

    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=16, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                             intermediate_size=16))

    class Uniform(OneStepUnlearner):
        name = "uniform-step"

        def gradient(self, model, request, ctx):
            return (lambda layer: torch.ones_like(dict(model.named_modules())[layer].weight)), {}

    ctx = lambda modules: Context(tokenizer=None, dev_targets=[], retain_pool=[], seed=0, cache_dir=Path("."),
                                  make_views=lambda facts: [facts], target_modules=modules)
    with pytest.raises(UserError) as exc:
        Uniform(Uniform.Params()).unlearn(model, None, ctx(None))
    assert str(exc.value) == ("the model has no linear layers named q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                              "down_proj; pass --target-modules with names of its own linear layers (dense, "
                              "dense_4h_to_h, dense_h_to_4h, query_key_value), e.g. --target-modules "
                              "dense,dense_4h_to_h.")
    assert Uniform(Uniform.Params()).unlearn(model, None, ctx(("query_key_value", "dense"))).model is model


def test_a_target_without_forget_probes_is_skipped_with_the_documented_warning(tmp_path):
    """Before: the seen set built from the corpus request counted as forget probes, so a target
    whose forget sets were empty ran (USR n/a) without a word."""
    from r2f_bench.engine.config import RunConfig
    from r2f_bench.engine.run import Run

    data = tmp_path / "rwku"
    shutil.copytree(_sample(), data)
    for level in (1, 2, 3):
        (data / "Target" / "1_Orla_Vantree" / f"forget_level{level}.json").write_text("[]")
    said: list[str] = []
    run = Run(RunConfig(method="fullgrad", task="rwku", data_dir=str(data), output=str(tmp_path / "out")),
              progress=said.append)
    assert [t.id for t in run.targets] == ["2_Bram_Ostelic", "3_Tamsin_Quorve"]
    assert "warning: skipping target 1_Orla_Vantree: its forget probe sets (forget_fb, forget_qa, forget_aa) are " \
           "empty; the other targets run" in said


def test_a_request_emptied_by_the_leak_scrub_is_skipped_with_the_documented_warning(tmp_path):
    from r2f_bench.engine.config import RunConfig
    from r2f_bench.engine.run import Run

    data = tmp_path / "rwku"
    shutil.copytree(_sample(), data)
    first = data / "Target" / "1_Orla_Vantree"
    shutil.copy(first / "neighbor_level1.json", first / "forget_level1.json")  # every request item is scored
    said: list[str] = []
    run = Run(RunConfig(method="fullgrad", task="rwku", data_dir=str(data), forget_source="probes",
                        output=str(tmp_path / "out")), progress=said.append)
    assert [t.id for t in run.targets] == ["2_Bram_Ostelic", "3_Tamsin_Quorve"]
    assert "warning: skipping target 1_Orla_Vantree: its request is empty (in the data, or once what it is scored on " \
           "is removed); the other targets run" in said
