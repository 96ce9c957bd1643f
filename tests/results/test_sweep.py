from collections import Counter
from types import SimpleNamespace

import fake_runner
import pytest

from r2f_bench.cli import main
from r2f_bench.engine.config import RunConfig
from r2f_bench.errors import UserError
from r2f_bench.results.store import Store, record_key
from r2f_bench.results.sweep import (RANKS, TRANSFER_PROXIES, TRANSFER_TARGETS, VIEWS, execute, expand,
                              parse_seeds, shard, sweep_jobs)

REGISTRY = SimpleNamespace(listing=lambda kind: [SimpleNamespace(name=n) for n in (
    ["fullgrad", "ga", "r2f"] if kind == "method" else ["rwku", "wmdp"])])


@pytest.fixture(autouse=True)
def _fresh_calls(monkeypatch):
    fake_runner.CALLS.clear()
    monkeypatch.delenv("R2F_FAKE_REVISION", raising=False)
    monkeypatch.delenv("R2F_FAKE_LOG", raising=False)


def calls() -> Counter:
    return Counter((c["label"], c["target"]) for c in fake_runner.CALLS)


def test_seeds_and_all_expansion():
    assert parse_seeds("0,1, 2") == [0, 1, 2] and parse_seeds("0-3,3,7") == [0, 1, 2, 3, 7]
    with pytest.raises(UserError):
        parse_seeds("a")
    with pytest.raises(UserError, match=r"^bad --seeds item '4294967296': seeds run from 0 to 4294967295\.$"):
        parse_seeds("4294967296")
    with pytest.raises(UserError, match=r"^--seeds 0-4294967295 asks for more than 10000 seeds; run fewer at a time\.$"):
        parse_seeds("0-4294967295")  # refused at once, not after building a list of 4 billion
    assert len(parse_seeds("0-9999,5")) == 10_000  # distinct seeds are counted
    with pytest.raises(UserError, match="asks for more than 10000 seeds"):
        parse_seeds("0-9999,10000")
    assert expand(["all"], "method", REGISTRY) == ["fullgrad", "ga", "r2f"]
    assert expand(["all"], "task", REGISTRY) == ["rwku", "wmdp"]
    assert expand(["r2f", "ga", "r2f"], "method", REGISTRY) == ["r2f", "ga"]
    with pytest.raises(UserError, match="unknown method 'nope'"):
        expand(["nope"], "method", REGISTRY)
    empty = SimpleNamespace(listing=lambda kind: [])
    with pytest.raises(UserError, match="no methods are registered"):
        expand(["all"], "method", empty)


def test_plan_product_order_and_presets():
    jobs = sweep_jobs(["r2f", "ga"], ["rwku", "wmdp"], [0, 1], params={"lr": "1"}, limit=2, output="o")
    assert len(jobs) == 8 and len({j.label for j in jobs}) == 8
    assert [j.fields["seed"] for j in jobs] == [0] * 4 + [1] * 4  # seed-major
    assert jobs[0].fields == {"method": "r2f", "task": "rwku", "seed": 0, "output": "o", "params": {"lr": "1"},
                              "limit": 2}
    rank = sweep_jobs(["r2f"], ["rwku"], [0], ablation="rank", params={"lr": "1"})
    assert [j.fields["params"] for j in rank] == [{"lr": "1", "rank": str(r)} for r in RANKS]
    assert [j.fields["views"] for j in sweep_jobs(["r2f"], ["rwku"], [0], ablation="views")] == list(VIEWS)
    transfer = sweep_jobs(["r2f"], ["rwku"], [0], ablation="transfer")
    assert len(transfer) == 36
    assert {(j.fields["model"], j.fields["proxy"]) for j in transfer} == \
        {(t, p) for t in TRANSFER_TARGETS for p in TRANSFER_PROXIES}
    assert {j.fields["model"].split(":")[1].split("-")[0] for j in transfer} == {"mistral", "llama", "gpt2"}
    own = sweep_jobs(["r2f"], ["rwku"], [0], ablation="transfer", models=["a", "b"], proxies=["c"])
    assert [(j.fields["model"], j.fields["proxy"]) for j in own] == [("a", "c"), ("b", "c")]
    with pytest.raises(UserError):
        sweep_jobs(["r2f"], ["rwku"], [0], ablation="depth")


