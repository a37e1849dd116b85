"""Depth camera with the Blender camera's own intrinsics (float depth maps).

Reference section 6.6 (the original's depth map rendered a Z buffer and assumed a 32 mm
sensor, ignoring the camera's sensor settings). Here every pixel of the render
resolution (times its percentage) casts one ray through its centre, through the view
frame Blender itself projects with (:class:`~.raypattern.CameraFrame`: lens or field of
view, sensor size and fit, shift, pixel aspect), so pixel (row, col) is the pixel
``world_to_camera_view`` puts the point in (row 0 at the top). Per pixel: planar depth
z (= -z of the point in the sensor frame), radial range, object id, normal, intensity;
misses are NaN in the image. No noise unless ``noise_sigma`` is set.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..errors import SettingsError
from ..ndtypes import F64
from ..settings import SensorSettings, setting
from .budget import refuse_rays
from .raypattern import CameraFrame, RayPattern, pinhole_intrinsics
from .physics import check_min_range, min_range_setting, noise_mu_setting, noise_sigma_setting
from .sensor import Sensor
from .tof import RollingReadout, image_patterns, readout_setting


@dataclass(frozen=True)
class DepthSettings(SensorSettings):
    """Settings of the depth camera. Attributes (units): max_range (m); min_range (m,
    < max_range: measured ranges below it are not reported, 0 = none); noise_mu,
    noise_sigma (m, range noise, default none); readout_time (s, [0, 1]: continuous
    time, a rolling shutter reading the rows out top first; 0 = global shutter)."""

    max_range: float = setting(1000.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e6, lo_open=True)
    min_range: float = min_range_setting()
    noise_mu: float = noise_mu_setting("pixel")
    noise_sigma: float = noise_sigma_setting(0.0, "pixel")
    readout_time: float = readout_setting()

    def check(self) -> None:
        check_min_range(self)


class Depth(RollingReadout, Sensor[DepthSettings]):
    """The depth camera (see the module docstring)."""

    name = "depth"
    label = "Depth camera"
    description = "Per-pixel depth and range through the Blender camera's own projection"
    Settings = DepthSettings
    presets = {}
    storage = "depth"
    number = 5  # stored value of sensor_type (saved files keep it)
    uses_camera = True
    organized = True

    @staticmethod
    def _camera(camera: CameraFrame | None) -> CameraFrame:
        if camera is None:
            raise SettingsError("camera", "a perspective Blender camera (the depth sensor uses its intrinsics)", None)
        return camera

    def grid_shape(self, s: DepthSettings, frame: int, frame_time: float, mode: str,
                   camera: CameraFrame | None) -> tuple[int, ...]:
        c = self._camera(camera)
        return (c.height, c.width)

    def check_budget(self, s: DepthSettings, frame: int, frame_time: float, mode: str,
                     camera: CameraFrame | None) -> int:
        c = self._camera(camera)
        refuse_rays(c.width * c.height, "resolution", c.width, grows=True, unit="px wide")
        return c.width * c.height

    def patterns(self, s: DepthSettings, frame: int, frame_time: float, mode: str,
                 camera: CameraFrame | None) -> Iterator[RayPattern]:
        c = self._camera(camera)
        return image_patterns(c.width, c.height, (c.x_min, c.x_max, c.y_min, c.y_max, c.z), frame * frame_time,
                              self.exposure_time(s))

    def intrinsics(self, s: DepthSettings, camera: CameraFrame | None) -> tuple[float, ...]:
        c = self._camera(camera)
        return pinhole_intrinsics(c.width, c.height, c.x_min, c.x_max, c.y_min, c.y_max, c.z)

    def measure(self, s: DepthSettings, pattern: RayPattern, r: F64, rng: np.random.Generator) -> F64:
        if s.noise_sigma == 0 and s.noise_mu == 0:
            return r
        return r + (rng.normal(s.noise_mu, s.noise_sigma, r.shape[0]) if s.noise_sigma > 0 else s.noise_mu)


SENSOR = Depth()
