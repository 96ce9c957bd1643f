"""The evaluator: the untouched model's evaluation and the attacks' controls evaluated on
the untouched weights and cached (a wrong-shape entry rebuilt), the edits an attack makes
put back, identity alignment's reference taken once."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest
import numpy as np
import torch

from r2f_bench.engine import evaluate
from r2f_bench.engine.config import RunConfig
from r2f_bench.engine.evaluate import Evaluator, rows_shape, scores_shape
from r2f_bench.engine.plan import Plan
from r2f_bench.engine.weights import UNTOUCHED, Weights
from r2f_bench.tasks.rwku import SAMPLE_DIR


@pytest.fixture
def plan(tmp_path, monkeypatch):
    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path / "cache"))
    return Plan(RunConfig(method="fullgrad", task="rwku", data_dir=str(SAMPLE_DIR), limit=1, output=str(tmp_path)),
                progress=lambda m: None)


def bias(model: torch.nn.Module) -> float:
    return float(model.bias.detach().sum())


class Scored:
    """Stand-in scores (every probe answered) that note the bias of each model scored."""

    def __init__(self, plan: Plan) -> None:
        self.plan, self.models = plan, []

    def __call__(self, model, sets, sampling=None, reply=""):
        self.models.append(bias(model))
        return {s: [{"answered": 1.0} for _ in ps] for s, ps in sets.items()}


def evaluator(plan: Plan, monkeypatch, key: str = "stand-in", label: str = "/models/m") -> tuple[Evaluator, Scored]:
    """An evaluator of a stand-in pretrained model: its weights' ``key``, its path as typed ``label``."""
    torch.manual_seed(0)
    weights = Weights(torch.nn.Linear(2, 2), plan.out_dir, "m")
    built = SimpleNamespace(label=label, info={"key": key}, knowledge={"embedded": False}, tokenizer=None,
                            chat_template=False)
    ev = Evaluator(plan.scope, built, weights, plan.config, plan.progress)
    scored = Scored(plan)
    monkeypatch.setattr(ev, "score_sets", scored)
    return ev, scored


def edit(ev: Evaluator) -> None:
    with torch.no_grad():
        ev.weights.edited().bias.add_(1.0)


def attack(model: torch.nn.Module, *args, **kwargs) -> None:
    """A stand-in for RAP's fine-tune: every bias up by 4."""
    with torch.no_grad():
        model.bias.add_(4.0)


def test_the_untouched_evaluation_is_of_the_untouched_weights_and_cached(plan, monkeypatch):
    ev, scored = evaluator(plan, monkeypatch)
    target, untouched = plan.targets[0], bias(ev.weights.model)
    edit(ev)  # e.g. mid-sequence: the model holds the last deletion's result
    first = ev.untouched(target)
    paths = ev.untouched_paths(target)
    assert scored.models == [untouched]
    assert first == {"scores": {s: json.loads(paths[s].read_text()) for s in plan.scope.probe_sets(target)},
                     "extra": json.loads(paths[evaluate.EXTRA].read_text())} and first["extra"] == {}
    again, rescored = evaluator(plan, monkeypatch)  # another run of the same model: read back
    assert again.untouched(target) == first and rescored.models == []
    other, _ = evaluator(plan, monkeypatch, key="another model")
    assert not set(other.untouched_paths(target).values()) & set(paths.values())
    assert evaluator(plan, monkeypatch, label="../models/m")[0].untouched_paths(target) == paths  # the path as typed


def test_each_probe_set_is_cached_once_per_model_whatever_the_target(plan, monkeypatch):
    """The utility set is the same for every target: evaluated with the first, read back
    for the next; a forget-only evaluation (the knowledge scan) fills the forget sets a
    run then reads."""
    ev, scored = evaluator(plan, monkeypatch)
    calls = []
    monkeypatch.setattr(ev, "score_sets", lambda model, sets: calls.append(set(sets)) or scored(model, sets))
    first, second = plan.bench.targets[0], plan.bench.dev_targets[0]
    ev.untouched(first, forget_only=True)
    ev.untouched(first)
    ev.untouched(second)
    util = plan.task.utility_set
    assert calls == [set(plan.scope.probe_sets(first, forget_only=True)),
                     set(plan.scope.probe_sets(first)) - set(plan.scope.probe_sets(first, forget_only=True)),
                     set(plan.scope.probe_sets(second)) - {util}]


def test_a_wrong_shape_untouched_entry_is_rebuilt(plan, monkeypatch):
    ev, scored = evaluator(plan, monkeypatch)
    target = plan.targets[0]
    first = ev.untouched(target)
    ev.untouched_paths(target)["forget_qa"].write_text(json.dumps([1]))
    assert ev.untouched(target) == first and len(scored.models) == 2


def attacks_of(ev: Evaluator, steps: int = 5):
    """The run's attacks (RAP alone) on the stand-in evaluator."""
    from r2f_bench.attack import Budget
    from r2f_bench.engine.attacks import Attacks

    return Attacks("rap", ev.scope, ev, ev.weights, SimpleNamespace(seed=0, tokenizer=None), Budget(steps, 1e-3),
                   ev.progress)


