"""docs/methods.md states each method's defaults beside the reasons for them: every default
it names (``name=value`` in a method's section) is the one the method's ``Params`` holds."""

import dataclasses
import re
from pathlib import Path

from r2f_bench.plugins import registry

DOC = Path(__file__).resolve().parents[1] / "docs" / "methods.md"


def stated_values() -> dict[str, dict[str, list[str]]]:
    """Per method section (``## name — ...``; its first method), each parameter's values written as `name=value`."""
    installed = {info.name for info in registry().listing("method")}
    out: dict[str, dict[str, list[str]]] = {}
    for section in re.split(r"^## ", DOC.read_text(encoding="utf-8"), flags=re.M)[1:]:
        head, body = section.split("\n", 1)
        names = [n.strip() for n in re.split(r"[,/]", head.split(" — ")[0]) if n.strip() in installed]
        if names:
            fields = {f.name for f in dataclasses.fields(registry().method(names[0]).Params)}
            for name, value in re.findall(r"`(\w+)=([^`\s]+)`", body):
                if name in fields:
                    out.setdefault(names[0], {}).setdefault(name, []).append(value)
    return out


def test_every_default_the_methods_doc_states_is_the_methods_own():
    stated = stated_values()
    assert {"fullgrad", "npo", "rmu", "r2f"} <= set(stated)  # the doc is read: its sections were found
    stale = []
    for method, params in stated.items():
        cls = registry().method(method)
        default = cls.Params()
        for name, values in params.items():  # a section may also name other values it tried; one must be the default
            if not any(getattr(cls.parse_params({name: v}), name) == getattr(default, name) for v in values):
                stale.append(f"{method}: {name} stated {values}, default {getattr(default, name)!r}")
    assert not stale, stale
