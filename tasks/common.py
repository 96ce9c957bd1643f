"""Helpers shared by the benchmarks: the data folder, choosing targets, chunking,
prompt formats, greedy/sampled generation and ROC AUC."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TypeVar

import torch

from ..data import Probe
from ..errors import UserError

T = TypeVar("T")

SAMPLE_SOURCE = (
    "bundled sample (fictional, written for r2f-bench: a smoke test of the pipeline, too few items to read as rates; "
    "pass --data-dir with the benchmark's data)")
DEFAULT_TARGETS = 3


def qa_prompt(question: str) -> str:
    """The QA format every r2f-bench task shares with RWKU."""
    return f"Question: {question}\nAnswer:"


def corpus_probes(text: str, target: str, words: int, prompt_words: int, set_name: str = "request") -> list[Probe]:
    """A document as request items: windows of ``words`` words, each its first
    ``prompt_words`` words (at most half the window) -> the rest."""
    probes = []
    for window in chunks(text.split(), words):
        cut = min(prompt_words, len(window) // 2)
        if cut:
            prompt = " ".join(window[:cut])
            probes.append(Probe(prompt=prompt, answer=" ".join(window[cut:]), set=set_name, target=target,
                                question=prompt))
    return probes


def seen_probes(request: Sequence[Probe], set_name: str, answer_words: int, limit: int) -> list[Probe]:
    """Probes of a corpus request's own strings (the seen set): each of the first ``limit``
    items' prompt, answered by the first ``answer_words`` words of its continuation."""
    return [Probe(prompt=p.prompt, answer=" ".join(p.answer.split()[:answer_words]), set=set_name,
                  target=p.target, question=p.question) for p in request[:limit]]


def chunks(items: Sequence[T], size: int) -> list[list[T]]:
    """Consecutive pieces of at most ``size`` items."""
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def even_split(items: Sequence[T], n: int) -> list[list[T]]:
    """``n`` consecutive pieces whose sizes differ by at most one (some may be empty)."""
    q, r = divmod(len(items), n)
    bounds = [i * q + min(i, r) for i in range(n + 1)]
    return [list(items[bounds[i]:bounds[i + 1]]) for i in range(n)]


def select_targets(ids: list[str], wanted: list[str] | None, limit: int | None, task: str,
                   groups: Mapping[str, list[str]] | None = None,
                   aliases: Iterable[tuple[str, str]] = ()) -> list[str]:
    """Targets by id (or by a group name such as a domain, or ``all``; or by an alias such
    as a short id or a name, matched case-insensitively with ``_`` as a space: ``aliases``
    are (alias, id) pairs, and an alias of two targets is one line), else the first ``limit``."""
    if limit is not None and limit < 1:
        raise UserError(f"--limit must be at least 1, got {limit}.")
    if not wanted:
        return ids[:limit or DEFAULT_TARGETS]
    groups = {"all": ids, **(groups or {})}
    aliases = list(aliases)
    wanted = _rejoined(wanted, [*ids, *(alias for alias, _ in aliases)])
    names: dict[str, list[str]] = {}
    for alias, target in aliases:
        names.setdefault(_name_key(alias), [])
        if target not in names[_name_key(alias)]:
            names[_name_key(alias)].append(target)
    chosen: list[str] = []
    for w in wanted:
        alias = names.get(_name_key(w), [])
        if w not in ids and w not in groups and len(alias) > 1:
            raise UserError(f"{task} target {w!r} names {len(alias)} targets ({', '.join(alias)}); pass one of them "
                            f"by its full id.")
        hits = groups.get(w, [w] if w in ids else alias)
        if not hits:
            raise UserError(f"unknown {task} target {w!r}; use an id like {ids[0]!r}, "
                            f"or one of: {', '.join(groups)}.")
        chosen += [h for h in hits if h not in chosen]
    return chosen[:limit] if limit else chosen


def _name_key(name: str) -> str:
    """A name as matched: case, ``_`` for a space and the spacing around commas ignored."""
    return " ".join(name.replace("_", " ").replace(",", ", ").lower().split()).replace(" ,", ",")


