"""Tokenising (prompt, answer) pairs into training batches, and batching lists.

The one encoding that teaching, unlearning losses and the relearning attack share, and
prompts as an instruct model is asked them (its chat template).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any, Iterable, Iterator, Sequence

import torch

from ..data import Probe


# tokens of (prompt + answer) a training or unlearning sequence keeps, from the end: the
# embedded models' whole context, so a long prompt is cut where lm-eval cuts it when
# it generates (the end of the prompt stays, next to the answer)
MAX_LENGTH = 256


def encode(tokenizer: Any, probes: Sequence[Probe], answers: Sequence[str] | None = None,
           device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Right-padded batch of ``prompt + " " + answer + eos``; labels only on the answer.

    ``answers`` replaces the probes' answers (e.g. a refusal or a wrong answer).
    """
    answers = answers if answers is not None else [p.answer for p in probes]
    seqs, labels = [], []
    for p, a in zip(probes, answers):
        ids, n_ans = _token_ids(tokenizer, p.prompt, a)
        seqs.append(ids)
        labels.append([-100] * (len(ids) - n_ans) + ids[len(ids) - n_ans:])
    width = max(len(s) for s in seqs)
    pad = tokenizer.pad_token_id
    return {
        "input_ids": torch.tensor([s + [pad] * (width - len(s)) for s in seqs], device=device),
        "attention_mask": torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs], device=device),
        "labels": torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels], device=device),
    }


def _token_ids(tokenizer: Any, prompt: str, answer: str) -> tuple[list[int], int]:
    """The token ids of one sequence (cut to :data:`MAX_LENGTH` from the end) and how
    many of them are the answer's."""
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tokenizer(" " + answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = (prompt_ids + answer_ids)[-MAX_LENGTH:]
    return ids, min(len(answer_ids), len(ids))


def token_batches(tokenizer: Any, probes: Sequence[Probe], max_sequences: int,
                  max_tokens: int = 0) -> Iterator[list[int]]:
    """Indices of ``probes`` in order of token length (stable: neighbours pad least), in
    chunks of at most ``max_sequences`` sequences and, when ``max_tokens`` > 0, at most
    ``max_tokens`` padded tokens (sequences × the longest), so the activations of one
    pass stay bounded whatever the number of probes; a sequence longer than the budget
    goes alone."""
    lengths = [len(_token_ids(tokenizer, p.prompt, p.answer)[0]) for p in probes]
    chunk: list[int] = []
    for i in sorted(range(len(probes)), key=lengths.__getitem__):
        # in length order the newcomer is the longest, so it sets the padded width
        if chunk and (len(chunk) == max_sequences or (max_tokens and (len(chunk) + 1) * lengths[i] > max_tokens)):
            yield chunk
            chunk = []
        chunk.append(i)
    if chunk:
        yield chunk


def batches(items: Sequence[Any], size: int, rng: random.Random | None = None) -> Iterable[list[Any]]:
    order = list(range(len(items)))
    if rng is not None:
        rng.shuffle(order)
    for i in range(0, len(order), size):
        yield [items[j] for j in order[i:i + size]]


def cycle_batches(items: Sequence[Any], size: int, seed: int = 0) -> Iterator[list[Any]]:
    """Endless shuffled minibatches of ``items`` (reshuffled every pass)."""
    rng = random.Random(seed)
    while True:
        yield from batches(items, size, rng)


def chat_prompt(tokenizer: Any, prompt: str) -> str:
    """``prompt`` as a user turn of ``tokenizer``'s chat template, ready for the reply (as
    lm-eval asks it with ``apply_chat_template``)."""
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)


def as_asked(tokenizer: Any, probes: Sequence[Probe], chat: bool) -> list[Probe]:
    """``probes`` with their prompts as the run asks them (through the chat template or not)."""
    return [replace(p, prompt=chat_prompt(tokenizer, p.prompt)) for p in probes] if chat else list(probes)


def special_tokens(tokenizer: Any, text: str) -> dict[str, bool]:
    """Tokenizer arguments for ``text`` as lm-eval encodes a causal LM's prompts: the
    tokenizer's own special tokens, unless the text already begins with its BOS (a chat
    template that writes one)."""
    bos = getattr(tokenizer, "bos_token", None)
    return {"add_special_tokens": False} if bos and text.startswith(bos) else {}
