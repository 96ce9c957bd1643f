"""NPO, SimNPO, GradDiff and RMU (issue #28): each loss equals its paper's formula worked
by hand on a toy example, and each method forgets on the tiny taught model.

The toy language model predicts the same next-token distribution everywhere,
p = (x 1/8, a 1/4, b 1/8, eos 1/2), so an answer's log-probability is a sum of known
logs: "a" (+ eos, 2 tokens) has log π = log(1/4 · 1/2) = −3 ln 2, "a b" (3 tokens)
−6 ln 2, "b" (2 tokens) −4 ln 2. With logits w = log p, the gradient of log π(y) with
respect to w is Σ_t (e_{y_t} − p).
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch

from r2f_bench.data import Probe

LN2 = math.log(2)
VOCAB = {"x": 0, "a": 1, "b": 2}
EOS = 3
PROBS = (1 / 8, 1 / 4, 1 / 8, 1 / 2)
SHORT = Probe(prompt="x", answer="a", set="forget", target="t")  # log π = −3 ln 2, |y| = 2
LONG = Probe(prompt="x", answer="a b", set="forget", target="t")  # log π = −6 ln 2, |y| = 3
RETAIN = Probe(prompt="x", answer="b", set="retain", target="u")  # log π = −4 ln 2, |y| = 2


class WordTokenizer:
    """Whitespace-separated words of :data:`VOCAB`; end of sequence and padding share an id."""

    eos_token_id = pad_token_id = EOS

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [VOCAB[w] for w in text.split()]}


class Unigram(torch.nn.Module):
    """Logits ``w = log p`` at every position, whatever the input."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(PROBS).log())

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> SimpleNamespace:
        return SimpleNamespace(logits=self.w.expand(*input_ids.shape, -1))


TOK = WordTokenizer()


def grad_logp(*tokens: int) -> torch.Tensor:
    """d log π(y) / dw for an answer of ``tokens``: Σ_t (e_t − p)."""
    return sum(torch.eye(len(PROBS))[t] for t in tokens) - len(tokens) * torch.tensor(PROBS)


G_SHORT, G_LONG, G_RETAIN = grad_logp(1, EOS), grad_logp(1, 2, EOS), grad_logp(2, EOS)


def sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


# -- shared ---------------------------------------------------------------------------
def test_answer_logprob_sums_the_answer_tokens():
    from r2f_bench.training.encoding import encode
    from r2f_bench.training.losses import answer_logprob

    logp, length = answer_logprob(Unigram(), encode(TOK, [SHORT, LONG]))
    assert logp.tolist() == pytest.approx([-3 * LN2, -6 * LN2], rel=1e-6)
    assert length.tolist() == [2, 3]


@pytest.mark.parametrize("temperature", [1.0, 4.0])
def test_distillation_kl_softens_both_distributions_and_scales_by_t_squared(temperature):
    """SCRUB's KL (its ``DistillKL``): T² · KL(softmax(w_ref / T) ‖ softmax(w / T)) per answer token."""
    from r2f_bench.training.encoding import encode
    from r2f_bench.training.losses import answer_kl

    batch = encode(TOK, [SHORT])
    student = torch.zeros(1, batch["input_ids"].shape[1], len(PROBS))  # uniform
    teacher = torch.tensor(PROBS).log().expand_as(student)
    soft = [p ** (1 / temperature) for p in PROBS]
    soft = [p / sum(soft) for p in soft]
    by_hand = temperature ** 2 * sum(p * math.log(p * len(PROBS)) for p in soft)
    assert answer_kl(student, teacher, batch["labels"], temperature).item() == pytest.approx(by_hand, rel=1e-5)  # float32


# -- NPO ------------------------------------------------------------------------------
def test_npo_reference_is_the_untouched_models_log_probability():
    from r2f_bench.baselines.npo import reference_logprobs

    refs = reference_logprobs(Unigram(), TOK, [SHORT, LONG, SHORT])
    assert refs == {SHORT: pytest.approx(-3 * LN2, rel=1e-6), LONG: pytest.approx(-6 * LN2, rel=1e-6)}


