"""Helpers shared by the config formats of this package (no bpy): poses (roll, pitch and
yaw are :mod:`...core.axes`'s :func:`rpy_matrix` / :func:`matrix_rpy`, re-exported here),
numbers as the files write them, the settings a config gives, the sweep grid of a
config's N samples, reading a file and writing one atomically, and the lines naming
what a format cannot express (a written file read back and compared).
"""
from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, SupportsFloat

import numpy as np
from numpy.typing import ArrayLike

from ...core.axes import matrix_rpy, rpy_matrix  # noqa: F401 (the formats' poses: one pair, core/axes.py)
from ...core.errors import SettingsError
from ...core.sensors import make_settings
from ...core.sensors.raypattern import sweep_column_count

if TYPE_CHECKING:
    from ...core.ndtypes import F64
    from ...core.settings import SensorSettings
    from ..atomic import StrPath

class SensorRecord(Protocol):
    """What these helpers read of a :class:`~.SensorConfig` (a protocol: the package module,
    which defines it, imports this one)."""

    @property
    def name(self) -> str: ...

    @property
    def sensor_type(self) -> str: ...

    @property
    def values(self) -> dict[str, Any]: ...

    @property
    def parent(self) -> str | None: ...

    @property
    def pose(self) -> F64 | None: ...

    @property
    def outputs(self) -> dict[str, Any]: ...


#: relative tolerance under which two float settings are the same: below a float32's
#: precision (a camera stores float32; an imported angle is a float32 nudged by an ulp or
#: two so that its sweep has exactly the file's samples)
REL_TOL = 5e-7


def pose_matrix(xyz: ArrayLike, R: ArrayLike) -> F64:
    """(4, 4) float64 pose of translation ``xyz`` (m) and rotation ``R``."""
    T = np.eye(4)
    T[:3, :3] = R
    T[:3, 3] = xyz
    return T


def num(v: SupportsFloat) -> str:
    """A number as a file writes it: integral values without a fraction (``0``, ``16``),
    others as Python's shortest round-trip text (``0.6``, ``-1.5707963267948966``)."""
    v = float(v)
    if v == 0.0:
        return "0"
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def f32(v: float) -> float:
    """``v`` rounded to float32 (what a Blender FloatProperty stores), as a float."""
    return float(np.float32(v))


def _next32(v: float, toward: float) -> float:
    return float(np.nextafter(np.float32(v), np.float32(toward)))


def sweep_grid(lo_deg: float, hi_deg: float, samples: int, *, from_end: bool = False
               ) -> tuple[float, float, float, bool]:
    """A sweep of ``samples`` columns from ``lo_deg`` to ``hi_deg`` inclusive (the step
    ``(hi - lo) / (samples - 1)``, seed 004's vertical step rule applied to the horizontal
    samples) as BlenSor's ``start_angle``, ``end_angle`` (exclusive) and
    ``angle_resolution`` (deg) such that :func:`~...core.sensors.raypattern.sweep_column_count`
    gives exactly ``samples`` columns, with values a float32 Blender property holds
    exactly (so the camera counts the same columns). ``from_end``: a clockwise rotating
    head, whose columns are ``end - k res``: the sector ends at ``hi``.

    Samples spanning a full turn (``samples * step`` beyond 360 deg: ``-pi..pi`` would
    give its first and last column the same direction) become a full turn of ``samples``
    columns, step ``360 / samples``, starting at ``lo``.

    Returns:
        (start, end, resolution, full_turn).
    """
    n = int(samples)
    span = hi_deg - lo_deg
    step = span / (n - 1) if n > 1 else 360.0
    full = n == 1 or n * step > 360.0 + 1e-9
    if full:
        start, res = f32(lo_deg), f32(360.0 / n)
        end = f32(start + 360.0)
        while sweep_column_count(start, end, res) < n:  # res rounded up: one step down
            res = _next32(res, 0.0)
        return start, end, res, True
    res = f32(step)
    if from_end:
        end = f32(hi_deg)
        start = f32(end - n * res)
        while sweep_column_count(start, end, res) < n:
            start = _next32(start, -math.inf)
    else:
        start = f32(lo_deg)
        end = f32(start + n * res)
        while sweep_column_count(start, end, res) < n:
            end = _next32(end, math.inf)
    return start, end, res, False


