"""The sensor interface: settings with metadata, presets, ray patterns, the default scan.

A sensor type is one module of :mod:`blensor_addon.core.sensors` that defines a
:class:`Sensor` subclass instance named ``SENSOR``. Its settings are a frozen dataclass
(subclass of :class:`SensorSettings`) whose fields are declared with :func:`setting`,
so the metadata (label, description, unit, allowed range, choices) drives validation,
the Blender properties and panel, the command line (``--set NAME=VALUE``) and
``blensor sensors``.

Sensor frame (kept from the original, reference section 2): camera-local, +X right,
+Y up, looking down -Z. Azimuth psi = 0 looks down -Z and grows toward -X
(counter-clockwise seen from +Y); elevation is the angle above the XZ plane.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Iterator, Protocol

import numpy as np

from ..errors import SettingsError
from ..result import ScanResult

#: Seeds are stored in a Blender integer property (signed 32-bit).
MAX_SEED = 2**31 - 1
FRAMES_OF_REFERENCE = ("sensor", "world")
VISIBILITIES = ("render", "viewport")
#: ``continuous``: every ray at its own firing time, sensor and scene moving during the
#: scan (issue 8); ``frame``: the scene frozen for each scene frame (the original)
TIME_MODELS = ("continuous", "frame")
#: range-scan outputs: one per full sweep (revolution), one per scene frame, or auto
PACKETS = ("auto", "sweep", "frame")
#: default step (s) at which deforming meshes are re-evaluated: 1 cm at 30 m/s
DEFAULT_TIME_STEP = 0.0003
#: Most rays one scan (a single scan, or one frame of a range scan) may cast. Rays are
#: cast in chunks of :data:`CHUNK_RAYS`, so memory grows with the returns kept; a scan
#: in which every ray returns needs about :data:`BYTES_PER_RETURN` per ray, so the cap
#: keeps the worst case near 6 GB. (An HDL-64E S2 turn at 0.01 deg is 2.3 M rays.)
MAX_RAYS = 20_000_000
#: largest range noise mean, sigma and per-laser bias spread (m): far beyond any sensor,
#: small enough that noisy ranges and points stay finite in float32
NOISE_LIMIT = 1000.0
#: bound of |ref_limit| (reflectivity, 1) and |ref_slope| (1/m) of the reflectivity limit
#: (seed 000 Eq. 1): a limit above 1 already drops every return; the bound keeps the line
#: finite at every range (ref_dist is at most 1e5 m, as max_range)
REF_BOUND = 1000.0
#: Rays generated and cast at once.
CHUNK_RAYS = 1 << 18
#: Peak bytes per kept return while a result is assembled (measured upper bound).
BYTES_PER_RETURN = 300
#: Largest image side of the pixel-grid sensors (ToF, Kinect, depth camera).
MAX_PIXELS_SIDE = 16384


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
    """

    label: str
    description: str
    unit: str = ""
    kind: str = "float"
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple = ()
    count: tuple = (1, 1024)
    show_if: tuple | None = None
    precision: int = 3

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

        def num(v):  # integers in full (2147483647, not 2.14748e+09)
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
        if not math.isfinite(v):
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


def setting(default: Any, label: str, description: str, unit: str = "", *, lo=None, hi=None,
            lo_open=False, hi_open=False, choices: tuple = (), kind: str | None = None,
            count: tuple = (1, 1024), show_if: tuple | None = None, precision: int = 3):
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
                precision)
    return dataclasses.field(default=default, metadata={"blensor": meta})


def noise_mu_setting(per: str = "ray", note: str = ""):
    """The ``noise_mu`` setting (m) of a sensor with Gaussian range noise, per ``per``
    (ray, pixel); ``note`` ends its description. Seed 000 section 3.2 (per-ray noise)."""
    return setting(0.0, "Noise mean", f"Per-{per} range noise mean{note}", "m", lo=-NOISE_LIMIT, hi=NOISE_LIMIT,
                   precision=4)


def noise_sigma_setting(default: float, per: str = "ray", note: str = ""):
    """The ``noise_sigma`` setting (m, default ``default``); see :func:`noise_mu_setting`."""
    return setting(default, "Noise sigma", f"Per-{per} range noise sigma{note}", "m", lo=0.0, hi=NOISE_LIMIT,
                   precision=4)


