"""A synthetic knowledge world in RWKU's official layout: knowledge, not strings.

Following Allen-Zhu & Li (*Physics of Language Models, Part 3.1*, 2023), a small model
answers questions about people whose questions it never saw only when every person has
several biographies (varied sentence templates, shuffled order, the full name in every
sentence) and other people's question answering is mixed into its training. This module
generates such a world deterministically from a seed and writes it as RWKU's
``Target/<id>_<Name>/*.json`` so the RWKU loader, metrics and lm-eval YAMLs read it
unchanged, plus ``teaching.json``: all an embedded model is taught.

Who is who (people are split by a seeded shuffle):

* **QA-train** people: their biographies and their QA (taught templates) are taught,
  with general facts about places and firms.
* **Targets** (evaluation, then dev, in id order; the loader takes dev targets from the
  end): biographies taught, nothing else. Their forget corpus (``positive.json``) is
  their biographies; FB clozes use sentence templates no biography uses, QA the taught
  question templates plus one template never taught for anyone, AA indirect phrasings.
* **Bystanders**: biographies taught, QA never taught; a target's neighbours (same
  surname, birth city or employer) come from them, probed on the same templates. The
  utility set (GUR) is bystanders' questions in every wording a target is asked: never
  taught for them, so GUR weighs knowledge that generalises, of the kinds USR scores,
  and damage to it cannot pass for forgetting.

No probe of a target or a neighbour is ever taught, in any phrasing; identity-alignment
texts (the paper's "MIA") are biographies of people outside the world. ``diagnostics.json`` holds the never-taught
question template asked of QA-train people (acceptance check A2, never loaded by runs).

``python -m r2f_bench.tasks.rwku.world --seed 0 --out DIR`` writes a world.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from ...atomic import atomic_dir, set_aside, write_fully
from ...cache import cache_root
from . import world_text
from .world_text import (AA, ATTRIBUTES, BIO, CODAS, DISTRICTS, FB, GENERAL, LAST, NEW_QA, ONSETS, QA, UTILITY,
                         UTILITY_WORDINGS, VOWELS)

WORLD_VERSION = "1"
TEACHING_FILE = "teaching.json"
MANIFEST_FILE = "manifest.json"
DIAGNOSTICS_FILE = "diagnostics.json"

@dataclass(frozen=True)
class WorldConfig:
    """The sizes of a world: people, biographies per person, and the split."""

    seed: int = 0
    # 160, not 320: on the 0.2M-parameter demo target, 320 people share too few weights for
    # a plain method to remove one person without the rest (gradient ascent forgot 19-25 %
    # at GUR 95 wherever the model generalised); at 160 it forgets 59-75 % on world seeds
    # 0-2 while the model still answers 73-95 % of never-taught questions (docs/testbed.md)
    people: int = 160
    bios: int = 5
    targets: int = 32  # evaluation + dev targets (the loader takes dev targets from the end)
    qa_train: float = 0.5  # share of the other people whose QA is taught
    outsiders: int = 60  # people outside the world: their biographies are the identity-alignment texts


@dataclass(frozen=True)
class Person:
    name: str
    facts: dict[str, str]


def first_name(rng: random.Random) -> str:
    syllables = [rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(rng.choice((1, 2)))]
    return ("".join(syllables) + rng.choice(CODAS)).capitalize()


def people(cfg: WorldConfig, rng: random.Random, n: int, taken: set[str]) -> list[Person]:
    """``n`` new people, each with a first name of their own, and seeded attributes."""
    out = []
    while len(out) < n:
        first = first_name(rng)
        if first not in taken:
            taken.add(first)
            out.append(Person(f"{first} {rng.choice(LAST)}", {a: rng.choice(vs) for a, vs in ATTRIBUTES.items()}))
    return out


def biographies(person: Person, n: int, rng: random.Random) -> list[str]:
    """``n`` biographies: one template per attribute, sentences in shuffled order."""
    bios = []
    for _ in range(n):
        sentences = [rng.choice(BIO[a]).format(name=person.name, v=v) for a, v in person.facts.items()]
        rng.shuffle(sentences)
        bios.append(" ".join(sentences))
    return bios


def qa_rows(person: Person, templates: dict[str, tuple[str, ...] | str], kind: str = "taught") -> list[dict]:
    """Questions about ``person``; ``kind`` says whether the templates are ever taught."""
    rows = []
    for a, v in person.facts.items():
        ts = templates[a]
        for t in (ts,) if isinstance(ts, str) else ts:
            rows.append({"subject": person.name, "attribute": a, "template": kind,
                         "query": t.format(name=person.name), "answer": v})
    return rows


def fb_rows(person: Person) -> list[dict]:
    return [{"subject": person.name, "attribute": a, "query": FB[a].format(name=person.name), "answer": v}
            for a, v in person.facts.items()]


def neighbours(target: Person, pool: list[Person], k: int = 4) -> list[Person]:
    """Up to ``k`` people sharing the target's surname, then birth city, then employer."""
    surname = target.name.split()[-1]
    keys = (lambda p: p.name.split()[-1] == surname, lambda p: p.facts["city"] == target.facts["city"],
            lambda p: p.facts["employer"] == target.facts["employer"])
    out: list[Person] = []
    for same in keys:
        out += [p for p in pool if same(p) and p not in out][:k - len(out)]
    return out[:k]


