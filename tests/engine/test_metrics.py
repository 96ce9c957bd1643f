"""The metric definitions on hand-made answer patterns."""

import pytest

from r2f_bench.engine.metrics import kept, recovery, usr


def test_rap_counts_only_the_forgotten_probes():
    """8 known probes, 7 still answered after unlearning, 1 forgotten. The attack brings
    the forgotten one back and loses one it had: RAP is 100 (1 of 1 forgotten came back),
    never the 75 of "answered after the attack among the known"."""
    before = [True] * 8
    after = [True] * 7 + [False]
    attacked = [True] * 5 + [False, False, True]
    assert recovery(before, after, attacked) == 100.0
    assert recovery(before, [True] * 8, attacked) is None  # nothing forgotten: no RAP
    assert recovery(before, [False] * 8, attacked) == pytest.approx(100 * 6 / 8)
    assert usr(before, after) == pytest.approx(100 / 8)


def test_rap_control_is_recall_kept_by_the_untouched_model_under_attack():
    before = [True, True, True, True, False]
    assert kept(before, [True, True, False, False, True]) == 50.0  # the unknown 5th does not count
    assert kept([False] * 3, [True] * 3) is None
    assert kept(before, [True] * 5, chance=0.25) == 100.0


def test_identity_alignment_is_the_mean_cosine_over_every_prompt_position_and_streams_the_edit():
    """1 for the model itself; for an edited model, the mean cosine of the two next-token
    distributions over every unpadded position, computed without holding the edited
    model's distributions (they are made one batch at a time)."""
    import weakref

    import torch
    import torch.nn.functional as F

    from r2f_bench.engine import metrics
    from r2f_bench.engine.embedded import build_tokenizer, EmbeddedSpec, new_embedded_model

    prompts = [f"Person {i} was born in city {i % 7} and works at firm {i % 5}." for i in range(37)]
    tok = build_tokenizer(prompts)
    model = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l1"), tok).eval()
    reference = list(metrics.distributions(model, tok, prompts, batch_size=8))
    assert [len(r) for r in reference] == metrics.positions(tok, prompts, batch_size=8)
    assert len(reference) == 5 and sum(len(r) for r in reference) == sum(len(tok(p)["input_ids"]) for p in prompts)
    assert abs(metrics.identity_alignment(reference, model, tok, prompts, batch_size=8) - 1.0) < 1e-6
    edited = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l1"), tok, run_seed=1).eval()
    theirs = list(metrics.distributions(edited, tok, prompts, batch_size=8))
    expected = float(torch.cat([F.cosine_similarity(p, q, dim=-1) for p, q in zip(reference, theirs)]).mean())
    assert metrics.identity_alignment(reference, edited, tok, prompts, batch_size=8) == expected
    alive, most, original = set(), [0], metrics.distributions

    def tracked(*args):
        for batch in original(*args):
            alive.add(id(batch))
            weakref.finalize(batch, alive.discard, id(batch))
            most[0] = max(most[0], len(alive))
            yield batch

    metrics.distributions = tracked
    try:
        metrics.identity_alignment(reference, edited, tok, prompts, batch_size=8)
    finally:
        metrics.distributions = original
    assert 0 < most[0] <= 2  # of the edited model's 5 batches, at most the one compared and the next live
