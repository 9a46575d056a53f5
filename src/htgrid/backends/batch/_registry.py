"""Back ends by name: the submit ad's `gridtype` picks one (`grid_resource = batch <name>`).

Modules are imported only when their name is first asked for, so a missing optional piece
of one back end never stops the others. A back-end module plugs in either by defining
`create_backend(options: BackendOptions) -> BatchBackend`, or by defining one concrete
`BatchBackend` subclass whose `name` is the back end's name; that class is built with
`registry=options.registry` (or `options.state_dir`) when its constructor takes a
`registry`, else with no arguments.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from htgrid.backends.batch._base import BatchBackend, BatchError

__all__ = ["BackendOptions", "UnknownBackend", "create_backend", "known_backends", "register"]


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What the GAHP server gives a back end it builds."""

    #: The name it was asked for (the gridtype).
    name: str
    #: A directory the back end may keep its own files in (under the GAHP's scratch dir).
    state_dir: Path
    #: Where a command back end keeps its `<lrm>/<native id> -> job dir` links (default:
    #: `state_dir`); the GAHP passes its own index, so that one link serves both.
    registry: Path | None = None


BackendFactory = Callable[[BackendOptions], BatchBackend]

_MODULES: dict[str, str] = {
    "fork": "htgrid.backends.batch.fork",
    "lsf": "htgrid.backends.batch.lsf",
    "pbs": "htgrid.backends.batch.pbs",
    "sge": "htgrid.backends.batch.sge",
    "slurm": "htgrid.backends.batch.slurm",
}
_FACTORIES: dict[str, BackendFactory] = {}


class UnknownBackend(BatchError, LookupError):
    """No back end has this name (or its module cannot be loaded)."""


def register(name: str, factory: BackendFactory) -> None:
    """Make `name` build its back end with `factory` (replacing any earlier one)."""
    _FACTORIES[name.lower()] = factory


def known_backends() -> list[str]:
    """The names a submit ad may use."""
    return sorted({*_MODULES, *_FACTORIES})


def create_backend(name: str, options: BackendOptions) -> BatchBackend:
    """A new back end for `name`; raises UnknownBackend."""
    key = name.lower()
    factory = _FACTORIES.get(key)
    if factory is None:
        factory = _load(key)
        _FACTORIES[key] = factory
    return factory(options)


def _load(name: str) -> BackendFactory:
    module_name = _MODULES.get(name)
    if module_name is None:
        raise UnknownBackend(
            f"no batch system named {name!r} (known: {', '.join(known_backends())})"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise UnknownBackend(f"the {name} back end cannot be loaded: {err}") from err
    factory = getattr(module, "create_backend", None)
    if callable(factory):
        return factory  # type: ignore[no-any-return]
    return _class_factory(name, module)


def _class_factory(name: str, module: ModuleType) -> BackendFactory:
    classes = [
        value
        for value in vars(module).values()
        if inspect.isclass(value)
        and issubclass(value, BatchBackend)
        and not inspect.isabstract(value)
        and getattr(value, "name", None) == name
    ]
    if len(classes) != 1:
        raise UnknownBackend(f"{module.__name__} does not define one {name} back end")
    cls: Callable[..., BatchBackend] = classes[0]
    takes_registry = "registry" in inspect.signature(cls).parameters

    def build(options: BackendOptions) -> BatchBackend:
        if takes_registry:
            return cls(registry=options.registry or options.state_dir)
        return cls()

    return build
