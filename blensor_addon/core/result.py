"""The result of one scan (:class:`ScanResult`): one row per return, numpy arrays of
equal length N, with the registry of its per-point fields (:data:`FIELDS`, the fields
every result has, and :data:`EXTRA_FIELDS`, the fields some sensors or settings add).

Writers that write "every field" (npz, PLY, the point meshes) take the fields from these
two registries; a sensor that adds a field registers it with :func:`register_field`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike

from .capabilities import Capabilities
from .ndtypes import F64, Array

#: field name -> (dtype, trailing shape); the order is the order of the npz file.
FIELDS: dict[str, tuple[str, tuple[int, ...]]] = {
    "timestamp": ("<f8", ()),
    "azimuth": ("<f4", ()),
    "elevation": ("<f4", ()),
    "range": ("<f4", ()),
    "range_noisy": ("<f4", ()),
    "xyz": ("<f4", (3,)),
    "xyz_noisy": ("<f4", (3,)),
    "object_id": ("<u4", ()),
    "semantic": ("<u2", ()),
    "instancer_id": ("<u4", ()),
    "instance_id": ("<u4", ()),
    "channel": ("<u2", ()),
    "ring": ("<u2", ()),
    "ray_index": ("<u4", ()),
    "reflectivity": ("<f4", ()),
    "intensity": ("<f4", ()),
    "color": ("u1", (3,)),
    "normal": ("<f4", (3,)),
}

#: per-point fields a result may carry in ``extra`` (name -> (dtype, trailing shape,
#: default value or None)); written after the :data:`FIELDS` by the writers that write
#: every field, and only when the result holds them. ``return_number`` and ``number_of_returns``
#: (uint8, 1-based, LAS's convention): the return's rank along its ray and the returns
#: the ray gave; a sensor with one return per ray does not store them (every point is
#: return 1 of 1, their default).
EXTRA_FIELDS: dict[str, tuple[str, tuple[int, ...], object]] = {
    "return_number": ("u1", (), 1),
    "number_of_returns": ("u1", (), 1),
    "xyz_deskewed": ("<f4", (3,), None),
    "xyz_noisy_deskewed": ("<f4", (3,), None),
    "xyz_sensor": ("<f4", (3,), None),
    "xyz_noisy_sensor": ("<f4", (3,), None),
    #: received power (relative: 1.0 for a 100 % Lambertian target at normal incidence at 1 m),
    #: return_model="radiometric" only (core/sensors/radiometry.py)
    "signal": ("<f4", (), None),
    #: 1 where the return is a saturated retroreflector's halo (blooming: its measured range is
    #: the retroreflector's, its clean range its own surface's), return_model="radiometric"
    #: only (core/sensors/bloom.py)
    "bloom": ("u1", (), 0),
    #: ambient photons (the scene's sun and sky reflected by the hit surface; 0 in the dark),
    #: return_model="radiometric" in a scene's scan only (core/sensors/ambient.py)
    "near_ir": ("<f4", (), None),
}

#: world coordinates of this magnitude (m) or more are kept in float64 besides the
#: float32 fields: from 1024 m on, float32's rounding (half its spacing: 61 um at 1024 m,
#: 0.5 m at 10^7 m) exceeds half the 0.1 mm step of the LAS files
FLOAT64_FROM_M = 1024.0


def register_field(name: str, dtype: str, shape: tuple[int, ...] = (), default: object = None) -> None:
    """Register a per-point field a sensor adds (its values go into ``ScanResult.extra``).

    Args:
        name: field name (a Python identifier, not one of :data:`FIELDS`).
        dtype: numpy dtype string, e.g. ``"<f4"``; shape: trailing shape, e.g. ``(3,)``.
        default: the value every point has when a result does not hold the field, or
            None (no default).
    Raises:
        ValueError: a bad name, or a name registered already with another dtype or shape.
    """
    if not str(name).isidentifier() or name in FIELDS:
        raise ValueError(f"field name must be an identifier that is not a ScanResult field, got {name!r}")
    spec = (np.dtype(dtype).str, tuple(shape), default)
    old = EXTRA_FIELDS.get(name)
    if old is not None and (np.dtype(old[0]), old[1]) != (np.dtype(dtype), tuple(shape)):
        raise ValueError(f"field {name!r} is registered already as {old[0]} {old[1]}")
    EXTRA_FIELDS[name] = old or spec


def float32_error(v: ArrayLike) -> float:
    """Largest rounding error (m) of float32 over the magnitudes of ``v`` (array of m):
    half float32's spacing at the largest magnitude, 0 for an empty array."""
    a = np.asarray(v)
    if not a.size:
        return 0.0
    m = float(np.max(np.abs(a)))
    return float(np.spacing(np.float32(m))) / 2.0 if np.isfinite(m) else float("inf")


