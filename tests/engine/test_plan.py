"""A run's plan: inputs checked and data loaded without a model, each target's probe sets
by role, seeded retain items, and the dev split."""

from __future__ import annotations

import pytest

from r2f_bench.engine.config import RunConfig
from r2f_bench.engine.plan import Plan
from r2f_bench.engine.scope import scored_split
from r2f_bench.errors import UserError
from r2f_bench.tasks.rwku import SAMPLE_DIR


@pytest.fixture
def plan(tmp_path, monkeypatch):
    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path / "cache"))
    return Plan(RunConfig(method="fullgrad", task="rwku", data_dir=str(SAMPLE_DIR), limit=2,
                          params={"step": "0.5"}, output=str(tmp_path)),
                progress=lambda m: None)


def test_probe_sets_by_role_and_the_utility_set_last(plan):
    target = plan.targets[0]
    roles = plan.scope.roles(target)
    assert roles["held_out"] and roles["locality"] and not set(roles["held_out"]) & set(roles["locality"])
    assert all(plan.task.role(s, plan.bench) == role for role, sets in roles.items() for s in sets)
    sets = plan.scope.probe_sets(target)
    assert list(sets) == (roles["held_out"] + roles["seen"] + roles["locality"] + roles["name_control"]
                          + [plan.task.utility_set])
    named, neighbours = sets["name_control"], [p for s in roles["locality"] for p in sets[s]]
    assert [p.prompt for p in named] == [f"{target.name}: {p.prompt}" for p in neighbours]  # the neighbours, named
    assert [p.answer for p in named] == [p.answer for p in neighbours]
    assert sets[plan.task.utility_set] == plan.bench.utility
    assert list(plan.scope.probe_sets(target, forget_only=True)) == roles["held_out"] + roles["seen"]


def test_retain_items_are_a_seeded_sample_of_the_dev_requests(plan):
    target = plan.targets[0]
    retain = plan.scope.retain_for(target)
    assert retain == plan.scope.retain_for(target) and retain != plan.scope.retain_for(plan.targets[1])
    assert set(retain) <= set(plan.scope.scored.retain_pool()) and all(p.target != target.id for p in retain)


def test_the_completed_config_and_the_runner_api(plan):
    assert plan.config.forget_source == "corpus"  # the task's default, so one store key for the same work
    assert plan.resolved_params() == {"step": 0.5, "loss": plan.params.loss}  # --set, and the defaults filled in
    assert plan.data_revision() == plan.bench.revision
    assert set(plan.versions()) == {"r2f-bench", "torch", "method:fullgrad", "task:rwku"}
    assert not hasattr(plan, "model")


def test_a_parameter_added_later_enters_the_key_only_off_its_default(tmp_path):
    """``steps`` came after stores held one-step results: at 1 (the behaviour before it) it is
    left out of the resolved parameters, so those results resume; at 5 it is a new result."""
    def resolved(**params):
        return Plan(RunConfig(method="fullgrad", task="rwku", data_dir=str(SAMPLE_DIR), limit=1, params=params,
                              output=str(tmp_path)), progress=lambda m: None).resolved_params()

    assert "steps" not in resolved() and resolved(steps="5")["steps"] == 5
    assert resolved(steps="1") == resolved()


def test_bad_inputs_fail_before_any_data_loads(tmp_path):
    with pytest.raises(UserError, match="unknown split 'test'"):
        Plan(RunConfig(method="fullgrad", task="rwku", split="test", output=str(tmp_path)), progress=lambda m: None)
    with pytest.raises(UserError, match="method 'eco' edits no weights"):
        Plan(RunConfig(method="eco", task="rwku", save_model=str(tmp_path / "m"), output=str(tmp_path)),
             progress=lambda m: None)


def test_the_dev_split_scores_one_half_and_fits_on_the_other(plan):
    assert scored_split(plan.bench, "eval") is plan.bench
    dev = scored_split(plan.bench, "dev")
    assert [t.id for t in dev.targets + dev.dev_targets] == [t.id for t in plan.bench.dev_targets]
    assert len(dev.targets) == len(plan.bench.dev_targets) // 2
    with pytest.raises(UserError, match="at least 2 dev targets"):
        scored_split(scored_split(plan.bench, "dev"), "dev")



def test_the_plan_completes_a_copy_and_the_store_key_is_the_same_either_way(tmp_path):
    """The caller's configuration is never changed; the key a sweep stores under reads the
    run's completed copy, so an unset --forget-source and its default are one key."""
    from r2f_bench.results.job import Job
    from r2f_bench.results.sweep import stored_keys

    given = RunConfig(method="fullgrad", task="rwku", data_dir=str(SAMPLE_DIR), limit=1, output=str(tmp_path),
                      threads=10_000)
    plan = Plan(given, progress=lambda m: None)
    assert given.forget_source is None and given.threads == 10_000
    assert plan.config.forget_source == "corpus" and plan.config.threads < 10_000
    fields = {k: v for k, v in given.to_dict().items() if k != "threads"}
    unset, = stored_keys([Job(fields)]).values()
    default, = stored_keys([Job({**fields, "forget_source": "corpus"})]).values()
    other, = stored_keys([Job({**fields, "forget_source": "probes"})]).values()
    assert len(unset) == 1 and unset == default != other


@pytest.mark.parametrize("proxy", ["./no-such-proxy", "first-layers:99"])
def test_the_proxy_is_checked_only_for_a_method_that_reads_it(proxy, tmp_path, monkeypatch):
    """A sweep over proxies runs a method without one on the first proxy: a proxy it never
    reads must not refuse it (before: refused like R2F)."""
    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path / "cache"))
    config = dict(task="rwku", data_dir=str(SAMPLE_DIR), limit=1, proxy=proxy, output=str(tmp_path))
    assert Plan(RunConfig(method="fullgrad", **config), progress=lambda m: None).targets
    with pytest.raises(UserError, match="proxy|first-layers"):
        Plan(RunConfig(method="r2f", **config), progress=lambda m: None)
