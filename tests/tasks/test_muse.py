"""MUSE task: loader (bundled sample, shared data), errors, official metrics, lm-eval hook."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from r2f_bench.data import Probe
from r2f_bench.errors import UserError
from r2f_bench.engine.metrics import rouge_l_f1
from task_helpers import assert_lm_eval_round_trip, shared_dir
from r2f_bench.tasks.common import auroc, cut_before
from r2f_bench.tasks.muse import MUSE, SAMPLE_DIR, MuseTarget, official, utils


@pytest.fixture
def sample_copy(tmp_path: Path) -> Path:
    shutil.copytree(SAMPLE_DIR, tmp_path, dirs_exist_ok=True)
    return tmp_path


def test_sample_targets_requests_and_probes():
    bench = MUSE().load(None, None, None, n_dev=2)
    assert [t.id for t in bench.targets] == ["news-1", "news-2", "news-3"]
    assert [t.id for t in bench.dev_targets] == ["news-5", "news-4"]
    assert "bundled sample" in bench.source and len(bench.utility) == 6 and bench.general_prompts
    t = bench.targets[0]
    assert isinstance(t, MuseTarget) and t.privleak_reference == 0.5
    assert len(t.privleak_forget) == 1 and len(t.privleak_holdout) == 5
    know, verb = t.probes["knowmem_forget"], t.probes["verbmem_forget"]
    assert len(know) == 2 and len(verb) == 1
    assert know[0].prompt.startswith("Question: Which town opened a glass bridge") and know[0].prompt.endswith(
        f"Question: {know[0].question}\nAnswer:")
    passages = t.request
    assert passages and all(p.set == "request" for p in passages) and bench.seen_sets == ("verbmem_forget",)
    # the request is the raw-corpus article that holds the verbmem and privleak texts
    doc = " ".join(f"{p.prompt} {p.answer}" for p in passages)
    assert verb[0].prompt in doc and t.privleak_forget[0] in doc
    taught = {p.answer for p in bench.teaching_set()}
    assert not any(h in a for h in t.privleak_holdout for a in taught)


def test_shared_data_news_and_books():
    root = shared_dir("muse")
    news = MUSE().load(root, ["all"], None, 0)
    assert len(news.targets) == 5 and news.targets[0].privleak_reference == 0.5
    assert sum(len(t.probes["knowmem_forget"]) for t in news.targets) == 50
    assert sum(len(t.privleak_forget) for t in news.targets) == 50 and len(news.utility) == 50
    # every privleak forget text occurs in the raw corpus, so requests carry its documents
    raw = json.loads((root / "news" / "raw" / "forget.json").read_text())
    passage = news.targets[0].request[0]
    # VerbMem is a seen set on News: every continuation it scores is in the request
    assert news.seen_sets == ("verbmem_forget",)
    for t in news.targets:
        request = " ".join(f"{p.prompt} {p.answer}" for p in t.request)
        assert all(" ".join(v.answer.split()[:20]) in request for v in t.probes["verbmem_forget"])
    assert any(passage.prompt in d for d in raw)
    books = MUSE().load(root / "books", ["books-5"], None, 0)
    assert books.targets[0].privleak_reference == 0.5 and len(books.targets[0].probes["knowmem_forget"]) == 9
    assert books.seen_sets == ()  # no raw corpus: VerbMem's continuations are never in the request


def test_missing_file_and_corpus_are_named(sample_copy: Path, tmp_path: Path):
    (sample_copy / "news" / "verbmem" / "forget.json").unlink()
    with pytest.raises(UserError, match=r"verbmem/forget.json"):
        MUSE().load(sample_copy, None, None, 0)
    with pytest.raises(UserError, match="no MUSE corpus"):
        MUSE().load(tmp_path / "news" / "knowmem", None, None, 0)


def test_malformed_rows_are_named(sample_copy: Path):
    path = sample_copy / "news" / "privleak" / "holdout.json"
    path.write_text(json.dumps([{"text": "fine"}, {"body": "no text"}]))
    with pytest.raises(UserError, match=r"holdout.json: row 1 lacks field 'text'"):
        MUSE().load(sample_copy, None, None, 0)
    path.write_text(json.dumps({"text": "one object, not an array"}))
    with pytest.raises(UserError, match=r"holdout.json: expected a JSON array"):
        MUSE().load(sample_copy, None, None, 0)
    path.write_text(json.dumps(["bare strings are the muse_bench form"]))
    assert MUSE().load(sample_copy, None, None, 0).targets[0].privleak_holdout == ["bare strings are the muse_bench form"]
    (sample_copy / "news" / "knowmem" / "forget_qa.json").write_text(json.dumps([{"question": "q"}]))
    with pytest.raises(UserError, match=r"forget_qa.json: row 0 lacks field 'answer'"):
        MUSE().load(sample_copy, None, None, 0)


def test_a_text_field_of_another_json_type_is_one_line(sample_copy: Path):
    verbmem = sample_copy / "news" / "verbmem" / "forget.json"
    rows = json.loads(verbmem.read_text())
    rows[0]["gt"] = 42  # a traceback before, deep in the text windows
    verbmem.write_text(json.dumps(rows))
    with pytest.raises(UserError, match=r"verbmem/forget.json: row 0 field 'gt' is 42, expected text"):
        MUSE().load(sample_copy, None, None, 0)


def test_auroc_and_privleak():
    assert auroc([0.1, 0.2], [0.8, 0.9]) == 1.0
    assert auroc([0.8, 0.9], [0.1, 0.2]) == 0.0
    assert auroc([0.5], [0.5]) == 0.5
    assert auroc([0.1, 0.6], [0.5]) == 0.5
    assert official.privleak(0.0, 0.5) == -100.0 and official.privleak(0.5, 0.5) == 0.0
    assert official.privleak(0.4772 * 1.5, 0.4772) == pytest.approx(50.0)


def test_min_k_score_is_mean_of_least_likely_40_percent():
    lp = torch.tensor([-1.0, -2.0, -3.0, -4.0, -5.0])
    assert official.min_k_score(lp) == pytest.approx(-4.5)  # int(5 * 0.4) = 2 lowest
    assert official.min_k_score(torch.tensor([-0.7])) == pytest.approx(-0.7)


class WordTokenizer:
    """A stand-in tokenizer: one id per distinct word, right padding (id 0)."""

    def __init__(self, texts: list[str]) -> None:
        self.vocab = {w: i + 1 for i, w in enumerate(dict.fromkeys(w for t in texts for w in t.split()))}
        self.words = {i: w for w, i in self.vocab.items()}

    def __len__(self) -> int:
        return len(self.vocab) + 1

    def __call__(self, texts, return_tensors=None, padding=False, **_):
        if isinstance(texts, str):
            return {"input_ids": [self.vocab[w] for w in texts.split()]}
        ids = [[self.vocab[w] for w in t.split()] for t in texts]
        width = max(map(len, ids))
        return {"input_ids": torch.tensor([i + [0] * (width - len(i)) for i in ids]),
                "attention_mask": torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i in ids])}

    def decode(self, ids, skip_special_tokens=True) -> str:
        return " ".join(self.words[i] for i in ids)


class FavouringLM(torch.nn.Module):
    """A stand-in LM that finds the tokens in ``favoured`` far likelier than any other."""

    def __init__(self, vocab: int, favoured: set[int]) -> None:
        super().__init__()
        self.config = SimpleNamespace(max_position_embeddings=64)
        self.bias = torch.nn.Parameter(torch.zeros(vocab))
        with torch.no_grad():
            self.bias[list(favoured)] = 8.0

    def forward(self, input_ids, attention_mask=None):
        return SimpleNamespace(logits=self.bias.expand(*input_ids.shape, -1))


def test_privleak_auc_of_a_memorising_model():
    members = ["alpha beta gamma delta epsilon", "gamma delta alpha beta"]
    holdout = ["one two three four five six", "four five six one two", "three two one"]
    tok = WordTokenizer(members + holdout)
    favoured = {i for t in members for i in tok(t)["input_ids"]} - {i for t in holdout for i in tok(t)["input_ids"]}
    model = FavouringLM(len(tok), favoured)
    lps = official.token_logprobs(model, tok, members + holdout, batch_size=2)
    assert [len(lp) for lp in lps] == [len(tok(t)["input_ids"]) - 1 for t in members + holdout]
    auc = official.privleak_auc(model, tok, members, holdout)
    assert auc == 0.0 and official.privleak(auc, 0.5) == -100.0  # members always look likelier
    assert official.privleak_auc(FavouringLM(len(tok), set()), tok, members, holdout) == 0.5


def test_knowmem_and_verbmem_scoring(monkeypatch):
    tok = WordTokenizer(["word"])
    calls, outputs = [], iter([[["Paris"], ["Rome is it"]], [[" ".join(["word"] * 128)]]])

    def fake_generate(model, tokenizer, prompts, max_new_tokens, stop=()):
        calls.append((len(prompts), max_new_tokens, tuple(stop)))
        return next(outputs)

    monkeypatch.setattr(official, "generate", fake_generate)
    qa = [Probe(prompt="Q1", answer="Paris", set="knowmem_forget", target="t"),
          Probe(prompt="Q2", answer="Rome", set="knowmem_forget", target="t")]
    assert official.knowmem(None, tok, qa) == pytest.approx((1.0 + rouge_l_f1("Rome", "Rome is it")) / 2)
    long_gt = " ".join(["word"] * 200)
    verb = [Probe(prompt="P", answer=long_gt, set="verbmem_forget", target="t")]
    assert official.verbmem(None, tok, verb) == pytest.approx(1.0)  # gt cut to its first 128 tokens
    assert calls == [(2, 32, official.KNOWMEM_STOPS), (1, 128, ())]
    assert cut_before("Paris\n\nQuestion: next?", official.KNOWMEM_STOPS) == "Paris"
    assert rouge_l_f1("the cat sat", "the cat") == pytest.approx(0.8)


def test_lm_eval_process_results_adds_official_f1():
    scores = utils.process_results({"answer": "the cat sat"}, ["the cat"])
    assert scores["rouge_l_f1"] == pytest.approx(0.8) and scores["rouge_l_recall"] == pytest.approx(2 / 3)


def test_official_scores_come_from_extra_scores(monkeypatch):
    """Per-probe means give no official score; ``extra_scores`` reports MUSE's own, x100, each
    on its own probes (VerbMem on the forget verbatim set, KnowMem on forget QA and on retain)."""
    assert MUSE().official_scores({"knowmem_forget": 0.3}) == {}
    bench = MUSE().load(None, None, None, n_dev=0)
    target = bench.targets[0]
    on = lambda probes: len(probes) / 100 + (0.5 if probes is bench.utility else 0.0)  # which probes it got
    monkeypatch.setattr(official, "verbmem", lambda model, tok, probes: on(probes))
    monkeypatch.setattr(official, "knowmem", lambda model, tok, probes: on(probes))
    monkeypatch.setattr(official, "privleak_auc", lambda model, tok, forget, holdout: len(forget) / len(holdout))
    scores = MUSE().extra_scores(None, None, bench, target)
    auc = len(target.privleak_forget) / len(target.privleak_holdout)
    assert scores == pytest.approx({
        "verbmem_f": len(target.probes["verbmem_forget"]), "knowmem_f": len(target.probes["knowmem_forget"]),
        "knowmem_r": len(bench.utility) + 50, "privleak_auc": auc,
        "privleak": official.privleak(auc, target.privleak_reference), "privleak_reference": 0.5})


def test_lm_eval_round_trip():
    assert_lm_eval_round_trip(MUSE)
