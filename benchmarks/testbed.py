"""Acceptance checks A1–A4 of the synthetic knowledge world (r2f_bench.results.testbed), on a
world generated afresh from ``--world-seed`` (any seed must pass, not only the bundled one).

    python benchmarks/testbed.py                          # world seed 0, run seeds 0,1, 12 targets
    python benchmarks/testbed.py --world-seed 3 --seeds 0,1,2 --json
    python benchmarks/testbed.py --curves testbed-curves   # run again after a cut: measured curves are read back
    python benchmarks/testbed.py --model SmolLM2-135M-Instruct.Q4_1.gguf --strengths 3e-6:3e-4:6 --eval-batch-size 256 \
        --teach-epochs 20 --teach-lr 1e-4      # a pretrained model on a schedule (an example: choose it with benchmarks/teach_schedule.py)

``--json`` prints one object: ``a1_never_taught_qa``, ``a2_never_taught_template``,
``a3_usr_at_gur95``, ``a4_margin_at_gur90`` (percentages: a number or
``{"mean", "lo", "hi", "n"}``, intervals resampling whole targets), the controls'
curves and ``teach_seconds`` per run seed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from r2f_bench.cli.main import script  # noqa: E402
from r2f_bench.engine.config import CHAT_TEMPLATES, RunConfig, check_bounds  # noqa: E402
from r2f_bench.errors import UserError  # noqa: E402
from r2f_bench.results.sweep import comma_list, parse_seeds  # noqa: E402
from r2f_bench.tasks.rwku.world import WorldConfig, write  # noqa: E402
from r2f_bench.results.testbed import check_world, passes  # noqa: E402

METHOD = "grad_ascent"  # its strength knob draws the curves: the plainest way to forget (no retain data, no views)


def strengths(spec: str | None) -> list[float] | None:
    """``LO:HI:N`` (N log-spaced points) or ``X,Y,...``; ``None``: the method's declared range;
    one line for anything else (before the world is taught)."""
    if not spec:
        return None
    try:
        if ":" in spec:
            lo, hi, n = spec.split(":")
            if not (0 < float(lo) < float(hi) < math.inf and int(n) >= 2):
                raise ValueError(spec)
            return [float(x) for x in np.geomspace(float(lo), float(hi), int(n))]
        values = [float(x) for x in comma_list(spec)]
        if not values or not all(0 < v < math.inf for v in values):
            raise ValueError(spec)
        return values
    except ValueError:
        raise UserError(f"--strengths {spec!r}: write LO:HI:N (0 < LO < HI, N >= 2 log-spaced points) or X,Y,... "
                        f"(each > 0), e.g. 3e-6:3e-4:5.") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world-seed", type=int, default=0, help="the world's generator seed")
    parser.add_argument("--seeds", default="0,1", help="run seeds (model replicates), comma-separated")
    parser.add_argument("--targets", type=int, default=12, help="evaluation targets (at least 12 for A3)")
    parser.add_argument("--model", default="embedded", help="the model taught the world")
    parser.add_argument("--strengths", default=None, metavar="LO:HI:N | X,Y,...",
                        help="gradient ascent's learning rates: N log-spaced from LO to HI, or a list (default: its "
                             "declared range, set for the embedded models, in 8 points)")
    parser.add_argument("--teach-epochs", type=int, help="a pretrained model's teaching schedule: epochs (default: "
                                                          "the run's; choose it with benchmarks/teach_schedule.py)")
    parser.add_argument("--teach-lr", type=float, help="... and its peak learning rate")
    parser.add_argument("--teach-threads", type=int, help="... and the CPU threads it was taught on (as given to "
                                                           "teach_schedule.py: another count is another model)")
    parser.add_argument("--chat-template", choices=CHAT_TEMPLATES,
                        help="... and whether its questions were taught through the chat template (as given to "
                             "teach_schedule.py; default: the run's, auto)")
    parser.add_argument("--eval-batch-size", type=int, default=32, help="requests per lm-eval batch (GPU: 256)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--curves", type=Path, metavar="DIR",
                        help="keep each measured curve in DIR and read back those already there, so a cut-off run "
                             "resumes (keyed like the results store: model, world content, run seed, schedule, "
                             "strengths, versions)")
    parser.add_argument("--json", action="store_true", help="print one JSON object alone on stdout (progress: stderr)")
    args = parser.parse_args(argv)
    seeds, lrs = parse_seeds(args.seeds), strengths(args.strengths)
    if args.targets < 2:  # each target's control is another target's request
        raise UserError(f"--targets must be at least 2 (a target's control forgets another target), got {args.targets}.")
    schedule = {k: v for k, v in (("teach_epochs", args.teach_epochs), ("teach_lr", args.teach_lr),
                                  ("teach_threads", args.teach_threads), ("chat_template", args.chat_template))
                if v is not None}
    check_bounds(RunConfig(method=METHOD, task="rwku", model=args.model, threads=args.threads,
                           eval_batch_size=args.eval_batch_size, **schedule))
    torch.set_num_threads(args.threads)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # each curve as measured: a cut-off run keeps them
    with tempfile.TemporaryDirectory(prefix="r2f-world-") as tmp:
        world = write(WorldConfig(seed=args.world_seed), Path(tmp) / f"world-{args.world_seed}")
        result = check_world(world, seeds, args.targets, METHOD, "rwku", lrs, progress=say, curves=args.curves,
                             config={"model": args.model, "output": str(Path(tmp) / "out"), "threads": args.threads,
                                     "eval_batch_size": args.eval_batch_size, **schedule})
    result = {"world_seed": args.world_seed, "seeds": seeds, **schedule, **result, "passes": passes(result)}
    if args.json:
        print(json.dumps(result))
    else:
        if schedule:
            print(f"teaching schedule: {json.dumps(schedule)}")
        for key in ("a1_never_taught_qa", "a1_never_taught_template_targets", "a2_never_taught_template",
                    "a3_usr_at_gur95", "a4_margin_at_gur90", "a4_name_margin_at_gur90", "a4_control_excess",
                    "a4_control_excess_whole_curve", "gur_unreadable_seeds", "teach_seconds", "passes"):
            print(f"{key}: {json.dumps(result[key])}")
    return 0 if all(result["passes"].values()) else 1


if __name__ == "__main__":
    sys.exit(script(main))
