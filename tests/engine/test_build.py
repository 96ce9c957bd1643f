"""Building what a run works on: model specs, the knowledge label, the proxy (named and
keyed before it is built), the views, and each target's deletion request."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from r2f_bench.engine import build
from r2f_bench.engine.config import RunConfig
from r2f_bench.engine.embedded import DEFAULT_MODEL, DEFAULT_PROXY, EmbeddedSpec
from r2f_bench.engine.plan import Plan
from r2f_bench.errors import UserError
from r2f_bench.tasks.rwku import SAMPLE_DIR


def plan(tmp_path, method: str = "scrub", **kw) -> Plan:  # it reads views and retain items, no proxy
    return Plan(RunConfig(**{"method": method, "task": "rwku", "data_dir": str(SAMPLE_DIR), "limit": 1, "views": 3,
                             "seed": 7, "output": str(tmp_path), **kw}), progress=lambda m: None)


@pytest.fixture
def stand_in(monkeypatch):
    """load_model without a model (what it was asked to build, and a tiny stand-in), and
    views without the paraphrases' sentence embedder (the facts as asked, repeated)."""
    asked: list[str] = []

    def load_model(inputs, spec, default, device):
        asked.append(spec)
        return torch.nn.Linear(2, 2), None, "stand-in", {"never_taught_answered": 40.0}

    def build_views(facts, n_views, paraphraser, seed):
        asked.append(f"{n_views} views, seed {seed}")
        return [list(facts)] * n_views

    monkeypatch.setattr(build, "load_model", load_model)
    monkeypatch.setattr(build, "build_views", build_views)
    return asked


def test_specs_and_labels():
    assert build.embedded_spec("embedded", DEFAULT_MODEL) is DEFAULT_MODEL
    assert build.embedded_spec("embedded-proxy", DEFAULT_PROXY) is DEFAULT_PROXY
    assert build.embedded_spec("embedded:gpt2-h32-l2", DEFAULT_MODEL) == EmbeddedSpec.parse("embedded:gpt2-h32-l2")
    assert build.embedded_spec("org/model", DEFAULT_MODEL) is None
    assert build.taught_label({"facts": 12, "taught_token_accuracy": 0.98765}) == (
        "embedded demo model, taught 12 strings to answer-token accuracy 0.988: USR is taught-string recall")
    assert build.taught_label({"world_texts": 5, "taught_answered": 91.2, "never_taught_answered": 64.6}) == (
        "embedded demo model taught a synthetic knowledge world: answers 91% of taught and 65% of never-taught "
        "questions")


def test_built_states_its_knowledge_and_the_views_of_the_run(tmp_path, stand_in):
    p = plan(tmp_path)
    built = build.build_models(build.BuildInputs.of(p), torch.device("cpu"))
    assert stand_in == ["embedded"] and built.proxy is None  # scrub uses no proxy: none is built or named
    assert built.knowledge == {"embedded": True, "taught": True, "taught_strings": True, "never_taught_answered": 40.0}
    facts = p.targets[0].request[:2]
    assert built.views(facts)[0] == facts and stand_in[-1] == "3 views, seed 7"


def test_the_proxy_is_named_and_keyed_before_it_is_built(tmp_path, stand_in):
    built = build.build_models(build.BuildInputs.of(plan(tmp_path, method="r2f")), torch.device("cpu"))
    assert built.proxy.label == DEFAULT_PROXY.label and built.proxy.key.startswith(f"{DEFAULT_PROXY.label}@")
    assert stand_in == ["embedded"]
    assert built.proxy.load()[1] is None and stand_in == ["embedded", "embedded-proxy"]
    folder, link = tmp_path / "proxy", tmp_path / "link"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"one")
    link.symlink_to(folder)
    local = lambda spec: build.build_proxy(build.BuildInputs.of(plan(tmp_path, method="r2f", proxy=spec)),
                                           torch.device("cpu"), "m", "k")
    first = local(str(folder))  # a local proxy is named by its path and keyed by its content
    assert first.label == str(folder) and first.key.startswith("sha256:") and local(str(link)).key == first.key
    (folder / "model.safetensors").write_bytes(b"three")  # replaced at the same path: another proxy (no cached decoder)
    assert local(str(folder)).key != first.key


