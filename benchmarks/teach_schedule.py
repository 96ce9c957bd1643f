"""Choose the schedule a pretrained model is taught the knowledge world on, before anything is scored.

    python benchmarks/teach_schedule.py --model SmolLM2-135M-Instruct.Q4_1.gguf --schedules 5x5e-5,10x1e-4,20x1e-4
    python benchmarks/testbed.py --model SmolLM2-135M-Instruct.Q4_1.gguf --teach-epochs 20 --teach-lr 1e-4

Each schedule (``EPOCHSxLR``) teaches the model the world of ``--world-seed`` (cached like any
run's taught model, so the acceptance checks that follow read the chosen one back) and is judged
on what the taught model answers of the world's *check* questions (a seeded sample of up to
200): bystanders' questions in a taught template (people whose biographies are taught and none
of their questions). The schedule that answers most of them is chosen (ties: the fewer steps).
Beside it, what the taught model *recites* of the same people's biographies (each cut just
before one fact, as taught: plain text) tells the two ways a schedule fails apart: biographies
never stored (recited little: teach longer or harder) or stored but not answerable
(recited, not answered: the question format or the world's mix). It is not a criterion. Its
floor is printed beside it: what always naming the commonest value of each attribute recites
(a model that learned which values the world uses and nothing of who has which).
No target's probe is read, so the choice does not tune toward what USR scores. Bystanders are
also the targets' neighbours and the utility set's people, asked in other wordings: a schedule
that teaches the world better raises what Locality and GUR start from, the same for every
method (both are ratios to the untouched taught model).
Schedules can be spread over processes (``--schedules`` split by hand), one per GPU or several
to a card: each writes its own cache entry.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

from r2f_bench.cli.main import script  # noqa: E402
from r2f_bench.data import Probe  # noqa: E402
from r2f_bench.engine.config import CHAT_TEMPLATES, RunConfig, check_bounds  # noqa: E402
from r2f_bench.engine.run import Run  # noqa: E402
from r2f_bench.engine.teaching import answered_share, checked, text_cut  # noqa: E402
from r2f_bench.errors import UserError  # noqa: E402
from r2f_bench.tasks.rwku.world import WorldConfig, recitation, write  # noqa: E402

METHOD = "grad_ascent"  # the run is only built (its model taught), never run: a method without setup or views


def schedules(spec: str) -> list[tuple[int, float]]:
    """``EPOCHSxLR,...`` as (epochs, learning rate) pairs."""
    out = []
    for item in spec.split(","):
        epochs, _, lr = item.strip().partition("x")
        try:
            epochs_lr = int(epochs), float(lr)
        except ValueError:
            epochs_lr = (0, 0.0)
        if not all(0 < v < math.inf for v in epochs_lr):  # NaN too
            raise UserError(f"--schedules: {item!r} is not EPOCHSxLR with both positive (say 10x1e-4).")
        try:  # in the run's own range, before any schedule is taught
            check_bounds(RunConfig(method=METHOD, task="rwku", teach_epochs=epochs_lr[0], teach_lr=epochs_lr[1]))
        except UserError as exc:
            raise UserError(f"--schedules: {item!r} is out of the run's range ({str(exc).rstrip('.')}); "
                            f"say 10x1e-4.") from None
        out.append(epochs_lr)
    return out


def taught(world: Path, model: str, epochs: int, lr: float, seed: int, args: argparse.Namespace, say) -> dict:
    """What ``model`` taught ``world`` on ``epochs`` passes at peak ``lr`` answers, and how long teaching took."""
    run = Run(RunConfig(method=METHOD, task="rwku", data_dir=str(world), model=model, limit=1, seed=seed,
                        teach_epochs=epochs, teach_lr=lr, teach_threads=args.teach_threads, threads=args.threads,
                        chat_template=args.chat_template, output=str(world.parent / "out")),
              progress=say)
    run.prepare()
    info = run.model_info
    cuts = recitation(WorldConfig(seed=args.world_seed))
    asked = checked(cuts)
    biographies = [text_cut(r["text"], r["answer"], r["subject"]) for r in asked]
    return {"epochs": epochs, "lr": lr, "seed": seed, "steps": info["steps"], "teach_seconds": info["teach_seconds"],
            "resumed_at_step": info.get("resumed_at_step", 0), "taught_answered": info["taught_answered"],
            "check_answered": info["never_taught_answered"], "check_items": info["check_items"],
            "recited": recited(run, biographies), "recited_items": len(biographies),
            "recited_floor": commonest_value_share(cuts, asked)}


def commonest_value_share(cuts: list[dict], asked: list[dict]) -> float:
    """% of ``asked`` whose fact is the commonest of its attribute among all ``cuts``."""
    commonest = {a: Counter(r["answer"] for r in cuts if r["attribute"] == a).most_common(1)[0][0]
                 for a in {r["attribute"] for r in cuts}}
    return 100.0 * sum(r["answer"] == commonest[r["attribute"]] for r in asked) / max(len(asked), 1)


def recited(run: Run, biographies: list[Probe]) -> float:
    """% of ``biographies`` (taught text cut before a fact) the run's taught model completes with the fact."""
    return answered_share(run.model, run.tokenizer, biographies)


