"""The command line: a real end-to-end run, listings, and one-line errors for bad input."""

from __future__ import annotations

import json
import shutil

import pytest

from r2f_bench.cli import main
from r2f_bench.tasks.rwku import SAMPLE_DIR

# the string sample (five fictional people, taught verbatim): fast, and the mechanics are the same
TINY = ["--model", "embedded:mistral-h64-l2", "--proxy", "embedded:mistral-h32-l2", "--views", "3",
        "--data-dir", str(SAMPLE_DIR)]


def test_end_to_end_run_writes_the_store_that_table_reads(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--method", "r2f", "--task", "rwku", "--limit", "1", "--output", str(out), "--threads", "1", *TINY]
    assert main(argv) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 1 and len(list((out / "jobs").glob("*.json"))) == 1
    r = records[0]
    for key in ("method", "task", "target", "seed", "usr", "gur", "rap", "rap_control", "identity_alignment",
                "seconds", "peak_mem_mb", "grad_cosine", "official", "config", "versions", "views", "models",
                "data_revision"):
        assert key in r, key
    assert r["official"]["before"]["forget_fb"] > 50  # percent: the embedded model was taught the facts
    assert "embedded demo model" in r["models"]["target"]
    assert r["versions"]["method:r2f"].startswith("r2f-bench==")
    assert len(r["views"]) == 3 and r["threads"] == 1
    # every share or score it reports has one registered definition (counts and run facts are not metrics)
    from r2f_bench.metric import METRICS
    floats = {k for k, v in r.items() if isinstance(v, float) and k not in ("wall_seconds", "setup_seconds", "stored_at", "ratio_floor")}
    assert floats and floats <= set(METRICS), floats - set(METRICS)
    printed = capsys.readouterr().out
    assert "usr" in printed and "USR (%):" in printed and "ID-align (cosine):" in printed  # the legend
    assert f"(n={r['known_forget_probes']})" in printed and "\n1 record stored in " in printed
    # the same run again replaces its record; the table reads the plain run's store
    assert main(argv) == 0
    assert len((out / "results.jsonl").read_text().splitlines()) == 1 and len(list((out / "jobs").iterdir())) == 1
    assert not [p for p in out.iterdir() if p.name.startswith(".work")]  # work folders removed
    assert main(["table", "--output", str(out)]) == 0
    assert "1 records in the tables" in capsys.readouterr().out


def demo_record(**fields) -> dict:
    """A record as the demo run writes one: 16 known probes, nothing forgotten, 8 utility items."""
    return {"method": "r2f", "task": "rwku", "target": "1_Orla_Vantree", "models": {"target": "m", "proxy": None},
            "usr": 0.0, "usr_seen": 0.0, "gur": 100.0, "locality": 91.5, "rap": None, "rap_control": 93.75,
            "identity_alignment": 0.87, "seconds": 0.08, "peak_mem_mb": 3.5, "known_forget_probes": 16,
            "forgotten_forget_probes": 0, "n": {"utility": 8, "identity_prompts": 5, "locality": 12}, **fields}


def test_the_run_warns_when_utility_falls_below_the_floor_or_the_model_collapses():
    """A USR bought with utility is said so under the table; a collapsed model loudly."""
    from r2f_bench.cli.run import utility_warnings

    assert utility_warnings([demo_record(gur=95.0), demo_record(gur=None)]) == []
    below, = utility_warnings([demo_record(gur=71.9), demo_record(target="2_B", gur=90.0)])
    assert "below the 90% floor" in below and "1_Orla_Vantree (71.9)" in below and "2_B" not in below
    collapsed, below = utility_warnings([demo_record(gur=3.0, usr=100.0), demo_record(target="2_B", gur=85.0)])
    assert "collapsed on 1_Orla_Vantree (3.0)" in collapsed and "destroyed model" in collapsed
    assert "2_B (85.0)" in below and "1_Orla" not in below


def test_the_run_table_shows_the_items_behind_each_cell_and_flags_few():
    from r2f_bench.cli.run import summary

    text = summary([demo_record(), demo_record(target="2_Bram_Ostelic", usr=6.25, rap=100.0, forgotten_forget_probes=1)])
    head, _, first, second = text.splitlines()[1:5]
    assert head.split() == ["target", "usr", "usr_seen", "gur", "locality", "rap", "rap_control", "identity_alignment",
                            "seconds", "peak_mem_mb"]  # RAP shows, n/a, even where no target forgot anything
    for cell in ("0.000 (n=16) ", "100.000 (n=8)*", "91.500 (n=12) ", "n/a (n=0) ", "93.750 (n=16) ", "0.870 (n=5)*"):
        assert cell in first, cell
    assert "6.250 (n=16) " in second and "100.000 (n=1)*" in second
    legend = text.split("legend:")[1]
    for note in ("(n=k): the items a cell rests on", "*: fewer than 10 items", "n/a: undefined",
                 "USR seen counts probes made of the request's own strings", "not a membership-inference attack"):
        assert legend.count(note) == 1, note


def test_listings_json(capsys):
    assert main(["methods", "--json"]) == 0
    methods = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert {"r2f", "fullgrad"} <= set(methods)
    assert any(p["name"] == "rank" for p in methods["r2f"]["params"])
    # the options that set what a method reads (a run refuses the others)
    assert methods["r2f"]["reads_options"] == ["--views", "--paraphraser", "--target-modules"]
    # the default relearning attack relearns on the views: every method's record reads them
    assert methods["grad_ascent"]["reads_options"] == ["--views", "--paraphraser"] and methods["scrub"]["reads_options"] == [
        "--views", "--paraphraser", "--retain-items"]
    assert main(["tasks", "--json"]) == 0
    tasks = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert "rwku_forget_fb" in tasks["rwku"]["lm_eval_tasks"]


def fake_store(root) -> None:
    """A results store of synthetic records (no model runs)."""
    from records import stored, synthetic

    stored(synthetic(), root)


@pytest.mark.parametrize("entry, command", [
    ("r2f_bench", ["table", "--output", "{out}"]),
    ("fake_runner", ["tune", "--method", "fullgrad", "--grid", "step=0.005,0.04", "--limit", "1", "--output", "{out}",
                     "--quiet"]),
])
def test_json_is_alone_on_stdout_and_pipes_into_json_tool(entry, command, tmp_path):
    """``r2f-bench CMD --json | python -m json.tool`` parses; the text tables go to stderr. (``tune``
    runs its jobs with the fake runner: ``python -m fake_runner`` is ``r2f-bench`` with it.)"""
    import os
    import shlex
    import subprocess
    import sys
    from pathlib import Path

    fake_store(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    argv = " ".join(shlex.quote(a.format(out=tmp_path)) for a in command)
    done = subprocess.run(f"{sys.executable} -m {entry} {argv} --json | {sys.executable} -m json.tool", shell=True,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    if command[0] == "table":
        assert printed["records"] == len(list((tmp_path / "jobs").glob("*.json"))) and printed["skipped"] == []
        table1 = next(t for t in printed["tables"] if t["name"] == "table1")
        cell = next(r for r in table1["rows"] if r["row"] == "r2f")["cells"]["rwku.usr"]
        assert (cell["mean"], cell["n"], cell["targets"], cell["seeds"]) == (82.0, 6, 2, 3)
        assert "### Unlearning success and utility retention" in done.stderr
    else:
        assert [r["params"] for r in printed[0]["rows"]] == [{"step": "0.005"}, {"step": "0.04"}]
        assert "### fullgrad on rwku (dev split)" in done.stderr


def _bad(args, capsys, pattern):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: "), err
    assert pattern in err, err


def test_method_listing_shows_whole_descriptions_wrapped_to_the_terminal(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["methods", "--json"]) == 0
    descriptions = [m["description"] for m in json.loads(capsys.readouterr().out)]
    assert main(["methods"]) == 0
    text = capsys.readouterr().out
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    assert all(d in " ".join(text.split()) for d in descriptions)


@pytest.mark.parametrize("command, folder", [([], "r2f-output/"), (["tune"], "r2f-tune/"),
                                             (["frontier"], "r2f-frontier/")])
def test_help_names_the_default_output_folder(command, folder, capsys):
    from r2f_bench.cli.main import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    assert f"(default: {folder})" in " ".join(capsys.readouterr().out.split())


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


def test_a_full_stdout_is_one_line():
    """`r2f-bench tasks > /dev/full`: one line and exit 2, not an OSError traceback."""
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "r2f_bench", "tasks"], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: cannot write the output (No space left on device); free space or send it elsewhere."], proc.stderr


def test_the_suite_and_the_processes_it_spawns_run_on_one_thread():
    """conftest pins the threads, so results and times do not follow the machine's load."""
    import subprocess
    import sys

    import torch

    child = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                           capture_output=True, text=True, timeout=120, check=True)
    assert (torch.get_num_threads(), child.stdout.strip()) == (1, "1")


def test_an_ablation_sweep_defaults_to_the_methods_that_declare_it(capsys, tmp_path):
    assert main(["sweep", "--ablation", "rank", "--tasks", "rwku", "--dry-run", "--output", str(tmp_path)]) == 0
    *planned, total = capsys.readouterr().out.splitlines()
    assert total.startswith("5 jobs planned") and all("r2f/rwku/seed0 [rank=" in line for line in planned)


def test_run_options_before_a_command_are_refused(fake_run, tmp_path, capsys):
    """Before, argparse let the command's defaults overwrite them: the sweep below ran the
    embedded model into r2f-output with exit 0."""
    _bad(["--limit", "1", "--model", "./llama", "sweep", "--methods", "r2f", "--dry-run"], capsys,
         "--limit, --model given before the command 'sweep', which reads its options only after it; "
         "write r2f-bench sweep --limit ….")
    assert main(["sweep", "--methods", "r2f", "--limit", "1", "--output", str(tmp_path), "--dry-run"]) == 0  # after it


@pytest.mark.parametrize("command", [["frontier", "--methods", "r2f"], ["tune", "--methods", "r2f"]])
def test_commands_over_seeds_refuse_one_runs_seed(command, fake_run, tmp_path, monkeypatch, capsys):
    """--seed was accepted as one run's seed and ignored (every job took its seed from
    --seeds); now it is refused, as any abbreviation of --seeds would be."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(command + ["--seed", "3"])
    assert exit_.value.code == 2 and "unrecognized arguments: --seed 3" in capsys.readouterr().err
    assert not fake_run.CALLS


@pytest.mark.parametrize("value", ["0.9", "nan", "150"])
def test_tune_refuses_a_utility_floor_off_the_percent_scale(value, capsys):
    _bad(["tune", "--methods", "r2f", "--min-gur", value], capsys, "--min-gur is the share of utility kept, in %")


@pytest.mark.parametrize("methods", ["", ","])
def test_frontier_refuses_an_empty_method_list(methods, fake_run, tmp_path, capsys):
    """Before: an IndexError traceback (the baseline was the first of no curves)."""
    _bad(["frontier", "--methods", methods, "--output", str(tmp_path / "store")], capsys,
         "--methods is empty; name some or pass `all`.")
    assert not fake_run.CALLS


def test_frontier_checks_its_out_dir_before_the_rounds(fake_run, tmp_path, capsys):
    """Before: an --out-dir that is a file failed after every round, naming --output."""
    target = tmp_path / "a-file"
    target.write_text("")
    _bad(["frontier", "--methods", "r2f", "--output", str(tmp_path / "store"), "--out-dir", str(target)], capsys,
         f"--out-dir {target} is a file; pass a directory.")
    assert not fake_run.CALLS