def grid_samples(start: float, end: float, res: float, *, from_end: bool = False
                 ) -> tuple[float, float, int]:
    """:func:`sweep_grid`'s inverse: (lo, hi, samples) deg of a sweep of the sector
    ``start..end`` at ``res``: the first and last column's angle (a full turn: ``start``
    and ``start + 360``)."""
    n = sweep_column_count(start, end, res)
    if n >= 1 and abs(n * res - 360.0) <= 1e-4 and end - start >= 360.0 - 1e-4:
        return start, start + 360.0, n
    if from_end:
        return end - (n - 1) * res, end, n
    return start, start + (n - 1) * res, n


def read_text(path: StrPath, what: str) -> str:
    """The text of the config file at ``path`` (UTF-8, a BOM allowed), at most
    :data:`~..safeload.MAX_BYTES` long.

    Raises:
        SettingsError (``what``): no such file, not a regular file, unreadable, larger
            than the bound, not UTF-8."""
    from ..safeload import MAX_BYTES
    p = Path(path)
    if not p.is_file():
        raise SettingsError(what, "an existing config file", str(path))
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise SettingsError(what, f"a config file of at most {MAX_BYTES >> 20} MiB", str(path))
        return data.decode("utf-8-sig")
    except OSError as exc:
        raise SettingsError(what, f"a readable file ({exc.strerror})", str(path)) from None
    except UnicodeDecodeError as exc:
        raise SettingsError(what, f"UTF-8 text (byte {exc.start})", str(path)) from None


def write_text(path: StrPath, text: str, what: str) -> None:
    """Write ``text`` to ``path`` through a temporary sibling and rename (nothing half
    written). A symbolic link at ``path`` is followed (the file it names is written,
    the link kept); what is there in the end must be nothing or a regular file.

    Raises:
        SettingsError (``what``): a FIFO, device, socket or folder there (left as it
        was), or the folder is missing or not writable."""
    from ..atomic import NotRegularError, atomic_write_bytes
    target = Path(os.path.realpath(path))
    try:
        atomic_write_bytes(target, text.encode("utf-8"))
    except NotRegularError as exc:
        raise SettingsError(what, "a new file or a regular file to replace (never a FIFO, device, socket "
                            "or folder)", f"{target} ({exc.kind})") from None
    except OSError as exc:
        raise SettingsError(what, f"a path in a writable folder ({exc.strerror})", str(path)) from None


def settings_of(config: SensorRecord) -> SensorSettings:
    """The validated settings a :class:`~.SensorConfig` gives a new camera: the sensor
    type's defaults, the preset it names, then its values.

    Raises:
        SettingsError: as :func:`~...core.sensors.make_settings`."""
    settings: SensorSettings = make_settings(config.sensor_type, None, config.values)[1]
    return settings


def validated(config: SensorRecord, where: str, field_of: dict[str, str]) -> None:
    """Validate ``config``'s settings (:func:`settings_of`), then again with every float
    as a camera stores it (:func:`f32`: 1e-300 Hz becomes 0, 1e39 m inf); an error names
    the file's field: ``where`` plus ``field_of[setting]`` (else the setting's own name),
    and the file's value.

    Raises:
        SettingsError: a value out of range, as given or as a float32, naming the file's
            field."""
    try:
        settings_of(config)
    except SettingsError as exc:
        field = field_of.get(exc.setting, exc.setting)
        raise SettingsError(f"{where} {field}", exc.allowed, exc.value) from None
    values = config.values
    with np.errstate(over="ignore"):
        stored = {k: f32(v) if isinstance(v, float) else v for k, v in values.items()}
    if stored == values:
        return
    try:
        make_settings(config.sensor_type, None, stored)
    except SettingsError as exc:
        field = field_of.get(exc.setting, exc.setting)
        given = values.get(exc.setting, exc.value)
        raise SettingsError(f"{where} {field}", f"{exc.allowed} as a 32-bit float (a camera stores {given!r} "
                            f"as {exc.value!r})", given) from None


