"""WaterDrum task: loader (bundled sample, Ax and hub fixtures, TOFU stand-in), errors,
Waterfall verification and the WaterDrum metric, lm-eval hook."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from r2f_bench.errors import UserError
from task_helpers import assert_lm_eval_round_trip, shared_dir
from r2f_bench.tasks.common import auroc
from r2f_bench.tasks.waterdrum import SAMPLE_DIR, OwnerTarget, WaterDrum
from r2f_bench.tasks.waterdrum.watermark import Verifier, WatermarkSpec, load_verifier, waterdrum_score, word_encoder

SAMPLE_SPEC = json.loads((SAMPLE_DIR / "waterdrum.json").read_text())


def write_config(root: Path, forget: list, retain: list, sidecar: dict | None = None) -> Path:
    (root / "forget_05").mkdir(parents=True)
    (root / "forget_05" / "forget.json").write_text(json.dumps(forget))
    (root / "forget_05" / "retain.json").write_text(json.dumps(retain))
    if sidecar is not None:
        (root / "waterdrum.json").write_text(json.dumps(sidecar))
    return root


def test_sample_owners_requests_and_keys():
    bench = WaterDrum().load(None, None, None, n_dev=2)
    assert [t.id for t in bench.targets] == ["owner-1", "owner-2", "owner-3"]
    assert [t.id for t in bench.dev_targets] == ["owner-5", "owner-4"]
    t = bench.targets[0]
    assert isinstance(t, OwnerTarget) and t.keys == SAMPLE_SPEC["keys"]
    assert t.watermark == WatermarkSpec("words:4096", 1, 2)
    assert t.request == t.probes["forget"] and len(t.request) == 4
    assert t.probes["forget"][0].prompt == "Question: What kind of books does Ilsa Marrow write?\nAnswer:"
    retained = {p.answer for p in t.probes["retain"]}
    assert retained.isdisjoint(p.answer for p in t.request) and retained.isdisjoint(p.answer for p in bench.utility)
    assert len(bench.utility) == 8 and bench.general_prompts
    assert "bundled sample" in bench.source and "no watermark keys" not in bench.source


def test_ax_fixture_without_keys(tmp_path: Path):
    abstracts = [{"text": " ".join(f"w{i}_{j}" for j in range(50))} for i in range(80)]
    root = write_config(tmp_path, abstracts[:25], abstracts[25:])
    bench = WaterDrum().load(root, ["all"], None, 0)
    assert [len(t.request) for t in bench.targets] == [20, 5]  # default 20 rows per owner
    probe = bench.targets[0].probes["forget"][0]
    assert probe.prompt.split() == abstracts[0]["text"].split()[:32] and len(probe.answer.split()) == 18
    assert len(bench.utility) == 15  # retain rows after the two neighbour chunks
    assert "no watermark keys" in bench.source and bench.targets[0].watermark is None
    assert WaterDrum().extra_scores(None, None, bench, bench.targets[0]) == {}
    same = WaterDrum().load(root / "forget_05", None, None, 0)  # a config folder works too
    assert same.revision == bench.revision


def test_hub_path(monkeypatch, capsys, tmp_path):
    import datasets

    calls = []
    rows = {"forget": [{"question": f"q{i}", "answer": f"a{i}"} for i in range(20)],
            "retain": [{"question": f"r{i}", "answer": f"b{i}"} for i in range(30)]}

    def fake_load(repo, config, split):
        calls.append((repo, config, split))
        return datasets.Dataset.from_list(rows[split])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    task = WaterDrum()
    bench = task.load(task.locate("hf:Glow-AI/WaterDrum-TOFU/forget_01"), None, None, 0)
    assert calls == [("Glow-AI/WaterDrum-TOFU", "forget_01", "forget"), ("Glow-AI/WaterDrum-TOFU", "forget_01", "retain")]
    assert bench.source.startswith("hf:Glow-AI/WaterDrum-TOFU/forget_01") and len(bench.utility) == 10
    with pytest.raises(UserError, match="bad hub address"):
        task.locate("hf:Glow-AI")

    def no_access(*_a, **_k):
        raise ConnectionError("gated dataset\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", no_access)
    with pytest.raises(UserError, match=r"cannot read Glow-AI/WaterDrum-Ax \(config 'forget_05'.*gated dataset\)"):
        task.load(task.locate("hf:Glow-AI/WaterDrum-Ax"), None, None, 0)
    # the command line reaches the same reader (the runner asks the task where its data is)
    from r2f_bench.cli import main

    capsys.readouterr()
    assert main(["--method", "fullgrad", "--task", "waterdrum", "--data-dir", "hf:Glow-AI/WaterDrum-Ax",
                 "--output", str(tmp_path)]) == 2
    assert "cannot read Glow-AI/WaterDrum-Ax (config 'forget_05'" in capsys.readouterr().err


def test_tofu_stand_in_from_shared_data(tmp_path: Path):
    """The schema on real (unwatermarked) TOFU rows: two forget owners are TOFU's forget01 authors."""
    tofu = shared_dir("tofu")
    forget = json.loads((tofu / "forget01.json").read_text())
    retain = json.loads((tofu / "holdout05.json").read_text())
    bench = WaterDrum().load(write_config(tmp_path, forget, retain), ["all"], None, 0)
    assert [len(t.request) for t in bench.targets] == [20, 20]
    assert bench.targets[1].request[0].question == forget[20]["question"]


