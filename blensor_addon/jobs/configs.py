"""Sensor config files applied to a scene and read from it: the bpy side of
:mod:`blensor_addon.io.configs` (docs/formats.md, "Sensor config files").

A :class:`~blensor_addon.io.configs.SensorConfig` becomes a camera object named
``config.name`` (made and linked to the scene's collection if missing): its
``sensor_type``, and every setting of that type stored on ``camera.data.blensor`` as the
panel stores them (the rotating LiDAR's on the group itself, every other type's in its
nested group; ``floats`` settings as typed text, written in full precision). The
settings are the type's defaults, then the preset the config names, then its values; the
settings every sensor shares (seed, time model, packets...) keep the camera's values
unless the config gives them. Every config is validated before any camera is touched: a
bad value changes nothing.

Poses: ``config.pose`` is the sensor's REP-103 frame (x ahead, y left, z up) relative to
its ``parent`` object, whose own frame is taken as REP-103-like (x ahead, z up: a vehicle
modelled facing +X, Blender's convention for rigs). The camera's own frame is BlenSor's
sensor frame (camera-local +X right, +Y up, looking down -Z; ``core/axes.py``), so the
camera's matrix relative to the parent is ``pose @ ROS_FROM_BLENSOR`` (as a 4 x 4), with
``matrix_parent_inverse`` the identity (a parent's scale scales the offset, as Blender's
parenting does). A parent the scene does not have: the camera is placed in the world
with the same matrix, and a note says so. ``pose`` None keeps an existing camera's
transform and parent (a new camera: the identity pose).

What the file says that is not a setting (``outputs``: Unity's topic, AirSim's enabled...),
the parent it asked for and the imported values in full precision are kept on the camera
object as the ID property ``blensor_config`` (JSON), so :func:`configs_of` gives them
back: a float setting whose float32 value (what the Blender property holds) is still the
imported one's is returned as imported, the pose likewise while the camera has not moved.
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from ..core.axes import ROS_FROM_BLENSOR, ros_pose
from ..core.errors import SettingsError
from ..core.ndtypes import F64
from ..core.sensors import COMMON, get_sensor, make_settings
from ..core.sensors.sensor import Sensor
from ..core.settings import SensorSettings

if TYPE_CHECKING:
    import bpy
    import mathutils

    from ..io.configs import SensorConfig

#: the camera object's ID property holding what :func:`apply_configs` imported
RECORD = "blensor_config"

#: one config checked by :func:`_plan`: (config, the camera of that name or None, its
#: sensor type, its settings, its pose or None, its parent object or None)
_Planned = tuple["SensorConfig", "bpy.types.Object | None", "Sensor[Any]", SensorSettings, "F64 | None",
                 "bpy.types.Object | None"]


def _blk(R: ArrayLike) -> F64:
    T = np.eye(4)
    T[:3, :3] = R
    return T


def _check_pose(name: str, pose: ArrayLike | None) -> F64 | None:
    if pose is None:
        return None
    P = np.asarray(pose, dtype=np.float64)
    if P.shape != (4, 4) or not np.isfinite(P).all():
        raise SettingsError(f"{name} pose", "a finite 4 x 4 matrix", P.shape)
    R = P[:3, :3]
    if not np.allclose(R.T @ R, np.eye(3), atol=1e-6) or np.linalg.det(R) < 0 or \
            not np.allclose(P[3], (0, 0, 0, 1)):
        raise SettingsError(f"{name} pose", "a rigid transform (a rotation and a translation)",
                            "another matrix")
    return P


def _stored_common(obj: bpy.types.Object | None) -> dict[str, Any]:
    """The common settings (``core.sensors.COMMON``) stored on camera ``obj``; empty for
    None (a camera still to be made) or where the add-on's properties are not registered."""
    from ..scene.scanner import sensor_props
    props = sensor_props(obj) if obj is not None else None
    if props is None:
        return {}
    return {k: _float32_text(v) if isinstance(v, float) else v for k in COMMON for v in (getattr(props, k),)}


