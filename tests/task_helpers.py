"""Shared by the task tests: the shared data folder beside the repository and lm-eval
YAML probe sets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def shared_dir(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.is_dir():
        pytest.skip(f"shared data {path} is absent")
    return path


def yaml_sets(yaml_dir: Path) -> dict[str, str]:
    """lm-eval task name -> probe set, for every per-set YAML in ``yaml_dir``."""
    out = {}
    for path in yaml_dir.glob("*.yaml"):
        text = path.read_text()
        task, probe_set = re.search(r"^task: (\S+)$", text, re.M), re.search(r"^\s+probe_set: (\S+)$", text, re.M)
        if task and probe_set:
            out[task.group(1)] = probe_set.group(1)
    return out


def assert_lm_eval_round_trip(task_cls: type) -> None:
    """Every probe set has a YAML named ``<task>_<set>`` whose dataset hook returns rows."""
    from r2f_bench.engine.lmeval import load_probe_dataset

    expected = task_cls.forget_sets + task_cls.locality_sets + (task_cls.utility_set,)
    assert yaml_sets(task_cls.yaml_dir()) == {f"{task_cls.name}_{s}": s for s in expected}
    for s in expected:
        rows = load_probe_dataset(task_cls.name, s)["test"]
        assert len(rows) > 0 and all(r["set"] == s for r in rows)
