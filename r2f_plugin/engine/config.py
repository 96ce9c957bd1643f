"""A run's configuration: everything that determines its results, with each count
option's range."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import UserError

SPLITS = ("eval", "dev")
MAX_VIEWS = 64  # views per fact: the paper uses 5, the views ablation 1-8
MAX_SEED = 2**32 - 1  # every generator seeded from --seed (torch, numpy, random) accepts it
# option -> (RunConfig field, least, most (None: unbounded))
BOUNDS = {"--seed": ("seed", 0, MAX_SEED), "--views": ("views", 1, MAX_VIEWS), "--dev-targets": ("dev_targets", 0, None),
          "--retain-items": ("retain_items", 0, None), "--limit": ("limit", 1, None), "--threads": ("threads", 1, None)}


@dataclass
class RunConfig:
    """Everything that determines a run's results."""

    method: str
    task: str
    seed: int = 0
    model: str = "embedded"
    proxy: str = "embedded-proxy"
    data_dir: str | None = None
    targets: list[str] | None = None
    limit: int | None = None
    params: dict[str, str] = field(default_factory=dict)
    views: int = 5
    paraphraser: str = "benchmark"
    dev_targets: int = 2
    forget_source: str | None = None  # the task's kind of deletion request (None: its default)
    retain_items: int = 64  # retain items per request, sampled with the seed (the same number in both splits)
    rap_steps: int = 5
    rap_lr: float = 1e-3
    output: str = "r2f-output"
    trust_remote_code: bool = False
    split: str = "eval"  # "dev": evaluate the dev targets instead (hyper-parameter search)
    sequential: bool = False  # apply the targets' deletions one after another to one model
    save_model: str | None = None  # write each unlearned model to <save_model>/<target>/
    threads: int | None = None  # CPU intra-op threads (None: see distributed.cpu_threads); not part of any key
    dtype: str = "float32"  # the target's and proxy's weights (embedded models are taught in float32, then cast)
    device_map: str | None = None  # spread the target over the available devices (Accelerate); not part of any key
    target_modules: list[str] | None = None  # linear layers methods adapt or step (None: the architecture's default)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_bounds(config: RunConfig) -> None:
    """One line for a count option outside its range (:data:`BOUNDS`)."""
    for option, (field_name, least, most) in BOUNDS.items():
        value = getattr(config, field_name)
        if value is None:
            continue
        if value < least:
            raise UserError(f"{option} must be at least {least}, got {value}.")
        if most is not None and value > most:
            raise UserError(f"{option} must be at most {most}, got {value}.")
