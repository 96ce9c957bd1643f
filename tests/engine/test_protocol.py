"""The protocol's first rule: no method ever sees what it is scored on, and every seed is a replicate."""

from __future__ import annotations

import dataclasses
import re

import pytest

from r2f_bench.engine import protocol
from r2f_bench.data import Probe
from r2f_bench.errors import UserError
from r2f_bench.plugins import registry
from r2f_bench.engine.config import RunConfig
from r2f_bench.engine.run import Run
from r2f_bench.engine.views import Paraphraser, build_views
from r2f_bench.tasks.rwku import RWKU, SAMPLE_DIR

from conftest import SHARED_DATA

SHARED = ("rwku", "wmdp", "muse")  # the benchmarks with data in ../shared/data (WaterDrum's folder holds a README)


def plain(text: str) -> str:
    """Lower-case words joined by one space: an exact-containment check independent of the protocol's."""
    return " ".join(re.findall(r"\w+", text.lower()))


def loads():
    """(task, data dir, forget source) for every registered task: the bundled sample,
    and ../shared/data when it is there."""
    out = []
    names = [info.name for info in registry().listing("task")]
    assert {"rwku", "wmdp", "muse", "waterdrum"} <= set(names)
    for name in names:
        cls = registry().task(name)
        for source in cls.forget_sources or (None,):
            out.append(pytest.param(name, None, source, id=f"{name}-sample-{source}"))
            if name not in SHARED:
                continue
            shared = SHARED_DATA / name
            out.append(pytest.param(name, shared, source, id=f"{name}-shared-{source}",
                                    marks=pytest.mark.skipif(not shared.is_dir(), reason=f"{shared} not present")))
    return out


@pytest.mark.parametrize("name,data_dir,source", loads())
def test_no_scored_item_reaches_what_a_method_sees(name, data_dir, source):
    bench = registry().task(name)().load(data_dir, None, 10, 3, source)
    leaks = protocol.find_leaks(protocol.evaluated_items(bench), protocol.method_visible(bench))
    assert leaks == []
    # the same without the protocol's matcher: no scored string of 6+ words inside a visible text
    visible = "\n".join(plain(text) for text, _ in protocol.method_visible(bench))
    assert [s for s, _ in protocol.evaluated_items(bench) if len(plain(s).split()) >= 6 and plain(s) in visible] == []
    assert all(t.request for t in bench.targets) and bench.utility and bench.general_prompts
    for target in bench.targets[:3]:  # offline paraphrases of the request reproduce no scored string
        protocol.check_views(target, build_views(target.request, 3, Paraphraser()), bench)


def test_the_check_fails_on_the_old_rwku_request():
    """Until this protocol, RWKU's request was the target's FB and QA probes: the very strings USR scored."""
    bench = RWKU().load(SAMPLE_DIR, None, 1, 0, "probes")
    t = bench.targets[0]
    old = dataclasses.replace(bench, targets=[dataclasses.replace(t, request=t.probes["forget_fb"] + t.probes["forget_qa"])],
                              seen_sets=())
    with pytest.raises(UserError, match=r"^rwku: target 1_Orla_Vantree, probe set forget_fb item .* appears in the request of 1_Orla_Vantree"):
        protocol.check(old, "rwku")
    protocol.check(bench, "rwku")  # declared as the seen set, the FB request is legitimate


def test_normalised_and_contained_strings_count():
    qa = Probe(prompt="Question: Where was Orla Vantree born?\nAnswer:", answer="Kestrel Bay", set="forget_qa",
               target="t", question="Where was Orla Vantree born?")
    cloze = Probe(prompt="Fill in the blank: Orla Vantree was born in ___.\nAnswer:", answer="Kestrel Bay",
                  set="forget_fb", target="t", question="Orla Vantree was born in ___.")
    evaluated = [(protocol.asked(p), p.set) for p in (qa, cloze)]
    seen = lambda text: protocol.find_leaks(evaluated, [(text, "request")])
    assert seen("WHERE was  Orla Vantree born") and seen("She told us that orla vantree was born in Kestrel-Bay, 1961.")
    assert seen("Orla Vantree was born in 1961.")  # 5 of the cloze's 7 words in a row: a near-copy
    assert not seen("Orla Vantree was born, 1961.") and not seen("Where was Bram born?")  # 4 of 7; 2 of 5
    assert protocol.Scored(["Orla Vantree was born in Kestrel Bay"]).scrub(
        "Orla Vantree writes novels. Orla Vantree was born in Kestrel Bay. She swims.") == "Orla Vantree writes novels. She swims."


