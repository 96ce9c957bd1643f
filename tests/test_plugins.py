"""Plugin discovery: built-ins from DEFAULT_PLUGINS, third parties via entry points,
throwaway plugins, broken plugins."""

from __future__ import annotations

import importlib.metadata as md
import types

import pytest

from r2f_bench import hookimpl
from r2f_bench.data import ForgetRequest
from r2f_bench.errors import UserError
from r2f_bench.plugins import PluginRegistry
from r2f_bench.unlearner import Edit, Unlearner


class Noop(Unlearner):
    """Returns the model unchanged (a throwaway plugin for tests)."""

    name = "noop_test"

    def unlearn(self, model, request: ForgetRequest, ctx) -> Edit:
        return Edit(model)


def test_builtins_load_from_default_plugins_without_install_metadata(monkeypatch):
    monkeypatch.setattr(md, "entry_points", lambda group: [])
    reg = PluginRegistry()
    reg.load_defaults()
    names = {i.name for i in reg.listing("method")}
    assert {"r2f", "fullgrad", "lora_single", "eco"} <= names
    assert {i.name for i in reg.listing("task")} == {"rwku", "wmdp", "muse", "waterdrum"}
    assert {i.distribution for i in reg.listing("method")} == {"r2f-bench"}


def test_third_party_plugin_arrives_through_its_entry_point(monkeypatch):
    module = types.SimpleNamespace(register_unlearners=hookimpl(lambda register: register(Noop)))

    class EntryPoint:
        name = "noop_plugin"
        dist = types.SimpleNamespace(metadata={"Name": "noop-dist"}, version="1.2")

        def load(self):
            return module

    monkeypatch.setattr(md, "entry_points", lambda group: [EntryPoint()] if group == "r2f_bench" else [])
    reg = PluginRegistry()
    reg.load_defaults()
    reg.load_entry_points()
    assert reg.method("noop_test") is Noop and reg.method("r2f").name == "r2f"
    assert reg.version_of("method", "noop_test") == "noop-dist==1.2"


def test_throwaway_plugin_registers_and_lists():
    reg = PluginRegistry()
    plugin = types.SimpleNamespace(register_unlearners=hookimpl(lambda register: register(Noop)))
    reg.register(plugin, "throwaway", "my-dist", "9.9")
    assert reg.method("noop_test") is Noop
    info = reg.listing("method")[0]
    assert (info.name, info.distribution, info.version) == ("noop_test", "my-dist", "9.9")
    reg.unregister("throwaway")
    with pytest.raises(UserError, match="unknown method 'noop_test'"):
        reg.method("noop_test")


def test_broken_plugin_warns_by_name_and_others_load(monkeypatch):
    real = md.entry_points

    class Broken:
        name, dist = "broken_plugin", None

        def load(self):
            raise ImportError("no module named nowhere")

    monkeypatch.setattr(md, "entry_points", lambda group: [Broken(), *real(group=group)])
    reg = PluginRegistry()
    reg.load_defaults()
    with pytest.warns(UserWarning, match="'broken_plugin' failed to load"):
        reg.load_entry_points()
    assert reg.method("r2f").name == "r2f"


def test_duplicate_names_are_refused():
    reg = PluginRegistry()
    other = type("OtherNoop", (Noop,), {})
    for n, cls in (("a", Noop), ("b", other)):
        reg.register(types.SimpleNamespace(register_unlearners=hookimpl(lambda register, c=cls: register(c))), n)
    with pytest.raises(UserError, match="registered twice"):
        reg.method("noop_test")


def test_params_override_and_errors():
    from r2f_bench.r2f import R2F

    p = R2F.parse_params({"rank": "4", "step": "0.1"})
    assert (p.rank, p.step) == (4, 0.1)
    with pytest.raises(UserError, match="no parameter 'nope'"):
        R2F.parse_params({"nope": "1"})
    with pytest.raises(UserError, match="expects a int"):
        R2F.parse_params({"rank": "eight"})


def test_set_values_convert_by_type_annotation():
    """Tuples convert element-wise and ``T | None`` accepts none, whatever the default is."""
    from dataclasses import dataclass, field

    @dataclass
    class Params:
        sigmas: tuple[float, ...] = (1.0,)
        limit: int | None = None
        names: list[str] = field(default_factory=list)
        on: bool = False

    Typed = type("Typed", (Noop,), {"name": "typed_test", "Params": Params})
    p = Typed.parse_params({"sigmas": "0.5, 2", "limit": "3", "names": "a,b", "on": "yes"})
    assert (p.sigmas, p.limit, p.names, p.on) == ((0.5, 2.0), 3, ["a", "b"], True)
    assert Typed.parse_params({"limit": "none"}).limit is None
    with pytest.raises(UserError, match="'sigmas' of method 'typed_test' expects comma-separated float values"):
        Typed.parse_params({"sigmas": "a,b"})
    with pytest.raises(UserError, match="expects a int or none"):
        Typed.parse_params({"limit": "many"})
