"""Rotating multi-laser LiDAR (Velodyne HDL-64E S2, HDL-32E, VLP-16, Ouster OS0-128, generic).

Seed 000 section 3.2 and reference section 6.1: L lasers at fixed elevations spin about
the sensor's up axis (+Y); every column fires all lasers at once. Column azimuth psi
(deg) = 0 looks down -Z and grows toward -X; laser k at elevation p fires along
``(cos p sin th, sin p, cos p cos th)`` with ``th = psi - a_k + 180 deg``, where a_k is the
laser's azimuth offset (0 for the Velodyne tables). The Ouster OS0-128 also fires from a
beam origin ``n = 27.67 mm`` out from the axis along the column azimuth (Ouster's
``lidar_origin_to_beam_origin_mm``; its range-to-XYZ formula puts the point at
``n (cos th_enc, sin th_enc, 0) + (r - n) * dir(th_enc - a_k, p_k)``); here the range
is the path from that beam origin.

Sources of the tables:
- Velodyne HDL-64E S2: the 64 calibrated elevations and 64 per-laser distance biases of
  the original BlenSor (reference section 6.1, from a Velodyne calibration file; seed 000
  section 5). The bias table is the original's "fixed randomized array for
  reproducibility" (seed 000 Eq. 2, eps_bias,i).
- Velodyne HDL-32E: the original's 32-entry elevation table (reference 6.1); 10 Hz,
  0.16 deg at 10 Hz, 100 m from the HDL-32E datasheet.
- Velodyne VLP-16: 16 lasers from -15 to +15 deg in 2 deg steps in the datasheet's firing
  order (laser 0 = -15, 1 = +1, 2 = -13, ...); 0.2 deg at 10 Hz, 100 m.
- Ouster OS0-128: seed 002 section on validation and the OS0 datasheet it cites (ref.
  [28]): 128 channels over a 90 deg vertical FOV, 1024 (or 512, 2048) columns at 10 (or
  20) Hz, maximum range 50 m at 80 % reflectance, modelled as seed 002's linear
  reflectance limit R_L(d) = 0.8 d / 50 m (``ref_dist=0, ref_limit=0, ref_slope=0.016``)
  with returns beyond 50 m dropped. Beams are spaced uniformly from +45 to -45 deg; the
  beam azimuth offsets and the 27.67 mm beam origin are the ``beam_intrinsics`` of OS0-128
  (Rev 7) sensor metadata in Ouster's JSON layout (as distributed with
  jcfurey/gz_sensors_ouster, ``config/metadata/os0_128_rev7.json``). Choose 2048 columns
  with ``angle_resolution=0.17578125`` and 20 Hz with ``rotation_speed=20``.
"""
from __future__ import annotations

import collections
import math
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import SettingsError
from ..settings import SensorSettings, setting
from .budget import CHUNK_RAYS, ray_limit
from .patterns import RayPattern, sweep_column_count
from .physics import (NOISE_LIMIT, noise_mu_setting, noise_sigma_setting, ref_dist_setting, ref_limit_setting,
                      ref_slope_setting, returns_mask)
from .rotating_presets import FIRING, PRESETS, TABLES
from .sensor import Sensor

BIAS_DISTRIBUTIONS = ("table", "gaussian", "laplace")
#: spin direction seen from above (+Z in REP-103, +Y in BlenSor's sensor frame)
ROTATION_DIRECTIONS = ("cw", "ccw")
#: ``limit``: seed 000 Eq. 1; ``linear``: seed 002 Eq. 4-5
RETURN_MODELS = ("limit", "linear")
MAX_LASERS = 1024


