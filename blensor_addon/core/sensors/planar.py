"""Planar scanners: one or a few fixed scan planes swept once per period.

The original's "generic LIDAR" (reference section 6.3): a list of laser elevations, a
field of view start..end swept at ``angle_resolution`` once per ``1 / rotation_speed``
seconds, ``max_range``; ray directions as the rotating LiDAR's (azimuth psi = 0 looks
down -Z and grows toward -X, counter-clockwise seen from +Y). Range noise is either
``N(noise_mu, noise_sigma)`` or, when ``error_table`` is given, the original's advanced
error model: rows (distance, mu, sigma), linearly interpolated in distance (constant
beyond the ends), ``N(mu(d), sigma(d))``. ``range_resolution`` (m, 0 = off) then rounds
the measured range to that grid (seed 001 Table 1: the Pulselight3D reports 1 cm steps).

Presets:
- ``utm30lx`` Hokuyo UTM-30LX (reference 6.3): -135..135 deg, 0.25 deg, 40 Hz, 30 m,
  the distance-dependent sigma table of the original (Friedman 2013 Hokuyo data, sigma =
  published 3 sigma / 3).
- ``lms511`` SICK LMS511 PRO (SICK LMS5xx operating instructions: scanning frequency
  25/35/50/75/100 Hz, angle step 0.1667-1 deg, 190 deg aperture, 80 m): -95..95 deg
  (the aperture centred ahead), 0.25 deg, 25 Hz, 80 m; sigma 7 mm to 10 m, 9 mm to
  20 m, 12 mm beyond (the LMS511 PRO data sheet's statistical error, 1 sigma).
- ``pulselight3d`` seed 001 section 3.1, Table 1: one plane swept 0..180 deg
  anticlockwise from the sensor's right, i.e. psi = -90..+90 deg here (seed 001's
  theta = psi + 90 deg); 40 m; accuracy +/-2.5 cm read as 3 sigma (sigma = 0.00833 m, the
  original's convention for published bounds); 1 cm range resolution. Seed 001 gives no
  angular step or sweep rate: 0.5 deg and 10 Hz are BlenSor's choice.
- ``generic``: the original generic LIDAR's defaults.
"""
from __future__ import annotations

import dataclasses

from dataclasses import dataclass

import numpy as np

from ..capabilities import Capabilities
from ..errors import SettingsError
from ..ndtypes import F64
from ..settings import MIN_SWEEP_RATE, Preset, check_less, check_table, setting
from .physics import (check_min_range, interpolated_noise, min_range_setting, noise_mu_setting,
                      noise_sigma_setting, ref_dist_setting, ref_limit_setting, ref_slope_setting)
from .raypattern import CameraFrame, RayPattern
from .returns import ReturnSettings
from .sensor import SweptSensor

HOKUYO_UTM30LX_TABLE = ("(2.0,0,0.00933) (3.0,0,0.008) (4.5,0,0.006) (6,0,0.01) (9,0,0.015) (10.5,0,0.0175) "
                        "(12,0,0.02) (15,0,0.024) (21,0,0.0315) (23,0,0.0215) (25,0,0.0167) (29,0,0.0338) "
                        "(30,0,0.065)")
LMS511_TABLE = "(1,0,0.007) (10,0,0.007) (10.001,0,0.009) (20,0,0.009) (20.001,0,0.012) (80,0,0.012)"

_COMMON = {"noise_mu": 0.0, "ref_dist": 50.0, "ref_limit": 0.1, "ref_slope": 0.005333333}
PRESETS = {
    "utm30lx": Preset("Hokuyo UTM-30LX", {**_COMMON, "elevations": (0.0,), "start_angle": -135.0,
                                          "end_angle": 135.0, "angle_resolution": 0.25, "rotation_speed": 40.0,
                                          "max_range": 30.0, "noise_sigma": 0.03,
                                          "error_table": HOKUYO_UTM30LX_TABLE, "range_resolution": 0.0},
                      "reference 6.3"),
    "lms511": Preset("SICK LMS511 PRO", {**_COMMON, "elevations": (0.0,), "start_angle": -95.0,
                                         "end_angle": 95.0, "angle_resolution": 0.25, "rotation_speed": 25.0,
                                         "max_range": 80.0, "noise_sigma": 0.012, "error_table": LMS511_TABLE,
                                         "range_resolution": 0.0},
                     "SICK LMS5xx operating instructions, LMS511 PRO data sheet"),
    "pulselight3d": Preset("Pulselight3D V2", {**_COMMON, "elevations": (0.0,), "start_angle": -90.0,
                                               "end_angle": 90.0, "angle_resolution": 0.5, "rotation_speed": 10.0,
                                               "max_range": 40.0, "noise_sigma": 0.025 / 3.0, "error_table": "",
                                               "range_resolution": 0.01, "beam_divergence": 0.004},
                           "seed 001 Table 1 (beam divergence 4 mrad)"),
    "generic": Preset("Generic planar scanner", {**_COMMON, "elevations": (0.0,), "start_angle": -135.0,
                                                  "end_angle": 135.0, "angle_resolution": 0.25,
                                                  "rotation_speed": 40.0, "max_range": 30.0, "noise_sigma": 0.03,
                                                  "error_table": "", "range_resolution": 0.0},
                      "reference 6.3 (the original's generic LIDAR)"),
}


