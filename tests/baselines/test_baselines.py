"""The paper's baselines as plugins (issue #3): each runs on a tiny taught model and
does what its method promises. No lm-eval here (too slow); likelihoods only."""

from __future__ import annotations

import copy

import pytest
import torch

BASELINES = ["lora_single", "lora_multi", "lora_finetune", "grad_ascent", "scrub", "eco", "sku", "deepcut", "fullgrad"]
WEIGHT_EDITING = ["lora_single", "lora_multi", "lora_finetune", "grad_ascent", "sku", "deepcut", "fullgrad"]  # scrub: its own test


@pytest.fixture(scope="module")
def setting(tmp_path_factory):
    """A tiny taught model on RWKU's sample, a Context as the runner builds it, and a request."""
    from r2f_bench.data import ForgetRequest
    from r2f_bench.engine.embedded import EmbeddedSpec
    from r2f_bench.engine.models import embedded_model
    from r2f_bench.unlearner import Context
    from r2f_bench.engine.views import Paraphraser, build_views
    from r2f_bench.tasks.rwku import RWKU, SAMPLE_DIR

    cache = tmp_path_factory.mktemp("baselines-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("R2F_BENCH_CACHE", str(cache))
        task = RWKU()
        bench = task.load(SAMPLE_DIR, None, 2, n_dev=1, forget_source="probes")
        model, tok, _ = embedded_model(EmbeddedSpec(hidden=64, layers=2, heads=2, kv_heads=1, intermediate=128),
                                       bench.teaching_set(), [], progress=lambda m: None, max_epochs=80)
        ctx = Context(tokenizer=tok, dev_targets=bench.dev_targets, retain_pool=bench.retain_pool(), seed=0, cache_dir=cache,
                      make_views=lambda facts: build_views(facts, 3, Paraphraser()),
                      probe_roles=task.roles_of(bench, bench.dev_targets), progress=lambda m: None)
        target = bench.targets[0]
        request = ForgetRequest(target=target.id, views=ctx.make_views(target.request), retain=bench.retain_pool())
        yield {"bench": bench, "model": model, "tok": tok, "ctx": ctx, "request": request}


# Defaults are tuned on the knowledge world, where knowledge is lost at smaller steps than
# on this sample model (which knows its facts only to answer-token accuracy 0.41): this
# mechanics test pushes SCRUB harder. Measured here: at its paper's T = 4 SCRUB raises the
# request's answer NLL by -0.023 at lr 5e-3 and 0.163 at 2e-2. (Multi-view LoRA once needed a
# larger step than an earlier default; its tuned default, in its Params, now forgets here.)
STRONGER = {"scrub": {"lr": "2e-2"}}


def method(name: str):
    from r2f_bench.plugins import registry

    cls = registry().method(name)
    return cls(cls.parse_params(STRONGER.get(name, {})))


def forget_nll(model, tok, probes) -> float:
    from r2f_bench.training.encoding import encode
    from r2f_bench.training.losses import answer_nll

    with torch.no_grad():
        return float(answer_nll(model, encode(tok, probes)).mean())


def logits(model, tok, prompt: str) -> torch.Tensor:
    with torch.no_grad():
        return model(**tok(prompt, return_tensors="pt")).logits


def unlearned(setting, name: str):
    """Run ``name`` once per module on a fresh copy (memoised: tests share the result)."""
    if name in setting.setdefault("edits", {}):
        return setting["edits"][name]
    m = method(name)
    m.setup(setting["model"], setting["ctx"])
    torch.manual_seed(0)
    edit = m.unlearn(copy.deepcopy(setting["model"]), setting["request"], setting["ctx"])
    setting["edits"][name] = (m, edit)
    return m, edit


def test_all_baselines_registered():
    import importlib

    from r2f_bench.plugins import registry

    listed = {i.name: i for i in registry().listing("method")}
    assert set(BASELINES) | {"r2f"} <= set(listed)
    for name in BASELINES:
        cls = registry().method(name)
        assert cls.name == name and cls.__module__.startswith("r2f_bench.baselines.")
        assert "et al." in importlib.import_module(cls.__module__).__doc__ or name.startswith(("lora", "fullgrad"))


@pytest.mark.parametrize("name", WEIGHT_EDITING)
def test_weight_editing_baselines_forget(setting, name):
    original, tok, facts = setting["model"], setting["tok"], setting["request"].facts
    _, edit = unlearned(setting, name)
    before, after = original.state_dict(), edit.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "no weight changed"
    assert forget_nll(edit.model, tok, facts) > forget_nll(original, tok, facts) + 0.01
    assert all(torch.isfinite(v).all() for v in after.values())


def test_lora_baselines_step_only_adapted_matrices(setting):
    from r2f_bench.training.gradients import linear_weights
    from r2f_bench.training.lora import target_modules

    _, edit = unlearned(setting, "lora_multi")
    assert edit.info["views_used"] == len(setting["request"].views) > 1
    adapted = {n + ".weight" for n in linear_weights(edit.model, target_modules(edit.model))}
    before, after = setting["model"].state_dict(), edit.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and changed <= adapted


def test_lora_finetune_merges_its_adapters_into_the_adapted_matrices_only(setting):
    from r2f_bench.training.gradients import linear_weights
    from r2f_bench.training.lora import target_modules

    _, edit = unlearned(setting, "lora_finetune")
    before, after = setting["model"].state_dict(), edit.model.state_dict()
    assert set(after) == set(before), "adapter modules left behind"
    adapted = {n + ".weight" for n in linear_weights(edit.model, target_modules(edit.model))}
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and changed <= adapted
    assert len(edit.info["loss_per_step"]) == edit.info["steps"]
    # the merged change of each matrix is a product of rank-r factors
    w = next(iter(sorted(changed)))
    assert torch.linalg.matrix_rank((after[w] - before[w]).double(), rtol=1e-6) <= edit.info["rank"]


def test_eco_edits_no_weight_and_corrupts_only_flagged_prompts(setting):
    original, tok, request = setting["model"], setting["tok"], setting["request"]
    m, edit = unlearned(setting, "eco")
    assert m.edits_weights is False
    before, after = original.state_dict(), edit.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert 0.0 <= edit.info["threshold"] <= 1.0 and edit.info["sigma"] > 0
    forget_prompt = request.facts[0].prompt
    utility_prompt = setting["bench"].utility[0].prompt
    assert not torch.equal(logits(edit.model, tok, forget_prompt), logits(original, tok, forget_prompt))
    assert torch.equal(logits(edit.model, tok, utility_prompt), logits(original, tok, utility_prompt))
    # cached decoding steps (one token) are never corrupted
    one = tok(utility_prompt, return_tensors="pt")["input_ids"][:, -1:]
    assert torch.equal(edit.model(input_ids=one).logits, original(input_ids=one).logits)
    assert forget_nll(edit.model, tok, request.facts) > forget_nll(original, tok, request.facts)
    # after the evaluation, the share of each scored set its classifier flags is recorded
    sets = {"forget_qa": setting["bench"].targets[0].probes["forget_qa"], "utility": setting["bench"].utility}
    flagged = edit.evaluation_info(sets)["flagged"]
    assert set(flagged) == {"forget_qa", "utility"} and all(0.0 <= v <= 1.0 for v in flagged.values())
    assert flagged["utility"] < 0.5


def test_scrub_teacher_stays_frozen(setting, monkeypatch):
    import r2f_bench.baselines.scrub as scrub

    captured, real = {}, scrub.frozen_copy

    def capture(model):
        teacher = real(model)
        captured["teacher"] = teacher
        captured["before"] = {k: v.clone() for k, v in teacher.state_dict().items()}
        return teacher

    monkeypatch.setattr(scrub, "frozen_copy", capture)
    _, edit = unlearned(setting, "scrub")
    tok, facts = setting["tok"], setting["request"].facts
    assert forget_nll(edit.model, tok, facts) > forget_nll(setting["model"], tok, facts) + 0.01
    teacher = captured["teacher"]
    assert not teacher.training and not any(p.requires_grad for p in teacher.parameters())
    after = teacher.state_dict()
    assert all(torch.equal(captured["before"][k], after[k]) for k in after)
    original = setting["model"].state_dict()
    assert all(torch.equal(original[k], after[k]) for k in after)


def test_sku_negates_the_stage1_task_vector(setting):
    _, edit = unlearned(setting, "sku")
    assert edit.info["delta_cosine"] < -0.99 and edit.info["delta_norm"] > 0
    assert edit.info["stage1_losses"]


@pytest.mark.parametrize("name", ["fullgrad", "fullgrad_fused"])
def test_steps_repeat_the_step_at_the_weights_the_last_one_left(setting, name):
    """``steps=3`` (the equal-budget variant) is three one-step deletions in a row, each along
    the gradient at the weights the last left: not one step three times as long."""
    from r2f_bench.plugins import registry

    cls = registry().method(name)
    one, three = cls(cls.parse_params({"step": "0.01"})), cls(cls.parse_params({"step": "0.01", "steps": "3"}))
    chained = copy.deepcopy(setting["model"])
    norms = [one.unlearn(chained, setting["request"], setting["ctx"]).info["grad_norm"] for _ in range(3)]
    edit = three.unlearn(copy.deepcopy(setting["model"]), setting["request"], setting["ctx"])
    assert edit.info["grad_norms"] == pytest.approx(norms, rel=1e-5) and len(set(norms)) == 3
    for a, b in zip(chained.parameters(), edit.model.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    longer = cls(cls.parse_params({"step": "0.03"})).unlearn(copy.deepcopy(setting["model"]), setting["request"],
                                                            setting["ctx"]).model
    assert any(not torch.allclose(a, b, atol=1e-4) for a, b in zip(longer.parameters(), edit.model.parameters()))


@pytest.mark.parametrize("method,sets,message", [
    ("scrub", {"msteps": "0"}, "parameter 'msteps' of method 'scrub' must be >= 1, got '0'."),
    ("scrub", {"msteps": "4"}, "parameter 'msteps' of method 'scrub' must be at most epochs (3), got 4: only that "
                               "many epochs hold a max-step."),
    ("sku", {"lam": "0"}, "parameter 'lam' of method 'sku' must be > 0, got '0'."),
    ("sku", {"alpha": "0"}, "parameter 'alpha' of method 'sku' must be > 0, got '0'."),
    ("deepcut", {"beta": "0"}, "parameter 'beta' of method 'deepcut' must be > 0, got '0'."),
    ("eco", {"sigma": "0"}, "parameter 'sigma' of method 'eco' must be > 0 (0 adds no noise; < 0 fits it on the dev "
                            "split), got '0'."),
    ("eco", {"threshold": "1.5"}, "parameter 'threshold' of method 'eco' must be at most 1 (a cosine; < 0 fits it on "
                                  "the dev split), got '1.5'."),
    ("eco", {"sigma": "2", "sigmas": "1,3"}, "parameter 'sigmas' of method 'eco' sets the dev search for sigma, and "
                                             "sigma is given (2); drop one of them."),
])
def test_a_setting_that_would_do_nothing_or_be_ignored_is_one_line(method, sets, message):
    """Before: each ran, a method that did nothing (SKU at λ 0, ECO's zero noise or a threshold no
    cosine reaches, DeepCUT without its forgetting loss, SCRUB without max-steps), or ignored a
    value (SCRUB's max-steps past its epochs, ECO's search beside a given sigma) under a new key."""
    from r2f_bench.errors import UserError
    from r2f_bench.plugins import registry

    with pytest.raises(UserError) as info:
        registry().method(method).parse_params(sets)
    assert str(info.value) == message


def test_scrub_refuses_a_request_without_retain_facts():
    """Before: with --retain-items 0 SCRUB skipped its min-steps and ran its max-steps alone."""
    from types import SimpleNamespace

    from r2f_bench.errors import UserError
    from r2f_bench.plugins import registry

    scrub = registry().method("scrub")
    assert scrub.dev_split_needed(scrub.parse_params()) is not None  # no dev split: refused before any model loads
    with pytest.raises(UserError, match="SCRUB's min-steps keep the retain facts"):
        scrub(scrub.parse_params()).unlearn(torch.nn.Linear(1, 1), SimpleNamespace(retain=[], views=[[]]), None)
