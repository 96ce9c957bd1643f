"""Per-deletion wall time and peak memory of every method at model sizes from 1M to 425M
parameters, in one run, as ratios against FullGrad and against the exact gradient over
R2F's views (the paper's Table 5, on this machine).

    python benchmarks/cost.py                       # 1M, 25M, 99M and 425M parameters
    python benchmarks/cost.py --sizes embedded:mistral-h512-l8 --methods r2f,fullgrad,fullgrad_fused --json
    python benchmarks/cost.py --methods fullgrad,r2f,r2f@micro_batch_tokens=0 --profile
    python benchmarks/cost.py --sizes mistral-7b --dtype bfloat16 --memory-gib 24 --methods fullgrad,r2f --repeats 1

A method entry ``name@param=value@...`` sets parameters, so variants of one method
sit side by side; ``--profile`` adds where each deletion's time goes, from the phases
methods mark (:func:`r2f_bench.cost.phase`): forward, backward, sketch (R2F's LoRA
gradients inside the backward), decode, apply, and other.

Each size is built from config with a fixed seed, directly in ``--dtype``, and *not*
taught: what a deletion costs does not depend on what the model knows. A size is an
embedded spec or ``mistral-7b`` (Mistral-7B's shape, ``benchmarks/shaped_model.py``). The deletion request is the first
target of RWKU's bundled sample with 5 template views, the same for every method;
one-time set-up (R2F's decoder fit on a proxy built the same way, ECO's threshold
and noise search) is excluded, as in the runner. Each method runs ``--repeats``
times on a fresh copy of the model; the table reports the median seconds and the
median peak memory above the level at entry (CUDA: ``max_memory_allocated``; CPU:
glibc's malloc counters, see :mod:`r2f_bench.cost`).

With ``--memory-gib N`` every (size, method) runs in a process of its own, and first at
1 and 2 transformer blocks of the same width: the peak above the weights, linear in
depth, is extrapolated to the full depth (``required_mb``). A method whose weights plus
requirement exceed N GiB is not run (``peak_extra_mb: null``, "does not fit"), so a
7B-shaped model is measured on a 24 GiB machine without a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # library bars off; tqdm reads this when first imported

import torch  # noqa: E402

from r2f_bench.cli.main import script  # noqa: E402
from r2f_bench.cost import measure, phases  # noqa: E402
from r2f_bench.data import ForgetRequest  # noqa: E402
from r2f_bench.engine.distributed import set_up_cpu  # noqa: E402
from r2f_bench.engine.embedded import build_tokenizer, teaching_texts  # noqa: E402
from r2f_bench.plugins import registry  # noqa: E402
from r2f_bench.progress import set_quiet  # noqa: E402
from r2f_bench.tasks.rwku import RWKU  # noqa: E402
from r2f_bench.errors import UserError  # noqa: E402
from r2f_bench.engine.snapshot import Snapshot  # noqa: E402
from r2f_bench.unlearner import Context, Proxy, Unlearner, method_variant  # noqa: E402
from r2f_bench.engine.views import Paraphraser, build_views  # noqa: E402
from shaped_model import DTYPES, build, config_for, depth, parameters  # noqa: E402  (beside this file)

DEFAULT_SIZES = "embedded:mistral-h128-l4,embedded:mistral-h512-l8,embedded:mistral-h768-l14,embedded:mistral-h1536-l15"
PROXY = "embedded:mistral-h64-l2"
REFERENCES = ("fullgrad", "fullgrad_multiview")  # ratios are to these, where measured


PHASES = ("forward", "backward", "sketch", "decode", "apply")


def method_of(entry: str) -> Unlearner:
    """The method ``name`` or ``name@key=value@...`` names, with its parameters set."""
    name, overrides = method_variant(entry)
    cls = registry().method(name)
    return cls(cls.parse_params(overrides))


def measure_method(method: Unlearner, model: torch.nn.Module, request: ForgetRequest, ctx: Context,
                   repeats: int, snapshot: Snapshot) -> tuple[float, float, dict[str, float]]:
    """Median (seconds, peak MB, seconds per phase) of ``repeats`` deletions, each from the
    untouched weights (put back from ``snapshot``: no second copy of the model)."""
    method.setup(model, ctx)
    seconds, peaks, timed = [], [], []
    for _ in range(repeats):
        with phases() as marked, measure(next(model.parameters()).device) as cost:
            method.unlearn(model, request, ctx)
        snapshot.restore(model)
        seconds.append(cost.seconds)
        peaks.append(cost.peak_mem_mb)
        timed.append({**{k: marked.seconds.get(k, 0.0) for k in PHASES},
                      "other": cost.seconds - sum(marked.seconds.values())})
    profile = {k: statistics.median(t[k] for t in timed) for k in timed[0]}
    return statistics.median(seconds), statistics.median(peaks), profile


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="embedded specs or mistral-7b, comma-separated")
    parser.add_argument("--methods", default="all", help="methods, comma-separated, or all")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads, the same for every method (default 1: stable timings on a shared machine)")
    parser.add_argument("--memory-gib", type=float, default=None,
                        help="the memory a deletion may use, weights included: each method runs in its own process, "
                             "only where its requirement (extrapolated from 1 and 2 blocks) fits")
    parser.add_argument("--layers", type=int, default=None, help="build each size with this many blocks instead")
    parser.add_argument("--json", action="store_true", help="print one JSON object per (size, method) instead")
    parser.add_argument("--profile", action="store_true", help="also print each method's seconds per phase")
    args = parser.parse_args(argv)
    if args.memory_gib is not None and args.memory_gib <= 0:
        parser.error(f"--memory-gib must be positive, got {args.memory_gib:g}")
    return args


class Deletion:
    """The deletion every method performs, and what it needs: the first target of RWKU's
    bundled sample with 5 template views, its tokenizer and a proxy for R2F's decoder."""

    def __init__(self, device: str, dtype: torch.dtype) -> None:
        self.task = RWKU()
        self.bench = self.task.load(None, None, 1, n_dev=2)
        self.tok = build_tokenizer(teaching_texts(self.bench.teaching_set(), self.bench.general_prompts))
        target = self.bench.targets[0]
        self.request = ForgetRequest(target=target.id, views=self.views(target.request),
                                     retain=self.bench.retain_pool())
        self.proxy = build(PROXY, self.tok, dtype, device=device)

    def views(self, facts):
        return build_views(facts, 5, Paraphraser())

    def context(self, cache: str) -> Context:
        b = self.bench
        return Context(tokenizer=self.tok, dev_targets=b.dev_targets, retain_pool=b.retain_pool(), seed=0,
                       cache_dir=Path(cache), make_views=self.views, probe_roles=self.task.roles_of(b, b.dev_targets),
                       proxy=Proxy(PROXY, PROXY, lambda: (self.proxy, self.tok)), progress=lambda m: None)