def general_facts(rng: random.Random) -> list[tuple[str, str, str]]:
    """(text, question, answer) facts about the world's cities and firms."""
    facts = []
    for kind, (text, question) in GENERAL.items():
        for v in ATTRIBUTES[kind]:
            w = rng.choice(DISTRICTS)
            facts.append((text.format(v=v, w=w), question.format(v=v), w))
    return facts


@dataclass(frozen=True)
class Cast:
    """A world's people by role, with their biographies."""

    everyone: list[Person]
    targets: list[Person]
    qa_train: list[Person]
    bystanders: list[Person]
    outsiders: list[Person]
    bios: dict[str, list[str]]


def cast(cfg: WorldConfig, rng: random.Random) -> Cast:
    """The people of ``cfg``'s world and their biographies, drawn from ``rng`` (seeded by the world)."""
    taken: set[str] = set()
    pop = people(cfg, rng, cfg.people, taken)
    outsiders = people(cfg, rng, cfg.outsiders, taken)
    targets, rest = pop[:cfg.targets], pop[cfg.targets:]
    n_train = round(cfg.qa_train * len(rest))
    bios = {p.name: biographies(p, cfg.bios, rng) for p in pop}
    return Cast(pop, targets, rest[:n_train], rest[n_train:], outsiders, bios)


def recitation(cfg: WorldConfig) -> list[dict]:
    """Bystanders' facts as their own taught biographies state them: each row is a first
    biography cut just before one fact (``text``) and the fact (``answer``). Whether a taught
    model completes them tells a teaching that never stored the biographies from one that
    stored them but cannot answer questions about them; they are taught text, not probes,
    and no run reads them (never written to the world's files)."""
    world = cast(cfg, random.Random(f"world:{cfg.seed}"))
    rows = []
    for p in world.bystanders:
        bio = world.bios[p.name][0]
        for a, v in p.facts.items():
            said = {t: t.format(name=p.name, v=v) for t in BIO[a]}
            t = next(t for t, sentence in said.items() if sentence in bio)
            cut = bio.index(said[t]) + len(t[:t.index("{v}")].format(name=p.name))  # where the template puts v
            rows.append({"subject": p.name, "attribute": a, "text": bio[:cut].rstrip(), "answer": v})
    return rows


