"""Every method forgets what it was never shown, on the knowledge world.

Each method runs at its shipped defaults on the default world's evaluation targets
(corpus requests: biographies; every probe held out, never taught) and must forget
more of a target's held-out answers than the same method run on *another* person's
request does: a negative control that damages as much but holds nothing about the
target. The criterion is checked to fail for a no-op and for a random step.
"""

from __future__ import annotations

import copy

import pytest
import torch

from r2f_bench.plugins import registry
from r2f_bench.engine.config import RunConfig
from r2f_bench.engine.run import Run
from r2f_bench.results.testbed import other_request, random_step_like
from r2f_bench.unlearner import Edit, Unlearner

TARGETS = 8  # paired over 8 targets: with 4, one target's swing (-12 to +57 points for R2F) moved the mean by 10
MARGIN = 10.0  # points of held-out USR the real request must add over the control
METHODS = [i.name for i in registry().listing("method")]


def world_run(method: str, out) -> Run:
    run = Run(RunConfig(method=method, task="rwku", limit=TARGETS, dev_targets=2, output=str(out), threads=1),
              progress=lambda m: None)
    run.prepare()
    return run


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return tmp_path_factory.mktemp("never-saw")


def held_out_usr(run: Run, method: Unlearner, control: bool) -> float:
    """Mean held-out USR over the targets, of ``method`` on each target's own request or
    (``control``) on the next target's."""
    values = []
    for target in run.targets:
        request = other_request(run, target) if control else run.request(target)
        torch.manual_seed(0)
        edit = method.unlearn(copy.deepcopy(run.model), request, run.ctx)
        before = run.evaluator.untouched(target)["scores"]
        usr, _ = run.recorder.headline(target, before, run.evaluator.scores(edit.model, target, forget_only=True))
        values.append(usr or 0.0)
    return sum(values) / len(values)


def margin(run: Run, method: Unlearner) -> tuple[float, float]:
    return held_out_usr(run, method, control=False), held_out_usr(run, method, control=True)


@pytest.mark.parametrize("name", METHODS)
def test_method_forgets_what_it_never_saw(name, out):
    run = world_run(name, out)
    real, control = margin(run, run.method)
    print(f"{name}: held-out USR {real:.1f} on its request, {control:.1f} on another's")
    assert real >= control + MARGIN, f"{name}: held-out USR {real:.1f} on its request vs {control:.1f} on another's"


class NoOp(Unlearner):
    name = "no-op"

    def unlearn(self, model, request, ctx):
        return Edit(model)


class RandomStep(Unlearner):
    """A random step the size of what gradient ascent does here."""
    name = "random-step"

    def __init__(self, reference: Unlearner) -> None:
        super().__init__()
        self.reference = reference

    def unlearn(self, model, request, ctx):
        moved = self.reference.unlearn(copy.deepcopy(model), request, ctx).model
        return Edit(random_step_like(model, moved, seed=0))


def test_the_criterion_fails_for_a_no_op_and_a_random_step(out):
    run = world_run("grad_ascent", out)
    for control in (NoOp(), RandomStep(run.method)):
        real, other = margin(run, control)
        assert real < other + MARGIN, type(control).__name__
