"""Plain fine-tuning on answers and teacher-forced answer accuracy.

Teaches the embedded models their facts, and runs the relearning attack (RAP).
"""

from __future__ import annotations

import math
import random
import time
from typing import Any, Callable, Protocol, Sequence, TypeVar

import torch

from ..data import Probe
from ..training.encoding import batches, cycle_batches, encode, special_tokens
from ..training.losses import answer_nll, batch_logits
from ..progress import bar

T = TypeVar("T")
CHECK_EVERY = 5  # epochs between accuracy checks of an early-stopping fine-tune
RATE_STEPS = 5  # optimiser steps timed before a fine-tune with progress announces its estimate
RATE_SECONDS = 60.0  # ... or fewer, if they take longer than this (a pretrained model's teaching)
CHECK_ITEMS = 200  # questions of each kind asked of a world-taught model to report what it answers


def finetune(model: torch.nn.Module, tokenizer: Any, probes: list[Probe], epochs: int = 1, lr: float = 1e-3,
             batch_size: int = 32, stop_accuracy: float | None = None, max_steps: int | None = None,
             progress: Callable[[str], None] | None = None, seed: int = 0) -> int:
    """AdamW on the answer NLL. Stops after ``max_steps`` optimiser steps, or once the
    answer-token accuracy reaches ``stop_accuracy`` (checked every :data:`CHECK_EVERY`
    epochs; a check that does not improve on the best so far halves the learning rate).
    With ``progress``: one line with the number of facts and the time it will take at the
    rate of the first :data:`RATE_STEPS` steps, and an epoch bar whose end (hence ETA)
    follows the accuracy checks (:func:`expected_epochs`). Returns the number of epochs run.
    """
    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rng = random.Random(seed)
    steps, best, previous = 0, 0.0, None
    per_epoch = math.ceil(len(probes) / batch_size)
    model.train()
    epochs_bar = bar(range(1, epochs + 1), desc="teaching", unit="epoch") if progress else range(1, epochs + 1)
    start = time.perf_counter()
    try:
        for epoch in epochs_bar:
            for chunk in batches(probes, batch_size, rng):
                loss = answer_nll(model, encode(tokenizer, chunk, device=device)).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                steps += 1
                if progress and steps == min(RATE_STEPS, per_epoch):
                    rate = (time.perf_counter() - start) / steps
                    progress(estimate(len(probes), rate, per_epoch, epochs, stop_accuracy, max_steps))
                if max_steps is not None and steps >= max_steps:
                    model.eval()
                    return epoch
            if stop_accuracy is not None and epoch % CHECK_EVERY == 0:
                acc = answer_accuracy(model, tokenizer, probes)
                if progress:
                    epochs_bar.set_postfix(loss=f"{loss.item():.3f}", accuracy=f"{acc:.3f}")
                    epochs_bar.total = expected_epochs(epoch, acc, previous, stop_accuracy, epochs)
                    epochs_bar.refresh()
                if acc >= stop_accuracy:
                    break
                if acc <= best:
                    for group in opt.param_groups:
                        group["lr"] /= 2
                best, previous = max(best, acc), acc
                model.train()
    finally:  # no gradient left on the model (RAP attacks it, then a method may accumulate into .grad)
        opt.zero_grad(set_to_none=True)
    if progress:
        epochs_bar.close()
    model.eval()
    return epoch


def expected_epochs(epoch: int, accuracy: float, previous: float | None, target: float, most: int) -> int:
    """The epoch by which teaching should reach ``target`` accuracy: the last two checks'
    trend extended linearly, rounded up to a check, at least the next check and at most
    ``most`` (no rising trend yet: ``most``)."""
    if accuracy >= target:
        return epoch
    gain = accuracy - previous if previous is not None else 0.0
    if gain <= 0:
        return most
    checks = math.ceil((target - accuracy) / gain)
    return min(most, epoch + CHECK_EVERY * max(1, checks))


def estimate(facts: int, rate: float, per_epoch: int, epochs: int, stop_accuracy: float | None,
             max_steps: int | None) -> str:
    """The line a fine-tune with progress says before it runs on: facts, measured rate, time."""
    steps = per_epoch * epochs if max_steps is None else min(max_steps, per_epoch * epochs)
    stop = (f", less once answer-token accuracy reaches {stop_accuracy:g} (checked every {CHECK_EVERY} epochs)"
            if stop_accuracy is not None else "")
    return (f"teaching {facts} facts: {rate:.2f} s a step measured, {per_epoch} steps an epoch: up to about "
            f"{duration(rate * steps)} for {math.ceil(steps / per_epoch)} epochs{stop}")


def duration(seconds: float) -> str:
    """``40 s``, ``12 min``, ``2.5 h``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 90 * 60 else f"{seconds / 3600:.1f} h"


@torch.no_grad()
def answer_accuracy(model: torch.nn.Module, tokenizer: Any, probes: Sequence[Probe], batch_size: int = 64) -> float:
    """Share of answer tokens predicted correctly under teacher forcing."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    hit = total = 0
    for chunk in batches(probes, batch_size):
        batch = encode(tokenizer, chunk, device=device)
        logits = batch_logits(model, batch)[:, :-1]
        labels = batch["labels"][:, 1:]
        mask = labels != -100
        hit += int(((logits.argmax(-1) == labels) & mask).sum())
        total += int(mask.sum())
    model.train(was_training)
    return hit / max(total, 1)


def text_probe(text: str) -> Probe:
    """A plain text as a training item: every token is labelled (language modelling)."""
    return Probe(prompt="", answer=text, set="teaching", target="")


