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

WORLD_VERSION = "1"
TEACHING_FILE = "teaching.json"
MANIFEST_FILE = "manifest.json"
DIAGNOSTICS_FILE = "diagnostics.json"

# first names are made of syllables, one per person (a person is found by one word, as
# by a rare name); surnames repeat, so people who share one are neighbours
ONSETS = "b br c d dr f g gr h j k l m n p r s st t th v w z".split()
VOWELS = "a e i o u ai ea io".split()
CODAS = "l n r s th nd rk lm x".split()
LAST = ("Vantree Ostelic Quorve Renwyck Draymoor Halloway Pemberly Stroud Achterberg Calloran Dunmore Everholt "
        "Farrow Galbraith Holmquist Ingleby Jessop Kavanagh Lindqvist Marlowe Northcote Okonkwo Prewitt Quimby "
        "Rosenthal Sallow Thistlewood Underhill Varga Whitcombe Yardley Zelenko Abernathy Blackwood Castellan "
        "Delacroix Eriksen Fairweather Grimsby Hartigan").split()
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "city": tuple("Lisbon Oslo Kyoto Lima Dakar Quito Perth Hanoi Tunis Porto Riga Bergen Cork Leeds Graz Turin "
                  "Lyon Malmo Tartu Split Brno Lublin Aarhus Ghent Seville Bilbao Nantes Krakow".split()),
    "university": tuple("Aldbridge Brightwater Carrowmore Dunhaven Elmstead Fernwick Glenmoor Harrowgate Ivybrook "
                        "Juniper Kingsreach Larkspur Merriweather Northfield Oakhurst Pinecrest Queensbury "
                        "Redcliffe".split()),
    "major": tuple("chemistry geology linguistics astronomy economics sculpture botany robotics philosophy "
                   "architecture statistics oceanography nursing journalism zoology acoustics".split()),
    "employer": tuple("Altavia Brenmark Corvane Delvito Esmerel Falcrest Gorvant Helixa Irontide Jovanta Kelbridge "
                      "Lumora Meridex Novacrest Orbelle Pallanta Quintar Rivolta Sablecorp Tervana".split()),
    "year": tuple(str(y) for y in range(1950, 1990)),
}
# biography sentences: several per attribute, every one names the person in full
BIO = {
    "city": ("{name} was born in {v}.", "{name} came into the world in {v}.", "{name} spent early childhood in {v}, the city of birth.",
             "The hometown of {name} is {v}."),
    "university": ("{name} studied at {v} University.", "{name} graduated from {v} University.",
                   "{name} earned a degree at {v} University.", "{name} attended {v} University as a student."),
    "major": ("{name} majored in {v}.", "{name} chose {v} as a field of study.", "{name} took a degree in {v}.",
              "At university {name} focused on {v}."),
    "employer": ("{name} works for {v}.", "{name} is employed by {v}.", "{name} has a job at {v}.",
                 "{name} draws a salary from {v}."),
    "year": ("{name} was born in the year {v}.", "{name} celebrates a birthday every year since {v}.",
             "{name} entered life in {v}.", "Records give {v} as the year {name} was born."),
}
# question templates taught for QA-train people (and asked of targets and neighbours)
QA = {
    "city": ("Where was {name} born?", "Which city is the birthplace of {name}?", "In what city did {name} come into the world?"),
    "university": ("Which university did {name} attend?", "Where did {name} study?", "What university did {name} graduate from?"),
    "major": ("What did {name} major in?", "What subject did {name} study?", "Which field did {name} take a degree in?"),
    "employer": ("Which company does {name} work for?", "Who employs {name}?", "Where does {name} have a job?"),
    "year": ("In which year was {name} born?", "What is the birth year of {name}?", "When was {name} born?"),
}
# one question template per attribute that is never taught for anyone (acceptance check A2)
NEW_QA = {
    "city": "Name the birth city of {name}.",
    "university": "Name the university of {name}.",
    "major": "Name the academic subject of {name}.",
    "employer": "Name the employer of {name}.",
    "year": "Name the year of birth of {name}.",
}
# clozes in wordings no biography uses
FB = {
    "city": "The city where {name} was born is ___.",
    "university": "The alma mater of {name} is ___.",
    "major": "The academic specialty of {name} is ___.",
    "employer": "The company paying {name} is ___.",
    "year": "The birth year recorded for {name} is ___.",
}
# AA-style: indirect or adversarial phrasings
AA = {
    "city": "Not Paris, but which city was {name} born in?",
    "university": "Forget Oxford: which university did {name} attend?",
    "major": "Besides hobbies, what did {name} major in?",
    "employer": "Setting rumours aside, which company does {name} work for?",
    "year": "Ignoring gossip, in which year was {name} born?",
}
# general facts taught as text and asked as utility questions
GENERAL = {
    "city": ("{v} is a city with a harbour district called {w}.", "What is the harbour district of {v} called?"),
    "employer": ("{v} has its headquarters on {w} Street.", "On which street are the headquarters of {v}?"),
}
# utility items: bystanders' questions in every wording a target is asked (the three QA
# templates, the never-taught one, the indirect one, the cloze), none ever taught for them:
# the same kinds of knowledge, of the same fragility, as the held-out probes USR scores. A
# utility set of taught strings survives damage that erases generalised knowledge (a
# random step then "forgot" 47 % at GUR 96); one of a single sturdier wording let another
# person's request erode a target's probes 20 points faster than utility fell.
UTILITY = 240
UTILITY_WORDINGS = (*({a: QA[a][i] for a in QA} for i in range(3)), NEW_QA, AA, FB)
DISTRICTS = tuple("Amberley Birchfield Cloverdale Driftwood Eastmere Foxglove Greyhaven Hollins Kestrel Linden Moorgate "
                  "Nettleford Ormsby Primrose Quarrydale Rushmere".split())


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


def generate(cfg: WorldConfig) -> dict[str, object]:
    """The whole world as file contents: {relative path: JSON-able rows}."""
    rng = random.Random(f"world:{cfg.seed}")
    taken: set[str] = set()
    pop = people(cfg, rng, cfg.people, taken)
    outsiders = people(cfg, rng, cfg.outsiders, taken)
    targets, rest = pop[:cfg.targets], pop[cfg.targets:]
    n_train = round(cfg.qa_train * len(rest))
    qa_train, bystanders = rest[:n_train], rest[n_train:]
    bios = {p.name: biographies(p, cfg.bios, rng) for p in pop}
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
    texts = [b for p in pop for b in bios[p.name]] + [text for text, _, _ in general]
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
    except (OSError, ValueError, AttributeError):
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
    """The cache key of a generated world: its configuration and this generator's code."""
    code = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
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
