"""The attacks on unlearned models: each does what it claims on the data it claims (a no-op
or an attack fed the wrong data fails), none is handed a scored string, their controls run
on the untouched model and are cached, and the deletion's weights are put back between them."""

from __future__ import annotations

import dataclasses
import hashlib
from types import SimpleNamespace

import pytest
import torch

from r2f_bench.attack import Attack, Attacked, parse_attacks
from r2f_bench.attacks.prompting import JAILBREAK, SURE, AdversarialPrompt, FewShot
from r2f_bench.attacks.quantize import BLOCK, NF4, int8, nf4
from r2f_bench.attacks.relearn import Rap, RelearnRelated, RelearnUnrelated
from r2f_bench.data import Probe
from r2f_bench.engine.attacks import Prepared
from r2f_bench.engine.config import RunConfig
from r2f_bench.engine.run import Run
from r2f_bench.errors import UserError

ALL = "rap,relearn_unrelated:8,quantize:nf4,quantize:int8,fewshot:2,leak_at_k:4,relearn_related:2,prompt:sure"


@pytest.fixture(scope="module")
def world_run(tmp_path_factory):
    """FullGrad at a strong step on the knowledge world's first target (shipped demo model),
    every built-in attack after it."""
    run = Run(RunConfig(method="fullgrad", task="rwku", limit=1, params={"step": "0.03"}, attacks=ALL,
                        output=str(tmp_path_factory.mktemp("attacks"))), progress=lambda m: None)
    target = run.targets[0]
    return run, target, run.run_target(target)


# -- quantisation -------------------------------------------------------------
def test_nf4_and_int8_follow_the_formats_block_and_row_rules():
    torch.manual_seed(0)
    w = torch.randn(8, 100)
    q = nf4(w)
    blocks = torch.cat([w.reshape(-1), w.new_zeros(-w.numel() % BLOCK)]).view(-1, BLOCK)
    levels = (torch.cat([q.reshape(-1), q.new_zeros(-q.numel() % BLOCK)]).view(-1, BLOCK)
              / blocks.abs().amax(dim=1, keepdim=True))
    assert torch.isclose(levels.unsqueeze(-1), NF4).any(-1).all()  # every value a level times its block's absmax
    assert torch.equal(nf4(q), q) and (q - w).abs().max() < w.abs().max() * 0.2
    r = int8(w)
    steps = r / (w.abs().amax(dim=1, keepdim=True) / 127)
    assert torch.allclose(steps, steps.round(), atol=1e-4) and torch.allclose(int8(r), r)


SHAPES = [(64, 128), (8, 100), (30, 576)]  # whole blocks, a padded last block, SmolLM2's width
# sha256 (first 16 hex) of bitsandbytes 0.50.2's output on exact_weights(shape), CPU kernels:
# NF4's dequantised weights, int8's integer codes (regenerate with bitsandbytes installed:
# the test below checks these digests against its output)
BNB_DIGESTS = {"nf4": ["8243d63f4e883bc1", "e283eadcf143ba03", "cf169666fcb6f4fd"],
               "int8": ["48c7579245f5a1ad", "db0f7b36e7ada1ab", "71663ecd49534b08"]}


def exact_weights(shape: tuple[int, int]) -> torch.Tensor:
    """Weights in [-0.05, 0.05] from integer arithmetic and one division: the same bits on every CPU."""
    n = shape[0] * shape[1]
    return (((torch.arange(n) * 7919) % 2001 - 1000).float() / 20000).view(shape)


def simulated(fmt: str, w: torch.Tensor) -> torch.Tensor:
    """The simulation's NF4 weights, or its int8 integer codes (row absmax over 127 a step)."""
    if fmt == "nf4":
        return nf4(w)
    return torch.round(int8(w) / (w.abs().amax(dim=1, keepdim=True) / 127)).to(torch.int8)


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("fmt", ["nf4", "int8"])
def test_the_simulated_formats_match_bitsandbytes_recorded_output(fmt):
    """Without bitsandbytes installed: the simulation reproduces its recorded output bit for bit."""
    assert [digest(simulated(fmt, exact_weights(shape))) for shape in SHAPES] == BNB_DIGESTS[fmt]


