"""Project AirSim's lidar config (seed 003, "Lidar sensor settings"): the JSON ``sensors``
array read into :class:`~.SensorConfig` s and written back. No bpy.

Each entry of ``sensors`` whose ``type`` is ``lidar`` is one sensor (other entries are
named once and skipped); ``id`` is the camera's name, ``lidar-type`` the sensor type
(seed 003, "Lidar types"):

=====================================  ===========================================
``lidar-type``                         BlenSor sensor type (preset)
=====================================  ===========================================
``generic_cylindrical`` (``-`` too)    ``cylindrical`` (``generic``)
``generic_rosette``                    ``rosette`` (``generic``)
``livox_mid70``, ``livox_avia``        ``rosette`` (preset of that name; the file's
                                       fields override the preset's values)
=====================================  ===========================================

Every lidar field of seed 003's table maps onto a setting of that type (``FIELDS``); the
fields seed 003 says a type ignores (``vertical-rotation-frequency`` and
``radial-scaling`` for ``generic_cylindrical``), the cylindrical sensor's
``report-frequency`` and ``enabled``, ``draw-debug-points`` and ``disable-self-hits`` are
named once each as ignored and kept (``SensorConfig.outputs``) so an export writes them
back. A field seed 003 does not define is named once (``SensorConfig.unknown``), never
dropped silently; a key given twice is refused.

Frames: Project AirSim's are NED (x ahead, y right, z down; a body's x ahead, y right,
z down). ``origin`` (``xyz`` m, ``rpy-deg`` deg or ``rpy`` rad: roll about x, pitch
about y, yaw about z, fixed axes, ``R = Rz(yaw) Ry(pitch) Rx(roll)``) is the sensor's
pose in its ``parent-link``'s NED frame; :attr:`SensorConfig.pose` is REP-103 (x ahead,
y left, z up): ``F = diag(1, -1, -1)``, ``xyz_rep = F xyz_ned``, ``R_rep = F R_ned F``,
so roll stays, pitch and yaw change sign. The horizontal field of view keeps seed 003's
convention (0 ahead, increasing clockwise seen from above), as the cylindrical and
rosette settings do.

The file may hold ``//`` and ``/* */`` comments (Project AirSim's ``.jsonc``). A file
that is not JSON is refused in one line naming its line and column: seed 003's
``livox_mid70`` example is such a file (its ``sensors`` array is never closed) and is
refused at line 15, column 1, as Project AirSim's own JSON reader would refuse it.
"""
from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.axes import NED_FROM_ROS
from ...core.errors import SettingsError
from ...core.sensors import SENSORS
from ...core.settings import setting_value
from ..safeload import load_json
from . import ConfigFormat, SensorConfig
from ._common import (matrix_rpy, num, pose_matrix, read_text, rpy_matrix, settings_of, unexpressed,
                      validated)

if TYPE_CHECKING:
    from ...core.ndtypes import F64
    from ..atomic import StrPath

#: ``lidar-type`` (``-`` read as ``_``) -> (sensor type, preset)
LIDAR_TYPES = {
    "generic_cylindrical": ("cylindrical", "generic"),
    "generic_rosette": ("rosette", "generic"),
    "livox_mid70": ("rosette", "livox_mid70"),
    "livox_avia": ("rosette", "livox_avia"),
}
#: seed 003 lidar fields -> setting, per sensor type (None: no setting of that type)
FIELDS: dict[str, dict[str, str | None]] = {
    "cylindrical": {
        "number-of-channels": "channels", "range": "max_range", "points-per-second": "points_per_second",
        "report-frequency": None, "horizontal-rotation-frequency": "rotation_frequency",
        "horizontal-fov-start-deg": "horizontal_fov_start", "horizontal-fov-end-deg": "horizontal_fov_end",
        "vertical-rotation-frequency": None,
        "vertical-fov-lower-deg": "vertical_fov_lower", "vertical-fov-upper-deg": "vertical_fov_upper",
        "radial-scaling": None,
    },
    "rosette": {
        "number-of-channels": "channels", "range": "max_range", "points-per-second": "points_per_second",
        "report-frequency": "report_frequency",
        "horizontal-rotation-frequency": "horizontal_rotation_frequency",
        "horizontal-fov-start-deg": "horizontal_fov_start", "horizontal-fov-end-deg": "horizontal_fov_end",
        "vertical-rotation-frequency": "vertical_rotation_frequency",
        "vertical-fov-lower-deg": "vertical_fov_lower", "vertical-fov-upper-deg": "vertical_fov_upper",
        "radial-scaling": "radial_scaling",
    },
}
#: seed 003's table names the vertical limits ``vertical-fov-start-deg`` / ``-end-deg``,
#: its sample ``-lower-deg`` / ``-upper-deg``: both are read (start = lower, end = upper)
ALIASES = {"vertical-fov-start-deg": "vertical-fov-lower-deg",
           "vertical-fov-end-deg": "vertical-fov-upper-deg"}
