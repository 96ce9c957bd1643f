"""Every registered method runs on every registered task's deletion requests.

The models here are tiny and untaught (what is under test is that each method copes
with each task's prompts, answers and formats: cloze, QA, multiple choice, long
passages); that methods really forget is tested on taught models in
r2f/test_method.py and baselines/test_baselines.py.
"""

from __future__ import annotations

import copy

import pytest
import torch

from r2f_bench.data import ForgetRequest
from r2f_bench.plugins import registry

METHODS = [i.name for i in registry().listing("method")]
TASKS = [i.name for i in registry().listing("task")]


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    """Per task: bundled sample, an untaught tiny model and proxy, a Context and a request."""
    from r2f_bench.engine.embedded import build_tokenizer, EmbeddedSpec, new_embedded_model, teaching_texts
    from r2f_bench.unlearner import Context, Proxy
    from r2f_bench.engine.views import Paraphraser, build_views

    out = {}
    for name in TASKS:
        task = registry().task(name)()
        bench = task.load(None, None, 1, n_dev=2)
        tok = build_tokenizer(teaching_texts(bench.teaching_set(), bench.general_prompts))
        model = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l2"), tok).eval()
        proxy = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l1"), tok).eval()
        views = lambda facts: build_views(facts, 2, Paraphraser())
        ctx = Context(tokenizer=tok, dev_targets=bench.dev_targets, retain_pool=bench.retain_pool(), seed=0,
                      cache_dir=tmp_path_factory.mktemp(name), make_views=views,
                      probe_roles=task.roles_of(bench, bench.dev_targets),
                      proxy=Proxy(f"{name}-proxy", f"{name}-proxy", lambda proxy=proxy, tok=tok: (proxy, tok)), progress=lambda m: None)
        target = bench.targets[0]
        request = ForgetRequest(target=target.id, views=views(target.request), retain=bench.retain_pool())
        out[name] = (model, ctx, request)
    return out


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("method", METHODS)
def test_method_runs_on_task(method, task, settings):
    model, ctx, request = settings[task]
    cls = registry().method(method)
    m = cls(cls.parse_params())
    m.setup(model, ctx)
    edit = m.unlearn(copy.deepcopy(model), request, ctx)
    before, after = model.state_dict(), edit.model.state_dict()
    assert all(torch.isfinite(v).all() for v in after.values())
    changed = any(not torch.equal(before[k], after[k]) for k in before)
    assert changed == cls.edits_weights
    prompt = request.facts[0].prompt
    with torch.no_grad():
        logits = edit.model(**ctx.tokenizer(prompt, return_tensors="pt")).logits
    assert torch.isfinite(logits).all()


# the methods whose papers descend a retain loss during the deletion (issue 42's list)
RETAIN_IN_DELETION = {"graddiff", "simnpo", "rmu", "scrub", "deepcut", "sku"}


@pytest.mark.parametrize("method", [m for m in METHODS if registry().method(m).__module__.startswith("r2f_bench")])
def test_the_budget_is_measured_alike_for_every_method(method, settings):
    """Passes with gradients and retain reads, measured from outside the method: the ascent
    family takes several passes, the one-step methods one per view batch, and exactly the
    methods that descend a retain loss read retain data in the deletion."""
    from r2f_bench.engine.budget import Watched, metered

    model, ctx, request = settings["rwku"]
    cls = registry().method(method)
    m = cls(cls.parse_params())
    pool = Watched(ctx.retain_pool)
    ctx = copy.copy(ctx)
    ctx.retain_pool = pool
    m.setup(model, ctx)
    request = ForgetRequest(target=request.target, views=request.views, retain=Watched(request.retain))
    edited = copy.deepcopy(model)
    with metered(edited, (request.retain, pool)) as spend:
        m.unlearn(edited, request, ctx)
    assert spend.retain_read is (method in RETAIN_IN_DELETION), spend
    assert (spend.grad_passes > 0) is cls.edits_weights and (spend.grad_tokens > 0) is cls.edits_weights
    if cls.edits_weights and cls.strength is not None and cls.strength.param == "lr":  # optimiser loops
        assert spend.grad_passes >= 5


@pytest.mark.parametrize("method", METHODS)
def test_a_deletion_after_a_restore_repeats_the_first(method, settings, tmp_path):
    """A run deletes target after target from one model put back in between
    (engine/weights), RAP's attack fine-tuning each result first: whatever a deletion or
    the attack leaves on the model (hooks, flags, gradients, transformers' marks) must
    not change the next deletion."""
    from r2f_bench.engine.teaching import finetune
    from r2f_bench.engine.weights import Weights

    model, ctx, request = settings["rwku"]
    model = copy.deepcopy(model)
    cls = registry().method(method)
    m = cls(cls.parse_params())
    m.setup(model, ctx)
    weights = Weights(model, tmp_path, method)
    prompt = ctx.tokenizer(request.facts[0].prompt, return_tensors="pt")
    outputs = []
    for _ in range(2):
        torch.manual_seed(0)
        edit = m.unlearn(weights.edited(), request, ctx)
        with torch.no_grad():
            outputs.append(edit.model(**prompt).logits)
        for p in edit.model.parameters():  # as RAP's attack does (engine/evaluate)
            p.requires_grad_(True)
        finetune(edit.model, ctx.tokenizer, request.facts, epochs=1, max_steps=1)
        weights.to_start()
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=0)


class Noting:
    """A method's Context that notes which inputs it reads: ``make_views`` (views) and
    ``target_modules``; everything else passes through."""

    def __init__(self, ctx, seen: set[str]) -> None:
        self._ctx, self._seen = ctx, seen

    def __getattr__(self, name: str):
        if name in ("make_views", "target_modules"):
            self._seen.add("views" if name == "make_views" else name)
        return getattr(self._ctx, name)


VARIANTS = [(m, {}) for m in METHODS if registry().method(m).__module__.startswith("r2f_bench")] + [
    ("npo", {"retain_weight": "1"}), ("graddiff", {"retain_weight": "0"}), ("simnpo", {"retain_weight": "0"})]


@pytest.mark.parametrize("method,params", VARIANTS, ids=[f"{m}{p}" for m, p in VARIANTS])
def test_each_method_reads_exactly_the_inputs_it_declares(method, params, settings):
    """What `reads` declares decides which options a run refuses and a store key holds; it must be
    what the method reads, observed from outside in its setup and deletion: the request's views
    past the first (the facts as asked are view 0) or the context's make_views, its retain items,
    the context's target_modules."""
    from r2f_bench.engine.budget import Watched

    model, ctx, request = settings["rwku"]
    cls = registry().method(method)
    p = cls.parse_params(params)
    seen: set[str] = set()
    noting = Noting(ctx, seen)
    views = [request.views[0], *map(Watched, request.views[1:])]
    watched = ForgetRequest(target=request.target, views=views, retain=Watched(request.retain))
    m = cls(p)
    m.setup(model, noting)
    m.unlearn(copy.deepcopy(model), watched, noting)
    seen |= {"views"} if any(v.read for v in views[1:]) else set()
    seen |= {"retain"} if watched.retain.read else set()
    assert seen == set(cls.reads(p))
