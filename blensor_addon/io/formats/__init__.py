"""Registry of file formats: every module of this package that defines ``WRITER`` (or
``WRITERS``), the writers of installed plug-ins (entry-point group ``blensor.writers``)
and those given to :func:`register_writer`; and the motion-export formats
(:data:`MOTION_FORMATS`).

A new format is one new module here, or one module anywhere that registers it (see
``examples/custom_sensor/``): its :class:`~._base.Writer` with name, files, outputs and
options. The range-scan runner, ``--formats``, ``--option``, the panel's format list and
the manifest take it from the registry.

Stored values: the panel's format sets are Blender flag enums, stored as bits. Each
format has an explicit bit, never its position in a list: the built-in formats keep the
bits saved files hold (:data:`BUILTIN_BITS`); a plug-in writer declares ``flag_bit``
(in [16, 30]) or gets one derived from its name (:func:`plugin_bit`).
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.errors import SettingsError, did_you_mean
from ...core.plugins import LazyRegistry, check_new_name, load_plugins
from ...core.settings import Meta
from ._base import NoOptions, RunInfo, Writer  # noqa: F401

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: entry-point group of pip-installed writer plug-ins
ENTRY_POINT_GROUP = "blensor.writers"
#: flag bit of each built-in format in the stored ``formats`` (and ``depth_formats``) sets:
#: the values saved files hold, never to change; the registry's order
BUILTIN_BITS = {"npz": 0, "evd": 1, "pcd": 2, "las": 3, "laz": 4, "ply": 5, "kitti": 6, "rosbag2": 7,
                "range_image": 8, "exr": 9, "npy": 10, "pfm": 11, "dmap": 12, "pcap": 13,
                "laserscan": 14, "preview": 15}
#: bits of plug-in writers (Blender's flag enums hold 31 usable bits)
PLUGIN_BITS = range(16, 31)

#: format name -> Writer class
WRITERS: LazyRegistry[type[Writer]] = LazyRegistry()
#: format name -> its flag bit (the stored value of the format in a set is ``1 << bit``)
FLAG_BITS: LazyRegistry[int] = LazyRegistry()


def plugin_bit(name: str) -> int:
    """The flag bit of a plug-in writer named ``name`` that declares none: stable (CRC-32
    of the name) in :data:`PLUGIN_BITS`, or the next free one after it when another
    plug-in holds it.

    Raises:
        SettingsError (``writer``): every plug-in bit is taken.
    """
    span = len(PLUGIN_BITS)
    first = zlib.crc32(name.encode()) % span
    taken = set(FLAG_BITS.values())
    for k in range(span):
        bit = PLUGIN_BITS[(first + k) % span]
        if bit not in taken:
            return bit
    raise SettingsError("writer", f"at most {span} plug-in writers (no flag bit left for '{name}')", name)


def register_writer(writer_cls: object, *, builtin: bool = False) -> type[Writer]:
    """Add a file format to :data:`WRITERS`.

    Args:
        writer_cls: a :class:`~._base.Writer` subclass with a ``name`` (lower-case
            letters, digits, ``_``; not already registered), a one-line
            ``description``, ``outputs`` (regular expressions of the file names it
            writes, relative to the output folder) and ``Options`` (a frozen dataclass
            whose fields carry :func:`~blensor_addon.core.settings.setting` metadata).
            ``flag_bit`` (optional, in [16, 30]) fixes the bit Blender stores for it.
        builtin: a module of this package (its bit comes from :data:`BUILTIN_BITS`).
    Returns:
        ``writer_cls``.
    Raises:
        SettingsError (``writer``): not a Writer subclass, a bad or duplicate name or
        bit, options without metadata, or an output pattern that is not a regular
        expression.
    """
    if not (isinstance(writer_cls, type) and issubclass(writer_cls, Writer)) or writer_cls is Writer:
        raise SettingsError("writer", "a subclass of blensor_addon.io.formats.Writer", repr(writer_cls))
    name = writer_cls.name
    check_new_name("writer", "Writer", name, WRITERS)
    opts = writer_cls.Options
    if not (isinstance(opts, type) and dataclasses.is_dataclass(opts)) or not all(
            isinstance(f.metadata.get("blensor"), Meta) for f in dataclasses.fields(opts)):
        raise SettingsError("writer", f"Options of writer '{name}' a dataclass whose fields are declared "
                            "with blensor_addon.core.settings.setting()", opts)
    for pattern in writer_cls.outputs:
        try:
            re.compile(pattern)
        except (re.error, TypeError):
            raise SettingsError("writer", f"outputs of writer '{name}' regular expressions",
                                pattern) from None
    declared = writer_cls.flag_bit
    if builtin and name in BUILTIN_BITS:
        bit = BUILTIN_BITS[name]
    elif declared is not None:
        if isinstance(declared, bool) or not isinstance(declared, int) or declared not in PLUGIN_BITS:
            raise SettingsError("writer", f"flag_bit of writer '{name}' an integer in [{PLUGIN_BITS[0]}, "
                                f"{PLUGIN_BITS[-1]}]", declared)
        bit = declared
    else:
        bit = plugin_bit(name)
    clash = [k for k, b in FLAG_BITS.items() if b == bit]
    if clash:
        raise SettingsError("writer", f"flag_bit of writer '{name}' not used by format '{clash[0]}'", bit)
    WRITERS[name] = writer_cls
    FLAG_BITS[name] = bit
    return writer_cls


def _discover() -> None:
    found: dict[str, type[Writer]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f".{info.name}", __name__)
        for w in getattr(module, "WRITERS", (getattr(module, "WRITER", None),)):
            if isinstance(w, type) and issubclass(w, Writer):
                found[w.name] = w
    for name in sorted(found, key=lambda k: (BUILTIN_BITS.get(k, len(BUILTIN_BITS)), k)):
        register_writer(found[name], builtin=True)


def _add_plugin(obj: object) -> None:
    items = obj
    if not isinstance(obj, type):
        items = getattr(obj, "WRITERS", None) or getattr(obj, "WRITER", obj)
    for w in (items if isinstance(items, (list, tuple)) else (items,)):
        register_writer(w)


_discover()
WRITERS.arm(lambda: load_plugins(ENTRY_POINT_GROUP, _add_plugin))
FLAG_BITS.arm(WRITERS.load)


@dataclass(frozen=True)
class MotionFormat:
    """A format of the motion export (:mod:`blensor_addon.jobs.motion_export`, which writes it).

    Attributes:
        name: the format's name (``--format``); description: one line; outputs: regular
        expressions of the file names it writes (relative to the output folder); bit:
        its flag bit in the stored ``motion_formats`` set (explicit, never to change).
    """

    name: str
    description: str
    outputs: tuple[str, ...]
    bit: int


#: format name -> :class:`MotionFormat`, the motion export's formats
MOTION_FORMATS: dict[str, MotionFormat] = {m.name: m for m in (
    MotionFormat("blensor", "motion.txt: the original's text, every object's pose per frame",
                 (r"motion\.txt",), 0),
    MotionFormat("tum", "tum/<object>.tum: TUM RGB-D trajectories (t tx ty tz qx qy qz qw)",
                 (r"tum/[^/]+\.tum",), 1),
    MotionFormat("kitti", "kitti_poses/<object>.txt: KITTI 3x4 world poses per frame",
                 (r"kitti_poses/[^/]+\.txt",), 2),
    MotionFormat("json", "boxes/<frame>.json and tracking.txt: labelled 3D boxes per frame",
                 (r"boxes/\d+\.json", r"tracking\.txt"), 3),
)}


def parse_formats(formats: str | Iterable[str]) -> tuple[str, ...]:
    """Normalise ``"npz,evd"`` or an iterable to a tuple of known formats.

    Raises:
        SettingsError (``formats``): empty or unknown format.
    """
    items = [f.strip().lower() for f in (formats.split(",") if isinstance(formats, str) else formats)]
    items = [f for f in items if f]
    if not items or any(f not in WRITERS for f in items):
        unknown = [f for f in items if f not in WRITERS]
        raise SettingsError("formats", "a comma-separated subset of " + ",".join(WRITERS), formats,
                            did_you_mean(unknown[0], WRITERS, formats) if unknown else "")
    for f in items:
        missing = [m for m in WRITERS[f].requires if importlib.util.find_spec(m) is None]
        if missing:
            how = WRITERS[f].install or "pip install blensor's dependencies"
            raise SettingsError("formats", f"formats whose Python packages are installed ({f} needs "
                                f"{', '.join(missing)}: {how})", f)
    return tuple(dict.fromkeys(items))


def make_options(formats: Sequence[str],
                 options: Mapping[str, object] | None) -> dict[str, DataclassInstance]:
    """Options per format from ``{"pcd.ascii": value or text, ...}``.

    Returns:
        format name -> validated Options instance (defaults where not given).
    Raises:
        SettingsError: an option of a format not in ``formats``, an unknown option, or
        a value out of range (named ``FORMAT.OPTION``).
    """
    given: dict[str, dict[str, object]] = {f: {} for f in formats}
    for key, value in (options or {}).items():
        fmt, _, opt = str(key).partition(".")
        if fmt not in WRITERS:
            raise SettingsError("--option", "FORMAT.OPTION=VALUE with FORMAT one of " + ",".join(WRITERS),
                                key, did_you_mean(fmt, WRITERS, key))
        if fmt not in given:  # (the value shown is what was typed: the key with its value)
            raise SettingsError(key, f"an option of a format being written ({','.join(formats)})",
                                f"{key}={value}")
        fields = {f.name: f for f in dataclasses.fields(WRITERS[fmt].Options)}
        if opt not in fields:  # name the key typed and the keys there are
            keys = ", ".join(f"{fmt}.{n}" for n in fields) or f"(none: {fmt} has no options)"
            raise SettingsError(key, f"one of the options of {fmt}: {keys}", f"{key}={value}",
                                did_you_mean(key, [f"{fmt}.{n}" for n in fields]))
        meta = fields[opt].metadata["blensor"]
        given[fmt][opt] = meta.parse(key, value) if isinstance(value, str) else meta.check(key, value)
    return {f: WRITERS[f].Options(**given[f]) for f in formats}


def output_patterns(formats: Iterable[str] | None = None) -> list[str]:
    """Regular expressions of every file (relative path) a range scan leaves: the
    manifest, the trajectory and what the formats declare (``Writer.outputs``): every
    format of the registry, or those named in ``formats`` (unknown names are skipped)."""
    names = WRITERS if formats is None else [f for f in formats if f in WRITERS]
    return ["manifest\\.json", "trajectory\\.tum"] + [p for f in names for p in WRITERS[f].outputs]


__all__ = ["WRITERS", "FLAG_BITS", "BUILTIN_BITS", "MOTION_FORMATS", "MotionFormat", "Writer", "RunInfo",
           "NoOptions", "register_writer", "plugin_bit", "parse_formats", "make_options", "output_patterns"]
