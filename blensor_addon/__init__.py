"""BlenSor: range-sensor simulation for Blender.

LiDAR scans of Blender scenes with exact ground truth (clean and noisy points, object
ids, intensities, timestamps). Sensor settings live on camera data
(``camera.data.blensor``); see README.md.

Python API (inside Blender or with pip ``bpy``)::

    import blensor_addon
    blensor_addon.register()          # once, if not enabled as an add-on
    result = blensor_addon.scan(bpy.data.objects["Camera"], seed=0)
    blensor_addon.scan_range(cam, range(1, 11), "out/", formats=("npz", "evd", "pcd"))
    blensor_addon.import_calibration(cam, "VLP16db.yaml")   # a unit's own calibration

Extension points: :func:`register_sensor` and :func:`register_writer` add a sensor type
or a file format from outside the package (pip-installed plug-ins use the entry-point
groups ``blensor.sensors`` and ``blensor.writers``); see ``examples/custom_sensor/``.

``core`` imports no Blender module and can be used on its own.
"""
from __future__ import annotations

from .core.version import __version__ as __version__  # the public name


def register() -> None:
    """Register properties, panels and operators (idempotent)."""
    from . import ui
    ui.register()


def unregister() -> None:
    """Undo :func:`register` (idempotent)."""
    from . import ui
    ui.unregister()


def _refresh_ui() -> None:
    """Re-register the add-on's classes (if registered) so that the property groups and
    enums include what was registered since; stored values are kept (Blender keeps them
    in the file's ID properties). The UI module is not imported here: not loaded, it is
    not registered (and a plain-Python caller needs no Blender)."""
    import sys
    ui = sys.modules.get(f"{__name__}.ui")
    if ui is not None and ui.registered():
        ui.unregister()
        ui.register()


def register_sensor(sensor):
    """Add a sensor type from outside the package.

    ``sensor``: an instance of a :class:`blensor_addon.core.sensors.Sensor` subclass
    (its ``name``, ``Settings`` dataclass of :func:`blensor_addon.core.settings.setting`
    fields, presets, patterns and physics; optional ``number``, the value Blender stores
    for it in ``sensor_type``, >= 1024, else derived from its name). It is then scanned
    like a built-in type (``scan(cam, sensor_type=NAME)``, ``--set sensor_type=NAME``),
    and, when the add-on is registered, its settings appear on cameras and in the panel.
    Returns the sensor.

    Raises:
        SettingsError (``sensor``): not a Sensor, a duplicate or bad name or number,
        settings without metadata, or defaults/presets that do not validate.
    """
    from .core.sensors import register_sensor as _register_sensor
    added = _register_sensor(sensor)
    _refresh_ui()
    return added


def register_writer(writer_cls):
    """Add a file format from outside the package.

    ``writer_cls``: a :class:`blensor_addon.io.formats.Writer` subclass (its ``name``,
    ``description``, ``files``, ``outputs`` regular expressions, ``Options`` dataclass
    and :meth:`~blensor_addon.io.formats.Writer.frame_files`; optional ``flag_bit`` in
    [16, 30], the bit Blender stores for it in ``formats``, else derived from its name).
    It is then written like a built-in format (``scan_range(..., formats=(NAME,))``,
    ``--formats NAME``, ``--option NAME.KEY=VALUE``). Returns the class.

    Raises:
        SettingsError (``writer``): not a Writer subclass, a duplicate or bad name or
        bit, options without metadata, or bad output patterns.
    """
    from .io.formats import register_writer as _register_writer
    added = _register_writer(writer_cls)
    _refresh_ui()
    return added


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


def open_blend(path):
    """Open the .blend file at ``path`` (``bpy.ops.wm.open_mainfile``) with Blender's
    "Read blend: ..." line kept off stdout (Blender's C code prints it to file descriptor
    1, past ``sys.stdout``, into the script's own output; ``blensor`` drops it the same
    way). Call :func:`register` first, as for a file opened with ``open_mainfile``.
    Returns the open file's scene (``bpy.context.scene``).

    Raises:
        RuntimeError: Blender could not read the file (its message), as ``open_mainfile``.
    """
    import os
    import sys

    import bpy
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        bpy.ops.wm.open_mainfile(filepath=os.fspath(path))
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    return bpy.context.scene


def import_calibration(camera_object, path):
    """Store the calibration file at ``path`` (Velodyne ROS ``.yaml`` or ``db.xml``,
    Ouster metadata ``.json``, Hesai angle-correction ``.csv``; see
    :mod:`blensor_addon.io.calib`) in the camera's ``calibration`` setting: the rotating
    LiDAR then uses this unit's per-laser table instead of its preset's. Returns the
    :class:`~blensor_addon.core.sensors.calibration.LaserTable`. The .blend on disk is
    not changed (save it, or use ``blensor calib import``, which saves atomically).

    Raises:
        SettingsError: ``calibration`` / ``calibration.<field>`` naming what is wrong in
        the file (the camera is unchanged), or ``camera``.
    """
    from .jobs.calib_import import import_calibration as _import
    return _import(camera_object, path)


def clear_calibration(camera_object) -> None:
    """Drop the camera's imported calibration: its preset's table is used again.

    Raises:
        SettingsError (``camera``): not a camera with BlenSor's settings.
    """
    from .jobs.calib_import import store_calibration
    store_calibration(camera_object, None)