def test_a_method_without_a_proxy_runs_once_whatever_the_proxies():
    """Before: fullgrad ran once per --proxy, the same work under two store keys."""
    jobs = sweep_jobs(["r2f", "fullgrad"], ["rwku"], [0], proxies=["a", "b"])
    assert [(j.fields["method"], j.fields["proxy"]) for j in jobs] == [("r2f", "a"), ("fullgrad", "a"), ("r2f", "b")]


def test_a_method_runs_once_whatever_the_inputs_it_does_not_read():
    """Before: the views ablation ran gradient ascent eight times (it reads no views), and --retain-items
    ran plain NPO under another key; each is now one job at the defaults, and a method that reads the
    input still gets every value."""
    jobs = sweep_jobs(["r2f", "grad_ascent"], ["rwku"], [0], ablation="views", attacks="none")
    assert [j.fields.get("views") for j in jobs if j.fields["method"] == "r2f"] == list(VIEWS)
    assert [j.fields for j in jobs if j.fields["method"] == "grad_ascent"] == [
        {"method": "grad_ascent", "task": "rwku", "seed": 0, "output": RunConfig.output, "params": {}, "attacks": "none"}]
    # under the relearning attack (the default) every method's record reads the views: RAP relearns on them
    assert len(sweep_jobs(["grad_ascent"], ["rwku"], [0], ablation="views")) == len(VIEWS)
    jobs = sweep_jobs(["npo", "scrub"], ["rwku"], [0], retain_items=8, paraphraser="templates",
                      target_modules=["q_proj"])
    assert {j.fields["method"]: sorted(set(j.fields) & {"retain_items", "paraphraser", "target_modules"})
            for j in jobs} == {"npo": ["paraphraser"], "scrub": ["paraphraser", "retain_items"]}
    npo_rt = sweep_jobs(["npo"], ["rwku"], [0], params={"retain_weight": "1"}, retain_items=8)
    assert npo_rt[0].fields["retain_items"] == 8


def test_shards_partition_the_plan():
    jobs = sweep_jobs(["a", "b", "c"], ["x"], [0, 1, 2])
    parts = [shard(jobs, i, 4) for i in range(4)]
    labels = [j.label for p in parts for j in p]
    assert sorted(labels) == sorted(j.label for j in jobs) and len(set(labels)) == len(jobs)


def test_runs_everything_then_skips_on_resume(tmp_path):
    jobs = sweep_jobs(["r2f", "ga"], ["rwku"], [0, 1], output=str(tmp_path))
    first = execute(jobs, str(tmp_path), runner=fake_runner.Run, process=(0, 1), progress=lambda m: None)
    assert (first.ran, first.skipped) == (12, 0)
    store = Store(tmp_path)
    assert len(store) == 12 and all(record_key(r) == r["key"] for r in store.records())
    again = execute(jobs, str(tmp_path), runner=fake_runner.Run, process=(0, 1), progress=lambda m: None)
    assert (again.ran, again.skipped) == (0, 12)
    assert set(calls().values()) == {1}


def test_changed_config_or_data_forces_a_rerun(tmp_path, monkeypatch):
    quiet = dict(runner=fake_runner.Run, process=(0, 1), progress=lambda m: None)
    execute(sweep_jobs(["r2f"], ["rwku"], [0]), str(tmp_path), **quiet)
    report = execute(sweep_jobs(["r2f"], ["rwku"], [0], params={"rank": "4"}), str(tmp_path), **quiet)
    assert report.ran == 3  # same names, changed hyper-parameter: new keys
    report = execute(sweep_jobs(["r2f"], ["rwku"], [0], views=3), str(tmp_path), **quiet)
    assert report.ran == 3
    monkeypatch.setenv("R2F_FAKE_REVISION", "rev2")
    assert execute(sweep_jobs(["r2f"], ["rwku"], [0]), str(tmp_path), **quiet).ran == 3
    monkeypatch.setenv("R2F_FAKE_DEFAULT", "2")  # a method's default changed, same command line
    assert execute(sweep_jobs(["r2f"], ["rwku"], [0]), str(tmp_path), **quiet).ran == 3
    assert len(Store(tmp_path)) == 15


