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
    full = list(metrics.distributions(model, tok, prompts, batch_size=8))
    assert [len(r) for r in full] == metrics.positions(tok, prompts, batch_size=8)
    assert len(full) == 5 and sum(len(r) for r in full) == sum(len(tok(p)["input_ids"]) for p in prompts)
    reference = [metrics.largest(p) for p in full]
    assert abs(metrics.identity_alignment(reference, model, tok, prompts, batch_size=8) - 1.0) < 1e-6
    edited = new_embedded_model(EmbeddedSpec.parse("embedded:mistral-h32-l1"), tok, run_seed=1).eval()
    theirs = list(metrics.distributions(edited, tok, prompts, batch_size=8))
    expected = float(torch.cat([F.cosine_similarity(p, q, dim=-1) for p, q in zip(full, theirs)]).mean())
    assert expected - metrics.ALIGNMENT_TAIL <= metrics.identity_alignment(reference, edited, tok, prompts, batch_size=8) <= expected + 1e-6
    whole = [metrics.largest(p, tail=0.0) for p in full]
    assert metrics.identity_alignment(whole, edited, tok, prompts, batch_size=8) == pytest.approx(expected, abs=1e-6)
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


def test_a_reference_distribution_keeps_its_fewest_largest_entries_and_the_cosine_errs_at_most_the_tail_below():
    """A peaked row keeps its head, a row with a heavy tail keeps it; the cosine misses only
    the dropped entries' share of the dot product, which is never negative and at most
    ``tail`` (reached by a distribution that lives on the dropped entries alone)."""
    import torch
    import torch.nn.functional as F

    from r2f_bench.engine.metrics import cosines, largest

    peaked = torch.tensor([[0.01, 0.6, 0.0, 0.3, 0.09]])
    kept = largest(peaked, tail=0.2)  # the norm 0.677; after one entry 0.313 remain, after two 0.091
    assert kept.counts.tolist() == [2] and kept.indices.tolist() == [1, 3]
    assert kept.values.tolist() == pytest.approx([0.6, 0.3]) and kept.norms.tolist() == pytest.approx([peaked.norm().item()])
    head_and_tail = torch.cat([torch.full((3, 10), 0.05), torch.full((3, 990), 0.5 / 990)], dim=1)
    # the tail's share of the norm: sqrt((0.25 / 990) / (10 · 0.05² + 0.25 / 990)) = 0.1
    assert largest(head_and_tail, tail=0.105, chunk=2).counts.tolist() == [10] * 3
    assert largest(head_and_tail, tail=0.09, chunk=2).counts.tolist() == [1000] * 3
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(3 * torch.randn(64, 500, generator=g), dim=-1)
    ref = largest(p, tail=0.05, chunk=16)
    rows = torch.repeat_interleave(torch.arange(64), ref.counts)
    dropped = p.clone()
    dropped[rows, ref.indices] = 0
    assert (dropped.norm(dim=-1) <= 0.05 * p.norm(dim=-1) + 1e-7).all()
    q = torch.softmax(3 * torch.randn(64, 500, generator=g), dim=-1)
    for other, most in ((p, 0.05 ** 2), (q, 0.05), (dropped, 0.05)):  # itself: the dropped share of |p|², tail² at most
        error = F.cosine_similarity(p, other, dim=-1).double() - cosines(ref, other)
        assert (error >= -1e-6).all() and (error <= most + 1e-6).all()
    error = F.cosine_similarity(p, dropped, dim=-1).double() - cosines(ref, dropped)
    assert error.max() > 0.04  # the bound is nearly reached: it is the honest one
    with pytest.raises(RuntimeError, match="has 64 positions, 63 expected"):
        cosines(ref, q[:63])