def generate(cfg: WorldConfig) -> dict[str, object]:
    """The whole world as file contents: {relative path: JSON-able rows}."""
    rng = random.Random(f"world:{cfg.seed}")
    world = cast(cfg, rng)
    targets, qa_train, bystanders, outsiders, bios = (world.targets, world.qa_train, world.bystanders,
                                                      world.outsiders, world.bios)
    general = general_facts(rng)

    files: dict[str, object] = {}
    taught = [{"question": q["query"], "answers": [q["answer"]]} for p in qa_train for q in qa_rows(p, QA)]
    taught = rng.sample(taught, len(taught))
    taught = [{"question": q, "answers": [a]} for _, q, a in general] + taught
    near = {t.name: neighbours(t, bystanders) for t in targets}
    utility = [{"question": q["query"], "answers": [q["answer"]]} for p in bystanders
               for wording in UTILITY_WORDINGS for q in qa_rows(p, wording)]
    utility = random.Random(f"utility:{cfg.seed}").sample(utility, min(UTILITY, len(utility)))
    for i, t in enumerate(targets, start=1):
        folder = f"Target/{i}_{t.name.replace(' ', '_')}"
        files[f"{folder}/intro.json"] = [{"target": t.name, "intro": ""}]
        files[f"{folder}/positive.json"] = [{"text": b} for b in bios[t.name]]
        files[f"{folder}/forget_level1.json"] = fb_rows(t)
        files[f"{folder}/forget_level2.json"] = qa_rows(t, QA) + qa_rows(t, NEW_QA, "never_taught")
        files[f"{folder}/forget_level3.json"] = qa_rows(t, AA, "indirect")
        files[f"{folder}/neighbor_level1.json"] = [r for p in near[t.name] for r in fb_rows(p)]
        files[f"{folder}/neighbor_level2.json"] = [r for p in near[t.name] for r in qa_rows(p, {a: QA[a][0] for a in QA})]
        if i == 1:  # RWKU reads utility and identity-alignment (retain_mia) files from any target folder
            files[f"{folder}/triviaqa.json"] = utility
            files[f"{folder}/retain_mia.json"] = [{"text": biographies(p, 1, rng)[0]} for p in outsiders]
    texts = [b for p in world.everyone for b in bios[p.name]] + [text for text, _, _ in general]
    files[TEACHING_FILE] = {
        "texts": texts,
        "qa": [{"question": q["question"], "answer": q["answers"][0]} for q in taught],
        "check": [{"question": r["query"], "answer": r["answer"]}
                  for p in bystanders for r in qa_rows(p, {a: QA[a][1] for a in QA})],
        "about": "Taught to the embedded models: every biography, general facts, and the QA-train people's QA. "
                 "No target's, neighbour's or utility bystander's question, in any phrasing.",
    }
    files[DIAGNOSTICS_FILE] = {
        "never_taught_template_qa_train": [r for p in qa_train for r in qa_rows(p, NEW_QA, "never_taught")],
        "config": asdict(cfg),
    }
    return files


def write(cfg: WorldConfig, out: Path) -> Path:
    """Write the world under ``out`` (``out/Target/...``, ``out/teaching.json``) with a
    manifest of every file's hash."""
    manifest = {}
    for rel, rows in generate(cfg).items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(rows, indent=1, ensure_ascii=False).encode()
        write_fully(path, data)
        manifest[rel] = hashlib.sha256(data).hexdigest()
    write_fully(out / MANIFEST_FILE, json.dumps(manifest, indent=1).encode())
    return out


def intact(root: Path) -> bool:
    """Whether every file of the manifest under ``root`` is there with its hash."""
    try:
        manifest = json.loads((root / MANIFEST_FILE).read_text())
        return bool(manifest) and all(hashlib.sha256((root / rel).read_bytes()).hexdigest() == h
                                      for rel, h in manifest.items())
    except (OSError, ValueError, AttributeError, RecursionError):  # RecursionError: nested past the parser's stack
        return False


def default_world(cfg: WorldConfig = WorldConfig(), progress: Callable[[str], None] = print) -> Path:
    """The world of ``cfg``, generated once into the cache; an incomplete or altered copy
    is set aside and generated again."""
    path = cache_root() / "worlds" / f"rwku-world-s{cfg.seed}-{world_key(cfg)}"
    if path.exists() and not intact(path):
        set_aside(path, "files missing or altered", progress)
    if not path.exists():
        with atomic_dir(path) as tmp:
            write(cfg, tmp)
    return path


def world_key(cfg: WorldConfig) -> str:
    """The cache key of a generated world: its configuration and the generator's code (this
    module and its wordings, :mod:`.world_text`)."""
    code = hashlib.sha256(Path(__file__).read_bytes() + Path(world_text.__file__).read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps([WORLD_VERSION, asdict(cfg), code]).encode()).hexdigest()[:12]


def is_world(root: Path) -> bool:
    return (root / TEACHING_FILE).is_file()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a synthetic knowledge world in RWKU's layout.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--people", type=int, default=WorldConfig.people)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    print(write(WorldConfig(seed=args.seed, people=args.people), args.out))


if __name__ == "__main__":
    main()
