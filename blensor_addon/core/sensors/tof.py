"""Time-of-flight camera (MESA SR4000).

Seed 000 section 3.4 and Eq. 3; reference section 6.4. A ``width`` x ``height`` pixel
camera with horizontal and vertical fields of view ``fov_h``, ``fov_v``; one ray through
each pixel centre (the original aimed at pixel corners, reference 6.4), row 0 at the
top, ``ray_index = row * width + col``; every ray of a frame shares its time stamp.
Measured range ``d + N(noise_mu, noise_sigma)``; with ``backfolding`` on, a continuous-
wave ToF camera cannot tell d from d + k * ``ambiguity_range`` (seed 000 Eq. 3: the
phase wraps), so the measured range (``range_noisy`` and ``xyz_noisy``) is reported
modulo ``ambiguity_range``; ``range`` and ``xyz`` stay the true ground truth. (The
original subtracted max_dist / 2 once, from distances past max_dist / 2.)

SR4000 constants (reference 6.4): 176 x 144 pixels, 43.6 x 34.6 deg, 20 m, noise
N(0, 0.004 m); ambiguity range 5 m, the SR4000's standard 30 MHz modulation (c / 2f = 4.997 m,
"unambiguity distance 5m" with "repeatability (sigma) 4mm", the noise above, in the original
BlenSor's notes from the SR4000 user manual: mgschwan/blensor@9b8ecb3e
release/scripts/addons/blensor/tof.py, "Model 1"; its "Model 2", the 15 MHz option, has 10 m
and 6 mm). Cameras stored before settings version 3 keep the 10 m they scanned with
(:mod:`blensor_addon.ui.props`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Protocol

import numpy as np

from ..ndtypes import F64
from ..settings import Preset, SensorSettings, setting
from .budget import CHUNK_RAYS, MAX_PIXELS_SIDE, refuse_rays
from .raypattern import CameraFrame, RayPattern, angles_of, pinhole_grid, pinhole_intrinsics
from .physics import check_min_range, min_range_setting, noise_mu_setting, noise_sigma_setting
from .sensor import Sensor

PRESETS = {
    "sr4000": Preset("MESA SR4000", {"width": 176, "height": 144, "fov_h": 43.6, "fov_v": 34.6, "max_range": 20.0,
                                     "noise_mu": 0.0, "noise_sigma": 0.004, "ambiguity_range": 5.0},
                     "reference 6.4; seed 000 section 3.4; ambiguity range 5 m at the standard 30 MHz "
                     "(the original's SR4000 notes, mgschwan/blensor release/scripts/addons/blensor/tof.py)"),
}


#: (x_min, x_max, y_min, y_max, z) of a pinhole image's view frame (:func:`~.raypattern.pinhole_grid`)
View = tuple[float, float, float, float, float]


class ReadoutSettings(Protocol):
    """The settings :class:`RollingReadout` reads (ToF and depth camera settings)."""

    @property
    def readout_time(self) -> float: ...

    @property
    def time_model(self) -> str: ...


class RollingReadout:
    """Mixin of the image sensors with a ``readout_time`` setting (ToF, depth camera):
    in continuous time their rows are read out over ``readout_time`` s; in the frame
    model (or with 0) one global-shutter exposure per frame."""

    def exposure_time(self, s: ReadoutSettings) -> float:
        """``readout_time`` (s) in continuous time (a rolling readout), else 0 (global shutter)."""
        return s.readout_time if s.time_model == "continuous" else 0.0


def readout_setting() -> float:
    """The rolling-readout setting of the image sensors (ToF, depth camera):
    ``readout_time`` s in [0, 1], 0 = global shutter (one exposure per frame)."""
    return setting(0.0, "Readout time", "Continuous time: seconds to read the rows out, top row first (a rolling "
                   "shutter); 0 = global shutter", "s", lo=0.0, hi=1.0, precision=5)


@dataclass(frozen=True)
class TofSettings(SensorSettings):
    """Settings of the ToF camera (reference 6.4).

    Attributes (units): preset; width, height (px, 1..16384); fov_h, fov_v (deg,
    (0, 180)); max_range (m); min_range (m, < max_range; measured ranges below it, after
    backfolding, are not reported; 0 = none); noise_mu, noise_sigma (m); backfolding (bool);
    ambiguity_range (m, > 0); readout_time (s, [0, 1]: continuous time, rows read out
    top first over this time; 0 = global shutter).
    """

    preset: str = setting("sr4000", "Sensor", "Sensor model; choosing one sets its values", choices=tuple(PRESETS))
    width: int = setting(176, "Width", "Pixels per row", "px", lo=1, hi=MAX_PIXELS_SIDE)
    height: int = setting(144, "Height", "Pixel rows", "px", lo=1, hi=MAX_PIXELS_SIDE)
    fov_h: float = setting(43.6, "Horizontal FOV", "Horizontal field of view", "deg", lo=0.0, hi=180.0,
                           lo_open=True, hi_open=True)
    fov_v: float = setting(34.6, "Vertical FOV", "Vertical field of view", "deg", lo=0.0, hi=180.0,
                           lo_open=True, hi_open=True)
    max_range: float = setting(20.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)
    min_range: float = min_range_setting()
    noise_mu: float = noise_mu_setting("pixel")
    noise_sigma: float = noise_sigma_setting(0.004, "pixel")
    backfolding: bool = setting(False, "Backfolding", "Report the measured range modulo the ambiguity range "
                                "(seed 000 Eq. 3)")
    ambiguity_range: float = setting(5.0, "Ambiguity range", "Range at which the phase wraps (c / 2f: 5 m at "
                                     "the SR4000's standard 30 MHz, 10 m at 15 MHz)", "m", lo=0.0,
                                     hi=1e5, lo_open=True)
    readout_time: float = readout_setting()

    def check(self) -> None:
        check_min_range(self)


def pixel_rows_per_chunk(width: int) -> int:
    """Image rows cast at once (about CHUNK_RAYS rays, at least one row)."""
    return max(1, CHUNK_RAYS // max(1, int(width)))


def image_patterns(width: int, height: int, frame_: View, stamp: float,
                   readout: float = 0.0) -> Iterator[RayPattern]:
    """Chunks of a pinhole image's rays (see :func:`~.raypattern.pinhole_grid`) taken at time
    ``stamp`` (s): yields RayPattern, row-major, row 0 at the top. ``readout`` > 0 (s): a
    rolling shutter, row r at ``stamp + readout * r / height``; 0: a global shutter."""
    step = pixel_rows_per_chunk(width)
    for r0 in range(0, height, step):
        d, idx = pinhole_grid(width, height, *frame_, rows=slice(r0, r0 + step))
        az, el = angles_of(d)
        t = np.full(idx.shape[0], float(stamp)) if readout <= 0 else stamp + readout * (idx // width) / height
        yield RayPattern(directions=d.astype(np.float32), azimuth=az, elevation=el,
                         channel=np.zeros(idx.shape[0], np.uint16), ray_index=idx, timestamp=t)


class Tof(RollingReadout, Sensor[TofSettings]):
    """The ToF camera (see the module docstring)."""

    name = "tof"
    label = "ToF camera"
    description = "Time-of-flight camera with backfolding (MESA SR4000)"
    Settings = TofSettings
    presets = PRESETS
    storage = "tof"
    number = 3  # stored value of sensor_type (saved files keep it)
    organized = True

    def grid_shape(self, s: TofSettings, frame: int, frame_time: float, mode: str,
                   camera: CameraFrame | None) -> tuple[int, ...]:
        return (s.height, s.width)

    def check_budget(self, s: TofSettings, frame: int, frame_time: float, mode: str,
                     camera: CameraFrame | None) -> int:
        refuse_rays(s.width * s.height, "width", s.width, grows=True, unit="px")
        return s.width * s.height

    @staticmethod
    def view(s: TofSettings) -> View:
        """(x_min, x_max, y_min, y_max, z) of the pixel grid at z = -1 (``fov_h``, ``fov_v``)."""
        tx, ty = np.tan(np.deg2rad(s.fov_h) / 2.0), np.tan(np.deg2rad(s.fov_v) / 2.0)
        return (-tx, tx, -ty, ty, -1.0)

    def patterns(self, s: TofSettings, frame: int, frame_time: float, mode: str,
                 camera: CameraFrame | None) -> Iterator[RayPattern]:
        return image_patterns(s.width, s.height, self.view(s), frame * frame_time, self.exposure_time(s))

    def intrinsics(self, s: TofSettings, camera: CameraFrame | None) -> tuple[float, ...]:
        return pinhole_intrinsics(s.width, s.height, *self.view(s))

    def measure(self, s: TofSettings, pattern: RayPattern, r: F64, rng: np.random.Generator) -> F64:
        out = r + (rng.normal(s.noise_mu, s.noise_sigma, r.shape[0]) if s.noise_sigma > 0 else s.noise_mu)
        if s.backfolding:
            out = np.mod(out, s.ambiguity_range)
        return out


SENSOR = Tof()
