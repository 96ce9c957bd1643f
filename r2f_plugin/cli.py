"""The ``r2f-bench`` command.

``r2f-bench --method r2f --task rwku`` runs one method on one task; subcommands
list plugins (``methods``, ``tasks``), fit and evaluate R2F's decoder
(``decoder fit|eval``), run sweeps and render tables and plots.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Callable

from .errors import UserError

RESULT_COLUMNS = ("usr", "usr_seen", "gur", "locality", "rap", "mia", "seconds", "peak_mem_mb", "grad_cosine")


def add_run_options(p: argparse.ArgumentParser, split: bool = True) -> None:
    """Options that pick models, data and targets (shared by run, decoder and tune)."""
    p.add_argument("--model", default="embedded", help="target: hub name, local path, or embedded[:family-hH-lL] (default: the embedded demo model)")
    p.add_argument("--proxy", default="embedded-proxy", help="proxy for R2F's decoder: hub name, local path, or embedded:family-hH-lL")
    p.add_argument("--data-dir", help="benchmark data in its official layout: a local folder, or hf:<owner>/<dataset> to download it (default: the bundled sample)")
    p.add_argument("--targets", help="comma-separated target ids or names")
    p.add_argument("--limit", type=int, help="number of evaluation targets (default 3)")
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
    p.add_argument("--output", default="r2f-output", help="results directory (results.jsonl)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow custom model code from the hub (off by default)")
    p.add_argument("--threads", type=int, help="CPU threads per process (default: OMP_NUM_THREADS, else the cores "
                   "shared among the run's processes); pin it when you compare seconds")


def run_config(args: argparse.Namespace, method: str, task: str):
    from .runner import RunConfig
    from .unlearner import parse_assignments

    return RunConfig(method=method, task=task, seed=args.seed, model=args.model, proxy=args.proxy,
                     data_dir=args.data_dir, limit=args.limit,
                     targets=[t.strip() for t in args.targets.split(",") if t.strip()] if args.targets else None,
                     params=parse_assignments(args.params), views=args.views, paraphraser=args.paraphraser,
                     dev_targets=args.dev_targets, forget_source=args.forget_source,
                     retain_items=args.retain_items, threads=args.threads, output=args.output, trust_remote_code=args.trust_remote_code,
                     split=getattr(args, "split", "eval"), sequential=getattr(args, "sequential", False),
                     save_model=getattr(args, "save_model", None))


def cmd_run(args: argparse.Namespace) -> None:
    from .plugins import registry
    from .runner import run

    registry().method(args.method)
    registry().task(args.task)
    records = run(run_config(args, args.method, args.task), progress=lambda m: print(m, file=sys.stderr, flush=True))
    print(summary(records))
    print(f"\n{len(records)} records appended to {args.output}/results.jsonl")


def summary(records: list[dict]) -> str:
    """A plain table of the headline metrics, one row per target."""
    if not records:
        return "no results"
    cols = [c for c in RESULT_COLUMNS if any(r.get(c) is not None for r in records)]
    head = ["target"] + cols
    rows = [[r["target"]] + [_fmt(r.get(c)) for c in cols] for r in records]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda xs: "  ".join(str(x).ljust(w) for x, w in zip(xs, widths))
    models = records[0]["models"]
    return "\n".join([f"method {records[0]['method']} on {records[0]['task']} | target model: {models['target']} | proxy: {models['proxy']}",
                      line(head), line(["-" * w for w in widths]), *map(line, rows)])


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


def describe(cls: type, width: int = 100) -> str:
    """The plugin's one-line ``description``, else the first paragraph of its docstring."""
    import inspect

    text = getattr(cls, "description", "") or inspect.getdoc(sys.modules[cls.__module__]) or cls.__name__
    line = " ".join(text.strip().split("\n\n")[0].split())
    return line if len(line) <= width else line[:width].rsplit(" ", 1)[0] + " …"


def cmd_list(kind: str) -> Callable[[argparse.Namespace], None]:
    def handler(args: argparse.Namespace) -> None:
        from .plugins import registry

        reg = registry()
        items = reg.listing(kind)
        rows = []
        for info in items:
            cls = reg.method(info.name) if kind == "method" else reg.task(info.name)
            row = {"name": info.name, "version": info.version, "distribution": info.distribution,
                   "description": describe(cls)}
            if kind == "method":
                row["params"] = cls.describe_params()
            else:
                row["yaml_dir"] = str(cls.yaml_dir())
                row["lm_eval_tasks"] = [cls().lm_eval_name(s) for s in cls.forget_sets + cls.neighbor_sets + (cls.utility_set,)]
            rows.append(row)
        if args.json:
            print(json.dumps(rows, indent=2, default=str))
            return
        for row in rows:
            print(f"{row['name']:<14} {row['distribution']} {row['version']:<8} {row['description']}")
            for prm in row.get("params", []):
                print(f"{'':16}{prm['name']}={prm['default']}  {prm['help']}")
            if "yaml_dir" in row:
                print(f"{'':16}lm-eval: --include_path {row['yaml_dir']} --tasks {','.join(row['lm_eval_tasks'])}")
    return handler


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="r2f-bench", description="Run, compare and extend LLM unlearning methods.")
    parser.add_argument("--method", help="unlearning method (see `r2f-bench methods`)")
    parser.add_argument("--task", help="benchmark (see `r2f-bench tasks`)")
    add_run_options(parser)
    sub = parser.add_subparsers(dest="command")
    for kind, name in (("method", "methods"), ("task", "tasks")):
        p = sub.add_parser(name, help=f"list installed {name}")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=cmd_list(kind))
    from . import cache_cli, decoder_cli
    from .plots import add_plot_parser
    from .sweep import add_sweep_parser
    from .tables import add_table_parser
    from .tune import add_tune_parser

    decoder_cli.add_parser(sub)
    cache_cli.add_parser(sub)
    add_tune_parser(sub)
    add_sweep_parser(sub)
    add_table_parser(sub)
    add_plot_parser(sub)
    return parser


def quiet_libraries() -> None:
    """Our own progress lines replace library progress bars; FutureWarnings are theirs.
    Called first by every entry point (tqdm reads TQDM_DISABLE when imported)."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    os.environ.setdefault("TQDM_DISABLE", "1")


def guarded(command: Callable[[], None], interrupted: str) -> int:
    """Run an entry point's command: a UserError prints one line and exits 2, Ctrl-C exits 130,
    a closed pipe on stdout exits 141 (as a shell reports SIGPIPE) without a traceback."""
    try:
        command()
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`r2f-bench methods | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 0


def main(argv: list[str] | None = None) -> int:
    quiet_libraries()
    parser = build_parser()
    args = parser.parse_args(argv)

    def command() -> None:
        if getattr(args, "func", None):
            args.func(args)
        elif args.method and args.task:
            cmd_run(args)
        else:
            parser.error("give --method and --task, or a subcommand (methods, tasks, decoder, ...)")

    return guarded(command, "interrupted; finished results are in the output directory")


if __name__ == "__main__":
    sys.exit(main())
