"""Options shared by the commands that run methods (run, tune, and plugin commands such
as ``decoder``), the :class:`~r2f_bench.engine.config.RunConfig` they describe, and ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager, redirect_stdout
from typing import Any, Iterator, TextIO

from ..engine.models import DEVICE_MAPS, DTYPES
from ..engine.config import RunConfig
from ..jsontext import json_safe
from ..unlearner import parse_assignments


def add_run_options(p: argparse.ArgumentParser, split: bool = True,
                    limit_help: str = "number of evaluation targets (default 3)") -> None:
    """Options that pick models, data and targets. ``split``: also the evaluation-only
    options (``--sequential``, ``--save-model``, ``--split``)."""
    p.add_argument("--model", default="embedded", help="target: hub name, local path, or embedded[:family-hH-lL] (default: the embedded demo model)")
    p.add_argument("--proxy", default="embedded-proxy", help="proxy model, for methods that use one (R2F's decoder): hub name, local path, or embedded:family-hH-lL")
    p.add_argument("--data-dir", help="benchmark data in its official layout: a local folder, or hf:<owner>/<dataset> to download it (default: the bundled sample)")
    p.add_argument("--targets", help="comma-separated target ids or names")
    p.add_argument("--limit", type=int, help=limit_help)
    p.add_argument("--dev-targets", type=int, default=2, help="targets held out for fitting and tuning (never evaluated)")
    p.add_argument("--forget-source", help="what the deletion request holds, where the task offers a choice "
                   "(RWKU: corpus, the target's forget corpus, default; probes, its FB cloze facts); see docs/tasks.md")
    p.add_argument("--retain-items", type=int, default=64, help="retain items each request carries, sampled with --seed (default 64)")
    if split:
        p.add_argument("--sequential", action="store_true",
                       help="apply the targets' deletions one after another to the same model (MUSE's sustainability)")
        p.add_argument("--save-model", metavar="DIR", help="write each unlearned model to DIR/<target>/ (safetensors), e.g. for lm_eval")
        p.add_argument("--split", choices=("eval", "dev"), default="eval",
                       help="targets to unlearn: the evaluation targets (default) or the dev targets (hyper-parameter search)")
    p.add_argument("--views", type=int, default=5, help="views per fact: the fact as asked plus paraphrases (paper: 5)")
    p.add_argument("--paraphraser", default="benchmark",
                   help="benchmark (its own alternative probes, then templates; default), templates, self, or hf:<seq2seq model>")
    p.add_argument("--seed", type=int, default=0,
                   help="replicate: sets the embedded models' initialisation and teaching, LoRA init, views and retain sample")
    p.add_argument("--set", dest="params", action="append", default=[], metavar="NAME=VALUE",
                   help="override a method hyper-parameter (repeatable); see `r2f-bench methods`")
    p.add_argument("--output", default="r2f-output",
                   help="results directory: one record per target in jobs/, exported to results.jsonl (default: %(default)s/)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow custom model code from the hub (off by default)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="weights of the target and proxy (default float32)")
    p.add_argument("--device-map", choices=DEVICE_MAPS,
                   help="spread the target over the available GPUs, then CPU, with Accelerate (for targets larger than one device)")
    p.add_argument("--target-modules", metavar="NAMES", help="comma-separated linear layers the methods adapt or "
                   "step, for architectures other than Llama/Mistral/GPT-2 (e.g. query_key_value,dense; default: the "
                   "architecture's own, q_proj,...,down_proj)")
    p.add_argument("--threads", type=int, help="CPU threads per process (default: OMP_NUM_THREADS, else the cores "
                   "shared among the run's processes); pin it when you compare seconds")
    add_quiet_option(p)


def add_quiet_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bars or progress messages (warnings still print)")


def add_json_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", action="store_true",
                   help=f"print {what} as JSON, alone on stdout (everything else goes to stderr)")


@contextmanager
def json_stdout(args: argparse.Namespace) -> Iterator[TextIO]:
    """The stream a command prints its JSON to: with ``--json``, whatever else the command
    prints inside the block goes to stderr, so stdout holds the JSON alone (``| jq`` works)."""
    stdout = sys.stdout
    if not getattr(args, "json", False):
        yield stdout
        return
    with redirect_stdout(sys.stderr):
        yield stdout


def print_json(obj: Any, stream: TextIO) -> None:
    """``obj`` as strict JSON (non-finite numbers as ``null``) on ``stream``."""
    print(json.dumps(json_safe(obj), indent=2, allow_nan=False, default=str), file=stream, flush=True)


def say(args: argparse.Namespace):
    """The progress callback of a command: messages on stderr, only warnings with --quiet."""
    quiet = getattr(args, "quiet", False)
    return lambda m: None if quiet and not m.startswith("warning") else print(m, file=sys.stderr, flush=True)


def names(text: str | None) -> list[str] | None:
    """A comma-separated option as a list (``None`` when unset or empty)."""
    return [n.strip() for n in text.split(",") if n.strip()] or None if text else None


def run_config(args: argparse.Namespace, method: str, task: str) -> RunConfig:
    """The run configuration the parsed :func:`add_run_options` describe."""
    return RunConfig(method=method, task=task, seed=args.seed, model=args.model, proxy=args.proxy,
                     data_dir=args.data_dir, limit=args.limit,
                     targets=[t.strip() for t in args.targets.split(",") if t.strip()] if args.targets else None,
                     params=parse_assignments(args.params), views=args.views, paraphraser=args.paraphraser,
                     dev_targets=args.dev_targets, forget_source=args.forget_source,
                     retain_items=args.retain_items, threads=args.threads, output=args.output,
                     trust_remote_code=args.trust_remote_code, split=getattr(args, "split", "eval"),
                     dtype=args.dtype, device_map=args.device_map, target_modules=names(args.target_modules),
                     sequential=getattr(args, "sequential", False), save_model=getattr(args, "save_model", None))
