"""The contract every task (the adapter of one benchmark) implements, written once.

**Probe sets and roles.** A task's :meth:`Task.load` gives each target probe sets by
name. Every set is an lm-eval task named ``f"{task}_{set}"`` (:meth:`Task.lm_eval_name`)
whose YAML lives in :meth:`Task.yaml_dir`, and plays exactly one :data:`ROLES` role in
the scores (:meth:`Task.role`): the benchmark's general-utility set (``utility``),
a neighbour set (``locality``: ``locality_sets``), a set built from the request's own
strings (``seen``: :attr:`~r2f_bench.data.Benchmark.seen_sets`), the name-mention
control (``name_control``: ``name_control_set``, the neighbour probes asked with the
target's name in them), or else a held-out forget set (``held_out``: the headline USR). Methods and the run
(:class:`r2f_bench.engine.run.Run`) read roles, never set-name prefixes.

**Per-probe metrics.** Each YAML's ``process_results`` returns, per probe, some of
:data:`METRIC_KEYS`: generation tasks :data:`SCORE` (ROUGE-L recall of the reference,
0–1) and :data:`ANSWERED` (1 when the answer counts as given); multiple-choice tasks
:data:`ACC` (1 when the right choice has the highest likelihood, which also counts as
answered). The run reads only these keys.

**Generation length** is the YAML's ``generation_kwargs.max_gen_toks``: one source,
read by lm-eval in a run and from the ``lm_eval`` command alike.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Mapping, Sequence

import yaml

from .data import Benchmark, Target
from .errors import UserError

# the roles a probe set plays in the scores
UTILITY, LOCALITY, SEEN, HELD_OUT = "utility", "locality", "seen", "held_out"
NAME_CONTROL = "name_control"  # neighbour probes asked with the target's name in them
ROLES = (UTILITY, LOCALITY, SEEN, HELD_OUT, NAME_CONTROL)
# the per-probe metric keys a task's lm-eval process_results returns
SCORE, ANSWERED, ACC = "rouge_l_recall", "answered", "acc"
METRIC_KEYS = (SCORE, ANSWERED, ACC)

HUB_PREFIX = "hf:"
# the keys every probe-set YAML needs, itself or through its ``include``; a group YAML needs GROUP_FIELDS
YAML_FIELDS = ("task", "output_type", "custom_dataset", "dataset_kwargs", "doc_to_text", "doc_to_target")
GROUP_FIELDS = ("group", "task")
YAML_FIX = "see docs/tasks.md for the keys a task YAML needs"


@dataclass(frozen=True)
class HubData:
    """A dataset on the Hugging Face hub: ``hf:<owner>/<dataset>[/<config>]``."""

    repo: str
    config: str | None = None

    @classmethod
    def parse(cls, text: str) -> "HubData":
        parts = text[len(HUB_PREFIX):].strip("/").split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise UserError(f"bad hub address {text!r}; write hf:<owner>/<dataset>[/<config>], "
                            f"e.g. hf:Glow-AI/WaterDrum-TOFU/forget_05.")
        return cls("/".join(parts[:2]), parts[2] if len(parts) == 3 else None)


def data_source(data_dir: str | None) -> Path | HubData | None:
    """A ``--data-dir`` value: ``None`` (the bundled sample: a run never switches its data
    on whether the network happens to be reachable), a hub address, or a local path."""
    if not data_dir:
        return None
    return HubData.parse(data_dir) if data_dir.startswith(HUB_PREFIX) else Path(data_dir)


def download(hub: HubData) -> Path:
    """The hub dataset's files, downloaded once into the Hugging Face cache; a config
    names a folder of the snapshot."""
    from huggingface_hub import snapshot_download

    try:
        root = Path(snapshot_download(repo_id=hub.repo, repo_type="dataset"))
    except Exception as exc:  # offline, unknown repository, gated access: all end the same way
        raise UserError(f"cannot fetch dataset {hub.repo!r} from the Hugging Face hub ({type(exc).__name__}); "
                        f"download it where the hub is reachable and pass its local folder as --data-dir.") from None
    return root / hub.config if hub.config else root


class Task(ABC):
    """A task, the adapter of one benchmark: loads its official layout, builds each target's
    forget request and names its probe sets (roles, metric keys and YAML names: the module docstring).

    ``forget_sets`` lists every forget set the task can produce (for ``r2f-bench
    tasks``); ``locality_sets`` are its locality sets; ``utility_set`` names the
    general-utility set.
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    forget_sets: ClassVar[tuple[str, ...]] = ()
    locality_sets: ClassVar[tuple[str, ...]] = ()
    utility_set: ClassVar[str] = "utility"
    # the probe set of the name-mention control (None: the task has none; see :data:`NAME_CONTROL`)
    name_control_set: ClassVar[str | None] = None
    # the requests a user may pick with --forget-source (first: default; empty: one kind)
    forget_sources: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "neighbor_sets" in vars(cls):  # the attribute's name before it matched the metric's: read, and said
            warnings.warn(f"task class {cls.__name__}: `neighbor_sets` is now `locality_sets`; rename it",
                          DeprecationWarning, stacklevel=2)
            cls.locality_sets = vars(cls)["neighbor_sets"]

    @abstractmethod
    def load(self, data_dir: Path | HubData | None, targets: list[str] | None, limit: int | None,
             n_dev: int, forget_source: str | None = None) -> Benchmark:
        """Read the benchmark from ``data_dir`` (``None``: the bundled sample; a
        :class:`HubData` only where :meth:`locate` passes it through).

        ``targets`` picks evaluation targets by id or name, else the first ``limit``;
        ``n_dev`` targets disjoint from them form the dev split; ``forget_source`` is
        one of :attr:`forget_sources` (``None``: the default). The result must keep
        every evaluated string out of what a method sees (:mod:`r2f_bench.engine.protocol`).
        """

    def locate(self, data_dir: str | None) -> Path | HubData | None:
        """Where :meth:`load` reads from, given ``--data-dir``. The default downloads a hub
        dataset's files and reads them as the official layout; a task that reads the hub
        through ``datasets`` itself returns the :class:`HubData` unchanged."""
        source = data_source(data_dir)
        return download(source) if isinstance(source, HubData) else source

    def role(self, probe_set: str, bench: Benchmark) -> str:
        """The :data:`ROLES` role ``probe_set`` plays in ``bench``'s scores."""
        if probe_set == self.utility_set:
            return UTILITY
        if probe_set == self.name_control_set:
            return NAME_CONTROL
        if probe_set in self.locality_sets:
            return LOCALITY
        return SEEN if probe_set in bench.seen_sets else HELD_OUT

    def roles_of(self, bench: Benchmark, targets: list[Target]) -> dict[str, str]:
        """Probe set -> role, for every set of ``targets`` (e.g. a method's dev targets)."""
        return {s: self.role(s, bench) for t in targets for s in t.probes}

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
        return {s: set_scores[s] for s in self.forget_sets + self.locality_sets if s in set_scores}

    def extra_scores(self, model: Any, tokenizer: Any, bench: Benchmark, target: Any) -> dict[str, float]:
        """Official metrics that are not per-probe generations (e.g. MUSE PrivLeak's
        Min-K% scores). Called on the untouched and on the unlearned model; the
        default has none."""
        return {}

    @classmethod
    def lm_eval_name(cls, probe_set: str) -> str:
        return f"{cls.name}_{probe_set}"


