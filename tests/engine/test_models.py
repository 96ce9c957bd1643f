"""Embedded model specs: parsing, and families that are really different models."""

from __future__ import annotations

import pytest
import torch

from r2f_bench.errors import UserError
from r2f_bench.engine.embedded import (DEFAULT_PROXY, DEFAULT_MODEL, EmbeddedSpec, new_embedded_model, build_tokenizer)


def test_parse_matches_the_defaults():
    assert EmbeddedSpec.parse("embedded:mistral-h64-l2") == DEFAULT_MODEL
    assert EmbeddedSpec.parse("embedded:mistral-h32-l2") == DEFAULT_PROXY
    assert EmbeddedSpec.parse("embedded:gpt2-h96-l3").label == "embedded:gpt2-h96-l3"


def test_families_are_distinct_networks():
    """Same width and depth, other family: not the same weights (a transfer study needs that)."""
    tok = build_tokenizer(["Ada Lovelace was born in London.", "The capital of France is Paris."] * 4)
    mistral = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l1"), tok)
    llama = new_embedded_model(EmbeddedSpec.parse("embedded:llama-h32-l1"), tok)
    shared = [n for n, _ in mistral.named_parameters() if n in dict(llama.named_parameters())]
    assert shared, "Mistral and Llama name their parameters alike"
    theirs = dict(llama.named_parameters())
    assert any(not torch.equal(p, theirs[n]) for n, p in mistral.named_parameters() if n in theirs)


@pytest.mark.parametrize("spec", ["embedded:bert-h64-l2", "embedded:mistral-hxx-l2"])
def test_bad_spec_is_one_line(spec):
    with pytest.raises(UserError, match="embedded"):
        EmbeddedSpec.parse(spec)


def _facts():
    from r2f_bench.tasks.rwku import RWKU, SAMPLE_DIR

    bench = RWKU().load(SAMPLE_DIR, None, 1, n_dev=0)
    return bench.targets[0].probes["forget_qa"][:6], bench.general_prompts[:4]


def test_teaching_starts_over_at_a_lower_rate(monkeypatch, tmp_path):
    """A rate at which the model cannot learn its facts is followed by the next one."""
    from r2f_bench.engine import models

    monkeypatch.setattr(models, "cache_root", lambda: tmp_path)  # taught here, never read from a cache
    monkeypatch.setattr(models, "TEACHING_RATES", (30.0, 3e-3))  # the first diverges
    facts, extra = _facts()
    said = []
    _, _, info = models.embedded_model(EmbeddedSpec.parse("embedded:mistral-h64-l2"), facts, extra,
                                       progress=said.append, max_epochs=150)
    assert info["lr"] == 3e-3 and info["taught_token_accuracy"] >= 0.97
    assert any("at lr 30" in line for line in said)


def test_teaching_runs_on_one_thread_whatever_the_run_has(monkeypatch, tmp_path):
    """The cached model must not depend on the threads of the run that first built it: a
    sum split over two threads rounds differently, and teaching amplifies it."""
    from r2f_bench.engine import models

    monkeypatch.setattr(models, "cache_root", lambda: tmp_path)
    seen, teach = [], models.finetune
    monkeypatch.setattr(models, "finetune", lambda *a, **k: seen.append(torch.get_num_threads()) or teach(*a, **k))
    facts, extra = _facts()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        models.embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l1"), facts, extra, progress=lambda m: None,
                              max_epochs=2, target_accuracy=0.0)
        assert torch.get_num_threads() == 2  # put back after teaching
    finally:
        torch.set_num_threads(threads)
    assert seen == [1]


def test_a_model_that_never_learns_is_flagged(monkeypatch, tmp_path):
    from r2f_bench.engine import models

    monkeypatch.setattr(models, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(models, "TEACHING_RATES", (30.0,))
    facts, extra = _facts()
    said = []
    _, _, info = models.embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l1"), facts, extra,
                                       progress=said.append, max_epochs=10)
    assert info["taught_token_accuracy"] < 0.97
    assert any(line.startswith("warning: embedded model") for line in said)


def test_expected_epochs_follow_the_accuracy_trend():
    from r2f_bench.engine.teaching import expected_epochs

    assert expected_epochs(10, 0.50, 0.40, 0.97, 120) == 10 + 5 * 5  # +0.10 a check: 5 more checks
    assert expected_epochs(10, 0.50, None, 0.97, 120) == 120  # no trend yet: the most
    assert expected_epochs(10, 0.50, 0.60, 0.97, 120) == 120  # falling: the most
    assert expected_epochs(10, 0.96, 0.50, 0.97, 120) == 15  # at least the next check
    assert expected_epochs(10, 0.10, 0.09, 0.97, 120) == 120 and expected_epochs(10, 0.98, 0.9, 0.97, 120) == 10


