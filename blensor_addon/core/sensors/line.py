"""Line scanner with a rotating 45 deg mirror (Ibeo LUX).

Seed 000 section 3.3 and Fig. 3; reference section 6.2. Four fixed lasers fire down the
sensor's -Y axis at a mirror inclined 45 deg that turns about +Y by the mirror angle
alpha. Laser k with pitch L_k fires along ``d0 = (0, -cos L_k, sin L_k)``; the mirror's
unit normal is ``n(alpha) = Ry(alpha) (0, -1, 1) / sqrt 2 = (sin a, -1, cos a) / sqrt 2``;
the outgoing ray is the specular reflection ``d = d0 - 2 (d0 . n) n``. At alpha = 0 the
lasers keep their pitch spread (elevation L_k, azimuth 0); as the mirror turns the
spread rotates, and at alpha = 90 deg all elevations are 0 and the spread has become
yaw (azimuth 90 deg + L_k): the behaviour of seed 000 Fig. 3.

The original rotated the laser about ``n x d0`` by twice the incidence angle measured
modulo pi/2 (reference 6.2), which fans the lasers three times too wide (+4.8 deg for a
1.6 deg laser at alpha = 0); BlenSor computes the true reflection instead.

Constants (reference 6.2): pitches +1.6, +0.8, -0.8, -1.6 deg; per-laser bias
0.0158, 0.0303, 0.0448, 0.0226 m; FOV -50..+35 deg; 0.25 deg; 12.5 Hz (one FOV sweep
per period); 90 m; noise N(0, 0.03 m); reflectivity limit 50 m / 0.1 / 0.005333 1/m.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..settings import Preset, SensorSettings, check_less, setting
from .physics import (noise_mu_setting, noise_sigma_setting, ref_dist_setting, ref_limit_setting,
                      ref_slope_setting)
from .sensor import SweptSensor

IBEO_LUX_PITCH_DEG = (1.6, 0.8, -0.8, -1.6)
IBEO_LUX_BIAS_M = (0.015798891682948433, 0.030289711937446478, 0.044832263895615468, 0.022628361223111119)

PRESETS = {
    "ibeo_lux": Preset("Ibeo LUX", {"angle_resolution": 0.25, "rotation_speed": 12.5, "max_range": 90.0,
                                    "start_angle": -50.0, "end_angle": 35.0, "noise_mu": 0.0, "noise_sigma": 0.03,
                                    "ref_dist": 50.0, "ref_limit": 0.1, "ref_slope": 0.005333333},
                       "reference 6.2 (the original's Ibeo LUX defaults)"),
}
TABLES = {"ibeo_lux": {"pitch": IBEO_LUX_PITCH_DEG, "bias": IBEO_LUX_BIAS_M}}


@dataclass(frozen=True)
class LineSettings(SensorSettings):
    """Settings of the mirror line scanner (reference 6.2).

    Attributes (units): preset; angle_resolution (deg, mirror step, (0, 90]);
    rotation_speed (Hz, FOV sweeps per second, (0, 1000]); max_range (m);
    start_angle, end_angle (deg, mirror angles, -180..180, start < end); noise_mu,
    noise_sigma (m); ref_dist, ref_limit, ref_slope: reflectivity limit (seed 000 Eq. 1).
    """

    preset: str = setting("ibeo_lux", "Sensor", "Sensor model; choosing one sets its values",
                          choices=tuple(PRESETS))
    angle_resolution: float = setting(0.25, "Angle resolution", "Mirror step between columns", "deg",
                                      lo=0.0, hi=90.0, lo_open=True, precision=4)
    rotation_speed: float = setting(12.5, "Sweep rate", "Field-of-view sweeps per second", "Hz",
                                    lo=0.0, hi=1000.0, lo_open=True)
    max_range: float = setting(90.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)
    start_angle: float = setting(-50.0, "Start angle", "First mirror angle", "deg", lo=-180.0, hi=180.0)
    end_angle: float = setting(35.0, "End angle", "Last mirror angle (exclusive)", "deg", lo=-180.0, hi=180.0)
    noise_mu: float = noise_mu_setting()
    noise_sigma: float = noise_sigma_setting(0.03)
    ref_dist: float = ref_dist_setting()
    ref_limit: float = ref_limit_setting()
    ref_slope: float = ref_slope_setting(0.005333333, precision=6)

    def check(self) -> None:
        check_less("start_angle", self.start_angle, "end_angle", self.end_angle, "deg")

    @property
    def pitch_deg(self) -> np.ndarray:
        """(L,) float64 laser pitches (deg); channel k is row k."""
        return np.asarray(TABLES[self.preset]["pitch"], dtype=np.float64)


def mirror_directions(alpha_deg: np.ndarray, pitch_deg: np.ndarray) -> np.ndarray:
    """Outgoing ray directions: the specular reflection of each laser off the mirror.

    Args:
        alpha_deg (C,) float64 mirror angles; pitch_deg (L,) float64 laser pitches.
    Returns:
        (C, L, 3) float64 unit vectors in the sensor frame (see the module docstring).
    """
    a = np.deg2rad(np.asarray(alpha_deg, dtype=np.float64))[:, None]
    p = np.deg2rad(np.asarray(pitch_deg, dtype=np.float64))[None, :]
    s = 1.0 / np.sqrt(2.0)
    n = np.stack(np.broadcast_arrays(s * np.sin(a), -s + 0 * a, s * np.cos(a)), axis=-1)  # (C, 1, 3)
    d0 = np.stack(np.broadcast_arrays(0 * p, -np.cos(p), np.sin(p)), axis=-1)  # (1, L, 3)
    dot = np.sum(d0 * n, axis=-1, keepdims=True)
    return d0 - 2.0 * dot * n


class Line(SweptSensor):
    """The mirror line scanner (see the module docstring)."""

    name = "line"
    label = "Line scanner"
    description = "Fixed lasers on a rotating 45 deg mirror (Ibeo LUX)"
    Settings = LineSettings
    presets = PRESETS
    storage = "line"
    number = 1  # stored value of sensor_type (saved files keep it)

    def channel_elevations(self, s):
        return s.pitch_deg

    def lasers(self, s) -> int:
        return len(s.pitch_deg)

    def directions(self, s, angle_deg):
        return mirror_directions(angle_deg, s.pitch_deg)

    def measure(self, s, pattern, r, rng):
        bias = np.asarray(TABLES[s.preset]["bias"], dtype=np.float64)[pattern.channel.astype(np.int64)]
        noise = rng.normal(s.noise_mu, s.noise_sigma, r.shape[0]) if s.noise_sigma > 0 \
            else np.full(r.shape[0], s.noise_mu)
        return r + bias + noise


SENSOR = Line()
