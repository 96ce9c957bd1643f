"""The record schema: a record's headline and fields from given per-probe scores, the
diverged record, GUR's utility floor said once, and the provenance every record states."""

from __future__ import annotations

import dataclasses

from types import SimpleNamespace

import pytest
import torch

from r2f_bench.cost import Cost
from r2f_bench.data import ForgetRequest, Probe, Target
from r2f_bench.engine.metrics import RATIO_FLOOR
from r2f_bench.engine.record import Measured, Recorder, provenance, run_facts
from r2f_bench.hardware import cpu

ROLES = {"held_out": ["forget_a", "forget_b"], "seen": ["seen"], "locality": ["neighbour"], "name_control": ["named"]}


class Task:
    utility_set = "utility"

    def chance(self, probe_set: str) -> float:
        return 0.0

    def official_scores(self, set_scores: dict[str, float]) -> dict[str, float]:
        return {"forget": set_scores["forget_a"]}


@pytest.fixture
def said() -> list[str]:
    return []


@pytest.fixture
def plan(said):
    """What a recorder reads of a run: its scope, configuration and progress."""
    bench = SimpleNamespace(utility=[None] * 4, general_prompts=["p"] * 2, request_source="corpus", revision="r1")
    return SimpleNamespace(scope=SimpleNamespace(task=Task(), roles=lambda target: ROLES, bench=bench),
                           config=SimpleNamespace(method="m", task="t", seed=3, to_dict=lambda: {"method": "m"}),
                           progress=said.append)


def recorder_of(plan) -> Recorder:
    return Recorder(plan.scope, plan.config, ("grad_cosine",), plan.progress)


def rows(*answered: int) -> list[dict]:
    return [{"answered": float(a), "rouge_l_recall": float(a)} for a in answered]


def recalls(*scores: float) -> list[dict]:
    return [{"rouge_l_recall": s} for s in scores]


BEFORE = {"forget_a": rows(1, 1, 1, 0), "forget_b": rows(1, 0), "seen": rows(1, 1),
          "neighbour": recalls(1.0, 0.5), "named": recalls(1.0, 0.5, 0.5), "utility": recalls(1, 1, 0, 1)}
AFTER = {"forget_a": rows(0, 1, 0, 0), "forget_b": rows(0, 0), "seen": rows(0, 1),
         "neighbour": recalls(0.5, 0.5), "named": recalls(0.5, 0.0, 0.5), "utility": recalls(1, 0.5, 0, 1)}
RELEARNED = {"forget_a": rows(1, 0, 0, 0), "forget_b": rows(1, 0), "seen": rows(0, 0)}
CONTROL = {"forget_a": rows(1, 1, 0, 0), "forget_b": rows(1, 0), "seen": rows(1, 1)}
def probes(probe_set: str, n: int) -> list[Probe]:
    return [Probe(prompt=f"Question {i} about T One?", answer=f"answer{i}", set=probe_set, target="t1") for i in range(n)]


TARGET = Target(id="t1", name="T One", request=[], probes={"forget_a": probes("forget_a", 4),
                                                            "forget_b": probes("forget_b", 2), "seen": probes("seen", 2)})
REQUEST = ForgetRequest(target="t1", views=[[Probe(prompt="Q?", answer="A", set="request", target="t1",
                                                  question="Q?")]],
                        retain=[Probe(prompt="R?", answer="B", set="request", target="t2")])


