"""Sensor settings on camera data and BlenSor settings on materials (saved in the .blend),
generated from the sensor registry's metadata (:mod:`blensor_addon.core.sensors`).

``bpy.types.Camera.blensor`` holds ``sensor_type``, the settings common to every sensor
(seed, max bounces, visibility), the output options and, per sensor type, that type's
settings: the rotating LiDAR's on the group itself (where v0.1 stored them, so v0.1
files load unchanged), every other type's in a nested group named after it
(``blensor.tof.max_range``). ``bpy.types.Material.blensor`` holds reflectivity and the
mirror flag. Hard limits are left loose on purpose: values out of range are reported by
the scan with the setting's name and allowed range instead of being clamped silently.
"""
from __future__ import annotations

import dataclasses

import bpy
from bpy.props import (BoolProperty, EnumProperty, FloatProperty, IntProperty, PointerProperty,
                       StringProperty)

from ..core.sensors import COMMON, SENSORS, SensorSettings


def _description(meta) -> str:
    return meta.description + (f" ({meta.unit})" if meta.unit else "")


def _prop(name: str, default, meta):
    """The bpy property of one setting."""
    kw = {"name": meta.label, "description": _description(meta)}
    if meta.kind == "bool":
        return BoolProperty(default=default, **kw)
    if meta.kind == "int":
        lo = int(meta.lo) if meta.lo is not None and meta.lo >= -2**31 else None
        extra = {"min": lo} if name == "seed" and lo is not None else {}
        return IntProperty(default=default, **extra, **kw)
    if meta.kind == "float":
        extra = {}
        if meta.lo is not None:
            extra["soft_min"] = float(meta.lo)
        if meta.hi is not None:
            extra["soft_max"] = float(meta.hi)
        return FloatProperty(default=default, precision=meta.precision, **extra, **kw)
    if meta.kind == "enum":
        items = [(c, c.replace("_", " "), c) for c in meta.choices]
        return EnumProperty(items=items, default=default, **kw)
    if meta.kind == "floats":
        return StringProperty(default=meta.format(default), **kw)
    return StringProperty(default=default, **kw)


def _apply_preset(self, _context) -> None:
    """Update callback of every ``preset`` property: set the preset's values. One
    module-level function for every sensor type (bpy 4.2 crashes at exit when an update
    callback was a closure that is gone by then)."""
    from ..core.sensors import SENSORS
    sensor = next(s for s in SENSORS.values() if type(self).__name__ == _group_name(s))
    metas = {f.name: f.metadata["blensor"] for f in dataclasses.fields(sensor.Settings)}
    for key, value in sensor.presets[self.preset].values.items():
        setattr(self, key, metas[key].format(value) if metas[key].kind == "floats" else value)


def _group_name(sensor) -> str:
    """Class name of the property group holding ``sensor``'s own settings."""
    return f"BLENSOR_PG_{sensor.name}" if sensor.storage else "BLENSOR_PG_sensor"


def setting_property(sensor_type: str, name: str):
    """The bpy property of setting ``name`` of ``sensor_type`` (``preset`` gets the
    presets' labels and the callback that applies a chosen preset's values)."""
    from ..core.sensors import SENSORS
    sensor = SENSORS[sensor_type]
    f = next(f for f in dataclasses.fields(sensor.Settings) if f.name == name)
    meta = f.metadata["blensor"]
    if name == "preset":
        return EnumProperty(name=meta.label, description=_description(meta), default=f.default,
                            update=_apply_preset,
                            items=[(k, p.label, p.source or p.label) for k, p in sensor.presets.items()])
    return _prop(name, f.default, meta)


def _annotations(sensor, names) -> dict:
    """Annotations of the given settings, as strings that bpy evaluates in this module
    when the class is registered. (Property objects made at import and kept by a class
    make bpy 4.2 crash at exit once an update callback is involved; string annotations,
    as ``from __future__ import annotations`` gives class bodies, do not.)"""
    return {name: f"setting_property({sensor.name!r}, {name!r})" for name in
            (f.name for f in dataclasses.fields(sensor.Settings)) if name in names}


def _own_fields(sensor) -> list[str]:
    return [f.name for f in dataclasses.fields(sensor.Settings) if f.name not in COMMON]


def _make_groups():
    """One PropertyGroup class per sensor type with a nested group, and the camera's group."""
    nested = {}
    for name, sensor in SENSORS.items():
        if sensor.storage:
            cls = type(_group_name(sensor), (bpy.types.PropertyGroup,),
                       {"__annotations__": _annotations(sensor, _own_fields(sensor)), "__module__": __name__,
                        "__doc__": f"{sensor.label} settings of a camera"})
            nested[name] = cls
    ann = {"sensor_type": "sensor_type_property()"}
    for f in dataclasses.fields(SensorSettings):
        ann[f.name] = f"common_property({f.name!r})"
    for name, sensor in SENSORS.items():
        if not sensor.storage:
            ann.update(_annotations(sensor, _own_fields(sensor)))
    for name in nested:
        ann[name] = f"PointerProperty(type=NESTED_BY_TYPE[{name!r}])"
    ann.update({k: f"OUTPUT_OPTIONS[{k!r}]()" for k in OUTPUT_OPTIONS})
    for prop in format_options():  # every writer's options, from the registry
        ann[prop] = f"format_option_property({prop!r})"
    camera = type("BLENSOR_PG_sensor", (bpy.types.PropertyGroup,),
                  {"__annotations__": ann, "__module__": __name__,
                   "__doc__": "BlenSor sensor settings of a camera"})
    return nested, camera


