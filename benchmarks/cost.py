"""Per-deletion wall time and peak memory of every method at model sizes from 1M to 425M
parameters, in one run, as ratios against FullGrad and against the exact gradient over
R2F's views (the paper's Table 5, on this machine).

    python benchmarks/cost.py                       # 1M, 25M, 99M and 425M parameters
    python benchmarks/cost.py --sizes embedded:mistral-h512-l8 --methods r2f,fullgrad,fullgrad_fused --json
    python benchmarks/cost.py --methods fullgrad,r2f,r2f@micro_batch_tokens=0 --profile

A method entry ``name@param=value@...`` sets parameters, so variants of one method
sit side by side; ``--profile`` adds where each deletion's time goes, from the phases
methods mark (:func:`r2f_bench.cost.phase`): forward, backward, sketch (R2F's LoRA
gradients inside the backward), decode, apply, and other.

Each size is built from config with a fixed seed and *not* taught: what a deletion
costs does not depend on what the model knows. The deletion request is the first
target of RWKU's bundled sample with 5 template views, the same for every method;
one-time set-up (R2F's decoder fit on a proxy built the same way, ECO's threshold
and noise search) is excluded, as in the runner. Each method runs ``--repeats``
times on a fresh copy of the model; the table reports the median seconds and the
median peak memory above the level at entry (CUDA: ``max_memory_allocated``; CPU:
glibc's malloc counters, see :mod:`r2f_bench.cost`).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")  # library bars off; tqdm reads this when first imported

import torch  # noqa: E402

from r2f_bench.cost import measure, phases  # noqa: E402
from r2f_bench.data import ForgetRequest  # noqa: E402
from r2f_bench.models import EmbeddedSpec, build_model, build_tokenizer, teaching_texts  # noqa: E402
from r2f_bench.plugins import registry  # noqa: E402
from r2f_bench.progress import set_quiet  # noqa: E402
from r2f_bench.tasks.rwku import RWKU  # noqa: E402
from r2f_bench.errors import UserError  # noqa: E402
from r2f_bench.unlearner import Context, Proxy, Unlearner, method_variant  # noqa: E402
from r2f_bench.views import Paraphraser, build_views  # noqa: E402

DEFAULT_SIZES = "embedded:mistral-h128-l4,embedded:mistral-h512-l8,embedded:mistral-h768-l14,embedded:mistral-h1536-l15"
PROXY = "embedded:mistral-h64-l2"
REFERENCES = ("fullgrad", "fullgrad_multiview")  # ratios are to these, where measured
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


PHASES = ("forward", "backward", "sketch", "decode", "apply")


def method_of(entry: str) -> Unlearner:
    """The method ``name`` or ``name@key=value@...`` names, with its parameters set."""
    name, overrides = method_variant(entry)
    cls = registry().method(name)
    return cls(cls.parse_params(overrides))


def measure_method(method: Unlearner, model: torch.nn.Module, request: ForgetRequest, ctx: Context,
                   repeats: int) -> tuple[float, float, dict[str, float]]:
    """Median (seconds, peak MB, seconds per phase) of ``repeats`` deletions, each on a
    fresh copy."""
    method.setup(model, ctx)
    seconds, peaks, timed = [], [], []
    for _ in range(repeats):
        fresh = copy.deepcopy(model)
        with phases() as marked, measure(next(model.parameters()).device) as cost:
            method.unlearn(fresh, request, ctx)
        seconds.append(cost.seconds)
        peaks.append(cost.peak_mem_mb)
        timed.append({**{k: marked.seconds.get(k, 0.0) for k in PHASES},
                      "other": cost.seconds - sum(marked.seconds.values())})
        del fresh
    profile = {k: statistics.median(t[k] for t in timed) for k in timed[0]}
    return statistics.median(seconds), statistics.median(peaks), profile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=DEFAULT_SIZES, help="embedded model specs, comma-separated")
    parser.add_argument("--methods", default="all", help="methods, comma-separated, or all")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=DTYPES, default="float32")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads, the same for every method (default 1: stable timings on a shared machine)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per (size, method) instead")
    parser.add_argument("--profile", action="store_true", help="also print each method's seconds per phase")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    set_quiet(True)  # the table is the output

    task = RWKU()
    bench = task.load(None, None, 1, n_dev=2)
    tok = build_tokenizer(teaching_texts(bench.teaching_set(), bench.general_prompts))
    views = lambda facts: build_views(facts, 5, Paraphraser())
    target = bench.targets[0]
    request = ForgetRequest(target=target.id, views=views(target.request), retain=bench.retain_pool())
    names = [i.name for i in registry().listing("method")] if args.methods == "all" else args.methods.split(",")
    names = [r for r in REFERENCES if r in names] + [n for n in names if n not in REFERENCES]
    methods = {name: method_of(name) for name in names}  # bad entries fail here, before any model is built
    dtype = DTYPES[args.dtype]
    proxy = build_model(EmbeddedSpec.parse(PROXY), tok).to(args.device, dtype)

    say = (lambda *a, **k: None) if args.json else print
    say(f"deletion: {target.id}, {len(request.facts)} facts x {len(request.views)} views; device {args.device}, "
        f"{args.dtype}, {args.threads} thread(s); median of {args.repeats}; models built from config, untaught; "
        f"peak memory above the loaded weights, measured the same way for every method")
    for spec in args.sizes.split(","):
        torch.manual_seed(0)
        model = build_model(EmbeddedSpec.parse(spec), tok).to(args.device, dtype).eval()
        n = sum(p.numel() for p in model.parameters())
        with tempfile.TemporaryDirectory() as cache:
            ctx = Context(tokenizer=tok, dev_targets=bench.dev_targets, retain_pool=bench.retain_pool(), seed=0,
                          cache_dir=Path(cache), make_views=views,
                          probe_roles=task.roles_of(bench, bench.dev_targets),
                          proxy=Proxy(PROXY, PROXY, lambda: (proxy, tok)), progress=lambda m: None)
            rows = {name: measure_method(method, model, request, ctx, args.repeats) for name, method in methods.items()}
        refs = [r for r in REFERENCES if r in rows]
        say(f"\n{spec}: {n / 1e6:.1f}M parameters ({n * model.dtype.itemsize / 2**20:.0f} MB of {args.dtype} weights)")
        say(f"{'method':<36}{'seconds':>10}{'peak MB':>10}" + "".join(f"{'s / ' + r:>26}{'MB / ' + r:>26}" for r in refs))
        for name, (sec, mb, profile) in rows.items():
            ratios = {r: (sec / rows[r][0], mb / max(rows[r][1], 1e-9)) for r in refs}
            if args.json:
                print(json.dumps({"size": spec, "params": n, "method": name, "seconds": sec, "peak_extra_mb": mb,
                                  "views": len(request.views), "dtype": args.dtype, "device": args.device,
                                  "phase_seconds": profile,
                                  **{f"{k}_vs_{r}": v for r, (t, m) in ratios.items()
                                     for k, v in (("seconds", t), ("memory", m))}}))
            else:
                say(f"{name:<36}{sec:>10.3f}{mb:>10.1f}" + "".join(f"{t:>26.2f}{m:>26.2f}" for t, m in ratios.values()))
        if args.profile:
            say(f"\n{'seconds per phase':<36}" + "".join(f"{k:>10}" for k in (*PHASES, "other")))
            for name, (_, _, profile) in rows.items():
                say(f"{name:<36}" + "".join(f"{profile[k]:>10.3f}" for k in (*PHASES, "other")))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as exc:
        sys.exit(f"error: {exc}")