def _plan(configs: Iterable[SensorConfig], scene: bpy.types.Scene) -> list[_Planned]:
    import bpy
    plans: list[_Planned] = []
    names: set[str] = set()
    for c in configs:
        if not isinstance(c.name, str) or not c.name.strip() or len(c.name) > 63:
            raise SettingsError("name", "a camera name of 1 to 63 characters", c.name)
        if c.name in names:
            raise SettingsError(f"{c.name} name", "a sensor name given once", c.name)
        names.add(c.name)
        obj = bpy.data.objects.get(c.name)
        if obj is not None and (obj.type != "CAMERA" or obj.library is not None):
            what = "linked from a library" if obj.library is not None else f"of type {obj.type}"
            raise SettingsError(f"{c.name}", f"the name of a camera of this file or of no object (an object "
                                f"{what} has it)", c.name)
        sensor = get_sensor(c.sensor_type)
        try:
            _, settings = make_settings(c.sensor_type, _stored_common(obj), c.values)
        except SettingsError as exc:
            raise SettingsError(f"{c.name} {exc.setting}", exc.allowed, exc.value) from None
        pose = _check_pose(c.name, c.pose)
        parent = scene.objects.get(c.parent) if c.parent else None
        if parent is not None and parent is obj:
            raise SettingsError(f"{c.name} parent", "another object than the sensor itself", c.parent)
        plans.append((c, obj, sensor, settings, pose, parent))
    return plans


def _store_settings(props: bpy.types.PropertyGroup, sensor: Sensor[Any], settings: SensorSettings) -> None:
    """Every setting of ``settings`` on the camera's property groups (preset first: its
    update callback sets the preset's values, which the others then overwrite)."""
    from ..scene.scanner import settings_group
    props.sensor_type = sensor.name
    group = settings_group(props, sensor)
    fields = sorted(dataclasses.fields(settings), key=lambda f: f.name != "preset")
    for f in fields:
        meta = f.metadata["blensor"]
        value = getattr(settings, f.name)
        if meta.kind == "floats":
            value = ",".join(repr(float(v)) for v in value)
        setattr(props if f.name in COMMON else group, f.name, value)


def _matrix(M: F64) -> mathutils.Matrix:
    from mathutils import Matrix
    return Matrix([list(map(float, row)) for row in M])


def apply_configs(configs: Iterable[SensorConfig],
                  scene: bpy.types.Scene) -> tuple[list[bpy.types.Object], list[str]]:
    """Create or update one camera per :class:`~blensor_addon.io.configs.SensorConfig`
    in ``scene``: the camera named ``config.name`` (created, linked to the scene's
    collection, if missing), its sensor type and settings (validated first: a bad value
    changes nothing), its pose (``config.pose`` relative to the ``parent`` object if the
    scene has it, else the world; REP-103 axes turned into the camera's), its outputs
    kept on the camera (module docstring).

    Returns:
        (cameras, notes): the camera objects in the file's order; one line per note
        (``"lidar1: created"``, ``"lidar1: parent 'X' not in the scene; placed in
        the world"``, every ``ignored`` and ``unknown`` field once).
    Raises:
        SettingsError: a value out of range, a name taken by another kind of object
            (nothing changed)."""
    import bpy
    plans = _plan(configs, scene)
    cameras: list[bpy.types.Object] = []
    notes: list[str] = []
    for c, obj, sensor, settings, pose, parent in plans:
        created = obj is None
        if obj is None:
            obj = bpy.data.objects.new(c.name, bpy.data.cameras.new(c.name))
        if scene.objects.get(obj.name) is None:
            scene.collection.objects.link(obj)
        _store_settings(obj.data.blensor, sensor, settings)
        notes.append(f"{c.name}: {'created' if created else 'updated'} ({sensor.name}"
                     f"{', preset ' + settings.preset if hasattr(settings, 'preset') else ''})")
        if pose is None and created:
            pose = np.eye(4)
        if pose is not None:
            if c.parent and parent is None:
                notes.append(f"{c.name}: parent {c.parent!r} not in the scene; placed in the world")
            obj.parent = parent
            obj.matrix_parent_inverse = _matrix(np.eye(4))
            obj.matrix_basis = _matrix(pose @ _blk(ROS_FROM_BLENSOR))
        notes.extend(f"{c.name}: {line}" for line in c.ignored)
        notes.extend(f"{c.name}: {key}: not a field of the format; ignored" for key in c.unknown)
        old = _record(obj)
        record = {"outputs": c.outputs, "parent": c.parent if pose is not None else old.get("parent"),
                  "pose": old.get("pose") if pose is None else [float(v) for v in np.asarray(pose).ravel()],
                  "values": settings.to_dict()}
        obj[RECORD] = json.dumps(record)
        cameras.append(obj)
    for layer in scene.view_layers:  # world matrices of the moved cameras
        layer.update()
    return cameras, notes


