"""Store a unit's calibration in a camera of a .blend: the job behind ``blensor calib
import``, the panel's "Import calibration" and :func:`blensor_addon.import_calibration`.

A calibration file is read into a :class:`~..core.sensors.calibration.LaserTable` by
:mod:`..io.calib`; this module puts the table's JSON into the camera's ``calibration``
setting (a rotating LiDAR's setting, on ``camera.data.blensor``; empty means the preset's
table) and saves the .blend atomically: Blender writes a temporary sibling, which is
fsynced and renamed over the file, so the .blend on disk is the old one or the new one,
never half of either.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import SettingsError
from ..core.sensors.calibration import LaserTable


def _settings(camera_object):
    """The camera's BlenSor property group (rotating settings live on it directly).

    Raises:
        SettingsError (``camera``): not a camera, or the add-on's properties are not
        registered (``blensor_addon.register()``).
    """
    name = getattr(camera_object, "name", camera_object)
    if getattr(camera_object, "type", None) != "CAMERA":
        raise SettingsError("camera", "a camera object", name)
    props = getattr(camera_object.data, "blensor", None)
    if props is None or not hasattr(props, "calibration"):
        raise SettingsError("camera", "a camera with BlenSor's settings (call blensor_addon.register() "
                            "first)", name)
    return props


def store_calibration(camera_object, table: LaserTable | None) -> None:
    """Set the camera's ``calibration`` setting to ``table`` (its JSON); None clears it
    (the preset's table is used again). The .blend on disk is not changed.

    Raises:
        SettingsError (``camera``): see :func:`_settings`.
    """
    props = _settings(camera_object)
    props.calibration = "" if table is None else table.to_json()


def stored_calibration(camera_object) -> LaserTable | None:
    """The camera's imported table, or None when it uses its preset's.

    Raises:
        SettingsError (``camera``; ``calibration``): see :func:`_settings`; a stored
        text that is not a laser table.
    """
    text = _settings(camera_object).calibration
    return LaserTable.from_json(text) if text else None


def import_calibration(camera_object, path) -> LaserTable:
    """Read the calibration file at ``path`` (:func:`..io.calib.read_calibration`) and
    store it in the camera (:func:`store_calibration`); returns the table. The file is
    read before anything is changed.

    Raises:
        SettingsError: ``calibration`` / ``calibration.<field>`` (a bad file, the camera
        untouched) or ``camera``.
    """
    from ..io.calib import read_calibration
    _settings(camera_object)
    table = read_calibration(path)
    store_calibration(camera_object, table)
    return table


def save_blend_atomically(path) -> None:
    """Save the open .blend to ``path`` through a temporary sibling (Blender writes it,
    it is fsynced, then renamed over ``path``); the session keeps its file path. On any
    error the temporary file is removed and ``path`` is unchanged.

    Raises:
        SettingsError (``SCENE.blend``): Blender could not write the file (a read-only
        folder, a full disk), with Blender's reason.
    """
    import bpy
    from ..io.atomic import remove_quietly, temp_name
    target = Path(path).resolve()
    tmp = temp_name(target)
    try:
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
        os.replace(tmp, target)
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


__all__ = ["store_calibration", "stored_calibration", "import_calibration", "save_blend_atomically"]