INTEGER_FIELDS = ("number-of-channels", "points-per-second")
#: the booleans seed 003 defines that BlenSor does not use: why, kept for export
FLAGS = {
    "enabled": "blensor config import makes the camera all the same (kept for export); blensor scan "
               "--sensor FILE skips a sensor with enabled false",
    "draw-debug-points": "a Project AirSim viewer option; ignored (kept for export)",
    "disable-self-hits": "not modelled: rays hit every object of the scene, the parent's included; ignored "
                         "(kept for export)",
}
#: fields seed 003 says a type ignores, or that are no setting of it: why
IGNORED = {
    ("cylindrical", "vertical-rotation-frequency"): "ignored by generic_cylindrical (seed 003); kept for "
                                                    "export",
    ("cylindrical", "radial-scaling"): "ignored by generic_cylindrical (seed 003); kept for export",
    ("cylindrical", "report-frequency"): "the cylindrical LiDAR writes one packet per sweep or per scene "
                                         "frame (the packets setting); kept for export",
}
OWN = ("id", "type", "lidar-type", "parent-link", "origin")
#: NED <-> REP-103 (its own inverse; :data:`~...core.axes.NED_FROM_ROS`)
F = NED_FROM_ROS


#: a string, a ``//`` comment or a ``/* */`` comment (an unterminated one runs to the end)
_STRING_OR_COMMENT = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\Z)|//[^\n]*|/\*(?:.*?\*/|.*\Z)', re.S)


def _strip_comments(text: str) -> str:
    """``text`` with ``//`` and ``/* */`` comments outside strings replaced by spaces
    (newlines kept: a JSON error's line and column stay the file's); linear in the text."""

    def blank(m: re.Match[str]) -> str:
        t = m.group()
        return t if t[0] == '"' else re.sub(r"[^\n]", " ", t)

    return _STRING_OR_COMMENT.sub(blank, text)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's (key, value) pairs as a dict; the first key given twice raises
    :class:`_Duplicate` (one pass: a file of 200,000 keys is read in a fraction of a second)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise _Duplicate(k)
            seen.add(k)
    return out


class _Duplicate(Exception):
    pass