def measure_here(args: argparse.Namespace, deletion: Deletion, size: str, methods: dict[str, Unlearner]) -> dict:
    """Rows of every method at ``size``, measured in this process on one model."""
    model = build(size, deletion.tok, DTYPES[args.dtype], args.layers, device=args.device)
    rows = {}
    with tempfile.TemporaryDirectory() as cache:
        snapshot = Snapshot(model, Path(cache) / "weights.safetensors")
        for name, method in methods.items():
            sec, mb, profile = measure_method(method, model, deletion.request, deletion.context(cache),
                                              args.repeats, snapshot)
            rows[name] = {"seconds": sec, "peak_extra_mb": mb, "phase_seconds": profile}
    return rows


def child(args: argparse.Namespace, size: str, method: str, layers: int | None) -> dict:
    """One method at ``size`` (``layers`` blocks) measured in a process of its own."""
    command = [sys.executable, __file__, "--sizes", size, "--methods", method, "--json", "--repeats",
               str(args.repeats), "--device", args.device, "--dtype", args.dtype, "--threads", str(args.threads)]
    done = subprocess.run(command + (["--layers", str(layers)] if layers else []), capture_output=True, text=True)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not rows:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"{method} at {size} ({layers or 'all'} blocks) failed: exit {done.returncode}, {tail}")
    return rows[0]


def measure_isolated(args: argparse.Namespace, size: str, method: str, full_depth: int, weights_mb: float) -> dict:
    """``method`` at ``size`` in processes of its own: its requirement above the weights,
    extrapolated linearly in depth from 1 and 2 blocks, then the full size where it fits."""
    one, two = (child(args, size, method, k)["peak_extra_mb"] for k in (1, 2))
    required = one + (two - one) * (full_depth - 1)
    budget = args.memory_gib * 1024
    if weights_mb + required > budget:
        return {"seconds": None, "peak_extra_mb": None, "phase_seconds": None, "required_mb": required, "fits": False}
    row = child(args, size, method, args.layers)  # the size as asked for (``--layers`` included)
    return {**{k: row[k] for k in ("seconds", "peak_extra_mb", "phase_seconds")}, "required_mb": required,
            "fits": True}


