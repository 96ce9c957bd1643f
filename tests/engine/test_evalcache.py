"""The evaluation cache: a sound entry is reused, a corrupt or wrong-shape one is set
aside and rebuilt (never trusted), and an entry's name is a stable digest of its key."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from r2f_bench.engine.evalcache import cached, entry_path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("R2F_BENCH_CACHE", str(tmp_path))
    return tmp_path / "evals"


def shape(entry):
    return None if isinstance(entry, dict) and isinstance(entry.get("rows"), list) else "no rows"


class Counted:
    """A stand-in evaluation that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> dict:
        self.calls += 1
        return {"rows": [{"answered": 1.0}]}


def test_entry_path_is_the_digest_of_its_key_parts(cache):
    parts = ["2", "model", "t1", {"forget": [["Q", "A"]]}]
    digest = hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]
    assert entry_path("rwku", parts) == cache / f"rwku-{digest}.json"
    assert entry_path("rwku-attack", parts).name == f"rwku-attack-{digest}.json"
    assert entry_path("rwku", parts[:-1] + [{"forget": [["Q", "B"]]}]) != entry_path("rwku", parts)


def test_a_sound_entry_is_reused_without_evaluating_again(cache):
    path, compute = entry_path("t", [1]), Counted()
    first = cached(path, shape, compute, progress=pytest.fail)
    assert json.loads(path.read_text()) == first
    assert cached(path, shape, compute, progress=pytest.fail) == first and compute.calls == 1


@pytest.mark.parametrize("text, why", [('{"rows": ', "JSONDecodeError"), ('{"rows": 5}', "wrong shape: no rows"),
                                       ("[]", "wrong shape: no rows"), ("[" * 100_000 + "]" * 100_000, "RecursionError")],
                         ids=["corrupt", "wrong shape", "array", "nested past the stack"])
def test_a_corrupt_or_wrong_shape_entry_is_set_aside_and_rebuilt(cache, text, why):
    path, compute, said = entry_path("t", [1]), Counted(), []
    cache.mkdir()
    path.write_text(text)
    assert cached(path, shape, compute, said.append) == {"rows": [{"answered": 1.0}]} and compute.calls == 1
    assert json.loads(path.read_text()) == {"rows": [{"answered": 1.0}]}  # rebuilt in place
    (aside,) = cache.glob("*.corrupt-*")
    assert aside.read_text() == text
    assert re.fullmatch(rf"warning: cache entry \S+{re.escape(path.name)} could not be loaded \({re.escape(why)}\); "
                        rf"moved to {re.escape(aside.name)} and rebuilt", said[0])
    assert cached(path, shape, compute, pytest.fail) and compute.calls == 1  # the rebuilt entry is reused