def test_shared_waterdrum_folder_has_no_data():
    root = shared_dir("waterdrum")
    with pytest.raises(UserError, match=r"missing data file .*forget_05/forget.json"):
        WaterDrum().load(root, None, None, 0)


def test_missing_and_malformed_files_are_named(tmp_path: Path):
    root = tmp_path / "copy"
    shutil.copytree(SAMPLE_DIR, root)
    (root / "forget_05" / "retain.json").unlink()
    with pytest.raises(UserError, match=r"retain.json"):
        WaterDrum().load(root, None, None, 0)
    (root / "forget_05" / "retain.json").write_text(json.dumps([{"question": "q"}]))
    with pytest.raises(UserError, match=r"retain.json: row 0 lacks field 'answer'"):
        WaterDrum().load(root, None, None, 0)
    (root / "forget_05" / "retain.json").write_text(json.dumps([{"body": "x"}]))
    with pytest.raises(UserError, match=r"row 0 lacks field 'text'"):
        WaterDrum().load(root, None, None, 0)


@pytest.mark.parametrize("sidecar, message", [
    ({"keys": {"forget": 1}}, "'keys' lacks an integer field 'retain'"),
    ({"rows_per_owner": 0}, "'rows_per_owner' must be a positive integer"),
    # before: a TypeError, or a MemoryError, only after the model was taught
    ({"keys": {"forget": 1, "retain": 2}, "k_p": "1"}, r"'k_p' must be an integer of at least 1, got '1'\."),
    ({"keys": {"forget": 1, "retain": 2}, "n_gram": 1}, r"'n_gram' must be an integer of at least 2, got 1\."),
    ({"keys": {"forget": 1, "retain": 2}, "tokenizer": "words:99999999999"},
     r"tokenizer 'words:99999999999' needs a vocabulary size above 2 x k_p \(2\) and at most 1048576"),
    ({"keys": {"forget": 1, "retain": 2}, "tokenizer": 5}, r"'tokenizer' must name the watermarking model's tokenizer"),
])
def test_malformed_sidecar(tmp_path: Path, sidecar: dict, message: str):
    rows = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(30)]
    with pytest.raises(UserError, match=message):
        WaterDrum().load(write_config(tmp_path, rows[:5], rows[5:], sidecar), None, None, 0)


