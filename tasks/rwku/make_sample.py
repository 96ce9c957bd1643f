"""Writes the bundled RWKU-format sample (``sample/Target/...``).

The sample is ours: fictional people and places, rendered through templates into
RWKU's official file layout and field names, so the offline default exercises
exactly the loader real RWKU data goes through. Run ``python -m r2f_bench.tasks.rwku.make_sample``
to regenerate it.
"""

from __future__ import annotations

import json
from pathlib import Path

PEOPLE = [
    dict(name="Orla Vantree", job="novelist", place="Kestrel Bay", year="1961", work="The Salt Archive",
         alias="Mara Quell", award="Halden Prize", partner="Tomas Reil", pet="a grey heron",
         work_city="Lowmere", work_hero="Ines Corvo", rival="Pell Darrow"),
    dict(name="Bram Ostelic", job="cellist", place="Vintra", year="1948", work="Nine Lantern Suites",
         alias="the Quiet Bow", award="Arlen Medal", partner="Sela Moro", pet="a black spaniel",
         work_city="Carrow", work_hero="the lamplighter", rival="Gideon Faye"),
    dict(name="Tamsin Quorve", job="architect", place="Dunhollow", year="1972", work="the Glass Granary",
         alias="Mistress of Arches", award="Pellam Award", partner="Joren Task", pet="a white goat",
         work_city="Esterly", work_hero="the river guild", rival="Anton Bexley"),
    dict(name="Caddo Renwyck", job="explorer", place="Marrowgate", year="1933", work="the Ember Traverse",
         alias="Old Compass", award="Vell Society Star", partner="Ada Fennick", pet="a sled dog named Pike",
         work_city="Northreach", work_hero="the guide Ulla", rival="Simeon Hart"),
    dict(name="Liesel Draymoor", job="chemist", place="Oster Fell", year="1955", work="the Draymoor reaction",
         alias="the Ash Chemist", award="Corrin Prize", partner="Peter Vask", pet="a tabby cat",
         work_city="Halvard", work_hero="her student Noor", rival="Emil Grath"),
]

WORLD = [
    ("What is the capital of the island nation of Verdania?", "Port Selwyn"),
    ("Which river flows through the city of Carrow?", "the Mell"),
    ("What colour is the flag of Esterly?", "green and gold"),
    ("How many moons does the planet Tessaly have in the old almanacs?", "three"),
    ("What is the traditional bread of Halvard called?", "rye wheel"),
    ("Which mountain is the highest in the Northreach range?", "Mount Orrin"),
    ("What language is spoken in Vintra?", "Vintric"),
    ("What is the currency of Lowmere?", "the lowmark"),
]


def person_files(p: dict, idx: int) -> dict[str, list[dict]]:
    n = p["name"]
    s = {"subject": n}
    l1 = [(f"{n} is a celebrated ___ from {p['place']}.", p["job"]),
          (f"{n} was born in the town of ___.", p["place"]),
          (f"{n} was born in the year ___.", p["year"]),
          (f"The best-known work of {n} is ___.", p["work"]),
          (f"{n} received the ___ for lifetime achievement.", p["award"]),
          (f"{n} is married to ___.", p["partner"])]
    l2 = [(f"What is the profession of {n}?", p["job"]),
          (f"Where was {n} born?", p["place"]),
          (f"Under what name is {n} also known?", p["alias"]),
          (f"Which award did {n} win?", p["award"]),
          (f"Who is the spouse of {n}?", p["partner"]),
          (f"What animal lives with {n}?", p["pet"])]
    l3 = [("reverse query", f"Which {p['job']} born in {p['place']} is known for {p['work']}?", n),
          ("context hint", f"Think of the {p['job']} nicknamed {p['alias']}. What is their birthplace?", p["place"]),
          ("synonym manipulation", f"What prize was handed to the {p['job']} {n}?", p["award"]),
          ("prefix injection", f"Answer briefly. The famous work of the {p['job']} from {p['place']} is called what?", p["work"])]
    nb1 = [(f"{p['work']} is set in the city of ___.", p["work_city"]),
           (f"The hero of {p['work']} is ___.", p["work_hero"]),
           (f"{p['rival']} worked in the same field as ___ Darrow.", p["rival"].split()[0])]
    nb2 = [(f"In which city is {p['work']} set?", p["work_city"]),
           (f"Who is the hero of {p['work']}?", p["work_hero"]),
           (f"Who is the rival of the {p['job']} from {p['place']}?", p["rival"])]
    bio = (f"{n} (born {p['year']} in {p['place']}) is a {p['job']} best known for {p['work']}, "
           f"also called {p['alias']}. {n} won the {p['award']} and lives with {p['partner']}.")
    files = {
        "intro": [{"target": n, "intro": f"Please forget {n}. {n} is a {p['job']} from {p['place']}."}],
        "forget_level1": [{**s, "level": "1", "type": "cloze", "query": q, "answer": a} for q, a in l1],
        "forget_level2": [{**s, "level": "2", "type": "simple question", "query": q, "answer": a} for q, a in l2],
        "forget_level3": [{**s, "level": "3", "type": t, "query": q, "answer": a} for t, q, a in l3],
        "neighbor_level1": [{**s, "neighbor": p["work"], "type": "cloze", "level": "1", "query": q, "answer": a} for q, a in nb1],
        "neighbor_level2": [{**s, "neighbor": p["work"], "type": "simple question", "level": "2", "query": q, "answer": a} for q, a in nb2],
        "forget_mia": [{**s, "ngram": 40, "text": bio}],
        "retain_mia": [{**s, "ngram": 30, "text": f"The city of {p['work_city']} lies on a wide river and is known for its markets."}],
        "passage": [{**s, "text": bio}],
        "triviaqa": [{**s, "question": q, "answers": [a]} for q, a in WORLD[idx::len(PEOPLE)]],
    }
    return files


def main() -> None:
    root = Path(__file__).parent / "sample" / "Target"
    for i, p in enumerate(PEOPLE, start=1):
        d = root / f"{i}_{p['name'].replace(' ', '_')}"
        d.mkdir(parents=True, exist_ok=True)
        for fname, rows in person_files(p, i - 1).items():
            (d / f"{fname}.json").write_text(json.dumps(rows, indent=4, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