def test_a_first_layers_proxy_is_the_models_own_first_layers_keyed_by_its_weights(tmp_path):
    """--proxy first-layers:1 on the 2-layer demo model: a 1-layer model whose every tensor
    equals the model's own (embeddings, first layer, final norm, head), loaded afresh from
    the untouched weights; keyed by the model's weights, so another model gets another key."""
    p = Plan(RunConfig(method="r2f", task="rwku", limit=1, proxy="first-layers:1", output=str(tmp_path)),
             progress=lambda m: None)  # the demo world: the shipped model loads
    built = build.build_models(build.BuildInputs.of(p), torch.device("cpu"))
    assert built.proxy.label.endswith(", first 1 layers") and built.proxy.key == f"first-layers:1@{built.info['key']}"
    with torch.no_grad():  # the run edits its model in place: the proxy is cut from the untouched weights
        next(built.model.parameters()).add_(1.0)
    proxy, tok = built.proxy.load()
    assert proxy.config.num_hidden_layers == 1 and tok is not None
    untouched = build.load_model(build.BuildInputs.of(p), "embedded", DEFAULT_MODEL, torch.device("cpu"))[0].state_dict()
    cut = proxy.state_dict()
    assert cut and all(torch.equal(t, untouched[k]) for k, t in cut.items())
    assert set(untouched) - set(cut) == {k for k in untouched if ".layers.1." in k}


@pytest.mark.parametrize("spec, message", [
    ("first-layers:0", "--proxy first-layers:0: N in first-layers:N is the number of the model's decoder layers the "
                       "proxy keeps, a positive integer; e.g. first-layers:8."),
    ("first-layers:x", "--proxy first-layers:x: N in first-layers:N is the number of the model's decoder layers the "
                       "proxy keeps, a positive integer; e.g. first-layers:8."),
])
def test_a_bad_first_layers_spec_is_one_line_before_the_data_loads(tmp_path, spec, message):
    with pytest.raises(UserError) as exc:
        plan(tmp_path, method="r2f", proxy=spec)
    assert str(exc.value) == message


def test_a_cut_keeps_fewer_layers_than_the_model_has():
    from r2f_bench.engine.embedded import build_tokenizer, new_embedded_model
    from r2f_bench.engine.pretrained import cut_to_first_layers

    model = new_embedded_model(EmbeddedSpec.parse("embedded:llama-h32-l2"), build_tokenizer(["a b c"]))
    with pytest.raises(UserError, match=r"has 2 decoder layers; keep between 1 and 1\.$"):
        cut_to_first_layers(model, 2, "m")


def test_a_request_has_the_runs_views_and_retain_items_and_never_leaks_a_probe(tmp_path, stand_in):
    p = plan(tmp_path)
    built = build.build_models(build.BuildInputs.of(p), torch.device("cpu"))
    target = p.targets[0]
    request = build.forget_request(p.scope, built, target)
    assert (request.target, request.name, request.facts) == (target.id, target.name, target.request)
    assert len(request.views) == 3 and request.retain == p.scope.retain_for(target) and stand_in[-1] == "3 views, seed 7"
    held_out = p.scope.roles(target)["held_out"][0]
    leaking = dataclasses.replace(built, views=lambda facts: [facts, target.probes[held_out]])
    with pytest.raises(UserError, match=f"{target.id}.*choose another --paraphraser"):
        build.forget_request(p.scope, leaking, target)


def test_a_stand_in_request_never_leaks_a_probe_of_the_target_it_is_scored_on(tmp_path, stand_in):
    """--control other_request: another target's views are checked against the scored target's probes too."""
    p = plan(tmp_path, limit=2)
    built = build.build_models(build.BuildInputs.of(p), torch.device("cpu"))
    scored, other = p.targets

    def views_with(probe):
        return dataclasses.replace(built, views=lambda facts: [facts, [probe]])

    def leaks_into_other(probe) -> bool:
        try:
            build.forget_request(p.scope, views_with(probe), other)
            return False
        except UserError:
            return True

    held_out = [q for s in p.scope.roles(scored)["held_out"] for q in scored.probes[s]]
    probe = next(q for q in held_out if not leaks_into_other(q))  # a string of the scored target's alone
    with pytest.raises(UserError, match=f"{scored.id}, probe set .* in a view of {other.id}'s request.*choose another"):
        build.forget_request(p.scope, views_with(probe), other, scored=scored)
    seen = [q for s in p.bench.seen_sets for q in scored.probes.get(s, [])]
    assert seen and not leaks_into_other(seen[0])  # made of the scored target's own request: no stand-in's to hold
    with pytest.raises(UserError, match=f"{scored.id}, probe set {seen[0].set}"):
        build.forget_request(p.scope, views_with(seen[0]), other, scored=scored)
