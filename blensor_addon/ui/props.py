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


def _prop(name: str, default, meta, update=None):
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
        return EnumProperty(items=items, default=default, update=update, **kw)
    if meta.kind == "floats":
        return StringProperty(default=meta.format(default), **kw)
    return StringProperty(default=default, **kw)


def _preset_updater(sensor):
    def update(self, _context) -> None:
        for key, value in sensor.presets[self.preset].values.items():
            meta = dataclasses.fields(sensor.Settings)
            kind = next(f.metadata["blensor"] for f in meta if f.name == key)
            setattr(self, key, kind.format(value) if kind.kind == "floats" else value)
    return update


def _annotations(sensor, names) -> dict:
    out = {}
    for f in dataclasses.fields(sensor.Settings):
        if f.name not in names:
            continue
        meta = f.metadata["blensor"]
        update = _preset_updater(sensor) if f.name == "preset" else None
        prop = _prop(f.name, f.default, meta, update)
        if f.name == "preset":  # label the presets with their names
            prop = EnumProperty(name=meta.label, description=_description(meta), default=f.default, update=update,
                                items=[(k, p.label, p.source or p.label) for k, p in sensor.presets.items()])
        out[f.name] = prop
    return out


def _own_fields(sensor) -> list[str]:
    return [f.name for f in dataclasses.fields(sensor.Settings) if f.name not in COMMON]


def _make_groups():
    """One PropertyGroup class per sensor type with a nested group, and the camera's group."""
    nested = {}
    for name, sensor in SENSORS.items():
        if sensor.storage:
            cls = type(f"BLENSOR_PG_{name}", (bpy.types.PropertyGroup,),
                       {"__annotations__": _annotations(sensor, _own_fields(sensor)),
                        "__doc__": f"{sensor.label} settings of a camera"})
            nested[name] = cls
    ann = {"sensor_type": EnumProperty(
        name="Sensor type", description="Which sensor this camera simulates",
        items=[(k, s.label, s.description) for k, s in SENSORS.items()], default="rotating")}
    common = SensorSettings()
    for f in dataclasses.fields(SensorSettings):
        ann[f.name] = _prop(f.name, getattr(common, f.name), f.metadata["blensor"])
    for name, sensor in SENSORS.items():
        if not sensor.storage:
            ann.update(_annotations(sensor, _own_fields(sensor)))
    for name, cls in nested.items():
        ann[name] = PointerProperty(type=cls)
    ann.update({
        "add_scan_mesh": BoolProperty(name="Add scan mesh", default=True),
        "add_noisy_scan_mesh": BoolProperty(name="Add noisy mesh", default=False),
        "frame_of_reference": EnumProperty(
            name="Coordinates", items=[("sensor", "Sensor", "Sensor frame (camera-local)"),
                                       ("world", "World", "Blender world frame")], default="sensor"),
        "output_dir": StringProperty(name="Output folder", subtype="DIR_PATH", default="//blensor_out/"),
        "write_npz": BoolProperty(name="NPZ", default=True),
        "write_evd": BoolProperty(name="EVD", default=False),
        "write_pcd": BoolProperty(name="PCD", default=False),
        "pcd_ascii": BoolProperty(name="ASCII PCD", default=False),
        "overwrite": BoolProperty(name="Overwrite", default=False,
                                  description="Replace the files of an earlier scan in the output folder"),
        "depth_formats": StringProperty(name="Depth formats", default="exr",
                                        description="Depth-map export: comma-separated exr, npy, pfm, dmap"),
    })
    camera = type("BLENSOR_PG_sensor", (bpy.types.PropertyGroup,),
                  {"__annotations__": ann, "__doc__": "BlenSor sensor settings of a camera"})
    return tuple(nested.values()), camera


class BLENSOR_PG_material(bpy.types.PropertyGroup):
    """LiDAR properties of a material (seed 000 sections 3.2, 3.5; seed 002 section on
    material reflectance)."""

    reflectivity: FloatProperty(name="Reflectivity",
                                description="Diffuse reflectivity at the laser wavelength",
                                default=0.8, min=0.0, max=1.0)
    mirror: BoolProperty(name="Mirror", description="Total reflection: rays reflect and go on",
                         default=False)


NESTED, BLENSOR_PG_sensor = _make_groups()
CLASSES = (*NESTED, BLENSOR_PG_sensor, BLENSOR_PG_material)


def register_properties() -> None:
    """Attach ``Camera.blensor`` and ``Material.blensor``."""
    bpy.types.Camera.blensor = PointerProperty(type=BLENSOR_PG_sensor)
    bpy.types.Material.blensor = PointerProperty(type=BLENSOR_PG_material)


def unregister_properties() -> None:
    """Remove ``Camera.blensor`` and ``Material.blensor``."""
    del bpy.types.Material.blensor
    del bpy.types.Camera.blensor
