"""The lm-eval glue's own pieces."""

from __future__ import annotations

import pytest


def test_unstamped_skips_the_git_hash_and_environment_report_and_puts_both_back():
    import lm_eval.evaluator as evaluator

    from r2f_bench.engine.lmeval import unstamped

    originals = evaluator.get_git_commit_hash, evaluator.add_env_info
    with unstamped():
        assert evaluator.get_git_commit_hash() is None
        results: dict = {}
        evaluator.add_env_info(results)
        assert results == {}  # no subprocesses, nothing added
    assert (evaluator.get_git_commit_hash, evaluator.add_env_info) == originals
    with pytest.raises(RuntimeError), unstamped():
        raise RuntimeError("an evaluation that fails")
    assert (evaluator.get_git_commit_hash, evaluator.add_env_info) == originals


JINJA = {"doc_to_text: prompt": 'doc_to_text: "{{prompt}}"', "doc_to_target: answer": 'doc_to_target: "{{answer}}"',
         "doc_to_target: label": 'doc_to_target: "{{label}}"', "doc_to_choice: choices": 'doc_to_choice: "{{choices}}"'}


def templated_copy(task_cls, folder):
    """``task_cls`` reading a copy of its YAMLs whose fields are Jinja templates
    (``"{{prompt}}"``), as they were before they named the fields themselves."""
    import shutil

    shutil.copytree(task_cls.yaml_dir(), folder, ignore=shutil.ignore_patterns("sample", "__pycache__"))
    for path in folder.glob("_*.yaml"):
        text = path.read_text()
        for field, template in JINJA.items():
            text = "\n".join(template if line.split("  #")[0].strip() == field else line for line in text.splitlines())
        path.write_text(text + "\n")
    assert "{{prompt}}" in "".join(p.read_text() for p in folder.glob("_*.yaml"))
    return type(task_cls.__name__, (task_cls,), {"yaml_dir": classmethod(lambda cls: folder)})


@pytest.mark.parametrize("task_name", ["rwku", "wmdp"])
def test_yaml_fields_score_as_the_templates_did(tiny, tmp_path, task_name):
    """The YAMLs name the probe's fields (``doc_to_text: prompt``) instead of Jinja
    templates compiled for every probe: the same prompts, so the same scores, probe by probe
    (generation for RWKU, the likeliest choice for WMDP)."""
    from r2f_bench.engine.lmeval import evaluate_probes
    from r2f_bench.plugins import registry

    task_cls = registry().task(task_name)
    task = task_cls()
    bench = task.load(task.locate(None), None, 1, n_dev=0)
    probes = {**bench.targets[0].probes, task_cls.utility_set: bench.utility[:40]}
    shipped = evaluate_probes(tiny["model"], tiny["tok"], task, probes, tmp_path)
    templated = evaluate_probes(tiny["model"], tiny["tok"], templated_copy(task_cls, tmp_path / "yamls")(), probes,
                                tmp_path)
    assert sum(len(rows) for rows in shipped.values()) >= 20
    assert shipped == templated


def test_the_batch_size_changes_no_answer(tiny, tmp_path):
    """--eval-batch-size trades speed only: one request a batch and 64 give every probe the
    same answered verdict (left padding is masked)."""
    from r2f_bench.engine.lmeval import evaluate_probes
    from r2f_bench.plugins import registry
    from r2f_bench.task import ANSWERED

    task = registry().task("rwku")()
    probes = {**tiny["bench"].targets[0].probes, task.utility_set: tiny["bench"].utility[:24]}
    verdicts = lambda batch: {s: [row[ANSWERED] for row in rows] for s, rows in
                              evaluate_probes(tiny["model"], tiny["tok"], task, probes, tmp_path, batch).items()
                              if rows and ANSWERED in rows[0]}
    one, many = verdicts(1), verdicts(64)
    assert sum(len(v) for v in one.values()) >= 20 and any(any(v) for v in one.values())
    assert one == many


