"""Where things live: production code imports no test tooling, and methods take shared
tools from the methods' toolkit (``training``), not from the engine."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCTION = ("r2f_plugin", "baselines", "tasks", "attacks")


def imported_modules(path: Path) -> set[str]:
    """Top-level names of the modules ``path`` imports (absolute imports only)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_no_production_module_imports_unittest():
    offenders = [str(p.relative_to(ROOT)) for folder in PRODUCTION for p in sorted((ROOT / folder).rglob("*.py"))
                 if "unittest" in imported_modules(p)]
    assert not offenders, f"production modules import unittest: {offenders}"


def test_eco_and_views_embed_with_the_training_embedder():
    from r2f_bench.baselines import eco
    from r2f_bench.engine import views
    from r2f_bench.training import embedder

    assert eco.embed is embedder.embed and views.embed is embedder.embed
    assert not hasattr(views, "embedder")


# The floor plan (docs/layout.md): each layer imports only its own and lower layers. A
# plugin's commands are command-line code, so they sit with the CLI.
LAYERS = {"": 0, "training": 1, "engine": 2, "tasks": 3, "baselines": 3, "attacks": 3, "r2f": 3, "results": 4, "cli": 5,
          "__main__": 5, "r2f.commands": 5}
FOLDERS = {"r2f_plugin": "", "baselines": "baselines", "tasks": "tasks", "attacks": "attacks"}


def module_name(path: Path) -> tuple[str, bool]:
    """``path``'s module name below ``r2f_bench`` (``""``: the package itself) and whether it is a package."""
    folder = path.relative_to(ROOT).parts[0]
    parts = [FOLDERS[folder]] if FOLDERS[folder] else []
    parts += list(path.relative_to(ROOT / folder).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def layer(module: str) -> int:
    """The layer of a module: that of its longest listed prefix."""
    best = max((p for p in LAYERS if p and (module == p or module.startswith(p + "."))), key=len, default="")
    return LAYERS[best]


def package_imports(path: Path) -> set[str]:
    """The ``r2f_bench`` modules ``path`` imports, relative imports resolved, below ``r2f_bench``."""
    name, is_package = module_name(path)
    here = name.split(".") if name else []
    if not is_package:
        here = here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("r2f_bench")):
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module.removeprefix("r2f_bench").lstrip(".")
            found |= {f"{base}.{a.name}".lstrip(".") for a in node.names}  # a name may be a submodule
        elif isinstance(node, ast.Import):
            found |= {a.name.removeprefix("r2f_bench").lstrip(".") for a in node.names if a.name.startswith("r2f_bench")}
    return found


# the one import that points up, on purpose: R2F's register_commands hook loads its commands
# when the command line builds its parser
ALLOWED = {("r2f", "r2f.commands")}


def test_no_layer_imports_a_layer_above_it():
    upward = [f"{module_name(p)[0]} -> {m}" for folder in PRODUCTION for p in sorted((ROOT / folder).rglob("*.py"))
              for m in package_imports(p)
              if layer(m) > layer(module_name(p)[0]) and (module_name(p)[0], m) not in ALLOWED]
    assert not upward, f"imports that point up a layer (see docs/layout.md): {upward}"


def test_the_layer_check_sees_an_upward_import():
    assert layer("engine.run") == 2 and layer("results.store") == 4 and layer("r2f.commands") == 5
    assert layer("") == 0 and layer("cache") == 0 and layer("tasks.rwku.world") == 3
    assert "results.store.Store" in package_imports(ROOT / "r2f_plugin" / "results" / "sweep.py")
    assert "r2f.commands" in package_imports(ROOT / "r2f_plugin" / "r2f" / "__init__.py")


def test_the_framework_names_no_built_in_method_or_task():
    """Only plugins (and ``plugins.py``, which lists them) name a method or task: the engine,
    the results layer and the commands learn them from the registry."""
    from r2f_bench.plugins import registry

    names = {info.name for kind in ("method", "task") for info in registry().listing(kind)}
    package = ROOT / "r2f_plugin"
    framework = [p for p in sorted(package.rglob("*.py")) if p.name != "plugins.py"
                 and (p.parent == package or p.relative_to(package).parts[0] in ("engine", "results", "cli", "training"))]
    named = [f"{p.relative_to(ROOT)}:{node.lineno}: {node.value!r}" for p in framework
             for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and node.value in names]
    assert not named, named