def test_a_records_scores_from_given_before_and_after(plan):
    measured = Measured({"scores": BEFORE, "extra": {"mink": 1.0}}, AFTER, {"mink": 2.0}, 0.9, {"rap": (RELEARNED, 1.5)}, {"rap": CONTROL})
    record = recorder_of(plan).record(TARGET, REQUEST, measured, Cost(seconds=2.0, peak_mem_mb=10.0),
                                   {"grad_cosine": 0.5}, {"host": "h"})
    # forget_a forgets 2 of its 3 known probes, forget_b its 1: pooled by known probes
    assert record["usr_by_level"] == pytest.approx({"forget_a": 200 / 3, "forget_b": 100.0})
    assert record["usr"] == pytest.approx(75.0) and record["usr_seen"] == pytest.approx(50.0)
    assert record["gur"] == pytest.approx(62.5 / 75 * 100) and record["locality"] == pytest.approx(50 / 75 * 100)
    assert record["name_control"] == pytest.approx(50.0)  # the named neighbours: 1/3 after, 2/3 before
    # of the 3 forgotten, the attack brings back 1 of forget_a's 2 and forget_b's 1; the control keeps 3 of 4 known
    assert record["rap"] == pytest.approx(200 / 3) and record["rap_control"] == pytest.approx(75.0)
    # after the attack 2 of the 4 known probes are not answered (one forgotten, one the attack broke)
    assert record["attacks"] == {"rap": {"usr": pytest.approx(50.0), "recovered": pytest.approx(200 / 3),
                                         "control": pytest.approx(75.0), "forgotten": 3, "seconds": 1.5}}
    assert (record["known_forget_probes"], record["forgotten_forget_probes"], record["forget_probes"]) == (4, 3, 6)
    assert record["n"] == {"utility": 4, "identity_prompts": 2, "locality": 2, "name_control": 3, "request": 1,
                           "retain": 1}
    assert record["official"] == {"before": {"forget": 75.0, "mink": 1.0}, "after": {"forget": 25.0, "mink": 2.0}}
    assert record["set_scores"]["after"]["utility"] == 62.5 and record["roles"] == ROLES
    assert [record[k] for k in ("method", "task", "target", "seed", "status")] == ["m", "t", "t1", 3, "ok"]
    assert (record["identity_alignment"], record["seconds"], record["peak_mem_mb"]) == (0.9, 2.0, 10.0)
    assert record["grad_cosine"] == 0.5 and record["host"] == "h"  # a result column from info; the provenance


def test_with_no_attack_rap_and_its_control_are_na_and_the_rest_unchanged(plan):
    measured = Measured({"scores": BEFORE, "extra": {}}, AFTER, {}, 0.9, {"rap": (RELEARNED, 1.5)}, {"rap": CONTROL})
    attacked = recorder_of(plan).record(TARGET, REQUEST, measured, Cost(seconds=2.0, peak_mem_mb=10.0), {}, {})
    unattacked = recorder_of(plan).record(TARGET, REQUEST, dataclasses.replace(measured, attacked={}, controls={}),
                                       Cost(seconds=2.0, peak_mem_mb=10.0), {}, {})
    assert unattacked["rap"] is None and unattacked["rap_control"] is None
    assert attacked["attacks"]["rap"]["seconds"] == 1.5 and unattacked["attacks"] == {}
    assert {k: v for k, v in unattacked.items() if not k.startswith("rap") and k != "attacks"} == \
        {k: v for k, v in attacked.items() if not k.startswith("rap") and k != "attacks"}


def test_the_headline_is_the_records_usr_and_gur(plan):
    recorder = recorder_of(plan)
    assert recorder.headline(TARGET, BEFORE, AFTER) == pytest.approx((75.0, 62.5 / 75 * 100))
    forget_only = {s: AFTER[s] for s in ("forget_a", "forget_b", "seen")}
    assert recorder.headline(TARGET, BEFORE, forget_only) == (pytest.approx(75.0), None)


def test_a_probe_its_own_prompt_answers_is_never_known(plan):
    """A chat model that repeats the question "answers" a probe whose reference is in the
    question: such a probe never counts as known, so it enters neither USR nor RAP."""
    echo = Probe(prompt="Is answer0 the birthplace of T One?", answer="answer0", set="forget_a", target="t1")
    target = dataclasses.replace(TARGET, probes={**TARGET.probes, "forget_a": [echo, *TARGET.probes["forget_a"][1:]]})
    measured = Measured({"scores": BEFORE, "extra": {}}, AFTER, {}, 0.9, {"rap": (RELEARNED, 1.5)}, {"rap": CONTROL})
    record = recorder_of(plan).record(target, REQUEST, measured, Cost(seconds=2.0, peak_mem_mb=10.0), {}, {})
    # forget_a's first probe (known, then forgotten, then relearned) is out: 2 known there, 1 of them forgotten
    assert (record["known_forget_probes"], record["forgotten_forget_probes"], record["echo_forget_probes"]) == (3, 2, 1)
    assert record["usr_by_level"]["forget_a"] == pytest.approx(50.0) and record["usr"] == pytest.approx(200 / 3)
    assert record["rap"] == pytest.approx(50.0)  # forget_b's one forgotten probe comes back, forget_a's does not
    assert recorder_of(plan).headline(target, BEFORE, AFTER)[0] == pytest.approx(200 / 3)