@pytest.mark.parametrize("fmt", ["nf4", "int8"])
def test_the_simulated_formats_are_bitsandbytes_own(fmt):
    """bitsandbytes' own quantise-then-dequantise (its CPU kernels) gives the simulation's
    weights: NF4 bit for bit, int8 to float rounding; and its output is the recorded one."""
    F = pytest.importorskip("bitsandbytes.functional")
    torch.manual_seed(2)
    for shape, recorded in zip(SHAPES, BNB_DIGESTS[fmt]):
        w = torch.randn(*shape) * 0.05
        if fmt == "nf4":
            assert torch.equal(nf4(w), F.dequantize_4bit(*F.quantize_4bit(w, blocksize=BLOCK, quant_type="nf4")))
            own = F.dequantize_4bit(*F.quantize_4bit(exact_weights(shape), blocksize=BLOCK, quant_type="nf4"))
        else:
            q, rows, _ = F.int8_vectorwise_quant(w)
            assert torch.allclose(int8(w), F.int8_vectorwise_dequant(q, rows), rtol=0, atol=1e-7)
            own = F.int8_vectorwise_quant(exact_weights(shape))[0]
        assert digest(own) == recorded


@pytest.mark.parametrize("fmt", ["nf4", "int8"])
def test_quantisation_undoes_an_edit_smaller_than_its_step(fmt):
    """The mechanism of the attack: a deletion that moves weights by less than half a
    quantisation step is erased by quantising (a no-op attack leaves the edit in place)."""
    torch.manual_seed(1)
    quantise = {"nf4": nf4, "int8": int8}[fmt]
    w = quantise(torch.randn(16, 128))  # an untouched model already on the grid
    groups = w.reshape(-1, BLOCK) if fmt == "nf4" else w  # blocks of 64, or rows
    scale = (groups.abs() == groups.abs().amax(dim=1, keepdim=True)).view_as(w)  # each group's absmax: left alone
    edited = w + 1e-3 * torch.randn_like(w) * ~scale
    assert not torch.equal(edited, w) and torch.equal(quantise(edited), w)


def test_the_quantize_attack_quantises_every_linear_layer_but_the_head(world_run):
    run, _, _ = world_run
    model = run.weights.at("untouched")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    head = model.get_output_embeddings()
    run.weights.edited()
    dict(run.attacks.attacks)["quantize:nf4"].attack(model, [], run.ctx, run.attacks.budget)
    linear = {f"{n}.weight" for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not head}
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert linear and changed == linear
    run.weights.at("untouched")


# -- the data each attack uses -------------------------------------------------
def test_rap_relearns_half_the_facts_in_their_paraphrases():
    facts = [Probe(prompt=f"Q{i}", answer=f"A{i}", set="request", target="t") for i in range(6)]
    paraphrased = [dataclasses.replace(p, prompt=f"again: {p.prompt}") for p in facts]
    ctx = SimpleNamespace(seed=0)
    data = Rap().data(SimpleNamespace(views=[facts, paraphrased], facts=facts), ctx)
    assert len(data) == 3 and all(p.prompt.startswith("again: ") for p in data)
    assert data == Rap().data(SimpleNamespace(views=[facts, paraphrased], facts=facts), ctx)
    assert Rap().data(SimpleNamespace(views=[facts[:1]], facts=facts[:1]), ctx) == facts[:1]  # no paraphrase: as asked


def test_unrelated_relearning_holds_no_fact_of_the_target(world_run):
    """Its k items come from other people's data; a stand-in that relearns the request (or any
    text naming the target) fails here."""
    run, target, _ = world_run
    request = run.request(target)
    data = RelearnUnrelated(RelearnUnrelated.parse("8")).data(request, run.ctx)
    assert len(data) == 8 and all(p in run.ctx.retain_pool for p in data)
    first = target.name.split()[0].lower()
    assert not any(first in (p.prompt + " " + p.answer).lower() for p in data)
    assert any(first in (p.prompt + " " + p.answer).lower() for p in Rap().data(request, run.ctx))
    with pytest.raises(UserError, match="relearns on the retain pool .* and this run has none"):
        RelearnUnrelated().data(request, SimpleNamespace(retain_pool=[], seed=0))


def test_related_relearning_uses_only_k_of_raps_items(world_run):
    """k items of RAP's own data (the request's paraphrases, each naming the target); a
    stand-in that relearns other people's data, or all of RAP's, fails here."""
    run, target, _ = world_run
    request = run.request(target)
    rap = Rap().data(request, run.ctx)
    data = RelearnRelated(RelearnRelated.parse("2")).data(request, run.ctx)
    assert len(rap) > 2 and len(data) == 2 and all(p in rap for p in data)
    assert not any(p in run.ctx.retain_pool for p in data)
    every = RelearnRelated(RelearnRelated.parse(str(len(rap) + 5))).data(request, run.ctx)
    assert sorted(every, key=repr) == sorted(rap, key=repr)  # more than RAP has: all of RAP's items