def test_an_attacks_control_attacks_the_untouched_weights_cached_by_attack(plan, monkeypatch):
    from r2f_bench.attacks import relearn

    ev, scored = evaluator(plan, monkeypatch)
    target, untouched = plan.targets[0], bias(ev.weights.model)
    monkeypatch.setattr(relearn, "finetune", attack)
    attacks = attacks_of(ev)
    planned = attacks.prepare(target, SimpleNamespace(views=[target.request, target.request], facts=target.request))
    edit(ev)
    control = attacks.controls(target, planned)["rap"]
    assert scored.models == [pytest.approx(untouched + 8)]
    assert set(control) == set(plan.scope.probe_sets(target, forget_only=True))
    assert bias(ev.weights.at(UNTOUCHED)) == untouched  # the attack is put back
    assert attacks.controls(target, planned)["rap"] == control and len(scored.models) == 1
    attacks.controls(target, [dataclasses.replace(planned[0], data=planned[0].data[1:])])
    assert len(scored.models) == 2  # other attack data: another entry


def test_the_attack_on_the_runs_model_is_put_back(plan, monkeypatch):
    from r2f_bench.attacks import relearn

    ev, scored = evaluator(plan, monkeypatch)
    untouched, target = bias(ev.weights.model), plan.targets[0]
    monkeypatch.setattr(relearn, "finetune", attack)
    attacks = attacks_of(ev)
    planned = attacks.prepare(target, SimpleNamespace(views=[target.request], facts=target.request))
    attacks.after(ev.weights.at(UNTOUCHED), target, planned)
    assert scored.models == [pytest.approx(untouched + 8)] and bias(ev.weights.at(UNTOUCHED)) == untouched


def test_with_no_attack_steps_nothing_is_attacked_evaluated_or_cached(plan, monkeypatch):
    from r2f_bench.attacks import relearn

    ev, scored = evaluator(plan, monkeypatch)
    untouched, target = bias(ev.weights.model), plan.targets[0]
    monkeypatch.setattr(relearn, "finetune", attack)
    attacks = attacks_of(ev, steps=0)
    planned = attacks.prepare(target, SimpleNamespace(views=[target.request, target.request], facts=target.request))
    assert planned == [] and attacks.controls(target, planned) == {} and attacks.after(ev.weights.model, target, planned) == {}
    assert scored.models == [] and bias(ev.weights.model) == untouched
    folder = ev.untouched_paths(target)[evaluate.EXTRA].parent
    assert not (folder.exists() and any(folder.iterdir()))


def test_identity_alignments_reference_is_the_untouched_models_taken_once_and_cached(plan, monkeypatch):
    """Taken on the untouched weights, kept by each distribution's largest entries, written
    to the cache, read back batch by batch by the next run of the same model; a file cut
    short, or an index outside the vocabulary, is set aside and the reference taken again."""
    from r2f_bench.engine import reference
    from r2f_bench.engine.metrics import largest

    ev, _ = evaluator(plan, monkeypatch)
    untouched, taken = bias(ev.weights.model), []
    rows = [3, 2]
    batches = [torch.softmax(10 * torch.arange(12.0).reshape(3, 4), dim=-1), torch.full((2, 4), 0.25)]
    monkeypatch.setattr(evaluate, "positions", lambda tok, prompts: rows)
    monkeypatch.setattr(evaluate, "distributions", lambda model, tok, prompts: taken.append(bias(model)) or iter(batches))
    monkeypatch.setattr(evaluate, "identity_alignment", lambda ref, model, tok, prompts: len(list(ref)))
    ev.weights.model.get_output_embeddings = lambda: SimpleNamespace(weight=torch.zeros(4, 1))
    edit(ev)
    assert ev.alignment(ev.weights.model) == 2 and ev.alignment(ev.weights.model) == 2
    assert taken == [untouched]

    def again():
        run, said = evaluator(plan, monkeypatch)[0], []
        run.progress = said.append
        run.weights.model.get_output_embeddings = ev.weights.model.get_output_embeddings
        return list(run.reference()), said

    read, said = again()
    assert taken == [untouched] and not said
    for got, batch in zip(read, batches, strict=True):
        want = largest(batch)
        assert all(torch.equal(getattr(got, f), getattr(want, f)) for f in ("counts", "norms", "indices", "values"))
    assert [r.counts.tolist() for r in read] == [[1, 1, 1], [4, 4]]  # peaked rows keep one entry, flat rows all
    path = ev.reference().path
    for damage in (lambda: (path / reference.VALUES).write_bytes((path / reference.VALUES).read_bytes()[:-4]),
                   lambda: (path / reference.INDICES).write_bytes(np.array([7] * 11, dtype=np.int32).tobytes())):
        damage()
        read, said = again()
        assert len(read) == 2 and any("could not be loaded" in m for m in said)
    assert len(taken) == 3


def test_shapes_say_why_an_entry_does_not_fit():
    sets = {"forget_qa": [None, None], "empty": []}
    assert scores_shape({"forget_qa": [{}, {}]}, sets) is None
    assert scores_shape([], sets) == "a JSON list, not an object of probe sets"
    assert scores_shape({"forget_qa": [{}, 1]}, sets) == "probe set 'forget_qa' lacks its 2 score rows"
    assert rows_shape([{}, {}], sets["forget_qa"]) is None
    assert rows_shape([{}], sets["forget_qa"]) == "not the 2 score rows of its probes"
