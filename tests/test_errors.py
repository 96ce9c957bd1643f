"""Every entry of docs/errors.md: bad input gets one line and exit 2 before any model loads;
faults (full disk, diverged edits, corrupt caches, broken plugins) lose and fake nothing."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import torch

from r2f_bench.cli import main
from r2f_bench.errors import UserError
from r2f_bench.tasks.rwku import SAMPLE_DIR

RUN = ["--method", "r2f", "--task", "rwku"]


@pytest.fixture
def rwku_copy(tmp_path: Path) -> Path:
    root = tmp_path / "rwku"
    shutil.copytree(SAMPLE_DIR, root)
    return root


def first_target(root: Path) -> Path:
    return root / "Target" / "1_Orla_Vantree"


def _write(path: Path, data) -> None:
    path.write_text(json.dumps(data))


# (id, extra argv given the tmp dir and an RWKU copy, the exact message after "error: ")
CASES = [
    ("nan step", lambda t, r: ["--set", "step=nan"], "parameter 'step' of method 'r2f' must be a finite number, got 'nan'."),
    ("empty list parameter (an IndexError once the model was built)", lambda t, r: ["--method", "eco", "--set", "sigmas=,"],
     "parameter 'sigmas' of method 'eco' must be one or more values, all > 0, got ','."),
    ("nan in a list parameter (ECO then changed no weight)", lambda t, r: ["--method", "eco", "--set", "sigmas=1,nan"],
     "parameter 'sigmas' of method 'eco' must be finite numbers, got '1,nan'."),
    ("a negative noise strength", lambda t, r: ["--method", "eco", "--set", "sigmas=0.5,-1"],
     "parameter 'sigmas' of method 'eco' must be one or more values, all > 0, got '0.5,-1'."),
    ("R2F without a dev split (refused once the models were built)", lambda t, r: ["--dev-targets", "0"],
     "R2F fits its decoder on the dev split's facts; use --dev-targets ≥ 1 or --set decoder_path=FILE."),
    ("ECO without a dev split", lambda t, r: ["--method", "eco", "--dev-targets", "0", "--set", "threshold=0.5"],
     "eco fits its sigma on the dev split; use --dev-targets ≥ 1 or --set sigma=S."),
    ("unknown attack", lambda t, r: ["--attacks", "rap,quantise:nf4"],
     "unknown attack 'quantise'; choose one of: fewshot, leak_at_k, prompt, quantize, rap, relearn_related, "
     "relearn_unrelated (see `r2f-bench attacks`)."),
    ("bad attack value", lambda t, r: ["--attacks", "quantize:fp8"],
     "parameter 'format' of attack 'quantize' must be one of nf4, int8, got 'fp8'."),
    ("a value for an attack that takes none", lambda t, r: ["--attacks", "rap:3"],
     "attack 'rap' takes no value; write rap in --attacks, not rap:3."),
    ("huge step", lambda t, r: ["--set", "step=1e30"], "parameter 'step' of method 'r2f' must be in (0, 1], got '1e30'."),
    ("negative step", lambda t, r: ["--set", "step=-1"], "parameter 'step' of method 'r2f' must be in (0, 1], got '-1'."),
    ("infinite step", lambda t, r: ["--set", "step=inf"], "parameter 'step' of method 'r2f' must be a finite number, got 'inf'."),
    ("unknown loss", lambda t, r: ["--set", "loss=bogus"],
     "parameter 'loss' of method 'r2f' must be one of ascent, unlikelihood, got 'bogus'."),
    ("unknown decoder", lambda t, r: ["--set", "decoder=bogus"],
     "parameter 'decoder' of method 'r2f' must be one of two_sided, projection, learned, got 'bogus'."),
    ("negative fit examples", lambda t, r: ["--set", "fit_examples=-5"],
     "parameter 'fit_examples' of method 'r2f' must be >= 1, got '-5'."),
    ("negative rank", lambda t, r: ["--set", "rank=-3"], "parameter 'rank' of method 'r2f' must be >= 1, got '-3'."),
    ("word for a number", lambda t, r: ["--set", "rank=eight"], "parameter 'rank' of method 'r2f' expects a int, got 'eight'."),
    ("no views", lambda t, r: ["--views", "0"], "--views must be at least 1, got 0."),
    ("zero threads", lambda t, r: ["--threads", "0"], "--threads must be at least 1, got 0."),
    ("negative dev targets", lambda t, r: ["--dev-targets", "-1"], "--dev-targets must be at least 0, got -1."),
    ("negative retain items", lambda t, r: ["--retain-items", "-1"], "--retain-items must be at least 0, got -1."),
    ("zero limit", lambda t, r: ["--limit", "0"], "--limit must be at least 1, got 0."),
    ("RAP's learning rate not a number", lambda t, r: ["--rap-lr", "nan"], "--rap-lr must be a finite number, got nan."),
    ("negative RAP learning rate", lambda t, r: ["--rap-lr", "-1"], "--rap-lr must be at least 1e-08, got -1.0."),
    ("RAP learning rate that destroys", lambda t, r: ["--rap-lr", "1e30"], "--rap-lr must be at most 1.0, got 1e+30."),
    ("unknown forget source", lambda t, r: ["--forget-source", "wiki"],
     "task 'rwku' has no forget source 'wiki'; choices: corpus, probes."),
    ("unknown paraphraser", lambda t, r: ["--paraphraser", "magic"],
     "unknown paraphraser 'magic'; use templates, benchmark, self or hf:<model name or path>."),
    ("output is a file", lambda t, r: ["--output", str(_file(t))], "--output {t}/file is a file; pass a directory."),
    ("save-model under a file", lambda t, r: ["--save-model", str(_file(t) / "models")],
     "cannot write to --save-model {t}/file/models (Not a directory); choose a writable directory."),
    ("data dir is a file", lambda t, r: ["--data-dir", str(_file(t))],
     "data dir {t}/file is a file; pass --data-dir pointing at RWKU's folder (the one holding Target/)."),
    ("data dir missing", lambda t, r: ["--data-dir", str(t / "nope")],
     "data dir {t}/nope does not exist; pass --data-dir pointing at RWKU's folder (the one holding Target/)."),
    ("forget file holds one object", lambda t, r: _corrupt(r, "forget_level1.json", {"query": "q", "answer": "a"}),
     "malformed data file {r}/Target/1_Orla_Vantree/forget_level1.json: expected a JSON array of rows, got a JSON dict; restore the original file."),
    ("intro file holds one object", lambda t, r: _corrupt(r, "intro.json", {"target": "Orla Vantree"}),
     "malformed data file {r}/Target/1_Orla_Vantree/intro.json: expected a JSON array of rows, got a JSON dict; restore the original file."),
    ("null query", lambda t, r: _corrupt(r, "forget_level2.json", [{"query": None, "answer": "a"}]),
     "malformed data file {r}/Target/1_Orla_Vantree/forget_level2.json: row 0 field 'query' is null; restore the original file."),
    ("row is not an object", lambda t, r: _corrupt(r, "neighbor_level1.json", ["just text"]),
     "malformed data file {r}/Target/1_Orla_Vantree/neighbor_level1.json: row 0 is a str, expected an object; restore the original file."),
    ("truncated JSON", lambda t, r: _corrupt(r, "forget_level3.json", None),
     "malformed data file {r}/Target/1_Orla_Vantree/forget_level3.json: Expecting property name enclosed in double quotes: line 1 column 3 (char 2); restore the original file."),
    ("a folder named like a data file", lambda t, r: _odd(r, "x.json", lambda p: p.mkdir()),
     "data file {r}/Target/1_Orla_Vantree/x.json is not a regular file (a folder, a pipe or a broken link); remove it or put the JSON file there."),
    ("a pipe named like a data file (read, it would hang)", lambda t, r: _odd(r, "pipe.json", lambda p: os.mkfifo(p)),
     "data file {r}/Target/1_Orla_Vantree/pipe.json is not a regular file (a folder, a pipe or a broken link); remove it or put the JSON file there."),
    ("a link to itself named like a data file", lambda t, r: _odd(r, "loop.json", lambda p: os.symlink(p.name, p)),
     "data file {r}/Target/1_Orla_Vantree/loop.json is not a regular file (a folder, a pipe or a broken link); remove it or put the JSON file there."),
    ("TriviaQA answers given as a string", lambda t, r: _trivia_answers_as_text(r),
     "{r}/Target/1_Orla_Vantree/triviaqa.json: 'answers' of 'Q' is a str, not a list of strings; write it as RWKU does, e.g. \"answers\": [\"Paris\"]."),
    ("a query that is a number", lambda t, r: _corrupt(r, "forget_level2.json", [{"query": 7, "answer": "a"}]),
     "malformed data file {r}/Target/1_Orla_Vantree/forget_level2.json: row 0 field 'query' is 7, expected text; restore the original file."),
    ("an answer that is a list (it read as \"['a', 'b']\")",
     lambda t, r: _corrupt(r, "forget_level1.json", [{"query": "q ___", "answer": ["a", "b"]}]),
     "malformed data file {r}/Target/1_Orla_Vantree/forget_level1.json: row 0 field 'answer' is [\"a\", \"b\"], expected text; restore the original file."),
    ("an answer that is NaN (it read as 'nan')",
     lambda t, r: _corrupt(r, "neighbor_level2.json", [{"query": "q", "answer": float("nan")}]),
     "malformed data file {r}/Target/1_Orla_Vantree/neighbor_level2.json: row 0 field 'answer' is NaN, expected text; restore the original file."),
    ("a passage text that is an object", lambda t, r: _corrupt(r, "passage.json", [{"text": {"a": 1}}]),
     "malformed data file {r}/Target/1_Orla_Vantree/passage.json: row 0 field 'text' is {{\"a\": 1}}, expected text; restore the original file."),
    ("a retain_mia text that is a number", lambda t, r: _corrupt(r, "retain_mia.json", [{"text": 5}]),
     "malformed data file {r}/Target/1_Orla_Vantree/retain_mia.json: row 0 field 'text' is 5, expected text; restore the original file."),
    ("JSON nested 200,000 deep", lambda t, r: _raw(r, "forget_level3.json", "[" * 200_000 + "]" * 200_000),
     "malformed data file {r}/Target/1_Orla_Vantree/forget_level3.json: nested too deeply to read; restore the original file."),
    ("more dev targets than the data holds (it advised --limit 1 with --limit 1 given)",
     lambda t, r: ["--data-dir", str(r), "--limit", "1", "--dev-targets", "1000"],
     "--dev-targets 1000 leaves no evaluation target (rwku data here holds 5 targets); pass --dev-targets 4 or less."),
    ("a short id two targets share (it picked the last)", lambda t, r: _twin(r),
     "RWKU target '1' names 2 targets (1_Orla_Vantree, 1_Orla_Vantree_dup); pass one of them by its full id."),
    ("an embedded model of no width", lambda t, r: ["--model", "embedded:mistral-h0-l0"],
     "bad embedded model spec 'embedded:mistral-h0-l0': hidden must be at least 16 and a multiple of 4, layers at least 1; e.g. embedded:mistral-h64-l2."),
    ("the cache's models folder is a file (it failed only after teaching)", lambda t, r: _cache_with_file(t, "models"),
     "the cache's models folder {t}/cache/models is a file; pass a directory."),
    ("empty --output", lambda t, r: ["--output", ""], "--output is empty; pass the results directory, e.g. --output r2f-output."),
    ("teaching schedule for an embedded model", lambda t, r: ["--teach-epochs", "20"],
     "--teach-epochs, --teach-lr and --teach-threads set how a pretrained model (--model NAME, DIR or FILE.gguf) is "
     "taught a knowledge world; the embedded models keep their own schedule: drop them."),
    ("teaching threads for an embedded model", lambda t, r: ["--teach-threads", "2"],
     "--teach-epochs, --teach-lr and --teach-threads set how a pretrained model (--model NAME, DIR or FILE.gguf) is "
     "taught a knowledge world; the embedded models keep their own schedule: drop them."),
    ("teaching schedule on a benchmark's own data (it ran, under another store key)",
     lambda t, r: ["--model", str(t), "--data-dir", str(r), "--targets", "1", "--teach-lr", "1e-4"],
     "--teach-epochs, --teach-lr and --teach-threads set how a pretrained model is taught a knowledge world, and "
     "this run's data is a benchmark's own, which no model is taught: drop them."),
    ("a relearning budget with no relearning attack (it ran, under another store key)",
     lambda t, r: ["--attacks", "quantize:int8", "--rap-lr", "1e-4"],
     "--rap-steps and --rap-lr set the relearning attacks' budget, and --attacks quantize:int8 runs none; drop them."),
    ("a relearning rate with no relearning steps", lambda t, r: ["--rap-steps", "0", "--rap-lr", "1e-4"],
     "--rap-lr sets the relearning attacks' rate, and --rap-steps 0 runs no relearning; drop one of them."),
    ("a paraphraser with one view (it loaded the paraphraser and asked it nothing)",
     lambda t, r: ["--views", "1", "--paraphraser", "templates"],
     "--paraphraser templates, but with --views 1 each fact is asked as it is and nothing is paraphrased; drop it, "
     "or pass --views 2 or more."),
    ("views for a method that reads none (it ran, under another store key)",
     lambda t, r: ["--method", "grad_ascent", "--views", "3", "--attacks", "none"],
     "--views 3: method 'grad_ascent' does not read the request's paraphrased views with these settings "
     "(`r2f-bench methods` says what each reads); drop it."),
    ("a paraphraser for a method that reads no views", lambda t, r: ["--method", "fullgrad", "--paraphraser",
                                                                       "templates", "--attacks", "quantize:int8"],
     "--paraphraser templates: method 'fullgrad' does not read the request's paraphrased views with these settings "
     "(`r2f-bench methods` says what each reads); drop it."),
    ("retain items for plain NPO (no retain term)", lambda t, r: ["--method", "npo", "--retain-items", "8"],
     "--retain-items 8: method 'npo' does not read the request's retain items with these settings "
     "(`r2f-bench methods` says what each reads); drop it."),
    ("layers for a method that edits none (ECO wraps the model)",
     lambda t, r: ["--method", "eco", "--target-modules", "q_proj,v_proj"],
     "--target-modules q_proj,v_proj: method 'eco' does not read the linear layers to adapt or step with these "
     "settings (`r2f-bench methods` says what each reads); drop it."),
    ("no chat template for an embedded model (it ran as auto, under another store key)",
     lambda t, r: ["--chat-template", "off"],
     "--chat-template off, but the embedded models have no chat template; drop it, or pass --model with an "
     "instruct model."),
    ("sequential deletions of one target", lambda t, r: ["--limit", "1", "--sequential"],
     "--sequential applies the targets' deletions one after another, and this run has one target; pass two or more "
     "(--targets or --limit), or drop it."),
    ("model path missing", lambda t, r: ["--model", "./no-such-model"],
     "model path ./no-such-model does not exist; pass a local directory with safetensors weights, or a hub name such as mistralai/Mistral-7B-v0.1."),
    ("unknown method", lambda t, r: ["--method", "nope"], None),
    ("empty --data-dir (it ran the bundled world)", lambda t, r: ["--data-dir", ""],
     "--data-dir is empty (an unset shell variable?); give it a value, or leave it out for its default."),
    ("empty --targets (it ran the first three)", lambda t, r: ["--data-dir", str(r), "--targets", " "],
     "--targets is empty (an unset shell variable?); give it a value, or leave it out for its default."),
    ("--targets of commas only (it ran the first three)", lambda t, r: ["--data-dir", str(r), "--targets", ","],
     "--targets is empty (an unset shell variable?); give it a value, or leave it out for its default."),
    ("a first-layers proxy as deep as the model (it failed once the model was built twice)",
     lambda t, r: ["--proxy", "first-layers:2"], "--proxy first-layers:2: embedded has 2 decoder layers; keep between 1 "
                                                 "and 1."),
    ("a chat template for an embedded model (it failed once the model was built)",
     lambda t, r: ["--chat-template", "on"],
     "--chat-template on, but the embedded models have no chat template; drop it, or pass --model with an "
     "instruct model."),
]


def _file(tmp: Path) -> Path:
    path = tmp / "file"
    path.write_text("not a directory")
    return path


def _odd(root: Path, name: str, make) -> list[str]:
    make(first_target(root) / name)
    return ["--data-dir", str(root), "--targets", "1"]


def _trivia_answers_as_text(root: Path) -> list[str]:
    _write(first_target(root) / "triviaqa.json", [{"question": "Q", "answers": "Paris"}])
    return ["--data-dir", str(root), "--targets", "1"]


def _cache_with_file(tmp: Path, kind: str) -> list[str]:
    (tmp / "cache").mkdir()
    (tmp / "cache" / kind).write_text("not a folder")
    os.environ["R2F_BENCH_CACHE"] = str(tmp / "cache")  # the test puts it back
    return []


def _twin(root: Path) -> list[str]:
    shutil.copytree(first_target(root), first_target(root).with_name("1_Orla_Vantree_dup"))
    return ["--data-dir", str(root), "--targets", "1"]


def _raw(root: Path, name: str, text: str) -> list[str]:
    (first_target(root) / name).write_text(text)
    return ["--data-dir", str(root), "--targets", "1"]


def _corrupt(root: Path, name: str, data) -> list[str]:
    path = first_target(root) / name
    if data is None:
        path.write_text("[{")
    else:
        _write(path, data)
    return ["--data-dir", str(root), "--targets", "1"]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(case, tmp_path, rwku_copy, capsys, monkeypatch):
    _, argv, message = case
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("R2F_BENCH_CACHE", os.environ["R2F_BENCH_CACHE"])  # put back after a case that moves it
    assert main(RUN + ["--output", str(tmp_path / "out"), *argv(tmp_path, rwku_copy)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    if message is not None:
        assert err[0] == "error: " + message.format(t=tmp_path, r=rwku_copy)


def test_corrupt_model_weights_under_model_are_one_line(tmp_path, capsys):
    from r2f_bench.engine.embedded import build_tokenizer, EmbeddedSpec, new_embedded_model

    tok = build_tokenizer(["a small text to train a tokenizer on"] * 4)
    model = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l1"), tok)
    model.save_pretrained(tmp_path / "m", safe_serialization=True)
    tok.save_pretrained(tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    capsys.readouterr()
    assert main(RUN + ["--model", str(tmp_path / "m"), "--output", str(tmp_path / "out")]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("error")]
    assert len(err) == 1 and re.match(rf"error: cannot load model '{re.escape(str(tmp_path / 'm'))}' \(\w+: .*\); "
                                      r"pass a causal LM as a local directory", err[0])


def test_full_disk_export_leaves_the_old_file(tmp_path, monkeypatch):
    """A short write (the disk filled up) leaves results.jsonl exactly as it was, no temporary
    file behind, and says so in one line."""
    from r2f_bench import atomic
    from r2f_bench.results.store import Store

    store = Store(tmp_path)
    store.put("a" * 64, {"target": "1"})
    before = store.export().read_bytes()
    store.put("b" * 64, {"target": "2", "usr": 50.0})
    real_write, calls = os.write, []

    def fills_up(fd, data):  # the first write lands 7 bytes, the next finds the disk full
        calls.append(fd)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, bytes(data[:7]))

    monkeypatch.setattr(atomic.os, "write", fills_up)
    with pytest.raises(UserError, match=r"^disk full while writing .*results.jsonl; free space"):
        store.export()
    assert store.export_path.read_bytes() == before and before.count(b"\n") == 1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_strict_json_never_writes_nan(tmp_path):
    from r2f_bench.jsontext import canonical_json, json_safe
    from r2f_bench.results.store import Store

    assert json_safe({"identity_alignment": float("nan"), "usr": [1.0, float("inf")]}) == \
        {"identity_alignment": None, "usr": [1.0, None]}
    with pytest.raises(ValueError):
        canonical_json({"identity_alignment": float("nan")})
    stored = Store(tmp_path).put("ab" * 32, {"identity_alignment": float("nan"), "usr": 5.0})
    assert stored["identity_alignment"] is None and "NaN" not in (tmp_path / "jobs" / f"{'ab' * 32}.json").read_text()


def test_broken_plugin_hook_is_skipped_with_one_warning():
    from r2f_bench import hookimpl
    from r2f_bench.plugins import registry

    class Broken:
        @hookimpl
        def register_unlearners(self, register):
            raise RuntimeError("boom")

    reg = registry()
    reg.register(Broken(), "broken-plugin", "broken-dist", "0.1")
    try:
        with pytest.warns(UserWarning, match=r"plugin 'broken-plugin' \(distribution broken-dist\) failed in register_unlearners"):
            assert "r2f" in [i.name for i in reg.listing("method")]
    finally:
        reg.unregister("broken-plugin")


def test_empty_forget_set_skips_that_target_only(rwku_copy, tmp_path):
    from r2f_bench.engine.config import RunConfig
    from r2f_bench.engine.run import Run

    _write(first_target(rwku_copy) / "forget_level1.json", [])
    said = []
    run = Run(RunConfig(method="fullgrad", task="rwku", data_dir=str(rwku_copy), forget_source="probes",
                        output=str(tmp_path)), progress=said.append)
    assert [t.id for t in run.targets] == ["2_Bram_Ostelic", "3_Tamsin_Quorve"]
    assert any(line.startswith("warning: skipping target 1_Orla_Vantree") for line in said)


def test_second_claim_on_a_job_is_refused_and_a_dead_holder_is_taken_over(tmp_path):
    import socket

    from r2f_bench.results.store import LOCKS_DIR, Store

    store, key = Store(tmp_path), "cd" * 32
    with store.claim(key) as first:
        with store.claim(key) as second:
            assert first and not second
    assert not (tmp_path / LOCKS_DIR / f"{key}.lock").exists()
    (tmp_path / LOCKS_DIR / f"{key}.lock").write_text(f"{socket.gethostname()} 999999999")
    with store.claim(key) as third:
        assert third


def test_table_skips_invalid_records_and_writes_every_format(tmp_path, capsys):
    from records import record, stored

    good = [record("r2f", "rwku", 0, t, 80.0, 95.0, 20.0, 0.9, 1.0) for t in ("t1", "t2")]
    stored(good + [{**record("r2f", "rwku", 0, "t3", 1.0, 1.0, 1.0, 0.9, 1.0), "usr": "high"}], tmp_path)
    partial = tmp_path / "jobs" / f"{'ef' * 32}.json"
    partial.write_text(json.dumps({"method": "r2f"}))
    assert main(["table", "--output", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "2 records in the tables; 2 skipped" in out
    assert "metric 'usr' is 'high', not a number" in err and "field 'task' missing" in err
    assert {p.name for p in (tmp_path / "tables").iterdir()} >= {"tables.md", "tables.tex", "tables.html", "table1.csv"}


def test_plot_skips_invalid_records_and_counts_a_cell_once(tmp_path, capsys):
    """``plot`` reads a store as ``table`` does (before: a malformed record was a traceback,
    and two records of one (target, seed) cell, from two code versions, both counted)."""
    from records import record, stored

    rows = [record("r2f", "rwku", 0, t, usr, 95.0, 20.0, 0.9, 1.0, params={"rank": str(rank)})
            for t, usr in (("t1", 60.0), ("t2", 80.0)) for rank in (4, 8)]
    older = {**rows[0], "versions": {"r2f-bench": "0.0.9", "torch": "2.13.0"}, "usr": 0.0}
    stored(rows + [older, {**rows[1], "target": "t3", "usr": "high"}], tmp_path)
    assert main(["plot", "--output", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "metric 'usr' is 'high', not a number" in err and "warning: skipped record" in err
    assert "1 records set aside" in err and (tmp_path / "plots" / "rank.png").exists()


def test_corrupt_cached_model_is_set_aside_and_rebuilt(tmp_path, monkeypatch):
    from r2f_bench.engine.embedded import EmbeddedSpec
    from r2f_bench.engine.models import embedded_model
    from r2f_bench.tasks.rwku import RWKU

    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path))
    facts = RWKU().load(SAMPLE_DIR, None, 1, 0).targets[0].probes["forget_qa"][:3]
    spec = EmbeddedSpec.parse("embedded:mistral-h32-l1")
    _, _, info = embedded_model(spec, facts, [], progress=lambda m: None, max_epochs=2)
    (entry,) = (tmp_path / "models").iterdir()
    (entry / "model.safetensors").write_bytes(b"truncated")
    said = []
    model, _, again = embedded_model(spec, facts, [], progress=said.append, max_epochs=2)
    assert again["key"] == info["key"] and any("could not be loaded" in line for line in said)
    assert len(list((tmp_path / "models").glob("*.corrupt-*"))) == 1
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_cached_model_missing_tensors_is_set_aside_and_rebuilt(tmp_path, monkeypatch):
    """A cache entry whose weights lack a layer's tensors loads in transformers (the layer
    initialised at random); it must be set aside and taught again, never trusted."""
    from safetensors.torch import load_file, save_file

    from r2f_bench.engine.embedded import EmbeddedSpec

    from r2f_bench.engine.models import embedded_model
    from r2f_bench.tasks.rwku import RWKU

    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path))
    facts = RWKU().load(SAMPLE_DIR, None, 1, 0).targets[0].probes["forget_qa"][:3]
    spec = EmbeddedSpec.parse("embedded:mistral-h32-l2")
    taught, _, info = embedded_model(spec, facts, [], progress=lambda m: None, max_epochs=2)
    (entry,) = (tmp_path / "models").iterdir()
    weights = load_file(entry / "model.safetensors")
    save_file({k: v for k, v in weights.items() if ".layers.1." not in k}, entry / "model.safetensors",
              metadata={"format": "pt"})
    said = []
    model, _, again = embedded_model(spec, facts, [], progress=said.append, max_epochs=2)
    assert any("could not be loaded" in line and "lack or misshape" in line for line in said), said
    assert len(list((tmp_path / "models").glob("*.corrupt-*"))) == 1
    theirs = dict(model.named_parameters())
    assert all(torch.equal(p, theirs[n]) for n, p in taught.named_parameters())  # taught again, the same model


def test_corrupt_cached_decoder_is_refitted(tiny, context):
    from r2f_bench.plugins import registry

    cls = registry().method("r2f")
    cls(cls.parse_params({"fit_examples": "4"})).setup(tiny["model"], context)
    (path,) = (context.cache_dir / "decoders").glob("*.safetensors")
    path.write_bytes(b"not a decoder")
    said = []
    import dataclasses

    method = cls(cls.parse_params({"fit_examples": "4"}))
    method.setup(tiny["model"], dataclasses.replace(context, progress=said.append))
    assert any("could not be loaded" in line for line in said) and method.decoder.roles


def test_a_nan_buffer_is_a_diverged_record_and_is_put_back(tmp_path):
    """A method that breaks a buffer no state dict holds (the rotary frequencies) destroys
    the model as surely as a NaN weight: a diverged record, never USR 100, and the buffer
    is put back before the next target is evaluated."""
    from r2f_bench import hookimpl
    from r2f_bench.plugins import registry
    from r2f_bench.engine.config import RunConfig
    from r2f_bench.engine.run import Run
    from r2f_bench.unlearner import Edit, Unlearner

    class BreakRotary(Unlearner):
        name = "break_rotary"

        def unlearn(self, model, request, ctx):
            with torch.no_grad():
                for name, b in model.named_buffers():
                    if "inv_freq" in name:
                        b.fill_(float("nan"))
            return Edit(model)

    class Plugin:
        @hookimpl
        def register_unlearners(self, register):
            register(BreakRotary)

    reg = registry()
    reg.register(Plugin(), "break-rotary-plugin")
    try:
        run = Run(RunConfig(method="break_rotary", task="rwku", limit=1, output=str(tmp_path), views=3),
                  progress=lambda m: None)
        run.prepare()
        buffers = {k: v.clone() for k, v in run.model.named_buffers()}
        assert any("inv_freq" in k for k in buffers)
        rec = run.run_target(run.targets[0])
    finally:
        reg.unregister("break-rotary-plugin")
    assert rec["status"] == "diverged" and rec["usr"] is None
    assert all(torch.equal(buffers[k], b) for k, b in run.model.named_buffers())


def test_nan_edit_is_a_diverged_record_never_perfect_forgetting(tmp_path):
    """A method that destroys the model is recorded as failed (metrics null, strict JSON) and
    left out of tables with a count; the run's work folders are gone afterwards."""
    from records import record as table_record

    from r2f_bench import hookimpl
    from r2f_bench.plugins import registry
    from r2f_bench.engine.config import RunConfig
    from r2f_bench.engine.run import Run
    from r2f_bench.results.leaderboard import build_tables
    from r2f_bench.unlearner import Edit, Unlearner

    class Explode(Unlearner):
        name = "explode"

        def unlearn(self, model, request, ctx):
            with torch.no_grad():
                next(model.parameters()).fill_(float("nan"))
            return Edit(model)

    class Plugin:
        @hookimpl
        def register_unlearners(self, register):
            register(Explode)

    reg = registry()
    reg.register(Plugin(), "explode-plugin")
    said: list[str] = []
    try:
        run = Run(RunConfig(method="explode", task="rwku", limit=1, output=str(tmp_path), views=3,
                            model="embedded:mistral-h64-l2", proxy="embedded:mistral-h32-l2"), progress=said.append)
        rec = run.run_target(run.targets[0])
        # a corrupt cached evaluation of the untouched model is set aside and recomputed
        before = run.evaluator.untouched(run.targets[0])
        run.evaluator.untouched_paths(run.targets[0])["forget_qa"].write_text('[{"score": ')
        assert run.evaluator.untouched(run.targets[0]) == before
        assert any("could not be loaded (JSONDecodeError)" in line for line in said)
    finally:
        reg.unregister("explode-plugin")
    assert rec["status"] == "diverged" and all(rec[m] is None for m in ("usr", "gur", "rap", "identity_alignment"))
    assert list(rec["phases"]) == ["untouched", "unlearn", "attacks", "restore"]  # the phases that ran (attacks: the controls)
    json.dumps(rec, allow_nan=False)
    assert not list(tmp_path.glob(".work-*"))
    ok = table_record("r2f", "rwku", 0, "t1", 80.0, 95.0, 20.0, 0.9, 1.0)
    table1 = build_tables([ok, {**rec, "config": ok["config"]}])[0]
    assert [label for label, _ in table1.rows] == ["r2f"] and "Excluded: 1 diverged deletions" in table1.note


