"""Plug-ins: sensors and writers installed from outside the add-on, found through Python
entry points (``importlib.metadata``; groups ``blensor.sensors`` and ``blensor.writers``).

Each registry (:mod:`blensor_addon.core.sensors`, :mod:`blensor_addon.io.formats`) is a
:class:`LazyRegistry`: it loads its group once, when it is first read (not when it is
imported, so a plug-in module may import BlenSor's registries while it is itself being
imported). A plug-in that fails to import or to register is left out with one warning
line on stderr; BlenSor itself goes on.
"""
from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .errors import SettingsError

if TYPE_CHECKING:
    from _collections_abc import dict_items, dict_keys, dict_values

V = TypeVar("V")
T = TypeVar("T")

#: what a sensor type's or a format's name may be: it becomes a property, option and file
#: name, so lower-case letters, digits and _ (1 to 63 of them, a letter first)
NAME = re.compile(r"[a-z][a-z0-9_]{0,62}\Z")


class LazyRegistry(dict[str, V]):
    """A dict (name -> registered object) that runs its plug-in loader once, before it
    is first read. :meth:`arm` sets the loader (after the built-ins are registered);
    writes (registration) never trigger it."""

    _loader: Callable[[], object] | None = None

    def arm(self, loader: Callable[[], object]) -> None:
        """Run ``loader()`` before the next read (once)."""
        self._loader = loader

    def load(self) -> None:
        """Run the pending loader now (idempotent)."""
        loader, self._loader = self._loader, None
        if loader is not None:
            loader()

    def __getitem__(self, key: str) -> V:
        self.load()
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.load()
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        self.load()
        return super().__iter__()

    def __len__(self) -> int:
        self.load()
        return super().__len__()

    def __repr__(self) -> str:
        self.load()
        return super().__repr__()

    @overload
    def get(self, key: str, default: None = None, /) -> V | None: ...

    @overload
    def get(self, key: str, default: V, /) -> V: ...

    @overload
    def get(self, key: str, default: T, /) -> V | T: ...

    def get(self, key: str, default: object = None) -> object:
        self.load()
        return super().get(key, default)

    def keys(self) -> dict_keys[str, V]:
        self.load()
        return super().keys()

    def values(self) -> dict_values[str, V]:
        self.load()
        return super().values()

    def items(self) -> dict_items[str, V]:
        self.load()
        return super().items()

    def copy(self) -> dict[str, V]:
        self.load()
        return dict(super().items())


def load_plugins(group: str, add: Callable[[Any], object]) -> list[str]:
    """Load the entry points of ``group`` (``blensor.sensors``, ``blensor.writers``) and
    pass what each gives to ``add`` (a module: its ``SENSOR`` / ``WRITER`` /
    ``WRITERS``). A plug-in that fails to load or register is left out with one warning
    line on stderr. Returns the names of the entry points loaded."""
    from importlib.metadata import entry_points
    loaded: list[str] = []
    try:
        eps = entry_points(group=group)
    except Exception as exc:  # noqa: BLE001 - broken installed metadata must not stop BlenSor
        print(f"blensor: warning: plug-ins of {group} not read: {exc}", file=sys.stderr)
        return loaded
    for ep in eps:
        try:
            add(ep.load())
            loaded.append(ep.name)
        except Exception as exc:  # noqa: BLE001 - a broken plug-in is reported, not fatal
            msg = " ".join(str(exc).split()) or type(exc).__name__
            print(f"blensor: warning: plug-in '{ep.name}' ({ep.value}) of {group} left out: {msg}",
                  file=sys.stderr)
    return loaded


def check_new_name(setting: str, kind: str, name: object, registry: Mapping[str, object]) -> str:
    """Refuse ``name`` for a new entry of ``registry`` (a sensor type or a format).

    Args:
        setting: the name the error gives (``"sensor"``, ``"writer"``); kind: what the
        name belongs to, as the message says it (``"Sensor"``, ``"Writer"``).
    Returns:
        ``name``.
    Raises:
        SettingsError (``setting``): not a :data:`NAME`, or registered already.
    """
    if not isinstance(name, str) or not NAME.match(name):
        raise SettingsError(setting, f"a name of lower-case letters, digits and _ (a {kind}'s name)", name)
    if name in registry:
        raise SettingsError(setting, "a name not registered yet (registered: " + ", ".join(registry) + ")",
                            name)
    return name


__all__ = ["LazyRegistry", "load_plugins", "check_new_name", "NAME"]