def cell(value: float | None, digits: int, width: int) -> str:
    return f"{'-' if value is None else f'{value:.{digits}f}':>{width}}"


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def report(args: argparse.Namespace, size: str, n: int, rows: dict[str, dict], views: int) -> None:
    """Print one size's rows: a table, or one JSON object per method."""
    refs = [r for r in REFERENCES if r in rows and rows[r]["seconds"] is not None]
    isolated = args.memory_gib is not None
    for name, row in rows.items():
        row.update({f"{k}_vs_{r}": ratio(row[f], rows[r][f]) for r in refs
                    for k, f in (("seconds", "seconds"), ("memory", "peak_extra_mb"))})
        if isolated:
            row["required_vs_fullgrad"] = ratio(row["required_mb"], rows.get("fullgrad", {}).get("required_mb"))
    if args.json:
        for name, row in rows.items():
            print(json.dumps({"size": size, "params": n, "method": name, "views": views, "dtype": args.dtype,
                              "device": args.device, "layers": args.layers,
                              **({"memory_gib": args.memory_gib} if isolated else {}), **row}))
        return
    weights = n * DTYPES[args.dtype].itemsize / 2**20
    print(f"\n{size}: {n / 1e6:.1f}M parameters ({weights:.0f} MB of {args.dtype} weights)")
    head = f"{'method':<36}{'seconds':>10}{'peak MB':>10}"
    head += f"{'required MB':>13}{'/ fullgrad':>12}  fits in {args.memory_gib:g} GiB" if isolated else ""
    print(head + "".join(f"{'s / ' + r:>26}{'MB / ' + r:>26}" for r in refs))
    for name, row in rows.items():
        line = f"{name:<36}{cell(row['seconds'], 3, 10)}{cell(row['peak_extra_mb'], 1, 10)}"
        if isolated:
            line += f"{cell(row['required_mb'], 0, 13)}{cell(row['required_vs_fullgrad'], 3, 12)}  "
            line += "yes" if row["fits"] else f"does not fit in {args.memory_gib:g} GiB"
        print(line + "".join(f"{cell(row[f'seconds_vs_{r}'], 2, 26)}{cell(row[f'memory_vs_{r}'], 2, 26)}"
                             for r in refs))
    if args.profile:
        print(f"\n{'seconds per phase':<36}" + "".join(f"{k:>10}" for k in (*PHASES, "other")))
        for name, row in rows.items():
            if row["phase_seconds"]:
                print(f"{name:<36}" + "".join(f"{row['phase_seconds'][k]:>10.3f}" for k in (*PHASES, "other")))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    set_up_cpu(args.threads, 1)  # the threads, and subnormals flushed, as in a run
    set_quiet(True)  # the table is the output
    names = [i.name for i in registry().listing("method")] if args.methods == "all" else args.methods.split(",")
    names = [r for r in REFERENCES if r in names] + [n for n in names if n not in REFERENCES]
    methods = {name: method_of(name) for name in names}  # bad entries fail here, before any model is built
    deletion = Deletion(args.device, DTYPES[args.dtype])
    if not args.json:
        print(f"deletion: {deletion.request.target}, {len(deletion.request.facts)} facts x "
              f"{len(deletion.request.views)} views; device {args.device}, {args.dtype}, {args.threads} thread(s); "
              f"median of {args.repeats}; models built from config, untaught; peak memory above the loaded "
              f"weights, measured the same way for every method"
              + (f"; each method in its own process, run where its requirement (extrapolated from 1 and 2 blocks) "
                 f"fits in {args.memory_gib:g} GiB" if args.memory_gib is not None else ""))
    for size in args.sizes.split(","):
        n = parameters(size, deletion.tok, args.layers)
        if args.memory_gib is None:
            rows = measure_here(args, deletion, size, methods)
        else:
            full = depth(config_for(size, deletion.tok, args.layers))
            weights_mb = n * DTYPES[args.dtype].itemsize / 2**20
            rows = {name: measure_isolated(args, size, name, full, weights_mb) for name in methods}
        report(args, size, n, rows, len(deletion.request.views))
    return 0


if __name__ == "__main__":
    sys.exit(script(main))
