"""Rosette (non-repetitive) LiDARs: seed 003's ``generic_rosette`` and the Livox presets.

CONTRACT STUB (issue 23): the settings below are fixed (the config importers map seed 003's
fields onto them by these names); the pattern, timing and presets are filled by the
patterns part. Seed 003 ("Generic rosette lidar type"): beams sweep a cone along a
hypotrochoid (an epitrochoid for a negative ``vertical_rotation_frequency``); the polar
angle of the curve is the beam's horizontal angle, its polar radius (0..1) maps linearly
to ``vertical_fov_lower`` (0) .. ``vertical_fov_upper`` (1).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import Preset, setting
from .physics import min_range_setting, noise_mu_setting, noise_sigma_setting
from .returns import ReturnSettings
from .sensor import Sensor

PRESETS = {
    "generic": Preset("Generic rosette", {}, "seed 003 generic_rosette"),
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
    per scene frame, as seed 003's 0 = "as often as possible").
    """

    preset: str = setting("generic", "Sensor", "Sensor model; choosing one sets its values",
                          choices=tuple(PRESETS))
    channels: int = setting(1, "Channels", "Number of simultaneous scan channels", lo=1, hi=256)
    points_per_second: float = setting(100000.0, "Points per second", "Points fired per second (all channels)",
                                       "Hz", lo=0.0, hi=1e8, lo_open=True)
    horizontal_rotation_frequency: float = setting(10.0, "Horizontal rotation", "Rate at which the rolling "
                                                   "circle travels around the fixed circle", "Hz",
                                                   lo=-1e4, hi=1e4)
    vertical_rotation_frequency: float = setting(0.0, "Vertical rotation", "Angular rate of the rolling "
                                                 "circle (negative: an epitrochoid)", "Hz", lo=-1e5, hi=1e5)
    horizontal_fov_start: float = setting(0.0, "Horizontal FOV start", "Start of the horizontal field of view "
                                          "(0 ahead, clockwise from above)", "deg", lo=0.0, hi=360.0)
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


class Rosette(Sensor):
    """Rosette LiDAR (stub; see the module docstring)."""

    name = "rosette"
    label = "Rosette LiDAR"
    description = "Non-repetitive rosette scan (seed 003 generic_rosette, Livox Mid-70, Avia)"
    Settings = RosetteSettings
    presets = PRESETS
    storage = "rosette"
    number = 6


SENSOR = Rosette()