def test_a_job_is_keyed_by_what_its_paths_hold_and_the_targets_they_name(tmp_path, monkeypatch):
    """The same model folder and data by other paths, a proxy the method never reads, and the
    same targets by number, name or an id split at its comma are the same job: a run from another
    folder resumes it. The folder's weights replaced at the same path are another job."""
    import shutil

    from r2f_bench.engine.config import RunConfig
    from r2f_bench.results.job import Job
    from r2f_bench.results.sweep import stored_keys
    from r2f_bench.tasks.rwku import SAMPLE_DIR

    model, data, there = tmp_path / "model", tmp_path / "rwku", tmp_path / "there"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    shutil.copytree(SAMPLE_DIR, data)
    (data / "Target" / "3_Tamsin_Quorve").rename(data / "Target" / "3_Tamsin_Quorve,_of_Ash")
    there.mkdir()
    (there / "m").symlink_to(model)
    (there / "d").symlink_to(data)

    def keys(model: str, data_dir: str, targets: list[str], **more: str) -> list[str]:
        job = Job(RunConfig(method="fullgrad", task="rwku", model=model, data_dir=data_dir, targets=targets,
                            dev_targets=1, output=str(tmp_path / "out"), **more).to_dict())
        return stored_keys([job])[job.label]

    first = keys(str(model), str(data), ["3_Tamsin_Quorve,_of_Ash", "1_Orla_Vantree"])
    monkeypatch.chdir(there)
    assert keys("./m", "d", ["3_Tamsin_Quorve", "_of_Ash", "1"], proxy="./m") == first  # --targets split the comma
    assert keys("./m", "d", ["Tamsin Quorve, of Ash", "orla vantree"], limit=5) == first
    assert keys("./m", "d", ["1_Orla_Vantree", "3_Tamsin_Quorve,_of_Ash"]) != first  # the order is the run's
    (model / "model.safetensors").write_bytes(b"other weights")
    assert not set(keys(str(model), str(data), ["3_Tamsin_Quorve,_of_Ash", "1_Orla_Vantree"])) & set(first)


class Killed(BaseException):
    """Stands for SIGKILL/Ctrl-C: not an Exception, so nothing catches it."""


def test_killed_midway_resumes_each_job_exactly_once(tmp_path, monkeypatch):
    jobs = sweep_jobs(["r2f", "ga", "fullgrad"], ["rwku"], [0, 1])
    real = fake_runner.Run.run_target
    budget = {"left": 7}

    def dying(self, target):
        if budget["left"] == 0:
            raise Killed()
        budget["left"] -= 1
        return real(self, target)

    monkeypatch.setattr(fake_runner.Run, "run_target", dying)
    with pytest.raises(Killed):
        execute(jobs, str(tmp_path), runner=fake_runner.Run, process=(0, 1), progress=lambda m: None)
    assert len(Store(tmp_path)) == 7
    monkeypatch.setattr(fake_runner.Run, "run_target", real)
    report = execute(jobs, str(tmp_path), runner=fake_runner.Run, process=(0, 1), progress=lambda m: None)
    assert (report.ran, report.skipped) == (18 - 7, 7)
    assert len(calls()) == 18 and set(calls().values()) == {1}
    assert len(Store(tmp_path)) == 18


def test_keep_going_reports_failures(tmp_path, monkeypatch):
    real = fake_runner.Run.run_target

    def flaky(self, target):
        if self.config.method == "ga":
            raise RuntimeError("boom")
        return real(self, target)

    monkeypatch.setattr(fake_runner.Run, "run_target", flaky)
    jobs = sweep_jobs(["ga", "r2f"], ["rwku"], [0])
    with pytest.raises(RuntimeError):
        execute(jobs, str(tmp_path), runner=fake_runner.Run, process=(0, 1), progress=lambda m: None)
    report = execute(jobs, str(tmp_path), runner=fake_runner.Run, process=(0, 1), keep_going=True,
                     progress=lambda m: None)
    assert report.ran == 3 and len(report.failed) == 1 and "boom" in report.failed[0]