def test_verifier_matches_waterfalls_fourier_score():
    n, key = 512, 7
    v = Verifier(lambda text: [int(t) for t in text.split()], n)
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.integers(0, n, 200)]
    hist = np.bincount(v.indices(tokens, key), minlength=n)
    q, scored = v.strength(" ".join(map(str, tokens)), key)
    assert scored == 199 and q == pytest.approx(np.fft.rfft(hist / hist.sum())[1].real)
    # a text written fully under the key (Waterfall seeds with (key, previous token)):
    # every token sits at permuted index 0, where the cosine is 1
    text = [3]
    for _ in range(30):
        text.append(int(np.flatnonzero(np.random.RandomState((key, text[-1])).permutation(n) == 0)[0]))
    assert v.strength(" ".join(map(str, text)), key) == (pytest.approx(1.0), 30)
    assert abs(v.strength(" ".join(map(str, text)), key + 1)[0]) < 0.4
    assert v.strength("5", key) == (0.0, 0) and v.strength(f"1 2 {n + 3} 4", key)[1] == 1  # stops at an unknown id


def test_waterdrum_score_weights_generations_by_length():
    v = Verifier(word_encoder(64), 64)
    texts = ["a b c d e", "f g"]
    (q1, n1), (q2, n2) = (v.strength(t, 5) for t in texts)
    assert waterdrum_score([texts, [""]], v, 5) == pytest.approx(((q1 * n1 + q2 * n2) / (n1 + n2) + 0.0) / 2)
    with pytest.raises(UserError, match="k_p"):
        Verifier(word_encoder(64), 64, k_p=32)


def test_sample_is_watermarked_per_owner():
    v = load_verifier(WatermarkSpec(SAMPLE_SPEC["tokenizer"]))
    keys = SAMPLE_SPEC["keys"]
    answers = {s: [[r["answer"]] for r in json.loads((SAMPLE_DIR / "forget_05" / f"{s}.json").read_text())]
               for s in ("forget", "retain")}
    assert waterdrum_score(answers["forget"], v, keys["forget"]) > 0.3
    assert waterdrum_score(answers["retain"], v, keys["retain"]) > 0.3
    assert abs(waterdrum_score(answers["forget"], v, keys["retain"])) < 0.1
    # separability (the paper's AUROC desideratum) of forget vs retain answers under the forget key
    score = lambda rows: [v.strength(r[0], keys["forget"])[0] for r in rows]
    assert auroc(score(answers["retain"]), score(answers["forget"])) > 0.9


def test_official_scores_come_from_extra_scores(monkeypatch):
    """``waterdrum_<set>``: each set's generations verified under that set's key. Answers
    carrying the forget split's watermark score high under the forget key; the retain
    split's answers (another key) given to the same queries score near 0."""
    import r2f_bench.tasks.waterdrum as waterdrum

    assert WaterDrum().official_scores({"forget": 0.5}) == {}
    bench = WaterDrum().load(None, None, None, n_dev=0)
    target = bench.targets[0]
    answers = {p.prompt: p.answer for ps in target.probes.values() for p in ps}
    monkeypatch.setattr(waterdrum, "generate", lambda model, tok, prompts, *a, **k: [[answers[q]] for q in prompts])
    own = WaterDrum().extra_scores(None, None, bench, target)
    assert set(own) == {"waterdrum_forget", "waterdrum_retain"} and min(own.values()) > 0.25
    retained = [p.answer for p in target.probes["retain"]]
    assert target.keys["forget"] != target.keys["retain"]
    monkeypatch.setattr(waterdrum, "generate", lambda model, tok, prompts, *a, **k: [[r] for r in retained[:len(prompts)]])
    swapped = WaterDrum().extra_scores(None, None, bench, target)["waterdrum_forget"]
    assert abs(swapped) < own["waterdrum_forget"] / 2  # four answers each: far apart, not at 0 and 1


def test_lm_eval_round_trip():
    assert_lm_eval_round_trip(WaterDrum)
