"""Generic cylindrical LiDAR: seed 003's ``generic_cylindrical``.

Seed 003 ("Generic cylindrical lidar type"): ``channels`` beams "equally spaced vertically
to cover the vertical FOV" sweep 360 deg at ``rotation_frequency``; "data is returned only
when the beams are within the horizontal FOV range"; ``points_per_second`` for the whole
sensor. Project AirSim's ``CylindricalScanPattern`` (unreal/.../Sensors/UnrealLidar.cpp)
numbers the lasers from the top.

- Channels: channel i of C has elevation ``vertical_fov_upper - i (upper - lower) / (C - 1)``
  (channel 0 the highest, channel C - 1 at ``vertical_fov_lower``); one channel lies at
  ``vertical_fov_upper`` (Project AirSim's spacing, 0 for one laser). The ``ring`` field is
  the elevation rank (0 = lowest), as for the other LiDARs.
- Columns: a revolution has ``N = round(points_per_second / (channels rotation_frequency))``
  columns (round half away from zero, at least 1; seed 003's sample: 100,000 / (16 x 10) =
  625). Column j of revolution k fires at ``t = (k N + j) / (N rotation_frequency)`` s, at
  horizontal angle ``h_j = 360 j / N`` deg (0 ahead, increasing clockwise seen from above,
  seed 003), every channel at once. The sweep starts ahead at t = 0.
- Field of view: only the columns with ``h_j`` within ``horizontal_fov_start..end`` (both
  ends included, clockwise from the start; start == end modulo 360 and 0..360 are the whole
  circle, as Project AirSim) are cast; the grid is (C, M), M the columns of one revolution
  inside the FOV, in firing order (ascending j, so a FOV through 0 deg is two runs).
- Directions, BlenSor's sensor frame (+X right, +Y up, -Z ahead; azimuth psi = -h):
  ``(cos e sin h, sin e, -cos e cos h)``.
- Timing ``sweep``, period ``1 / rotation_frequency``. A one-plane sensor (one channel at
  elevation 0) whose FOV is the whole circle declares ``column_angles`` = (0, -360/N deg)
  in rad (psi = -h: the sweep turns clockwise), so ROS ``LaserScan`` can be written; a cut
  FOV does not (its columns do not fill the period evenly, which LaserScan's time increment
  assumes).
- Returns: seed 003's ideal sensor (a hit within ``max_range`` on a surface that sends
  something back), range noise ``N(noise_mu, noise_sigma)``, ``min_range`` on the measured
  range.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import cast

import numpy as np

from ..capabilities import Capabilities
from ..ndtypes import F64, I64, Bool, Integer
from ..settings import MIN_SWEEP_RATE, Preset, SensorSettings, setting
from .budget import refuse_rays
from .physics import check_min_range, min_range_setting, noise_mu_setting, noise_sigma_setting
from .protocols import Hits
from .raypattern import CameraFrame, RayPattern
from .returns import ReturnSettings
from .rosette import gaussian_range, ideal_returns, in_horizontal_fov
from .sensor import SweptSensor

PRESETS = {
    "generic": Preset("Generic cylindrical", {}, "seed 003 generic_cylindrical"),
}


@dataclass(frozen=True)
class CylindricalSettings(ReturnSettings):
    """Settings of a generic cylindrical LiDAR (seed 003's lidar settings table, same
    meanings and units; horizontal angles 0 = ahead, increasing clockwise seen from
    above).

    Attributes: preset; channels; points_per_second (sensor total); rotation_frequency
    (Hz, revolutions per second, [0.01, 1000]: seed 003
    horizontal-rotation-frequency);
    horizontal_fov_start, horizontal_fov_end (deg, 0..360); vertical_fov_lower,
    vertical_fov_upper (deg, -90..90); max_range, min_range (m); noise_mu, noise_sigma (m).
    """

    preset: str = setting("generic", "Sensor", "Sensor model; choosing one sets its values",
                          choices=tuple(PRESETS))
    channels: int = setting(16, "Channels",
                            "Number of lasers, equally spaced over the vertical field of view", lo=1, hi=256)
    points_per_second: float = setting(100000.0, "Points per second",
                                       "Points fired per second (all channels)", "Hz", lo=0.0, hi=1e8,
                                       lo_open=True)
    rotation_frequency: float = setting(10.0, "Rotation frequency", "Revolutions per second (a revolution "
                                        "lasts at most 100 s)", "Hz", lo=MIN_SWEEP_RATE, hi=1000.0)
    horizontal_fov_start: float = setting(0.0, "Horizontal FOV start",
                                          "Start of the horizontal field of view (0 ahead, clockwise from "
                                          "above)", "deg", lo=0.0, hi=360.0)
    horizontal_fov_end: float = setting(360.0, "Horizontal FOV end", "End of the horizontal field of view",
                                        "deg", lo=0.0, hi=360.0)
    vertical_fov_lower: float = setting(-15.0, "Vertical FOV lower", "Lowest laser's elevation", "deg",
                                        lo=-90.0, hi=90.0)
    vertical_fov_upper: float = setting(15.0, "Vertical FOV upper", "Highest laser's elevation", "deg",
                                        lo=-90.0, hi=90.0)
    max_range: float = setting(100.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)
    min_range: float = min_range_setting()
    noise_mu: float = noise_mu_setting()
    noise_sigma: float = noise_sigma_setting(0.0)

    def check(self) -> None:
        """Refuse (SettingsError) ``min_range`` not below ``max_range``, and a revolution of
        more rays than the ray budget (:func:`~.budget.refuse_rays`, naming
        ``points_per_second``): ``points_per_second / rotation_frequency`` rays, counted before
        any column is listed (1e8 Hz at 0.01 Hz is 1e10 columns)."""
        check_min_range(self)
        refuse_rays(columns_per_revolution(self) * int(self.channels), "points_per_second",
                    self.points_per_second, grows=True, unit="Hz")


def columns_per_revolution(s: CylindricalSettings) -> int:
    """N = points_per_second / (channels rotation_frequency), rounded half away from zero,
    at least 1 (seed 003's sample: 625)."""
    return max(1, int(math.floor(s.points_per_second / (s.channels * s.rotation_frequency) + 0.5)))


def channel_elevations_deg(s: CylindricalSettings) -> F64:
    """(C,) float64 deg: channel i at ``upper - i (upper - lower) / (C - 1)``; one channel
    at ``upper`` (Project AirSim's CylindricalScanPattern)."""
    C = int(s.channels)
    step = (s.vertical_fov_upper - s.vertical_fov_lower) / (C - 1) if C > 1 else 0.0
    elevations: F64 = s.vertical_fov_upper - step * np.arange(C, dtype=np.float64)
    return elevations


def fov_columns(s: CylindricalSettings) -> I64:
    """(M,) int64 ascending: the columns j of a revolution whose angle ``360 j / N`` deg is
    within the horizontal FOV."""
    N = columns_per_revolution(s)
    j = np.arange(N, dtype=np.int64)
    inside: I64 = j[in_horizontal_fov(360.0 * j / N, s.horizontal_fov_start, s.horizontal_fov_end)]
    return inside


def column_directions(s: CylindricalSettings, j: Integer) -> F64:
    """(K, C, 3) float64 unit directions (BlenSor sensor frame) of revolution columns ``j``
    (K,) for every channel."""
    h = np.deg2rad(360.0 * np.asarray(j, dtype=np.float64) / columns_per_revolution(s))[:, None]
    e = np.deg2rad(channel_elevations_deg(s))[None, :]
    ce = np.cos(e)
    d: F64 = np.stack(np.broadcast_arrays(ce * np.sin(h), np.sin(e), -ce * np.cos(h)), axis=-1)
    return d


class Cylindrical(SweptSensor[CylindricalSettings]):
    """Generic cylindrical LiDAR (see the module docstring)."""

    name = "cylindrical"
    label = "Cylindrical LiDAR"
    description = "Channels equally spaced over a vertical field of view, 360 deg sweep (seed 003)"
    Settings = CylindricalSettings
    presets = PRESETS
    storage = "cylindrical"
    number = 7
    period_setting = "rotation_frequency"

    def lasers(self, s: CylindricalSettings) -> int:
        return int(s.channels)

    def channel_elevations(self, s: CylindricalSettings) -> F64:
        return channel_elevations_deg(s)

    @staticmethod
    def columns(s: SensorSettings) -> int:
        """Columns of one revolution inside the FOV (the grid's width)."""
        # SweptSensor's methods hand this sensor's settings (a static method is not generic in them)
        return int(fov_columns(cast(CylindricalSettings, s)).shape[0])

    def sweep_period(self, s: CylindricalSettings) -> float | None:
        return 1.0 / s.rotation_frequency

    def column_times(self, s: CylindricalSettings, frame: int, frame_time: float,
                     mode: str) -> tuple[I64, F64]:
        """The scan's columns in firing order: (position in the FOV's columns (C,) int64,
        firing time (C,) float64 s). ``single``: one revolution from ``frame *
        frame_time``; ``range``: every column fired in ``[frame, frame + 1) * frame_time``
        (global column g = k N + j fires at g / (N rotation_frequency))."""
        cols = fov_columns(s)
        N, rate = columns_per_revolution(s), float(s.rotation_frequency)
        M = cols.shape[0]
        if mode != "range":
            return np.arange(M, dtype=np.int64), frame * frame_time + cols / (N * rate)
        lo, hi = frame * frame_time, (frame + 1) * frame_time
        per_s = N * rate
        g0, g1 = (int(math.ceil(t * per_s - 1e-9)) for t in (lo, hi))
        k = np.arange(g0 // N, (g1 - 1) // N + 1 if g1 > g0 else g0 // N, dtype=np.int64)
        g = (k[:, None] * N + cols[None, :]).ravel()
        pos = np.tile(np.arange(M, dtype=np.int64), k.shape[0])
        keep = (g >= g0) & (g < g1)
        return pos[keep], g[keep] / per_s

    def grid_shape(self, s: CylindricalSettings, frame: int, frame_time: float, mode: str,
                   camera: CameraFrame | None) -> tuple[int, ...]:
        return (self.lasers(s), int(self.column_times(s, frame, frame_time, mode)[0].shape[0]))

    def check_budget(self, s: CylindricalSettings, frame: int, frame_time: float, mode: str,
                     camera: CameraFrame | None) -> int:
        rows, cols = self.grid_shape(s, frame, frame_time, mode, camera)
        refuse_rays(rows * cols, "points_per_second", s.points_per_second, grows=True, unit="Hz")
        return rows * cols

    def capabilities(self, s: CylindricalSettings, camera: CameraFrame | None = None) -> Capabilities:
        """The swept sensor's; a single channel at elevation 0 over the whole circle also
        declares ``column_angles`` (0, -360 / N deg) in rad: a ROS laser scanner."""
        caps = super().capabilities(s, camera)
        cols = fov_columns(s)
        N = columns_per_revolution(s)
        if int(s.channels) != 1 or channel_elevations_deg(s)[0] != 0.0 or cols.shape[0] != N:
            return caps
        return dataclasses.replace(caps, column_angles=(0.0, float(-2.0 * np.pi / N)))

    def column_rays(self, s: CylindricalSettings, col: I64) -> F64:
        """The rays of columns ``col`` (positions in :func:`fov_columns`, as
        :meth:`column_times` gives them): (C, channels, 3) float64."""
        return column_directions(s, fov_columns(s)[col])

    def returns(self, s: CylindricalSettings, pattern: RayPattern, hits: Hits) -> Bool:
        return ideal_returns(hits, s)

    def measure(self, s: CylindricalSettings, pattern: RayPattern, r: F64, rng: np.random.Generator) -> F64:
        return gaussian_range(s, r, rng)


SENSOR = Cylindrical()