def ref_dist_setting():
    """The ``ref_dist`` setting (m) of the reflectivity limit (seed 000 Eq. 1; see
    :func:`reflectivity_limit`)."""
    return setting(50.0, "Reflectivity distance", "Below this range every reflectivity returns", "m",
                   lo=0.0, hi=1e5)


def ref_limit_setting():
    """The ``ref_limit`` setting (reflectivity, 1) of the reflectivity limit."""
    return setting(0.1, "Reflectivity limit", "Minimum reflectivity at the reflectivity distance",
                   lo=-REF_BOUND, hi=REF_BOUND)


def ref_slope_setting(default: float, precision: int = 4):
    """The ``ref_slope`` setting (1/m, default ``default``) of the reflectivity limit."""
    return setting(default, "Reflectivity slope", "Growth of the minimum reflectivity per metre", "1/m",
                   precision=precision, lo=-REF_BOUND, hi=REF_BOUND)


def meta_of(cls_or_obj, name: str) -> Meta:
    """:class:`Meta` of setting ``name`` of a settings class or object."""
    for f in dataclasses.fields(cls_or_obj):
        if f.name == name:
            return f.metadata["blensor"]
    raise KeyError(name)


#: settings every sensor has, stored once per camera (common to every sensor type)
COMMON = ("seed", "max_bounces", "visibility", "time_model", "packets", "time_step", "deskew")


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

    def validate(self):
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

    def replace(self, **changes):
        """Copy with some fields changed (not validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Plain JSON-ready dict of every setting."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}


def check_less(lo_name: str, lo: float, hi_name: str, hi: float, unit: str) -> None:
    """Raise SettingsError (``hi_name``) unless lo < hi."""
    if not lo < hi:
        raise SettingsError(hi_name, f"greater than {lo_name} ({lo:g} {unit})", hi)


def check_table(name: str, text: str) -> np.ndarray:
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
    values: dict
    source: str = ""


# ---------------------------------------------------------------------------------------
# rays, hits, budget


@dataclass
class RayPattern:
    """Rays of one scan (or a chunk of one) in the sensor frame.

    Attributes:
        directions (R, 3) float32 unit vectors, sensor frame.
        azimuth (R,) float64 rad in [0, 2 pi); elevation (R,) float64 rad: of the ray
            as reported (the sensor's own angles, e.g. the column azimuth).
        channel (R,) uint16 laser index (0 for single-beam and pixel sensors).
        ray_index (R,) int64 index into the sensor's grid (``row * cols + col``: laser x
            column, or image row x column, row 0 at the top of an image).
        timestamp (R,) float64 s, absolute.
        origins (R, 3) float32 ray origins in the sensor frame (m), or None (all at the
            sensor origin).
    """

    directions: np.ndarray
    azimuth: np.ndarray
    elevation: np.ndarray
    channel: np.ndarray
    ray_index: np.ndarray
    timestamp: np.ndarray
    origins: np.ndarray | None = None

    _FIELDS = ("directions", "azimuth", "elevation", "channel", "ray_index", "timestamp")

    def __len__(self) -> int:
        return int(self.directions.shape[0])

    def take(self, idx: np.ndarray) -> "RayPattern":
        """The rays ``idx`` (int array or bool mask), in order."""
        return RayPattern(*(getattr(self, f)[idx] for f in self._FIELDS),
                          origins=None if self.origins is None else self.origins[idx])

    @classmethod
    def concat(cls, parts: list["RayPattern"]) -> "RayPattern":
        """Rays of ``parts`` one after the other (at least one part)."""
        origins = None
        if any(p.origins is not None for p in parts):
            origins = np.concatenate([np.zeros((len(p), 3), np.float32) if p.origins is None else p.origins
                                      for p in parts])
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls._FIELDS), origins=origins)


class Hits(Protocol):
    """What :meth:`ScanContext.cast` returns for N rays (duck-typed).

    Attributes:
        range (N,) float64 m: accumulated path to the final surface (through mirrors).
        hit (N,) bool: ended on a non-mirror surface within the range limit.
        reflectivity (N,) float32 in [0, 1] of that surface's material (0 if none).
    Methods: ``take(idx)`` -> Hits of those rays; ``concat(list)`` (class method).
    """

    range: np.ndarray
    hit: np.ndarray
    reflectivity: np.ndarray


@dataclass(frozen=True)
class CameraFrame:
    """A Blender camera's image: ``width`` x ``height`` pixels spanning the view frame
    ``x_min..x_max``, ``y_min..y_max`` at depth ``z`` (< 0) in the sensor frame (what
    ``Camera.view_frame(scene=...)`` returns, shift, sensor fit and pixel aspect
    included). Pixel (row, col) has its centre at ``x = x_min + (col + 0.5) / width *
    (x_max - x_min)``, ``y = y_max - (row + 0.5) / height * (y_max - y_min)``, exactly
    where ``bpy_extras.object_utils.world_to_camera_view`` puts it."""

    width: int
    height: int
    x_min: float
    x_max: float
    y_min: float
    y_max: float
    z: float


class ScanContext(Protocol):
    """What a sensor gets from the scene layer to scan one frame.

    Attributes:
        sensor_to_world (4, 4) float64 rigid pose (at the scan's start);
        sensor_to_world_end (4, 4) float64 pose at its end in continuous time, else None;
        frame_of_reference ``"sensor"`` or
        ``"world"``; objects: the object table; camera: :class:`CameraFrame` of the
        Blender camera (used by the depth sensor).
    Methods:
        cast(origins, directions, max_range, max_bounces, times=None) -> Hits: origins
            (N, 3) (or None: all at the sensor origin) and unit directions (N, 3) float64
            in the sensor frame (m); times (N,) float64 absolute firing times (s): in
            continuous time the sensor pose and the scene are taken at each ray's time.
        sensor_points_to(frame, xyz, hits, world=None) -> (N, 3) float64: points given
            in the sensor frame at each ray's firing time, in ``"world"`` or in the sensor
            frame at the packet's start (``"start"``, deskewed); ``world``: the same
            points in ``"world"`` when already made (a context that deskews through the
            world frame starts from them).
        surface(pattern, hits) -> dict of per-ray arrays for the given (kept) rays:
            ``normal`` (N, 3) float64 in the output frame, facing the ray; ``cos_inc``
            (N,); ``color`` (N, 3) uint8; ``object_id``, ``instancer_id``,
            ``instance_id`` (N,) uint32; ``semantic`` (N,) uint16.
    """

    sensor_to_world: np.ndarray
    sensor_to_world_end: np.ndarray | None
    frame_of_reference: str
    objects: list
    camera: CameraFrame | None

    def cast(self, origins: np.ndarray, directions: np.ndarray, max_range: float, max_bounces: int,
             times: np.ndarray | None = None): ...

    def sensor_points_to(self, frame: str, xyz: np.ndarray, hits,
                         world: np.ndarray | None = None) -> np.ndarray: ...

    def surface(self, pattern: RayPattern, hits) -> dict: ...


def available_memory() -> int | None:
    """Bytes of memory available to this process (Linux ``MemAvailable``), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def ray_limit() -> int:
    """Most rays one scan may cast here: :data:`MAX_RAYS`, or fewer if free memory is short."""
    limit = MAX_RAYS
    mem = available_memory()
    if mem is not None:
        limit = min(limit, max(CHUNK_RAYS, mem // BYTES_PER_RETURN))
    return limit


def refuse_rays(rays: int, setting_name: str, value: float, *, grows: bool = False, unit: str = "") -> None:
    """Raise SettingsError (``setting_name``) if ``rays`` exceeds :func:`ray_limit`,
    saying the value of that setting that fits (the ray count is proportional to it,
    or inversely so when ``grows`` is False)."""
    limit = ray_limit()
    if rays <= limit:
        return
    factor = rays / limit
    fit = value / factor if grows else value * factor
    word = "at most" if grows else "at least"
    raise SettingsError(setting_name, f"{word} {fit:.6g}{(' ' + unit) if unit else ''} at these settings "
                        f"({rays:,} rays per scan; the limit is {limit:,})", value)


def frame_rng(seed: int, frame: int) -> np.random.Generator:
    """The generator of every per-ray draw of one frame.

    Seeded by (seed, frame), so a frame's noise does not depend on which other frames
    were scanned before it: frame ranges can be split over processes or hosts (seed 000
    section 5.2) and still give byte-identical files.
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        [int(seed), 0x5CA4, int(frame) & 0xFFFFFFFF, (int(frame) >> 32) & 0xFFFFFFFF])))


def reflectivity_limit(distance: np.ndarray, ref_dist: float, ref_limit: float, ref_slope: float) -> np.ndarray:
    """Minimum reflectivity that returns at accumulated range ``distance`` (m).

    seed 000 Eq. 1 in the original's form (reference section 7): -1 below ``ref_dist``,
    else ``ref_limit + ref_slope * (d - ref_dist)``. (N,) float64.
    """
    d = np.asarray(distance, dtype=np.float64)
    return np.where(d < ref_dist, -1.0, ref_limit + ref_slope * (d - ref_dist))


def returns_mask(hits, s) -> np.ndarray:
    """(N,) bool: which traced rays return: they ended on a non-mirror surface within
    ``max_range`` whose reflectivity exceeds the limit at the accumulated range (seed
    000 Eq. 1, section 3.5). ``s`` needs ``max_range``, ``ref_dist``, ``ref_limit``,
    ``ref_slope``."""
    ok = hits.hit & (hits.range <= s.max_range)
    ok &= hits.reflectivity > reflectivity_limit(hits.range, s.ref_dist, s.ref_limit, s.ref_slope)
    return ok


def interpolated_noise(table: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mu, sigma) of a distance-dependent noise table at ranges ``d`` (m), as the
    original's advanced error model (reference section 6.3): linear interpolation
    between rows, constant beyond the last row and before the first (the original
    extrapolated below the first row, which can give a negative sigma; fixed).
    table (K, 3) float64 rows (distance, mu, sigma), K >= 1. Returns two (N,) float64."""
    mu = np.interp(d, table[:, 0], table[:, 1])
    sigma = np.interp(d, table[:, 0], table[:, 2])
    return mu, sigma


def pinhole_grid(width: int, height: int, x_min: float, x_max: float, y_min: float, y_max: float,
                 z: float, rows: slice | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Rays through pixel centres of a ``height`` x ``width`` image spanning the view
    frame at depth ``z`` (< 0), row 0 at the top, row-major.

    Returns:
        directions (P, 3) float64 unit vectors (sensor frame), ray_index (P,) int64
        ``row * width + col``, for the rows ``rows`` (default all).
    """
    r = np.arange(height, dtype=np.int64)[rows if rows is not None else slice(None)]
    c = np.arange(width, dtype=np.int64)
    x = x_min + (c + 0.5) / width * (x_max - x_min)
    y = y_max - (r + 0.5) / height * (y_max - y_min)
    d = np.empty((r.shape[0], width, 3))
    d[..., 0] = x[None, :]
    d[..., 1] = y[:, None]
    d[..., 2] = z
    d = d.reshape(-1, 3)
    d /= np.linalg.norm(d, axis=1)[:, None]
    return d, (r[:, None] * width + c[None, :]).ravel()


def pinhole_intrinsics(width: int, height: int, x_min: float, x_max: float, y_min: float, y_max: float,
                       z: float) -> tuple:
    """(fx, fy, cx, cy) in pixels of the pinhole grid of :func:`pinhole_grid` (ROS
    CameraInfo convention: pixel centres at integer coordinates, row 0 at the top)."""
    fx = width * abs(z) / (x_max - x_min)
    fy = height * abs(z) / (y_max - y_min)
    return (float(fx), float(fy), float(width * -x_min / (x_max - x_min) - 0.5),
            float(height * y_max / (y_max - y_min) - 0.5))


def angles_of(directions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Azimuth psi in [0, 2 pi) (0 = -Z, growing toward -X) and elevation (rad) of unit
    directions (N, 3) in the sensor frame. Returns two (N,) float64."""
    d = np.asarray(directions, dtype=np.float64)
    az = np.mod(np.arctan2(-d[:, 0], -d[:, 2]), 2.0 * np.pi)
    el = np.arcsin(np.clip(d[:, 1], -1.0, 1.0))
    return az, el


# ---------------------------------------------------------------------------------------
# the sensor


class Sensor:
    """A sensor type. Subclasses set the class attributes and implement :meth:`patterns`
    (and :meth:`measure` if the returns are not simply "hit within max_range"), or
    override :meth:`scan` for several passes (the Kinect casts twice).

    Class attributes:
        name: type name (``"rotating"``); label; description (one line).
        Settings: the settings dataclass; presets: preset id -> :class:`Preset`.
        storage: where Blender keeps the type's settings on ``Camera.blensor``: a
            nested group of that name, or ``""`` for the group itself (the rotating
            LiDAR, as v0.1 stored it).
        uses_camera: the sensor takes its image from the Blender camera's intrinsics.
        organized: an image sensor: organized outputs hold every pixel.
    """

    name = ""
    label = ""
    description = ""
    Settings: type = SensorSettings
    presets: dict = {}
    storage: str | None = None
    uses_camera = False
    organized = False

    # -- settings ---------------------------------------------------------------------
    def settings(self, values: dict | None = None):
        """Validated settings from ``values`` (name -> value; missing names take their
        defaults).

        Raises:
            SettingsError: unknown name or value out of range.
        """
        values = dict(values or {})
        names = {f.name for f in dataclasses.fields(self.Settings)}
        for k in values:
            if k not in names:
                raise SettingsError(k, f"a setting of sensor type '{self.name}': " + ", ".join(sorted(names)),
                                    values[k])
        return self.Settings(**values).validate()

    def preset_values(self, preset: str) -> dict:
        """The values preset ``preset`` sets (``preset`` included).

        Raises:
            SettingsError (``preset``): not a preset of this sensor type.
        """
        if preset not in self.presets:
            raise SettingsError("preset", f"one of {', '.join(self.presets)} (presets of sensor type "
                                f"'{self.name}')", preset)
        return {"preset": preset, **self.presets[preset].values}

    # -- scanning ---------------------------------------------------------------------
    def grid_shape(self, s, frame: int, frame_time: float, mode: str, camera: CameraFrame | None) -> tuple:
        """(rows, cols) of the sensor's grid for this scan."""
        raise NotImplementedError

    def check_budget(self, s, frame: int, frame_time: float, mode: str, camera: CameraFrame | None) -> int:
        """Refuse a scan that would cast too many rays, before anything is allocated;
        returns the ray count. Default: rows x cols of :meth:`grid_shape`."""
        rows, cols = self.grid_shape(s, frame, frame_time, mode, camera)
        return int(rows) * int(cols)

    def patterns(self, s, frame: int, frame_time: float, mode: str,
                 camera: CameraFrame | None) -> Iterator[RayPattern]:
        """The scan's rays in chunks of about :data:`CHUNK_RAYS` (at least one, maybe
        empty). ``mode``: ``"single"`` (a single scan at ``frame``) or ``"range"`` (what
        the sensor sees during frame ``frame`` of a range scan)."""
        raise NotImplementedError

    def intrinsics(self, s, camera: CameraFrame | None) -> tuple:
        """(fx, fy, cx, cy) of an image sensor (:func:`pinhole_intrinsics`); () otherwise."""
        return ()

    def sweep_period(self, s) -> float | None:
        """Seconds per full sweep (revolution or field-of-view sweep) of a swept sensor,
        the length of one ``packets="sweep"`` output; None for image sensors (one image
        per scene frame)."""
        return None

    def exposure_time(self, s) -> float:
        """Seconds over which one image's rays fire (a rolling readout, continuous time);
        0 = a global shutter (every ray at the frame's time). Image sensors only."""
        return 0.0

    def channel_elevations(self, s) -> np.ndarray:
        """(L,) float64 nominal elevation (deg) of each channel, for the elevation rank
        (``ring``); default one channel at 0."""
        return np.zeros(1)

    def max_range(self, s) -> float:
        """Longest accumulated path cast (m)."""
        return float(s.max_range)

    def returns(self, s, pattern: RayPattern, hits) -> np.ndarray:
        """(N,) bool: which rays return (default: a hit within ``max_range``)."""
        return hits.hit & (hits.range <= self.max_range(s))

    def measure(self, s, pattern: RayPattern, r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Measured (noisy) range of the returning rays: (N,) float64 m from the clean
        ranges ``r`` (N,) float64. Default: no noise (``r`` itself)."""
        return r

    def finish(self, s, result: ScanResult) -> ScanResult:
        """Last changes to the result (default none; the ToF camera folds ranges)."""
        return result

    def scan(self, s, ctx: ScanContext, *, frame: int, frame_time: float, mode: str) -> ScanResult:
        """One scan: cast :meth:`patterns` chunk by chunk, keep :meth:`returns`, draw
        :meth:`measure` from the frame's generator, assemble the result."""
        grid = self.grid_shape(s, frame, frame_time, mode, ctx.camera)
        parts, rays = [], 0
        for pattern in self.patterns(s, frame, frame_time, mode, ctx.camera):
            o = None if pattern.origins is None else pattern.origins.astype(np.float64)
            hits = ctx.cast(o, pattern.directions.astype(np.float64), self.max_range(s), s.max_bounces,
                            times=pattern.timestamp)
            keep = self.returns(s, pattern, hits)
            rays += len(pattern)
            parts.append((pattern.take(keep), hits.take(keep)))
        if len(parts) == 1:
            pattern, hits = parts[0]
        else:
            pattern = RayPattern.concat([p for p, _ in parts])
            hits = type(parts[0][1]).concat([h for _, h in parts])
        r = np.asarray(hits.range, dtype=np.float64)
        r_noisy = self.measure(s, pattern, r, frame_rng(s.seed, frame))
        result = assemble(pattern, hits, r, r_noisy, ctx, s, frame=frame, frame_time=frame_time, num_rays=rays,
                          grid_shape=grid, channel_elevations=self.channel_elevations(s))
        result.sensor_type = self.name
        result.organized = self.organized
        result.intrinsics = self.intrinsics(s, ctx.camera)
        return self.finish(s, result)


def elevation_rank(elevations_deg: np.ndarray) -> np.ndarray:
    """(L,) uint16 rank of each channel's elevation, 0 = lowest (ties by channel)."""
    e = np.asarray(elevations_deg, dtype=np.float64)
    rank = np.empty(e.shape[0], np.uint16)
    rank[np.argsort(e, kind="stable")] = np.arange(e.shape[0], dtype=np.uint16)
    return rank


def assemble(pattern: RayPattern, hits, r: np.ndarray, r_noisy: np.ndarray, ctx: ScanContext, s, *,
             frame: int, frame_time: float, num_rays: int, grid_shape: tuple,
             channel_elevations: np.ndarray | None = None) -> ScanResult:
    """Build a :class:`ScanResult` from the returning rays.

    Args:
        pattern, hits: the returning rays only (N), sensor frame.
        r, r_noisy (N,) float64: clean and measured range (m), measured along the ray
            from its origin.
        ctx: the :class:`ScanContext` (pose, output frame, surface attributes).
        channel_elevations (L,) deg: nominal elevation per channel, for ``ring``.
    Points: ``origin + unit(direction) * range`` in the sensor frame, then in the
    output frame.
    """
    u = pattern.directions.astype(np.float64)
    o = pattern.origins

    def points(rng):  # origin + unit direction * range
        return u * rng[:, None] if o is None else u * rng[:, None] + o

    noiseless = r_noisy is r
    xyz = points(r)
    xyz_n = xyz if noiseless else points(r_noisy)  # noiseless: the same points

    def to(frame, world=(None, None)):  # both sensor-frame clouds in ``frame``; noiseless: once
        out = ctx.sensor_points_to(frame, xyz, hits, world[0])
        return out, (out if noiseless else ctx.sensor_points_to(frame, xyz_n, hits, world[1]))

    pose = np.asarray(ctx.sensor_to_world, dtype=np.float64)
    extra = {}
    world = to("world") if ctx.frame_of_reference == "world" else (None, None)
    if s.deskew:  # from the world points when made already (not rotated twice)
        d, d_n = to("start", world)
        extra["xyz_deskewed"] = d.astype(np.float32)
        extra["xyz_noisy_deskewed"] = d_n.astype(np.float32)
    if ctx.frame_of_reference == "world":
        if ctx.sensor_to_world_end is not None:  # the sensor moved during the packet: its frames at
            # the rays' times are kept, for formats that want sensor-frame points (KITTI, ROS)
            extra["xyz_sensor"] = xyz.astype(np.float32)
            extra["xyz_noisy_sensor"] = xyz_n.astype(np.float32)
        xyz, xyz_n = world
    surf = ctx.surface(pattern, hits)
    return ScanResult(
        timestamp=pattern.timestamp,
        azimuth=pattern.azimuth,
        elevation=pattern.elevation,
        range=r,
        range_noisy=r_noisy,
        xyz=xyz,
        xyz_noisy=xyz_n,
        object_id=surf["object_id"],
        semantic=surf["semantic"],
        instancer_id=surf["instancer_id"],
        instance_id=surf["instance_id"],
        channel=pattern.channel,
        ring=(elevation_rank(channel_elevations)[pattern.channel.astype(np.int64)]
              if channel_elevations is not None else np.zeros(len(pattern), np.uint16)),
        ray_index=pattern.ray_index,
        reflectivity=hits.reflectivity,
        intensity=hits.reflectivity * surf["cos_inc"],
        color=surf["color"],
        normal=surf["normal"],
        frame=int(frame),
        frame_time=float(frame_time),
        frame_of_reference=ctx.frame_of_reference,
        sensor_to_world=pose,
        sensor=s.to_dict(),
        objects=list(ctx.objects or []),
        num_rays=int(num_rays),
        grid_shape=tuple(int(v) for v in grid_shape),
        extra=extra,
        sensor_to_world_end=ctx.sensor_to_world_end,
    )


def sweep_columns(count: int, rate: float, frame: int, frame_time: float, mode: str
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Columns of a sensor that sweeps its field of view once per period ``1 / rate``
    (line and planar scanners, reference sections 6.2 and 6.3: "one FOV sweep takes
    1/rps"), ``count`` columns a sweep.

    ``mode="single"``: one sweep starting at ``frame * frame_time``. ``mode="range"``:
    every column whose firing time falls in frame ``frame`` (global column g fires at
    ``g / (count * rate)``; consecutive frames tile time exactly), so a frame holds
    several sweeps at high rates, or part of one.

    Returns:
        column (C,) int64 index within its sweep, timestamp (C,) float64 s.
    """
    if mode == "range":
        per_s = count * rate

        def first(f: int) -> int:
            return int(math.ceil(f * frame_time * per_s - 1e-9))

        g = np.arange(first(frame), first(frame + 1), dtype=np.int64)
        return g % count, g / per_s
    c = np.arange(count, dtype=np.int64)
    return c, frame * frame_time + c / (count * rate)


def sweep_count(count: int, rate: float, frame: int, frame_time: float, mode: str) -> int:
    """Number of columns :func:`sweep_columns` returns, without building them."""
    if mode != "range":
        return count
    per_s = count * rate
    return int(math.ceil((frame + 1) * frame_time * per_s - 1e-9)) - int(math.ceil(frame * frame_time * per_s - 1e-9))


class SweptSensor(Sensor):
    """A sensor that sweeps ``s.columns`` columns over its field of view once per
    ``1 / s.rotation_speed`` s, firing :meth:`lasers` rays per column (line and planar
    scanners, reference 6.2 and 6.3), with the reflectivity limit of seed 000 Eq. 1.
    Subclasses give :meth:`lasers` and :meth:`directions`."""

    def lasers(self, s) -> int:
        """Rays per column."""
        raise NotImplementedError

    def directions(self, s, angle_deg: np.ndarray) -> np.ndarray:
        """(C, L, 3) float64 unit ray directions (sensor frame) of the columns at
        sweep angles ``angle_deg`` (C,) = ``start_angle + column * angle_resolution``."""
        raise NotImplementedError

    def grid_shape(self, s, frame, frame_time, mode, camera):
        return (self.lasers(s), sweep_count(s.columns, s.rotation_speed, frame, frame_time, mode))

    def sweep_period(self, s):
        return 1.0 / s.rotation_speed

    def check_budget(self, s, frame, frame_time, mode, camera):
        rows, cols = self.grid_shape(s, frame, frame_time, mode, camera)
        # one sweep too many: only the resolution helps; more than a sweep in the frame
        # (a range scan's frame of a fast head): the rotation speed
        refuse_rays(rows * min(cols, s.columns), "angle_resolution", s.angle_resolution, unit="deg")
        if mode == "range" and cols > s.columns:
            refuse_rays(rows * cols, "rotation_speed", s.rotation_speed, grows=True, unit="Hz")
        return rows * cols

    def patterns(self, s, frame, frame_time, mode, camera):
        col, stamp = sweep_columns(s.columns, s.rotation_speed, frame, frame_time, mode)
        L = self.lasers(s)
        C = col.shape[0]
        step = max(1, CHUNK_RAYS // L)
        for i in range(0, max(1, C), step):
            c = col[i:i + step]
            d = self.directions(s, s.start_angle + c * s.angle_resolution).reshape(-1, 3)
            az, el = angles_of(d)
            local = np.arange(i, i + c.shape[0], dtype=np.int64)
            yield RayPattern(
                directions=d.astype(np.float32), azimuth=az, elevation=el,
                channel=np.tile(np.arange(L, dtype=np.uint16), c.shape[0]),
                ray_index=(np.arange(L, dtype=np.int64)[None, :] * C + local[:, None]).ravel(),
                timestamp=np.repeat(stamp[i:i + step], L))

    def returns(self, s, pattern, hits):
        return returns_mask(hits, s)
