"""The run options are declared once, on RunConfig's fields: the parsers of ``r2f-bench``
(run), ``sweep``, ``tune`` and ``frontier`` are made from them and agree with them."""

from __future__ import annotations

import re

import pytest

from r2f_bench.cli.main import build_parser
from r2f_bench.cli.options import run_config, run_values
from r2f_bench.engine.config import OPTIONS, RunConfig, check_bounds
from r2f_bench.errors import UserError
from r2f_bench.results.sweep import sweep_jobs

SWEPT = [o for o in OPTIONS.values() if o.sweep is not None]


def help_of(command: list[str], capsys) -> str:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    return capsys.readouterr().out


def shown(flag: str, text: str) -> bool:
    """Whether ``flag`` heads an entry of the help's option list (``--seed``, not ``--seeds``)."""
    return re.search(rf"^  {re.escape(flag)}(?![\w-])", text, re.MULTILINE) is not None


# options whose text names plugins: a valid value as typed, and as parsed
NAMED = {"attacks": ("rap, fewshot", "rap,fewshot:3")}


def given(opt) -> tuple[list[str], object]:
    """Command-line words setting ``opt`` to a value other than its default, and that value."""
    if opt.name in NAMED:
        return [opt.flag, NAMED[opt.name][0]], NAMED[opt.name][1]
    if opt.sweep == "each":  # one value in a run, a job each of several in a sweep
        return [opt.flag, "a,b"], "a,b"
    if opt.kind is bool:
        return [opt.flag], True
    if opt.repeatable:
        return [opt.flag, "a=1", opt.flag, "b=2"], opt.parse(["a=1", "b=2"])
    if opt.parse is not None:
        return [opt.flag, "a, b"], opt.parse("a, b")
    if opt.choices:
        return [opt.flag, opt.choices[-1]], opt.choices[-1]
    if opt.kind is int:
        value = (opt.least or 0) + 1
        return [opt.flag, str(value)], value
    if opt.kind is float:
        return [opt.flag, "0.5"], 0.5
    return [opt.flag, "given"], "given"


@pytest.mark.parametrize("command", [[], ["tune", "--method", "r2f"], ["frontier"]])
def test_the_run_parsers_show_every_option_and_default_to_the_fields(command, capsys):
    text = help_of(command[:1], capsys)
    for opt in OPTIONS.values():  # tune and frontier run the seeds of --seeds: no one run's --seed
        assert shown(opt.flag, text) == (not command or not (opt.evaluation_only or opt.name == "seed")), opt.flag
    args = build_parser().parse_args(command)
    default = RunConfig("r2f", "rwku", output=args.output)  # (tune and frontier default to their own folders)
    for opt in OPTIONS.values():  # an option parsed from text defaults to None: unset, the field's default
        assert getattr(args, opt.name, default.seed) == (None if opt.parse else getattr(default, opt.name)), opt.flag
    assert run_config(args, "r2f", "rwku") == default


def test_the_sweep_shows_its_options_each_unset_meaning_the_runs_default(capsys):
    text = help_of(["sweep"], capsys)
    for opt in OPTIONS.values():
        assert shown(opt.flag, text) == (opt.sweep is not None), opt.flag
    assert "(default 64)" in " ".join(text.split())  # a default named in the help is the field's
    assert run_values(build_parser().parse_args(["sweep"]), sweep=True) == {"output": RunConfig.output}


def test_every_option_reaches_the_run_config():
    words, expected = [], {}
    for opt in OPTIONS.values():
        argv, expected[opt.name] = given(opt)
        words += argv
    config = run_config(build_parser().parse_args(words), "r2f", "rwku")
    assert {name: getattr(config, name) for name in OPTIONS} == expected


def test_every_sweep_option_reaches_the_jobs():
    words, expected = ["sweep"], {}
    for opt in SWEPT:
        argv, expected[opt.name] = given(opt)
        words += argv
    values = run_values(build_parser().parse_args(words), sweep=True)
    assert values.pop("model") == values.pop("proxy") == ["a", "b"]  # several: a job each
    jobs = sweep_jobs(["r2f"], ["rwku"], [0], models=["a", "b"], proxies=["c"], **values)
    assert [(j.fields["model"], j.fields["proxy"]) for j in jobs] == [("a", "c"), ("b", "c")]
    config = RunConfig(**jobs[0].fields)
    assert {o.name: getattr(config, o.name) for o in SWEPT if o.sweep != "each"} == \
        {n: v for n, v in expected.items() if n not in ("model", "proxy")}


@pytest.mark.parametrize("opt", [o for o in OPTIONS.values() if o.least is not None or o.most is not None],
                         ids=lambda o: o.flag)
def test_a_value_out_of_range_is_one_line_naming_the_flag(opt):
    for value, word in ((opt.least, "least"), (opt.most, "most")):
        if value is None:
            continue
        outside = value - 1 if word == "least" else value + 1
        with pytest.raises(UserError) as error:
            check_bounds(RunConfig("r2f", "rwku", **{opt.name: outside}))
        assert str(error.value) == f"{opt.flag} must be at {word} {value}, got {outside}."
        check_bounds(RunConfig("r2f", "rwku", **{opt.name: value}))
