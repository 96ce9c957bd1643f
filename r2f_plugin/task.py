"""The contract every benchmark implements."""

from __future__ import annotations

import hashlib
import inspect
import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

from .data import Benchmark
from .errors import UserError

HUB_PREFIX = "hf:"


def data_path(data_dir: str | None) -> Path | None:
    """A ``--data-dir`` value as a local folder in the benchmark's official layout.

    ``None`` stays ``None`` (the bundled sample: a run never switches its data on
    whether the network happens to be reachable); ``hf:<owner>/<dataset>`` is
    downloaded once into the Hugging Face cache (``snapshot_download``) and read from
    there; anything else is a local path.
    """
    if not data_dir:
        return None
    if not data_dir.startswith(HUB_PREFIX):
        return Path(data_dir)
    from huggingface_hub import snapshot_download

    repo = data_dir[len(HUB_PREFIX):]
    try:
        return Path(snapshot_download(repo_id=repo, repo_type="dataset"))
    except Exception as exc:  # offline, unknown repository, gated access: all end the same way
        raise UserError(f"cannot fetch dataset {repo!r} from the Hugging Face hub ({type(exc).__name__}); "
                        f"download it where the hub is reachable and pass its local folder as --data-dir.") from None


class Task(ABC):
    """A benchmark: loads its official layout, builds each target's forget request and
    names its probe sets.

    Every probe set of a target is an lm-eval task named ``f"{name}_{set}"`` whose YAML
    lives in :meth:`yaml_dir`. A set plays one of three roles in the scores: a
    *neighbour* set (``neighbor_sets``: locality), a *seen* set (the benchmark's
    ``seen_sets``: built from the request's own strings, reported as ``usr_seen``) or a
    *held-out forget* set (every other set: the headline USR). ``forget_sets`` lists
    every forget set the task can produce (for ``r2f-bench tasks``).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    forget_sets: ClassVar[tuple[str, ...]] = ()
    neighbor_sets: ClassVar[tuple[str, ...]] = ()
    utility_set: ClassVar[str] = "utility"
    # the requests a user may pick with --forget-source (first: default; empty: one kind)
    forget_sources: ClassVar[tuple[str, ...]] = ()
    # generation length for each lm-eval task of this benchmark
    max_answer_tokens: ClassVar[int] = 16

    @abstractmethod
    def load(self, data_dir: Path | None, targets: list[str] | None, limit: int | None,
             n_dev: int, forget_source: str | None = None) -> Benchmark:
        """Read the benchmark from ``data_dir`` (``None``: the bundled sample).

        ``targets`` picks evaluation targets by id or name, else the first ``limit``;
        ``n_dev`` targets disjoint from them form the dev split; ``forget_source`` is
        one of :attr:`forget_sources` (``None``: the default). The result must keep
        every evaluated string out of what a method sees (:mod:`r2f_bench.protocol`).
        """

    def chance(self, probe_set: str) -> float:
        """The chance of answering a probe of ``probe_set`` right without knowing it
        (multiple choice: 1 / #choices); USR and RAP take it as their floor."""
        return 0.0

    @classmethod
    def yaml_dir(cls) -> Path:
        """Directory holding this task's lm-eval YAMLs (for ``--include_path``):
        by default the folder of the task's module."""
        return Path(inspect.getfile(cls)).parent

    def official_scores(self, set_scores: dict[str, float]) -> dict[str, float]:
        """The benchmark's own headline numbers from per-set mean scores.

        The default reports each forget and neighbour set's mean under its own name.
        """
        return {s: set_scores[s] for s in self.forget_sets + self.neighbor_sets if s in set_scores}

    def extra_scores(self, model: Any, tokenizer: Any, benchmark: Benchmark, target: Any) -> dict[str, float]:
        """Official metrics that are not per-probe generations (e.g. MUSE PrivLeak's
        Min-K% scores). Called on the untouched and on the unlearned model; the
        default has none."""
        return {}

    def lm_eval_name(self, probe_set: str) -> str:
        return f"{self.name}_{probe_set}"


def read_json(path: Path, required: tuple[str, ...] = (), array: bool = True) -> Any:
    """Read a JSON data file, failing with one line that names the file, the row, the
    field and what was expected. ``array``: the file must hold a JSON array of objects,
    each with the ``required`` fields set (not null)."""
    if path.is_dir() or not path.exists():
        raise UserError(f"missing data file {path}; check --data-dir points at the benchmark's official layout.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"malformed data file {path}: {exc}; restore the original file.") from None
    if not array:
        return data
    if not isinstance(data, list):
        raise UserError(f"malformed data file {path}: expected a JSON array of rows, got a JSON "
                        f"{type(data).__name__}; restore the original file.")
    for i, row in enumerate(data):
        if required and not isinstance(row, dict):
            raise UserError(f"malformed data file {path}: row {i} is a {type(row).__name__}, expected an object; restore the original file.")
        for k in required:
            if k not in row:
                raise UserError(f"malformed data file {path}: row {i} lacks field {k!r}; restore the original file.")
            if row[k] is None:
                raise UserError(f"malformed data file {path}: row {i} field {k!r} is null; restore the original file.")
    return data


def content_hash(paths: list[Path]) -> str:
    """Short hash of the files' bytes: the data revision recorded with each result."""
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]