BRUCE_LEE = "Bruce Lee was born on November 27, 1940"  # RWKU's FB, blank filled
WINDOW = "lee was born on november 27 1940 in san francisco"  # a request window of 3_Bruce_Lee's corpus


def test_a_near_copy_leaks():
    """Dropping the first name kept the old check (whole normalised substrings) from seeing it:
    7 of the 8 words in a row."""
    leaks = protocol.find_leaks([(BRUCE_LEE, "target 3_Bruce_Lee, probe set forget_fb")], [(WINDOW, "the request")])
    assert [l.evaluated for l in leaks] == [BRUCE_LEE]
    assert leaks[0].run == 7 and str(leaks[0]).endswith("appears in the request (7 of its 8 words in a row)")
    scored = protocol.Scored([BRUCE_LEE])
    assert scored.contains(WINDOW) and not scored.contains("Lee was born in San Francisco in 1940")
    assert scored.scrub(f"He was a martial artist. {WINDOW.capitalize()}. His son Brandon acted.") == (
        "He was a martial artist. His son Brandon acted.")
    # a run may span sentences: every sentence it passes through goes
    assert scored.scrub("He was Bruce. Lee was born on November 27, 1940. He acted.") == "He acted."
    assert [protocol.needed(n) for n in (3, 4, 5, 8, 10)] == [4, 4, 4, 5, 6]


def test_hold_out_takes_near_copies_out_of_the_requests():
    """A request fact that near-copies a held-out probe leaves the request (and the seen set it
    mirrors); a request left empty is left for the runner to skip with a warning."""
    bench = RWKU().load(SAMPLE_DIR, None, 1, 0, "probes")
    t = bench.targets[0]
    probe = t.probes["forget_qa"][0]
    copy = dataclasses.replace(t.request[0], question=f"Everyone knows: {protocol.asked(probe)}")
    leaking = dataclasses.replace(bench, targets=[dataclasses.replace(t, request=t.request + [copy])])
    with pytest.raises(UserError, match="appears in the request"):
        protocol.check(leaking, "rwku")
    held = protocol.hold_out(leaking)
    assert copy not in held.targets[0].request and held.targets[0].request
    protocol.check(held, "rwku")
    emptied = dataclasses.replace(bench, targets=[dataclasses.replace(t, request=[copy])])
    assert protocol.hold_out(emptied).targets[0].request == []


def test_the_near_copy_check_is_fast_on_thousands_of_texts():
    """An index of the scored strings' 4-grams: one pass over each visible text's words."""
    import time

    scored = [f"Person {i} was born in the city of Town{i} in {1900 + i % 100}" for i in range(1000)]
    visible = [(" ".join(f"word{(i * 7 + j) % 5000}" for j in range(200)), f"text {i}") for i in range(3000)]
    visible.append(("we know person 917 was born in the city of town917 today", "the last text"))
    start = time.perf_counter()
    leaks = protocol.find_leaks([(s, "probe") for s in scored], visible)
    assert [(l.evaluated, l.seen_in) for l in leaks] == [(scored[917], "the last text")]
    assert time.perf_counter() - start < 5.0


def test_dev_split_loses_what_evaluation_targets_are_scored_on():
    bench = RWKU().load(SAMPLE_DIR, None, 1, 1)
    scored = bench.targets[0].probes["neighbor_qa"][0]
    dev = bench.dev_targets[0]
    shared = dataclasses.replace(dev, probes={**dev.probes, "neighbor_qa": dev.probes["neighbor_qa"] + [scored]},
                                 request=dev.request + [dataclasses.replace(scored, target=dev.id)])
    leaking = dataclasses.replace(bench, dev_targets=[shared])
    with pytest.raises(UserError, match="appears in dev target"):
        protocol.check(leaking, "rwku")
    held = protocol.hold_out(leaking)
    protocol.check(held, "rwku")
    assert len(held.dev_targets[0].request) == len(dev.request)


