"""The evaluation protocol's first rule: no method ever sees what it is scored on.

A benchmark holds four kinds of data, kept apart:

* the **forget request** of each evaluation target (``Target.request``): all a method
  may see about what to forget, and the source of its paraphrased views;
* the **evaluation probes** (``Target.probes``): held-out forget probes (the headline
  USR), locality (neighbour) probes, and *seen* sets, which a benchmark builds from the
  request's own strings on purpose (MUSE's VerbMem, a fact-level RWKU request) and
  which are reported apart, as ``usr_seen``;
* the **retain data** a method may use, and the whole dev split (its targets' requests
  and probes: methods tune and fit on them, R2F fits its decoder there);
* the **utility set** (GUR) and the **general prompts** (MIA).

An *evaluated string* is what a scored item asks: a probe's question (a cloze with its
blank filled by the answer: the statement it tests), a utility question, a general
prompt. :func:`find_leak` looks for every evaluated string, after :func:`normalise`
(case, whitespace, punctuation), inside every method-visible text; :func:`hold_out`
removes from the dev split whatever an evaluation target is scored on (benchmarks such
as RWKU share neighbour and utility items between targets), and :func:`check` makes
the runner refuse a benchmark that still leaks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Iterable

from .data import Benchmark, Probe, Target
from .errors import UserError

BLANK = re.compile(r"_{2,}")
# an evaluated string shorter than this (after normalisation) is too common to call a leak
# when it appears inside a longer text ("Paris", "1947"); equal strings always count
MIN_WORDS = 4


def normalise(text: str) -> str:
    """Lower case, every run of non-alphanumeric characters as one space, stripped."""
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def asked(probe: Probe) -> str:
    """What a probe asks: its question, a cloze's blank filled with the answer."""
    question = probe.question or probe.prompt
    return BLANK.sub(probe.answer, question) if BLANK.search(question) else question


def visible_texts(probe: Probe) -> tuple[str, ...]:
    """The strings a method sees of one request, retain or dev item (a cloze also as
    the statement it makes)."""
    return (probe.prompt, probe.question, f"{probe.prompt} {probe.answer}", asked(probe))


@dataclass(frozen=True)
class Leak:
    """An evaluated string found inside a method-visible text."""

    evaluated: str  # the scored item, as written
    role: str  # e.g. "rwku target 1_Stephen_King, probe set forget_qa"
    seen_in: str  # where a method sees it, e.g. "the request of 1_Stephen_King"

    def __str__(self) -> str:
        return f"{self.role} item {self.evaluated[:80]!r} appears in {self.seen_in}"


def evaluated_items(bench: Benchmark) -> list[tuple[str, str]]:
    """(string, role) of everything scored on the evaluation targets, seen sets excluded."""
    items = [(asked(p), f"target {t.id}, probe set {s}")
             for t in bench.targets for s, ps in t.probes.items() if s not in bench.seen_sets for p in ps]
    items += [(asked(p), "utility set") for p in bench.utility]
    items += [(text, "MIA prompts") for text in bench.general_prompts]
    return items


def method_visible(bench: Benchmark) -> list[tuple[str, str]]:
    """(text, where) of everything a method may see: requests, retain data, the dev split
    (requests and probes) and the paraphraser's sources."""
    out = [(x, f"the request of {t.id}") for t in bench.targets for p in t.request for x in visible_texts(p)]
    out += [(x, f"dev target {t.id}") for t in bench.dev_targets
            for p in t.request + [q for ps in t.probes.values() for q in ps] for x in visible_texts(p)]
    out += [(x, "the retain data") for p in bench.retain_pool() for x in visible_texts(p)]
    out += [(x, "the paraphraser's sources") for ps in bench.alternatives.values() for p in ps for x in visible_texts(p)]
    return out


def find_leaks(evaluated: Iterable[tuple[str, str]], visible: Iterable[tuple[str, str]],
               first_only: bool = False) -> list[Leak]:
    """Evaluated strings that occur (normalised) in a visible text: equal to it, or inside
    it when at least :data:`MIN_WORDS` words long."""
    texts: dict[str, str] = {}
    for text, where in visible:
        texts.setdefault(normalise(text), where)
    haystack = "\n".join(texts)
    found: list[Leak] = []
    for item, role in evaluated:
        needle = normalise(item)
        if not needle:
            continue
        if needle in texts:
            where = texts[needle]
        elif len(needle.split()) >= MIN_WORDS and needle in haystack:
            where = next(w for t, w in texts.items() if needle in t)
        else:
            continue
        found.append(Leak(item, role, where))
        if first_only:
            break
    return found


def check(bench: Benchmark, task: str) -> None:
    """Refuse ``bench`` with one line naming the first evaluated item a method could see."""
    leaks = find_leaks(evaluated_items(bench), method_visible(bench), first_only=True)
    if leaks:
        raise UserError(f"{task}: {leaks[0]}; a method must never see what it is scored on "
                        f"(fix the task's request or dev split: see docs/tasks.md).")


def check_views(target: Target, views: list[list[Probe]], bench: Benchmark) -> None:
    """Refuse paraphrased views that happen to reproduce an evaluated string of ``target``."""
    evaluated = [(asked(p), f"target {target.id}, probe set {s}")
                 for s, ps in target.probes.items() if s not in bench.seen_sets for p in ps]
    visible = [(x, f"a paraphrased view of {target.id}'s request") for v in views[1:] for p in v for x in visible_texts(p)]
    leaks = find_leaks(evaluated, visible, first_only=True)
    if leaks:
        raise UserError(f"{leaks[0]}; choose another --paraphraser or fewer --views.")


class Scored:
    """Evaluated strings, normalised, asking whether a visible text contains one."""

    def __init__(self, strings: Iterable[str]) -> None:
        self.exact = {n for n in map(normalise, strings) if n}
        self.long = [s for s in self.exact if len(s.split()) >= MIN_WORDS]

    def contains(self, *texts: str) -> bool:
        """Whether any of ``texts`` equals or (for a long string) contains an evaluated string."""
        for text in map(normalise, texts):
            if text in self.exact or any(s in text for s in self.long):
                return True
        return False

    def keep(self, probes: Iterable[Probe]) -> list[Probe]:
        """``probes`` without those a method must not see."""
        return [p for p in probes if not self.contains(*visible_texts(p))]

    def scrub(self, text: str) -> str:
        """``text`` without the sentences that contain an evaluated string."""
        sentences = re.split(r"(?<=[.!?])\s+|\n+", text)
        return " ".join(s for s in sentences if s.strip() and not self.contains(s))


def hold_out(bench: Benchmark) -> Benchmark:
    """``bench`` with every dev-split item that an evaluation target is scored on removed
    (a dev target whose request empties is dropped); evaluation targets are untouched."""
    scored = Scored(s for s, _ in evaluated_items(bench))
    dev = [replace(t, request=scored.keep(t.request), probes={s: scored.keep(ps) for s, ps in t.probes.items()})
           for t in bench.dev_targets]
    return replace(bench, dev_targets=[t for t in dev if t.request])