def _rejoined(wanted: list[str], known: list[str]) -> list[str]:
    """``wanted`` (a comma-separated list, split) with its pieces joined back where together
    they name a known target that holds a comma itself (RWKU's ``10_Prince_Harry,_Duke_of_Sussex``)."""
    with_comma = {_name_key(k) for k in known if "," in k}
    out, i = [], 0
    while i < len(wanted):
        j = next((j for j in range(len(wanted), i + 1, -1) if _name_key(",".join(wanted[i:j])) in with_comma), i + 1)
        out.append(",".join(wanted[i:j]))
        i = j
    return out


def dev_ids(ids: list[str], chosen: list[str], n_dev: int) -> list[str]:
    """``n_dev`` targets disjoint from ``chosen``, taken from the end of the list."""
    return [i for i in reversed(ids) if i not in chosen][:n_dev]


def resolve_root(data_dir: Path | None, sample: Path, what: str = "the benchmark's folder") -> tuple[Path, str]:
    """The folder to read (``None``: the bundled ``sample``) and how results name its source."""
    root = Path(data_dir) if data_dir is not None else sample
    check_dir(root, what)
    return root, SAMPLE_SOURCE if data_dir is None else str(root)


def check_dir(root: Path, what: str) -> None:
    """One line when ``--data-dir`` is missing or is a file."""
    if root.is_file():
        raise UserError(f"data dir {root} is a file; pass --data-dir pointing at {what}.")
    if not root.is_dir():
        raise UserError(f"data dir {root} does not exist; pass --data-dir pointing at {what}.")


def cut_before(text: str, stops: Sequence[str]) -> str:
    """``text`` up to the first occurrence of any of ``stops``."""
    for stop in stops:
        text = text.split(stop)[0]
    return text


@torch.no_grad()
def generate(model: torch.nn.Module, tokenizer: Any, prompts: Sequence[str], max_new_tokens: int,
             samples: int = 0, stop: Sequence[str] = (), seed: int = 0, batch_size: int = 8) -> list[list[str]]:
    """Continuations of each prompt, cut before any of ``stop`` (after generating, which
    is cheaper than transformers' stop strings): one greedy (``samples=0``) or ``samples``
    drawn at temperature 1 without top-k/top-p truncation (seeded; the global RNG is
    left as it was)."""
    device = next(model.parameters()).device
    limit = getattr(model.config, "max_position_embeddings", None)
    was_training = model.training
    model.eval()
    n = max(samples, 1)
    sampling = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, num_return_sequences=n) \
        if samples else dict(do_sample=False)
    out: list[list[str]] = []
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        for i in range(0, len(prompts), batch_size):
            enc = tokenizer(list(prompts[i:i + batch_size]), return_tensors="pt", padding=True,
                            padding_side="left").to(device)
            width = enc["input_ids"].shape[1]
            new = min(max_new_tokens, limit - width) if limit else max_new_tokens
            if new < 1:
                out += [[""] * n for _ in range(enc["input_ids"].shape[0])]
                continue
            ids = model.generate(**enc, max_new_tokens=new, pad_token_id=tokenizer.pad_token_id, **sampling)
            texts = [cut_before(t, stop) for t in tokenizer.batch_decode(ids[:, width:], skip_special_tokens=True)]
            out += [texts[j:j + n] for j in range(0, len(texts), n)]
    model.train(was_training)
    return out


def auroc(negatives: Sequence[float], positives: Sequence[float]) -> float:
    """Area under the ROC curve of scores where higher means "positive": the chance a
    random positive outscores a random negative, ties counting one half (Mann-Whitney U,
    equal to the trapezoidal ROC AUC)."""
    if not negatives or not positives:
        raise ValueError("AUC needs at least one negative and one positive score")
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def name_mentions(name: str, neighbours: Sequence[Probe], set_name: str) -> list[Probe]:
    """The name-mention control of a target called ``name``: its neighbour probes (facts of
    other people or things, which must stay) asked with the name before them. A method
    that forgets what is known of the target leaves them as answered as the plain
    neighbours (locality); one that breaks whatever names the target does not."""
    return [dataclasses.replace(p, prompt=f"{name}: {p.prompt}", set=set_name) for p in neighbours]