@pytest.mark.parametrize("attack", [Rap(), RelearnRelated(RelearnRelated.parse("2")),
                                    RelearnUnrelated(RelearnUnrelated.parse("8"))], ids=lambda a: a.name)
def test_every_relearning_attack_changes_the_weights_it_is_given(world_run, attack):
    run, target, _ = world_run
    model = run.weights.at("untouched")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    run.weights.edited()
    attack.attack(model, attack.data(run.request(target), run.ctx), run.ctx, run.attacks.budget)
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters())  # a no-op fails
    run.weights.at("untouched")


def test_the_jailbreak_prompt_asks_every_probe_after_its_instruction_and_keeps_its_answer():
    probe = Probe(prompt="Question: Where was Ann Lee born?\nAnswer:", answer="Oslo", set="forget_qa", target="t")
    attacked = AdversarialPrompt(AdversarialPrompt.parse("jailbreak")).attack(None, [], None, None)
    asked = attacked.ask(probe)
    assert asked.prompt == JAILBREAK + probe.prompt
    assert (asked.answer, asked.set, asked.target) == ("Oslo", "forget_qa", "t")
    assert attacked.reply == ""


def test_the_sure_attack_opens_every_answer_compliantly(tiny, tmp_path, prompts_seen):
    """"Sure, here is the answer:" begins the reply: after the prompt, or opening the
    assistant's turn through a chat template (never inside the user's)."""
    import copy

    from r2f_bench.engine.lmeval import evaluate_probes
    from r2f_bench.tasks.rwku import RWKU

    attacked = AdversarialPrompt(AdversarialPrompt.parse("sure")).attack(None, [], None, None)
    assert attacked.ask is None and attacked.reply == SURE
    task = RWKU()
    probes = {"forget_qa": task.load(task.locate(None), None, 1, n_dev=0).targets[0].probes["forget_qa"][:3]}
    tok = copy.deepcopy(tiny["tok"])
    tok.chat_template = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
                         "{% if add_generation_prompt %}<s>assistant:{% endif %}")
    seen = prompts_seen(tiny["model"], tok)
    evaluate_probes(tiny["model"], tok, task, probes, tmp_path, reply=attacked.reply)
    plain, seen[:] = list(seen), []
    evaluate_probes(tiny["model"], tok, task, probes, tmp_path, chat_template=True, reply=attacked.reply)
    for p in probes["forget_qa"]:
        assert any(text.startswith(f"{p.prompt} {SURE}") for text in plain)
        assert any(f"user: {p.prompt}assistant: {SURE}" in text for text in seen), seen[:2]


def test_fewshot_asks_each_probe_after_solved_examples_of_other_people(world_run):
    run, target, _ = world_run
    attack = FewShot(FewShot.parse("2"))
    data = attack.data(run.request(target), run.ctx)
    assert {p.target for p in data} <= {t.id for t in run.ctx.dev_targets}
    for name in ("forget_qa", "forget_fb"):  # a probe is shown 2 solved examples of its own set, none of another
        probe = target.probes[name][0]
        asked = attack.attack(None, data, run.ctx, run.attacks.budget).ask(probe)
        shown = [p for p in data if f"{p.prompt} {p.answer}" in asked.prompt]
        assert asked.prompt.endswith(probe.prompt) and asked.answer == probe.answer
        assert len(shown) == 2 and {p.set for p in shown} == {name}


class Leaky(Attack):
    name = "leaky"
    edits_weights = False

    def data(self, request, ctx):
        return list(self.target.probes["forget_qa"][:1])

    def attack(self, model, data, ctx, budget):
        return Attacked(model)


def test_an_attack_handed_a_scored_probe_is_refused_in_one_line(world_run):
    run, target, _ = world_run
    leaky = Leaky()
    leaky.target = target
    attacks = run.attacks.attacks
    run.attacks.attacks = [("leaky", leaky)]
    try:
        with pytest.raises(UserError, match="an attack must never be handed what it is scored on"):
            run.attacks.prepare(target, run.request(target))
    finally:
        run.attacks.attacks = attacks


class Broken(Attack):
    name = "broken"
    edits_weights = False

    def attack(self, model, data, ctx, budget):
        return {}["no such key"]