def test_token_batches_cover_every_request_once_within_the_budget():
    """Longest first; at most ``most`` requests a batch and, unless alone, at most ``most``
    median prompts' worth of padded tokens."""
    from statistics import median

    from r2f_bench.engine.lmeval import token_batches

    lengths = [40, 41, 39, 400, 42, 38, 350, 40, 43, 37, 40, 120, 41, 40, 39, 44]
    batches = token_batches(lengths, 4)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(lengths, reverse=True)
    budget = 4 * median(lengths)
    assert all(len(b) <= 4 and (len(b) == 1 or len(b) * lengths[b[0]] <= budget) for b in batches)
    assert [len(b) for b in batches[:3]] == [1, 1, 1]  # 400, 350 and 120 each alone
    assert token_batches([10] * 9, 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]  # equal lengths: by requests, as before
    assert token_batches([], 4) == []


def test_a_long_prompt_does_not_pad_a_whole_batch(tiny, tmp_path):
    """Generation is batched by tokens: no prefill pass holds more padded prompt tokens than
    ``batch_size`` prompts of the median length, unless it holds one prompt (lm-eval alone
    pads every request of a batch to its longest); every probe's answer is the same as with
    one request a batch."""
    import dataclasses
    from statistics import median

    from r2f_bench.engine.lmeval import evaluate_probes
    from r2f_bench.plugins import registry
    from r2f_bench.task import ANSWERED

    task = registry().task("rwku")()
    utility = tiny["bench"].utility
    long = [dataclasses.replace(p, prompt=" ".join([p.prompt] * 8)) for p in utility[:3]]
    probes = {**tiny["bench"].targets[0].probes, task.utility_set: long + utility[3:]}
    passes: list[tuple[int, int, list[int]]] = []

    def prefill(module, args, kwargs):
        ids, mask = kwargs["input_ids"], kwargs.get("attention_mask")  # no mask: no padding
        if ids.shape[1] > 1:  # a batch's prompt pass, not a decoding step
            real = [ids.shape[1]] * ids.shape[0] if mask is None else mask[:, -ids.shape[1]:].sum(1).tolist()
            passes.append((ids.shape[0], ids.shape[1], real))

    verdicts = lambda scores: [row[ANSWERED] for rows in scores.values() for row in rows if ANSWERED in row]
    hook = tiny["model"].register_forward_pre_hook(prefill, with_kwargs=True)
    try:
        batched = verdicts(evaluate_probes(tiny["model"], tiny["tok"], task, probes, tmp_path, batch_size=8))
    finally:
        hook.remove()
    one = verdicts(evaluate_probes(tiny["model"], tiny["tok"], task, probes, tmp_path, batch_size=1))
    lengths = [n for _, _, real in passes for n in real]
    assert len(lengths) == sum(map(len, probes.values())) >= 30 and max(lengths) > 4 * median(lengths)
    assert all(rows == 1 or rows * width <= 8 * median(lengths) for rows, width, _ in passes)
    assert batched == one and any(one)


CHAT = ("{% for m in messages %}<s>USER {{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}ASSISTANT{% endif %}")


def test_probes_go_through_the_chat_template_when_asked(tiny, tmp_path, prompts_seen):
    """With ``chat_template`` every prompt reaches the model as a user turn of the
    tokenizer's template (lm-eval's own ``apply_chat_template``); without, as written."""
    import copy

    from r2f_bench.engine.lmeval import evaluate_probes
    from r2f_bench.tasks.rwku import RWKU

    task = RWKU()
    bench = task.load(task.locate(None), None, 1, n_dev=0)
    probes = {"forget_qa": bench.targets[0].probes["forget_qa"][:4]}
    tok = copy.deepcopy(tiny["tok"])
    tok.chat_template = CHAT
    seen = prompts_seen(tiny["model"], tok)
    evaluate_probes(tiny["model"], tok, task, probes, tmp_path)
    plain, seen[:] = list(seen), []
    evaluate_probes(tiny["model"], tok, task, probes, tmp_path, chat_template=True)
    assert not any("USER" in text for text in plain)
    asked = [text for text in seen if "USER" in text]
    assert asked and all("ASSISTANT" in text for text in asked)
    assert {p.prompt.strip() for p in probes["forget_qa"]} <= {t.split("USER ", 1)[1].split("ASSISTANT")[0].strip()
                                                                 for t in asked}


