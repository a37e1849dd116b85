"""Store a unit's calibration in a camera of a .blend: the job behind ``blensor calib
import``, the panel's "Import calibration" and :func:`blensor_addon.import_calibration`.

A calibration file is read into a :class:`~..core.sensors.calibration.LaserTable` by
:mod:`..io.calib`; this module puts the table's JSON into the camera's ``calibration``
setting (a rotating LiDAR's setting, on ``camera.data.blensor``; empty means the preset's
table) and saves the .blend atomically.

What the file lacks comes from the camera's preset when it is the same kind of unit
(:meth:`~..core.sensors.calibration.LaserTable.completed_by`: same vendor and laser count):
the model (a Velodyne YAML names none; the pcap writer needs "VLP-16"), the firing times
and the firing cycle (no Velodyne or Hesai calibration file holds them). An Ouster
metadata file's ``lidar_mode`` ("2048x10") sets the camera's ``angle_resolution`` (360 /
columns) and ``rotation_speed``, and a full-turn sector becomes Ouster's -180..180 deg (its
column order, as the Ouster presets sweep it).

The .blend is saved atomically: Blender writes a temporary sibling, which is
fsynced and renamed over the file, so the .blend on disk is the old one or the new one,
never half of either.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, overload

from ..core.errors import SettingsError
from ..core.sensors.calibration import LaserTable
from ..core.sensors.rotating import check_ouster_mode
from ..core.sensors.rotating_presets import OUSTER_LIDAR_MODES, PRESETS, preset_table

if TYPE_CHECKING:
    import bpy


def _settings(camera_object: bpy.types.Object) -> bpy.types.PropertyGroup:
    """The camera's BlenSor property group (rotating settings live on it directly).

    Raises:
        SettingsError (``camera``): not a camera, or the add-on's properties are not
        registered (``blensor_addon.register()``).
    """
    import bpy

    from ..scene.scanner import sensor_props
    if not isinstance(camera_object, bpy.types.Object) or camera_object.type != "CAMERA":
        name = camera_object.name if isinstance(camera_object, bpy.types.ID) else camera_object
        raise SettingsError("camera", "a camera object", name)
    name = camera_object.name
    props = sensor_props(camera_object)
    if props is None:
        raise SettingsError("camera", "a camera with BlenSor's settings (call blensor_addon.register() "
                            "first)", name)
    return props


def completed_table(table: LaserTable, preset: str) -> LaserTable:
    """``table`` completed by preset ``preset``'s table
    (:meth:`~..core.sensors.calibration.LaserTable.completed_by`: model, firing times and
    cycle where the file has none, when vendor and laser count match); ``table`` itself
    for ``generic`` or a name that is not a rotating preset."""
    if preset not in PRESETS or preset == "generic":
        return table
    return table.completed_by(preset_table(preset))


def ouster_grid(table: LaserTable) -> tuple[float, float] | None:
    """(angle_resolution deg, rotation_speed Hz) of an Ouster table's ``lidar_mode``
    (``extra["lidar_mode"]``, "columns x Hz"): ``(360 / columns, Hz)``; None for another
    vendor or a file without a lidar mode.

    Raises:
        SettingsError (``calibration.lidar_mode``): not one of Ouster's lidar modes.
    """
    mode = table.extra.get("lidar_mode") if table.vendor == "ouster" else None
    if not mode:
        return None
    try:
        columns, hz = (int(v) for v in str(mode).split("x"))
        check_ouster_mode(360.0 / columns, float(hz))
    except (ValueError, ZeroDivisionError, SettingsError):
        raise SettingsError("calibration.lidar_mode", "an Ouster lidar mode (" + ", ".join(
            f"{w}x{r}" for w, r in OUSTER_LIDAR_MODES) + ")", mode) from None
    return 360.0 / columns, float(hz)


@overload
def store_calibration(camera_object: bpy.types.Object, table: LaserTable) -> LaserTable: ...


@overload
def store_calibration(camera_object: bpy.types.Object, table: None) -> None: ...


def store_calibration(camera_object: bpy.types.Object, table: LaserTable | None) -> LaserTable | None:
    """Set the camera's ``calibration`` setting to ``table`` completed by the camera's
    preset (:func:`completed_table`); an Ouster table's lidar mode sets
    ``angle_resolution`` and ``rotation_speed`` (:func:`ouster_grid`), and a full-turn
    sector becomes -180..180 deg (Ouster's column order). None clears the calibration (the
    preset's table is used again; nothing else changes). Returns the table stored (or
    None). The .blend on disk is not changed; on an error nothing is changed.

    Raises:
        SettingsError (``camera``): see :func:`_settings`; (``calibration.lidar_mode``)
        an Ouster table whose lidar mode is not one of the firmware's.
    """
    props = _settings(camera_object)
    if table is None:
        props.calibration = ""
        return None
    table = completed_table(table, props.preset)
    grid = ouster_grid(table)
    if grid is not None:
        props.angle_resolution, props.rotation_speed = grid
        if abs(props.end_angle - props.start_angle - 360.0) < 1e-6:
            props.start_angle, props.end_angle = -180.0, 180.0
    props.calibration = table.to_json()
    return table


def stored_calibration(camera_object: bpy.types.Object) -> LaserTable | None:
    """The camera's imported table, or None when it uses its preset's.

    Raises:
        SettingsError (``camera``; ``calibration``): see :func:`_settings`; a stored
        text that is not a laser table.
    """
    text = _settings(camera_object).calibration
    return LaserTable.from_json(text) if text else None


def import_calibration(camera_object: bpy.types.Object, path: str | os.PathLike[str]) -> LaserTable:
    """Read the calibration file at ``path`` (:func:`..io.calib.read_calibration`) and
    store it in the camera (:func:`store_calibration`); returns the table stored (completed
    by the camera's preset). The file is read before anything is changed.

    Raises:
        SettingsError: ``calibration`` / ``calibration.<field>`` (a bad file, the camera
        untouched) or ``camera``.
    """
    from ..io.calib import read_calibration
    _settings(camera_object)
    return store_calibration(camera_object, read_calibration(path))


def save_blend_atomically(path: str | os.PathLike[str]) -> None:
    """Save the open .blend to ``path`` through a temporary sibling (Blender writes it,
    it is fsynced, then renamed over ``path``); the session keeps its file path. On any
    error the temporary file is removed and ``path`` is unchanged.

    Raises:
        SettingsError (``SCENE.blend``): Blender could not write the file (a read-only
        folder, a full disk), with Blender's reason; or something other than a regular
        file is at ``path`` now (:func:`~..io.atomic.check_target`; left as it was).
    """
    import bpy
    from ..io.atomic import NotRegularError, check_target, remove_quietly, temp_name
    target = Path(path).resolve()
    tmp = temp_name(target)
    try:
        check_target(target)  # (before _is_compressed opens it: a FIFO would block)
        try:
            bpy.ops.wm.save_as_mainfile(filepath=str(tmp), copy=True, check_existing=False,
                                        compress=_is_compressed(target))
        except RuntimeError as exc:
            msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else "not written"
            raise SettingsError("SCENE.blend", f"a .blend Blender can save ({msg})", str(path)) from None
        if not tmp.is_file():
            raise SettingsError("SCENE.blend", "a .blend in a writable folder (Blender wrote nothing)",
                                str(path))
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        check_target(target)
        os.replace(tmp, target)
    except NotRegularError as exc:
        raise SettingsError("SCENE.blend", "a .blend that is a regular file (never a FIFO, device, socket, "
                            "folder or link)", f"{path} ({exc.kind})") from None
    except OSError as exc:
        raise SettingsError("SCENE.blend", f"a .blend in a writable folder ({exc.strerror})",
                            str(path)) from None
    finally:
        remove_quietly(tmp)


def _is_compressed(path: Path) -> bool:
    """True if the .blend at ``path`` is zstd- or gzip-compressed (saved so again)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    return head == b"\x28\xb5\x2f\xfd" or head[:2] == b"\x1f\x8b"


__all__ = ["completed_table", "ouster_grid", "store_calibration",
           "stored_calibration", "import_calibration", "save_blend_atomically"]
