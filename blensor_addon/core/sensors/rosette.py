"""Rosette (non-repetitive) LiDARs: seed 003's ``generic_rosette`` and the Livox presets.

The pattern (seed 003, "Generic rosette lidar type"; the same construction as Project
AirSim's ``RosetteScanPattern``, unreal/.../Sensors/UnrealLidar.cpp). A rolling circle
travels around a fixed circle at ``horizontal_rotation_frequency`` f_h and turns at
``vertical_rotation_frequency`` f_v; in the complex plane the tracing point is

    P(t) = 1/2 exp(i a) + 1/2 exp(-i b),   a = 2 pi f_h t + phi_c,   b = 2 pi f_v t - phi_c

(the rolling circle's centre at radius R - r = 1/2, the tracing point at d = 1/2 from it,
"the radius of the tracing point is automatically set so that the polar radius ranges from
0.0 to 1.0"). For f_v > 0 the point turns against the centre's travel: a hypotrochoid with
(R - r) / r = f_v / f_h; for f_v < 0 it turns with it: an epitrochoid with (R + r) / r =
|f_v| / f_h (seed 003: "vertical-rotation-frequency can be negative which generates a
epitrochoid curve"). At t = 0 the tracing point is at polar radius 1 (both angles 0).

Polar radius rho = |P| in [0, 1]; polar angle phi = arg P. ``radial_scaling`` k scales the
tracing point's angular offset from the rolling circle centre's angle (seed 003):
theta = a + k wrap(phi - a), wrap to [-pi, pi). The beam's horizontal angle is theta (seed
003: "the polar angle is used directly as the horizontal angle": 0 ahead, increasing
clockwise seen from above); its elevation is ``vertical_fov_lower + rho (vertical_fov_upper
- vertical_fov_lower)``. Data only where theta mod 360 deg lies within
``horizontal_fov_start..horizontal_fov_end`` (both ends included; start == end, and 0..360,
is the whole circle, as Project AirSim after it normalises both angles modulo 360).

Direction: in the scan frame (x ahead, y right, z down, Project AirSim's NED body axes) the
beam is ``(cos e cos h, cos e sin h, -sin e)``; ``scan_orientation`` (roll, pitch, yaw,
deg; Project AirSim's ``scan_orientation``, R = Rz(yaw) Ry(pitch) Rx(roll)) turns it into
the sensor frame; BlenSor's sensor frame (x right, y up, -z ahead) is then
``(y, -z, -x)``. With the identity orientation the cone's axis (polar radius 0 at
elevation -90 deg) points down; the Livox presets pitch it 90 deg up so that it looks
ahead (-Z of the camera), exactly as Project AirSim's livox types do ("rosette facing
forward along +X axis").

Channels (BlenSor's choice; seed 003 only says "multiple laser beams"): channel c of C is
the same rosette turned by phi_c = 2 pi c / C about the cone's axis (a += phi_c, b -=
phi_c, i.e. P_c = exp(i phi_c) P). Project AirSim instead spreads its channels by small
pitch/yaw offsets that vary within each simulation tick (so its pattern depends on the
tick length); that is not reproduced.

Timing (``stream``): firing n (an integer, any sign) fires at ``t_n = n /
points_per_second`` on channel ``n mod C``: points_per_second over all channels, each at
its own time, the pattern never repeating. A packet is every firing in ``[k P, (k + 1) P)``
with P = 1 / ``report_frequency`` (below 0.5 Hz: one packet per scene frame, seed 003's
"report-frequency ... values < 0.5 same as 0", as often as possible); a single scan at
frame f holds the firings of ``[f T, f T + P)`` (T the frame time). Firings outside the
horizontal FOV are not cast (the packet's count is that of the firings inside it).

Presets (values from Project AirSim core_sim/src/sensors/lidar.cpp, the lidar kinds table;
checked against Livox's user manuals):
- ``generic``: Project AirSim's generic_rosette (1 channel, 100,000 points/s, f_h 11 Hz,
  f_v 100 Hz, -45..-15 deg, 100 m), report frequency 10 Hz (Project AirSim: 0).
- ``livox_mid70``: f_h = 10 (1 + 1/6) - 1/360 Hz (1 1/6 turns per 0.1 s, less 1 deg/s of
  precession), f_v = 170 Hz (18 petals a turn), vertical -90..-54.8 deg (a cone of
  half-angle 35.2 deg: the Mid-70's 70.4 deg circular FOV), radial scaling 0.375, 1
  channel, 100,000 points/s (Mid-70 user manual v1.2: 70.4 deg circular, 100,000
  points/s), 200 m, 10 Hz, scan orientation pitch 90 deg; min range 0.05 m (the manual's
  close-proximity blind zone), range noise 0.02 m (range precision 1 sigma at 20 m).
- ``livox_avia``: the same rosette with 6 channels at 240,000 points/s, 400 m (Avia user
  manual v1.0: 240,000 points/s first return; its non-repetitive FOV is 70.4 x 77.2 deg:
  the preset keeps Project AirSim's 70.4 deg circle), range noise 0.02 m.
- ``livox_mid360`` (BlenSor's, not Project AirSim's): 4 channels, 200,000 points/s, vertical
  -7..52 deg around the horizon over 360 deg (Mid-360 user manual v1.0: 360 x 59 deg,
  -7..52 deg, 200,000 points/s, 10 Hz, 0.1 m blind zone, 70 m at 80 % reflectivity), the
  Livox rosette frequencies, identity scan orientation. The FOV, point rate and packet rate
  are the unit's; the distribution of points inside the band is the rosette's (a third
  of them within 7.4 deg of the 52 deg rim), not the unit's.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict

import numpy as np

from ..axes import blensor_from_frd, rpy_matrix
from ..capabilities import Capabilities, Timing
from ..ndtypes import F64, I64, Bool, Floating, Integer
from ..result import FIELDS
from ..settings import Preset, setting
from .budget import CHUNK_RAYS, refuse_rays
from .raypattern import CameraFrame, RayPattern, angles_of
from .physics import check_min_range, min_range_setting, noise_mu_setting, noise_sigma_setting
from .protocols import Hits
from .returns import ReturnSettings, return_capabilities
from .sensor import Sensor

#: Project AirSim's livox_mid70 / livox_avia rosette (core_sim/src/sensors/lidar.cpp)
LIVOX_H_FREQ = 10.0 * (1.0 + 1.0 / 6.0) - 1.0 / 360.0
LIVOX_V_FREQ = 170.0
#: report frequency below which a packet is one scene frame (seed 003)
MIN_REPORT_FREQUENCY = 0.5

_GENERIC = {"channels": 1, "points_per_second": 100000.0, "horizontal_rotation_frequency": 11.0,
            "vertical_rotation_frequency": 100.0, "horizontal_fov_start": 0.0, "horizontal_fov_end": 360.0,
            "vertical_fov_lower": -45.0, "vertical_fov_upper": -15.0, "radial_scaling": 1.0,
            "max_range": 100.0, "min_range": 0.0, "noise_mu": 0.0, "noise_sigma": 0.0,
            "report_frequency": 10.0, "scan_orientation": (0.0, 0.0, 0.0)}
_LIVOX = {**_GENERIC, "horizontal_rotation_frequency": LIVOX_H_FREQ,
          "vertical_rotation_frequency": LIVOX_V_FREQ,
          "vertical_fov_lower": -90.0, "vertical_fov_upper": -54.8, "radial_scaling": 0.375,
          "scan_orientation": (0.0, 90.0, 0.0)}
PRESETS = {
    "generic": Preset("Generic rosette", dict(_GENERIC), "seed 003 generic_rosette; Project AirSim "
                      "core_sim/src/sensors/lidar.cpp generic_rosette defaults (report frequency 10 Hz)"),
    "livox_mid70": Preset("Livox Mid-70", {**_LIVOX, "channels": 1, "points_per_second": 100000.0,
                                           "max_range": 200.0, "min_range": 0.05, "noise_sigma": 0.02},
                          "seed 003 livox_mid70; Project AirSim lidar.cpp livox_mid70; Livox Mid-70 user "
                          "manual v1.2 (70.4 deg circular, 100,000 points/s, 0.05 m blind zone, 2 cm)"),
    "livox_avia": Preset("Livox Avia", {**_LIVOX, "channels": 6, "points_per_second": 240000.0,
                                        "max_range": 400.0, "noise_sigma": 0.02},
                         "seed 003 livox_avia; Project AirSim lidar.cpp livox_avia; Livox Avia user manual "
                         "v1.0 (240,000 points/s; its 70.4 x 77.2 deg kept as the 70.4 deg circle)"),
    "livox_mid360": Preset("Livox Mid-360 (approximate)",
                           {**_LIVOX, "channels": 4, "points_per_second": 200000.0,
                            "vertical_fov_lower": -7.0, "vertical_fov_upper": 52.0, "max_range": 70.0,
                            "min_range": 0.1, "noise_sigma": 0.02,
                            "scan_orientation": (0.0, 0.0, 0.0)},
                           "Livox Mid-360 user manual v1.0 (360 x 59 deg, -7..52 deg, 200,000 points/s, "
                           "10 Hz); "
                           "the pattern inside the band is the rosette's, not the unit's"),
}


@dataclass(frozen=True)
class RosetteSettings(ReturnSettings):
    """Settings of a rosette LiDAR (seed 003's lidar settings table, same meanings and
    units; angles in degrees, horizontal angles 0 = ahead, increasing clockwise seen from
    above as seed 003 defines them).

    Attributes: preset; channels (number-of-channels); points_per_second (sensor total);
    horizontal_rotation_frequency (Hz, the rolling circle's travel around the fixed one);
    vertical_rotation_frequency (Hz, the rolling circle's own turn; negative: an
    epitrochoid); horizontal_fov_start, horizontal_fov_end (deg, 0..360);
    vertical_fov_lower, vertical_fov_upper (deg, -90..90; polar radius 0 and 1);
    radial_scaling; max_range, min_range (m); noise_mu, noise_sigma (m);
    report_frequency (Hz: one packet every 1 / report_frequency s; below 0.5: one packet
    per scene frame, as seed 003's 0 = "as often as possible"); scan_orientation (roll,
    pitch, yaw deg: Project AirSim's scan orientation of the pattern in the sensor frame,
    x ahead, y right, z down; the Livox presets: pitch 90, the cone looking ahead).
    """

    preset: str = setting("generic", "Sensor", "Sensor model; choosing one sets its values",
                          choices=tuple(PRESETS))
    channels: int = setting(1, "Channels", "Number of simultaneous scan channels", lo=1, hi=256)
    points_per_second: float = setting(100000.0, "Points per second",
                                       "Points fired per second (all channels)", "Hz", lo=0.0, hi=1e8,
                                       lo_open=True)
    horizontal_rotation_frequency: float = setting(11.0, "Horizontal rotation", "Rate at which the rolling "
                                                   "circle travels around the fixed circle", "Hz",
                                                   lo=-1e4, hi=1e4)
    vertical_rotation_frequency: float = setting(100.0, "Vertical rotation", "Angular rate of the rolling "
                                                 "circle (negative: an epitrochoid)", "Hz", lo=-1e5, hi=1e5)
    horizontal_fov_start: float = setting(0.0, "Horizontal FOV start",
                                          "Start of the horizontal field of view (0 ahead, clockwise from "
                                          "above)", "deg", lo=0.0, hi=360.0)
    horizontal_fov_end: float = setting(360.0, "Horizontal FOV end", "End of the horizontal field of view",
                                        "deg", lo=0.0, hi=360.0)
    vertical_fov_lower: float = setting(-45.0, "Vertical FOV lower", "Elevation at polar radius 0", "deg",
                                        lo=-90.0, hi=90.0)
    vertical_fov_upper: float = setting(-15.0, "Vertical FOV upper", "Elevation at polar radius 1", "deg",
                                        lo=-90.0, hi=90.0)
    radial_scaling: float = setting(1.0, "Radial scaling", "Scales the tracing point's angular offset "
                                    "(seed 003)", lo=0.0, hi=100.0, lo_open=True)
    max_range: float = setting(100.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)
    min_range: float = min_range_setting()
    noise_mu: float = noise_mu_setting()
    noise_sigma: float = noise_sigma_setting(0.0)
    report_frequency: float = setting(10.0, "Report frequency", "Packets per second (below 0.5: one packet "
                                      "per scene frame)", "Hz", lo=0.0, hi=1e4)
    scan_orientation: tuple[float, ...] = setting(
        (0.0, 0.0, 0.0), "Scan orientation", "Roll, pitch, yaw of the pattern in the sensor frame (x ahead, "
        "y right, z down; Project AirSim's scan orientation; the Livox presets pitch 90 to look ahead)",
        "deg", lo=-360.0, hi=360.0, count=(3, 3))

    def check(self) -> None:
        check_min_range(self)


# -- the pattern (pure numpy) ------------------------------------------------------------

def rosette_polar(t: Floating, f_h: float, f_v: float, radial_scaling: float = 1.0,
                  phase: F64 | float = 0.0) -> tuple[F64, F64]:
    """The rosette's polar coordinates at times ``t`` (module docstring).

    Args:
        t (N,) float64 s; f_h, f_v Hz (the rolling circle's travel and turn); radial_scaling;
        phase (N,) or scalar rad: the channel's turn phi_c about the axis.
    Returns:
        theta (N,) float64 rad, the horizontal angle (unwrapped near ``a``; clockwise from
        ahead), rho (N,) float64 in [0, 1], the polar radius.
    """
    t = np.asarray(t, dtype=np.float64)
    two_pi = 2.0 * np.pi
    a = two_pi * np.mod(f_h * t, 1.0) + phase  # turns taken modulo 1 first: exact at large t
    b = two_pi * np.mod(f_v * t, 1.0) - phase
    x = 0.5 * np.cos(a) + 0.5 * np.cos(b)
    y = 0.5 * np.sin(a) - 0.5 * np.sin(b)
    rho = np.hypot(x, y)
    dev = np.mod(np.arctan2(y, x) - a + np.pi, two_pi) - np.pi  # offset from the centre's angle
    return a + radial_scaling * dev, rho


def in_horizontal_fov(h_deg: Floating, start: float, end: float) -> Bool:
    """(N,) bool: horizontal angles ``h_deg`` (deg, any value; taken modulo 360) within
    ``start..end`` deg (both included, measured clockwise from ``start``; start == end
    modulo 360 is the whole circle, as Project AirSim's normalised FOV)."""
    span = (end - start) % 360.0
    if span == 0.0:
        return np.ones(np.shape(h_deg), dtype=bool)
    inside: Bool = np.mod(np.asarray(h_deg, dtype=np.float64) - start, 360.0) <= span + 1e-9
    return inside


def scan_rotation(rpy_deg: Sequence[float] | Floating) -> F64:
    """(3, 3) float64 ``Rz(yaw) Ry(pitch) Rx(roll)`` of (roll, pitch, yaw) deg in x ahead,
    y right, z down axes (aerospace order, Project AirSim's ``ToQuaternion(roll, pitch,
    yaw)``): pitch 90 turns the down axis to ahead."""
    r, p, y = np.deg2rad(np.asarray(rpy_deg, dtype=np.float64))
    return rpy_matrix(float(r), float(p), float(y))  # (core/axes.py: the add-on's one)


def beam_directions(h_rad: F64, e_rad: F64, rpy_deg: Sequence[float] = (0.0, 0.0, 0.0)) -> F64:
    """(N, 3) float64 unit directions in BlenSor's sensor frame (x right, y up, -z ahead)
    of beams at horizontal angle ``h_rad`` (clockwise from ahead) and elevation ``e_rad``
    in the scan frame turned by ``scan_orientation`` ``rpy_deg`` (module docstring)."""
    ce = np.cos(e_rad)
    frd = np.stack([ce * np.cos(h_rad), ce * np.sin(h_rad), -np.sin(e_rad)], axis=1)
    if any(v != 0.0 for v in rpy_deg):
        frd = frd @ scan_rotation(rpy_deg).T
    return blensor_from_frd(frd)  # ROS_FROM_BLENSOR.T @ NED_FROM_ROS


def firing_range(points_per_second: float, t0: float, t1: float) -> tuple[int, int]:
    """``(n0, n1)``: the firings n with ``t_n = n / points_per_second`` in ``[t0, t1)``
    s are ``n0 <= n < n1`` (consecutive packets tile the firings exactly)."""
    return (int(math.ceil(t0 * points_per_second - 1e-9)), int(math.ceil(t1 * points_per_second - 1e-9)))


def packet_length(s: RosetteSettings, frame_time: float) -> float:
    """Seconds of one packet: ``1 / report_frequency``, or the scene frame ``frame_time``
    when the report frequency is below :data:`MIN_REPORT_FREQUENCY` (seed 003)."""
    rf = float(s.report_frequency)
    return 1.0 / rf if rf >= MIN_REPORT_FREQUENCY else float(frame_time)


class Firings(TypedDict):
    """The beams of some firings (:func:`firings`), N of each: ``time`` (N,) float64 s,
    ``channel`` (N,) int64, ``h`` (N,) float64 rad horizontal angle (clockwise from ahead,
    not wrapped), ``elevation`` (N,) float64 rad in the scan frame, ``rho`` (N,) float64,
    ``inside`` (N,) bool (within the horizontal FOV), ``directions`` (N, 3) float64 in
    BlenSor's sensor frame."""

    time: F64
    channel: I64
    h: F64
    elevation: F64
    rho: F64
    inside: Bool
    directions: F64


def firings(s: RosetteSettings, n: Integer) -> Firings:
    """The beams of firings ``n`` (int64 (N,)) under settings ``s``: ``time`` (N,) s,
    ``channel`` (N,) int64, ``h`` (N,) rad horizontal angle (clockwise from ahead, not
    wrapped), ``elevation`` (N,) rad in the scan frame, ``rho`` (N,), ``inside`` (N,)
    bool (within the horizontal FOV), ``directions`` (N, 3) float64 BlenSor frame."""
    n = np.asarray(n, dtype=np.int64)
    C = int(s.channels)
    t = n / float(s.points_per_second)
    ch = np.mod(n, C)
    h, rho = rosette_polar(t, s.horizontal_rotation_frequency, s.vertical_rotation_frequency,
                           s.radial_scaling, phase=2.0 * np.pi * ch / C)
    e = np.deg2rad(s.vertical_fov_lower + rho * (s.vertical_fov_upper - s.vertical_fov_lower))
    inside = in_horizontal_fov(np.rad2deg(h), s.horizontal_fov_start, s.horizontal_fov_end)
    return {"time": t, "channel": ch, "h": h, "elevation": e, "rho": rho, "inside": inside,
            "directions": beam_directions(h, e, s.scan_orientation)}


class IdealSettings(Protocol):
    """What :func:`ideal_returns` and :func:`gaussian_range` read of a sensor's settings
    (the rosette's, the cylindrical LiDAR's): m."""

    @property
    def max_range(self) -> float: ...

    @property
    def noise_mu(self) -> float: ...

    @property
    def noise_sigma(self) -> float: ...


def ideal_returns(hits: Hits, s: IdealSettings) -> Bool:
    """(N,) bool: seed 003's ideal sensor: every ray that ends on a surface within
    ``max_range`` whose returned reflectivity is above 0 returns (no reflectivity limit)."""
    refl = hits.reflectivity if hits.returned is None else hits.returned
    return hits.hit & (hits.range <= s.max_range) & (refl > 0.0)


def gaussian_range(s: IdealSettings, r: F64, rng: np.random.Generator) -> F64:
    """(N,) float64 m: ``r + N(noise_mu, noise_sigma)`` (``r + noise_mu`` when sigma is 0)."""
    if s.noise_sigma > 0:
        return r + rng.normal(s.noise_mu, s.noise_sigma, r.shape[0])
    return r + s.noise_mu


class Rosette(Sensor[RosetteSettings]):
    """Rosette LiDAR (see the module docstring): timing ``stream``, no grid."""

    name = "rosette"
    label = "Rosette LiDAR"
    description = "Non-repetitive rosette scan (seed 003 generic_rosette, Livox Mid-70, Avia, Mid-360)"
    Settings = RosetteSettings
    presets = PRESETS
    storage = "rosette"
    number = 6
    period_setting = "report_frequency"

    def _span(self, s: RosetteSettings, frame: int, frame_time: float, mode: str) -> tuple[float, float]:
        t0 = frame * frame_time
        return (t0, (frame + 1) * frame_time) if mode == "range" else (t0, t0 + packet_length(s, frame_time))

    def grid_shape(self, s: RosetteSettings, frame: int, frame_time: float, mode: str,
                   camera: CameraFrame | None) -> tuple[int, ...]:
        return ()

    def check_budget(self, s: RosetteSettings, frame: int, frame_time: float, mode: str,
                     camera: CameraFrame | None) -> int:
        """Firings in the packet (FOV cut not counted); refused above the ray budget,
        naming ``points_per_second``."""
        n0, n1 = firing_range(s.points_per_second, *self._span(s, frame, frame_time, mode))
        refuse_rays(n1 - n0, "points_per_second", s.points_per_second, grows=True, unit="Hz")
        return n1 - n0

    def channel_elevations(self, s: RosetteSettings) -> F64:
        return np.zeros(int(s.channels))

    def capabilities(self, s: RosetteSettings, camera: CameraFrame | None = None) -> Capabilities:
        """Timing ``stream`` of :func:`packet_length` (None below 0.5 Hz: scene frames),
        no grid; the return settings (:func:`~.returns.return_capabilities`)."""
        rf = float(s.report_frequency)
        period = 1.0 / rf if rf >= MIN_REPORT_FREQUENCY else None
        deskew = ("xyz_deskewed", "xyz_noisy_deskewed") if s.deskew else ()
        multi = ("return_number", "number_of_returns") if s.multi_return else ()
        return Capabilities(timing=Timing("stream", period, setting=self.period_setting), grid=None,
                            fields=(*FIELDS, *deskew, *multi), max_range=self.reported_range(s),
                            min_range=float(s.min_range), **return_capabilities(s))

    def patterns(self, s: RosetteSettings, frame: int, frame_time: float, mode: str,
                 camera: CameraFrame | None) -> Iterator[RayPattern]:
        """The firings of the packet inside the horizontal FOV, in firing order;
        ``ray_index`` = the firing's position in the packet."""
        n0, n1 = firing_range(s.points_per_second, *self._span(s, frame, frame_time, mode))
        for i in range(n0, max(n0 + 1, n1), CHUNK_RAYS):
            n = np.arange(i, min(n1, i + CHUNK_RAYS), dtype=np.int64)
            f = firings(s, n)
            k = f["inside"]
            d = f["directions"][k]
            az, el = angles_of(d)
            yield RayPattern(directions=d.astype(np.float32), azimuth=az, elevation=el,
                             channel=f["channel"][k].astype(np.uint16), ray_index=n[k] - n0,
                             timestamp=f["time"][k])

    def returns(self, s: RosetteSettings, pattern: RayPattern, hits: Hits) -> Bool:
        return ideal_returns(hits, s)

    def measure(self, s: RosetteSettings, pattern: RayPattern, r: F64, rng: np.random.Generator) -> F64:
        return gaussian_range(s, r, rng)


SENSOR = Rosette()
