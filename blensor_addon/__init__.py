"""BlenSor: range-sensor simulation for Blender.

LiDAR scans of Blender scenes with exact ground truth (clean and noisy points, object
ids, intensities, timestamps). Sensor settings live on camera data
(``camera.data.blensor``); see README.md.

Python API (inside Blender or with pip ``bpy``)::

    import blensor_addon
    blensor_addon.register()          # once, if not enabled as an add-on
    result = blensor_addon.scan(bpy.data.objects["Camera"], seed=0)
    blensor_addon.scan_range(cam, range(1, 11), "out/", formats=("npz", "evd", "pcd"))

``core`` imports no Blender module and can be used on its own.
"""
from __future__ import annotations

__version__ = "0.1.0"

_registered = False


def register() -> None:
    """Register properties, panels and operators (idempotent)."""
    global _registered
    if _registered:
        return
    from . import ui
    ui.register()
    _registered = True


def unregister() -> None:
    """Undo :func:`register` (idempotent)."""
    global _registered
    if not _registered:
        return
    from . import ui
    ui.unregister()
    _registered = False


def scan(camera_object, *, frame=None, seed=None, backend="auto", frame_of_reference="sensor", axes="ros",
         **overrides):
    """Single scan of ``camera_object``; see :func:`blensor_addon.scene.scanner.scan`.

    ``seed=None`` uses the camera's ``seed`` setting (default 0). ``overrides``: setting
    names of the sensor type plus ``sensor_type`` and ``preset``, e.g.
    ``scan(cam, sensor_type="tof", preset="sr4000", backfolding=True)``; the camera's
    stored settings are not changed. ``axes``: sensor-frame points, normals and pose in
    REP-103 axes (``"ros"``, the default: x forward, y left, z up) or the camera's
    (``"blensor"``: x right, y up, looking down -z).
    Returns a :class:`blensor_addon.core.result.ScanResult`.
    """
    from .scene.scanner import scan as _scan
    return _scan(camera_object, frame=frame, seed=seed, backend=backend,
                 frame_of_reference=frame_of_reference, axes=axes, **overrides)


def scan_range(camera_object, frames, out_dir, formats=("npz",), seed=None, **kwargs):
    """Scan ``frames`` into files in ``out_dir``; see :func:`blensor_addon.jobs.range_scan.scan_range`."""
    from .jobs.range_scan import scan_range as _scan_range
    return _scan_range(camera_object, frames, out_dir, formats, seed, **kwargs)
