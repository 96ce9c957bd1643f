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
* the **utility set** (GUR) and the **general prompts** (identity alignment).

An *evaluated string* is what a scored item asks: a probe's question (a cloze with its
blank filled by the answer: the statement it tests), a utility question, a general
prompt. A method-visible text **leaks** it when, after :func:`normalise` (case,
whitespace, punctuation), the two are equal, or their longest common run of
consecutive words covers at least :data:`NEAR_COPY_PERCENT` % of the evaluated string's
words and at least :data:`MIN_WORDS` words (:func:`needed`), and is not template wording
that many evaluated strings share (:data:`COMMON_SHARE`): a near-copy such as
"lee was born on november 27 1940 in san francisco" leaks RWKU's "Bruce Lee was born
on November 27, 1940" although it drops the first name. :class:`Scored` indexes the
evaluated strings by their word :data:`MIN_WORDS`-grams, so a visible text is checked
in one pass over its words. :func:`find_leaks` checks every method-visible text;
:func:`hold_out` removes whatever leaks what an evaluation target is scored on from the
requests, the dev split (benchmarks such as RWKU share neighbour and utility items
between targets) and the paraphraser's sources, the corpus scrub (:meth:`Scored.scrub`)
removes the sentences a near-copy runs through, and :func:`check` makes a run
(:class:`r2f_bench.engine.run.Run`) refuse a benchmark that still leaks.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Iterable, Iterator, Sequence

from ..data import Benchmark, Probe, Target, Teaching
from ..errors import UserError

BLANK = re.compile(r"_{2,}")
SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# a common run shorter than this is too common to call a leak ("Paris", "born in 1947");
# equal strings always count
MIN_WORDS = 4
# a run of consecutive words covering this share of an evaluated string leaks it
NEAR_COPY_PERCENT = 60
# ... unless it is template wording: a run each of whose MIN_WORDS-grams occurs in at least
# this share of the benchmark's evaluated strings (and in at least COMMON_MIN of them), such
# as WMDP's "which of these is" or WaterDrum's "what kind of books does"
COMMON_SHARE = 0.01
COMMON_MIN = 3

Words = tuple[str, ...]


def normalise(text: str) -> str:
    """Lower case, every run of non-alphanumeric characters as one space, stripped."""
    return " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split())


def words(text: str) -> Words:
    """The words of ``text`` after :func:`normalise`."""
    return tuple(normalise(text).split())


