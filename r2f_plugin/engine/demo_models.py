"""The taught demo models r2f-bench ships, like any pretrained checkpoint.

Teaching an embedded model thousands of steps amplifies the rounding of each CPU
family's kernels, so the same recipe taught on two processors gives two models. The
demo models of the default knowledge world are therefore taught once and shipped in
``r2f_bench/demo_models/`` (safetensors): every machine loads the same weights and
prints the same demo. Each is found by its *recipe* (everything that determines it
except the machine and library versions), verified by the SHA-256 of every file in
its folder, and never taught again; one that fails its check is not trusted (a
warning line, then the model is taught here as any other recipe is).

``manifest.json`` maps a recipe key to its folder and file hashes; each folder's
``r2f_info.json`` says how it was taught and on what machine. ``r2f-bench cache build``
teaches the same recipes here and says how they differ (``--ship`` writes them here).
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
from pathlib import Path
from typing import Any, Callable

from ..atomic import atomic_dir, atomic_write_text
from ..hardware import cpu

HERE = Path(__file__).resolve().parents[1] / "demo_models"
MANIFEST = HERE / "manifest.json"
WEIGHTS = "model.safetensors"


def manifest() -> dict[str, dict[str, Any]]:
    """Recipe key -> ``{"folder": name, "sha256": {file: digest}}`` (empty if none shipped)."""
    try:
        entries = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return {}
    return entries if isinstance(entries, dict) else {}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def weights_key(recipe: str) -> str | None:
    """The cache key of a shipped model's weights (its weights' hash), ``None`` if the
    recipe ships none: what evaluations and decoders computed on it are keyed by."""
    entry = manifest().get(recipe)
    if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), dict):
        return None
    digest = entry["sha256"].get(WEIGHTS)
    return f"shipped-{digest[:16]}" if isinstance(digest, str) else None


def verified(recipe: str, progress: Callable[[str], None]) -> Path | None:
    """The folder of the model shipped for ``recipe`` if every file's hash matches the
    manifest; ``None`` if none is shipped or it fails the check (one warning line)."""
    entry = manifest().get(recipe)
    if entry is None:
        return None
    folder = HERE / str(entry.get("folder", ""))
    hashes = entry.get("sha256")
    if not isinstance(hashes, dict) or WEIGHTS not in hashes:
        progress(f"warning: shipped demo model {recipe}: its manifest entry lists no weights; teaching it here instead")
        return None
    for name, digest in hashes.items():
        path = folder / name
        if not path.is_file() or sha256(path) != digest:
            progress(f"warning: shipped demo model {folder.name}: {name} is missing or does not match its hash "
                     f"(a damaged install: reinstall r2f-bench); teaching it here instead")
            return None
    return folder


def machine() -> dict[str, str]:
    """What taught a model: the processor, its vector extensions, and the libraries."""
    import torch
    import transformers

    name, vector = cpu()
    return {"cpu": name, "vector_extensions": vector, "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__}


def ship(recipe: str, cached: Path, name: str) -> Path:
    """Copy the taught model at ``cached`` (a cache entry) into the shipped models as folder
    ``name`` under ``recipe``, and record its files' hashes (maintainers: ``r2f-bench cache
    build --ship``). It replaces the model shipped for an older recipe of the same
    architecture and run seed (``name`` less its recipe key): no run can reach that one."""
    folder = HERE / name
    with atomic_dir(folder) as tmp:
        for path in sorted(cached.iterdir()):
            if path.is_file():
                shutil.copyfile(path, tmp / path.name)
    entries = manifest()
    kind = name.rsplit("-", 1)[0]
    for old in [k for k, e in entries.items() if k != recipe and e["folder"].rsplit("-", 1)[0] == kind]:
        shutil.rmtree(HERE / entries.pop(old)["folder"], ignore_errors=True)
    entries[recipe] = {"folder": folder.name, "sha256": {p.name: sha256(p) for p in sorted(folder.iterdir())}}
    atomic_write_text(MANIFEST, json.dumps(entries, indent=2, sort_keys=True) + "\n")
    return folder
