"""A sensor and a file format from outside BlenSor, scanning the demo scene.

Usage: ``.venv/bin/python examples/custom_sensor/run.py OUT_DIR [SCENE.blend]``

Defines a fixed-pattern "fan" scanner (a few laser planes, every ray fired at once, like
a flash LiDAR) and an XYZ text writer in this file, registers both with
``blensor_addon.register_sensor`` / ``blensor_addon.register_writer``, and scans frames
1-3 of ``scenes/crossing.blend`` with the demo's camera into ``OUT_DIR`` in the new
format (``xyz/scan<frame>.xyz``) and in npz (for comparison), in REP-103 axes (x ahead,
y left, z up). Nothing inside the
``blensor_addon`` package is edited.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

import blensor_addon
from blensor_addon.core.sensors import Sensor
from blensor_addon.core.sensors.raypattern import RayPattern, angles_of
from blensor_addon.core.settings import SensorSettings, setting
from blensor_addon.io.formats import Writer

SCENE = Path(__file__).resolve().parents[2] / "scenes" / "crossing.blend"


# ---------------------------------------------------------------------------------------
# the sensor: settings with metadata, a fixed ray pattern


@dataclasses.dataclass(frozen=True)
class FanSettings(SensorSettings):
    """Settings of the fan scanner: ``columns`` rays per plane spread evenly over
    ``fov`` degrees of azimuth (centred ahead), one plane per elevation (deg), returns up
    to ``max_range`` m. The common settings (seed, max_bounces, ...) come from
    SensorSettings."""

    columns: int = setting(181, "Columns", "Rays per plane", lo=2, hi=10000)
    fov: float = setting(90.0, "Field of view", "Azimuth spread of each plane, centred ahead", "deg",
                         lo=0.0, hi=360.0, lo_open=True)
    elevations: tuple = setting((-8.0, -4.0, 0.0, 4.0), "Elevations", "Elevation of each plane", "deg",
                                lo=-90.0, hi=90.0, count=(1, 64))
    max_range: float = setting(60.0, "Max range", "Farthest return", "m", lo=0.0, hi=1e5, lo_open=True)


def fan_directions(s: FanSettings) -> np.ndarray:
    """(L * C, 3) float64 unit directions in BlenSor's sensor frame (+X right, +Y up,
    looking down -Z), plane by plane: column c of plane k has azimuth psi_c = -fov / 2 +
    c * fov / (C - 1) (growing toward -X) and elevation e_k, direction
    ``(-cos e sin psi, sin e, -cos e cos psi)``."""
    psi = np.deg2rad(np.linspace(-s.fov / 2.0, s.fov / 2.0, s.columns))[None, :]
    e = np.deg2rad(np.asarray(s.elevations, dtype=np.float64))[:, None]
    d = np.stack(np.broadcast_arrays(-np.cos(e) * np.sin(psi), np.sin(e), -np.cos(e) * np.cos(psi)), axis=-1)
    return d.reshape(-1, 3)


class FanSensor(Sensor):
    """A fixed pattern fired at the frame's time: one image per scene frame (timing
    ``exposure``), a grid of planes x columns."""

    name = "fan"
    label = "Fan scanner (example plug-in)"
    description = "A few laser planes fired at once (examples/custom_sensor)"
    Settings = FanSettings
    number = 4242  # the value Blender stores for it in sensor_type (>= 1024; optional)

    def grid_shape(self, s, frame, frame_time, mode, camera):
        return (len(s.elevations), s.columns)

    def patterns(self, s, frame, frame_time, mode, camera):
        d = fan_directions(s)
        az, el = angles_of(d)
        rows = np.repeat(np.arange(len(s.elevations), dtype=np.uint16), s.columns)
        yield RayPattern(directions=d.astype(np.float32), azimuth=az, elevation=el, channel=rows,
                         ray_index=np.arange(d.shape[0], dtype=np.int64),
                         timestamp=np.full(d.shape[0], frame * frame_time))

    def channel_elevations(self, s):
        return np.asarray(s.elevations, dtype=np.float64)


# ---------------------------------------------------------------------------------------
# the writer: one text file per frame


@dataclasses.dataclass(frozen=True)
class XyzOptions:
    """Options of the XYZ writer (``--option xyz.digits=3``)."""

    digits: int = setting(6, "Digits", "Decimals written per value", lo=1, hi=12)


class XyzWriter(Writer):
    """``xyz/scan<frame:05d>.xyz``: one line per return, ``x y z range`` (m, the points in
    the run's frame of reference and axes), with ``digits`` decimals."""

    name = "xyz"
    description = "XYZ text: x y z range per line (examples/custom_sensor)"
    files = "xyz/scan<frame:05d>.xyz"
    outputs = (r"xyz/scan\d{5}\.xyz",)
    Options = XyzOptions

    def frame_files(self, result):
        rows = np.column_stack([result.xyz.astype(np.float64), result.range.astype(np.float64)])
        fmt = f"%.{self.options.digits}f"
        text = "\n".join(" ".join(fmt % v for v in row) for row in rows)
        return [(f"xyz/scan{result.frame:05d}.xyz", (text + "\n" if len(rows) else "").encode())]


# ---------------------------------------------------------------------------------------


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = Path(argv[0])
    scene = Path(argv[1]) if len(argv) > 1 else SCENE
    import bpy
    blensor_addon.register_sensor(FanSensor())
    blensor_addon.register_writer(XyzWriter)
    blensor_addon.register()  # after the registrations: the camera gets the fan's settings too
    try:
        bpy.ops.wm.open_mainfile(filepath=str(scene))
        cam = bpy.context.scene.camera
        job = blensor_addon.scan_range(cam, range(1, 4), out, formats=("xyz", "npz"), overwrite=True,
                                       axes="ros", sensor_type="fan", columns=121, fov=120.0)
        print(f"{job.status}: {len(job.done)} frames, {job.points} points -> {out}")
        return 0 if job.status == "complete" else 1
    finally:
        blensor_addon.unregister()  # bpy 4.2 crashes and 4.5 hangs at exit while classes are registered


if __name__ == "__main__":
    sys.exit(main())