def test_sweep_command_runs_and_resumes(fake_run, tmp_path, capsys):
    argv = ["sweep", "--methods", "npo,grad_ascent", "--tasks", "rwku", "--seeds", "0-1",
            "--set", "lr=0.1", "--limit", "2", "--output", str(tmp_path)]
    assert main(argv + ["--dry-run"]) == 0
    assert "4 jobs planned" in capsys.readouterr().out and len(Store(tmp_path)) == 0
    assert main(argv) == 0
    assert "8 targets run, 0 already done" in capsys.readouterr().out
    assert main(argv) == 0
    assert "0 targets run, 8 already done" in capsys.readouterr().out
    assert {r["config"]["params"]["lr"] for r in Store(tmp_path).records()} == {"0.1"}


@pytest.mark.parametrize("setting, named", [("lr=5e-4", "method 'r2f' has no parameter 'lr'"),
                                            ("step=-1", "parameter 'step' of method 'fullgrad' must be in (0, 1]")])
def test_sweep_refuses_a_set_some_method_rejects_before_anything_runs(fake_run, tmp_path, capsys, setting, named):
    """--set reaches every method of a sweep; one that lacks the parameter (or rejects the
    value) is refused in one line at planning, not as a failed job after the others ran."""
    argv = ["sweep", "--methods", "grad_ascent,r2f" if "lr" in setting else "fullgrad", "--tasks", "rwku",
            "--set", setting, "--limit", "1", "--output", str(tmp_path)]
    for extra in (["--dry-run"], []):
        assert main(argv + extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and named in err[0] and ("into the same --output" in err[0]) == ("lr" in setting)
    assert not fake_run.CALLS and len(Store(tmp_path)) == 0


def test_a_job_that_cannot_be_set_up_is_refused_before_any_job_runs(tmp_path):
    """Before, a bad job (a misspelt model among several) failed only when its turn came, or
    when the first finished job's forecast set it up, which aborted even --keep-going."""
    class Picky(fake_runner.Run):
        def __init__(self, config, progress=print):
            if config.model == "./tpyo":
                raise UserError("model path ./tpyo does not exist; pass a local directory.")
            super().__init__(config, progress)

    jobs = sweep_jobs(["r2f"], ["rwku"], [0], models=["./good", "./tpyo"], limit=2)
    with pytest.raises(UserError, match=r"^job .*tpyo.*: model path ./tpyo does not exist; .* None of the 2 job\(s\) was run; fix it, or pass --keep-going"):
        execute(jobs, str(tmp_path), runner=Picky, process=(0, 1), progress=lambda m: None)
    assert not fake_runner.CALLS
    report = execute(jobs, str(tmp_path), runner=Picky, process=(0, 1), keep_going=True, progress=lambda m: None)
    assert report.ran == 2 and len(report.failed) == 1 and "tpyo" in report.failed[0]



def test_a_finished_sweep_rerun_sets_each_job_up_once(tmp_path):
    """Before, a rerun of finished jobs set each up twice (before any ran, then at its turn)."""
    built = []

    class Counted(fake_runner.Run):
        def __init__(self, config, progress=print):
            built.append(config.method)
            super().__init__(config, progress)

    jobs = sweep_jobs(["r2f", "grad_ascent"], ["rwku"], [0], limit=2)
    first = execute(jobs, str(tmp_path), runner=Counted, process=(0, 1), progress=lambda m: None)
    assert (first.ran, len(built)) == (4, 4)  # set up, then run
    built.clear()
    again = execute(jobs, str(tmp_path), runner=Counted, process=(0, 1), progress=lambda m: None)
    assert (again.ran, again.skipped, len(built)) == (0, 4, 2)
    assert again.job_keys == first.job_keys and sorted(again.keys) == sorted(first.keys)
