"""``r2f-bench cache info|clear|build``: what the cache holds (embedded models, untouched-model
evaluations, fitted decoders, knowledge worlds, entries set aside as corrupt), emptying it, and teaching the
shipped demo models' recipes here to compare them with what ships."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from typing import Any
from pathlib import Path

from ..errors import UserError
from ..cache import KINDS, PARTIAL, cache_root, check_cache
from .options import add_quiet_option, add_seeds_option, add_task_option, say

TEACHINGS = "teachings under way"  # saved states of world teachings (models/*.partial.safetensors)


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _entries(root: Path) -> dict[str, list[Path]]:
    try:
        out = {kind: sorted((root / kind).iterdir()) if (root / kind).is_dir() else [] for kind in KINDS}
    except OSError as exc:
        raise UserError(f"cannot read the cache {root} ({exc.strerror}); check its permissions, "
                        f"or set R2F_BENCH_CACHE to another folder.") from None
    kept = {kind: [p for p in paths if ".corrupt-" not in p.name and not p.name.startswith(".")]
            for kind, paths in out.items()}
    under_way = [p for p in kept["models"] if p.name.endswith(PARTIAL)]
    kept["models"] = [p for p in kept["models"] if p not in under_way]
    return kept | {TEACHINGS: under_way, "set aside as corrupt": sorted(root.glob("*/*.corrupt-*"))}


def _saved_step(path: Path) -> str:
    """The step a teaching's saved state was taken after (its metadata; torch is not loaded)."""
    try:
        with path.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            if size > 1 << 24:  # not a header's length: the file is not a saved state
                raise ValueError(size)
            header = json.loads(f.read(size))
        return f"saved after step {int(header['__metadata__']['step'])}"
    except (OSError, ValueError, KeyError, TypeError):
        return "unreadable (set aside when its teaching runs again)"


def cmd_info(args: argparse.Namespace) -> None:
    root = cache_root()
    print(f"cache {root} (set R2F_BENCH_CACHE to move it)")
    for kind, paths in _entries(root).items():
        print(f"  {kind:<22} {len(paths):>4} entries  {sum(map(_size, paths)) / 1e6:9.1f} MB")
        if kind == TEACHINGS:  # each goes on when its command runs again; one whose command changed never will
            for p in paths:
                print(f"    {p.name[:-len(PARTIAL)]}: {_saved_step(p)}, {_age(p)} ago (the same command goes on from it; "
                      f"`cache clear` removes it)")


def _age(path: Path) -> str:
    hours = (time.time() - path.stat().st_mtime) / 3600
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.0f} days"


def cmd_clear(args: argparse.Namespace) -> None:
    root = cache_root()
    removed = 0
    try:
        for paths in _entries(root).values():
            for p in paths:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:  # a file, or a link (to a folder too): the link goes, never what it points at
                    p.unlink()
                removed += 1
    except OSError as exc:
        raise UserError(f"cannot remove {exc.filename} from the cache ({exc.strerror}); check its permissions.") from None
    print(f"removed {removed} cache entries from {root}; models are rebuilt on the next run")


def cmd_build(args: argparse.Namespace) -> None:
    from ..engine.demo_rebuild import rebuild
    from ..results.sweep import parse_seeds

    seeds = parse_seeds(args.seeds)
    check_cache()  # before the teaching, not after it
    for rebuilt in rebuild(args.task, seeds, args.ship, say(args)):
        print(rebuilt.line())


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cache", help="show or empty the cache of built models, evaluations and decoders",
                       description="The cache (R2F_BENCH_CACHE, default ~/.cache/r2f-bench) holds taught embedded models, "
                                   "untouched-model evaluations and fitted decoders; every entry is rebuilt when missing.")
    verbs = p.add_subparsers(dest="verb", required=True)
    verbs.add_parser("info", help="entries and sizes by kind").set_defaults(func=cmd_info)
    verbs.add_parser("clear", help="remove every entry (models are rebuilt when next needed)").set_defaults(func=cmd_clear)
    build = verbs.add_parser("build", help="teach the shipped demo models' recipes here and compare them with what ships",
                             description="Teaches the default knowledge world's target and proxy for each run seed on "
                                         "this machine (into the cache; one already cached is loaded) and prints how "
                                         "each differs from the model r2f-bench ships for the same recipe.")
    add_seeds_option(build, "the run seeds whose models to teach")
    add_task_option(build, "whose default knowledge world is taught")
    build.add_argument("--ship", action="store_true",
                       help="maintainers: make the models taught here the shipped ones (writes into the package)")
    add_quiet_option(build)
    build.set_defaults(func=cmd_build)