def test_a_diverged_record_is_a_failure_never_a_score(plan):
    record = recorder_of(plan).diverged(TARGET, Cost(seconds=1.0, peak_mem_mb=float("nan")), {"loss": 1.0}, {"host": "h"})
    assert record["status"] == "diverged" and record["peak_mem_mb"] is None  # strict JSON: NaN is null
    assert all(record[m] is None for m in ("usr", "usr_seen", "gur", "locality", "rap", "rap_control",
                                           "identity_alignment"))
    assert record["info"] == {"loss": 1.0} and record["host"] == "h"


def test_gur_is_na_below_the_utility_floor_said_once(plan, said):
    recorder = recorder_of(plan)
    assert recorder.gur(2.0, 19.1) is None and recorder.gur(RATIO_FLOOR / 2, 0.0) is None
    assert len(said) == 1 and "2.0% on the utility set" in said[0]
    assert recorder.gur(50.0, 45.0) == 90.0


def test_locality_and_the_name_control_leave_out_a_set_the_untouched_model_barely_answered(plan):
    """A ratio to almost nothing reads as noise (1 % becoming 5 % is 500 %): a neighbour set
    the untouched model scores below the floor on is left out of Locality, and a name control
    below it is n/a, however the edit moved them."""
    roles = {**ROLES, "locality": ["neighbour", "faint"]}
    plan.scope.roles = lambda target: roles
    faint = recalls(0.02, 0.04)  # 3 %: below the floor
    before = {**BEFORE, "faint": faint, "named": recalls(0.04, 0.0, 0.0)}
    record = recorder_of(plan).record(TARGET, REQUEST, Measured(
        {"scores": before, "extra": {}}, {**AFTER, "faint": recalls(1.0, 1.0), "named": recalls(1.0, 1.0, 1.0)},
        {}, 0.9, {}, {}), Cost(seconds=2.0, peak_mem_mb=10.0), {}, {})
    assert record["locality"] == pytest.approx(50 / 75 * 100)  # the neighbour set alone, as without "faint"
    assert record["name_control"] is None and record["ratio_floor"] == RATIO_FLOOR
    assert record["set_scores"]["before"]["faint"] == pytest.approx(3.0)
    assert (record["n"]["locality"], record["n"]["name_control"]) == (2, 0)  # the probes each ratio rests on


def test_provenance_states_the_phases_that_ran_in_order_and_the_runs_one_time_costs(plan):
    built = SimpleNamespace(label="model", proxy=None, knowledge={"embedded": True}, chat_template=False)
    facts = run_facts(plan.config, plan.scope.bench, {"step": 0.1}, {"r2f-bench": "0"})
    stated = provenance(facts, built, REQUEST, {"load": 3.0, "setup": 1.5}, 9.0,
                        {"attacks": 2.0, "untouched": 1.0, "restore": 0.5}, torch.device("meta"))
    assert list(stated["phases"]) == ["untouched", "attacks", "restore"]
    assert stated["phases_once"] == {"load": 3.0, "setup": 1.5} and stated["setup_seconds"] == 1.5
    assert stated["models"] == {"target": "model", "proxy": None} and stated["threads"] is None
    assert stated["machine"] == f"{cpu()[0]} ({cpu()[1]})"  # what the phases' seconds were measured on
    assert stated["views"] == [["Q?"]] and stated["wall_seconds"] == 9.0 and stated["data_revision"] == "r1"
    assert [stated[k] for k in ("params", "versions", "config")] == [{"step": 0.1}, {"r2f-bench": "0"}, {"method": "m"}]
