"""Generic cylindrical LiDAR: seed 003's ``generic_cylindrical``.

CONTRACT STUB (issue 23): the settings below are fixed (the config importers map seed
003's fields onto them by these names); the pattern and timing are filled by the patterns
part. Seed 003 ("Generic cylindrical lidar type"): ``channels`` beams equally spaced over
the vertical field of view sweep 360 deg at ``rotation_frequency``; data only inside the
horizontal field of view; ``points_per_second`` for the whole sensor.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import Preset, setting
from .physics import min_range_setting, noise_mu_setting, noise_sigma_setting
from .returns import ReturnSettings
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
    (Hz, revolutions per second: seed 003 horizontal-rotation-frequency);
    horizontal_fov_start, horizontal_fov_end (deg, 0..360); vertical_fov_lower,
    vertical_fov_upper (deg, -90..90); max_range, min_range (m); noise_mu, noise_sigma (m).
    """

    preset: str = setting("generic", "Sensor", "Sensor model; choosing one sets its values",
                          choices=tuple(PRESETS))
    channels: int = setting(16, "Channels", "Number of lasers, equally spaced over the vertical field of view",
                            lo=1, hi=256)
    points_per_second: float = setting(100000.0, "Points per second", "Points fired per second (all channels)",
                                       "Hz", lo=0.0, hi=1e8, lo_open=True)
    rotation_frequency: float = setting(10.0, "Rotation frequency", "Revolutions per second", "Hz",
                                        lo=0.0, hi=1000.0, lo_open=True)
    horizontal_fov_start: float = setting(0.0, "Horizontal FOV start", "Start of the horizontal field of view "
                                          "(0 ahead, clockwise from above)", "deg", lo=0.0, hi=360.0)
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


class Cylindrical(SweptSensor):
    """Generic cylindrical LiDAR (stub; see the module docstring)."""

    name = "cylindrical"
    label = "Cylindrical LiDAR"
    description = "Channels equally spaced over a vertical field of view, 360 deg sweep (seed 003)"
    Settings = CylindricalSettings
    presets = PRESETS
    storage = "cylindrical"
    number = 7


SENSOR = Cylindrical()