def read_json(path: Path, required: tuple[str, ...] = (), array: bool = True,
              text: Sequence[str] | None = None) -> Any:
    """Read a JSON data file, failing with one line that names the file, the row, the
    field and what was expected. ``array``: the file must hold a JSON array of objects,
    each with the ``required`` fields set (not null), those of ``text`` (default: all of
    them) as text (:func:`require_fields`)."""
    if path.is_dir() or not path.exists():
        raise UserError(f"missing data file {path}; check --data-dir points at the benchmark's official layout.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"malformed data file {path}: {exc}; restore the original file.") from None
    except RecursionError:
        raise UserError(f"malformed data file {path}: nested too deeply to read; restore the original file.") from None
    if not array:
        return data
    if not isinstance(data, list):
        raise UserError(f"malformed data file {path}: expected a JSON array of rows, got a JSON "
                        f"{type(data).__name__}; restore the original file.")
    require_fields(data, required, path, text)
    return data


def missing_field(mapping: Mapping[str, Any], required: Sequence[str]) -> str | None:
    """What the first of ``required`` that ``mapping`` lacks or holds as null is missing
    (``"lacks field 'k'"``, ``"field 'k' is null"``; ``None``: all are set): the one
    required-field check, for data rows and task YAMLs alike."""
    for k in required:
        if k not in mapping:
            return f"lacks field {k!r}"
        if mapping[k] is None:
            return f"field {k!r} is null"
    return None


def require_fields(rows: list[Any], required: Sequence[str], where: Path | str,
                   text: Sequence[str] | None = None) -> None:
    """One line naming ``where``, the row and the field when a row is no object, lacks one
    of the ``required`` fields (or holds it as null), or holds one of ``text`` (default:
    every required field) as anything but a string (a number, a list, ``NaN``: never
    silently turned into one)."""
    text = required if text is None else text
    for i, row in enumerate(rows if required else ()):
        if not isinstance(row, dict):
            raise UserError(f"malformed data file {where}: row {i} is a {type(row).__name__}, expected an object; restore the original file.")
        if why := missing_field(row, required):
            raise UserError(f"malformed data file {where}: row {i} {why}; restore the original file.")
        for k in text:
            if not isinstance(row[k], str):
                raise UserError(f"malformed data file {where}: row {i} field {k!r} is {json.dumps(row[k])[:40]}, "
                                f"expected text; restore the original file.")


def content_hash(paths: list[Path]) -> str:
    """Short hash of the files' bytes: the data revision recorded with each result."""
    h = hashlib.sha256()
    for p in sorted(paths):
        if not p.is_file():  # a folder, a pipe (read_bytes would wait forever) or a link to nowhere or to itself
            raise UserError(f"data file {p} is not a regular file (a folder, a pipe or a broken link); remove it "
                            f"or put the JSON file there.")
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


class _YamlLoader(yaml.SafeLoader):
    """Reads lm-eval's ``!function module.name`` tags as their text (nothing is imported)."""


_YamlLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def read_yaml(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """One lm-eval task YAML, merged over its ``include`` (the file's own keys win);
    ``chain``: the YAMLs that include it (an include cycle is one line)."""
    if path in chain:
        names = " -> ".join(p.name for p in (*chain, path))
        raise UserError(f"task YAML {chain[0]} includes itself ({names}); break the cycle.")
    try:
        config = yaml.load(path.read_text(encoding="utf-8"), Loader=_YamlLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        why = f"{getattr(exc, 'problem', None) or exc}" + (f" at line {mark.line + 1}" if mark else "")
        raise UserError(f"task YAML {path} cannot be parsed ({why}); fix its YAML syntax ({YAML_FIX}).") from None
    if not isinstance(config, dict):
        raise UserError(f"task YAML {path} holds a {type(config).__name__}, not a mapping of lm-eval keys; {YAML_FIX}.")
    include = config.pop("include", None)
    if include is None:
        return config
    base = path.parent / str(include)
    if not base.is_file():
        raise UserError(f"task YAML {path} includes {include}, which is not in {path.parent}; fix the include or "
                        f"restore that file.")
    return {**read_yaml(base, (*chain, path)), **config}


def check_yamls(task: type[Task]) -> None:
    """Refuse, with one line naming the file, a task whose lm-eval YAMLs do not parse or
    whose probe-set YAMLs (all but the shared ``_*.yaml`` includes) lack a
    :data:`YAML_FIELDS` key (a group YAML: :data:`GROUP_FIELDS`), or that has no YAML for
    one of its probe sets (lm-eval would fail with a KeyError after the model loads)."""
    defined = set()
    for path in sorted(task.yaml_dir().glob("*.yaml")):
        config = read_yaml(path)
        required = GROUP_FIELDS if "group" in config else YAML_FIELDS
        if not path.name.startswith("_") and (why := missing_field(config, required)):
            raise UserError(f"task YAML {path} {why} (itself or through its include); add it ({YAML_FIX}).")
        if "group" not in config:
            defined.add(str(config.get("task")))
    for probe_set in (*task.forget_sets, *task.locality_sets, task.utility_set, *filter(None, [task.name_control_set])):
        if (name := task.lm_eval_name(probe_set)) not in defined:
            raise UserError(f"task {task.name!r} has no lm-eval YAML for its probe set {probe_set!r} (one with "
                            f"`task: {name}` in {task.yaml_dir()}); add it ({YAML_FIX}).")
