"""Writes the bundled MUSE-News-format sample (``sample/news/...``).

The articles are ours and fictional, written short so an embedded model learns them in
seconds, and laid out in muse_bench's official files and fields: the raw forget
corpus, knowmem QA (forget, retain, in-context examples), verbmem prompt/continuation
pairs cut from the forget articles, and privleak member (forget), non-member (holdout)
and retain texts. Run ``python -m r2f_bench.tasks.muse.make_sample`` to regenerate it.
"""

from __future__ import annotations

import json
from pathlib import Path

# Forget articles: four sentences each, and two questions about them. The verbmem pair
# is sentences 1-2 -> 3; the privleak member text is sentences 2-4.
FORGET = [
    (["The harbour council of Kestrel Bay has approved a floating library for the old ferry pier.",
      "The barge will hold four thousand books and open every morning at seven.",
      "Councillor Ada Fennick said the idea came from a fisherman who read on his boat at dawn.",
      "Work on the hull begins in March and the first readers are expected in June."],
     [("Where will the floating library of Kestrel Bay be moored?", "the old ferry pier"),
      ("How many books will the Kestrel Bay barge hold?", "four thousand")]),
    (["Train drivers in Vintra have ended a strike that stopped the northern line for nine days.",
      "The union accepted a deal that adds one paid rest day every month.",
      "Passengers crowded the Vintra central station as the first train left at noon on Friday.",
      "The rail company said the delays cost the region almost two million crowns."],
     [("How long did the Vintra train strike last?", "nine days"),
      ("What did the Vintra rail union win in the deal?", "one paid rest day every month")]),
    (["The glassworks of Dunhollow has won its largest export order in forty years.",
      "A hotel chain in Esterly ordered twelve thousand blue lanterns for its gardens.",
      "Owner Tamsin Quorve said the furnace will now run through the night for the first time.",
      "Thirty new workers will be hired before the lanterns ship in the autumn."],
     [("What did the Esterly hotel chain order from Dunhollow?", "twelve thousand blue lanterns"),
      ("Who owns the Dunhollow glassworks?", "Tamsin Quorve")]),
    (["The Esterly river festival was cancelled on Saturday after a storm flooded the main square.",
      "Organisers had expected forty boats to race along the canal at dusk.",
      "Mayor Joren Task promised that the race will be held again on the first day of summer.",
      "Volunteers spent the night moving the market stalls to the hill above the town."],
     [("Why was the Esterly river festival cancelled?", "a storm flooded the main square"),
      ("Who is the mayor of Esterly?", "Joren Task")]),
    (["The village school of Marrowgate has finished building a solar roof with help from parents.",
      "The panels will power the classrooms and the small greenhouse behind the gym.",
      "Head teacher Liesel Draymoor said pupils will track the power on a screen in the hall.",
      "Any spare power will be sold to the grid to pay for new books."],
     [("What did Marrowgate school build with help from parents?", "a solar roof"),
      ("Who is the head teacher of Marrowgate school?", "Liesel Draymoor")]),
]

FORGET_ICL = [("Which town opened a glass bridge over the Mell?", "Carrow"),
              ("How many lamps line the Lowmere promenade?", "ninety")]
RETAIN_ICL = [("What is the currency of Lowmere?", "the lowmark"),
              ("Which bird is the symbol of Halvard?", "the grey heron")]
RETAIN_QA = [("Which team won the Northreach rowing cup?", "the Halvard Herons"),
             ("What did the Carrow museum buy at auction?", "a silver compass"),
             ("Which road in Lowmere was closed for repairs?", "Mill Lane"),
             ("What new service did the Oster Fell post office start?", "bicycle delivery"),
             ("Who opened the bakery on Tessaly Street?", "Pell Darrow"),
             ("How many trees were planted in Vintra park?", "three hundred")]
RETAIN_TEXTS = [
    "The Halvard Herons won the Northreach rowing cup after a close final against the Carrow crew on a windy lake.",
    "The Carrow museum bought a silver compass at auction, said to have guided the first ships into the bay.",
    "Mill Lane in Lowmere was closed for repairs after the winter frost cracked the old cobbles near the bridge.",
    "The post office in Oster Fell started bicycle delivery so that parcels reach the hill farms before noon.",
    "Pell Darrow opened a bakery on Tessaly Street that sells rye wheels and honey rings from six in the morning.",
]
HOLDOUT_TEXTS = [
    "A lighthouse keeper on Gannet Rock counted more than two hundred seals resting on the shingle this week.",
    "The Brackenford choir will sing in the cathedral of Oresund after raising money with a long bake sale.",
    "Engineers in Wexmoor tested a new tram that runs on the old canal towpath between the mills.",
    "The orchard of Pinehollow lost half its pears to an early frost, and cider makers fear a thin year.",
    "A runaway goat delayed the morning ferry at Saltmarsh for an hour before a crew member caught it.",
]


def main() -> None:
    root = Path(__file__).parent / "sample" / "news"
    files = {
        "raw/forget.json": [" ".join(s) for s, _ in FORGET],
        "knowmem/forget_qa.json": [{"question": q, "answer": a} for _, qa in FORGET for q, a in qa],
        "knowmem/forget_qa_icl.json": [{"question": q, "answer": a} for q, a in FORGET_ICL],
        "knowmem/retain_qa.json": [{"question": q, "answer": a} for q, a in RETAIN_QA],
        "knowmem/retain_qa_icl.json": [{"question": q, "answer": a} for q, a in RETAIN_ICL],
        "verbmem/forget.json": [{"prompt": " ".join(s[:2]), "gt": s[2]} for s, _ in FORGET],
        "privleak/forget.json": [{"text": " ".join(s[1:])} for s, _ in FORGET],
        "privleak/holdout.json": [{"text": t} for t in HOLDOUT_TEXTS],
        "privleak/retain.json": [{"text": t} for t in RETAIN_TEXTS],
    }
    for rel, rows in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
