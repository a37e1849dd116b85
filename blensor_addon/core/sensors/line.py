"""Line scanner with a rotating mirror (Ibeo LUX): geometry, column timing, presets.

Seed 000 section 3.3 and Fig. 3; reference section 6.2. Four fixed layers (channels)
are swept over the field of view ``start_angle..end_angle`` (deg, BlenSor's azimuth psi:
0 ahead, growing to the left, the Ibeo/ISO 8855 horizontal angle) by a turning mirror,
``angle_resolution`` deg a column. Two mirror models (``mirror``):

- ``vertical``: a flat mirror turning about the sensor's up axis (the LUX: its driver
  gives each layer one elevation over the whole field; SICK's libsick_ldmrs, which decodes
  the same unit as the LD-MRS, src/devices/LuxBase.cpp ``getVAngleOfLayer``, mirror tilt
  0 for 4-layer units). Column angle alpha, layer pitch L: the ray has azimuth alpha and
  elevation L, ``d = (-sin a cos L, sin L, -cos a cos L)``.
- ``inclined``: the 45 deg mirror of seed 000 Fig. 3 (the BlenSor 2011 model): laser k
  with pitch L_k fires along ``d0 = (0, -cos L_k, sin L_k)``; the mirror's unit normal is
  ``n(alpha) = Ry(alpha) (0, -1, 1) / sqrt 2 = (sin a, -1, cos a) / sqrt 2``; the ray is
  the specular reflection ``d = d0 - 2 (d0 . n) n``. At alpha = 0 the lasers keep their
  pitch spread; as the mirror turns the spread rotates into yaw (elevation
  ``asin(sin L cos alpha)``), and at alpha = 90 deg all elevations are 0 (seed 000
  Fig. 3). The original rotated the laser about ``n x d0`` by twice the incidence angle
  modulo pi/2 (reference 6.2), fanning the lasers three times too wide; BlenSor computes
  the true reflection.

Column timing (``sweep_timing``): ``mirror``: the beam turns one full turn per period
``1 / rotation_speed``, so the columns fire ``angle_resolution / (360 rotation_speed)`` s
apart and the 85 deg field of the LUX takes 85/360 of the 80 ms period (18.9 ms at
12.5 Hz), one sweep output per period; ``period``: the field's columns are spread over the
whole period (the original, reference 6.2 "one FOV sweep takes 1/rps"; reference section
14 item 7 lists it as a defect). ``rotation_direction``: ``cw`` seen from above, from
``end_angle`` (left) down to ``start_angle`` (right), as the LUX measures (its first point is at its
start angle on the left: "start angle > end angle" in the LD-MRS parameter list 0x1100;
libsick_ldmrs LuxBase.cpp times a point by ``startAngle - hAngle``), or ``ccw`` from
``start_angle`` up (the original). The grid's columns are in firing order.

Ranges: ``r + bias[layer] + N(noise_mu, noise_sigma)``, then quantized to
``range_resolution`` (the LUX: 4 cm, its datasheet's distance resolution as quoted in the
original's ``ibeo.py`` header), then ``min_range`` applies to the measured range (the
LUX's scan points hold 30..20000 cm: MRPT's Ibeo LUX driver,
libs/hwdrivers/src/CIbeoLuxETH.cpp, drops the others).

Presets: ``ibeo_lux``: the unit. Layers 0.8 deg apart over 3.2 deg, centres -1.2, -0.4,
+0.4, +1.2 deg, layer 0 the lowest (libsick_ldmrs LuxBase.cpp: ``((4 - 1) / 2 - layer) *
0.8 deg`` below the horizon; MRPT CIbeoLuxETH.cpp ``convertLayerToRad``: +-0.00698,
+-0.02094 rad; Player's sickLDMRS driver: "3 = highest"); 4-layer field +35..-50 deg
(datasheet via the original's ibeo.py: "35 deg to -50 deg (4 layers)"); 0.25 deg; 12.5 Hz
(12.5/25/50 Hz, LUX protocol parameter 0x1102); range 0.3..200 m (MRPT: 30..20000 cm,
``maxRange = 200``), 10 % remission at 50 m (seed 000 section 3.3, the fact sheet),
reflectivity limit 50 m / 0.1 / 0.005333 1/m (90 % at 200 m, reference 6.2); per-ray noise
N(0, 0.03 m) as the original (the datasheet gives 10 cm accuracy), no per-layer bias (no
public table). ``ibeo_lux_2011``: the original's numbers (reference 6.2): pitches +1.6,
+0.8, -0.8, -1.6 deg, per-laser bias 0.0158, 0.0303, 0.0448, 0.0226 m, 90 m, no range
quantization or minimum, the inclined mirror, the period timing, ccw.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..ndtypes import F64, I64, Floating
from ..settings import MIN_SWEEP_RATE, Preset, check_less, setting
from .budget import refuse_rays
from .raypattern import ROTATION_DIRECTIONS, CameraFrame, RayPattern, sweep_column_count
from .physics import (check_min_range, min_range_setting, noise_mu_setting, noise_sigma_setting,
                      ref_dist_setting, ref_limit_setting, ref_slope_setting)
from .returns import ReturnSettings
from .sensor import SweptSensor

#: the unit's layers, layer 0 the lowest (deg; see the module docstring)
IBEO_LUX_LAYER_DEG = (-1.2, -0.4, 0.4, 1.2)
#: the original's lasers (reference 6.2): pitches (deg) and fixed per-laser bias (m)
IBEO_LUX_2011_PITCH_DEG = (1.6, 0.8, -0.8, -1.6)
IBEO_LUX_2011_BIAS_M = (0.015798891682948433, 0.030289711937446478, 0.044832263895615468,
                        0.022628361223111119)
MIRRORS = ("vertical", "inclined")
SWEEP_TIMINGS = ("mirror", "period")

_COMMON = {"angle_resolution": 0.25, "rotation_speed": 12.5, "start_angle": -50.0, "end_angle": 35.0,
           "noise_mu": 0.0, "noise_sigma": 0.03, "ref_dist": 50.0, "ref_limit": 0.1, "ref_slope": 0.005333333}
#: append-only: Blender stores a preset as its index (``ibeo_lux`` keeps 0)
PRESETS = {
    "ibeo_lux": Preset("Ibeo LUX", {**_COMMON, "max_range": 200.0, "min_range": 0.3, "range_resolution": 0.04,
                                    "mirror": "vertical", "sweep_timing": "mirror",
                                    "rotation_direction": "cw"},
                       "Ibeo LUX HD datasheet as quoted in the original's ibeo.py (3.2 deg, 0.8 deg layers, "
                       "4 cm, 12.5 Hz, +35..-50 deg); layers: libsick_ldmrs LuxBase.cpp getVAngleOfLayer, "
                       "MRPT CIbeoLuxETH.cpp (0.3..200 m); seed 000 section 3.3 (10 % at 50 m)"),
    "ibeo_lux_2011": Preset("Ibeo LUX (BlenSor 2011)",
                            {**_COMMON, "max_range": 90.0, "min_range": 0.0, "range_resolution": 0.0,
                             "mirror": "inclined", "sweep_timing": "period", "rotation_direction": "ccw"},
                            "reference 6.2 (the original's Ibeo LUX defaults); seed 000 section 3.3 and "
                            "Fig. 3"),
}
TABLES = {"ibeo_lux": {"pitch": IBEO_LUX_LAYER_DEG, "bias": (0.0, 0.0, 0.0, 0.0)},
          "ibeo_lux_2011": {"pitch": IBEO_LUX_2011_PITCH_DEG, "bias": IBEO_LUX_2011_BIAS_M}}


@dataclass(frozen=True)
class LineSettings(ReturnSettings):
    """Settings of the mirror line scanner (module docstring; reference 6.2).

    Attributes (units): preset; angle_resolution (deg, column step, (0, 90]);
    rotation_speed (Hz, sweeps per second, [0.01, 1000]: a sweep lasts at most 100 s); max_range,
    min_range (m, min_range < max_range);
    range_resolution (m, step of the reported range, 0 = not quantized); start_angle,
    end_angle (deg, -180..180, start < end); noise_mu, noise_sigma (m); ref_dist,
    ref_limit, ref_slope: reflectivity limit (seed 000 Eq. 1); mirror (``vertical``,
    ``inclined``); sweep_timing (``mirror``, ``period``); rotation_direction (``cw``,
    ``ccw``).
    """

    preset: str = setting("ibeo_lux", "Sensor", "Sensor model; choosing one sets its values",
                          choices=tuple(PRESETS))
    angle_resolution: float = setting(0.25, "Angle resolution", "Horizontal step between columns", "deg",
                                      lo=0.0, hi=90.0, lo_open=True, precision=4)
    rotation_speed: float = setting(12.5, "Sweep rate", "Sweeps (scans) per second (a sweep lasts at most "
                                    "100 s)", "Hz", lo=MIN_SWEEP_RATE, hi=1000.0)
    max_range: float = setting(200.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)
    min_range: float = min_range_setting(0.3)
    range_resolution: float = setting(0.04, "Range resolution", "Step of the reported range "
                                      "(0: not quantized)", "m", lo=0.0, hi=10.0)
    start_angle: float = setting(-50.0, "Start angle", "Rightmost column's angle", "deg", lo=-180.0, hi=180.0)
    end_angle: float = setting(35.0, "End angle", "Leftmost column's angle (exclusive)", "deg",
                               lo=-180.0, hi=180.0)
    noise_mu: float = noise_mu_setting()
    noise_sigma: float = noise_sigma_setting(0.03)
    ref_dist: float = ref_dist_setting()
    ref_limit: float = ref_limit_setting()
    ref_slope: float = ref_slope_setting(0.005333333, precision=6)
    mirror: str = setting("vertical", "Mirror", "vertical: a flat mirror turning about the up axis, "
                          "every layer keeps its elevation (the LUX); inclined: the 45 deg mirror of "
                          "seed 000 Fig. 3 (BlenSor 2011)", choices=MIRRORS)
    sweep_timing: str = setting("mirror", "Sweep timing", "mirror: columns fire at the beam's rate of one "
                                "turn per period (the LUX's 85 deg take 18.9 ms of 80 ms); period: the "
                                "field's columns spread over the whole period (BlenSor 2011)",
                                choices=SWEEP_TIMINGS)
    rotation_direction: str = setting("cw", "Rotation", "Sweep direction seen from above: cw (the LUX: from "
                                      "end_angle on the left to start_angle) or ccw (BlenSor 2011)",
                                      choices=ROTATION_DIRECTIONS)

    def check(self) -> None:
        """Refuse (SettingsError) an empty field of view, ``min_range`` not below
        ``max_range``, and a sweep of more rays than the ray budget
        (:func:`~.budget.refuse_rays`, naming ``angle_resolution``), counted before any
        column is listed."""
        check_less("start_angle", self.start_angle, "end_angle", self.end_angle, "deg")
        check_min_range(self)
        columns = sweep_column_count(self.start_angle, self.end_angle, self.angle_resolution)
        refuse_rays(columns * len(self.pitch_deg), "angle_resolution", self.angle_resolution, unit="deg")

    @property
    def pitch_deg(self) -> F64:
        """(L,) float64 layer pitches (deg, at mirror angle 0); channel k is row k."""
        return np.asarray(TABLES[self.preset]["pitch"], dtype=np.float64)

    @property
    def bias_m(self) -> F64:
        """(L,) float64 fixed per-layer range bias (m)."""
        return np.asarray(TABLES[self.preset]["bias"], dtype=np.float64)

    @property
    def column_interval(self) -> float:
        """Seconds between consecutive columns: ``angle_resolution / (360 rotation_speed)``
        (``mirror`` timing) or ``1 / (columns rotation_speed)`` (``period``)."""
        if self.sweep_timing == "period":
            n = sweep_column_count(self.start_angle, self.end_angle, self.angle_resolution)
            return 1.0 / (max(n, 1) * self.rotation_speed)
        return self.angle_resolution / (360.0 * self.rotation_speed)


def mirror_directions(alpha_deg: Floating, pitch_deg: Floating) -> F64:
    """Ray directions of the inclined (45 deg) mirror: the specular reflection of each
    laser off the mirror (seed 000 Fig. 3).

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
    d: F64 = d0 - 2.0 * dot * n
    return d