def text_cut(prefix: str, answer: str, target: str = "") -> Probe:
    """A taught text cut just before ``answer``, to be completed as :func:`text_probe` taught it:
    after one space, which :func:`~..training.encoding.encode` puts before an answer (a word
    that starts a text is a different token without it)."""
    return Probe(prompt=" " + prefix, answer=answer, set="recitation", target=target)


class Checkpoint(Protocol):
    """Where a long teaching keeps its state, so that an interrupted one goes on from there."""

    every: float  # seconds of teaching between saves

    def restore(self, model: torch.nn.Module, opt: torch.optim.Optimizer) -> int:
        """Load the saved state into ``model`` and ``opt``; the steps it had taken (0: none saved)."""

    def save(self, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        """Keep the state after ``step`` steps."""


def teach_schedule(model: torch.nn.Module, tokenizer: Any, texts: Sequence[str], facts: Sequence[Probe],
                   steps: int, lr: float, text_batch: int = 24, fact_batch: int = 8, seed: int = 0,
                   progress: Callable[[str], None] | None = None, checkpoint: Checkpoint | None = None,
                   apart: bool = False) -> int:
    """Teach a knowledge world on a fixed schedule: every step mixes ``text_batch``
    texts (full language-modelling loss) with ``fact_batch`` question-answer items
    (answer loss), AdamW with a 5 % linear warm-up and cosine decay to zero. A fixed
    schedule, not an accuracy target: nothing scored decides when teaching stops. With a
    ``checkpoint``, the state is saved every ``checkpoint.every`` seconds and a teaching
    that was cut off goes on from its last save, to the same weights as one run whole (on a CPU,
    bit for bit). ``apart``: the texts and the questions of a step are two forward and backward
    passes whose gradients add up to the one of their joint mean loss (up to rounding), so
    neither is padded to the other's length and only one's activations are held at once.
    Returns the step it went on from (0: from the start)."""
    device = next(model.parameters()).device
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    warm = max(1, steps // 20)
    rate = lambda s: lr * (min(1.0, (s + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    text_items = cycle_batches([text_probe(t) for t in texts], text_batch, seed)
    fact_items = cycle_batches(list(facts), fact_batch, seed + 1) if facts else None
    done = checkpoint.restore(model, opt) if checkpoint else 0
    for _ in range(done):  # the batches those steps took
        next(text_items)
        if fact_items:
            next(fact_items)
    if done and progress:
        progress(f"teaching: going on from the state saved after {done} of {steps} steps")
    model.train()
    steps_bar = (bar(range(done, steps), desc="teaching", unit="step", total=steps, initial=done) if progress
                 else range(done, steps))
    start, announced = time.perf_counter(), False
    saved = start
    for step in steps_bar:
        chunks = [next(text_items)] + ([next(fact_items)] if fact_items else [])
        opt.zero_grad(set_to_none=True)
        if apart:
            for chunk in chunks:
                (answer_nll(model, encode(tokenizer, chunk, device=device)).sum() / sum(map(len, chunks))).backward()
        else:
            answer_nll(model, encode(tokenizer, sum(chunks, []), device=device)).mean().backward()
        for group in opt.param_groups:
            group["lr"] = rate(step)
        opt.step()
        now = time.perf_counter()
        if progress and not announced and (step + 1 - done == min(RATE_STEPS * 4, steps - done)
                                           or now - start > RATE_SECONDS):
            announced, per_step = True, (now - start) / (step + 1 - done)
            progress(f"teaching {len(texts)} texts and {len(facts)} questions: {per_step:.2f} s a step measured, "
                     f"about {duration(per_step * (steps - done))} for {steps - done} steps")
        if checkpoint and step + 1 < steps and now - saved >= checkpoint.every:
            checkpoint.save(step + 1, model, opt)
            saved = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    model.eval()
    return done


@torch.no_grad()
def answered_share(model: torch.nn.Module, tokenizer: Any, probes: Sequence[Probe], max_new_tokens: int = 8,
                   batch_size: int = 64) -> float:
    """% of ``probes`` whose greedy answer (up to a new line) counts as answered: ROUGE-L
    recall of the reference at least :data:`~r2f_bench.engine.metrics.ANSWERED_RECALL`, as scored runs count it."""
    from .metrics import ANSWERED_RECALL, rouge_l_recall

    device = next(model.parameters()).device
    hits = 0
    for chunk in batches(list(probes), batch_size):
        prompts = [p.prompt for p in chunk]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left",
                        **special_tokens(tokenizer, prompts[0])).to(device)
        ids = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        outs = tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        hits += sum(rouge_l_recall(p.answer, o.split("\n")[0]) >= ANSWERED_RECALL for p, o in zip(chunk, outs))
    return 100.0 * hits / max(len(probes), 1)


def checked(items: Sequence[T]) -> list[T]:
    """The seeded sample of up to :data:`CHECK_ITEMS` of ``items`` a taught model is asked."""
    return random.Random(0).sample(list(items), min(CHECK_ITEMS, len(items)))


def world_answers(model: torch.nn.Module, tokenizer: Any, facts: Sequence[Probe], check: Sequence[Probe]) -> dict:
    """What a model taught a knowledge world answers: the % of (up to :data:`CHECK_ITEMS`
    of) its taught questions and of never-taught ones (``check``: its generalisation)."""
    return {"taught_answered": answered_share(model, tokenizer, checked(facts)),
            "never_taught_answered": answered_share(model, tokenizer, checked(check)) if check else None,
            "check_items": min(CHECK_ITEMS, len(check))}


def answers_phrase(info: dict) -> str:
    """How labels and progress lines state :func:`world_answers`' shares."""
    never = info.get("never_taught_answered")
    unseen = f" and {never:.0f}% of never-taught" if never is not None else ""
    return f"answers {info['taught_answered']:.0f}% of taught{unseen} questions"