@dataclass(frozen=True)
class LidarSettings(SensorSettings):
    """Settings of one rotating LiDAR (seed 000 section 3.2; reference section 6.1).

    Attributes (units):
        preset: one of :data:`PRESETS`; sets the laser tables (and, when chosen in the
            panel or with ``preset=``, the values of the preset).
        elevations: laser elevations (deg) for ``generic``; ignored by the other presets.
        angle_resolution: azimuth step between columns (deg), in (0, 360].
        rotation_speed: spin rate (Hz), in (0, 1000].
        max_range: farthest accumulated path that returns (m), in (0, 100000].
        start_angle, end_angle: azimuth sector (deg); start < end, end - start <= 360.
        noise_mu, noise_sigma: per-ray Gaussian range noise (m), sigma >= 0.
        bias_distribution: per-laser distance bias: ``"table"`` (the preset's calibrated
            table; presets without one draw Gaussian biases), ``"gaussian"`` or
            ``"laplace"`` (scale ``bias_sigma``), drawn from ``seed``.
        bias_sigma: spread of the per-laser bias (m), >= 0 (original 0.078).
        ref_dist, ref_limit, ref_slope: reflectivity limit (seed 000 Eq. 1): a hit at
            accumulated range d returns iff reflectivity > r_min(d), r_min = -1 for
            d < ref_dist, else ref_limit + ref_slope (d - ref_dist). Units m, 1, 1/m.
        seed, max_bounces, visibility: see :class:`SensorSettings`.
    """

    preset: str = setting("hdl64e_s2", "Sensor", "Sensor model; choosing one sets its values",
                          choices=tuple(PRESETS))
    elevations: tuple = setting((0.0,), "Elevations", "Generic sensor: comma-separated laser elevations",
                                "deg", lo=-90.0, hi=90.0, count=(1, MAX_LASERS), show_if=("preset", "generic"))
    angle_resolution: float = setting(0.1728, "Angle resolution", "Azimuth step between columns", "deg",
                                      lo=0.0, hi=360.0, lo_open=True, precision=4)
    rotation_speed: float = setting(10.0, "Rotation speed", "Spin rate", "Hz",
                                    lo=0.0, hi=1000.0, lo_open=True)
    max_range: float = setting(120.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)
    start_angle: float = setting(0.0, "Start angle", "Sector start (azimuth)", "deg", lo=-360.0, hi=360.0)
    end_angle: float = setting(360.0, "End angle", "Sector end (azimuth), at most one turn after the start",
                               "deg", lo=-360.0, hi=720.0)
    noise_mu: float = noise_mu_setting()
    noise_sigma: float = noise_sigma_setting(0.01)
    bias_distribution: str = setting("table", "Laser bias", "Per-laser distance bias: the preset's calibrated "
                                     "table, Gaussian or Laplace (drawn from the seed)",
                                     choices=BIAS_DISTRIBUTIONS)
    bias_sigma: float = setting(0.078, "Bias sigma", "Per-laser bias spread", "m",
                                lo=0.0, hi=NOISE_LIMIT, precision=4)
    ref_dist: float = ref_dist_setting()
    ref_limit: float = ref_limit_setting()
    ref_slope: float = ref_slope_setting(0.01)
    # -- issue 21 (device truth); the behaviour is implemented in this module --------------
    rotation_direction: str = setting("cw", "Rotation", "Spin direction seen from above: cw (Velodyne, "
                                      "Ouster, Hesai) or ccw (BlenSor before settings version 2)",
                                      choices=ROTATION_DIRECTIONS)
    min_range: float = setting(0.0, "Min range", "Nearest return the unit reports (datasheet)", "m",
                               lo=0.0, hi=1e5)
    return_model: str = setting("limit", "Return model", "Which returns are detected: limit (seed 000 Eq. 1, "
                                "reflectivity limit by range) or linear (seed 002 Eq. 4-5: R0 cos(theta) >= "
                                "ref_max * d / max_range at the measured range)", choices=RETURN_MODELS)
    ref_max: float = setting(0.8, "Reflectance at max range", "Linear return model: the target reflectance "
                             "detected at max_range (seed 002 Eq. 5 R_L,max)", lo=0.0, hi=1.0, lo_open=True)
    calibration: str = setting("", "Calibration", "A unit's imported calibration (LaserTable JSON; blensor "
                               "calib import); empty: the preset's table", kind="text",
                               show_if=("calibration", "\0never"))

    def check(self) -> None:
        if not (self.start_angle < self.end_angle <= self.start_angle + 360.0):
            raise SettingsError("end_angle", f"in ({self.start_angle:g}, {self.start_angle + 360.0:g}] deg"
                                " (greater than start_angle, at most one turn)", self.end_angle)

    @property
    def elevations_deg(self) -> np.ndarray:
        """(L,) float64 laser elevations in degrees; channel k is row k."""
        e = TABLES[self.preset]["elevations"]
        return np.asarray(self.elevations if e is None else e, dtype=np.float64)

    @property
    def azimuth_offsets_deg(self) -> np.ndarray:
        """(L,) float64 per-laser azimuth offsets a_k (deg), zeros where the preset has none."""
        a = TABLES[self.preset].get("azimuth")
        return np.zeros(self.num_lasers) if a is None else np.asarray(a, dtype=np.float64)

    @property
    def beam_origin(self) -> float:
        """Distance of the beam origin from the spin axis (m), 0 for the Velodyne presets."""
        return float(TABLES[self.preset].get("beam_origin", 0.0))

    @property
    def num_lasers(self) -> int:
        """Number of lasers (channels) L."""
        return int(self.elevations_deg.shape[0])

    def laser_bias(self) -> np.ndarray:
        """Per-laser distance bias eps_bias,i of seed 000 Eq. 2: (L,) float64 metres.

        ``table`` uses the preset's calibrated table where it has one (HDL-64E S2);
        otherwise biases are drawn from ``N(0, bias_sigma)`` or ``Laplace(0, bias_sigma)``
        with a generator seeded by ``seed`` alone, so they stay the same in every frame
        ("This bias remains the same in each rotation", seed 000 section 3.2). The
        original drew a shared, unseeded table and gave the HDL-32E the first 32 HDL-64E
        entries (reference section 14.13); both are fixed here.
        """
        table = TABLES[self.preset].get("bias")
        if self.bias_distribution == "table" and table is not None:
            return np.asarray(table, dtype=np.float64)
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(self.seed), 0xB1A5])))
        if self.bias_distribution == "laplace":
            return rng.laplace(0.0, self.bias_sigma, self.num_lasers) if self.bias_sigma > 0 \
                else np.zeros(self.num_lasers)
        return rng.normal(0.0, self.bias_sigma, self.num_lasers) if self.bias_sigma > 0 \
            else np.zeros(self.num_lasers)

    def to_dict(self) -> dict:
        """Plain JSON-ready dict of every setting, with the resolved elevation table."""
        d = super().to_dict()
        d["elevations"] = [float(v) for v in self.elevations_deg]
        return d