def test_an_attack_that_raises_is_named_in_one_line_after_its_traceback(world_run):
    run, target, _ = world_run
    said = []
    progress, run.attacks.progress = run.attacks.progress, said.append
    try:
        prepared = [Prepared("broken", Broken(), [])]
        with pytest.raises(UserError, match=r"attack 'broken' \(unregistered .*\) raised KeyError on target "):
            run.attacks.after(run.model, target, prepared)
    finally:
        run.attacks.progress = progress
        run.weights.to_start()
    assert "Traceback" in said[-1]


# -- after a real deletion -------------------------------------------------------
def test_every_attack_is_scored_after_the_deletion_with_its_control(world_run):
    _, _, record = world_run
    assert set(record["attacks"]) == set(ALL.split(","))
    forgotten = record["forgotten_forget_probes"]
    assert forgotten >= 5
    for spec, result in record["attacks"].items():
        assert result["forgotten"] == forgotten and result["seconds"] > 0, spec
        assert 0 <= result["control"] <= 100 and 0 <= result["usr"] <= 100, spec
    rap = record["attacks"]["rap"]
    assert (record["rap"], record["rap_control"]) == (rap["recovered"], rap["control"])
    assert rap["recovered"] > 0 and rap["usr"] < record["usr"]  # relearning half the facts brings answers back
    assert record["attacks"]["quantize:int8"]["control"] >= 90  # int8 keeps what the untouched model knew


def test_the_deletions_weights_are_put_back_between_attacks(world_run, tmp_path):
    """RAP after four other attacks scores what RAP alone scores: each attack starts from the
    deletion's result, never from the previous attack's."""
    run, target, record = world_run
    alone = Run(RunConfig(**{**run.config.to_dict(), "attacks": "rap", "output": str(tmp_path)}), progress=lambda m: None)
    without_time = lambda result: {k: v for k, v in result.items() if k != "seconds"}
    assert without_time(alone.run_target(alone.targets[0])["attacks"]["rap"]) == without_time(record["attacks"]["rap"])


def test_controls_are_cached_by_attack(world_run, monkeypatch):
    run, target, _ = world_run
    planned = run.attacks.prepare(target, run.request(target))
    calls = []
    monkeypatch.setattr(run.attacks, "_on_untouched", lambda t, p: calls.append(p.spec))
    run.attacks.controls(target, planned)
    assert calls == []  # every control read back from the cache


def test_leak_at_k_takes_the_best_of_k_sampled_answers(monkeypatch, tmp_path):
    """k evaluations, each with its own seed and sampling on; a probe is answered if any is."""
    from r2f_bench.engine import lmeval

    seen = []

    real = lmeval.evaluate_probes

    def fake(model, tokenizer, task, probes, workdir, batch_size=32, chat_template=False, sampling=None, reply=""):
        if sampling is not None and sampling[0] > 1:
            return real(model, tokenizer, task, probes, workdir, batch_size, chat_template, sampling, reply=reply)
        seen.append(sampling)
        hit = sampling[2] % 3 == 0
        return {"s": [{"answered": float(hit and i == 0), "score": float(hit) / 2} for i in range(2)]}

    monkeypatch.setattr(lmeval, "evaluate_probes", fake)
    out = lmeval.evaluate_probes(None, None, None, {"s": []}, tmp_path, sampling=(4, 1.0, 10))
    assert seen == [(1, 1.0, 10), (1, 1.0, 11), (1, 1.0, 12), (1, 1.0, 13)]
    assert out == {"s": [{"answered": 1.0, "score": 0.5}, {"answered": 0.0, "score": 0.5}]}


def test_a_bad_attacks_option_is_one_line_before_anything_loads():
    with pytest.raises(UserError, match="unknown attack 'quantise'"):
        parse_attacks("rap,quantise:nf4")
    with pytest.raises(UserError, match="parameter 'format' of attack 'quantize' must be one of nf4, int8"):
        parse_attacks("quantize:fp8")
    with pytest.raises(UserError, match="parameter 'k' of attack 'leak_at_k' must be >= 2"):
        parse_attacks("leak_at_k:1")  # one sample is no Leak@k
    assert parse_attacks("none") == []
    # an attack is one attack however it is written: its value stated, duplicates merged
    assert [spec for spec, _ in parse_attacks("rap,fewshot,fewshot:3,quantize")] == ["rap", "fewshot:3", "quantize:nf4"]
