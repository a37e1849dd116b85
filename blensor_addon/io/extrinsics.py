"""A rig's extrinsics files: the extrinsics of every sensor relative to a rig base object
in a calibration file (KITTI-style and a JSON). numpy only.

Every transform is ``base_to_sensor``: the pose of the sensor's frame in the rig's base
frame, so it maps points from the sensor frame to the base frame (``p_base = T @
p_sensor``), both in REP-103 axes (x ahead, y left, z up; a sensor's frame as its
rosbag2 frame ``<name>``: for a camera-like sensor, the REP-103 body frame, not its
optical frame). Translations in m.

``calib_rig.txt`` (KITTI-style, as KITTI's ``calib.txt`` / ``calib_velo_to_cam.txt``:
every line ``KEY: 12 numbers``, the matrix's top three rows row-major, no comment or
other line, since KITTI's tools (SemanticKITTI's, pykitti's ``read_calib_file``) parse
every line that way)::

    Tr_<name>_to_base: r11 r12 r13 tx r21 r22 r23 ty r31 r32 r33 tz

one line per sensor in the rig's order; the key says the direction as KITTI's
``Tr_velo_to_cam`` does (points of ``<name>`` into the base frame); the base's name and
the axes are in ``extrinsics.json``. Numbers are Python's shortest round-trip decimal of
the float64 (reading gives the matrix back exactly), a value within 1e-15 of 0 written
as 0.0.

``extrinsics.json`` (one sensor a line)::

    {"format": "blensor-rig-extrinsics", "version": 1, "base": <base name>,
     "axes": "REP-103 ...", "transform": "base_to_sensor ...", "rpy": "...",
     "quaternion": "...",
     "sensors": [{"name": <name>, "frame_id": <name>, "matrix": 4 x 4 rows,
                  "translation": [x, y, z] m, "quaternion_xyzw": [x, y, z, w],
                  "rpy_deg": [roll, pitch, yaw]}, ...]}

``rpy_deg``: REP-103 fixed-axis roll, pitch, yaw (deg) about the base's x, y, z:
``R = Rz(yaw) Ry(pitch) Rx(roll)`` (as rosbag2's ``base_to_sensor`` option and ROS's
``static_transform_publisher``), pitch in [-90, 90]; ``quaternion_xyzw`` the unit
quaternion with w >= 0 (tf2's order).
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from ..core.axes import matrix_rpy, quaternion_xyzw
from ..core.errors import SettingsError
from .safeload import load_json

if TYPE_CHECKING:
    from ..core.ndtypes import F64
    from .atomic import StrPath

CALIB_NAME = "calib_rig.txt"
JSON_NAME = "extrinsics.json"
#: how far a rotation may be from orthonormal (max |R R^T - I|) and the last row from
#: (0, 0, 0, 1)
RIGID_TOLERANCE = 1e-6
AXES = "REP-103: x ahead, y left, z up (right-handed)"
TRANSFORM = ("base_to_sensor: the pose of the sensor frame in the base frame; maps points from the sensor "
             "frame to the base frame, p_base = matrix @ p_sensor (homogeneous, m)")
RPY = "rpy_deg: roll, pitch, yaw (deg) about the base's fixed x, y, z axes: R = Rz(yaw) Ry(pitch) Rx(roll)"
QUATERNION = "quaternion_xyzw: unit quaternion of R, (x, y, z, w) with w >= 0"


def check_extrinsics(sensors: Iterable[tuple[str, ArrayLike]], setting: str = "rig") -> None:
    """Refuse a rig's ``sensors`` = [(name, (4, 4) base_to_sensor)] whose transform is
    not a finite rigid transform (shape (4, 4), last row (0, 0, 0, 1), rotation
    orthonormal with determinant +1, within :data:`RIGID_TOLERANCE`).

    Raises:
        SettingsError (``<setting>.<name>.base_to_sensor``): one line naming the sensor.
    """
    for name, T in sensors:
        key = f"{setting}.{name}.base_to_sensor"
        try:
            M = np.asarray(T, dtype=np.float64)
        except (TypeError, ValueError):
            raise SettingsError(key, "a (4, 4) matrix of numbers", T) from None
        if M.shape != (4, 4) or not np.isfinite(M).all():
            raise SettingsError(key, "a finite (4, 4) matrix",
                                f"shape {M.shape}" if M.shape != (4, 4) else M.tolist())
        R = M[:3, :3]
        if (np.abs(M[3] - (0.0, 0.0, 0.0, 1.0)).max() > RIGID_TOLERANCE
                or np.abs(R @ R.T - np.eye(3)).max() > RIGID_TOLERANCE or np.linalg.det(R) < 0):
            raise SettingsError(key, "a rigid transform (rotation orthonormal with det +1 within "
                                f"{RIGID_TOLERANCE:g}, last row 0 0 0 1; no scale)", M.tolist())


def rpy_deg(R: F64) -> tuple[float, float, float]:
    """(roll, pitch, yaw) deg of a (3, 3) rotation, REP-103 fixed axes: ``R = Rz(yaw)
    Ry(pitch) Rx(roll)`` (the inverse of :func:`blensor_addon.io.formats.rosbag2.mount_matrix`'s
    rotation); pitch in [-90, 90]; at pitch +-90 deg roll is 0
    (:func:`~..core.axes.matrix_rpy` in degrees)."""
    roll, pitch, yaw = matrix_rpy(R)
    return math.degrees(roll), math.degrees(pitch), math.degrees(yaw)


def _num(v: float) -> str:
    v = float(v)
    return repr(0.0 if abs(v) < 1e-15 else v)


def _clean(v: float) -> float:
    v = float(v)
    return 0.0 if abs(v) < 1e-15 else v


def calib_rig_text(base_name: str, sensors: Iterable[tuple[str, ArrayLike]]) -> str:
    """The text of ``calib_rig.txt`` (see the module docstring) of ``sensors`` =
    [(name, (4, 4) base_to_sensor)], in order (``base_name`` is not in it: every line
    is ``Tr_<name>_to_base: 12 numbers``; it is in ``extrinsics.json``)."""
    lines = []
    for name, T in sensors:
        M = np.asarray(T, dtype=np.float64)
        lines.append(f"Tr_{name}_to_base: " + " ".join(_num(v) for v in M[:3, :4].ravel()))
    return "\n".join(lines) + "\n"


def extrinsics_json(base_name: str, sensors: Iterable[tuple[str, ArrayLike]]) -> str:
    """The text of ``extrinsics.json`` (see the module docstring)."""
    out: list[dict[str, Any]] = []
    for name, T in sensors:
        M = np.asarray(T, dtype=np.float64)
        out.append({"name": name, "frame_id": name, "matrix": [[_clean(v) for v in row] for row in M],
                    "translation": [_clean(v) for v in M[:3, 3]],
                    "quaternion_xyzw": [_clean(v) for v in quaternion_xyzw(M[:3, :3])],
                    "rpy_deg": [_clean(v) for v in rpy_deg(M[:3, :3])]})
    head = {"format": "blensor-rig-extrinsics", "version": 1, "base": base_name, "axes": AXES,
            "transform": TRANSFORM, "rpy": RPY, "quaternion": QUATERNION}
    lines = [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    items = ",\n".join(f"    {json.dumps(s)}" for s in out)  # one sensor a line
    return "{\n" + "\n".join(lines) + '\n  "sensors": [\n' + items + ("\n" if out else "") + "  ]\n}\n"


def rig_calibration_files(base_name: str,
                          sensors: Iterable[tuple[object, ArrayLike]]) -> list[tuple[str, bytes]]:
    """The rig's extrinsics files, for :func:`blensor_addon.io.atomic.commit_files`.

    Args:
        base_name: the rig base (the object whose frame the transforms are in).
        sensors: [(name, (4, 4) float64 base_to_sensor)] in the rig's order; ``name``
            without whitespace or ``:`` (a ROS name token, as the rig bag's frames).
    Returns:
        [("calib_rig.txt", bytes), ("extrinsics.json", bytes)], UTF-8.
    Raises:
        SettingsError: ``rig.<name>`` (a name with whitespace or ``:``, or repeated),
        ``rig.<name>.base_to_sensor`` (:func:`check_extrinsics`).
    """
    pairs = [(str(n), np.asarray(T, dtype=np.float64)) for n, T in sensors]
    seen = set()
    for name, _ in pairs:
        if not name or ":" in name or any(c.isspace() for c in name) or name in seen:
            raise SettingsError(f"rig.{name}", "a sensor name without spaces or ':', used once", name)
        seen.add(name)
    check_extrinsics(pairs)
    return [(CALIB_NAME, calib_rig_text(base_name, pairs).encode()),
            (JSON_NAME, extrinsics_json(base_name, pairs).encode())]


def read_calib_rig(path: StrPath) -> dict[str, F64]:
    """The transforms of a ``calib_rig.txt`` (or an ``extrinsics.json``, by its suffix).

    Returns:
        name -> (4, 4) float64 base_to_sensor, in the file's order.
    Raises:
        SettingsError (``calib``): naming the file and line (or element) that is not in
        the format of the module docstring; (``PATH line L column C``) JSON nested
        deeper or an integer longer than :func:`~.safeload.load_json` reads.
        OSError: the file cannot be read.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    out: dict[str, F64] = {}
    if path.suffix.lower() == ".json":
        try:
            doc = load_json(text, str(path))
            for k, s in enumerate(doc["sensors"]):
                M = np.array(s["matrix"], dtype=np.float64)
                if M.shape != (4, 4):
                    raise ValueError(f"sensors[{k}].matrix is not 4 x 4")
                out[str(s["name"])] = M
        except SettingsError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise SettingsError("calib", f"an extrinsics.json as BlenSor writes it ({path}: {exc})",
                                str(path)) from None
        return out
    for row, line in enumerate(text.splitlines(), 1):
        key, sep, values = line.partition(":")
        if not line.strip() or not key.startswith("Tr_"):
            continue
        if not sep or not key.endswith("_to_base") or len(key) <= len("Tr__to_base"):
            raise SettingsError("calib", f"lines 'Tr_<name>_to_base: 12 numbers' ({path} line {row})", line)
        try:
            v = np.array([float(x) for x in values.split()], dtype=np.float64)
        except ValueError:
            v = np.zeros(0)
        if v.shape != (12,):
            raise SettingsError("calib", f"12 numbers after '{key}:' ({path} line {row})", values.strip())
        M = np.eye(4)
        M[:3, :4] = v.reshape(3, 4)
        out[key[len("Tr_"):-len("_to_base")]] = M
    return out


__all__ = ["CALIB_NAME", "JSON_NAME", "check_extrinsics", "rpy_deg", "calib_rig_text", "extrinsics_json",
           "rig_calibration_files", "read_calib_rig"]