def check_ray_budget(s: LidarSettings, columns: int, mode: str) -> int:
    """Refuse a scan whose ray count exceeds the limit (:func:`~.budget.ray_limit`)
    before anything is allocated. ``columns`` is the scan's column count; returns the
    ray count.

    Raises:
        SettingsError naming the setting that made the scan too large:
        ``rotation_speed`` when a range-scan frame sweeps more than one turn, else
        ``angle_resolution``, with the value that fits.
    """
    rays = int(columns) * s.num_lasers
    limit = ray_limit()
    if rays <= limit:
        return rays
    factor = rays / limit
    turns = (columns - 1) * s.angle_resolution / 360.0  # a full sweep (packets=sweep) is one turn, not more
    if mode == "range" and turns > 1.0:
        raise SettingsError("rotation_speed", f"at most {s.rotation_speed / factor:.6g} Hz at these settings "
                            f"({rays:,} rays per frame; the limit is {limit:,})", s.rotation_speed)
    raise SettingsError("angle_resolution", f"at least {s.angle_resolution * factor:.6g} deg at these settings "
                        f"({rays:,} rays per scan; the limit is {limit:,})", s.angle_resolution)


def single_scan_count(s: LidarSettings) -> int:
    """Number of columns of a single scan (:func:`~.patterns.sweep_column_count`)."""
    return sweep_column_count(s.start_angle, s.end_angle, s.angle_resolution)


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


def firing_offsets(s: LidarSettings) -> np.ndarray:
    """(L,) float64 s: when each laser fires after its column's time (:data:`FIRING`;
    zeros for presets without a firing sequence)."""
    step, group = FIRING.get(s.preset, (0.0, 1))
    return (np.arange(s.num_lasers) % group) * step


