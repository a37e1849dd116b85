"""The settings schema: settings declared once, with metadata, for every layer.

A setting is a frozen-dataclass field made with :func:`setting`; its :class:`Meta`
(label, description, unit, allowed range, choices) drives validation, the Blender
properties and panel, the command line (``--set NAME=VALUE``, ``--option
FORMAT.KEY=VALUE``) and ``blensor sensors``. Sensors (:mod:`blensor_addon.core.sensors`)
declare their settings on :class:`SensorSettings` subclasses; writers
(:mod:`blensor_addon.io.formats`) declare their options the same way. This module owns
that machinery, the settings every sensor has (:class:`SensorSettings`, :data:`COMMON`)
and :class:`Preset`.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar, cast, overload

import numpy as np

from .errors import SettingsError
from .ndtypes import F64

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")

#: Seeds are stored in a Blender integer property (signed 32-bit).
MAX_SEED = 2**31 - 1
FRAMES_OF_REFERENCE = ("sensor", "world")
VISIBILITIES = ("render", "viewport")
#: ``continuous``: every ray at its own firing time, sensor and scene moving during the
#: scan (continuous time); ``frame``: the scene frozen for each scene frame (the original)
TIME_MODELS = ("continuous", "frame")
#: range-scan outputs: one per full sweep (revolution), one per scene frame, or auto
PACKETS = ("auto", "sweep", "frame")
#: default step (s) at which deforming meshes are re-evaluated: 1 cm at 30 m/s
DEFAULT_TIME_STEP = 0.0003
#: slowest sweep rate (Hz) of every swept sensor (``rotation_speed``, ``rotation_frequency``):
#: a sweep lasts at most 100 s. A range scan evaluates the scene over a sweep's whole span (the
#: transform pre-check, every step of a timed packet), so 1e-9 Hz (a sweep of 31 years) ran for
#: hours; the slowest real heads (tilting 3D scanners) sweep at about 0.1 Hz
MIN_SWEEP_RATE = 0.01


# ---------------------------------------------------------------------------------------
# settings metadata


@dataclass(frozen=True)
class Meta:
    """What a setting is: the source of validation, UI, CLI and documentation.

    Attributes:
        label: UI label; description: one line; unit: ``"m"``, ``"deg"``, ``"Hz"``,
        ``"px"``, ``"mm"``, ``"1/m"`` or ``""``.
        kind: ``"float"``, ``"int"``, ``"bool"``, ``"enum"``, ``"floats"`` (a list of
        numbers, typed comma-separated) or ``"text"``.
        lo, hi: bounds (None: unbounded); lo_open, hi_open: exclusive bounds.
        choices: allowed values of an enum (their order is the stored order: append only).
        count: (min, max) list length of ``floats``.
        show_if: (other setting, value): the panel shows this setting only then.
        precision: digits shown in the panel.
        group: the panel section (and ``blensor sensors`` heading) the setting belongs
            to; ``""``: the sensor's own settings, drawn first. Settings of one group are
            drawn together, groups in the order their first setting is declared.
    """

    label: str
    description: str
    unit: str = ""
    kind: str = "float"
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple[str, ...] = ()
    count: tuple[int, int] = (1, 1024)
    show_if: tuple[str, Any] | None = None
    precision: int = 3
    group: str = ""

    def allowed(self) -> str:
        """Human-readable allowed values, e.g. ``"in (0, 360] deg"``."""
        unit = f" {self.unit}" if self.unit else ""
        if self.kind == "enum":
            return "one of " + ", ".join(self.choices)
        if self.kind == "bool":
            return "true or false"
        if self.kind == "text":
            return "text"
        what = "an integer" if self.kind == "int" else "a finite number"

        def num(v: float) -> str:  # integers in full (2147483647, not 2.14748e+09)
            return str(int(v)) if self.kind == "int" else f"{v:g}"
        if self.lo is not None and self.hi is not None:
            rng = (f"in {'(' if self.lo_open else '['}{num(self.lo)}, {num(self.hi)}"
                   f"{')' if self.hi_open else ']'}{unit}")
            return rng if self.kind == "float" else f"{what} {rng}"
        if self.lo is not None:
            return f"{what} {'>' if self.lo_open else '>='} {num(self.lo)}{unit}"
        if self.hi is not None:
            return f"{what} {'<' if self.hi_open else '<='} {num(self.hi)}{unit}"
        return what + (f" ({self.unit})" if self.unit else "")

    def _in_range(self, v: float) -> bool:
        if not isinstance(v, int) and not math.isfinite(v):  # (an int is finite: 10**400 overflows isfinite)
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        if self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi):
            return False
        return True

    def check(self, name: str, value: Any) -> Any:
        """Return ``value`` normalised (floats, ints, tuples) or raise.

        Raises:
            SettingsError naming ``name`` and :meth:`allowed`.
        """
        k = self.kind
        if k == "bool":
            if isinstance(value, (bool, np.bool_)):
                return bool(value)
        elif k == "enum":
            if value in self.choices:
                return value
        elif k == "text":
            if isinstance(value, str):
                return value
        elif k == "int":
            if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and self._in_range(int(value)):
                return int(value)
        elif k == "float":
            if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                try:
                    f = float(value)
                except OverflowError:  # an int beyond float64 (10**400)
                    f = None
                if f is not None and self._in_range(f):
                    return f
        elif k == "floats":
            try:
                vals = tuple(float(v) for v in value)
            except (TypeError, ValueError, OverflowError):
                vals = None
            lo, hi = self.count
            if vals is not None and lo <= len(vals) <= hi and all(self._in_range(v) for v in vals):
                return vals
            raise SettingsError(name, f"{lo} to {hi} numbers, each {self.allowed()}", value)
        raise SettingsError(name, self.allowed(), value)

    def parse(self, name: str, text: str) -> Any:
        """Value of a typed string (``--set NAME=VALUE``, the panel's text fields).

        Raises:
            SettingsError: not parseable or out of range.
        """
        t = str(text).strip()
        k = self.kind
        try:
            if k == "bool":
                low = t.lower()
                if low not in ("1", "0", "true", "false", "on", "off", "yes", "no"):
                    raise ValueError
                v: Any = low in ("1", "true", "on", "yes")
            elif k == "int":
                v = int(t)
            elif k == "float":
                v = float(t)
            elif k == "floats":
                v = tuple(float(p) for p in t.replace(";", ",").split(",") if p.strip())
            else:
                v = t
        except ValueError:
            raise SettingsError(name, self.allowed(), text) from None
        return self.check(name, v)

    def format(self, value: Any) -> str:
        """The value as typed on the command line."""
        if self.kind == "floats":
            return ",".join(f"{v:g}" for v in value)
        if self.kind == "bool":
            return "true" if value else "false"
        return f"{value:g}" if isinstance(value, float) else str(value)


def setting(default: T, label: str, description: str, unit: str = "", *, lo: float | None = None,
            hi: float | None = None, lo_open: bool = False, hi_open: bool = False,
            choices: tuple[str, ...] = (), kind: str | None = None, count: tuple[int, int] = (1, 1024),
            show_if: tuple[str, Any] | None = None, precision: int = 3, group: str = "") -> T:
    """A dataclass field carrying :class:`Meta`; ``kind`` is inferred from the default
    (bool, int, float; a str with ``choices`` is an enum; a tuple is ``floats``)."""
    if kind is None:
        if isinstance(default, bool):
            kind = "bool"
        elif isinstance(default, int):
            kind = "int"
        elif isinstance(default, float):
            kind = "float"
        elif isinstance(default, tuple):
            kind = "floats"
        else:
            kind = "enum" if choices else "text"
    meta = Meta(label, description, unit, kind, lo, hi, lo_open, hi_open, tuple(choices), count, show_if,
                precision, group)
    return dataclasses.field(default=default, metadata={"blensor": meta})


def meta_of(cls_or_obj: DataclassInstance | type[DataclassInstance], name: str) -> Meta:
    """:class:`Meta` of setting ``name`` of a settings class or object."""
    for f in dataclasses.fields(cls_or_obj):
        if f.name == name:
            return cast(Meta, f.metadata["blensor"])
    raise KeyError(name)


@dataclass(frozen=True)
class SensorSettings:
    """Base of every sensor's settings: the common fields.

    Attributes:
        seed: seed of every random draw, integer in [0, 2**31 - 1] (the range of the
            Blender property that stores it).
        max_bounces: mirror reflections followed per ray, in [0, 64].
        visibility: ``"render"`` (default: scan what renders, as the original, reference
            section 3.2) or ``"viewport"``.
        time_model: ``"continuous"`` (every ray at its firing time; the sensor pose and
            every object's transform are taken at that time) or ``"frame"`` (the scene
            frozen per scene frame, the original's model, reference section 9). A camera
            stored without this setting (a v0.1 file) scans with ``"frame"``.
        packets: range-scan outputs: ``"sweep"`` (one per full revolution or field-of-view
            sweep, at the sensor's rate whatever the scene's fps), ``"frame"`` (one per
            scene frame: the original's sectors) or ``"auto"`` (sweep for swept sensors in
            continuous time unless EVD is written; frame otherwise).
        time_step: s, in (0, 1]: in continuous time, meshes that deform (armatures, shape
            keys, simulations) are re-evaluated every ``time_step`` (frozen in between:
            error <= speed x step; the default 0.3 ms keeps it under 1 cm at 30 m/s).
            Rigid motion is interpolated between scene frames and needs no steps. At most
            one scene frame.
        deskew: also output every point in the sensor frame at the sweep's start
            (motion-compensated with the true trajectory), beside the raw points.
    """

    seed: int = setting(0, "Seed", "Seed of every random draw", lo=0, hi=MAX_SEED)
    max_bounces: int = setting(8, "Max bounces", "Mirror reflections followed per ray", lo=0, hi=64)
    visibility: str = setting("render", "Scan", "Which evaluation of the scene is scanned: what renders "
                              "or what the viewport shows", choices=VISIBILITIES)
    time_model: str = setting("continuous", "Time model", "continuous: every ray at its own firing time while "
                              "the sensor and the scene move; frame: the scene frozen per frame (the original)",
                              choices=TIME_MODELS)
    packets: str = setting("auto", "Packets", "Range scans: one output per full sweep or per scene frame "
                           "(auto: sweeps in continuous time unless EVD is written)", choices=PACKETS)
    time_step: float = setting(DEFAULT_TIME_STEP, "Time step", "Continuous time: deforming meshes are "
                               "re-evaluated at this step (rigid motion is interpolated between frames)", "s",
                               lo=0.0, hi=1.0, lo_open=True, precision=5)
    deskew: bool = setting(False, "Deskewed points", "Also output the points in the sensor frame at the "
                           "sweep start (motion-compensated ground truth)")

    def validate(self) -> Self:
        """Check every setting against its metadata, then :meth:`check`; return self.

        Raises:
            SettingsError naming the first bad setting and its allowed range.
        """
        for f in dataclasses.fields(self):
            f.metadata["blensor"].check(f.name, getattr(self, f.name))
        self.check()
        return self

    def check(self) -> None:
        """Rules between settings (override); raise SettingsError."""

    def replace(self, **changes: Any) -> Self:
        """Copy with some fields changed (not validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict of every setting."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}


#: settings every sensor has, stored once per camera (the fields of :class:`SensorSettings`)
COMMON = tuple(f.name for f in dataclasses.fields(SensorSettings))


def check_less(lo_name: str, lo: float, hi_name: str, hi: float, unit: str) -> None:
    """Raise SettingsError (``hi_name``) unless lo < hi."""
    if not lo < hi:
        raise SettingsError(hi_name, f"greater than {lo_name} ({lo:g} {unit})", hi)


def check_table(name: str, text: str) -> F64:
    """Parse a distance-dependent noise table ``"(d, mu, sigma), (d, mu, sigma), ..."``
    (the original's advanced error model, reference section 6.3): rows sorted by
    strictly increasing distance d >= 0 (m), finite mu (m), sigma >= 0 (m).
    Returns (K, 3) float64 (K = 0 for an empty text).

    Raises:
        SettingsError (``name``): not parseable, unsorted, or a negative sigma.
    """
    allowed = "a list of (distance m, mu m, sigma m) triples with increasing distance >= 0 and sigma >= 0"
    t = str(text).strip()
    if not t:
        return np.zeros((0, 3))
    try:
        nums = [float(p) for p in t.replace("(", " ").replace(")", " ").replace("[", " ").replace("]", " ")
                .replace(",", " ").replace(";", " ").split()]
    except ValueError:
        raise SettingsError(name, allowed, text) from None
    if not nums or len(nums) % 3:
        raise SettingsError(name, allowed, text)
    table = np.asarray(nums, dtype=np.float64).reshape(-1, 3)
    if not np.isfinite(table).all() or (table[:, 0] < 0).any() or (table[:, 2] < 0).any() \
            or (np.diff(table[:, 0]) <= 0).any():
        raise SettingsError(name, allowed, text)
    return table


@dataclass(frozen=True)
class Preset:
    """A named set of setting values (``values``); ``source`` cites where they come from."""

    label: str
    values: dict[str, Any]
    source: str = ""


# ---------------------------------------------------------------------------------------
# optional settings: read through the schema


@dataclass(frozen=True)
class OptionalSetting:
    """A setting that some sensor types declare and others do not, and what a sensor
    type without it behaves as.

    Attributes:
        default: the value of a sensor whose settings do not declare the setting (the
            declaring types' default: tests/test_optional_settings.py keeps them equal).
        unit: the unit (as :attr:`Meta.unit`); ``""``: none.
        meaning: what the default means, one line.
    """

    default: bool | int | float | str
    unit: str
    meaning: str


#: the settings the sensor-independent code (:mod:`blensor_addon.core.sensors`' physics, beam,
#: weather and intensity stages, the writers' configs) reads of any sensor, declared or not,
#: with the value of a sensor that does not declare them; :func:`setting_value` reads them
OPTIONAL_SETTINGS: dict[str, OptionalSetting] = {
    "min_range": OptionalSetting(0.0, "m", "no minimum range: every measured range is reported"),
    "range_resolution": OptionalSetting(0.0, "m", "reported ranges not quantized"),
    "return_model": OptionalSetting("limit", "", "the reflectivity limit decides (seed 000 Eq. 1)"),
    "samples_per_beam": OptionalSetting(1, "", "one sub-ray per beam, its axis"),
    "beam_divergence": OptionalSetting(0.0, "rad", "an infinitely thin beam"),
    "beam_divergence_vertical": OptionalSetting(0.0, "rad", "the same as beam_divergence"),
    "focus_distance": OptionalSetting(0.0, "m", "the beam narrowest at the aperture"),
    "divergence_algorithm": OptionalSetting("echoes", "", "sub-rays grouped into echoes along the beam"),
    "returns": OptionalSetting("strongest", "", "the strongest echo of each beam"),
    "max_returns": OptionalSetting(3, "", "returns per beam in mode all"),
    "echo_separation": OptionalSetting(1.0, "m", "candidates within 1 m along a beam are one echo"),
    "intensity_model": OptionalSetting("lambert", "", "R0 cos(theta) (seed 002 Eq. 4)"),
    "weather": OptionalSetting("none", "", "clear air"),
}

#: settings read through :func:`setting_value` whose values are floats, ints, strs
FloatSetting = Literal["min_range", "range_resolution", "max_range", "beam_divergence",
                       "beam_divergence_vertical", "focus_distance", "echo_separation", "rotation_speed",
                       "start_angle", "end_angle", "angle_resolution", "ref_dist", "ref_limit", "ref_slope"]
IntSetting = Literal["samples_per_beam", "max_returns"]
StrSetting = Literal["return_model", "divergence_algorithm", "returns", "intensity_model", "weather"]


_DECLARED: dict[type, frozenset[str]] = {}


def _declared(cls: type[DataclassInstance]) -> frozenset[str]:
    """The field names of the settings class ``cls`` (cached per class)."""
    names = _DECLARED.get(cls)
    if names is None:
        names = _DECLARED[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return names


@overload
def setting_value(s: SensorSettings, name: FloatSetting) -> float: ...
@overload
def setting_value(s: SensorSettings, name: IntSetting) -> int: ...
@overload
def setting_value(s: SensorSettings, name: StrSetting) -> str: ...
@overload
def setting_value(s: SensorSettings, name: str) -> object: ...


def setting_value(s: SensorSettings, name: str) -> object:
    """The value of setting ``name`` of the settings ``s``, read through the schema: the
    field's value when ``type(s)`` declares it (a :func:`setting` field), else the
    :data:`OPTIONAL_SETTINGS` default (a sensor type without the setting behaves as
    that value).

    Raises:
        AttributeError (``name``): neither declared by ``type(s)`` nor an optional setting
            (a misspelt name is a programming error, never a silent default).
        TypeError: ``s`` is not a dataclass instance.
    """
    if name in _declared(type(s)):
        return getattr(s, name)
    optional = OPTIONAL_SETTINGS.get(name)
    if optional is None:
        raise AttributeError(f"{name!r} is not a setting of {type(s).__name__} nor one of OPTIONAL_SETTINGS",
                             name=name, obj=s)
    return optional.default


__all__ = ["Meta", "setting", "meta_of", "SensorSettings", "COMMON", "Preset", "check_less", "check_table",
           "MAX_SEED", "FRAMES_OF_REFERENCE", "VISIBILITIES", "TIME_MODELS", "PACKETS", "DEFAULT_TIME_STEP",
           "OptionalSetting", "OPTIONAL_SETTINGS", "setting_value"]