def test_teaching_says_its_cost_first_and_its_bar_ends_at_the_early_stop(monkeypatch):
    """One line with the facts and a time from the measured rate; the epoch bar's end moves
    from max_epochs to where the accuracy trend reaches the target, so its ETA follows."""
    from r2f_bench.engine import teaching

    class Bar:
        def __init__(self, iterable, **kwargs):
            self.iterable, self.total, self.totals = iterable, len(iterable), []
            bars.append(self)

        def __iter__(self):
            return iter(self.iterable)

        def set_postfix(self, **kwargs):
            pass

        def refresh(self):
            self.totals.append(self.total)

        def close(self):
            pass

    bars: list[Bar] = []
    monkeypatch.setattr(teaching, "bar", Bar)
    facts, extra = _facts()
    tok = build_tokenizer([f"{p.prompt} {p.answer}" for p in facts] + extra)
    model = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h64-l2"), tok)
    said = []
    epochs = teaching.finetune(model, tok, list(facts), epochs=150, lr=3e-3, stop_accuracy=0.97, progress=said.append)
    assert len(said) == 1 and said[0].startswith("teaching 6 facts: ") and " s a step measured, 1 steps an epoch: " \
        "up to about " in said[0] and said[0].endswith("for 150 epochs, less once answer-token accuracy reaches 0.97 "
                                                  "(checked every 5 epochs)")
    totals = bars[0].totals
    assert epochs < 150 and totals[-1] == epochs and min(totals) < 150 and all(t >= 5 for t in totals)


def test_world_teaching_says_its_cost_before_it_runs_on():
    """A knowledge world's fixed schedule says, early, what the whole schedule will take."""
    from r2f_bench.engine import teaching

    facts, extra = _facts()
    tok = build_tokenizer([f"{p.prompt} {p.answer}" for p in facts] + extra)
    model = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l1"), tok)
    said = []
    teaching.teach_schedule(model, tok, extra, list(facts), steps=40, lr=1e-3, progress=said.append)
    assert len(said) == 1 and said[0].startswith(f"teaching {len(extra)} texts and {len(facts)} questions: ")
    assert " s a step measured, about " in said[0] and said[0].endswith(" for 40 steps")


def test_texts_and_questions_taught_apart_take_the_step_of_their_joint_loss(monkeypatch):
    """``apart``: a step's texts and questions are two passes, each padded to its own length,
    whose gradients add up to the joint mean loss's (up to rounding), a batch shorter than asked
    (4 texts, 5 a batch) weighed by its own length."""
    from r2f_bench.engine import teaching

    facts, extra = _facts()
    tok = build_tokenizer([f"{p.prompt} {p.answer}" for p in facts] + extra)
    texts = [e * 3 for e in extra]  # longer than any question, so the joint pass pads the questions
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    grads: dict[bool, list[torch.Tensor]] = {}
    encode = teaching.encode
    for apart in (False, True):
        torch.manual_seed(0)
        model = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l1"), tok)
        passes: list[set[str]] = []
        monkeypatch.setattr(teaching, "encode", lambda t, chunk, **kw: passes.append({p.set for p in chunk})
                            or encode(t, chunk, **kw))
        hook = register_optimizer_step_pre_hook(lambda opt, *a: grads.setdefault(apart, [
            p.grad.clone() for p in model.parameters()]) and None)  # the first step's gradient
        try:
            teaching.teach_schedule(model, tok, texts, list(facts), steps=2, lr=1e-3, text_batch=5, fact_batch=3,
                                    apart=apart)
        finally:
            hook.remove()
        questions = {p.set for p in facts}
        assert passes == ([{"teaching"}, questions] * 2 if apart else [{"teaching", *questions}] * 2), passes
    assert any(g.abs().max() > 0 for g in grads[True])
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(grads[True], grads[False]))


def test_family_offset_keeps_every_cached_models_key(monkeypatch):
    """The family's offset (once the spec's ``seed`` field) is hashed under its first name:
    a key computed before the rename, library versions pinned, still comes out."""
    import transformers

    from r2f_bench.data import Probe
    from r2f_bench.engine.models import embedded_key

    monkeypatch.setattr(torch, "__version__", "2.0.0")
    monkeypatch.setattr(transformers, "__version__", "4.0.0")
    spec = EmbeddedSpec.parse("embedded:llama-h64-l2")
    facts = [Probe(prompt="Question: Where was Ada born?\nAnswer:", answer="London", set="forget_qa", target="t")]
    assert spec.family_offset == 1
    assert embedded_key(spec, facts, ["extra"], seed=1) == "02e975dd9b5b6698"
    assert embedded_key(spec, facts, ["extra"], seed=1, world=["Ada was born in London."]) == "642ea2406103ce12"


def test_a_cached_model_built_on_rank_1_keeps_its_weights(monkeypatch, tmp_path):
    """Under ``accelerate launch`` transformers' save_pretrained writes weights only on rank 0;
    a cache entry built on rank 1 held only its tokenizer, was set aside as corrupt on the
    next load and taught again, forever. The entry must load as the model that was taught."""
    from r2f_bench.engine import models

    monkeypatch.setattr(models, "cache_root", lambda: tmp_path)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 1)
    facts, extra = _facts()
    spec = EmbeddedSpec.parse("embedded:mistral-h32-l1")
    taught, tok, _ = models.embedded_model(spec, facts, extra, progress=lambda m: None, max_epochs=2, target_accuracy=0.0)
    said = []
    loaded, _, _ = models.embedded_model(spec, facts, extra, progress=said.append, max_epochs=2, target_accuracy=0.0)
    assert any("loaded from cache" in m for m in said), said
    ids = tok("alpha beta", return_tensors="pt")["input_ids"]
    assert torch.equal(taught(ids).logits, loaded(ids).logits)