def test_npo_loss_and_gradient_match_the_paper_by_hand():
    from r2f_bench.baselines.npo import npo_forget

    model, beta = Unigram(), 0.1
    # the reference found "a" twice as likely (log-ratio −ln 2) and "a b" as likely (0)
    loss = npo_forget(model, TOK, {SHORT: -2 * LN2, LONG: -6 * LN2}, beta)([SHORT, LONG])
    # L = −(2/β) · mean log σ(−β · r) = (2/β) · mean(ln(1 + 2^−β), ln 2)
    assert loss.item() == pytest.approx((2 / beta) * (math.log(1 + 2 ** -beta) + LN2) / 2, rel=1e-6)
    # dL/d log π_i = (2/N) · σ(β · r_i), N = 2
    loss.backward()
    expected = sigmoid(-beta * LN2) * G_SHORT + sigmoid(0.0) * G_LONG
    assert torch.allclose(model.w.grad, expected, atol=1e-6)


def test_npo_loss_is_anchored_at_the_reference_and_pushes_likelihood_down():
    from r2f_bench.baselines.npo import npo_loss

    beta = 0.1
    for ref in (-1.0, -5.0):  # at πθ = πref the loss is (2/β) ln 2 whatever the reference
        logp = torch.tensor([ref], requires_grad=True)
        loss = npo_loss(logp, torch.tensor([ref]), beta)
        assert loss.item() == pytest.approx(2 / beta * LN2, rel=1e-6)
        loss.backward()
        assert logp.grad.item() == pytest.approx(1.0)  # 2σ(0): descending lowers log π


# -- SimNPO ---------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", [0.0, 0.5])
def test_simnpo_loss_and_gradient_match_the_paper_by_hand(gamma):
    from r2f_bench.baselines.simnpo import simnpo_forget

    model, beta = Unigram(), 2.5
    loss = simnpo_forget(model, TOK, beta, gamma)([SHORT, LONG])
    # −(β/|y|) · log π: 2.5/2 · 3 ln 2 = 3.75 ln 2 and 2.5/3 · 6 ln 2 = 5 ln 2
    z = (3.75 * LN2 - gamma, 5 * LN2 - gamma)
    assert loss.item() == pytest.approx((2 / beta) * sum(math.log1p(math.exp(-zi)) for zi in z) / 2, rel=1e-6)
    # dL/d log π_i = (1/N) · (2/|y_i|) · σ(−z_i)
    loss.backward()
    expected = sigmoid(-z[0]) / 2 * G_SHORT + sigmoid(-z[1]) / 3 * G_LONG
    assert torch.allclose(model.w.grad, expected, atol=1e-6)


# -- GradDiff -------------------------------------------------------------------------
def test_graddiff_loss_and_gradient_match_by_hand():
    from r2f_bench.baselines.graddiff import ascent, with_retain

    model, weight = Unigram(), 0.5
    loss = with_retain(model, TOK, ascent(model, TOK), [SHORT, LONG], [RETAIN], weight)
    # −mean NLL(forget) + λ · NLL(retain), per-token means: −(1.5 ln 2 + 2 ln 2)/2 + 0.5 · 2 ln 2
    assert loss.item() == pytest.approx(-1.75 * LN2 + weight * 2 * LN2, rel=1e-6)
    loss.backward()
    expected = (G_SHORT / 2 + G_LONG / 3) / 2 - weight * G_RETAIN / 2
    assert torch.allclose(model.w.grad, expected, atol=1e-6)


# -- RMU ------------------------------------------------------------------------------
def test_rmu_loss_and_gradient_match_by_hand():
    from r2f_bench.baselines.rmu import rmu_loss

    control = torch.tensor([3.0, 4.0])  # c·u with c = 5, u = (0.6, 0.8)
    h_forget = torch.tensor([[[3.0, 0.0], [1e3, 1e3]]], requires_grad=True)  # second token: padding
    h_retain = torch.tensor([[[1.0, 1.0], [0.0, 2.0]]], requires_grad=True)
    frozen = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    loss = rmu_loss(h_forget, torch.tensor([[1, 0]]), control, h_retain, frozen, torch.tensor([[1, 1]]), alpha=2.0)
    # forget: (0² + 4²)/2 = 8 on the one real token; retain: mean((0² + 1²)/2, (0² + 2²)/2) = 1.25
    assert loss.item() == pytest.approx(8 + 2 * 1.25)
    loss.backward()
    assert torch.equal(h_forget.grad, torch.tensor([[[0.0, -4.0], [0.0, 0.0]]]))  # 2(h − c·u)/d, padding none
    assert torch.allclose(h_retain.grad, 2 * torch.tensor([[[0.0, 0.5], [0.0, 1.0]]]))  # α · 2(h − h₀)/d / 2 tokens


