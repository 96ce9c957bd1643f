"""The plugin manager: loads the built-in plugins and the ``r2f_bench`` entry points,
and keeps the registries.

Built-in methods and tasks are ordinary plugin modules listed in
:data:`DEFAULT_PLUGINS`; third-party ones arrive through the ``r2f_bench``
entry-point group. Both go through the same hooks. A plugin that fails to import is
reported by name in a warning and skipped; the others still load.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pluggy

from . import __version__, hookspecs
from .errors import UserError
from .task import check_yamls

# The built-in plugins, by module (relative to this package): each implements the hooks
# of :mod:`r2f_bench.hookspecs` exactly as a third-party plugin does.
DEFAULT_PLUGINS = (
    "r2f", "baselines.fullgrad", "baselines.lora_methods", "baselines.grad_ascent", "baselines.scrub",
    "baselines.eco", "baselines.sku", "baselines.deepcut",
    "baselines.graddiff", "baselines.npo", "baselines.simnpo", "baselines.rmu",
    "tasks.rwku", "tasks.wmdp", "tasks.muse", "tasks.waterdrum",
    "attacks",
)
DEFAULT_TASK = "rwku"  # the task of a command given no --task


@dataclass(frozen=True)
class PluginInfo:
    """Where a registered method, task or attack came from."""

    name: str
    kind: str  # "method", "task" or "attack"
    plugin: str  # entry-point (or registration) name of the plugin module
    distribution: str
    version: str


class PluginRegistry:
    """A pluggy manager plus the method, task and attack classes its hooks registered."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self._origin: dict[int, tuple[str, str, str]] = {}
        self._collected = False
        self.methods: dict[str, type] = {}
        self.tasks: dict[str, type] = {}
        self.attacks: dict[str, type] = {}
        self.info: dict[tuple[str, str], PluginInfo] = {}
        self._yamls_checked: set[type] = set()

    # -- registration -------------------------------------------------------
    def load_defaults(self) -> None:
        """Register the built-in plugins of :data:`DEFAULT_PLUGINS`."""
        for module in DEFAULT_PLUGINS:
            name = f"{__package__}.{module}"
            if self.pm.get_plugin(name) is None:
                self.register(importlib.import_module(name), name, "r2f-bench", __version__)

    def load_entry_points(self) -> None:
        """Import every module of the ``r2f_bench`` entry-point group."""
        for ep in md.entry_points(group=hookspecs.PROJECT):
            if self.pm.get_plugin(ep.name) is not None:
                continue
            try:
                module = ep.load()
            except Exception as exc:  # a broken third-party plugin must not stop the rest
                warnings.warn(f"r2f-bench plugin {ep.name!r} failed to load and was skipped: "
                              f"{type(exc).__name__}: {exc}", stacklevel=2)
                continue
            dist = ep.dist.metadata["Name"] if ep.dist else "unknown"
            version = ep.dist.version if ep.dist else "unknown"
            self.register(module, ep.name, dist, version)

    def register(self, plugin: ModuleType | Any, name: str,
                 distribution: str = "local", version: str = "0") -> None:
        """Register a plugin object (module or instance) under ``name``."""
        self.pm.register(plugin, name=name)
        self._origin[id(plugin)] = (name, distribution, version)
        self._collected = False

    def unregister(self, name: str) -> None:
        self.pm.unregister(name=name)
        self._collected = False

    # -- collection ---------------------------------------------------------
    def _collect(self) -> None:
        if self._collected:
            return
        self.methods, self.tasks, self.attacks, self.info = {}, {}, {}, {}
        for kind, hook in (("method", self.pm.hook.register_unlearners), ("task", self.pm.hook.register_tasks),
                           ("attack", self.pm.hook.register_attacks)):
            for impl in hook.get_hookimpls():
                try:
                    impl.function(register=self._registrar(kind, impl.plugin))
                except UserError:
                    raise
                except Exception as exc:  # a broken third-party hook must not stop the rest
                    name, dist, _ = self._origin.get(id(impl.plugin), ("?", "local", "0"))
                    warnings.warn(f"r2f-bench plugin {name!r} (distribution {dist}) failed in {hook.name} and was "
                                  f"skipped: {type(exc).__name__}: {exc}", stacklevel=3)
        self._collected = True

    def _registrar(self, kind: str, plugin: Any):
        plugin_name, dist, version = self._origin.get(id(plugin), ("?", "local", "0"))
        table = {"method": self.methods, "task": self.tasks, "attack": self.attacks}[kind]

        def register(cls: type) -> None:
            name = getattr(cls, "name", None)
            if not name:
                raise UserError(f"plugin {plugin_name!r} registered a {kind} without a `name`; set a class attribute `name`.")
            if name in table and table[name] is not cls:
                other = self.info[(kind, name)].plugin
                raise UserError(f"{kind} {name!r} is registered twice (plugins {other!r} and {plugin_name!r}); uninstall or rename one.")
            table[name] = cls
            self.info[(kind, name)] = PluginInfo(name, kind, plugin_name, dist, version)

        return register

    def add_commands(self, subparsers: Any) -> None:
        """Run every plugin's ``register_commands`` hook; one that raises, or names a command
        that already exists, is skipped with one warning naming its distribution."""
        for impl in self.pm.hook.register_commands.get_hookimpls():
            try:
                impl.function(subparsers=subparsers)
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not take every command down
                name, dist, _ = self._origin.get(id(impl.plugin), ("?", "local", "0"))
                warnings.warn(f"r2f-bench plugin {name!r} (distribution {dist}) failed in register_commands and its "
                              f"commands were skipped: {type(exc).__name__}: {exc}", stacklevel=2)

    # -- lookup -------------------------------------------------------------
    def method(self, name: str) -> type:
        self._collect()
        if name not in self.methods:
            raise UserError(f"unknown method {name!r}; choose one of: {', '.join(sorted(self.methods))} (see `r2f-bench methods`).")
        return self.methods[name]

    def task(self, name: str) -> type:
        self._collect()
        if name not in self.tasks:
            raise UserError(f"unknown task {name!r}; choose one of: {', '.join(sorted(self.tasks))} (see `r2f-bench tasks`).")
        cls = self.tasks[name]
        if cls not in self._yamls_checked:  # before anything is loaded, not when lm-eval reads them
            check_yamls(cls)
            self._yamls_checked.add(cls)
        return cls

    def attack(self, name: str) -> type:
        self._collect()
        if name not in self.attacks:
            raise UserError(f"unknown attack {name!r}; choose one of: {', '.join(sorted(self.attacks))} "
                            f"(see `r2f-bench attacks`).")
        return self.attacks[name]

    def listing(self, kind: str) -> list[PluginInfo]:
        self._collect()
        return sorted((i for (k, _), i in self.info.items() if k == kind), key=lambda i: i.name)

    def cost_reference(self) -> str | None:
        """The method the cost table states ratios to: the first registered with ``cost_reference``."""
        self._collect()
        return next((name for name, cls in self.methods.items() if cls.cost_reference), None)

    def with_ablation(self, ablation: str) -> list[str]:
        """The methods whose settings ``sweep --ablation ablation`` varies, by name."""
        self._collect()
        return sorted(name for name, cls in self.methods.items() if ablation in cls.ablations)

    def builtin_order(self, kind: str) -> list[str]:
        """The built-in plugins' ``kind`` names in registration order (:data:`DEFAULT_PLUGINS`)."""
        self._collect()
        return [name for (k, name), info in self.info.items()
                if k == kind and info.plugin.removeprefix(f"{__package__}.") in DEFAULT_PLUGINS]

    def version_of(self, kind: str, name: str) -> str:
        self._collect()
        info = self.info[(kind, name)]
        return f"{info.distribution}=={info.version}"


_registry: PluginRegistry | None = None


def registry() -> PluginRegistry:
    """The process-wide registry: the built-in plugins, then every entry point."""
    global _registry
    if _registry is None:
        _registry = PluginRegistry()
        _registry.load_defaults()
        _registry.load_entry_points()
    return _registry
