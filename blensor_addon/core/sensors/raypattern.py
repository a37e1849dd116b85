"""Ray patterns: the rays a sensor casts, and the geometry helpers that make them.

:class:`RayPattern` holds rays in the sensor frame; :class:`CameraFrame` is a Blender
camera's image. The helpers here build patterns: the pinhole grid of an image sensor
(:func:`pinhole_grid`, :func:`pinhole_intrinsics`), the columns of a swept sensor
(:func:`sweep_column_count`, the one place the column count of a sweep is computed;
:func:`sweep_columns`, :func:`sweep_count`) and the reported angles of a direction
(:func:`angles_of`).

Sensor frame (kept from the original, reference section 2): camera-local, +X right,
+Y up, looking down -Z. Azimuth psi = 0 looks down -Z and grows toward -X
(counter-clockwise seen from +Y); elevation is the angle above the XZ plane.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ndtypes import F32, F64, I64, U16, Bool, Floating, Integer

#: spin (or sweep) direction of a turning head or mirror seen from above (+Y in BlenSor's
#: sensor frame, +Z in REP-103): ``cw`` (Velodyne, Ouster, Hesai, the Ibeo LUX) or ``ccw``
#: (BlenSor before settings version 2); the rotating LiDAR's and the line scanner's
#: ``rotation_direction`` choices
ROTATION_DIRECTIONS = ("cw", "ccw")


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

    directions: F32
    azimuth: Floating
    elevation: Floating
    channel: U16
    ray_index: Integer
    timestamp: Floating
    origins: F32 | None = None

    _FIELDS = ("directions", "azimuth", "elevation", "channel", "ray_index", "timestamp")

    def __len__(self) -> int:
        return int(self.directions.shape[0])

    def take(self, idx: Integer | Bool) -> RayPattern:
        """The rays ``idx`` (int array or bool mask), in order: the rows the mask or the
        indices select, copied by ``ndarray.take`` (a mask as its indices: the same rows,
        several times faster than a mask on the (R, 3) arrays)."""
        rows: I64 = np.flatnonzero(idx) if np.asarray(idx).dtype == bool else np.asarray(idx, dtype=np.int64)
        return RayPattern(**{f: getattr(self, f).take(rows, axis=0) for f in self._FIELDS},
                          origins=None if self.origins is None else self.origins.take(rows, axis=0))

    @classmethod
    def concat(cls, parts: list[RayPattern]) -> RayPattern:
        """Rays of ``parts`` one after the other (at least one part)."""
        origins: F32 | None = None
        if any(p.origins is not None for p in parts):
            origins = np.concatenate([np.zeros((len(p), 3), np.float32) if p.origins is None else p.origins
                                      for p in parts])
        return cls(**{f: np.concatenate([getattr(p, f) for p in parts]) for f in cls._FIELDS},
                   origins=origins)


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


def pinhole_grid(width: int, height: int, x_min: float, x_max: float, y_min: float, y_max: float,
                 z: float, rows: slice | None = None) -> tuple[F64, I64]:
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
                       z: float) -> tuple[float, float, float, float]:
    """(fx, fy, cx, cy) in pixels of the pinhole grid of :func:`pinhole_grid` (ROS
    CameraInfo convention: pixel centres at integer coordinates, row 0 at the top)."""
    fx = width * abs(z) / (x_max - x_min)
    fy = height * abs(z) / (y_max - y_min)
    return (float(fx), float(fy), float(width * -x_min / (x_max - x_min) - 0.5),
            float(height * y_max / (y_max - y_min) - 0.5))


def angles_of(directions: Floating) -> tuple[F64, F64]:
    """Azimuth psi in [0, 2 pi) (0 = -Z, growing toward -X) and elevation (rad) of unit
    directions (N, 3) in the sensor frame. Returns two (N,) float64."""
    d = np.asarray(directions, dtype=np.float64)
    az = np.mod(np.arctan2(-d[:, 0], -d[:, 2]), 2.0 * np.pi)
    el = np.arcsin(np.clip(d[:, 1], -1.0, 1.0))
    return az, el


def sweep_column_count(start_angle: float, end_angle: float, angle_resolution: float) -> int:
    """Columns of one sweep of a field of view ``start_angle..end_angle`` (deg) at
    ``angle_resolution`` (deg): ``int((end - start) / res)``, the original's count (a
    full HDL-64E turn at 0.1728 deg has 2083 columns), 0 for an empty field of view.
    The one place this count is computed (rotating, line and planar sensors, and their
    :class:`~blensor_addon.core.capabilities.Capabilities` grid)."""
    return max(0, int((end_angle - start_angle) / angle_resolution + 1e-9))


def sweep_columns(count: int, rate: float, frame: int, frame_time: float, mode: str
                  ) -> tuple[I64, F64]:
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
