"""Every ``r2f-bench`` command in a code block of the README, the docs and the task and benchmark
READMEs parses with today's CLI, names registered methods and tasks, and passes each of its
methods only ``--set`` parameters (and values) that method accepts: examples do not rot."""

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from r2f_bench.cli.main import build_parser, refuse_options_before
from r2f_bench.engine.config import names
from r2f_bench.plugins import registry
from r2f_bench.unlearner import method_variant, parse_assignments

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("tasks/*/README.md")),
         *sorted(ROOT.glob("benchmarks/**/README.md"))]
CALL = re.compile(r"^(?:r2f-bench|[^#].*-m r2f_bench)(?=\s|$)")  # not in a comment


def commands(page: Path) -> list[str]:
    """The r2f-bench command lines of ``page``'s fenced code blocks, continuation lines joined,
    comments, pipes and redirections cut off."""
    found = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            head = CALL.match(line.strip())
            if head:
                found.append(re.split(r"\s(?:#|\||&&|>)", line.strip()[head.end():])[0])
    return found


CASES = [pytest.param(argv, id=f"{page.name}:{n}") for page in PAGES for n, argv in enumerate(commands(page))]


def test_the_docs_hold_commands():
    assert len(CASES) >= 40  # the extraction finds what it should


@pytest.mark.parametrize("line", CASES)
def test_a_documented_command_is_valid(line):
    err, parser, argv = io.StringIO(), build_parser(), shlex.split(line)
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:
            assert not exit_.code, err.getvalue()
            return  # --help
    if args.command:
        refuse_options_before(parser, argv, args.command)
    plugins = registry()
    known = {kind: {i.name for i in plugins.listing(kind)} | {"all"} for kind in ("method", "task")}
    for task in names(getattr(args, "tasks", None) or getattr(args, "task", None)) or []:
        assert task in known["task"], f"unknown task {task!r}"
    settings = parse_assignments(getattr(args, "params", None) or [])
    for entry in names(getattr(args, "methods", None) or getattr(args, "method", None)) or []:
        name, overrides = method_variant(entry)
        assert name in known["method"], f"unknown method {name!r}"
        for method in known["method"] - {"all"} if name == "all" else [name]:
            plugins.method(method).parse_params({**settings, **overrides})
