"""The lm-eval glue's own pieces."""

from __future__ import annotations

import pytest


def test_no_git_hash_records_none_and_puts_the_function_back():
    import lm_eval.evaluator as evaluator

    from r2f_bench.engine.lmeval import no_git_hash

    original = evaluator.get_git_commit_hash
    with no_git_hash():
        assert evaluator.get_git_commit_hash() is None
    assert evaluator.get_git_commit_hash is original
    with pytest.raises(RuntimeError), no_git_hash():
        raise RuntimeError("an evaluation that fails")
    assert evaluator.get_git_commit_hash is original
