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

    @classmethod
    def from_row(cls, row: dict) -> "Probe":
        choices = row.get("choices")
        return cls(prompt=row["prompt"], answer=row["answer"], set=row["set"],
                   target=row["target"], question=row.get("question", ""),
                   choices=tuple(choices) if choices is not None else None,
                   label=row.get("label"))


@dataclass
class Target:
    """A deletion target: what the request names, and the probes that judge it."""

    id: str
    name: str
    request: list[Probe]  # the facts a deletion request asks to remove
    probes: dict[str, list[Probe]]  # evaluation probe sets, by set name
    description: str = ""

    def forget_probes(self, sets: tuple[str, ...]) -> list[Probe]:
        return [p for s in sets for p in self.probes.get(s, [])]


@dataclass
class Benchmark:
    """Everything a task loaded for one run."""

    task: str
    targets: list[Target]  # evaluation targets
    dev_targets: list[Target]  # disjoint dev split: step sizes, decoder fitting, retain pool
    utility: list[Probe]  # general-utility probes (GUR)
    general_prompts: list[str]  # prompts for model identity alignment (MIA)
    source: str  # where the data came from, e.g. a path or "bundled sample"
    revision: str  # content hash of the data files read
    # the benchmark's own other phrasings of a fact, by question (see views.BenchmarkParaphraser)
    alternatives: dict[str, list[Probe]] = field(default_factory=dict)

    def retain_pool(self) -> list[Probe]:
        """Known facts that no evaluation probe asks about: dev targets' requests."""
        return [p for t in self.dev_targets for p in t.request]

    def teaching_set(self) -> list[Probe]:
        """Every fact an embedded model must know before anything is unlearned."""
        facts = [p for t in self.targets + self.dev_targets for p in t.request]
        facts += [p for t in self.targets + self.dev_targets for ps in t.probes.values() for p in ps]
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

    target: Target
    views: list[list[Probe]]
    retain: list[Probe] = field(default_factory=list)

    @property
    def facts(self) -> list[Probe]:
        return self.views[0]
