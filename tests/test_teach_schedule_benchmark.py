"""benchmarks/teach_schedule.py: each schedule really teaches the pretrained model the world (its
own cache entry, read back by a run on the chosen schedule), the choice is made on the check
questions alone, and a malformed schedule is one line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]


def script(name: str = "teach_schedule"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_schedule_is_taught_and_the_chosen_one_is_read_back(pretrained, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path / "cache"))
    teach = script()
    assert teach.main(["--model", str(pretrained), "--schedules", "1x1e-4,2x3e-3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    weak, strong = result["schedules"]
    assert (weak["epochs"], weak["lr"], strong["epochs"], strong["lr"]) == (1, 1e-4, 2, 3e-3)
    assert strong["steps"] == 2 * weak["steps"] > 0 and weak["check_items"] > 0
    assert all(0 <= r["recited"] <= 100 and r["recited_items"] == 200 and 0 < r["recited_floor"] < 50
               for r in (weak, strong))
    assert result["chosen"] == max(result["schedules"], key=lambda r: r["check_answered"])
    infos = {e: json.loads((e / "r2f_info.json").read_text()) for e in (tmp_path / "cache" / "models").glob("taught-*")}
    assert sorted((i["epochs"], i["never_taught_answered"], i["taught_answered"]) for i in infos.values()) == [
        (r["epochs"], r["check_answered"], r["taught_answered"]) for r in (weak, strong)]  # what the taught model answered
    entries = {i["epochs"]: load_file(str(e / "model.safetensors")) for e, i in infos.items()}
    untouched = load_file(str(pretrained / "model.safetensors"))
    moved = {e: sum(float((w[k] - untouched[k]).norm()) for k in w.keys() & untouched.keys()) for e, w in entries.items()}
    assert sorted(moved) == [1, 2] and moved[2] > moved[1] > 0  # each schedule taught, the stronger further

    from r2f_bench.engine.run import Run
    from r2f_bench.engine.config import RunConfig
    from r2f_bench.tasks.rwku.world import WorldConfig, write

    said: list[str] = []
    world = write(WorldConfig(seed=0), tmp_path / "world")
    Run(RunConfig(method="grad_ascent", task="rwku", data_dir=str(world), model=str(pretrained), limit=1,
                  teach_epochs=2, teach_lr=3e-3, output=str(tmp_path / "out")), progress=said.append).prepare()
    assert any(m.startswith("model taught the knowledge world: loaded from cache") for m in said)
    assert not any(m.startswith("teaching the knowledge world") for m in said)


def test_the_teaching_threads_reach_every_schedule_and_the_chosen_line(monkeypatch, capsys):
    """--teach-threads is part of the taught model's key: each schedule's run is handed it, and
    the line naming the choice carries it (testbed.py must be given the same to read it back)."""
    teach, seen = script(), []

    class Taught:
        def __init__(self, config, progress):
            seen.append(config)
            self.model_info = {"steps": 53 * config.teach_epochs, "teach_seconds": 1.0, "taught_answered": 50.0,
                               "never_taught_answered": 10.0 * config.teach_epochs, "check_items": 200}

        def prepare(self):
            pass

    monkeypatch.setattr(teach, "Run", Taught)
    monkeypatch.setattr(teach, "recited", lambda run, biographies: 90.0 - run.model_info["never_taught_answered"])
    assert teach.main(["--model", "m", "--schedules", "1x1e-4,2x1e-4", "--teach-threads", "2"]) == 0
    assert [(c.teach_epochs, c.teach_threads) for c in seen] == [(1, 2), (2, 2)]
    out = capsys.readouterr().out
    assert "chosen: --teach-epochs 2 --teach-lr 0.0001 --teach-threads 2 (" in out  # on the check questions only
    assert "| 1 | 0.0001 | 53 | 1 | 50.0 | 10.0 (200) | 80.0 (200) | 11.5 |" in out  # world 0's floor
    assert teach.main(["--model", "m", "--schedules", "1x1e-4", "--chat-template", "off"]) == 0
    assert seen[-1].chat_template == "off" and seen[0].chat_template == "auto"  # part of the key too
    assert "chosen: --teach-epochs 1 --teach-lr 0.0001 --chat-template off (" in capsys.readouterr().out
    from r2f_bench.errors import UserError

    with pytest.raises(UserError, match=r"^--teach-threads must be at least 1, got 0\.$"):
        teach.main(["--model", "m", "--schedules", "1x1e-4", "--teach-threads", "0"])
    assert len(seen) == 3  # refused before any teaching


def test_the_recitation_floor_is_always_naming_each_attributes_commonest_value():
    cuts = [{"attribute": "city", "answer": v} for v in ("Oslo", "Oslo", "Lima")] + [
        {"attribute": "year", "answer": v} for v in ("1950", "1960", "1960", "1960")]
    assert script().commonest_value_share(cuts, [cuts[0], cuts[2], cuts[3], cuts[4]]) == 50.0


def test_the_choice_is_the_most_check_questions_answered_then_the_fewest_steps():
    rows = [{"check_answered": 40.0, "steps": 50}, {"check_answered": 60.0, "steps": 200},
            {"check_answered": 60.0, "steps": 100}, {"check_answered": 10.0, "steps": 10}]
    assert script().choose(rows) is rows[2]


@pytest.mark.parametrize("bad", ["10e-4", "0x1e-4", "5x-1e-4", "fivex1e-4", "10xnan"])
def test_a_malformed_schedule_is_one_line_naming_it(bad):
    from r2f_bench.errors import UserError

    with pytest.raises(UserError, match=rf"^--schedules: '{bad}' is not EPOCHSxLR with both positive"):
        script().main(["--model", "x", "--schedules", f"5x5e-5,{bad}"])


def test_a_schedule_out_of_the_runs_range_is_refused_before_any_teaching():
    """Before: the first schedule was taught, then the second's rate refused by the run."""
    from r2f_bench.errors import UserError

    with pytest.raises(UserError, match=r"^--schedules: '10x5' is out of the run's range \(--teach-lr must be at most "
                                        r"1\.0, got 5\.0\); say 10x1e-4\.$"):
        script().main(["--model", "x", "--schedules", "5x5e-5,10x5"])