#: the last few patterns made (:func:`make_pattern`), by their inputs: a scan repeated on
#: the same frame (the panel's scan button, ``blensor_addon.scan`` in a loop) reuses its
#: rays instead of making 133k directions again; arrays are read-only
_PATTERNS: collections.OrderedDict = collections.OrderedDict()
_PATTERNS_KEPT = 2
_PATTERNS_LOCK = threading.Lock()


def make_pattern(s: LidarSettings, azimuth_deg: np.ndarray, timestamp: np.ndarray,
                 column0: int = 0, columns: int | None = None, firing: np.ndarray | None = None) -> RayPattern:
    """Ray directions for the given columns (the same inputs give the same, shared,
    read-only pattern: :data:`_PATTERNS`).

    Args:
        azimuth_deg (C,) float64 column azimuths psi in degrees.
        timestamp (C,) float64 absolute firing time of each column (s).
        column0: index of the first of these columns in the scan; columns: the scan's
            column count (default C), for ``ray_index = channel * columns + column``.
        firing: (L,) float64 s, per-laser firing offsets (continuous time,
            :func:`firing_offsets`), or None: every laser of a column fires at the
            column's time along the column's azimuth (the original). With offsets, laser k
            fires at ``t + firing[k]`` while the head keeps turning, so its azimuth is
            ``psi + 360 * rotation_speed * firing[k]`` deg (what the driver reports).
    Returns:
        RayPattern with C * L rays, ray ``c * L + k`` = column c, laser k.
    """
    az = np.ascontiguousarray(azimuth_deg, dtype=np.float64)
    ts = np.ascontiguousarray(timestamp, dtype=np.float64)
    fi = None if firing is None else np.ascontiguousarray(firing, dtype=np.float64)
    key = (s, int(column0), columns, az.tobytes(), ts.tobytes(), None if fi is None else fi.tobytes())
    with _PATTERNS_LOCK:
        p = _PATTERNS.get(key)
        if p is not None:
            _PATTERNS.move_to_end(key)
            return p
    p = _make_pattern(s, az, ts, column0, columns, fi)
    for name in (*RayPattern._FIELDS, "origins"):
        a = getattr(p, name)
        if a is not None:
            a.flags.writeable = False
    with _PATTERNS_LOCK:
        _PATTERNS[key] = p
        while len(_PATTERNS) > _PATTERNS_KEPT:
            _PATTERNS.popitem(last=False)
    return p