@dataclass
class ScanResult:
    """Returns of one scan (seed 000 section 3.6: the 12 ground-truth fields, extended).

    Per-return arrays, N rows each:
        timestamp (N,) float64 s: absolute time of the column's firing
            (frame time + in-sweep offset).
        azimuth (N,) float32 rad in [0, 2 pi): column azimuth psi (0 = sensor -Z,
            counter-clockwise seen from +Y, as the original).
        elevation (N,) float32 rad: laser elevation.
        range (N,) float32 m: accumulated path length (through mirrors), clean.
        range_noisy (N,) float32 m: range + laser bias + N(mu, sigma) (seed 000 Eq. 2).
        xyz, xyz_noisy (N, 3) float32 m: unit(original ray) * range, in ``frame_of_reference``.
        object_id (N,) uint32: id of the object whose surface returned (1..; see
            ``objects``; the ids derive from the file, see
            :class:`blensor_addon.scene.objects.ObjectTable`).
        semantic (N,) uint16: semantic class id of the returning object (its
            ``blensor_label``, else its instancer's; SemanticKITTI's ids,
            :mod:`blensor_addon.core.classes`), 0 = unlabeled.
        instancer_id (N,) uint32: id of the object that instanced it (collection
            instance, Geometry Nodes, particles), 0 if it is drawn directly.
        instance_id (N,) uint32: index of that instance within its instancer + 1, 0 if
            drawn directly. (object_id, instancer_id, instance_id) is unique per instance.
        channel (N,) uint16: laser index (row of the elevation table; 0 for pixel sensors).
        ring (N,) uint16: the laser's elevation rank, 0 = lowest (what ROS drivers call
            ``ring``; the channel is the calibration index).
        ray_index (N,) uint32: the ray's cell in the sensor's grid, ``row * cols + col``
            with ``(rows, cols) = grid_shape`` (laser x column, or image row x column
            with row 0 at the top); None for a sensor with no grid (``grid_shape`` None
            or empty).
        reflectivity (N,) float32: material reflectivity, >= 0 (1 = a 100 % Lambertian
            target; above 1: a retro-reflector's equivalent, at most 10).
        intensity (N,) float32: reflectivity * |cos(incidence)| (seed 002 Eq. 4).
        color (N, 3) uint8: material base colour, sRGB-encoded 0..255.
        normal (N, 3) float32: unit geometric normal of the returning surface, turned
            to face the incoming ray, in ``frame_of_reference``.
    Metadata:
        frame: scene frame number; frame_time: seconds per frame.
        frame_of_reference: ``"sensor"`` (camera-local: +X right, +Y up, looking down -Z)
            or ``"world"``.
        sensor_to_world: (4, 4) float64 rigid pose of the sensor at the scan (scale removed).
        sensor: settings dict; objects: the object table, list of {"id", "name",
            "label", "type"} (label: the object property ``blensor_label``), with
            ``"moving": True`` on the objects that move during the packet (a scanned
            result; :meth:`blensor_addon.scene.timeline.Timeline.moving_ids`).
        num_rays: rays cast (returns + misses).
        grid_shape: (rows, cols) of the packet's grid (see ``ray_index``); None or ()
            for a pattern with no grid (:attr:`has_grid`).
        sensor_type: the sensor type's name (``"rotating"``, ``"tof"``, ...).
        organized: the sensor is an image sensor (ToF, depth camera): organized
            outputs (PCD) hold every pixel of ``grid_shape``.
        axes: ``"blensor"`` (sensor frame +X right, +Y up, -Z ahead) or ``"ros"``
            (REP-103: x ahead, y left, z up) for sensor-frame points, normals and the
            pose's rotation (:mod:`blensor_addon.core.axes`).
        intrinsics: (fx, fy, cx, cy) in pixels of an image sensor's pinhole (ROS
            CameraInfo convention: pixel centres at integer coordinates, row 0 at the
            top, optical frame x right, y down, z ahead); () for other sensors.
        extra: further per-return arrays by name, N rows each, every one registered in
            :data:`EXTRA_FIELDS` (cast to its dtype): ``return_number`` and
            ``number_of_returns`` (N,) uint8 for sensors with several returns per ray; ``xyz_deskewed``
            and ``xyz_noisy_deskewed`` (N, 3) float32 m: the points in the sensor frame
            at the packet's start (setting ``deskew``); ``xyz_sensor`` and
            ``xyz_noisy_sensor`` (N, 3) float32 m: a world-frame scan's points in the
            sensor frame at each ray's time, when the sensor moved during the packet
            (what KITTI and ROS outputs hold, as for a sensor-frame scan); empty by
            default.
        sensor_to_world_end: (4, 4) float64 pose of the sensor at the end of the packet
            (continuous time), or None.
        capabilities: the sensor's :class:`~blensor_addon.core.capabilities.Capabilities`
            (timing, grid, fields; what writers read instead of the settings), or None.
        xyz64: for a world-frame result whose coordinates reach :data:`FLOAT64_FROM_M`,
            ``{"xyz": (N, 3) float64, "xyz_noisy": (N, 3) float64}`` m, the coordinates
            before their float32 rounding (kept when ``xyz`` is given in float64); empty
            otherwise. :meth:`points` returns them; LAS writes them at 0.1 mm.
    In continuous time a packet's ``sensor_to_world`` is the pose at its start
    (``frame * frame_time``) and every sensor-frame point is in the sensor frame at its
    own firing time (``timestamp``), as a real driver reports it.
    """

    timestamp: Array
    azimuth: Array
    elevation: Array
    range: Array
    range_noisy: Array
    xyz: Array
    xyz_noisy: Array
    object_id: Array
    semantic: Array
    instancer_id: Array
    instance_id: Array
    channel: Array
    ring: Array
    ray_index: Array | None
    reflectivity: Array
    intensity: Array
    color: Array
    normal: Array
    frame: int = 0
    frame_time: float = 1.0 / 24.0
    frame_of_reference: str = "sensor"
    sensor_to_world: F64 = field(default_factory=lambda: np.eye(4))
    sensor: dict[str, Any] = field(default_factory=dict)
    objects: list[dict[str, Any]] = field(default_factory=list)
    num_rays: int = 0
    grid_shape: tuple[int, ...] = ()
    sensor_type: str = "rotating"
    organized: bool = False
    axes: str = "blensor"
    intrinsics: tuple[float, ...] = ()
    extra: dict[str, Array] = field(default_factory=dict)
    sensor_to_world_end: F64 | None = None
    capabilities: Capabilities | None = None
    xyz64: dict[str, F64] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.timestamp)
        if self.grid_shape is None:
            self.grid_shape = ()
        self.grid_shape = tuple(int(v) for v in self.grid_shape)
        if self.frame_of_reference == "world" and not self.xyz64:
            keep = {k: np.asarray(getattr(self, k)) for k in ("xyz", "xyz_noisy")}
            if all(a.dtype == np.float64 for a in keep.values()) and any(
                    a.size and float(np.max(np.abs(a))) >= FLOAT64_FROM_M for a in keep.values()):
                self.xyz64 = {k: np.ascontiguousarray(a) for k, a in keep.items()}
        for name, (dtype, shape) in FIELDS.items():
            if name == "ray_index" and self.ray_index is None:
                if self.has_grid:
                    raise ValueError(f"ScanResult.ray_index is None, but the result has a grid "
                                     f"{self.grid_shape}")
                continue
            arr = np.ascontiguousarray(getattr(self, name), dtype=dtype)
            if arr.shape != (n, *shape):
                raise ValueError(f"ScanResult.{name} has shape {arr.shape}, expected {(n, *shape)}")
            setattr(self, name, arr)
        extra: dict[str, Array] = {}
        for name, arr in self.extra.items():
            if name not in EXTRA_FIELDS:
                raise ValueError(f"ScanResult.extra[{name!r}] is not a registered field (register_field)")
            dtype, shape, _ = EXTRA_FIELDS[name]
            arr = np.ascontiguousarray(arr, dtype=dtype)
            if arr.shape != (n, *shape):
                raise ValueError(f"ScanResult.extra[{name!r}] has shape {arr.shape}, expected {(n, *shape)}")
            extra[name] = arr
        self.extra = extra
        for name, arr in self.xyz64.items():
            if name not in ("xyz", "xyz_noisy") or np.shape(arr) != (n, 3):
                raise ValueError(f"ScanResult.xyz64[{name!r}] must be an (N, 3) array of xyz or xyz_noisy")

    def __len__(self) -> int:
        return int(self.timestamp.shape[0])

    @property
    def has_grid(self) -> bool:
        """The points sit in a (rows, cols) grid (``ray_index`` places them)."""
        return len(self.grid_shape) == 2

    @property
    def is_organized(self) -> bool:
        """An image sensor's result whose organized outputs hold every pixel of its grid
        (the capabilities' ``organized``, else the ``organized`` flag)."""
        org = self.capabilities.organized if self.capabilities is not None else self.organized
        return bool(org) and self.has_grid

    def require_grid(self, what: str) -> tuple[int, int]:
        """``grid_shape`` as (rows, cols).

        Raises:
            ValueError: the result has no grid, in one line naming ``what`` needed it.
        """
        if not self.has_grid:
            raise ValueError(f"{what} needs a sensor with a ray grid; sensor type {self.sensor_type!r} "
                             "has none (a pattern with no grid)")
        return cast("tuple[int, int]", self.grid_shape)

    @property
    def return_number(self) -> Array:
        """(N,) uint8 rank of each return along its ray, 1-based (1 without several
        returns per ray)."""
        return self.values("return_number")

    @property
    def number_of_returns(self) -> Array:
        """(N,) uint8 returns of each point's ray (1 without several returns per ray)."""
        return self.values("number_of_returns")

    def values(self, name: str) -> Array:
        """Per-point field ``name``: one of :data:`FIELDS`, or of :data:`EXTRA_FIELDS`
        (the result's values, else the field's default for every point).

        Raises:
            KeyError: not a field of the result and no default.
        """
        if name in FIELDS:
            arr: Array | None = getattr(self, name)
            if arr is None:
                raise KeyError(f"{name} (a result with no grid has no ray_index)")
            return arr
        if name in self.extra:
            return self.extra[name]
        dtype, shape, default = EXTRA_FIELDS.get(name, (None, (), None))
        if default is None:
            raise KeyError(name)
        return np.full((len(self), *shape), default, dtype=dtype)

    def points(self, noisy: bool = False) -> F64:
        """(N, 3) float64 m ``xyz`` (``xyz_noisy`` if ``noisy``) at full precision: the
        float64 world coordinates when kept (``xyz64``), else the float32 field."""
        name = "xyz_noisy" if noisy else "xyz"
        precise = self.xyz64.get(name)
        single: Array = getattr(self, name)
        return precise if precise is not None else single.astype(np.float64)

    def float32_rounding(self) -> float:
        """Largest rounding (m) of the float32 ``xyz`` fields against the float64
        coordinates (0 unless ``xyz64`` holds them)."""
        return max((float32_error(a) for a in self.xyz64.values()), default=0.0)

    @classmethod
    def empty(cls, **meta: Any) -> ScanResult:
        """A result with no returns."""
        arrays: dict[str, Array | None] = {k: np.zeros((0, *s), dtype=d) for k, (d, s) in FIELDS.items()}
        if meta.get("grid_shape", ()) in (None, ()) and "ray_index" not in meta:
            arrays["ray_index"] = None
        return cls(**cast("dict[str, Any]", arrays), **meta)

    def image(self, name: str = "range", fill: float = np.nan) -> Array:
        """Field ``name`` scattered into the sensor's grid by ``ray_index``:
        (rows, cols) or (rows, cols, k) array of the field's dtype (float fields; other
        dtypes get ``fill`` cast to them), ``fill`` where no ray returned.

        Raises:
            ValueError: the result has no grid (one line).
        """
        rows, cols = self.require_grid("an image of the result")
        src = self.values(name)
        out = np.full((rows * cols, *src.shape[1:]), fill, dtype=src.dtype)
        out[self.values("ray_index").astype(np.int64)] = src
        return out.reshape(rows, cols, *src.shape[1:])

    def arrays(self) -> dict[str, Array]:
        """The per-return arrays by name, in :data:`FIELDS` order (``ray_index`` left
        out when the result has no grid)."""
        return {k: getattr(self, k) for k in FIELDS if getattr(self, k) is not None}

    def all_fields(self) -> dict[str, Array]:
        """Every per-point array the result holds: :meth:`arrays`, then ``extra`` in
        :data:`EXTRA_FIELDS` order (then any others in their own order)."""
        out = self.arrays()
        out.update({k: self.extra[k] for k in EXTRA_FIELDS if k in self.extra})
        return out
