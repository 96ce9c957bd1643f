"""Data types shared by tasks, methods and metrics: probes, targets, forget requests."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Probe:
    """One question put to a model, with the answer it is scored against.

    ``prompt`` is the exact text fed to the model (the task formats it once, and
    teaching, unlearning and lm-eval all use that same string). ``question`` is the
    raw query, the thing paraphrasers rewrite. Multiple-choice probes also carry
    ``choices`` and the index ``label`` of the correct one (then ``answer`` is
    ``choices[label]``).
    """

    prompt: str
    answer: str
    set: str
    target: str
    question: str = ""
    choices: tuple[str, ...] | None = None
    label: int | None = None

    def to_row(self) -> dict:
        row = {"prompt": self.prompt, "answer": self.answer, "set": self.set,
               "target": self.target, "question": self.question}
        if self.choices is not None:
            row.update(choices=list(self.choices), label=self.label)
        return row


@dataclass
class Target:
    """A deletion target: its forget request, and the probes that judge it.

    ``request`` is all a method may see about what to forget (the benchmark's forget
    corpus or facts, as its authors define the request); ``probes`` are the evaluation
    sets, which never share a string with the request except in the benchmark's
    declared seen sets (:attr:`Benchmark.seen_sets`, see :mod:`r2f_bench.engine.protocol`).
    """

    id: str
    name: str
    request: list[Probe]  # what the deletion request gives a method
    probes: dict[str, list[Probe]]  # evaluation probe sets, by set name
    description: str = ""


@dataclass(frozen=True)
class Teaching:
    """What an embedded model is taught before anything is unlearned.

    ``texts`` are language-modelled whole (a knowledge world's biographies), ``facts``
    are taught on their answers, ``check`` are never-taught questions whose answers
    the taught model should still give (its generalisation, reported in its label).
    ``strings``: the facts include the scored probes themselves, so a probe answered
    is a taught string recalled, not knowledge (real benchmark data on an embedded model).
    """

    texts: tuple[str, ...] = ()
    facts: tuple[Probe, ...] = ()
    check: tuple[Probe, ...] = ()
    strings: bool = False


@dataclass
class Benchmark:
    """Everything a task loaded for one run."""

    task: str
    targets: list[Target]  # evaluation targets
    dev_targets: list[Target]  # disjoint dev split: step sizes, decoder fitting, retain pool
    utility: list[Probe]  # general-utility probes (GUR)
    general_prompts: list[str]  # prompts for identity alignment
    source: str  # where the data came from, e.g. a path or "bundled sample"
    revision: str  # content hash of the data files read
    # the benchmark's own other phrasings of a request item, by question (see
    # views.BenchmarkParaphraser); built from request strings only
    alternatives: dict[str, list[Probe]] = field(default_factory=dict)
    # probe sets made of the request's own strings by the benchmark's design (reported
    # as ``usr_seen``, never as the headline USR)
    seen_sets: tuple[str, ...] = ()
    # what the request is made of, in words (recorded with every result)
    request_source: str = ""
    # what the data set defines as an embedded model's knowledge (a synthetic world);
    # None: every string of the benchmark (see :meth:`teaching_set`)
    world: Teaching | None = None
    # probe sets that are controls (the name-mention control): scored, never taught
    controls: tuple[str, ...] = ()

    def retain_pool(self) -> list[Probe]:
        """Retain data a method may use: the dev targets' requests (no evaluation
        target is scored on them: :func:`r2f_bench.engine.protocol.hold_out`)."""
        return [p for t in self.dev_targets for p in t.request]

    def teaching_set(self) -> list[Probe]:
        """Every string of the benchmark, for data that defines no world: every request,
        every probe (all phrasings) but the :attr:`controls`, the utility set. A model
        taught this recalls strings; it does not generalise from a corpus to its probes."""
        facts = [p for t in self.targets + self.dev_targets for p in t.request]
        facts += [p for t in self.targets + self.dev_targets for s, ps in t.probes.items() if s not in self.controls
                  for p in ps]
        facts += self.utility
        unique = {(p.prompt, p.answer): p for p in facts}
        return list(unique.values())


@dataclass
class ForgetRequest:
    """One deletion request as every method sees it.

    ``views[0]`` is the request's own phrasing of each fact; ``views[i]`` for i > 0
    is the i-th accepted paraphrase of each fact (facts with fewer paraphrases
    repeat their last one). All methods get the same views and the same ``retain``
    facts, so comparisons are fair.
    """

    target: str  # the target's id (a method gets its request, never its evaluation probes)
    views: list[list[Probe]]
    retain: list[Probe] = field(default_factory=list)
    name: str = ""  # the target's name, e.g. "Stephen King"

    @property
    def facts(self) -> list[Probe]:
        return self.views[0]