def _record(obj: bpy.types.Object) -> dict[str, Any]:
    try:
        rec = json.loads(obj.get(RECORD, "{}"))
    except (TypeError, ValueError, RecursionError):  # (a .blend's record nested thousands deep)
        return {}
    return rec if isinstance(rec, dict) else {}


def _float32_text(v: float) -> float:
    """The shortest decimal that is the same float32 as ``v`` (a Blender float
    property's value: 0.05 rather than 0.05000000074505806)."""
    return float(np.format_float_positional(np.float32(v), unique=True, trim="-"))


def configs_of(cameras: Iterable[bpy.types.Object]) -> list[SensorConfig]:
    """The :class:`~blensor_addon.io.configs.SensorConfig` of each camera object (its
    sensor type, settings, pose relative to its parent in REP-103 axes, kept outputs).

    Raises:
        SettingsError: a camera's stored settings are invalid."""
    from ..io.configs import SensorConfig
    from ..scene.scanner import read_sensor
    out = []
    for obj in cameras:
        sensor, settings = read_sensor(obj)
        rec = _record(obj)
        kept_values = rec.get("values")
        kept: dict[str, Any] = kept_values if isinstance(kept_values, dict) else {}
        values: dict[str, Any] = {}
        for f in dataclasses.fields(settings):
            v = getattr(settings, f.name)
            if f.metadata["blensor"].kind == "float":
                k: Any = kept.get(f.name)  # (JSON of the record: any value, checked here)
                same = isinstance(k, (int, float)) and not isinstance(k, bool) and math.isfinite(k) \
                    and np.float32(k) == np.float32(v)
                v = float(k) if same else _float32_text(v)
            values[f.name] = v
        local = np.array(obj.matrix_parent_inverse, dtype=np.float64) @ np.array(obj.matrix_basis,
                                                                                 dtype=np.float64)
        pose = ros_pose(local)  # (matrix_local before the depsgraph has evaluated it)
        pose[:3, :3][np.abs(pose[:3, :3]) < 1e-6] = 0.0  # float32 sines of right angles
        pose[:3, 3] = [_float32_text(v) for v in pose[:3, 3]]
        kept_pose = rec.get("pose")
        if kept_pose is not None:
            try:
                P = np.asarray(kept_pose, dtype=np.float64).reshape(4, 4)
                if np.allclose(P, pose, rtol=0.0, atol=1e-5):
                    pose = P
            except (TypeError, ValueError):
                pass
        parent = obj.parent.name if obj.parent is not None else rec.get("parent") or None
        kept_outputs = rec.get("outputs")
        outputs: dict[str, Any] = kept_outputs if isinstance(kept_outputs, dict) else {}
        out.append(SensorConfig(name=obj.name, sensor_type=sensor.name, values=values, parent=parent,
                                pose=pose, outputs=dict(outputs)))
    return out


__all__ = ["apply_configs", "configs_of", "RECORD"]
