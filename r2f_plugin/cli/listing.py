"""``r2f-bench methods``, ``tasks`` and ``attacks``: what is installed, and from where."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import shutil
import sys
import textwrap
from typing import Any, Callable

from ..engine.config import INPUT_FIELDS, OPTIONS, unread_fields
from ..plugins import registry
from .options import add_json_option


def describe(cls: type) -> str:
    """The plugin's one-line ``description``, else the first paragraph of its module's docstring."""
    text = getattr(cls, "description", "") or inspect.getdoc(sys.modules[cls.__module__]) or cls.__name__
    return " ".join(text.strip().split("\n\n")[0].split())


def print_wrapped(lead: str, text: str, width: int) -> None:
    """``lead`` then ``text``, wrapped to ``width`` columns under the text's first column
    (words, paths and lists are never split)."""
    print(textwrap.fill(text, width=width, initial_indent=lead, subsequent_indent=" " * len(lead),
                        break_long_words=False, break_on_hyphens=False))


def cmd_list(kind: str) -> Callable[[argparse.Namespace], None]:
    def handler(args: argparse.Namespace) -> None:
        reg = registry()
        rows = []
        for info in reg.listing(kind):
            cls = {"method": reg.method, "task": reg.task, "attack": reg.attack}[kind](info.name)
            row = {"name": info.name, "version": info.version, "distribution": info.distribution,
                   "description": describe(cls)}
            if kind == "method":
                row["params"] = cls.describe_params()
                unread = unread_fields(cls, cls.parse_params())
                row["reads_options"] = [OPTIONS[f].flag for fs in INPUT_FIELDS.values() for f in fs if f not in unread]
            elif kind == "attack":
                row["params"] = [{"name": f.name, "default": f.default, "help": f.metadata.get("help", "")}
                                 for f in dataclasses.fields(cls.Params)]
            else:
                row["yaml_dir"] = str(cls.yaml_dir())
                row["lm_eval_tasks"] = [cls().lm_eval_name(s) for s in cls.forget_sets + cls.locality_sets + (cls.utility_set,)]
            rows.append(row)
        if args.json:
            print(json.dumps(rows, indent=2, default=str))
            return
        origin = {id(r): f"{r['distribution']} {r['version']}" for r in rows}
        name_w = max((len(r["name"]) for r in rows), default=0) + 2
        origin_w = max((len(o) for o in origin.values()), default=0) + 2
        width = shutil.get_terminal_size((100, 24)).columns
        for row in rows:
            print_wrapped(f"{row['name']:<{name_w}}{origin[id(row)]:<{origin_w}}", row["description"], width)
            for prm in row.get("params", []):
                print_wrapped(f"{'':{name_w + 2}}{prm['name']}={prm['default']}  ", prm["help"], width)
            if "reads_options" in row:
                print_wrapped(f"{'':{name_w + 2}}reads (at these defaults): ",
                              ", ".join(row["reads_options"]) or "none of --views, --paraphraser, --retain-items, "
                                                                  "--target-modules", width)
            if "yaml_dir" in row:
                print_wrapped(f"{'':{name_w + 2}}lm-eval: ",
                              f"--include_path {row['yaml_dir']} --tasks {','.join(row['lm_eval_tasks'])}", width)
    return handler


def add_parser(subparsers: Any) -> None:
    for kind, name in (("method", "methods"), ("task", "tasks"), ("attack", "attacks")):
        p = subparsers.add_parser(name, help=f"list installed {name}", description=f"List the installed {name}, "
                                  f"built-in and third-party, with their versions{'' if kind == 'task' else ' and parameters'}.")
        add_json_option(p, "the listing")
        p.set_defaults(func=cmd_list(kind))