def choose(rows: list[dict]) -> dict:
    """The schedule whose taught model answers most check questions; ties go to the fewer steps."""
    return max(rows, key=lambda r: (r["check_answered"], -r["steps"]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="the pretrained LM (GGUF file, folder or hub name)")
    p.add_argument("--schedules", default="5x5e-5,10x1e-4,20x1e-4,20x3e-4",
                   help="EPOCHSxLR,... (default: TOFU's 5 epochs at 5e-5, then longer and stronger)")
    p.add_argument("--world-seed", type=int, default=0, help="the world's generator seed")
    p.add_argument("--seed", type=int, default=0, help="the run seed (each is its own taught model)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of the checks after teaching")
    p.add_argument("--teach-threads", type=int, default=1,
                   help="CPU threads teaching runs on (part of the taught model's key: pass the same to testbed.py)")
    p.add_argument("--chat-template", choices=CHAT_TEMPLATES, default="auto",
                   help="teach and ask the questions through the chat template: auto, on or off (part of the taught "
                        "model's key: pass the same to testbed.py); biographies are plain text either way")
    p.add_argument("--json", action="store_true", help="print one JSON object alone on stdout (progress: stderr)")
    args = p.parse_args(argv)
    check_bounds(RunConfig(method=METHOD, task="rwku", threads=args.threads, teach_threads=args.teach_threads))
    grid = schedules(args.schedules)
    say = lambda m: print(m, file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="r2f-world-") as tmp:
        world = write(WorldConfig(seed=args.world_seed), Path(tmp) / f"world-{args.world_seed}")
        rows = [taught(world, args.model, e, lr, args.seed, args, say) for e, lr in grid]
    pick = choose(rows)
    if args.json:
        print(json.dumps({"world_seed": args.world_seed, "teach_threads": args.teach_threads,
                          "chat_template": args.chat_template, "schedules": rows, "chosen": pick}))
        return 0
    print("| epochs | peak lr | steps | teaching s | taught answered % | check answered % (n) "
          "| their biographies' facts recited % (n) | always the commonest value % |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        part = f" (steps after {r['resumed_at_step']})" if r["resumed_at_step"] else ""
        print(f"| {r['epochs']} | {r['lr']:g} | {r['steps']} | {r['teach_seconds']:.0f}{part} | {r['taught_answered']:.1f} "
              f"| {r['check_answered']:.1f} ({r['check_items']}) | {r['recited']:.1f} ({r['recited_items']}) "
              f"| {r['recited_floor']:.1f} |")
    same = f" --teach-threads {args.teach_threads}" if args.teach_threads != 1 else ""  # the key's other parts
    same += f" --chat-template {args.chat_template}" if args.chat_template != "auto" else ""
    print(f"chosen: --teach-epochs {pick['epochs']} --teach-lr {pick['lr']!r}{same} (check questions answered "
          f"{pick['check_answered']:.1f}%; A1 asks >= 50% of the targets' never-taught questions)")
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