def test_runner_refuses_a_leaking_task_before_building_a_model(monkeypatch, tmp_path):
    real = RWKU.load

    def leaking(self, *args, **kwargs):
        bench = real(self, *args, **kwargs)
        t = bench.targets[0]
        return dataclasses.replace(bench, targets=[dataclasses.replace(t, request=t.request + t.probes["forget_qa"])])

    monkeypatch.setattr(RWKU, "load", leaking)
    with pytest.raises(UserError) as err:
        Run(RunConfig(method="fullgrad", task="rwku", output=str(tmp_path)), progress=lambda m: None)
    assert "forget_qa" in str(err.value) and "\n" not in str(err.value)


def test_unknown_forget_source_is_one_line(tmp_path):
    with pytest.raises(UserError, match="task 'rwku' has no forget source 'wiki'; choices: corpus, probes"):
        Run(RunConfig(method="fullgrad", task="rwku", forget_source="wiki", output=str(tmp_path)), progress=lambda m: None)
    with pytest.raises(UserError, match="task 'wmdp' has no forget source 'corpus'"):
        Run(RunConfig(method="fullgrad", task="wmdp", forget_source="corpus", output=str(tmp_path)), progress=lambda m: None)


def test_dev_and_evaluation_requests_carry_the_same_retain_data(tmp_path):
    runs = [Run(RunConfig(method="fullgrad", task="rwku", dev_targets=2, split=split, output=str(tmp_path)),
                progress=lambda m: None) for split in ("eval", "dev")]
    sizes = {len(r.scope.retain_for(t)) for r in runs for t in r.targets}
    assert len(sizes) == 1 and sizes.pop() > 0
    for r in runs:
        for t in r.targets:
            assert all(p.target != t.id for p in r.scope.retain_for(t))
    # the retain sample is a replicate's: another seed draws another one
    other = Run(RunConfig(method="scrub", task="rwku", dev_targets=2, retain_items=2, seed=1, output=str(tmp_path)),
                progress=lambda m: None)
    again = Run(RunConfig(method="scrub", task="rwku", dev_targets=2, retain_items=2, seed=0, output=str(tmp_path)),
                progress=lambda m: None)
    t = other.targets[0]
    assert [p.prompt for p in other.scope.retain_for(t)] != [p.prompt for p in again.scope.retain_for(t)]


def test_a_seed_is_a_replicate():
    """Another seed builds another embedded model (initialisation, teaching order) and draws other views."""
    import torch

    from r2f_bench.engine.embedded import build_tokenizer, EmbeddedSpec, new_embedded_model

    from r2f_bench.engine.models import embedded_key

    spec = EmbeddedSpec.parse("embedded:mistral-h32-l1")
    facts = RWKU().load(SAMPLE_DIR, None, 1, 0).teaching_set()[:4]
    assert embedded_key(spec, facts, [], seed=0) != embedded_key(spec, facts, [], seed=1)
    tok = build_tokenizer([f"{p.prompt} {p.answer}" for p in facts])
    a, b = new_embedded_model(spec, tok, 0), new_embedded_model(spec, tok, 1)
    assert not torch.equal(a.model.layers[0].self_attn.q_proj.weight, b.model.layers[0].self_attn.q_proj.weight)
    fact = Probe(prompt="Question: What is the capital of Verdania?\nAnswer:", answer="Port Selwyn", set="forget_qa",
                 target="t", question="What is the capital of Verdania?")
    views = {seed: [v[0].question for v in build_views([fact], 3, Paraphraser(), seed)] for seed in range(6)}
    assert len({tuple(v) for v in views.values()}) > 1 and all(v[0] == fact.question for v in views.values())