@dataclass(frozen=True)
class PlanarSettings(ReturnSettings):
    """Settings of a planar scanner (reference 6.3; seed 001 section 3.1).

    Attributes (units): preset; elevations (deg, one per scan plane, 1..64 in
    [-90, 90]); start_angle, end_angle (deg, -360..360, start < end, at most one turn);
    angle_resolution (deg, (0, 360]); rotation_speed (Hz, sweeps per second, [0.01, 1000]);
    max_range (m); min_range (m, < max_range: measured ranges below it are not reported;
    0 = none); noise_mu, noise_sigma (m); error_table (text ``(d, mu, sigma) ...``,
    distances increasing, sigma >= 0; empty = Gaussian noise); range_resolution (m,
    >= 0, 0 = no quantization); ref_dist, ref_limit, ref_slope: reflectivity limit.
    """

    preset: str = setting("generic", "Sensor", "Sensor model; choosing one sets its values",
                          choices=tuple(PRESETS))
    elevations: tuple[float, ...] = setting((0.0,), "Elevations",
                                            "Comma-separated elevations of the scan planes", "deg",
                                            lo=-90.0, hi=90.0, count=(1, 64))
    start_angle: float = setting(-135.0, "Start angle", "Field of view start (azimuth)", "deg",
                                 lo=-360.0, hi=360.0)
    end_angle: float = setting(135.0, "End angle", "Field of view end (azimuth, exclusive)", "deg",
                               lo=-360.0, hi=360.0)
    angle_resolution: float = setting(0.25, "Angle resolution", "Azimuth step between measurements", "deg",
                                      lo=0.0, hi=360.0, lo_open=True, precision=4)
    rotation_speed: float = setting(40.0, "Sweep rate", "Field-of-view sweeps per second (a sweep lasts at "
                                    "most 100 s)", "Hz", lo=MIN_SWEEP_RATE, hi=1000.0)
    max_range: float = setting(30.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)
    min_range: float = min_range_setting()
    noise_mu: float = noise_mu_setting(note=" (without an error table)")
    noise_sigma: float = noise_sigma_setting(0.03, note=" (without an error table)")
    error_table: str = setting("", "Error table", "Distance-dependent noise: (distance, mu, sigma) triples in "
                               "metres, distances increasing; empty for Gaussian noise")
    range_resolution: float = setting(0.0, "Range resolution", "Measured ranges are rounded to this step "
                                      "(0: off)", "m", lo=0.0, hi=10.0, precision=4)
    ref_dist: float = ref_dist_setting()
    ref_limit: float = ref_limit_setting()
    ref_slope: float = ref_slope_setting(0.005333333, precision=6)

    def check(self) -> None:
        check_less("start_angle", self.start_angle, "end_angle", self.end_angle, "deg")
        if self.end_angle - self.start_angle > 360.0:
            raise SettingsError("end_angle", f"at most start_angle + 360 = {self.start_angle + 360.0:g} deg (one "
                                "turn)", self.end_angle)
        check_table("error_table", self.error_table)
        check_min_range(self)

    @property
    def table(self) -> F64:
        """(K, 3) float64 error table rows (distance m, mu m, sigma m); K = 0 if none."""
        return check_table("error_table", self.error_table)


class Planar(SweptSensor[PlanarSettings]):
    """Planar scanners (see the module docstring)."""

    name = "planar"
    label = "Planar scanner"
    description = "One or a few fixed scan planes (Hokuyo, SICK, Pulselight3D)"
    Settings = PlanarSettings
    presets = PRESETS
    storage = "planar"
    number = 2  # stored value of sensor_type (saved files keep it)

    def channel_elevations(self, s: PlanarSettings) -> F64:
        return np.asarray(s.elevations, dtype=np.float64)

    def capabilities(self, s: PlanarSettings, camera: CameraFrame | None = None) -> Capabilities:
        """The swept sensor's capabilities; with one scan plane also ``column_angles``
        (first column's azimuth, step; rad): such a scanner is what ROS calls a laser
        scanner (``sensor_msgs/LaserScan``)."""
        caps = super().capabilities(s, camera)
        if len(s.elevations) != 1:
            return caps
        return dataclasses.replace(caps, column_angles=(float(np.deg2rad(s.start_angle)),
                                                        float(np.deg2rad(s.angle_resolution))))

    def lasers(self, s: PlanarSettings) -> int:
        return len(s.elevations)

    def directions(self, s: PlanarSettings, angle_deg: F64) -> F64:
        """As the rotating LiDAR's: ``(cos p sin th, sin p, cos p cos th)``, th = psi + 180."""
        p = np.deg2rad(np.asarray(s.elevations, dtype=np.float64))[None, :]
        th = np.deg2rad(np.asarray(angle_deg, dtype=np.float64) + 180.0)[:, None]
        d = np.empty((th.shape[0], p.shape[1], 3))
        d[..., 0] = np.cos(p) * np.sin(th)
        d[..., 1] = np.broadcast_to(np.sin(p), d.shape[:2])
        d[..., 2] = np.cos(p) * np.cos(th)
        return d

    def measure(self, s: PlanarSettings, pattern: RayPattern, r: F64, rng: np.random.Generator) -> F64:
        table = s.table
        out: F64
        if table.shape[0]:
            mu, sigma = interpolated_noise(table, r)
            out = r + mu + sigma * rng.standard_normal(r.shape[0])
        elif s.noise_sigma > 0:
            out = r + rng.normal(s.noise_mu, s.noise_sigma, r.shape[0])
        else:
            out = r + s.noise_mu
        if s.range_resolution > 0:
            out = np.round(out / s.range_resolution) * s.range_resolution
        return out


SENSOR = Planar()
