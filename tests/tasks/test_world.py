"""The synthetic knowledge world: generated from a seed, read by the RWKU loader, and
nothing scored is ever taught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r2f_bench.engine import protocol
from r2f_bench.engine.protocol import asked, normalise
from r2f_bench.tasks.rwku import RWKU
from r2f_bench.tasks.rwku import world as W


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return W.write(W.WorldConfig(seed=7, people=120, targets=12), tmp_path_factory.mktemp("world") / "w")


def test_same_seed_same_bytes_other_seed_other_world(tmp_path):
    a = W.write(W.WorldConfig(seed=3, people=60, targets=6), tmp_path / "a")
    b = W.write(W.WorldConfig(seed=3, people=60, targets=6), tmp_path / "b")
    c = W.write(W.WorldConfig(seed=4, people=60, targets=6), tmp_path / "c")
    read = lambda root: {p.relative_to(root): p.read_bytes() for p in root.rglob("*.json")}
    assert read(a) == read(b) and read(a) != read(c)


def test_the_loader_reads_a_world_and_the_protocol_holds(small):
    bench = RWKU().load(small, None, 8, 2)
    protocol.check(bench, "rwku")
    assert bench.world is not None and not bench.world.strings and "synthetic knowledge world" in bench.source
    target = bench.targets[0]
    assert {"forget_fb", "forget_qa", "forget_aa", "neighbor_fb", "neighbor_qa", "forget_seen"} <= set(target.probes)
    assert len(target.request) == 4 and len(bench.utility) >= 100 and bench.general_prompts


def test_no_scored_string_is_taught_in_any_phrasing(small):
    bench = RWKU().load(small, ["all"], None, 0)
    teaching = bench.world
    taught = {normalise(p.question) for p in teaching.facts} | {normalise(t) for t in teaching.texts}
    corpus = "\n".join(normalise(t) for t in teaching.texts)
    for target in bench.targets:
        for name, probes in target.probes.items():
            if name == "forget_seen":  # the request's own windows, seen by design
                continue
            for p in probes:
                assert normalise(p.question) not in taught, p.question
                assert normalise(asked(p)) not in corpus, asked(p)  # a filled cloze is no biography sentence
    assert not taught & {normalise(p.question) for p in bench.utility}  # utility: never-taught QA of bystanders
    mia = {normalise(t) for t in bench.general_prompts}
    assert not mia & taught and not any(m in corpus for m in mia)


@pytest.mark.parametrize("seed", [7, 11])
def test_nothing_scored_is_a_near_copy_of_a_taught_string(tmp_path, seed):
    world = W.write(W.WorldConfig(seed=seed, people=120, targets=12), tmp_path / "w")
    bench = RWKU().load(world, None, 8, 4)
    assert bench.dev_targets and protocol.taught_leaks(bench, bench.world) == []


def test_the_taught_string_check_finds_a_near_copy(tmp_path, monkeypatch):
    """The cloze wording of an earlier world, "The birthplace of X is ___", near-copies the
    taught "The hometown of X is V" (5 of its 7 words in a row)."""
    monkeypatch.setitem(W.FB, "city", "The birthplace of {name} is ___.")
    bench = RWKU().load(W.write(W.WorldConfig(seed=7, people=120, targets=12), tmp_path / "w"), None, 8, 4)
    leaks = protocol.taught_leaks(bench, bench.world)
    assert leaks and all("birthplace" in leak.evaluated and leak.seen_in == "the taught texts" for leak in leaks)


def test_neighbours_share_a_surname_a_city_or_an_employer(small):
    facts = lambda rows: {r["attribute"]: r["answer"] for r in rows}
    for folder in (small / "Target").iterdir():
        target_rows = json.loads((folder / "forget_level2.json").read_text())
        name, mine = target_rows[0]["subject"], facts(target_rows)
        neighbours: dict[str, list[dict]] = {}
        for row in json.loads((folder / "neighbor_level2.json").read_text()):
            neighbours.setdefault(row["subject"], []).append(row)
        assert neighbours and name not in neighbours
        for other, rows in neighbours.items():
            theirs = facts(rows)
            assert (other.split()[-1] == name.split()[-1] or theirs["city"] == mine["city"]
                    or theirs["employer"] == mine["employer"]), (name, other)


def test_a_never_taught_template_is_asked_and_never_taught(small):
    teaching = json.loads((small / W.TEACHING_FILE).read_text())
    diag = json.loads((small / W.DIAGNOSTICS_FILE).read_text())["never_taught_template_qa_train"]
    taught = {r["question"] for r in teaching["qa"]}
    assert diag and not taught & {r["query"] for r in diag}
    assert all(r["query"].startswith("Name the") for r in diag)


def test_an_altered_cached_world_is_set_aside_and_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path))
    cfg = W.WorldConfig(seed=1, people=40, targets=4)
    said = []
    root = W.default_world(cfg, said.append)
    victim = next((root / "Target").glob("*/forget_level2.json"))
    victim.write_text("[]")
    again = W.default_world(cfg, said.append)
    assert again == root and json.loads(victim.read_text()) and any("set aside" in m or "altered" in m for m in said)


def test_utility_asks_every_wording_a_target_is_asked(small):
    """GUR weighs the same kinds of knowledge as USR: bystanders' questions in each wording
    of the targets' probes, never any target's or a taught question."""
    from r2f_bench.tasks.rwku.world import UTILITY_WORDINGS

    utility = json.loads(next((small / "Target").glob("1_*/triviaqa.json")).read_text())
    wordings = {t.split("{name}")[0] for w in UTILITY_WORDINGS for t in w.values()}
    asked = {w for w in wordings if any(u["question"].startswith(w) for u in utility)}
    assert len(asked) >= len(wordings) - 2, sorted(wordings - asked)


def test_the_control_diagonal_is_read_like_for_like():
    """A4's excess compares a control's USR with the utility answers it lost, not with
    100 − GUR: a control whose GUR reads 102 while it loses 30 % of both its known probes
    and its known utility answers sits on the diagonal."""
    from r2f_bench.results.testbed import passes, summarise

    on_diagonal = [(100.0, 0.0, 0.0, 0.0), (102.0, 30.0, 30.0, 30.0)]
    specific = [(100.0, 0.0, 0.0, 0.0), (95.0, 80.0, 5.0, 5.0)]
    curves = {"request": {"t@0": specific}, "other_request": {"t@0": on_diagonal}, "random_step": {"t@0": on_diagonal}}
    result = summarise({"t": [100.0]}, {"t": [100.0]}, [50.0], curves, [1.0], [0.1])
    assert result["a4_control_excess"] == {"other_request": 0.0, "random_step": 0.0}
    assert result["a4_margin_at_gur90"]["mean"] == 50.0
    assert passes(result)["A4"]


def test_controls_are_held_to_the_diagonal_where_rankings_are_read():
    """A control that forgets faster than it damages at GUR ≥ 90 fails A4; one that does
    so only on a heavily damaged model (GUR 60) passes, and the whole-curve excess says so."""
    from r2f_bench.results.testbed import passes, summarise

    specific = [(100.0, 0.0, 0.0, 0.0), (95.0, 80.0, 5.0, 5.0), (60.0, 95.0, 40.0, 40.0)]
    late = [(100.0, 0.0, 0.0, 0.0), (95.0, 5.0, 5.0, 5.0), (60.0, 55.0, 40.0, 40.0)]
    early = [(100.0, 0.0, 0.0, 0.0), (95.0, 15.0, 5.0, 5.0), (60.0, 40.0, 40.0, 40.0)]
    result = lambda control: summarise({"t": [100.0]}, {"t": [100.0]}, [50.0],
                                       {"request": {"t@0": specific}, "other_request": {"t@0": control},
                                        "random_step": {"t@0": late}}, [1.0], [0.1, 1.0])
    read_late, read_early = result(late), result(early)
    assert read_late["a4_control_excess"] == {"other_request": 0.0, "random_step": 0.0}
    assert read_late["a4_control_excess_whole_curve"] == {"other_request": 15.0, "random_step": 15.0}
    assert passes(read_late)["A4"]
    assert read_early["a4_control_excess"]["other_request"] == 10.0
    assert not passes(read_early)["A4"]


def test_a_request_that_breaks_the_named_sentences_as_much_as_it_forgets_fails_a4():
    """A4's name margin: USR at the strongest measured point kept at GUR ≥ 90 minus the share of
    the name-mention control lost there; a request that forgets by breaking the name fails."""
    from r2f_bench.results.testbed import NAME_MARGIN, passes, summarise

    control = [(100.0, 0.0, 0.0, 0.0), (95.0, 5.0, 5.0, 5.0)]
    result = lambda name_lost: summarise(
        {"t": [100.0]}, {"t": [100.0]}, [50.0],
        {"request": {"t@0": [(100.0, 0.0, 0.0, 0.0), (95.0, 80.0, 5.0, name_lost), (85.0, 95.0, 20.0, 95.0)]},
         "other_request": {"t@0": control}, "random_step": {"t@0": control}}, [1.0], [0.1, 1.0])
    specific, by_name = result(20.0), result(75.0)
    assert specific["a4_name_margin_at_gur90"]["mean"] == 60.0 and passes(specific)["A4"]
    assert by_name["a4_name_margin_at_gur90"]["mean"] == 5.0 < NAME_MARGIN and not passes(by_name)["A4"]


def test_a_model_whose_utility_gur_cannot_read_fails_a3_and_a4_without_numbers():
    """Below GUR's floor no curve is read: A3 and A4 are absent (never a measured 0) and fail;
    A1 and A2, read on the untouched model, stand."""
    from r2f_bench.results.testbed import CONDITIONS, passes, summarise

    result = summarise({"t": [60.0]}, {"t": [50.0]}, [45.0], {c: {} for c in CONDITIONS}, [1.0], [0.1])
    assert result["a3_usr_at_gur95"] is None and result["a4_margin_at_gur90"] is None and result["curves"] is None
    assert passes(result) == {"A1": True, "A2": True, "A3": False, "A4": False}


def test_the_worlds_cache_key_covers_its_wordings(tmp_path, monkeypatch):
    """A template edited in world_text.py is a new world, never a stale cached one."""
    from r2f_bench.tasks.rwku import world, world_text

    before = world.world_key(world.WorldConfig())
    edited = tmp_path / "world_text.py"
    edited.write_bytes(Path(world_text.__file__).read_bytes() + b"\n# one more wording\n")
    monkeypatch.setattr(world_text, "__file__", str(edited))
    assert world.world_key(world.WorldConfig()) != before


def test_recitation_cuts_each_bystanders_taught_biography_just_before_a_fact(small):
    """The rows teach_schedule.py recites: a bystander's own first biography up to one fact,
    the fact next (whatever the sentence's template, even one that names the fact first),
    one row per bystander and attribute, the same people and facts the check questions ask."""
    cfg = W.WorldConfig(seed=7, people=120, targets=12)
    teaching = json.loads((small / W.TEACHING_FILE).read_text())
    rows = W.recitation(cfg)
    check = {(q["question"], q["answer"]) for q in teaching["check"]}
    assert len(rows) == len(check) == len({(r["subject"], r["attribute"]) for r in rows})
    for r in rows:
        assert any(t.startswith(f"{r['text']} {r['answer']}") and r["subject"] in t for t in teaching["texts"])
        assert (W.QA[r["attribute"]][1].format(name=r["subject"]), r["answer"]) in check
    assert any(r["text"].endswith("Records give") for r in rows)  # a fact named before the person
