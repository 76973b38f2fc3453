"""One way to plug things in (after Patroni's `dynamic_loader`): a plugin is a class defined in a
module of a package, a subclass of the family's base with a name attribute, or, for module-shaped
plugins (lab recipes), the module itself with that attribute. `Plugins` finds every one on first
use, so a new HA manager, database driver, workload or lab stack is its module alone; the names it
finds are also what the CLI's help lists and what the validators accept.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownPlugin(ValueError):
    """A name no plugin of the family answers to; the message lists the known ones."""


class Plugins(Generic[T]):
    """The plugins of one family: `where` is a package (every module in it, less `skip`) or one
    module; `base` their base class (or `ModuleType`: the module is the plugin); `key` the attribute
    naming each (a string, or a tuple of strings for a plugin that answers to several names), or a
    function of the plugin that returns that (a pydantic model's field default)."""

    def __init__(self, where: str, base: type, key: str | Callable[[Any], Any], what: str,
                 skip: tuple[str, ...] = ()) -> None:
        self.where, self.base, self.key, self.what, self.skip = where, base, key, what, skip
        self._found: dict[str, T] | None = None

    def all(self) -> dict[str, T]:
        if self._found is None:
            found: dict[str, T] = {}
            for module in self._modules():
                for obj in self._candidates(module):
                    names = self.key(obj) if callable(self.key) else getattr(obj, self.key, None)
                    for name in (names,) if isinstance(names, str) else names or ():
                        if not name:  # an abstract member of the family
                            continue
                        if name in found and found[name] is not obj:
                            raise RuntimeError(f"two {self.what}s named {name!r}: {found[name]!r} and {obj!r}")
                        found[name] = obj
            self._found = found
        return self._found

    def forget(self) -> None:
        """Find them again on next use (a package whose path changed: tests add a plugin)."""
        self._found = None

    def names(self) -> tuple[str, ...]:
        return tuple(self.all())

    def get(self, name: object) -> T:
        found = self.all()
        if not isinstance(name, str):  # a list or a mapping where a name belongs (unhashable, or never a name)
            raise UnknownPlugin(f"not a name: a {type(name).__name__} ({str(name)[:40]!r}) where the name of a "
                                f"{self.what} belongs; known: {', '.join(sorted(found))}")
        if name not in found:
            raise UnknownPlugin(f"unknown {self.what} {str(name)[:40]!r}; known: {', '.join(sorted(found))}")
        return found[name]

    def _modules(self) -> list[ModuleType]:
        top = importlib.import_module(self.where)
        if not hasattr(top, "__path__"):
            return [top]
        return [importlib.import_module(f"{self.where}.{info.name}") for info in pkgutil.iter_modules(top.__path__)
                if info.name not in self.skip and not info.name.startswith("_")]

    def _candidates(self, module: ModuleType) -> list[Any]:
        if self.base is ModuleType:
            return [module]
        return [obj for obj in vars(module).values()
                if isinstance(obj, type) and issubclass(obj, self.base) and obj.__module__ == module.__name__]