def test_chat_template_auto_on_off(tiny):
    import copy

    from r2f_bench.engine.build import chat_template
    from r2f_bench.errors import UserError

    plain, chat = tiny["tok"], copy.deepcopy(tiny["tok"])
    chat.chat_template = CHAT
    assert chat_template("auto", chat, "m") and not chat_template("auto", plain, "m")
    assert not chat_template("off", chat, "m") and chat_template("on", chat, "m")
    with pytest.raises(UserError, match="has no chat template"):
        chat_template("on", plain, "m")


def test_a_shared_header_moves_before_the_padding_and_keeps_every_position():
    """Rows sharing their first 9 real tokens (left-padded 0, 2 and 1 tokens): the header is
    those 9 (a row keeps at least one token of its own), moved to the first columns; each real
    token keeps its position (the count of real tokens before it) and its mask."""
    import torch

    from r2f_bench.engine.lmeval import MIN_HEADER, header_first, shared_header

    head = list(range(101, 110))
    rows = [head + [7, 8, 9], [0, 0] + head + [5], [0] + head + [6, 6]]
    mask = torch.tensor([[int(t != 0) for t in row] for row in rows])
    context = torch.tensor(rows)
    assert MIN_HEADER <= 9 and shared_header(context, mask) == 9
    moved, moved_mask = header_first(context, mask, 9)
    assert (moved[:, :9] == torch.tensor(head)).all() and (moved_mask[:, :9] == 1).all()
    position = lambda ids, m: [[t for t, keep in zip(zip(r.tolist(), (k.cumsum(0) - 1).tolist()), k.tolist()) if keep]
                               for r, k in zip(ids, m)]
    assert position(moved, moved_mask) == position(context, mask)
    assert shared_header(context[:1], mask[:1]) == 0  # one row: nothing to share
    differs = context.clone()
    differs[1, 6] = 42  # the second row's 5th real token
    assert shared_header(differs, mask) == 0  # 4 shared tokens: below MIN_HEADER


def test_a_chat_header_is_computed_once_a_batch_and_changes_no_score(tiny, tmp_path, monkeypatch):
    """Through a chat template with a system prompt (as SmolLM2's) every prompt opens with the
    same tokens: their states are computed once a batch and reused by every row, so the model
    reads fewer prompt tokens, and every probe's scores equal those without the reuse."""
    import copy

    from r2f_bench.engine import lmeval
    from r2f_bench.plugins import registry

    task = registry().task("rwku")()
    probes = {**tiny["bench"].targets[0].probes, task.utility_set: tiny["bench"].utility[:24]}
    tok = copy.deepcopy(tiny["tok"])
    tok.chat_template = CHAT.replace("<s>USER", "<s>SYSTEM Answer in one short line.</s><s>USER")
    tokens = [0]
    hook = tiny["model"].register_forward_pre_hook(
        lambda m, args, kwargs: tokens.__setitem__(0, tokens[0] + kwargs["input_ids"].numel() * (kwargs["input_ids"].shape[1] > 1)),
        with_kwargs=True)  # prompt tokens (a decoding step passes one a row)

    def scored(min_header: int) -> tuple[dict, int]:
        monkeypatch.setattr(lmeval, "MIN_HEADER", min_header)
        tokens[0] = 0
        return lmeval.evaluate_probes(tiny["model"], tok, task, probes, tmp_path, 8, chat_template=True), tokens[0]

    try:
        (reused, fewer), (computed, every) = scored(8), scored(10**9)
    finally:
        hook.remove()
    assert sum(map(len, computed.values())) >= 30 and any(row.get("answered") for rows in computed.values()
                                                          for row in rows)
    assert reused == computed
    assert fewer < 0.9 * every
