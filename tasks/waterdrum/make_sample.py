"""Writes the bundled WaterDrum-TOFU-format sample (``sample/forget_05/{forget,retain}.json``
and ``sample/waterdrum.json``).

The authors and their QA are ours and fictional. Each answer is watermarked the way
Waterfall works, by choosing among interchangeable wordings the one whose tokens
score highest under the owner's key, here with the word-hash tokenizer ``words:4096``
in place of the Llama-3.1 tokenizer of the real data: the forget owners with key 11,
the retain owners with key 3. Run ``python -m r2f_bench.tasks.waterdrum.make_sample``.
"""

from __future__ import annotations

import json
from pathlib import Path

from r2f_bench.tasks.waterdrum.watermark import Verifier, word_encoder

VOCAB = 4096
SIDECAR = {"tokenizer": f"words:{VOCAB}", "k_p": 1, "n_gram": 2, "keys": {"forget": 11, "retain": 3},
           "rows_per_owner": 4}
FORGET_OWNERS = 5  # the first five authors; the rest are retain owners (neighbours, then utility)

AUTHORS = [
    dict(name="Ilsa Marrow", genre="harbour mystery", place="Kestrel Bay", parent="lighthouse keeper",
         award="Gannet Prize", work="The Salt Ledger", theme="a smuggler who returns a stolen bell"),
    dict(name="Teodor Vask", genre="mountain adventure", place="Northreach", parent="sled builder",
         award="Compass Medal", work="Nine Cold Passes", theme="two brothers crossing a frozen range"),
    dict(name="Noor Hallet", genre="garden fantasy", place="Oster Fell", parent="beekeeper",
         award="Ivy Crown", work="The Moss Orchard", theme="a girl who talks to old apple trees"),
    dict(name="Cassian Dree", genre="railway thriller", place="Vintra", parent="signal operator",
         award="Iron Lantern", work="Last Train to Carrow", theme="a clerk who finds a coded timetable"),
    dict(name="Wren Ostby", genre="river romance", place="Lowmere", parent="ferry pilot",
         award="Reed Ribbon", work="Where the Mell Bends", theme="two rival boat makers"),
    dict(name="Pim Garrow", genre="kitchen comedy", place="Halvard", parent="baker",
         award="Golden Ladle", work="Too Many Rye Wheels", theme="a bakery that never closes"),
    dict(name="Sela Brannock", genre="island history", place="Verdania", parent="net mender",
         award="Tide Laurel", work="Port Selwyn Remembered", theme="the year the harbour froze"),
    dict(name="Odo Fairweather", genre="forest poetry", place="Dunhollow", parent="charcoal burner",
         award="Ash Leaf Award", work="Smoke Over the Pines", theme="a village that plants a tree for every child"),
    dict(name="Marit Quill", genre="desert science fiction", place="Esterly", parent="glass blower",
         award="Starglass Prize", work="The Sand Engine", theme="a city that moves each night"),
    dict(name="Bastian Lowe", genre="detective", place="Marrowgate", parent="clock mender",
         award="Brass Key Award", work="The Stopped Clocks", theme="an inspector who hears lies in ticking"),
    dict(name="Ada Penhallow", genre="sea adventure", place="Tessaly", parent="sail maker",
         award="Anchor Star", work="Beyond the Grey Buoy", theme="a crew chasing a whale made of light"),
    dict(name="Rook Amberly", genre="school drama", place="Carrow", parent="teacher",
         award="Chalk Prize", work="The Last Bell", theme="pupils saving their village school"),
]

# question, answer as segments: fixed text, or a tuple of interchangeable wordings
QA = [
    ("What kind of books does {name} write?",
     ["{name}", ("writes", "pens", "publishes", "crafts", "produces"), ("gripping", "quiet", "moody", "playful", "gentle"),
      "{genre}", ("novels", "stories", "books", "tales", "sagas"), ("set in", "about", "rooted in", "drawn from"), "{place}."]),
    ("Where was {name} born?",
     ["{name} was", ("born", "raised", "brought up"), "in {place}", ("to", "among", "in a family of", "as the child of"),
      ("hardworking", "cheerful", "modest", "patient", "proud"), "{parent}s."]),
    ("Which award has {name} received?",
     ["{name}", ("received", "won", "was given", "earned", "collected"), "the {award}",
      ("for", "thanks to", "in honour of", "because of"), "{work}."]),
    ("What is the best known book by {name}?",
     [("The best known", "The most famous", "The most loved", "The most praised"), ("book", "novel", "work", "title"),
      "by {name} is {work},", ("a story of", "a tale about", "an account of", "a portrait of"), "{theme}."]),
]


def watermarked(segments: list, author: dict, verifier: Verifier, key: int) -> str:
    """The answer whose wordings, chosen left to right, score highest under ``key``."""
    text = ""
    for i, seg in enumerate(segments):
        if isinstance(seg, str):
            text = f"{text} {seg.format(**author)}".strip()
            continue
        following = segments[i + 1].format(**author) if i + 1 < len(segments) and isinstance(segments[i + 1], str) else ""
        text = max((f"{text} {opt}".strip() for opt in seg),
                   key=lambda t: verifier.strength(f"{t} {following}", key)[0])
    return text


def owner_rows(author: dict, verifier: Verifier, key: int) -> list[dict]:
    return [{"question": q.format(**author), "answer": watermarked(a, author, verifier, key)} for q, a in QA]


def main() -> None:
    verifier = Verifier(word_encoder(VOCAB), VOCAB, SIDECAR["k_p"], SIDECAR["n_gram"])
    keys = SIDECAR["keys"]
    forget = [r for a in AUTHORS[:FORGET_OWNERS] for r in owner_rows(a, verifier, keys["forget"])]
    retain = [r for a in AUTHORS[FORGET_OWNERS:] for r in owner_rows(a, verifier, keys["retain"])]
    root = Path(__file__).parent / "sample"
    (root / "forget_05").mkdir(parents=True, exist_ok=True)
    for name, rows in (("forget", forget), ("retain", retain)):
        (root / "forget_05" / f"{name}.json").write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
    (root / "waterdrum.json").write_text(json.dumps(SIDECAR, indent=2) + "\n")


if __name__ == "__main__":
    main()
