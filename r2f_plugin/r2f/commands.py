"""``r2f-bench decoder fit`` and ``r2f-bench decoder eval``: R2F's commands, added
through the ``register_commands`` hook like any plugin's."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from ..atomic import check_writable
from ..cli.options import add_json_option, add_run_options, add_task_option, json_command, run_config, say
from ..errors import UserError
from ..engine.run import Run
from .decoder import GradientDecoder
from .method import decoder_cosines, fit_decoder


def add_parser(sub: Any) -> None:
    dec = sub.add_parser("decoder", help="fit or evaluate R2F's gradient decoder",
                         description="Fit R2F's gradient decoder on the proxy model, or measure how well decoded "
                                     "gradients match exact ones on held-out facts.")
    dsub = dec.add_subparsers(dest="decoder_command", required=True, metavar="fit|eval")
    fit = dsub.add_parser("fit", help="fit the decoder on the proxy and save it (safetensors)",
                          description="Fit the decoder on the proxy model's (LoRA gradient, full gradient) pairs over "
                                      "the dev targets' requests, cache it, and optionally write it to --out.")
    add_run_options(fit, evaluation=False)
    add_task_option(fit, "whose dev targets the decoder is fitted on")
    fit.add_argument("--out", help="where to write the decoder (default: the cache)")
    fit.set_defaults(func=cmd_fit)
    ev = dsub.add_parser("eval", help="cosine and relative error of decoded vs exact gradients on held-out facts",
                         description="Cosine and relative error between decoded and exact full-model gradients on "
                                     "held-out facts (the evaluation targets' requests), per layer role.")
    add_run_options(ev, evaluation=False)
    add_task_option(ev, "whose targets supply the facts")
    ev.add_argument("--decoder", help="a fitted decoder file (default: fit on --proxy)")
    ev.add_argument("--compare", default=",".join(ROWS),
                    help=f"rows to report, comma-separated, from: {', '.join(ROWS)}")
    ev.add_argument("--facts", type=int, default=30, help="held-out facts (from the evaluation targets) to evaluate on")
    add_json_option(ev, "the rows")
    ev.set_defaults(func=json_command(evaluate))


# row name -> (what it is, how it aggregates views)
ROWS = {
    "projection": "plain back-projection of the B-gradient, no fitted scalar",
    "proxy": "the run's decoder (--set decoder=..., default two-sided), proxy-fitted, views averaged then decoded (paper's order)",
    "proxy-after": "two-sided, proxy-fitted scalars, each view decoded then averaged",
    "target": "two-sided, scalars fitted on the target itself (an upper reference)",
    "learned": "the paper's decoder: r x r maps of the LoRA gradients fitted by MSE on the proxy's pairs",
    "learned-target": "the same maps fitted on the target itself (does the proxy matter?)",
}


def _run(args: argparse.Namespace, method_params: dict[str, str] | None = None) -> Run:
    """A prepared R2F run of ``args``: the commands use only its documented surface
    (:class:`~r2f_bench.engine.run.Run`: targets, model, tokenizer, model_label, method, ctx)."""
    config = run_config(args, "r2f", args.task)
    config.params = {**config.params, **(method_params or {})}
    run = Run(config, progress=say(args))
    run.prepare()
    return run


def cmd_fit(args: argparse.Namespace) -> None:
    if args.out:  # before the fit, not after it
        if Path(args.out).is_dir():
            raise UserError(f"--out {args.out} is a directory; pass a file path such as {Path(args.out) / 'decoder.safetensors'}.")
        check_writable(Path(args.out).parent, "--out's folder")
    run = _run(args)
    decoder = run.method.decoder
    if args.out:
        decoder.save(Path(args.out))
        print(f"decoder written to {args.out}")
    print(json.dumps({"kind": decoder.kind, "rank": decoder.rank, "roles": decoder.roles, "meta": decoder.meta}, indent=2))


def evaluate(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Decoded-vs-exact gradient quality on held-out facts (the evaluation targets' requests).

    For every fact and every row: the cosine and relative error between the decoded
    and the exact gradient of that fact's first view alone and of its ``--views``
    views together, per layer role and over all matrices; the table shows means over
    facts (± std for the overall cosine). Returns the rows as JSON objects.
    """
    compare = [c.strip() for c in args.compare.split(",") if c.strip()]
    unknown = [c for c in compare if c not in ROWS]
    if unknown or not compare:
        raise UserError(f"{'unknown --compare row ' + repr(unknown[0]) if unknown else '--compare names no row'}; "
                        f"choose from {', '.join(ROWS)}.")
    if args.facts < 1:
        raise UserError(f"--facts is {args.facts}; evaluate on at least 1 held-out fact (default 30).")
    if args.decoder and not Path(args.decoder).expanduser().is_file():
        raise UserError(f"--decoder {args.decoder} is not a file; pass one `r2f-bench decoder fit --out` wrote.")
    run = _run(args, {"decoder_path": args.decoder} if args.decoder else None)
    p, ctx = run.method.params, run.ctx
    facts = [f for t in run.targets for f in t.request][: args.facts]
    per_fact = [list(col) for col in zip(*ctx.make_views(facts))]
    fitted = run.method.decoder
    dev_views = ctx.make_views(ctx.retain_pool)

    def fit(on: str, kind: str, aggregate: str) -> tuple[GradientDecoder, str]:
        model, tok, label = ((*ctx.proxy.load(), ctx.proxy.label) if on == "proxy"
                             else (run.model, run.tokenizer, run.model_label))
        return fit_decoder(model, tok, dev_views, p.rank, kind, aggregate, p.loss, ctx.seed, {"proxy": label},
                           ctx.progress), aggregate

    decoders = {
        "projection": lambda: (GradientDecoder(kind="projection", rank=p.rank, meta={"proxy": "none"},
                                               roles={r: {"rho": 0.0, "alpha": 1.0} for r in fitted.roles}), "before"),
        "proxy": lambda: (fitted, p.aggregate),
        "proxy-after": lambda: fit("proxy", "two_sided", "after"),
        "target": lambda: fit("target", "two_sided", "before"),
        "learned": lambda: fit("proxy", "learned", "before"),
        "learned-target": lambda: fit("target", "learned", "before"),
    }
    rows = {}
    for name in compare:
        decoder, aggregate = decoders[name]()
        for n_views in sorted({1, len(per_fact[0])}):
            meters = [decoder_cosines(decoder, run.model, run.tokenizer, [[v] for v in views[:n_views]],
                                      p.rank, aggregate, p.loss, ctx.seed, ctx.target_modules)
                      for views in per_fact]
            cos = [m.cosines() for m in meters]
            rel = [m.relative_errors() for m in meters]
            overall = [c["overall"] for c in cos]
            rows[(name, n_views)] = {
                "cosine": {k: statistics.fmean(c[k] for c in cos) for k in cos[0]},
                "cosine_std": statistics.stdev(overall) if len(overall) > 1 else 0.0,
                "relative_error": {k: statistics.fmean(r[k] for r in rel) for k in rel[0]},
                "uses": decoder.uses, "aggregate": aggregate}
    print(f"decoder eval: target {run.model_label}, proxy {ctx.proxy.label}, LoRA rank {p.rank}, "
          f"{len(per_fact)} held-out facts from the evaluation targets, decoder fitted on "
          f"{len(ctx.retain_pool)} retain-pool items")
    roles = sorted(k for k in next(iter(rows.values()))["cosine"] if k != "overall")
    print(f"{'decoder':<14}{'views':>6}" + "".join(f"{r:>10}" for r in roles)
          + f"{'overall':>16}{'rel.err':>9}")
    for (name, n_views), row in rows.items():
        c = row["cosine"]
        print(f"{name:<14}{n_views:>6}" + "".join(f"{c[r]:>10.3f}" for r in roles)
              + f"{c['overall']:>9.3f} ± {row['cosine_std']:.3f}{row['relative_error']['overall']:>9.3f}")
    print("\n" + "\n".join(f"{name}: {ROWS[name]}" for name in compare))
    return [{"decoder": n, "views": v, **row} for (n, v), row in rows.items()]