def flat_mirror_directions(alpha_deg: Floating, pitch_deg: Floating) -> F64:
    """Ray directions of the vertical mirror: azimuth ``alpha``, elevation the layer's
    pitch, ``(-sin a cos L, sin L, -cos a cos L)``.

    Args:
        alpha_deg (C,) float64 column angles; pitch_deg (L,) float64 layer elevations.
    Returns:
        (C, L, 3) float64 unit vectors in the sensor frame.
    """
    a = np.deg2rad(np.asarray(alpha_deg, dtype=np.float64))[:, None]
    p = np.deg2rad(np.asarray(pitch_deg, dtype=np.float64))[None, :]
    d: F64 = np.stack(np.broadcast_arrays(-np.sin(a) * np.cos(p), np.sin(p) + 0 * a, -np.cos(a) * np.cos(p)),
                      axis=-1)
    return d


def line_columns(s: LineSettings, count: int, frame: int, frame_time: float, mode: str) -> tuple[I64, F64]:
    """The columns of a scan in firing order (module docstring: ``sweep_timing``,
    ``rotation_direction``). Sweep k starts at ``k / rotation_speed``; its i-th firing is
    at ``k / rotation_speed + i * column_interval`` and is column ``i`` (ccw) or
    ``count - 1 - i`` (cw).

    ``mode="single"``: one sweep starting at ``frame * frame_time``. ``mode="range"``:
    every firing whose time falls in ``[frame, frame + 1) * frame_time`` (the same firing
    time decides for both neighbouring frames, so frames tile time exactly).

    Returns:
        column (C,) int64 index within its sweep (its angle: ``start_angle + column *
        angle_resolution``), timestamp (C,) float64 s.
    """
    dt = s.column_interval
    rate = float(s.rotation_speed)
    i = np.arange(count, dtype=np.int64)
    col = i if s.rotation_direction == "ccw" else count - 1 - i

    def times(k: I64) -> F64:  # (K, count): the period timing as the original wrote it
        if s.sweep_timing == "period":
            return (k[:, None] * count + i[None, :]) / (count * rate)
        return k[:, None] / rate + (i * dt)[None, :]

    if mode != "range":
        return col, frame * frame_time + times(np.zeros(1, np.int64))[0]
    lo, hi = frame * frame_time, (frame + 1) * frame_time
    k = np.arange(int(math.floor(lo * rate)) - 1, int(math.floor(hi * rate)) + 1, dtype=np.int64)
    t = times(k).ravel()
    tol = 1e-6 * dt + 8 * np.spacing(abs(hi))  # far below a column interval, above t's rounding
    keep = (t >= lo - tol) & (t < hi - tol)
    return np.tile(col, k.shape[0])[keep], t[keep]