def test_cache_info_and_clear(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path))
    (tmp_path / "models" / "embedded-x").mkdir(parents=True)
    (tmp_path / "models" / "embedded-x" / "model.safetensors").write_bytes(b"0" * 2_000_000)
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "rwku-1.json").write_text("{}")
    (tmp_path / "evals" / "rwku-2.json.corrupt-1").write_text("{")
    from safetensors.torch import save_file  # a world teaching's saved state, and one cut off mid-write

    save_file({"rng": torch.zeros(3_000_000)}, str(tmp_path / "models" / "taught-abc.partial.safetensors"),
              metadata={"key": "abc", "step": "249"})
    (tmp_path / "models" / "taught-def.partial.safetensors").write_bytes(b"\xff" * 16)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"models\s+1 entries\s+2\.0 MB", out) and re.search(r"evals\s+1 entries", out)
    assert re.search(r"teachings under way\s+2 entries\s+12\.0 MB", out)  # before: counted as models
    assert re.search(r"taught-abc: saved after step 249, 0\.0 h ago \(the same command goes on from it", out)
    assert "taught-def: unreadable (set aside when its teaching runs again)" in out
    assert re.search(r"set aside as corrupt\s+1 entries", out)
    assert main(["cache", "clear"]) == 0
    assert "removed 5 cache entries" in capsys.readouterr().out
    assert not list(tmp_path.glob("*/*"))


