"""Rotating LiDAR: scan pattern, timing, noise, reflectivity limit, result assembly.

Sensor frame (kept from the original so old scenes scan the same; reference section 2):
camera-local, +X right, +Y up, looking down -Z; the head spins about local +Y.
Column azimuth psi (deg) = 0 looks down -Z and grows toward -X; a laser at elevation p
fires along ``(cos p sin th, sin p, cos p cos th)`` with ``th = psi + 180 deg``
(reference section 6.1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .materials import MaterialTable
from .result import ScanResult
from .settings import LidarSettings


@dataclass
class RayPattern:
    """Rays of one scan in the sensor frame, column-major (all lasers of column 0 first).

    Attributes:
        directions (R, 3) float32 unit vectors, sensor frame.
        azimuth (R,) float64 rad in [0, 2 pi); elevation (R,) float64 rad.
        channel (R,) uint16 laser index; column (R,) int64 global column index.
        timestamp (R,) float64 s, absolute.
    """

    directions: np.ndarray
    azimuth: np.ndarray
    elevation: np.ndarray
    channel: np.ndarray
    column: np.ndarray
    timestamp: np.ndarray

    def __len__(self) -> int:
        return int(self.directions.shape[0])


def single_scan_columns(s: LidarSettings) -> np.ndarray:
    """Azimuths (deg) of the columns of a single scan: ``start + k * res`` for
    ``k < int((end - start) / res)`` (the original's count: a full HDL-64E turn at
    0.1728 deg has 2083 columns). Returns (C,) float64."""
    n = int((s.end_angle - s.start_angle) / s.angle_resolution + 1e-9)
    return s.start_angle + np.arange(n, dtype=np.float64) * s.angle_resolution


def range_scan_columns(s: LidarSettings, frame: int, frame_time: float) -> np.ndarray:
    """Global column indices swept during scene frame ``frame`` of a range scan.

    The head turns ``360 * rotation_speed * frame_time`` degrees per frame (seed 000
    section 3.2; reference section 9); frame f covers the columns k with
    ``k * res`` in ``[f * D, (f + 1) * D)``. Unlike the original (which truncated each
    frame's count with ``int()`` and lost columns), consecutive frames tile the
    rotation exactly. Columns whose azimuth (mod 360) falls outside
    ``[start_angle, end_angle)`` are dropped (the original ignored the sector here).
    Returns (C,) int64.
    """
    sweep = 360.0 * s.rotation_speed * frame_time
    res = s.angle_resolution

    def first_column(f: int) -> int:
        return int(math.ceil(f * sweep / res - 1e-9))

    k = np.arange(first_column(frame), first_column(frame + 1), dtype=np.int64)
    psi = np.mod(k * res, 360.0)
    lo = np.mod(s.start_angle, 360.0)
    width = s.end_angle - s.start_angle
    if width < 360.0:
        keep = np.mod(psi - lo, 360.0) < width
        k = k[keep]
    return k


def make_pattern(s: LidarSettings, azimuth_deg: np.ndarray, timestamp: np.ndarray) -> RayPattern:
    """Ray directions for the given columns.

    Args:
        azimuth_deg (C,) float64 column azimuths psi in degrees.
        timestamp (C,) float64 absolute firing time of each column (s); every laser of a
            column shares it (the original has no per-laser firing offsets).
    Returns:
        RayPattern with C * L rays, ray ``c * L + k`` = column c, laser k.
    """
    elev = np.deg2rad(s.elevations_deg)
    L = elev.shape[0]
    C = azimuth_deg.shape[0]
    th = np.deg2rad(azimuth_deg + 180.0)[:, None]
    cp, sp = np.cos(elev)[None, :], np.sin(elev)[None, :]
    d = np.empty((C, L, 3), dtype=np.float64)
    d[..., 0] = cp * np.sin(th)
    d[..., 1] = np.broadcast_to(sp, (C, L))
    d[..., 2] = cp * np.cos(th)
    return RayPattern(
        directions=d.reshape(-1, 3).astype(np.float32),
        azimuth=np.repeat(np.mod(np.deg2rad(azimuth_deg), 2.0 * np.pi), L),
        elevation=np.tile(elev, C),
        channel=np.tile(np.arange(L, dtype=np.uint16), C),
        column=np.repeat(np.arange(C, dtype=np.int64), L),
        timestamp=np.repeat(np.asarray(timestamp, dtype=np.float64), L),
    )


def single_scan_pattern(s: LidarSettings, frame: int, frame_time: float) -> RayPattern:
    """Pattern of a single scan at scene frame ``frame``: the sector start..end.

    Timestamps: ``frame * frame_time + (psi - start) / (360 * rotation_speed)`` (s).
    """
    psi = single_scan_columns(s)
    t = frame * frame_time + (psi - s.start_angle) / (360.0 * s.rotation_speed)
    return make_pattern(s, psi, t)


def range_frame_pattern(s: LidarSettings, frame: int, frame_time: float) -> RayPattern:
    """Pattern of frame ``frame`` of a range scan (see :func:`range_scan_columns`).

    Timestamps are absolute: ``k * res / (360 * rotation_speed)`` = frame time
    ``frame * frame_time`` + the in-sweep offset.
    """
    k = range_scan_columns(s, frame, frame_time)
    psi = k * s.angle_resolution
    t = psi / (360.0 * s.rotation_speed)
    return make_pattern(s, np.mod(psi, 360.0), t)


def frame_rng(seed: int, frame: int) -> np.random.Generator:
    """The generator of every per-ray draw of one frame.

    Seeded by (seed, frame), so a frame's noise does not depend on which other frames
    were scanned before it: frame ranges can be split over processes or hosts (seed 000
    section 5.2) and still give byte-identical files.
    """
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(
        [int(seed), 0x5CA4, int(frame) & 0xFFFFFFFF, (int(frame) >> 32) & 0xFFFFFFFF])))


def reflectivity_limit(distance: np.ndarray, s: LidarSettings) -> np.ndarray:
    """Minimum reflectivity that returns at accumulated range ``distance`` (m).

    seed 000 Eq. 1 in the original's form (reference section 7): -1 below ``ref_dist``,
    else ``ref_limit + ref_slope * (d - ref_dist)``. (N,) float64.
    """
    d = np.asarray(distance, dtype=np.float64)
    return np.where(d < s.ref_dist, -1.0, s.ref_limit + s.ref_slope * (d - s.ref_dist))


def noisy_range(rng: np.random.Generator, rng_clean: np.ndarray, channel: np.ndarray,
                s: LidarSettings) -> np.ndarray:
    """seed 000 Eq. 2: ``d + eps_bias[channel] + N(noise_mu, noise_sigma)``, float64 m."""
    bias = s.laser_bias()
    per_ray = rng.normal(s.noise_mu, s.noise_sigma, rng_clean.shape[0]) if s.noise_sigma > 0 \
        else np.full(rng_clean.shape[0], s.noise_mu)
    return rng_clean.astype(np.float64) + bias[channel.astype(np.int64)] + per_ray


def assemble(pattern: RayPattern, trace, materials: MaterialTable, instance_object_id: np.ndarray,
             s: LidarSettings, *, frame: int, frame_time: float, sensor_to_world: np.ndarray,
             frame_of_reference: str = "sensor", objects: list | None = None) -> ScanResult:
    """Turn traced rays into a :class:`ScanResult`.

    Args:
        pattern: the rays, sensor frame.
        trace: :class:`blensor_addon.raycast.trace.TraceResult` of the same rays
            (duck-typed: ``range``, ``hit``, ``instance``, ``primitive``, ``normal``,
            ``last_dir``; world frame).
        materials: material table of the scanned scene.
        instance_object_id (I,) uint32 object id of each instance.
        sensor_to_world (4, 4) float64 rigid pose.
        frame_of_reference: ``"sensor"`` or ``"world"``.
    A ray returns iff it ended on a non-mirror surface within ``max_range`` whose
    reflectivity exceeds the limit at the accumulated range (seed 000 Eq. 1, 3.5).
    """
    mat = materials.lookup(trace.instance, trace.primitive)
    refl = materials.reflectivity[mat]
    ok = trace.hit & (trace.range <= s.max_range)
    ok &= refl > reflectivity_limit(trace.range, s)
    idx = np.flatnonzero(ok)
    rng = frame_rng(s.seed, frame)
    r = trace.range[idx].astype(np.float64)
    ch = pattern.channel[idx]
    r_noisy = noisy_range(rng, r, ch, s)
    u = pattern.directions[idx].astype(np.float64)
    xyz = u * r[:, None]
    xyz_n = u * r_noisy[:, None]
    n_world = trace.normal[idx].astype(np.float64)
    d_last = trace.last_dir[idx].astype(np.float64)
    facing = np.einsum("ij,ij->i", n_world, d_last)
    n_world[facing > 0] *= -1.0  # report normals facing the incoming ray (mesh winding varies)
    cos_inc = np.abs(facing)
    R = sensor_to_world[:3, :3]
    if frame_of_reference == "world":
        t = sensor_to_world[:3, 3]
        xyz = xyz @ R.T + t
        xyz_n = xyz_n @ R.T + t
        normal = n_world
    else:
        normal = n_world @ R  # world -> sensor: R^T n
    rows = mat[idx]
    return ScanResult(
        timestamp=pattern.timestamp[idx],
        azimuth=pattern.azimuth[idx],
        elevation=pattern.elevation[idx],
        range=r,
        range_noisy=r_noisy,
        xyz=xyz,
        xyz_noisy=xyz_n,
        object_id=instance_object_id[trace.instance[idx]] if idx.size else np.zeros(0, np.uint32),
        channel=ch,
        reflectivity=refl[idx],
        intensity=refl[idx] * cos_inc,
        color=materials.color[rows],
        normal=normal,
        frame=int(frame),
        frame_time=float(frame_time),
        frame_of_reference=frame_of_reference,
        sensor_to_world=np.asarray(sensor_to_world, dtype=np.float64),
        sensor=s.to_dict(),
        objects=list(objects or []),
        num_rays=len(pattern),
    )