def test_rmu_control_vector_and_layer():
    from r2f_bench.baselines.rmu import control_vector, rmu_layer

    v = control_vector(64, 6.5, seed=3)
    assert v.norm().item() == pytest.approx(6.5) and (v >= 0).all()
    assert torch.equal(v, control_vector(64, 6.5, seed=3)) and not torch.equal(v, control_vector(64, 6.5, seed=4))
    assert [rmu_layer(d) for d in (1, 2, 4, 32)] == [0, 1, 1, 7]  # the paper's 7 of 32, at least 1


def test_rmu_trains_only_the_mlp_outputs_up_to_its_layer_and_stops_there(tiny, context):
    from r2f_bench.baselines.rmu import RMU, decoder_layers, layer_output
    from r2f_bench.data import ForgetRequest
    from r2f_bench.training.encoding import encode
    from r2f_bench.engine.embedded import EmbeddedSpec, new_embedded_model

    model = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l4"), tiny["tok"]).eval()
    target = tiny["bench"].targets[0]
    request = ForgetRequest(target=target.id, views=[target.request], retain=tiny["bench"].retain_pool())
    batch = encode(tiny["tok"], request.facts)
    with torch.no_grad():  # what it steers is layer 1's output, hidden state 2 of the full pass
        full = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
        assert torch.allclose(layer_output(model, decoder_layers(model)[1], batch), full.hidden_states[2], atol=1e-5)
    edited, calls = copy.deepcopy(model), []
    decoder_layers(edited)[2].register_forward_hook(lambda *args: calls.append(1))
    edit = RMU(RMU.parse_params({"steps": "2"})).unlearn(edited, request, context)
    before, after = model.state_dict(), edit.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert edit.info["layer"] == 1 and edit.info["updated_layers"] == [0, 1]
    assert changed == {"model.layers.0.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weight"}
    assert all(q.requires_grad for q in edit.model.parameters())  # the flags it froze are restored
    assert not calls  # no forward pass ran above layer ℓ


# -- behaviour on the tiny taught model -----------------------------------------------
NEW = ["graddiff", "npo", "simnpo", "rmu"]


def answer_nll(model, tok, probes) -> float:
    from r2f_bench.training.encoding import encode
    from r2f_bench.training.losses import answer_nll as nll

    with torch.no_grad():
        return float(nll(model, encode(tok, probes)).mean())


@pytest.mark.parametrize("name", NEW)
def test_new_baseline_forgets_the_request_more_than_the_retain_facts(tiny, context, name):
    from r2f_bench.data import ForgetRequest
    from r2f_bench.plugins import registry

    model, tok, bench = tiny["model"], tiny["tok"], tiny["bench"]
    target = bench.targets[0]
    request = ForgetRequest(target=target.id, views=context.make_views(target.request), retain=bench.retain_pool())
    cls = registry().method(name)
    assert cls.strength is not None and cls.__module__ == f"r2f_bench.baselines.{name}"
    torch.manual_seed(0)
    edit = cls().unlearn(copy.deepcopy(model), request, context)
    before, after = model.state_dict(), edit.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "no weight changed"
    assert all(torch.isfinite(v).all() for v in after.values())
    forget_rise = answer_nll(edit.model, tok, request.facts) - answer_nll(model, tok, request.facts)
    retain_rise = answer_nll(edit.model, tok, request.retain) - answer_nll(model, tok, request.retain)
    assert forget_rise > retain_rise + 0.01, (forget_rise, retain_rise)
