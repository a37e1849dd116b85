"""What a sensor gets from the scene layer: :class:`ScanContext` (the scan context of
one frame or packet: pose, casting, surface attributes) and :class:`Hits` (what a cast
returns). Protocols only, below both :mod:`.sensor` (the interface that uses them) and
:mod:`.physics` (result assembly, which reads a context), so neither imports the other
for them; :mod:`blensor_addon.scene.context` implements them.
"""
from __future__ import annotations

from typing import Any, Protocol, Self

import numpy as np

from ..ndtypes import F32, F64, I64, U8, U16, U32, Array, Bool, Floating
from .raypattern import CameraFrame, RayPattern


class Hits(Protocol):
    """What :meth:`ScanContext.cast` returns for N rays (duck-typed): N rows, or with
    ``split=True`` N + E rows (rows N.. are the extra path ends of rays that glass or a
    material's alpha split, after the N rays' first path ends, in ray order).

    Attributes:
        range (N,) float64 m: accumulated path to the final surface (through mirrors).
        hit (N,) bool: ended on a non-mirror surface within the range limit.
        reflectivity (N,) float32 >= 0 of that surface's material at the hit (its
            texture and the sensor's wavelength included; above 1 for retro-reflectors; 0
            if none).
        cos_incidence (N,) float64 in [0, 1]: cosine of the angle between the final ray
            segment and the surface normal (seed 002 Eq. 4's cos theta).
        ray (N,) int64: the ray of each row (``arange(N)`` for the first N rows).
        weight (N,) float32 in [0, 1]: the path's one-way transmission (product of the
            Fresnel shares along it; 1 without glass; a material's alpha lets a path pass
            by a seeded draw and leaves it unchanged); a cast with ``lobes`` multiplies it by
            the square root of the material's lobe gain (then above 1 for a retroreflector).
        last_dir (N, 3) float32 world: the final ray segment's direction (with ``normal``
            it gives ``cos_incidence`` row by row), or None where the hits do not keep it.
        returned, energy (N,) float64: an echo's returned reflectivity and R0 cos(theta)
            over its footprint (:class:`~.returns.Returns`) on the echo hits of
            :func:`~.sensor.echo_hits` (:class:`EchoHits`), else None.
    Methods: ``take(idx)`` -> Hits of those rays; ``concat(list)`` (class method).
    """

    range: F64
    hit: Bool
    reflectivity: F32
    cos_incidence: F64
    ray: I64
    weight: F32
    object_id: U32
    instancer_id: U32
    instance_id: U32
    semantic: U16
    normal: Floating
    color: U8
    last_dir: F32 | None = None
    returned: F64 | None = None
    energy: F64 | None = None

    def take(self, idx: Array) -> Self: ...

    @classmethod
    def concat(cls, parts: list[Self]) -> Self: ...


class EchoHits(Hits, Protocol):
    """The echo hits of :func:`~.sensor.echo_hits`: :class:`Hits` with each echo's
    ``returned`` and ``energy`` (K,) float64 (see :class:`~.returns.Returns`)."""

    returned: F64
    energy: F64


class ScanContext(Protocol):
    """What a sensor gets from the scene layer to scan one frame.

    Attributes:
        sensor_to_world (4, 4) float64 rigid pose (at the scan's start);
        sensor_to_world_end (4, 4) float64 pose at its end in continuous time, else None;
        frame_of_reference ``"sensor"`` or
        ``"world"``; objects: the object table; camera: :class:`CameraFrame` of the
        Blender camera (used by the depth sensor).
    Methods:
        cast(origins, directions, max_range, max_bounces, times=None, split=False,
            rng=None, wavelength=None, bundle=1, acceptance=None) -> Hits: origins (N, 3) (or None: all at
            the sensor origin) and unit directions (N, 3) float64 in the sensor frame (m); times (N,)
            float64 absolute firing times (s): in continuous time the sensor pose and the
            scene are taken at each ray's time; split: glass splits paths and alpha lets
            them pass (extra rows, see :class:`Hits`), else every surface is opaque as
            in the single-return model; rng: the generator of the alpha draws (split only);
            wavelength: nm, for the materials' library reflectance (None: the
            materials' own reflectivity); bundle: the rays come in consecutive groups
            of this many sub-rays of one beam (same origin region, time and nearly the
            same direction), which the caster may traverse together; acceptance: rad,
            the half-angle of incidence within which a glass surface reflects back into
            the sensor (None: the caster's default); lobes: each hit's ``weight`` carries
            its material's lobe at the hit's incidence, ``x sqrt(q / reflectivity)`` with
            ``q`` the equivalent reflectance (glossy coats, retroreflectors:
            :meth:`~..materials.MaterialTable.lobed`), so an echo's energy is ``q cos``
            while ``reflectivity`` stays the material's; the rotating LiDAR asks for it
            under the radiometric return model only.
        sensor_points_to(frame, xyz, hits, world=None) -> (N, 3) float64: points given
            in the sensor frame at each ray's firing time, in ``"world"`` or in the sensor
            frame at the packet's start (``"start"``, deskewed); ``world``: the same
            points in ``"world"`` when already made (a context that deskews through the
            world frame starts from them).
        surface(pattern, hits) -> dict of per-ray arrays for the given (kept) rays:
            ``normal`` (N, 3) float64 in the output frame, facing the ray; ``cos_inc``
            (N,); ``color`` (N, 3) uint8; ``object_id``, ``instancer_id``,
            ``instance_id`` (N,) uint32; ``semantic`` (N,) uint16.
    Optional (read with ``getattr``; a context without them scans at the datasheet's
    ambient condition, without shadows):
        lights: the scene's :class:`~.ambient.Lights`.
        sun_visible(hits, origins, directions, sun_dirs, need) -> (N, K) bool: whether
            each of the K suns of unit directions ``sun_dirs`` (K, 3) float64 world (toward
            the sun) is seen from the surface point of each of the N rows of ``hits`` (from
            :meth:`cast`), for the pairs of ``need`` (N, K) bool (True elsewhere, untested):
            a shadow ray from the point toward the sun, in the scene at the row's own time,
            meets nothing. ``origins`` (N, 3) or None (the sensor origin) and
            ``directions`` (N, 3) float64 sensor frame: the rows' cast rays (the point is
            the ray at the row's range); a row whose path was reflected or passed glass (a
            mirror, solid glass, a thin pane) is not tested (True). The rotating LiDAR's
            radiometric receiver asks for it (core/sensors/ambient.py, 1.).
    """

    sensor_to_world: F64
    sensor_to_world_end: F64 | None
    frame_of_reference: str
    objects: list[dict[str, Any]]
    camera: CameraFrame | None

    def cast(self, origins: F64 | None, directions: F64, max_range: float, max_bounces: int,
             times: F64 | None = None, split: bool = False, rng: np.random.Generator | None = None,
             wavelength: float | None = None, bundle: int = 1, acceptance: float | None = None,
             lobes: bool = False) -> Hits: ...

    def sensor_points_to(self, frame: str, xyz: F64, hits: Hits, world: F64 | None = None) -> F64: ...

    def surface(self, pattern: RayPattern, hits: Hits) -> dict[str, Array]: ...


__all__ = ["Hits", "EchoHits", "ScanContext"]
