"""Sensor settings on camera data and BlenSor settings on materials (saved in the .blend).

``bpy.types.Camera.blensor`` holds the rotating-LiDAR settings (names and defaults of
:class:`blensor_addon.core.settings.LidarSettings`) and the output options;
``bpy.types.Material.blensor`` holds reflectivity and the mirror flag. Hard limits are
left loose on purpose: values out of range are reported by the scan with the setting's
name and allowed range instead of being clamped silently.
"""
from __future__ import annotations

import bpy
from bpy.props import (BoolProperty, EnumProperty, FloatProperty, IntProperty, PointerProperty,
                       StringProperty)

from ..core.presets import PRESETS
from ..core.settings import LidarSettings

_D = LidarSettings()


def _apply_preset(self, _context) -> None:
    for key, value in PRESETS[self.preset]["defaults"].items():
        setattr(self, key, value)


class BLENSOR_PG_sensor(bpy.types.PropertyGroup):
    """Rotating LiDAR settings of a camera (reference section 6.1)."""

    preset: EnumProperty(
        name="Sensor", description="Sensor model; choosing one sets its resolution, speed and range",
        items=[(k, v["label"], v["label"]) for k, v in PRESETS.items()], default="hdl64e_s2",
        update=_apply_preset)
    elevations: StringProperty(
        name="Elevations", description="Generic sensor: comma-separated laser elevations (deg)",
        default="0.0")
    angle_resolution: FloatProperty(
        name="Angle resolution", description="Azimuth step between columns (deg)",
        default=_D.angle_resolution, soft_min=0.01, soft_max=10.0, precision=4)
    rotation_speed: FloatProperty(name="Rotation speed", description="Spin rate (Hz)",
                                  default=_D.rotation_speed, soft_min=1.0, soft_max=100.0)
    max_range: FloatProperty(name="Max range", description="Farthest return (m)",
                             default=_D.max_range, soft_min=0.1, soft_max=1000.0, unit="LENGTH")
    start_angle: FloatProperty(name="Start angle", description="Sector start (deg)",
                               default=_D.start_angle, soft_min=-360.0, soft_max=360.0)
    end_angle: FloatProperty(name="End angle", description="Sector end (deg)",
                             default=_D.end_angle, soft_min=-360.0, soft_max=720.0)
    noise_mu: FloatProperty(name="Noise mean", description="Per-ray range noise mean (m)",
                            default=_D.noise_mu, precision=4)
    noise_sigma: FloatProperty(name="Noise sigma", description="Per-ray range noise sigma (m)",
                               default=_D.noise_sigma, soft_min=0.0, precision=4)
    bias_distribution: EnumProperty(
        name="Laser bias", description="Per-laser distance bias (drawn from the seed)",
        items=[("table", "Calibrated table", "The preset's table; Gaussian where it has none"),
               ("gaussian", "Gaussian", "N(0, sigma) per laser"),
               ("laplace", "Laplace", "Laplace(0, sigma) per laser")], default="table")
    bias_sigma: FloatProperty(name="Bias sigma", description="Per-laser bias spread (m)",
                              default=_D.bias_sigma, soft_min=0.0, precision=4)
    ref_dist: FloatProperty(name="Reflectivity distance",
                            description="Below this range every reflectivity returns (m)",
                            default=_D.ref_dist, soft_min=0.0)
    ref_limit: FloatProperty(name="Reflectivity limit",
                             description="Minimum reflectivity at the reflectivity distance",
                             default=_D.ref_limit, precision=3)
    ref_slope: FloatProperty(name="Reflectivity slope",
                             description="Growth of the minimum reflectivity per metre (1/m)",
                             default=_D.ref_slope, precision=4)
    seed: IntProperty(name="Seed", description="Seed of every random draw", default=0, min=0)
    visibility: EnumProperty(
        name="Scan", description="Which evaluation of the scene is scanned",
        items=[("render", "What renders", "Render visibility, modifiers and subdivision levels"),
               ("viewport", "What the viewport shows", "Viewport visibility, modifiers and levels")],
        default="render")
    max_bounces: IntProperty(name="Max bounces", description="Mirror reflections followed per ray",
                             default=_D.max_bounces, soft_min=0, soft_max=64)
    # output options
    add_scan_mesh: BoolProperty(name="Add scan mesh", default=True)
    add_noisy_scan_mesh: BoolProperty(name="Add noisy mesh", default=False)
    frame_of_reference: EnumProperty(
        name="Coordinates", items=[("sensor", "Sensor", "Sensor frame (camera-local)"),
                                   ("world", "World", "Blender world frame")], default="sensor")
    output_dir: StringProperty(name="Output folder", subtype="DIR_PATH", default="//blensor_out/")
    write_npz: BoolProperty(name="NPZ", default=True)
    write_evd: BoolProperty(name="EVD", default=False)
    write_pcd: BoolProperty(name="PCD", default=False)
    pcd_ascii: BoolProperty(name="ASCII PCD", default=False)
    overwrite: BoolProperty(name="Overwrite", default=False,
                            description="Replace the files of an earlier scan in the output folder")


class BLENSOR_PG_material(bpy.types.PropertyGroup):
    """LiDAR properties of a material (seed 000 sections 3.2, 3.5; seed 002 section on
    material reflectance)."""

    reflectivity: FloatProperty(name="Reflectivity",
                                description="Diffuse reflectivity at the laser wavelength",
                                default=0.8, min=0.0, max=1.0)
    mirror: BoolProperty(name="Mirror", description="Total reflection: rays reflect and go on",
                         default=False)


CLASSES = (BLENSOR_PG_sensor, BLENSOR_PG_material)


def register_properties() -> None:
    """Attach ``Camera.blensor`` and ``Material.blensor``."""
    bpy.types.Camera.blensor = PointerProperty(type=BLENSOR_PG_sensor)
    bpy.types.Material.blensor = PointerProperty(type=BLENSOR_PG_material)


def unregister_properties() -> None:
    """Remove ``Camera.blensor`` and ``Material.blensor``."""
    del bpy.types.Material.blensor
    del bpy.types.Camera.blensor