@pytest.mark.parametrize("argv,line", [
    (["--seeds", "0-a"], r"bad --seeds item '0-a'.*"),
    (["--strengths", "1e-4:1e-3"], r"--strengths '1e-4:1e-3': write LO:HI:N .*"),
    (["--strengths", "1e-3:1e-4:5"], r"--strengths '1e-3:1e-4:5': write LO:HI:N .*"),
    (["--strengths", "1e-4,nan"], r"--strengths '1e-4,nan': write LO:HI:N .*"),
    (["--threads", "0"], r"--threads must be at least 1, got 0\."),
    (["--teach-threads", "0"], r"--teach-threads must be at least 1, got 0\."),
    (["--targets", "1"], r"--targets must be at least 2 \(a target's control forgets another target\), got 1\."),
])
def test_the_acceptance_script_refuses_bad_options_before_teaching(argv, line, monkeypatch):
    """Before: tracebacks, a refusal after teaching, or (one target) a control that forgot the target itself."""
    from r2f_bench.errors import UserError

    testbed = script("testbed")
    monkeypatch.setattr(testbed, "check_world", lambda *a, **k: pytest.fail("taught before the options were checked"))
    with pytest.raises(UserError, match=f"^{line}$"):
        testbed.main(["--model", "m", *argv])


def test_the_acceptance_checks_run_on_the_schedule_given(monkeypatch, capsys):
    """benchmarks/testbed.py hands --teach-epochs, --teach-lr, --teach-threads and --chat-template
    to every run it makes (the taught model's key), and states them; without them it leaves the
    run's default."""
    testbed, seen = script("testbed"), []

    def check_world(world, seeds, targets, method, task, strengths, progress, config, curves):
        seen.append(config)
        return {"teach_seconds": [1.0]}

    monkeypatch.setattr(testbed, "check_world", check_world)
    monkeypatch.setattr(testbed, "passes", lambda result: {"A1": False})
    assert testbed.main(["--model", "m", "--teach-epochs", "20", "--teach-lr", "1e-4", "--teach-threads", "2",
                         "--chat-template", "off", "--json"]) == 1
    assert (seen[0]["teach_epochs"], seen[0]["teach_lr"], seen[0]["teach_threads"], seen[0]["chat_template"]) == (
        20, 1e-4, 2, "off")
    assert json.loads(capsys.readouterr().out)["teach_epochs"] == 20
    testbed.main(["--model", "m", "--json"])
    assert not {"teach_epochs", "teach_lr", "teach_threads", "chat_template"} & seen[1].keys()
