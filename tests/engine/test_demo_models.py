"""The shipped demo models: found by recipe, verified by hash, never taught again; a damaged
one is not trusted; ``cache build`` teaches a recipe here, ships it, and compares."""

from __future__ import annotations

import json
import shutil

import pytest

from r2f_bench.engine import demo_models, models
from r2f_bench.engine import teaching as teaching_module
from r2f_bench.engine.config import RunConfig
from r2f_bench.engine.embedded import DEFAULT_MODEL, DEFAULT_PROXY, EmbeddedSpec


def _world(seed: int = 0):
    """What a run of the default world teaches (the run's own plan, as the quick start's)."""
    from r2f_bench.engine.plan import Plan

    return Plan(RunConfig(method="r2f", task="rwku", seed=seed), progress=lambda m: None).knowledge()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("spec", [DEFAULT_MODEL, DEFAULT_PROXY], ids=lambda s: s.label)
def test_the_demo_models_ship_and_load_without_teaching(spec, seed, monkeypatch):
    """World seed 0's target and proxy for run seeds 0-2 ship; loading one verifies every
    file's hash, teaches nothing, and keys what is cached on it by its weights' hash."""
    teaching, prompts = _world(seed)
    monkeypatch.setattr(models, "_teach_world", lambda *a, **k: pytest.fail("a shipped model was taught again"))
    said = []
    model, tok, info = models.embedded_model(spec, teaching.facts, prompts, progress=said.append, seed=seed,
                                             world=teaching.texts, check=teaching.check)
    assert any("the shipped demo model" in line and "SHA-256 verified" in line for line in said), said
    assert info["key"] == models.weights_key(spec, teaching.facts, prompts, seed=seed, world=teaching.texts)
    assert info["key"].startswith("shipped-") and info["seed"] == seed and info["taught_on"]["cpu"]
    assert info["recipe"] == models.recipe_key(spec, teaching.facts, prompts, seed=seed, world=teaching.texts)
    assert sum(p.numel() for p in model.parameters()) == info["parameters"]


def test_a_damaged_shipped_model_is_not_trusted(monkeypatch, tmp_path):
    """A file that does not match its hash (or is missing): one warning line, no folder."""
    entries = demo_models.manifest()
    recipe, entry = next(iter(entries.items()))
    copy = tmp_path / "demo_models"
    shutil.copytree(demo_models.HERE, copy)
    monkeypatch.setattr(demo_models, "HERE", copy)
    monkeypatch.setattr(demo_models, "MANIFEST", copy / "manifest.json")
    assert demo_models.verified(recipe, print) == copy / entry["folder"]

    weights = copy / entry["folder"] / demo_models.WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    said = []
    assert demo_models.verified(recipe, said.append) is None
    assert len(said) == 1 and said[0].startswith("warning: shipped demo model") and "reinstall" in said[0]

    weights.unlink()
    assert demo_models.verified(recipe, said.append) is None and "missing" in said[-1]
    assert demo_models.verified("no-such-recipe", said.append) is None and len(said) == 2


def test_cache_build_teaches_ships_and_compares(monkeypatch, tmp_path):
    """``cache build`` on a (shortened) recipe no model ships for: taught here, nothing to
    compare; with --ship it becomes the shipped one; built again it is found bit-identical,
    and a run then loads it from the package rather than the cache."""
    from r2f_bench.engine import demo_rebuild

    monkeypatch.setattr(models, "WORLD_STEPS", 4)  # another recipe: nothing ships for it
    monkeypatch.setattr(teaching_module, "CHECK_ITEMS", 8)
    shipped = tmp_path / "demo_models"
    shipped.mkdir()
    monkeypatch.setattr(demo_models, "HERE", shipped)
    monkeypatch.setattr(demo_models, "MANIFEST", shipped / "manifest.json")
    quiet = lambda m: None

    first = demo_rebuild.rebuild("rwku", [0], ship=False, progress=quiet)
    assert [r.label for r in first] == [DEFAULT_MODEL.label, DEFAULT_PROXY.label]
    assert all(r.max_weight_diff is None and "no shipped model" in r.line() for r in first)
    assert not (shipped / "manifest.json").exists()

    demo_rebuild.rebuild("rwku", [0], ship=True, progress=quiet)
    entries = json.loads((shipped / "manifest.json").read_text())
    assert set(entries) == {r.recipe for r in first}

    again = demo_rebuild.rebuild("rwku", [0], ship=False, progress=quiet)
    assert all(r.max_weight_diff == 0 and "bit-identical" in r.line() for r in again)

    teaching, prompts = _world()
    assert demo_rebuild.default_world("rwku") == (teaching, prompts)  # what a run teaches
    said = []
    _, _, info = models.embedded_model(DEFAULT_MODEL, teaching.facts, prompts, progress=said.append,
                                       world=teaching.texts, check=teaching.check)
    assert info["key"].startswith("shipped-") and any("shipped demo model" in line for line in said)

    monkeypatch.setattr(models, "WORLD_STEPS", 5)  # a new recipe for the same models replaces the old
    newer = demo_rebuild.rebuild("rwku", [0], ship=True, progress=quiet)
    entries = json.loads((shipped / "manifest.json").read_text())
    assert set(entries) == {r.recipe for r in newer} and not {r.recipe for r in first} & set(entries)
    assert sorted(p.name for p in shipped.iterdir()) == sorted([e["folder"] for e in entries.values()] + ["manifest.json"])


def test_teaching_at_several_rates_keeps_the_best_try(monkeypatch, tmp_path):
    """When no rate reaches the target accuracy, the best try is cached, not the last."""
    from r2f_bench.tasks.rwku import RWKU, SAMPLE_DIR

    monkeypatch.setattr(models, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(models, "TEACHING_RATES", (3e-3, 30.0))  # the second diverges
    bench = RWKU().load(SAMPLE_DIR, None, 1, n_dev=0)
    facts = bench.targets[0].probes["forget_qa"][:6]
    said = []
    _, _, info = models.embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l1"), facts, bench.general_prompts[:4],
                                       progress=said.append, max_epochs=20, target_accuracy=1.01)
    assert info["lr"] == 3e-3 and info["taught_token_accuracy"] > 0.3
    assert any("kept: lr 0.003" in line for line in said)


def test_cache_build_on_a_task_without_a_world_is_one_line():
    from r2f_bench.engine import demo_rebuild
    from r2f_bench.errors import UserError

    with pytest.raises(UserError, match="no knowledge world"):
        demo_rebuild.rebuild("wmdp", [0], ship=False, progress=lambda m: None)
