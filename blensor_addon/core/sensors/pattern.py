"""Pattern-file LiDARs: a sensor whose rays come from a file (MEMS and solid-state units,
custom laser configurations; seed 004 "Scan Patterns", "Custom Laser Configuration").

CONTRACT STUB (issue 23): the setting names ``pattern_file`` and ``pattern_period`` are
fixed (the Unity importer maps MEMS sensors onto them); the file layout, its reader and
the physics are filled by the pattern-file part. Per firing: azimuth, elevation, time
offset, channel (CSV or .npy, a documented header), optionally per-laser origins,
repeated every ``pattern_period`` s.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..settings import Preset, setting
from .physics import min_range_setting, noise_mu_setting, noise_sigma_setting
from .returns import ReturnSettings
from .sensor import Sensor

PRESETS = {
    "file": Preset("Pattern file", {}, "issue 23: a pattern file"),
}


@dataclass(frozen=True)
class PatternSettings(ReturnSettings):
    """Settings of a pattern-file LiDAR.

    Attributes: preset; pattern_file (path of a .csv or .npy pattern; ``//``: relative to
    the .blend); pattern_period (s, the pattern repeats every period; 0: the file's own
    period); max_range, min_range (m); noise_mu, noise_sigma (m).
    """

    preset: str = setting("file", "Sensor", "Sensor model; choosing one sets its values", choices=tuple(PRESETS))
    pattern_file: str = setting("", "Pattern file", "A .csv or .npy file of firings (azimuth, elevation, time, "
                                "channel)", kind="text")
    pattern_period: float = setting(0.0, "Pattern period", "Seconds after which the pattern repeats (0: the "
                                    "file's own)", "s", lo=0.0, hi=3600.0)
    max_range: float = setting(100.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)
    min_range: float = min_range_setting()
    noise_mu: float = noise_mu_setting()
    noise_sigma: float = noise_sigma_setting(0.0)


class Pattern(Sensor):
    """Pattern-file LiDAR (stub; see the module docstring)."""

    name = "pattern"
    label = "Pattern-file LiDAR"
    description = "Rays from a file: MEMS and solid-state patterns, custom laser configurations"
    Settings = PatternSettings
    presets = PRESETS
    storage = "pattern"
    number = 8


SENSOR = Pattern()