def test_cache_clear_removes_a_linked_entry_not_what_it_points_at(tmp_path, monkeypatch, capsys):
    """An entry that is a link to a folder elsewhere: the link goes, the folder stays (it said
    'cannot remove None' and removed nothing)."""
    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path / "cache"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    (tmp_path / "cache" / "models").mkdir(parents=True)
    (tmp_path / "cache" / "models" / "embedded-linked").symlink_to(elsewhere, target_is_directory=True)
    assert main(["cache", "clear"]) == 0
    assert "removed 1 cache entries" in capsys.readouterr().out
    assert not list((tmp_path / "cache" / "models").iterdir()) and (elsewhere / "keep.txt").read_text() == "mine"


def test_cpu_threads_follow_the_option_the_environment_the_load_and_the_process_count(monkeypatch):
    from r2f_bench.engine.distributed import cpu_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    assert cpu_threads(3, 1, load=8.0) == 3
    assert cpu_threads(None, 1, load=0.0) == 8 and cpu_threads(None, 16, load=0.0) == 1
    assert cpu_threads(None, 1, load=2.7) == 5  # three cores busy elsewhere
    assert cpu_threads(None, 2, load=2.0) == 3 and cpu_threads(None, 1, load=12.0) == 1
    monkeypatch.setattr(os, "getloadavg", lambda: (6.2, 1.0, 1.0))
    assert cpu_threads(None, 1) == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_threads(None, 1, load=0.0) == 1


def test_cache_build_checks_the_cache_before_teaching(tmp_path, capsys, monkeypatch):
    """Before: a models folder that is a file failed only after the recipe was taught."""
    from r2f_bench.engine import demo_rebuild

    monkeypatch.setattr(demo_rebuild, "rebuild", lambda *a, **k: pytest.fail("taught"))
    monkeypatch.setenv("R2F_BENCH_CACHE", os.environ["R2F_BENCH_CACHE"])  # put back after the next line moves it
    _cache_with_file(tmp_path, "models")
    assert main(["cache", "build"]) == 2
    assert capsys.readouterr().err.strip() == f"error: the cache's models folder {tmp_path}/cache/models is a file; pass a directory."
