"""The runner's contract: dev split, fair requests, cheap resume, sequential deletions,
saved checkpoints that lm_eval reads, and the dev-split hyper-parameter search."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import torch

from r2f_bench.cli import main
from r2f_bench.engine.config import RunConfig
from r2f_bench.engine.run import Run
from r2f_bench.tasks.rwku import SAMPLE_DIR

# the string sample (five fictional people, taught verbatim): fast, and the mechanics are the same
TINY = dict(model="embedded:mistral-h64-l2", proxy="embedded:mistral-h32-l2", data_dir=str(SAMPLE_DIR))
TINY_ARGS = ["--model", TINY["model"], "--proxy", TINY["proxy"], "--data-dir", TINY["data_dir"]]


def test_dev_split_and_requests_never_retain_the_targets_own_facts(tmp_path):
    run = Run(RunConfig(method="fullgrad", task="rwku", limit=2, dev_targets=2, split="dev",
                        output=str(tmp_path), **TINY), progress=lambda m: None)
    # tuning scores one half of the dev targets; methods fit on (and retain) the other half
    dev = [t.id for t in run.bench.dev_targets]
    assert [t.id for t in run.targets] == dev[:1]
    assert [t.id for t in run.scope.scored.dev_targets] == dev[1:]
    assert {t.id for t in run.targets}.isdisjoint(t.id for t in run.bench.targets)
    for target in run.targets:
        retain = run.scope.retain_for(target)
        assert retain and {p.target for p in retain} == {dev[1]}
    assert not run._prepared  # constructing a run builds no model


def test_resumed_sweep_builds_nothing(tmp_path, monkeypatch):
    from r2f_bench.results.job import Job
    from r2f_bench.results.sweep import execute

    job = Job(dict(method="fullgrad", task="rwku", seed=0, limit=1, output=str(tmp_path), **TINY))
    first = execute([job], str(tmp_path), process=(0, 1), progress=lambda m: None)
    assert first.ran == 1

    def refuse(self):
        raise AssertionError("a finished job was prepared again")

    monkeypatch.setattr(Run, "prepare", refuse)
    again = execute([job], str(tmp_path), process=(0, 1), progress=lambda m: None)
    assert (again.ran, again.skipped, again.keys) == (0, 1, first.keys)


def test_a_record_states_the_wall_seconds_of_each_phase_within_its_wall_time(tmp_path):
    from r2f_bench.cost import ONCE_PHASES, TARGET_PHASES

    run = Run(RunConfig(method="fullgrad", task="rwku", limit=1, output=str(tmp_path), **TINY), progress=lambda m: None)
    record = run.run_target(run.targets[0])
    phases, once = record["phases"], record["phases_once"]
    assert list(phases) == list(TARGET_PHASES) and list(once) == list(ONCE_PHASES)
    assert all(isinstance(s, float) and s >= 0 for s in [*phases.values(), *once.values()])
    assert sum(phases.values()) <= record["wall_seconds"] + 0.01  # the phases never overlap
    assert phases["unlearn"] >= record["seconds"] and once["setup"] == record["setup_seconds"]
    assert once["load"] > 0  # the target model was built (taught, or read from the cache)


def test_sequential_deletions_start_from_the_previous_result(tmp_path):
    run = Run(RunConfig(method="fullgrad", task="rwku", limit=2, sequential=True, output=str(tmp_path), **TINY),
              progress=lambda m: None)
    run.prepare()
    untouched = weights(run.model)
    first = run.run_target(run.targets[0])
    after_first = weights(run.model)  # the first result, not its RAP attack
    assert not same(after_first, untouched)
    second = run.run_target(run.targets[1])
    assert (first["info"]["sequence_step"], second["info"]["sequence_step"]) == (1, 2)
    assert not same(weights(run.model), after_first)
    # the second target's untouched scores (computed mid-sequence) are the untouched model's
    reference = copy.deepcopy(run.model)
    reference.load_state_dict(untouched)
    paths = run.evaluator.untouched_paths(run.targets[1])
    cached = {s: json.loads(paths[s].read_text()) for s in run.scope.probe_sets(run.targets[1])}
    assert cached == run.evaluator.scores(reference, run.targets[1])


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", ["fullgrad", "eco"])
def test_each_target_edits_the_one_model_which_is_then_put_back_bit_exactly(tmp_path, method):
    """No second copy: the method gets the run's own model; after the target (RAP's attack
    included) its weights, hooks and flags are the untouched ones, so the next target's
    record is the one a fresh run gives."""
    config = RunConfig(method=method, task="rwku", limit=2, output=str(tmp_path / "a"), **TINY)
    run = Run(config, progress=lambda m: None)
    run.prepare()
    untouched, hooks = weights(run.model), {n: len(m._forward_hooks) for n, m in run.model.named_modules()}
    given = []
    unlearn = run.method.unlearn
    run.method.unlearn = lambda model, request, ctx: given.append(model) or unlearn(model, request, ctx)
    records = [run.run_target(t) for t in run.targets]
    assert given == [run.model, run.model]
    assert same(weights(run.model), untouched)
    assert {n: len(m._forward_hooks) for n, m in run.model.named_modules()} == hooks
    fresh = Run(RunConfig(**{**config.to_dict(), "output": str(tmp_path / "b")}), progress=lambda m: None)
    alone = fresh.run_target(fresh.targets[1])
    for key in ("usr", "usr_seen", "gur", "locality", "rap", "rap_control", "identity_alignment", "set_scores"):
        assert records[1][key] == alone[key], key
    assert 0 <= records[1]["phases"]["restore"] <= records[1]["wall_seconds"]
    budget = records[0]["budget"]  # measured alike for every method
    assert budget["retain_read"] is False and budget["retain_in_setup"] is (method == "eco")
    if method == "fullgrad":  # one gradient over the request's views, then a step on every adapted layer
        assert budget["grad_passes"] >= 1 and budget["grad_tokens"] > 0 and 50 < budget["weights_changed"] < 100
    else:  # an inference-time method: no gradient through the model, no weight changed
        assert budget["grad_passes"] == 0 and budget["weights_changed"] in (0.0, None)


def test_a_method_that_leaves_its_adapter_attached_gets_one_line(tmp_path):
    from r2f_bench.errors import UserError
    from r2f_bench.unlearner import Edit

    run = Run(RunConfig(method="fullgrad", task="rwku", limit=1, output=str(tmp_path), **TINY), progress=lambda m: None)
    run.prepare()

    def attach(model, request, ctx):
        model.model.layers[0].adapter = torch.nn.Linear(2, 2)
        return Edit(model)

    run.method.unlearn = attach
    with pytest.raises(UserError, match="left the model's structure changed .* unload"):
        run.run_target(run.targets[0])


def test_saved_checkpoint_is_evaluated_by_the_lm_eval_command(tmp_path, capsys):
    """The README's `lm_eval --include_path ...` command on a model saved by --save-model."""
    from r2f_bench.tasks import rwku

    saved = tmp_path / "models"
    assert main(["--method", "fullgrad", "--task", "rwku", "--limit", "1", "--output", str(tmp_path / "out"),
                 "--save-model", str(saved), *TINY_ARGS]) == 0
    record = json.loads((tmp_path / "out" / "results.jsonl").read_text().splitlines()[0])
    checkpoint = saved / record["target"]
    assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "tokenizer.json").is_file()
    lm_eval = os.path.join(os.path.dirname(sys.executable), "lm_eval")
    out = subprocess.run(
        [lm_eval, "--model", "hf", "--model_args", f"pretrained={checkpoint}", "--include_path", str(rwku.HERE),
         "--tasks", "rwku_forget_fb,rwku_neighbor_qa", "--metadata", json.dumps({"targets": [record["target"]], "data_dir": str(SAMPLE_DIR)}),
         "--output_path", str(tmp_path / "lm_eval")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "rwku_forget_fb" in out.stdout
    results = json.loads(next((tmp_path / "lm_eval").rglob("results_*.json")).read_text())["results"]
    # the same numbers the run recorded for the unlearned model (records are in percent)
    after = record["set_scores"]["after"]
    assert 100 * results["rwku_forget_fb"]["rouge_l_recall,none"] == pytest.approx(after["forget_fb"], abs=0.1)
    assert 100 * results["rwku_neighbor_qa"]["rouge_l_recall,none"] == pytest.approx(after["neighbor_qa"], abs=0.1)


def test_inference_time_method_refuses_to_save_a_checkpoint(tmp_path, capsys):
    assert main(["--method", "eco", "--task", "rwku", "--limit", "1", "--output", str(tmp_path),
                 "--save-model", str(tmp_path / "m"), *TINY_ARGS]) == 2
    assert "edits no weights" in capsys.readouterr().err


def test_string_data_teaches_the_runs_targets_and_every_retain_window(tmp_path):
    """Real (string) data teaches what the run uses: its evaluation and dev targets, under
    every kind of request, with the requests built as the run builds them."""
    knows = lambda **kw: Run(RunConfig(method="fullgrad", task="rwku", data_dir=str(SAMPLE_DIR), output=str(tmp_path), **kw),
                             progress=lambda m: None)
    run = knows(limit=1, dev_targets=1)
    teaching, _ = run.plan.knowledge()
    assert teaching.strings and {p.target for p in teaching.facts if p.target} == {"1_Orla_Vantree", "5_Liesel_Draymoor"}
    taught = {(p.prompt, p.answer) for p in teaching.facts}
    assert {(p.prompt, p.answer) for p in run.bench.retain_pool()} <= taught
    assert set(teaching.facts) == set(knows(limit=1, dev_targets=1, forget_source="probes").plan.knowledge()[0].facts)


def test_a_world_teaches_its_texts_and_no_scored_probe():
    run = Run(RunConfig(method="fullgrad", task="rwku", limit=3, dev_targets=2), progress=lambda m: None)
    teaching, _ = run.plan.knowledge()
    assert not teaching.strings and teaching.texts and teaching.facts
    taught = {p.prompt for p in teaching.facts}
    for target in run.bench.targets + run.bench.dev_targets:
        for probes in target.probes.values():
            assert not taught & {p.prompt for p in probes}


def test_gur_is_na_below_the_utility_floor_with_one_warning(tmp_path):
    """An untrained model's 2% utility becoming 19% is no 955% retention: GUR is n/a, said once."""
    from r2f_bench.engine.metrics import RATIO_FLOOR, retention

    said: list[str] = []
    run = Run(RunConfig(method="fullgrad", task="rwku", data_dir=str(SAMPLE_DIR), limit=1, output=str(tmp_path)),
              progress=said.append)
    assert run.recorder.gur(2.0, 19.1) is None and run.recorder.gur(RATIO_FLOOR / 2, 0.0) is None
    assert [m for m in said if "GUR" in m] == ["warning: the untouched model scores 2.0% on the utility set, below "
                                               "the 5% floor: GUR, a ratio to it, is n/a in this run's records"]
    assert run.recorder.gur(50.0, 45.0) == 90.0 and retention(RATIO_FLOOR, 10.0, RATIO_FLOOR) == 200.0
    assert retention(0.0, 10.0) is None


def test_a_sweep_frees_each_finished_runs_weights_before_the_next_job(tmp_path):
    """A run's model and weights' snapshot are gone before the next job builds its own (a
    finished Run holds reference cycles, which only a collection frees)."""
    import pathlib

    from r2f_bench.results.job import Job

    from r2f_bench.results.sweep import execute

    jobs = [Job(dict(method=m, task="rwku", seed=0, limit=1, output=str(tmp_path), **TINY))
            for m in ("fullgrad", "grad_ascent")]
    left: list[list[str]] = []

    def progress(message: str) -> None:
        if "job 2/2" in message:
            left.append([p.name for p in pathlib.Path(tmp_path).glob(".weights-*")])

    execute(jobs, str(tmp_path), process=(0, 1), progress=progress)
    assert left == [[]] and not list(tmp_path.glob(".weights-*"))


def subnormal_survives() -> bool:
    tiny = torch.tensor([1e-30]) * torch.tensor([1e-10])  # 1e-40: a subnormal float32, or 0 when flushed
    return float(tiny) != 0.0


def test_a_run_on_cpu_flushes_subnormal_floats(tmp_path):
    """Subnormal floats (a model pushed far by ascent puts them in its softmax) cost x86 cores many
    times over: a run on CPU flushes them to zero, on the thread count it chose."""
    torch.set_flush_denormal(False)
    try:
        assert subnormal_survives()
        Run(RunConfig(method="fullgrad", task="rwku", limit=1, threads=1, output=str(tmp_path), **TINY),
            progress=lambda m: None).prepare()
        assert not subnormal_survives() and torch.get_num_threads() == 1
    finally:
        torch.set_flush_denormal(False)