def parse_json(text: str, path: str) -> Any:
    """The JSON document of ``text`` (comments allowed), read by
    :func:`~..safeload.load_json` (nesting, integer digits and size bounded).

    Raises:
        SettingsError (``PATH line L column C``): not JSON, nested deeper than
            :data:`~..safeload.MAX_DEPTH`, an integer of more than
            :data:`~..safeload.MAX_INT_DIGITS` digits; (``PATH key K``) a key twice in one
            object."""
    try:
        return load_json(_strip_comments(text), path, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        line = text.splitlines()[exc.lineno - 1] if 0 < exc.lineno <= len(text.splitlines()) else ""
        raise SettingsError(f"{path} line {exc.lineno} column {exc.colno}", f"JSON ({exc.msg})",
                            line.strip()[:60]) from None
    except _Duplicate as exc:
        raise SettingsError(f"{path} key {exc.args[0]!r}", "given once per object", "twice") from None


def _number(where: str, key: str, value: Any, integer: bool = False) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SettingsError(f"{where} {key}", "an integer" if integer else "a number", value)
    if integer:
        if float(value) != int(value):
            raise SettingsError(f"{where} {key}", "an integer", value)
        return int(value)
    return float(value)


def _triple(where: str, key: str, value: Any) -> tuple[float, ...]:
    parts = value.split() if isinstance(value, str) else value
    try:
        vals = tuple(float(v) for v in parts)
    except (TypeError, ValueError):
        vals = ()
    if len(vals) != 3 or not all(math.isfinite(v) for v in vals) or isinstance(parts, (bool, int, float)):
        raise SettingsError(f"{where} origin.{key}", "a string of 3 numbers (\"X Y Z\")", value)
    return vals


def _pose(where: str, origin: object, unknown: list[str]) -> F64:
    """REP-103 pose of an ``origin`` object (module docstring)."""
    if origin is None:
        return np.eye(4)
    if not isinstance(origin, dict):
        raise SettingsError(f"{where} origin", "an object with xyz and rpy-deg (or rpy)", origin)
    for key in origin:
        if key not in ("xyz", "rpy-deg", "rpy"):
            unknown.append(f"origin.{key}")
    if "rpy" in origin and "rpy-deg" in origin:
        raise SettingsError(f"{where} origin", "rpy (rad) or rpy-deg (deg), not both", "both")
    xyz = _triple(where, "xyz", origin["xyz"]) if "xyz" in origin else (0.0, 0.0, 0.0)
    if "rpy-deg" in origin:
        rpy = tuple(math.radians(v) for v in _triple(where, "rpy-deg", origin["rpy-deg"]))
    else:
        rpy = _triple(where, "rpy", origin["rpy"]) if "rpy" in origin else (0.0, 0.0, 0.0)
    ned = pose_matrix(xyz, rpy_matrix(*rpy))
    F4 = np.eye(4)
    F4[:3, :3] = F
    return F4 @ ned @ F4


def _sensor(where: str, entry: dict[str, Any]) -> SensorConfig:
    name = entry.get("id")
    if not isinstance(name, str) or not name.strip():
        raise SettingsError(f"{where} id", "a non-empty string (the sensor's name)", name)
    where = f"{where} ({name})"
    raw_type = entry.get("lidar-type")
    key = raw_type.replace("-", "_") if isinstance(raw_type, str) else raw_type
    known = {k: v for k, v in LIDAR_TYPES.items() if v[1] in SENSORS[v[0]].presets}
    if key not in known:
        raise SettingsError(f"{where} lidar-type", "one of " + ", ".join(known), raw_type)
    stype, preset = known[key]
    fields = FIELDS[stype]
    values: dict[str, Any] = {"preset": preset}
    outputs: dict[str, Any] = {}
    ignored: list[str] = []
    unknown: list[str] = []
    if raw_type != key:  # the file's spelling (seed 003's sample writes generic-cylindrical), written back
        outputs["lidar-type"] = raw_type
    seen: dict[str, str] = {}
    for k, v in entry.items():
        field = ALIASES.get(k, k)
        if field in fields:
            if field in seen:
                raise SettingsError(f"{where} {k}", f"given once ({seen[field]} names the same limit)", v)
            seen[field] = k
            value = _number(where, k, v, integer=field in INTEGER_FIELDS)
            setting = fields[field]
            if setting is None:
                outputs[field] = value
                ignored.append(f"{field}: {IGNORED[(stype, field)]}")
            else:
                values[setting] = float(value) if setting != "channels" else value
        elif k in FLAGS:
            if not isinstance(v, bool):
                raise SettingsError(f"{where} {k}", "true or false", v)
            outputs[k] = v
            ignored.append(f"{k}: {FLAGS[k]}")
        elif k not in OWN:
            unknown.append(k)
    if stype == "rosette" and "report_frequency" not in values:
        values["report_frequency"] = 0.0  # seed 003: "Defaults to zero" (as often as possible)
    parent = entry.get("parent-link")
    if parent is not None and (not isinstance(parent, str) or not parent):
        raise SettingsError(f"{where} parent-link", "the name of a link (a string)", parent)
    config = SensorConfig(name=name, sensor_type=stype, values=values, parent=parent or None,
                          pose=_pose(where, entry.get("origin"), unknown), outputs=outputs, ignored=ignored,
                          unknown=unknown)
    validated(config, where, {s: f for f, s in fields.items() if s} | {"preset": "lidar-type"})
    return config


def read_configs(text: str, path: str) -> list[SensorConfig]:
    """The lidar sensors of a Project AirSim config's text (see the module docstring).

    Raises:
        SettingsError: not JSON (line and column), no ``sensors`` array, no lidar, a
            field of the wrong type or out of range (``PATH sensors[i] (id) FIELD``), an
            ``id`` twice."""
    doc = parse_json(text, path)
    if not isinstance(doc, dict) or not isinstance(doc.get("sensors"), list):
        raise SettingsError(f"{path}", "a JSON object with a \"sensors\" array (Project AirSim config)",
                            type(doc).__name__ if not isinstance(doc, dict) else sorted(doc)[:5])
    notes = [f"top-level {k!r}: not a sensor setting; ignored" for k in doc if k != "sensors"]
    configs: list[SensorConfig] = []
    for i, entry in enumerate(doc["sensors"]):
        where = f"{path} sensors[{i}]"
        if not isinstance(entry, dict):
            raise SettingsError(where, "a sensor object", entry)
        if entry.get("type") != "lidar":
            notes.append(f"sensors[{i}] {entry.get('id')!r} (type {entry.get('type')!r}): not a lidar; "
                         "skipped")
            continue
        config = _sensor(where, entry)
        if any(c.name == config.name for c in configs):
            raise SettingsError(f"{where} id", "an id no other sensor of the file has", config.name)
        configs.append(config)
    if not configs:
        raise SettingsError(f"{path} sensors", "at least one sensor of type lidar", len(doc["sensors"]))
    configs[0].ignored[:0] = notes
    return configs


def _entry(config: SensorConfig) -> dict[str, Any]:
    """The JSON object of one sensor (cylindrical or rosette)."""
    s = settings_of(config)
    stype = config.sensor_type
    preset = setting_value(s, "preset")
    lidar_type = next((k for k, v in LIDAR_TYPES.items() if v == (stype, preset)),
                      "generic_cylindrical" if stype == "cylindrical" else "generic_rosette")
    kept = config.outputs.get("lidar-type")
    if isinstance(kept, str) and kept.replace("-", "_") == lidar_type:
        lidar_type = kept
    out = config.outputs
    e: dict[str, Any] = {"id": config.name, "type": "lidar", "enabled": bool(out.get("enabled", True))}
    if config.parent:
        e["parent-link"] = config.parent
    e["lidar-type"] = lidar_type
    fields = FIELDS[stype]
    for field, setting in fields.items():
        if setting is not None:
            v = getattr(s, setting)
            e[field] = int(round(v)) if field in INTEGER_FIELDS else float(v)
        elif field in out:
            e[field] = out[field]
        elif field == "report-frequency":
            e[field] = 0.0
    e["disable-self-hits"] = bool(out.get("disable-self-hits", False))
    e["draw-debug-points"] = bool(out.get("draw-debug-points", False))
    pose = np.eye(4) if config.pose is None else np.asarray(config.pose, dtype=np.float64)
    ned = np.eye(4)
    ned[:3, :3] = F @ pose[:3, :3] @ F
    ned[:3, 3] = F @ pose[:3, 3]
    rpy = [math.degrees(a) for a in matrix_rpy(ned[:3, :3])]
    e["origin"] = {"xyz": " ".join(num(v) for v in ned[:3, 3]), "rpy-deg": " ".join(num(v) for v in rpy)}
    return e


class AirSimFormat(ConfigFormat):
    """Project AirSim JSON (seed 003): the module docstring."""

    name = "airsim"
    label = "Project AirSim"
    suffixes = (".json", ".jsonc")
    description = ("Project AirSim JSON sensors array (lidar types generic_cylindrical, generic_rosette, "
                   "livox_*)")

    def read(self, path: StrPath) -> list[SensorConfig]:
        """The lidar sensors of the file at ``path`` (:func:`read_configs`).

        Raises:
            SettingsError: unreadable, not JSON, or a bad field (one line)."""
        return read_configs(read_text(path, str(path)), str(path))

    def dumps(self, configs: list[SensorConfig]) -> tuple[str, list[str]]:
        """(the file's text, one line per thing it cannot express).

        Raises:
            SettingsError (``NAME sensor_type``): a sensor type other than cylindrical and
            rosette (Project AirSim's lidar types)."""
        for c in configs:
            if c.sensor_type not in FIELDS:
                raise SettingsError(f"{c.name} sensor_type", "cylindrical or rosette (the sensor types of "
                                    "Project AirSim's lidar-type)", c.sensor_type)
        text = json.dumps({"sensors": [_entry(c) for c in configs]}, indent=2) + "\n"
        back = read_configs(text, "(written)")
        for c in back:
            c.ignored.clear()
        return text, unexpressed("AirSim", configs, back)


FORMAT = AirSimFormat()