def format_options() -> dict:
    """Every option of every writer of the registry as a camera property:
    ``"<format>_<option>"`` -> (format, option, dataclass field). ``pcd_ascii`` is one of
    them (the name earlier versions stored)."""
    from ..io.formats import WRITERS
    out = {}
    for name, w in WRITERS.items():
        for f in dataclasses.fields(w.Options):
            out[f"{name}_{f.name}"] = (name, f.name, f)
    return out


def format_option_property(prop: str):
    """The bpy property of the writer option ``prop`` (see :func:`format_options`)."""
    f = format_options()[prop][2]
    return _prop(prop, f.default, f.metadata["blensor"])


def format_option_values(s, formats) -> dict:
    """``{"<format>.<option>": value}`` of the camera settings ``s`` for the ticked
    ``formats`` (what :func:`blensor_addon.io.formats.make_options` takes)."""
    return {f"{fmt}.{opt}": getattr(s, prop) for prop, (fmt, opt, _) in format_options().items()
            if fmt in formats}


def formats_property():
    """The range scan's file formats (every writer of the registry), ticked like flags."""
    from ..io.formats import WRITERS
    return EnumProperty(name="Formats", description="File formats of range scans", options={"ENUM_FLAG"},
                        items=[(k, k.upper(), w.description) for k, w in WRITERS.items()], default={"npz"})


def sensor_type_property():
    """The ``sensor_type`` enum (every registered sensor type)."""
    return EnumProperty(name="Sensor type", description="Which sensor this camera simulates",
                        items=[(k, s.label, s.description) for k, s in SENSORS.items()], default="rotating")


def common_property(name: str):
    """The bpy property of a setting common to every sensor (seed, max bounces, visibility)."""
    f = next(f for f in dataclasses.fields(SensorSettings) if f.name == name)
    return _prop(name, f.default, f.metadata["blensor"])


#: output options of a camera (not sensor physics): name -> property factory
OUTPUT_OPTIONS = {
    "add_scan_mesh": lambda: BoolProperty(name="Add scan mesh", default=True),
    "add_noisy_scan_mesh": lambda: BoolProperty(name="Add noisy mesh", default=False),
    "frame_of_reference": lambda: EnumProperty(
        name="Coordinates", items=[("sensor", "Sensor", "Sensor frame (camera-local)"),
                                   ("world", "World", "Blender world frame")], default="sensor"),
    "axes": lambda: EnumProperty(
        name="Axes", items=[("blensor", "BlenSor", "Sensor frame: x right, y up, -z ahead (the original's)"),
                            ("ros", "ROS REP-103", "Sensor frame: x ahead, y left, z up")], default="blensor"),
    "output_dir": lambda: StringProperty(name="Output folder", subtype="DIR_PATH", default="//blensor_out/"),
    "formats": lambda: formats_property(),
    "overwrite": lambda: BoolProperty(name="Overwrite", default=False,
                                      description="Replace the files of an earlier scan in the output folder"),
    "motion_formats": lambda: StringProperty(name="Motion formats", default="blensor,tum,json",
                                             description="Motion export: comma-separated blensor, tum, kitti, json"),
    "depth_formats": lambda: StringProperty(name="Depth formats", default="exr",
                                            description="Depth-map export: comma-separated exr, npy, pfm, dmap"),
}


class BLENSOR_PG_material(bpy.types.PropertyGroup):
    """LiDAR properties of a material (seed 000 sections 3.2, 3.5; seed 002 section on
    material reflectance)."""

    reflectivity: FloatProperty(name="Reflectivity",
                                description="Diffuse reflectivity at the laser wavelength",
                                default=0.8, min=0.0, max=1.0)
    mirror: BoolProperty(name="Mirror", description="Total reflection: rays reflect and go on",
                         default=False)


NESTED_BY_TYPE, BLENSOR_PG_sensor = _make_groups()
CLASSES = (*NESTED_BY_TYPE.values(), BLENSOR_PG_sensor, BLENSOR_PG_material)


def register_properties() -> None:
    """Attach ``Camera.blensor`` and ``Material.blensor``."""
    bpy.types.Camera.blensor = PointerProperty(type=BLENSOR_PG_sensor)
    bpy.types.Material.blensor = PointerProperty(type=BLENSOR_PG_material)


def unregister_properties() -> None:
    """Remove ``Camera.blensor`` and ``Material.blensor``."""
    del bpy.types.Material.blensor
    del bpy.types.Camera.blensor