def _same(a: Any, b: Any) -> bool:
    """Whether setting values ``a`` and ``b`` (numbers, strings, tuples of them) are the same,
    floats within :data:`REL_TOL`."""
    if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b)
                and all(_same(x, y) for x, y in zip(a, b)))
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    same: bool = a == b
    return same


def _shown(v: object) -> str:
    if isinstance(v, (tuple, list)):
        text = ",".join(_shown(x) for x in v)
        return text if len(text) <= 80 else f"{text[:60]}... ({len(v)} values)"
    if isinstance(v, float):
        return f"{v:.10g}"
    return repr(v) if isinstance(v, str) else str(v)


def unexpressed(label: str, originals: Sequence[SensorRecord], back: Sequence[SensorRecord]) -> list[str]:
    """One line per thing of ``originals`` (the configs given to a writer) that the
    written file, read back (``back``), does not hold: the sensor type, a setting, the
    pose, the parent, a kept output; e.g. ``"lidar1: noise_sigma = 0.01: not in the AirSim
    schema; not written (reads back as 0)"``."""
    lines: list[str] = []
    for orig, new in zip(originals, back):
        head = f"{orig.name}: "
        if new.sensor_type != orig.sensor_type:
            lines.append(f"{head}sensor type {orig.sensor_type}: not in the {label} schema; written as "
                         f"{new.sensor_type}")
        a = settings_of(orig)
        try:
            b = settings_of(new)
        except SettingsError as exc:  # (cannot happen for a file the writer made; said if it does)
            lines.append(f"{head}written settings do not read back ({exc})")
            continue
        names_b = {f.name for f in dataclasses.fields(b)}
        for f in dataclasses.fields(a):
            shown_if = f.metadata["blensor"].show_if
            if shown_if is not None and shown_if[0] != f.name \
                    and getattr(a, shown_if[0], None) != shown_if[1]:
                continue  # not used by these settings (a preset's elevations)
            va = getattr(a, f.name)
            if f.name not in names_b and _same(va, f.default):
                continue  # no such setting there, and at its default here: nothing lost
            vb = getattr(b, f.name) if f.name in names_b else None
            if not _same(va, vb):
                back_txt = (f"reads back as {_shown(vb)}" if f.name in names_b
                            else f"no such setting of {new.sensor_type}")
                lines.append(f"{head}{f.name} = {_shown(va)}: not in the {label} schema; not written "
                             f"({back_txt})")
        if (orig.parent or None) != (new.parent or None):
            lines.append(f"{head}parent {orig.parent!r}: not in the {label} schema; not written")
        pa = np.eye(4) if orig.pose is None else np.asarray(orig.pose, dtype=np.float64)
        pb = np.eye(4) if new.pose is None else np.asarray(new.pose, dtype=np.float64)
        if not np.allclose(pa, pb, rtol=0.0, atol=1e-9):
            lines.append(f"{head}pose: not in the {label} schema; not written")
        for key, value in orig.outputs.items():
            if key not in new.outputs or not _same(value, new.outputs[key]):
                lines.append(f"{head}{key} = {_shown(value)}: not in the {label} schema; not written")
    return lines


__all__ = ["rpy_matrix", "matrix_rpy", "pose_matrix", "num", "f32", "sweep_grid", "grid_samples", "read_text",
           "write_text", "settings_of", "validated", "unexpressed", "SensorRecord"]