def _make_pattern(s: LidarSettings, azimuth_deg: np.ndarray, timestamp: np.ndarray, column0: int,
                  columns: int | None, firing: np.ndarray | None) -> RayPattern:
    elev = np.deg2rad(s.elevations_deg)
    L = elev.shape[0]
    C = azimuth_deg.shape[0]
    offsets = s.azimuth_offsets_deg
    spin = None
    if firing is not None and np.any(firing):
        spin = 360.0 * s.rotation_speed * np.asarray(firing, dtype=np.float64)  # deg turned per laser
        offsets = offsets - spin
    # th = psi - offset + 180 deg per (column, laser): its sine and cosine from the
    # columns' and the lasers' by the angle-difference identities (C + L trigonometric
    # calls instead of C * L; the same angles within 1e-15 rad)
    a = np.deg2rad(np.asarray(azimuth_deg, dtype=np.float64) + 180.0)[:, None]
    o = np.deg2rad(np.asarray(offsets, dtype=np.float64))[None, :]
    sin_a, cos_a, sin_o, cos_o = np.sin(a), np.cos(a), np.sin(o), np.cos(o)
    cp, sp = np.cos(elev)[None, :], np.sin(elev)[None, :]
    d = np.empty((C, L, 3), dtype=np.float64)
    d[..., 0] = cp * (sin_a * cos_o - cos_a * sin_o)
    d[..., 1] = np.broadcast_to(sp, (C, L))
    d[..., 2] = cp * (cos_a * cos_o + sin_a * sin_o)
    col = np.arange(column0, column0 + C, dtype=np.int64)
    total = C if columns is None else int(columns)
    origins = None
    if s.beam_origin:  # on the column's azimuth psi + 180 deg: the sine and cosine of a above
        org = np.zeros((C, L, 3))
        org[..., 0] = s.beam_origin * sin_a
        org[..., 2] = s.beam_origin * cos_a
        origins = org.reshape(-1, 3).astype(np.float32)
    if offsets.any():
        azimuth = np.mod(np.deg2rad(azimuth_deg[:, None] - offsets[None, :]), 2.0 * np.pi).ravel()
    else:
        azimuth = np.repeat(np.mod(np.deg2rad(azimuth_deg), 2.0 * np.pi), L)
    return RayPattern(
        directions=d.reshape(-1, 3).astype(np.float32),
        azimuth=azimuth,
        elevation=np.tile(elev, C),
        channel=np.tile(np.arange(L, dtype=np.uint16), C),
        ray_index=(np.arange(L, dtype=np.int64)[None, :] * total + col[:, None]).ravel(),
        timestamp=(np.repeat(np.asarray(timestamp, dtype=np.float64), L) if spin is None else
                   (np.asarray(timestamp, dtype=np.float64)[:, None] + np.asarray(firing)[None, :]).ravel()),
        origins=origins,
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
    :data:`~.budget.CHUNK_RAYS`) rays, at least one column."""
    return max(1, (chunk_rays or CHUNK_RAYS) // s.num_lasers)


def iter_patterns(s: LidarSettings, azimuth_deg: np.ndarray, timestamp: np.ndarray,
                  chunk_rays: int | None = None, firing: np.ndarray | None = None):
    """:func:`make_pattern` over consecutive column chunks of about ``chunk_rays`` rays,
    so the rays of a scan never exist all at once. Yields RayPattern (one empty
    pattern if there are no columns)."""
    step = chunk_columns(s, chunk_rays)
    n = azimuth_deg.shape[0]
    for i in range(0, max(1, n), step):
        yield make_pattern(s, azimuth_deg[i:i + step], timestamp[i:i + step], i, n, firing)


def noisy_range(rng: np.random.Generator, rng_clean: np.ndarray, channel: np.ndarray,
                s: LidarSettings) -> np.ndarray:
    """seed 000 Eq. 2: ``d + eps_bias[channel] + N(noise_mu, noise_sigma)``, float64 m."""
    bias = s.laser_bias()
    per_ray = rng.normal(s.noise_mu, s.noise_sigma, rng_clean.shape[0]) if s.noise_sigma > 0 \
        else np.full(rng_clean.shape[0], s.noise_mu)
    return rng_clean.astype(np.float64) + bias[channel.astype(np.int64)] + per_ray


class Rotating(Sensor):
    """The rotating LiDAR sensor type (see the module docstring)."""

    name = "rotating"
    label = "Rotating LiDAR"
    description = "Spinning multi-laser LiDAR (Velodyne, Ouster, generic)"
    Settings = LidarSettings
    presets = PRESETS
    storage = ""  # v0.1 kept these settings on Camera.blensor itself
    number = 0  # stored value of sensor_type (saved files keep it)

    def grid_shape(self, s, frame, frame_time, mode, camera):
        if mode == "range":
            return (s.num_lasers, range_scan_columns(s, frame, frame_time).shape[0])
        return (s.num_lasers, single_scan_count(s))

    def check_budget(self, s, frame, frame_time, mode, camera):
        return scan_columns(s, frame, frame_time, mode)[0].shape[0] * s.num_lasers

    def patterns(self, s, frame, frame_time, mode, camera):
        firing = firing_offsets(s) if s.time_model == "continuous" else None
        return iter_patterns(s, *scan_columns(s, frame, frame_time, mode), firing=firing)

    def sweep_period(self, s):
        return 1.0 / s.rotation_speed

    def channel_elevations(self, s):
        return s.elevations_deg

    def returns(self, s, pattern, hits):
        return returns_mask(hits, s)

    def measure(self, s, pattern, r, rng):
        return noisy_range(rng, r, pattern.channel, s)


SENSOR = Rotating()
