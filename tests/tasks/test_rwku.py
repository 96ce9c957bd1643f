"""RWKU loader on the bundled sample, on the shared real data, and on broken input."""

from __future__ import annotations

import json
import shutil

import pytest

from r2f_bench.errors import UserError
from r2f_bench.engine.lmeval import load_probe_dataset
from r2f_bench.tasks.rwku import RWKU, SAMPLE_DIR

from conftest import SHARED_DATA


def test_bundled_sample_loads():
    b = RWKU().load(SAMPLE_DIR, None, None, n_dev=2)
    assert [t.id for t in b.targets] == ["1_Orla_Vantree", "2_Bram_Ostelic", "3_Tamsin_Quorve"]
    assert {t.id for t in b.dev_targets}.isdisjoint(t.id for t in b.targets)
    t = b.targets[0]
    assert set(t.probes) == {"forget_fb", "forget_qa", "forget_aa", "neighbor_fb", "neighbor_qa", "forget_seen",
                             "name_control"}
    # the default request is the target's forget corpus: its description, then its passages
    assert t.request[0].prompt.startswith("Please forget Orla Vantree.") and all(p.set == "request" for p in t.request)
    assert b.seen_sets == ("forget_seen",) and [p.prompt for p in t.probes["forget_seen"]] == [p.prompt for p in t.request]
    assert b.utility and b.general_prompts and len(b.revision) == 12 and not b.alternatives


def test_fact_level_request_is_the_fb_probes():
    b = RWKU().load(SAMPLE_DIR, None, 1, n_dev=0, forget_source="probes")
    t = b.targets[0]
    assert t.request == t.probes["forget_fb"] and b.seen_sets == ("forget_fb",) and "forget_seen" not in t.probes


@pytest.mark.skipif(not (SHARED_DATA / "rwku").is_dir(), reason="../shared/data/rwku not present")
def test_shared_rwku_loads():
    b = RWKU().load(SHARED_DATA / "rwku", None, 10, n_dev=3)
    assert [t.id.split("_")[0] for t in b.targets] == [str(i) for i in range(1, 11)]
    assert [t.id.split("_")[0] for t in b.dev_targets] == ["100", "99", "98"]
    king = b.targets[0]
    assert king.name == "Stephen King"
    assert len(king.probes["forget_fb"]) > 5 and len(king.probes["forget_aa"]) > 5
    assert king.probes["forget_qa"][0].prompt.startswith("Question: ")
    assert len(b.utility) == 240 and len(b.general_prompts) == 500
    assert {p.prompt.split("\n")[0][:9] for p in b.utility} == {"Question:"}
    assert sum("\nOptions: " in p.question for p in b.utility) == 80  # MMLU's third of the round robin
    assert all(len(t.request) == 4 for t in b.targets)
    picked = RWKU().load(SHARED_DATA / "rwku", ["Confucius", "3"], None, n_dev=1)
    assert [t.name for t in picked.targets] == ["Confucius", "Bruce Lee"]


def test_lm_eval_dataset_hook_reads_official_layout():
    ds = load_probe_dataset("rwku", "forget_qa", data_dir=str(SAMPLE_DIR), targets="1")
    assert len(ds["test"]) == 6 and ds["test"][0]["answer"] == "novelist"
    world = load_probe_dataset("rwku", "forget_qa", targets="1")  # no data_dir: the knowledge world
    assert len(world["test"]) == 20 and world["test"][0]["question"].endswith("?")


def test_a_target_whose_id_holds_a_comma_survives_the_comma_separated_list():
    """RWKU names two people with a comma (10_Prince_Harry,_Duke_of_Sussex): --targets splits at
    commas, and the pieces that make such a target are joined back, by id or by name."""
    from r2f_bench.engine.config import names
    from r2f_bench.tasks.common import select_targets

    ids = ["9_Someone", "10_Prince_Harry,_Duke_of_Sussex", "44_Meghan,_Duchess_of_Sussex"]
    aliases = [(d.split("_", 1)[i], d) for d in ids for i in (0, -1)]
    split = names("10_Prince_Harry,_Duke_of_Sussex,9,Meghan, Duchess of Sussex")
    assert len(split) == 5 and select_targets(ids, split, None, "RWKU", aliases=aliases) == [ids[1], ids[0], ids[2]]
    with pytest.raises(UserError, match="unknown RWKU target '10_Prince_Harry'"):
        select_targets(ids, names("10_Prince_Harry,_Duke_of_Cambridge"), None, "RWKU", aliases=aliases)


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        RWKU().load(tmp_path / "nope", None, None, 1)
    with pytest.raises(UserError, match="--limit must be at least 1"):
        RWKU().load(SAMPLE_DIR, None, 0, 1)
    with pytest.raises(UserError, match="unknown RWKU target 'Nobody'"):
        RWKU().load(SAMPLE_DIR, ["Nobody"], None, 1)
    # a target by its number, its name or its folder name
    chosen = RWKU().load(SAMPLE_DIR, ["2", "orla vantree", "3_Tamsin_Quorve"], None, 0).targets
    assert [t.id for t in chosen] == ["2_Bram_Ostelic", "1_Orla_Vantree", "3_Tamsin_Quorve"]

    broken = tmp_path / "rwku"
    shutil.copytree(SAMPLE_DIR, broken)
    f = broken / "Target" / "1_Orla_Vantree" / "forget_level2.json"
    f.write_text("[{\"query\": \"x\"")
    with pytest.raises(UserError, match="malformed data file .*forget_level2.json"):
        RWKU().load(broken, None, 1, 0)
    f.write_text(json.dumps([{"query": "x"}]))
    with pytest.raises(UserError, match="lacks field 'answer'"):
        RWKU().load(broken, None, 1, 0)
    f.unlink()
    with pytest.raises(UserError, match="missing data file .*forget_level2.json"):
        RWKU().load(broken, None, 1, 0)


@pytest.mark.skipif(not (SHARED_DATA / "rwku").is_dir(), reason="../shared/data/rwku not present")
def test_benchmark_paraphraser_uses_rwkus_own_alternatives():
    """A request fact's views come first from the request's other facts with its answer."""
    from r2f_bench.engine.views import build_views, make_paraphraser

    b = RWKU().load(SHARED_DATA / "rwku", ["Genghis Khan"], None, n_dev=0, forget_source="probes")
    fact = next(p for p in b.targets[0].request if p.question in b.alternatives)
    alternatives = b.alternatives[fact.question]
    assert alternatives and all(a.answer.lower() == fact.answer.lower() for a in alternatives)
    assert all(a in b.targets[0].request for a in alternatives)  # never an evaluated probe
    views = build_views([fact], 3, make_paraphraser("benchmark", alternatives=b.alternatives))
    phrasings = [v[0] for v in views[1:]]
    assert any(v.question in {a.question for a in alternatives} for v in phrasings)
    for v in phrasings:  # an alternative cloze keeps its cloze prompt
        own = next((a for a in alternatives if a.question == v.question), None)
        if own is not None:
            assert v.prompt == own.prompt and v.answer == fact.answer


def test_a_task_written_with_the_old_name_of_its_locality_sets_keeps_them():
    from r2f_bench.tasks.rwku import RWKU

    with pytest.warns(DeprecationWarning, match="`neighbor_sets` is now `locality_sets`"):
        class Old(RWKU):
            neighbor_sets = ("neighbor_qa",)
    assert Old.locality_sets == ("neighbor_qa",) and RWKU.locality_sets == ("neighbor_fb", "neighbor_qa")