class Line(SweptSensor[LineSettings]):
    """The mirror line scanner (see the module docstring)."""

    name = "line"
    label = "Line scanner"
    description = "Four layers swept by a turning mirror (Ibeo LUX)"
    Settings = LineSettings
    presets = PRESETS
    storage = "line"
    number = 1  # stored value of sensor_type (saved files keep it)

    def channel_elevations(self, s: LineSettings) -> F64:
        return s.pitch_deg

    def lasers(self, s: LineSettings) -> int:
        return len(s.pitch_deg)

    def directions(self, s: LineSettings, angle_deg: F64) -> F64:
        if s.mirror == "inclined":
            return mirror_directions(angle_deg, s.pitch_deg)
        return flat_mirror_directions(angle_deg, s.pitch_deg)

    def grid_shape(self, s: LineSettings, frame: int, frame_time: float, mode: str,
                   camera: CameraFrame | None) -> tuple[int, ...]:
        return (self.lasers(s), int(self.column_times(s, frame, frame_time, mode)[0].shape[0]))

    def column_times(self, s: LineSettings, frame: int, frame_time: float, mode: str) -> tuple[I64, F64]:
        """:func:`line_columns`: the columns in firing order and their times."""
        return line_columns(s, self.columns(s), frame, frame_time, mode)

    def measure(self, s: LineSettings, pattern: RayPattern, r: F64, rng: np.random.Generator) -> F64:
        """``r + bias[layer] + N(noise_mu, noise_sigma)``, quantized to
        ``range_resolution`` (m) when it is > 0 (the LUX reports 4 cm steps)."""
        bias = s.bias_m[pattern.channel.astype(np.int64)]
        noise: F64 = rng.normal(s.noise_mu, s.noise_sigma, r.shape[0]) if s.noise_sigma > 0 \
            else np.full(r.shape[0], s.noise_mu)
        out = r + bias + noise
        if s.range_resolution > 0:
            out = np.round(out / s.range_resolution) * s.range_resolution
        return out


SENSOR = Line()