def needed(n: int) -> int:
    """The shortest common run of consecutive words that leaks an ``n``-word evaluated
    string (more than ``n``: only equality leaks it)."""
    return max(MIN_WORDS, -(-NEAR_COPY_PERCENT * n // 100))


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
    """An evaluated string a method-visible text equals or near-copies."""

    evaluated: str  # the scored item, as written
    role: str  # e.g. "rwku target 1_Stephen_King, probe set forget_qa"
    seen_in: str  # where a method sees it, e.g. "the request of 1_Stephen_King"
    run: int = 0  # the common run of words, when not an equal string

    def __str__(self) -> str:
        run = f" ({self.run} of its {len(words(self.evaluated))} words in a row)" if self.run else ""
        return f"{self.role} item {self.evaluated[:80]!r} appears in {self.seen_in}{run}"


def evaluated_items(bench: Benchmark) -> list[tuple[str, str]]:
    """(string, role) of everything scored on the evaluation targets, seen sets excluded."""
    items = [(asked(p), f"target {t.id}, probe set {s}")
             for t in bench.targets for s, ps in t.probes.items() if s not in bench.seen_sets for p in ps]
    items += [(asked(p), "utility set") for p in bench.utility]
    items += [(text, "identity-alignment prompts") for text in bench.general_prompts]
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
               first_only: bool = False, wording: Iterable[str] | None = None) -> list[Leak]:
    """The evaluated items a visible text leaks (equal, or a near-copy: see the module), each
    with the first text that leaks it, in the order of ``evaluated``; with ``first_only``,
    one item of the first leaking text."""
    items = list(evaluated)
    scored = Scored((item for item, _ in items), wording)
    found: dict[int, tuple[str, int]] = {}  # scored string -> (where, run; 0 for an equal string)
    for text, where in _distinct(visible):
        for k, run in scored.leaks(text).items():
            found.setdefault(k, (where, run))
        if first_only and found:
            break
    leaks = [Leak(item, role, *found[k]) for item, role in items if (k := scored.id.get(words(item))) in found]
    return leaks[:1] if first_only else leaks


def taught_leaks(bench: Benchmark, teaching: Teaching) -> list[Leak]:
    """The items scored on ``bench`` (the evaluation and dev targets' probes, seen sets
    excluded, the utility set and the identity-alignment prompts) that a string ``teaching``
    teaches equals or near-copies: taught knowledge is checked like what a method sees (real
    data taught into a model leaks every probe: taught-string recall)."""
    evaluated = evaluated_items(bench) + [(asked(p), f"dev target {t.id}, probe set {s}") for t in bench.dev_targets
                                          for s, ps in t.probes.items() if s not in bench.seen_sets for p in ps]
    taught = [(text, "the taught texts") for text in teaching.texts]
    taught += [(x, "the taught facts") for p in teaching.facts for x in visible_texts(p)]
    return find_leaks(evaluated, taught)


def _distinct(visible: Iterable[tuple[str, str]]) -> Iterator[tuple[Words, str]]:
    """Visible (words, where), each text once, where it is first seen."""
    seen: set[Words] = set()
    for text, where in visible:
        if (w := words(text)) not in seen:
            seen.add(w)
            yield w, where


def check(bench: Benchmark, task: str) -> None:
    """Refuse ``bench`` with one line naming the first evaluated item a method could see (a
    target whose request empties is the run's to skip, with a warning)."""
    leaks = find_leaks(evaluated_items(bench), method_visible(bench), first_only=True)
    if leaks:
        raise UserError(f"{task}: {leaks[0]}; a method must never see what it is scored on "
                        f"(fix the task's request or dev split: see docs/tasks.md).")


def check_views(target: Target, views: list[list[Probe]], bench: Benchmark, request_of: Target | None = None) -> None:
    """Refuse paraphrased views that happen to reproduce an evaluated string of ``target``.
    Views of another target's request (``request_of``: ``--control other_request``) are checked
    whole, the request itself included, against every probe set of ``target``, seen sets too:
    none of them is made of that request."""
    own = request_of is None or request_of.id == target.id
    evaluated = [(asked(p), f"target {target.id}, probe set {s}")
                 for s, ps in target.probes.items() if not own or s not in bench.seen_sets for p in ps]
    where = f"a paraphrased view of {target.id}'s request" if own else f"a view of {request_of.id}'s request"
    visible = [(x, where) for v in (views[1:] if own else views) for p in v for x in visible_texts(p)]
    leaks = find_leaks(evaluated, visible, first_only=True, wording=(s for s, _ in evaluated_items(bench)))
    if leaks:
        raise UserError(f"{leaks[0]}; choose another --paraphraser or fewer --views.")


def _grams(w: Words) -> list[Words]:
    return [w[i:i + MIN_WORDS] for i in range(len(w) - MIN_WORDS + 1)]


class Scored:
    """Evaluated strings, indexed by their word :data:`MIN_WORDS`-grams, asking whether a
    visible text leaks one (equal, or a near-copy)."""

    def __init__(self, strings: Iterable[str], wording: Iterable[str] | None = None) -> None:
        """``wording``: the evaluated strings whose word counts tell template wording (default:
        ``strings``; a check of one target's probes passes the whole benchmark's)."""
        self.strings: list[Words] = list(dict.fromkeys(w for w in map(words, strings) if w))
        self.id = {w: k for k, w in enumerate(self.strings)}
        corpus = self.strings if wording is None else list(dict.fromkeys(map(words, wording)))
        counts = Counter(g for w in corpus for g in set(_grams(w)))
        self.template = {g for g, c in counts.items() if c >= max(COMMON_MIN, COMMON_SHARE * len(corpus))}
        self.grams: dict[Words, list[tuple[int, int]]] = defaultdict(list)  # gram -> (string, position)
        for k, w in enumerate(self.strings):
            if needed(len(w)) <= len(w):
                for i in range(len(w) - MIN_WORDS + 1):
                    self.grams[w[i:i + MIN_WORDS]].append((k, i))

    def runs(self, text: Sequence[str]) -> Iterator[tuple[int, int, int]]:
        """(string, start in ``text``, length) of every maximal common run of words long
        enough to leak its evaluated string."""
        for j in range(len(text) - MIN_WORDS + 1):
            for k, i in self.grams.get(tuple(text[j:j + MIN_WORDS]), ()):
                s = self.strings[k]
                if i and j and s[i - 1] == text[j - 1]:
                    continue  # inside a run that starts earlier
                n = MIN_WORDS
                while i + n < len(s) and j + n < len(text) and s[i + n] == text[j + n]:
                    n += 1
                if n >= needed(len(s)) and not self.template.issuperset(_grams(s[i:i + n])):
                    yield k, j, n

    def leaks(self, text: Words) -> dict[int, int]:
        """The evaluated strings ``text`` (words) leaks, with the longest run (0: equal)."""
        out: dict[int, int] = {self.id[text]: 0} if text in self.id else {}
        for k, _, n in self.runs(text):
            if out.get(k, -1) != 0:
                out[k] = max(out.get(k, 0), n)
        return out

    def contains(self, *texts: str) -> bool:
        """Whether any of ``texts`` leaks an evaluated string."""
        return any(self.leaks(words(text)) for text in texts)

    def keep(self, probes: Iterable[Probe]) -> list[Probe]:
        """``probes`` without those a method must not see."""
        return [p for p in probes if not self.contains(*visible_texts(p))]

    def scrub(self, text: str) -> str:
        """``text`` without the sentences that equal an evaluated string or that a leaking run
        of words passes through (a run may span sentences: all of them go)."""
        sentences = [(s, words(s)) for s in SENTENCE.split(text) if s.strip()]
        while True:
            owner = [k for k, (_, w) in enumerate(sentences) for _ in w]
            flat = [x for _, w in sentences for x in w]
            drop = {owner[p] for _, j, n in self.runs(flat) for p in range(j, j + n)}
            drop |= {k for k, (_, w) in enumerate(sentences) if w in self.id}
            if not drop:
                return " ".join(s for s, _ in sentences)
            sentences = [x for k, x in enumerate(sentences) if k not in drop]


def hold_out(bench: Benchmark) -> Benchmark:
    """``bench`` with every method-visible item that leaks what an evaluation target is
    scored on removed: from the evaluation targets' requests (and their seen sets, so a
    removed fact is not reported as seen; the run skips a target whose request
    empties, with a warning), the dev split (a dev target whose request empties is
    dropped) and the paraphraser's sources."""
    scored = Scored(s for s, _ in evaluated_items(bench))
    targets = [replace(t, request=scored.keep(t.request),
                       probes={s: scored.keep(ps) if s in bench.seen_sets else ps for s, ps in t.probes.items()})
               for t in bench.targets]
    dev = [replace(t, request=scored.keep(t.request), probes={s: scored.keep(ps) for s, ps in t.probes.items()})
           for t in bench.dev_targets]
    alternatives = {q: kept for q, ps in bench.alternatives.items() if (kept := scored.keep(ps))}
    return replace(bench, targets=targets, dev_targets=[t for t in dev if t.request], alternatives=alternatives)
