"""Registry of file formats: every module of this package that defines ``WRITER``.

A new format is one new module here (its :class:`~._base.Writer` with name, files,
outputs and options); the runner, ``--formats``, ``--option``, the panel's format list
and the manifest take it from the registry.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil

from ...core.errors import SettingsError
from ._base import NoOptions, RunInfo, Writer  # noqa: F401

#: order in the UI and the help (others follow, sorted)
_ORDER = ("npz", "evd", "pcd", "las", "laz", "ply", "kitti", "rosbag2", "range_image", "exr", "npy", "pfm",
          "dmap")


def _discover() -> dict[str, type]:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f".{info.name}", __name__)
        for w in getattr(module, "WRITERS", (getattr(module, "WRITER", None),)):
            if isinstance(w, type) and issubclass(w, Writer):
                found[w.name] = w
    ordered = {k: found[k] for k in _ORDER if k in found}
    ordered.update({k: v for k, v in sorted(found.items()) if k not in ordered})
    return ordered


#: format name -> Writer class
WRITERS: dict[str, type] = _discover()


def parse_formats(formats) -> tuple[str, ...]:
    """Normalise ``"npz,evd"`` or an iterable to a tuple of known formats.

    Raises:
        SettingsError (``formats``): empty or unknown format.
    """
    items = [f.strip().lower() for f in (formats.split(",") if isinstance(formats, str) else formats)]
    items = [f for f in items if f]
    if not items or any(f not in WRITERS for f in items):
        raise SettingsError("formats", "a comma-separated subset of " + ",".join(WRITERS), formats)
    for f in items:
        missing = [m for m in WRITERS[f].requires if importlib.util.find_spec(m) is None]
        if missing:
            raise SettingsError("formats", f"formats whose Python packages are installed ({f} needs "
                                f"{', '.join(missing)}: pip install blensor's dependencies)", f)
    return tuple(dict.fromkeys(items))


def make_options(formats: tuple[str, ...], options: dict | None) -> dict:
    """Options per format from ``{"pcd.ascii": value or text, ...}``.

    Returns:
        format name -> validated Options instance (defaults where not given).
    Raises:
        SettingsError: an option of a format not in ``formats``, an unknown option, or
        a value out of range (named ``FORMAT.OPTION``).
    """
    given: dict[str, dict] = {f: {} for f in formats}
    for key, value in (options or {}).items():
        fmt, _, opt = str(key).partition(".")
        if fmt not in WRITERS:
            raise SettingsError("--option", "FORMAT.OPTION=VALUE with FORMAT one of " + ",".join(WRITERS), key)
        if fmt not in given:  # (the value shown is what was typed: the key with its value)
            raise SettingsError(key, f"an option of a format being written ({','.join(formats)})",
                                f"{key}={value}")
        fields = {f.name: f for f in dataclasses.fields(WRITERS[fmt].Options)}
        if opt not in fields:  # name the key typed and the keys there are
            keys = ", ".join(f"{fmt}.{n}" for n in fields) or f"(none: {fmt} has no options)"
            raise SettingsError(key, f"one of the options of {fmt}: {keys}", f"{key}={value}")
        meta = fields[opt].metadata["blensor"]
        given[fmt][opt] = meta.parse(key, value) if isinstance(value, str) else meta.check(key, value)
    return {f: WRITERS[f].Options(**given[f]) for f in formats}


def output_patterns(formats=None) -> list[str]:
    """Regular expressions of every file (relative path) a range scan leaves: the
    manifest, the trajectory and what the formats declare (``Writer.outputs``): every
    format of the registry, or those named in ``formats`` (unknown names are skipped)."""
    names = WRITERS if formats is None else [f for f in formats if f in WRITERS]
    return ["manifest\\.json", "trajectory\\.tum"] + [p for f in names for p in WRITERS[f].outputs]


__all__ = ["WRITERS", "Writer", "RunInfo", "NoOptions", "parse_formats", "make_options", "output_patterns"]
