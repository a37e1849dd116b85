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

from .errors import SettingsError
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

    def take(self, idx: np.ndarray) -> "RayPattern":
        """The rays ``idx`` (int array or bool mask), in order."""
        return RayPattern(self.directions[idx], self.azimuth[idx], self.elevation[idx], self.channel[idx],
                          self.column[idx], self.timestamp[idx])

    @classmethod
    def concat(cls, parts: list["RayPattern"]) -> "RayPattern":
        """Rays of ``parts`` one after the other (at least one part)."""
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                     ("directions", "azimuth", "elevation", "channel", "column", "timestamp")))


#: Most rays one scan (a single scan, or one frame of a range scan) may cast. Rays are
#: cast in chunks of :data:`CHUNK_RAYS`, so memory grows with the returns kept; a scan
#: in which every ray returns needs about :data:`BYTES_PER_RETURN` per ray, so the cap
#: keeps the worst case near 6 GB. (An HDL-64E S2 turn at 0.01 deg is 2.3 M rays.)
MAX_RAYS = 20_000_000
#: Rays generated and cast at once.
CHUNK_RAYS = 1 << 18
#: Peak bytes per kept return while a result is assembled (measured upper bound).
BYTES_PER_RETURN = 300


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


def check_ray_budget(s: LidarSettings, columns: int, mode: str) -> int:
    """Refuse a scan whose ray count exceeds :data:`MAX_RAYS` or the free memory, before
    anything is allocated. ``columns`` is the scan's column count; returns the ray count.

    Raises:
        SettingsError naming the setting that made the scan too large:
        ``rotation_speed`` when a range-scan frame sweeps more than one turn, else
        ``angle_resolution``, with the smallest value that fits.
    """
    rays = int(columns) * s.num_lasers
    limit = MAX_RAYS
    mem = available_memory()
    if mem is not None:
        limit = min(limit, max(CHUNK_RAYS, mem // BYTES_PER_RETURN))
    if rays <= limit:
        return rays
    factor = rays / limit
    turns = columns * s.angle_resolution / 360.0
    if mode == "range" and turns > 1.0:
        raise SettingsError("rotation_speed", f"at most {s.rotation_speed / factor:.6g} Hz at these settings "
                            f"({rays:,} rays per frame; the limit is {limit:,})", s.rotation_speed)
    raise SettingsError("angle_resolution", f"at least {s.angle_resolution * factor:.6g} deg at these settings "
                        f"({rays:,} rays per scan; the limit is {limit:,})", s.angle_resolution)


def single_scan_count(s: LidarSettings) -> int:
    """Number of columns of a single scan, ``int((end - start) / res)`` (the original's
    count: a full HDL-64E turn at 0.1728 deg has 2083 columns)."""
    return int((s.end_angle - s.start_angle) / s.angle_resolution + 1e-9)


def single_scan_columns(s: LidarSettings) -> np.ndarray:
    """Azimuths (deg) of the columns of a single scan: ``start + k * res`` for
    ``k < single_scan_count(s)``. Returns (C,) float64.

    Raises:
        SettingsError: too many rays (:func:`check_ray_budget`).
    """
    n = single_scan_count(s)
    check_ray_budget(s, n, "single")
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

    Raises:
        SettingsError: too many rays (:func:`check_ray_budget`).
    """
    sweep = 360.0 * s.rotation_speed * frame_time
    res = s.angle_resolution

    def first_column(f: int) -> int:
        return int(math.ceil(f * sweep / res - 1e-9))

    a, b = first_column(frame), first_column(frame + 1)
    check_ray_budget(s, b - a, "range")
    k = np.arange(a, b, dtype=np.int64)
    psi = np.mod(k * res, 360.0)
    lo = np.mod(s.start_angle, 360.0)
    width = s.end_angle - s.start_angle
    if width < 360.0:
        keep = np.mod(psi - lo, 360.0) < width
        k = k[keep]
    return k


def range_scan_max_columns(s: LidarSettings, frame_time: float) -> int:
    """Most columns one frame of a range scan can have (the sweep per frame over the
    resolution, rounded up, + 1)."""
    return int(math.ceil(360.0 * s.rotation_speed * frame_time / s.angle_resolution)) + 1


def make_pattern(s: LidarSettings, azimuth_deg: np.ndarray, timestamp: np.ndarray,
                 column0: int = 0) -> RayPattern:
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
        column=np.repeat(np.arange(column0, column0 + C, dtype=np.int64), L),
        timestamp=np.repeat(np.asarray(timestamp, dtype=np.float64), L),
    )


def scan_columns(s: LidarSettings, frame: int, frame_time: float, mode: str = "single"
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Column azimuths (C,) float64 deg in [0, 360) or the sector, and their absolute
    firing times (C,) float64 s, of a single scan (``mode="single"``: the sector
    start..end at frame ``frame``, times ``frame * frame_time + (psi - start) /
    (360 * rotation_speed)``) or of frame ``frame`` of a range scan (``mode="range"``,
    see :func:`range_scan_columns`; times ``k * res / (360 * rotation_speed)``).

    Raises:
        SettingsError: too many rays (:func:`check_ray_budget`).
    """
    if mode == "range":
        psi = range_scan_columns(s, frame, frame_time) * s.angle_resolution
        return np.mod(psi, 360.0), psi / (360.0 * s.rotation_speed)
    psi = single_scan_columns(s)
    return psi, frame * frame_time + (psi - s.start_angle) / (360.0 * s.rotation_speed)


def chunk_columns(s: LidarSettings, chunk_rays: int | None = None) -> int:
    """Columns per chunk of :func:`iter_patterns`: about ``chunk_rays`` (default
    :data:`CHUNK_RAYS`) rays, at least one column."""
    return max(1, (chunk_rays or CHUNK_RAYS) // s.num_lasers)


def iter_patterns(s: LidarSettings, azimuth_deg: np.ndarray, timestamp: np.ndarray,
                  chunk_rays: int | None = None):
    """:func:`make_pattern` over consecutive column chunks of about ``chunk_rays`` rays,
    so the rays of a scan never exist all at once. Yields RayPattern (one empty
    pattern if there are no columns)."""
    step = chunk_columns(s, chunk_rays)
    for i in range(0, max(1, azimuth_deg.shape[0]), step):
        yield make_pattern(s, azimuth_deg[i:i + step], timestamp[i:i + step], i)


def single_scan_pattern(s: LidarSettings, frame: int, frame_time: float) -> RayPattern:
    """Every ray of a single scan at scene frame ``frame`` (:func:`scan_columns`)."""
    return make_pattern(s, *scan_columns(s, frame, frame_time, "single"))


def range_frame_pattern(s: LidarSettings, frame: int, frame_time: float) -> RayPattern:
    """Every ray of frame ``frame`` of a range scan (:func:`scan_columns`)."""
    return make_pattern(s, *scan_columns(s, frame, frame_time, "range"))


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


def returns_mask(trace, materials: MaterialTable, s: LidarSettings, mat: np.ndarray | None = None
                 ) -> np.ndarray:
    """(N,) bool: which traced rays return: they ended on a non-mirror surface within
    ``max_range`` whose reflectivity exceeds the limit at the accumulated range (seed
    000 Eq. 1, section 3.5). ``mat`` (N,) int32: the rays' material rows, if known."""
    if mat is None:
        mat = materials.lookup(trace.instance, trace.primitive)
    refl = materials.reflectivity[mat]
    ok = trace.hit & (trace.range <= s.max_range)
    ok &= refl > reflectivity_limit(trace.range, s)
    return ok


def assemble(pattern: RayPattern, trace, materials: MaterialTable, instance_ids, s: LidarSettings, *,
             frame: int, frame_time: float, sensor_to_world: np.ndarray,
             frame_of_reference: str = "sensor", objects: list | None = None,
             num_rays: int | None = None, keep: np.ndarray | None = None,
             mat: np.ndarray | None = None) -> ScanResult:
    """Turn traced rays into a :class:`ScanResult`.

    Args:
        pattern: the rays, sensor frame.
        trace: :class:`blensor_addon.raycast.trace.TraceResult` of the same rays
            (duck-typed: ``range``, ``hit``, ``instance``, ``primitive``, ``normal``,
            ``last_dir``; world frame).
        materials: material table of the scanned scene.
        instance_ids: three (I,) uint32 arrays, per instance: object id, instancer id,
            instance index (see :class:`ScanResult`).
        sensor_to_world (4, 4) float64 rigid pose.
        frame_of_reference: ``"sensor"`` or ``"world"``.
        num_rays: rays cast, if ``pattern`` holds only some of them (default its length).
        keep (N,) bool, mat (N,) int32: :func:`returns_mask` and the material rows of
            the rays, if the caller has them already.
    A ray returns iff :func:`returns_mask` says so; the noise of the returns is drawn in
    ray order from the frame's generator.
    """
    if mat is None:
        mat = materials.lookup(trace.instance, trace.primitive)
    refl = materials.reflectivity[mat]
    idx = np.flatnonzero(returns_mask(trace, materials, s, mat) if keep is None else keep)
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
    hit_inst = trace.instance[idx]
    ids = [np.asarray(a, np.uint32)[hit_inst] if idx.size else np.zeros(0, np.uint32) for a in instance_ids]
    return ScanResult(
        timestamp=pattern.timestamp[idx],
        azimuth=pattern.azimuth[idx],
        elevation=pattern.elevation[idx],
        range=r,
        range_noisy=r_noisy,
        xyz=xyz,
        xyz_noisy=xyz_n,
        object_id=ids[0],
        instancer_id=ids[1],
        instance_id=ids[2],
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
        num_rays=len(pattern) if num_rays is None else int(num_rays),
    )
