"""The command line: a real end-to-end run, listings, and one-line errors for bad input."""

from __future__ import annotations

import json
import shutil

import pytest

from r2f_bench.cli import main

TINY = ["--model", "embedded:mistral-h64-l2", "--proxy", "embedded:mistral-h32-l2", "--views", "3"]


def test_end_to_end_run_writes_the_store_that_table_reads(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--method", "r2f", "--task", "rwku", "--limit", "1", "--output", str(out), "--threads", "1", *TINY]
    assert main(argv) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 1 and len(list((out / "jobs").glob("*.json"))) == 1
    r = records[0]
    for key in ("method", "task", "target", "seed", "usr", "gur", "rap", "rap_control", "mia", "seconds",
                "peak_mem_mb", "grad_cosine", "official", "config", "versions", "views", "models", "data_revision"):
        assert key in r, key
    assert r["official"]["before"]["forget_fb"] > 50  # percent: the embedded model was taught the facts
    assert "embedded demo model" in r["models"]["target"]
    assert r["versions"]["method:r2f"].startswith("r2f-bench==")
    assert len(r["views"]) == 3 and r["threads"] == 1
    printed = capsys.readouterr().out
    assert "usr" in printed and "USR (%):" in printed and "MIA (cosine):" in printed  # the legend
    # the same run again replaces its record; the table reads the plain run's store
    assert main(argv) == 0
    assert len((out / "results.jsonl").read_text().splitlines()) == 1 and len(list((out / "jobs").iterdir())) == 1
    assert not [p for p in out.iterdir() if p.name.startswith(".work")]  # work folders removed
    assert main(["table", "--output", str(out)]) == 0
    assert "1 records in the tables" in capsys.readouterr().out


def test_the_demo_model_does_not_depend_on_limit_or_targets():
    """Every subset of the data teaches the same facts, so shares one cached model."""
    from r2f_bench.runner import Run, RunConfig

    knows = lambda **kw: Run(RunConfig(method="fullgrad", task="rwku", **kw), progress=lambda m: None).knowledge()
    facts, prompts = knows(limit=1)
    assert (facts, prompts) == knows(targets=["3"], dev_targets=0) == knows(limit=2, forget_source="probes")
    assert {p.target for p in facts if p.target} == {f"{i}_{n}" for i, n in enumerate(
        ["Orla_Vantree", "Bram_Ostelic", "Tamsin_Quorve", "Caddo_Renwyck", "Liesel_Draymoor"], 1)}


def test_listings_json(capsys):
    assert main(["methods", "--json"]) == 0
    methods = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert {"r2f", "fullgrad"} <= set(methods)
    assert any(p["name"] == "rank" for p in methods["r2f"]["params"])
    assert main(["tasks", "--json"]) == 0
    tasks = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert "rwku_forget_fb" in tasks["rwku"]["lm_eval_tasks"]


def _bad(args, capsys, pattern):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    assert pattern in err, err


def test_unknown_method(capsys):
    _bad(["--method", "nope", "--task", "rwku"], capsys, "unknown method 'nope'")


def test_unknown_task(capsys):
    _bad(["--method", "r2f", "--task", "nope"], capsys, "unknown task 'nope'")


def test_missing_data_dir(capsys, tmp_path):
    _bad(["--method", "r2f", "--task", "rwku", "--data-dir", str(tmp_path / "absent"), "--output", str(tmp_path)],
         capsys, "does not exist")



def test_unreachable_hub_dataset(capsys, tmp_path, monkeypatch):
    """``--data-dir hf:...`` without the hub: one line that names the dataset and the fix."""
    import huggingface_hub

    def offline(**kwargs):
        raise huggingface_hub.errors.LocalEntryNotFoundError("no connection")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    _bad(["--method", "r2f", "--task", "rwku", "--data-dir", "hf:jinzhuoran/RWKU", "--output", str(tmp_path)],
         capsys, "cannot fetch dataset 'jinzhuoran/RWKU'")

def test_malformed_data_file(capsys, tmp_path):
    from r2f_bench.tasks.rwku import SAMPLE_DIR

    data = tmp_path / "rwku"
    shutil.copytree(SAMPLE_DIR, data)
    (data / "Target" / "1_Orla_Vantree" / "forget_level1.json").write_text("{oops")
    _bad(["--method", "r2f", "--task", "rwku", "--data-dir", str(data), "--output", str(tmp_path)], capsys,
         "malformed data file")


def test_limit_zero(capsys, tmp_path):
    _bad(["--method", "r2f", "--task", "rwku", "--limit", "0", "--output", str(tmp_path)], capsys,
         "--limit must be at least 1")


def test_unwritable_output(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    _bad(["--method", "r2f", "--task", "rwku", "--output", str(blocker / "out")], capsys, "cannot write")


def test_bad_param(capsys, tmp_path):
    _bad(["--method", "r2f", "--task", "rwku", "--set", "rank", "--output", str(tmp_path)], capsys,
         "--set expects name=value")


def test_closed_pipe_exits_quietly():
    """`r2f-bench methods | head -1`: the reader is gone; no traceback reaches the user."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to the pipe now fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "r2f_bench", "methods"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
